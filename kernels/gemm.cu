/*
 * gemm: out[n][w.rows] = x[n][w.cols] . w^T (+ bias), the model's linear
 * layers: operands and result of the activation dtype (bf16 or fp16; the
 * weight was loaded in it), fp32 accumulate.  Up to
 * pl_cuda_gemv_n_small() rows of x (decode) go to the weight-streaming
 * kernel of gemv.cu, which reads W at the copy bandwidth where cuBLAS's
 * small-n kernels do not; everything else, and any shape that kernel does
 * not take, goes through cuBLAS on tensor cores.
 *
 * Row-major out = x . w^T is, read column-major, out^T = w^T' . x^T', so
 * the call is C[rows][n] = op_T(W)[rows][cols] . X[cols][n] with leading
 * dimensions cols, cols and rows.  The bias, when there is one, is added by
 * a small kernel after the product (only Qwen2-style QKV projections have
 * one).
 */

#include "pl_cuda.cuh"
#include "gemv.cuh"


template <typename T>
__global__ void
bias_add_kernel(T *out, const void *bias, pl_dtype_t dt, int64_t total,
    int cols)
{
    int64_t  i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x;
    int64_t  step = (int64_t) gridDim.x * blockDim.x;

    for (; i < total; i += step) {
        out[i] = pl_from_f32<T>(pl_to_f32(out[i])
                                + pl_weight_at(bias, dt, i % cols));
    }
}


template <typename T>
static void
bias_add_t(cudaStream_t st, void *out, const pl_weight_t *bias,
    int64_t total, int64_t rows)
{
    unsigned  blocks = pl_cuda_blocks(total, 256);

    if (blocks > 65535u) {
        blocks = 65535u;
    }
    bias_add_kernel<T><<<blocks, 256, 0, st>>>((T *) out, bias->data,
                                               bias->dtype, total,
                                               (int) rows);
}


static void
bias_add(pl_backend_t *be, void *out, const pl_weight_t *bias, int n,
    int64_t rows)
{
    PL_CUDA_ACT(be, "matmul bias", bias_add_t, pl_cuda(be)->stream, out,
                bias, (int64_t) n * rows, rows);
    PL_CUDA_LAUNCHED("matmul bias");
}


static void
check_weight(pl_backend_t *be, const pl_weight_t *w)
{
    if (w->dtype != be->act_dtype) {
        pl_cuda_fail("matmul", "weight was not loaded by this backend "
                     "(the activation dtype expected)");
    }
}


extern "C" void
pl_cuda_matmul_cublas(pl_backend_t *be, void *out, const void *x,
    const pl_weight_t *w, const pl_weight_t *bias, int n)
{
    const float     one = 1.0f, zero = 0.0f;
    cudaDataType_t  t = be->act_dtype == PL_DT_F16 ? CUDA_R_16F
                                                   : CUDA_R_16BF;
    cublasStatus_t  rc;

    if (n <= 0) {
        return;
    }
    check_weight(be, w);
    rc = cublasGemmEx(pl_cuda(be)->cublas, CUBLAS_OP_T, CUBLAS_OP_N,
                      (int) w->rows, n, (int) w->cols, &one,
                      w->data, t, (int) w->cols,
                      x, t, (int) w->cols, &zero,
                      out, t, (int) w->rows,
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (rc != CUBLAS_STATUS_SUCCESS) {
        pl_cuda_fail("matmul", cublasGetStatusString(rc));
    }
    if (bias != NULL) {
        bias_add(be, out, bias, n, w->rows);
    }
}


void
pl_cuda_matmul(pl_backend_t *be, void *out, const void *x,
    const pl_weight_t *w, const pl_weight_t *bias, int n)
{
    if (n <= 0) {
        return;
    }
    check_weight(be, w);
    if (n <= pl_cuda_gemv_n_small()
        && pl_cuda_gemv(be, out, x, w, bias, n, -1) == 0)
    {
        return;
    }
    pl_cuda_matmul_cublas(be, out, x, w, bias, n);
}
