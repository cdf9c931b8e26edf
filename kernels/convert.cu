/*
 * convert: element-wise dtype conversion on the device, used by weight_load
 * (checkpoint dtype to the activation dtype, bf16 or fp16, or to fp32) and
 * download_f32 (activations to fp32).  One thread per element, grid-stride;
 * rounding to nearest even, so a value beyond fp16's range becomes
 * infinity (the model loader refuses such weights before they get here).
 */

#include "pl_cuda.cuh"


template <typename Out>
__global__ void
convert_kernel(Out *dst, const void *src, pl_dtype_t src_dtype, int64_t count)
{
    int64_t  i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x;
    int64_t  step = (int64_t) gridDim.x * blockDim.x;

    for (; i < count; i += step) {
        dst[i] = pl_from_f32<Out>(pl_weight_at(src, src_dtype, i));
    }
}


void
pl_cuda_convert(pl_backend_t *be, void *dst, pl_dtype_t dst_dtype,
    const void *src, pl_dtype_t src_dtype, int64_t count)
{
    cudaStream_t  st = pl_cuda(be)->stream;
    unsigned      blocks = pl_cuda_blocks(count, 256);

    if (count <= 0) {
        return;
    }
    if (blocks > 65535u) {
        blocks = 65535u;
    }
    switch (dst_dtype) {
    case PL_DT_F32:
        convert_kernel<float><<<blocks, 256, 0, st>>>((float *) dst, src,
                                                     src_dtype, count);
        break;
    case PL_DT_BF16:
        convert_kernel<__nv_bfloat16><<<blocks, 256, 0, st>>>(
            (__nv_bfloat16 *) dst, src, src_dtype, count);
        break;
    case PL_DT_F16:
        convert_kernel<__half><<<blocks, 256, 0, st>>>((__half *) dst, src,
                                                      src_dtype, count);
        break;
    default:
        pl_cuda_fail("convert", "unknown destination dtype");
    }
    PL_CUDA_LAUNCHED("convert");
}
