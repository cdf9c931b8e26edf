/*
 * gemv: out[n][rows] = x[n][cols] . W^T (+ bias) for a few rows of x
 * (decode batches, n <= PL_GEMV_MAX_N), at the speed of reading W once.
 *
 * Layouts: W [rows][cols] row-major, cols a multiple of 8, 16-byte
 * aligned; x [n][cols], 16-byte aligned; out [n][rows]: all three of the
 * activation dtype T, bf16 or fp16 (the MMA's operand type); bias [rows]
 * of any weight dtype.  fp32 accumulation.
 *
 * Tensor cores, not the fp32 units: at n = 16 a Llama-2-7B decode step is
 * 107 G multiply-adds, about as long on the fp32 units as reading its
 * 13 GB of weights, while the MMA does them for nothing.  W is the A
 * operand of mma.m16n8k16 (16 rows of W), x the B operand (8 rows of x
 * per tile; rows past n read row n - 1 and their results are dropped,
 * since a column of the product depends on its own column of B only).
 *
 * The fragments come straight from 16-byte global loads, without shared
 * memory: a dot product does not care in which order it sums k, so the
 * MMA's k slots are permuted.  Lane (g, t) = (lane / 4, lane % 4) loads
 * W[r + g][k + 8t .. k + 8t + 7], W[r + g + 8][same] and x[g][same]; the
 * first MMA takes the first four of those eight k, the second the last
 * four, and every lane feeds A and B the same k.  A 32-column chunk of a
 * row is one 64-byte piece read by the four lanes of a group.
 *
 * Work split: a block is MG groups of KS warps.  A group owns MT m-tiles
 * (16 MT rows of W) and its KS warps split the row's chunks between them,
 * so a 4096-row matrix still gives every SM several warps.  A warp
 * streams U chunks at a time (U * 2 * MT loads of W in flight per lane,
 * non-coherent and not allocated in L1, so x stays there); pipelined
 * (P), it issues the next U chunks' loads before the MMAs of these, so
 * that its loads never all land at once and leave it waiting a whole
 * round trip with nothing in flight (twice the registers for W); x is reused
 * from registers by the MT m-tiles and from L1 by the MG groups and by
 * the other blocks on the SM.  The KS partial sums meet in shared memory,
 * where the block adds them and the bias and writes T.  Nothing is
 * allocated or synchronized with the host: the launch can be captured in
 * a CUDA graph.
 *
 * The GEMV is launched plainly, but it lets the next kernel launch early
 * (pl_grid_release, pl_cuda.cuh): every block releases it once its main
 * loop is done, before the epilogue, so the small kernel that follows (a
 * norm, the rope and KV store, the gate), launched as a programmatic
 * dependent launch, is launched and placed while the last blocks finish,
 * and waits for the GEMV's completion: the Llama-2-7B batch-1 step takes
 * 3.88 ms with the release, 3.96 without (H200, docs/BENCHMARKS.md).  The
 * GEMV is not itself a dependent launch: its blocks would wait through
 * the previous kernel, which measures slower.
 *
 * Configurations are built for bf16 and fp16 activations; fp16 only in
 * dispatch's configurations (the others are the bf16 sweep's of
 * bench/gpu/gemv, which names one per call).
 */

#include "pl_cuda.cuh"
#include "mma.cuh"
#include "gemv.cuh"

#define GEMV_CHUNK  32            /* columns per lane group and step */


/* 16 bytes of W: read once, so kept out of L1; the L2 fetches the rest of
   its 256-byte sector group, which the warp reads next. */
static __device__ __forceinline__ uint4
ld_stream(const uint4 *p)
{
    uint4  v;

    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, "
        "[%4];\n"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}


/* acc[mt][nt] += the chunk's rows of W (a) times its columns of x (b) */
template <typename T, int MT, int NT>
static __device__ __forceinline__ void
chunk_mma(float (&acc)[MT][NT][4], const uint4 (&a)[MT][2],
    const uint4 (&b)[NT])
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        const uint32_t  lo[4] = { a[mt][0].x, a[mt][1].x,
                                  a[mt][0].y, a[mt][1].y };
        const uint32_t  hi[4] = { a[mt][0].z, a[mt][1].z,
                                  a[mt][0].w, a[mt][1].w };

