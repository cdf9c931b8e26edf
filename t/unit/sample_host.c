/*
 * pl_sample_host, the sampling definition of pl_ops.h piece by piece:
 * Philox-4x32-10 against Random123's known answers, the uniform and the
 * arithmetic the CPU and GPU share, the order of the adjust entries,
 * greedy ties and NaN, min_p / top_k / top_p at their exact boundaries
 * on hand-made rows, the draw's distribution against softmax over the
 * kept ids (chi-square under a fixed seed), a naive re-implementation of
 * the definition on random rows, and reproducibility: the same (seed,
 * step) draws the same token wherever it sits in a batch.
 */

#include <float.h>

#include "tap.h"

#include "pl_ops.h"
#include "sample_math.h"


static pl_sample_req_t
req(int row, float temperature, float top_p, float min_p, int top_k,
    uint64_t seed, uint64_t step)
{
    return (pl_sample_req_t) { .row = row, .temperature = temperature,
                               .top_p = top_p, .min_p = min_p,
                               .top_k = top_k, .repetition_penalty = 1,
                               .seed = seed, .step = step };
}


/* one request alone */
static int32_t
draw(const float *row, int vocab, pl_sample_req_t r,
    const pl_logit_adjust_t *adj, int n_adj)
{
    int32_t  t = -7;

    r.row = 0;
    r.adjust_start = 0;
    r.adjust_count = n_adj;
    pl_sample_host(&t, row, vocab, &r, 1, adj, n_adj, NULL, 0);
    return t;
}


/* how often each id is drawn over steps 0..n-1 */
static void
histogram(const float *row, int vocab, pl_sample_req_t r, int n, int *count)
{
    int  i;

    memset(count, 0, (size_t) vocab * sizeof(int));
    for (i = 0; i < n; i++) {
        r.step = (uint64_t) i;
        count[draw(row, vocab, r, NULL, 0)]++;
    }
}


static void
test_philox_known_answers(void)
{
    static const struct {
        uint32_t  ctr[4], key[2], want[4];
    } kat[3] = {
        { { 0, 0, 0, 0 }, { 0, 0 },
          { 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8 } },
        { { 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff },
          { 0xffffffff, 0xffffffff },
          { 0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd } },
        { { 0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344 },
          { 0xa4093822, 0x299f31d0 },
          { 0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1 } },
    };
    static const char *const  name[3] = {
        "zero counter and key", "all-ones counter and key",
        "the digits of pi"
    };
    pl_philox_ctr_t  c, out;
    int              i;

    for (i = 0; i < 3; i++) {
        memcpy(c.v, kat[i].ctr, sizeof(c.v));
        out = pl_philox4x32_10(c, kat[i].key[0], kat[i].key[1]);
        ok(memcmp(out.v, kat[i].want, sizeof(out.v)) == 0,
           "Philox-4x32-10, Random123's answer for %s (%08x %08x %08x "
           "%08x)", name[i], out.v[0], out.v[1], out.v[2], out.v[3]);
    }
}


static void
test_uniform(void)
{
    pl_philox_ctr_t  w;
    double           sum = 0;
    float            u, lo = 1, hi = 0;
    int              i, j, exact = 1;

    is_int(pl_philox_u01(0) == 0x1p-24f, 1, "u of word 0 is 2^-24");
    is_int(pl_philox_u01(0xffffffffu) == 1.0f - 0x1p-24f, 1,
           "u of word 2^32 - 1 is 1 - 2^-24");

    for (i = 0; i < 25000; i++) {
        w = pl_sample_noise4(2024, 9, (uint32_t) i);
        for (j = 0; j < 4; j++) {
            u = pl_philox_u01(w.v[j]);
            sum += u;
            lo = u < lo ? u : lo;
            hi = u > hi ? u : hi;
            exact &= (1.0f - u) + u == 1.0f;
        }
    }
    ok(lo > 0 && hi < 1, "100000 uniforms stay inside (0, 1)");
    ok(fabs(sum / 100000 - 0.5) < 0.005, "and average 0.5 (%.4f)",
       sum / 100000);
    ok(exact, "and 1 - u is exact, so -ln(u) never rounds to 0");
}


