/*
 * Sampler masks: a structured output's allowed ids travel to the draw as
 * one bit per id (pl_sampler_restrict, pl_ops.h's masks), not as -inf
 * adjust entries.  The draw with a mask must be the draw with every id
 * left out at -inf, token for token under the same seed and step (the
 * definition both backends implement); a masked request draws only
 * allowed ids, in the proportions softmax gives them among themselves;
 * masks of several requests in one batch stay apart; bits past the
 * vocabulary are ignored; a batch reset drops the rows.
 */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"

#include "sampler.h"

#define VOCAB  1000             /* not a multiple of 64: a partial word */
#define WORDS  ((VOCAB + 63) / 64)


static uint64_t
next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;

    return *x;
}


static void
random_logits(float *l, int n, uint64_t *x)
{
    int  i;

    for (i = 0; i < n; i++) {
        l[i] = (float) (next(x) >> 40) / (float) (1 << 24) * 8.0f - 4.0f;
    }
}


/* about one id in `one_in` allowed, at least id `keep` */
static void
random_mask(uint64_t *m, uint64_t *x, int one_in, int keep)
{
    int  i;

    memset(m, 0, WORDS * sizeof(uint64_t));
    for (i = 0; i < VOCAB; i++) {
        if (next(x) % (uint64_t) one_in == 0) {
            m[i / 64] |= 1ull << (i % 64);
        }
    }
    m[keep / 64] |= 1ull << (keep % 64);
}


static int
allowed(const uint64_t *m, int32_t id)
{
    return id >= 0 && id < VOCAB && (m[id / 64] >> (id % 64) & 1);
}


/* The draw for p restricted to m, through the mask row. */
static int32_t
draw_masked(pl_sampler_t *s, const float *l,
    const pl_sampling_params_t *p, const uint64_t *m, uint64_t seed,
    uint64_t step)
{
    int32_t  t;
    int      i;

    pl_sampler_reset(s);
    i = pl_sampler_add(s, 0, p, NULL, seed, step);
    if (i < 0 || pl_sampler_restrict(s, i, m) != 0) {
        return -2;
    }
    pl_sample_host(&t, l, VOCAB, s->reqs, 1, s->adjust, s->n_adjust,
                   s->masks, s->n_masks);

    return t;
}


/* The same draw with every id left out as an adjust entry at -inf (made
   as min_tokens makes them, through the stop ids): the definition the
   mask must equal. */
static int32_t
draw_reference(pl_sampler_t *s, const float *l,
    const pl_sampling_params_t *p, const uint64_t *m, uint64_t seed,
    uint64_t step)
{
    pl_sampling_params_t   q = *p;
    int32_t               *stop = malloc(VOCAB * sizeof(int32_t)), t;
    int                    id;

    q.n_stop_ids = 0;
    for (id = 0; id < VOCAB; id++) {
        if (!allowed(m, id)) {
            stop[q.n_stop_ids++] = id;
        }
    }
    q.stop_ids = stop;
    q.min_tokens = 1;

    t = pl_sample(s, l, &q, NULL, seed, step, NULL);
    free(stop);

    return t;
}


static void
test_rows(void)
{
    pl_sampler_t          s;
    pl_sampling_params_t  p = { .temperature = 1, .top_p = 1 };
    uint64_t              a[WORDS], b[WORDS], x = 7;
    int                   i, j, k;

    pl_sampler_init(&s, VOCAB);
    is_int(s.mask_words, WORDS, "a row of the masks is (vocab + 63) / 64 "
           "words");

    random_mask(a, &x, 3, 1);
    random_mask(b, &x, 50, 2);

    pl_sampler_reset(&s);
    i = pl_sampler_add(&s, 0, &p, NULL, 1, 0);
    j = pl_sampler_add(&s, 1, &p, NULL, 1, 0);
    k = pl_sampler_add(&s, 1, &p, NULL, 1, 0);
    ok(pl_sampler_restrict(&s, k, b) == 0
       && pl_sampler_restrict(&s, i, a) == 0,
       "two requests of a batch restricted, in any order");
    is_int(s.n_masks, 2, "two rows of masks");
    ok(s.reqs[i].masked && s.reqs[k].masked && !s.reqs[j].masked,
       "the restricted requests are masked, the other is not");
    ok(memcmp(s.masks + (size_t) s.reqs[i].mask_row * WORDS, a,
              sizeof(a)) == 0
       && memcmp(s.masks + (size_t) s.reqs[k].mask_row * WORDS, b,
                 sizeof(b)) == 0,
       "each request's row holds its own mask");
    is_int(s.n_adjust, 0, "and no adjust entry is made for a mask");

    pl_sampler_reset(&s);
    i = pl_sampler_add(&s, 0, &p, NULL, 1, 0);
    is_int(s.n_masks, 0, "a reset drops the rows");
    ok(!s.reqs[i].masked, "and a new request is not masked");

    pl_sampler_destroy(&s);
}


