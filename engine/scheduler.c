/*
 * scheduler: FCFS continuous batching with chunked prefill, preemption by
 * swap or recompute, and automatic prefix reuse at admission.
 *
 * The three queues are kept in arrival order.  A step has four passes:
 *
 *   1. every running sequence that is decoding gets its one token;
 *   2. running sequences still in their prompt get a chunk, oldest first,
 *      as large as the remaining budget and the free blocks allow;
 *   3. unless someone was preempted in this step, swapped groups come back
 *      from the head while their blocks plus one spare fit the device;
 *   4. only when no group is left swapped, waiting requests are admitted
 *      from the head while the budget, the sequence cap and the blocks
 *      (enough for the whole remaining prompt, after reusing its longest
 *      cached prefix) allow.
 *   The head of a queue is never skipped, so no request is overtaken by a
 *   newer one.
 *
 * When a running sequence cannot get the blocks it needs, the newest
 * running sequence is preempted (its planned work, if any, dropped from
 * the plan): in swap mode its blocks move to the host pool while that has
 * room and it joins the swapped queue; in auto mode that happens only when
 * the swap (the group's distinct blocks out and back in over the measured
 * host link) costs less than recomputing the group's computed tokens at
 * the measured prefill rate; otherwise (recompute) its blocks are
 * freed and it goes back to the waiting queue in arrival order, to rerun
 * its prompt plus the tokens it generated.  When the one in need is itself
 * the newest, it is the one preempted.  Older requests therefore always
 * make progress, and since the engine guarantees that one request of
 * max_model_len tokens fits the whole pool, the oldest one always
 * finishes: nothing starves.
 *
 * A sequence group (one request's parallel samples) is the unit of all
 * of this: its members share an arrival number, so they sit side by side
 * at the same place in every queue; preemption takes the whole group
 * (swapped out together, so blocks shared inside it move once, or all
 * sent back to recompute), swapped groups come back whole, and a waiting
 * group is admitted whole or not at all.  A request that will fork counts
 * as its best_of sequences against the sequence cap from admission on, so
 * the fork never overflows it.
 *
 * The Orca policies reserve a request's whole KV at admission, as one
 * contiguous run of blocks; a running request then never needs another
 * block and is never preempted.
 */

#include <stdlib.h>

#include "scheduler.h"


static void
pl_queue_unlink(pl_seq_queue_t *q, pl_seq_t *s)
{
    if (s->prev) {
        s->prev->next = s->next;
    } else {
        q->head = s->next;
    }

    if (s->next) {
        s->next->prev = s->prev;
    } else {
        q->tail = s->prev;
    }

    s->prev = s->next = NULL;
    q->n--;
}


/* Insert by arrival, searching from the tail (where new arrivals go). */
static void
pl_queue_insert(pl_seq_queue_t *q, pl_seq_t *s)
{
    pl_seq_t  *after = q->tail;

    while (after && after->arrival > s->arrival) {
        after = after->prev;
    }

    s->prev = after;
    s->next = after ? after->next : q->head;

    if (s->next) {
        s->next->prev = s;
    } else {
        q->tail = s;
    }

    if (after) {
        after->next = s;
    } else {
        q->head = s;
    }

    q->n++;
}


static pl_seq_queue_t *
pl_sched_queue(pl_scheduler_t *sc, pl_seq_state_t state)
{
    switch (state) {
    case PL_SEQ_WAITING:  return &sc->waiting;
    case PL_SEQ_RUNNING:  return &sc->running;
    case PL_SEQ_SWAPPED:  return &sc->swapped;
    default:              return NULL;
    }
}


/* Seats a running leader still holds for the members it will fork. */
static int
pl_sched_pending(const pl_seq_t *s)
{
    return s->leader == s ? s->best_of - s->n_members : 0;
}


