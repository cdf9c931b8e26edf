/*
 * The CUDA sampling operation against its CPU twin, pl_sample_host, on
 * fresh random rows each run: ragged batches mixing greedy and sampled
 * requests, every filter alone and together (min_p, top_k in the
 * shared-memory list and past it, top_p with and without top_k), adjust
 * entries short and long (a repetition penalty over a long history),
 * several requests on one row, grammar masks (one bit per id) allowing
 * about one id in 1000, one in two or all but a few, vocabularies of
 * 32000, 151936 and an odd size, logits in bf16, f16 and f32.
 *
 * Both sides compute the same IEEE operations and exact integer sums
 * (kernels/sample_math.h), so the tokens must be identical, every one:
 * no tolerance.  The GPU's output is poisoned before each call (the host
 * array here, the device's by the operation itself), and a second GPU
 * call on the same input must repeat the first to the token.
 */

#include <stdio.h>

#include "pair.h"

#define MAX_ADJ_PER_REQ  4000

static pair_t  P;


static float
unit(void)
{
    return (float) (pair_next() >> 11) * 0x1p-53f;
}


/* A row like a model's: a broad bulk, a few clear favourites, ties,
   and now and then -inf or NaN; every value exact in dtype. */
static void
fill_row(float *row, int vocab, pl_dtype_t dt)
{
    float  spread = 1.0f + 4.0f * unit(), lead = 8.0f * unit();
    int    i, k, favourites = 1 + pair_int(20);

    for (i = 0; i < vocab; i++) {
        row[i] = spread * (unit() + unit() + unit() - 1.5f);
    }
    for (k = 0; k < favourites; k++) {
        row[pair_int(vocab)] += lead + unit() * 2.0f;
    }
    for (k = 0; k < vocab / 500; k++) {
        row[pair_int(vocab)] = row[pair_int(vocab)];
    }
    if (pair_int(3) == 0) {
        row[pair_int(vocab)] = -INFINITY;
        row[pair_int(vocab)] = NAN;
    }

    for (i = 0; i < vocab; i++) {
        if (dt == PL_DT_BF16) {
            row[i] = pl_bf16_to_f32(pl_f32_to_bf16(row[i]));
        } else if (dt == PL_DT_F16) {
            row[i] = pl_f16_to_f32(pl_f32_to_f16(row[i]));
        }
    }
}


typedef enum {
    MIX_RAGGED = 0,         /* a bit of everything */
    MIX_GREEDY,             /* the serving benchmark's path */
    MIX_PLAIN,              /* temperature only: the whole vocabulary */
    MIX_TOP_K_LIST,         /* top_k small: the shared-memory list */
    MIX_TOP_K_WIDE,         /* top_k past the list */
    MIX_TOP_P,              /* top_p over the row */
    MIX_MIN_P,
    MIX_ALL
} mix_t;

static const char *const  mix_name[] = {
    "ragged", "greedy", "temperature only", "top_k in the list",
    "top_k past the list", "top_p over the row", "min_p", "every filter"
};


static pl_sample_req_t
random_req(mix_t mix, int rows)
{
    pl_sample_req_t  r = {
        .row = pair_int(rows),
        .temperature = 0.3f + 1.5f * unit(),
        .top_p = 1.0f,
        .min_p = 0.0f,
        .top_k = 0,
        .repetition_penalty = 1.0f + unit(),
        .seed = pair_next(),
        .step = (uint64_t) pair_int(5000),
    };

    if (mix == MIX_RAGGED) {
        mix = (mix_t) pair_int(MIX_ALL + 1);
    }
    switch (mix) {
    case MIX_GREEDY:
        r.temperature = pair_int(4) == 0 ? 1.0f : 0.0f;
        r.top_k = r.temperature > 0 ? 1 : 0;
        break;
    case MIX_TOP_K_LIST:
        r.top_k = 2 + pair_int(100);
        r.top_p = pair_int(2) ? 0.5f + 0.5f * unit() : 1.0f;
        break;
    case MIX_TOP_K_WIDE:
        r.top_k = 2100 + pair_int(8000);
        r.top_p = pair_int(2) ? 0.3f + 0.7f * unit() : 1.0f;
        break;
    case MIX_TOP_P:
        r.top_p = 0.05f + 0.95f * unit();
        break;
    case MIX_MIN_P:
        r.min_p = 0.3f * unit();
        break;
    case MIX_ALL:
        r.top_k = 1 + pair_int(3000);
        r.top_p = 0.2f + 0.8f * unit();
        r.min_p = 0.1f * unit();
        break;
    default:
        break;
    }

    return r;
}


