/*
 * paged_attention: attention of every query row of a batch over its
 * sequence's paged KV cache (pl_ops.h), and the CUDA-core kernel that
 * serves decode rows.
 *
 * Layouts (T, the activation dtype: bf16 or fp16, in every kernel):
 *     q, out     [num_tokens][n_heads][head_dim]
 *     k/v cache  [num_blocks][block_size][n_kv_heads][head_dim]
 * Row r of sequence s sees the first context_lens[s] - (q1 - r) + 1 tokens
 * of its context (causal over the whole context, see attention.cuh).
 *
 * Dispatch: for head sizes 64 and 128, rows of sequences with
 * ATTN_PREFILL_MIN_QLEN query rows or more (prefill chunks) go to the
 * tensor-core kernel of prefill_attention.cu and every other row to the
 * one of decode_attention.cu (not launched at all when batch_upload saw
 * that every sequence is a prefill).  Other head sizes (multiples of 8 up
 * to 256) run every row on the CUDA-core kernel below.
 *
 * Work split of the CUDA-core kernel: one thread block per (row, KV
 * head, head chunk, KV split).  The block computes every query head that
 * shares its KV head (GQA, up to GT of them; more go to further chunks),
 * so each K and V row
 * is read once for all of them.  Its 128 threads form groups of LANES; a
 * group takes UNROLL consecutive tokens per step, each thread loading 16
 * bytes (8 dims) of every K and V row, and the next step's loads are issued
 * before this step's arithmetic (register double buffering).  The block
 * table entries of the split are staged in shared memory first, so no K/V
 * load waits on a table load.  Scores are reduced across the group with
 * shuffles and fed to an online softmax in base 2 (scale folded into q);
 * the groups' states are merged through shared memory at the end.
 *
 * When (rows x heads) cannot fill the GPU, the context is cut into splits,
 * each written as an unnormalised partial (accumulator, max, sum); the
 * last block of a (row, head group) to finish, found with an atomic
 * counter, merges them, so there is no second launch.  Splits are chosen
 * from the kernel's occupancy: fewest waves per unit of work, splits of at
 * least ATTN_SPLIT_MIN tokens (PAGEDLLM_CUDA_ATTN_SPLIT_MIN overrides it,
 * pl_cuda_knobs).
 */

#include <float.h>

#include "attention.cuh"

#define ATTN_THREADS  128
#define ATTN_TBL      128        /* block-table entries staged at a time */
#define ATTN_SPLIT_MIN  128      /* fewest tokens of a split */


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


template <int GT>
struct attn_state {
    float  q[GT][8];
    float  acc[GT][8];
    float  m[GT];
    float  l[GT];
};


/* Load the K and V slices of tokens base + grp * U + u (u < U). */
template <int U>
__device__ __forceinline__ void
load_tokens(const attn_params_t &p, const int32_t *tbl, int b0, int base,
    int hi, int grp, int64_t col, int64_t kv_row, bool dim_ok, uint4 (&kr)[U],
    uint4 (&vr)[U])
{
#pragma unroll
    for (int u = 0; u < U; u++) {
        int  t = base + grp * U + u;

        kr[u] = make_uint4(0, 0, 0, 0);
        vr[u] = make_uint4(0, 0, 0, 0);
        if (t < hi && dim_ok) {
            int64_t  slot = ((int64_t) tbl[(t >> p.log2_block) - b0]
                             << p.log2_block)
                            | (t & ((1 << p.log2_block) - 1));
            int64_t  off = slot * kv_row + col;

            /* 16-bit elements, whichever type: moved as bits */
            kr[u] = __ldg((const uint4 *) ((const uint16_t *) p.k_cache
                                           + off));
            vr[u] = __ldg((const uint4 *) ((const uint16_t *) p.v_cache
                                           + off));
        }
    }
}


/* Online-softmax update of the state with U tokens. */
template <typename T, int LANES, int GT, int U>
__device__ __forceinline__ void
consume_tokens(attn_state<GT> &st, const uint4 (&kr)[U],
    const uint4 (&vr)[U], int first, int hi)
{
    float  s[GT][U];

#pragma unroll
    for (int u = 0; u < U; u++) {
        float  kf[8];

        pl_x8_to_f32<T>(kr[u], kf);
#pragma unroll
        for (int g = 0; g < GT; g++) {
            float  dot = 0.0f;

#pragma unroll
            for (int d = 0; d < 8; d++) {
                dot = fmaf(st.q[g][d], kf[d], dot);
            }
            dot = group_sum<LANES>(dot);
            s[g][u] = first + u < hi ? dot : -INFINITY;
        }
    }
#pragma unroll
    for (int g = 0; g < GT; g++) {
        float  mx = st.m[g], corr;

#pragma unroll
        for (int u = 0; u < U; u++) {
            mx = fmaxf(mx, s[g][u]);
        }
        corr = exp2f(st.m[g] - mx);
        st.m[g] = mx;
        st.l[g] *= corr;
#pragma unroll
        for (int d = 0; d < 8; d++) {
            st.acc[g][d] *= corr;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            s[g][u] = exp2f(s[g][u] - mx);
            st.l[g] += s[g][u];
        }
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
        float  vf[8];

        pl_x8_to_f32<T>(vr[u], vf);
#pragma unroll
        for (int g = 0; g < GT; g++) {
#pragma unroll
            for (int d = 0; d < 8; d++) {
                st.acc[g][d] = fmaf(s[g][u], vf[d], st.acc[g][d]);
            }
        }
    }
}