static void
test_shared_arithmetic(void)
{
    float     x, worst_log = 0, worst_exp = 0, a, b, f[6];
    double    rel;
    uint32_t  prev;
    int       i, ordered = 1;

    for (i = 0; i < 20000; i++) {
        x = ldexpf(1.0f + (float) i / 20000.0f, i % 60 - 40);
        rel = fabs(pl_sample_log(x) - log(x)) / fmax(fabs(log(x)), 1e-3);
        worst_log = rel > worst_log ? (float) rel : worst_log;

        x = -32.0f * (float) i / 20000.0f;
        rel = fabs(pl_sample_exp(x) - exp(x)) / exp(x);
        worst_exp = rel > worst_exp ? (float) rel : worst_exp;
    }
    ok(worst_log < 1e-6, "ln within 1e-6 of libm (worst %.2e)", worst_log);
    ok(worst_exp < 1e-6, "exp within 1e-6 of libm on [-32, 0] (worst "
       "%.2e)", worst_exp);
    ok(pl_sample_exp(-32.5f) == 0 && pl_sample_weight(0) == 1ull << 40
       && pl_sample_weight(-29) == 0,
       "weights: 2^40 at z = 0, nothing below 2^-40");
    ok(isinf(pl_sample_log(0)) && pl_sample_log(0x1p-140f) < -97
       && pl_sample_log(0x1p-140f) > -97.1f, "ln(0) = -inf, subnormals "
       "reduced");

    f[0] = -INFINITY; f[1] = -3.5f; f[2] = -0.0f; f[3] = 1e-30f;
    f[4] = 2.0f; f[5] = INFINITY;
    prev = pl_sample_key(f[0]);
    for (i = 1; i < 6; i++) {
        ordered &= pl_sample_key(f[i]) > prev;
        prev = pl_sample_key(f[i]);
    }
    a = 0.0f;
    b = -0.0f;
    ok(ordered && pl_sample_key(a) == pl_sample_key(b),
       "keys keep the float order, with -0 = +0");
    is_int(pl_sample_target(0.5f, 1000), 500, "top_p 0.5 of 1000 asks 500");
    is_int(pl_sample_target(0.0f, 1000), 1, "and never less than 1");
}


/* step 1 of the definition: v + bias, then repetition, then penalty */
static void
test_adjust_order(void)
{
    float              row[2];
    pl_sample_req_t    g = req(0, 0, 1, 0, 0, 1, 0);
    pl_logit_adjust_t  a = { 0, 1, 1.0f, -0.5f };

    /* 3 + 1 = 4, / 2 = 2, - 0.5 = 1.5 (other orders: 2.0 or 1.75) */
    g.repetition_penalty = 2.0f;
    row[0] = 3.0f;
    row[1] = 1.6f;
    is_int(draw(row, 2, g, &a, 1), 1, "bias, then repetition, then "
           "penalty: 3 -> 1.5 loses to 1.6");
    row[1] = 1.4f;
    is_int(draw(row, 2, g, &a, 1), 0, "and beats 1.4");

    /* a negative value is multiplied: (-1 + 0) * 2 + 0 = -2 */
    a = (pl_logit_adjust_t) { 0, 1, 0.0f, 0.0f };
    row[0] = -1.0f;
    row[1] = -1.9f;
    is_int(draw(row, 2, g, &a, 1), 1, "repetition multiplies a negative "
           "value: -1 -> -2 loses to -1.9");

    /* an entry without repeat leaves repetition out */
    a = (pl_logit_adjust_t) { 0, 0, 0.0f, 0.0f };
    is_int(draw(row, 2, g, &a, 1), 0, "an entry without repeat is not "
           "divided");

    a = (pl_logit_adjust_t) { 0, 0, -INFINITY, 50.0f };
    row[0] = 100.0f;
    is_int(draw(row, 2, g, &a, 1), 1, "bias -inf masks, whatever the "
           "penalty adds");

    g.temperature = 1.0f;
    a = (pl_logit_adjust_t) { 1, 0, 0.0f, 0.0f };
    row[0] = NAN;
    row[1] = -5.0f;
    is_int(draw(row, 2, g, &a, 1), 1, "a NaN logit is -inf under sampling "
           "too: the other id is the only one");
}


