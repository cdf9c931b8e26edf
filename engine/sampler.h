/*
 * sampler: picks the next token from one row of host logits.  Greedy
 * (temperature 0) or temperature sampling with optional top-k and top-p,
 * each request drawing from its own seeded random generator so that its
 * tokens do not depend on what else is in the batch.
 */

#ifndef PL_SAMPLER_H
#define PL_SAMPLER_H

#include <stdint.h>

typedef struct {
    float     temperature;      /* 0 = greedy */
    float     top_p;            /* 1 = off */
    int32_t   top_k;            /* 0 = off */
} pl_sampling_params_t;

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
} pl_sampler_t;

/* Seed the generator from one 64-bit seed (expanded by splitmix64). */
void     pl_rng_seed(pl_rng_t *rng, uint64_t seed);
uint64_t pl_rng_next(pl_rng_t *rng);

/* Uniform double in [0, 1). */
double   pl_rng_uniform(pl_rng_t *rng);

/* 0, or -1 when out of memory. */
int      pl_sampler_init(pl_sampler_t *s, int vocab_size);
void     pl_sampler_destroy(pl_sampler_t *s);

/* Highest logit, lowest id on ties; NaN never wins. */
int32_t  pl_argmax(const float *logits, int n);

/* The next token for this row of vocab_size logits. */
int32_t  pl_sample(pl_sampler_t *s, const float *logits,
    const pl_sampling_params_t *p, pl_rng_t *rng);

#endif /* PL_SAMPLER_H */
