/*
 * paged_attention: attention of every query row of a batch over its
 * sequence's paged KV cache, for decode rows and prefill chunks alike.
 *
 * Layouts (bf16):
 *     q, out     [num_tokens][n_heads][head_dim]
 *     k/v cache  [num_blocks][block_size][n_kv_heads][head_dim]
 * Row r belongs to the sequence s with query_start[s] <= r <
 * query_start[s + 1] and sees the first context_lens[s] - qlen + i + 1
 * tokens of it (i = r - query_start[s]): causal over the whole context.
 * max_context_len only sizes the splits; the last split of a row runs to
 * the row's own end, so a low value costs speed, never tokens.
 *
 * Work split: one thread block per (row, KV head, head chunk, KV split).
 * The block computes every query head that shares its KV head (GQA; up to
 * GT of them, more go to further chunks), so each K and V row is read once
 * for all of them.  Its 128 threads form groups of LANES threads; a group
 * takes UNROLL consecutive tokens per step, each thread loading 16 bytes
 * (8 dims) of every K and V row it needs, all loads issued before the
 * first use.  Scores are reduced across the group with shuffles and fed
 * to an online softmax (running max, running sum, rescaled accumulator) in
 * base 2, the scale folded into q.  The groups' partial states are merged
 * through shared memory at the end.
 *
 * When the batch has too few (row, head) pairs to fill the GPU, the
 * context is cut into splits, each written as an unnormalised partial
 * (accumulator, max, sum) to scratch, and a second kernel merges the
 * splits of each (row, head).  How many splits is chosen per launch from
 * the number of multiprocessors; PAGEDLLM_CUDA_ATTN_SPLIT_MIN (tokens per
 * split at least, default 256) and PAGEDLLM_CUDA_ATTN_CTAS (thread blocks
 * aimed for per multiprocessor, default 4) override it for benchmarking.
 */

#include <float.h>
#include <stdlib.h>

#include "pl_cuda.cuh"

#define ATTN_THREADS  128

typedef struct {
    __nv_bfloat16         *out;
    const __nv_bfloat16   *q;
    const __nv_bfloat16   *k_cache;
    const __nv_bfloat16   *v_cache;
    const int32_t         *query_start;
    const int32_t         *context_lens;
    const int32_t         *block_tables;
    float                 *part_acc;      /* [rows][n_heads][splits][dim] */
    float2                *part_ml;       /* [rows][n_heads][splits] */
    int                    num_seqs;
    int                    n_heads;
    int                    group;         /* query heads per KV head */
    int                    chunks;        /* head chunks per KV head */
    int                    head_dim;
    int                    log2_block;
    int                    max_blocks;
    int                    split_tokens;
    int                    num_splits;
    float                  scale_log2;
} attn_params_t;