/* Move s to the queue of state. */
static void
pl_sched_move(pl_scheduler_t *sc, pl_seq_t *s, pl_seq_state_t state)
{
    pl_seq_queue_t  *q = pl_sched_queue(sc, s->state);

    if (q) {
        pl_queue_unlink(q, s);
    }

    if (s->state == PL_SEQ_RUNNING) {
        sc->fork_seats -= pl_sched_pending(s);
    }
    if (state == PL_SEQ_RUNNING) {
        sc->fork_seats += pl_sched_pending(s);
    }

    s->state = state;
    q = pl_sched_queue(sc, state);
    if (q) {
        pl_queue_insert(q, s);
    }
}


int
pl_sched_init(pl_scheduler_t *sc, pl_block_manager_t *bm, int max_num_seqs,
    int max_num_batched_tokens)
{
    *sc = (pl_scheduler_t) { 0 };

    if (max_num_seqs <= 0 || max_num_batched_tokens <= 0) {
        return -1;
    }

    sc->entries = calloc(max_num_seqs, sizeof(pl_sched_entry_t));
    if (sc->entries == NULL) {
        return -1;
    }

    sc->bm = bm;
    sc->max_num_seqs = max_num_seqs;
    sc->max_num_batched_tokens = max_num_batched_tokens;
    sc->max_model_len = bm->num_blocks * bm->block_size;

    return 0;
}


void
pl_sched_destroy(pl_scheduler_t *sc)
{
    free(sc->entries);
    sc->entries = NULL;
}


void
pl_sched_add(pl_scheduler_t *sc, pl_seq_t *s)
{
    s->state = PL_SEQ_FINISHED;
    pl_sched_move(sc, s, PL_SEQ_WAITING);
}


void
pl_sched_fork(pl_scheduler_t *sc, pl_seq_t *child)
{
    child->state = PL_SEQ_FINISHED;
    pl_sched_move(sc, child, PL_SEQ_RUNNING);
    sc->fork_seats--;
}


/* The members of s's group in s's state, into g; their count. */
static int
pl_sched_group(pl_seq_t *s, pl_seq_t **g)
{
    pl_seq_t  *l = s->leader;
    int        i, n = 0;

    for (i = 0; i < l->n_members; i++) {
        if (l->members[i]->state == s->state) {
            g[n++] = l->members[i];
        }
    }

    return n;
}


/* Seats the group of s (n members in its state) takes: best_of while it
   has not forked yet. */
static int
pl_sched_seats(const pl_seq_t *s, int n)
{
    const pl_seq_t  *l = s->leader;

    return l->n_members < l->best_of ? l->best_of : n;
}


/* The extra logits rows a chunk of n_query tokens of s takes. */
static int
pl_sched_extra(const pl_seq_t *s, int n_query)
{
    int  first;

    return pl_seq_prompt_rows(s, n_query, &first);
}


static void
pl_sched_unplan(pl_scheduler_t *sc, pl_seq_t *s)
{
    int  i;

    for (i = 0; i < sc->n_entries; i++) {
        if (sc->entries[i].seq == s) {
            sc->n_tokens -= sc->entries[i].n_query;
            sc->n_extra -= pl_sched_extra(s, sc->entries[i].n_query);
            sc->n_entries--;
            for ( ; i < sc->n_entries; i++) {
                sc->entries[i] = sc->entries[i + 1];
            }
            return;
        }
    }
}


void
pl_sched_remove(pl_scheduler_t *sc, pl_seq_t *s)
{
    pl_sched_move(sc, s, PL_SEQ_FINISHED);
    pl_sched_unplan(sc, s);
    pl_bm_free_table(sc->bm, &s->blocks);
}


int
pl_sched_swap_cheaper(const pl_scheduler_t *sc, int blocks, int tokens)
{
    const pl_preempt_costs_t  *c = &sc->costs;
    double                     swap_s, recompute_s;

    if (c->host_bytes_per_s <= 0) {
        return 0;
    }
    if (c->prefill_tokens_per_s <= 0) {
        return 1;
    }

    swap_s = 2.0 * blocks * c->block_bytes / c->host_bytes_per_s;
    recompute_s = tokens / c->prefill_tokens_per_s;

    return swap_s < recompute_s;
}