#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            mma_f32acc<T>(acc[mt][nt], lo, b[nt].x, b[nt].y);
            mma_f32acc<T>(acc[mt][nt], hi, b[nt].z, b[nt].w);
        }
    }
}


/* chunks [c, c + U) of the warp's rows of W (a) and of x (b) */
template <typename T, int MT, int NT, int U, bool STAGED>
static __device__ __forceinline__ void
gemv_load(uint4 (&a)[U][MT][2], uint4 (&b)[U][NT],
    const uint4 *const (&wp)[MT][2], const uint4 *const (&xp)[NT], int c)
{
#pragma unroll
    for (int u = 0; u < U; u++) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            a[u][mt][0] = ld_stream(wp[mt][0] + (c + u) * 4);
            a[u][mt][1] = ld_stream(wp[mt][1] + (c + u) * 4);
        }
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            b[u][nt] = STAGED ? xp[nt][(c + u) * 4]
                              : __ldg(xp[nt] + (c + u) * 4);
        }
    }
}


/*
 * Fused forms (pl_matmul_fuse_t): what MODE does on the way in and out.
 * GEMV_RMS is the RMSNorm with its weight folded into W (fold.cu): the block
 * sums each row's squares first (per-thread slices, then the warps' partials
 * in a fixed order, so the result does not depend on timing), its first weight
 * chunks on their way to L2 meanwhile, reads x as it is and scales its sums by
 * 1 / rms(x) at the end (the 7B step's norm GEMVs average 45.5 us this way
 * against 40.4 plain on the H200, more than the norm kernels it saves, so
 * engine/model.c decides whether to fold). GEMV_SILU_ADD transforms x once per
 * block into shared memory before the main loop (per chunk, every warp of
 * every block would repeat it: 256 times the work at a 4096-row matrix): it
 * reads gate and up halves of x [n][2 cols] and stores silu(gate) * up,
 * rounded to T as the unfused activation kernel stores it; x must then fit in
 * PL_GEMV_STAGE_MAX bytes. Meanwhile the block's first weight chunks are on
 * their way to L2. GEMV_ADD and GEMV_SILU_ADD add the product to a [n][rows]
 * (out may be a: each element is read and written by one thread).
 */
enum { GEMV_PLAIN = 0, GEMV_RMS, GEMV_ADD, GEMV_SILU_ADD };

typedef struct {
    float                 eps;       /* GEMV_RMS */
    const void           *add;       /* GEMV_ADD, GEMV_SILU_ADD: T */
} gemv_fuse_t;


static __device__ __forceinline__ float
gemv_silu_times(float g, float u)
{
    return g / (1.0f + __expf(-g)) * u;
}


/* xs[n][cols / 8] (16-byte units) = silu(gate) * up of x [n][2 cols] */
template <typename T, int THREADS>
static __device__ __forceinline__ void
gemv_stage_silu(uint4 *xs, const T *x, int n, int cols)
{
    const int     q = cols / 8;
    const uint4  *xv = (const uint4 *) x;
    float         f[8], u[8];

    for (int i = threadIdx.x; i < n * q; i += THREADS) {
        const int  tok = i / q, k = i - tok * q;

        pl_x8_to_f32<T>(__ldg(xv + (size_t) tok * 2 * q + k), f);
        pl_x8_to_f32<T>(__ldg(xv + (size_t) tok * 2 * q + q + k), u);
#pragma unroll
        for (int e = 0; e < 8; e++) {
            f[e] = gemv_silu_times(f[e], u[e]);
        }
        xs[i] = pl_f32_to_x8<T>(f);
    }
    __syncthreads();
}


