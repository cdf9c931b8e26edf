/*
 * golden: every architecture on the CPU backend against Hugging Face
 * transformers.  The fixtures under t/fixtures/golden/ were written by
 * tools/golden/make_golden.py (transformers 5.17, torch 2.11): tiny random
 * Llama 3 (GQA, llama3 RoPE scaling, untied, fp32), Llama (tied, linear
 * RoPE scaling, bf16), Mistral (one KV head, head_dim != hidden/heads,
 * sharded into six files), Qwen2 (q/k/v biases, tied), OPT pre-LN (fp16)
 * and OPT post-LN; each with three prompts, transformers' greedy
 * continuation of 16 tokens and its logits at every position.
 *
 * For each model and prompt the test prefills the prompt, then decodes
 * greedily from its own argmax: every token must equal transformers'
 * token, and the logits of every step must match.  Separately it feeds the
 * prompt one token at a time (all positions' logits through the decode
 * path) and all three prompts in one batch, in blocks of 4 tokens; then
 * Llama 3, Mistral and OPT pre-LN greedily again in blocks of 1 to 64
 * tokens (powers of two), each size giving transformers' tokens.
 *
 * Tolerance.  The references are float32 forward passes over exactly the
 * weights in the files (bf16 and fp16 checkpoints were rounded before the
 * reference ran), and the CPU backend computes in float32 too, so the only
 * differences are summation order (dot products of 64 to 128 terms,
 * softmax over up to 45 positions, two layers): a few float32 ulps of the
 * hidden states, amplified by the lm_head's fan-in.  Measured: at most
 * about 2e-5 absolute on logits whose magnitude reaches 30.  The bound,
 * |ours - ref| <= 1e-3 + 1e-4 |ref|, leaves a 20-50x margin over that and
 * is still a thousand times tighter than any real mistake (a wrong
 * position, a missing bias, a norm before instead of after) makes, which
 * moves logits by 0.1 or more.  The greedy steps were chosen (by the
 * generator) with a top-2 gap of at least 0.02, far above the bound, so
 * token equality is exact and not luck.
 *
 * Also: config.json in the transformers 4 spelling gives the same logits,
 * generation_config.json's sampling defaults are read, and options the
 * model does not implement are refused by name.
 */

#include <jansson.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture_model.h"

#define FIXTURES  FM_GOLDEN
#define BS        4             /* block size, but where the block
                                   sizes test sets bs */
#define MAX_TOK   96
#define MAX_SEQ   4
#define MAX_LEN   FM_GOLDEN_LEN
#define ATOL      1e-3
#define RTOL      1e-4

typedef struct {
    int      ctx;               /* tokens already in the cache */
    int32_t  table[MAX_LEN];    /* room for blocks of one token */
} gseq_t;

static int  bs = BS;

/* the pool: MAX_SEQ sequences of MAX_LEN tokens in blocks of bs */
#define NBLK  (MAX_SEQ * MAX_LEN / bs)

static char  tmp[] = "/tmp/pl-golden-XXXXXX";


/* largest |got - want| beyond the tolerance's slack, as a fraction of the
   slack: <= 1 passes */
static double
excess(const float *got, const float *want, int n)
{
    double  worst = 0;
    int     i;

    for (i = 0; i < n; i++) {
        double  e = fabs((double) got[i] - want[i])
                    / (ATOL + RTOL * fabs((double) want[i]));

        worst = e > worst || isnan(e) ? (isnan(e) ? INFINITY : e) : worst;
    }
    return worst;
}


static double
max_abs_diff(const float *got, const float *want, int n)
{
    double  d = 0;
    int     i;

    for (i = 0; i < n; i++) {
        d = fmax(d, fabs((double) got[i] - want[i]));
    }
    return d;
}


static int
argmax(const float *v, int n)
{
    int  i, best = 0;

    for (i = 1; i < n; i++) {
        best = v[i] > v[best] ? i : best;
    }
    return best;
}


/*
 * One batch: sequence s runs tokens toks[s][ctx .. ctx + qlen[s]); blocks
 * are handed out from the top of the pool down (sequence s owns
 * NBLK - 1 - s MAX_LEN / bs downwards), so no sequence's blocks are
 * contiguous in the order it uses them.
 */
