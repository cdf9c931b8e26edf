/*
 * decode_attention: paged attention for decode rows (and the rows of short
 * query chunks) on tensor cores, head sizes 64 and 128, bf16 or fp16
 * (T: MMA operands of the activation dtype, fp32 accumulators).
 *
 * Layouts as in paged_attention.cu.  Work split: one thread block per (row,
 * KV head, group of up to 16 query heads (8 in the swapped form below), KV
 * split).  The query heads that share the KV head form the 16 rows of the
 * MMA's A operand (GQA: each K and V row is read once for all of them; rows
 * past the group are zero).  The block walks its split of the context in
 * tiles of 64 tokens, gathered through the block table into shared memory
 * with 16-byte cp.async, several tiles in flight; each of the four warps
 * takes 16 tokens of a tile: S = Q K^T, online softmax in base 2 (the
 * accumulator rescaled only when a row's max moved), O += P V.  The split's
 * block-table entries are staged in shared memory first (a page of DEC_TBL
 * at a time, loaded together with the context length and the query rows
 * on the guess that row r is sequence r), so no K/V copy waits on a table
 * load and the first copies wait for one round trip.  At the end the warps'
 * states are merged through shared memory.  With several splits, the
 * splits of a (row, head group) are by default one thread-block cluster
 * (cluster_merge: each block leaves its partial in its shared memory,
 * and after a cluster barrier each folds a share of the output from all
 * of them over distributed shared memory); where the clusters would not
 * all fit on the GPU at once, or the split count is fixed, each block
 * writes a partial to global memory and the last one to finish merges
 * them (attn_merge_if_last: ordered by one acquire-release atomic per
 * block, then one round trip for the partials).  A cluster is sized
 * for about one block per SM (cluster_splits, split_deeper): 1 x 4096 x
 * 32/32 reads at 2.98-3.02 TB/s with clusters of 4 against 2.86-2.89
 * for session 8's kernel, 8 x 16384 x 32/8 at 4.26-4.27 against 4.16-4.17
 * (the H200, 2026-11-29, session 9's last calls; docs/BENCHMARKS.md).
 * Clusters of 8 measured 25% slower in session 5: the H200 holds 30
 * clusters of 8 of these blocks at once, so 1 x 4096's 32 took two
 * waves.  The merging block chosen ahead by tickets (the
 * others leaving without waiting for an atomic) was no faster than the
 * last one merging.  A split that starts past its row's context (a
 * short sequence beside a long one, or max_context_len rounded up for a
 * CUDA graph) writes an empty partial without loading anything.
 *
 * Swapped operands, for blocks whose query heads fit in 8 (every group of
 * up to 8: MHA, and GQA as in Llama-3 and Mistral).  Rows 8..15 of such a
 * block are padding in the form above: half of its tensor-core work, the
 * softmax of half of its rows and half of its O registers are wasted.
 * The swapped form (SW) makes the tokens the MMA's M and the query heads
 * its N = 8: S^T = K Q^T (A: 16 tokens x 16 dims of the K tile, B: Q^T,
 * a plain ldmatrix of Q), the online softmax per column (a lane holds two
 * query heads; their max and sum over the tokens run across the eight
 * lanes of a column), O^T += V^T P^T (A: ldmatrix.trans of the V tile, B:
 * P^T, the packed S^T fragment transposed in registers by movmatrix).
 * Each product takes D/16 MMAs per warp and 16 tokens instead of D/8, and
 * O^T lives in D/4 fp32 registers per thread instead of D/2.  Blocks hold
 * 8 query heads then; the copies, the pipeline, the splits and the merge
 * are the same code for both forms.
 *
 * Several KV heads a block (HB = 2 or 4, swapped form, one split): the
 * block takes KV heads kvh .. kvh + HB - 1 of its row, a tile is 64 / HB
 * tokens of each of them (stage row r: token r % (64 / HB) of head
 * r / (64 / HB)), and warp w computes head w / (4 / HB) over its 16
 * tokens, with that head's query rows (the group's, from row
 * (w / (4 / HB)) x group of the Q buffer) as its B operand; the warps of
 * a head are merged at the end as the four are with HB = 1.  A thread's
 * copies of a tile are then HB heads' rows of the same tokens, side by
 * side in their slots (one table lookup for them).  For short contexts
 * and GQA groups, where it measured faster (heads_per_block).  It does
 * not close the shuffled layout's loss against the engine's layout: a
 * 16-token tile of four heads reads one physical block instead of four,
 * yet 256 x 1024 x 32/32 read 0.4% slower that way; blocks shuffled
 * only within aligned groups of 4, 16 or 64 (PAGEDLLM_BENCH_BLOCKS=
 * local:N) read as fast as the engine's layout, so the loss follows how
 * far apart in memory the blocks read at one time lie, not how many a
 * tile touches.  Clusters of 2, 4 or 8 blocks along the heads of a row
 * (one GPC for the blocks reading the same physical blocks) were up to
 * 18% slower (session 10).
 *
 * Instructions, not bytes, bounded the kernel (ncu, 1 x 4096: 2 blocks of
 * 4 warps per SM, each warp issuing every 5.8 cycles, about 740
 * instructions per warp and tile, more than half of them the address
 * arithmetic of the copies); each thread now copies the same two chunks
 * of every 16th (head 64: 32nd) token row, with its bases computed once
 * (dec_copy_t), and the exponentials run on ex2.approx.
 *
 * Pipeline: DEC_STAGES tile buffers, DEC_STAGES - 1 tiles in flight while
 * one is computed, one barrier per tile (a stage is refilled only after
 * every warp has passed the barrier that follows its last use).  One bulk
 * copy per 256-byte token row through the copy engine measured 2.4 times
 * slower than these cp.async; bulk tensor copies (TMA) of 16-row boxes,
 * 16 per tile, 5-7% slower on every shape; each warp copying its own 16
 * rows and waiting at __syncwarp instead of the block barrier, and the
 * third stage's tile issued from the start, no faster (the H200,
 * docs/BENCHMARKS.md, session 8).  A launch that splits its contexts
 * runs on DEC_SPLIT_STAGES (4) stages, one block per SM with three tiles
 * in flight, instead of two blocks of two, where its clusters fit there
 * too (split_deeper: 8 x 16384's clusters of 2 read 4.18 TB/s on four
 * stages in one call and 4.11 on three in another, the global merge
 * 4.08 in both; 1 x 4096's clusters of 4 do not fit on four stages, and
 * its clusters of 3 there read 2.3% slower than of 4 on three).
 * Splits: as many as one wave of
 * resident blocks holds, no split under SPLIT_MIN tokens (256: splitting
 * a short context finer saves less than the merge costs: at batch 1 in
 * the 256 bucket, one split ran 8.2 us against 10.4 for four of 64, and
 * the 7B decode step at batch 1 took 5.10 ms against 5.19, on the H200),
 * at most ATTN_MAX_SPLITS; from max_context_len and the batch shape
 * only, so a CUDA graph replays the choice for any context within its
 * bucket.  Splits are equal: the splits launched last do not end last
 * (their late start is caught up), and the first splits made a tile
 * longer, the last a tile shorter, measured no faster.
 *
 * Launch order and overlap.  Blocks are numbered rows first (blockIdx.x is
 * the row) or, with PAGEDLLM_CUDA_ATTN_ORDER=1, heads first, so that the
 * blocks resident at one moment read the KV heads of the same few
 * physical blocks, which lie side by side in memory (a page of 16 tokens
 * holds every KV head).  With PAGEDLLM_CUDA_ATTN_PDL=1 the kernel is
 * launched as a programmatic dependent launch: its blocks may start while
 * the previous kernel drains, stage their block-table page (batch arrays
 * come from a host copy that precedes the previous kernel) and only then
 * wait (griddepcontrol.wait) before touching q, the cache or the outputs;
 * with =2 a block also releases the next such launch once it has loaded
 * its last tile.
 *
 * Knobs read at every call (benchmarks and tests switch them in one
 * process; a CUDA graph keeps the ones of its capture):
 * PAGEDLLM_CUDA_ATTN_STAGES (2, 3 or 4; default 3; bf16 only: fp16 is
 * built with the default alone),
 * PAGEDLLM_CUDA_ATTN_SHORT_CTX and PAGEDLLM_CUDA_ATTN_SHORT_STAGES (when
 * max_context_len <= SHORT_CTX, SHORT_STAGES stages: fewer stages, more
 * resident blocks to hide each short block's start; default off),
 * PAGEDLLM_CUDA_ATTN_SPLIT_MIN (default 256; 128 and 64 before),
 * PAGEDLLM_CUDA_ATTN_SPLITS (a fixed count), PAGEDLLM_CUDA_ATTN_ORDER and
 * PAGEDLLM_CUDA_ATTN_PDL (above; default ORDER=1 and PDL=2: the best
 * setting of the sweep in tools/gpu-run.sh on the H200, 2026-11-29,
 * 0.5-1.7% over rows first without PDL on every shape of
 * bench/gpu/attention; 0 turns each off), PAGEDLLM_CUDA_ATTN_L2PF=1
 * (cp.async with the L2::256B prefetch hint on full tiles; default 0) and
 * PAGEDLLM_CUDA_ATTN_FENCE=1 (the split merge after a __threadfence in
 * every thread, as before; default 0: one acquire-release atomic) and
 * PAGEDLLM_CUDA_ATTN_SWAP=0 (the 16-row form for every group; default 1:
 * the swapped form whenever the group fits in 8) and
 * PAGEDLLM_CUDA_ATTN_PERSIST=1, PAGEDLLM_CUDA_ATTN_PERSIST_CTX and
 * PAGEDLLM_CUDA_ATTN_PERSIST_BLOCKS (the persistent kernel below; default
 * off) and PAGEDLLM_CUDA_ATTN_CLUSTER (n = 2..8: n splits in clusters of
 * n whenever the context splits; 0: the global merge always; default:
 * about one block per SM where the clusters fit, see cluster_splits) and
 * PAGEDLLM_CUDA_ATTN_SPLIT_STAGES (3: splitting launches on the default
 * stages too; default 4).  Touching each physical block of the tile one,
 * two or four past the one issued (one L2 prefetch per block, to have
 * its address translated early) measured 0.3-0.6% slower on the
 * multi-wave shapes and no faster on 1 x 4096 (session 9): removed.
 * Also measured and removed (session 11, docs/BENCHMARKS.md): reading
 * each staged table page's blocks in the order of their physical numbers
 * (in every launch: slower on every shape, by 5% on 1 x 4096 and 8 x
 * 16384; in one-wave launches only: as slow there); the cluster
 * merge done by rank 0 alone, the others writing their partials into its
 * shared memory (1 x 4096 2.3% slower); and the persistent kernel taking
 * split items from a counter, to even out the SMs' unequal shares of the
 * memory that end a one-wave launch late (8-31% slower where it split).
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


/* the split merge, ordered by one acquire-release atomic per block, or
   (PAGEDLLM_CUDA_ATTN_FENCE=1) by every thread's __threadfence */
