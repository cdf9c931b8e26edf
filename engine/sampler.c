/*
 * sampler: sampling requests for the backend, and log-probabilities.
 *
 * vLLM's order of the steps before the draw is
 *
 *   1. min_tokens: while fewer tokens than that were generated, the eos
 *      ids and the request's stop ids get -inf;
 *   2. logit_bias is added (values are clamped to pl_params.h's
 *      [PL_PARAM_BIAS_LO, PL_PARAM_BIAS_HI]);
 *   3. penalties.  repetition_penalty (Hugging Face / vLLM / CTRL) looks
 *      at the prompt and the output: a positive logit of a token seen
 *      anywhere is divided by it, a negative one multiplied.  presence and
 *      frequency penalties (OpenAI) look at the output only: a generated
 *      token loses presence_penalty once and frequency_penalty per time it
 *      was generated;
 *
 * and the backend's definition (pl_ops.h) applies one adjust entry per id
 * in that same order: bias (where -inf masks), then repetition, then the
 * additive penalty.  So a request's entries are built by merging, per id,
 * what the three steps ask: a table from id to its entry (slot) finds the
 * entry an id already has, and is cleared again through the entries
 * themselves, so building costs one pass over the history, the stop ids
 * and the biases, never one over the vocabulary.  Ids nothing touches
 * get no entry; a request without penalties, bias or min_tokens has none.
 *
 * A structured output's grammar mask is no entries at all: it is copied
 * as one bit per id into the batch's mask rows, which the draw reads in
 * the pass it makes over the row anyway.  As entries it would be one at
 * -inf per id left out, about 128,000 for Llama 3's vocabulary in a
 * structural state: half a millisecond to build and 2 MB for the GPU to
 * read per request and step, against a 16 KiB copy (docs/BENCHMARKS.md).
 *
 * Temperature, min-p, top-k and top-p, greedy and the random stream
 * (the sequence's seed, and the position of the token drawn, for Philox)
 * go into the request as they are.
 *
 * Log-probabilities are the raw model's log-softmax (before any of the
 * steps above), which is what vLLM returns by default: they say what the
 * model thought, whatever the request did to the choice.
 */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pl_params.h"
#include "sampler.h"


int
pl_sampler_init(pl_sampler_t *s, int vocab_size)
{
    int  i;

    *s = (pl_sampler_t) { .vocab_size = vocab_size,
                          .mask_words = pl_sample_mask_words(vocab_size) };

    s->slot = malloc((size_t) vocab_size * sizeof(int32_t));
    s->times = calloc((size_t) vocab_size, sizeof(uint32_t));
    if (s->slot == NULL || s->times == NULL) {
        pl_sampler_destroy(s);
        return -1;
    }

    for (i = 0; i < vocab_size; i++) {
        s->slot[i] = -1;
    }

    return 0;
}


void
pl_sampler_destroy(pl_sampler_t *s)
{
    free(s->slot);
    free(s->times);
    free(s->reqs);
    free(s->adjust);
    free(s->masks);
    *s = (pl_sampler_t) { 0 };
}


void
pl_sampler_set_eos(pl_sampler_t *s, const int32_t *ids, int n)
{
    int  i;

    s->n_eos = 0;

    for (i = 0; i < n && i < PL_SAMPLER_MAX_EOS; i++) {
        s->eos[s->n_eos++] = ids[i];
    }
}


void
pl_sampler_reset(pl_sampler_t *s)
{
    s->n_reqs = 0;
    s->n_adjust = 0;
    s->n_masks = 0;
}


/* Room for want more elements of size in *a (cap *cap): 0 or -1. */
static int
pl_sampler_grow(void **a, int *cap, int want, size_t size)
{
    int    n = *cap ? *cap : 64;
    void  *p;

    if (want <= *cap) {
        return 0;
    }
    while (n < want) {
        n *= 2;
    }
    p = realloc(*a, (size_t) n * size);
    if (p == NULL) {
        return -1;
    }
    *a = p;
    *cap = n;

    return 0;
}


