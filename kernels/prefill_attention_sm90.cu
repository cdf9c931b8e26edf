/*
 * prefill_attention_sm90: the prefill kernel of prefill_attention.cu for
 * Hopper (sm_90a: wgmma, setmaxnreg, mbarrier, TMA), head size 128,
 * operands of the activation dtype T (bf16 or fp16), fp32 accumulators.
 *
 * Layouts as in paged_attention.cu.  Work split: a tile is 128
 * consecutive query rows of one sequence; one thread block per (tile,
 * query head), blocks numbered so that every head's longest causal tiles
 * start first.  The block is three warpgroups:
 *   - a producer, which loads the tile's Q rows and then, KV tile after
 *     KV tile (128 tokens, up to the last position the block's rows may
 *     see), the K and V rows of the tile's physical blocks into shared
 *     memory, STAGES tiles deep, without waiting for them to land (the
 *     copies complete on the barriers).  By default one warp of it does
 *     this with TMA (bulk tensor copies, tma.cuh): a tensor map over
 *     each cache buffer seen as [blocks x block_size tokens][KV heads]
 *     [128 dims], whose box is the rows of one physical block (128 of
 *     them at most) of one head, 64 dims wide, so a tile takes 128 /
 *     block_size blocks x 2 halves copies for K and as many for V, each
 *     block's issued by a lane of its own after one table lookup; Q
 *     through a map over q, two boxes of 128 rows.  Without SM90_TMA all
 *     128 threads gather the rows with 16-byte cp.async instead (block
 *     sizes under 8 always do: their boxes would not start on the
 *     swizzle's 1024-byte grid);
 *   - two consumers of 64 query rows each, which per KV tile compute
 *     S = Q K^T with wgmma (Q and K from shared memory), mask it
 *     causally (only on the tiles that reach past the warpgroup's first
 *     row), update an online softmax in base 2 in registers, and
 *     accumulate O += P V with wgmma, P converted to T in registers
 *     and fed as the A operand, V read "transposed" from shared memory;
 *     the products of tile j + 1's S and tile j's P V are issued
 *     together, so the softmax runs while the tensor cores work; the two
 *     groups take turns issuing them (ping-pong, two named barriers), so
 *     one's softmax overlaps the other's products.
 * Hand-over through mbarriers per stage: K full and V full (TMA: one
 * arrival carrying the byte count the copies then complete; cp.async:
 * one arrival per producer thread, made by its copies once they landed,
 * and each consumer runs fence.proxy.async after its wait, cp.async
 * writes being generic and wgmma reads async), and empty (arrived by the
 * 256 consumer threads once their wgmmas reading the stage are
 * complete).  K and V are separate so S can start while V is still
 * arriving.  setmaxnreg moves the producer's registers to the
 * consumers, which hold S and O (64 fp32 each) and P.
 *
 * Shared memory, from a 1024-byte aligned base, every tile in the
 * 128-byte swizzled layout of mma.cuh ([2 halves of 64 dims][rows][128
 * bytes], which is where TMA's 128-byte swizzle puts a box's rows when
 * the box starts 1024-aligned): Q [128 rows], then per stage K and V
 * [128 tokens], then the barriers.  What rows past the ones a result
 * needs hold:
 *   - Q rows past the sequence: cp.async zero-fills them; TMA reads the
 *     next sequence's rows (zeros past the batch's last).  Rows of S, P
 *     and O are independent, so only those rows' own results see them,
 *     and those are not written;
 *   - K and V tokens past the block's last visible one but inside the
 *     context: cp.async zero-fills them, TMA reads the cached (finite)
 *     values; the causal mask sets their scores to -inf, so P is 0;
 *   - tokens at or past the context's end, in the sequence's last
 *     physical block or past it: unwritten cache slots, which may hold
 *     NaN, and 0 x NaN is NaN in P V.  cp.async zero-fills them.  With
 *     TMA, blocks past the last are read from the last one (the table
 *     is never read past the sequence's blocks), the mask assigns their
 *     scores -inf whatever K holds, and the producer zeroes their V rows
 *     once the tile landed, before the consumers' P V of it (the tail
 *     barrier).
 *
 * The kernel body exists only in the sm_90a build; prefill_attention.cu
 * launches it on devices of compute capability 9.0 only.
 */

