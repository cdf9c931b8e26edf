/*
 * decode_attention: paged attention for decode rows (and the rows of short
 * query chunks) on tensor cores, head sizes 64 and 128, bf16 or fp16
 * (T: MMA operands of the activation dtype, fp32 accumulators).
 *
 * Layouts as in paged_attention.cu.  Work split: one block of four warps
 * per (row, KV head, group of query heads, KV split): grid x the head
 * group and y the row (heads first; rows in x past 65535 rows), z the
 * split.  A block stages its split's block-table entries in shared
 * memory (DEC_TBL at a time, loaded with the context length and the
 * query rows on the guess that row r is sequence r, so the first K/V
 * copies wait for one round trip), then walks the split in tiles of 64
 * tokens gathered through the table with 16-byte cp.async, STAGES - 1
 * tiles in flight and one barrier per tile.  Each warp takes 16 tokens of
 * a tile: S = Q K^T, online softmax in base 2 (O rescaled only when a
 * row's max moved), O += P V; the warps' states meet in shared memory at
 * the end.  A split that starts past its row's context (a short sequence
 * beside a long one, or a CUDA graph's bucket) writes an empty partial.
 *
 * Forms.  16 rows: the query heads of a KV head are the MMA's A rows
 * (16 a block, rows past the group zero; K and V read once for all of
 * them).  Swapped (SW), for groups of up to 8: the tokens are the MMA's M
 * and the query heads its N = 8, S^T = K Q^T and O^T += V^T P^T (P^T
 * transposed in registers by movmatrix), so no MMA row is padding.
 * Several KV heads a block (HB = 2 or 4, swapped, one split): a tile is
 * 64 / HB tokens of each of HB heads, warp w computes head w / (4 / HB).
 * Splits of a (row, head group) form one thread-block cluster where the
 * clusters fit (cluster_merge: partials stay in shared memory and are
 * folded over distributed shared memory), else each writes a global
 * partial and the last to finish merges them (attn_merge_if_last, one
 * acquire-release atomic a block).  How many splits, stages and heads a
 * block depends on max_context_len and the batch shape only, so a CUDA
 * graph replays the choice for any context within its bucket.
 *
 * Why, as measured on the H200 (docs/BENCHMARKS.md, make bench-gpu;
 * shapes rows x context x heads/KV heads):
 * - swapped form for groups <= 8: the 16-row form spends half its MMAs,
 *   softmax rows and O registers on padding rows there.
 * - heads-first grid with programmatic dependent launch (early release
 *   after the last tile): 0.5-1.7% over rows first without it, every
 *   shape of bench/gpu/attention.
 * - cp.async, not TMA: 16-row TMA boxes read 5-7% slower on every shape.
 * - each thread copies the same two chunks of every 16th (head 64: 32nd)
 *   token row (dec_copy_t): the kernel is bound by instructions, and a
 *   copy per row and chunk makes half of them address arithmetic (ncu,
 *   1 x 4096: 740 instructions per warp and tile).
 * - splits: one wave of blocks, none under 256 tokens: a shorter split
 *   costs more in the merge than it saves (1 x 256: 8.2 vs 10.4 us).
 * - cluster merge, about one block per SM: 1 x 4096 x 32/32 reads
 *   2.98-3.02 TB/s against 2.86-2.89 with the global merge on 3 stages.
 * - no cluster that does not fit in one wave: 32 clusters of 8 at
 *   1 x 4096 (30 fit at once) run 25% slower than clusters of 4.
 * - DEC_SPLIT_STAGES (4) for splitting launches whose clusters fit there
 *   (split_deeper): 8 x 16384 x 32/8 reads 4.18 TB/s against 4.11 on 3.
 * - HB = 2 for GQA groups: 64 and 256 x 192 x 32/8 10-11% and 2.5-4%
 *   faster; HB = 4 for groups of one up to 256 tokens: 1.6-2.5% faster;
 *   one head a block for those past 256 (HB = 4 0.4% slower there).
 * - equal splits: skewing them by a tile either way measured no faster.
 *
 * One file of about 1,300 lines: the forms share one templated kernel
 * body (copies, pipeline, softmax, both merges) and its launcher picks
 * the instantiation, so split across files the templates would move
 * into a header every part includes, or their instantiations be listed
 * by hand.
 */

#include <float.h>

#include "attention.cuh"
#include "mma.cuh"

#define DEC_THREADS  128
#define DEC_BN       64           /* tokens per KV tile */
#define DEC_ROWS     16           /* query heads per block (MMA rows) */
#define DEC_SW_ROWS  8            /* the same, swapped form (MMA columns) */
#define DEC_OPAD     4            /* fp32 padding of the merge's rows of O:
                                     a store of O's registers meets eight
                                     or four rows in one bank otherwise */
#define DEC_TBL      512          /* block-table entries staged at once */
#define DEC_STAGES   3            /* KV tiles in flight + 1 */
#define DEC_SPLIT_MIN  256        /* fewest tokens of a split */
#define DEC_SPLIT_STAGES  4       /* the same, launches that split their
                                     contexts (one block per SM) */


/* 2^x on the special-function unit, subnormals flushed (exp2f adds a
   range check and a rescale around it) */
static __device__ __forceinline__ float
fast_exp2(float x)
{
    float  y;

    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}


/*
 * Phase trace, built into bench/gpu/attention-trace only (-DPL_DEC_TRACE;
 * the library's kernel has none of it): thread 0 of each block of the
 * per-item kernel writes %globaltimer and clock64 at the points DEC_TR_*
 * of its life, its SM and whether it merged the splits, to the buffer
 * pl_cuda_decode_trace() set (DEC_TRACE_N words of globaltimer, then as
 * many of clock64, per block in launch order).
 */
#define DEC_TRACE_N     8
#define DEC_TR_START    0       /* the block began */
#define DEC_TR_TABLE    1       /* its table page is staged */
#define DEC_TR_FIRST    2       /* Q (and in practice its first tile, in
                                   flight beside it) arrived */
#define DEC_TR_LOOP     3       /* its last tile is computed */
#define DEC_TR_FINISH   4       /* its warps are merged, written out */
#define DEC_TR_END      5       /* after the split merge (if any) */
#define DEC_TR_MERGED   6       /* globaltimer word: it merged the splits */
#define DEC_TR_SM       7       /* globaltimer word: its SM */

#ifdef PL_DEC_TRACE
static __device__ unsigned long long  *dec_trace_buf;

