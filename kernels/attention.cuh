/*
 * attention: what the two paged-attention kernels share.
 *
 * paged_attention.cu holds the launcher and the CUDA-core kernel for head
 * sizes the tensor-core kernels do not cover; prefill_attention.cu the
 * tensor-core kernel for the rows of long prefill chunks;
 * decode_attention.cu the tensor-core kernel for every other row.  All
 * read the same parameters and the same causal rule: row r of sequence s
 * (query rows [q0, q1)) sees the first context_lens[s] - (q1 - r) + 1
 * tokens of its context.
 *
 * Scratch layout (cu->attn_scratch): split counters [ATTN_COUNTERS], the
 * prefill tile index [ATTN_TC_SEQS + 1], then the split partials.
 */

#ifndef PL_ATTENTION_CUH
#define PL_ATTENTION_CUH

#include <float.h>

#include "pl_cuda.cuh"

#define ATTN_COUNTERS  (1 << 16)     /* (row, head group) split counters */
#define ATTN_TC_SEQS   (1 << 16)     /* most sequences the prefill kernel
                                        numbers tiles for */
#define ATTN_PREFILL_MIN_QLEN  16    /* query rows that make a prefill */
#define ATTN_MAX_SPLITS   64         /* KV splits of one row at most */
#define ATTN_LOG2E     1.4426950408889634f

#define DEC_F_CLUSTER   1            /* decode: a row's splits are one
                                        thread-block cluster, merged over
                                        distributed shared memory */

/* q, out and the cache hold the activation dtype (dtype: bf16 or fp16);
   kernels templated on T read them as T */
typedef struct {
    void                  *out;
    const void            *q;
    const void            *k_cache;
    const void            *v_cache;
    const int32_t         *query_start;
    const int32_t         *context_lens;
    const int32_t         *block_tables;
    int                   *counters;      /* [ATTN_COUNTERS], zero at rest */
    float                 *part_acc;      /* [rows][n_heads][splits][dim] */
    float2                *part_ml;       /* [rows][n_heads][splits] */
    int32_t               *tile_start;    /* [num_seqs + 1] prefill tiles */
    int                    num_seqs;
    int                    n_heads;
    int                    group;         /* query heads per KV head */
    int                    chunks;        /* head chunks per KV head */
    int                    n_hc;          /* KV heads x chunks (decode) */
    int                    heads_first;   /* decode grid: x = head chunk,
                                             y = row (else x = row) */
    int                    dec_flags;     /* decode: DEC_F_* variants (set
                                             by its launcher only) */
    int                    head_dim;
    int                    log2_block;
    int                    max_blocks;
    int                    split_tokens;
    int                    num_splits;
    int                    tc_min_qlen;   /* rows of sequences with at least
                                             this many query rows go to the
                                             tensor-core kernel; 0: none */
    float                  scale_log2;    /* softmax scale * log2(e) */
    pl_dtype_t             dtype;         /* of q, out and the cache */
} attn_params_t;


/* The last of sequences 0 .. num_seqs - 1 whose start[s] <= x (binary
   search over an ascending array of num_seqs + 1 entries). */