/* Tokens [lo, hi), whose blocks' table entries from b0 on are in tbl. */
template <typename T, int LANES, int GT, int U>
__device__ __forceinline__ void
attend_range(const attn_params_t &p, attn_state<GT> &st, const int32_t *tbl,
    int b0, int lo, int hi, int64_t col, int64_t kv_row, bool dim_ok)
{
    constexpr int  STEP = ATTN_THREADS / LANES * U;
    int            grp = threadIdx.x / LANES;
    uint4          kr[U], vr[U];

    load_tokens<U>(p, tbl, b0, lo, hi, grp, col, kv_row, dim_ok, kr, vr);
    for (int base = lo; base < hi; base += STEP) {
        uint4  kn[U], vn[U];

        load_tokens<U>(p, tbl, b0, base + STEP, hi, grp, col, kv_row, dim_ok,
                       kn, vn);
        consume_tokens<T, LANES, GT, U>(st, kr, vr, base + grp * U, hi);
#pragma unroll
        for (int u = 0; u < U; u++) {
            kr[u] = kn[u];
            vr[u] = vn[u];
        }
    }
}


/* Rescale the groups' partial states to the block's max; red receives
   each group's rescaled accumulator, st.m the block max, tot_l the
   block's sum. */
template <int LANES, int GT>
__device__ __forceinline__ void
merge_groups(attn_state<GT> &st, float (&tot_l)[GT],
    float (*red)[GT][LANES * 8], float2 (*ml)[GT])
{
    constexpr int  NGRP = ATTN_THREADS / LANES;
    int            grp = threadIdx.x / LANES, lane = threadIdx.x % LANES;

    if (lane == 0) {
#pragma unroll
        for (int g = 0; g < GT; g++) {
            ml[grp][g] = make_float2(st.m[g], st.l[g]);
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
        f = exp2f(st.m[g] - mx);
        st.m[g] = mx;
        tot_l[g] = sum;
#pragma unroll
        for (int d = 0; d < 8; d++) {
            red[grp][g][lane * 8 + d] = st.acc[g][d] * f;
        }
    }
    __syncthreads();
}


template <typename T, int LANES, int GT, int UNROLL>
__global__ void __launch_bounds__(ATTN_THREADS)
paged_attention_kernel(const attn_params_t p)
{
    constexpr int  NGRP = ATTN_THREADS / LANES;

    __shared__ float    red[NGRP][GT][LANES * 8];
    __shared__ float2   ml[NGRP][GT];
    __shared__ int32_t  tbl[ATTN_TBL];
    __shared__ int      last;

    int             row = blockIdx.x, seq = attn_seq_of_row(p, row);
    int             q0 = p.query_start[seq], q1 = p.query_start[seq + 1];
    int             kvh = blockIdx.y / p.chunks;
    int             g0 = (blockIdx.y % p.chunks) * GT;
    int             lane = threadIdx.x % LANES;
    bool            dim_ok = lane * 8 < p.head_dim;
    int             ctx = p.context_lens[seq] - (q1 - row) + 1;
    int             t0 = blockIdx.z * p.split_tokens;
    int             t1 = blockIdx.z + 1 == gridDim.z
                         ? ctx : min(ctx, t0 + p.split_tokens);
    int64_t         kv_row = (int64_t) (p.n_heads / p.group) * p.head_dim;
    int64_t         col = (int64_t) kvh * p.head_dim + lane * 8;
    const int32_t  *table = p.block_tables + (int64_t) seq * p.max_blocks;
    attn_state<GT>  st;
    float           tot_l[GT];

    if (p.tc_min_qlen > 0 && q1 - q0 >= p.tc_min_qlen) {
        return;
    }
    if (t1 <= t0 && p.num_splits > 1) {
        attn_empty_split(p, row, kvh * p.group + g0, min(GT, p.group - g0));
        attn_merge_if_last<T, ATTN_THREADS>(p, row, g0, GT, kvh,
                                            (int64_t) row * gridDim.y
                                            + blockIdx.y,
                                            &last);
        return;
    }
#pragma unroll
    for (int g = 0; g < GT; g++) {
        int  h = kvh * p.group + g0 + g;

        st.m[g] = -FLT_MAX;
        st.l[g] = 0.0f;
#pragma unroll
        for (int d = 0; d < 8; d++) {
            st.q[g][d] = 0.0f;
            st.acc[g][d] = 0.0f;
        }
        if (dim_ok && g0 + g < p.group) {
            uint4  v = *(const uint4 *) ((const T *) p.q
                                         + ((int64_t) row * p.n_heads + h)
                                           * p.head_dim + lane * 8);

            pl_x8_to_f32<T>(v, st.q[g]);
#pragma unroll
            for (int d = 0; d < 8; d++) {
                st.q[g][d] *= p.scale_log2;
            }
        }
    }

    for (int b0 = t0 >> p.log2_block; (b0 << p.log2_block) < t1;
         b0 += ATTN_TBL)
    {
        int  bend = min(b0 + ATTN_TBL, ((t1 - 1) >> p.log2_block) + 1);

        __syncthreads();
        for (int i = threadIdx.x; i < bend - b0; i += ATTN_THREADS) {
            tbl[i] = table[b0 + i];
        }
        __syncthreads();
        attend_range<T, LANES, GT, UNROLL>(p, st, tbl, b0,
                                        max(t0, b0 << p.log2_block),
                                        min(t1, bend << p.log2_block),
                                        col, kv_row, dim_ok);
    }

    merge_groups<LANES, GT>(st, tot_l, red, ml);

    for (int i = threadIdx.x; i < GT * p.head_dim; i += ATTN_THREADS) {
        int      g = i / p.head_dim, d = i % p.head_dim;
        int64_t  rh = (int64_t) row * p.n_heads + kvh * p.group + g0 + g;
        float    v = 0.0f, mg = -FLT_MAX, lg = 0.0f;

        if (g0 + g >= p.group) {
            continue;
        }
#pragma unroll
        for (int j = 0; j < GT; j++) {
            if (j == g) {
                mg = st.m[j];
                lg = tot_l[j];
            }
        }
        for (int j = 0; j < NGRP; j++) {
            v += red[j][g][d];
        }
        if (p.num_splits == 1) {
            ((T *) p.out)[rh * p.head_dim + d] =
                pl_from_f32<T>(lg > 0.0f ? v / lg : 0.0f);
        } else {
            int64_t  ps = rh * p.num_splits + blockIdx.z;

            p.part_acc[ps * p.head_dim + d] = v;
            if (d == 0) {
                p.part_ml[ps] = make_float2(mg, lg);
            }
        }
    }
    if (p.num_splits == 1) {
        return;
    }

    attn_merge_if_last<T, ATTN_THREADS>(p, row, g0, GT, kvh,
                                        (int64_t) row * gridDim.y
                                        + blockIdx.y,
                                        &last);
}


/*
 * How many KV splits: the fewest waves of resident blocks per unit of
 * work, no split under split_min tokens, partials within the scratch.
 */
static int
choose_splits(pl_cuda_t *cu, int slots, int64_t units, int max_ctx,
    int64_t rows_heads, int head_dim)
{
    int      split_min = pl_cuda_knobs.attn_split_min > 0
                         ? pl_cuda_knobs.attn_split_min : ATTN_SPLIT_MIN;
    int64_t  most, fit, s, best = 1;
    double   best_cost = 1e30;

    most = (max_ctx + split_min - 1) / split_min;
    fit = ATTN_PARTIAL_BYTES
          / (rows_heads * (head_dim * sizeof(float) + sizeof(float2)));
    most = most < fit ? most : fit;
    most = most < ATTN_MAX_SPLITS ? most : ATTN_MAX_SPLITS;
    if (units > ATTN_COUNTERS) {
        return 1;
    }
    for (s = 1; s <= most; s++) {
        double  waves = (double) ((units * s + slots - 1) / slots);
        double  cost = waves / (double) s;

        if (cost < best_cost * 0.97) {
            best_cost = cost;
            best = s;
        }
    }
    (void) cu;
    return (int) best;
}


template <typename T, int LANES, int GT>
static void
launch_decode(pl_cuda_t *cu, attn_params_t &p, int rows, int n_kv_heads,
    int max_ctx)
{
    constexpr int  UNROLL = GT >= 8 ? 2 : 4;
    static int     per_sm;
    auto           kernel = paged_attention_kernel<T, LANES, GT, UNROLL>;
    int64_t        units = (int64_t) rows * n_kv_heads * p.chunks;

    if (per_sm == 0) {
        pl_cuda_check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                          &per_sm, kernel, ATTN_THREADS, 0), "attention");
        per_sm = per_sm > 0 ? per_sm : 1;
    }
    p.num_splits = choose_splits(cu, per_sm * cu->num_sms, units, max_ctx,
                                 (int64_t) rows * p.n_heads, p.head_dim);
    p.split_tokens = (max_ctx + p.num_splits - 1) / p.num_splits;
    p.split_tokens = (p.split_tokens + 31) & ~31;
    p.num_splits = (max_ctx + p.split_tokens - 1) / p.split_tokens;
    p.part_ml = (float2 *) (p.part_acc
                            + (int64_t) rows * p.n_heads * p.num_splits
                              * p.head_dim);
    kernel<<<dim3(rows, n_kv_heads * p.chunks, p.num_splits), ATTN_THREADS,
             0, cu->stream>>>(p);
    PL_CUDA_LAUNCHED("attention");
}


