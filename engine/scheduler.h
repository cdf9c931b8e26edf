/*
 * scheduler: iteration-level (continuous) batching.  Each step decides
 * which sequences run in the next model call and how many of their tokens:
 * decodes of running sequences first, then prompt chunks (chunked
 * prefill), then swapped groups resume, then new requests are admitted,
 * all within a token budget and a sequence cap.  When blocks run out the
 * most recently arrived running group is preempted, by swap or by
 * recompute (or, in auto mode, by whichever of the two costs less for
 * that group).  It reserves blocks through the block manager, which logs the
 * copies and swaps the runner must execute, and never touches tensors.
 *
 * The unit of admission, preemption and swapping is the sequence group
 * (a request's parallel samples), never one of its members alone.
 */

#ifndef PL_SCHEDULER_H
#define PL_SCHEDULER_H

#include <stdint.h>

#include "block_manager.h"
#include "sequence.h"

typedef enum {
    PL_PREEMPT_RECOMPUTE = 0,
    PL_PREEMPT_SWAP,                /* recompute once the host pool is full */
    PL_PREEMPT_AUTO                 /* per group, the cheaper of the two by
                                       pl_preempt_costs_t; recompute once
                                       the host pool is full */
} pl_preempt_mode_t;

/*
 * What auto preemption weighs, measured by the engine at start.  Swapping
 * a group costs its distinct blocks' bytes moved twice (out now, back in
 * later) over the host link; recomputing it costs its computed tokens
 * (prompt and generated, every member) run again as prefill.  A rate of
 * 0 makes its side infinitely dear; on a tie the group is recomputed.
 */
typedef struct {
    double  host_bytes_per_s;       /* device <-> host copies */
    double  prefill_tokens_per_s;   /* tokens of KV the model computes */
    double  block_bytes;            /* one block's K and V, every layer
                                       and rank */
} pl_preempt_costs_t;

/* How the KV pool is handed out.  Only PAGED is for serving; the Orca
   policies are the paper's baselines, for measurement: one contiguous
   reservation per request, made at admission, of */
typedef enum {
    PL_KV_PAGED = 0,                /* blocks on demand */
    PL_KV_ORCA_MAX,                 /* max_model_len tokens */
    PL_KV_ORCA_POW2,                /* prompt + next power of two of the
                                       output length (max_tokens) */
    PL_KV_ORCA_ORACLE               /* prompt + exactly max_tokens */
} pl_kv_policy_t;

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
    pl_preempt_mode_t    preemption_mode;
    pl_preempt_costs_t   costs;             /* for PL_PREEMPT_AUTO */
    pl_kv_policy_t       policy;
    int                  max_model_len;     /* for ORCA_MAX */

    pl_seq_queue_t       waiting;
    pl_seq_queue_t       running;
    pl_seq_queue_t       swapped;
    int                  fork_seats;    /* running leaders' members
                                           still to fork */
    uint64_t             preemptions;
    uint64_t             preempted_recompute;
    uint64_t             preempted_swap;
    uint64_t             auto_swap;     /* auto's choices by cost (the */
    uint64_t             auto_recompute;    /* outcome counted above) */
    uint64_t             swap_full;     /* swap wanted, host pool full:
                                           recomputed instead */

    /* the plan made by the last pl_sched_step() */
    pl_sched_entry_t    *entries;       /* decodes first, then chunks */
    int                  n_entries;
    int                  n_tokens;
    int                  n_extra;       /* extra logits rows planned
                                           (prompt logprobs) */
    int                  n_preempted;
} pl_scheduler_t;

/*
 * 0, or -1 when out of memory or the limits are not positive.  Preemption
 * starts as recompute, the policy as paged and max_model_len as the pool's
 * size; set the fields to change them.
 */
int  pl_sched_init(pl_scheduler_t *sc, pl_block_manager_t *bm,
    int max_num_seqs, int max_num_batched_tokens);
void pl_sched_destroy(pl_scheduler_t *sc);

/* Queue a new sequence (arrival must be set, and larger than any before). */
void pl_sched_add(pl_scheduler_t *sc, pl_seq_t *s);

/* Start child, just forked from a running leader (same arrival, blocks
   shared through pl_bm_fork) and already counted in the leader's
   n_members, as a running member of its group. */
void pl_sched_fork(pl_scheduler_t *sc, pl_seq_t *child);

/* Take s out of whatever queue it is in and free its blocks; its state
   becomes FINISHED.  Any plan from pl_sched_step() is void afterwards. */
void pl_sched_remove(pl_scheduler_t *sc, pl_seq_t *s);

/*
 * Plan one iteration into sc->entries; returns sc->n_entries.  The block
 * moves the plan needs are in pl_bm_moves(sc->bm), to run before the
 * forward pass.
 */
int  pl_sched_step(pl_scheduler_t *sc);

/* The planned iteration has run: advance each planned sequence's
   computed-token count and offer its full blocks to the prefix cache. */
void pl_sched_complete(pl_scheduler_t *sc);

/* Is swapping a group of `blocks` distinct blocks out and back in
   cheaper, by sc->costs, than recomputing its `tokens` computed tokens? */
int  pl_sched_swap_cheaper(const pl_scheduler_t *sc, int blocks, int tokens);

/* Tokens of KV the policy reserves for s at admission (ORCA policies). */
int  pl_sched_reservation(const pl_scheduler_t *sc, const pl_seq_t *s);

/* Is there anything to run? */
static inline int
pl_sched_has_work(const pl_scheduler_t *sc)
{
    return sc->running.n > 0 || sc->waiting.n > 0 || sc->swapped.n > 0;
}

#endif /* PL_SCHEDULER_H */