/* Should the group g (n members, their tables) be swapped rather than
   recomputed?  Auto's choice is counted here. */
static int
pl_sched_wants_swap(pl_scheduler_t *sc, pl_seq_t **g,
    pl_block_table_t **tables, int n)
{
    int  i, tokens = 0;

    if (sc->preemption_mode != PL_PREEMPT_AUTO) {
        return sc->preemption_mode == PL_PREEMPT_SWAP;
    }

    for (i = 0; i < n; i++) {
        tokens += g[i]->n_computed;
    }

    if (pl_sched_swap_cheaper(sc, pl_bm_group_blocks(sc->bm, tables, n),
                              tokens))
    {
        sc->auto_swap++;
        return 1;
    }

    sc->auto_recompute++;
    return 0;
}


/* Preempt the running group of s, every member. */
static void
pl_sched_preempt(pl_scheduler_t *sc, pl_seq_t *s)
{
    pl_seq_t          *g[PL_SEQ_GROUP_MAX];
    pl_block_table_t  *tables[PL_SEQ_GROUP_MAX];
    int                i, swap, n = pl_sched_group(s, g);

    for (i = 0; i < n; i++) {
        pl_sched_unplan(sc, g[i]);
        tables[i] = &g[i]->blocks;
    }

    swap = pl_sched_wants_swap(sc, g, tables, n);

    if (swap && pl_bm_swap_out(sc->bm, tables, n) == 0) {
        for (i = 0; i < n; i++) {
            pl_sched_move(sc, g[i], PL_SEQ_SWAPPED);
        }
        sc->preempted_swap++;

    } else {
        sc->swap_full += swap;
        for (i = 0; i < n; i++) {
            pl_bm_free_table(sc->bm, &g[i]->blocks);
            g[i]->n_computed = 0;
            pl_sched_move(sc, g[i], PL_SEQ_WAITING);
        }
        sc->preempted_recompute++;
    }

    sc->preemptions++;
    sc->n_preempted++;
    s->leader->preemptions++;
}


static void
pl_sched_plan(pl_scheduler_t *sc, pl_seq_t *s, int n_query)
{
    sc->entries[sc->n_entries].seq = s;
    sc->entries[sc->n_entries].n_query = n_query;
    sc->n_entries++;
    sc->n_tokens += n_query;
    sc->n_extra += pl_sched_extra(s, n_query);
}


/*
 * Tokens of s that can be made writable now, up to want (0 when not even
 * want can, unless shrink is set): growth and copy-on-write within the
 * free blocks.
 */
static int
pl_sched_fit(pl_scheduler_t *sc, pl_seq_t *s, int want, int shrink)
{
    int  room = pl_bm_capacity(sc->bm, &s->blocks) - s->n_computed;
    int  n = want < room ? want : room;

    if (n <= 0 || (n < want && !shrink)
        || pl_bm_write_cost(sc->bm, &s->blocks, s->n_computed,
                            s->n_computed + n) > pl_bm_num_free(sc->bm))
    {
        return 0;
    }

    return n;
}


/* Make n tokens of s writable and plan them. */
static void
pl_sched_take(pl_scheduler_t *sc, pl_seq_t *s, int n)
{
    pl_bm_prepare_write(sc->bm, &s->blocks, s->n_computed,
                        s->n_computed + n);
    pl_sched_plan(sc, s, n);
}


/*
 * Plan up to `want` tokens of running sequence s (fewer when shrink is set
 * and blocks are short), preempting newer sequences while it cannot get
 * any.  Returns the tokens planned, or 0 when s's own group (the newest)
 * was preempted.
 */
