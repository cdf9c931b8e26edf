/*
 * sampler: turns each sequence's OpenAI / vLLM sampling parameters and
 * its tokens so far into one sampling request for the backend
 * (pl_sample_req_t and its pl_logit_adjust_t entries, pl_ops.h): logit
 * bias, min_tokens, repetition, presence and frequency penalties become
 * per-id adjustments, temperature, min-p, top-k and top-p pass through;
 * a structured output's grammar mask travels as one bit per id.
 * The draw itself happens on the backend (be->sample) or on the host
 * (pl_sample_host), the same definition either way.
 *
 * It also computes log-probabilities of the chosen token and of the most
 * likely ones, on host logits, for the requests that ask for them.
 */

#ifndef PL_SAMPLER_H
#define PL_SAMPLER_H

#include <stdint.h>

#include "pl_ops.h"

#define PL_SAMPLER_MAX_LOGPROBS  20
#define PL_SAMPLER_MAX_EOS       8

typedef struct {
    int32_t   id;
    float     bias;             /* added to the logit, within [-100, 100] */
} pl_logit_bias_t;

/* Zero is "off" for every field except top_p (1 = off); temperature 0
   is greedy. */
typedef struct {
    float             temperature;        /* 0 = greedy */
    float             top_p;              /* 1 = off */
    int32_t           top_k;              /* 0 = off */
    float             min_p;              /* 0 = off */
    float             repetition_penalty; /* 0 or 1 = off; prompt + output */
    float             presence_penalty;   /* 0 = off; output only */
    float             frequency_penalty;  /* 0 = off; output only */
    int32_t           min_tokens;         /* eos and stop ids masked until */
    int32_t           logprobs;           /* 0 = none, else 1 + top-N */
    uint32_t          n_bias;
    pl_logit_bias_t  *bias;               /* owned by the sequence */
    uint32_t          n_stop_ids;
    int32_t          *stop_ids;           /* owned by the sequence */
} pl_sampling_params_t;

/* The tokens so far: prompt, then generated. */
typedef struct {
    const int32_t    *tokens;
    int               n_prompt;
    int               n_tokens;
} pl_history_t;

/* Log-probabilities of one sampled position (raw model log-softmax). */
typedef struct {
    float             logprob;            /* of the chosen token */
    int32_t           rank;               /* of the chosen token: the ids
                                             whose logprob is >= its own
                                             (1 for the best) */
    int32_t           n_top;
    int32_t           top_ids[PL_SAMPLER_MAX_LOGPROBS];
    float             top_logprobs[PL_SAMPLER_MAX_LOGPROBS];
} pl_logprobs_t;

/* One batch of requests being built, and per-id scratch for one
   vocabulary size; reused across batches. */
typedef struct {
    int                 vocab_size;
    int32_t            *slot;       /* per id: its entry in the request
                                       being built, or -1 */
    uint32_t           *times;      /* per id: times in the output */
    int                 n_eos;
    int32_t             eos[PL_SAMPLER_MAX_EOS];

    pl_sample_req_t    *reqs;
    int                 n_reqs;
    int                 reqs_cap;
    pl_logit_adjust_t  *adjust;
    int                 n_adjust;
    int                 adjust_cap;
    uint64_t           *masks;      /* rows of mask_words: what the
                                       restricted requests may draw */
    int                 n_masks;
    int                 masks_cap;
    int                 mask_words;
} pl_sampler_t;

/* 0, or -1 when out of memory. */
int      pl_sampler_init(pl_sampler_t *s, int vocab_size);
void     pl_sampler_destroy(pl_sampler_t *s);

/* The end-of-sequence ids that min_tokens masks (at most 8 are kept). */
void     pl_sampler_set_eos(pl_sampler_t *s, const int32_t *ids, int n);

/* Start a new batch: no requests, no entries. */
void     pl_sampler_reset(pl_sampler_t *s);

/*
 * Append the request that draws the token after history h (NULL: no
 * tokens yet; it feeds the penalties and min_tokens) from logits row
 * row, with parameters p, from the random stream seed at position step
 * (the index of the output token drawn).  Its index in s->reqs, or -1
 * when out of memory.
 */
int      pl_sampler_add(pl_sampler_t *s, int row,
    const pl_sampling_params_t *p, const pl_history_t *h, uint64_t seed,
    uint64_t step);

/*
 * Only the ids set in allowed (a bitset of vocab_size bits, bit i in word
 * i / 64) may be drawn by request i (structured outputs): the bitset is
 * copied into the batch's masks as request i's row, which the draw reads
 * (pl_ops.h).  0, or -1 when out of memory.
 */
int      pl_sampler_restrict(pl_sampler_t *s, int i,
    const uint64_t *allowed);

/* Highest logit, lowest id on ties; NaN never wins. */
int32_t  pl_argmax(const float *logits, int n);

/* The raw model log-softmax of row logits: of id (with its rank), and
   the n best. */
void     pl_sampler_logprobs(const pl_sampler_t *s, const float *logits,
    int32_t id, int n, pl_logprobs_t *lp);

/*
 * One request on one row of host logits, drawn by pl_sample_host(), with
 * its log-probabilities in lp when p->logprobs asks (lp may be NULL
 * otherwise): what the engine does for a sequence, as one call, for
 * tests and tools.  Resets s's batch.  The token, or -1 when out of
 * memory.
 */
int32_t  pl_sample(pl_sampler_t *s, const float *logits,
    const pl_sampling_params_t *p, const pl_history_t *h, uint64_t seed,
    uint64_t step, pl_logprobs_t *lp);

#endif /* PL_SAMPLER_H */