/* inv[t] = 1 / sqrt(mean(x[t]^2) + eps) for the n rows of x [n][cols] */
template <typename T, int THREADS>
static __device__ __forceinline__ void
gemv_row_inv(float *inv, const T *x, int n, int cols, float eps)
{
    __shared__ float  part[THREADS / 32][PL_GEMV_MAX_N];
    const int         q = cols / 8, lane = threadIdx.x & 31;
    const int         warp = threadIdx.x >> 5;
    const uint4      *xv = (const uint4 *) x;
    float             f[8];

    for (int tok = 0; tok < n; tok++) {
        float  ss = 0.0f;

        for (int k = threadIdx.x; k < q; k += THREADS) {
            pl_x8_to_f32<T>(__ldg(xv + (size_t) tok * q + k), f);
#pragma unroll
            for (int e = 0; e < 8; e++) {
                ss += f[e] * f[e];
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            ss += __shfl_xor_sync(0xffffffffu, ss, o);
        }
        if (lane == 0) {
            part[warp][tok] = ss;
        }
    }
    __syncthreads();
    if (threadIdx.x < n) {
        float  ss = 0.0f;

        for (int w = 0; w < THREADS / 32; w++) {
            ss += part[w][threadIdx.x];
        }
        inv[threadIdx.x] = rsqrtf(ss / cols + eps);
    }
    __syncthreads();
}


template <typename T, int KS, int MG, int MT, int NT, int U, int P, int MODE>
__global__ void __launch_bounds__(KS * MG * 32)
gemv_kernel(T *out, const T *__restrict__ x, const T *__restrict__ w,
    const void *bias,
    pl_dtype_t bias_dt, int n, int rows, int cols, gemv_fuse_t fuse)
{
    constexpr int  TILE = MG * MT * NT * 128;   /* a block's accumulators */
    constexpr bool STAGED = MODE == GEMV_SILU_ADD;
    __shared__ float  part[KS][TILE];
    __shared__ float  inv_s[NT * 8];            /* GEMV_RMS */
    extern __shared__ uint4  xs[];              /* STAGED: x transformed */

    const int      lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int      g = lane >> 2, t = lane & 3;
    const int      ks = warp % KS, mg = warp / KS;
    const int      row0 = blockIdx.x * MG * MT * 16;
    const int      chunks = (cols + GEMV_CHUNK - 1) / GEMV_CHUNK;
    const int      lo = (int) ((int64_t) chunks * ks / KS);
    const int      hi = (int) ((int64_t) chunks * (ks + 1) / KS);
    const int      full = min(hi, cols / GEMV_CHUNK);
    const size_t   stride = (size_t) cols / 8;        /* uint4 per row */
    const uint4   *wp[MT][2];
    const uint4   *xp[NT];
    float          acc[MT][NT][4];
    int            c;

#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int  r = min(row0 + (mg * MT + mt) * 16 + h * 8 + g, rows - 1);

            wp[mt][h] = (const uint4 *) w + r * stride + t;
        }
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                acc[mt][nt][i] = 0.0f;
            }
        }
    }
    if (STAGED || MODE == GEMV_RMS) {
#pragma unroll
        for (int u = 0; u < U; u++) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                if (lo + u < full) {
                    asm volatile("prefetch.global.L2 [%0];" ::
                                 "l"(wp[mt][0] + (lo + u) * 4));
                    asm volatile("prefetch.global.L2 [%0];" ::
                                 "l"(wp[mt][1] + (lo + u) * 4));
                }
            }
        }
    }
    if (STAGED) {
        gemv_stage_silu<T, KS * MG * 32>(xs, x, n, cols);
    }
    if (MODE == GEMV_RMS) {
        gemv_row_inv<T, KS * MG * 32>(inv_s, x, n, cols, fuse.eps);
    }
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        xp[nt] = (STAGED ? xs : (const uint4 *) x)
                 + min(nt * 8 + g, n - 1) * stride + t;
    }

    if (P) {
        /* pipelined: the next U chunks' loads go out before the MMAs of
           these, so a warp keeps 2U chunks in flight between round trips */
        uint4  a[U][MT][2], b[U][NT];

        c = lo;
        if (c + U <= full) {
            gemv_load<T, MT, NT, U, STAGED>(a, b, wp, xp, c);
        }
        for (; c + U <= full; c += U) {
            const bool  more = c + 2 * U <= full;
            uint4       na[U][MT][2], nb[U][NT];

            if (more) {
                gemv_load<T, MT, NT, U, STAGED>(na, nb, wp, xp, c + U);
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                chunk_mma<T, MT, NT>(acc, a[u], b[u]);
            }
            if (more) {
#pragma unroll
                for (int u = 0; u < U; u++) {
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        a[u][mt][0] = na[u][mt][0];
                        a[u][mt][1] = na[u][mt][1];
                    }
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) {
                        b[u][nt] = nb[u][nt];
                    }
                }
            }
        }
    } else {
        for (c = lo; c + U <= full; c += U) {
            uint4  a[U][MT][2], b[U][NT];

            gemv_load<T, MT, NT, U, STAGED>(a, b, wp, xp, c);
#pragma unroll
            for (int u = 0; u < U; u++) {
                chunk_mma<T, MT, NT>(acc, a[u], b[u]);
            }
        }
    }

    /* the last few chunks one at a time; a lane past cols adds zeros */
    for (; c < hi; c++) {
        const bool   in = c * GEMV_CHUNK + 8 * t < cols;
        const uint4  zero = make_uint4(0, 0, 0, 0);
        uint4        a[MT][2], b[NT];

#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            a[mt][0] = in ? ld_stream(wp[mt][0] + c * 4) : zero;
            a[mt][1] = in ? ld_stream(wp[mt][1] + c * 4) : zero;
        }
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            b[nt] = !in ? zero : STAGED ? xp[nt][c * 4]
                                        : __ldg(xp[nt] + c * 4);
        }
        chunk_mma<T, MT, NT>(acc, a, b);
    }

    pl_grid_release();
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                part[ks][(((mg * MT + mt) * NT + nt) * 4 + i) * 32 + lane] =
                    acc[mt][nt][i];
            }
        }
    }
    __syncthreads();

    /* element e of the tile: lane l, register i of m-tile m, n-tile nt */
    for (int e = threadIdx.x; e < TILE; e += KS * MG * 32) {
        const int  l = e & 31, i = (e >> 5) & 3, tile = e >> 7;
        const int  row = row0 + tile / NT * 16 + (l >> 2) + (i >> 1) * 8;
        const int  tok = tile % NT * 8 + (l & 3) * 2 + (i & 1);
        float      s = 0.0f;

        if (row >= rows || tok >= n) {
            continue;
        }
#pragma unroll
        for (int k = 0; k < KS; k++) {
            s += part[k][e];
        }
        if (MODE == GEMV_RMS) {
            s *= inv_s[tok];
        }
        if (bias != NULL) {
            s += pl_weight_at(bias, bias_dt, row);
        }
        if (MODE == GEMV_ADD || MODE == GEMV_SILU_ADD) {
            s += pl_to_f32(((const T *) fuse.add)[(size_t) tok * rows
                                                  + row]);
        }
        out[(size_t) tok * rows + row] = pl_from_f32<T>(s);
    }
}


