/*
 * forward: the Llama forward pass on the CPU backend against a naive
 * reference written here (contiguous fp32 tensors, full causal attention,
 * no paging, double accumulation), on random models written to a temp
 * folder in bf16, f32 and f16, with and without RoPE scaling and tied
 * embeddings.  Then: chunked prefill and decode through shuffled blocks,
 * batching, batch validation, refusals at load time, and the bundled tiny
 * model.
 */

#include <jansson.h>
#include <libgen.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture_model.h"

#define MAX_T     80
#define BS        4
#define NBLK      96
#define MAX_TOK   128
#define MAX_SEQ   4

/* ---- a random model, kept as fp32 for the reference ---- */

typedef struct {
    char    name[96];
    int     rows;           /* 0: a vector */
    int     cols;
    float  *val;
} tensor_t;

typedef struct {
    int         V, H, I, L, NH, NKV, HD, tied;
    double      eps, theta;
    const char *rope;       /* NULL, "linear" or "llama3" */
    double      factor;
    pl_dtype_t  dt;
    tensor_t    t[MAX_T];
    int         n;
} rmodel_t;

static uint64_t  seed = 99;
static char      tmp[] = "/tmp/pl-fwd-XXXXXX";


static double
urand(void)
{
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double) (seed >> 11) * 0x1p-53;
}


/* v rounded to what dtype dt can hold */
static float
round_to(pl_dtype_t dt, float v)
{
    switch (dt) {
    case PL_DT_BF16:
        return pl_bf16_to_f32(pl_f32_to_bf16(v));
    case PL_DT_F16:
        return pl_f16_to_f32(pl_f32_to_f16(v));
    default:
        return v;
    }
}


static void
add(rmodel_t *m, const char *name, int rows, int cols, double scale,
    double mean)
{
    tensor_t  *t = &m->t[m->n++];
    int        i, n = (rows ? rows : 1) * cols;

    snprintf(t->name, sizeof(t->name), "%s", name);
    t->rows = rows;
    t->cols = cols;
    t->val = malloc(n * sizeof(float));
    for (i = 0; i < n; i++) {
        t->val[i] = round_to(m->dt, (float) (mean + scale
                                             * (2.0 * urand() - 1.0)));
    }
}


static const float *
W(const rmodel_t *m, const char *fmt, int layer)
{
    char  name[96];
    int   i;

    snprintf(name, sizeof(name), fmt, layer);
    for (i = 0; i < m->n; i++) {
        if (strcmp(m->t[i].name, name) == 0) {
            return m->t[i].val;
        }
    }
    fprintf(stderr, "no tensor %s\n", name);
    exit(2);
}


static void
make_model(rmodel_t *m, pl_dtype_t dt, int tied, const char *rope)
{
    char  n[96];
    int   l;

    *m = (rmodel_t) {
        .V = 97, .H = 32, .I = 48, .L = 2, .NH = 4, .NKV = 2, .HD = 12,
        .tied = tied, .eps = 1e-5, .theta = 10000.0, .rope = rope,
        .factor = 2.0, .dt = dt
    };
    add(m, "model.embed_tokens.weight", m->V, m->H, 1.0, 0.0);
    for (l = 0; l < m->L; l++) {
#define T(s)  (snprintf(n, sizeof(n), "model.layers.%d." s, l), n)
        add(m, T("input_layernorm.weight"), 0, m->H, 0.2, 1.0);
        add(m, T("self_attn.q_proj.weight"), m->NH * m->HD, m->H, 0.35, 0);
        add(m, T("self_attn.k_proj.weight"), m->NKV * m->HD, m->H, 0.35, 0);
        add(m, T("self_attn.v_proj.weight"), m->NKV * m->HD, m->H, 0.35, 0);
        add(m, T("self_attn.o_proj.weight"), m->H, m->NH * m->HD, 0.3, 0);
        add(m, T("post_attention_layernorm.weight"), 0, m->H, 0.2, 1.0);
        add(m, T("mlp.gate_proj.weight"), m->I, m->H, 0.35, 0);
        add(m, T("mlp.up_proj.weight"), m->I, m->H, 0.35, 0);
        add(m, T("mlp.down_proj.weight"), m->H, m->I, 0.25, 0);
#undef T
    }
    add(m, "model.norm.weight", 0, m->H, 0.2, 1.0);
    if (!tied) {
        add(m, "lm_head.weight", m->V, m->H, 0.4, 0.0);
    }
}


static void
free_model(rmodel_t *m)
{
    int  i;

    for (i = 0; i < m->n; i++) {
        free(m->t[i].val);
    }
}


/* ---- writing the folder ---- */

