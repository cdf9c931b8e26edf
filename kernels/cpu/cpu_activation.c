/*
 * cpu_activation: the SwiGLU gate, out = silu(gate) * up, where each input
 * row holds gate in its first inter columns and up in the next inter (the
 * layout of the fused gate_up projection).
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
