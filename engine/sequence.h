/*
 * sequence: one request's generation state inside the engine (its tokens,
 * how many of them have KV in the cache, its blocks, sampling parameters,
 * random stream, and what of its output the worker has not received
 * yet), plus a small table that finds a worker's live requests by the
 * request id the worker chose.
 *
 * A request is a sequence group: its first sequence (the leader) is the
 * one the worker's list and the index know, and it holds the group; the
 * others are forked from it once its prompt has been run (parallel
 * sampling n, best_of), share its prompt's blocks and each sample and
 * finish on their own.  In beam search the members are the beams: they
 * step together, and each step may hand a member's place to a fork of
 * another (engine_beam.c).
 */

#ifndef PL_SEQUENCE_H
#define PL_SEQUENCE_H

#include <stdint.h>

#include "beam.h"
#include "block_manager.h"
#include "grammar_cache.h"
#include "sampler.h"

typedef enum {
    PL_SEQ_WAITING = 0,     /* no blocks; queued for (re)admission */
    PL_SEQ_RUNNING,         /* holds blocks; scheduled every iteration */
    PL_SEQ_SWAPPED,         /* its blocks are in the host pool */
    PL_SEQ_FINISHED         /* out of the scheduler; output may be unsent */
} pl_seq_state_t;

#define PL_SEQ_GROUP_MAX  16       /* sequences of one request */

struct pl_conn_s;
typedef struct pl_seq_s  pl_seq_t;

struct pl_seq_s {
    uint64_t               req_id;
    uint64_t               arrival;       /* engine-wide arrival order */
    struct pl_conn_s      *conn;          /* the worker that submitted it */

    pl_sampling_params_t   sampling;      /* bias, stop_ids owned here */
    pl_logprobs_t         *logprobs;      /* per generated token, when */
    int                    logprobs_cap;  /* sampling.logprobs asks */
    int                    max_tokens;
    int                    ignore_eos;

    int32_t               *tokens;        /* prompt, then generated */
    int                    n_tokens;
    int                    cap;           /* n_prompt + max_tokens */
    int                    n_prompt;      /* as submitted */
    int                    n_computed;    /* tokens whose KV is cached */

    pl_block_table_t       blocks;
    pl_seq_state_t         state;
    int                    finish_reason; /* PL_FINISH_*, 0 while live */

    int                    n_sent;        /* generated tokens sent */
    int                    finish_sent;
    char                  *error;         /* ERROR message to send first */
    uint32_t               error_status;
    int                    error_sent;

    /* the group: index and out_index on every member, the rest on the
       leader only */
    int                    index;         /* 0 = the leader */
    int                    out_index;     /* choice sent as; -1: not sent */
    double                 cum_logprob;   /* of its sampled tokens */
    pl_seq_t              *leader;        /* itself for the leader */
    pl_seq_t              *members[PL_SEQ_GROUP_MAX];  /* [0] = leader */
    int                    n_members;     /* created so far */
    int                    n_return;      /* n: sequences sent back */
    int                    best_of;       /* sequences generated */
    int                    n_finished;
    int                    fail_reason;   /* ABORT or ERROR of the request */
    int                    fail_sent;
    uint64_t               seed;          /* member i draws from (seed, i) */
    pl_beam_t             *beam;          /* beam search state, or NULL */
    int                    index_base;    /* batched prompts: the first
                                             index its choices go as */
    int                    silent;        /* ended with its batch, whose
                                             failed prompt tells the
                                             worker: sends nothing */
    /* prompt logprobs (prompt_logprobs), on the leader: prompt_lp[j]
       for prompt position j >= 1, from the logits of position j - 1;
       positions from prompt_lp_next on are still owed */
    pl_logprobs_t         *prompt_lp;     /* [n_prompt], or NULL */
    int                    prompt_lp_top; /* top entries each */
    int                    prompt_lp_next;
    int                    prompt_sent;   /* of them sent, per member */
    /* the request's timing and cache use, for its FINISH and the log;
       times are pl_now_us(), 0 until they happen */
    uint64_t               t_arrival;     /* SUBMIT taken */
    uint64_t               t_scheduled;   /* first iteration that ran it */
    uint64_t               t_first_token;
    int                    cached_tokens; /* reused from the prefix cache
                                             at its first admission */
    int                    preemptions;   /* of the group */
    pl_shared_grammar_t   *grammar;       /* structured output, or NULL */
    int32_t                grammar_state; /* its DFA state: the output's */

