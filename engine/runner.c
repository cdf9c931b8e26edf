/*
 * runner: from plan to pl_batch_t to logits.
 *
 * Every array is allocated once at start for the largest batch the
 * scheduler may plan (max_num_batched_tokens tokens, max_num_seqs
 * sequences, max_model_len / block_size blocks each), so building a batch
 * is a few linear copies and never allocates.  Each sequence contributes
 * the query rows [n_computed, n_computed + n_query) of its tokens; its
 * logits row is its last query row, the only one the model needs to
 * project, except for the prompt logprobs a sequence owes: its other query
 * rows at prompt positions still owed are projected too, as extra rows
 * after every sequence's own (the scheduler keeps them within
 * PL_EXTRA_LOGITS an iteration).  The block tables are packed with the
 * batch's longest table as the row stride; padding entries hold block 0,
 * a valid block no kernel reads past the context length.
 *
 * The logits stay where the model computed them.  The host buffer (one
 * row per sequence) receives them only when tensor parallelism gathers
 * them there, or row by row when the engine needs log-probabilities.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner.h"


int
pl_runner_init(pl_runner_t *r, int max_tokens, int max_seqs,
    int max_blocks_per_seq, int vocab_size)
{
    *r = (pl_runner_t) { 0 };

    r->max_tokens = max_tokens;
    r->max_seqs = max_seqs;
    r->max_blocks_per_seq = max_blocks_per_seq;
    r->vocab_size = vocab_size;

    r->token_ids = malloc((size_t) max_tokens * sizeof(int32_t));
    r->positions = malloc((size_t) max_tokens * sizeof(int32_t));
    r->slot_mapping = malloc((size_t) max_tokens * sizeof(int32_t));
    r->query_start = malloc((size_t) (max_seqs + 1) * sizeof(int32_t));
    r->context_lens = malloc((size_t) max_seqs * sizeof(int32_t));
    r->block_tables = malloc((size_t) max_seqs * max_blocks_per_seq
                             * sizeof(int32_t));
    r->logits_rows = malloc((size_t) (max_seqs + PL_EXTRA_LOGITS)
                            * sizeof(int32_t));
    r->logits = malloc((size_t) (max_seqs + PL_EXTRA_LOGITS) * vocab_size
                       * sizeof(float));
    r->extra_start = malloc((size_t) max_seqs * sizeof(int32_t));
    r->extra_count = malloc((size_t) max_seqs * sizeof(int32_t));
    r->extra_pos = malloc((size_t) max_seqs * sizeof(int32_t));

    if (!r->token_ids || !r->positions || !r->slot_mapping
        || !r->query_start || !r->context_lens || !r->block_tables
        || !r->logits_rows || !r->logits || !r->extra_start
        || !r->extra_count || !r->extra_pos)
    {
        pl_runner_destroy(r);
        return -1;
    }

    return 0;
}


void
pl_runner_destroy(pl_runner_t *r)
{
    free(r->token_ids);
    free(r->positions);
    free(r->slot_mapping);
    free(r->query_start);
    free(r->context_lens);
    free(r->block_tables);
    free(r->logits_rows);
    free(r->logits);
    free(r->extra_start);
    free(r->extra_count);
    free(r->extra_pos);
    *r = (pl_runner_t) { 0 };
}


static void
pl_runner_add_tokens(pl_runner_t *r, const pl_block_manager_t *bm,
    const pl_seq_t *s, int n_query, int at)
{
    int  i, pos;

    for (i = 0; i < n_query; i++) {
        pos = s->n_computed + i;
        r->token_ids[at + i] = s->tokens[pos];
        r->positions[at + i] = pos;
        r->slot_mapping[at + i] = pl_bm_slot(bm, &s->blocks, pos);
    }
}


static int
pl_runner_widest_table(const pl_sched_entry_t *entries, int n)
{
    int  i, w = 1;

    for (i = 0; i < n; i++) {
        if (entries[i].seq->blocks.n > w) {
            w = entries[i].seq->blocks.n;
        }
    }

    return w;
}


/* Entry i's extra rows (prompt logprobs), after the n sequences' rows
   and the *extra ones of the entries before it. */
static void
pl_runner_extra_rows(pl_runner_t *r, const pl_seq_t *s, int n_query,
    int i, int n, int *extra)
{
    int  k, first = 0, count = pl_seq_prompt_rows(s, n_query, &first);

    r->extra_start[i] = *extra;
    r->extra_count[i] = count;
    r->extra_pos[i] = first;

    for (k = 0; k < count; k++) {
        r->logits_rows[n + *extra + k] = r->query_start[i]
                                         + (first - s->n_computed) + k;
    }
    *extra += count;
}


