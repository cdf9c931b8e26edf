/*
 * tp: tensor parallelism on the CPU backend, ranks as threads.
 *
 * The CPU communicator against plain sums and copies (every dtype, counts
 * smaller than the ranks, many collectives in a row).  Then every golden
 * fixture architecture, the tiny model, and a model cut here to a
 * vocabulary and an intermediate size that do not split evenly: for each
 * tensor-parallel size N that divides its heads, a scenario of chunked
 * prefills mixed with greedy decodes over shuffled block tables runs on
 * the model loaded whole and on the model split over N ranks; the greedy
 * tokens must be identical and the logits of every step equal within
 * LOGIT_TOL.  Also: sizes that do not divide the heads are refused with
 * the reason, a bad batch is refused without stopping the ranks, the KV
 * block of a rank is 1/N of the whole, copy-on-write copies every rank's
 * share, and pl_model_load() follows the default options.
 *
 * Tolerance.  A split model computes the same column-parallel dot
 * products as the whole one (q/k/v, gate/up, fc1, lm_head: bit for bit)
 * but sums each row-parallel projection (o_proj, down, fc2) and the
 * embedding as N partial dot products added by the all-reduce, a
 * different fp32 summation order.  That moves hidden states by a few
 * ulps; measured on these models the logits differ by at most 8.1e-6
 * (relative to max(1, |logit|), logits up to ~30).  LOGIT_TOL = 1e-4
 * leaves a 12x margin and is still far below what a wrong slice or a
 * lost head does; a bias added on every rank instead of once moves OPT's
 * logits by 5 to 19.
 * Greedy tokens are compared exactly; the scenario checks that each
 * step's winner leads by more than the tolerance so equality is not luck.
 */

#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture_model.h"
#include "pl_comm.h"
#include "safetensors.h"

#define FIXTURES   FM_GOLDEN
#define BS         4
#define NBLK       96
#define MAX_TOK    64
#define MAX_SEQ    4
#define N_SEQ      3
#define CHUNK      6
#define N_GEN      10
#define MAX_LEN    64
#define MAX_VOCAB  512
#define MAX_STEPS  32
#define LOGIT_TOL  1e-4

static uint64_t  rng;
static char      tmp[] = "/tmp/pl-tp-XXXXXX";


static uint32_t
rand32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t) (rng >> 11);
}


/* ---- the CPU communicator ---- */

#define COMM_MAX  4096

typedef struct {
    pl_comm_t   *comm;
    pl_dtype_t   dt;
    size_t       count;
    int          iters;
    uint8_t      buf[COMM_MAX * 4];
    uint8_t      in[COMM_MAX * 4];
    uint8_t      out[4 * COMM_MAX * 4];
    uint8_t      orig[64][COMM_MAX * 4];        /* per iteration */
    uint8_t      reduced[64][COMM_MAX * 4];
    int          flag_seen;
    int          rc;
} comm_rank_t;

static comm_rank_t  cr[4];
static int          flags[4];


static float
elem(const void *p, size_t i, pl_dtype_t dt)
{
    return dt == PL_DT_F32 ? ((const float *) p)[i]
           : dt == PL_DT_F16 ? pl_f16_to_f32(((const uint16_t *) p)[i])
           : pl_bf16_to_f32(((const uint16_t *) p)[i]);
}


static void
set_elem(void *p, size_t i, pl_dtype_t dt, float v)
{
    if (dt == PL_DT_F32) {
        ((float *) p)[i] = v;
    } else if (dt == PL_DT_F16) {
        ((uint16_t *) p)[i] = pl_f32_to_f16(v);
    } else {
        ((uint16_t *) p)[i] = pl_f32_to_bf16(v);
    }
}


