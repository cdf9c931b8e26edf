/*
 * prefill_attention: paged attention for the rows of long prefill chunks,
 * on tensor cores (mma.sync m16n8k16, operands of the activation dtype T,
 * bf16 or fp16, fp32 accumulators), head sizes 64 and 128.
 *
 * Layouts as in paged_attention.cu.  Work split: a tile is 64 consecutive
 * query rows of one sequence; one thread block per (tile, query head),
 * four warps of 16 rows each.  The block walks the sequence's context in
 * KV tiles of 64 tokens, up to the last position its rows may see,
 * gathering each tile's K and V rows through the block table into shared
 * memory with 16-byte cp.async, the next tile in flight while one is
 * computed (double buffering, one barrier per tile).
 * Per KV tile a warp computes S = Q K^T (Q fragments held in registers for
 * the whole walk), masks causally (only tiles that reach past the block's
 * first row need it), updates an online softmax in base 2,
 * and accumulates O += P V with P taken straight from the S accumulators.
 * Shared-memory rows are XOR-swizzled in 16-byte chunks so ldmatrix reads
 * are free of bank conflicts.
 *
 * Which sequences: those with at least ATTN_PREFILL_MIN_QLEN query rows.
 * A small scan kernel numbers their tiles (tile_start); blocks are handed
 * out from the last tile down, so the longest causal tiles start first.
 *
 * On Hopper (compute capability 9.0) head size 128 goes to the wgmma
 * kernel of prefill_attention_sm90.cu instead (tiles of 128 rows); this
 * kernel serves every other case.  Two knobs (pl_cuda_knobs) let one
 * Hopper machine test what other GPUs and shapes run by default:
 * PAGEDLLM_CUDA_PREFILL=mma takes this kernel for head size 128 too, and
 * PAGEDLLM_CUDA_PREFILL_LOADS=cpasync has the Hopper kernel gather with
 * 16-byte cp.async instead of TMA copies, as it does for block sizes
 * under 8.  The kernel's name says what ran.
 */

#include <float.h>
#include <stdio.h>

#include "attention.cuh"
#include "mma.cuh"

#define PF_BM             64          /* query rows per block */
#define PF_BN             64          /* KV tokens per tile */
#define PF_THREADS        128
#define PF_BM_SM90        128         /* query rows per Hopper block */

/* prefill_attention_sm90.cu; p.tile_start numbers tiles of PF_BM_SM90 */
bool pl_cuda_prefill_sm90(pl_cuda_t *cu, const attn_params_t &p, int rows,
    bool tma);

/* which kernel the last prefill launch ran, for tests and benchmarks */
static const char  *prefill_kernel_name;
static char         prefill_kernel_buf[96];


/* Gather KV tile j (tokens j*BN ..) of K and V into shared memory. */
template <int D>
static __device__ __forceinline__ void
load_kv_tile(const attn_params_t &p, const int32_t *table, int kvh, int ctx,
    int j, uint32_t ks, uint32_t vs)
{
    constexpr int  CH = D / 8;
    int64_t        kv_row = (int64_t) (p.n_heads / p.group) * D;

    /* 16-bit elements of either type, moved as bits */
    for (int i = threadIdx.x; i < PF_BN * CH; i += PF_THREADS) {
        int      r = i / CH, c = i % CH, t = j * PF_BN + r;
        bool     valid = t < ctx;
        int64_t  off = 0;

        if (valid) {
            int64_t  slot = ((int64_t) table[t >> p.log2_block]
                             << p.log2_block)
                            | (t & ((1 << p.log2_block) - 1));

            off = slot * kv_row + (int64_t) kvh * D + c * 8;
        }
        cp_async16(ks + swz<D>(r, c), (const uint16_t *) p.k_cache + off,
                   valid);
        cp_async16(vs + swz<D>(r, c), (const uint16_t *) p.v_cache + off,
                   valid);
    }
}


