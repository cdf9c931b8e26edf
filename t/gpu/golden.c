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

#include <jansson.h>
#include <stdio.h>

#include "pair.h"
#include "pl_model.h"

#define FIXTURES     "t/fixtures/golden"
#define NCASE        3
#define MAX_LEN      64
#define BLOCK        16
#define SEQ_BLOCKS   (MAX_LEN / BLOCK)
#define LOGIT_BOUND  3e-2

typedef struct {
    int32_t  tok[MAX_LEN];
    int      len;
    int      prompt_len;
    long     offset;            /* floats into logits.bin */
} gcase_t;

typedef struct {
    gcase_t  cases[NCASE];
    int      vocab;
    float   *ref;               /* logits.bin */
    long     n_ref;
} golden_t;


static float *
read_floats(const char *path, long *n)
{
    FILE   *f = fopen(path, "rb");
    float  *v = NULL;
    long    size;

    *n = 0;
    if (f == NULL) {
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > 0
        && fseek(f, 0, SEEK_SET) == 0 && (v = malloc(size)) != NULL
        && fread(v, 1, size, f) == (size_t) size)
    {
        *n = size / (long) sizeof(float);
    }
    fclose(f);
    return v;
}


static int
read_case(gcase_t *c, json_t *j)
{
    json_t  *prompt = json_object_get(j, "prompt");
    json_t  *greedy = json_object_get(j, "greedy");
    size_t   np = json_array_size(prompt), ng = json_array_size(greedy), i;

    if (np == 0 || ng == 0 || np + ng > MAX_LEN) {
        return -1;
    }
    for (i = 0; i < np + ng; i++) {
        c->tok[i] = (int32_t) json_integer_value(
            i < np ? json_array_get(prompt, i)
                   : json_array_get(greedy, i - np));
    }
    c->prompt_len = (int) np;
    c->len = (int) (np + ng);
    c->offset = (long) json_integer_value(json_object_get(j,
                                                          "logits_offset"));
    return 0;
}


static int
read_golden(golden_t *g, const char *dir)
{
    char          path[512];
    json_error_t  jerr;
    json_t       *root, *cases;
    int           i, rc = 0;

    snprintf(path, sizeof(path), "%s/golden.json", dir);
    root = json_load_file(path, 0, &jerr);
    cases = json_object_get(root, "cases");
    if (root == NULL || json_array_size(cases) != NCASE) {
        json_decref(root);
        return -1;
    }
    g->vocab = (int) json_integer_value(json_object_get(root, "vocab_size"));
    for (i = 0; i < NCASE; i++) {
        rc |= read_case(&g->cases[i], json_array_get(cases, i));
    }
    json_decref(root);
    snprintf(path, sizeof(path), "%s/logits.bin", dir);
    g->ref = read_floats(path, &g->n_ref);
    for (i = 0; rc == 0 && i < NCASE; i++) {
        rc = g->cases[i].offset + (long) g->cases[i].len * g->vocab
             > g->n_ref;
    }
    return g->ref != NULL && rc == 0 ? 0 : -1;
}


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
run_step(pl_model_t *m, const golden_t *g, const int *done, const int *upto,
    const int32_t *tables, float *logits)
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
check_position(const golden_t *g, int s, int p, const float *got,
    tally_t *t)
{
    const gcase_t  *c = &g->cases[s];
    const float    *ref = g->ref + c->offset + (long) p * g->vocab;
    double          e = pair_relerr(got, ref, g->vocab);
    float           lead_ref, lead_got;
    int             want = best_of(ref, g->vocab, &lead_ref);
    int             have = best_of(got, g->vocab, &lead_got);

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
    char          dir[256], err[256];
    golden_t      g;
    pl_model_t   *m;
    int32_t       tables[NCASE * SEQ_BLOCKS];
    int           done[NCASE] = { 0 }, upto[NCASE], s, i;
    float        *logits;
    tally_t       t = { 0.0, 0, 0, 0 };
    char          name[96];

    snprintf(dir, sizeof(dir), FIXTURES "/%s", fixture);
    snprintf(name, sizeof(name), "%s%s", fixture,
             opts->dtype == PL_MODEL_DTYPE_F16 ? " (--dtype float16)" : "");
    memset(&g, 0, sizeof(g));
    err[0] = '\0';
    m = pl_model_load_opts(dir, be, opts, err, sizeof(err));
    if (!ok(read_golden(&g, dir) == 0 && m != NULL
            && pl_model_prepare(m, NCASE * MAX_LEN, NCASE, err,
                                sizeof(err)) == 0
            && pl_model_kv_alloc(m, NCASE * SEQ_BLOCKS, BLOCK, err,
                                 sizeof(err)) == 0,
            "%s: fixture reads and the model loads on cuda", name))
    {
        diag("%s", m == NULL || err[0] ? err : "bad fixture");
        pl_model_free(m);
        free(g.ref);
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
    free(g.ref);
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