static void *
comm_rank_main(void *p)
{
    comm_rank_t  *r = p;
    pl_comm_t    *c = r->comm;
    size_t        es = pl_dtype_size(r->dt), i;
    int           it, rc = 0, k;

    for (it = 0; it < r->iters; it++) {
        for (i = 0; i < r->count; i++) {
            set_elem(r->buf, i, r->dt,
                     (float) ((int) (rand32() % 2001) - 1000) / 64.0f);
        }
        memcpy(r->orig[it], r->buf, r->count * es);
        rc |= c->all_reduce_sum(c, r->buf, r->count, r->dt);
        memcpy(r->reduced[it], r->buf, r->count * es);
    }
    memcpy(r->in, r->orig[0], r->count * es);
    rc |= c->all_gather(c, r->out, r->in, r->count, r->dt);
    flags[c->rank] = 1;
    rc |= c->barrier(c);
    for (k = 0; k < c->world; k++) {
        r->flag_seen += flags[k];
    }
    r->rc = rc;
    return NULL;
}


/* world threads, iters all-reduces of count elements, one all-gather,
   one barrier; every result against a plain loop */
static void
test_comm_case(int world, pl_dtype_t dt, size_t count, int iters)
{
    pl_comm_t  *comms[4];
    pthread_t   th[4];
    char        err[256];
    size_t      es = pl_dtype_size(dt), i;
    int         r, k, it, bad_sum = 0, bad_gather = 0, rc = 0, seen = 1;

    if (pl_comm_cpu_create(world, comms, err, sizeof(err)) != 0) {
        ok(0, "cpu comm %d ranks: %s", world, err);
        return;
    }
    for (r = 0; r < world; r++) {
        memset(&cr[r], 0, sizeof(cr[r]));
        cr[r] = (comm_rank_t) { .comm = comms[r], .dt = dt, .count = count,
                                .iters = iters };
        flags[r] = 0;
    }
    rng = 0x9e3779b97f4a7c15ULL + world * 131 + count;
    for (r = 0; r < world; r++) {
        pthread_create(&th[r], NULL, comm_rank_main, &cr[r]);
    }
    for (r = 0; r < world; r++) {
        pthread_join(th[r], NULL);
        rc |= cr[r].rc;
        seen &= cr[r].flag_seen == world;
    }
    for (it = 0; it < iters; it++) {
        for (i = 0; i < count; i++) {
            float  sum = elem(cr[0].orig[it], i, dt);
            char   want[4];

            for (r = 1; r < world; r++) {
                sum += elem(cr[r].orig[it], i, dt);
            }
            set_elem(want, 0, dt, sum);
            for (r = 0; r < world; r++) {
                bad_sum += memcmp((uint8_t *) cr[r].reduced[it] + i * es,
                                  want, es) != 0;
            }
        }
    }
    for (r = 0; r < world; r++) {
        for (k = 0; k < world; k++) {
            bad_gather += memcmp(cr[r].out + k * count * es, cr[k].in,
                                 count * es) != 0;
        }
    }
    ok(rc == 0 && bad_sum == 0, "cpu all-reduce, %d ranks, %s, %zu elements "
       "x %d: every rank holds the rank-order fp32 sum (%d wrong)", world,
       pl_dtype_name(dt), count, iters, bad_sum);
    ok(bad_gather == 0, "cpu all-gather, %d ranks, %s, %zu elements: rank "
       "k's input at slot k everywhere", world, pl_dtype_name(dt), count);
    ok(seen, "cpu barrier, %d ranks: writes before it are seen after it",
       world);
    for (r = 0; r < world; r++) {
        comms[r]->destroy(comms[r]);
    }
}


static void
test_comm(void)
{
    char        err[256];
    pl_comm_t  *c[1];

    test_comm_case(1, PL_DT_F32, 100, 3);
    test_comm_case(2, PL_DT_F32, 1000, 64);
    test_comm_case(3, PL_DT_F32, 4096, 20);
    test_comm_case(4, PL_DT_F32, 3, 10);
    test_comm_case(4, PL_DT_F32, 0, 2);
    test_comm_case(2, PL_DT_BF16, 777, 5);
    test_comm_case(4, PL_DT_F16, 1025, 5);
    ok(pl_comm_cpu_create(0, c, err, sizeof(err)) != 0
       && strstr(err, "0 ranks") != NULL,
       "cpu comm refuses 0 ranks: %s", err);
}