template <typename T>
static __device__ __forceinline__ void
dec_merge(const attn_params_t &p, int row, int g0, int ng, int kvh,
    int64_t unit, int *last)
{
    if (p.dec_flags & DEC_F_FENCE_SC) {
        attn_merge_if_last<T, DEC_THREADS, true>(p, row, g0, ng, kvh, unit,
                                                 last);
    } else {
        attn_merge_if_last<T, DEC_THREADS, false>(p, row, g0, ng, kvh, unit,
                                                  last);
    }
}


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
 * all DEC_CPT chunks of K and of V (the address arithmetic of one copy
 * per row and chunk was half of the kernel's instructions).  The rows a
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
    int                   pf;        /* cp.async with the L2::256B hint */
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
    cp.pf = (p.dec_flags & DEC_F_L2PF) != 0;
}


/* cp_async16 with the L2::256B prefetch hint (a token's 256-byte head row
   fetched from DRAM in one piece) */
static __device__ __forceinline__ void
cp_async16_pf(uint32_t dst, const void *src, bool valid)
{
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(valid ? 16 : 0));
}


/* Copy the K and V rows of tokens [first, first + BN / HB) of HB KV
   heads into a stage with 16-byte cp.async (zero past t1 unless FULL:
   the tile lies below t1), as one commit group: row r of the stage is
   token r % (BN / HB) of head r / (BN / HB), so with HB > 1 one token's
   rows of HB heads, side by side in its slot, are copied together (and
   its slot is looked up once). */