static json_t *
config_json(const rmodel_t *m)
{
    json_t  *c = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i,"
                           " s:i, s:f, s:f, s:b, s:i, s:i, s:s}",
                           "architectures", "LlamaForCausalLM",
                           "model_type", "llama", "vocab_size", m->V,
                           "hidden_size", m->H, "intermediate_size", m->I,
                           "num_hidden_layers", m->L,
                           "num_attention_heads", m->NH,
                           "num_key_value_heads", m->NKV, "head_dim", m->HD,
                           "max_position_embeddings", 4096,
                           "rms_norm_eps", m->eps, "rope_theta", m->theta,
                           "tie_word_embeddings", m->tied,
                           "bos_token_id", 1, "eos_token_id", 2,
                           "torch_dtype", m->dt == PL_DT_F32 ? "float32"
                           : m->dt == PL_DT_F16 ? "float16" : "bfloat16");

    if (m->rope != NULL && strcmp(m->rope, "linear") == 0) {
        json_object_set_new(c, "rope_scaling", json_pack("{s:s, s:f}",
                            "type", "linear", "factor", m->factor));
    } else if (m->rope != NULL) {
        json_object_set_new(c, "rope_scaling", json_pack(
                            "{s:s, s:f, s:f, s:f, s:i}", "rope_type",
                            "llama3", "factor", m->factor,
                            "low_freq_factor", 1.0, "high_freq_factor", 4.0,
                            "original_max_position_embeddings", 64));
    }
    return c;
}


static void
write_json(const char *dir, const char *name, json_t *doc)
{
    char  path[256];

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    json_dump_file(doc, path, 0);
    json_decref(doc);
}


/* model.safetensors; the tensor named bad (if any) gets one row more */
static void
write_weights(const rmodel_t *m, const char *dir, const char *bad)
{
    json_t      *hdr = json_object();
    size_t       off = 0, es = pl_dtype_size(m->dt);
    char         path[256], *text;
    uint64_t     hlen;
    FILE        *f;
    int          i, j;

    for (i = 0; i < m->n; i++) {
        const tensor_t  *t = &m->t[i];
        int              rows = t->rows + (bad && !strcmp(bad, t->name));
        size_t           bytes = (size_t) (rows ? rows : 1) * t->cols * es;

        json_object_set_new(hdr, t->name, json_pack(
            "{s:s, s:o, s:[I, I]}", "dtype", pl_dtype_name(m->dt), "shape",
            rows ? json_pack("[i, i]", rows, t->cols)
                 : json_pack("[i]", t->cols),
            "data_offsets", (json_int_t) off, (json_int_t) (off + bytes)));
        off += bytes;
    }
    text = json_dumps(hdr, JSON_COMPACT);
    hlen = strlen(text);
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    f = fopen(path, "wb");
    fwrite(&hlen, 8, 1, f);
    fputs(text, f);
    for (i = 0; i < m->n; i++) {
        const tensor_t  *t = &m->t[i];
        int              n = ((t->rows ? t->rows : 1)
                              + (bad && !strcmp(bad, t->name))) * t->cols;

        for (j = 0; j < n; j++) {
            float     v = j < (t->rows ? t->rows : 1) * t->cols ? t->val[j]
                                                                : 0.0f;
            uint16_t  h = m->dt == PL_DT_BF16 ? pl_f32_to_bf16(v)
                                              : pl_f32_to_f16(v);

            fwrite(m->dt == PL_DT_F32 ? (void *) &v : (void *) &h, es, 1, f);
        }
    }
    fclose(f);
    free(text);
    json_decref(hdr);
}


static const char *
write_model(const rmodel_t *m, const char *name)
{
    static char  dir[256];

    snprintf(dir, sizeof(dir), "%s/%s", tmp, name);
    mkdir(dir, 0755);
    write_json(dir, "config.json", config_json(m));
    write_weights(m, dir, NULL);
    return dir;
}


/* ---- the reference forward pass ---- */

static void
ref_inv_freq(const rmodel_t *m, double *inv)
{
    int  i;

    for (i = 0; i < m->HD / 2; i++) {
        double  f = pow(m->theta, -2.0 * i / m->HD);
        double  wl = 2 * M_PI / f, sm;

        if (m->rope != NULL && strcmp(m->rope, "linear") == 0) {
            f /= m->factor;
        } else if (m->rope != NULL) {
            /* llama3 with original context 64, factors 1 and 4 */
            if (wl > 64.0) {
                f /= m->factor;
            } else if (wl >= 16.0) {
                sm = (64.0 / wl - 1.0) / 3.0;
                f = (1 - sm) * f / m->factor + sm * f;
            }
        }
        inv[i] = f;
    }
}