/* ---- a model cut to uneven sizes ---- */


/* t [d0][d1] (or [d0]) cut to its first e0 rows and e1 columns */
static void
cut_tensor(json_t *hdr, FILE *data, size_t *at, const pl_st_tensor_t *t,
    int64_t e0, int64_t e1)
{
    size_t   es = pl_dtype_size(t->dtype);
    int64_t  d1 = t->ndim == 2 ? t->shape[1] : 1, r;
    size_t   bytes = (size_t) (e0 * (t->ndim == 2 ? e1 : 1)) * es;

    for (r = 0; r < e0; r++) {
        fwrite((const uint8_t *) t->data + (size_t) (r * d1) * es, es,
               (size_t) (t->ndim == 2 ? e1 : 1), data);
    }
    json_object_set_new(hdr, t->name, json_pack("{s:s,s:[I,I],s:[I,I]}",
                        "dtype", "F32", "shape", (json_int_t) e0,
                        (json_int_t) (t->ndim == 2 ? e1 : 1),
                        "data_offsets", (json_int_t) *at,
                        (json_int_t) (*at + bytes)));
    if (t->ndim == 1) {
        json_object_set_new(json_object_get(hdr, t->name), "shape",
                            json_pack("[I]", (json_int_t) e0));
    }
    *at += bytes;
}


/* llama3_gqa with vocab and intermediate sizes cut to vocab and inter */
static int
write_uneven(const char *dir, int vocab, int inter)
{
    char               path[512], err[256];
    pl_safetensors_t  *st;
    json_t            *hdr = json_object(), *cfg;
    FILE              *data = tmpfile(), *out;
    size_t             at = 0, hlen;
    char              *htext, buf[65536];
    int                i;

    snprintf(path, sizeof(path), "%s/llama3_gqa/model.safetensors",
             FIXTURES);
    st = pl_st_open(path, err, sizeof(err));
    if (st == NULL || data == NULL || mkdir(dir, 0755) != 0) {
        diag("uneven model: %s", st == NULL ? err : "tmpfile/mkdir failed");
        return -1;
    }
    for (i = 0; i < pl_st_count(st); i++) {
        const pl_st_tensor_t  *t = pl_st_tensor(st, i);
        int64_t                e0 = t->shape[0];
        int64_t                e1 = t->ndim == 2 ? t->shape[1] : 1;

        if (strstr(t->name, "embed_tokens") || strstr(t->name, "lm_head")) {
            e0 = vocab;
        } else if (strstr(t->name, "gate_proj") || strstr(t->name, "up_proj")) {
            e0 = inter;
        } else if (strstr(t->name, "down_proj")) {
            e1 = inter;
        }
        cut_tensor(hdr, data, &at, t, e0, e1);
    }
    pl_st_close(st);
    htext = json_dumps(hdr, JSON_COMPACT);
    hlen = (strlen(htext) + 7) / 8 * 8;
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    out = fopen(path, "wb");
    fwrite(&(uint64_t) { hlen }, 8, 1, out);
    fprintf(out, "%-*s", (int) hlen, htext);
    rewind(data);
    while ((i = (int) fread(buf, 1, sizeof(buf), data)) > 0) {
        fwrite(buf, 1, (size_t) i, out);
    }
    fclose(out);
    fclose(data);
    free(htext);
    json_decref(hdr);

    snprintf(path, sizeof(path), "%s/llama3_gqa/config.json", FIXTURES);
    cfg = json_load_file(path, 0, NULL);
    json_object_set_new(cfg, "vocab_size", json_integer(vocab));
    json_object_set_new(cfg, "intermediate_size", json_integer(inter));
    snprintf(path, sizeof(path), "%s/config.json", dir);
    i = json_dump_file(cfg, path, JSON_INDENT(2));
    json_decref(cfg);
    return i;
}


/* ---- whole against split ---- */

