/*
 * Decode iterations replayed from CUDA graphs against the same iterations
 * launched from the host, through pl_model_*, on three models: a Llama
 * with head_dim 128 and four query heads per KV head written here (the
 * tensor-core decode kernel), the bundled tiny model (head_dim 16, the
 * CUDA-core kernel) and OPT pre-LN from the golden fixtures (learned
 * positions).
 *
 * Each model is loaded three times on the GPU, one per decode mode:
 * eager (the reference), padded (batches padded to the graphs' shapes,
 * launched kernel by kernel) and graphs.  All three get the same batches,
 * teacher-forced with the eager side's greedy tokens: one prefill
 * iteration of 17 prompts, then decode iterations in which sequences
 * leave one by one, so the batch runs through padded sizes 24, 16, 8, 4,
 * 2 and 1.  The longest context crosses from the 512 to the 1024 bucket
 * (a 505-token prompt that leaves after 10 tokens), then, with that one
 * gone, from 256 to 512 (a 240-token prompt that stays longest).  Block
 * tables are a shuffled permutation of the cache.  Checks: prefill logits
 * identical on all sides (graphs never touch prefill); graph replays bit
 * for bit the padded launches (same kernels, same shapes); both within
 * bf16 error of eager; one recording per shape met (computed here from
 * the rule of pl_model.h), a replay for every other iteration.  The
 * logits buffer is poisoned with NaN before every iteration, so a replay
 * that does not write it fails.
 *
 * Then the profiling run: it records the widest decode batch against a
 * temporary cache, and the graph made then must not survive the real
 * cache (a replay would write into freed memory).
 *
 * Last, programmatic dependent launch (PAGEDLLM_CUDA_PDL, read again here,
 * taken by a backend when it is created) changes when kernels start, never
 * what they compute: a wider Llama, whose larger matrices take the GEMV kernel
 * at every batch size and the others cuBLAS, runs the same iterations on a
 * second backend created with PDL off, and its graph replays (and the eager
 * prefill) must give the PDL side's logits bit for bit.
 *
 * The two Llamas again with --dtype float16 (the engine's option, through
 * pl_model_set_default_options): the same checks with every kernel in
 * fp16.  (OPT pre-LN is an fp16 checkpoint: --dtype auto runs it in fp16
 * above already.)
 */

#include <jansson.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture_model.h"
#include "pair.h"
#include "pl_model.h"

#define NSEQ         17
#define BLOCK        16
#define MAX_TOKENS   2048
#define MAX_SEQS     32
#define MAX_LEN      640
#define LOGIT_BOUND  3e-2
#define NSIDE        3

typedef struct {
    int32_t  tok[MAX_LEN];
    int      len;            /* tokens known */
    int      prompt;
    int      gen;            /* decode iterations it takes part in */
    int32_t  table[MAX_LEN / BLOCK];
} seq_t;

typedef struct {
    const char        *name;
    pl_decode_mode_t   mode;
    pl_backend_t      *be;
    pl_model_t        *m;
    float             *logits;    /* [NSEQ][vocab] */
    const void        *dev;       /* last iteration's logits, backend */
} side_t;

typedef struct {
    int   shapes[64][2];          /* (padded seqs, context bucket) met */
    int   n_shapes;
    int   decodes;
    int   prefill_same;
    int   bitwise_bad;            /* graph iterations differing from
                                     the padded ones */
    double worst[NSIDE];          /* relative error against eager */
} tally_t;

static char  tmp[] = "/tmp/pl-graphs-XXXXXX";


/* ---- a Llama with head_dim 128, written to a temp folder ---- */

static void
put_tensor(json_t *hdr, FILE *f, size_t *off, const char *name, int rows,
    int cols, float scale, float mean)
{
    size_t  n = (size_t) (rows ? rows : 1) * cols, i;

    json_object_set_new(hdr, name, json_pack(
        "{s:s, s:o, s:[I, I]}", "dtype", "BF16", "shape",
        rows ? json_pack("[i, i]", rows, cols) : json_pack("[i]", cols),
        "data_offsets", (json_int_t) *off, (json_int_t) (*off + n * 2)));
    *off += n * 2;
    if (f == NULL) {
        return;
    }
    for (i = 0; i < n; i++) {
        uint16_t  h = pl_f32_to_bf16(mean + pair_val(scale));

        fwrite(&h, 2, 1, f);
    }
}