#include <string.h>

#include "attention.cuh"
#include "mma.cuh"
#include "tma.cuh"

#define SM90_D          128
#define SM90_BM         128         /* query rows per block */
#define SM90_BN         128         /* KV tokens per tile */
#define SM90_THREADS    384         /* producer + two consumers */
#define SM90_STAGES     3           /* KV tiles in flight + 1 */
#define SM90_TILE       (SM90_BN * SM90_D * 2)      /* bytes of K or V */
#define SM90_Q          (SM90_BM * SM90_D * 2)

/* the producer (template OPTS): TMA, else the cp.async gather */
#define SM90_TMA        4

/* registers after setmaxnreg: one warp issuing TMA copies needs few, the
   cp.async gather more; 128 x load + 256 x math <= 384 x 168 */
#define SM90_REGS_LOAD(o)  (((o) & SM90_TMA) ? 24 : 40)
#define SM90_REGS_MATH(o)  (((o) & SM90_TMA) ? 240 : 232)


template <int STAGES>
static constexpr size_t
sm90_smem_bytes(void)
{
    return 1024 + SM90_Q + (size_t) STAGES * 2 * SM90_TILE
           + (3 * STAGES + 1) * 8;
}


/* the TMA producer's tensor maps: q, the K cache, the V cache */
typedef struct {
    CUtensorMap  q;
    CUtensorMap  k;
    CUtensorMap  v;
} sm90_maps_t;


/* the block's tile, as every thread sees it */
typedef struct {
    int             q0;             /* first row of the sequence */
    int             qlen;
    int             ctx;
    int             r0;             /* first row of the tile in the seq */
    int             head;
    int             kv_end;         /* tokens any row of the tile sees */
    int             ntiles;
    const int32_t  *table;
} sm90_tile_t;


#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

/* per stage: K full, V full, empty; then the tail barrier (as stage 0 of
   a fourth kind) */
enum { SM90_K_FULL, SM90_V_FULL, SM90_EMPTY, SM90_TAIL };

/* barrier kind of stage s */
template <int STAGES>
static __device__ __forceinline__ uint32_t
sm90_bar(uint32_t bars, int kind, int s)
{
    return bars + (kind * STAGES + s) * 8;
}


/* wait for barrier kind of KV tile j's stage: the phase of tile j */
template <int STAGES>
static __device__ __forceinline__ void
sm90_wait(uint32_t bars, int kind, int j)
{
    mbar_wait(sm90_bar<STAGES>(bars, kind, j % STAGES), (j / STAGES) & 1);
}


/* stage s's K tile; its V tile follows */
static __device__ __forceinline__ uint32_t
sm90_stage(uint32_t qs, int s)
{
    return qs + SM90_Q + s * 2 * SM90_TILE;
}


static __device__ __forceinline__ bool
sm90_find_tile(const attn_params_t &p, sm90_tile_t &t)
{
    int  total = p.tile_start[p.num_seqs], b = (int) blockIdx.x;
    int  upper = (int) gridDim.x / p.n_heads;
    int  tile = upper - 1 - b / p.n_heads;
    int  lo;

    if (tile >= total) {
        return false;
    }
    lo = attn_seq_of_tile(p, tile);
    t.q0 = p.query_start[lo];
    t.qlen = p.query_start[lo + 1] - t.q0;
    t.ctx = p.context_lens[lo];
    t.r0 = (tile - p.tile_start[lo]) * SM90_BM;
    t.head = b % p.n_heads;
    t.kv_end = min(t.ctx, t.ctx - t.qlen + min(t.r0 + SM90_BM, t.qlen));
    t.ntiles = (t.kv_end + SM90_BN - 1) / SM90_BN;
    t.table = p.block_tables + (int64_t) lo * p.max_blocks;
    return true;
}


/*
 * Producer: thread i copies 16-byte chunk i % 16 of rows i / 16 + 8k,
 * k = 0 .. 15, of every tile, so its shared-memory offsets differ by
 * 1024 bytes from one k to the next and only the global side is
 * computed per row.
 */
