/*
 * embedding: out[n][dim] (bf16) = table[ids[i]], table [vocab][dim] in any
 * weight dtype.  One thread block per token row; ids outside the table
 * give a zero row (the runner validates ids, this only keeps a bad one from
 * reading outside the table).
 *
 * Launched with programmatic dependent launch (pl_cuda.cuh): ids (a batch
 * array, copied in before the step) are read before the wait for the
 * previous kernel, the table read and out written after it.
 */

#include "pl_cuda.cuh"


__global__ void
embedding_kernel(__nv_bfloat16 *out, const void *table, pl_dtype_t dt,
    int64_t vocab, const int32_t *ids, int dim)
{
    int64_t         id = ids[blockIdx.x];
    __nv_bfloat16  *row = out + (int64_t) blockIdx.x * dim;

    pl_grid_wait();
    pl_grid_release();
    for (int c = threadIdx.x; c < dim; c += blockDim.x) {
        float  v = 0.0f;

        if (id >= 0 && id < vocab) {
            v = pl_weight_at(table, dt, id * dim + c);
        }
        row[c] = __float2bfloat16_rn(v);
    }
}


void
pl_cuda_embedding(pl_backend_t *be, void *out, const pl_weight_t *table,
    const int32_t *ids, int n)
{
    if (n <= 0) {
        return;
    }
    pl_cuda_launch(pl_cuda(be), "embedding", embedding_kernel, n, 256, 0,
                   (__nv_bfloat16 *) out, (const void *) table->data,
                   table->dtype, table->rows, ids, (int) table->cols);
    PL_CUDA_LAUNCHED("embedding");
}