static __device__ __forceinline__ void
dec_trace(int k, long long val = -1)
{
    unsigned long long  t, *b = dec_trace_buf;
    long long           c = clock64();
    unsigned            sm;

    if (b == nullptr || threadIdx.x != 0) {
        return;
    }
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    asm("mov.u32 %0, %%smid;" : "=r"(sm));
    b += (((size_t) blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x
          + blockIdx.x) * 2 * DEC_TRACE_N;
    b[k] = t;
    b[DEC_TRACE_N + k] = (unsigned long long) c;
    b[DEC_TR_SM] = sm;
    if (val >= 0) {
        b[DEC_TR_MERGED] = (unsigned long long) val;
    }
}
#else
static __device__ __forceinline__ void
dec_trace(int, long long = -1)
{
}
#endif


/* Stage table entries [b0, b0 + N) (those that exist) in smem: every
   load in flight before the first store. */
template <int N = DEC_TBL>
static __device__ __forceinline__ void
stage_table(int32_t *tbl, const int32_t *table, int b0, int bend)
{
    int32_t  e[N / DEC_THREADS];

    __syncthreads();
#pragma unroll
    for (int k = 0; k < N / DEC_THREADS; k++) {
        int  i = threadIdx.x + k * DEC_THREADS;

        e[k] = b0 + i < bend ? table[b0 + i] : 0;
    }
#pragma unroll
    for (int k = 0; k < N / DEC_THREADS; k++) {
        tbl[threadIdx.x + k * DEC_THREADS] = e[k];
    }
    __syncthreads();
}


/*
 * Where a thread's copies go: each thread copies DEC_CPT 16-byte chunks of
 * every DEC_RS-th token row of a tile, the same chunks of each row, so
 * that its global base pointers and shared offsets are computed once per
 * block and a row costs one table lookup and one 32x32->64 multiply for
 * all DEC_CPT chunks of K and of V (see the top).  The rows a
 * thread copies are DEC_RS apart, a multiple of 8, so the swizzle of its
 * chunks is the same in every row.
 */
#define DEC_CPT  2                              /* chunks per thread */
#define DEC_TPR(D)  ((D) / 8 / DEC_CPT)          /* threads per row */
#define DEC_RS(D)   (DEC_THREADS / DEC_TPR(D))    /* rows per pass */

typedef struct {
    const char           *k, *v;     /* this thread's chunk 0 of the KV
                                        head in token slot 0 */
    uint32_t              soff[DEC_CPT];   /* shared offsets, row r0 */
    int                   r0;        /* first row of the tile it copies */
    int                   tok0;      /* its token in the tile (row r0 is
                                        token tok0 of the KV head
                                        r0 / (DEC_BN / HB): see
                                        decode_attention_kernel's HB) */
    int                   kv_row;    /* bytes per token slot */
} dec_copy_t;


template <int D, int HB = 1>
static __device__ __forceinline__ void
copy_init(dec_copy_t &cp, const attn_params_t &p, int kvh)
{
    constexpr int  TT = DEC_BN / HB;

    int  tc = threadIdx.x % DEC_TPR(D);

    cp.r0 = threadIdx.x / DEC_TPR(D);
    cp.tok0 = cp.r0 % TT;
    kvh += cp.r0 / TT;
    cp.kv_row = (p.n_heads / p.group) * D * 2;
    cp.k = (const char *) ((const uint16_t *) p.k_cache + kvh * D + tc * 8);
    cp.v = (const char *) ((const uint16_t *) p.v_cache + kvh * D + tc * 8);
#pragma unroll
    for (int j = 0; j < DEC_CPT; j++) {
        cp.soff[j] = swz<D>(cp.r0, tc + j * DEC_TPR(D));
    }
}


/* Copy the K and V rows of tokens [first, first + BN / HB) of HB KV
   heads into a stage with 16-byte cp.async (zero past t1 unless FULL:
   the tile lies below t1), as one commit group: row r of the stage is
   token r % (BN / HB) of head r / (BN / HB), so with HB > 1 one token's
   rows of HB heads, side by side in its slot, are copied together (and
   its slot is looked up once). */
template <int D, bool FULL, int HB = 1>
static __device__ __forceinline__ void
issue_rows(const attn_params_t &p, const dec_copy_t &cp, const int32_t *tbl,
    int b0, int first, int t1, uint32_t ks, uint32_t vs)
{
    constexpr int  TT = DEC_BN / HB;

    int  lb = p.log2_block, bmask = (1 << lb) - 1;

#pragma unroll
    for (int k = 0; k < DEC_BN / DEC_RS(D); k++) {
        int      t = first + cp.tok0 + (k * DEC_RS(D)) % TT;
        bool     valid = FULL || t < t1;
        int64_t  off = 0;

        if (valid) {
            int  slot = (tbl[(t >> lb) - b0] << lb) | (t & bmask);

            off = (int64_t) slot * cp.kv_row;
        }
#pragma unroll
        for (int j = 0; j < DEC_CPT; j++) {
            uint32_t  so = cp.soff[j] + k * DEC_RS(D) * D * 2;
            int       go = j * DEC_TPR(D) * 16
                           + (k * DEC_RS(D) / TT) * D * 2;

            cp_async16(ks + so, cp.k + off + go, valid);
            cp_async16(vs + so, cp.v + off + go, valid);
        }
    }
}


template <int D, int HB = 1>
static __device__ __forceinline__ void
issue_tile(const attn_params_t &p, const dec_copy_t &cp, const int32_t *tbl,
    int b0, int first, int t1, uint32_t ks, uint32_t vs)
{
    if (first + DEC_BN / HB <= t1) {
        issue_rows<D, true, HB>(p, cp, tbl, b0, first, t1, ks, vs);
    } else {
        issue_rows<D, false, HB>(p, cp, tbl, b0, first, t1, ks, vs);
    }
    cp_async_commit();
}


/* One warp's 16 tokens of a tile: S, softmax, O += P V (operands T). */
template <typename T, int D, bool MASK>
static __device__ __forceinline__ void
warp_tile(float (&o)[D / 8][4], float (&m)[2], float (&l)[2],
    const uint32_t (&qf)[D / 16][4], uint32_t ks, uint32_t vs, int first,
    int t1, float scale, int warp, int lane)
{
    float     s[2][4], s2[2][4];
    uint32_t  a[4];
    int       mi = lane >> 3;

#pragma unroll
    for (int n = 0; n < 2; n++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            s[n][e] = 0.0f;
            s2[n][e] = 0.0f;
        }
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        uint32_t  b[4];

        ldsm_x4(b, ks + swz<D>(warp * 16 + (mi >> 1) * 8 + (lane & 7),
                               kk * 2 + (mi & 1)));
        mma_f32acc<T>(kk & 1 ? s2[0] : s[0], qf[kk], b[0], b[1]);
        mma_f32acc<T>(kk & 1 ? s2[1] : s[1], qf[kk], b[2], b[3]);
    }
#pragma unroll
    for (int n = 0; n < 2; n++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            s[n][e] += s2[n][e];
        }
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float  mx = m[h], corr;

#pragma unroll
        for (int n = 0; n < 2; n++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int     t = first + warp * 16 + n * 8 + (lane & 3) * 2 + e;
                float  &v = s[n][h * 2 + e];

                v = !MASK || t < t1 ? v * scale : -INFINITY;
                mx = fmaxf(mx, v);
            }
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        corr = fast_exp2(m[h] - mx);
        m[h] = mx;
        l[h] *= corr;
        if (__any_sync(0xffffffffu, corr != 1.0f)) {
#pragma unroll
            for (int n = 0; n < D / 8; n++) {
                o[n][h * 2] *= corr;
                o[n][h * 2 + 1] *= corr;
            }
        }
#pragma unroll
        for (int n = 0; n < 2; n++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float  &v = s[n][h * 2 + e];

                v = fast_exp2(v - mx);
                l[h] += v;
            }
        }
    }
    a[0] = pl_pack2<T>(s[0][0], s[0][1]);
    a[1] = pl_pack2<T>(s[0][2], s[0][3]);
    a[2] = pl_pack2<T>(s[1][0], s[1][1]);
    a[3] = pl_pack2<T>(s[1][2], s[1][3]);