static int
pl_sched_running(pl_scheduler_t *sc, pl_seq_t *s, int want, int shrink)
{
    int  n;

    for ( ;; ) {
        n = pl_sched_fit(sc, s, want, shrink);
        if (n > 0) {
            pl_sched_take(sc, s, n);
            return n;
        }

        if (sc->running.tail->leader == s->leader) {
            pl_sched_preempt(sc, s);
            return 0;
        }

        pl_sched_preempt(sc, sc->running.tail);
    }
}


static void
pl_sched_decodes(pl_scheduler_t *sc)
{
    pl_seq_t  *s;

    for (s = sc->running.head; s; s = s->next) {
        if (sc->n_tokens >= sc->max_num_batched_tokens) {
            return;
        }
        if (pl_seq_uncomputed(s) == 1 && pl_sched_running(sc, s, 1, 0) == 0) {
            return;             /* s was the newest: nothing follows */
        }
    }
}


/* The tokens s may run now: its uncomputed ones within the budget, and
   while it owes prompt logprobs, within the extra logits rows left (each
   query row but the last may need one). */
static int
pl_sched_budget_for(const pl_scheduler_t *sc, const pl_seq_t *s)
{
    int  budget = sc->max_num_batched_tokens - sc->n_tokens;
    int  rows = PL_EXTRA_LOGITS - sc->n_extra + 1;

    if (pl_seq_owes_prompt_lp(s) && rows < budget) {
        budget = rows;
    }

    return pl_seq_uncomputed(s) < budget ? pl_seq_uncomputed(s) : budget;
}


static void
pl_sched_chunks(pl_scheduler_t *sc)
{
    pl_seq_t  *s;
    int        want;

    for (s = sc->running.head; s; s = s->next) {
        if (pl_seq_uncomputed(s) <= 1) {
            continue;       /* decoding, or a beam waiting for its group */
        }
        want = pl_sched_budget_for(sc, s);
        if (want <= 0) {
            return;
        }
        if (pl_sched_running(sc, s, want, 1) == 0) {
            return;
        }
    }
}


/* Plan what fits of the budget for running s, if anything. */
static void
pl_sched_start(pl_scheduler_t *sc, pl_seq_t *s)
{
    int  want = pl_sched_budget_for(sc, s);

    want = want > 0 ? pl_sched_fit(sc, s, want, 1) : 0;
    if (want > 0) {
        pl_sched_take(sc, s, want);
    }
}


/* Bring swapped groups back, oldest first, while their distinct blocks
   fit with a spare block for each member's next token and the budget and
   cap allow. */
static void
pl_sched_resume(pl_scheduler_t *sc)
{
    pl_seq_t          *s, *g[PL_SEQ_GROUP_MAX];
    pl_block_table_t  *tables[PL_SEQ_GROUP_MAX];
    int                i, n, need;

    while ((s = sc->swapped.head) != NULL) {
        n = pl_sched_group(s, g);
        for (i = 0; i < n; i++) {
            tables[i] = &g[i]->blocks;
        }
        need = n + pl_bm_group_blocks(sc->bm, tables, n);

        if (sc->running.n + sc->fork_seats + pl_sched_seats(s, n)
            > sc->max_num_seqs
            || sc->n_tokens >= sc->max_num_batched_tokens
            || need > pl_bm_num_free(sc->bm)
            || pl_bm_swap_in(sc->bm, tables, n) != 0)
        {
            return;
        }

        for (i = 0; i < n; i++) {
            pl_sched_move(sc, g[i], PL_SEQ_RUNNING);
        }
        for (i = 0; i < n; i++) {
            pl_sched_start(sc, g[i]);
        }
    }
}


static int
pl_next_pow2(int n)
{
    int  p = 1;

    while (p < n && p < (1 << 30)) {
        p *= 2;
    }

    return p;
}