static __device__ __forceinline__ void
sm90_load_q(const attn_params_t &p, const sm90_tile_t &t, uint32_t qs)
{
    const uint16_t  *q = (const uint16_t *) p.q;    /* moved as bits */
    int              c = threadIdx.x & 15, rb = threadIdx.x >> 4;

#pragma unroll 4
    for (int k = 0; k < 16; k++) {
        int   r = rb + 8 * k;
        bool  valid = t.r0 + r < t.qlen;

        cp_async16(qs + sw128<SM90_BM>(r, c),
                   q + ((int64_t) (t.q0 + (valid ? t.r0 + r : 0))
                        * p.n_heads + t.head) * SM90_D + c * 8, valid);
    }
}


static __device__ __forceinline__ void
sm90_load_kv(const attn_params_t &p, const sm90_tile_t &t,
    const void *cache, int j, uint32_t dst)
{
    int              c = threadIdx.x & 15, rb = threadIdx.x >> 4;
    int              mask = (1 << p.log2_block) - 1;
    int64_t          kv_row = (int64_t) (p.n_heads / p.group) * SM90_D;
    const uint16_t  *base = (const uint16_t *) cache
                            + (int64_t) (t.head / p.group) * SM90_D + c * 8;

#pragma unroll 4
    for (int k = 0; k < 16; k++) {
        int      r = rb + 8 * k, tok = j * SM90_BN + r;
        bool     valid = tok < t.kv_end;
        int64_t  off = 0;

        if (valid) {
            off = (((int64_t) t.table[tok >> p.log2_block] << p.log2_block)
                   | (tok & mask)) * kv_row;
        }
        cp_async16(dst + sw128<SM90_BN>(r, c), base + off, valid);
    }
}


/*
 * The cp.async producer: the full barriers are arrived on by the copies
 * themselves (cp.async.mbarrier.arrive), so the producer goes on to the
 * next free stage at once and up to STAGES tiles are in flight; the
 * consumers' fence.proxy.async after their wait orders the landed bytes
 * before their wgmma reads.  The K full barrier of tile 0 covers the Q
 * rows too, issued before it.
 */
template <int STAGES>
static __device__ __forceinline__ void
sm90_produce(const attn_params_t &p, const sm90_tile_t &t, uint32_t qs,
    uint32_t bars)
{
    sm90_load_q(p, t, qs);
    for (int j = 0; j < t.ntiles; j++) {
        int       s = j % STAGES;
        uint32_t  ks = sm90_stage(qs, s);

        if (j >= STAGES) {
            sm90_wait<STAGES>(bars, SM90_EMPTY, j - STAGES);
        }
        sm90_load_kv(p, t, p.k_cache, j, ks);
        cp_async_mbar_arrive(sm90_bar<STAGES>(bars, SM90_K_FULL, s));
        sm90_load_kv(p, t, p.v_cache, j, ks + SM90_TILE);
        cp_async_mbar_arrive(sm90_bar<STAGES>(bars, SM90_V_FULL, s));
    }
    cp_async_wait_all();
}


static __device__ __forceinline__ void
st_shared_zero16(uint32_t addr)
{
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n"
                 :: "r"(addr), "r"(0) : "memory");
}


/*
 * TMA producer, warp 0 of the producer group.  Per KV tile, lane i <
 * 128 / rows (rows: tokens of a box, the block size up to 128) looks up
 * the physical block of tokens j * 128 + i * rows .. + rows - 1, before
 * the wait for the stage to be free, so the lookup's latency hides
 * behind it, then copies the box's two halves of K and of V; lane 0
 * arrives on the stage's K full and V full barriers with their byte
 * counts first (and, for tile 0, the Q rows' on K full).  Blocks past
 * the sequence's last are read from the last one.
 * Then, when the last tile reaches past the context, the warp waits for
 * its V, zeroes the rows of tokens at and past the context's end and
 * arrives on the tail barrier (see the top of the file).
 */
