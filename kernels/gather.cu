/*
 * gather: out[i][dim] = x[rows[i]][dim] for i < n, rows of 16-bit
 * activations (bf16 or fp16: moved as bits, whichever it is); used to pick
 * the one row per sequence whose logits are wanted.  One thread block per
 * output row, 16-byte copies when dim allows.
 *
 * Launched with programmatic dependent launch (pl_cuda.cuh): rows (a batch
 * array, copied in before the step) is read before the wait for the
 * previous kernel, x after it.
 */

#include "pl_cuda.cuh"


__global__ void
gather_kernel(uint16_t *out, const uint16_t *x, const int32_t *rows, int dim)
{
    const uint16_t  *src = x + (int64_t) rows[blockIdx.x] * dim;
    uint16_t        *dst = out + (int64_t) blockIdx.x * dim;

    pl_grid_wait();
    pl_grid_release();
    if (dim % 8 == 0) {
        for (int c = threadIdx.x; c < dim / 8; c += blockDim.x) {
            ((uint4 *) dst)[c] = ((const uint4 *) src)[c];
        }
        return;
    }
    for (int c = threadIdx.x; c < dim; c += blockDim.x) {
        dst[c] = src[c];
    }
}


void
pl_cuda_gather_rows(pl_backend_t *be, void *out, const void *x,
    const int32_t *rows, int n, int dim)
{
    if (n <= 0) {
        return;
    }
    pl_cuda_launch(pl_cuda(be), "gather_rows", gather_kernel, n, 128, 0,
                   (uint16_t *) out, (const uint16_t *) x, rows, dim);
    PL_CUDA_LAUNCHED("gather_rows");
}