#pragma unroll
    for (int n = 0; n < D / 8; n += 2) {
        uint32_t  b[4];

        ldsm_x4_trans(b, vs + swz<D>(warp * 16 + (mi & 1) * 8 + (lane & 7),
                                     n + (mi >> 1)));
        mma_f32acc<T>(o[n], a, b[0], b[1]);
        mma_f32acc<T>(o[n + 1], a, b[2], b[3]);
    }
}


/*
 * The same in the swapped form: S^T = K Q^T, O^T += V^T P^T.  Lane (g =
 * lane / 4, c = lane % 4) holds S^T and P^T for tokens g and g + 8 of the
 * warp's 16 and query heads 2c and 2c + 1 (m, l: one per head), O^T for
 * dims 16i + g and 16i + g + 8 and the same heads; qf[kk / 2][2 (kk % 2)
 * + b] is Q^T's B operand register b for dims 16kk .. 16kk + 15.  The
 * warp's 16 rows of the stage are tokens first + wt .. first + wt + 15.
 */
template <typename T, int D, bool MASK>
static __device__ __forceinline__ void
warp_tile_sw(float (&o)[D / 16][4], float (&m)[2], float (&l)[2],
    const uint32_t (&qf)[D / 32][4], uint32_t ks, uint32_t vs, int first,
    int t1, float scale, int warp, int wt, int lane)
{
    float     s[4], s2[4], mx[2], corr[2];
    uint32_t  b0, b1;
    int       mi = lane >> 3;

#pragma unroll
    for (int e = 0; e < 4; e++) {
        s[e] = 0.0f;
        s2[e] = 0.0f;
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        uint32_t  a[4];

        ldsm_x4(a, ks + swz<D>(warp * 16 + (mi & 1) * 8 + (lane & 7),
                               kk * 2 + (mi >> 1)));
        mma_f32acc<T>(kk & 1 ? s2 : s, a, qf[kk / 2][(kk & 1) * 2],
                      qf[kk / 2][(kk & 1) * 2 + 1]);
    }
    mx[0] = m[0];
    mx[1] = m[1];
#pragma unroll
    for (int e = 0; e < 4; e++) {
        int     t = first + wt + (e >> 1) * 8 + (lane >> 2);
        float  &v = s[e];

        v = !MASK || t < t1 ? (v + s2[e]) * scale : -INFINITY;
        mx[e & 1] = fmaxf(mx[e & 1], v);
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 4));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 8));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 16));
        corr[h] = fast_exp2(m[h] - mx[h]);
        m[h] = mx[h];
        l[h] *= corr[h];
    }
    if (__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) {
#pragma unroll
        for (int i = 0; i < D / 16; i++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                o[i][e] *= corr[e & 1];
            }
        }
    }
#pragma unroll
    for (int e = 0; e < 4; e++) {
        s[e] = fast_exp2(s[e] - mx[e & 1]);
        l[e & 1] += s[e];
    }
    b0 = movmatrix_trans(pl_pack2<T>(s[0], s[1]));
    b1 = movmatrix_trans(pl_pack2<T>(s[2], s[3]));
#pragma unroll
    for (int i = 0; i < D / 16; i++) {
        uint32_t  a[4];

        ldsm_x4_trans(a, vs + swz<D>(warp * 16 + (mi >> 1) * 8 + (lane & 7),
                                     i * 2 + (mi & 1)));
        mma_f32acc<T>(o[i], a, b0, b1);
    }
}


/* one warp's 16 tokens of a tile in the block's form (the swapped form:
   tokens first + wt ..., see warp_tile_sw; else wt is warp * 16) */
template <typename T, int D, bool SW, bool MASK>
static __device__ __forceinline__ void
form_tile(float (&o)[D / (SW ? 16 : 8)][4], float (&m)[2], float (&l)[2],
    const uint32_t (&qf)[D / (SW ? 32 : 16)][4], uint32_t ks, uint32_t vs,
    int first, int t1, float scale, int warp, int wt, int lane)
{
    if constexpr (SW) {
        warp_tile_sw<T, D, MASK>(o, m, l, qf, ks, vs, first, t1, scale,
                                 warp, wt, lane);
    } else {
        warp_tile<T, D, MASK>(o, m, l, qf, ks, vs, first, t1, scale, warp,
                              lane);
    }
}


/* the largest of warps w0 .. w0 + WPH - 1's maxima of query head r */
template <int ROWS, int WPH = 4>
static __device__ __forceinline__ float
warps_max(const float2 (*ml)[ROWS], int r, int w0 = 0)
{
    float  mx = -FLT_MAX;

#pragma unroll
    for (int w = 0; w < WPH; w++) {
        mx = fmaxf(mx, ml[w0 + w][r].x);
    }
    return mx;
}


/*
 * The cluster merge: the splits of a (row,
 * head group) are one thread-block cluster.  Each block leaves its
 * partial (the group's rows of O, their max and sum) in its own shared
 * memory, past the warps' merge rows; after a cluster barrier every block
 * folds an equal share of the output elements from all the cluster's
 * partials, read over distributed shared memory, and a second barrier
 * keeps each block's memory alive until its peers have read it.  No
 * global partial, no atomic, no round trip through L2.
 */
