/*
 * sampler: next-token choice on the host.
 *
 * A row of logits goes through the same steps as in vLLM, on a scratch
 * copy (the model's row is left alone):
 *
 *   1. min_tokens: while fewer tokens than that were generated, the eos
 *      ids and the request's stop ids get -inf;
 *   2. logit_bias is added (values are within [-100, 100]);
 *   3. penalties.  repetition_penalty (Hugging Face / vLLM / CTRL) looks
 *      at the prompt and the output: a positive logit of a token seen
 *      anywhere is divided by it, a negative one multiplied.  presence and
 *      frequency penalties (OpenAI) look at the output only: a generated
 *      token loses presence_penalty once and frequency_penalty per time it
 *      was generated;
 *   4. temperature 0 (or top_k 1) is an argmax that prefers the lowest id
 *      on ties, so it is reproducible; otherwise the logits are divided by
 *      the temperature, min_p drops the tokens whose probability is below
 *      min_p times the best one's, top_k keeps the k best and top_p the
 *      shortest prefix whose mass reaches top_p of what is left, and the
 *      token is drawn inside it.
 *
 * Candidates are ordered by (logit descending, id ascending), a strict
 * total order.  Ordering a whole large vocabulary for every token would
 * dominate the step, so candidates are narrowed by quickselect (linear
 * time) and only the head is sorted; the full sort happens only when the
 * nucleus is wider than that head.  Penalties cost one pass over the
 * request's tokens (an occurrence table is filled and cleared again).
 *
 * Log-probabilities are the raw model's log-softmax (before any of the
 * steps above), which is what vLLM returns by default: they say what the
 * model thought, whatever the request did to the choice.
 *
 * Randomness comes from xoshiro256**, seeded through splitmix64, one
 * generator per request, one draw per sampled token: the same request
 * with the same seed gets the same tokens whatever else runs in the batch.
 */

#include <math.h>
#include <stdlib.h>

#include "sampler.h"

#define PL_SAMPLER_HEAD  1024
#define PL_OCC_SEEN      0x80000000u


static uint64_t
pl_splitmix64(uint64_t *x)
{
    uint64_t  z = (*x += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;

    return z ^ (z >> 31);
}


void
pl_rng_seed(pl_rng_t *rng, uint64_t seed)
{
    int  i;

    for (i = 0; i < 4; i++) {
        rng->s[i] = pl_splitmix64(&seed);
    }
}


static inline uint64_t
pl_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}


uint64_t
pl_rng_next(pl_rng_t *rng)
{
    uint64_t  *s = rng->s;
    uint64_t   result = pl_rotl(s[1] * 5, 7) * 9;
    uint64_t   t = s[1] << 17;

    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = pl_rotl(s[3], 45);

    return result;
}


double
pl_rng_uniform(pl_rng_t *rng)
{
    return (double) (pl_rng_next(rng) >> 11) * 0x1.0p-53;
}


int
pl_sampler_init(pl_sampler_t *s, int vocab_size)
{
    size_t  n = (size_t) vocab_size;

    s->vocab_size = vocab_size;
    s->n_eos = 0;
    s->cand = malloc(n * sizeof(pl_candidate_t));
    s->work = malloc(n * sizeof(float));
    s->occ = calloc(n, sizeof(uint32_t));
    s->touched = malloc(n * sizeof(int32_t));

    if (s->cand == NULL || s->work == NULL || s->occ == NULL
        || s->touched == NULL)
    {
        pl_sampler_destroy(s);
        return -1;
    }

    return 0;
}


