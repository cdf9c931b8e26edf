/*
 * Sampler: greedy, seeds, top-k, top-p, and the temperature distribution
 * against softmax under a fixed seed with a statistical bound.
 */

#include "tap.h"

#include "sampler.h"


static void
softmax(const float *l, int n, float t, double *p)
{
    double  max = l[0], sum = 0;
    int     i;

    for (i = 1; i < n; i++) {
        max = l[i] > max ? l[i] : max;
    }
    for (i = 0; i < n; i++) {
        p[i] = exp((l[i] - max) / t);
        sum += p[i];
    }
    for (i = 0; i < n; i++) {
        p[i] /= sum;
    }
}


static void
test_argmax(void)
{
    float  a[] = { 1, 3, 2, 3, -1 };
    float  b[] = { NAN, 0.5f, NAN, 0.7f };
    float  c[] = { -INFINITY, -INFINITY, -INFINITY };

    is_int(pl_argmax(a, 5), 1, "argmax takes the lowest id on a tie");
    is_int(pl_argmax(b, 4), 3, "argmax never picks NaN");
    is_int(pl_argmax(c, 3), 0, "argmax of all -inf is id 0");
}


static void
random_logits(float *l, int n, pl_rng_t *g)
{
    int  i;

    for (i = 0; i < n; i++) {
        l[i] = (float) (pl_rng_uniform(g) * 8.0 - 4.0);
    }
}


static void
test_greedy_equivalents(void)
{
    pl_sampler_t          s;
    pl_rng_t              g, r;
    pl_sampling_params_t  greedy = { 0.0f, 1.0f, 0 };
    pl_sampling_params_t  k1 = { 1.0f, 1.0f, 1 };
    pl_sampling_params_t  p0 = { 1.0f, 1e-6f, 0 };
    pl_sampling_params_t  hot = { 1.0f, 1.0f, 0 };
    float                 l[512];
    int                   i, bad_g = 0, bad_k = 0, bad_p = 0, differ = 0;
    int32_t               best;

    pl_sampler_init(&s, 512);
    pl_rng_seed(&g, 7);
    pl_rng_seed(&r, 8);

    for (i = 0; i < 200; i++) {
        random_logits(l, 512, &g);
        best = pl_argmax(l, 512);
        bad_g += pl_sample(&s, l, &greedy, &r) != best;
        bad_k += pl_sample(&s, l, &k1, &r) != best;
        bad_p += pl_sample(&s, l, &p0, &r) != best;
        differ += pl_sample(&s, l, &hot, &r) != best;
    }

    is_int(bad_g, 0, "temperature 0 is argmax");
    is_int(bad_k, 0, "top_k = 1 equals greedy");
    is_int(bad_p, 0, "a tiny top_p equals greedy");
    ok(differ > 100, "temperature 1 over 512 flat-ish logits is not greedy "
       "(%d of 200 differ)", differ);

    pl_sampler_destroy(&s);
}


static void
test_seed_determinism(void)
{
    pl_sampler_t          s;
    pl_rng_t              a, b, c, g;
    pl_sampling_params_t  p = { 0.9f, 0.95f, 40 };
    float                 l[512];
    int                   i, same = 1, diff = 0;
    int32_t               x, y, z;

    pl_sampler_init(&s, 512);
    pl_rng_seed(&g, 99);
    random_logits(l, 512, &g);

    pl_rng_seed(&a, 1234);
    pl_rng_seed(&b, 1234);
    pl_rng_seed(&c, 1235);

    for (i = 0; i < 300; i++) {
        x = pl_sample(&s, l, &p, &a);
        y = pl_sample(&s, l, &p, &b);
        z = pl_sample(&s, l, &p, &c);
        same &= x == y;
        diff += x != z;
    }

    ok(same, "the same seed gives the same 300 tokens");
    ok(diff > 0, "another seed gives other tokens (%d differ)", diff);

    pl_sampler_destroy(&s);
}


#define DRAWS  200000

