/*
 * Sampler: greedy, seeds, top-k, top-p, min-p, logit bias, min_tokens,
 * repetition / presence / frequency penalties and logprobs, through the
 * requests the sampler builds and pl_sample_host() draws.  Every
 * parameter has a case that fails when it is ignored; distributions are
 * checked against the expected softmax under fixed seeds with a
 * statistical bound (~6 sigma at 200000 draws, one Philox step each).
 */

#include "tap.h"

#include "sampler.h"


static pl_sampling_params_t
params(float temperature, float top_p, int32_t top_k)
{
    return (pl_sampling_params_t) { .temperature = temperature,
                                    .top_p = top_p, .top_k = top_k };
}


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


/* the test's own logits generator (xorshift64*) */
typedef struct {
    uint64_t  x;
} gen_t;


static double
gen_uniform(gen_t *g)
{
    g->x ^= g->x >> 12;
    g->x ^= g->x << 25;
    g->x ^= g->x >> 27;
    return (double) ((g->x * 0x2545f4914f6cdd1dull) >> 11) * 0x1.0p-53;
}


static void
random_logits(float *l, int n, gen_t *g)
{
    int  i;

    for (i = 0; i < n; i++) {
        l[i] = (float) (gen_uniform(g) * 8.0 - 4.0);
    }
}