static void
test_greedy(void)
{
    float            ties[5] = { 1, 3, NAN, 3, -2 };
    float            nan[3] = { NAN, NAN, NAN };
    float            ninf[3] = { -INFINITY, -INFINITY, -INFINITY };
    float            pinf[4] = { 1, INFINITY, 2, INFINITY };
    pl_sample_req_t  g = req(0, 0, 1, 0, 0, 1, 0);
    pl_sample_req_t  hot = req(0, 1.0f, 1, 0, 0, 1, 0);
    pl_sample_req_t  k1 = req(0, 5.0f, 1, 0, 1, 1, 0);

    is_int(draw(ties, 5, g, NULL, 0), 1, "greedy: lowest id on a tie, NaN "
           "never wins");
    is_int(draw(nan, 3, g, NULL, 0), 0, "all NaN: id 0");
    is_int(draw(ninf, 3, hot, NULL, 0), 0, "sampling a row of -inf is "
           "greedy: id 0");
    is_int(draw(pinf, 4, hot, NULL, 0), 1, "a +inf max is greedy: its "
           "lowest id");
    is_int(draw(ties, 5, k1, NULL, 0), 1, "top_k = 1 at T = 5 is greedy");
    g.temperature = -1.0f;
    is_int(draw(ties, 5, g, NULL, 0), 1, "a negative temperature is "
           "greedy");
}


#define BOUNDARY_DRAWS  4000

static void
test_min_p_boundary(void)
{
    float            row[4];
    pl_sample_req_t  r = req(0, 1.0f, 1, 0.5f, 0, 31, 0);
    int              count[4];

    row[0] = 0.0f;
    row[1] = pl_sample_min_z(0.5f);             /* z exactly ln(0.5) */
    row[2] = nextafterf(row[1], -INFINITY);     /* one ulp below */
    row[3] = -0.1f;
    histogram(row, 4, r, BOUNDARY_DRAWS, count);
    ok(count[1] > 0 && count[3] > 0, "min_p keeps z = ln(min_p) exactly "
       "(%d draws)", count[1]);
    is_int(count[2], 0, "and cuts one ulp below");

    r.min_p = 1.0f;
    row[3] = 0.0f;
    histogram(row, 4, r, BOUNDARY_DRAWS, count);
    ok(count[0] > 0 && count[3] > 0 && count[1] == 0 && count[2] == 0,
       "min_p 1 keeps the ids tied at the max only");

    r.min_p = 0.5f;
    r.temperature = 2.0f;   /* z = ln(0.5) / 2 * 2: now above */
    row[3] = -0.1f;
    row[1] = 2.0f * pl_sample_min_z(0.5f);
    histogram(row, 4, r, BOUNDARY_DRAWS, count);
    ok(count[1] > 0, "and compares z after temperature");
}


static void
test_top_k_ties(void)
{
    float            row[6] = { 4, 5, 4, 3, 4, 2 };
    pl_sample_req_t  r = req(0, 1.0f, 1, 0, 2, 41, 0);
    int              count[6];

    histogram(row, 6, r, BOUNDARY_DRAWS, count);
    ok(count[0] > 0 && count[2] > 0 && count[4] > 0 && count[1] > 0,
       "top_k 2 keeps every id tied with the 2nd largest (5, 4, 4, 4)");
    ok(count[3] == 0 && count[5] == 0, "and nothing below it");

    r.top_k = 4;
    histogram(row, 6, r, BOUNDARY_DRAWS, count);
    ok(count[3] == 0, "top_k 4: still the same four");
    r.top_k = 5;
    histogram(row, 6, r, BOUNDARY_DRAWS, count);
    ok(count[3] > 0 && count[5] == 0, "top_k 5 takes the 3 in, not the 2");
    r.top_k = 6;
    histogram(row, 6, r, BOUNDARY_DRAWS, count);
    ok(count[5] > 0, "top_k = vocabulary keeps all");
    r.top_k = 100;
    histogram(row, 6, r, BOUNDARY_DRAWS, count);
    ok(count[5] > 0, "top_k > vocabulary keeps all");
}


