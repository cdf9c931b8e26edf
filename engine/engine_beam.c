/*
 * engine_beam: beam search on the paged KV cache, as the PagedAttention
 * paper describes it.  A beam-search request is a sequence group whose
 * members are its beams; beam.c decides, this file moves the blocks.
 *
 * Every iteration a beam whose tokens are all computed brings its row of
 * logits to the host and keeps its best candidates (pl_beam_row); a beam
 * that has its row waits (it has nothing to compute) until every beam of
 * its group has one, which may take more than one iteration when the
 * token budget split the group.  Then the group steps (pl_beam_step) and
 * the choice becomes block tables:
 *
 *   - a beam no next beam extends is pruned: its table is released at
 *     once, so every block only it held goes back to the pool;
 *   - the first next beam extending beam p takes p's own sequence; every
 *     further one takes a pruned beam's sequence (or, at the first step,
 *     a new member), copies p's tokens and forks p's table: the blocks
 *     are shared by reference, nothing is copied;
 *   - each next beam appends its token.  The scheduler then makes its slot
 *     writable (pl_bm_prepare_write): only a partly filled last block that
 *     is still shared is copied, copy-on-write, and only by the first of
 *     its holders to write; full blocks are never copied.
 *
 * Preemption needs nothing here: the scheduler swaps or recomputes the
 * whole group, a beam's waiting row survives a swap and is computed again
 * after a recompute.  When the search is over its best n hypotheses are
 * written into members 0..n-1 (new finished members when the group has
 * fewer) and go out as choices 0..n-1, each FINISH carrying its
 * cumulative log-probability; nothing is sent before, so a beam-search
 * request is never streamed token by token.
 */

#include <omp.h>
#include <string.h>

#include "engine_internal.h"


int
pl_engine_beam_init(pl_engine_t *e, pl_seq_t *s, const pl_rec_submit_t *r)
{
    int32_t   stops[PL_MAX_EOS + PL_MAX_STOP_IDS];
    int       n = 0;
    uint32_t  i;

    if (!s->ignore_eos) {
        for (i = 0; i < e->identity.n_eos; i++) {
            stops[n++] = e->identity.eos_ids[i];
        }
    }
    for (i = 0; i < s->sampling.n_stop_ids; i++) {
        stops[n++] = s->sampling.stop_ids[i];
    }

    s->beam = pl_beam_create(s->best_of, r->length_penalty,
                             (int) r->early_stopping, s->max_tokens,
                             s->sampling.min_tokens, stops, n);
    s->out_index = -1;

    return s->beam ? 0 : -1;
}


/* A new member of l, a copy of the leader not yet running; NULL when out
   of memory. */
static pl_seq_t *
pl_engine_beam_member(pl_seq_t *l)
{
    pl_seq_t  *m = pl_seq_fork(l, l->n_members);

    if (m != NULL) {
        l->members[l->n_members++] = m;
    }

    return m;
}


/* x (empty table) becomes a copy of beam p: its tokens, and its blocks by
   reference. */
static int
pl_engine_beam_clone(pl_engine_t *e, pl_seq_t *x, const pl_seq_t *p)
{
    memcpy(x->tokens, p->tokens, (size_t) p->n_tokens * sizeof(int32_t));
    x->n_tokens = p->n_tokens;
    x->n_computed = p->n_computed;

    return pl_bm_fork(&e->bm, &p->blocks, &x->blocks);
}


/* The sequence a further child of a beam takes: a pruned beam's, else a
   new running member.  NULL when out of memory. */
static pl_seq_t *
pl_engine_beam_seat(pl_engine_t *e, pl_seq_t *l, pl_seq_t **pruned,
    int *n_pruned, const pl_seq_t *p)
{
    pl_seq_t  *x;

    if (*n_pruned > 0) {
        x = pruned[--(*n_pruned)];
        return pl_engine_beam_clone(e, x, p) == 0 ? x : NULL;
    }

    x = pl_engine_beam_member(l);
    if (x == NULL) {
        return NULL;
    }
    if (pl_engine_beam_clone(e, x, p) != 0) {
        l->n_members--;
        pl_seq_free(x);
        return NULL;
    }
    pl_sched_fork(&e->sched, x);

    return x;
}


/* The step's next beams into the group's sequences and block tables
   (the rules at the top).  0, or -1 when out of memory. */
static int
pl_engine_beam_regroup(pl_engine_t *e, pl_seq_t *l)
{
    const pl_beam_t  *b = l->beam;
    pl_seq_t         *pruned[PL_BEAM_MAX], *to[PL_BEAM_MAX], *p;
    int               children[PL_BEAM_MAX] = { 0 }, seated[PL_BEAM_MAX];
    int               i, j, n_pruned = 0, n = l->n_members;

    for (j = 0; j < b->n_next; j++) {
        children[b->next[j].parent]++;
    }
    for (i = n - 1; i >= 0; i--) {
        seated[i] = 0;
        if (children[i] == 0) {
            pl_bm_free_table(&e->bm, &l->members[i]->blocks);
            pruned[n_pruned++] = l->members[i];
        }
    }

    for (j = 0; j < b->n_next; j++) {
        i = b->next[j].parent;
        p = l->members[i];
        if (!seated[i]) {
            seated[i] = 1;
            to[j] = p;
            continue;
        }
        to[j] = pl_engine_beam_seat(e, l, pruned, &n_pruned, p);
        if (to[j] == NULL) {
            return -1;
        }
    }

    for (j = 0; j < b->n_next; j++) {
        pl_seq_append(to[j], b->next[j].token);
        to[j]->cum_logprob = b->next[j].cum;
    }

    return 0;
}