/* Under many seeds, temperatures and filters, with and without bias,
   the mask's draw is the -inf entries' draw. */
static void
test_same_as_entries(void)
{
    static const float  temps[] = { 0.0f, 0.7f, 1.0f, 1.6f };
    pl_sampler_t        s;
    pl_logit_bias_t     bias[3] = { { 5, 3.0f }, { 17, -2.0f }, { 900, 8 } };
    float               l[VOCAB];
    uint64_t            m[WORDS], x = 11;
    int                 round, same = 0, inside = 0, total = 0, one_in;
    int32_t             got, want;

    pl_sampler_init(&s, VOCAB);

    for (round = 0; round < 400; round++) {
        pl_sampling_params_t  p = {
            .temperature = temps[round % 4],
            .top_p = round % 3 == 0 ? 0.8f : 1.0f,
            .top_k = round % 5 == 0 ? 20 : 0,
            .min_p = round % 7 == 0 ? 0.05f : 0.0f,
        };

        if (round % 2) {
            p.bias = bias;
            p.n_bias = 3;
        }
        one_in = round % 3 == 0 ? 2 : round % 3 == 1 ? 40 : 400;
        random_logits(l, VOCAB, &x);
        random_mask(m, &x, one_in, (int) (next(&x) % VOCAB));

        got = draw_masked(&s, l, &p, m, 100 + (uint64_t) round,
                          (uint64_t) round);
        want = draw_reference(&s, l, &p, m, 100 + (uint64_t) round,
                              (uint64_t) round);
        same += got == want;
        inside += allowed(m, got);
        total++;
    }

    is_int(same, total, "400 draws (greedy and sampled, top_p, top_k, "
           "min_p, bias; masks dense to sparse): the mask's token is the "
           "-inf entries' token every time");
    is_int(inside, total, "and every token is an allowed id");

    pl_sampler_destroy(&s);
}


static void
test_greedy(void)
{
    pl_sampler_t          s;
    pl_sampling_params_t  p = { .temperature = 0, .top_p = 1 };
    float                 l[VOCAB] = { 0 };
    uint64_t              m[WORDS] = { 0 };

    pl_sampler_init(&s, VOCAB);

    l[3] = 50;
    l[999] = 2;
    l[640] = 1;
    m[999 / 64] |= 1ull << (999 % 64);
    m[640 / 64] |= 1ull << (640 % 64);
    is_int(draw_masked(&s, l, &p, m, 1, 0), 999, "greedy takes the best "
           "allowed id (the last, in the partial word), not the best id");

    m[WORDS - 1] |= ~0ull << (VOCAB % 64);
    m[999 / 64] &= ~(1ull << (999 % 64));
    is_int(draw_masked(&s, l, &p, m, 1, 0), 640, "bits past the vocabulary "
           "allow nothing");

    pl_sampler_destroy(&s);
}


/* Flat logits over five allowed ids, one of them twice as likely (+ln 2):
   frequencies within ~6 sigma of 1/6, 1/6, 1/6, 1/6, 2/6. */
static void
test_distribution(void)
{
    static const int      ids[5] = { 0, 63, 64, 500, 999 };
    pl_sampler_t          s;
    pl_sampling_params_t  p = { .temperature = 1, .top_p = 1 };
    float                 l[VOCAB];
    uint64_t              m[WORDS] = { 0 };
    int                   count[5] = { 0 }, i, k, n = 60000, outside = 0;
    int                   close = 1;
    int32_t               t;
    double                want, sigma;

    pl_sampler_init(&s, VOCAB);

    for (i = 0; i < VOCAB; i++) {
        l[i] = 5.0f;            /* the ids left out weigh most */
    }
    for (k = 0; k < 5; k++) {
        m[ids[k] / 64] |= 1ull << (ids[k] % 64);
        l[ids[k]] = 0.0f;
    }
    l[999] = (float) log(2.0);

    for (i = 0; i < n; i++) {
        t = draw_masked(&s, l, &p, m, 4242, (uint64_t) i);
        for (k = 0; k < 5 && ids[k] != t; k++) {
            /* void */
        }
        if (k == 5) {
            outside++;
        } else {
            count[k]++;
        }
    }

    for (k = 0; k < 5; k++) {
        want = (k == 4 ? 2.0 : 1.0) / 6.0;
        sigma = sqrt(want * (1 - want) / n);
        close &= fabs((double) count[k] / n - want) < 6 * sigma;
    }
    is_int(outside, 0, "60000 draws: none outside the mask, though the "
           "ids left out have the highest logits");
    ok(close, "and the allowed ids come up as softmax among them says "
       "(%d %d %d %d %d)", count[0], count[1], count[2], count[3],
       count[4]);

    pl_sampler_destroy(&s);
}


int
main(void)
{
    test_rows();
    test_same_as_entries();
    test_greedy();
    test_distribution();

    return done_testing();
}
