/*
 * convert: element-wise dtype conversion on the device, used by weight_load
 * (checkpoint dtype to bf16 or fp32) and download_f32 (bf16 activations to
 * fp32).  One thread per element, grid-stride.
 */

#include "pl_cuda.cuh"


template <typename Out>
__device__ __forceinline__ Out pl_from_f32(float f);

template <>
__device__ __forceinline__ float
pl_from_f32<float>(float f)
{
    return f;
}

template <>
__device__ __forceinline__ __nv_bfloat16
pl_from_f32<__nv_bfloat16>(float f)
{
    return __float2bfloat16_rn(f);
}


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
    if (dst_dtype == PL_DT_F32) {
        convert_kernel<float><<<blocks, 256, 0, st>>>((float *) dst, src,
                                                     src_dtype, count);
    } else if (dst_dtype == PL_DT_BF16) {
        convert_kernel<__nv_bfloat16><<<blocks, 256, 0, st>>>(
            (__nv_bfloat16 *) dst, src, src_dtype, count);
    } else {
        pl_cuda_fail("convert", "only bf16 and fp32 destinations");
    }
    PL_CUDA_LAUNCHED("convert");
}