/* every tensor once into the header (f NULL), then again with data */
static void
put_llama(json_t *hdr, FILE *f, int V, int H, int I, int L, int NH, int NKV,
    int HD)
{
    size_t  off = 0;
    char    n[96];
    int     l;

    put_tensor(hdr, f, &off, "model.embed_tokens.weight", V, H, 1.0f, 0);
    for (l = 0; l < L; l++) {
#define T(s)  (snprintf(n, sizeof(n), "model.layers.%d." s, l), n)
        put_tensor(hdr, f, &off, T("input_layernorm.weight"), 0, H, 0.2f, 1);
        put_tensor(hdr, f, &off, T("self_attn.q_proj.weight"), NH * HD, H,
                   1.7f / sqrtf(H), 0);
        put_tensor(hdr, f, &off, T("self_attn.k_proj.weight"), NKV * HD, H,
                   1.7f / sqrtf(H), 0);
        put_tensor(hdr, f, &off, T("self_attn.v_proj.weight"), NKV * HD, H,
                   1.7f / sqrtf(H), 0);
        put_tensor(hdr, f, &off, T("self_attn.o_proj.weight"), H, NH * HD,
                   1.7f / sqrtf(NH * HD), 0);
        put_tensor(hdr, f, &off, T("post_attention_layernorm.weight"), 0, H,
                   0.2f, 1);
        put_tensor(hdr, f, &off, T("mlp.gate_proj.weight"), I, H,
                   1.7f / sqrtf(H), 0);
        put_tensor(hdr, f, &off, T("mlp.up_proj.weight"), I, H,
                   1.7f / sqrtf(H), 0);
        put_tensor(hdr, f, &off, T("mlp.down_proj.weight"), H, I,
                   1.7f / sqrtf(I), 0);
#undef T
    }
    put_tensor(hdr, f, &off, "model.norm.weight", 0, H, 0.2f, 1);
    put_tensor(hdr, f, &off, "lm_head.weight", V, H, 1.7f / sqrtf(H), 0);
}


static int
write_llama(const char *dir, int V, int H, int I, int L, int NH, int NKV,
    int HD)
{
    json_t    *hdr = json_object(), *cfg;
    char       path[512], *text;
    uint64_t   hlen;
    FILE      *f;

    mkdir(dir, 0755);
    cfg = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i,"
                    " s:f, s:f, s:b, s:i, s:i, s:s}",
                    "architectures", "LlamaForCausalLM", "model_type",
                    "llama", "vocab_size", V, "hidden_size", H,
                    "intermediate_size", I, "num_hidden_layers", L,
                    "num_attention_heads", NH, "num_key_value_heads", NKV,
                    "head_dim", HD, "max_position_embeddings", 4096,
                    "rms_norm_eps", 1e-5, "rope_theta", 10000.0,
                    "tie_word_embeddings", 0, "bos_token_id", 1,
                    "eos_token_id", 2, "torch_dtype", "bfloat16");
    snprintf(path, sizeof(path), "%s/config.json", dir);
    json_dump_file(cfg, path, 0);
    json_decref(cfg);

    put_llama(hdr, NULL, V, H, I, L, NH, NKV, HD);
    text = json_dumps(hdr, JSON_COMPACT);
    hlen = strlen(text);
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    f = fopen(path, "wb");
    if (f == NULL) {
        free(text);
        json_decref(hdr);
        return -1;
    }
    fwrite(&hlen, 8, 1, f);
    fputs(text, f);
    json_decref(hdr);
    hdr = json_object();
    put_llama(hdr, f, V, H, I, L, NH, NKV, HD);
    fclose(f);
    free(text);
    json_decref(hdr);
    return 0;
}


/* ---- the shapes rule of pl_model.h, written out again ---- */

static int
padded_seqs(int n, int most)
{
    int  p = n <= 2 ? n : n <= 4 ? 4 : (n + 7) / 8 * 8;

    return p < most ? p : most;
}


static int
bucket(int ctx)
{
    int  b = 256;

    while (b < ctx) {
        b *= 2;
    }
    return b;
}


