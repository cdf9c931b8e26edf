/*
 * cpu_norm: RMSNorm, alone and fused with the residual add that precedes
 * it in every Llama block (x / sqrt(mean(x^2) + eps) * w), and OPT's
 * LayerNorm ((x - mean) / sqrt(var + eps) * w + b, the variance taken
 * about the mean in a second pass).  fp32, one row per iteration of the
 * parallel loop.
 */

#include <math.h>

#include "cpu_ops.h"


static void
rmsnorm_row(float *out, const float *x, const float *w, int dim, float eps)
{
    float  inv = 1.0f / sqrtf(pl_cpu_dot(x, x, dim) / (float) dim + eps);
    int    i;

    for (i = 0; i < dim; i++) {
        out[i] = x[i] * inv * w[i];
    }
}


void
pl_cpu_rmsnorm(pl_backend_t *be, void *out, const void *x,
    const pl_weight_t *w, int n, int dim, float eps)
{
    float  wf[dim];
    int    i;

    pl_cpu_weight_to_f32(wf, w, 0, dim);

    #pragma omp parallel for \
                num_threads(pl_cpu_team(be, (int64_t) n * dim * 4))
    for (i = 0; i < n; i++) {
        rmsnorm_row((float *) out + (int64_t) i * dim,
                    (const float *) x + (int64_t) i * dim, wf, dim, eps);
    }
}


void
pl_cpu_add_rmsnorm(pl_backend_t *be, void *out, void *residual,
    const void *x, const pl_weight_t *w, int n, int dim, float eps)
{
    float  wf[dim];
    int    i, j;

    pl_cpu_weight_to_f32(wf, w, 0, dim);

    #pragma omp parallel for private(j) \
                num_threads(pl_cpu_team(be, (int64_t) n * dim * 4))
    for (i = 0; i < n; i++) {
        float        *r = (float *) residual + (int64_t) i * dim;
        const float  *xi = (const float *) x + (int64_t) i * dim;

        for (j = 0; j < dim; j++) {
            r[j] += xi[j];
        }
        rmsnorm_row((float *) out + (int64_t) i * dim, r, wf, dim, eps);
    }
}


static void
layernorm_row(float *out, const float *x, const float *w, const float *b,
    int dim, float eps)
{
    float  mean = 0.0f, var = 0.0f, inv;
    int    i;

    for (i = 0; i < dim; i++) {
        mean += x[i];
    }
    mean /= (float) dim;
    for (i = 0; i < dim; i++) {
        var += (x[i] - mean) * (x[i] - mean);
    }
    inv = 1.0f / sqrtf(var / (float) dim + eps);
    for (i = 0; i < dim; i++) {
        out[i] = (x[i] - mean) * inv * w[i] + b[i];
    }
}


void
pl_cpu_layernorm(pl_backend_t *be, void *out, const void *x,
    const pl_weight_t *w, const pl_weight_t *b, int n, int dim, float eps)
{
    float  wf[dim], bf[dim];
    int    i;

    pl_cpu_weight_to_f32(wf, w, 0, dim);
    pl_cpu_weight_to_f32(bf, b, 0, dim);

    #pragma omp parallel for \
                num_threads(pl_cpu_team(be, (int64_t) n * dim * 6))
    for (i = 0; i < n; i++) {
        layernorm_row((float *) out + (int64_t) i * dim,
                      (const float *) x + (int64_t) i * dim, wf, bf, dim,
                      eps);
    }
}