/* id's entry in the request being built (created empty); NULL when the
   id is outside the vocabulary or memory is short */
static pl_logit_adjust_t *
pl_sampler_entry(pl_sampler_t *s, int32_t id)
{
    pl_logit_adjust_t  *a;

    if (id < 0 || id >= s->vocab_size) {
        return NULL;
    }
    if (s->slot[id] >= 0) {
        return &s->adjust[s->slot[id]];
    }
    if (pl_sampler_grow((void **) &s->adjust, &s->adjust_cap,
                        s->n_adjust + 1, sizeof(pl_logit_adjust_t)) != 0)
    {
        return NULL;
    }

    s->slot[id] = s->n_adjust;
    a = &s->adjust[s->n_adjust++];
    *a = (pl_logit_adjust_t) { .id = id };

    return a;
}


static int
pl_sampler_mask(pl_sampler_t *s, const int32_t *ids, int n)
{
    pl_logit_adjust_t  *a;
    int                 i;

    for (i = 0; i < n; i++) {
        if (ids[i] >= 0 && ids[i] < s->vocab_size) {
            a = pl_sampler_entry(s, ids[i]);
            if (a == NULL) {
                return -1;
            }
            a->bias = -INFINITY;
        }
    }

    return 0;
}


/* Entries for the history: repetition over prompt and output, and the
   output counts for presence and frequency. */
static int
pl_sampler_history(pl_sampler_t *s, const pl_history_t *h, int repeat,
    int penalize)
{
    pl_logit_adjust_t  *a;
    int32_t             t;
    int                 i;

    for (i = repeat ? 0 : h->n_prompt; i < h->n_tokens; i++) {
        t = h->tokens[i];
        if (t < 0 || t >= s->vocab_size) {
            continue;
        }
        a = pl_sampler_entry(s, t);
        if (a == NULL) {
            return -1;
        }
        a->repeat = repeat;
        if (penalize && i >= h->n_prompt) {
            s->times[t]++;
        }
    }

    return 0;
}


static int
pl_sampler_biases(pl_sampler_t *s, const pl_sampling_params_t *p)
{
    pl_logit_adjust_t  *a;
    float               b;
    uint32_t            j;

    for (j = 0; j < p->n_bias; j++) {
        b = p->bias[j].bias;
        if (!isfinite(b) || p->bias[j].id < 0
            || p->bias[j].id >= s->vocab_size)
        {
            continue;
        }
        a = pl_sampler_entry(s, p->bias[j].id);
        if (a == NULL) {
            return -1;
        }
        a->bias += b < PL_PARAM_BIAS_LO ? PL_PARAM_BIAS_LO
                   : b > PL_PARAM_BIAS_HI ? PL_PARAM_BIAS_HI : b;
    }

    return 0;
}


/* The penalties from the counts, and the per-id tables cleared for the
   next request. */
static void
pl_sampler_close(pl_sampler_t *s, const pl_sampling_params_t *p, int first)
{
    pl_logit_adjust_t  *a;
    int                 i;

    for (i = first; i < s->n_adjust; i++) {
        a = &s->adjust[i];
        if (s->times[a->id] > 0) {
            a->penalty = -(p->presence_penalty
                           + p->frequency_penalty * (float) s->times[a->id]);
            s->times[a->id] = 0;
        }
        s->slot[a->id] = -1;
    }
}