static void
ref_norm(double *out, const double *x, const float *w, int n, double eps)
{
    double  ss = 0;
    int     i;

    for (i = 0; i < n; i++) {
        ss += x[i] * x[i];
    }
    for (i = 0; i < n; i++) {
        out[i] = x[i] / sqrt(ss / n + eps) * w[i];
    }
}


/* out[rows] = w[rows][cols] . x[cols] */
static void
ref_mv(double *out, const float *w, const double *x, int rows, int cols)
{
    int  r, c;

    for (r = 0; r < rows; r++) {
        double  s = 0;

        for (c = 0; c < cols; c++) {
            s += (double) w[(size_t) r * cols + c] * x[c];
        }
        out[r] = s;
    }
}


static void
ref_rope(double *v, int heads, int hd, int pos, const double *inv)
{
    int  h, i;

    for (h = 0; h < heads; h++) {
        for (i = 0; i < hd / 2; i++) {
            double  a = pos * inv[i], x0 = v[h * hd + i];
            double  x1 = v[h * hd + i + hd / 2];

            v[h * hd + i] = x0 * cos(a) - x1 * sin(a);
            v[h * hd + i + hd / 2] = x1 * cos(a) + x0 * sin(a);
        }
    }
}


/* attention of query row i over k/v rows 0..i, all heads */
static void
ref_attend(double *out, const double *q, const double *k, const double *v,
    int i, const rmodel_t *m)
{
    int     kvd = m->NKV * m->HD, h, t, d;
    double  s[256];

    for (h = 0; h < m->NH; h++) {
        int     g = h / (m->NH / m->NKV);
        double  mx = -INFINITY, sum = 0;

        for (t = 0; t <= i; t++) {
            s[t] = 0;
            for (d = 0; d < m->HD; d++) {
                s[t] += q[h * m->HD + d] * k[t * kvd + g * m->HD + d];
            }
            s[t] /= sqrt(m->HD);
            mx = s[t] > mx ? s[t] : mx;
        }
        for (t = 0; t <= i; t++) {
            s[t] = exp(s[t] - mx);
            sum += s[t];
        }
        for (d = 0; d < m->HD; d++) {
            double  acc = 0;

            for (t = 0; t <= i; t++) {
                acc += s[t] * v[t * kvd + g * m->HD + d];
            }
            out[h * m->HD + d] = acc / sum;
        }
    }
}


/* logits[n][V] for every position of tokens[n] */
static double *
ref_forward(const rmodel_t *m, const int32_t *tok, int n)
{
    int      H = m->H, qd = m->NH * m->HD, kvd = m->NKV * m->HD;
    double  *x = calloc((size_t) n * H, sizeof(double));
    double  *k = malloc((size_t) n * kvd * sizeof(double));
    double  *v = malloc((size_t) n * kvd * sizeof(double));
    double  *logits = malloc((size_t) n * m->V * sizeof(double));
    double   h[64], q[64], a[64], o[64], g[64], u[64], inv[32];
    int      l, i, j;

    ref_inv_freq(m, inv);
    for (i = 0; i < n; i++) {
        for (j = 0; j < H; j++) {
            x[i * H + j] = W(m, "model.embed_tokens.weight", 0)
                               [(size_t) tok[i] * H + j];
        }
    }
    for (l = 0; l < m->L; l++) {
        for (i = 0; i < n; i++) {       /* keys and values of every row */
            ref_norm(h, x + i * H, W(m, "model.layers.%d.input_layernorm"
                                     ".weight", l), H, m->eps);
            ref_mv(k + i * kvd, W(m, "model.layers.%d.self_attn.k_proj"
                                  ".weight", l), h, kvd, H);
            ref_mv(v + i * kvd, W(m, "model.layers.%d.self_attn.v_proj"
                                  ".weight", l), h, kvd, H);
            ref_rope(k + i * kvd, m->NKV, m->HD, i, inv);
        }
        for (i = 0; i < n; i++) {
            ref_norm(h, x + i * H, W(m, "model.layers.%d.input_layernorm"
                                     ".weight", l), H, m->eps);
            ref_mv(q, W(m, "model.layers.%d.self_attn.q_proj.weight", l), h,
                   qd, H);
            ref_rope(q, m->NH, m->HD, i, inv);
            ref_attend(a, q, k, v, i, m);
            ref_mv(o, W(m, "model.layers.%d.self_attn.o_proj.weight", l), a,
                   H, qd);
            for (j = 0; j < H; j++) {
                x[i * H + j] += o[j];
            }
            ref_norm(h, x + i * H, W(m, "model.layers.%d."
                                     "post_attention_layernorm.weight", l),
                     H, m->eps);
            ref_mv(g, W(m, "model.layers.%d.mlp.gate_proj.weight", l), h,
                   m->I, H);
            ref_mv(u, W(m, "model.layers.%d.mlp.up_proj.weight", l), h,
                   m->I, H);
            for (j = 0; j < m->I; j++) {
                g[j] = g[j] / (1 + exp(-g[j])) * u[j];
            }
            ref_mv(o, W(m, "model.layers.%d.mlp.down_proj.weight", l), g, H,
                   m->I);
            for (j = 0; j < H; j++) {
                x[i * H + j] += o[j];
            }
        }
    }
    for (i = 0; i < n; i++) {
        ref_norm(h, x + i * H, W(m, "model.norm.weight", 0), H, m->eps);
        ref_mv(logits + (size_t) i * m->V,
               W(m, m->tied ? "model.embed_tokens.weight" : "lm_head.weight",
                 0), h, m->V, H);
    }
    free(x); free(k); free(v);
    return logits;
}