template <int STAGES>
static __device__ __forceinline__ void
sm90_produce_tma(const attn_params_t &p, const sm90_tile_t &t,
    const sm90_maps_t &mp, uint32_t qs, uint32_t bars)
{
    int  lane = threadIdx.x & 31, lb = p.log2_block, lr = min(lb, 7);
    int  nbox = SM90_BN >> lr, last = (t.ctx - 1) >> lb;
    int  kvh = t.head / p.group, j;

    if (lane == 0) {
        tma_prefetch_map(&mp.q);
        tma_prefetch_map(&mp.k);
        tma_prefetch_map(&mp.v);
    }
    for (j = 0; j < t.ntiles; j++) {
        int       s = j % STAGES, tok = j * SM90_BN + (lane << lr), row = 0;
        uint32_t  ks = sm90_stage(qs, s) + ((uint32_t) lane << lr) * 128;
        uint32_t  kf = sm90_bar<STAGES>(bars, SM90_K_FULL, s);
        uint32_t  vf = sm90_bar<STAGES>(bars, SM90_V_FULL, s);

        if (lane < nbox) {
            row = (t.table[min(tok >> lb, last)] << lb)
                  | (tok & ((1 << lb) - 1));
        }
        if (j >= STAGES) {
            sm90_wait<STAGES>(bars, SM90_EMPTY, j - STAGES);
        }
        if (lane == 0) {
            mbar_arrive_expect_tx(kf, SM90_TILE + (j == 0 ? SM90_Q : 0));
            mbar_arrive_expect_tx(vf, SM90_TILE);
            if (j == 0) {
                tma_load_3d(qs, &mp.q, 0, t.head, t.q0 + t.r0, kf);
                tma_load_3d(qs + SM90_Q / 2, &mp.q, 64, t.head,
                            t.q0 + t.r0, kf);
            }
        }
        if (lane < nbox) {
            tma_load_3d(ks, &mp.k, 0, kvh, row, kf);
            tma_load_3d(ks + SM90_TILE / 2, &mp.k, 64, kvh, row, kf);
            tma_load_3d(ks + SM90_TILE, &mp.v, 0, kvh, row, vf);
            tma_load_3d(ks + SM90_TILE * 3 / 2, &mp.v, 64, kvh, row, vf);
        }
    }

    j = t.ntiles - 1;
    if ((j + 1) * SM90_BN > t.ctx) {
        uint32_t  vs = sm90_stage(qs, j % STAGES) + SM90_TILE;

        sm90_wait<STAGES>(bars, SM90_V_FULL, j);
        for (int i = (t.ctx - j * SM90_BN) * 8 + lane; i < SM90_BN * 8;
             i += 32)
        {
            st_shared_zero16(vs + 16 * i);
            st_shared_zero16(vs + SM90_TILE / 2 + 16 * i);
        }
        fence_proxy_async();
        mbar_arrive(sm90_bar<STAGES>(bars, SM90_TAIL, 0));
    }
}


/*
 * Mask (when MASK), then fold S into the running softmax of the
 * thread's two rows; S becomes P.  m is the running maximum of the
 * unscaled scores; p = 2^(s * scale_log2 - m * scale_log2).
 */
template <bool MASK>
static __device__ __forceinline__ void
sm90_softmax(float (&s)[64], float (&m)[2], float (&l)[2], float (&corr)[2],
    int tok0, const int (&pos)[2], float scale_log2)
{
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float  mx = m[h], ms;

#pragma unroll
        for (int n = 0; n < 16; n++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float  &v = s[4 * n + 2 * h + e];

                if (MASK && tok0 + 8 * n + e > pos[h]) {
                    v = -INFINITY;
                }
                mx = fmaxf(mx, v);
            }
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        ms = mx == -INFINITY ? 0.0f : mx * scale_log2;
        corr[h] = ex2(m[h] * scale_log2 - ms);
        m[h] = mx;
        l[h] *= corr[h];
#pragma unroll
        for (int n = 0; n < 16; n++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float  &v = s[4 * n + 2 * h + e];

                v = ex2(fmaf(v, scale_log2, -ms));
                l[h] += v;
            }
        }
    }
}


/* after a wait for a full barrier: cp.async's writes are generic, and
   wgmma reads through the async proxy */
template <int OPTS>
static __device__ __forceinline__ void
sm90_landed(void)
{
    if (!(OPTS & SM90_TMA)) {
        fence_proxy_async();
    }
}


