/*
 * gemv: the matmul of a few rows of x (decode batches) at the speed of
 * reading the weight once, beside the cuBLAS path it replaces there.
 *
 * pl_cuda_matmul (gemm.cu) sends n <= pl_cuda_gemv_n_small() rows here and
 * falls back to cuBLAS when the kernel does not take the shape.  The rest
 * is for tests and benchmarks, which run each launch configuration and the
 * cuBLAS path on their own.  Plain C declarations: C programs include this.
 */

#ifndef PL_GEMV_CUH
#define PL_GEMV_CUH

#ifdef __cplusplus
extern "C" {
#endif

#include "pl_ops.h"

/* the widest n the kernel has tiles for (8 rows of x per MMA tile) */
#define PL_GEMV_MAX_N    32

/* dispatch limit: pl_cuda_matmul sends up to this many rows of x here */
#define PL_GEMV_N_SMALL  16

/* out[n][w.rows] = x[n][w.cols] . w^T (+ bias) with launch configuration
   config (0 .. pl_cuda_gemv_configs() - 1), or with the one dispatch picks
   when config < 0.  0 when launched; -1, with nothing launched, when the
   kernel does not take the shape: n outside 1..PL_GEMV_MAX_N, w not of
   the activation dtype (bf16 or fp16), config not built for it
   (pl_cuda_gemv_built), cols not a multiple of 8, x or w not 16-byte
   aligned, or (config < 0 only) too few rows of w to give every SM
   work. */
int pl_cuda_gemv(pl_backend_t *be, void *out, const void *x,
    const pl_weight_t *w, const pl_weight_t *bias, int n, int config);

/* the largest n pl_cuda_matmul sends to the kernel */
int pl_cuda_gemv_n_small(void);

int         pl_cuda_gemv_configs(void);
const char *pl_cuda_gemv_config_name(int config);

/* whether configuration config has kernels for activations of act
   (fp16: dispatch's configurations only) */
int         pl_cuda_gemv_built(int config, pl_dtype_t act);

/* the configuration pl_cuda_gemv picks for w */
int pl_cuda_gemv_pick(pl_backend_t *be, const pl_weight_t *w, int n);

/* pl_cuda_matmul through cuBLAS alone, whatever n is */
void pl_cuda_matmul_cublas(pl_backend_t *be, void *out, const void *x,
    const pl_weight_t *w, const pl_weight_t *bias, int n);

#ifdef __cplusplus
}
#endif

#endif /* PL_GEMV_CUH */