/* The sequence that owns row r, and how many tokens row r sees. */
__device__ __forceinline__ int
row_context(const attn_params_t &p, int r, int *seq)
{
    int  lo = 0, hi = p.num_seqs - 1;

    while (lo < hi) {
        int  mid = (lo + hi + 1) >> 1;

        if (p.query_start[mid] <= r) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    *seq = lo;
    return p.context_lens[lo] - (p.query_start[lo + 1] - r) + 1;
}


template <int LANES>
__device__ __forceinline__ float
group_sum(float v)
{
#pragma unroll
    for (int o = LANES / 2; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    return v;
}


/* Rescale the group partials to the block's max and sum them. */
template <int LANES, int GT>
__device__ __forceinline__ void
merge_groups(float (&acc)[GT][8], float (&m)[GT], float (&l)[GT],
    float *tot_l, float (*red)[GT][LANES * 8], float2 (*ml)[GT])
{
    constexpr int  NGRP = ATTN_THREADS / LANES;
    int            grp = threadIdx.x / LANES, lane = threadIdx.x % LANES;

    if (lane == 0) {
#pragma unroll
        for (int g = 0; g < GT; g++) {
            ml[grp][g] = make_float2(m[g], l[g]);
        }
    }
    __syncthreads();
#pragma unroll
    for (int g = 0; g < GT; g++) {
        float  mx = -FLT_MAX, sum = 0.0f, f;

        for (int j = 0; j < NGRP; j++) {
            mx = fmaxf(mx, ml[j][g].x);
        }
        for (int j = 0; j < NGRP; j++) {
            sum += ml[j][g].y * exp2f(ml[j][g].x - mx);
        }
        f = exp2f(m[g] - mx);
        m[g] = mx;
        tot_l[g] = sum;
#pragma unroll
        for (int d = 0; d < 8; d++) {
            red[grp][g][lane * 8 + d] = acc[g][d] * f;
        }
    }
    __syncthreads();
}


template <int LANES, int GT, int UNROLL>
__global__ void __launch_bounds__(ATTN_THREADS)
paged_attention_kernel(const attn_params_t p)
{
    constexpr int  NGRP = ATTN_THREADS / LANES;
    constexpr int  STEP = NGRP * UNROLL;

    __shared__ float   red[NGRP][GT][LANES * 8];
    __shared__ float2  ml[NGRP][GT];

    int            row = blockIdx.x, seq;
    int            kvh = blockIdx.y / p.chunks;
    int            g0 = (blockIdx.y % p.chunks) * GT;
    int            grp = threadIdx.x / LANES, lane = threadIdx.x % LANES;
    bool           dim_ok = lane * 8 < p.head_dim;
    int            ctx = row_context(p, row, &seq);
    int            t0 = blockIdx.z * p.split_tokens;
    int            t1 = blockIdx.z + 1 == gridDim.z
                        ? ctx : min(ctx, t0 + p.split_tokens);
    int64_t        kv_row = (int64_t) (p.n_heads / p.group) * p.head_dim;
    const int32_t *table = p.block_tables + (int64_t) seq * p.max_blocks;
    float          q[GT][8], acc[GT][8], m[GT], l[GT], tot_l[GT];

#pragma unroll
    for (int g = 0; g < GT; g++) {
        int  h = kvh * p.group + g0 + g;

        m[g] = -FLT_MAX;
        l[g] = 0.0f;
#pragma unroll
        for (int d = 0; d < 8; d++) {
            q[g][d] = 0.0f;
            acc[g][d] = 0.0f;
        }
        if (dim_ok && g0 + g < p.group) {
            uint4  v = *(const uint4 *) (p.q + ((int64_t) row * p.n_heads
                                                + h) * p.head_dim + lane * 8);

            pl_bf16x8_to_f32(v, q[g]);
#pragma unroll
            for (int d = 0; d < 8; d++) {
                q[g][d] *= p.scale_log2;
            }
        }
    }

    for (int base = t0; base < t1; base += STEP) {
        uint4  kr[UNROLL], vr[UNROLL];
        float  s[GT][UNROLL];

#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            int  t = base + grp * UNROLL + u;

            kr[u] = make_uint4(0, 0, 0, 0);
            vr[u] = make_uint4(0, 0, 0, 0);
            if (t < t1 && dim_ok) {
                int64_t  blk = table[t >> p.log2_block];
                int64_t  slot = (blk << p.log2_block)
                                | (t & ((1 << p.log2_block) - 1));
                int64_t  off = slot * kv_row + kvh * p.head_dim + lane * 8;

                kr[u] = __ldg((const uint4 *) (p.k_cache + off));
                vr[u] = __ldg((const uint4 *) (p.v_cache + off));
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            float  kf[8];
            bool   live = base + grp * UNROLL + u < t1;

            pl_bf16x8_to_f32(kr[u], kf);
#pragma unroll
            for (int g = 0; g < GT; g++) {
                float  dot = 0.0f;

#pragma unroll
                for (int d = 0; d < 8; d++) {
                    dot = fmaf(q[g][d], kf[d], dot);
                }
                dot = group_sum<LANES>(dot);
                s[g][u] = live ? dot : -INFINITY;
            }
        }
#pragma unroll
        for (int g = 0; g < GT; g++) {
            float  mx = m[g], corr;

#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                mx = fmaxf(mx, s[g][u]);
            }
            corr = exp2f(m[g] - mx);
            m[g] = mx;
            l[g] *= corr;
#pragma unroll
            for (int d = 0; d < 8; d++) {
                acc[g][d] *= corr;
            }
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                s[g][u] = exp2f(s[g][u] - mx);
                l[g] += s[g][u];
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            float  vf[8];

            pl_bf16x8_to_f32(vr[u], vf);
#pragma unroll
            for (int g = 0; g < GT; g++) {
#pragma unroll
                for (int d = 0; d < 8; d++) {
                    acc[g][d] = fmaf(s[g][u], vf[d], acc[g][d]);
                }
            }
        }
    }

    merge_groups<LANES, GT>(acc, m, l, tot_l, red, ml);

    for (int i = threadIdx.x; i < GT * p.head_dim; i += ATTN_THREADS) {
        int      g = i / p.head_dim, d = i % p.head_dim;
        int64_t  h = kvh * p.group + g0 + g;
        int64_t  rh = (int64_t) row * p.n_heads + h;
        float    v = 0.0f, mg = -FLT_MAX, lg = 0.0f;

        if (g0 + g >= p.group) {
            continue;
        }
#pragma unroll
        for (int j = 0; j < GT; j++) {
            if (j == g) {
                mg = m[j];
                lg = tot_l[j];
            }
        }
        for (int j = 0; j < NGRP; j++) {
            v += red[j][g][d];
        }
        if (p.num_splits == 1) {
            p.out[rh * p.head_dim + d] =
                __float2bfloat16_rn(lg > 0.0f ? v / lg : 0.0f);
        } else {
            int64_t  ps = rh * p.num_splits + blockIdx.z;

            p.part_acc[ps * p.head_dim + d] = v;
            if (d == 0) {
                p.part_ml[ps] = make_float2(mg, lg);
            }
        }
    }
}


/* out[row][head] = merge of its splits' partials.  One block per
   (row, head), one thread per dim. */
__global__ void
merge_splits_kernel(const attn_params_t p)
{
    int64_t        rh = (int64_t) blockIdx.x * p.n_heads + blockIdx.y;
    const float2  *ml = p.part_ml + rh * p.num_splits;
    const float   *acc = p.part_acc + rh * p.num_splits * p.head_dim;
    float          mx = -FLT_MAX, v = 0.0f, sum = 0.0f;
    int            d = threadIdx.x;

    for (int s = 0; s < p.num_splits; s++) {
        if (ml[s].y > 0.0f) {
            mx = fmaxf(mx, ml[s].x);
        }
    }
    for (int s = 0; s < p.num_splits; s++) {
        if (ml[s].y > 0.0f) {
            float  w = exp2f(ml[s].x - mx);

            sum += ml[s].y * w;
            v += acc[(int64_t) s * p.head_dim + d] * w;
        }
    }
    p.out[rh * p.head_dim + d] = __float2bfloat16_rn(sum > 0.0f ? v / sum
                                                                 : 0.0f);
}


template <int LANES, int GT>
static void
launch_lanes_gt(const attn_params_t &p, dim3 grid, cudaStream_t st)
{
    constexpr int  UNROLL = GT >= 8 ? 2 : 4;

    paged_attention_kernel<LANES, GT, UNROLL>
        <<<grid, ATTN_THREADS, 0, st>>>(p);
}


template <int LANES>
static void
launch_lanes(const attn_params_t &p, int gt, dim3 grid, cudaStream_t st)
{
    switch (gt) {
    case 1:
        launch_lanes_gt<LANES, 1>(p, grid, st);
        break;
    case 2:
        launch_lanes_gt<LANES, 2>(p, grid, st);
        break;
    case 4:
        launch_lanes_gt<LANES, 4>(p, grid, st);
        break;
    default:
        launch_lanes_gt<LANES, 8>(p, grid, st);
        break;
    }
}


static int
env_int(const char *name, int dflt)
{
    const char  *v = getenv(name);
    int          n = v != NULL ? atoi(v) : 0;

    return n > 0 ? n : dflt;
}


/* How many KV splits: enough thread blocks to fill the GPU, no split
   shorter than split_min tokens, partials within the scratch. */
static int
choose_splits(pl_cuda_t *cu, int64_t units, int max_ctx, int64_t rows_heads,
    int head_dim)
{
    static int  split_min, ctas;
    int64_t     want, most, fit;

    if (split_min == 0) {
        split_min = env_int("PAGEDLLM_CUDA_ATTN_SPLIT_MIN", 256);
        ctas = env_int("PAGEDLLM_CUDA_ATTN_CTAS", 4);
    }
    want = ((int64_t) cu->num_sms * ctas + units - 1) / units;
    most = (max_ctx + split_min - 1) / split_min;
    fit = PL_CUDA_ATTN_SCRATCH
          / (rows_heads * (head_dim * sizeof(float) + sizeof(float2)));
    want = want < most ? want : most;
    want = want < fit ? want : fit;
    want = want < 65535 ? want : 65535;
    return want > 1 ? (int) want : 1;
}


static int
log2_exact(int v)
{
    int  k = 0;

    if (v <= 0 || (v & (v - 1)) != 0) {
        return -1;
    }
    while ((1 << k) < v) {
        k++;
    }
    return k;
}


static int
pow2_at_least(int v, int lo, int hi)
{
    int  k = lo;

    while (k < v && k < hi) {
        k *= 2;
    }
    return k;
}


static void
check_shape(int n_heads, int n_kv_heads, int head_dim, int block_size)
{
    if (head_dim <= 0 || head_dim % 8 != 0 || head_dim > 256) {
        pl_cuda_fail("attention", "head_dim must be a multiple of 8 "
                     "up to 256");
    }
    if (log2_exact(block_size) < 0 || block_size > 1024) {
        pl_cuda_fail("attention", "block_size must be a power of two "
                     "up to 1024");
    }
    if (n_kv_heads <= 0 || n_heads % n_kv_heads != 0) {
        pl_cuda_fail("attention", "n_heads must be a multiple of "
                     "n_kv_heads");
    }
}


void
pl_cuda_attention(pl_backend_t *be, void *out, const void *q,
    const void *k_cache, const void *v_cache, const pl_batch_t *batch,
    int n_heads, int n_kv_heads, int head_dim, int block_size, float scale)
{
    pl_cuda_t      *cu = pl_cuda(be);
    attn_params_t   p;
    int             gt, lanes, rows = batch->num_tokens;
    int             max_ctx = batch->max_context_len > 0
                              ? batch->max_context_len : 1;
    dim3            grid;

    check_shape(n_heads, n_kv_heads, head_dim, block_size);
    if (rows <= 0 || batch->num_seqs <= 0) {
        return;
    }
    p.out = (__nv_bfloat16 *) out;
    p.q = (const __nv_bfloat16 *) q;
    p.k_cache = (const __nv_bfloat16 *) k_cache;
    p.v_cache = (const __nv_bfloat16 *) v_cache;
    p.query_start = batch->query_start;
    p.context_lens = batch->context_lens;
    p.block_tables = batch->block_tables;
    p.part_acc = (float *) cu->attn_scratch;
    p.num_seqs = batch->num_seqs;
    p.n_heads = n_heads;
    p.group = n_heads / n_kv_heads;
    p.head_dim = head_dim;
    p.log2_block = log2_exact(block_size);
    p.max_blocks = batch->max_blocks_per_seq;
    p.scale_log2 = scale * 1.4426950408889634f;

    gt = pow2_at_least(p.group, 1, 8);
    lanes = pow2_at_least(head_dim / 8, 4, 32);
    p.chunks = (p.group + gt - 1) / gt;
    p.num_splits = choose_splits(cu, (int64_t) rows * n_kv_heads * p.chunks,
                                 max_ctx, (int64_t) rows * n_heads,
                                 head_dim);
    p.split_tokens = (max_ctx + p.num_splits - 1) / p.num_splits;
    p.split_tokens = (p.split_tokens + 31) & ~31;
    p.num_splits = (max_ctx + p.split_tokens - 1) / p.split_tokens;
    p.part_ml = (float2 *) (p.part_acc
                            + (int64_t) rows * n_heads * p.num_splits
                              * head_dim);

    grid = dim3(rows, n_kv_heads * p.chunks, p.num_splits);
    switch (lanes) {
    case 4:
        launch_lanes<4>(p, gt, grid, cu->stream);
        break;
    case 8:
        launch_lanes<8>(p, gt, grid, cu->stream);
        break;
    case 16:
        launch_lanes<16>(p, gt, grid, cu->stream);
        break;
    default:
        launch_lanes<32>(p, gt, grid, cu->stream);
        break;
    }
    PL_CUDA_LAUNCHED("attention");
    if (p.num_splits > 1) {
        merge_splits_kernel<<<dim3(rows, n_heads), head_dim, 0,
                              cu->stream>>>(p);
        PL_CUDA_LAUNCHED("attention merge");
    }
}