template <typename T, int LANES>
static void
launch_lanes(pl_cuda_t *cu, attn_params_t &p, int gt, int rows,
    int n_kv_heads, int max_ctx)
{
    switch (gt) {
    case 1:
        launch_decode<T, LANES, 1>(cu, p, rows, n_kv_heads, max_ctx);
        break;
    case 2:
        launch_decode<T, LANES, 2>(cu, p, rows, n_kv_heads, max_ctx);
        break;
    case 4:
        launch_decode<T, LANES, 4>(cu, p, rows, n_kv_heads, max_ctx);
        break;
    default:
        launch_decode<T, LANES, 8>(cu, p, rows, n_kv_heads, max_ctx);
        break;
    }
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
    const char  *sizes;

    if (head_dim <= 0 || head_dim % 8 != 0 || head_dim > 256) {
        pl_cuda_fail("attention", "head_dim must be a multiple of 8 "
                     "up to 256");
    }
    if (!pl_block_size_ok("cuda", block_size, &sizes)) {
        pl_cuda_fail("attention block_size", sizes);
    }
    if (n_kv_heads <= 0 || n_heads % n_kv_heads != 0) {
        pl_cuda_fail("attention", "n_heads must be a multiple of "
                     "n_kv_heads");
    }
}


/* every row on the CUDA-core kernel */
template <typename T>
static void
launch_cuda_cores(pl_cuda_t *cu, attn_params_t &p, int rows, int n_kv_heads,
    int max_ctx)
{
    int  gt = pow2_at_least(p.group, 1, 8);
    int  lanes = pow2_at_least(p.head_dim / 8, 4, 32);

    p.chunks = (p.group + gt - 1) / gt;
    switch (lanes) {
    case 4:
        launch_lanes<T, 4>(cu, p, gt, rows, n_kv_heads, max_ctx);
        break;
    case 8:
        launch_lanes<T, 8>(cu, p, gt, rows, n_kv_heads, max_ctx);
        break;
    case 16:
        launch_lanes<T, 16>(cu, p, gt, rows, n_kv_heads, max_ctx);
        break;
    default:
        launch_lanes<T, 32>(cu, p, gt, rows, n_kv_heads, max_ctx);
        break;
    }
}