template <int D, bool SW>
static __device__ __forceinline__ float *
cl_acc(float *ob)
{
    constexpr int  ROWS = SW ? DEC_SW_ROWS : DEC_ROWS;

    return ob + 4 * ROWS * (D + DEC_OPAD) + 4 * ROWS * 2;
}

template <int D, bool SW>
static __device__ __forceinline__ float2 *
cl_ml(float *ob)
{
    constexpr int  ROWS = SW ? DEC_SW_ROWS : DEC_ROWS;

    return (float2 *) (cl_acc<D, SW>(ob) + ROWS * D);
}

static __device__ __forceinline__ void
cluster_sync_all(void)
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

/* the last barrier: only says this block has done reading its peers'
   memory (the loads' values are in registers), so it orders nothing and
   the output's stores go out between it and the wait */
static __device__ __forceinline__ void
cluster_arrive_relaxed(void)
{
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}

static __device__ __forceinline__ void
cluster_wait(void)
{
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
}

static __device__ __forceinline__ uint32_t
cluster_rank(void)
{
    uint32_t  r;

    asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

static __device__ __forceinline__ uint32_t
cluster_map(uint32_t addr, uint32_t rank)
{
    uint32_t  a;

    asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"(addr),
        "r"(rank));
    return a;
}

template <typename T, int D, bool SW>
static __device__ __forceinline__ void
cluster_merge(const attn_params_t &p, float *ob, int row, int kvh, int g0,
    int ng)
{
    int       n = ng * D, ns = p.num_splits;
    int       share = (n + ns - 1) / ns, rank = (int) cluster_rank();
    int       i0 = rank * share, i1 = min(n, i0 + share);
    int       i = i0 + threadIdx.x;
    float     mx = -FLT_MAX, sum = 0.0f, v = 0.0f;
    uint32_t  acc = smem_addr(cl_acc<D, SW>(ob));
    uint32_t  ml = smem_addr(cl_ml<D, SW>(ob));
    T        *out = (T *) p.out
                    + ((int64_t) row * p.n_heads + kvh * p.group + g0) * D;

    /* a share is at most D * ROWS / 2 = 1024 elements: up to 8 a thread */
    cluster_sync_all();
    for (;;) {
        bool  in = i < i1;
        int   ii = in ? i : i0;

        mx = -FLT_MAX;
        sum = 0.0f;
        v = 0.0f;
        for (int b0 = 0; b0 < ns; b0 += 4) {
            float2  e[4];
            float   a[4];

#pragma unroll
            for (int b = 0; b < 4; b++) {
                uint32_t  r = b0 + b < ns ? b0 + b : rank;
                uint32_t  ra = cluster_map(acc + ii * 4, r);
                uint32_t  rm = cluster_map(ml + (ii / D) * 8, r);

                asm volatile("ld.shared::cluster.f32 %0, [%1];"
                             : "=f"(a[b]) : "r"(ra));
                asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];"
                             : "=f"(e[b].x), "=f"(e[b].y) : "r"(rm));
            }
#pragma unroll
            for (int b = 0; b < 4; b++) {
                if (b0 + b < ns) {
                    attn_fold_split(mx, sum, v, e[b], a[b]);
                }
            }
        }
        if (i + DEC_THREADS >= i1) {
            break;
        }
        out[i] = pl_from_f32<T>(sum > 0.0f ? v / sum : 0.0f);
        i += DEC_THREADS;
    }
    cluster_arrive_relaxed();
    if (i < i1) {
        out[i] = pl_from_f32<T>(sum > 0.0f ? v / sum : 0.0f);
    }
    cluster_wait();
}


/*
 * Merge the four warps' states; query heads < ng end in out (one split)
 * or in the partial of split number split: in global memory or, with the
 * cluster merge, in the block's own shared memory past the warps' rows
 * (heads past ng are padding and never leave registers).  Through shared
 * memory at ob (the tiles', reused): each warp's O, scaled to the block's
 * max, in ROWS rows of D + DEC_OPAD fp32, then each warp's (max, sum) per
 * head.  A lane's head h
 * (m[h], l[h]) is row g + 8h of the 16-row form's fragments (g = lane /
 * 4, c = lane % 4) and column 2c + h of the swapped form's; its sum is
 * spread over the lanes of that row (the four of g) or column (the eight
 * of c).  With HB KV heads a block (one split), warps w .. w + 4 / HB - 1
 * of KV head kvh + w / (4 / HB) are merged, and each of its ng query
 * heads ends in out.
 */
template <typename T, int D, bool SW, int HB = 1>
static __device__ __forceinline__ void
finish_block(const attn_params_t &p, float (&o)[D / (SW ? 16 : 8)][4],
    float (&m)[2], float (&l)[2], float *ob, int row, int kvh,
    int g0, int ng, int split, int warp, int lane)
{
    constexpr int  ROWS = SW ? DEC_SW_ROWS : DEC_ROWS;
    constexpr int  OD = D + DEC_OPAD;
    constexpr int  WPH = 4 / HB;

    float2  (*ml)[ROWS] = (float2 (*)[ROWS]) (ob + 4 * ROWS * OD);
    int     g = lane >> 2, c = lane & 3;
    int     r0 = SW ? c * 2 : g, rstep = SW ? 1 : 8;

    __syncthreads();
#pragma unroll
    for (int h = 0; h < 2; h++) {
#pragma unroll
        for (int x = SW ? 4 : 1; x < (SW ? 32 : 4); x *= 2) {
            l[h] += __shfl_xor_sync(0xffffffffu, l[h], x);
        }
        if ((SW ? g : c) == 0) {
            ml[warp][r0 + h * rstep] = make_float2(m[h], l[h]);
        }
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int    r = r0 + h * rstep;
        float  f;

        if (r >= ng) {
            continue;
        }
        f = fast_exp2(m[h] - warps_max<ROWS, WPH>(ml, r,
                                                   warp / WPH * WPH));
#pragma unroll
        for (int n = 0; n < D / (SW ? 16 : 8); n++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float  *orow = ob + (warp * ROWS + r) * OD;

                if (SW) {
                    orow[n * 16 + e * 8 + g] = o[n][e * 2 + h] * f;
                } else {
                    orow[n * 8 + c * 2 + e] = o[n][h * 2 + e] * f;
                }
            }
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < HB * ng * D; i += DEC_THREADS) {
        int      r = (i / D) % ng, d = i % D, w0 = i / (ng * D) * WPH;
        int64_t  rh = (int64_t) row * p.n_heads + kvh * p.group + g0 + i / D;
        float    mx = warps_max<ROWS, WPH>(ml, r, w0), sum = 0.0f, v = 0.0f;

        for (int w = w0; w < w0 + WPH; w++) {
            sum += ml[w][r].y * fast_exp2(ml[w][r].x - mx);
            v += ob[(w * ROWS + r) * OD + d];
        }
        if (HB > 1 || p.num_splits == 1) {
            ((T *) p.out)[rh * D + d] = pl_from_f32<T>(sum > 0.0f ? v / sum
                                                                  : 0.0f);
        } else if (p.dec_flags & DEC_F_CLUSTER) {
            float   *acc = cl_acc<D, SW>(ob);

            acc[i] = v;
            if (d == 0) {
                cl_ml<D, SW>(ob)[r] = make_float2(mx, sum);
            }
        } else {
            int64_t  ps = rh * p.num_splits + split;

            p.part_acc[ps * D + d] = v;
            if (d == 0) {
                p.part_ml[ps] = make_float2(mx, sum);
            }
        }
    }
}


