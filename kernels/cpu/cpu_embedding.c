/*
 * cpu_embedding: out[i] = table[ids[i]], the table row widened to fp32.
 * The model checks every id against the vocabulary before calling.
 */

#include "cpu_ops.h"


void
pl_cpu_embedding(pl_backend_t *be, void *out, const pl_weight_t *table,
    const int32_t *ids, int n)
{
    int  i;

    #pragma omp parallel for num_threads(pl_cpu_team(be, n * table->cols))
    for (i = 0; i < n; i++) {
        pl_cpu_weight_to_f32((float *) out + (int64_t) i * table->cols, table,
                             (int64_t) ids[i] * table->cols, table->cols);
    }
}
