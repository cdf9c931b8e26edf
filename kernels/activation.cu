/*
 * activation: out[n][inter] = silu(gu[n][0:inter]) * gu[n][inter:2*inter],
 * bf16 in and out, fp32 math.  One thread per output element, grid-stride.
 */

#include "pl_cuda.cuh"


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
    int64_t   total = (int64_t) n * inter;
    unsigned  blocks = pl_cuda_blocks(total, 256);

    if (total <= 0) {
        return;
    }
    if (blocks > 65535u) {
        blocks = 65535u;
    }
    silu_mul_kernel<<<blocks, 256, 0, pl_cuda(be)->stream>>>(
        (__nv_bfloat16 *) out, (const __nv_bfloat16 *) gate_up, total, inter);
    PL_CUDA_LAUNCHED("silu_mul");
}