/* shared-memory address of stage st's K tile (its V tile follows) */
template <int D>
static __device__ __forceinline__ uint32_t
stage_addr(uint32_t qs, int st)
{
    return qs + DEC_ROWS * D * 2 + st * 2 * DEC_BN * D * 2;
}


/* Restage the table page (N entries from b0) when the tile of tokens
   [first, first + BN) of a context ending at t1 reaches past it: the
   new page starts at the tile's first block.  All threads. */
template <int N, int BN = DEC_BN>
static __device__ __forceinline__ void
page_for_tile(const attn_params_t &p, int32_t *tbl, const int32_t *table,
    int &b0, int bend, int first, int t1)
{
    if (((min(first + BN, t1) - 1) >> p.log2_block) - b0 >= N) {
        b0 = first >> p.log2_block;
        stage_table<N>(tbl, table, b0, bend);
    }
}


/* Issue tile j of the split into stage j % STAGES (an empty group past
   the last tile, so that group counting stays uniform); the table page is
   restaged when the tile leaves it.  A tile is DEC_BN / HB tokens of HB
   KV heads. */
template <int D, int STAGES, int HB = 1>
static __device__ __forceinline__ void
issue_next(const attn_params_t &p, const dec_copy_t &cp, int32_t *tbl,
    const int32_t *table, int &b0, int bend, int t0, int t1, int ntiles,
    int j, uint32_t qs)
{
    int       first = t0 + j * (DEC_BN / HB);
    uint32_t  ks = stage_addr<D>(qs, j % STAGES);

    if (j >= ntiles) {
        cp_async_commit();
        return;
    }
    page_for_tile<DEC_TBL, DEC_BN / HB>(p, tbl, table, b0, bend, first, t1);
    issue_tile<D, HB>(p, cp, tbl, b0, first, t1, ks, ks + DEC_BN * D * 2);
}


/* Copy query heads g0 .. g0+ng-1 of KV head kvh of row into the ROWS-row
   Q buffer at qs (rows past ng zero); not committed. */
template <typename T, int D, int ROWS>
static __device__ __forceinline__ void
copy_q(const attn_params_t &p, uint32_t qs, int row, int kvh, int g0,
    int ng)
{
    for (int i = threadIdx.x; i < ROWS * (D / 8); i += DEC_THREADS) {
        int   r = i / (D / 8), c = i % (D / 8);
        bool  valid = r < ng;

        cp_async16(qs + swz<D>(r, c),
                   (const T *) p.q + ((int64_t) row * p.n_heads
                                      + kvh * p.group + g0
                                      + (valid ? r : 0)) * D + c * 8,
                   valid);
    }
}


/* Q from the buffer at qs as the 16-row form's A (rows 0..15, dims
   16j .. 16j + 15) or as the swapped form's B (Q^T: rows q0..q0 + 7,
   dims 32j .. 32j + 31), and the softmax state of no token yet */
template <int D, bool SW>
static __device__ __forceinline__ void
start_state(uint32_t (&qf)[D / (SW ? 32 : 16)][4],
    float (&o)[D / (SW ? 16 : 8)][4], float (&m)[2], float (&l)[2],
    uint32_t qs, int lane, int q0 = 0)
{
#pragma unroll
    for (int j = 0; j < D / (SW ? 32 : 16); j++) {
        int  mi = lane >> 3;

        ldsm_x4(qf[j], qs + (SW ? swz<D>(q0 + (lane & 7), j * 4 + mi)
                                : swz<D>((mi & 1) * 8 + (lane & 7),
                                         j * 2 + (mi >> 1))));
    }
#pragma unroll
    for (int n = 0; n < D / (SW ? 16 : 8); n++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            o[n][e] = 0.0f;
        }
    }
    m[0] = m[1] = -FLT_MAX;
    l[0] = l[1] = 0.0f;
}


/*
 * The sequence of a row, its query rows [q0, q1) and its context length
 * (ctx), with the split's block-table page [b0, bend) staged in tbl.  In
 * a batch of decode rows row r is sequence r: the page and the context
 * length are loaded for that guess together with the two query_start
 * entries that confirm it, so the block waits for one round trip; a
 * wrong guess (rows of query chunks) costs the binary search (a chain of
 * dependent loads, one per halving) and a second staging.
 */
template <int N = DEC_TBL>
static __device__ __forceinline__ int
dec_seq_of_row(const attn_params_t &p, int row, int &q0, int &q1, int &ctx,
    int32_t *tbl, int b0, int bend)
{
    int  seq = min(row, p.num_seqs - 1);

    q0 = p.query_start[seq];
    q1 = p.query_start[seq + 1];
    ctx = p.context_lens[seq];
    stage_table<N>(tbl, p.block_tables + (int64_t) seq * p.max_blocks, b0,
                   bend);
    if (q0 <= row && row < q1) {
        return seq;
    }
    seq = attn_seq_of_row(p, row);
    q0 = p.query_start[seq];
    q1 = p.query_start[seq + 1];
    ctx = p.context_lens[seq];
    stage_table<N>(tbl, p.block_tables + (int64_t) seq * p.max_blocks, b0,
                   bend);
    return seq;
}


