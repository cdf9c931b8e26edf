/*
 * prefill_attention_sm90: the prefill kernel of prefill_attention.cu for
 * Hopper (sm_90a: wgmma, setmaxnreg, mbarrier), head size 128.
 *
 * Layouts as in paged_attention.cu.  Work split: a tile is 128
 * consecutive query rows of one sequence; one thread block per (tile,
 * query head), blocks numbered so that every head's longest causal tiles
 * start first.  The block is three warpgroups:
 *   - a producer, which gathers the tile's Q rows and then, KV tile after
 *     KV tile (128 tokens, up to the last position the block's rows may
 *     see), the K and V rows through the block table into shared memory
 *     with 16-byte cp.async (a tile spans several physical blocks, so
 *     there is no one bulk copy for it), STAGES tiles deep, without
 *     waiting for them to land (the copies arrive on the barriers);
 *   - two consumers of 64 query rows each, which per KV tile compute
 *     S = Q K^T with wgmma (Q and K from shared memory), mask it
 *     causally (only on the tiles that reach past the warpgroup's first
 *     row), update an online softmax in base 2 in registers, and
 *     accumulate O += P V with wgmma, P converted to bf16 in registers
 *     and fed as the A operand, V read "transposed" from shared memory;
 *     the products of tile j + 1's S and tile j's P V are issued
 *     together, so the softmax runs while the tensor cores work; the two
 *     groups take turns issuing them (ping-pong, two named barriers), so
 *     one's softmax overlaps the other's products.
 * Hand-over through mbarriers per stage: K full and V full (one arrival
 * per producer thread, made by its copies once they landed; each
 * consumer runs fence.proxy.async after its wait: cp.async writes are
 * generic, wgmma reads async), and empty (arrived by the 256 consumer
 * threads once their wgmmas reading the stage are complete).  K and V
 * are separate so S can start while V is still arriving.  setmaxnreg
 * moves the producer's registers to the consumers, which hold S and O
 * (64 fp32 each) and P.
 * Variants for measurement (OPTS, prefill_attention.cu's overrides): a
 * producer that waits for each tile before the next, and consumers that
 * do not take turns.
 *
 * Shared memory, from a 1024-byte aligned base, every tile in the
 * 128-byte swizzled layout of mma.cuh ([2 halves of 64 dims][rows][128
 * bytes]): Q [128 rows], then per stage K and V [128 tokens], then the
 * barriers.  Tokens past the block's last visible one and rows past the
 * sequence's last are zero-filled, so no NaN reaches a product.
 *
 * The kernel body exists only in the sm_90a build; prefill_attention.cu
 * launches it on devices of compute capability 9.0 only.
 */

#include "attention.cuh"
#include "mma.cuh"

#define SM90_D          128
#define SM90_BM         128         /* query rows per block */
#define SM90_BN         128         /* KV tokens per tile */
#define SM90_THREADS    384         /* producer + two consumers */
#define SM90_TILE       (SM90_BN * SM90_D * 2)      /* bytes of K or V */
#define SM90_Q          (SM90_BM * SM90_D * 2)
#define SM90_REGS_LOAD  40
#define SM90_REGS_MATH  232         /* 128 x 40 + 256 x 232 <= 384 x 168 */

/* variants (template OPTS), see sm90_produce and sm90_consume */
#define SM90_ASYNC      1           /* producer does not wait for its copies */
#define SM90_PINGPONG   2           /* consumers take turns at the products */


template <int STAGES>
static constexpr size_t
sm90_smem_bytes(void)
{
    return 1024 + SM90_Q + (size_t) STAGES * 2 * SM90_TILE
           + 3 * STAGES * 8;
}


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