/* out, x and w of the instantiation's T */
typedef void (*gemv_launch_t)(cudaStream_t st, void *out, const void *x,
    const void *w, const void *bias, pl_dtype_t bias_dt, int n, int rows,
    int cols, gemv_fuse_t fuse);

typedef struct {
    const char     *name;
    gemv_launch_t   launch[4];      /* bf16, by MODE; NULL: not built */
    gemv_launch_t   launch_f16[4];  /* the same for fp16 */
    int             rows_per_block;
} gemv_config_t;


/* one instantiation's launch, its shared-memory limit raised to
   PL_GEMV_STAGE_MAX the first time a staged form needs more than the
   default 48 KB */
template <typename T, int KS, int MG, int MT, int NT, int U, int P, int MODE>
static void
gemv_start(unsigned blocks, unsigned threads, size_t staged, cudaStream_t st,
    T *out, const T *x, const T *w, const void *bias, pl_dtype_t bias_dt,
    int n, int rows, int cols, gemv_fuse_t fuse)
{
    static bool  raised;

    if (staged > (48u << 10) && !raised) {
        pl_cuda_check(cudaFuncSetAttribute(
                          gemv_kernel<T, KS, MG, MT, NT, U, P, MODE>,
                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                          PL_GEMV_STAGE_MAX),
                      "gemv shared memory");
        raised = true;
    }
    gemv_kernel<T, KS, MG, MT, NT, U, P, MODE><<<blocks, threads, staged,
                                               st>>>(
        out, x, w, bias, bias_dt, n, rows, cols, fuse);
}