/* ---- driving the model through paged batches ---- */

typedef struct {
    const int32_t  *tok;
    int             ctx;            /* tokens already in the cache */
    int32_t         table[MAX_TOK / BS + 8];
    int             nblk;
} tseq_t;

static int32_t  free_blocks[NBLK];
static int      n_free;


/* a pool handing out physical blocks in a shuffled order */
static void
reset_pool(void)
{
    int  i, j;

    for (i = 0; i < NBLK; i++) {
        free_blocks[i] = i;
    }
    for (i = NBLK - 1; i > 0; i--) {
        int32_t  t = free_blocks[i];

        j = (int) (urand() * (i + 1));
        free_blocks[i] = free_blocks[j];
        free_blocks[j] = t;
    }
    n_free = NBLK;
}


/* Run one batch: sequence s gets qlen[s] new tokens; logits[s][V]. */
static int
run(pl_model_t *m, tseq_t *seqs, const int *qlen, int n, float *logits,
    char *err, size_t errlen)
{
    int32_t     ids[MAX_TOK], pos[MAX_TOK], slot[MAX_TOK], qs[MAX_SEQ + 1];
    int32_t     cl[MAX_SEQ], rows[MAX_SEQ], bt[MAX_SEQ * 40];
    int         s, i, at = 0, maxb = 1, maxq = 0, maxc = 0, rc;
    pl_batch_t  b;

    for (s = 0; s < n; s++) {
        tseq_t  *q = &seqs[s];
        int      end = q->ctx + qlen[s];

        while (q->nblk * BS < end) {
            q->table[q->nblk++] = free_blocks[--n_free];
        }
        maxb = q->nblk > maxb ? q->nblk : maxb;
    }
    for (s = 0; s < n; s++) {
        tseq_t  *q = &seqs[s];

        qs[s] = at;
        for (i = q->ctx; i < q->ctx + qlen[s]; i++, at++) {
            ids[at] = q->tok[i];
            pos[at] = i;
            slot[at] = q->table[i / BS] * BS + i % BS;
        }
        cl[s] = q->ctx + qlen[s];
        rows[s] = at - 1;
        memset(bt + s * maxb, 0, maxb * sizeof(int32_t));
        memcpy(bt + s * maxb, q->table, q->nblk * sizeof(int32_t));
        maxq = qlen[s] > maxq ? qlen[s] : maxq;
        maxc = cl[s] > maxc ? cl[s] : maxc;
    }
    qs[n] = at;
    b = (pl_batch_t) {
        .num_tokens = at, .num_seqs = n, .token_ids = ids, .positions = pos,
        .slot_mapping = slot, .query_start = qs, .context_lens = cl,
        .block_tables = bt, .logits_rows = rows, .max_blocks_per_seq = maxb,
        .max_query_len = maxq, .max_context_len = maxc
    };
    rc = pl_model_forward(m, &b, logits, err, errlen);
    for (s = 0; rc == 0 && s < n; s++) {
        seqs[s].ctx += qlen[s];
    }
    return rc;
}


/* relative difference of model logits and the reference's row */
static double
rel_diff(const float *got, const double *want, int n)
{
    double  d = 0, scale = 1;
    int     i;

    for (i = 0; i < n; i++) {
        double  e = fabs(got[i] - want[i]);

        d = (e > d || isnan(e)) ? (isnan(e) ? INFINITY : e) : d;
        scale = fabs(want[i]) > scale ? fabs(want[i]) : scale;
    }
    return d / scale;
}


static pl_model_t *
load(const char *dir, pl_backend_t *be)
{
    return fm_load(dir, be, MAX_TOK, MAX_SEQ, NBLK, BS);
}


static void
random_tokens(int32_t *tok, int n, int vocab)
{
    int  i;

    for (i = 0; i < n; i++) {
        tok[i] = (int32_t) (urand() * vocab);
    }
}