enum { SM90_K_FULL, SM90_V_FULL, SM90_EMPTY };

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
    int  total = p.tile_start[p.num_seqs];
    int  upper = (int) gridDim.x / p.n_heads;
    int  tile = upper - 1 - (int) blockIdx.x / p.n_heads;
    int  lo = 0, hi = p.num_seqs - 1;

    if (tile >= total) {
        return false;
    }
    while (lo < hi) {
        int  mid = (lo + hi + 1) >> 1;

        if (p.tile_start[mid] <= tile) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    t.q0 = p.query_start[lo];
    t.qlen = p.query_start[lo + 1] - t.q0;
    t.ctx = p.context_lens[lo];
    t.r0 = (tile - p.tile_start[lo]) * SM90_BM;
    t.head = (int) blockIdx.x % p.n_heads;
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
    int  c = threadIdx.x & 15, rb = threadIdx.x >> 4;

#pragma unroll 4
    for (int k = 0; k < 16; k++) {
        int   r = rb + 8 * k;
        bool  valid = t.r0 + r < t.qlen;

        cp_async16(qs + sw128<SM90_BM>(r, c),
                   p.q + ((int64_t) (t.q0 + (valid ? t.r0 + r : 0))
                          * p.n_heads + t.head) * SM90_D + c * 8, valid);
    }
}