static int
run(pl_model_t *m, gseq_t *seqs, const int32_t *const *toks,
    const int *qlen, int n, float *logits)
{
    int32_t     ids[MAX_TOK], pos[MAX_TOK], slot[MAX_TOK], qs[MAX_SEQ + 1];
    int32_t     cl[MAX_SEQ], rows[MAX_SEQ], bt[MAX_SEQ * MAX_LEN];
    int         s, i, at = 0, maxq = 0, maxc = 0, nb = MAX_LEN / bs;
    char        err[512];
    pl_batch_t  b;

    for (s = 0; s < n; s++) {
        for (i = 0; i < nb; i++) {
            seqs[s].table[i] = NBLK - 1 - s * nb - i;
        }
        qs[s] = at;
        for (i = seqs[s].ctx; i < seqs[s].ctx + qlen[s]; i++, at++) {
            ids[at] = toks[s][i];
            pos[at] = i;
            slot[at] = seqs[s].table[i / bs] * bs + i % bs;
        }
        cl[s] = seqs[s].ctx + qlen[s];
        rows[s] = at - 1;
        memcpy(bt + s * nb, seqs[s].table, nb * sizeof(int32_t));
        maxq = qlen[s] > maxq ? qlen[s] : maxq;
        maxc = cl[s] > maxc ? cl[s] : maxc;
    }
    qs[n] = at;
    b = (pl_batch_t) {
        .num_tokens = at, .num_seqs = n, .token_ids = ids, .positions = pos,
        .slot_mapping = slot, .query_start = qs, .context_lens = cl,
        .block_tables = bt, .logits_rows = rows, .max_blocks_per_seq = nb,
        .max_query_len = maxq, .max_context_len = maxc
    };
    if (pl_model_forward(m, &b, logits, err, sizeof(err)) != 0) {
        diag("forward: %s", err);
        return -1;
    }
    for (s = 0; s < n; s++) {
        seqs[s].ctx += qlen[s];
    }
    return 0;
}


static pl_model_t *
load(const char *dir, pl_backend_t *be)
{
    return fm_load(dir, be, MAX_TOK, MAX_SEQ, NBLK, BS);
}


/* Prefill the prompt, then decode from our own argmax: tokens must be
   transformers' and every step's logits within tolerance. */
static void
test_greedy(pl_model_t *m, const fm_golden_t *g, const fm_case_t *c,
    const char *name, int k)
{
    int32_t         seq[MAX_LEN];
    const int32_t  *toks[1] = { seq };
    gseq_t          s = { 0 };
    float           logits[4096];
    int             qlen = c->prompt_len, step, same = 1, rc = 0;
    double          worst = 0, dmax = 0;

    memcpy(seq, c->tok, c->prompt_len * sizeof(int32_t));
    for (step = 0; step < c->len - c->prompt_len && rc == 0; step++) {
        int  pos = c->prompt_len + step - 1;

        rc = run(m, &s, toks, &qlen, 1, logits);
        worst = fmax(worst, excess(logits, fm_golden_row(g, c, pos),
                                   g->vocab));
        dmax = fmax(dmax, max_abs_diff(logits, fm_golden_row(g, c, pos),
                                       g->vocab));
        seq[pos + 1] = argmax(logits, g->vocab);
        same &= seq[pos + 1] == c->tok[pos + 1];
        qlen = 1;
    }
    ok(rc == 0 && same, "%s, prompt %d (%d tokens): greedy continuation "
       "equals transformers' token for token", name, k, c->prompt_len);
    ok(rc == 0 && worst <= 1.0, "%s, prompt %d: logits of the prefill and "
       "every decode step within tolerance (max |diff| %.2g)", name, k,
       dmax);
}


/* The prompt one token at a time: logits of every prompt position. */
static void
test_every_position(pl_model_t *m, const fm_golden_t *g,
    const fm_case_t *c, const char *name, int k)
{
    const int32_t  *toks[1] = { c->tok };
    gseq_t          s = { 0 };
    float           logits[4096];
    int             one = 1, pos, rc = 0;
    double          worst = 0;

    for (pos = 0; pos < c->prompt_len && rc == 0; pos++) {
        rc = run(m, &s, toks, &one, 1, logits);
        worst = fmax(worst, excess(logits, fm_golden_row(g, c, pos),
                                   g->vocab));
    }
    ok(rc == 0 && worst <= 1.0, "%s, prompt %d: logits at every prompt "
       "position, fed one token at a time, within tolerance", name, k);
}