static void
test_prefill_lengths(pl_model_t *m, const rmodel_t *rm, const char *what)
{
    static const int  lens[] = { 1, 7, 16, 33, 100 };
    int32_t           tok[100];
    float             logits[128];
    char              err[512];
    size_t            i;

    random_tokens(tok, 100, rm->V);
    for (i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        tseq_t   s = { .tok = tok };
        double  *ref = ref_forward(rm, tok, lens[i]);
        int      rc;

        reset_pool();
        rc = run(m, &s, &lens[i], 1, logits, err, sizeof(err));
        ok(rc == 0 && rel_diff(logits, ref + (size_t) (lens[i] - 1) * rm->V,
                               rm->V) < 1e-3,
           "%s: a %d-token prompt gives the reference's last logits", what,
           lens[i]);
        if (rc != 0) {
            diag("%s", err);
        } else {
            diag("relative difference %.2g", rel_diff(logits, ref
                 + (size_t) (lens[i] - 1) * rm->V, rm->V));
        }
        free(ref);
    }
}


static void
test_chunked_prefill_and_decode(pl_model_t *m, const rmodel_t *rm,
    const char *what)
{
    int32_t   tok[50];
    tseq_t    s = { .tok = tok };
    int       chunk1 = 23, chunk2 = 17, one = 1, step, bad = 0;
    double   *ref;
    float     logits[128];
    char      err[512];

    random_tokens(tok, 50, rm->V);
    ref = ref_forward(rm, tok, 50);
    reset_pool();
    ok(run(m, &s, &chunk1, 1, logits, err, sizeof(err)) == 0
       && rel_diff(logits, ref + 22 * rm->V, rm->V) < 1e-3,
       "%s: first prefill chunk (23 tokens)", what);
    ok(run(m, &s, &chunk2, 1, logits, err, sizeof(err)) == 0
       && rel_diff(logits, ref + 39 * rm->V, rm->V) < 1e-3,
       "%s: second chunk (17 more) attends to the first through the cache",
       what);
    for (step = 40; step < 50; step++) {
        if (run(m, &s, &one, 1, logits, err, sizeof(err)) != 0
            || rel_diff(logits, ref + (size_t) step * rm->V, rm->V) >= 1e-3)
        {
            bad++;
        }
    }
    is_int(bad, 0, "%s: 10 decode steps over non-contiguous blocks match",
           what);
    free(ref);
}


static void
test_batching(pl_model_t *m, const rmodel_t *rm)
{
    int32_t  ta[20], tb[40];
    tseq_t   both[2] = { { .tok = ta }, { .tok = tb } };
    tseq_t   alone;
    int      q1[2] = { 13, 20 }, q2[2] = { 1, 9 };
    float    lg[2 * 128], one[128], one_b[128];
    double  *ra, *rb;
    char     err[512];
    int      rc;

    random_tokens(ta, 20, rm->V);
    random_tokens(tb, 40, rm->V);
    ra = ref_forward(rm, ta, 20);
    rb = ref_forward(rm, tb, 40);
    reset_pool();
    rc = run(m, both, q1, 2, lg, err, sizeof(err));
    ok(rc == 0 && rel_diff(lg, ra + 12 * rm->V, rm->V) < 1e-3
       && rel_diff(lg + rm->V, rb + 19 * rm->V, rm->V) < 1e-3,
       "two prompts in one batch each give their own logits");
    rc |= run(m, both, q2, 2, lg, err, sizeof(err));
    ok(rc == 0 && rel_diff(lg, ra + 13 * rm->V, rm->V) < 1e-3
       && rel_diff(lg + rm->V, rb + 28 * rm->V, rm->V) < 1e-3,
       "a decode and a prefill chunk in one batch");

    alone = (tseq_t) { .tok = ta };
    reset_pool();
    run(m, &alone, &q1[0], 1, one, err, sizeof(err));
    run(m, &alone, &q2[0], 1, one, err, sizeof(err));
    alone = (tseq_t) { .tok = tb };
    run(m, &alone, &q1[1], 1, one_b, err, sizeof(err));
    run(m, &alone, &q2[1], 1, one_b, err, sizeof(err));
    ok(memcmp(one, lg, rm->V * sizeof(float)) == 0
       && memcmp(one_b, lg + rm->V, rm->V * sizeof(float)) == 0,
       "each sequence alone gives bit-identical logits to the batch");
    free(ra);
    free(rb);
}


