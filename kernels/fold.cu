/*
 * fold: w[r][c] *= v[c], the backend's scale_cols: how a Llama model
 * folds each RMSNorm's weight into the matrix that reads the norm (QKV,
 * gate/up, an untied lm_head), so that the decode GEMV's fused norm
 * (gemv.cu, GEMV_RMS) only scales its sums by 1 / rms(x) and reads x as it
 * is.  w is a matrix this backend loaded (activation dtype T), v a vector
 * (fp32); the product is rounded to T once.  Runs once, at load.
 */

#include "pl_cuda.cuh"


template <typename T>
__global__ void
scale_cols_kernel(T *w, const float *v, int64_t total, int64_t cols)
{
    int64_t  i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x;
    int64_t  step = (int64_t) gridDim.x * blockDim.x;

    for (; i < total; i += step) {
        w[i] = pl_from_f32<T>(pl_to_f32(w[i]) * v[i % cols]);
    }
}


template <typename T>
static void
scale_cols_t(pl_cuda_t *cu, pl_weight_t *w, const float *v)
{
    int64_t   total = w->rows * w->cols;
    unsigned  blocks = pl_cuda_blocks(total, 256);

    scale_cols_kernel<T><<<blocks > 65535u ? 65535u : blocks, 256, 0,
                           cu->stream>>>((T *) w->data, v, total, w->cols);
}


void
pl_cuda_scale_cols(pl_backend_t *be, pl_weight_t *w, const pl_weight_t *v)
{
    if (w->dtype != be->act_dtype || v->dtype != PL_DT_F32
        || v->rows * v->cols != w->cols)
    {
        pl_cuda_fail("scale_cols", "a matrix and a vector this backend "
                     "loaded, of matching width, expected");
    }
    if (w->rows * w->cols == 0) {
        return;
    }
    PL_CUDA_ACT(be, "scale_cols", scale_cols_t, pl_cuda(be), w,
                (const float *) v->data);
    PL_CUDA_LAUNCHED("scale_cols");
}