typedef struct {
    int32_t  tok[MAX_LEN];
    int      prompt;
    int      len;               /* prompt + generated so far */
    int      ctx;               /* tokens in the cache */
    int32_t  table[MAX_LEN / BS + 1];
    int      nblk;
} sseq_t;

typedef struct {
    int32_t  gen[N_SEQ][N_GEN];
    float    logits[MAX_STEPS][N_SEQ][MAX_VOCAB];
    int      rows[MAX_STEPS][N_SEQ];      /* 1 when recorded */
    int      steps;
    double   min_gap;                     /* smallest top-2 gap seen */
} run_t;


static pl_model_t *
load(const char *dir, pl_backend_t *be, int world, char *err,
    size_t errlen)
{
    pl_model_options_t  o = { world, PL_MODEL_DTYPE_AUTO };

    return fm_open(dir, be, &o, MAX_TOK, MAX_SEQ, NBLK, BS, err, errlen);
}


/* argmax of row[n], and the gap to the runner-up */
static int
argmax(const float *row, int n, double *gap)
{
    int     i, best = 0;
    double  second = -INFINITY;

    for (i = 1; i < n; i++) {
        if (row[i] > row[best]) {
            best = i;
        }
    }
    for (i = 0; i < n; i++) {
        if (i != best && row[i] > second) {
            second = row[i];
        }
    }
    *gap = row[best] - second;
    return best;
}


/* the blocks a sequence needs for end tokens, from a shuffled pool */
static void
grow(sseq_t *q, int end, int32_t *pool, int *n_pool)
{
    while (q->nblk * BS < end) {
        q->table[q->nblk++] = pool[--*n_pool];
    }
}


/* One iteration over every unfinished sequence: prompt chunks of up to
   CHUNK tokens, else one decode token.  0 when nothing was left. */
static int
step(pl_model_t *m, sseq_t *seqs, int32_t *pool, int *n_pool, int vocab,
    run_t *out, char *err, size_t errlen)
{
    int32_t     ids[MAX_TOK], pos[MAX_TOK], slot[MAX_TOK], qs[N_SEQ + 1];
    int32_t     cl[N_SEQ], rows[N_SEQ], bt[N_SEQ * (MAX_LEN / BS + 1)];
    int         who[N_SEQ], n = 0, at = 0, maxq = 0, maxc = 0, s, i;
    float       logits[N_SEQ * MAX_VOCAB];
    pl_batch_t  b;
    double      gap;

    for (s = 0; s < N_SEQ; s++) {
        sseq_t  *q = &seqs[s];
        int      qlen = q->ctx < q->prompt
                        ? (q->prompt - q->ctx < CHUNK ? q->prompt - q->ctx
                                                      : CHUNK)
                        : 1;

        if (q->len - q->prompt == N_GEN) {
            continue;
        }
        grow(q, q->ctx + qlen, pool, n_pool);
        qs[n] = at;
        for (i = q->ctx; i < q->ctx + qlen; i++, at++) {
            ids[at] = q->tok[i];
            pos[at] = i;
            slot[at] = q->table[i / BS] * BS + i % BS;
        }
        cl[n] = q->ctx + qlen;
        rows[n] = at - 1;
        memcpy(bt + n * (MAX_LEN / BS + 1), q->table,
               sizeof(q->table));
        maxq = qlen > maxq ? qlen : maxq;
        maxc = cl[n] > maxc ? cl[n] : maxc;
        who[n++] = s;
    }
    if (n == 0) {
        return 0;
    }
    qs[n] = at;
    b = (pl_batch_t) {
        .num_tokens = at, .num_seqs = n, .token_ids = ids, .positions = pos,
        .slot_mapping = slot, .query_start = qs, .context_lens = cl,
        .block_tables = bt, .logits_rows = rows,
        .max_blocks_per_seq = MAX_LEN / BS + 1, .max_query_len = maxq,
        .max_context_len = maxc
    };
    if (pl_model_forward(m, &b, logits, err, errlen) != 0) {
        return -1;
    }
    for (i = 0; i < n; i++) {
        sseq_t  *q = &seqs[who[i]];

        q->ctx = cl[i];
        if (q->ctx < q->len) {
            continue;
        }
        memcpy(out->logits[out->steps][who[i]], logits + i * vocab,
               vocab * sizeof(float));
        out->rows[out->steps][who[i]] = 1;
        q->tok[q->len] = argmax(logits + i * vocab, vocab, &gap);
        out->gen[who[i]][q->len - q->prompt] = q->tok[q->len];
        q->len++;
        out->min_gap = gap < out->min_gap ? gap : out->min_gap;
    }
    out->steps++;
    return 1;
}


