/*
 * cpu_sample: the sampling definition (pl_ops.h, above pl_sample_req_t)
 * on host fp32 logits, one request after the other, written to be read
 * next to the definition.  It is the CPU backend's sample operation, what
 * the engine runs on logits gathered on the host (tensor parallelism),
 * and the reference the CUDA kernel is tested against.
 *
 * Each request adjusts a copy of its row (its mask, when it has one,
 * setting the ids it may not draw to -inf), takes the highest value
 * (lowest id on ties); greedy stops there.  Otherwise the ids that min_p
 * keeps become candidates, and top_k then top_p cut them at a threshold
 * found by an exact radix search over the keys of the values
 * (pl_select_key).  The draw scores each candidate with its Philox noise
 * and keeps the best; the arithmetic is sample_math.h's, the same as the
 * GPU's to the bit.
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"
#include "sample_math.h"

#define PL_SELECT_BINS  2048

/* The ids still in the running, with what the cuts look at. */
typedef struct {
    int32_t   *id;
    float     *z;
    uint32_t  *key;         /* of v for top_k, then of z for top_p */
    uint64_t  *w;           /* top_p's fixed-point weights */
    int        n;
} pl_cands_t;


/* v = the request's row after its adjust entries and its mask (step 1);
   allow is its row of the masks, or NULL */
static void
pl_sample_values(float *v, const float *row, int vocab,
    const pl_sample_req_t *r, const pl_logit_adjust_t *adjust,
    const uint64_t *allow)
{
    const pl_logit_adjust_t  *a;
    int                       i;

    for (i = 0; i < vocab; i++) {
        v[i] = row[i] != row[i] ? -INFINITY : row[i];
    }

    for (i = 0; i < r->adjust_count; i++) {
        a = &adjust[r->adjust_start + i];
        if (a->id >= 0 && a->id < vocab) {
            v[a->id] = pl_sample_adjust(v[a->id], a, r->repetition_penalty);
        }
    }

    if (allow == NULL) {
        return;
    }

    for (i = 0; i < vocab; i++) {
        if (!(allow[i / 64] >> (i % 64) & 1)) {
            v[i] = -INFINITY;
        }
    }
}


/* request r's row of the masks, or NULL when it has none (or a row out
   of range, which no caller makes) */
static const uint64_t *
pl_sample_allow(const pl_sample_req_t *r, int vocab, const uint64_t *masks,
    int n_masks)
{
    if (!r->masked || r->mask_row < 0 || r->mask_row >= n_masks) {
        return NULL;
    }

    return masks + (size_t) r->mask_row * pl_sample_mask_words(vocab);
}


/*
 * The largest key K for which the candidates with key >= K weigh at least
 * target (w NULL: each weighs 1), the total being >= target: three
 * passes, each fixing the next 11, 11 and 10 bits of K from a histogram of
 * the candidates that share the bits fixed so far.
 */
static uint32_t
pl_select_key(const uint32_t *key, const uint64_t *w, int n, uint64_t target)
{
    static const int  shift[3] = { 21, 10, 0 }, bins[3] = { 2048, 2048, 1024 };
    uint64_t          hist[PL_SELECT_BINS], above = 0;
    uint32_t          prefix = 0, mask = 0;
    int               d, i, b;

    for (d = 0; d < 3; d++) {
        memset(hist, 0, sizeof(hist));

        for (i = 0; i < n; i++) {
            if ((key[i] & mask) == prefix) {
                hist[(key[i] >> shift[d]) & (bins[d] - 1)] += w ? w[i] : 1;
            }
        }

        for (b = bins[d] - 1; b > 0 && above + hist[b] < target; b--) {
            above += hist[b];
        }

        prefix |= (uint32_t) b << shift[d];
        mask |= (uint32_t) (bins[d] - 1) << shift[d];
    }

    return prefix;
}


/* keep the candidates whose key is at least k, in order */
static void
pl_cands_cut(pl_cands_t *c, uint32_t k)
{
    int  i, n = 0;

    for (i = 0; i < c->n; i++) {
        if (c->key[i] >= k) {
            c->id[n] = c->id[i];
            c->z[n] = c->z[i];
            n++;
        }
    }
    c->n = n;
}


/* The winner of the exponential race among the candidates (step 3's
   draw); best, with z = 0, is always one of them. */