/* All prompts and their continuations in one batch. */
static void
test_batch(pl_model_t *m, const fm_golden_t *g, const char *name)
{
    const int32_t  *toks[MAX_SEQ];
    gseq_t          s[MAX_SEQ] = { { 0 } };
    int             qlen[MAX_SEQ], i, rc;
    float           logits[MAX_SEQ * 4096];
    double          worst = 0;

    for (i = 0; i < g->n_cases; i++) {
        toks[i] = g->cases[i].tok;
        qlen[i] = g->cases[i].len;
    }
    rc = run(m, s, toks, qlen, g->n_cases, logits);
    for (i = 0; rc == 0 && i < g->n_cases; i++) {
        const fm_case_t  *c = &g->cases[i];

        worst = fmax(worst, excess(logits + (long) i * g->vocab,
                                   fm_golden_row(g, c, c->len - 1),
                                   g->vocab));
    }
    ok(rc == 0 && worst <= 1.0, "%s: all prompts with their continuations "
       "in one batch give the last positions' logits", name);
}


static void
test_model(pl_backend_t *be, const char *name)
{
    fm_golden_t  g;
    pl_model_t  *m;
    int          k;

    if (fm_golden_read(&g, name) != 0 || g.vocab > 4096) {
        ok(0, "%s: the fixture reads", name);
        fm_golden_free(&g);
        return;
    }
    m = load(g.dir, be);
    ok(m != NULL, "%s: the model loads", name);
    for (k = 0; m != NULL && k < g.n_cases; k++) {
        test_greedy(m, &g, &g.cases[k], name, k);
        test_every_position(m, &g, &g.cases[k], name, k);
    }
    if (m != NULL) {
        test_batch(m, &g, name);
    }
    pl_model_free(m);
    fm_golden_free(&g);
}


/* Block sizes 1 to 64 (powers of two) on three architectures: the cache
   made again for each, the same greedy tokens and logits as transformers
   (and so as every other size), one prompt at a time and all in a batch. */
static void
test_block_sizes(pl_backend_t *be)
{
    static const char  *names[] = { "llama3_gqa", "mistral", "opt_pre_ln" };
    char                what[64], err[512];
    fm_golden_t         g;
    pl_model_t         *m;
    size_t              i;
    int                 k;

    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (fm_golden_read(&g, names[i]) != 0 || g.vocab > 4096) {
            ok(0, "%s: the fixture reads", names[i]);
            fm_golden_free(&g);
            continue;
        }
        m = load(g.dir, be);
        for (bs = 1; m != NULL && bs <= 64; bs *= 2) {
            snprintf(what, sizeof(what), "%s, blocks of %d", names[i], bs);
            if (!ok(pl_model_kv_alloc(m, NBLK, bs, err, sizeof(err)) == 0,
                    "%s: a cache of %d blocks", what, NBLK))
            {
                diag("%s", err);
                continue;
            }
            for (k = 0; k < g.n_cases; k++) {
                test_greedy(m, &g, &g.cases[k], what, k);
            }
            test_batch(m, &g, what);
        }
        bs = BS;
        pl_model_free(m);
        fm_golden_free(&g);
    }
}


/* ---- config.json spellings, sampling defaults, refusals ---- */

/* dst/name -> the fixture's file (absolute) */
static void
link_file(const char *fixture, const char *dst, const char *name)
{
    char  from[512], to[512], cwd[256];

    if (getcwd(cwd, sizeof(cwd)) == NULL) {
        cwd[0] = '\0';
    }
    snprintf(from, sizeof(from), "%s/" FIXTURES "/%s/%s", cwd, fixture,
             name);
    snprintf(to, sizeof(to), "%s/%s", dst, name);
    unlink(to);
    if (symlink(from, to) != 0) {
        diag("symlink %s: failed", to);
    }
}


/* A folder tmp/name using fixture's weights, with its config.json patched:
   set merged in, unset's keys removed. */
static const char *
patched(const char *fixture, const char *name, const char *set,
    const char *unset)
{
    static char    dir[320];
    char           path[400], keys[256], *key, *save;
    json_t        *cfg, *patch;
    json_error_t   jerr;

    snprintf(dir, sizeof(dir), "%s/%s", tmp, name);
    mkdir(dir, 0700);
    link_file(fixture, dir, "model.safetensors");
    snprintf(path, sizeof(path), FIXTURES "/%s/config.json", fixture);
    cfg = json_load_file(path, 0, &jerr);
    patch = set != NULL ? json_loads(set, 0, &jerr) : NULL;
    if (patch != NULL) {
        json_object_update(cfg, patch);
        json_decref(patch);
    }
    snprintf(keys, sizeof(keys), "%s", unset ? unset : "");
    for (key = strtok_r(keys, " ", &save); key != NULL;
         key = strtok_r(NULL, " ", &save))
    {
        json_object_del(cfg, key);
    }
    snprintf(path, sizeof(path), "%s/config.json", dir);
    json_dump_file(cfg, path, 0);
    json_decref(cfg);
    return dir;
}