void
pl_runner_build(pl_runner_t *r, const pl_block_manager_t *bm,
    const pl_sched_entry_t *entries, int n)
{
    const pl_seq_t  *s;
    int              i, q, at = 0, max_q = 0, max_ctx = 0, extra = 0;
    int              width = pl_runner_widest_table(entries, n);
    int32_t         *row;

    for (i = 0; i < n; i++) {
        s = entries[i].seq;
        q = entries[i].n_query;

        r->query_start[i] = at;
        pl_runner_add_tokens(r, bm, s, q, at);
        at += q;

        r->context_lens[i] = s->n_computed + q;
        r->logits_rows[i] = at - 1;
        pl_runner_extra_rows(r, s, q, i, n, &extra);

        row = r->block_tables + (size_t) i * width;
        memcpy(row, s->blocks.ids, (size_t) s->blocks.n * sizeof(int32_t));
        memset(row + s->blocks.n, 0,
               (size_t) (width - s->blocks.n) * sizeof(int32_t));

        max_q = q > max_q ? q : max_q;
        max_ctx = r->context_lens[i] > max_ctx ? r->context_lens[i] : max_ctx;
    }
    r->query_start[n] = at;

    r->batch = (pl_batch_t) {
        .num_tokens = at,
        .num_seqs = n,
        .token_ids = r->token_ids,
        .positions = r->positions,
        .slot_mapping = r->slot_mapping,
        .query_start = r->query_start,
        .context_lens = r->context_lens,
        .block_tables = r->block_tables,
        .logits_rows = r->logits_rows,
        .max_blocks_per_seq = width,
        .num_extra_logits = extra,
        .max_query_len = max_q,
        .max_context_len = max_ctx,
    };
}


int
pl_runner_moves(pl_model_t *m, const pl_block_manager_t *bm, void *host_pool,
    char *err, size_t errlen)
{
    const pl_block_move_t  *mv;
    int32_t                *src, *dst;
    int                     i, j, k, n, rc = 0;

    mv = pl_bm_moves(bm, &n);
    if (n == 0) {
        return 0;
    }
    if ((src = malloc(2 * (size_t) n * sizeof(int32_t))) == NULL) {
        snprintf(err, errlen, "out of memory for %d KV block moves", n);
        return -1;
    }
    dst = src + n;

    /* A run of copies goes to the model in one call (one launch on the
       GPU); swaps keep their place between them. */
    for (i = 0; i < n && rc == 0; i = j) {
        if (mv[i].kind == PL_MOVE_COPY) {
            for (j = i, k = 0; j < n && mv[j].kind == PL_MOVE_COPY; j++, k++) {
                src[k] = mv[j].src;
                dst[k] = mv[j].dst;
            }
            rc = pl_model_kv_copy_blocks(m, src, dst, k);
        } else {
            j = i + 1;
            rc = pl_model_kv_swap(m, host_pool, &mv[i].src, &mv[i].dst, 1,
                                  mv[i].kind == PL_MOVE_SWAP_OUT
                                  ? PL_KV_SWAP_OUT : PL_KV_SWAP_IN);
        }
        if (rc != 0) {
            snprintf(err, errlen, "KV block move %d -> %d (kind %d) failed",
                     mv[i].src, mv[i].dst, (int) mv[i].kind);
        }
    }
    free(src);

    return rc == 0 ? 0 : -1;
}


int
pl_runner_forward(pl_runner_t *r, pl_model_t *m, pl_logits_t *out,
    char *err, size_t errlen)
{
    return pl_model_forward_logits(m, &r->batch, r->logits, out, err,
                                   errlen);
}


const float *
pl_runner_host_row(pl_runner_t *r, pl_backend_t *be,
    const pl_logits_t *logits, int i)
{
    return pl_runner_host_rows(r, be, logits, i, 1);
}


const float *
pl_runner_host_rows(pl_runner_t *r, pl_backend_t *be,
    const pl_logits_t *logits, int first, int count)
{
    size_t       at = (size_t) first * r->vocab_size;
    float       *host = r->logits + at;

    if (logits->on_host) {
        return (const float *) logits->data + at;
    }

    be->download_f32(be, host, (const char *) logits->data
                               + at * pl_dtype_size(logits->dtype),
                     (size_t) count * r->vocab_size);
    return host;
}