void
pl_sampler_destroy(pl_sampler_t *s)
{
    free(s->cand);
    free(s->work);
    free(s->occ);
    free(s->touched);
    s->cand = NULL;
    s->work = NULL;
    s->occ = NULL;
    s->touched = NULL;
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


/* a comes before b: higher logit, or the same logit and a lower id */
static inline int
pl_cand_before(const pl_candidate_t *a, const pl_candidate_t *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}


static int
pl_cand_cmp(const void *pa, const void *pb)
{
    const pl_candidate_t  *a = pa, *b = pb;

    return pl_cand_before(a, b) ? -1 : pl_cand_before(b, a) ? 1 : 0;
}


static inline void
pl_cand_swap(pl_candidate_t *a, pl_candidate_t *b)
{
    pl_candidate_t  t = *a;

    *a = *b;
    *b = t;
}


/* Rearrange c[0..n) so that c[0..k) are its k first candidates. */
static void
pl_select_top(pl_candidate_t *c, int n, int k)
{
    int             lo = 0, hi = n - 1, i, store;
    pl_candidate_t  pivot;

    while (lo < hi) {
        pl_cand_swap(&c[lo + (hi - lo) / 2], &c[hi]);
        pivot = c[hi];

        for (store = lo, i = lo; i < hi; i++) {
            if (pl_cand_before(&c[i], &pivot)) {
                pl_cand_swap(&c[i], &c[store++]);
            }
        }
        pl_cand_swap(&c[store], &c[hi]);

        if (store == k - 1) {
            return;
        }
        if (store > k - 1) {
            hi = store - 1;
        } else {
            lo = store + 1;
        }
    }
}


/* Draw from the unnormalized weights exp((logit - max) / T) of c[0..n). */
static int32_t
pl_draw(const pl_candidate_t *c, int n, float max, float t, double mass,
    pl_rng_t *rng)
{
    double  u = pl_rng_uniform(rng) * mass, acc = 0;
    int     i;

    for (i = 0; i < n; i++) {
        acc += expf((c[i].logit - max) / t);
        if (u < acc) {
            return c[i].id;
        }
    }

    return c[n - 1].id;
}


static double
pl_mass(const pl_candidate_t *c, int n, float max, float t)
{
    double  sum = 0;
    int     i;

    for (i = 0; i < n; i++) {
        sum += expf((c[i].logit - max) / t);
    }

    return sum;
}


/* Length of the shortest prefix of sorted c[0..n) whose mass reaches want;
   0 when even all n do not. */
static int
pl_nucleus(const pl_candidate_t *c, int n, float max, float t, double want,
    double *mass)
{
    double  acc = 0;
    int     i;

    for (i = 0; i < n; i++) {
        acc += expf((c[i].logit - max) / t);
        if (acc >= want) {
            *mass = acc;
            return i + 1;
        }
    }

    *mass = acc;
    return 0;
}


static int32_t
pl_sample_filtered(pl_sampler_t *s, const pl_sampling_params_t *p,
    pl_rng_t *rng)
{
    pl_candidate_t  *c = s->cand;
    const float     *w = s->work;
    int              n = 0, k, head, m, i;
    float            t = p->temperature, max, floor;
    double           total, mass;

    max = w[pl_argmax(w, s->vocab_size)];
    if (!isfinite(max)) {
        return pl_argmax(w, s->vocab_size);
    }

    /* min_p: p_i >= min_p * p_max  <=>  l_i >= l_max + T ln(min_p) */
    floor = p->min_p > 0 ? max + t * logf(p->min_p) : -INFINITY;

    for (i = 0; i < s->vocab_size; i++) {
        if (w[i] > -INFINITY && w[i] >= floor) {
            c[n].logit = w[i];
            c[n].id = i;
            n++;
        }
    }

    k = (p->top_k > 0 && p->top_k < n) ? p->top_k : n;
    if (k < n) {
        pl_select_top(c, n, k);
    }

    head = k < PL_SAMPLER_HEAD ? k : PL_SAMPLER_HEAD;
    if (head < k) {
        pl_select_top(c, k, head);
    }
    qsort(c, head, sizeof(pl_candidate_t), pl_cand_cmp);

    total = pl_mass(c, k, max, t);

    if (p->top_p >= 1.0f) {
        return pl_draw(c, k, max, t, total, rng);
    }

    m = pl_nucleus(c, head, max, t, (double) p->top_p * total, &mass);
    if (m == 0) {
        qsort(c, k, sizeof(pl_candidate_t), pl_cand_cmp);
        m = pl_nucleus(c, k, max, t, (double) p->top_p * total, &mass);
        if (m == 0) {
            m = k;
            mass = total;
        }
    }

    return pl_draw(c, m, max, t, mass, rng);
}


/* Draw from softmax(w / T) over the whole row (w has no NaN); the row
   is overwritten by its weights, so that exp runs once per token. */
static int32_t
pl_sample_full(float *w, int n, float t, pl_rng_t *rng)
{
    int32_t  best = pl_argmax(w, n);
    float    max = w[best], inv = 1.0f / t;
    double   sum = 0, u, acc = 0;
    int      i;

    if (!isfinite(max)) {
        return best;
    }

    for (i = 0; i < n; i++) {
        w[i] = expf((w[i] - max) * inv);
        sum += w[i];
    }

    u = pl_rng_uniform(rng) * sum;

    for (i = 0; i < n; i++) {
        acc += w[i];
        if (u < acc) {
            return i;
        }
    }

    return best;
}


static void
pl_mask(float *w, int vocab, const int32_t *ids, int n)
{
    int  i;

    for (i = 0; i < n; i++) {
        if (ids[i] >= 0 && ids[i] < vocab) {
            w[ids[i]] = -INFINITY;
        }
    }
}


/* Count the history into occ: seen anywhere, and times in the output. */
static int
pl_count(pl_sampler_t *s, const pl_history_t *h)
{
    int      i, n = 0;
    int32_t  t;

    for (i = 0; i < h->n_tokens; i++) {
        t = h->tokens[i];
        if (t < 0 || t >= s->vocab_size) {
            continue;
        }
        if (s->occ[t] == 0) {
            s->touched[n++] = t;
        }
        s->occ[t] = (s->occ[t] | PL_OCC_SEEN) + (i >= h->n_prompt);
    }

    return n;
}


static void
pl_penalize(pl_sampler_t *s, const pl_sampling_params_t *p,
    const pl_history_t *h)
{
    float    rp = p->repetition_penalty, *l;
    uint32_t times;
    int      i, n = pl_count(s, h);
    int32_t  t;

    for (i = 0; i < n; i++) {
        t = s->touched[i];
        l = &s->work[t];
        times = s->occ[t] & ~PL_OCC_SEEN;
        s->occ[t] = 0;

        if (rp > 0 && rp != 1.0f) {
            *l = *l > 0 ? *l / rp : *l * rp;
        }
        if (times > 0) {
            *l -= p->presence_penalty + p->frequency_penalty * (float) times;
        }
    }
}


static int
pl_has_penalties(const pl_sampling_params_t *p)
{
    return (p->repetition_penalty > 0 && p->repetition_penalty != 1.0f)
           || p->presence_penalty != 0 || p->frequency_penalty != 0;
}


/* logits -> s->work after min_tokens, logit_bias and the penalties. */
static void
pl_adjust(pl_sampler_t *s, const float *logits,
    const pl_sampling_params_t *p, const pl_history_t *h)
{
    float     *w = s->work, b;
    int        i, generated = h ? h->n_tokens - h->n_prompt : 0;
    uint32_t   j;
    int32_t    id;

    for (i = 0; i < s->vocab_size; i++) {
        w[i] = isnan(logits[i]) ? -INFINITY : logits[i];
    }

    if (generated < p->min_tokens) {
        pl_mask(w, s->vocab_size, s->eos, s->n_eos);
        pl_mask(w, s->vocab_size, p->stop_ids, (int) p->n_stop_ids);
    }

    for (j = 0; j < p->n_bias; j++) {
        id = p->bias[j].id;
        b = p->bias[j].bias;
        if (id >= 0 && id < s->vocab_size && isfinite(b)) {
            w[id] += b < -100 ? -100 : b > 100 ? 100 : b;
        }
    }

    if (h && pl_has_penalties(p)) {
        pl_penalize(s, p, h);
    }
}


void
pl_sampler_logprobs(pl_sampler_t *s, const float *logits, int32_t id, int n,
    pl_logprobs_t *lp)
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

    for (i = 0; i < s->vocab_size && n > 0; i++) {
        v = isnan(logits[i]) ? -INFINITY : (float) (logits[i] - lse);
        if (lp->n_top == n && !(v > lp->top_logprobs[n - 1])) {
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
    const pl_sampling_params_t *p, const pl_history_t *h, pl_rng_t *rng,
    pl_logprobs_t *lp)
{
    int32_t  t;

    pl_adjust(s, logits, p, h);

    if (p->temperature <= 0.0f || p->top_k == 1) {
        t = pl_argmax(s->work, s->vocab_size);

    } else if ((p->top_k <= 0 || p->top_k >= s->vocab_size)
               && p->top_p >= 1.0f && p->min_p <= 0)
    {
        t = pl_sample_full(s->work, s->vocab_size, p->temperature, rng);

    } else {
        t = pl_sample_filtered(s, p, rng);
    }

    if (lp && p->logprobs > 0) {
        pl_sampler_logprobs(s, logits, t, p->logprobs - 1, lp);
    }

    return t;
}