template <typename T, int KS, int MG, int MT, int U, int P, int MODE>
static void
gemv_launch(cudaStream_t st, void *out_, const void *x_, const void *w_,
    const void *bias, pl_dtype_t bias_dt, int n, int rows, int cols,
    gemv_fuse_t fuse)
{
    T              *out = (T *) out_;
    const T        *x = (const T *) x_, *w = (const T *) w_;
    const unsigned  blocks = pl_cuda_blocks(rows, MG * MT * 16);
    const unsigned  threads = KS * MG * 32;
    const size_t    staged = MODE == GEMV_SILU_ADD
                             ? (size_t) n * cols * 2 : 0;

    switch ((n + 7) / 8) {
    case 1:
        gemv_start<T, KS, MG, MT, 1, U, P, MODE>(blocks, threads, staged, st,
                                              out, x, w, bias, bias_dt, n,
                                              rows, cols, fuse);
        break;
    case 2:
        gemv_start<T, KS, MG, MT, 2, U, P, MODE>(blocks, threads, staged, st,
                                              out, x, w, bias, bias_dt, n,
                                              rows, cols, fuse);
        break;
    case 3:
        gemv_start<T, KS, MG, MT, 3, U, P, MODE>(blocks, threads, staged, st,
                                              out, x, w, bias, bias_dt, n,
                                              rows, cols, fuse);
        break;
    default:
        gemv_start<T, KS, MG, MT, 4, U, P, MODE>(blocks, threads, staged, st,
                                              out, x, w, bias, bias_dt, n,
                                              rows, cols, fuse);
        break;
    }
}


/* Named kKSmMGtMTuU, with a "p" when pipelined (P).  GEMV_SMALL and
   GEMV_DEEP are dispatch's choices, built in every fused form and for
   fp16 too; the others are there for the benchmark's sweep, bf16 and
   plain only. */
#define GEMV_MODES(t, ks, mg, mt, u, p)                                     \
      { gemv_launch<t, ks, mg, mt, u, p, GEMV_PLAIN>,                       \
        gemv_launch<t, ks, mg, mt, u, p, GEMV_RMS>,                         \
        gemv_launch<t, ks, mg, mt, u, p, GEMV_ADD>,                         \
        gemv_launch<t, ks, mg, mt, u, p, GEMV_SILU_ADD> }
#define GEMV_CONFIG_P(ks, mg, mt, u, p, suffix)                             \
    { "k" #ks "m" #mg "t" #mt "u" #u suffix,                                \
      { gemv_launch<__nv_bfloat16, ks, mg, mt, u, p, GEMV_PLAIN>, NULL,     \
        NULL, NULL },                                                       \
      { NULL, NULL, NULL, NULL },                                           \
      (mg) * (mt) * 16 }
#define GEMV_CONFIG(ks, mg, mt, u)       GEMV_CONFIG_P(ks, mg, mt, u, 0, "")
#define GEMV_CONFIG_PIPE(ks, mg, mt, u)  GEMV_CONFIG_P(ks, mg, mt, u, 1, "p")
#define GEMV_CONFIG_FUSED(ks, mg, mt, u, p, suffix)                         \
    { "k" #ks "m" #mg "t" #mt "u" #u suffix,                                \
      GEMV_MODES(__nv_bfloat16, ks, mg, mt, u, p),                          \
      GEMV_MODES(__half, ks, mg, mt, u, p),                                 \
      (mg) * (mt) * 16 }

