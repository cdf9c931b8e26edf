/*
 * cpu_weight: widening checkpoint weights (F32, F16, BF16) to fp32, and the
 * fp32 dot product every CPU kernel builds on.
 */

#include <string.h>

#include "cpu_ops.h"


/* the same as pl_bf16_to_f32, inlined so the loop vectorizes */
static inline float
bf16_to_f32(uint16_t h)
{
    uint32_t  u = (uint32_t) h << 16;
    float     f;

    memcpy(&f, &u, sizeof(f));
    return f;
}


void
pl_cpu_weight_to_f32(float *dst, const pl_weight_t *w, int64_t first,
    int64_t count)
{
    const uint16_t  *h = (const uint16_t *) w->data + first;
    int64_t          i;

    switch (w->dtype) {
    case PL_DT_F32:
        memcpy(dst, (const float *) w->data + first, count * sizeof(float));
        break;
    case PL_DT_BF16:
        for (i = 0; i < count; i++) {
            dst[i] = bf16_to_f32(h[i]);
        }
        break;
    case PL_DT_F16:
        for (i = 0; i < count; i++) {
            dst[i] = pl_f16_to_f32(h[i]);
        }
        break;
    }
}


float
pl_cpu_dot(const float *a, const float *b, int n)
{
    float  sum = 0.0f;
    int    i;

    #pragma omp simd reduction(+:sum)
    for (i = 0; i < n; i++) {
        sum += a[i] * b[i];
    }
    return sum;
}
