/*
 * dist.c: the random draws of pagedllm-load.
 *
 * Request lengths follow the two workloads of the PagedAttention paper's
 * evaluation (its Fig. 11 / Sec. 6.1):
 *
 *   ShareGPT  input  mean 161.31  lognormal sigma 1.1   long tail
 *             output mean 337.99  lognormal sigma 0.9   long tail
 *   Alpaca    input  mean  19.31  lognormal sigma 0.6   short, narrow
 *             output mean  58.45  lognormal sigma 0.8
 *
 * Each length is a lognormal draw rounded to an integer and clipped to
 * [1, max]: inputs to min(1024, context / 2) less a shared prefix, and
 * outputs to the rest of min(2048, context), so prompt + output always
 * fits the model, as the paper's filter of ShareGPT (input <= 1024, input
 * + output <= 2048).  The sigmas set the tails; each mu is solved so that
 * the mean after the clipping is the paper's.  For a 2048-token context:
 *
 *                     mu    median   p90    p99   clipped at 1024
 *   ShareGPT input   4.53     93     380   1024      1.5 %
 *            output  5.51    248     786   1024      5.8 %
 *   Alpaca   input   2.78     16      35     65      0
 *            output  3.75     42     118    273      0
 *
 * t/unit/load_dist.c checks these over 100k draws.  Arrivals are a
 * Poisson process: exponential gaps of mean 1 / rate.
 */

#include "load.h"

#include <math.h>
#include <string.h>


static const load_dataset_t  load_datasets[] = {
    { "sharegpt", 161.31, 1.1, 337.99, 0.9 },
    { "alpaca", 19.31, 0.6, 58.45, 0.8 },
};


static uint64_t
splitmix64(uint64_t *x)
{
    uint64_t  z = (*x += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}


void
load_rng_seed(load_rng_t *r, uint64_t seed)
{
    int  i;

    for (i = 0; i < 4; i++) {
        r->s[i] = splitmix64(&seed);
    }
}


static uint64_t
rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}


uint64_t
load_rng_next(load_rng_t *r)
{
    uint64_t  *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;

    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}


/* in (0, 1): the top 53 bits, offset by half a step */
double
load_rng_uniform(load_rng_t *r)
{
    return ((load_rng_next(r) >> 11) + 0.5) * 0x1.0p-53;
}


/* Box-Muller, one of the pair */
double
load_rng_normal(load_rng_t *r)
{
    double  u = load_rng_uniform(r), v = load_rng_uniform(r);

    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}


double
load_rng_exp(load_rng_t *r, double rate)
{
    return -log(load_rng_uniform(r)) / rate;
}


static double
norm_cdf(double z)
{
    return 0.5 * erfc(-z / M_SQRT2);
}


/* E[min(max(X, lo), hi)] for X lognormal(mu, sigma) */
double
load_lognormal_clipped_mean(double mu, double sigma, double lo, double hi)
{
    double  a = (log(lo) - mu) / sigma, b = (log(hi) - mu) / sigma;

    return lo * norm_cdf(a)
           + exp(mu + sigma * sigma / 2)
             * (norm_cdf(b - sigma) - norm_cdf(a - sigma))
           + hi * (1 - norm_cdf(b));
}


int
load_lognormal_init(load_lognormal_t *d, double mean, double sigma, int lo,
    int hi)
{
    double  a, b, m;
    int     i;

    if (lo < 1 || hi < lo || sigma <= 0 || mean <= lo || mean >= hi) {
        return -1;
    }

    a = log(lo) - 10 * sigma;
    b = log(hi) + 10 * sigma;

    for (i = 0; i < 200; i++) {
        m = (a + b) / 2;
        if (load_lognormal_clipped_mean(m, sigma, lo, hi) < mean) {
            a = m;
        } else {
            b = m;
        }
    }

    d->mean = mean;
    d->sigma = sigma;
    d->mu = (a + b) / 2;
    d->lo = lo;
    d->hi = hi;
    return 0;
}


/* inverse of the normal CDF by bisection: only used for stated bounds */
static double
norm_quantile(double p)
{
    double  a = -40, b = 40, m;
    int     i;

    for (i = 0; i < 200; i++) {
        m = (a + b) / 2;
        if (norm_cdf(m) < p) {
            a = m;
        } else {
            b = m;
        }
    }
    return (a + b) / 2;
}


double
load_lognormal_quantile(const load_lognormal_t *d, double p)
{
    double  x = exp(d->mu + d->sigma * norm_quantile(p));

    return x < d->lo ? d->lo : x > d->hi ? d->hi : x;
}


int
load_lognormal_draw(const load_lognormal_t *d, load_rng_t *r)
{
    double  x = exp(d->mu + d->sigma * load_rng_normal(r));

    if (x < d->lo) {
        return d->lo;
    }
    if (x > d->hi) {
        return d->hi;
    }
    return (int) floor(x + 0.5);
}


const load_dataset_t *
load_dataset_find(const char *name)
{
    size_t  i;

    for (i = 0; i < sizeof(load_datasets) / sizeof(load_datasets[0]); i++) {
        if (strcmp(load_datasets[i].name, name) == 0) {
            return &load_datasets[i];
        }
    }
    return NULL;
}


/* the paper's limits (input <= 1024, input + output <= 2048), smaller
   for a model of a shorter context */
void
load_context_limits(int max_model_len, int *in_max, int *out_max)
{
    int  total = max_model_len < 2048 ? max_model_len : 2048;

    *in_max = total / 2;
    *out_max = total - *in_max;
}
