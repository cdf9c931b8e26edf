/*
 * beam: beam search's arithmetic for one request, apart from the engine:
 * each beam's candidate continuations from its row of logits, the step
 * that picks the next beams and the finished hypotheses from all of them,
 * and the rule that says when the search is over.  It knows nothing of
 * sequences, blocks or the scheduler; engine_beam.c turns its choices into
 * forks and frees of block tables.
 *
 * The rules are Hugging Face transformers' beam search (generate with
 * num_beams, do_sample=False), which the golden fixtures check token for
 * token:
 *
 *   - every step, each live beam's log-softmax row adds to its cumulative
 *     log-probability; of all (beam, token) candidates, sorted best first,
 *     those among the best `width` that end in a stop token (or reach the
 *     last allowed length) become hypotheses, scored by cumulative
 *     log-probability / (generated length, the new token included) **
 *     length_penalty; the best `width` hypotheses are kept;
 *   - the best `width` candidates that do not stop are the next beams;
 *   - once `width` hypotheses are kept the search ends when
 *     early_stopping is true; when it is false, when the best live
 *     beam's cumulative log-probability over (its generated length) **
 *     length_penalty is no better than the worst kept hypothesis;
 *     "never": the same with the longest allowed length in place of the
 *     current one when length_penalty > 0 (the exact bound), the current
 *     one otherwise.
 *
 * A beam needs only its best width + (stop tokens) candidates: the best
 * `width` over all beams and the first `width` that do not stop are always
 * among them.
 */

#ifndef PL_BEAM_H
#define PL_BEAM_H

#include <stdint.h>

#include "pl_proto.h"

#define PL_BEAM_MAX  PL_MAX_SEQS        /* width limit: a group's size */

typedef struct {
    int32_t   token;
    float     logprob;
} pl_beam_cand_t;

/* A finished hypothesis: generated tokens and their scores. */
typedef struct {
    double    score;            /* cum / n ** length_penalty */
    double    cum;              /* cumulative log-probability */
    int       n;                /* generated tokens */
    int       stopped;          /* ends in a stop token (else: length) */
    int32_t  *tokens;           /* [max_new], owned */
} pl_beam_hyp_t;

/* One next beam: which beam it extends, by which token, its new score. */
typedef struct {
    int       parent;
    int32_t   token;
    double    cum;
} pl_beam_next_t;

typedef struct {
    int              width;
    float            length_penalty;
    int              early_stopping;    /* PL_EARLY_STOPPING_* */
    int              max_new;           /* tokens a beam may generate */
    int              min_tokens;        /* stop tokens masked until */
    int              n_stops;
    int32_t         *stops;             /* eos (unless ignored), stop ids */

    int              per_beam;          /* candidates a beam row gives */
    pl_beam_cand_t  *cands;             /* [width][per_beam] */
    int              n_cands[PL_BEAM_MAX];  /* -1: no row yet this step */

    pl_beam_hyp_t    hyps[PL_BEAM_MAX]; /* best first */
    int              n_hyps;

    pl_beam_next_t   next[PL_BEAM_MAX]; /* the last step's choice */
    int              n_next;
    int              done;
} pl_beam_t;

/* NULL when out of memory.  stops are copied. */
pl_beam_t *pl_beam_create(int width, float length_penalty,
    int early_stopping, int max_new, int min_tokens, const int32_t *stops,
    int n_stops);
void       pl_beam_free(pl_beam_t *b);

int        pl_beam_is_stop(const pl_beam_t *b, int32_t token);

/*
 * Beam i's candidates from its row of logits (vocab entries) after
 * `generated` tokens: the per_beam best of its log-softmax, the stop
 * tokens left out while generated < min_tokens.
 */
void       pl_beam_row(pl_beam_t *b, int i, const float *logits, int vocab,
    int generated);

/* Whether beams 0..n-1 all have their row for this step. */
int        pl_beam_ready(const pl_beam_t *b, int n);

/*
 * One step over beams 0..n-1, each with its cumulative log-probability
 * cum[i] and its generated tokens gen[i] (all `generated` long): kept
 * hypotheses updated, b->next and b->n_next set to the next beams (none
 * when the search is over), b->done set when it is.  Every row is used
 * up.
 */
void       pl_beam_step(pl_beam_t *b, const double *cum,
    const int32_t *const *gen, int n, int generated);

#endif /* PL_BEAM_H */