static void
test_temperature_distribution(void)
{
    pl_sampler_t          s;
    pl_rng_t              r;
    pl_sampling_params_t  p = { 0.7f, 1.0f, 0 };
    float                 l[6] = { 1.0f, 0.2f, -0.5f, 1.3f, 0.0f, 0.9f };
    double                want[6], worst = 0, d;
    int                   count[6] = { 0 }, i;

    pl_sampler_init(&s, 6);
    pl_rng_seed(&r, 42);
    softmax(l, 6, 0.7f, want);

    for (i = 0; i < DRAWS; i++) {
        count[pl_sample(&s, l, &p, &r)]++;
    }
    for (i = 0; i < 6; i++) {
        d = fabs((double) count[i] / DRAWS - want[i]);
        worst = d > worst ? d : worst;
    }

    ok(worst < 0.006, "T=0.7 frequencies match softmax(l/T) within 0.006 "
       "(worst %.5f; ~6 sigma)", worst);

    pl_sampler_destroy(&s);
}


static void
test_top_k_top_p_distribution(void)
{
    pl_sampler_t          s;
    pl_rng_t              r;
    /* probabilities 0.5, 0.3, 0.15, 0.05 at T = 1, shuffled */
    float                 l[4] = { logf(0.15f), logf(0.5f), logf(0.05f),
                                   logf(0.3f) };
    pl_sampling_params_t  k2 = { 1.0f, 1.0f, 2 };
    pl_sampling_params_t  p7 = { 1.0f, 0.7f, 0 };
    pl_sampling_params_t  k3p9 = { 1.0f, 0.9f, 3 };
    int                   ck[4] = { 0 }, cp[4] = { 0 }, ckp[4] = { 0 }, i;

    pl_sampler_init(&s, 4);
    pl_rng_seed(&r, 5);

    for (i = 0; i < DRAWS; i++) {
        ck[pl_sample(&s, l, &k2, &r)]++;
        cp[pl_sample(&s, l, &p7, &r)]++;
        ckp[pl_sample(&s, l, &k3p9, &r)]++;
    }

    ok(ck[0] == 0 && ck[2] == 0, "top_k = 2 only draws the 2 best");
    ok(fabs((double) ck[1] / DRAWS - 0.625) < 0.006,
       "top_k = 2 renormalizes: p(best) = 0.5 / 0.8 (got %.4f)",
       (double) ck[1] / DRAWS);
    ok(cp[0] == 0 && cp[2] == 0,
       "top_p = 0.7 keeps the smallest set reaching 0.7 (0.5 + 0.3)");
    ok(fabs((double) cp[3] / DRAWS - 0.375) < 0.006,
       "top_p renormalizes inside the nucleus (got %.4f)",
       (double) cp[3] / DRAWS);
    ok(ckp[2] == 0 && ckp[0] > 0,
       "top_k = 3 then top_p = 0.9 of the 3 (0.95 mass) keeps all 3");
    ok(fabs((double) ckp[0] / DRAWS - 0.15 / 0.95) < 0.006,
       "and draws them in proportion (got %.4f)", (double) ckp[0] / DRAWS);

    pl_sampler_destroy(&s);
}


static void
test_wide_nucleus(void)
{
    pl_sampler_t          s;
    pl_rng_t              r;
    pl_sampling_params_t  p = { 1.0f, 0.9f, 0 };
    static float          l[50000];
    int                   i, beyond = 0, past_head = 0;
    int32_t               t;

    pl_sampler_init(&s, 50000);
    pl_rng_seed(&r, 3);

    for (i = 0; i < 50; i++) {
        t = pl_sample(&s, l, &p, &r);
        beyond += t >= 45000;
        past_head += t >= 1024;
    }

    is_int(beyond, 0, "a flat vocabulary of 50000 with top_p 0.9 keeps "
           "exactly the 45000 lowest ids");
    ok(past_head > 40, "and draws far past the sorted head (%d of 50)",
       past_head);

    pl_sampler_destroy(&s);
}


static void
test_rng(void)
{
    pl_rng_t  r;
    double    u, sum = 0, lo = 1, hi = 0;
    int       i;

    pl_rng_seed(&r, 0);
    for (i = 0; i < 100000; i++) {
        u = pl_rng_uniform(&r);
        sum += u;
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
    }

    ok(lo >= 0 && hi < 1, "uniform draws stay in [0, 1)");
    ok(fabs(sum / 100000 - 0.5) < 0.005, "and average 0.5 (%.4f)",
       sum / 100000);
}


int
main(void)
{
    test_argmax();
    test_greedy_equivalents();
    test_seed_determinism();
    test_temperature_distribution();
    test_top_k_top_p_distribution();
    test_wide_nucleus();
    test_rng();

    return done_testing();
}
