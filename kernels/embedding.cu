/*
 * embedding: out[n][dim] (T, the activation dtype: bf16 or fp16) =
 * table[ids[i]], table [vocab][dim] in any weight dtype.  One thread block
 * per token row, copied 16 bytes at a time when the table holds T (the
 * loads of a row in flight together, where the element loop waits for
 * each in turn); ids outside the table give a zero row (the runner
 * validates ids, this only keeps a bad one from reading outside the
 * table).
 *
 * Launched with programmatic dependent launch (pl_cuda.cuh): ids (a batch
 * array, copied in before the step) are read before the wait for the
 * previous kernel, the table read and out written after it.
 */

#include "pl_cuda.cuh"


template <typename T>
__global__ void
embedding_kernel(T *__restrict__ out, const void *__restrict__ table,
    pl_dtype_t dt, int64_t vocab, const int32_t *ids, int dim, int raw)
{
    int64_t   id = ids[blockIdx.x];
    T        *row = out + (int64_t) blockIdx.x * dim;
    bool      in = id >= 0 && id < vocab;

    pl_grid_wait();
    pl_grid_release();
    if (raw) {
        /* the table holds T and rows are whole uint4s: 16-byte copies */
        const uint4  *src = (const uint4 *) table + id * (dim / 8);
        uint4        *dst = (uint4 *) row;

        for (int c = threadIdx.x; c < dim / 8; c += blockDim.x) {
            dst[c] = in ? __ldg(src + c) : make_uint4(0, 0, 0, 0);
        }
        return;
    }
    for (int c = threadIdx.x; c < dim; c += blockDim.x) {
        float  v = 0.0f;

        if (in) {
            v = pl_weight_at(table, dt, id * dim + c);
        }
        row[c] = pl_from_f32<T>(v);
    }
}


template <typename T>
static void
embedding_t(pl_cuda_t *cu, void *out, const pl_weight_t *table,
    const int32_t *ids, int n)
{
    pl_dtype_t  tdt = std::is_same_v<T, __half> ? PL_DT_F16 : PL_DT_BF16;
    int         raw = table->dtype == tdt && table->cols % 8 == 0
                      && ((uintptr_t) table->data & 15) == 0
                      && ((uintptr_t) out & 15) == 0;

    pl_cuda_launch(cu, "embedding", embedding_kernel<T>, n, 256, 0, (T *) out,
                   (const void *) table->data, table->dtype, table->rows,
                   ids, (int) table->cols, raw);
}


void
pl_cuda_embedding(pl_backend_t *be, void *out, const pl_weight_t *table,
    const int32_t *ids, int n)
{
    if (n <= 0) {
        return;
    }
    PL_CUDA_ACT(be, "embedding", embedding_t, pl_cuda(be), out, table, ids,
                n);
    PL_CUDA_LAUNCHED("embedding");
}