static void
test_reference(pl_backend_t *be, pl_dtype_t dt, int tied, const char *rope,
    const char *what)
{
    rmodel_t     rm;
    pl_model_t  *m;
    const char  *dir;

    make_model(&rm, dt, tied, rope);
    dir = write_model(&rm, what);
    m = load(dir, be);
    if (!ok(m != NULL, "%s: the model loads", what)) {
        free_model(&rm);
        return;
    }
    ok(pl_model_config(m)->dtype == dt && pl_model_config(m)->head_dim == 12
       && pl_model_config(m)->num_kv_heads == 2, "%s: config and dtype are "
       "read", what);
    test_prefill_lengths(m, &rm, what);
    test_chunked_prefill_and_decode(m, &rm, what);
    if (dt == PL_DT_BF16) {
        test_batching(m, &rm);
    }
    pl_model_free(m);
    free_model(&rm);
}


/* ---- bad batches ---- */

typedef struct {
    int32_t     ids[4], pos[4], slot[4], qs[2], cl[1], bt[2], rows[1];
    pl_batch_t  b;
} small_batch_t;


static void
small_batch(small_batch_t *s)
{
    int  i;

    for (i = 0; i < 4; i++) {
        s->ids[i] = i + 3;
        s->pos[i] = i;
        s->slot[i] = 5 * BS + i;
    }
    s->qs[0] = 0;
    s->qs[1] = 4;
    s->cl[0] = 4;
    s->bt[0] = 5;
    s->bt[1] = 0;
    s->rows[0] = 3;
    s->b = (pl_batch_t) {
        .num_tokens = 4, .num_seqs = 1, .token_ids = s->ids,
        .positions = s->pos, .slot_mapping = s->slot, .query_start = s->qs,
        .context_lens = s->cl, .block_tables = s->bt, .logits_rows = s->rows,
        .max_blocks_per_seq = 2, .max_query_len = 4, .max_context_len = 4
    };
}


static void
refuse_batch(pl_model_t *m, small_batch_t *s, const char *fragment,
    const char *what)
{
    float  logits[128];
    char   err[512] = "";
    int    rc = pl_model_forward(m, &s->b, logits, err, sizeof(err));

    ok(rc == -1 && strstr(err, fragment) != NULL, "forward refuses %s", what);
    if (rc != -1 || strstr(err, fragment) == NULL) {
        diag("got \"%s\"", err);
    }
    small_batch(s);
}


static void
test_bad_batches(pl_backend_t *be)
{
    rmodel_t       rm;
    pl_model_t    *m;
    small_batch_t  s;
    float          logits[128];
    char           err[512];

    make_model(&rm, PL_DT_BF16, 0, NULL);
    m = pl_model_load(write_model(&rm, "batch"), be, err, sizeof(err));
    small_batch(&s);
    ok(m != NULL && pl_model_forward(m, &s.b, logits, err, sizeof(err)) == -1
       && strstr(err, "prepare") != NULL, "forward before prepare() and "
       "kv_alloc() is refused");
    if (m == NULL || pl_model_prepare(m, 8, 2, err, sizeof(err)) != 0
        || pl_model_kv_alloc(m, 8, BS, err, sizeof(err)) != 0)
    {
        ok(0, "prepare and kv_alloc");
        free_model(&rm);
        return;
    }
    ok(pl_model_forward(m, &s.b, logits, err, sizeof(err)) == 0,
       "a well-formed batch runs");
    s.b.num_tokens = 9;
    refuse_batch(m, &s, "does not fit", "more tokens than prepared");
    s.ids[2] = rm.V;
    refuse_batch(m, &s, "outside the vocabulary", "a token id past the "
                 "vocabulary");
    s.ids[1] = -4;
    refuse_batch(m, &s, "outside the vocabulary", "a negative token id");
    s.bt[0] = 8;
    refuse_batch(m, &s, "outside the cache", "a block id past the cache");
    s.slot[3] = 0;
    refuse_batch(m, &s, "its block table puts it at", "a slot that is not "
                 "the token's");
    s.pos[0] = 7;
    refuse_batch(m, &s, "position", "a position that disagrees with the "
                 "context");
    s.cl[0] = 9;
    refuse_batch(m, &s, "context length", "a context longer than the block "
                 "table");
    s.rows[0] = 4;
    refuse_batch(m, &s, "logits row", "a logits row outside the sequence");
    s.qs[1] = 3;
    refuse_batch(m, &s, "query_start", "query_start not ending at "
                 "num_tokens");
    ok(pl_model_forward(m, &s.b, logits, err, sizeof(err)) == 0,
       "the model still runs after refusing bad batches");
    ok(pl_model_prepare(m, 0, 1, err, sizeof(err)) == -1,
       "prepare refuses zero tokens");
    ok(pl_model_kv_alloc(m, 0, BS, err, sizeof(err)) == -1,
       "kv_alloc refuses zero blocks");
    pl_model_free(m);
    free_model(&rm);
}


/* ---- refusals at load time ---- */

