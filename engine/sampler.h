/*
 * sampler: picks the next token from one row of host logits, with every
 * OpenAI / vLLM sampling parameter: logit bias, min_tokens, repetition,
 * presence and frequency penalties, temperature, min-p, top-k and top-p,
 * and the log-probabilities of the chosen token and of the most likely
 * ones.  Each request draws from its own seeded random generator so that
 * its tokens do not depend on what else is in the batch.
 */

#ifndef PL_SAMPLER_H
#define PL_SAMPLER_H

#include <stdint.h>

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
    int32_t           n_top;
    int32_t           top_ids[PL_SAMPLER_MAX_LOGPROBS];
    float             top_logprobs[PL_SAMPLER_MAX_LOGPROBS];
} pl_logprobs_t;

/* xoshiro256** state */
typedef struct {
    uint64_t  s[4];
} pl_rng_t;

typedef struct {
    float     logit;
    int32_t   id;
} pl_candidate_t;

/* Scratch for one vocabulary size; reused across calls. */
typedef struct {
    int              vocab_size;
    pl_candidate_t  *cand;
    float           *work;          /* the row being adjusted */
    uint32_t        *occ;           /* per id: seen bit + output count */
    int32_t         *touched;       /* ids whose occ is non-zero */
    int              n_eos;
    int32_t          eos[PL_SAMPLER_MAX_EOS];
} pl_sampler_t;

/* Seed the generator from one 64-bit seed (expanded by splitmix64). */
void     pl_rng_seed(pl_rng_t *rng, uint64_t seed);
uint64_t pl_rng_next(pl_rng_t *rng);

/* Uniform double in [0, 1). */
double   pl_rng_uniform(pl_rng_t *rng);

/* 0, or -1 when out of memory. */
int      pl_sampler_init(pl_sampler_t *s, int vocab_size);
void     pl_sampler_destroy(pl_sampler_t *s);

/* The end-of-sequence ids that min_tokens masks (at most 8 are kept). */
void     pl_sampler_set_eos(pl_sampler_t *s, const int32_t *ids, int n);

/* Highest logit, lowest id on ties; NaN never wins. */
int32_t  pl_argmax(const float *logits, int n);

/*
 * The next token for this row of vocab_size logits.  h (NULL: no tokens
 * yet) feeds the penalties and min_tokens; lp (NULL when p->logprobs is
 * 0) receives the log-probabilities.
 */
int32_t  pl_sample(pl_sampler_t *s, const float *logits,
    const pl_sampling_params_t *p, const pl_history_t *h, pl_rng_t *rng,
    pl_logprobs_t *lp);

/* The raw model log-softmax of row logits: of id, and the n best. */
void     pl_sampler_logprobs(pl_sampler_t *s, const float *logits,
    int32_t id, int n, pl_logprobs_t *lp);

#endif /* PL_SAMPLER_H */
