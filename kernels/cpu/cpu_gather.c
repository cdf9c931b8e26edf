/*
 * cpu_gather: out[i] = x[rows[i]] for whole rows of dim elements; the model
 * uses it to pick the rows it projects to logits and to split fused
 * projections head by head.
 */

#include <string.h>

#include "cpu_ops.h"


void
pl_cpu_gather_rows(pl_backend_t *be, void *out, const void *x,
    const int32_t *rows, int n, int dim)
{
    int  i;

    #pragma omp parallel for \
                num_threads(pl_cpu_team(be, (int64_t) n * dim))
    for (i = 0; i < n; i++) {
        memcpy((float *) out + (int64_t) i * dim,
               (const float *) x + (int64_t) rows[i] * dim,
               (size_t) dim * sizeof(float));
    }
}