int
pl_sched_reservation(const pl_scheduler_t *sc, const pl_seq_t *s)
{
    int  want;

    switch (sc->policy) {
    case PL_KV_ORCA_MAX:
        want = sc->max_model_len;
        break;
    case PL_KV_ORCA_POW2:
        want = s->n_prompt + pl_next_pow2(s->max_tokens);
        break;
    default:
        want = s->n_prompt + s->max_tokens;
        break;
    }

    want = want < sc->max_model_len ? want : sc->max_model_len;

    return want > s->n_tokens ? want : s->n_tokens;
}


/* Blocks for waiting s: its reservation, or its cached prefix plus room
   for the first chunk.  The tokens whose KV is reused, or -1. */
static int
pl_sched_allocate(pl_scheduler_t *sc, pl_seq_t *s, int chunk)
{
    if (sc->policy == PL_KV_PAGED) {
        return pl_bm_admit(sc->bm, &s->blocks, s->tokens, s->n_tokens,
                           chunk, !pl_seq_owes_prompt_lp(s));
    }

    return pl_bm_reserve_contiguous(sc->bm, &s->blocks,
                                    pl_sched_reservation(sc, s));
}


/* Admit waiting s: blocks for its cached prefix and first chunk, and
   that chunk planned when the budget has room.  0, or -1 (no blocks). */
static int
pl_sched_admit_one(pl_scheduler_t *sc, pl_seq_t *s)
{
    int  want = pl_sched_budget_for(sc, s);
    int  reused = pl_sched_allocate(sc, s, want > 0 ? want : 0);

    if (reused < 0) {
        return -1;
    }

    s->n_computed = reused;
    pl_sched_move(sc, s, PL_SEQ_RUNNING);

    want = pl_sched_budget_for(sc, s);
    if (want > 0) {
        pl_sched_plan(sc, s, want);
    }

    return 0;
}


/* Admit the waiting head's whole group, or (blocks short) none of it. */
static int
pl_sched_admit_group(pl_scheduler_t *sc, pl_seq_t *s)
{
    pl_seq_t  *g[PL_SEQ_GROUP_MAX];
    int        i, j, n = pl_sched_group(s, g);

    if (sc->running.n + sc->fork_seats + pl_sched_seats(s, n)
        > sc->max_num_seqs)
    {
        return -1;
    }

    for (i = 0; i < n; i++) {
        if (pl_sched_admit_one(sc, g[i]) != 0) {
            for (j = 0; j < i; j++) {
                pl_sched_unplan(sc, g[j]);
                pl_bm_free_table(sc->bm, &g[j]->blocks);
                g[j]->n_computed = 0;
                pl_sched_move(sc, g[j], PL_SEQ_WAITING);
            }
            return -1;
        }
    }

    return 0;
}


static void
pl_sched_admit(pl_scheduler_t *sc)
{
    pl_seq_t  *s;

    while ((s = sc->waiting.head) != NULL
           && pl_sched_budget_for(sc, s) > 0
           && pl_sched_admit_group(sc, s) == 0)
    {
        /* void */
    }
}


int
pl_sched_step(pl_scheduler_t *sc)
{
    sc->n_entries = 0;
    sc->n_tokens = 0;
    sc->n_extra = 0;
    sc->n_preempted = 0;
    pl_bm_clear_moves(sc->bm);

    pl_sched_decodes(sc);
    pl_sched_chunks(sc);

    if (sc->n_preempted == 0) {
        pl_sched_resume(sc);
        if (sc->swapped.n == 0) {
            pl_sched_admit(sc);
        }
    }

    return sc->n_entries;
}


void
pl_sched_complete(pl_scheduler_t *sc)
{
    pl_seq_t  *s;
    int        i;

    for (i = 0; i < sc->n_entries; i++) {
        s = sc->entries[i].seq;
        s->n_computed += sc->entries[i].n_query;
        pl_bm_register(sc->bm, &s->blocks, s->tokens, s->n_computed);
    }
}
