/*
 * Every golden architecture on the CUDA backend against Hugging Face
 * transformers: the fixtures of t/fixtures/golden/ (tools/golden/
 * make_golden.py: Llama 3 with GQA and RoPE scaling, tied Llama in bf16,
 * Mistral sharded with one KV head, Qwen2 with q/k/v biases, OPT pre-LN in
 * fp16 and post-LN), three prompts each with transformers' greedy
 * continuation and its float32 logits at every position.
 *
 * The three prompts run as one batch: a ragged prefill, then one decode
 * step per sequence per iteration, fed transformers' tokens (teacher
 * forcing), so every step's logits can be compared with the reference.
 * Bounds are bf16's: the relative error of each step's logits within
 * LOGIT_BOUND, and the greedy token equal to transformers' wherever the
 * reference's best logit leads the runner-up by twice that bound in units
 * of the logits' rms (the CPU golden test holds the fp32 path to 1e-3).
 * Every fixture runs twice: with --dtype auto (OPT pre-LN in fp16, the
 * others in bf16) and with --dtype float16.
 */

#include <stdio.h>

#include "fixture_model.h"
#include "pair.h"

#define NCASE        FM_GOLDEN_CASES
#define MAX_LEN      FM_GOLDEN_LEN
#define BLOCK        16
#define SEQ_BLOCKS   (MAX_LEN / BLOCK)
#define LOGIT_BOUND  3e-2

/* top-1 index; lead over the runner-up in units of the row's rms */
static int
best_of(const float *v, int n, float *lead)
{
    int     i, best = 0, second = -1;
    double  ss = 0.0;

    for (i = 0; i < n; i++) {
        ss += (double) v[i] * v[i];
        if (i > 0 && v[i] > v[best]) {
            second = best;
            best = i;
        } else if (i > 0 && (second < 0 || v[i] > v[second])) {
            second = i;
        }
    }
    *lead = (float) ((v[best] - v[second]) / sqrt(ss / n + 1e-30));
    return best;
}


typedef struct {
    double  worst;
    int     steps;
    int     clear;
    int     clear_agree;
} tally_t;


/* One iteration: sequence s runs tokens [done[s], upto[s]). */
static int
run_step(pl_model_t *m, const fm_golden_t *g, const int *done,
    const int *upto, const int32_t *tables, float *logits)
{
    int32_t     ids[NCASE * MAX_LEN], pos[NCASE * MAX_LEN],
                slots[NCASE * MAX_LEN], qs[NCASE + 1], cl[NCASE],
                rows[NCASE];
    pl_batch_t  b;
    char        err[256];
    int         s, t, n = 0;

    memset(&b, 0, sizeof(b));
    qs[0] = 0;
    for (s = 0; s < NCASE; s++) {
        for (t = done[s]; t < upto[s]; t++) {
            ids[n] = g->cases[s].tok[t];
            pos[n] = t;
            slots[n] = tables[s * SEQ_BLOCKS + t / BLOCK] * BLOCK + t % BLOCK;
            n++;
        }
        qs[s + 1] = n;
        cl[s] = upto[s];
        rows[s] = n - 1;
        b.max_query_len = upto[s] - done[s] > b.max_query_len
                          ? upto[s] - done[s] : b.max_query_len;
        b.max_context_len = upto[s] > b.max_context_len ? upto[s]
                                                        : b.max_context_len;
    }
    b.num_tokens = n;
    b.num_seqs = NCASE;
    b.token_ids = ids;
    b.positions = pos;
    b.slot_mapping = slots;
    b.query_start = qs;
    b.context_lens = cl;
    b.block_tables = tables;
    b.logits_rows = rows;
    b.max_blocks_per_seq = SEQ_BLOCKS;
    if (pl_model_forward(m, &b, logits, err, sizeof(err)) != 0) {
        diag("forward: %s", err);
        return -1;
    }
    return 0;
}