/* S[16][BN] = Q . K^T for this warp's rows */
template <typename T, int D>
static __device__ __forceinline__ void
qk_tile(float (&s)[PF_BN / 8][4], const uint32_t (&qf)[D / 16][4],
    uint32_t ks, int lane)
{
#pragma unroll
    for (int n = 0; n < PF_BN / 8; n++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            s[n][e] = 0.0f;
        }
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
#pragma unroll
        for (int n = 0; n < PF_BN / 8; n += 2) {
            uint32_t  b[4];
            int       mi = lane >> 3;
            int       tok = n * 8 + (mi >> 1) * 8 + (lane & 7);

            ldsm_x4(b, ks + swz<D>(tok, kk * 2 + (mi & 1)));
            mma_f32acc<T>(s[n], qf[kk], b[0], b[1]);
            mma_f32acc<T>(s[n + 1], qf[kk], b[2], b[3]);
        }
    }
}


/* O[16][D] += P . V for this warp's rows, P from the S accumulators */
template <typename T, int D>
static __device__ __forceinline__ void
pv_tile(float (&o)[D / 8][4], const float (&s)[PF_BN / 8][4], uint32_t vs,
    int lane)
{
#pragma unroll
    for (int kk = 0; kk < PF_BN / 16; kk++) {
        uint32_t  a[4];

        a[0] = pl_pack2<T>(s[2 * kk][0], s[2 * kk][1]);
        a[1] = pl_pack2<T>(s[2 * kk][2], s[2 * kk][3]);
        a[2] = pl_pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        a[3] = pl_pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
        for (int n = 0; n < D / 8; n += 2) {
            uint32_t  b[4];
            int       mi = lane >> 3;
            int       tok = kk * 16 + (mi & 1) * 8 + (lane & 7);

            ldsm_x4_trans(b, vs + swz<D>(tok, n + (mi >> 1)));
            mma_f32acc<T>(o[n], a, b[0], b[1]);
            mma_f32acc<T>(o[n + 1], a, b[2], b[3]);
        }
    }
}


/*
 * Mask, then fold S into the running softmax of the thread's two rows
 * (lane / 4 and lane / 4 + 8 of the warp); S becomes P.
 */
template <bool MASK>
static __device__ __forceinline__ void
softmax_tile(float (&s)[PF_BN / 8][4], float (&m)[2], float (&l)[2],
    float (&corr)[2], int j, const int (&pos)[2], int ctx, float scale,
    int lane)
{
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float  mx = m[h];

#pragma unroll
        for (int n = 0; n < PF_BN / 8; n++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int     t = j * PF_BN + n * 8 + (lane & 3) * 2 + e;
                float  &v = s[n][h * 2 + e];

                v = !MASK || (t <= pos[h] && t < ctx) ? v * scale
                                                      : -INFINITY;
                mx = fmaxf(mx, v);
            }
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        corr[h] = exp2f(m[h] - mx);
        m[h] = mx;
        l[h] *= corr[h];
#pragma unroll
        for (int n = 0; n < PF_BN / 8; n++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float  &v = s[n][h * 2 + e];

                v = exp2f(v - mx);
                l[h] += v;
            }
        }
    }
}


/*
 * Shared memory: [stage 1 K, V | stage 0 K, V], Q at the start of stage 1:
 * Q is read into registers before stage 1 is first filled, so three
 * blocks fit on a multiprocessor.
 */
template <int D>
static __device__ __forceinline__ uint32_t
pf_stage(uint32_t qs, int st)
{
    return st == 1 ? qs : qs + 2 * PF_BN * D * 2;
}