static void
refuse(pl_backend_t *be, const char *dir, const char *fragment,
    const char *what)
{
    char         err[512] = "";
    pl_model_t  *m = pl_model_load(dir, be, err, sizeof(err));

    ok(m == NULL && strstr(err, fragment) != NULL, "refuses %s", what);
    if (m != NULL || strstr(err, fragment) == NULL) {
        diag("got \"%s\"", err);
    }
    pl_model_free(m);
}


/* last-position logits of the first golden prompt */
static int
prompt_logits(pl_backend_t *be, const char *dir, const fm_case_t *c,
    float *logits)
{
    const int32_t  *toks[1] = { c->tok };
    gseq_t          s = { 0 };
    pl_model_t     *m = load(dir, be);
    int             rc = m != NULL ? run(m, &s, toks, &c->prompt_len, 1,
                                         logits) : -1;

    pl_model_free(m);
    return rc;
}


static void
test_v4_spelling(pl_backend_t *be)
{
    fm_golden_t  g;
    float        a[4096], b[4096];
    const char  *dir;

    if (fm_golden_read(&g, "llama3_gqa") != 0) {
        ok(0, "llama3_gqa: the fixture reads");
        return;
    }
    dir = patched("llama3_gqa", "v4", "{\"rope_theta\": 500000.0, "
                  "\"torch_dtype\": \"float32\", \"rope_scaling\": "
                  "{\"rope_type\": \"llama3\", \"factor\": 8.0, "
                  "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                  "\"original_max_position_embeddings\": 32}}",
                  "rope_parameters dtype");
    ok(prompt_logits(be, g.dir, &g.cases[0], a) == 0
       && prompt_logits(be, dir, &g.cases[0], b) == 0
       && memcmp(a, b, g.vocab * sizeof(float)) == 0,
       "config.json spelled as transformers 4 wrote it (rope_theta, "
       "rope_scaling, torch_dtype) gives the same logits");
    dir = patched("llama3_gqa", "norope", NULL, "rope_parameters");
    ok(prompt_logits(be, dir, &g.cases[0], b) == 0
       && excess(b, a, g.vocab) > 1.0,
       "without its RoPE scaling the same weights give other logits (the "
       "scaling is honoured)");
    fm_golden_free(&g);
}


static void
test_generation_defaults(pl_backend_t *be)
{
    char                      err[512];
    pl_model_t               *m;
    const pl_model_config_t  *c;

    m = pl_model_load(FIXTURES "/llama3_gqa", be, err, sizeof(err));
    c = m ? pl_model_config(m) : NULL;
    ok(c != NULL && fabsf(c->default_temperature - 0.6f) < 1e-6f
       && fabsf(c->default_top_p - 0.9f) < 1e-6f && c->default_top_k == 40
       && c->n_eos == 2 && c->eos_token_ids[1] == 3,
       "generation_config.json's temperature, top_p, top_k and eos list "
       "are read");
    pl_model_free(m);
    m = pl_model_load(FIXTURES "/opt_post_ln", be, err, sizeof(err));
    c = m ? pl_model_config(m) : NULL;
    ok(c != NULL && c->default_temperature == -1.0f
       && c->default_top_p == -1.0f && c->default_top_k == -1
       && strcmp(c->arch, "opt") == 0 && c->dtype == PL_DT_F32
       && c->num_kv_heads == 4 && c->head_dim == 16,
       "sampling defaults a generation_config.json leaves out are -1; OPT's "
       "sizes are derived");
    pl_model_free(m);
}