static void
note_shape(tally_t *t, int seqs, int max_ctx)
{
    int  s = padded_seqs(seqs, MAX_SEQS), b = bucket(max_ctx), i;

    for (i = 0; i < t->n_shapes; i++) {
        if (t->shapes[i][0] == s && t->shapes[i][1] == b) {
            return;
        }
    }
    t->shapes[t->n_shapes][0] = s;
    t->shapes[t->n_shapes][1] = b;
    t->n_shapes++;
}


/* ---- running the sides ---- */

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
 * One iteration over the sequences in act[0 .. n): prefill (each its
 * whole prompt) or decode (each its last token).  Every side runs it;
 * logits rows in act order.
 */
static int
iterate(side_t *sides, seq_t *seqs, const int *act, int n, int prefill,
    int vocab, int *max_ctx_out)
{
    static int32_t  ids[MAX_TOKENS], pos[MAX_TOKENS], slots[MAX_TOKENS];
    static int32_t  tables[NSEQ * (MAX_LEN / BLOCK)];
    int32_t         qs[NSEQ + 1], cl[NSEQ], rows[NSEQ];
    pl_batch_t      b;
    pl_logits_t     out;
    char            err[256];
    int             i, j, k, t = 0;

    memset(&b, 0, sizeof(b));
    qs[0] = 0;
    for (i = 0; i < n; i++) {
        seq_t  *s = &seqs[act[i]];
        int     first = prefill ? 0 : s->len - 1;

        for (j = first; j < s->len; j++, t++) {
            ids[t] = s->tok[j];
            pos[t] = j;
            slots[t] = s->table[j / BLOCK] * BLOCK + j % BLOCK;
        }
        qs[i + 1] = t;
        cl[i] = s->len;
        rows[i] = t - 1;
        memcpy(tables + i * (MAX_LEN / BLOCK), s->table, sizeof(s->table));
        b.max_query_len = s->len - first > b.max_query_len
                          ? s->len - first : b.max_query_len;
        b.max_context_len = s->len > b.max_context_len ? s->len
                                                       : b.max_context_len;
    }
    b.num_tokens = t;
    b.num_seqs = n;
    b.token_ids = ids;
    b.positions = pos;
    b.slot_mapping = slots;
    b.query_start = qs;
    b.context_lens = cl;
    b.block_tables = tables;
    b.logits_rows = rows;
    b.max_blocks_per_seq = MAX_LEN / BLOCK;
    *max_ctx_out = b.max_context_len;

    for (k = 0; k < NSIDE; k++) {
        side_t  *sd = &sides[k];

        if (sd->dev != NULL) {
            pair_poison(sd->be, (void *) sd->dev, (size_t) n * vocab);
        }
        if (pl_model_forward_logits(sd->m, &b, NULL, &out, err, sizeof(err))
            != 0)
        {
            diag("%s forward: %s", sd->name, err);
            return -1;
        }
        sd->dev = out.data;
        for (i = 0; i < n * vocab; i++) {
            sd->logits[i] = NAN;
        }
        sd->be->download_f32(sd->be, sd->logits, out.data,
                             (size_t) n * vocab);
    }
    return 0;
}


/* prompts, generation lengths and a shuffled permutation of the cache */
static void
draw_seqs(seq_t *seqs, int vocab, int max_pos, int n_blocks)
{
    int32_t  perm[NSEQ * (MAX_LEN / BLOCK)];
    int      i, j, at = 0;

    pair_shuffle(perm, n_blocks);
    memset(seqs, 0, NSEQ * sizeof(seq_t));
    for (i = 0; i < NSEQ; i++) {
        seq_t  *s = &seqs[i];

        s->gen = i == 0 ? 2 * NSEQ + 2 : i == 1 ? 10 : 2 + 2 * (NSEQ - i);
        s->prompt = i == 0 ? 240 : i == 1 ? 505 : 3 + pair_int(40);
        if (s->prompt + s->gen >= max_pos) {
            s->prompt = max_pos - s->gen - 1 - pair_int(8);
        }
        s->len = s->prompt;
        for (j = 0; j < s->prompt; j++) {
            s->tok[j] = pair_int(vocab);
        }
        for (j = 0; j < MAX_LEN / BLOCK; j++) {
            s->table[j] = perm[at++];
        }
    }
}