static void
test_greedy_equivalents(void)
{
    pl_sampler_t          s;
    gen_t                 g = { 7 };
    pl_sampling_params_t  greedy = params(0.0f, 1.0f, 0);
    pl_sampling_params_t  k1 = params(1.0f, 1.0f, 1);
    pl_sampling_params_t  p0 = params(1.0f, 1e-6f, 0);
    pl_sampling_params_t  hot = params(1.0f, 1.0f, 0);
    float                 l[512];
    int                   i, bad_g = 0, bad_k = 0, bad_p = 0, differ = 0;
    int32_t               best;

    pl_sampler_init(&s, 512);

    for (i = 0; i < 200; i++) {
        random_logits(l, 512, &g);
        best = pl_argmax(l, 512);
        bad_g += pl_sample(&s, l, &greedy, NULL, 8, i, NULL) != best;
        bad_k += pl_sample(&s, l, &k1, NULL, 8, i, NULL) != best;
        bad_p += pl_sample(&s, l, &p0, NULL, 8, i, NULL) != best;
        differ += pl_sample(&s, l, &hot, NULL, 8, i, NULL) != best;
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
    gen_t                 g = { 99 };
    pl_sampling_params_t  p = params(0.9f, 0.95f, 40);
    float                 l[512];
    int                   i, same = 1, diff = 0, steps = 0;
    int32_t               x, y, z, w;

    pl_sampler_init(&s, 512);
    random_logits(l, 512, &g);

    for (i = 0; i < 300; i++) {
        x = pl_sample(&s, l, &p, NULL, 1234, i, NULL);
        y = pl_sample(&s, l, &p, NULL, 1234, i, NULL);
        z = pl_sample(&s, l, &p, NULL, 1235, i, NULL);
        w = pl_sample(&s, l, &p, NULL, 1234, i + 1, NULL);
        same &= x == y;
        diff += x != z;
        steps += x != w;
    }

    ok(same, "the same seed and step give the same 300 tokens");
    ok(diff > 0, "another seed gives other tokens (%d differ)", diff);
    ok(steps > 0, "so does another step of the same seed (%d differ)",
       steps);

    pl_sampler_destroy(&s);
}


#define DRAWS  200000

static void
test_temperature_distribution(void)
{
    pl_sampler_t          s;
    pl_sampling_params_t  p = params(0.7f, 1.0f, 0);
    float                 l[6] = { 1.0f, 0.2f, -0.5f, 1.3f, 0.0f, 0.9f };
    double                want[6], worst = 0, d;
    int                   count[6] = { 0 }, i;

    pl_sampler_init(&s, 6);
    softmax(l, 6, 0.7f, want);

    for (i = 0; i < DRAWS; i++) {
        count[pl_sample(&s, l, &p, NULL, 42, i, NULL)]++;
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
    /* probabilities 0.5, 0.3, 0.15, 0.05 at T = 1, shuffled */
    float                 l[4] = { logf(0.15f), logf(0.5f), logf(0.05f),
                                   logf(0.3f) };
    pl_sampling_params_t  k2 = params(1.0f, 1.0f, 2);
    pl_sampling_params_t  p7 = params(1.0f, 0.7f, 0);
    pl_sampling_params_t  k3p9 = params(1.0f, 0.9f, 3);
    int                   ck[4] = { 0 }, cp[4] = { 0 }, ckp[4] = { 0 }, i;

    pl_sampler_init(&s, 4);

    for (i = 0; i < DRAWS; i++) {
        ck[pl_sample(&s, l, &k2, NULL, 5, i, NULL)]++;
        cp[pl_sample(&s, l, &p7, NULL, 6, i, NULL)]++;
        ckp[pl_sample(&s, l, &k3p9, NULL, 7, i, NULL)]++;
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


/* A nucleus of most of a large vocabulary: every id a little less likely
   than the one before, top_p 0.9 keeps exactly the lowest ids whose mass
   reaches 0.9; a flat vocabulary (all tied) keeps every id. */
static void
test_wide_nucleus(void)
{
    pl_sampler_t          s;
    pl_sampling_params_t  p = params(1.0f, 0.9f, 0);
    static float          l[50000];
    double                total = 0, acc = 0;
    int                   i, cut, beyond = 0, past_head = 0, flat_far = 0;
    int32_t               t;

    pl_sampler_init(&s, 50000);

    for (i = 0; i < 50000; i++) {
        l[i] = -0.0001f * (float) i;
        total += exp(l[i]);
    }
    for (cut = 0; acc < 0.9 * total; cut++) {
        acc += exp(l[cut]);
    }

    for (i = 0; i < 200; i++) {
        t = pl_sample(&s, l, &p, NULL, 3, i, NULL);
        beyond += t > cut;      /* one id of slack for the rounding */
        past_head += t >= 1024;
    }

    is_int(beyond, 0, "top_p 0.9 over 50000 decreasing logits keeps the "
           "%d lowest ids", cut);
    ok(past_head > 150, "and draws far past the first 1024 (%d of 200)",
       past_head);

    memset(l, 0, sizeof(l));
    for (i = 0; i < 200; i++) {
        flat_far += pl_sample(&s, l, &p, NULL, 4, i, NULL) >= 45000;
    }
    ok(flat_far > 0, "a flat vocabulary keeps its ties: ids past 45000 are "
       "drawn too (%d of 200)", flat_far);

    pl_sampler_destroy(&s);
}


/* Frequency of each of n ids over DRAWS samples. */
static void
frequencies(pl_sampler_t *s, const float *l, const pl_sampling_params_t *p,
    const pl_history_t *h, uint64_t seed, double *f, int n)
{
    int  i;

    for (i = 0; i < n; i++) {
        f[i] = 0;
    }
    for (i = 0; i < DRAWS; i++) {
        f[pl_sample(s, l, p, h, seed, i, NULL)] += 1.0 / DRAWS;
    }
}


static double
worst_gap(const double *f, const double *want, int n)
{
    double  worst = 0, d;
    int     i;

    for (i = 0; i < n; i++) {
        d = fabs(f[i] - want[i]);
        worst = d > worst ? d : worst;
    }

    return worst;
}


static void
test_logit_bias(void)
{
    pl_sampler_t          s;
    gen_t                 g = { 11 };
    pl_logit_bias_t       up = { 17, 100.0f }, ban;
    pl_sampling_params_t  hot = params(1.0f, 1.0f, 0);
    pl_sampling_params_t  greedy = params(0, 1.0f, 0);
    pl_sampling_params_t  big = params(1.0f, 1.0f, 0);
    float                 l[512];
    int                   i, forced = 0, banned = 0, clamped = 0;
    int32_t               best;

    pl_sampler_init(&s, 512);
    hot.bias = &up;
    hot.n_bias = 1;
    greedy.bias = &ban;
    greedy.n_bias = 1;
    ban.bias = -100.0f;

    for (i = 0; i < 200; i++) {
        random_logits(l, 512, &g);
        forced += pl_sample(&s, l, &hot, NULL, 12, i, NULL) == 17;

        best = pl_argmax(l, 512);
        ban.id = best;
        banned += pl_sample(&s, l, &greedy, NULL, 12, i, NULL) != best;
    }

    is_int(forced, 200, "logit_bias +100 forces its token at T = 1");
    is_int(banned, 200, "logit_bias -100 bans the greedy choice");

    /* a bias beyond 100 counts as 100: +1000 on a logit 150 below the
       best leaves the best in place */
    for (i = 0; i < 512; i++) {
        l[i] = i == 3 ? 200.0f : 50.0f;
    }
    up.id = 7;
    up.bias = 1000.0f;
    big.bias = &up;
    big.n_bias = 1;
    big.temperature = 0;
    clamped = pl_sample(&s, l, &big, NULL, 12, 0, NULL) == 3;
    ok(clamped, "a bias above 100 is clamped to 100");

    pl_sampler_destroy(&s);
}


static void
test_min_tokens(void)
{
    pl_sampler_t          s;
    float                 l[8] = { 0, 1, 5, 2, 4, 0, 0, 0 };
    int32_t               eos = 2, stop = 4;
    int32_t               toks[8] = { 1, 1, 1, 3, 3, 3, 3, 3 };
    pl_history_t          h = { toks, 3, 3 };
    pl_sampling_params_t  p = params(0, 1.0f, 0);

    pl_sampler_init(&s, 8);
    pl_sampler_set_eos(&s, &eos, 1);
    p.min_tokens = 2;
    p.stop_ids = &stop;
    p.n_stop_ids = 1;

    is_int(pl_sample(&s, l, &p, &h, 1, 0, NULL), 3,
           "min_tokens masks eos and the stop ids before it is reached");
    h.n_tokens = 4;
    is_int(pl_sample(&s, l, &p, &h, 1, 1, NULL), 3,
           "still masked after 1 of 2 tokens");
    h.n_tokens = 5;
    is_int(pl_sample(&s, l, &p, &h, 1, 2, NULL), 2,
           "eos comes back once min_tokens are generated");
    p.min_tokens = 0;
    h.n_tokens = 3;
    is_int(pl_sample(&s, l, &p, &h, 1, 0, NULL), 2,
           "without min_tokens eos wins at once");

    pl_sampler_destroy(&s);
}


static void
test_repetition_penalty(void)
{
    pl_sampler_t          s;
    float                 l[4] = { 2.0f, 1.0f, -1.0f, 0.5f };
    float                 adj[4] = { 1.0f, 1.0f, -2.0f, 0.5f };
    float                 g2[2] = { 2.0f, 1.5f };
    int32_t               toks[4] = { 0, 2, 0, 3 };
    pl_history_t          prompt_only = { toks, 3, 3 };
    pl_history_t          one = { toks, 1, 1 };
    pl_sampling_params_t  p = params(1.0f, 1.0f, 0), gp = params(0, 1.0f, 0);
    double                f[4], want[4];

    pl_sampler_init(&s, 4);
    p.repetition_penalty = 2.0f;

    /* tokens 0 and 2 are in the prompt: 2.0 -> 1.0 (divided), -1.0 ->
       -2.0 (multiplied); 1 and 3 are untouched */
    softmax(adj, 4, 1.0f, want);
    frequencies(&s, l, &p, &prompt_only, 21, f, 4);
    ok(worst_gap(f, want, 4) < 0.006, "repetition_penalty 2 divides a "
       "positive logit and multiplies a negative one of prompt tokens "
       "(worst %.5f)", worst_gap(f, want, 4));

    pl_sampler_destroy(&s);

    pl_sampler_init(&s, 2);
    gp.repetition_penalty = 2.0f;
    is_int(pl_sample(&s, g2, &gp, &one, 1, 0, NULL), 1,
           "greedy: a repeated best token (2.0 / 2 = 1.0) loses to 1.5");
    gp.repetition_penalty = 1.0f;
    is_int(pl_sample(&s, g2, &gp, &one, 1, 0, NULL), 0,
           "repetition_penalty 1 changes nothing");
    gp.repetition_penalty = 2.0f;
    is_int(pl_sample(&s, g2, &gp, NULL, 1, 0, NULL), 0,
           "and the penalty leaves nothing behind for the next call");

    pl_sampler_destroy(&s);
}


static void
test_presence_frequency(void)
{
    pl_sampler_t          s;
    float                 l[2] = { 1.0f, 1.0f };
    float                 g[2] = { 1.0f, 0.9f };
    int32_t               toks[5] = { 0, 0, 1, 0, 0 };
    pl_history_t          out2 = { toks, 3, 5 };     /* 0 generated twice */
    pl_history_t          prompt = { toks, 5, 5 };   /* none generated */
    pl_sampling_params_t  fp = params(1.0f, 1.0f, 0);
    pl_sampling_params_t  pp = params(1.0f, 1.0f, 0);
    pl_sampling_params_t  gp = params(0, 1.0f, 0);
    double                f[2], want[2];

    pl_sampler_init(&s, 2);

    /* frequency 0.5 x 2 times: token 0 drops to 0.0 */
    fp.frequency_penalty = 0.5f;
    want[0] = 1.0 / (1.0 + exp(1.0));
    want[1] = 1.0 - want[0];
    frequencies(&s, l, &fp, &out2, 31, f, 2);
    ok(worst_gap(f, want, 2) < 0.006, "frequency_penalty counts each time "
       "a token was generated (p = %.4f, want %.4f)", f[0], want[0]);

    /* presence 0.6 once: token 0 drops to 0.4, however often it came */
    pp.presence_penalty = 0.6f;
    want[0] = 1.0 / (1.0 + exp(0.6));
    want[1] = 1.0 - want[0];
    frequencies(&s, l, &pp, &out2, 32, f, 2);
    ok(worst_gap(f, want, 2) < 0.006, "presence_penalty counts once "
       "(p = %.4f, want %.4f)", f[0], want[0]);

    gp.presence_penalty = 2.0f;
    gp.frequency_penalty = 2.0f;
    is_int(pl_sample(&s, g, &gp, &prompt, 1, 0, NULL), 0,
           "presence and frequency ignore the prompt");
    is_int(pl_sample(&s, g, &gp, &out2, 1, 0, NULL), 1,
           "but not the output");
    gp.presence_penalty = -2.0f;
    gp.frequency_penalty = 0;
    is_int(pl_sample(&s, (float[]) { 0.9f, 1.0f }, &gp, &out2, 1, 0, NULL),
           0, "a negative presence_penalty favours generated tokens");

    pl_sampler_destroy(&s);
}


/* The entries one request gets: one per id, the three steps merged. */
static void
test_request_entries(void)
{
    pl_sampler_t          s;
    int32_t               eos = 6, stop = 2;
    int32_t               toks[6] = { 1, 2, 3, 3, 3, 5 };
    pl_history_t          h = { toks, 2, 6 };        /* 3 3 3 5 generated */
    pl_logit_bias_t       b[2] = { { 3, 7.0f }, { 4, -250.0f } };
    pl_sampling_params_t  p = params(0.8f, 0.9f, 20);
    const pl_logit_adjust_t  *a;
    const pl_sample_req_t    *r;
    int                   i, n = 0, want = 1;

    pl_sampler_init(&s, 8);
    pl_sampler_set_eos(&s, &eos, 1);
    p.min_p = 0.05f;
    p.repetition_penalty = 1.5f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.min_tokens = 5;
    p.stop_ids = &stop;
    p.n_stop_ids = 1;
    p.bias = b;
    p.n_bias = 2;

    pl_sampler_reset(&s);
    pl_sampler_add(&s, 0, &p, NULL, 1, 0);
    is_int(pl_sampler_add(&s, 3, &p, &h, 77, 4), 1,
           "a second request is request 1 of the batch");
    r = &s.reqs[1];
    ok(r->row == 3 && r->seed == 77 && r->step == 4 && r->top_k == 20
       && r->temperature == 0.8f && r->top_p == 0.9f && r->min_p == 0.05f
       && r->repetition_penalty == 1.5f,
       "it carries its row, stream, filters and repetition_penalty");

    for (i = 0; i < r->adjust_count; i++) {
        a = &s.adjust[r->adjust_start + i];
        n++;
        switch (a->id) {
        case 1:     /* prompt only: repetition */
            want &= a->repeat && a->bias == 0 && a->penalty == 0;
            break;
        case 2:     /* prompt, and a stop id under min_tokens */
            want &= a->repeat && isinf(a->bias) && a->bias < 0;
            break;
        case 3:     /* generated 3 times, and biased */
            want &= a->repeat && a->bias == 7.0f
                    && a->penalty == -(0.5f + 0.25f * 3);
            break;
        case 4:     /* bias clamped */
            want &= !a->repeat && a->bias == -100.0f && a->penalty == 0;
            break;
        case 5:     /* generated once */
            want &= a->repeat && a->penalty == -(0.5f + 0.25f);
            break;
        case 6:     /* eos under min_tokens */
            want &= !a->repeat && isinf(a->bias) && a->bias < 0;
            break;
        default:
            want = 0;
        }
    }
    is_int(n, 6, "one entry per id touched: 1, 2, 3, 4, 5 and eos 6");
    ok(want, "each merges its mask, clamped bias, repetition and "
       "presence + frequency x times");
    is_int(s.reqs[0].adjust_count, 4, "the first request (no history) "
           "has the two masks and the two biases only");

    for (i = 0; i < 8; i++) {
        want &= s.slot[i] == -1 && s.times[i] == 0;
    }
    ok(want, "and the per-id tables are clean for the next request");

    pl_sampler_destroy(&s);
}


static void
test_min_p(void)
{
    pl_sampler_t          s;
    float                 l[4] = { logf(0.15f), logf(0.5f), logf(0.05f),
                                   logf(0.3f) };
    pl_sampling_params_t  p = params(1.0f, 1.0f, 0);
    double                f[4];

    pl_sampler_init(&s, 4);

    p.min_p = 0.35f;    /* keeps p >= 0.175: 0.5 and 0.3 */
    frequencies(&s, l, &p, NULL, 41, f, 4);
    ok(f[0] == 0 && f[2] == 0, "min_p 0.35 cuts 0.15 and 0.05");
    ok(fabs(f[1] - 0.625) < 0.006, "and renormalizes (p(best) %.4f, want "
       "0.625)", f[1]);

    p.min_p = 0.25f;    /* keeps p >= 0.125: 0.5, 0.3, 0.15 */
    frequencies(&s, l, &p, NULL, 42, f, 4);
    ok(f[2] == 0 && f[0] > 0, "min_p 0.25 cuts only 0.05");

    p.min_p = 0.25f;
    p.temperature = 2.0f;   /* after temperature: sqrt(p) ratios */
    frequencies(&s, l, &p, NULL, 43, f, 4);
    ok(f[2] > 0, "min_p applies after temperature (0.05 survives at T = 2, "
       "sqrt(0.05 / 0.5) = 0.32 >= 0.25)");

    pl_sampler_destroy(&s);
}


static void
test_logprobs(void)
{
    pl_sampler_t          s;
    gen_t                 g = { 51 };
    pl_logprobs_t         lp;
    pl_logit_bias_t       up = { 5, 100.0f };
    pl_sampling_params_t  greedy = params(0, 1.0f, 0);
    pl_sampling_params_t  hot = params(1.0f, 1.0f, 0);
    float                 l[300];
    double                max = -1e30, sum = 0, lse, mass = 0;
    int                   i, want, sorted = 1;
    int32_t               t;

    pl_sampler_init(&s, 300);
    random_logits(l, 300, &g);
    l[9] = NAN;

    for (i = 0; i < 300; i++) {
        if (!isnan(l[i])) {
            max = l[i] > max ? l[i] : max;
        }
    }
    for (i = 0; i < 300; i++) {
        if (!isnan(l[i])) {
            sum += exp(l[i] - max);
        }
    }
    lse = max + log(sum);

    greedy.logprobs = 1 + 20;
    t = pl_sample(&s, l, &greedy, NULL, 52, 0, &lp);

    is_int(lp.n_top, 20, "logprobs 20 gives 20 top entries");
    is_int(lp.top_ids[0], t, "under greedy the top-1 is the chosen token");
    is_int(lp.rank, 1, "and its rank is 1");
    ok(fabs(lp.logprob - lp.top_logprobs[0]) < 1e-6 && lp.logprob <= 0,
       "and its logprob (%.5f) is the top-1's and <= 0", lp.logprob);
    ok(fabs(lp.logprob - (l[t] - lse)) < 1e-4,
       "logprob = logit - logsumexp (got %.5f, want %.5f)", lp.logprob,
       l[t] - lse);
    for (i = 1; i < 20; i++) {
        sorted &= lp.top_logprobs[i] <= lp.top_logprobs[i - 1];
        mass += exp(lp.top_logprobs[i]);
    }
    ok(sorted, "top entries come most likely first");
    ok(mass < 1, "and are probabilities");

    hot.logprobs = 1 + 0;
    hot.bias = &up;
    hot.n_bias = 1;
    t = pl_sample(&s, l, &hot, NULL, 52, 1, &lp);
    is_int(lp.n_top, 0, "logprobs 0 gives the chosen token's only");
    ok(t == 5 && fabs(lp.logprob - (l[5] - lse)) < 1e-4,
       "logprobs are the raw model's: a biased token keeps its own "
       "(%.4f)", lp.logprob);

    for (i = 0, want = 0; i < 300; i++) {
        want += !isnan(l[i]) && l[i] >= l[17];
    }
    pl_sampler_logprobs(&s, l, 17, 0, &lp);
    ok(lp.rank == want && lp.n_top == 0,
       "a token's rank counts the ids at least as likely, with no top "
       "entries asked (rank %d, want %d)", lp.rank, want);

    pl_sampler_logprobs(&s, l, 9, 3, &lp);
    ok(isinf(lp.logprob) && lp.logprob < 0, "a NaN logit has logprob -inf");

    pl_sampler_destroy(&s);
}


static void
test_seed_with_penalties(void)
{
    pl_sampler_t          s;
    gen_t                 g = { 61 };
    pl_sampling_params_t  p = params(0.8f, 0.9f, 50);
    int32_t               ta[64], tb[64];
    pl_history_t          ha = { ta, 4, 4 }, hb = { tb, 4, 4 };
    float                 l[512];
    int                   i, same = 1;

    pl_sampler_init(&s, 512);
    p.min_p = 0.01f;
    p.repetition_penalty = 1.3f;
    p.frequency_penalty = 0.4f;
    for (i = 0; i < 4; i++) {
        ta[i] = tb[i] = i;
    }

    for (i = 0; i < 60; i++) {
        random_logits(l, 512, &g);
        ta[ha.n_tokens++] = pl_sample(&s, l, &p, &ha, 77, i, NULL);
        tb[hb.n_tokens++] = pl_sample(&s, l, &p, &hb, 77, i, NULL);
        same &= ta[ha.n_tokens - 1] == tb[hb.n_tokens - 1];
    }

    ok(same, "the same seed with every filter and penalty gives the same "
       "60 tokens");

    pl_sampler_destroy(&s);
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
    test_logit_bias();
    test_min_tokens();
    test_repetition_penalty();
    test_presence_frequency();
    test_request_entries();
    test_min_p();
    test_logprobs();
    test_seed_with_penalties();

    return done_testing();
}