static void
refuse_load(pl_backend_t *be, const char *dir, const char *f1,
    const char *f2, const char *what)
{
    char         err[512] = "";
    pl_model_t  *m = pl_model_load(dir, be, err, sizeof(err));

    ok(m == NULL && strstr(err, f1) != NULL && strstr(err, f2) != NULL,
       "load refuses %s", what);
    if (m != NULL || strstr(err, f1) == NULL || strstr(err, f2) == NULL) {
        diag("got \"%s\"", err);
    }
    pl_model_free(m);
}


/* the model's folder with config.json changed by set (a JSON object
   merged into it) and key removed */
static const char *
variant(rmodel_t *rm, const char *name, const char *set, const char *key)
{
    const char    *dir = write_model(rm, name);
    json_t        *c = config_json(rm);
    json_error_t   jerr;
    json_t        *patch = set ? json_loads(set, 0, &jerr) : NULL;

    if (patch != NULL) {
        json_object_update(c, patch);
        json_decref(patch);
    }
    if (key != NULL) {
        json_object_del(c, key);
    }
    write_json(dir, "config.json", c);
    return dir;
}


static void
test_refusals(pl_backend_t *be)
{
    rmodel_t     rm;
    const char  *dir;
    char         path[300];

    make_model(&rm, PL_DT_BF16, 0, NULL);
    refuse_load(be, variant(&rm, "nohidden", NULL, "hidden_size"),
                "config.json", "'hidden_size' is missing",
                "a config without hidden_size");
    refuse_load(be, variant(&rm, "arch", "{\"architectures\": "
                "[\"GPT2LMHeadModel\"]}", NULL), "config.json",
                "GPT2LMHeadModel", "another architecture");
    refuse_load(be, variant(&rm, "dynrope", "{\"rope_scaling\": "
                "{\"type\": \"dynamic\", \"factor\": 2.0}}", NULL),
                "rope_scaling", "dynamic", "an unknown rope_scaling type");
    refuse_load(be, variant(&rm, "window", "{\"sliding_window\": 4096}",
                NULL), "config.json", "sliding_window", "a sliding window");
    refuse_load(be, variant(&rm, "bias", "{\"attention_bias\": true}",
                NULL), "config.json", "attention_bias", "attention biases");
    refuse_load(be, variant(&rm, "gelu", "{\"hidden_act\": \"gelu\"}",
                NULL), "config.json", "hidden_act", "another activation");
    refuse_load(be, variant(&rm, "heads", "{\"num_key_value_heads\": 3}",
                NULL), "config.json", "num_key_value_heads",
                "heads not divisible by KV heads");
    refuse_load(be, variant(&rm, "eos", "{\"eos_token_id\": [1, 500]}",
                NULL), "config.json", "eos_token_id",
                "an eos id outside the vocabulary");

    dir = write_model(&rm, "shape");
    write_weights(&rm, dir, "model.layers.1.mlp.up_proj.weight");
    refuse_load(be, dir, "tensor 'model.layers.1.mlp.up_proj.weight' has "
                "shape [49, 32]", "config.json implies [48, 32]",
                "a tensor with the wrong shape");

    dir = write_model(&rm, "nohead");
    rm.n--;                             /* lm_head.weight is the last */
    write_weights(&rm, dir, NULL);
    rm.n++;
    refuse_load(be, dir, "model.safetensors", "tensor 'lm_head.weight' is "
                "missing", "a missing tensor");

    dir = write_model(&rm, "noweights");
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    unlink(path);
    refuse_load(be, dir, "noweights", "neither model.safetensors nor "
                "model.safetensors.index.json exists",
                "a folder without weights");
    free_model(&rm);
}


static void
test_generation_config(pl_backend_t *be)
{
    rmodel_t                  rm;
    const char               *dir;
    char                      err[512];
    pl_model_t               *m;
    const pl_model_config_t  *c;

    make_model(&rm, PL_DT_BF16, 0, NULL);
    dir = write_model(&rm, "genconf");
    write_json(dir, "generation_config.json",
               json_pack("{s:i, s:[i, i]}", "bos_token_id", 1,
                         "eos_token_id", 5, 7));
    m = pl_model_load(dir, be, err, sizeof(err));
    c = m ? pl_model_config(m) : NULL;
    ok(c != NULL && c->n_eos == 2 && c->eos_token_ids[0] == 5
       && c->eos_token_ids[1] == 7 && c->bos_token_id == 1,
       "generation_config.json's eos_token_id list overrides config.json's");
    ok(c != NULL && fabsf(c->rms_norm_eps - 1e-5f) < 1e-9f
       && c->rope_theta == 10000.0f && c->tie_word_embeddings == 0
       && c->max_position_embeddings == 4096 && strcmp(c->arch, "llama") == 0,
       "config.json fields are read");
    pl_model_free(m);
    free_model(&rm);
}


