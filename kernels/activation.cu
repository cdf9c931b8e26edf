/*
 * activation: the element-wise operations, bf16 in and out, fp32 math, one
 * thread per output element, grid-stride:
 *
 *     silu_mul:  out[n][inter] = silu(gu[n][0:inter]) * gu[n][inter:2*inter]
 *     relu:      out[n][dim] = max(x, 0)             (OPT)
 *     add:       residual[n][dim] += x               (OPT)
 */

#include "pl_cuda.cuh"


static unsigned
elementwise_blocks(int64_t total)
{
    unsigned  blocks = pl_cuda_blocks(total, 256);

    return blocks > 65535u ? 65535u : blocks;
}


__global__ void
silu_mul_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *gu, int64_t total,
    int inter)
{
    int64_t  i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x;
    int64_t  step = (int64_t) gridDim.x * blockDim.x;

    for (; i < total; i += step) {
        int64_t  r = i / inter, c = i - r * inter;
        float    g = __bfloat162float(gu[r * 2 * inter + c]);
        float    u = __bfloat162float(gu[r * 2 * inter + inter + c]);

        out[i] = __float2bfloat16_rn(g / (1.0f + __expf(-g)) * u);
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
    silu_mul_kernel<<<elementwise_blocks(total), 256, 0,
                      pl_cuda(be)->stream>>>(
        (__nv_bfloat16 *) out, (const __nv_bfloat16 *) gate_up, total, inter);
    PL_CUDA_LAUNCHED("silu_mul");
}


__global__ void
relu_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *x, int64_t total)
{
    int64_t  i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x;
    int64_t  step = (int64_t) gridDim.x * blockDim.x;

    for (; i < total; i += step) {
        out[i] = __float2bfloat16_rn(fmaxf(__bfloat162float(x[i]), 0.0f));
    }
}


__global__ void
add_kernel(__nv_bfloat16 *residual, const __nv_bfloat16 *x, int64_t total)
{
    int64_t  i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x;
    int64_t  step = (int64_t) gridDim.x * blockDim.x;

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
    relu_kernel<<<elementwise_blocks(total), 256, 0, pl_cuda(be)->stream>>>(
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
    add_kernel<<<elementwise_blocks(total), 256, 0, pl_cuda(be)->stream>>>(
        (__nv_bfloat16 *) residual, (const __nv_bfloat16 *) x, total);
    PL_CUDA_LAUNCHED("add");
}