int
pl_sampler_add(pl_sampler_t *s, int row, const pl_sampling_params_t *p,
    const pl_history_t *h, uint64_t seed, uint64_t step)
{
    float  rp = p->repetition_penalty;
    int    first = s->n_adjust, rc = 0;
    int    repeat = rp > 0 && rp != 1.0f;
    int    penalize = p->presence_penalty != 0 || p->frequency_penalty != 0;
    int    generated = h ? h->n_tokens - h->n_prompt : 0;

    if (pl_sampler_grow((void **) &s->reqs, &s->reqs_cap, s->n_reqs + 1,
                        sizeof(pl_sample_req_t)) != 0)
    {
        return -1;
    }

    if (h && (repeat || penalize)) {
        rc = pl_sampler_history(s, h, repeat, penalize);
    }
    if (rc == 0 && generated < p->min_tokens) {
        rc = pl_sampler_mask(s, s->eos, s->n_eos);
        if (rc == 0) {
            rc = pl_sampler_mask(s, p->stop_ids, (int) p->n_stop_ids);
        }
    }
    if (rc == 0) {
        rc = pl_sampler_biases(s, p);
    }

    pl_sampler_close(s, p, first);
    if (rc != 0) {
        s->n_adjust = first;
        return -1;
    }

    s->reqs[s->n_reqs] = (pl_sample_req_t) {
        .row = row,
        .temperature = p->temperature,
        .top_p = p->top_p,
        .min_p = p->min_p,
        .top_k = p->top_k,
        .repetition_penalty = rp,
        .adjust_start = first,
        .adjust_count = s->n_adjust - first,
        .seed = seed,
        .step = step,
    };

    return s->n_reqs++;
}


int
pl_sampler_restrict(pl_sampler_t *s, int i, const uint64_t *allowed)
{
    size_t  words = (size_t) s->mask_words;

    if (pl_sampler_grow((void **) &s->masks, &s->masks_cap,
                        (s->n_masks + 1) * s->mask_words, sizeof(uint64_t))
        != 0)
    {
        return -1;
    }

    memcpy(s->masks + (size_t) s->n_masks * words, allowed,
           words * sizeof(uint64_t));
    s->reqs[i].masked = 1;
    s->reqs[i].mask_row = s->n_masks++;

    return 0;
}


int32_t
pl_argmax(const float *logits, int n)
{
    int32_t  best = 0;
    int      i;

    for (i = 1; i < n; i++) {
        if (logits[i] > logits[best] || isnan(logits[best])) {
            best = i;
        }
    }

    return best;
}


void
pl_sampler_logprobs(const pl_sampler_t *s, const float *logits, int32_t id,
    int n, pl_logprobs_t *lp)
{
    int32_t  best = pl_argmax(logits, s->vocab_size);
    float    max = logits[best], v;
    double   sum = 0, lse;
    int      i, j;

    n = n < PL_SAMPLER_MAX_LOGPROBS ? n : PL_SAMPLER_MAX_LOGPROBS;

    for (i = 0; i < s->vocab_size; i++) {
        if (!isnan(logits[i]) && isfinite(max)) {
            sum += expf(logits[i] - max);
        }
    }
    lse = isfinite(max) ? max + log(sum) : 0;

    v = logits[id];
    lp->logprob = isnan(v) ? -INFINITY : (float) (v - lse);
    lp->n_top = 0;
    lp->rank = 0;

    for (i = 0; i < s->vocab_size; i++) {
        v = isnan(logits[i]) ? -INFINITY : (float) (logits[i] - lse);
        lp->rank += v >= lp->logprob;
        if (n == 0 || (lp->n_top == n && !(v > lp->top_logprobs[n - 1]))) {
            continue;
        }
        j = lp->n_top < n ? lp->n_top++ : n - 1;
        for ( /* void */ ; j > 0 && v > lp->top_logprobs[j - 1]; j--) {
            lp->top_logprobs[j] = lp->top_logprobs[j - 1];
            lp->top_ids[j] = lp->top_ids[j - 1];
        }
        lp->top_logprobs[j] = v;
        lp->top_ids[j] = i;
    }
}


int32_t
pl_sample(pl_sampler_t *s, const float *logits,
    const pl_sampling_params_t *p, const pl_history_t *h, uint64_t seed,
    uint64_t step, pl_logprobs_t *lp)
{
    int32_t  t;

    pl_sampler_reset(s);
    if (pl_sampler_add(s, 0, p, h, seed, step) < 0) {
        return -1;
    }

    pl_sample_host(&t, logits, s->vocab_size, s->reqs, 1, s->adjust,
                   s->n_adjust, s->masks, s->n_masks);

    if (lp && p->logprobs > 0) {
        pl_sampler_logprobs(s, logits, t, p->logprobs - 1, lp);
    }

    return t;
}
