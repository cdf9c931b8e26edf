/*
 * load_dist: pagedllm-load's draws (bench/load/dist.c).  For a fixed seed,
 * 100k draws of each length distribution have the paper's mean (within
 * 2 %) and the median and p99 the distribution states (within 3 % and
 * 5 %); Poisson gaps have mean 1 / rate and a coefficient of variation
 * of 1; the same seed gives the same numbers.
 */

#include "tap.h"

#include "load/load.h"

#define DRAWS  100000


static double
rel(double got, double want)
{
    return fabs(got - want) / want;
}


static void
check_lengths(const char *name, const char *side, double mean,
    double sigma, int hi, double median, double p99)
{
    load_lognormal_t   d;
    load_rng_t         r;
    static double      v[DRAWS];
    double             sum = 0, q50, q99;
    int                i, x, lo_seen = hi, hi_seen = 0;

    if (!ok(load_lognormal_init(&d, mean, sigma, 1, hi) == 0,
            "%s %s: the mean is reachable within [1, %d]", name, side, hi))
    {
        return;
    }

    ok(rel(load_lognormal_clipped_mean(d.mu, sigma, 1, hi), mean) < 1e-9,
       "%s %s: mu %.3f gives the clipped mean %.2f", name, side, d.mu,
       mean);

    load_rng_seed(&r, 42);
    for (i = 0; i < DRAWS; i++) {
        x = load_lognormal_draw(&d, &r);
        lo_seen = x < lo_seen ? x : lo_seen;
        hi_seen = x > hi_seen ? x : hi_seen;
        v[i] = x;
        sum += x;
    }

    q50 = load_percentile(v, DRAWS, 0.5);
    q99 = load_percentile(v, DRAWS, 0.99);

    ok(lo_seen >= 1 && hi_seen <= hi, "%s %s: draws within [1, %d] "
       "(%d..%d)", name, side, hi, lo_seen, hi_seen);
    ok(rel(sum / DRAWS, mean) < 0.02, "%s %s: sampled mean %.2f within 2 %% "
       "of %.2f", name, side, sum / DRAWS, mean);
    ok(rel(q50, median) < 0.03, "%s %s: sampled median %.0f within 3 %% of "
       "the stated %.0f", name, side, q50, median);
    ok(rel(q99, p99) < 0.05, "%s %s: sampled p99 %.0f within 5 %% of the "
       "stated %.0f", name, side, q99, p99);
    ok(rel(load_lognormal_quantile(&d, 0.5), median) < 0.02
       && rel(load_lognormal_quantile(&d, 0.99), p99) < 0.02,
       "%s %s: the stated median and p99 are the distribution's (%.1f, "
       "%.1f)", name, side, load_lognormal_quantile(&d, 0.5),
       load_lognormal_quantile(&d, 0.99));
}


static void
test_datasets(void)
{
    const load_dataset_t  *sg = load_dataset_find("sharegpt");
    const load_dataset_t  *al = load_dataset_find("alpaca");
    int                    in_max, out_max;

    ok(sg && al && !load_dataset_find("wmt"), "sharegpt and alpaca known, "
       "nothing else");
    if (!sg || !al) {
        return;
    }

    ok(sg->in_mean == 161.31 && sg->out_mean == 337.99
       && al->in_mean == 19.31 && al->out_mean == 58.45,
       "the paper's means (Fig. 11)");
    ok(sg->in_mean / al->in_mean > 8.3 && sg->out_mean / al->out_mean > 5.7,
       "ShareGPT: 8.4x longer inputs and 5.8x longer outputs than Alpaca");

    load_context_limits(2048, &in_max, &out_max);
    is_int(in_max, 1024, "2048 context: inputs up to 1024");
    is_int(out_max, 1024, "2048 context: outputs up to 1024");
    load_context_limits(4096, &in_max, &out_max);
    ok(in_max == 1024 && out_max == 1024, "4096 context: the paper's limits");
    load_context_limits(512, &in_max, &out_max);
    ok(in_max == 256 && out_max == 256, "512 context: halves");

    /* the table of bench/load/dist.c's comment */
    check_lengths("sharegpt", "input", sg->in_mean, sg->in_sigma, 1024,
                  93, 1024);
    check_lengths("sharegpt", "output", sg->out_mean, sg->out_sigma, 1024,
                  248, 1024);
    check_lengths("alpaca", "input", al->in_mean, al->in_sigma, 1024,
                  16, 65);
    check_lengths("alpaca", "output", al->out_mean, al->out_sigma, 1024,
                  42, 273);
}


static void
test_unreachable(void)
{
    load_lognormal_t  d;

    ok(load_lognormal_init(&d, 300, 1.0, 1, 256) != 0,
       "a mean above the clip is refused");
    ok(load_lognormal_init(&d, 10, 0, 1, 256) != 0, "sigma 0 is refused");
}


static void
test_poisson(void)
{
    load_rng_t  r;
    double      sum = 0, sq = 0, x, mean, sd;
    int         i;

    load_rng_seed(&r, 7);
    for (i = 0; i < DRAWS; i++) {
        x = load_rng_exp(&r, 4.0);
        sum += x;
        sq += x * x;
    }
    mean = sum / DRAWS;
    sd = sqrt(sq / DRAWS - mean * mean);

    ok(rel(mean, 0.25) < 0.01, "Poisson at 4/s: mean gap %.4f s within 1 %% "
       "of 0.25", mean);
    ok(rel(sd / mean, 1.0) < 0.02, "Poisson gaps: coefficient of variation "
       "%.3f within 2 %% of 1 (exponential)", sd / mean);
}


static void
test_seed(void)
{
    load_rng_t  a, b, c;
    int         i, same = 1, differ = 0;

    load_rng_seed(&a, 1);
    load_rng_seed(&b, 1);
    load_rng_seed(&c, 2);
    for (i = 0; i < 1000; i++) {
        uint64_t  x = load_rng_next(&a);

        same &= x == load_rng_next(&b);
        differ |= x != load_rng_next(&c);
    }
    ok(same, "the same seed: the same numbers");
    ok(differ, "another seed: other numbers");

    load_rng_seed(&a, 1);
    ok(load_rng_next(&a) == 0xb3f2af6d0fc710c5ull,
       "seed 1: xoshiro256** seeded by splitmix64's first number");
}


int
main(void)
{
    test_datasets();
    test_unreachable();
    test_poisson();
    test_seed();
    return done_testing();
}