/* compare every side with eager (side 0); graphs (2) with padded (1)
   bit for bit */
static void
compare(side_t *sides, int n, int vocab, int prefill, tally_t *t)
{
    size_t  count = (size_t) n * vocab;
    int     k;

    for (k = 1; k < NSIDE; k++) {
        double  e = pair_relerr(sides[k].logits, sides[0].logits, count);

        t->worst[k] = e > t->worst[k] ? e : t->worst[k];
    }
    if (prefill) {
        t->prefill_same = memcmp(sides[0].logits, sides[1].logits,
                                 count * sizeof(float)) == 0
                          && memcmp(sides[0].logits, sides[2].logits,
                                    count * sizeof(float)) == 0;
    } else if (memcmp(sides[1].logits, sides[2].logits,
                      count * sizeof(float)) != 0)
    {
        t->bitwise_bad++;
    }
}


/*
 * The iterations on three sides: side 0 is the reference for the greedy
 * tokens and the error bound, side 2 must match side 1 bit for bit.
 * Sides in graph mode record once per shape and replay the rest; the
 * others record nothing.
 */
static void
run_sides(side_t *sides, const char *dir, const char *label)
{
    seq_t               seqs[NSEQ];
    tally_t             t;
    int                 act[NSEQ], i, k, n, it, vocab, max_ctx, n_blocks;
    long                rec, rep;

    memset(&t, 0, sizeof(t));
    n_blocks = NSEQ * (MAX_LEN / BLOCK);
    for (k = 0; k < NSIDE; k++) {
        sides[k].m = fm_load(dir, sides[k].be, MAX_TOKENS, MAX_SEQS,
                             n_blocks, BLOCK);
        if (!ok(sides[k].m != NULL, "%s: loads (%s side)", label,
                sides[k].name))
        {
            goto done;
        }
        pl_model_set_decode_mode(sides[k].m, sides[k].mode);
    }
    vocab = pl_model_config(sides[0].m)->vocab_size;
    for (k = 0; k < NSIDE; k++) {
        sides[k].logits = malloc((size_t) NSEQ * vocab * sizeof(float));
    }
    draw_seqs(seqs, vocab,
              pl_model_config(sides[0].m)->max_position_embeddings,
              n_blocks);

    for (it = 0, n = NSEQ; n > 0; it++) {
        for (i = 0, n = 0; i < NSEQ; i++) {
            if (seqs[i].len < seqs[i].prompt + seqs[i].gen) {
                act[n++] = i;
            }
        }
        if (n == 0) {
            break;
        }
        if (iterate(sides, seqs, act, n, it == 0, vocab, &max_ctx) != 0)
        {
            ok(0, "%s: every iteration runs on every side", label);
            goto done;
        }
        compare(sides, n, vocab, it == 0, &t);
        if (it > 0) {
            note_shape(&t, n, max_ctx);
            t.decodes++;
        }
        for (i = 0; i < n; i++) {
            seq_t  *s = &seqs[act[i]];

            s->tok[s->len++] = argmax(sides[0].logits + (size_t) i * vocab,
                                      vocab);
        }
    }

    ok(t.prefill_same, "%s: the prefill iteration is identical on every "
       "side", label);
    ok(t.bitwise_bad == 0, "%s: %s gives the %s side's logits bit for "
       "bit (%d of %d decode iterations differ)", label, sides[2].name,
       sides[1].name, t.bitwise_bad, t.decodes);
    ok(t.worst[1] <= LOGIT_BOUND && t.worst[2] <= LOGIT_BOUND,
       "%s: %s %.2e and %s %.2e within %.0e of %s", label, sides[1].name,
       t.worst[1], sides[2].name, t.worst[2], LOGIT_BOUND, sides[0].name);
    for (k = 0; k < NSIDE; k++) {
        pl_model_graph_counts(sides[k].m, &rec, &rep);
        if (sides[k].mode != PL_DECODE_GRAPHS) {
            ok(rec == 0 && rep == 0, "%s: %s records nothing", label,
               sides[k].name);
            continue;
        }
        is_int(rec, t.n_shapes, "%s: %s: one recording per decode shape "
               "met", label, sides[k].name);
        is_int(rep, t.decodes - t.n_shapes, "%s: %s: every other decode "
               "iteration (of %d) is a replay", label, sides[k].name,
               t.decodes);
    }

done:
    for (k = 0; k < NSIDE; k++) {
        pl_model_free(sides[k].m);
        free(sides[k].logits);
    }
}