/* want entries (at most half the vocabulary) for r at adj + *used, one
   per id */
static void
random_adjust(pl_sample_req_t *r, pl_logit_adjust_t *adj, int *used,
    int vocab, int want)
{
    int  i, stride, base;

    want = want < vocab / 2 ? want : vocab / 2;
    stride = vocab / (want + 1);
    base = pair_int(stride);

    r->adjust_start = *used;
    r->adjust_count = want;
    for (i = 0; i < want; i++) {
        adj[*used + i] = (pl_logit_adjust_t) {
            .id = base + i * stride,
            .repeat = pair_int(2),
            .bias = pair_int(15) == 0 ? -INFINITY
                    : pair_int(3) == 0 ? 4.0f * unit() - 2.0f : 0.0f,
            .penalty = pair_int(2) ? -unit() : 0.0f,
        };
    }
    *used += want;
}


/* r restricted to a fresh row of masks (*n_masks rows so far): about
   one id in 1000, one in two, or all but a few allowed */
static void
random_mask(pl_sample_req_t *r, uint64_t *masks, int *n_masks, int vocab)
{
    int        words = pl_sample_mask_words(vocab), i, kind = pair_int(3);
    uint64_t  *m = masks + (size_t) *n_masks * words;

    for (i = 0; i < words; i++) {
        m[i] = kind == 1 ? pair_next() : kind == 2 ? ~0ull : 0;
    }
    for (i = 0; kind == 0 && i < vocab / 1000 + 1; i++) {
        m[pair_int(vocab) / 64] |= 1ull << pair_int(64);
    }
    for (i = 0; kind == 2 && i < 20; i++) {
        m[pair_int(vocab) / 64] &= ~(1ull << pair_int(64));
    }
    r->masked = 1;
    r->mask_row = (*n_masks)++;
}


static void
test_batch(int vocab, int rows, int n, pl_dtype_t dt, mix_t mix)
{
    size_t             cells = (size_t) rows * vocab;
    float             *logits = malloc(cells * sizeof(float));
    pl_sample_req_t   *reqs = malloc((size_t) n * sizeof(*reqs));
    pl_logit_adjust_t *adj = malloc((size_t) n * MAX_ADJ_PER_REQ
                                    * sizeof(*adj));
    int32_t           *want = malloc((size_t) n * sizeof(int32_t));
    int32_t           *got = malloc((size_t) n * sizeof(int32_t));
    int32_t           *again = malloc((size_t) n * sizeof(int32_t));
    uint64_t          *masks = malloc((size_t) n * pl_sample_mask_words(vocab)
                                      * sizeof(uint64_t));
    void              *bytes, *dev;
    int                i, used = 0, bad = 0, unstable = 0, sampled = 0, k;
    int                n_masks = 0;

    for (i = 0; i < rows; i++) {
        fill_row(logits + (size_t) i * vocab, vocab, dt);
    }
    for (i = 0; i < n; i++) {
        reqs[i] = random_req(mix, rows);
        k = pair_int(4);
        random_adjust(&reqs[i], adj, &used, vocab,
                      k == 0 ? 0 : k == 1 ? 1 + pair_int(20)
                      : k == 2 ? 200 + pair_int(MAX_ADJ_PER_REQ - 200) : 3);
        if (pair_int(3) == 0) {
            random_mask(&reqs[i], masks, &n_masks, vocab);
        }
        sampled += reqs[i].temperature > 0 && reqs[i].top_k != 1;
    }
    /* several requests read one row: the last few copy another's row */
    for (i = n - n / 4; i < n; i++) {
        reqs[i].row = reqs[pair_int(n - n / 4)].row;
    }

    bytes = pair_weight_bytes(logits, cells, dt);
    dev = P.gpu->alloc(P.gpu, cells * pl_dtype_size(dt));
    P.gpu->upload(P.gpu, dev, bytes, cells * pl_dtype_size(dt));

    pl_sample_host(want, logits, vocab, reqs, n, adj, used, masks, n_masks);

    for (i = 0; i < n; i++) {
        got[i] = again[i] = -999;
    }
    P.gpu->sample(P.gpu, got, dev, dt, vocab, reqs, n, adj, used, masks,
                  n_masks);
    P.gpu->sample(P.gpu, again, dev, dt, vocab, reqs, n, adj, used, masks,
                  n_masks);

    for (i = 0; i < n; i++) {
        if (got[i] != want[i]) {
            if (bad++ < 5) {
                diag("request %d (row %d, T %g, top_p %g, min_p %g, top_k "
                     "%d, %d entries, masked %d, seed %llu step %llu): gpu "
                     "%d, cpu %d", i, reqs[i].row, reqs[i].temperature,
                     reqs[i].top_p, reqs[i].min_p, reqs[i].top_k,
                     reqs[i].adjust_count, reqs[i].masked,
                     (unsigned long long) reqs[i].seed,
                     (unsigned long long) reqs[i].step, got[i], want[i]);
            }
        }
        unstable += again[i] != got[i];
    }

    ok(bad == 0, "%s, vocab %d, %s, %d requests (%d sampled, %d masked) "
       "over %d rows, %d entries: the CPU's tokens exactly (%d differ)",
       mix_name[mix], vocab, pl_dtype_name(dt), n, sampled, n_masks, rows,
       used, bad);
    is_int(unstable, 0, "and a second run repeats them");

    P.gpu->free(P.gpu, dev);
    free(bytes);
    free(logits);
    free(reqs);
    free(adj);
    free(masks);
    free(want);
    free(got);
    free(again);
}