/* Compare sequence s's logits at position p with the reference. */
static void
check_position(const fm_golden_t *g, int s, int p, const float *got,
    tally_t *t)
{
    const float  *ref = fm_golden_row(g, &g->cases[s], p);
    double        e = pair_relerr(got, ref, g->vocab);
    float         lead_ref, lead_got;
    int           want = best_of(ref, g->vocab, &lead_ref);
    int           have = best_of(got, g->vocab, &lead_got);

    t->worst = e > t->worst ? e : t->worst;
    t->steps++;
    if (lead_ref > 2 * LOGIT_BOUND) {
        t->clear++;
        t->clear_agree += want == have;
        if (want != have) {
            diag("case %d position %d: transformers %d, cuda %d (lead %.3f "
                 "rms)", s, p, want, have, lead_ref);
        }
    }
}


static void
test_model(pl_backend_t *be, const char *fixture,
    const pl_model_options_t *opts)
{
    char          err[256];
    fm_golden_t   g;
    pl_model_t   *m = NULL;
    int32_t       tables[NCASE * SEQ_BLOCKS];
    int           done[NCASE] = { 0 }, upto[NCASE], s, i;
    float        *logits;
    tally_t       t = { 0.0, 0, 0, 0 };
    char          name[96];

    snprintf(name, sizeof(name), "%s%s", fixture,
             opts->dtype == PL_MODEL_DTYPE_F16 ? " (--dtype float16)" : "");
    err[0] = '\0';
    if (fm_golden_read(&g, fixture) == 0 && g.n_cases == NCASE) {
        m = fm_open(g.dir, be, opts, NCASE * MAX_LEN, NCASE,
                    NCASE * SEQ_BLOCKS, BLOCK, err, sizeof(err));
    }
    if (!ok(m != NULL, "%s: fixture reads and the model loads on cuda",
            name))
    {
        diag("%s", err[0] ? err : "bad fixture");
        fm_golden_free(&g);
        return;
    }
    for (i = 0; i < NCASE * SEQ_BLOCKS; i++) {
        tables[i] = (i * 5 + 7) % (NCASE * SEQ_BLOCKS);
    }
    logits = malloc((size_t) NCASE * g.vocab * sizeof(float));
    for (s = 0; s < NCASE; s++) {
        upto[s] = g.cases[s].prompt_len;
    }
    for (;;) {
        if (run_step(m, &g, done, upto, tables, logits) != 0) {
            ok(0, "%s: forward runs", name);
            break;
        }
        for (s = 0; s < NCASE; s++) {
            check_position(&g, s, upto[s] - 1, logits + (size_t) s * g.vocab,
                           &t);
            done[s] = upto[s];
        }
        if (upto[0] >= g.cases[0].len || upto[1] >= g.cases[1].len
            || upto[2] >= g.cases[2].len)
        {
            break;
        }
        for (s = 0; s < NCASE; s++) {
            upto[s]++;
        }
    }
    ok(t.worst <= LOGIT_BOUND, "%s: logits of %d steps within %.0e of "
       "transformers' (worst %.2e)", name, t.steps, LOGIT_BOUND, t.worst);
    ok(t.clear > 0 && t.clear_agree == t.clear, "%s: greedy token equals "
       "transformers' on all %d of %d steps with a clear lead", name,
       t.clear_agree, t.clear);
    free(logits);
    fm_golden_free(&g);
    pl_model_free(m);
}


int
main(void)
{
    static const char  *models[] = {
        "llama3_gqa", "llama_tied", "mistral", "qwen2_bias", "opt_pre_ln",
        "opt_post_ln",
    };
    const pl_model_options_t  dflt = { 1, PL_MODEL_DTYPE_AUTO };
    const pl_model_options_t  f16 = { 1, PL_MODEL_DTYPE_F16 };
    char                err[256];
    pl_backend_t       *be;
    size_t              i;

    be = pl_backend_cuda_create(0, err, sizeof(err));
    if (!ok(be != NULL, "cuda backend starts")) {
        diag("%s", err);
        return done_testing();
    }
    for (i = 0; i < sizeof(models) / sizeof(models[0]); i++) {
        test_model(be, models[i], &dflt);
        test_model(be, models[i], &f16);
    }
    be->destroy(be);
    return done_testing();
}