/* Three sequences (prompts of 13, 7 and 21 random tokens) prefilled in
   chunks alongside each other's greedy decodes until each has N_GEN new
   tokens, over blocks handed out in a shuffled order. */
static int
scenario(pl_model_t *m, int vocab, uint64_t seed, run_t *out)
{
    static const int  prompt[N_SEQ] = { 13, 7, 21 };
    sseq_t            seqs[N_SEQ];
    int32_t           pool[NBLK];
    int               n_pool = NBLK, s, i, j, rc;
    char              err[512];

    memset(out, 0, sizeof(*out));
    memset(seqs, 0, sizeof(seqs));
    out->min_gap = INFINITY;
    rng = seed;
    for (i = 0; i < NBLK; i++) {
        pool[i] = i;
    }
    for (i = NBLK - 1; i > 0; i--) {
        int32_t  t = pool[i];

        j = (int) (rand32() % (uint32_t) (i + 1));
        pool[i] = pool[j];
        pool[j] = t;
    }
    for (s = 0; s < N_SEQ; s++) {
        seqs[s].prompt = seqs[s].len = prompt[s];
        for (i = 0; i < prompt[s]; i++) {
            seqs[s].tok[i] = (int32_t) (rand32() % (uint32_t) vocab);
        }
    }
    while ((rc = step(m, seqs, pool, &n_pool, vocab, out, err,
                      sizeof(err))) == 1)
    {
        if (out->steps == MAX_STEPS) {
            diag("scenario: more than %d steps", MAX_STEPS);
            return -1;
        }
    }
    if (rc < 0) {
        diag("scenario: %s", err);
    }
    return rc;
}


/* largest |got - want| / max(1, |want|) over every recorded row */
static double
logits_diff(const run_t *got, const run_t *want, int vocab)
{
    double  d = 0, e;
    int     t, s, i;

    for (t = 0; t < want->steps; t++) {
        for (s = 0; s < N_SEQ; s++) {
            if (want->rows[t][s] != got->rows[t][s]) {
                return INFINITY;
            }
            for (i = 0; want->rows[t][s] && i < vocab; i++) {
                e = fabs(got->logits[t][s][i] - want->logits[t][s][i])
                    / fmax(1.0, fabs(want->logits[t][s][i]));
                d = e > d || isnan(e) ? (isnan(e) ? INFINITY : e) : d;
            }
        }
    }
    return d;
}


static run_t  whole_run, split_run;


/* the split model m against the whole model's run */
static void
compare(pl_model_t *m, int vocab, const char *name, int world)
{
    double  d;

    if (scenario(m, vocab, 42, &split_run) != 0) {
        ok(0, "%s, %d ranks: the scenario runs", name, world);
        return;
    }
    d = logits_diff(&split_run, &whole_run, vocab);
    ok(split_run.steps == whole_run.steps
       && memcmp(split_run.gen, whole_run.gen, sizeof(whole_run.gen)) == 0,
       "%s, %d ranks: greedy tokens of chunked prefill + decode equal one "
       "rank's (%d steps, smallest top-2 gap %.4f)", name, world,
       whole_run.steps, whole_run.min_gap);
    ok(d <= LOGIT_TOL, "%s, %d ranks: logits of every step within %g of "
       "one rank's (max %.2g)", name, world, LOGIT_TOL, d);
}