template <typename T, int D, int STAGES, bool SW, int HB = 1>
__global__ void __launch_bounds__(DEC_THREADS)
decode_attention_kernel(const attn_params_t p)
{
    constexpr int  ROWS = SW ? DEC_SW_ROWS : DEC_ROWS;
    constexpr int  TT = DEC_BN / HB;       /* tokens per tile */
    constexpr int  WPH = 4 / HB;           /* warps per KV head */

    extern __shared__ __align__(128) unsigned char dec_smem[];
    __shared__ int32_t  tbl[DEC_TBL];
    __shared__ int      last;

    /* the warps' merge rows and the cluster partial fit in the stages */
    static_assert((4 * ROWS * (D + DEC_OPAD + 2) + ROWS * (D + 2)) * 4
                  <= (DEC_ROWS + STAGES * 2 * DEC_BN) * D * 2,
                  "decode merge rows past the shared memory");

    int             row = p.heads_first ? blockIdx.y : blockIdx.x;
    int             hc = p.heads_first ? blockIdx.x : blockIdx.y;
    int             kvh = hc / p.chunks * HB;
    int             g0 = (hc % p.chunks) * ROWS;
    int             ng = min(ROWS, p.group - g0);
    int             warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int             wt = warp % WPH * 16;  /* the warp's first token in a
                                              tile (of KV head kvh + warp
                                              / WPH) */
    int             t0 = blockIdx.z * p.split_tokens;
    int             b0 = t0 >> p.log2_block;
    int             q0, q1, seq, bend, ctx, t1, ntiles;
    const int32_t  *table;
    uint32_t        qs = smem_addr(dec_smem);
    uint32_t        qf[D / (SW ? 32 : 16)][4];
    float           o[D / (SW ? 16 : 8)][4], m[2], l[2];
    dec_copy_t      cp;

    /*
     * The split's table page is bounded by the split (the last split: by
     * the table's width), not by the context, so it is staged together
     * with the loads that find the sequence and its context length, and
     * the K/V copies wait for one round trip.  All of it only depends on
     * the batch arrays: staged before the wait for the previous kernel
     * (a no-op unless launched with PDL).
     */
    dec_trace(DEC_TR_START);
    bend = blockIdx.z + 1 == gridDim.z
           ? p.max_blocks
           : min(p.max_blocks, ((t0 + p.split_tokens - 1) >> p.log2_block)
                               + 1);
    seq = dec_seq_of_row(p, row, q0, q1, ctx, tbl, b0, bend);
    dec_trace(DEC_TR_TABLE);
    table = p.block_tables + (int64_t) seq * p.max_blocks;
    if (p.tc_min_qlen > 0 && q1 - q0 >= p.tc_min_qlen) {
        /* the prefill kernel's row; still wait, so that this grid never
           completes before the kernel it follows (a kernel launched after
           it relies on that) */
        attn_grid_wait();
        return;
    }
    ctx -= q1 - row - 1;
    t1 = blockIdx.z + 1 == gridDim.z ? ctx : min(ctx, t0 + p.split_tokens);
    ntiles = t1 > t0 ? (t1 - t0 + TT - 1) / TT : 0;
    if (HB == 1 && ntiles == 0 && p.num_splits > 1) {
        attn_grid_wait();
        if (p.dec_flags & DEC_F_CLUSTER) {
            float  *ob = (float *) dec_smem;

            for (int i = threadIdx.x; i < ng * D; i += DEC_THREADS) {
                cl_acc<D, SW>(ob)[i] = 0.0f;
                if (i % D == 0) {
                    cl_ml<D, SW>(ob)[i / D] = make_float2(-FLT_MAX, 0.0f);
                }
            }
            goto cluster;       /* one merge call: two spilled */
        }
        attn_empty_split(p, row, kvh * p.group + g0, ng);
        attn_merge_if_last<T, DEC_THREADS, false>(p, row, g0, ng, kvh,
                                                  row * p.n_hc + hc, &last);
        return;
    }

    copy_init<D, HB>(cp, p, kvh);
    attn_grid_wait();
    if constexpr (HB > 1) {
        /* the query heads of KV heads kvh .. kvh + HB - 1, side by side
           (the launcher fits the warps' 8 rows from (warp / WPH) * group
           in the buffer's 16) */
        copy_q<T, D, DEC_ROWS>(p, qs, row, kvh, 0, HB * p.group);
    } else {
        copy_q<T, D, ROWS>(p, qs, row, kvh, g0, ng);
    }
    cp_async_commit();
#pragma unroll
    for (int j = 0; j < STAGES - 1; j++) {
        issue_next<D, STAGES, HB>(p, cp, tbl, table, b0, bend, t0, t1,
                                  ntiles, j, qs);
    }
    cp_async_wait<STAGES - 1>();
    __syncthreads();
    start_state<D, SW>(qf, o, m, l, qs, lane, warp / WPH * p.group);
    dec_trace(DEC_TR_FIRST);

    for (int j = 0; j < ntiles; j++) {
        uint32_t  ks = stage_addr<D>(qs, j % STAGES);
        uint32_t  vs = ks + DEC_BN * D * 2;

        cp_async_wait<STAGES - 2>();
        __syncthreads();
        issue_next<D, STAGES, HB>(p, cp, tbl, table, b0, bend, t0, t1,
                                  ntiles, j + STAGES - 1, qs);
        if (j + 1 < ntiles) {
            form_tile<T, D, SW, false>(o, m, l, qf, ks, vs, t0 + j * TT,
                                       t1, p.scale_log2, warp, wt, lane);
        } else {
            form_tile<T, D, SW, true>(o, m, l, qf, ks, vs, t0 + j * TT,
                                      t1, p.scale_log2, warp, wt, lane);
        }
    }
    cp_async_wait<0>();
    dec_trace(DEC_TR_LOOP);
    attn_grid_release();

    finish_block<T, D, SW, HB>(p, o, m, l, (float *) dec_smem, row, kvh, g0,
                               ng, blockIdx.z, warp, lane);
    dec_trace(DEC_TR_FINISH);
    if (HB > 1 || p.num_splits == 1) {
        dec_trace(DEC_TR_END, 0);
        return;
    }
    if (!(p.dec_flags & DEC_F_CLUSTER)) {
        attn_merge_if_last<T, DEC_THREADS, false>(p, row, g0, ng, kvh,
                                                  row * p.n_hc + hc, &last);
        dec_trace(DEC_TR_END, last);
        return;
    }
cluster:
    cluster_merge<T, D, SW>(p, (float *) dec_smem, row, kvh, g0, ng);
    dec_trace(DEC_TR_END, 1);
}


/* the form of the last launch, for the tests: "swapped" or "16 rows";
   its number of KV splits, whether they met in a cluster, its KV heads a
   block */
static const char  *decode_form;
static int          decode_splits;
static int          decode_cluster;
static int          decode_heads;


/*
 * How many KV splits: as many as one wave of resident blocks holds (long
 * splits beat short ones once the GPU is full: each split costs a partial
 * and a share of the merge), no split under DEC_SPLIT_MIN tokens,
 * partials within the scratch.
 */
