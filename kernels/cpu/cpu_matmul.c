/*
 * cpu_matmul: out[n][rows] = x[n][cols] . w[rows][cols]^T (+ bias[rows]).
 *
 * Work is split over output rows: each thread widens one weight row to fp32
 * once and dots it with all n input rows, so a weight is read exactly once
 * per call however many tokens the batch holds.
 */

#include <stdlib.h>

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


/*
 * The fused form (pl_matmul_fuse_t) composed from the unfused operations,
 * so that it gives the same bits as the model's unfused path: the input
 * transformed into a scratch copy, the product into another, then added.
 */
int
pl_cpu_matmul_fused(pl_backend_t *be, void *out, const void *x,
    const pl_weight_t *w, const pl_weight_t *bias, int n,
    const pl_matmul_fuse_t *f)
{
    int64_t       count = (int64_t) n * w->rows, i;
    const float  *add = f->add;
    float        *in = NULL, *prod, *ones;
    pl_weight_t   unit;

    if (n <= 0) {
        return 0;
    }
    if (f->in != PL_FUSE_IN_PLAIN) {
        in = malloc((size_t) n * w->cols * sizeof(float));
        if (in == NULL) {
            return -1;
        }
        if (f->in == PL_FUSE_IN_RMSNORM && f->norm == NULL) {
            ones = malloc((size_t) w->cols * sizeof(float));
            if (ones == NULL) {
                free(in);
                return -1;
            }
            for (i = 0; i < w->cols; i++) {
                ones[i] = 1.0f;
            }
            unit = (pl_weight_t) { ones, PL_DT_F32, 1, w->cols };
            pl_cpu_rmsnorm(be, in, x, &unit, n, (int) w->cols, f->eps);
            free(ones);
        } else if (f->in == PL_FUSE_IN_RMSNORM) {
            pl_cpu_rmsnorm(be, in, x, f->norm, n, (int) w->cols, f->eps);
        } else {
            pl_cpu_silu_mul(be, in, x, n, (int) w->cols);
        }
        x = in;
    }
    if (add == NULL) {
        pl_cpu_matmul(be, out, x, w, bias, n);
        free(in);
        return 0;
    }
    prod = malloc((size_t) count * sizeof(float));
    if (prod == NULL) {
        free(in);
        return -1;
    }
    pl_cpu_matmul(be, prod, x, w, bias, n);
    for (i = 0; i < count; i++) {
        ((float *) out)[i] = add[i] + prod[i];
    }
    free(prod);
    free(in);
    return 0;
}