/* Member m carries hypothesis h as choice index, or nothing (index -1). */
static void
pl_engine_beam_output(pl_seq_t *m, const pl_beam_hyp_t *h, int index)
{
    m->out_index = index;
    m->n_sent = 0;
    m->n_tokens = m->n_prompt;
    m->cum_logprob = 0;

    if (h != NULL) {
        memcpy(m->tokens + m->n_prompt, h->tokens,
               (size_t) h->n * sizeof(int32_t));
        m->n_tokens += h->n;
        m->cum_logprob = h->cum;
    }
}


/*
 * The search is over: every beam out of the scheduler (its blocks freed),
 * then the best n hypotheses as choices 0..n-1.  Should a degenerate row
 * (fewer finite logits than the width) leave fewer hypotheses than n, the
 * remaining choices are empty, finished by length.
 */
static void
pl_engine_beam_conclude(pl_engine_t *e, pl_seq_t *l)
{
    const pl_beam_t  *b = l->beam;
    pl_seq_t         *m;
    int               i, reason;

    for (i = 0; i < l->n_members; i++) {
        if (l->members[i]->state != PL_SEQ_FINISHED) {
            pl_sched_remove(&e->sched, l->members[i]);
        }
    }

    while (l->n_members < l->n_return) {
        m = pl_engine_beam_member(l);
        if (m == NULL) {
            pl_engine_fail(e, l, 503, "the engine is out of memory");
            return;
        }
        m->state = PL_SEQ_FINISHED;
    }

    for (i = 0; i < l->n_members; i++) {
        m = l->members[i];
        if (i < l->n_return) {
            pl_engine_beam_output(m, i < b->n_hyps ? &b->hyps[i] : NULL, i);
        } else {
            pl_engine_beam_output(m, NULL, -1);
        }
    }

    for (i = 0; i < l->n_members; i++) {
        reason = i < b->n_hyps && b->hyps[i].stopped ? PL_FINISH_STOP
                                                      : PL_FINISH_LENGTH;
        pl_engine_finish(e, l->members[i], reason);
    }
}


/* Every beam of l has its row: one step of the search. */
static void
pl_engine_beam_step(pl_engine_t *e, pl_seq_t *l)
{
    pl_beam_t      *b = l->beam;
    double          cum[PL_BEAM_MAX];
    const int32_t  *gen[PL_BEAM_MAX];
    pl_seq_t       *m;
    int             i, n = l->n_members;

    for (i = 0; i < n; i++) {
        m = l->members[i];
        cum[i] = m->cum_logprob;
        gen[i] = m->tokens + m->n_prompt;
    }

    pl_beam_step(b, cum, gen, n, pl_seq_generated(l));
    e->totals.generation_tokens_total += (uint64_t) n;

    if (b->done) {
        pl_engine_beam_conclude(e, l);
    } else if (pl_engine_beam_regroup(e, l) != 0) {
        pl_engine_fail(e, l, 503, "the engine is out of memory");
    }
}


/* The threads that score k rows: the engine's --threads (every core when
   0), no more than there are rows. */
static int
pl_engine_beam_team(const pl_engine_t *e, int k)
{
    int  t = e->cfg.threads > 0 ? e->cfg.threads : omp_get_num_procs();

    return t < k ? t : k;
}


void
pl_engine_beam_rows(pl_engine_t *e, pl_seq_t *const *planned, int n,
    const pl_logits_t *logits)
{
    pl_beam_job_t  *job = e->beam_jobs;
    pl_seq_t       *s;
    const float    *rows;
    int             i, k = 0, lo = n, hi = -1;

    for (i = 0; i < n; i++) {
        s = planned[i];
        if (s->leader->beam == NULL || s->state == PL_SEQ_FINISHED
            || s->n_computed < s->n_tokens)
        {
            continue;
        }
        job[k].seq = s;
        job[k].index = i;
        lo = i < lo ? i : lo;
        hi = i;
        k++;
    }

    /* The beams' rows come down in one transfer, from the first to the
       last (rows of other sequences between them come along): one copy
       per row would wait on the device once per beam. */
    if (k > 0) {
        rows = pl_runner_host_rows(&e->runner, e->be, logits, lo,
                                   hi - lo + 1);
        for (i = 0; i < k; i++) {
            job[i].row = rows + (size_t) (job[i].index - lo)
                                * e->mc->vocab_size;
        }
    }

    /* A row's log-softmax and candidates read the whole vocabulary
       (bench/beam.c times it), so a batch of beams scores its rows in
       parallel; each row writes only its own beam's slot. */
    #pragma omp parallel for schedule(static) \
        num_threads(pl_engine_beam_team(e, k)) if (k > 1)
    for (i = 0; i < k; i++) {
        pl_beam_row(job[i].seq->leader->beam, job[i].seq->index, job[i].row,
                    e->mc->vocab_size, pl_seq_generated(job[i].seq));
    }

    for (i = 0; i < n; i++) {
        s = planned[i];
        if (s->leader->beam != NULL && s->state != PL_SEQ_FINISHED
            && pl_beam_ready(s->leader->beam, s->leader->n_members))
        {
            pl_engine_beam_step(e, s->leader);
        }
    }
}