static void
test_refusals(pl_backend_t *be)
{
    refuse(be, patched("opt_post_ln", "proj", "{\"word_embed_proj_dim\": "
           "32}", NULL), "word_embed_proj_dim", "OPT with an embedding "
           "projection (word_embed_proj_dim != hidden_size)");
    refuse(be, patched("opt_post_ln", "gelu", "{\"activation_function\": "
           "\"gelu\"}", NULL), "activation_function",
           "OPT with another activation");
    refuse(be, patched("opt_post_ln", "nobias", "{\"enable_bias\": false}",
           NULL), "enable_bias", "OPT without biases");
    refuse(be, patched("qwen2_bias", "swa", "{\"use_sliding_window\": "
           "true}", NULL), "use_sliding_window",
           "Qwen2 with its sliding window on");
    refuse(be, patched("qwen2_bias", "layers", "{\"layer_types\": "
           "[\"full_attention\", \"sliding_attention\"]}", NULL),
           "layer_types", "a sliding-attention layer type");
    refuse(be, patched("llama3_gqa", "mistralswa", "{\"architectures\": "
           "[\"MistralForCausalLM\"], \"sliding_window\": 4096}", NULL),
           "sliding_window", "Mistral with a sliding window");
    refuse(be, patched("llama3_gqa", "quant", "{\"quantization_config\": "
           "{\"quant_method\": \"awq\"}}", NULL), "quantization_config",
           "a quantized checkpoint");
    refuse(be, patched("llama3_gqa", "partial", "{\"rope_parameters\": "
           "{\"rope_type\": \"default\", \"rope_theta\": 10000.0, "
           "\"partial_rotary_factor\": 0.5}}", NULL),
           "partial_rotary_factor", "partial rotary embeddings");
    refuse(be, patched("llama3_gqa", "yarn", "{\"rope_parameters\": "
           "{\"rope_type\": \"yarn\", \"rope_theta\": 10000.0, "
           "\"factor\": 4.0}}", NULL), "'rope_parameters' has type 'yarn'",
           "an unknown rope type");
    refuse(be, patched("llama3_gqa", "phi", "{\"architectures\": "
           "[\"PhiForCausalLM\"], \"model_type\": \"phi\"}", NULL),
           "PhiForCausalLM", "another architecture");
}


/* A backend without OPT's optional operations refuses OPT, not Llama. */
static void
test_backend_without_opt_ops(pl_backend_t *be)
{
    pl_backend_t  lean = *be;
    char          err[512] = "";
    pl_model_t   *m;

    lean.layernorm = NULL;
    m = pl_model_load(FIXTURES "/opt_pre_ln", &lean, err, sizeof(err));
    ok(m == NULL && strstr(err, "layernorm") != NULL,
       "a backend without layernorm refuses OPT by naming the operation");
    pl_model_free(m);
    m = pl_model_load(FIXTURES "/llama_tied", &lean, err, sizeof(err));
    ok(m != NULL, "the same backend still loads Llama");
    pl_model_free(m);
}


/* OPT has max_position_embeddings learned positions: one past is an
   error, not a read past the table. */
static void
test_opt_position_limit(pl_backend_t *be)
{
    char         err[512] = "";
    pl_model_t  *m = pl_model_load(FIXTURES "/opt_post_ln", be, err,
                                   sizeof(err));
    int          max = m ? pl_model_config(m)->max_position_embeddings : 0;
    int32_t      tok = 5, pos = max, slot = max, qs[2] = { 0, 1 };
    int32_t      cl = max + 1, row = 0, bt[64];
    float        logits[4096];
    pl_batch_t   b = {
        .num_tokens = 1, .num_seqs = 1, .token_ids = &tok, .positions = &pos,
        .slot_mapping = &slot, .query_start = qs, .context_lens = &cl,
        .block_tables = bt, .logits_rows = &row, .max_blocks_per_seq = 64,
        .max_query_len = 1, .max_context_len = max + 1
    };
    int          i;

    for (i = 0; i < 64; i++) {
        bt[i] = i;
    }
    ok(m != NULL && pl_model_prepare(m, 8, 1, err, sizeof(err)) == 0
       && pl_model_kv_alloc(m, 64, BS, err, sizeof(err)) == 0
       && pl_model_forward(m, &b, logits, err, sizeof(err)) == -1
       && strstr(err, "learned positions") != NULL,
       "OPT refuses a token past its learned positions");
    pl_model_free(m);
}


int
main(void)
{
    static const char  *models[] = {
        "llama3_gqa", "llama_tied", "mistral", "qwen2_bias", "opt_pre_ln",
        "opt_post_ln"
    };
    char                err[256];
    pl_backend_t       *be = pl_backend_cpu_create(2, err, sizeof(err));
    size_t              i;

    if (be == NULL || access(FIXTURES, R_OK) != 0 || mkdtemp(tmp) == NULL) {
        printf("Bail out! no CPU backend, no %s (run from the repository "
               "root) or no temp folder\n", FIXTURES);
        return 1;
    }
    for (i = 0; i < sizeof(models) / sizeof(models[0]); i++) {
        test_model(be, models[i]);
    }
    test_block_sizes(be);
    test_v4_spelling(be);
    test_generation_defaults(be);
    test_refusals(be);
    test_backend_without_opt_ops(be);
    test_opt_position_limit(be);
    be->destroy(be);
    fm_rmtree(tmp);
    return done_testing();
}