static void
test_model(pl_backend_t *be, const char *name, const char *dir,
    const int *worlds, int n)
{
    char         err[512];
    pl_model_t  *whole = load(dir, be, 1, err, sizeof(err)), *m;
    int          vocab, i;
    size_t       kv1;

    if (whole == NULL) {
        ok(0, "%s: loads whole: %s", name, err);
        return;
    }
    vocab = pl_model_config(whole)->vocab_size;
    kv1 = pl_model_kv_block_bytes(whole, BS);
    if (vocab > MAX_VOCAB || scenario(whole, vocab, 42, &whole_run) != 0) {
        ok(0, "%s: the scenario runs on one rank", name);
        pl_model_free(whole);
        return;
    }
    ok(whole_run.min_gap > 10 * LOGIT_TOL, "%s: every greedy step's winner "
       "leads by more than the tolerance (%.4f)", name, whole_run.min_gap);
    for (i = 0; i < n; i++) {
        m = load(dir, be, worlds[i], err, sizeof(err));
        if (m == NULL) {
            ok(0, "%s, %d ranks: loads: %s", name, worlds[i], err);
            continue;
        }
        is_int(pl_model_kv_block_bytes(m, BS), kv1 / worlds[i],
               "%s, %d ranks: a rank's KV block is 1/%d of the whole", name,
               worlds[i], worlds[i]);
        is_int(pl_model_config(m)->vocab_size, vocab,
               "%s, %d ranks: the config is the whole model's", name,
               worlds[i]);
        compare(m, vocab, name, worlds[i]);
        pl_model_free(m);
    }
    pl_model_free(whole);
}


static void
test_fixtures(pl_backend_t *be, const char *build)
{
    static const int  two[] = { 2 }, two_four[] = { 2, 4 };
    char              dir[600];

    test_model(be, "llama3 GQA", FIXTURES "/llama3_gqa", two, 1);
    test_model(be, "llama tied bf16", FIXTURES "/llama_tied", two_four, 2);
    test_model(be, "qwen2 biases", FIXTURES "/qwen2_bias", two, 1);
    test_model(be, "opt pre-LN fp16", FIXTURES "/opt_pre_ln", two_four, 2);
    test_model(be, "opt post-LN", FIXTURES "/opt_post_ln", two_four, 2);
    snprintf(dir, sizeof(dir), "%s/models/tiny", build);
    test_model(be, "tiny", dir, two, 1);
    snprintf(dir, sizeof(dir), "%s/uneven", tmp);
    if (write_uneven(dir, 251, 125) != 0) {
        ok(0, "uneven model written");
        return;
    }
    test_model(be, "vocab 251 and intermediate 125 (uneven slices)", dir,
               two, 1);
}


static void
refuse(pl_backend_t *be, const char *dir, int world, const char *want)
{
    char         err[512] = "";
    pl_model_t  *m = load(dir, be, world, err, sizeof(err));

    ok(m == NULL && strstr(err, want) != NULL, "%s with %d ranks is "
       "refused: %s", dir, world, err);
    pl_model_free(m);
}


static void
test_refusals(pl_backend_t *be)
{
    refuse(be, FIXTURES "/mistral", 2, "tensor parallel size 2 does not "
           "divide the model's 4 attention heads and 1 KV heads");
    refuse(be, FIXTURES "/llama3_gqa", 4, "2 KV heads");
    refuse(be, FIXTURES "/llama_tied", 3, "size 3 does not divide");
    refuse(be, FIXTURES "/llama_tied", 0, "size 0 does not divide");
    refuse(be, FIXTURES "/no-such-model", 2, "config.json");
}


