/*
 * beam: the candidates of a beam's row, one step of beam search over a
 * group's rows, and the kept hypotheses (the rules are in beam.h).
 *
 * A row's candidates are its best per_beam log-probabilities, found in
 * one pass over the vocabulary with a small sorted array (per_beam is at
 * most a few dozen).  The log-softmax's normalizer is the row's maximum
 * plus the log of a sum of exponentials, each computed by pl_beam_exp in
 * vector lanes and summed in float over short runs, the runs in double:
 * glibc's exp is a call per id the compiler cannot vectorize, and with a
 * batch of beams those calls were most of an iteration's host time
 * (bench/beam.c).
 * A step sorts at most width * per_beam candidates.  Ties go to the lower
 * beam, then to the lower token id, so a search is deterministic.
 */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "beam.h"

typedef struct {
    double    cum;
    int       parent;
    int       rank;             /* within its beam's row */
    int32_t   token;
} pl_beam_cand_all_t;


pl_beam_t *
pl_beam_create(int width, float length_penalty, int early_stopping,
    int max_new, int min_tokens, const int32_t *stops, int n_stops)
{
    pl_beam_t  *b;
    int         i;

    if (width < 1 || width > PL_BEAM_MAX || max_new < 1 || n_stops < 0) {
        return NULL;
    }

    b = calloc(1, sizeof(*b));
    if (b == NULL) {
        return NULL;
    }

    b->width = width;
    b->length_penalty = length_penalty;
    b->early_stopping = early_stopping;
    b->max_new = max_new;
    b->min_tokens = min_tokens;
    b->n_stops = n_stops;
    b->per_beam = width + n_stops;
    b->stops = malloc((size_t) (n_stops ? n_stops : 1) * sizeof(int32_t));
    b->cands = malloc((size_t) width * b->per_beam * sizeof(pl_beam_cand_t));
    if (b->stops == NULL || b->cands == NULL) {
        pl_beam_free(b);
        return NULL;
    }
    memcpy(b->stops, stops, (size_t) n_stops * sizeof(int32_t));

    for (i = 0; i < width; i++) {
        b->n_cands[i] = -1;
        b->hyps[i].tokens = malloc((size_t) max_new * sizeof(int32_t));
        if (b->hyps[i].tokens == NULL) {
            pl_beam_free(b);
            return NULL;
        }
    }

    return b;
}


void
pl_beam_free(pl_beam_t *b)
{
    int  i;

    if (b == NULL) {
        return;
    }

    for (i = 0; i < PL_BEAM_MAX; i++) {
        free(b->hyps[i].tokens);
    }
    free(b->stops);
    free(b->cands);
    free(b);
}


int
pl_beam_is_stop(const pl_beam_t *b, int32_t token)
{
    int  i;

    for (i = 0; i < b->n_stops; i++) {
        if (b->stops[i] == token) {
            return 1;
        }
    }

    return 0;
}


/* Put (token, logit) into top, sorted best first, holding at most cap. */
static void
pl_beam_keep(pl_beam_cand_t *top, int *n, int cap, int32_t token,
    float logit)
{
    int  i;

    if (*n == cap && !(logit > top[cap - 1].logprob)) {
        return;
    }

    i = *n < cap ? (*n)++ : cap - 1;
    while (i > 0 && logit > top[i - 1].logprob) {
        top[i] = top[i - 1];
        i--;
    }
    top[i].token = token;
    top[i].logprob = logit;
}


/* e^x for x <= 0, within a few float ulps; x below -87 (and -inf, and
   NaN) gives about 1e-38 instead: nothing next to a sum that holds the
   row's maximum's e^0 = 1.  x = n ln2 + r with |r| <= ln2 / 2, e^r by its
   Taylor series to r^6, 2^n put into the exponent bits.  Branch-free, so
   a loop over it vectorizes. */
static inline float
pl_beam_exp(float x)
{
    union { int32_t i; float f; }  two_n;
    float                          n, r;

    x = x > -87.0f ? x : -87.0f;
    n = (float) (int32_t) (x * 1.44269504f - 0.5f);    /* rounds, x <= 0 */
    r = x - n * 0.693145752f;
    r = r - n * 1.42860677e-6f;
    two_n.i = ((int32_t) n + 127) << 23;

    return two_n.f * (1.0f + r * (1.0f + r * (0.5f + r * (1.66666672e-1f
                      + r * (4.16666679e-2f + r * (8.33333377e-3f
                      + r * 1.38888892e-3f))))));
}


/* log sum e^(logits[t] - max) over the row */
static double
pl_beam_log_sum_exp(const float *logits, int vocab, float max)
{
    enum { RUN = 256 };
    double  total = 0;
    float   run;
    int     t, u, end;

    for (t = 0; t < vocab; t = end) {
        end = vocab - t < RUN ? vocab : t + RUN;
        run = 0;
        #pragma omp simd reduction(+:run)
        for (u = t; u < end; u++) {
            run += pl_beam_exp(logits[u] - max);
        }
        total += run;
    }

    return log(total);
}


/* Keep row's best candidates in top (n of them so far) from the ids
   t..end-1, every id of which is finite or -inf, stops left out when
   masked. */
