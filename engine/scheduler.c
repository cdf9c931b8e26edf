/*
 * scheduler: FCFS continuous batching with chunked prefill and preemption
 * by recompute.
 *
 * Both queues are kept in arrival order.  A step has three passes:
 *
 *   1. every running sequence that is decoding gets its one token;
 *   2. running sequences still in their prompt get a chunk, oldest first,
 *      as large as the remaining budget and the free blocks allow;
 *   3. unless someone was preempted in this step, waiting requests are
 *      admitted from the head while the budget, the sequence cap and the
 *      free blocks (enough for the whole remaining prompt) allow.  The head
 *      is never skipped, so no request is overtaken by a newer one.
 *
 * When a running sequence cannot get even one more block, the newest
 * running sequence is preempted (its blocks freed, its planned work, if
 * any, dropped from the plan) and goes back to the waiting queue in arrival
 * order, so it is resumed before anything newer; it will rerun its prompt
 * plus the tokens it generated.  When the one in need is itself the newest,
 * it is the one preempted.  Older requests therefore always make progress,
 * and since the engine guarantees that one request of max_model_len tokens
 * fits the whole pool, the oldest one always finishes: nothing starves.
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
    s->state = PL_SEQ_WAITING;
    pl_queue_insert(&sc->waiting, s);
}


static void
pl_sched_unplan(pl_scheduler_t *sc, pl_seq_t *s)
{
    int  i;

    for (i = 0; i < sc->n_entries; i++) {
        if (sc->entries[i].seq == s) {
            sc->n_tokens -= sc->entries[i].n_query;
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
    if (s->state == PL_SEQ_WAITING) {
        pl_queue_unlink(&sc->waiting, s);
    } else if (s->state == PL_SEQ_RUNNING) {
        pl_queue_unlink(&sc->running, s);
    }

    pl_sched_unplan(sc, s);
    pl_bm_free_table(sc->bm, &s->blocks);
    s->state = PL_SEQ_FINISHED;
}


static void
pl_sched_preempt(pl_scheduler_t *sc, pl_seq_t *s)
{
    pl_queue_unlink(&sc->running, s);
    pl_sched_unplan(sc, s);
    pl_bm_free_table(sc->bm, &s->blocks);
    s->n_computed = 0;
    s->state = PL_SEQ_WAITING;
    pl_queue_insert(&sc->waiting, s);
    sc->preemptions++;
    sc->n_preempted++;
}


static void
pl_sched_plan(pl_scheduler_t *sc, pl_seq_t *s, int n_query)
{
    sc->entries[sc->n_entries].seq = s;
    sc->entries[sc->n_entries].n_query = n_query;
    sc->n_entries++;
    sc->n_tokens += n_query;
}


/*
 * Plan up to `want` tokens of running sequence s (fewer when shrink is set
 * and blocks are short), preempting newer sequences while it cannot get
 * any.  Returns the tokens planned, or 0 when s itself was preempted.
 */
static int
pl_sched_running(pl_scheduler_t *sc, pl_seq_t *s, int want, int shrink)
{
    int  room, n;

    for ( ;; ) {
        room = pl_bm_capacity(sc->bm, &s->blocks) - s->n_computed;
        n = want < room ? want : room;

        if (n == want || (shrink && n > 0)) {
            pl_bm_ensure(sc->bm, &s->blocks, s->n_computed + n);
            pl_sched_plan(sc, s, n);
            return n;
        }

        if (sc->running.tail == s) {
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


static void
pl_sched_chunks(pl_scheduler_t *sc)
{
    pl_seq_t  *s;
    int        budget, want;

    for (s = sc->running.head; s; s = s->next) {
        budget = sc->max_num_batched_tokens - sc->n_tokens;
        if (budget <= 0) {
            return;
        }
        if (pl_seq_uncomputed(s) <= 1) {
            continue;
        }
        want = pl_seq_uncomputed(s) < budget ? pl_seq_uncomputed(s) : budget;
        if (pl_sched_running(sc, s, want, 1) == 0) {
            return;
        }
    }
}


static void
pl_sched_admit(pl_scheduler_t *sc)
{
    pl_seq_t  *s;
    int        budget, want;

    while ((s = sc->waiting.head) != NULL
           && sc->running.n < sc->max_num_seqs)
    {
        budget = sc->max_num_batched_tokens - sc->n_tokens;
        if (budget <= 0 || !pl_bm_can_allocate(sc->bm, pl_seq_uncomputed(s))) {
            return;
        }

        want = pl_seq_uncomputed(s) < budget ? pl_seq_uncomputed(s) : budget;
        if (pl_bm_ensure(sc->bm, &s->blocks, want) != 0) {
            return;
        }

        pl_queue_unlink(&sc->waiting, s);
        s->state = PL_SEQ_RUNNING;
        pl_queue_insert(&sc->running, s);
        pl_sched_plan(sc, s, want);
    }
}


int
pl_sched_step(pl_scheduler_t *sc)
{
    sc->n_entries = 0;
    sc->n_tokens = 0;
    sc->n_preempted = 0;

    pl_sched_decodes(sc);
    pl_sched_chunks(sc);

    if (sc->n_preempted == 0) {
        pl_sched_admit(sc);
    }

    return sc->n_entries;
}


void
pl_sched_complete(pl_scheduler_t *sc)
{
    int  i;

    for (i = 0; i < sc->n_entries; i++) {
        sc->entries[i].seq->n_computed += sc->entries[i].n_query;
    }
}