/* eager (the reference), padded and graphs on one backend */
static void
run_model(pl_backend_t *be, const char *dir, const char *label)
{
    side_t  sides[NSIDE] = {
        { "eager", PL_DECODE_EAGER, be, NULL, NULL, NULL },
        { "padded", PL_DECODE_PADDED, be, NULL, NULL, NULL },
        { "graphs", PL_DECODE_GRAPHS, be, NULL, NULL, NULL },
    };

    run_sides(sides, dir, label);
}


/* eager and graphs on be (PDL on), graphs on a backend with PDL off */
static void
pdl_off_on(pl_backend_t *be, const char *dir, const char *label)
{
    side_t         sides[NSIDE] = {
        { "eager", PL_DECODE_EAGER, be, NULL, NULL, NULL },
        { "graphs PDL off", PL_DECODE_GRAPHS, NULL, NULL, NULL, NULL },
        { "graphs PDL on", PL_DECODE_GRAPHS, be, NULL, NULL, NULL },
    };
    pl_backend_t  *off;
    char           err[256];

    setenv("PAGEDLLM_CUDA_PDL", "0", 1);
    pl_cuda_knobs_reload();
    off = pl_backend_cuda_create(0, err, sizeof(err));
    unsetenv("PAGEDLLM_CUDA_PDL");
    pl_cuda_knobs_reload();
    if (!ok(off != NULL, "%s: a second backend starts, PDL off", label)) {
        diag("%s", err);
        return;
    }
    sides[1].be = off;
    run_sides(sides, dir, label);
    off->destroy(off);
}


/* ---- the profiling run ---- */

static int
decode_once(pl_model_t *m, pl_backend_t *be, int n, float *logits,
    int vocab)
{
    int32_t      ids[16], pos[16], slots[16], qs[17], cl[16], rows[16];
    int32_t      tables[16 * 2];
    pl_batch_t   b;
    pl_logits_t  out;
    char         err[256];
    int          i;

    for (i = 0; i < n; i++) {
        ids[i] = (i * 37 + 5) % vocab;
        pos[i] = 10 + i;
        cl[i] = 11 + i;
        tables[i * 2] = 2 * i + 1;
        tables[i * 2 + 1] = 2 * i;
        slots[i] = tables[i * 2 + pos[i] / BLOCK] * BLOCK + pos[i] % BLOCK;
        qs[i] = i;
        rows[i] = i;
    }
    qs[n] = n;
    b = (pl_batch_t) {
        .num_tokens = n, .num_seqs = n, .token_ids = ids, .positions = pos,
        .slot_mapping = slots, .query_start = qs, .context_lens = cl,
        .block_tables = tables, .logits_rows = rows,
        .max_blocks_per_seq = 2, .max_query_len = 1,
        .max_context_len = 10 + n
    };
    if (pl_model_forward_logits(m, &b, NULL, &out, err, sizeof(err)) != 0) {
        diag("%s", err);
        return -1;
    }
    be->download_f32(be, logits, out.data, (size_t) n * vocab);
    return 0;
}