template <int D, bool FULL, bool PF, int HB = 1>
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

            if (PF) {
                cp_async16_pf(ks + so, cp.k + off + go, valid);
                cp_async16_pf(vs + so, cp.v + off + go, valid);
            } else {
                cp_async16(ks + so, cp.k + off + go, valid);
                cp_async16(vs + so, cp.v + off + go, valid);
            }
        }
    }
}


template <int D, int HB = 1>
static __device__ __forceinline__ void
issue_tile(const attn_params_t &p, const dec_copy_t &cp, const int32_t *tbl,
    int b0, int first, int t1, uint32_t ks, uint32_t vs)
{
    if (first + DEC_BN / HB <= t1) {
        if (cp.pf) {
            issue_rows<D, true, true, HB>(p, cp, tbl, b0, first, t1, ks, vs);
        } else {
            issue_rows<D, true, false, HB>(p, cp, tbl, b0, first, t1, ks,
                                           vs);
        }
    } else {
        issue_rows<D, false, false, HB>(p, cp, tbl, b0, first, t1, ks, vs);
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
 * The cluster merge (PAGEDLLM_CUDA_ATTN_CLUSTER=n): the splits of a (row,
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
 * cluster merge (per-item kernel only: orows is ROWS there), in the
 * block's own shared memory past the warps' rows (heads past ng are
 * padding and never leave registers).  Through shared memory at ob (the
 * tiles' own, reused, or a region of its own in the persistent kernel):
 * each warp's O, scaled to the block's max, in orows (>= ng) rows of D +
 * DEC_OPAD fp32, then each warp's (max, sum) per head.  A lane's head h
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
    float (&m)[2], float (&l)[2], float *ob, int orows, int row, int kvh,
    int g0, int ng, int split, int warp, int lane)
{
    constexpr int  ROWS = SW ? DEC_SW_ROWS : DEC_ROWS;
    constexpr int  OD = D + DEC_OPAD;
    constexpr int  WPH = 4 / HB;

    float2  (*ml)[ROWS] = (float2 (*)[ROWS]) (ob + 4 * orows * OD);
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
                float  *orow = ob + (warp * orows + r) * OD;

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
            v += ob[(w * orows + r) * OD + d];
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
        dec_merge<T>(p, row, g0, ng, kvh, row * p.n_hc + hc, &last);
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
    if (p.pdl_trigger) {
        attn_grid_release();
    }

    finish_block<T, D, SW, HB>(p, o, m, l, (float *) dec_smem, ROWS, row,
                               kvh, g0, ng, blockIdx.z, warp, lane);
    dec_trace(DEC_TR_FINISH);
    if (HB > 1 || p.num_splits == 1) {
        dec_trace(DEC_TR_END, 0);
        return;
    }
    if (!(p.dec_flags & DEC_F_CLUSTER)) {
        dec_merge<T>(p, row, g0, ng, kvh, row * p.n_hc + hc, &last);
        dec_trace(DEC_TR_END, last);
        return;
    }
cluster:
    cluster_merge<T, D, SW>(p, (float *) dec_smem, row, kvh, g0, ng);
    dec_trace(DEC_TR_END, 1);
}


/*
 * The persistent form of the swapped kernel (off by default), for
 * batches of more items ((row, KV head) pairs, one split each) than one
 * wave of blocks holds.  There a block per item starts with nothing in
 * flight: it finds its sequence, stages its table page, waits for its
 * first tiles, and at its end drains its pipeline and merges its warps
 * with no copy outstanding.  The idea was that blocks of a wave, started
 * together, would meet in lockstep and leave the memory idle at each
 * meeting (a split in two, which made each item's work half as long,
 * made the large shapes 3% slower on the H200).  Here one wave of blocks
 * walks the items (block b takes b, b + gridDim.x, ...), and the copy
 * pipeline runs on across them: the tiles of a block's next item are in
 * flight while it computes the last tiles of the current one and merges
 * its warps.  Measured (see the launcher) it won at short contexts and
 * lost on long ones, so the per-item kernel stays the default.
 *
 * The issue side (pers_issue_t) sets an item up when it reaches its first
 * tile: it copies the item's Q into the Q buffer of the item's ring slot
 * (k % STAGES for the block's k-th item, committed with the item's first
 * tile), publishes the item's context end and tile count in the slot,
 * and loads the next item's query rows and context length and copies its
 * first table page into the other of two table buffers, committed with
 * this tile; so when the next item's first tile is issued, at least
 * STAGES - 1 tiles later, all of that has arrived and the block does not
 * stop (a block that did, with the others of its wave in step, was 1-2%
 * slower on the long shapes than a block per item).  Otherwise (the
 * guess was wrong, or the item had fewer tiles) the block drains its
 * copies and stages the page as the per-item kernel does.  A tile is
 * issued STAGES - 1 tiles ahead of its computation whatever item it
 * belongs to, so at most STAGES items are between the two sides and a
 * slot is reused only after its item's Q has reached registers.  The
 * warps' merge (finish_block) has shared memory of its own, since the
 * stages hold the next item's tiles: rows for the group's query heads
 * only, which is why the form serves groups of up to DEC_PERS_GROUP
 * heads (more would cost a block of occupancy at the default stages).
 * One split per item: the launcher takes this form only when items
 * outnumber the wave, where it splits no context.
 */
#define DEC_PERS_GROUP  4
#define DEC_PERS_TBL    256     /* table entries per buffer (two fit
                                   beside two blocks' stages) */

typedef struct {
    int              w;          /* item being issued */
    int              k;          /* its number among the block's items */
    int              j;          /* next tile of it */
    int              ntiles;
    int              t1;         /* its context end */
    int              b0;         /* first entry of its staged table page */
    int              tb;         /* its table buffer (of two) */
    const int32_t   *table;
    dec_copy_t       cp;
    /* the next item's, loaded ahead on the guess that its row is its
       sequence: query rows, context length, and (tile group pre_gi) its
       first table page in the other buffer; pre_gi < 0: none */
    int              nseq, nq0, nq1, nctx, pre_gi;
} pers_issue_t;


/* row and KV head of item w, in the launch order's numbering */
static __device__ __forceinline__ void
pers_item(const attn_params_t &p, int w, int &row, int &kvh)
{
    if (p.heads_first) {
        kvh = w % p.n_hc;
        row = w / p.n_hc;
    } else {
        row = w % p.dec_rows;
        kvh = w / p.dec_rows;
    }
}


/* shared memory of the persistent form: Q buffers (STAGES), tiles
   (STAGES), the merge's rows (4 warps x group) and (max, sum) pairs */
#define DEC_PERS_QB(D)  (DEC_SW_ROWS * (D) * 2)
#define DEC_PERS_TB(D)  (2 * DEC_BN * (D) * 2)

static size_t
pers_smem(int d, int stages, int group)
{
    return (size_t) stages * (DEC_PERS_QB(d) + DEC_PERS_TB(d))
           + 4 * group * (d + DEC_OPAD) * sizeof(float)
           + 4 * DEC_SW_ROWS * sizeof(float2);
}


/* cp.async of 4 bytes (a block-table entry) */
static __device__ __forceinline__ void
cp_async4(uint32_t dst, const void *src)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n"
                 :: "r"(dst), "l"(src));
}


/* Set item st.w up (see above) as the block's st.k-th, its first tile
   being the block's tile gi. */
template <typename T, int D, int STAGES>
static __device__ __forceinline__ void
pers_setup(const attn_params_t &p, pers_issue_t &st,
    int32_t (*tbl)[DEC_PERS_TBL], int2 *ring, uint32_t base, int items,
    int gi)
{
    int       row, kvh, q0, q1, ctx, seq;
    uint32_t  qs = base + (st.k % STAGES) * DEC_PERS_QB(D);

    pers_item(p, st.w, row, kvh);
    st.tb ^= 1;
    if (st.pre_gi >= 0 && st.pre_gi + STAGES - 1 <= gi
        && st.nq0 <= row && row < st.nq1)
    {
        seq = st.nseq;
        q0 = st.nq0;
        q1 = st.nq1;
        ctx = st.nctx;
    } else {
        /* no copy of the block may still be writing the buffer */
        cp_async_wait<0>();
        seq = dec_seq_of_row<DEC_PERS_TBL>(p, row, q0, q1, ctx, tbl[st.tb],
                                           0, p.max_blocks);
    }
    st.table = p.block_tables + (int64_t) seq * p.max_blocks;
    st.b0 = 0;
    st.j = 0;
    st.t1 = ctx - (q1 - row - 1);
    /* a row sees at least its own token; one (masked) tile regardless,
       so that both sides count the same tiles */
    st.ntiles = max(1, (st.t1 + DEC_BN - 1) / DEC_BN);
    copy_init<D>(st.cp, p, kvh);
    attn_grid_wait();
    copy_q<T, D, DEC_SW_ROWS>(p, qs, row, kvh, 0, p.group);
    if (threadIdx.x == 0) {
        ring[st.k % STAGES] = make_int2(st.t1, st.ntiles);
    }

    st.pre_gi = -1;
    if (st.w + (int) gridDim.x < items) {
        const int32_t  *nt;
        uint32_t        dst = smem_addr(tbl[st.tb ^ 1]);
        int             n = min(DEC_PERS_TBL, p.max_blocks);

        pers_item(p, st.w + gridDim.x, row, kvh);
        st.nseq = min(row, p.num_seqs - 1);
        st.nq0 = p.query_start[st.nseq];
        st.nq1 = p.query_start[st.nseq + 1];
        st.nctx = p.context_lens[st.nseq];
        nt = p.block_tables + (int64_t) st.nseq * p.max_blocks;
        for (int i = threadIdx.x; i < n; i += DEC_THREADS) {
            cp_async4(dst + i * 4, nt + i);
        }
        st.pre_gi = gi;
    }
}


/* Issue the block's tile number gi (one commit group, empty past its
   last item), setting the next item up when the current one is done. */
template <typename T, int D, int STAGES>
static __device__ __forceinline__ void
pers_issue(const attn_params_t &p, pers_issue_t &st,
    int32_t (*tbl)[DEC_PERS_TBL], int2 *ring, uint32_t base, int items,
    int gi)
{
    uint32_t  ks = base + STAGES * DEC_PERS_QB(D)
                   + (gi % STAGES) * DEC_PERS_TB(D);
    int       first;

    if (st.w < items && st.j == st.ntiles) {
        st.w += gridDim.x;
        st.k++;
        if (st.w < items) {
            pers_setup<T, D, STAGES>(p, st, tbl, ring, base, items, gi);
        } else if (p.pdl_trigger) {
            attn_grid_release();
        }
    }
    if (st.w >= items) {
        cp_async_commit();
        return;
    }
    first = st.j * DEC_BN;
    page_for_tile<DEC_PERS_TBL>(p, tbl[st.tb], st.table, st.b0,
                                p.max_blocks, first, st.t1);
    issue_tile<D>(p, st.cp, tbl[st.tb], st.b0, first, st.t1, ks,
                  ks + DEC_BN * D * 2);
    st.j++;
}


template <typename T, int D, int STAGES>
__global__ void __launch_bounds__(DEC_THREADS)
decode_persistent_kernel(const attn_params_t p)
{
    extern __shared__ __align__(128) unsigned char dec_smem[];
    __shared__ int32_t  tbl[2][DEC_PERS_TBL];
    __shared__ int2     ring[STAGES];        /* (t1, ntiles) per slot */

    uint32_t      base = smem_addr(dec_smem);
    float        *ob = (float *) (dec_smem + STAGES * (DEC_PERS_QB(D)
                                                      + DEC_PERS_TB(D)));
    int           items = p.dec_rows * p.n_hc;
    int           warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int           wc = blockIdx.x, kc = 0, jc = 0, ntc = 1, t1c = 0;
    uint32_t      qf[D / 32][4];
    float         o[D / 16][4], m[2], l[2];
    pers_issue_t  st;

    st.w = blockIdx.x;
    st.k = 0;
    st.tb = 1;
    st.pre_gi = -1;
    pers_setup<T, D, STAGES>(p, st, tbl, ring, base, items, 0);
#pragma unroll
    for (int g = 0; g < STAGES - 1; g++) {
        pers_issue<T, D, STAGES>(p, st, tbl, ring, base, items, g);
    }
    for (int i = 0; ; i++) {
        uint32_t  ks = base + STAGES * DEC_PERS_QB(D)
                       + (i % STAGES) * DEC_PERS_TB(D);

        cp_async_wait<STAGES - 2>();
        __syncthreads();
        pers_issue<T, D, STAGES>(p, st, tbl, ring, base, items,
                                 i + STAGES - 1);
        if (jc == 0) {
            int2  e = ring[kc % STAGES];

            t1c = e.x;
            ntc = e.y;
            start_state<D, true>(qf, o, m, l,
                                 base + (kc % STAGES) * DEC_PERS_QB(D), lane);
        }
        if (jc + 1 < ntc) {
            form_tile<T, D, true, false>(o, m, l, qf, ks, ks + DEC_BN * D * 2,
                                         jc * DEC_BN, t1c, p.scale_log2,
                                         warp, warp * 16, lane);
        } else {
            form_tile<T, D, true, true>(o, m, l, qf, ks, ks + DEC_BN * D * 2,
                                        jc * DEC_BN, t1c, p.scale_log2,
                                        warp, warp * 16, lane);
        }
        if (++jc == ntc) {
            int  row, kvh;

            pers_item(p, wc, row, kvh);
            finish_block<T, D, true>(p, o, m, l, ob, p.group, row, kvh, 0,
                                     p.group, 0, warp, lane);
            wc += gridDim.x;
            kc++;
            jc = 0;
            if (wc >= items) {
                break;
            }
        }
    }
    cp_async_wait<0>();
}


/* the form of the last launch, for the tests: "swapped" or "16 rows";
   its number of KV splits; whether it was the persistent kernel */
static const char  *decode_form;
static int          decode_splits;
static int          decode_persistent;
static int          decode_cluster;
static int          decode_heads;


/* The launch knobs, read at every call (see the header). */
typedef struct {
    int  stages;
    int  short_ctx;
    int  short_stages;
    int  split_min;
    int  splits;
    int  heads_first;
    int  pdl;
    int  l2pf;
    int  fence_sc;
    int  swap;
    int  persist;
    int  persist_ctx;
    int  persist_blocks;
    int  cluster;
    int  split_stages;
    int  heads;
} dec_knobs_t;


static int
env_or(const char *name, int dflt)
{
    const char  *v = getenv(name);

    return v != NULL && *v != '\0' ? atoi(v) : dflt;
}


static dec_knobs_t
read_knobs(void)
{
    dec_knobs_t  k;

    k.stages = env_or("PAGEDLLM_CUDA_ATTN_STAGES", DEC_STAGES);
    k.short_ctx = env_or("PAGEDLLM_CUDA_ATTN_SHORT_CTX", 0);
    k.short_stages = env_or("PAGEDLLM_CUDA_ATTN_SHORT_STAGES", 2);
    k.split_min = env_or("PAGEDLLM_CUDA_ATTN_SPLIT_MIN", 256);
    k.splits = env_or("PAGEDLLM_CUDA_ATTN_SPLITS", 0);
    k.heads_first = env_or("PAGEDLLM_CUDA_ATTN_ORDER", 1) == 1;
    k.pdl = env_or("PAGEDLLM_CUDA_ATTN_PDL", 2);
    k.l2pf = env_or("PAGEDLLM_CUDA_ATTN_L2PF", 0) == 1;
    k.fence_sc = env_or("PAGEDLLM_CUDA_ATTN_FENCE", 0) == 1;
    k.swap = env_or("PAGEDLLM_CUDA_ATTN_SWAP", 1) != 0;
    k.persist = env_or("PAGEDLLM_CUDA_ATTN_PERSIST", 0) != 0;
    k.persist_ctx = env_or("PAGEDLLM_CUDA_ATTN_PERSIST_CTX", 0);
    k.persist_blocks = env_or("PAGEDLLM_CUDA_ATTN_PERSIST_BLOCKS", 0);
    k.split_stages = env_or("PAGEDLLM_CUDA_ATTN_SPLIT_STAGES",
                            DEC_SPLIT_STAGES);
    k.cluster = env_or("PAGEDLLM_CUDA_ATTN_CLUSTER", -1);
    k.cluster = k.cluster >= 2 && k.cluster <= 8 ? k.cluster
                : k.cluster < 0 ? -1 : 0;
    k.split_min = k.split_min > 0 ? k.split_min : 256;
    k.heads = env_or("PAGEDLLM_CUDA_ATTN_HEADS", -1);
    return k;
}


/*
 * How many KV splits: as many as one wave of resident blocks holds (long
 * splits beat short ones once the GPU is full: each split costs a partial
 * and a share of the merge), no split under split_min tokens, partials
 * within the scratch.
 */
static int
choose_splits(const dec_knobs_t &k, int slots, int64_t units, int max_ctx,
    int64_t rows_heads, int head_dim)
{
    int64_t  most, fit, want = slots / units;

    if (units > ATTN_COUNTERS) {
        return 1;
    }
    most = (max_ctx + k.split_min - 1) / k.split_min;
    fit = ATTN_PARTIAL_BYTES
          / (rows_heads * (head_dim * sizeof(float) + sizeof(float2)));
    most = most < fit ? most : fit;
    most = most < ATTN_MAX_SPLITS ? most : ATTN_MAX_SPLITS;
    want = k.splits > 0 ? k.splits : want;
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


/*
 * The persistent form when it serves the batch (see the kernel): swapped
 * operands, groups of up to DEC_PERS_GROUP, no prefill rows beside, one
 * split, more items than a wave of per-item blocks holds, and as many of
 * its blocks per SM as of those (its merge rows cost shared memory),
 * and max_context_len at most PAGEDLLM_CUDA_ATTN_PERSIST_CTX (0: any).
 * Its blocks take equal numbers of items: as many blocks as make the
 * fewest rounds of items over the wave (8192 items on 264 slots: 32
 * rounds of 256 blocks, not 31 rounds of 264 and 8 blocks alone in a
 * 32nd, which measured 3.7% slower than a block per item on the H200).
 * Off by default (PAGEDLLM_CUDA_ATTN_PERSIST=1 turns it on): on the H200
 * it was 2.8% faster at 64 rows of 192 tokens and 0.4% on 64 x 2048 GQA,
 * but 1.3% slower on 32 x 2048 and 2% on 256 x 1024, where the blocks
 * in lockstep meet at every item's end (docs/BENCHMARKS.md).
 * PAGEDLLM_CUDA_ATTN_PERSIST_BLOCKS=n (tests) takes it, on or off, with
 * n blocks whenever it can serve.  Returns whether it launched.
 */
template <typename T, int D, int STAGES>
static bool
launch_persistent(pl_cuda_t *cu, const dec_knobs_t &k, attn_params_t p,
    int rows, int max_ctx, int per_sm, cudaLaunchConfig_t &cfg)
{
    static int  per_sm_p[DEC_PERS_GROUP + 1];
    auto        kernel = decode_persistent_kernel<T, D, STAGES>;
    size_t      smem = pers_smem(D, STAGES, p.group);
    int64_t     items = (int64_t) rows * p.n_hc, blocks, rounds;

    if ((!k.persist && k.persist_blocks <= 0) || p.group > DEC_PERS_GROUP
        || p.tc_min_qlen > 0 || p.num_splits != 1 || items > INT32_MAX)
    {
        return false;
    }
    if (per_sm_p[p.group] == 0) {
        per_sm_p[p.group] = blocks_per_sm(kernel,
                                          pers_smem(D, STAGES,
                                                    DEC_PERS_GROUP), smem);
    }
    blocks = (int64_t) per_sm_p[p.group] * cu->num_sms;
    if (k.persist_blocks > 0) {
        blocks = k.persist_blocks;
    } else if (items <= (int64_t) per_sm * cu->num_sms
               || per_sm_p[p.group] < per_sm
               || (k.persist_ctx > 0 && max_ctx > k.persist_ctx))
    {
        return false;
    } else {
        rounds = (items + blocks - 1) / blocks;
        blocks = (items + rounds - 1) / rounds;
    }
    p.dec_rows = rows;
    cfg.gridDim = dim3((unsigned) (blocks < items ? blocks : items));
    cfg.dynamicSmemBytes = smem;
    pl_cuda_check(cudaLaunchKernelEx(&cfg, kernel, p), "decode attention");
    PL_CUDA_LAUNCHED("decode attention");
    return true;
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
 * The splits merged through a cluster (see cluster_merge), by default:
 * about one block per SM (splits = SMs / units, at most the ones chosen
 * and 8, the portable cluster size; at least 2), fewer where the
 * clusters for all units would not fit on the GPU at once (a cluster is
 * placed within one GPC, so fewer fit than SMs / size: the H200 holds
 * 30 clusters of 8 three-stage blocks, 62 of 4).  One block per SM
 * measured best: on 1 x 4096 x 32/32 (32 units) clusters of 4 on three
 * stages read 2.3% faster than clusters of 3 on four stages (where
 * clusters of 7 on three had tied with the global merge of 8 splits),
 * on 8 x 16384 x 32/8 (64 units) clusters of 2 on four stages 2.5%
 * faster than the global merge of 4 splits (docs/BENCHMARKS.md,
 * session 9).  Not with prefill rows beside (their
 * blocks would leave their clusters' peers waiting) nor with a fixed
 * split count (PAGEDLLM_CUDA_ATTN_SPLITS); with
 * PAGEDLLM_CUDA_ATTN_CLUSTER=n (2..8), n splits in clusters of n
 * whenever the context splits at all, fitting or not; =0: never.  Sets
 * *cluster (not a static: tensor-parallel ranks launch from threads of
 * their own); returns the splits.
 */
template <typename T, int D, int STAGES, bool SW>
static int
cluster_splits(pl_cuda_t *cu, const dec_knobs_t &k, const attn_params_t &p,
    int64_t units, int *cluster)
{
    int64_t  c;

    *cluster = 0;
    if (p.num_splits < 2 || p.tc_min_qlen > 0 || cu->cc < 90
        || k.cluster == 0 || (k.cluster < 0 && k.splits > 0))
    {
        return p.num_splits;
    }
    if (k.cluster > 0) {
        *cluster = 1;
        return k.cluster;
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
split_deeper(pl_cuda_t *cu, const dec_knobs_t &k, int64_t units)
{
    int64_t  c = cu->num_sms / units;

    if (c < 2 || cu->cc < 90 || k.cluster >= 0 || k.splits > 0) {
        return true;
    }
    c = c < 8 ? c : 8;
    return units <= active_clusters<T, D, DEC_SPLIT_STAGES, SW>(cu, (int) c);
}


/*
 * KV heads per block (decode_attention_kernel's HB) of the swapped form,
 * where the block's query heads fit in the Q buffer's 16 rows as its
 * warps read them ((HB - 1) x group + 8) and the batch still fills three
 * quarters of a wave of blocks or more without splitting: by default 2
 * for GQA groups (64 and 256 rows of 192 tokens in the 256 bucket,
 * 32/8: 10-11% and 2.5-4% faster than one head a block; 64 x 2048 x
 * 32/8: 0.4-0.8% faster in four calls, 1% slower in a fifth) and 4
 * (else 2) for groups of one at contexts up to DEC_HEADS_CTX (64 and 256
 * rows of 192 tokens, 32/32: 1.6-2.5% faster); one head a block for
 * groups of one at longer contexts, where four measured 0.4% slower (32
 * x 2048 and 256 x 1024; the H200, session 10, docs/BENCHMARKS.md).
 * PAGEDLLM_CUDA_ATTN_HEADS=n: n (2 or 4) wherever it fits, whatever the
 * batch; =1: never.  The default also keeps one head a block under a
 * fixed split count and with the persistent kernel on.
 */
#define DEC_HEADS_CTX  256

static int
heads_per_block(const dec_knobs_t &k, const attn_params_t &p, int rows,
    int max_ctx, int slots)
{
    int64_t  n_kv = p.n_heads / p.group, units = rows * n_kv;

    if (k.heads == 1
        || (k.heads < 0
            && (k.splits > 0 || k.persist || k.persist_blocks > 0)))
    {
        return 1;
    }
    for (int hb = 4; hb >= 2; hb /= 2) {
        if (n_kv % hb != 0 || (hb - 1) * p.group + DEC_SW_ROWS > DEC_ROWS) {
            continue;
        }
        if (k.heads > 1) {
            if (hb == k.heads) {
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
launch_decode(pl_cuda_t *cu, const dec_knobs_t &k, attn_params_t p,
    int rows, int max_ctx)
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
        switch (heads_per_block(k, p, rows, max_ctx,
                                per_sm * cu->num_sms))
        {
        case 4:
            launch_decode<T, D, STAGES, SW, 4>(cu, k, p0, rows, max_ctx);
            return;
        case 2:
            launch_decode<T, D, STAGES, SW, 2>(cu, k, p0, rows, max_ctx);
            return;
        }
    }
    p.chunks = (p.group + ROWS - 1) / ROWS;
    p.n_hc = n_kv * p.chunks / HB;
    units = (int64_t) rows * p.n_hc;
    p.num_splits = HB > 1 ? 1
                   : choose_splits(k, per_sm * cu->num_sms, units, max_ctx,
                                   (int64_t) rows * p.n_heads, D);
    if constexpr (STAGES == DEC_STAGES && HB == 1) {
        if (p.num_splits > 1 && k.split_stages == DEC_SPLIT_STAGES
            && p.tc_min_qlen == 0 && split_deeper<T, D, SW>(cu, k, units))
        {
            launch_decode<T, D, DEC_SPLIT_STAGES, SW>(cu, k, p0, rows,
                                                      max_ctx);
            return;
        }
    }
    p.num_splits = cluster_splits<T, D, STAGES, SW>(cu, k, p, units,
                                                    &cluster);
    p.split_tokens = (max_ctx + p.num_splits - 1) / p.num_splits;
    p.split_tokens = (p.split_tokens + DEC_BN - 1) & ~(DEC_BN - 1);
    p.num_splits = (max_ctx + p.split_tokens - 1) / p.split_tokens;
    p.part_ml = (float2 *) (p.part_acc
                            + (int64_t) rows * p.n_heads * p.num_splits * D);

    /* heads first puts the rows in gridDim.y (at most 65535) */
    p.heads_first = k.heads_first && rows <= 65535;
    p.pdl_trigger = k.pdl == 2;
    p.dec_flags = (k.l2pf ? DEC_F_L2PF : 0) | (k.fence_sc ? DEC_F_FENCE_SC : 0);
    if (p.num_splits > 1 && cluster) {
        p.dec_flags |= DEC_F_CLUSTER;
    }

    cfg.blockDim = dim3(DEC_THREADS);
    cfg.stream = cu->stream;
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = k.pdl > 0 && cu->pdl ? 1 : 0;
    decode_form = SW ? "swapped" : "16 rows";
    decode_splits = p.num_splits;
    decode_cluster = (p.dec_flags & DEC_F_CLUSTER) != 0;
    decode_persistent = 0;
    decode_heads = HB;
    if constexpr (SW && STAGES == DEC_STAGES && HB == 1) {
        if (launch_persistent<T, D, STAGES>(cu, k, p, rows, max_ctx, per_sm,
                                            cfg))
        {
            decode_persistent = 1;
            return;
        }
    }
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
template <typename T, int D, int STAGES>
static void
launch_form(pl_cuda_t *cu, const dec_knobs_t &k, const attn_params_t &p,
    int rows, int max_ctx)
{
    if (k.swap && p.group <= DEC_SW_ROWS) {
        launch_decode<T, D, STAGES, true>(cu, k, p, rows, max_ctx);
    } else {
        launch_decode<T, D, STAGES, false>(cu, k, p, rows, max_ctx);
    }
}


/*
 * fp16 is built with DEC_STAGES stages only: the other stage counts are
 * the sweep's (bench/gpu/attention, in bf16), and every instantiation
 * costs the build; so with fp16 the two stage knobs change nothing.
 */
template <typename T, int D>
static void
launch_stages(pl_cuda_t *cu, const attn_params_t &p, int rows, int max_ctx)
{
    dec_knobs_t  k = read_knobs();
    int          stages = k.stages;

    if (k.short_ctx > 0 && max_ctx <= k.short_ctx) {
        stages = k.short_stages;
    }
    if constexpr (std::is_same_v<T, __half>) {
        launch_form<T, D, DEC_STAGES>(cu, k, p, rows, max_ctx);
    } else {
        switch (stages) {
        case 2:
            launch_form<T, D, 2>(cu, k, p, rows, max_ctx);
            break;
        case 4:
            launch_form<T, D, 4>(cu, k, p, rows, max_ctx);
            break;
        default:
            launch_form<T, D, 3>(cu, k, p, rows, max_ctx);
            break;
        }
    }
}


template <typename T>
static int
launch_head(pl_cuda_t *cu, const attn_params_t *p, int rows, int max_ctx)
{
    if (p->head_dim == 64) {
        launch_stages<T, 64>(cu, *p, rows, max_ctx);
        return 1;
    }
    if (p->head_dim == 128) {
        launch_stages<T, 128>(cu, *p, rows, max_ctx);
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
pl_cuda_decode_persistent(void)
{
    return decode_persistent;
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
