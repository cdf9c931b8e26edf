/*
 * sequence: per-request state and the req_id index.
 *
 * A sequence's tokens array is sized once for prompt + max_tokens, so
 * appending never allocates on the hot path.  Preemption by recompute needs
 * no copy either: it only sets n_computed back to 0 and the prompt plus the
 * tokens generated so far are run again as one long prompt.
 *
 * A fork copies the leader's tokens and sampling parameters (the logit
 * bias and stop ids are owned by each sequence, so any member may be
 * freed first); the block table is the block manager's to share.
 *
 * The index is a chained hash over req_id with a power-of-two bucket
 * count that doubles when the load passes 1, so lookups stay O(1) however
 * many requests a worker keeps in flight.
 */

#include <stdlib.h>
#include <string.h>

#include "sequence.h"

#define PL_INDEX_MIN  64


pl_seq_t *
pl_seq_create(uint64_t req_id, const int32_t *prompt, int n_prompt,
    int max_tokens)
{
    pl_seq_t  *s = calloc(1, sizeof(pl_seq_t));

    if (s == NULL) {
        return NULL;
    }

    s->cap = n_prompt + max_tokens;
    s->tokens = malloc((size_t) (s->cap > 0 ? s->cap : 1) * sizeof(int32_t));
    if (s->tokens == NULL) {
        free(s);
        return NULL;
    }

    if (n_prompt > 0) {
        memcpy(s->tokens, prompt, (size_t) n_prompt * sizeof(int32_t));
    }
    s->req_id = req_id;
    s->n_prompt = n_prompt;
    s->n_tokens = n_prompt;
    s->max_tokens = max_tokens;
    s->state = PL_SEQ_WAITING;
    s->leader = s;
    s->members[0] = s;
    s->n_members = 1;
    s->n_return = 1;
    s->best_of = 1;

    return s;
}


static void *
pl_seq_dup(const void *p, size_t size)
{
    void  *q;

    if (size == 0) {
        return NULL;
    }

    q = malloc(size);
    if (q) {
        memcpy(q, p, size);
    }

    return q;
}


pl_seq_t *
pl_seq_fork(const pl_seq_t *leader, int index)
{
    const pl_sampling_params_t  *p = &leader->sampling;
    pl_seq_t                    *s;

    s = pl_seq_create(leader->req_id, leader->tokens, leader->n_tokens,
                      leader->cap - leader->n_tokens);
    if (s == NULL) {
        return NULL;
    }

    s->n_prompt = leader->n_prompt;
    s->max_tokens = leader->max_tokens;
    s->n_computed = leader->n_computed;
    s->ignore_eos = leader->ignore_eos;
    s->arrival = leader->arrival;
    s->conn = leader->conn;
    s->index = index;
    s->out_index = leader->out_index < 0 ? -1 : index;
    s->leader = (pl_seq_t *) leader;
    s->members[0] = s;
    s->grammar = leader->grammar;
    s->grammar_state = leader->grammar_state;
    if (s->grammar) {
        s->grammar->refs++;
    }
    s->sampling = *p;
    s->sampling.bias = pl_seq_dup(p->bias, p->n_bias * sizeof(*p->bias));
    s->sampling.stop_ids = pl_seq_dup(p->stop_ids,
                                      p->n_stop_ids * sizeof(int32_t));

    if ((p->n_bias && s->sampling.bias == NULL)
        || (p->n_stop_ids && s->sampling.stop_ids == NULL))
    {
        pl_seq_free(s);
        return NULL;
    }

    return s;
}


void
pl_seq_free(pl_seq_t *s)
{
    pl_block_table_release(&s->blocks);
    free(s->error);
    free(s->tokens);
    free(s->sampling.bias);
    free(s->sampling.stop_ids);
    free(s->logprobs);
    free(s->prompt_lp);
    pl_beam_free(s->beam);
    pl_grammar_unref(s->grammar);
    free(s);
}


static inline uint32_t
pl_seq_hash(uint64_t id, uint32_t n_buckets)
{
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdull;
    id ^= id >> 33;

    return (uint32_t) id & (n_buckets - 1);
}


int
pl_seq_index_init(pl_seq_index_t *ix)
{
    ix->buckets = calloc(PL_INDEX_MIN, sizeof(pl_seq_t *));
    ix->n_buckets = PL_INDEX_MIN;
    ix->count = 0;

    return ix->buckets ? 0 : -1;
}


void
pl_seq_index_destroy(pl_seq_index_t *ix)
{
    free(ix->buckets);
    memset(ix, 0, sizeof(*ix));
}


pl_seq_t *
pl_seq_index_find(const pl_seq_index_t *ix, uint64_t req_id)
{
    pl_seq_t  *s = ix->buckets[pl_seq_hash(req_id, ix->n_buckets)];

    while (s && s->req_id != req_id) {
        s = s->hash_next;
    }

    return s;
}


pl_seq_t *
pl_seq_index_next(const pl_seq_t *s)
{
    pl_seq_t  *n = s->hash_next;

    while (n && n->req_id != s->req_id) {
        n = n->hash_next;
    }

    return n;
}


static int
pl_seq_index_grow(pl_seq_index_t *ix)
{
    uint32_t    n = ix->n_buckets * 2, i, h;
    pl_seq_t  **b = calloc(n, sizeof(pl_seq_t *));
    pl_seq_t   *s, *next;

    if (b == NULL) {
        return -1;
    }

    for (i = 0; i < ix->n_buckets; i++) {
        for (s = ix->buckets[i]; s; s = next) {
            next = s->hash_next;
            h = pl_seq_hash(s->req_id, n);
            s->hash_next = b[h];
            b[h] = s;
        }
    }

    free(ix->buckets);
    ix->buckets = b;
    ix->n_buckets = n;

    return 0;
}


int
pl_seq_index_add(pl_seq_index_t *ix, pl_seq_t *s)
{
    uint32_t  h;

    if (ix->count >= ix->n_buckets && pl_seq_index_grow(ix) != 0) {
        return -1;
    }

    h = pl_seq_hash(s->req_id, ix->n_buckets);
    s->hash_next = ix->buckets[h];
    ix->buckets[h] = s;
    ix->count++;

    return 0;
}


void
pl_seq_index_remove(pl_seq_index_t *ix, pl_seq_t *s)
{
    pl_seq_t  **pp = &ix->buckets[pl_seq_hash(s->req_id, ix->n_buckets)];

    while (*pp && *pp != s) {
        pp = &(*pp)->hash_next;
    }

    if (*pp) {
        *pp = s->hash_next;
        s->hash_next = NULL;
        ix->count--;
    }
}
