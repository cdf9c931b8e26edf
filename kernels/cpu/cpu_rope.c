/*
 * cpu_rope: rotary position embedding in place, rotate-half convention
 * (Hugging Face Llama): within each head, element i pairs with element
 * i + head_dim/2 and both turn by position * inv_freq[i].  The angle is
 * formed in fp32 as PyTorch does, so long positions match its rounding.
 */

#include <math.h>

#include "cpu_ops.h"


static void
rope_heads(float *x, int n_heads, int head_dim, const float *cos_t,
    const float *sin_t)
{
    int  half = head_dim / 2;
    int  h, i;

    for (h = 0; h < n_heads; h++) {
        float  *v = x + (int64_t) h * head_dim;

        for (i = 0; i < half; i++) {
            float  a = v[i], b = v[i + half];

            v[i] = a * cos_t[i] - b * sin_t[i];
            v[i + half] = b * cos_t[i] + a * sin_t[i];
        }
    }
}


void
pl_cpu_rope(pl_backend_t *be, void *q, void *k, const int32_t *positions,
    const float *inv_freq, int n, int n_heads, int n_kv_heads, int head_dim)
{
    int  t;

    #pragma omp parallel for \
                num_threads(pl_cpu_team(be, (int64_t) n * head_dim * 64))
    for (t = 0; t < n; t++) {
        float  cos_t[head_dim / 2], sin_t[head_dim / 2];
        int    i;

        for (i = 0; i < head_dim / 2; i++) {
            float  angle = (float) positions[t] * inv_freq[i];

            cos_t[i] = cosf(angle);
            sin_t[i] = sinf(angle);
        }
        rope_heads((float *) q + (int64_t) t * n_heads * head_dim, n_heads,
                   head_dim, cos_t, sin_t);
        rope_heads((float *) k + (int64_t) t * n_kv_heads * head_dim,
                   n_kv_heads, head_dim, cos_t, sin_t);
    }
}
