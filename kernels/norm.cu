/*
 * norm: RMS normalisation, plain and fused with the residual add.
 *
 *     rmsnorm:      out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w
 *     add_rmsnorm:  residual[r] += x[r]; out[r] = rmsnorm(residual[r]) * w
 *
 * and OPT's LayerNorm:
 *
 *     layernorm:    out[r] = (x[r] - mean) / sqrt(var + eps) * w + b
 *
 * Rows of dim values of T, the activation dtype (bf16 or fp16); w and b
 * of dim fp32 (weight_load widens every vector).  One thread block per row, sized so each thread holds NV
 * vectors of VEC columns in registers (VEC = 8, 16-byte loads and float4
 * weights, when dim % 8 == 0, up to 16384 columns; else 1, up to 8192):
 * the row is read once, the weights
 * are fetched before the reduction so their latency hides behind it, a
 * warp shuffle and one shared-memory round give the block's sum, and the
 * row is written once.  Sums are fp32.  The fused form rounds the new
 * residual to T and normalises that rounded value, as the next layer
 * will see it; LayerNorm takes the variance about the mean in a second
 * pass over the registers.
 *
 * Launched with programmatic dependent launch (pl_cuda.cuh): the weights
 * are loaded before the wait for the previous kernel, the row after it,
 * and the next kernel (a GEMV, whose weight prefetch then overlaps this
 * short kernel) may launch as soon as every block has passed its wait.
 */

#include "pl_cuda.cuh"

#define NORM_THREADS      256   /* a row's block, while NV allows */
#define NORM_MAX_THREADS  512
#define NORM_MAX_NV(vec)  ((vec) == 8 ? 4 : 16)  /* vectors a thread holds
                                                    without spilling */