static void
pl_beam_scan(pl_beam_t *b, pl_beam_cand_t *top, int *n, const float *row,
    int t, int end, int masked)
{
    for ( /* void */ ; t < end; t++) {
        if (!(row[t] > -INFINITY) || (masked && pl_beam_is_stop(b, t))) {
            continue;
        }
        pl_beam_keep(top, n, b->per_beam, t, row[t]);
    }
}


void
pl_beam_row(pl_beam_t *b, int i, const float *logits, int vocab,
    int generated)
{
    enum { RUN = 64 };
    pl_beam_cand_t  *top = b->cands + (size_t) i * b->per_beam;
    int              masked = generated < b->min_tokens;
    int              n = 0, t, u, end;
    float            max = -INFINITY, run;
    double           lse;

    /* One pass finds the row's maximum and its candidates: a run of ids
       is scanned one by one only when its maximum could enter the list,
       which, once the list is full, few runs' can. */
    for (t = 0; t < vocab; t = end) {
        end = vocab - t < RUN ? vocab : t + RUN;
        run = -INFINITY;
        #pragma omp simd reduction(max:run)
        for (u = t; u < end; u++) {
            run = logits[u] > run ? logits[u] : run;
        }
        max = run > max ? run : max;
        if (n < b->per_beam || run > top[b->per_beam - 1].logprob) {
            pl_beam_scan(b, top, &n, logits, t, end, masked);
        }
    }
    lse = max + pl_beam_log_sum_exp(logits, vocab, max);

    for (t = 0; t < n; t++) {
        top[t].logprob = (float) ((double) top[t].logprob - lse);
    }
    b->n_cands[i] = n;
}


int
pl_beam_ready(const pl_beam_t *b, int n)
{
    int  i;

    for (i = 0; i < n; i++) {
        if (b->n_cands[i] < 0) {
            return 0;
        }
    }

    return 1;
}


static int
pl_beam_cand_cmp(const void *pa, const void *pb)
{
    const pl_beam_cand_all_t  *a = pa, *c = pb;

    if (a->cum != c->cum) {
        return a->cum > c->cum ? -1 : 1;
    }
    if (a->parent != c->parent) {
        return a->parent < c->parent ? -1 : 1;
    }
    return a->rank - c->rank;
}


/* Keep hypothesis gen + token with cumulative log-probability cum when
   it is among the width best. */
static void
pl_beam_add_hyp(pl_beam_t *b, const int32_t *gen, int generated,
    int32_t token, double cum)
{
    int            n = generated + 1, i;
    double         score = cum / pow((double) n, b->length_penalty);
    pl_beam_hyp_t  h;

    if (b->n_hyps == b->width && !(score > b->hyps[b->width - 1].score)) {
        return;
    }

    i = b->n_hyps < b->width ? b->n_hyps++ : b->width - 1;
    h = b->hyps[i];
    while (i > 0 && score > b->hyps[i - 1].score) {
        b->hyps[i] = b->hyps[i - 1];
        i--;
    }

    memcpy(h.tokens, gen, (size_t) generated * sizeof(int32_t));
    h.tokens[generated] = token;
    h.n = n;
    h.cum = cum;
    h.score = score;
    h.stopped = pl_beam_is_stop(b, token);
    b->hyps[i] = h;
}


/* After a step that left live beams: is the search over? */
static int
pl_beam_over(const pl_beam_t *b, int generated)
{
    double  len;

    if (b->n_next < b->width) {
        return 1;               /* rows too short to go on: degenerate */
    }
    if (b->n_hyps < b->width) {
        return 0;
    }
    if (b->early_stopping == PL_EARLY_STOPPING_TRUE) {
        return 1;
    }

    len = b->early_stopping == PL_EARLY_STOPPING_NEVER && b->length_penalty > 0
          ? b->max_new : generated;

    return b->next[0].cum / pow(len, b->length_penalty)
           <= b->hyps[b->width - 1].score;
}


void
pl_beam_step(pl_beam_t *b, const double *cum, const int32_t *const *gen,
    int n, int generated)
{
    pl_beam_cand_all_t  all[(n > 0 ? n : 1) * b->per_beam];
    const pl_beam_cand_t  *c;
    int                 i, j, total = 0, last = generated + 1 >= b->max_new;

    for (i = 0; i < n; i++) {
        c = b->cands + (size_t) i * b->per_beam;
        for (j = 0; j < b->n_cands[i]; j++) {
            all[total].cum = cum[i] + c[j].logprob;
            all[total].parent = i;
            all[total].rank = j;
            all[total].token = c[j].token;
            total++;
        }
        b->n_cands[i] = -1;
    }

    qsort(all, (size_t) total, sizeof(all[0]), pl_beam_cand_cmp);

    for (i = 0; i < total && i < b->width; i++) {
        if (last || pl_beam_is_stop(b, all[i].token)) {
            pl_beam_add_hyp(b, gen[all[i].parent], generated, all[i].token,
                            all[i].cum);
        }
    }

    b->n_next = 0;
    for (i = 0; i < total && b->n_next < b->width && !last; i++) {
        if (!pl_beam_is_stop(b, all[i].token)) {
            b->next[b->n_next].parent = all[i].parent;
            b->next[b->n_next].token = all[i].token;
            b->next[b->n_next].cum = all[i].cum;
            b->n_next++;
        }
    }

    b->done = last || pl_beam_over(b, generated + 1);
    if (b->done) {
        b->n_next = 0;
    }
}
