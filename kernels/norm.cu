/*
 * norm: RMS normalisation, plain and fused with the residual add.
 *
 *     rmsnorm:      out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w
 *     add_rmsnorm:  residual[r] += x[r]; out[r] = rmsnorm(residual[r]) * w
 *
 * and OPT's LayerNorm:
 *
 *     layernorm:    out[r] = (x[r] - mean) / sqrt(var + eps) * w + b
 *
 * Rows of dim bf16 values, w of dim in any weight dtype (fp32 once loaded).
 * One thread block per row: each thread keeps its columns in registers
 * (dim <= 32 * threads), block-wide sums give the mean square (or the mean,
 * then the variance about it in a second pass over the registers), and the
 * row is written once.  The fused form rounds the new residual to bf16 and
 * normalises that rounded value, as the next layer will see it.
 */

#include "pl_cuda.cuh"

#define NORM_THREADS  256
#define NORM_PER      32        /* columns a thread can hold */


__device__ float
block_sum(float v)
{
    __shared__ float  part[NORM_THREADS / 32];
    int               lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    __syncthreads();

#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    if (lane == 0) {
        part[warp] = v;
    }
    __syncthreads();
    v = 0.0f;
#pragma unroll
    for (int i = 0; i < NORM_THREADS / 32; i++) {
        v += part[i];
    }
    return v;
}


template <bool ADD>
__global__ void __launch_bounds__(NORM_THREADS)
rmsnorm_kernel(__nv_bfloat16 *out, __nv_bfloat16 *residual,
    const __nv_bfloat16 *x, const void *w, pl_dtype_t wdt, int dim,
    float eps)
{
    int64_t  base = (int64_t) blockIdx.x * dim;
    float    v[NORM_PER], ss = 0.0f, inv;

#pragma unroll
    for (int k = 0; k < NORM_PER; k++) {
        int  c = threadIdx.x + k * NORM_THREADS;

        v[k] = 0.0f;
        if (c < dim) {
            v[k] = __bfloat162float(x[base + c]);
            if (ADD) {
                __nv_bfloat16  r = __float2bfloat16_rn(
                    v[k] + __bfloat162float(residual[base + c]));

                residual[base + c] = r;
                v[k] = __bfloat162float(r);
            }
            ss += v[k] * v[k];
        }
    }
    inv = rsqrtf(block_sum(ss) / dim + eps);
#pragma unroll
    for (int k = 0; k < NORM_PER; k++) {
        int  c = threadIdx.x + k * NORM_THREADS;

        if (c < dim) {
            out[base + c] = __float2bfloat16_rn(
                v[k] * inv * pl_weight_at(w, wdt, c));
        }
    }
}


__global__ void __launch_bounds__(NORM_THREADS)
layernorm_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *x, const void *w,
    pl_dtype_t wdt, const void *b, pl_dtype_t bdt, int dim, float eps)
{
    int64_t  base = (int64_t) blockIdx.x * dim;
    float    v[NORM_PER], sum = 0.0f, var = 0.0f, mean, inv;

#pragma unroll
    for (int k = 0; k < NORM_PER; k++) {
        int  c = threadIdx.x + k * NORM_THREADS;

        v[k] = c < dim ? __bfloat162float(x[base + c]) : 0.0f;
        sum += v[k];
    }
    mean = block_sum(sum) / dim;
#pragma unroll
    for (int k = 0; k < NORM_PER; k++) {
        if (threadIdx.x + k * NORM_THREADS < dim) {
            var += (v[k] - mean) * (v[k] - mean);
        }
    }
    inv = rsqrtf(block_sum(var) / dim + eps);
#pragma unroll
    for (int k = 0; k < NORM_PER; k++) {
        int  c = threadIdx.x + k * NORM_THREADS;

        if (c < dim) {
            out[base + c] = __float2bfloat16_rn(
                (v[k] - mean) * inv * pl_weight_at(w, wdt, c)
                + pl_weight_at(b, bdt, c));
        }
    }
}


void
pl_cuda_layernorm(pl_backend_t *be, void *out, const void *x,
    const pl_weight_t *w, const pl_weight_t *b, int n, int dim, float eps)
{
    if (n <= 0) {
        return;
    }
    if (dim > NORM_THREADS * NORM_PER) {
        pl_cuda_fail("layernorm", "hidden size over 8192");
    }
    layernorm_kernel<<<n, NORM_THREADS, 0, pl_cuda(be)->stream>>>(
        (__nv_bfloat16 *) out, (const __nv_bfloat16 *) x, w->data, w->dtype,
        b->data, b->dtype, dim, eps);
    PL_CUDA_LAUNCHED("layernorm");
}


static void
norm_launch(pl_backend_t *be, void *out, void *residual, const void *x,
    const pl_weight_t *w, int n, int dim, float eps)
{
    cudaStream_t  st = pl_cuda(be)->stream;

    if (n <= 0) {
        return;
    }
    if (dim > NORM_THREADS * NORM_PER) {
        pl_cuda_fail("rmsnorm", "hidden size over 8192");
    }
    if (residual != NULL) {
        rmsnorm_kernel<true><<<n, NORM_THREADS, 0, st>>>(
            (__nv_bfloat16 *) out, (__nv_bfloat16 *) residual,
            (const __nv_bfloat16 *) x, w->data, w->dtype, dim, eps);
    } else {
        rmsnorm_kernel<false><<<n, NORM_THREADS, 0, st>>>(
            (__nv_bfloat16 *) out, NULL, (const __nv_bfloat16 *) x,
            w->data, w->dtype, dim, eps);
    }
    PL_CUDA_LAUNCHED("rmsnorm");
}


void
pl_cuda_rmsnorm(pl_backend_t *be, void *out, const void *x,
    const pl_weight_t *w, int n, int dim, float eps)
{
    norm_launch(be, out, NULL, x, w, n, dim, eps);
}


void
pl_cuda_add_rmsnorm(pl_backend_t *be, void *out, void *residual,
    const void *x, const pl_weight_t *w, int n, int dim, float eps)
{
    norm_launch(be, out, residual, x, w, n, dim, eps);
}