/* where one consumer warpgroup stands */
typedef struct {
    uint32_t  qs;               /* the tile's Q */
    uint32_t  bars;
    int       cw;               /* 0, 1: rows r0 + 64 cw .. + 63 */
    int       rw;               /* the group's first row in the seq */
    int       pos[2];           /* the thread's rows' last visible token */
    float     scale_log2;
} sm90_math_t;


/* issue S = Q K^T of the stage's K: 8 k-steps of 16 dims */
template <typename T>
static __device__ __forceinline__ void
sm90_issue_qk(const sm90_math_t &w, float (&sc)[64], int s)
{
    uint32_t  ks = sm90_stage(w.qs, s);

#pragma unroll
    for (int kk = 0; kk < SM90_D / 16; kk++) {
        wgmma_128_ss_of<T>(sc,
                     wg_desc(w.qs + (kk >> 2) * (SM90_Q / 2)
                             + w.cw * 64 * 128 + (kk & 3) * 32, 16, 1024),
                     wg_desc(ks + (kk >> 2) * (SM90_TILE / 2)
                             + (kk & 3) * 32, 16, 1024),
                     kk);
    }
    wgmma_commit();
}


/* issue O += P V of the stage's V: 8 k-steps of 16 tokens */
template <typename T>
static __device__ __forceinline__ void
sm90_issue_pv(const sm90_math_t &w, float (&o)[64],
    const uint32_t (&pa)[8][4], int s)
{
    uint32_t  vs = sm90_stage(w.qs, s) + SM90_TILE;

#pragma unroll
    for (int kt = 0; kt < SM90_BN / 16; kt++) {
        wgmma_128_rs_t_of<T>(o, pa[kt],
                             wg_desc(vs + kt * 16 * 128, SM90_TILE / 2,
                                     1024));
    }
    wgmma_commit();
}


/* softmax of tile j's scores, masked where the tile reaches past the
   group's first row; S becomes P */
static __device__ __forceinline__ void
sm90_tile_softmax(const sm90_math_t &w, float (&sc)[64], float (&m)[2],
    float (&l)[2], float (&corr)[2], int j, int off)
{
    if ((j + 1) * SM90_BN - 1 > off + w.rw) {
        sm90_softmax<true>(sc, m, l, corr,
                           j * SM90_BN + 2 * (threadIdx.x & 3), w.pos,
                           w.scale_log2);
    } else {
        sm90_softmax<false>(sc, m, l, corr, 0, w.pos, w.scale_log2);
    }
}


/* P as the A operand of O += P V: two 8-token chunks per k-step */
template <typename T>
static __device__ __forceinline__ void
sm90_pack_p(uint32_t (&pa)[8][4], const float (&sc)[64])
{
#pragma unroll
    for (int kt = 0; kt < 8; kt++) {
        pa[kt][0] = pl_pack2<T>(sc[8 * kt], sc[8 * kt + 1]);
        pa[kt][1] = pl_pack2<T>(sc[8 * kt + 2], sc[8 * kt + 3]);
        pa[kt][2] = pl_pack2<T>(sc[8 * kt + 4], sc[8 * kt + 5]);
        pa[kt][3] = pl_pack2<T>(sc[8 * kt + 6], sc[8 * kt + 7]);
    }
}


/* O / l of the thread's rows rt and rt + 8 (those inside the sequence) */
template <typename T>
static __device__ __forceinline__ void
sm90_store(const attn_params_t &p, const sm90_tile_t &t, const float (&o)[64],
    float (&l)[2], int rt)
{
    int  lane = threadIdx.x & 31;

#pragma unroll
    for (int h = 0; h < 2; h++) {
        int  r = rt + 8 * h;

        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
        if (r < t.qlen) {
            T      *dst = (T *) p.out + ((int64_t) (t.q0 + r) * p.n_heads
                                         + t.head) * SM90_D
                          + 2 * (lane & 3);
            float   inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;

#pragma unroll
            for (int n = 0; n < 16; n++) {
                *(uint32_t *) (dst + 8 * n) = pl_pack2<T>(
                    o[4 * n + 2 * h] * inv, o[4 * n + 2 * h + 1] * inv);
            }
        }
    }
}