/* a refused batch leaves every rank ready for the next one */
static void
test_bad_batch(pl_backend_t *be)
{
    char         err[512] = "";
    pl_model_t  *whole = load(FIXTURES "/qwen2_bias", be, 1, err,
                              sizeof(err));
    pl_model_t  *m = load(FIXTURES "/qwen2_bias", be, 2, err, sizeof(err));
    int32_t      ids[2] = { 5, 9999 }, pos[2] = { 0, 1 }, slot[2] = { 0, 1 };
    int32_t      qs[2] = { 0, 2 }, cl[1] = { 2 }, rows[1] = { 1 };
    int32_t      bt[1] = { 0 };
    float        logits[MAX_VOCAB];
    pl_batch_t   b = {
        .num_tokens = 2, .num_seqs = 1, .token_ids = ids, .positions = pos,
        .slot_mapping = slot, .query_start = qs, .context_lens = cl,
        .block_tables = bt, .logits_rows = rows, .max_blocks_per_seq = 1,
        .max_query_len = 2, .max_context_len = 2
    };

    if (whole == NULL || m == NULL) {
        ok(0, "qwen2 loads whole and on 2 ranks: %s", err);
        pl_model_free(whole);
        pl_model_free(m);
        return;
    }
    ok(pl_model_forward(m, &b, logits, err, sizeof(err)) != 0
       && strstr(err, "outside the vocabulary") != NULL,
       "2 ranks: a token id outside the vocabulary is refused: %s", err);
    if (scenario(whole, 256, 42, &whole_run) == 0) {
        compare(m, 256, "qwen2 after a refused batch", 2);
    }
    pl_model_free(m);
    pl_model_free(whole);
}


/* one sequence: tokens [ctx0, ctx0 + n) of tok through table */
static int
run_seq(pl_model_t *m, const int32_t *tok, int ctx0, int n,
    const int32_t *table, int nblk, float *logits)
{
    int32_t     pos[16], slot[16], qs[2] = { 0, n }, cl[1] = { ctx0 + n };
    int32_t     rows[1] = { n - 1 };
    char        err[512];
    pl_batch_t  b;
    int         i;

    for (i = 0; i < n; i++) {
        pos[i] = ctx0 + i;
        slot[i] = table[pos[i] / BS] * BS + pos[i] % BS;
    }
    b = (pl_batch_t) {
        .num_tokens = n, .num_seqs = 1, .token_ids = tok + ctx0,
        .positions = pos, .slot_mapping = slot, .query_start = qs,
        .context_lens = cl, .block_tables = table, .logits_rows = rows,
        .max_blocks_per_seq = nblk, .max_query_len = n,
        .max_context_len = ctx0 + n
    };
    if (pl_model_forward(m, &b, logits, err, sizeof(err)) != 0) {
        diag("run_seq: %s", err);
        return -1;
    }
    return 0;
}


/* copy-on-write on a split model copies every rank's share, and swapping
   moves every rank's share out to its stripe of the host pool and back */
static void
test_kv_copy(pl_backend_t *be)
{
    static const int32_t  tok[9] = { 11, 42, 7, 99, 3, 250, 18, 64, 5 };
    static const int32_t  orig[3] = { 3, 7, 9 }, copy[3] = { 20, 21, 22 };
    static float          a[MAX_VOCAB], b[MAX_VOCAB];
    char                  err[512];
    pl_model_t           *m = load(FIXTURES "/llama_tied", be, 4, err,
                                   sizeof(err));
    static const int32_t  slots[3] = { 0, 1, 2 }, back[3] = { 30, 31, 32 };
    void                 *pool;

    if (m == NULL) {
        ok(0, "llama_tied on 4 ranks: %s", err);
        return;
    }
    ok(run_seq(m, tok, 0, 8, orig, 3, a) == 0
       && pl_model_kv_copy_blocks(m, orig, copy, 2) == 0
       && run_seq(m, tok, 8, 1, copy, 3, a) == 0
       && run_seq(m, tok, 8, 1, orig, 3, b) == 0
       && memcmp(a, b, 256 * sizeof(float)) == 0,
       "4 ranks: a decode over copied blocks gives the original's logits");
    pool = calloc(3, pl_model_kv_block_bytes(m, BS) * pl_model_tp_size(m));
    ok(pool != NULL && pl_model_tp_size(m) == 4
       && pl_model_kv_swap(m, pool, orig, slots, 3, PL_KV_SWAP_OUT) == 0
       && pl_model_kv_swap(m, pool, slots, back, 3, PL_KV_SWAP_IN) == 0
       && run_seq(m, tok, 8, 1, back, 3, a) == 0
       && memcmp(a, b, 256 * sizeof(float)) == 0,
       "4 ranks: a decode over blocks swapped out and back in elsewhere "
       "gives the original's logits");
    free(pool);
    pl_model_free(m);
}


