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
template <typename T, int MT, int NT, int U>
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
            b[u][nt] = __ldg(xp[nt] + (c + u) * 4);
        }
    }
}


template <typename T, int KS, int MG, int MT, int NT, int U, int P>
__global__ void __launch_bounds__(KS * MG * 32)
gemv_kernel(T *out, const T *__restrict__ x, const T *__restrict__ w,
    const void *bias, pl_dtype_t bias_dt, int n, int rows, int cols)
{
    constexpr int  TILE = MG * MT * NT * 128;   /* a block's accumulators */
    __shared__ float  part[KS][TILE];

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
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        xp[nt] = (const uint4 *) x + min(nt * 8 + g, n - 1) * stride + t;
    }

    if (P) {
        /* pipelined: the next U chunks' loads go out before the MMAs of
           these, so a warp keeps 2U chunks in flight between round trips */
        uint4  a[U][MT][2], b[U][NT];

        c = lo;
        if (c + U <= full) {
            gemv_load<T, MT, NT, U>(a, b, wp, xp, c);
        }
        for (; c + U <= full; c += U) {
            const bool  more = c + 2 * U <= full;
            uint4       na[U][MT][2], nb[U][NT];

            if (more) {
                gemv_load<T, MT, NT, U>(na, nb, wp, xp, c + U);
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

            gemv_load<T, MT, NT, U>(a, b, wp, xp, c);
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
            b[nt] = !in ? zero : __ldg(xp[nt] + c * 4);
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
        if (bias != NULL) {
            s += pl_weight_at(bias, bias_dt, row);
        }
        out[(size_t) tok * rows + row] = pl_from_f32<T>(s);
    }
}


/* out, x and w of the instantiation's T */
typedef void (*gemv_launch_t)(cudaStream_t st, void *out, const void *x,
    const void *w, const void *bias, pl_dtype_t bias_dt, int n, int rows,
    int cols);

typedef struct {
    const char     *name;
    gemv_launch_t   launch;         /* bf16 */
    gemv_launch_t   launch_f16;     /* fp16; NULL: not built */
    int             rows_per_block;
} gemv_config_t;


template <typename T, int KS, int MG, int MT, int NT, int U, int P>
static void
gemv_start(unsigned blocks, unsigned threads, cudaStream_t st, T *out,
    const T *x, const T *w, const void *bias, pl_dtype_t bias_dt, int n,
    int rows, int cols)
{
    gemv_kernel<T, KS, MG, MT, NT, U, P><<<blocks, threads, 0, st>>>(
        out, x, w, bias, bias_dt, n, rows, cols);
}


template <typename T, int KS, int MG, int MT, int U, int P>
static void
gemv_launch(cudaStream_t st, void *out_, const void *x_, const void *w_,
    const void *bias, pl_dtype_t bias_dt, int n, int rows, int cols)
{
    T              *out = (T *) out_;
    const T        *x = (const T *) x_, *w = (const T *) w_;
    const unsigned  blocks = pl_cuda_blocks(rows, MG * MT * 16);
    const unsigned  threads = KS * MG * 32;

    switch ((n + 7) / 8) {
    case 1:
        gemv_start<T, KS, MG, MT, 1, U, P>(blocks, threads, st, out, x, w,
                                           bias, bias_dt, n, rows, cols);
        break;
    case 2:
        gemv_start<T, KS, MG, MT, 2, U, P>(blocks, threads, st, out, x, w,
                                           bias, bias_dt, n, rows, cols);
        break;
    case 3:
        gemv_start<T, KS, MG, MT, 3, U, P>(blocks, threads, st, out, x, w,
                                           bias, bias_dt, n, rows, cols);
        break;
    default:
        gemv_start<T, KS, MG, MT, 4, U, P>(blocks, threads, st, out, x, w,
                                           bias, bias_dt, n, rows, cols);
        break;
    }
}


/* Named kKSmMGtMTuU, with a "p" when pipelined (P).  GEMV_SMALL and
   GEMV_DEEP are dispatch's choices, built for bf16 and fp16; the others
   are there for the benchmark's sweep, bf16 only. */
#define GEMV_CONFIG_P(ks, mg, mt, u, p, suffix)                             \
    { "k" #ks "m" #mg "t" #mt "u" #u suffix,                                \
      gemv_launch<__nv_bfloat16, ks, mg, mt, u, p>, NULL,                   \
      (mg) * (mt) * 16 }
#define GEMV_CONFIG(ks, mg, mt, u)       GEMV_CONFIG_P(ks, mg, mt, u, 0, "")
#define GEMV_CONFIG_PIPE(ks, mg, mt, u)  GEMV_CONFIG_P(ks, mg, mt, u, 1, "p")
#define GEMV_CONFIG_F16(ks, mg, mt, u, p, suffix)                           \
    { "k" #ks "m" #mg "t" #mt "u" #u suffix,                                \
      gemv_launch<__nv_bfloat16, ks, mg, mt, u, p>,                         \
      gemv_launch<__half, ks, mg, mt, u, p>,                                \
      (mg) * (mt) * 16 }

static const gemv_config_t  gemv_configs[] = {
    GEMV_CONFIG(8, 1, 2, 4),
    GEMV_CONFIG(8, 1, 1, 4),
    GEMV_CONFIG_F16(8, 1, 1, 8, 0, ""),
    GEMV_CONFIG(8, 1, 2, 2),
    GEMV_CONFIG(4, 1, 1, 8),
    GEMV_CONFIG(4, 2, 1, 4),
    GEMV_CONFIG(4, 2, 2, 4),
    GEMV_CONFIG(16, 1, 1, 4),
    GEMV_CONFIG(8, 2, 1, 4),
    GEMV_CONFIG(4, 4, 1, 4),
    GEMV_CONFIG(2, 4, 1, 8),
    GEMV_CONFIG_F16(8, 1, 1, 4, 1, "p"),
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


/* configuration config's kernel for activations of dt; NULL when it is
   not built for dt */
static gemv_launch_t
gemv_launch_for(int config, pl_dtype_t dt)
{
    return dt == PL_DT_BF16 ? gemv_configs[config].launch
           : dt == PL_DT_F16 ? gemv_configs[config].launch_f16 : NULL;
}


extern "C" int
pl_cuda_gemv_built(int config, pl_dtype_t act)
{
    return config >= 0 && config < GEMV_NCONFIGS
           && gemv_launch_for(config, act) != NULL;
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


extern "C" int
pl_cuda_gemv(pl_backend_t *be, void *out, const void *x,
    const pl_weight_t *w, const pl_weight_t *bias, int n, int config)
{
    gemv_launch_t  launch;

    if (!gemv_takes(be, x, w, n) || config >= GEMV_NCONFIGS) {
        return -1;
    }
    if (config < 0) {
        config = pl_cuda_gemv_pick(be, w, n);

        /* Under half a block per SM the kernel leaves most of the chip
           idle, having no split of k across blocks: cuBLAS takes those. */
        if (w->rows / gemv_configs[config].rows_per_block
            < pl_cuda(be)->num_sms / 2)
        {
            return -1;
        }
    }
    launch = gemv_launch_for(config, w->dtype);
    if (launch == NULL) {
        return -1;
    }
    launch(pl_cuda(be)->stream, out, x, w->data,
           bias != NULL ? bias->data : NULL,
           bias != NULL ? bias->dtype : PL_DT_F32, n, (int) w->rows,
           (int) w->cols);
    PL_CUDA_LAUNCHED("gemv");
    return 0;
}
