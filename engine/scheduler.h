/*
 * scheduler: iteration-level (continuous) batching.  Each step decides
 * which sequences run in the next model call and how many of their tokens:
 * decodes of running sequences first, then prompt chunks (chunked
 * prefill), within a token budget and a sequence cap, preempting the most
 * recently arrived request by recompute when blocks run out.  It reserves
 * blocks through the block manager and never touches tensors.
 */

#ifndef PL_SCHEDULER_H
#define PL_SCHEDULER_H

#include <stdint.h>

#include "block_manager.h"
#include "sequence.h"

/* Sequences ordered by arrival, oldest at head. */
typedef struct {
    pl_seq_t  *head;
    pl_seq_t  *tail;
    int        n;
} pl_seq_queue_t;

typedef struct {
    pl_seq_t  *seq;
    int        n_query;     /* tokens of seq run in this iteration */
} pl_sched_entry_t;

typedef struct {
    pl_block_manager_t  *bm;
    int                  max_num_seqs;
    int                  max_num_batched_tokens;

    pl_seq_queue_t       waiting;
    pl_seq_queue_t       running;
    uint64_t             preemptions;

    /* the plan made by the last pl_sched_step() */
    pl_sched_entry_t    *entries;       /* decodes first, then chunks */
    int                  n_entries;
    int                  n_tokens;
    int                  n_preempted;
} pl_scheduler_t;

/* 0, or -1 when out of memory or the limits are not positive. */
int  pl_sched_init(pl_scheduler_t *sc, pl_block_manager_t *bm,
    int max_num_seqs, int max_num_batched_tokens);
void pl_sched_destroy(pl_scheduler_t *sc);

/* Queue a new sequence (arrival must be set, and larger than any before). */
void pl_sched_add(pl_scheduler_t *sc, pl_seq_t *s);

/* Take s out of whatever queue it is in and free its blocks; its state
   becomes FINISHED.  Any plan from pl_sched_step() is void afterwards. */
void pl_sched_remove(pl_scheduler_t *sc, pl_seq_t *s);

/* Plan one iteration into sc->entries; returns sc->n_entries. */
int  pl_sched_step(pl_scheduler_t *sc);

/* The planned iteration has run: advance each planned sequence's
   computed-token count. */
void pl_sched_complete(pl_scheduler_t *sc);

/* Is there anything to run? */
static inline int
pl_sched_has_work(const pl_scheduler_t *sc)
{
    return sc->running.n > 0 || sc->waiting.n > 0;
}

#endif /* PL_SCHEDULER_H */