static int
choose_splits(int slots, int64_t units, int max_ctx, int64_t rows_heads,
    int head_dim)
{
    const pl_cuda_knobs_t  *k = &pl_cuda_knobs;
    int                     split_min = k->attn_split_min > 0
                                        ? k->attn_split_min : DEC_SPLIT_MIN;
    int64_t                 most, fit, want = slots / units;

    if (units > ATTN_COUNTERS) {
        return 1;
    }
    most = (max_ctx + split_min - 1) / split_min;
    fit = ATTN_PARTIAL_BYTES
          / (rows_heads * (head_dim * sizeof(float) + sizeof(float2)));
    most = most < fit ? most : fit;
    most = most < ATTN_MAX_SPLITS ? most : ATTN_MAX_SPLITS;
    want = k->attn_splits > 0 ? k->attn_splits : want;
    want = want < most ? want : most;
    return want > 1 ? (int) want : 1;
}


/* blocks of kernel with smem bytes of dynamic shared memory that one SM
   holds, once its launches are allowed up to most bytes */
template <typename K>
static int
blocks_per_sm(K kernel, size_t most, size_t smem)
{
    int  n = 0;

    pl_cuda_check(cudaFuncSetAttribute(kernel,
                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                      (int) most), "decode attention");
    pl_cuda_check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                      &n, kernel, DEC_THREADS, smem), "decode attention");
    return n > 0 ? n : 1;
}


/* how many clusters of c blocks of the kernel with STAGES stages the GPU
   holds at once (depends on the kernel and c only: kept per c) */
template <typename T, int D, int STAGES, bool SW>
static int
active_clusters(pl_cuda_t *cu, int c)
{
    static int           memo[9];
    size_t               smem = (size_t) (DEC_ROWS + STAGES * 2 * DEC_BN)
                                * D * 2;
    auto                 kernel = decode_attention_kernel<T, D, STAGES, SW>;
    cudaLaunchConfig_t   cfg = {};
    cudaLaunchAttribute  at;

    if (memo[c] == 0) {
        pl_cuda_check(cudaFuncSetAttribute(kernel,
                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                          (int) smem), "decode attention");
        cfg.gridDim = dim3(1, 1, c);
        cfg.blockDim = dim3(DEC_THREADS);
        cfg.dynamicSmemBytes = smem;
        cfg.stream = cu->stream;
        at.id = cudaLaunchAttributeClusterDimension;
        at.val.clusterDim.x = 1;
        at.val.clusterDim.y = 1;
        at.val.clusterDim.z = c;
        cfg.attrs = &at;
        cfg.numAttrs = 1;
        pl_cuda_check(cudaOccupancyMaxActiveClusters(&memo[c], kernel, &cfg),
                      "decode attention");
        memo[c] = memo[c] > 0 ? memo[c] : -1;
    }
    return memo[c];
}


/*
 * The splits merged through a cluster (see cluster_merge), by default: about
 * one block per SM (splits = SMs / units, at most the ones chosen and 8, the
 * portable cluster size; at least 2), fewer where the clusters for all units
 * would not fit on the GPU at once (a cluster is placed within one GPC, so
 * fewer fit than SMs / size: the H200 holds 30 clusters of 8 three-stage
 * blocks, 62 of 4; see the top for the measurements).  Not with prefill rows
 * beside (their blocks would leave their clusters' peers waiting) nor with a
 * fixed split count (PAGEDLLM_CUDA_ATTN_SPLITS); with
 * PAGEDLLM_CUDA_ATTN_CLUSTER=n (2..8), n splits in clusters of n whenever the
 * context splits at all, fitting or not; =0: never.  Sets *cluster (not a
 * static: tensor-parallel ranks launch from threads of their own); returns the
 * splits.
 */
template <typename T, int D, int STAGES, bool SW>
static int
cluster_splits(pl_cuda_t *cu, const attn_params_t &p, int64_t units,
    int *cluster)
{
    const pl_cuda_knobs_t  *k = &pl_cuda_knobs;
    int64_t                 c;

    *cluster = 0;
    if (p.num_splits < 2 || p.tc_min_qlen > 0 || cu->cc < 90
        || k->attn_cluster == 0
        || (k->attn_cluster < 0 && k->attn_splits > 0))
    {
        return p.num_splits;
    }
    if (k->attn_cluster > 0) {
        *cluster = 1;
        return k->attn_cluster;
    }
    c = cu->num_sms / units;
    c = c < p.num_splits ? c : p.num_splits;
    c = c < 8 ? c : 8;
    for (; c >= 2; c--) {
        if (units <= active_clusters<T, D, STAGES, SW>(cu, (int) c)) {
            *cluster = 1;
            return (int) c;
        }
    }
    return p.num_splits;
}


/*
 * Whether a launch that splits runs on DEC_SPLIT_STAGES stages (one block
 * per SM, three tiles in flight): when each unit gets fewer than two SMs
 * (it then splits no more on four stages than it would across the SMs),
 * or when the clusters of SMs / units blocks for all units fit on four
 * stages too (8 x 16384 x 32/8: 64 clusters of 2); else it stays on
 * three stages, where they fit (1 x 4096 x 32/32: 32 clusters of 4, of
 * which four stages hold fewer than 32).
 */
template <typename T, int D, bool SW>
static bool
split_deeper(pl_cuda_t *cu, int64_t units)
{
    const pl_cuda_knobs_t  *k = &pl_cuda_knobs;
    int64_t                 c = cu->num_sms / units;

    if (c < 2 || cu->cc < 90 || k->attn_cluster >= 0 || k->attn_splits > 0)
    {
        return true;
    }
    c = c < 8 ? c : 8;
    return units <= active_clusters<T, D, DEC_SPLIT_STAGES, SW>(cu, (int) c);
}


/*
 * KV heads per block (decode_attention_kernel's HB) of the swapped form, where
 * the block's query heads fit in the Q buffer's 16 rows as its warps read them
 * ((HB - 1) x group + 8) and the batch still fills three quarters of a wave of
 * blocks or more without splitting: by default 2 for GQA groups and 4 (else 2)
 * for groups of one at contexts up to DEC_HEADS_CTX, one head a block for
 * groups of one past it (see the top for the measurements).
 * PAGEDLLM_CUDA_ATTN_HEADS=n: n (2 or 4) wherever it fits, whatever the batch;
 * =1: never.  The default also keeps one head a block under a fixed split
 * count.
 */
#define DEC_HEADS_CTX  256