static int32_t
pl_sample_draw(const pl_cands_t *c, const pl_sample_req_t *r, int32_t best)
{
    pl_philox_ctr_t  words;
    uint32_t         group = (uint32_t) best >> 2;
    float            s, top;
    int32_t          id, token = best;
    int              i;

    words = pl_sample_noise4(r->seed, r->step, group);
    top = pl_sample_score(0.0f, pl_sample_word(&words, (uint32_t) best));

    for (i = 0; i < c->n; i++) {
        id = c->id[i];

        /* the noise adds at most PL_SAMPLE_NOISE_MAX: no chance */
        if (PL_FADD(c->z[i], PL_SAMPLE_NOISE_MAX) < top) {
            continue;
        }
        if ((uint32_t) id >> 2 != group) {
            group = (uint32_t) id >> 2;
            words = pl_sample_noise4(r->seed, r->step, group);
        }
        s = pl_sample_score(c->z[i], pl_sample_word(&words, (uint32_t) id));
        if (s > top || (s == top && id < token)) {
            top = s;
            token = id;
        }
    }

    return token;
}


static int32_t
pl_sample_one(const float *v, int vocab, const pl_sample_req_t *r,
    pl_cands_t *c)
{
    float     max = v[0], t = r->temperature, z, min_z;
    int32_t   best = 0;
    uint64_t  total;
    int       i;

    for (i = 1; i < vocab; i++) {
        if (v[i] > max) {
            max = v[i];
            best = i;
        }
    }

    if (!(t > 0.0f) || r->top_k == 1 || !isfinite(max)) {
        return best;
    }

    /* candidates: finite weight, and min_p's z >= ln(min_p) */
    min_z = r->min_p > 0.0f ? pl_sample_min_z(r->min_p) : -INFINITY;
    c->n = 0;
    for (i = 0; i < vocab; i++) {
        if (v[i] > -INFINITY) {
            z = pl_sample_z(v[i], max, t);
            if (z >= min_z) {
                c->id[c->n] = i;
                c->z[c->n] = z;
                c->key[c->n] = pl_sample_key(v[i]);
                c->n++;
            }
        }
    }

    if (r->top_k > 0 && c->n > r->top_k) {
        pl_cands_cut(c, pl_select_key(c->key, NULL, c->n,
                                      (uint64_t) r->top_k));
    }

    if (r->top_p < 1.0f) {
        total = 0;
        for (i = 0; i < c->n; i++) {
            c->key[i] = pl_sample_key(c->z[i]);
            c->w[i] = pl_sample_weight(c->z[i]);
            total += c->w[i];
        }
        pl_cands_cut(c, pl_select_key(c->key, c->w, c->n,
                                      pl_sample_target(r->top_p, total)));
    }

    return pl_sample_draw(c, r, best);
}


void
pl_sample_host(int32_t *tokens, const float *logits, int vocab,
    const pl_sample_req_t *reqs, int n, const pl_logit_adjust_t *adjust,
    int n_adjust, const uint64_t *masks, int n_masks)
{
    size_t       nv = (size_t) vocab;
    float       *v = malloc(nv * sizeof(float));
    pl_cands_t   c = {
        .id = malloc(nv * sizeof(int32_t)),
        .z = malloc(nv * sizeof(float)),
        .key = malloc(nv * sizeof(uint32_t)),
        .w = malloc(nv * sizeof(uint64_t)),
    };
    int          i;

    (void) n_adjust;

    if (v == NULL || c.id == NULL || c.z == NULL || c.key == NULL
        || c.w == NULL)
    {
        /* no way to answer: a wrong token would be silent */
        fprintf(stderr, "pagedllm: out of memory sampling %d requests\n", n);
        abort();
    }

    for (i = 0; i < n; i++) {
        pl_sample_values(v, logits + (size_t) reqs[i].row * nv, vocab,
                         &reqs[i], adjust,
                         pl_sample_allow(&reqs[i], vocab, masks, n_masks));
        tokens[i] = pl_sample_one(v, vocab, &reqs[i], &c);
    }

    free(v);
    free(c.id);
    free(c.z);
    free(c.key);
    free(c.w);
}


void
pl_cpu_sample(pl_backend_t *be, int32_t *tokens, const void *logits,
    pl_dtype_t dtype, int vocab, const pl_sample_req_t *reqs, int n,
    const pl_logit_adjust_t *adjust, int n_adjust, const uint64_t *masks,
    int n_masks)
{
    (void) be;
    (void) dtype;           /* the CPU's activations are fp32 */

    pl_sample_host(tokens, logits, vocab, reqs, n, adjust, n_adjust, masks,
                   n_masks);
}