template <typename T, int D>
__global__ void __launch_bounds__(PF_THREADS, 3)
prefill_attention_kernel(const attn_params_t p)
{
    extern __shared__ __align__(128) unsigned char pf_smem[];

    int             total = p.tile_start[p.num_seqs];
    int             tile = (int) gridDim.x - 1 - (int) blockIdx.x;
    int             seq, q0, qlen, ctx, r0;
    int             h = blockIdx.y, kvh = h / p.group;
    int             warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    uint32_t        qs = smem_addr(pf_smem);
    const int32_t  *table;
    uint32_t        qf[D / 16][4];
    float           o[D / 8][4], m[2], l[2];
    int             pos[2], kv_end, ntiles;

    if (tile >= total) {
        return;
    }
    seq = attn_seq_of_tile(p, tile);
    q0 = p.query_start[seq];
    qlen = p.query_start[seq + 1] - q0;
    ctx = p.context_lens[seq];
    r0 = (tile - p.tile_start[seq]) * PF_BM;
    table = p.block_tables + (int64_t) seq * p.max_blocks;
    kv_end = min(ctx, ctx - qlen + min(r0 + PF_BM, qlen));
    ntiles = (kv_end + PF_BN - 1) / PF_BN;

    for (int i = threadIdx.x; i < PF_BM * (D / 8); i += PF_THREADS) {
        int   r = i / (D / 8), c = i % (D / 8);
        bool  valid = r0 + r < qlen;

        cp_async16(qs + swz<D>(r, c),
                   (const T *) p.q + ((int64_t) (q0 + (valid ? r0 + r : 0))
                                      * p.n_heads + h) * D + c * 8,
                   valid);
    }
    cp_async_commit();
    load_kv_tile<D>(p, table, kvh, ctx, 0, pf_stage<D>(qs, 0),
                    pf_stage<D>(qs, 0) + PF_BN * D * 2);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();

#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        int  mi = lane >> 3;
        int  r = warp * 16 + (mi & 1) * 8 + (lane & 7);

        ldsm_x4(qf[kk], qs + swz<D>(r, kk * 2 + (mi >> 1)));
    }
#pragma unroll
    for (int n = 0; n < D / 8; n++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            o[n][e] = 0.0f;
        }
    }
    for (int hh = 0; hh < 2; hh++) {
        m[hh] = -FLT_MAX;
        l[hh] = 0.0f;
        pos[hh] = ctx - qlen + r0 + warp * 16 + (lane >> 2) + hh * 8;
    }

    for (int j = 0; j < ntiles; j++) {
        uint32_t  ks = pf_stage<D>(qs, j & 1);
        uint32_t  vs = ks + PF_BN * D * 2;
        float     s[PF_BN / 8][4], corr[2];

        cp_async_wait<0>();
        __syncthreads();
        if (j + 1 < ntiles) {
            load_kv_tile<D>(p, table, kvh, ctx, j + 1,
                            pf_stage<D>(qs, (j + 1) & 1),
                            pf_stage<D>(qs, (j + 1) & 1) + PF_BN * D * 2);
            cp_async_commit();
        }

        qk_tile<T, D>(s, qf, ks, lane);
        if ((j + 1) * PF_BN <= ctx - qlen + r0 + 1) {
            softmax_tile<false>(s, m, l, corr, j, pos, ctx, p.scale_log2,
                                lane);
        } else {
            softmax_tile<true>(s, m, l, corr, j, pos, ctx, p.scale_log2,
                               lane);
        }
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            o[n][0] *= corr[0];
            o[n][1] *= corr[0];
            o[n][2] *= corr[1];
            o[n][3] *= corr[1];
        }
        pv_tile<T, D>(o, s, vs, lane);
    }

#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        int  r = r0 + warp * 16 + (lane >> 2) + hh * 8;

        l[hh] += __shfl_xor_sync(0xffffffffu, l[hh], 1);
        l[hh] += __shfl_xor_sync(0xffffffffu, l[hh], 2);
        if (r < qlen) {
            T      *dst = (T *) p.out + ((int64_t) (q0 + r) * p.n_heads
                                         + h) * D + (lane & 3) * 2;
            float   inv = l[hh] > 0.0f ? 1.0f / l[hh] : 0.0f;

#pragma unroll
            for (int n = 0; n < D / 8; n++) {
                *(uint32_t *) (dst + n * 8) = pl_pack2<T>(
                    o[n][hh * 2] * inv, o[n][hh * 2 + 1] * inv);
            }
        }
    }
}


/* tile_start[s] = tiles of bm rows of the sequences before s (those with
   at least min_qlen rows); one block, a chunk of sequences per thread. */