/* O *= c of the thread's two rows */
static __device__ __forceinline__ void
sm90_rescale(float (&o)[64], const float (&corr)[2])
{
#pragma unroll
    for (int n = 0; n < 16; n++) {
        o[4 * n] *= corr[0];
        o[4 * n + 1] *= corr[0];
        o[4 * n + 2] *= corr[1];
        o[4 * n + 3] *= corr[1];
    }
}


/*
 * The two consumer groups issue their products in turns (ping-pong),
 * group 0 first: a turn starts on the group's own named barrier
 * (1 + cw) and ends arriving on the other's, so the tensor cores run
 * one group's products while the other's softmax runs, instead of both
 * groups' products colliding and then both softmaxes leaving the tensor
 * cores idle.  Each group takes ntiles + 1 turns; group 1 arrives once
 * before its first, to let group 0 start, and group 0 takes that extra
 * arrival after its last turn, so no barrier is left half arrived.
 */
static __device__ __forceinline__ void
sm90_turn_begin(int cw)
{
    named_bar_sync(1 + cw, 256);
}


static __device__ __forceinline__ void
sm90_turn_end(int cw)
{
    named_bar_arrive(2 - cw, 256);
}


/*
 * Consumer warpgroup cw: its KV tiles 0 .. mine - 1 in a software
 * pipeline, so the softmax of tile j runs while the tensor cores do the
 * P V of tile j - 1:
 *     S_0 = Q K_0; softmax
 *     for j >= 1: issue S_j = Q K_j; O *= c_{j-1} (while S_j runs);
 *         issue O += P_{j-1} V_{j-1}; wait for S_j; softmax (P_j, the
 *         correction c_j); wait for the P V; release stage j - 1
 *     O *= c_last; O += P_last V_last
 * which adds up to the same O as O = O c_j + P_j V_j tile by tile.
 * Every consumer thread also waits for and releases the tiles past its
 * own rows' last (the other group's), so the empty barriers count the
 * same arrivals in every phase; those count as turns too.  The P V of
 * the block's last tile waits for the tail barrier too when that tile
 * reaches past the context (TMA).
 */
template <typename T, int STAGES, int OPTS>
static __device__ __forceinline__ void
sm90_consume(const attn_params_t &p, const sm90_tile_t &t, uint32_t qs,
    uint32_t bars, int cw)
{
    int          lane = threadIdx.x & 31, off = t.ctx - t.qlen, mine = 0;
    int          rt, j, turns = 0;
    sm90_math_t  w;
    float        o[64], sc[64], m[2] = { -INFINITY, -INFINITY };
    float        l[2] = { 0.0f, 0.0f }, corr[2];
    uint32_t     pa[8][4];

    w.qs = qs;
    w.bars = bars;
    w.cw = cw;
    w.rw = t.r0 + 64 * cw;
    rt = w.rw + 16 * ((threadIdx.x & 127) >> 5) + (lane >> 2);
    w.pos[0] = off + rt;
    w.pos[1] = off + rt + 8;
    w.scale_log2 = p.scale_log2;
    if (w.rw < t.qlen) {
        mine = (off + min(w.rw + 64, t.qlen) + SM90_BN - 1) / SM90_BN;
    }
#pragma unroll
    for (int i = 0; i < 64; i++) {
        o[i] = 0.0f;
    }
    if (cw == 1) {
        named_bar_arrive(1, 256);
    }

    if (mine > 0) {
        sm90_wait<STAGES>(w.bars, SM90_K_FULL, 0);
        sm90_landed<OPTS>();
        sm90_turn_begin(cw);
        wgmma_fence();
        sm90_issue_qk<T>(w, sc, 0);
        sm90_turn_end(cw);
        turns++;
        wgmma_wait<0>();
        wgmma_hold(sc);
        sm90_tile_softmax(w, sc, m, l, corr, 0, off);
        sm90_pack_p<T>(pa, sc);
    }
    for (j = 1; j < mine; j++) {
        int  s = j % STAGES, sp = (j - 1) % STAGES;

        sm90_wait<STAGES>(w.bars, SM90_K_FULL, j);
        sm90_wait<STAGES>(w.bars, SM90_V_FULL, j - 1);
        sm90_landed<OPTS>();
        sm90_turn_begin(cw);
        wgmma_fence();
        sm90_issue_qk<T>(w, sc, s);
        sm90_rescale(o, corr);
        wgmma_fence();
        sm90_issue_pv<T>(w, o, pa, sp);
        sm90_turn_end(cw);
        turns++;
        wgmma_wait<1>();
        wgmma_hold(sc);
        sm90_tile_softmax(w, sc, m, l, corr, j, off);
        wgmma_wait<0>();
        wgmma_hold(o);
        mbar_arrive(sm90_bar<STAGES>(w.bars, SM90_EMPTY, sp));
        sm90_pack_p<T>(pa, sc);
    }
    if (mine > 0) {
        int  sp = (mine - 1) % STAGES;

        sm90_wait<STAGES>(w.bars, SM90_V_FULL, mine - 1);
        if ((OPTS & SM90_TMA) && mine == t.ntiles
            && t.ntiles * SM90_BN > t.ctx)
        {
            mbar_wait(sm90_bar<STAGES>(w.bars, SM90_TAIL, 0), 0);
        }
        sm90_landed<OPTS>();
        sm90_turn_begin(cw);
        sm90_rescale(o, corr);
        wgmma_fence();
        sm90_issue_pv<T>(w, o, pa, sp);
        sm90_turn_end(cw);
        turns++;
        wgmma_wait<0>();
        wgmma_hold(o);
        mbar_arrive(sm90_bar<STAGES>(w.bars, SM90_EMPTY, sp));
    }
    for (j = mine; j < t.ntiles; j++) {
        sm90_wait<STAGES>(w.bars, SM90_K_FULL, j);
        sm90_wait<STAGES>(w.bars, SM90_V_FULL, j);
        mbar_arrive(sm90_bar<STAGES>(w.bars, SM90_EMPTY, j % STAGES));
        sm90_turn_begin(cw);
        sm90_turn_end(cw);
        turns++;
    }
    for ( /* void */ ; turns < t.ntiles + 1; turns++) {
        sm90_turn_begin(cw);
        sm90_turn_end(cw);
    }
    if (cw == 0) {
        named_bar_sync(1, 256);
    }

    sm90_store<T>(p, t, o, l, rt);
}

