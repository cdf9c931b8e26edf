/*
 * cpu_matmul: out[n][rows] = x[n][cols] . w[rows][cols]^T (+ bias[rows]).
 *
 * Work is split over output rows: each thread widens one weight row to fp32
 * once and dots it with all n input rows, so a weight is read exactly once
 * per call however many tokens the batch holds.
 */

#include "cpu_ops.h"


static void
matmul_row(float *out, const float *x, const pl_weight_t *w,
    const pl_weight_t *bias, int n, int64_t row)
{
    int     cols = (int) w->cols;
    float   buf[cols];
    float   b = 0.0f;
    const float  *wrow = buf;
    int     i;

    if (w->dtype == PL_DT_F32) {
        wrow = (const float *) w->data + row * cols;
    } else {
        pl_cpu_weight_to_f32(buf, w, row * cols, cols);
    }
    if (bias != NULL) {
        pl_cpu_weight_to_f32(&b, bias, row, 1);
    }
    for (i = 0; i < n; i++) {
        out[(int64_t) i * w->rows + row] =
            pl_cpu_dot(x + (int64_t) i * cols, wrow, cols) + b;
    }
}


void
pl_cpu_matmul(pl_backend_t *be, void *out, const void *x,
    const pl_weight_t *w, const pl_weight_t *bias, int n)
{
    int64_t  row;
    int64_t  work = w->rows * w->cols * (int64_t) n;

    #pragma omp parallel for num_threads(pl_cpu_team(be, work)) \
                schedule(static)
    for (row = 0; row < w->rows; row++) {
        matmul_row(out, x, w, bias, n, row);
    }
}