__global__ void __launch_bounds__(1024)
tile_scan_kernel(const int32_t *query_start, int num_seqs, int min_qlen,
    int bm, int32_t *tile_start)
{
    __shared__ int  part[1024];
    int             per = (num_seqs + 1023) / 1024;
    int             b = threadIdx.x * per, e = min(b + per, num_seqs);
    int             sum = 0, run;

    for (int s = b; s < e; s++) {
        int  q = query_start[s + 1] - query_start[s];

        sum += q >= min_qlen ? (q + bm - 1) / bm : 0;
    }
    part[threadIdx.x] = sum;
    __syncthreads();
    for (int off = 1; off < 1024; off <<= 1) {
        int  v = threadIdx.x >= off ? part[threadIdx.x - off] : 0;

        __syncthreads();
        part[threadIdx.x] += v;
        __syncthreads();
    }
    run = part[threadIdx.x] - sum;
    for (int s = b; s < e; s++) {
        int  q = query_start[s + 1] - query_start[s];

        tile_start[s] = run;
        run += q >= min_qlen ? (q + bm - 1) / bm : 0;
    }
    if (threadIdx.x == 1023) {
        tile_start[num_seqs] = part[1023];
    }
}


template <typename T, int D>
static void
launch_prefill(pl_cuda_t *cu, const attn_params_t &p, int rows)
{
    static char  ready[64];            /* per device */
    size_t       smem = (size_t) 4 * PF_BN * D * 2;
    unsigned     tiles = (unsigned) ((rows + PF_BM - 1) / PF_BM
                                     + p.num_seqs);

    if (!ready[cu->device & 63]) {
        pl_cuda_check(cudaFuncSetAttribute(prefill_attention_kernel<T, D>,
                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                          (int) smem), "prefill attention");
        ready[cu->device & 63] = 1;
    }
    prefill_attention_kernel<T, D><<<dim3(tiles, p.n_heads), PF_THREADS,
                                     smem, cu->stream>>>(p);
    PL_CUDA_LAUNCHED("prefill attention");
}


/* Hopper's kernel: compute capability 9.0 exactly (its cubin is sm_90a),
   unless PAGEDLLM_CUDA_PREFILL=mma */
static bool
use_sm90(pl_cuda_t *cu, int head_dim)
{
    return head_dim == 128 && !pl_cuda_knobs.prefill_mma && cu->cc == 90;
}


/* the Hopper kernel, and its name */
static void
launch_sm90(pl_cuda_t *cu, const attn_params_t &p, int rows)
{
    bool  tma;

    tma = pl_cuda_prefill_sm90(cu, p, rows, !pl_cuda_knobs.prefill_cpasync);
    snprintf(prefill_kernel_buf, sizeof(prefill_kernel_buf),
             "sm90 wgmma%s, %s loads", p.dtype == PL_DT_F16 ? " fp16" : "",
             tma ? "tma" : "cp.async");
    prefill_kernel_name = prefill_kernel_buf;
}


template <typename T>
static void
launch_mma(pl_cuda_t *cu, const attn_params_t &p, int rows)
{
    if (p.head_dim == 64) {
        launch_prefill<T, 64>(cu, p, rows);
    } else {
        launch_prefill<T, 128>(cu, p, rows);
    }
    prefill_kernel_name = std::is_same_v<T, __half> ? "mma.sync fp16"
                                                    : "mma.sync";
}


int
pl_cuda_prefill_attention(pl_cuda_t *cu, attn_params_t *p, int rows)
{
    bool  sm90;

    if ((p->head_dim != 64 && p->head_dim != 128)
        || p->num_seqs > ATTN_TC_SEQS
        || (p->dtype != PL_DT_BF16 && p->dtype != PL_DT_F16))
    {
        return 0;
    }
    sm90 = use_sm90(cu, p->head_dim);
    p->tile_start = attn_tile_start(cu);
    p->tc_min_qlen = ATTN_PREFILL_MIN_QLEN;
    tile_scan_kernel<<<1, 1024, 0, cu->stream>>>(p->query_start, p->num_seqs,
                                                 ATTN_PREFILL_MIN_QLEN,
                                                 sm90 ? PF_BM_SM90 : PF_BM,
                                                 p->tile_start);
    PL_CUDA_LAUNCHED("prefill tile scan");
    if (sm90) {
        launch_sm90(cu, *p, rows);
    } else if (p->dtype == PL_DT_F16) {
        launch_mma<__half>(cu, *p, rows);
    } else {
        launch_mma<__nv_bfloat16>(cu, *p, rows);
    }
    return 1;
}


extern "C" const char *
pl_cuda_prefill_kernel(void)
{
    return prefill_kernel_name != NULL ? prefill_kernel_name : "none";
}
