/*
 * tma: host side of the tensor maps of tma.cuh.  The two driver functions
 * are looked up once through cudaGetDriverEntryPointByVersion (the ABI of
 * CUDA 12.0, where cuTensorMapEncodeTiled first appeared); a process whose
 * driver lacks them gets -1 or 0 from every call, and the kernels fall
 * back to their cp.async loads.
 */

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "tma.cuh"

typedef struct {
    int                                  looked;
    PFN_cuTensorMapEncodeTiled_v12000    encode;
    PFN_cuMemGetAddressRange_v3020       range;
} tma_driver_t;

static tma_driver_t  tma_driver;


static void *
tma_entry(const char *symbol)
{
    void                             *fn = NULL;
    enum cudaDriverEntryPointQueryResult  q;

#if CUDART_VERSION >= 12050
    if (cudaGetDriverEntryPointByVersion(symbol, &fn, 12000,
                                         cudaEnableDefault, &q)
        != cudaSuccess)
#else
    if (cudaGetDriverEntryPoint(symbol, &fn, cudaEnableDefault, &q)
        != cudaSuccess)
#endif
    {
        cudaGetLastError();
        return NULL;
    }
    return q == cudaDriverEntryPointSuccess ? fn : NULL;
}


/* the lookup is idempotent, so threads racing through it store the same
   pointers */
static const tma_driver_t *
tma_driver_get(void)
{
    if (!tma_driver.looked) {
        tma_driver.encode = (PFN_cuTensorMapEncodeTiled_v12000)
                            tma_entry("cuTensorMapEncodeTiled");
        tma_driver.range = (PFN_cuMemGetAddressRange_v3020)
                           tma_entry("cuMemGetAddressRange");
        tma_driver.looked = 1;
    }
    return &tma_driver;
}


int
pl_tma_map_16(CUtensorMap *map, int fp16, const void *base,
    const uint64_t dims[3], const uint64_t strides[2], const uint32_t box[3])
{
    const tma_driver_t  *drv = tma_driver_get();
    cuuint64_t           gdim[3] = { dims[0], dims[1], dims[2] };
    cuuint64_t           gstride[2] = { strides[0], strides[1] };
    cuuint32_t           bdim[3] = { box[0], box[1], box[2] };
    cuuint32_t           estride[3] = { 1, 1, 1 };

    if (drv->encode == NULL) {
        return -1;
    }
    return drv->encode(map, fp16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3,
                       (void *) base, gdim, gstride, bdim, estride,
                       CU_TENSOR_MAP_INTERLEAVE_NONE,
                       CU_TENSOR_MAP_SWIZZLE_128B,
                       CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                       CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
           == CUDA_SUCCESS ? 0 : -1;
}


uint64_t
pl_tma_rows_left(const void *p, size_t row_bytes)
{
    const tma_driver_t  *drv = tma_driver_get();
    CUdeviceptr          base = 0, at = (CUdeviceptr) (uintptr_t) p;
    size_t               size = 0;

    if (drv->range == NULL || drv->range(&base, &size, at) != CUDA_SUCCESS
        || at < base || at - base >= size)
    {
        return 0;
    }
    return (uint64_t) (base + size - at) / row_bytes;
}