static const gemv_config_t  gemv_configs[] = {
    GEMV_CONFIG(8, 1, 2, 4),
    GEMV_CONFIG(8, 1, 1, 4),
    GEMV_CONFIG_FUSED(8, 1, 1, 8, 0, ""),
    GEMV_CONFIG(8, 1, 2, 2),
    GEMV_CONFIG(4, 1, 1, 8),
    GEMV_CONFIG(4, 2, 1, 4),
    GEMV_CONFIG(4, 2, 2, 4),
    GEMV_CONFIG(16, 1, 1, 4),
    GEMV_CONFIG(8, 2, 1, 4),
    GEMV_CONFIG(4, 4, 1, 4),
    GEMV_CONFIG(2, 4, 1, 8),
    GEMV_CONFIG_FUSED(8, 1, 1, 4, 1, "p"),
    GEMV_CONFIG_PIPE(8, 1, 2, 4),
    GEMV_CONFIG_PIPE(8, 2, 1, 4),
    GEMV_CONFIG_PIPE(4, 2, 1, 4),
    GEMV_CONFIG_PIPE(8, 2, 1, 2),
};

#define GEMV_NCONFIGS  (int) (sizeof(gemv_configs) / sizeof(gemv_configs[0]))
#define GEMV_DEEP      2          /* 16 rows a block, 8 loads in flight */
#define GEMV_SMALL     11         /* 16 rows a block, 4 chunks in
                                     flight and the next 4 issued
                                     before their MMAs (pipelined) */


extern "C" int
pl_cuda_gemv_configs(void)
{
    return GEMV_NCONFIGS;
}


extern "C" const char *
pl_cuda_gemv_config_name(int config)
{
    return config >= 0 && config < GEMV_NCONFIGS ? gemv_configs[config].name
                                                 : "cublas";
}


/* configuration config's kernels for activations of dt, by MODE; NULL
   for a dtype the kernel does not take */
static const gemv_launch_t *
gemv_launches(int config, pl_dtype_t dt)
{
    return dt == PL_DT_BF16 ? gemv_configs[config].launch
           : dt == PL_DT_F16 ? gemv_configs[config].launch_f16 : NULL;
}


extern "C" int
pl_cuda_gemv_built(int config, pl_dtype_t act)
{
    const gemv_launch_t  *l;

    if (config < 0 || config >= GEMV_NCONFIGS) {
        return 0;
    }
    l = gemv_launches(config, act);
    return l != NULL && l[GEMV_PLAIN] != NULL;
}


extern "C" int
pl_cuda_gemv_n_small(void)
{
    return PL_GEMV_N_SMALL;
}


/*
 * Which configuration for n rows of x against w.  From the sweeps of
 * bench/gpu/gemv on the H200 (the five Llama-2-7B shapes): up to 8 rows,
 * 16 weight rows a block with the next 4 chunks' loads issued before the
 * MMAs of these (k8m1t1u4p), the fastest configuration on every shape at
 * n = 1 and 8 (the 4096x4096 O projection 12.8 us against 14.0 for the
 * best unpipelined one; the 7B decode step at batch 1 3.91 ms against
 * 4.44).  Above 8 rows the pipelined kernels' registers cost more than
 * their overlap gives, and 16 weight rows a block with 8 loads in flight
 * is the fastest.
 */
extern "C" int
pl_cuda_gemv_pick(pl_backend_t *be, const pl_weight_t *w, int n)
{
    (void) be;
    (void) w;
    return n > 8 ? GEMV_DEEP : GEMV_SMALL;
}


static bool
gemv_takes(pl_backend_t *be, const void *x, const pl_weight_t *w, int n)
{
    return n >= 1 && n <= PL_GEMV_MAX_N && w->dtype == be->act_dtype
           && (w->dtype == PL_DT_BF16 || w->dtype == PL_DT_F16)
           && w->rows >= 1 && w->rows <= INT32_MAX
           && w->cols >= 8 && w->cols <= INT32_MAX && w->cols % 8 == 0
           && ((uintptr_t) x & 15) == 0 && ((uintptr_t) w->data & 15) == 0;
}


