/*
 * sampler: next-token choice on the host.
 *
 * Greedy is an argmax that prefers the lowest id on ties, so it is
 * reproducible.  Temperature sampling draws from softmax(logits / T); with
 * top-k and/or top-p it first orders the candidates by (logit descending,
 * id ascending), a strict total order, keeps the k best, then the shortest
 * prefix of those whose probability mass reaches top_p, and draws inside
 * it.  Ordering a whole large vocabulary for every token would dominate
 * the step, so candidates are narrowed by quickselect (linear time) and
 * only the head is sorted; the full sort happens only when the nucleus is
 * wider than that head.
 *
 * Randomness comes from xoshiro256**, seeded through splitmix64, one
 * generator per request: the same request with the same seed gets the same
 * tokens whatever else runs in the batch.
 */

#include <math.h>
#include <stdlib.h>

#include "sampler.h"

#define PL_SAMPLER_HEAD  1024


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
    s->vocab_size = vocab_size;
    s->cand = malloc((size_t) vocab_size * sizeof(pl_candidate_t));

    return s->cand ? 0 : -1;
}


void
pl_sampler_destroy(pl_sampler_t *s)
{
    free(s->cand);
    s->cand = NULL;
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
        acc += exp((c[i].logit - max) / t);
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
        sum += exp((c[i].logit - max) / t);
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
        acc += exp((c[i].logit - max) / t);
        if (acc >= want) {
            *mass = acc;
            return i + 1;
        }
    }

    *mass = acc;
    return 0;
}


static int32_t
pl_sample_filtered(pl_sampler_t *s, const float *logits,
    const pl_sampling_params_t *p, pl_rng_t *rng)
{
    pl_candidate_t  *c = s->cand;
    int              n = s->vocab_size, k, head, m, i;
    float            t = p->temperature, max;
    double           total, mass;

    for (i = 0; i < n; i++) {
        c[i].logit = isnan(logits[i]) ? -INFINITY : logits[i];
        c[i].id = i;
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

    max = c[0].logit;
    if (!isfinite(max)) {
        return c[0].id;
    }

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


static int32_t
pl_sample_full(const float *logits, int n, float t, pl_rng_t *rng)
{
    int32_t  best = pl_argmax(logits, n);
    float    max = logits[best];
    double   sum = 0, u, acc = 0;
    int      i;

    if (!isfinite(max)) {
        return best;
    }

    for (i = 0; i < n; i++) {
        if (!isnan(logits[i])) {
            sum += exp((logits[i] - max) / t);
        }
    }

    u = pl_rng_uniform(rng) * sum;

    for (i = 0; i < n; i++) {
        if (!isnan(logits[i])) {
            acc += exp((logits[i] - max) / t);
            if (u < acc) {
                return i;
            }
        }
    }

    return best;
}


int32_t
pl_sample(pl_sampler_t *s, const float *logits,
    const pl_sampling_params_t *p, pl_rng_t *rng)
{
    if (p->temperature <= 0.0f || p->top_k == 1) {
        return pl_argmax(logits, s->vocab_size);
    }

    if ((p->top_k <= 0 || p->top_k >= s->vocab_size) && p->top_p >= 1.0f) {
        return pl_sample_full(logits, s->vocab_size, p->temperature, rng);
    }

    return pl_sample_filtered(s, logits, p, rng);
}