static void
profiling_run(pl_backend_t *be, const char *dir)
{
    pl_model_profile_t  prof;
    pl_model_t         *g = NULL, *e = NULL;
    float              *lg = NULL, *le = NULL;
    char                err[256];
    long                rec, rep;
    int                 vocab, rc;

    g = pl_model_load(dir, be, err, sizeof(err));
    e = fm_load(dir, be, 512, 16, 64, BLOCK);
    if (!ok(g != NULL && e != NULL
            && pl_model_prepare(g, 512, 16, err, sizeof(err)) == 0,
            "profiling: the tiny model loads twice"))
    {
        goto done;
    }
    pl_model_set_decode_mode(e, PL_DECODE_EAGER);
    rc = pl_model_profile(g, BLOCK, 2048, &prof, err, sizeof(err));
    if (!ok(rc == 0, "profiling: the run succeeds")) {
        diag("%s", err);
        goto done;
    }
    diag("profiling: %d tokens in %d sequences, temporary cache %zu bytes, "
         "one decode graph %zu bytes, %d shapes", prof.tokens, prof.seqs,
         prof.kv_bytes, prof.graph_bytes, prof.graph_shapes);
    ok(prof.tokens == 512 && prof.seqs == 16, "profiling: the largest "
       "batch prepared ran (512 tokens in 16 sequences)");
    is_int(prof.kv_bytes, 4 * pl_model_kv_block_bytes(g, BLOCK),
           "profiling: the temporary cache is four blocks");
    is_int(prof.graph_shapes, 5 * 4, "profiling: graph shapes for 16 "
           "sequences (1, 2, 4, 8, 16) and contexts to 2048 (256 .. "
           "2048)");
    pl_model_graph_counts(g, &rec, &rep);
    is_int(rec, 1, "profiling: the widest decode batch was recorded");

    /* the same shape against the real cache: recorded anew, right */
    vocab = pl_model_config(g)->vocab_size;
    lg = malloc((size_t) 16 * vocab * sizeof(float));
    le = malloc((size_t) 16 * vocab * sizeof(float));
    if (!ok(pl_model_kv_alloc(g, 64, BLOCK, err, sizeof(err)) == 0
            && decode_once(g, be, 16, lg, vocab) == 0
            && decode_once(e, be, 16, le, vocab) == 0
            && decode_once(g, be, 16, lg, vocab) == 0
            && decode_once(e, be, 16, le, vocab) == 0,
            "profiling: decoding after the real cache is allocated runs"))
    {
        goto done;
    }
    pl_model_graph_counts(g, &rec, &rep);
    ok(rec == 2 && rep == 1, "profiling: the profile's recording is gone "
       "with its cache (recorded %ld, replayed %ld)", rec, rep);
    ok(pair_relerr(lg, le, (size_t) 16 * vocab) <= LOGIT_BOUND,
       "profiling: the replay after it matches eager decoding");

done:
    free(lg);
    free(le);
    pl_model_free(g);
    pl_model_free(e);
}


int
main(void)
{
    const char    *build = getenv("PAGEDLLM_BUILD");
    char           tiny[1024], llama[64], wide[64], err[256];
    pl_backend_t  *be;

    pair_seed();
    snprintf(tiny, sizeof(tiny), "%s/models/tiny", build ? build : "build");
    be = pl_backend_cuda_create(0, err, sizeof(err));
    if (!ok(be != NULL, "the CUDA backend starts")) {
        diag("%s", err);
        return done_testing();
    }
    if (!ok(mkdtemp(tmp) != NULL, "a temp folder for the models")) {
        return done_testing();
    }
    snprintf(llama, sizeof(llama), "%s/llama128", tmp);
    if (ok(write_llama(llama, 1024, 512, 1024, 2, 4, 1, 128) == 0,
           "a Llama with head_dim 128 and GQA 4 written to %s", llama))
    {
        run_model(be, llama, "llama hd128");
    }
    run_model(be, tiny, "tiny hd16");
    run_model(be, "t/fixtures/golden/opt_pre_ln", "opt pre-LN");
    profiling_run(be, tiny);

    /* 8192-row gate_up and 4096-row lm_head: the GEMV kernel at every
       batch size; 1536-row qkv: the GEMV above 8 rows, cuBLAS below */
    snprintf(wide, sizeof(wide), "%s/llama-wide", tmp);
    if (ok(write_llama(wide, 4096, 1024, 4096, 2, 8, 2, 128) == 0,
           "a wider Llama written to %s", wide))
    {
        pdl_off_on(be, wide, "pdl");
    }

    /* fp16 activations, as --dtype float16 asks (tensor-core decode and
       prefill, the GEMV) */
    {
        pl_model_options_t  f16 = { 1, PL_MODEL_DTYPE_F16 };
        pl_model_options_t  dflt = { 1, PL_MODEL_DTYPE_AUTO };

        pl_model_set_default_options(&f16);
        run_model(be, llama, "llama hd128 fp16");
        ok(be->act_dtype == PL_DT_F16, "--dtype float16: the backend "
           "ran fp16 activations");
        pdl_off_on(be, wide, "pdl fp16");
        pl_model_set_default_options(&dflt);
    }
    fm_rmtree(tmp);
    be->destroy(be);
    return done_testing();
}