#endif /* __CUDA_ARCH_FEAT_SM90_ALL */


template <typename T, int STAGES, int OPTS>
__global__ void __launch_bounds__(SM90_THREADS, 1)
prefill_attention_sm90_kernel(const attn_params_t p,
    const __grid_constant__ sm90_maps_t mp)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) unsigned char sm90_smem[];

    sm90_tile_t  t;
    uint32_t     qs = (smem_addr(sm90_smem) + 1023) & ~1023u;
    uint32_t     bars = qs + SM90_Q + STAGES * 2 * SM90_TILE;
    int          wg = threadIdx.x >> 7;

    if (!sm90_find_tile(p, t)) {
        return;
    }
    if (threadIdx.x < STAGES) {
        int  full = (OPTS & SM90_TMA) ? 1 : 128;

        mbar_init(sm90_bar<STAGES>(bars, SM90_K_FULL, threadIdx.x), full);
        mbar_init(sm90_bar<STAGES>(bars, SM90_V_FULL, threadIdx.x), full);
        mbar_init(sm90_bar<STAGES>(bars, SM90_EMPTY, threadIdx.x), 256);
    }
    if (threadIdx.x == 0) {
        mbar_init(sm90_bar<STAGES>(bars, SM90_TAIL, 0), 32);
    }
    if ((OPTS & SM90_TMA) && threadIdx.x < STAGES) {
        mbar_init_fence();
    }
    __syncthreads();

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n"
                     :: "n"(SM90_REGS_LOAD(OPTS)));
        if (!(OPTS & SM90_TMA)) {
            sm90_produce<STAGES>(p, t, qs, bars);
        } else if (threadIdx.x < 32) {
            sm90_produce_tma<STAGES>(p, t, mp, qs, bars);
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n"
                     :: "n"(SM90_REGS_MATH(OPTS)));
        sm90_consume<T, STAGES, OPTS>(p, t, qs, bars, wg - 1);
    }
#else
    /* built for another target: the launcher never gets here */
    __trap();
#endif
}


