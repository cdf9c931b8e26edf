/*
 * activation: the element-wise operations, bf16 in and out, fp32 math, one
 * thread per output element (silu_mul: per eight, 16-byte loads, when the
 * row allows), grid-stride:
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


__global__ void
silu_mul_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *gu, int64_t total,
    int inter)
{
    int64_t  i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x;
    int64_t  step = (int64_t) gridDim.x * blockDim.x;

    pl_grid_wait();
    pl_grid_release();
    for (; i < total; i += step) {
        int64_t  r = i / inter, c = i - r * inter;
        float    g = __bfloat162float(gu[r * 2 * inter + c]);
        float    u = __bfloat162float(gu[r * 2 * inter + inter + c]);

        out[i] = __float2bfloat16_rn(silu_times(g, u));
    }
}


/* the same over 16-byte vectors (inter % 8 == 0): total and inter count
   vectors of eight */
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

        pl_bf16x8_to_f32(gu[r * 2 * inter + c], g);
        pl_bf16x8_to_f32(gu[r * 2 * inter + inter + c], u);
#pragma unroll
        for (int e = 0; e < 8; e++) {
            g[e] = silu_times(g[e], u[e]);
        }
        out[i] = pl_f32_to_bf16x8(g);
    }
}


void
pl_cuda_silu_mul(pl_backend_t *be, void *out, const void *gate_up, int n,
    int inter)
{
    pl_cuda_t    *cu = pl_cuda(be);
    int64_t       total = (int64_t) n * inter;

    if (total <= 0) {
        return;
    }
    if (inter % 8 == 0) {
        /* 128 threads a block: one token's 11008 columns still reach
           eleven SMs */
        pl_cuda_launch(cu, "silu_mul", silu_mul_x8_kernel,
                       elementwise_blocks(total / 8, 128), 128, 0,
                       (uint4 *) out, (const uint4 *) gate_up, total / 8,
                       inter / 8);
    } else {
        pl_cuda_launch(cu, "silu_mul", silu_mul_kernel,
                       elementwise_blocks(total, 256), 256, 0,
                       (__nv_bfloat16 *) out,
                       (const __nv_bfloat16 *) gate_up, total, inter);
    }
    PL_CUDA_LAUNCHED("silu_mul");
}


__global__ void
relu_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *x, int64_t total)
{
    int64_t  i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x;
    int64_t  step = (int64_t) gridDim.x * blockDim.x;

    pl_grid_wait();
    pl_grid_release();
    for (; i < total; i += step) {
        out[i] = __float2bfloat16_rn(fmaxf(__bfloat162float(x[i]), 0.0f));
    }
}


__global__ void
add_kernel(__nv_bfloat16 *residual, const __nv_bfloat16 *x, int64_t total)
{
    int64_t  i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x;
    int64_t  step = (int64_t) gridDim.x * blockDim.x;

    pl_grid_wait();
    pl_grid_release();
    for (; i < total; i += step) {
        residual[i] = __float2bfloat16_rn(__bfloat162float(residual[i])
                                          + __bfloat162float(x[i]));
    }
}


void
pl_cuda_relu(pl_backend_t *be, void *out, const void *x, int n, int dim)
{
    int64_t  total = (int64_t) n * dim;

    if (total <= 0) {
        return;
    }
    pl_cuda_launch(pl_cuda(be), "relu", relu_kernel,
                   elementwise_blocks(total, 256), 256, 0,
                   (__nv_bfloat16 *) out, (const __nv_bfloat16 *) x, total);
    PL_CUDA_LAUNCHED("relu");
}


void
pl_cuda_add(pl_backend_t *be, void *residual, const void *x, int n, int dim)
{
    int64_t  total = (int64_t) n * dim;

    if (total <= 0) {
        return;
    }
    pl_cuda_launch(pl_cuda(be), "add", add_kernel,
                   elementwise_blocks(total, 256), 256, 0,
                   (__nv_bfloat16 *) residual, (const __nv_bfloat16 *) x,
                   total);
    PL_CUDA_LAUNCHED("add");
}
