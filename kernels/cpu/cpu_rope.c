/*
 * cpu_rope: the attention block's prologue (qkv_rope_store).  Each token's
 * row of the fused projection holds its query heads, then its K heads, then
 * its V heads; the query heads go to q, the K and V heads to the token's
 * cache slot (block * block_size + offset, one contiguous row of n_kv_heads
 * * head_dim in [num_blocks][block_size][n_kv_heads][head_dim]; a negative
 * slot is skipped).  With inv_freq, q and K turn by rotary position
 * embedding, rotate-half convention (Hugging Face Llama): within each head,
 * element i pairs with element i + head_dim/2 and both turn by position *
 * inv_freq[i].  The angle is formed in fp32 as PyTorch does, so long
 * positions match its rounding.
 */

#include <math.h>
#include <string.h>

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
pl_cpu_qkv_rope_store(pl_backend_t *be, void *q, void *k_cache,
    void *v_cache, const void *qkv, const int32_t *positions,
    const int32_t *slot_mapping, const float *inv_freq, int n, int n_heads,
    int n_kv_heads, int head_dim)
{
    int64_t  qd = (int64_t) n_heads * head_dim;
    int64_t  kvd = (int64_t) n_kv_heads * head_dim;
    int64_t  stride = qd + 2 * kvd;
    int      t;

    #pragma omp parallel for \
                num_threads(pl_cpu_team(be, (int64_t) n * stride * 16))
    for (t = 0; t < n; t++) {
        const float  *src = (const float *) qkv + t * stride;
        float        *qt = (float *) q + t * qd;
        float        *kt = NULL;
        float         cos_t[head_dim / 2], sin_t[head_dim / 2];
        int           i;

        memcpy(qt, src, (size_t) qd * sizeof(float));
        if (slot_mapping[t] >= 0) {
            kt = (float *) k_cache + slot_mapping[t] * kvd;
            memcpy(kt, src + qd, (size_t) kvd * sizeof(float));
            memcpy((float *) v_cache + slot_mapping[t] * kvd, src + qd + kvd,
                   (size_t) kvd * sizeof(float));
        }
        if (inv_freq == NULL) {
            continue;
        }
        for (i = 0; i < head_dim / 2; i++) {
            float  angle = (float) positions[t] * inv_freq[i];

            cos_t[i] = cosf(angle);
            sin_t[i] = sinf(angle);
        }
        rope_heads(qt, n_heads, head_dim, cos_t, sin_t);
        if (kt != NULL) {
            rope_heads(kt, n_kv_heads, head_dim, cos_t, sin_t);
        }
    }
}