template <typename T, int OPTS>
static void
launch_sm90(pl_cuda_t *cu, const attn_params_t &p, int rows,
    const sm90_maps_t &mp)
{
    static char  ready[64];            /* per device */
    size_t       smem = sm90_smem_bytes<SM90_STAGES>();
    int64_t      tiles = (rows + SM90_BM - 1) / SM90_BM + p.num_seqs;
    auto         kernel = prefill_attention_sm90_kernel<T, SM90_STAGES, OPTS>;

    if (!ready[cu->device & 63]) {
        pl_cuda_check(cudaFuncSetAttribute(kernel,
                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                          (int) smem), "prefill attention (sm90)");
        ready[cu->device & 63] = 1;
    }
    kernel<<<(unsigned) (tiles * p.n_heads), SM90_THREADS, smem,
             cu->stream>>>(p, mp);
    PL_CUDA_LAUNCHED("prefill attention (sm90)");
}


/*
 * The tensor maps of the TMA loads: q as [rows][n_heads][128] in boxes of
 * 128 rows (rows past the batch read as zeros), each cache buffer as
 * [tokens][KV heads][128], the tokens those of the buffer's allocation,
 * in boxes of min(block size, 128) tokens; each box 64 dims wide (128
 * bytes, the 128-byte swizzle's row).  False when TMA cannot serve:
 * block sizes under 8 (a box of fewer rows would not start 1024-aligned
 * in shared memory, where the swizzle pattern of mma.cuh assumes it), a
 * cache whose allocation the driver does not know, or a map the driver
 * does not encode.
 */
static bool
sm90_encode_maps(const attn_params_t &p, int rows, sm90_maps_t *mp)
{
    uint64_t  row = (uint64_t) (p.n_heads / p.group) * SM90_D * 2;
    uint64_t  kn = pl_tma_rows_left(p.k_cache, row);
    uint64_t  vn = pl_tma_rows_left(p.v_cache, row);
    uint64_t  qdim[3] = { SM90_D, (uint64_t) p.n_heads, (uint64_t) rows };
    uint64_t  qstride[2] = { SM90_D * 2, (uint64_t) p.n_heads * SM90_D * 2 };
    uint64_t  kdim[3] = { SM90_D, row / (SM90_D * 2), 0 };
    uint64_t  kstride[2] = { SM90_D * 2, row };
    uint32_t  qbox[3] = { 64, 1, SM90_BM };
    uint32_t  kbox[3] = { 64, 1, 1u << (p.log2_block < 7 ? p.log2_block
                                                          : 7) };
    int       f16 = p.dtype == PL_DT_F16;

    if (p.log2_block < 3 || kn == 0 || vn == 0) {
        return false;
    }
    if (pl_tma_map_16(&mp->q, f16, p.q, qdim, qstride, qbox) != 0) {
        return false;
    }
    kdim[2] = kn < INT32_MAX ? kn : INT32_MAX;
    if (pl_tma_map_16(&mp->k, f16, p.k_cache, kdim, kstride, kbox)
        != 0)
    {
        return false;
    }
    kdim[2] = vn < INT32_MAX ? vn : INT32_MAX;
    return pl_tma_map_16(&mp->v, f16, p.v_cache, kdim, kstride, kbox)
           == 0;
}


/*
 * p.tile_start must number the tiles of SM90_BM rows.  tma: load with TMA
 * where it can (else the cp.async gather).  Returns whether the loads are
 * TMA's.
 */
bool
pl_cuda_prefill_sm90(pl_cuda_t *cu, const attn_params_t &p, int rows,
    bool tma)
{
    sm90_maps_t  mp;

    memset(&mp, 0, sizeof(mp));
    tma = tma && sm90_encode_maps(p, rows, &mp);
    if (p.dtype == PL_DT_F16) {
        if (tma) {
            launch_sm90<__half, SM90_TMA>(cu, p, rows, mp);
        } else {
            launch_sm90<__half, 0>(cu, p, rows, mp);
        }
    } else if (tma) {
        launch_sm90<__nv_bfloat16, SM90_TMA>(cu, p, rows, mp);
    } else {
        launch_sm90<__nv_bfloat16, 0>(cu, p, rows, mp);
    }
    return tma;
}