/* 0 launched, -1 not taken (see gemv.cuh); the plain matmul keeps the
   dispatch rule that leaves matrices too short to fill the GPU to cuBLAS,
   the fused forms do not (their alternative is two or three kernels) */
static int
gemv_go(pl_backend_t *be, void *out, const void *x, const pl_weight_t *w,
    const pl_weight_t *bias, int n, int config, int mode, gemv_fuse_t fuse,
    bool fused)
{
    size_t                xcols = mode == GEMV_SILU_ADD ? 2 * (size_t) w->cols
                                                        : w->cols;
    const gemv_launch_t  *launch;

    if (!gemv_takes(be, x, w, n) || config >= GEMV_NCONFIGS
        || xcols > INT32_MAX
        || (mode == GEMV_SILU_ADD
            && (size_t) n * w->cols * 2 > PL_GEMV_STAGE_MAX))
    {
        return -1;
    }
    if (config < 0) {
        config = pl_cuda_gemv_pick(be, w, n);

        /* Under half a block per SM the kernel leaves most of the chip
           idle, having no split of k across blocks: cuBLAS takes those. */
        if (!fused
            && w->rows / gemv_configs[config].rows_per_block
               < pl_cuda(be)->num_sms / 2)
        {
            return -1;
        }
    }
    launch = gemv_launches(config, w->dtype);
    if (launch[mode] == NULL) {
        return -1;
    }
    launch[mode](pl_cuda(be)->stream, out, x, w->data,
                 bias != NULL ? bias->data : NULL,
                 bias != NULL ? bias->dtype : PL_DT_F32, n, (int) w->rows,
                 (int) w->cols, fuse);
    PL_CUDA_LAUNCHED("gemv");
    return 0;
}


extern "C" int
pl_cuda_gemv(pl_backend_t *be, void *out, const void *x,
    const pl_weight_t *w, const pl_weight_t *bias, int n, int config)
{
    const gemv_fuse_t  none = { 0.0f, NULL };

    return gemv_go(be, out, x, w, bias, n, config, GEMV_PLAIN, none, false);
}


extern "C" int
pl_cuda_gemv_fused(pl_backend_t *be, void *out, const void *x,
    const pl_weight_t *w, const pl_weight_t *bias, int n, int config,
    const pl_matmul_fuse_t *f)
{
    gemv_fuse_t  fuse = { f->eps, f->add };
    int          mode;

    switch (f->in) {
    case PL_FUSE_IN_PLAIN:
        mode = f->add != NULL ? GEMV_ADD : GEMV_PLAIN;
        break;
    case PL_FUSE_IN_RMSNORM:
        /* only with the weight folded into w (the kernel scales its
           sums) */
        if (f->add != NULL || f->norm != NULL) {
            return -1;
        }
        mode = GEMV_RMS;
        break;
    case PL_FUSE_IN_SILU_MUL:
        if (f->add == NULL) {
            return -1;
        }
        mode = GEMV_SILU_ADD;
        break;
    default:
        return -1;
    }
    return gemv_go(be, out, x, w, bias, n, config, mode, fuse, true);
}


/* the backend's matmul_fused: the GEMV, for up to pl_cuda_gemv_n_small()
   rows */
extern "C" int
pl_cuda_matmul_fused(pl_backend_t *be, void *out, const void *x,
    const pl_weight_t *w, const pl_weight_t *bias, int n,
    const pl_matmul_fuse_t *f)
{
    if (n <= 0) {
        return 0;
    }
    if (n > pl_cuda_gemv_fused_max_n()) {
        return -1;
    }
    return pl_cuda_gemv_fused(be, out, x, w, bias, n, -1, f);
}


extern "C" int
pl_cuda_gemv_fused_max_n(void)
{
    return pl_cuda_gemv_n_small() < PL_GEMV_FUSED_MAX_N
           ? pl_cuda_gemv_n_small() : PL_GEMV_FUSED_MAX_N;
}