template <int VEC>
__device__ __forceinline__ void
load_f32(const float *p, float *v)
{
    if constexpr (VEC == 8) {
        float4  a = ((const float4 *) p)[0], b = ((const float4 *) p)[1];

        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
        v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else {
        v[0] = *p;
    }
}


/* the sum of v over the block (a multiple of 32 threads); part: 32 floats
   of shared memory for this call alone */
__device__ __forceinline__ float
block_sum(float v, float *part)
{
    int  lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    if (lane == 0) {
        part[warp] = v;
    }
    __syncthreads();
    v = 0.0f;
    for (int i = 0; i < (int) (blockDim.x >> 5); i++) {
        v += part[i];
    }
    return v;
}


template <typename T, int VEC, int NV, bool ADD>
__global__ void __launch_bounds__(NORM_MAX_THREADS)
rmsnorm_kernel(T *out, T *residual, const T *x, const float *w, int dim,
    float eps)
{
    __shared__ float  part[32];
    int64_t           base = (int64_t) blockIdx.x * dim;
    float             v[NV][VEC], wv[NV][VEC], ss = 0.0f, inv;

#pragma unroll
    for (int k = 0; k < NV; k++) {
        int  c = (threadIdx.x + k * blockDim.x) * VEC;

        if (c < dim) {
            load_f32<VEC>(w + c, wv[k]);
        }
    }
    pl_grid_wait();
    pl_grid_release();
#pragma unroll
    for (int k = 0; k < NV; k++) {
        int  c = (threadIdx.x + k * blockDim.x) * VEC;

        if (c >= dim) {
            continue;
        }
        pl_load<VEC>(x + base + c, v[k]);
        if (ADD) {
            float  r[VEC];

            pl_load<VEC>(residual + base + c, r);
#pragma unroll
            for (int e = 0; e < VEC; e++) {
                v[k][e] = pl_to_f32(pl_from_f32<T>(v[k][e] + r[e]));
            }
            pl_store<VEC>(residual + base + c, v[k]);
        }
#pragma unroll
        for (int e = 0; e < VEC; e++) {
            ss += v[k][e] * v[k][e];
        }
    }
    inv = rsqrtf(block_sum(ss, part) / dim + eps);
#pragma unroll
    for (int k = 0; k < NV; k++) {
        int  c = (threadIdx.x + k * blockDim.x) * VEC;

        if (c < dim) {
#pragma unroll
            for (int e = 0; e < VEC; e++) {
                v[k][e] = v[k][e] * inv * wv[k][e];
            }
            pl_store<VEC>(out + base + c, v[k]);
        }
    }
}


template <typename T, int VEC, int NV>
__global__ void __launch_bounds__(NORM_MAX_THREADS)
layernorm_kernel(T *out, const T *x, const float *w, const float *b, int dim,
    float eps)
{
    __shared__ float  part[2][32];
    int64_t           base = (int64_t) blockIdx.x * dim;
    float             v[NV][VEC], wv[NV][VEC], bv[NV][VEC];
    float             sum = 0.0f, var = 0.0f, mean, inv;

#pragma unroll
    for (int k = 0; k < NV; k++) {
        int  c = (threadIdx.x + k * blockDim.x) * VEC;

        if (c < dim) {
            load_f32<VEC>(w + c, wv[k]);
            load_f32<VEC>(b + c, bv[k]);
        }
    }
    pl_grid_wait();
    pl_grid_release();
#pragma unroll
    for (int k = 0; k < NV; k++) {
        int  c = (threadIdx.x + k * blockDim.x) * VEC;

        if (c >= dim) {
            continue;
        }
        pl_load<VEC>(x + base + c, v[k]);
#pragma unroll
        for (int e = 0; e < VEC; e++) {
            sum += v[k][e];
        }
    }
    mean = block_sum(sum, part[0]) / dim;
#pragma unroll
    for (int k = 0; k < NV; k++) {
        if ((threadIdx.x + k * blockDim.x) * VEC < dim) {
#pragma unroll
            for (int e = 0; e < VEC; e++) {
                var += (v[k][e] - mean) * (v[k][e] - mean);
            }
        }
    }
    inv = rsqrtf(block_sum(var, part[1]) / dim + eps);
#pragma unroll
    for (int k = 0; k < NV; k++) {
        int  c = (threadIdx.x + k * blockDim.x) * VEC;

        if (c < dim) {
#pragma unroll
            for (int e = 0; e < VEC; e++) {
                v[k][e] = (v[k][e] - mean) * inv * wv[k][e] + bv[k][e];
            }
            pl_store<VEC>(out + base + c, v[k]);
        }
    }
}


/* How a row of dim spreads over a block: *vec columns a load, the
   returned nv loads a thread (the fewest that keep the block within
   NORM_THREADS), *threads a multiple of 32. */
static int
norm_shape(const char *what, int dim, int *vec, int *threads)
{
    int  vecs, nv = 1;

    *vec = dim % 8 == 0 ? 8 : 1;
    vecs = dim / *vec;
    while (nv < NORM_MAX_NV(*vec) && vecs > nv * NORM_THREADS) {
        nv *= 2;
    }
    *threads = ((vecs + nv - 1) / nv + 31) / 32 * 32;
    if (*threads > NORM_MAX_THREADS) {
        pl_cuda_fail(what, "hidden size too large");
    }
    return nv;
}


static void
weights_f32(const char *what, const pl_weight_t *w)
{
    if (w->dtype != PL_DT_F32) {
        pl_cuda_fail(what, "vector weight not loaded as fp32");
    }
}


template <typename T, int VEC, bool ADD>
static void
rmsnorm_go(int nv, int n, int threads, pl_cuda_t *cu, T *out, T *residual,
    const T *x, const float *w, int dim, float eps)
{
    switch (nv) {
    case 1:
        pl_cuda_launch(cu, "rmsnorm", rmsnorm_kernel<T, VEC, 1, ADD>, n,
                       threads, 0, out, residual, x, w, dim, eps);
        break;
    case 2:
        pl_cuda_launch(cu, "rmsnorm", rmsnorm_kernel<T, VEC, 2, ADD>, n,
                       threads, 0, out, residual, x, w, dim, eps);
        break;
    case 4:
        pl_cuda_launch(cu, "rmsnorm", rmsnorm_kernel<T, VEC, 4, ADD>, n,
                       threads, 0, out, residual, x, w, dim, eps);
        break;
    default:
        if constexpr (VEC == 1) {
            if (nv == 8) {
                pl_cuda_launch(cu, "rmsnorm", rmsnorm_kernel<T, 1, 8, ADD>,
                               n, threads, 0, out, residual, x, w, dim,
                               eps);
            } else {
                pl_cuda_launch(cu, "rmsnorm", rmsnorm_kernel<T, 1, 16, ADD>,
                               n, threads, 0, out, residual, x, w, dim,
                               eps);
            }
        }
    }
}


template <typename T, int VEC>
static void
layernorm_go(int nv, int n, int threads, pl_cuda_t *cu, T *out, const T *x,
    const float *w, const float *b, int dim, float eps)
{
    switch (nv) {
    case 1:
        pl_cuda_launch(cu, "layernorm", layernorm_kernel<T, VEC, 1>, n,
                       threads, 0, out, x, w, b, dim, eps);
        break;
    case 2:
        pl_cuda_launch(cu, "layernorm", layernorm_kernel<T, VEC, 2>, n,
                       threads, 0, out, x, w, b, dim, eps);
        break;
    case 4:
        pl_cuda_launch(cu, "layernorm", layernorm_kernel<T, VEC, 4>, n,
                       threads, 0, out, x, w, b, dim, eps);
        break;
    default:
        if constexpr (VEC == 1) {
            if (nv == 8) {
                pl_cuda_launch(cu, "layernorm", layernorm_kernel<T, 1, 8>, n,
                               threads, 0, out, x, w, b, dim, eps);
            } else {
                pl_cuda_launch(cu, "layernorm", layernorm_kernel<T, 1, 16>,
                               n, threads, 0, out, x, w, b, dim, eps);
            }
        }
    }
}


template <typename T>
static void
layernorm_t(pl_cuda_t *cu, int nv, int vec, int threads, void *out,
    const void *x, const pl_weight_t *w, const pl_weight_t *b, int n,
    int dim, float eps)
{
    if (vec == 8) {
        layernorm_go<T, 8>(nv, n, threads, cu, (T *) out, (const T *) x,
                           (const float *) w->data, (const float *) b->data,
                           dim, eps);
    } else {
        layernorm_go<T, 1>(nv, n, threads, cu, (T *) out, (const T *) x,
                           (const float *) w->data, (const float *) b->data,
                           dim, eps);
    }
}


void
pl_cuda_layernorm(pl_backend_t *be, void *out, const void *x,
    const pl_weight_t *w, const pl_weight_t *b, int n, int dim, float eps)
{
    int  vec, threads, nv;

    if (n <= 0) {
        return;
    }
    nv = norm_shape("layernorm", dim, &vec, &threads);
    weights_f32("layernorm", w);
    weights_f32("layernorm", b);
    PL_CUDA_ACT(be, "layernorm", layernorm_t, pl_cuda(be), nv, vec, threads,
                out, x, w, b, n, dim, eps);
    PL_CUDA_LAUNCHED("layernorm");
}


template <typename T>
static void
rmsnorm_t(pl_cuda_t *cu, int nv, int vec, int threads, void *out,
    void *residual, const void *x, const float *w, int n, int dim,
    float eps)
{
    T        *o = (T *) out, *r = (T *) residual;
    const T  *xt = (const T *) x;

    if (vec == 8 && r != NULL) {
        rmsnorm_go<T, 8, true>(nv, n, threads, cu, o, r, xt, w, dim, eps);
    } else if (vec == 8) {
        rmsnorm_go<T, 8, false>(nv, n, threads, cu, o, r, xt, w, dim, eps);
    } else if (r != NULL) {
        rmsnorm_go<T, 1, true>(nv, n, threads, cu, o, r, xt, w, dim, eps);
    } else {
        rmsnorm_go<T, 1, false>(nv, n, threads, cu, o, r, xt, w, dim, eps);
    }
}


static void
norm_launch(pl_backend_t *be, void *out, void *residual, const void *x,
    const pl_weight_t *w, int n, int dim, float eps)
{
    int  vec, threads, nv;

    if (n <= 0) {
        return;
    }
    nv = norm_shape("rmsnorm", dim, &vec, &threads);
    weights_f32("rmsnorm", w);
    PL_CUDA_ACT(be, "rmsnorm", rmsnorm_t, pl_cuda(be), nv, vec, threads, out,
                residual, x, (const float *) w->data, n, dim, eps);
    PL_CUDA_LAUNCHED("rmsnorm");
}


void
pl_cuda_rmsnorm(pl_backend_t *be, void *out, const void *x,
    const pl_weight_t *w, int n, int dim, float eps)
{
    norm_launch(be, out, NULL, x, w, n, dim, eps);
}


void
pl_cuda_add_rmsnorm(pl_backend_t *be, void *out, void *residual,
    const void *x, const pl_weight_t *w, int n, int dim, float eps)
{
    norm_launch(be, out, residual, x, w, n, dim, eps);
}
