/*
 * activation: the element-wise operations, in and out of T, the activation
 * dtype (bf16 or fp16), fp32 math, one thread per output element
 * (silu_mul: per eight, 16-byte loads, when the row allows), grid-stride:
 *
 *     silu_mul:  out[n][inter] = silu(gu[n][0:inter]) * gu[n][inter:2*inter]
 *     relu:      out[n][dim] = max(x, 0)             (OPT)
 *     add:       residual[n][dim] += x               (OPT)
 *
 * Launched with programmatic dependent launch (pl_cuda.cuh): every input
 * comes from the previous kernel, so a block only waits for it first and
 * lets the next kernel launch at once, to run its own prologue (a GEMV's
 * weight prefetch) beside this short one.
 */

#include "pl_cuda.cuh"


static unsigned
elementwise_blocks(int64_t total, unsigned threads)
{
    unsigned  blocks = pl_cuda_blocks(total, threads);

    return blocks > 65535u ? 65535u : blocks;
}


__device__ __forceinline__ float
silu_times(float g, float u)
{
    return g / (1.0f + __expf(-g)) * u;
}


template <typename T>
__global__ void
silu_mul_kernel(T *out, const T *gu, int64_t total, int inter)
{
    int64_t  i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x;
    int64_t  step = (int64_t) gridDim.x * blockDim.x;

    pl_grid_wait();
    pl_grid_release();
    for (; i < total; i += step) {
        int64_t  r = i / inter, c = i - r * inter;
        float    g = pl_to_f32(gu[r * 2 * inter + c]);
        float    u = pl_to_f32(gu[r * 2 * inter + inter + c]);

        out[i] = pl_from_f32<T>(silu_times(g, u));
    }
}


/* the same over 16-byte vectors (inter % 8 == 0): total and inter count
   vectors of eight */
template <typename T>
__global__ void
silu_mul_x8_kernel(uint4 *out, const uint4 *gu, int64_t total, int inter)
{
    int64_t  i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x;
    int64_t  step = (int64_t) gridDim.x * blockDim.x;

    pl_grid_wait();
    pl_grid_release();
    for (; i < total; i += step) {
        int64_t  r = i / inter, c = i - r * inter;
        float    g[8], u[8];

        pl_x8_to_f32<T>(gu[r * 2 * inter + c], g);
        pl_x8_to_f32<T>(gu[r * 2 * inter + inter + c], u);
#pragma unroll
        for (int e = 0; e < 8; e++) {
            g[e] = silu_times(g[e], u[e]);
        }
        out[i] = pl_f32_to_x8<T>(g);
    }
}


template <typename T>
static void
silu_mul_t(pl_cuda_t *cu, void *out, const void *gate_up, int64_t total,
    int inter)
{
    if (inter % 8 == 0) {
        /* 128 threads a block: one token's 11008 columns still reach
           eleven SMs */
        pl_cuda_launch(cu, "silu_mul", silu_mul_x8_kernel<T>,
                       elementwise_blocks(total / 8, 128), 128, 0,
                       (uint4 *) out, (const uint4 *) gate_up, total / 8,
                       inter / 8);
    } else {
        pl_cuda_launch(cu, "silu_mul", silu_mul_kernel<T>,
                       elementwise_blocks(total, 256), 256, 0, (T *) out,
                       (const T *) gate_up, total, inter);
    }
}


void
pl_cuda_silu_mul(pl_backend_t *be, void *out, const void *gate_up, int n,
    int inter)
{
    int64_t  total = (int64_t) n * inter;

    if (total <= 0) {
        return;
    }
    PL_CUDA_ACT(be, "silu_mul", silu_mul_t, pl_cuda(be), out, gate_up, total,
                inter);
    PL_CUDA_LAUNCHED("silu_mul");
}


template <typename T>
__global__ void
relu_kernel(T *out, const T *x, int64_t total)
{
    int64_t  i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x;
    int64_t  step = (int64_t) gridDim.x * blockDim.x;

    pl_grid_wait();
    pl_grid_release();
    for (; i < total; i += step) {
        out[i] = pl_from_f32<T>(fmaxf(pl_to_f32(x[i]), 0.0f));
    }
}


template <typename T>
__global__ void
add_kernel(T *residual, const T *x, int64_t total)
{
    int64_t  i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x;
    int64_t  step = (int64_t) gridDim.x * blockDim.x;

    pl_grid_wait();
    pl_grid_release();
    for (; i < total; i += step) {
        residual[i] = pl_from_f32<T>(pl_to_f32(residual[i])
                                     + pl_to_f32(x[i]));
    }
}


template <typename T>
static void
relu_t(pl_cuda_t *cu, void *out, const void *x, int64_t total)
{
    pl_cuda_launch(cu, "relu", relu_kernel<T>,
                   elementwise_blocks(total, 256), 256, 0, (T *) out,
                   (const T *) x, total);
}


void
pl_cuda_relu(pl_backend_t *be, void *out, const void *x, int n, int dim)
{
    int64_t  total = (int64_t) n * dim;

    if (total <= 0) {
        return;
    }
    PL_CUDA_ACT(be, "relu", relu_t, pl_cuda(be), out, x, total);
    PL_CUDA_LAUNCHED("relu");
}


template <typename T>
static void
add_t(pl_cuda_t *cu, void *residual, const void *x, int64_t total)
{
    pl_cuda_launch(cu, "add", add_kernel<T>,
                   elementwise_blocks(total, 256), 256, 0, (T *) residual,
                   (const T *) x, total);
}


void
pl_cuda_add(pl_backend_t *be, void *residual, const void *x, int n, int dim)
{
    int64_t  total = (int64_t) n * dim;

    if (total <= 0) {
        return;
    }
    PL_CUDA_ACT(be, "add", add_t, pl_cuda(be), residual, x, total);
    PL_CUDA_LAUNCHED("add");
}