void
pl_cuda_attention(pl_backend_t *be, void *out, const void *q,
    const void *k_cache, const void *v_cache, const pl_batch_t *batch,
    int n_heads, int n_kv_heads, int head_dim, int block_size, float scale)
{
    pl_cuda_t      *cu = pl_cuda(be);
    attn_params_t   p;
    int             rows = batch->num_tokens;
    int             max_ctx = batch->max_context_len > 0
                              ? batch->max_context_len : 1;

    check_shape(n_heads, n_kv_heads, head_dim, block_size);
    if (rows <= 0 || batch->num_seqs <= 0) {
        return;
    }
    p.out = out;
    p.q = q;
    p.k_cache = k_cache;
    p.v_cache = v_cache;
    p.dtype = be->act_dtype;
    p.query_start = batch->query_start;
    p.context_lens = batch->context_lens;
    p.block_tables = batch->block_tables;
    p.counters = (int *) cu->attn_scratch;
    p.part_acc = attn_partials(cu);
    p.tile_start = NULL;
    p.num_seqs = batch->num_seqs;
    p.n_heads = n_heads;
    p.group = n_heads / n_kv_heads;
    p.head_dim = head_dim;
    p.log2_block = log2_exact(block_size);
    p.max_blocks = batch->max_blocks_per_seq;
    p.scale_log2 = scale * ATTN_LOG2E;
    p.tc_min_qlen = 0;

    if (batch->max_query_len >= ATTN_PREFILL_MIN_QLEN
        && pl_cuda_prefill_attention(cu, &p, rows)
        && batch == &cu->batch && cu->batch_min_qlen >= p.tc_min_qlen)
    {
        return;
    }
    if (pl_cuda_decode_attention(cu, &p, rows, max_ctx)) {
        return;
    }
    PL_CUDA_ACT(be, "attention", launch_cuda_cores, cu, p, rows, n_kv_heads,
                max_ctx);
}