static __device__ __forceinline__ void
sm90_load_kv(const attn_params_t &p, const sm90_tile_t &t,
    const __nv_bfloat16 *cache, int j, uint32_t dst)
{
    int      c = threadIdx.x & 15, rb = threadIdx.x >> 4;
    int      mask = (1 << p.log2_block) - 1;
    int64_t  kv_row = (int64_t) (p.n_heads / p.group) * SM90_D;
    const __nv_bfloat16  *base = cache + (int64_t) (t.head / p.group) * SM90_D
                                 + c * 8;

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
 * With SM90_ASYNC the full barriers are arrived on by the copies
 * themselves (cp.async.mbarrier.arrive), so the producer goes on to the
 * next free stage at once and up to STAGES tiles are in flight; the
 * consumers' fence.proxy.async after their wait orders the landed bytes
 * before their wgmma reads.  Without it, the producer waits for each
 * tile to land before it issues the next (one tile in flight).  The K
 * full barrier of tile 0 covers the Q rows too, issued before it.
 */
template <int STAGES, int OPTS>
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
        if (OPTS & SM90_ASYNC) {
            cp_async_mbar_arrive(sm90_bar<STAGES>(bars, SM90_K_FULL, s));
            sm90_load_kv(p, t, p.v_cache, j, ks + SM90_TILE);
            cp_async_mbar_arrive(sm90_bar<STAGES>(bars, SM90_V_FULL, s));
            continue;
        }
        cp_async_commit();
        sm90_load_kv(p, t, p.v_cache, j, ks + SM90_TILE);
        cp_async_commit();
        cp_async_wait<1>();
        fence_proxy_async();
        mbar_arrive(sm90_bar<STAGES>(bars, SM90_K_FULL, s));
        cp_async_wait<0>();
        fence_proxy_async();
        mbar_arrive(sm90_bar<STAGES>(bars, SM90_V_FULL, s));
    }
    if (OPTS & SM90_ASYNC) {
        cp_async_wait_all();
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
static __device__ __forceinline__ void
sm90_issue_qk(const sm90_math_t &w, float (&sc)[64], int s)
{
    uint32_t  ks = sm90_stage(w.qs, s);

#pragma unroll
    for (int kk = 0; kk < SM90_D / 16; kk++) {
        wgmma_128_ss(sc,
                     wg_desc(w.qs + (kk >> 2) * (SM90_Q / 2)
                             + w.cw * 64 * 128 + (kk & 3) * 32, 16, 1024),
                     wg_desc(ks + (kk >> 2) * (SM90_TILE / 2)
                             + (kk & 3) * 32, 16, 1024),
                     kk);
    }
    wgmma_commit();
}


/* issue O += P V of the stage's V: 8 k-steps of 16 tokens */
static __device__ __forceinline__ void
sm90_issue_pv(const sm90_math_t &w, float (&o)[64],
    const uint32_t (&pa)[8][4], int s)
{
    uint32_t  vs = sm90_stage(w.qs, s) + SM90_TILE;

#pragma unroll
    for (int kt = 0; kt < SM90_BN / 16; kt++) {
        wgmma_128_rs_t(o, pa[kt],
                       wg_desc(vs + kt * 16 * 128, SM90_TILE / 2, 1024));
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
static __device__ __forceinline__ void
sm90_pack_p(uint32_t (&pa)[8][4], const float (&sc)[64])
{
#pragma unroll
    for (int kt = 0; kt < 8; kt++) {
        pa[kt][0] = pack_bf16(sc[8 * kt], sc[8 * kt + 1]);
        pa[kt][1] = pack_bf16(sc[8 * kt + 2], sc[8 * kt + 3]);
        pa[kt][2] = pack_bf16(sc[8 * kt + 4], sc[8 * kt + 5]);
        pa[kt][3] = pack_bf16(sc[8 * kt + 6], sc[8 * kt + 7]);
    }
}


/* O / l of the thread's rows rt and rt + 8 (those inside the sequence) */
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
            __nv_bfloat16  *dst = p.out + ((int64_t) (t.q0 + r) * p.n_heads
                                           + t.head) * SM90_D
                                  + 2 * (lane & 3);
            float           inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;

#pragma unroll
            for (int n = 0; n < 16; n++) {
                *(__nv_bfloat162 *) (dst + 8 * n) = __floats2bfloat162_rn(
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
 * With SM90_PINGPONG the two consumer groups issue their products in
 * turns, group 0 first: a turn starts on the group's own named barrier
 * (1 + cw) and ends arriving on the other's, so the tensor cores run
 * one group's products while the other's softmax runs, instead of both
 * groups' products colliding and then both softmaxes leaving the tensor
 * cores idle.  Each group takes ntiles + 1 turns; group 1 arrives once
 * before its first, to let group 0 start, and group 0 takes that extra
 * arrival after its last turn, so no barrier is left half arrived.
 */
template <int OPTS>
static __device__ __forceinline__ void
sm90_turn_begin(int cw)
{
    if (OPTS & SM90_PINGPONG) {
        named_bar_sync(1 + cw, 256);
    }
}


template <int OPTS>
static __device__ __forceinline__ void
sm90_turn_end(int cw)
{
    if (OPTS & SM90_PINGPONG) {
        named_bar_arrive(2 - cw, 256);
    }
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
 * same arrivals in every phase; those count as turns too.
 */
template <int STAGES, int OPTS>
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
    if ((OPTS & SM90_PINGPONG) && cw == 1) {
        named_bar_arrive(1, 256);
    }

    if (mine > 0) {
        sm90_wait<STAGES>(w.bars, SM90_K_FULL, 0);
        fence_proxy_async();
        sm90_turn_begin<OPTS>(cw);
        wgmma_fence();
        sm90_issue_qk(w, sc, 0);
        sm90_turn_end<OPTS>(cw);
        turns++;
        wgmma_wait<0>();
        wgmma_hold(sc);
        sm90_tile_softmax(w, sc, m, l, corr, 0, off);
        sm90_pack_p(pa, sc);
    }
    for (j = 1; j < mine; j++) {
        int  s = j % STAGES, sp = (j - 1) % STAGES;

        sm90_wait<STAGES>(w.bars, SM90_K_FULL, j);
        sm90_wait<STAGES>(w.bars, SM90_V_FULL, j - 1);
        fence_proxy_async();
        sm90_turn_begin<OPTS>(cw);
        wgmma_fence();
        sm90_issue_qk(w, sc, s);
        sm90_rescale(o, corr);
        wgmma_fence();
        sm90_issue_pv(w, o, pa, sp);
        sm90_turn_end<OPTS>(cw);
        turns++;
        wgmma_wait<1>();
        wgmma_hold(sc);
        sm90_tile_softmax(w, sc, m, l, corr, j, off);
        wgmma_wait<0>();
        wgmma_hold(o);
        mbar_arrive(sm90_bar<STAGES>(w.bars, SM90_EMPTY, sp));
        sm90_pack_p(pa, sc);
    }
    if (mine > 0) {
        int  sp = (mine - 1) % STAGES;

        sm90_wait<STAGES>(w.bars, SM90_V_FULL, mine - 1);
        fence_proxy_async();
        sm90_turn_begin<OPTS>(cw);
        sm90_rescale(o, corr);
        wgmma_fence();
        sm90_issue_pv(w, o, pa, sp);
        sm90_turn_end<OPTS>(cw);
        turns++;
        wgmma_wait<0>();
        wgmma_hold(o);
        mbar_arrive(sm90_bar<STAGES>(w.bars, SM90_EMPTY, sp));
    }
    for (j = mine; j < t.ntiles; j++) {
        sm90_wait<STAGES>(w.bars, SM90_K_FULL, j);
        sm90_wait<STAGES>(w.bars, SM90_V_FULL, j);
        mbar_arrive(sm90_bar<STAGES>(w.bars, SM90_EMPTY, j % STAGES));
        sm90_turn_begin<OPTS>(cw);
        sm90_turn_end<OPTS>(cw);
        turns++;
    }
    if (OPTS & SM90_PINGPONG) {
        for ( /* void */ ; turns < t.ntiles + 1; turns++) {
            sm90_turn_begin<OPTS>(cw);
            sm90_turn_end<OPTS>(cw);
        }
        if (cw == 0) {
            named_bar_sync(1, 256);
        }
    }

    sm90_store(p, t, o, l, rt);
}

#endif /* __CUDA_ARCH_FEAT_SM90_ALL */


template <int STAGES, int OPTS>
__global__ void __launch_bounds__(SM90_THREADS, 1)
prefill_attention_sm90_kernel(const attn_params_t p)
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
        mbar_init(sm90_bar<STAGES>(bars, SM90_K_FULL, threadIdx.x), 128);
        mbar_init(sm90_bar<STAGES>(bars, SM90_V_FULL, threadIdx.x), 128);
        mbar_init(sm90_bar<STAGES>(bars, SM90_EMPTY, threadIdx.x), 256);
    }
    __syncthreads();

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n"
                     :: "n"(SM90_REGS_LOAD));
        sm90_produce<STAGES, OPTS>(p, t, qs, bars);
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n"
                     :: "n"(SM90_REGS_MATH));
        sm90_consume<STAGES, OPTS>(p, t, qs, bars, wg - 1);
    }
#else
    /* built for another target: the launcher never gets here */
    __trap();
#endif
}


