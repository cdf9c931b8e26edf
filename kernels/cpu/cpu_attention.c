/*
 * cpu_attention: paged attention for every query row of a batch.
 *
 * Query row i of sequence s sits at position p = context_lens[s] - qlen +
 * (i - query_start[s]) and attends to cache positions 0..p (causal), found
 * through the sequence's block table: logical position t lives in physical
 * block block_tables[s][t / block_size] at offset t % block_size.  Query
 * head h reads KV head h / (n_heads / n_kv_heads) (grouped-query attention).
 *
 * Softmax is computed online in one pass over the keys: a running maximum,
 * with the sum and the weighted V rescaled whenever the maximum grows, which
 * is exact up to rounding and never overflows.  Work is split over (query
 * row, head) pairs.
 */

#include <math.h>

#include "cpu_ops.h"


/* the sequence whose query rows include row i */
static int
seq_of_row(const pl_batch_t *b, int i)
{
    int  lo = 0, hi = b->num_seqs - 1;

    while (lo < hi) {
        int  mid = (lo + hi + 1) / 2;

        if (b->query_start[mid] <= i) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}


typedef struct {
    const float    *k_cache;
    const float    *v_cache;
    const int32_t  *table;          /* this sequence's block table */
    int             block_size;
    int64_t         kv_row;         /* n_kv_heads * head_dim */
    int             kv_head;
    int             head_dim;
} attn_ctx_t;


static void
attend_one(float *out, const float *q, const attn_ctx_t *c, int last,
    float scale)
{
    float  max = -INFINITY, sum = 0.0f;
    int    t, d;

    for (d = 0; d < c->head_dim; d++) {
        out[d] = 0.0f;
    }
    for (t = 0; t <= last; t++) {
        int64_t       slot = (int64_t) c->table[t / c->block_size]
                             * c->block_size + t % c->block_size;
        int64_t       off = slot * c->kv_row
                            + (int64_t) c->kv_head * c->head_dim;
        const float  *kt = c->k_cache + off, *vt = c->v_cache + off;
        float         s = pl_cpu_dot(q, kt, c->head_dim) * scale;
        float         w;

        if (s > max) {
            float  shrink = expf(max - s);

            sum *= shrink;
            for (d = 0; d < c->head_dim; d++) {
                out[d] *= shrink;
            }
            max = s;
        }
        w = expf(s - max);
        sum += w;
        for (d = 0; d < c->head_dim; d++) {
            out[d] += w * vt[d];
        }
    }
    for (d = 0; d < c->head_dim; d++) {
        out[d] /= sum;
    }
}


void
pl_cpu_attention(pl_backend_t *be, void *out, const void *q,
    const void *k_cache, const void *v_cache, const pl_batch_t *batch,
    int n_heads, int n_kv_heads, int head_dim, int block_size, float scale)
{
    int64_t  pairs = (int64_t) batch->num_tokens * n_heads;
    int64_t  work = pairs * batch->max_context_len * head_dim;
    int64_t  q_row = (int64_t) n_heads * head_dim;
    int      group = n_heads / n_kv_heads;
    int64_t  idx;

    #pragma omp parallel for num_threads(pl_cpu_team(be, work)) \
                schedule(dynamic, 4)
    for (idx = 0; idx < pairs; idx++) {
        int         i = (int) (idx / n_heads), h = (int) (idx % n_heads);
        int         s = seq_of_row(batch, i);
        int         qlen = batch->query_start[s + 1] - batch->query_start[s];
        int         last = batch->context_lens[s] - qlen
                           + (i - batch->query_start[s]);
        attn_ctx_t  c = {
            .k_cache = k_cache, .v_cache = v_cache,
            .table = batch->block_tables
                     + (int64_t) s * batch->max_blocks_per_seq,
            .block_size = block_size,
            .kv_row = (int64_t) n_kv_heads * head_dim,
            .kv_head = h / group, .head_dim = head_dim
        };

        attend_one((float *) out + i * q_row + (int64_t) h * head_dim,
                   (const float *) q + i * q_row + (int64_t) h * head_dim,
                   &c, last, scale);
    }
}
