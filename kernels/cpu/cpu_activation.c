/*
 * cpu_activation: the SwiGLU gate of the Llama family, out = silu(gate) *
 * up, where each input row holds gate in its first inter columns and up in
 * the next inter (the layout of the fused gate_up projection); OPT's ReLU;
 * and the plain residual add OPT needs where no norm follows it.
 */

#include <math.h>

#include "cpu_ops.h"


static void
silu_mul_row(float *out, const float *gu, int inter)
{
    int  j;

    for (j = 0; j < inter; j++) {
        float  g = gu[j];

        out[j] = g / (1.0f + expf(-g)) * gu[inter + j];
    }
}


void
pl_cpu_silu_mul(pl_backend_t *be, void *out, const void *gate_up, int n,
    int inter)
{
    int  i;

    #pragma omp parallel for \
                num_threads(pl_cpu_team(be, (int64_t) n * inter * 8))
    for (i = 0; i < n; i++) {
        silu_mul_row((float *) out + (int64_t) i * inter,
                     (const float *) gate_up + (int64_t) i * 2 * inter,
                     inter);
    }
}


void
pl_cpu_relu(pl_backend_t *be, void *out, const void *x, int n, int dim)
{
    int64_t  count = (int64_t) n * dim, i;

    #pragma omp parallel for num_threads(pl_cpu_team(be, count))
    for (i = 0; i < count; i++) {
        float  v = ((const float *) x)[i];

        ((float *) out)[i] = v > 0.0f ? v : 0.0f;
    }
}


void
pl_cpu_add(pl_backend_t *be, void *residual, const void *x, int n, int dim)
{
    int64_t  count = (int64_t) n * dim, i;

    #pragma omp parallel for num_threads(pl_cpu_team(be, count))
    for (i = 0; i < count; i++) {
        ((float *) residual)[i] += ((const float *) x)[i];
    }
}