/* One seeded request over 256 steps: the CPU's tokens, drawn with the
   frequency softmax gives the best id (about 0.73 here). */
static void
test_steps(void)
{
    int              vocab = 32000, i, hits = 0, same = 1;
    float           *row = malloc((size_t) vocab * sizeof(float));
    pl_sample_req_t  reqs[256];
    int32_t          got[256], want[256];
    void            *bytes, *dev;
    double           p0, sum = 0;

    for (i = 0; i < vocab; i++) {
        row[i] = -30.0f;
    }
    row[7] = 0.0f;
    row[8] = -1.0f;
    sum = 1.0 + exp(-1.0) + (vocab - 2) * exp(-30.0);
    p0 = 1.0 / sum;

    bytes = pair_weight_bytes(row, (size_t) vocab, PL_DT_BF16);
    dev = P.gpu->alloc(P.gpu, (size_t) vocab * 2);
    P.gpu->upload(P.gpu, dev, bytes, (size_t) vocab * 2);

    for (i = 0; i < 256; i++) {
        reqs[i] = (pl_sample_req_t) { .row = 0, .temperature = 1.0f,
                                      .top_p = 1.0f, .seed = 12345,
                                      .step = (uint64_t) i,
                                      .repetition_penalty = 1 };
    }
    P.gpu->sample(P.gpu, got, dev, PL_DT_BF16, vocab, reqs, 256, NULL, 0,
                  NULL, 0);
    pl_sample_host(want, row, vocab, reqs, 256, NULL, 0, NULL, 0);
    for (i = 0; i < 256; i++) {
        hits += got[i] == 7;
        same &= got[i] == want[i];
    }
    ok(same, "256 steps of one seed: the CPU's tokens");
    ok(fabs((double) hits / 256 - p0) < 0.15, "and the best id comes "
       "%.2f of the time (softmax: %.2f)", (double) hits / 256, p0);

    P.gpu->free(P.gpu, dev);
    free(bytes);
    free(row);
}


int
main(void)
{
    static const int  vocabs[3] = { 32000, 151936, 50257 };
    int               v, m;

    if (!pair_start(&P)) {
        return done_testing();
    }
    ok(P.gpu->sample != NULL, "the CUDA backend has the sample operation");

    for (v = 0; v < 3; v++) {
        for (m = MIX_RAGGED; m <= MIX_ALL; m++) {
            test_batch(vocabs[v], 6, m == MIX_RAGGED ? 64 : 24, PL_DT_BF16,
                       (mix_t) m);
        }
    }
    test_batch(32000, 3, 40, PL_DT_F32, MIX_RAGGED);
    test_batch(50257, 3, 40, PL_DT_F32, MIX_RAGGED);
    test_batch(32000, 3, 40, PL_DT_F16, MIX_RAGGED);
    test_batch(151936, 2, 1, PL_DT_BF16, MIX_GREEDY);
    test_batch(151936, 2, 1, PL_DT_BF16, MIX_ALL);
    test_batch(7, 2, 16, PL_DT_BF16, MIX_RAGGED);
    test_steps();

    P.gpu->destroy(P.gpu);
    P.cpu->destroy(P.cpu);
    return done_testing();
}