static void
test_top_p_boundary(void)
{
    float            row[4] = { 0.0f, -0.5f, -1.0f, -1.0f };
    pl_sample_req_t  r = req(0, 1.0f, 1, 0, 0, 51, 0);
    uint64_t         w[4], total = 0, two;
    float            p;
    int              count[4], i;

    for (i = 0; i < 4; i++) {
        w[i] = pl_sample_weight(row[i]);
        total += w[i];
    }
    two = w[0] + w[1];

    /* the largest top_p whose target is exactly the first two's mass */
    p = (float) ((double) two / (double) total);
    while (pl_sample_target(p, total) > two) {
        p = nextafterf(p, 0);
    }
    while (pl_sample_target(nextafterf(p, 1), total) <= two) {
        p = nextafterf(p, 1);
    }

    r.top_p = p;
    histogram(row, 4, r, BOUNDARY_DRAWS, count);
    ok(count[1] > 0 && count[2] == 0 && count[3] == 0,
       "the largest top_p whose target mass(0) + mass(-0.5) reaches keeps "
       "those two");

    r.top_p = nextafterf(p, 1);
    histogram(row, 4, r, BOUNDARY_DRAWS, count);
    ok(count[2] > 0 && count[3] > 0, "one ulp more: the two tied at -1 "
       "come in together");

    r.top_p = (float) ((double) w[0] / (double) total) * 0.5f;
    histogram(row, 4, r, BOUNDARY_DRAWS, count);
    is_int(count[0], BOUNDARY_DRAWS, "a top_p below the best's own mass "
           "keeps the best alone");

    r.top_p = 1.0f;
    r.top_k = 2;
    r.min_p = 0.7f;     /* cuts -0.5 and below: exp(-0.5) = 0.61 */
    histogram(row, 4, r, BOUNDARY_DRAWS, count);
    is_int(count[0], BOUNDARY_DRAWS, "min_p before top_k: top_k 2 of the "
           "one id left");
}


/* softmax over kept ids of row at temperature t, and a chi-square of the
   counts against it */
static double
chi_square(const float *row, const int *kept, int vocab, float t,
    const int *count, int n, int *outside)
{
    double  p[16], sum = 0, max = -INFINITY, chi = 0, e;
    int     i;

    *outside = 0;
    for (i = 0; i < vocab; i++) {
        max = kept[i] && row[i] > max ? row[i] : max;
    }
    for (i = 0; i < vocab; i++) {
        p[i] = kept[i] ? exp((row[i] - max) / t) : 0;
        sum += p[i];
    }
    for (i = 0; i < vocab; i++) {
        if (!kept[i]) {
            *outside += count[i];
            continue;
        }
        e = n * p[i] / sum;
        chi += (count[i] - e) * (count[i] - e) / e;
    }

    return chi;
}


#define CHI_DRAWS  200000

static void
test_distribution(void)
{
    float            row[10] = { 0.3f, -1.2f, 1.1f, 0.0f, -0.4f, 0.9f, -2.0f,
                                 1.4f, 0.2f, -0.7f };
    int              all[10] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };
    int              top6[10] = { 1, 0, 1, 1, 0, 1, 0, 1, 1, 0 };
    int              count[10], outside;
    pl_sample_req_t  r = req(0, 0.8f, 1, 0, 0, 61, 0);
    double           chi;

    /* chi-square, 9 degrees of freedom: mean 9, P(> 45) ~ 1e-6 */
    histogram(row, 10, r, CHI_DRAWS, count);
    chi = chi_square(row, all, 10, 0.8f, count, CHI_DRAWS, &outside);
    ok(chi < 45, "T = 0.8: the draws follow softmax(v / T) (chi-square "
       "%.1f, 9 dof)", chi);

    /* the 6 largest: 1.4, 1.1, 0.9, 0.3, 0.2, 0.0; 5 dof, P(> 35) ~ 1e-6 */
    r.top_k = 6;
    r.seed = 62;
    histogram(row, 10, r, CHI_DRAWS, count);
    chi = chi_square(row, top6, 10, 0.8f, count, CHI_DRAWS, &outside);
    ok(chi < 35 && outside == 0, "top_k 6: softmax over the kept six "
       "(chi-square %.1f, 5 dof; %d outside)", chi, outside);

    /* a wrong distribution must fail the same bound */
    chi = chi_square(row, top6, 10, 1.0f, count, CHI_DRAWS, &outside);
    ok(chi > 100, "and the bound rejects T = 1 for the same draws "
       "(chi-square %.0f)", chi);
}