static __device__ __forceinline__ int
attn_search(const int32_t *start, int num_seqs, int x)
{
    int  lo = 0, hi = num_seqs - 1;

    while (lo < hi) {
        int  mid = (lo + hi + 1) >> 1;

        if (start[mid] <= x) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}

/* The sequence that owns row r. */
static __device__ __forceinline__ int
attn_seq_of_row(const attn_params_t &p, int r)
{
    return attn_search(p.query_start, p.num_seqs, r);
}

/* The sequence that owns prefill tile t (p.tile_start numbers them). */
static __device__ __forceinline__ int
attn_seq_of_tile(const attn_params_t &p, int t)
{
    return attn_search(p.tile_start, p.num_seqs, t);
}

/*
 * Programmatic dependent launch (sm_90): wait until the previous kernel
 * of the stream has finished and its writes are visible (a no-op when the
 * kernel was launched without the attribute), and let the next dependent
 * launch begin.
 */
static __device__ __forceinline__ void
attn_grid_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

static __device__ __forceinline__ void
attn_grid_release(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}


/*
 * Fold split partial (e = (max, sum), acc) into a running (mx, sum, v):
 * the online-softmax merge in base 2.  A split over no tokens (sum 0)
 * changes nothing, whatever its other fields hold.
 */
static __device__ __forceinline__ void
attn_fold_split(float &mx, float &sum, float &v, float2 e, float acc)
{
    float  nm, c, w;

    if (!(e.y > 0.0f)) {
        return;
    }
    nm = fmaxf(mx, e.x);
    c = exp2f(mx - nm);
    w = exp2f(e.x - nm);
    sum = sum * c + e.y * w;
    v = v * c + acc * w;
    mx = nm;
}


/*
 * After a split block wrote its partial: the last of the (row, head
 * group)'s split blocks to arrive (atomic counter number unit, reset for
 * the next launch) merges every split's partial into out (T) for heads
 * g0 .. g0+ng-1 of KV head kvh.  Each thread merges whole output
 * elements (attn_merge_elems): it loads the (max, sum) pairs and
 * accumulators of eight splits at a time, all in flight together, and
 * folds them in (attn_fold_split), so the merge waits for one round trip
 * to L2 per eight splits.  Called by all THREADS threads of the block.
 *
 * Ordering: the barrier makes the block's partial writes precede thread
 * 0's counter update, an acquire-release atomic at GPU scope, which
 * releases them to the block that arrives last and acquires the others'
 * for it (the barrier after it extends that to its other threads); with
 * SC (the CUDA-core kernel's; the decode kernel passes false), every
 * thread fences (MEMBAR.SC) before and after instead, which costs each
 * block a full fence on the way out.
 */
#define ATTN_MERGE_BATCH  8
#define ATTN_MERGE_ELEMS  2

/*
 * The merge of output elements [0, n) of the heads from rh0 on: each thread
 * takes E elements THREADS apart at a time and loads the (max, sum) pairs and
 * accumulators of eight splits of all E before folding any, so a group of four
 * heads (512 elements on 128 threads) waits for two round trips per eight
 * splits, not four (the merge at the end of 8 x 16384 x 32/8: 5.1 us with E =
 * 1, 4.1 with E = 4, in the trace of bench/gpu/attention-trace on the H200).
 * E is 2: with 4 the 16-row decode kernel spills and the swapped one takes 146
 * registers, not 126.  Elements past n load element 0 and store nothing.
 */
template <typename T, int THREADS, int E>
static __device__ __forceinline__ void
attn_merge_elems(const attn_params_t &p, int64_t rh0, int n)
{
    int  ns = p.num_splits, hd = p.head_dim;

    for (int i0 = threadIdx.x; i0 < n; i0 += E * THREADS) {
        float  mx[E], sum[E], v[E];

#pragma unroll
        for (int u = 0; u < E; u++) {
            mx[u] = -FLT_MAX;
            sum[u] = 0.0f;
            v[u] = 0.0f;
        }
        for (int s0 = 0; s0 < ns; s0 += ATTN_MERGE_BATCH) {
            float2  e[E][ATTN_MERGE_BATCH];
            float   a[E][ATTN_MERGE_BATCH];

#pragma unroll
            for (int u = 0; u < E; u++) {
                int            i = i0 + u * THREADS < n ? i0 + u * THREADS
                                                        : 0;
                const float2  *ml = p.part_ml + (rh0 + i / hd) * ns;
                const float   *acc = p.part_acc + (rh0 + i / hd) * ns * hd
                                     + i % hd;

#pragma unroll
                for (int j = 0; j < ATTN_MERGE_BATCH; j++) {
                    bool  in = s0 + j < ns;

                    e[u][j] = in ? __ldcg(&ml[s0 + j])
                                 : make_float2(0.0f, 0.0f);
                    a[u][j] = in ? __ldcg(&acc[(int64_t) (s0 + j) * hd])
                                 : 0.0f;
                }
            }
#pragma unroll
            for (int u = 0; u < E; u++) {
#pragma unroll
                for (int j = 0; j < ATTN_MERGE_BATCH; j++) {
                    attn_fold_split(mx[u], sum[u], v[u], e[u][j], a[u][j]);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < E; u++) {
            int  i = i0 + u * THREADS;

            if (i < n) {
                ((T *) p.out)[(rh0 + i / hd) * hd + i % hd] = pl_from_f32<T>(
                    sum[u] > 0.0f ? v[u] / sum[u] : 0.0f);
            }
        }
    }
}


template <typename T, int THREADS, bool SC = true>
static __device__ __forceinline__ void
attn_merge_if_last(const attn_params_t &p, int row, int g0, int ng, int kvh,
    int64_t unit, int *last)
{
    int      ns = p.num_splits, hd = p.head_dim;
    int64_t  rh0 = (int64_t) row * p.n_heads + kvh * p.group + g0;

    if (SC) {
        __threadfence();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int  *cnt = p.counters + unit;
        int   old;

        if (SC) {
            old = atomicAdd(cnt, 1);
        } else {
            asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;"
                         : "=r"(old) : "l"(cnt) : "memory");
        }
        *last = old == ns - 1;
        if (*last) {
            *cnt = 0;
        }
    }
    __syncthreads();
    if (!*last) {
        return;
    }
    if (SC) {
        __threadfence();
    }
    ng = min(ng, p.group - g0);
    if (ng * hd <= THREADS) {
        attn_merge_elems<T, THREADS, 1>(p, rh0, ng * hd);
    } else {
        attn_merge_elems<T, THREADS, ATTN_MERGE_ELEMS>(p, rh0, ng * hd);
    }
}


/*
 * The partial of a split holding no token of its row (it starts past the
 * context): accumulator 0, sum 0, what a split over no tokens computes,
 * written without touching the cache.  Heads h0 .. h0+ng-1 of row; all
 * threads of the block.
 */
static __device__ __forceinline__ void
attn_empty_split(const attn_params_t &p, int row, int h0, int ng)
{
    int64_t  rh0 = (int64_t) row * p.n_heads + h0;

    for (int i = threadIdx.x; i < ng * p.head_dim; i += blockDim.x) {
        int64_t  ps = (rh0 + i / p.head_dim) * p.num_splits + blockIdx.z;

        p.part_acc[ps * p.head_dim + i % p.head_dim] = 0.0f;
        if (i % p.head_dim == 0) {
            p.part_ml[ps] = make_float2(-FLT_MAX, 0.0f);
        }
    }
}


static inline int32_t *
attn_tile_start(pl_cuda_t *cu)
{
    return (int32_t *) cu->attn_scratch + ATTN_COUNTERS;
}

static inline float *
attn_partials(pl_cuda_t *cu)
{
    return (float *) (attn_tile_start(cu) + ATTN_TC_SEQS + 64);
}

#define ATTN_PARTIAL_BYTES  (PL_CUDA_ATTN_SCRATCH \
                             - (ATTN_COUNTERS + ATTN_TC_SEQS + 64) * 4)

/* Tensor-core decode for every row not taken by the prefill kernel;
   returns 0 when it cannot serve this head size. */
int pl_cuda_decode_attention(pl_cuda_t *cu, const attn_params_t *p,
    int rows, int max_ctx);

/* Tensor-core prefill for the sequences with >= p.tc_min_qlen rows;
   returns 0 when it cannot serve this head size (the caller then runs
   every row on CUDA cores). */
int pl_cuda_prefill_attention(pl_cuda_t *cu, attn_params_t *p, int rows);

#endif /* PL_ATTENTION_CUH */