static int
heads_per_block(const attn_params_t &p, int rows, int max_ctx, int slots)
{
    int      heads = pl_cuda_knobs.attn_heads;
    int64_t  n_kv = p.n_heads / p.group, units = rows * n_kv;

    if (heads == 1 || (heads < 0 && pl_cuda_knobs.attn_splits > 0)) {
        return 1;
    }
    for (int hb = 4; hb >= 2; hb /= 2) {
        if (n_kv % hb != 0 || (hb - 1) * p.group + DEC_SW_ROWS > DEC_ROWS) {
            continue;
        }
        if (heads > 1) {
            if (hb == heads) {
                return hb;
            }
        } else if ((p.group == 1 ? max_ctx <= DEC_HEADS_CTX : hb == 2)
                   && units / hb * 4 >= (int64_t) slots * 3)
        {
            return hb;
        }
    }
    return 1;
}


template <typename T, int D, int STAGES, bool SW, int HB = 1>
static void
launch_decode(pl_cuda_t *cu, attn_params_t p, int rows, int max_ctx)
{
    constexpr int        ROWS = SW ? DEC_SW_ROWS : DEC_ROWS;

    static int           per_sm;
    size_t               smem = (size_t) (DEC_ROWS + STAGES * 2 * DEC_BN)
                                * D * 2;
    auto                 kernel = decode_attention_kernel<T, D, STAGES, SW,
                                                          HB>;
    int                  n_kv = p.n_heads / p.group;
    int64_t              units;
    cudaLaunchConfig_t   cfg = {};
    cudaLaunchAttribute  at[2];
    const attn_params_t  p0 = p;
    int                  cluster;

    if (per_sm == 0) {
        per_sm = blocks_per_sm(kernel, smem, smem);
    }
    if constexpr (SW && STAGES == DEC_STAGES && HB == 1) {
        switch (heads_per_block(p, rows, max_ctx, per_sm * cu->num_sms)) {
        case 4:
            launch_decode<T, D, STAGES, SW, 4>(cu, p0, rows, max_ctx);
            return;
        case 2:
            launch_decode<T, D, STAGES, SW, 2>(cu, p0, rows, max_ctx);
            return;
        }
    }
    p.chunks = (p.group + ROWS - 1) / ROWS;
    p.n_hc = n_kv * p.chunks / HB;
    units = (int64_t) rows * p.n_hc;
    p.num_splits = HB > 1 ? 1
                   : choose_splits(per_sm * cu->num_sms, units, max_ctx,
                                   (int64_t) rows * p.n_heads, D);
    if constexpr (STAGES == DEC_STAGES && HB == 1) {
        if (p.num_splits > 1 && p.tc_min_qlen == 0
            && split_deeper<T, D, SW>(cu, units))
        {
            launch_decode<T, D, DEC_SPLIT_STAGES, SW>(cu, p0, rows, max_ctx);
            return;
        }
    }
    p.num_splits = cluster_splits<T, D, STAGES, SW>(cu, p, units, &cluster);
    p.split_tokens = (max_ctx + p.num_splits - 1) / p.num_splits;
    p.split_tokens = (p.split_tokens + DEC_BN - 1) & ~(DEC_BN - 1);
    p.num_splits = (max_ctx + p.split_tokens - 1) / p.split_tokens;
    p.part_ml = (float2 *) (p.part_acc
                            + (int64_t) rows * p.n_heads * p.num_splits * D);

    /* heads first puts the rows in gridDim.y (at most 65535) */
    p.heads_first = !pl_cuda_knobs.attn_rows_first && rows <= 65535;
    p.dec_flags = p.num_splits > 1 && cluster ? DEC_F_CLUSTER : 0;

    cfg.blockDim = dim3(DEC_THREADS);
    cfg.stream = cu->stream;
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = cu->pdl ? 1 : 0;
    decode_form = SW ? "swapped" : "16 rows";
    decode_splits = p.num_splits;
    decode_cluster = (p.dec_flags & DEC_F_CLUSTER) != 0;
    decode_heads = HB;
    cfg.gridDim = p.heads_first ? dim3(p.n_hc, rows, p.num_splits)
                                : dim3(rows, p.n_hc, p.num_splits);
    cfg.dynamicSmemBytes = smem;
    if (p.dec_flags & DEC_F_CLUSTER) {
        at[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
        at[cfg.numAttrs].val.clusterDim.x = 1;
        at[cfg.numAttrs].val.clusterDim.y = 1;
        at[cfg.numAttrs].val.clusterDim.z = p.num_splits;
        cfg.numAttrs++;
    }
    pl_cuda_check(cudaLaunchKernelEx(&cfg, kernel, p), "decode attention");
    PL_CUDA_LAUNCHED("decode attention");
}


/* the swapped form when every block's query heads fit in its 8 columns */
template <typename T, int D>
static void
launch_form(pl_cuda_t *cu, const attn_params_t &p, int rows, int max_ctx)
{
    if (p.group <= DEC_SW_ROWS) {
        launch_decode<T, D, DEC_STAGES, true>(cu, p, rows, max_ctx);
    } else {
        launch_decode<T, D, DEC_STAGES, false>(cu, p, rows, max_ctx);
    }
}


template <typename T>
static int
launch_head(pl_cuda_t *cu, const attn_params_t *p, int rows, int max_ctx)
{
    if (p->head_dim == 64) {
        launch_form<T, 64>(cu, *p, rows, max_ctx);
        return 1;
    }
    if (p->head_dim == 128) {
        launch_form<T, 128>(cu, *p, rows, max_ctx);
        return 1;
    }
    return 0;
}


int
pl_cuda_decode_attention(pl_cuda_t *cu, const attn_params_t *p, int rows,
    int max_ctx)
{
    if (p->dtype == PL_DT_F16) {
        return launch_head<__half>(cu, p, rows, max_ctx);
    }
    if (p->dtype == PL_DT_BF16) {
        return launch_head<__nv_bfloat16>(cu, p, rows, max_ctx);
    }
    return 0;
}


/* Trace every later launch of the per-item kernel into buf (device
   memory of 2 * DEC_TRACE_N words per block; NULL: stop); returns
   DEC_TRACE_N, or 0 when this build has no trace (all but
   bench/gpu/attention-trace).  Set outside the backend's stream: call it
   with nothing running there. */
extern "C" int
pl_cuda_decode_trace(void *buf)
{
#ifdef PL_DEC_TRACE
    pl_cuda_check(cudaMemcpyToSymbol(dec_trace_buf, &buf, sizeof(buf)),
                  "decode trace");
    return DEC_TRACE_N;
#else
    (void) buf;
    return 0;
#endif
}


extern "C" const char *
pl_cuda_decode_form(void)
{
    return decode_form != NULL ? decode_form : "none";
}


extern "C" int
pl_cuda_decode_splits(void)
{
    return decode_splits;
}


extern "C" int
pl_cuda_decode_cluster(void)
{
    return decode_cluster;
}


/* KV heads per block of the last launch */
extern "C" int
pl_cuda_decode_heads(void)
{
    return decode_heads;
}