    pl_seq_t              *prev;          /* scheduler queue */
    pl_seq_t              *next;
    pl_seq_t              *conn_prev;     /* the worker's sequences */
    pl_seq_t              *conn_next;
    pl_seq_t              *hash_next;     /* pl_seq_index_t chain */
};

/* NULL when out of memory.  tokens[0..n_prompt) are copied; a sequence
   that only carries an error may have no tokens at all. */
pl_seq_t *pl_seq_create(uint64_t req_id, const int32_t *prompt, int n_prompt,
    int max_tokens);
void      pl_seq_free(pl_seq_t *s);

static inline int
pl_seq_generated(const pl_seq_t *s)
{
    return s->n_tokens - s->n_prompt;
}

/* Tokens not yet run through the model (1 for a decode step). */
static inline int
pl_seq_uncomputed(const pl_seq_t *s)
{
    return s->n_tokens - s->n_computed;
}

/* Whether s still owes prompt logprobs. */
static inline int
pl_seq_owes_prompt_lp(const pl_seq_t *s)
{
    return s->prompt_lp != NULL && s->prompt_lp_next < s->n_prompt;
}


/*
 * The extra logits rows a chunk of n_query tokens of s needs for its
 * prompt logprobs: its query rows but the last (whose row is the
 * sequence's own) at positions p with prompt_lp_next - 1 <= p <=
 * n_prompt - 2; *first the first such p.
 */
static inline int
pl_seq_prompt_rows(const pl_seq_t *s, int n_query, int *first)
{
    int  lo, hi;

    if (!pl_seq_owes_prompt_lp(s)) {
        return 0;
    }
    lo = s->prompt_lp_next - 1 > s->n_computed ? s->prompt_lp_next - 1
                                               : s->n_computed;
    hi = s->n_computed + n_query - 2 < s->n_prompt - 2
         ? s->n_computed + n_query - 2 : s->n_prompt - 2;
    *first = lo;

    return hi >= lo ? hi - lo + 1 : 0;
}


/* Append a sampled token; the caller checks room (n_tokens < cap). */
static inline void
pl_seq_append(pl_seq_t *s, int32_t token)
{
    s->tokens[s->n_tokens++] = token;
}

/* The seed of member i's random stream in a group seeded with seed:
   member 0 draws from seed itself. */
static inline uint64_t
pl_seq_stream_seed(uint64_t seed, int i)
{
    return i == 0 ? seed : seed ^ (0x9e3779b97f4a7c15ull * (uint64_t) i);
}

/* Copy of leader (right after its prompt has been run) as group member
   index: tokens, sampling parameters, computed count; not its blocks or
   scheduler state.  NULL when out of memory. */
pl_seq_t *pl_seq_fork(const pl_seq_t *leader, int index);

/* Live sequences of one worker by req_id (chained hash, grows). */
typedef struct {
    pl_seq_t  **buckets;
    uint32_t    n_buckets;
    uint32_t    count;
} pl_seq_index_t;

int       pl_seq_index_init(pl_seq_index_t *ix);
void      pl_seq_index_destroy(pl_seq_index_t *ix);
pl_seq_t *pl_seq_index_find(const pl_seq_index_t *ix, uint64_t req_id);
/* The next live sequence with s's req_id after s (the prompts of a
   batched request share one), or NULL. */
pl_seq_t *pl_seq_index_next(const pl_seq_t *s);
int       pl_seq_index_add(pl_seq_index_t *ix, pl_seq_t *s);
void      pl_seq_index_remove(pl_seq_index_t *ix, pl_seq_t *s);

#endif /* PL_SEQUENCE_H */