/* pl_model_load() splits the model as the default options say */
static void
test_default_options(pl_backend_t *be)
{
    pl_model_options_t  two = { 2, PL_MODEL_DTYPE_AUTO };
    pl_model_options_t  one = { 1, PL_MODEL_DTYPE_AUTO };
    char                err[512];
    pl_model_t         *whole, *m;

    whole = pl_model_load(FIXTURES "/llama_tied", be, err, sizeof(err));
    pl_model_set_default_options(&two);
    m = pl_model_load(FIXTURES "/llama_tied", be, err, sizeof(err));
    pl_model_set_default_options(&one);
    ok(whole != NULL && m != NULL
       && pl_model_kv_block_bytes(m, BS)
          == pl_model_kv_block_bytes(whole, BS) / 2,
       "pl_model_load() follows the default options (2 ranks: half the KV "
       "block)");
    pl_model_free(m);
    pl_model_free(whole);
}


/* the profiling run on 2 ranks: the whole model's batch, half its
   temporary cache, and the ranks ready to run the same scenario after */
static void
test_profile(pl_backend_t *be)
{
    char                err[512] = "";
    pl_model_t         *whole = load(FIXTURES "/qwen2_bias", be, 1, err,
                                     sizeof(err));
    pl_model_t         *m = load(FIXTURES "/qwen2_bias", be, 2, err,
                                 sizeof(err));
    pl_model_profile_t  pw, pm;

    if (whole == NULL || m == NULL) {
        ok(0, "qwen2 loads whole and on 2 ranks: %s", err);
        pl_model_free(whole);
        pl_model_free(m);
        return;
    }
    if (!ok(pl_model_profile(whole, BS, 64, &pw, err, sizeof(err)) == 0
            && pl_model_profile(m, BS, 64, &pm, err, sizeof(err)) == 0,
            "the profiling run runs whole and on 2 ranks"))
    {
        diag("%s", err);
    }
    ok(pm.tokens == pw.tokens && pm.seqs == pw.seqs && pm.tokens == MAX_TOK
       && pm.kv_bytes == pw.kv_bytes / 2 && pm.graph_shapes == 0,
       "2 ranks profile the whole model's largest batch (%d tokens in %d "
       "sequences) against half its temporary cache", pm.tokens, pm.seqs);
    if (pl_model_kv_alloc(whole, NBLK, BS, err, sizeof(err)) == 0
        && pl_model_kv_alloc(m, NBLK, BS, err, sizeof(err)) == 0
        && scenario(whole, 256, 42, &whole_run) == 0)
    {
        compare(m, 256, "qwen2 after the profiling run", 2);
    } else {
        ok(0, "the caches are allocated again after the profiling run: %s",
           err);
    }
    pl_model_free(m);
    pl_model_free(whole);
}


int
main(int argc, char **argv)
{
    char           err[256], build[512], cmd[600];
    pl_backend_t  *be = pl_backend_cpu_create(1, err, sizeof(err));

    (void) argc;
    if (be == NULL || mkdtemp(tmp) == NULL) {
        printf("Bail out! %s\n", be ? "mkdtemp failed" : err);
        return 1;
    }
    if (getenv("PAGEDLLM_BUILD") != NULL) {
        snprintf(build, sizeof(build), "%s", getenv("PAGEDLLM_BUILD"));
    } else {
        snprintf(build, sizeof(build), "%.*s/..",
                 (int) (strrchr(argv[0], '/') - argv[0]), argv[0]);
    }

    test_comm();
    test_fixtures(be, build);
    test_refusals(be);
    test_bad_batch(be);
    test_kv_copy(be);
    test_profile(be);
    test_default_options(be);

    be->destroy(be);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
    if (system(cmd) != 0) {
        diag("could not remove %s", tmp);
    }
    return done_testing();
}