/* ---- the bundled tiny model ---- */

static int
same_file(const char *a, const char *b)
{
    FILE  *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int    ca, cb, same = fa != NULL && fb != NULL;

    while (same) {
        ca = fgetc(fa);
        cb = fgetc(fb);
        same = ca == cb;
        if (ca == EOF) {
            break;
        }
    }
    if (fa) {
        fclose(fa);
    }
    if (fb) {
        fclose(fb);
    }
    return same;
}


static void
test_tiny_model(pl_backend_t *be, const char *build)
{
    static const char  *files[] = {
        "config.json", "generation_config.json", "tokenizer.json",
        "tokenizer_config.json", "model.safetensors"
    };
    char                cmd[1200], a[1200], b[1200], err[512];
    const pl_model_config_t  *c;
    pl_model_t         *m;
    size_t              i;
    int                 same = 1;
    float               logits[512], mx = -INFINITY, mn = INFINITY;
    int32_t             ids[3] = { 510, 72, 105 }, pos[3] = { 0, 1, 2 };
    int32_t             slot[3] = { 8, 9, 10 }, qs[2] = { 0, 3 };
    int32_t             cl[1] = { 3 }, bt[1] = { 2 }, rows[1] = { 2 };
    pl_batch_t          bt_one = {
        3, 1, ids, pos, slot, qs, cl, bt, rows, 1, 3, 3, 0
    };

    snprintf(cmd, sizeof(cmd), "%s/mktinymodel %s/tiny", build, tmp);
    ok(system(cmd) == 0, "mktinymodel writes a model folder");
    for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(a, sizeof(a), "%s/tiny/%s", tmp, files[i]);
        snprintf(b, sizeof(b), "%s/models/tiny/%s", build, files[i]);
        same &= same_file(a, b);
    }
    ok(same, "mktinymodel writes the same bytes as the build's copy");

    snprintf(a, sizeof(a), "%s/tiny", tmp);
    m = pl_model_load(a, be, err, sizeof(err));
    c = m ? pl_model_config(m) : NULL;
    ok(c != NULL && c->vocab_size == 512 && c->hidden_size == 64
       && c->intermediate_size == 192 && c->num_layers == 2
       && c->num_heads == 4 && c->num_kv_heads == 2 && c->head_dim == 16
       && c->bos_token_id == 510 && c->n_eos == 1
       && c->eos_token_ids[0] == 511 && c->dtype == PL_DT_BF16,
       "the tiny model loads with the specified shape");
    if (c == NULL || pl_model_prepare(m, 8, 1, err, sizeof(err)) != 0
        || pl_model_kv_alloc(m, 4, 4, err, sizeof(err)) != 0
        || pl_model_forward(m, &bt_one, logits, err, sizeof(err)) != 0)
    {
        ok(0, "the tiny model runs");
        diag("%s", m ? err : "not loaded");
        pl_model_free(m);
        return;
    }
    for (i = 0; i < 512; i++) {
        mx = logits[i] > mx ? logits[i] : mx;
        mn = logits[i] < mn ? logits[i] : mn;
    }
    ok(isfinite(mx) && isfinite(mn) && mx - mn > 4.0f,
       "the tiny model's logits are finite and far from flat");
    pl_model_free(m);
}


/* the build folder: $PAGEDLLM_BUILD, else the parent of this program's */
static void
build_dir(char *out, size_t len, const char *argv0)
{
    char  copy[512];

    if (getenv("PAGEDLLM_BUILD") != NULL) {
        snprintf(out, len, "%s", getenv("PAGEDLLM_BUILD"));
        return;
    }
    snprintf(copy, sizeof(copy), "%s", argv0);
    snprintf(out, len, "%s/..", dirname(copy));
}


int
main(int argc, char **argv)
{
    char           err[256], build[512];
    pl_backend_t  *be = pl_backend_cpu_create(2, err, sizeof(err));

    (void) argc;
    if (be == NULL || mkdtemp(tmp) == NULL) {
        printf("Bail out! %s\n", be ? "mkdtemp failed" : err);
        return 1;
    }
    build_dir(build, sizeof(build), argv[0]);

    test_reference(be, PL_DT_BF16, 0, NULL, "bf16");
    test_reference(be, PL_DT_F32, 1, "linear", "f32 tied, linear rope");
    test_reference(be, PL_DT_F16, 0, "llama3", "f16, llama3 rope");
    test_bad_batches(be);
    test_refusals(be);
    test_generation_config(be);
    test_tiny_model(be, build);

    be->destroy(be);
    fm_rmtree(tmp);
    return done_testing();
}