/* ---- the definition again, naively: sorts and full scans ---- */

static int
cmp_desc(const void *a, const void *b)
{
    float  x = *(const float *) a, y = *(const float *) b;

    return x < y ? 1 : x > y ? -1 : 0;
}


static int32_t
naive(const float *logits, int vocab, const pl_sample_req_t *r,
    const pl_logit_adjust_t *adj)
{
    float     *v = malloc((size_t) vocab * sizeof(float));
    float     *z = malloc((size_t) vocab * sizeof(float));
    float     *sorted = malloc((size_t) vocab * sizeof(float));
    int       *kept = malloc((size_t) vocab * sizeof(int));
    float      max = -INFINITY, kth = -INFINITY, cut = -INFINITY, s, top;
    uint64_t   total = 0, target, acc;
    pl_philox_ctr_t  w;
    int        i, j, n = 0, best = 0;
    int32_t    token = -1;

    for (i = 0; i < vocab; i++) {
        v[i] = isnan(logits[i]) ? -INFINITY : logits[i];
    }
    for (i = 0; i < r->adjust_count; i++) {
        v[adj[i].id] = pl_sample_adjust(v[adj[i].id], &adj[i],
                                        r->repetition_penalty);
    }
    for (i = 0; i < vocab; i++) {
        if (v[i] > max) {
            max = v[i];
            best = i;
        }
    }
    if (!(r->temperature > 0) || r->top_k == 1 || !isfinite(max)) {
        token = best;
        goto done;
    }

    for (i = 0; i < vocab; i++) {
        z[i] = pl_sample_z(v[i], max, r->temperature);
        kept[i] = v[i] > -INFINITY
                  && (r->min_p <= 0 || z[i] >= pl_sample_min_z(r->min_p));
        if (kept[i]) {
            sorted[n++] = v[i];
        }
    }
    if (r->top_k > 0 && n > r->top_k) {
        qsort(sorted, n, sizeof(float), cmp_desc);
        kth = sorted[r->top_k - 1];
    }
    for (n = 0, i = 0; i < vocab; i++) {
        kept[i] = kept[i] && v[i] >= kth;
        if (kept[i]) {
            sorted[n++] = z[i];
            total += pl_sample_weight(z[i]);
        }
    }
    if (r->top_p < 1) {
        qsort(sorted, n, sizeof(float), cmp_desc);
        target = pl_sample_target(r->top_p, total);
        for (acc = 0, j = 0; j < n; j++) {
            acc += pl_sample_weight(sorted[j]);
            /* the cut is at the end of a run of equal z */
            if (acc >= target && (j + 1 == n || sorted[j + 1] != sorted[j])) {
                cut = sorted[j];
                break;
            }
        }
    }

    top = -INFINITY;
    for (i = 0; i < vocab; i++) {
        if (!kept[i] || z[i] < cut) {
            continue;
        }
        w = pl_sample_noise4(r->seed, r->step, (uint32_t) i / 4);
        s = pl_sample_score(z[i], w.v[i % 4]);
        if (s > top) {
            top = s;
            token = i;
        }
    }

done:
    free(v);
    free(z);
    free(sorted);
    free(kept);
    return token;
}


static uint64_t  rng = 0x5a3b1e;

static uint32_t
next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t) (rng >> 16);
}


static float
uniform(float lo, float hi)
{
    return lo + (hi - lo) * (float) (next() & 0xffffff) * 0x1p-24f;
}