template <int STAGES, int OPTS>
static void
launch_sm90(pl_cuda_t *cu, const attn_params_t &p, int rows)
{
    static char  ready[64];            /* per device */
    size_t       smem = sm90_smem_bytes<STAGES>();
    int64_t      tiles = (rows + SM90_BM - 1) / SM90_BM + p.num_seqs;

    if (!ready[cu->device & 63]) {
        pl_cuda_check(cudaFuncSetAttribute(
                          prefill_attention_sm90_kernel<STAGES, OPTS>,
                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                          (int) smem), "prefill attention (sm90)");
        ready[cu->device & 63] = 1;
    }
    prefill_attention_sm90_kernel<STAGES, OPTS>
        <<<(unsigned) (tiles * p.n_heads), SM90_THREADS, smem,
           cu->stream>>>(p);
    PL_CUDA_LAUNCHED("prefill attention (sm90)");
}


template <int STAGES>
static void
launch_sm90_opts(pl_cuda_t *cu, const attn_params_t &p, int rows, bool async,
    bool pingpong)
{
    if (async && pingpong) {
        launch_sm90<STAGES, SM90_ASYNC | SM90_PINGPONG>(cu, p, rows);
    } else if (async) {
        launch_sm90<STAGES, SM90_ASYNC>(cu, p, rows);
    } else if (pingpong) {
        launch_sm90<STAGES, SM90_PINGPONG>(cu, p, rows);
    } else {
        launch_sm90<STAGES, 0>(cu, p, rows);
    }
}


/*
 * p.tile_start must number the tiles of SM90_BM rows.  stages: KV
 * stages, 3 (224 KB of shared memory) or 2 (160 KB).  A consumer holds
 * two stages at a time (tile j's K, tile j - 1's V) and frees the older
 * one late in its step, so with two the producer starts tile j + 1 only
 * then and the consumers wait for it; three keep a tile in flight.
 * async, pingpong: the SM90_ASYNC and SM90_PINGPONG variants.
 */
void
pl_cuda_prefill_sm90(pl_cuda_t *cu, const attn_params_t &p, int rows,
    int stages, bool async, bool pingpong)
{
    if (stages == 2) {
        launch_sm90_opts<2>(cu, p, rows, async, pingpong);
    } else {
        launch_sm90_opts<3>(cu, p, rows, async, pingpong);
    }
}