/* a random request over a row of logits that has ties, -inf and NaN */
static void
random_case(float *row, int vocab, pl_sample_req_t *r, pl_logit_adjust_t *a,
    int *n_adj)
{
    int  i, scale = 1 + (int) (next() % 4);

    for (i = 0; i < vocab; i++) {
        row[i] = uniform(-3.0f * scale, 3.0f * scale);
        if (next() % 8 == 0) {
            row[i] = row[next() % (i + 1)];       /* ties */
        }
        if (next() % 200 == 0) {
            row[i] = next() % 2 ? -INFINITY : NAN;
        }
    }

    *r = req(0, next() % 6 == 0 ? 0 : uniform(0.2f, 2.0f),
             next() % 2 ? uniform(0.05f, 1.0f) : 1.0f,
             next() % 3 == 0 ? uniform(0.0f, 0.3f) : 0.0f,
             next() % 2 ? (int) (next() % 60) : 0, next(), next() % 1000);
    r->repetition_penalty = uniform(0.8f, 1.6f);

    *n_adj = (int) (next() % 12);
    for (i = 0; i < *n_adj; i++) {
        a[i] = (pl_logit_adjust_t) {
            .id = (int32_t) ((uint32_t) (i * vocab) / 12 + next() % 4),
            .repeat = (int32_t) (next() % 2),
            .bias = next() % 10 == 0 ? -INFINITY : uniform(-2, 2),
            .penalty = uniform(-1, 0),
        };
    }
    r->adjust_count = *n_adj;
}


static void
test_against_naive(void)
{
    static float       row[3001];
    pl_sample_req_t    r;
    pl_logit_adjust_t  a[12];
    int                i, n_adj, vocab, same = 0;
    int32_t            t, want;

    for (i = 0; i < 400; i++) {
        vocab = i % 2 ? 3001 : 257;
        random_case(row, vocab, &r, a, &n_adj);
        t = draw(row, vocab, r, a, n_adj);
        want = naive(row, vocab, &r, a);
        if (t == want) {
            same++;
        } else if (i - same < 5) {
            diag("case %d: vocab %d T %g top_p %g min_p %g top_k %d: %d, "
                 "naive %d", i, vocab, r.temperature, r.top_p, r.min_p,
                 r.top_k, t, want);
        }
    }
    is_int(same, 400, "400 random requests (ties, -inf, NaN, adjust "
           "entries, every filter) draw what a naive reading of the "
           "definition draws");
}


static void
test_batch_positions(void)
{
    static float       rows[3][1000];
    pl_sample_req_t    batch[6], one;
    pl_logit_adjust_t  adj[3] = { { 7, 1, 0.5f, -0.2f }, { 9, 0, -1.0f, 0 },
                                  { 11, 1, 0, -1.0f } };
    int32_t            got[6], alone;
    int                i, j, same = 1, shared = 0;

    for (j = 0; j < 3; j++) {
        for (i = 0; i < 1000; i++) {
            rows[j][i] = uniform(-4, 4);
        }
    }

    /* the same request (row 1, seed 5, step 9, with entries) at positions
       0 and 5; the others share rows with it */
    for (i = 0; i < 6; i++) {
        batch[i] = req(i % 3, 0.9f, 0.95f, 0.01f, 50, 100 + i, 9);
    }
    batch[0] = req(1, 1.1f, 0.9f, 0, 30, 5, 9);
    batch[0].repetition_penalty = 1.3f;
    batch[0].adjust_start = 0;
    batch[0].adjust_count = 3;
    batch[5] = batch[0];
    batch[4].row = 1;

    for (i = 0; i < 50; i++) {
        batch[0].step = batch[5].step = (uint64_t) i;
        pl_sample_host(got, &rows[0][0], 1000, batch, 6, adj, 3, NULL, 0);
        one = batch[0];
        one.row = 0;
        pl_sample_host(&alone, &rows[1][0], 1000, &one, 1, adj, 3, NULL,
                       0);
        same &= got[0] == alone && got[5] == alone;
        shared += got[4] != got[0];
    }
    ok(same, "a request draws the same token first in a batch, last in "
       "it, and alone (50 steps)");
    ok(shared > 0, "while another stream on the same row goes its own way "
       "(%d of 50 differ)", shared);
}


int
main(void)
{
    test_philox_known_answers();
    test_uniform();
    test_shared_arithmetic();
    test_adjust_order();
    test_greedy();
    test_min_p_boundary();
    test_top_k_ties();
    test_top_p_boundary();
    test_distribution();
    test_against_naive();
    test_batch_positions();

    return done_testing();
}
