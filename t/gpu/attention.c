/*
 * Paged attention on the CUDA backend against the CPU backend: ragged
 * batches mixing decode rows, prefill chunks over earlier context and
 * whole prefills; physical blocks shuffled; prompt blocks shared between
 * sequences; contexts from 1 to 32k tokens; block sizes 8, 16, 32, then
 * 1, 2, 4 and 64 (block_size_cases); head
 * sizes 64, 96, 128, 256; grouped-query ratios 1 to 32 (7, 12, 20 among
 * them); bf16 activations, then a subset in fp16.
 * The batch reaches the GPU through batch_upload, as the model sends it.
 *
 * Prefill rows run on one of two kernels: on Hopper, head size 128, the
 * wgmma one (tiles of 128 rows, two warpgroups of 64, KV tiles of 128),
 * else the mma.sync one; every name says which ran, and on Hopper the
 * wgmma one must have loaded with TMA unless told otherwise (block sizes
 * of 8 and more).  The prefill edge cases (rows around the tile and
 * warpgroup sizes, prefixes on and off the tile grid, many KV tiles,
 * partial tiles of sequences that are not the batch's last, chunks over
 * a longer context, block sizes past the 128-token KV tile and under
 * the TMA box's 8 rows) run on both, the wgmma one with TMA and with
 * cp.async loads (PAGEDLLM_CUDA_PREFILL_LOADS=cpasync, what block sizes
 * under 8 take).  Every cache
 * slot past the contexts holds NaN, as unwritten slots may: a kernel
 * that lets one reach a product (0 x NaN in P V) fails.  A failing
 * comparison says where the output differs: rows and dimensions as maps
 * of 8-wide groups, and the first differing (row, head) with its place
 * in the tile.
 *
 * Decode rows run on one of two forms of the decode kernel: groups of up
 * to 8 query heads per KV head on the swapped one (query heads as the
 * MMA's 8 columns), larger ones on the 16-row one; every decode case
 * checks that the form it expects ran, and the group sizes 1, 2, 3, 4, 5,
 * 8, 12, 16 and 20 run on both head sizes.  decode_merge_cases
 * runs the split merge on both forms at split counts around its batch
 * of eight partials, empty splits among them, and checks that each
 * count ran (with a fixed count, through global partials and the last
 * block); decode_cluster_cases the merge within a thread-block cluster,
 * at cluster sizes 2, 3, 5 and 8 and as the default chooses it;
 * decode_heads_cases blocks that take two or four KV heads each;
 * decode_knob_cases the remaining launch knobs.  The knobs are read once
 * by the backend: every change here goes through knob_set and knob_unset,
 * which have it read them again (pl_cuda_knobs_reload).
 *
 * Then again with fp16 activations (fp16_cases): a subset that still
 * takes every kernel (decode, split merge in both orderings, mma.sync and
 * wgmma prefill with TMA and cp.async loads, CUDA-core) and every block
 * and head size once; the prefill kernel's name must say fp16.
 */

#include "pair.h"

#define ATTN_BOUND  1e-2

/* kernels/prefill_attention.cu: the kernel of the last prefill launch */
const char *pl_cuda_prefill_kernel(void);
/* kernels/decode_attention.cu: the form of the last decode launch, and
   its number of KV splits */
const char *pl_cuda_decode_form(void);
int pl_cuda_decode_splits(void);
int pl_cuda_decode_cluster(void);
int pl_cuda_decode_heads(void);

typedef struct {
    int  qlen;
    int  ctx;
    int  share;          /* share the first full blocks of sequence 0 */
} seq_spec_t;

typedef struct {
    int         block_size;
    int         head_dim;
    int         n_heads;
    int         n_kv_heads;
    int         num_seqs;
    seq_spec_t  seqs[12];
} attn_case_t;

static pair_t  P;
static int     bucket;      /* max_context_len at least this (a CUDA
                               graph's context bucket); 0: the longest */


/* set a kernel knob, and have the backend read the knobs again */
static void
knob_set(const char *name, const char *value)
{
    setenv(name, value, 1);
    pl_cuda_knobs_reload();
}

static void
knob_unset(const char *name)
{
    unsetenv(name);
    pl_cuda_knobs_reload();
}


/* Fill host batch arrays: block tables over a shuffled pool. */
static int
build_batch(const attn_case_t *c, pl_batch_t *b, int32_t *qs, int32_t *cl,
    int32_t **tables, int *num_blocks)
{
    int       bs = c->block_size, s, i, mb = 0, total = 0, next = 0;
    int32_t  *perm;

    for (s = 0; s < c->num_seqs; s++) {
        int  nb = (c->seqs[s].ctx + bs - 1) / bs;

        mb = nb > mb ? nb : mb;
        total += nb;
    }
    total += 7;
    perm = malloc(total * sizeof(int32_t));
    pair_shuffle(perm, total);
    *tables = malloc((size_t) c->num_seqs * mb * sizeof(int32_t));
    qs[0] = 0;
    b->max_query_len = 0;
    b->max_context_len = 0;
    for (s = 0; s < c->num_seqs; s++) {
        const seq_spec_t  *sp = &c->seqs[s];
        int                nb = (sp->ctx + bs - 1) / bs;
        int                shared = 0;

        if (sp->share) {
            shared = sp->ctx / bs < c->seqs[0].ctx / bs
                     ? sp->ctx / bs : c->seqs[0].ctx / bs;
        }
        for (i = 0; i < mb; i++) {
            (*tables)[s * mb + i] = i < shared ? (*tables)[i]
                                  : i < nb ? perm[next++] : -1;
        }
        qs[s + 1] = qs[s] + sp->qlen;
        cl[s] = sp->ctx;
        b->max_query_len = sp->qlen > b->max_query_len ? sp->qlen
                                                       : b->max_query_len;
        b->max_context_len = sp->ctx > b->max_context_len
                             ? sp->ctx : b->max_context_len;
    }
    free(perm);
    if (bucket > b->max_context_len) {
        b->max_context_len = bucket;
    }
    b->num_seqs = c->num_seqs;
    b->num_tokens = qs[c->num_seqs];
    b->query_start = qs;
    b->context_lens = cl;
    b->block_tables = *tables;
    b->max_blocks_per_seq = mb;
    *num_blocks = total;
    return b->num_tokens;
}


/* ||got - want|| / ||want|| over one row of one head */
static double
row_err(const float *g, const float *c, int n)
{
    double  num = 0.0, den = 0.0;
    int     i;

    for (i = 0; i < n; i++) {
        double  d = (double) g[i] - (double) c[i];

        if (!isfinite(g[i])) {
            return INFINITY;
        }
        num += d * d;
        den += (double) c[i] * c[i];
    }
    return sqrt(num / (den > 0.0 ? den : 1.0));
}


/*
 * Where a failed comparison differs: per sequence, which 8-row groups of
 * a 128-row tile and which 8-wide groups of dimensions hold bad (row,
 * head) pairs ('x'), unwritten ones (NaN) counted apart; then the first
 * bad pair with its place in the tile (consumer group of 64 rows, warp of
 * 16, row in the warp) and its worst dimension.
 */
static void
locate(const attn_case_t *c, const int32_t *qs, const float *g,
    const float *w)
{
    int  s, r, h, i, hd = c->head_dim, nh = c->n_heads, shown = 0;

    for (s = 0; s < c->num_seqs; s++) {
        char  rmap[17], dmap[33];
        int   bad = 0, nan = 0, nd = hd / 8 < 32 ? hd / 8 : 32;

        memset(rmap, '.', 16);
        memset(dmap, '.', nd);
        rmap[16] = '\0';
        dmap[nd] = '\0';
        for (r = qs[s]; r < qs[s + 1]; r++) {
            for (h = 0; h < nh; h++) {
                const float  *gr = g + ((size_t) r * nh + h) * hd;
                const float  *wr = w + ((size_t) r * nh + h) * hd;
                int           row = r - qs[s], worst = 0;
                double        e = row_err(gr, wr, hd);

                if (e <= 4 * ATTN_BOUND) {
                    continue;
                }
                bad++;
                nan += isinf(e) != 0;
                rmap[(row % 128) / 8] = 'x';
                for (i = 0; i < hd; i++) {
                    if (!(fabsf(gr[i] - wr[i]) <= 0.05f
                          + 0.05f * fabsf(wr[i])))
                    {
                        dmap[i / 8 < nd ? i / 8 : nd - 1] = 'x';
                    }
                    if (!(fabsf(gr[i] - wr[i])
                          <= fabsf(gr[worst] - wr[worst])))
                    {
                        worst = i;
                    }
                }
                if (shown++ < 3) {
                    diag("  seq %d row %d (tile row %d: group %d, warp %d, "
                         "row %d) head %d: error %.2e, dim %d got %g want "
                         "%g", s, row, row % 128, row % 128 / 64,
                         row % 64 / 16, row % 16, h, e, worst, gr[worst],
                         wr[worst]);
                }
            }
        }
        if (bad > 0) {
            diag("  seq %d (%d rows, context %d): %d of %d (row, head) "
                 "bad, %d unwritten; tile rows by 8 [%s] dims by 8 [%s]",
                 s, qs[s + 1] - qs[s], c->seqs[s].ctx, bad,
                 (qs[s + 1] - qs[s]) * nh, nan, rmap, dmap);
        }
    }
}


/* NaN in every cache slot outside the contexts: past each context's end
   in its last block, and the blocks no table names */
static void
poison_unused(const attn_case_t *c, const pl_batch_t *b, int num_blocks,
    float *kv, float *vv)
{
    size_t   row = (size_t) c->n_kv_heads * c->head_dim, i;
    size_t   slots = (size_t) num_blocks * c->block_size;
    char    *used = calloc(slots, 1);
    int      s, t, bs = c->block_size;

    for (s = 0; s < c->num_seqs; s++) {
        const int32_t  *tbl = b->block_tables
                              + (size_t) s * b->max_blocks_per_seq;

        for (t = 0; t < c->seqs[s].ctx; t++) {
            used[(size_t) tbl[t / bs] * bs + t % bs] = 1;
        }
    }
    for (i = 0; i < slots * row; i++) {
        if (!used[i / row]) {
            kv[i] = NAN;
            vv[i] = NAN;
        }
    }
    free(used);
}


/* Hopper's prefill kernel loads with TMA unless the environment asks
   for cp.async or the block size is under TMA's 8-row box; with fp16
   activations the tensor-core prefill is the fp16 one */
static void
check_loads(const attn_case_t *c, const char *name)
{
    const char  *kernel = pl_cuda_prefill_kernel();
    const char  *loads = getenv("PAGEDLLM_CUDA_PREFILL_LOADS");

    if (P.gpu->act_dtype == PL_DT_F16
        && (c->head_dim == 64 || c->head_dim == 128))
    {
        ok(strstr(kernel, "fp16") != NULL, "fp16 prefill kernel: %s", name);
    }

    if (strncmp(kernel, "sm90", 4) == 0 && c->block_size >= 8
        && (loads == NULL || strcmp(loads, "tma") == 0))
    {
        ok(strstr(kernel, "tma loads") != NULL, "TMA loads: %s", name);
    }
}


/* q_amp 0: every score 0, so each row averages the V rows it may see:
   masking, the V gather and O += P V without the Q K^T product */
static void
run_case_q(const attn_case_t *c, const char *what, float q_amp)
{
    int          num_blocks, rows;
    int32_t      qs[13], cl[12], *tables;
    pl_batch_t   hb;
    size_t       cs, qn;
    float       *kv, *vv, *q;
    void        *kc, *kg, *vc, *vg, *qc, *qg, *oc, *og;
    const pl_batch_t  *gb;
    char         name[160];

    memset(&hb, 0, sizeof(hb));
    rows = build_batch(c, &hb, qs, cl, &tables, &num_blocks);
    cs = (size_t) num_blocks * c->block_size * c->n_kv_heads * c->head_dim;
    qn = (size_t) rows * c->n_heads * c->head_dim;
    kv = pair_rand(cs, 1.0f);
    vv = pair_rand(cs, 1.0f);
    q = pair_rand(qn, q_amp);
    poison_unused(c, &hb, num_blocks, kv, vv);
    kc = pair_put(P.cpu, kv, cs);
    kg = pair_put(P.gpu, kv, cs);
    vc = pair_put(P.cpu, vv, cs);
    vg = pair_put(P.gpu, vv, cs);
    qc = pair_put(P.cpu, q, qn);
    qg = pair_put(P.gpu, q, qn);
    oc = P.cpu->alloc(P.cpu, qn * 4);
    og = P.gpu->alloc(P.gpu, qn * 2);
    pair_poison(P.gpu, og, qn);

    gb = P.gpu->batch_upload(P.gpu, &hb);
    P.gpu->attention(P.gpu, og, qg, kg, vg, gb, c->n_heads, c->n_kv_heads,
                     c->head_dim, c->block_size,
                     1.0f / sqrtf((float) c->head_dim));
    P.cpu->attention(P.cpu, oc, qc, kc, vc, P.cpu->batch_upload(P.cpu, &hb),
                     c->n_heads, c->n_kv_heads, c->head_dim, c->block_size,
                     1.0f / sqrtf((float) c->head_dim));
    snprintf(name, sizeof(name), "attention %s%s%s%s: block %d, head %d, "
             "heads %d/%d, %d seqs, %d rows, max context %d", what,
             hb.max_query_len >= 16 ? " [" : "",
             hb.max_query_len >= 16 ? pl_cuda_prefill_kernel() : "",
             hb.max_query_len >= 16 ? "]" : "", c->block_size,
             c->head_dim, c->n_heads, c->n_kv_heads, c->num_seqs, rows,
             hb.max_context_len);
    if (hb.max_query_len >= 16) {
        check_loads(c, name);
    }
    if (!pair_close(&P, og, oc, qn, ATTN_BOUND, name)) {
        float  *g = pair_get(P.gpu, og, qn), *w = pair_get(P.cpu, oc, qn);

        locate(c, qs, g, w);
        free(g);
        free(w);
    }

    P.gpu->free(P.gpu, kg);
    P.gpu->free(P.gpu, vg);
    P.gpu->free(P.gpu, qg);
    P.gpu->free(P.gpu, og);
    P.cpu->free(P.cpu, kc);
    P.cpu->free(P.cpu, vc);
    P.cpu->free(P.cpu, qc);
    P.cpu->free(P.cpu, oc);
    free(kv);
    free(vv);
    free(q);
    free(tables);
}


static void
run_case(const attn_case_t *c, const char *what)
{
    run_case_q(c, what, 3.0f);
}


/* decode rows, a chunk over earlier context, a whole prefill, a
   one-token context and two sequences sharing prompt blocks */
static void
mixed_case(int bs, int hd, int nh, int nkv)
{
    attn_case_t  c = { bs, hd, nh, nkv, 8, {
        { 1, 1 + pair_int(700), 0 },
        { 1, 1 + pair_int(2000), 0 },
        { 37, 300 + pair_int(200), 0 },
        { 64, 64, 0 },
        { 1, 1, 0 },
        { 1, 900, 1 },
        { 5, 1000, 1 },
        { 1, bs, 0 },
    } };

    c.seqs[0].ctx = 600 + pair_int(300);
    run_case(&c, "mixed batch");
}


/* prefill chunks long enough for the tensor-core kernel, next to short
   ones and decodes; then a batch of prefills only */
static void
prefill_case(int bs, int hd, int nh, int nkv)
{
    attn_case_t  c = { bs, hd, nh, nkv, 7, {
        { 200, 1500 + pair_int(500), 0 },
        { 64, 64, 0 },
        { 130, 130, 0 },
        { 1, 700, 0 },
        { 17, 40, 0 },
        { 16, 2100, 1 },
        { 15, 300, 0 },
    } };
    attn_case_t  only = { bs, hd, nh, nkv, 3, {
        { 100 + pair_int(100), 1000, 0 },
        { 16, 16, 0 },
        { 333, 333, 1 },
    } };

    run_case(&c, "prefill chunks");
    run_case(&only, "prefills only");
}


/* The decode kernel's form that served a batch of decode rows with
   these heads: the swapped one when a KV head's query heads fit in its 8
   columns. */
static void
check_form(const attn_case_t *c)
{
    int  group = c->n_heads / c->n_kv_heads;

    is_str(pl_cuda_decode_form(), group <= 8 ? "swapped" : "16 rows",
           "decode form: head %d, heads %d/%d", c->head_dim, c->n_heads,
           c->n_kv_heads);
}


/* the last decode launch ran want KV splits */
static void
check_splits(int want, const char *what)
{
    is_int(pl_cuda_decode_splits(), want, "decode splits: %s", what);
}


static void
decode_case(int bs, int hd, int nh, int nkv, int num_seqs, int max_ctx)
{
    attn_case_t  c = { bs, hd, nh, nkv, num_seqs, { { 0, 0, 0 } } };
    int          s;

    for (s = 0; s < num_seqs; s++) {
        c.seqs[s].qlen = 1;
        c.seqs[s].ctx = s == 0 ? max_ctx : 1 + pair_int(max_ctx);
        c.seqs[s].share = s > 0 && s % 3 == 0;
    }
    run_case(&c, "decode");
    check_form(&c);
}


/* Short contexts (1 .. 192) under a max_context_len of 256, as a CUDA
   graph's bucket passes it: splits past every context write empty
   partials. */
static void
decode_bucket_case(int hd, int nh, int nkv, int num_seqs)
{
    attn_case_t  c = { 16, hd, nh, nkv, num_seqs, { { 0, 0, 0 } } };
    int          s;

    for (s = 0; s < num_seqs; s++) {
        c.seqs[s].qlen = 1;
        c.seqs[s].ctx = s == 0 ? 192 : 1 + pair_int(192);
        c.seqs[s].share = s % 4 == 3;
    }
    bucket = 256;
    run_case(&c, "decode, context bucket 256");
    check_form(&c);
    bucket = 0;
}


/* knob=n, said in the output */
static void
knob_set_int(const char *knob, int n)
{
    char  v[16];

    snprintf(v, sizeof(v), "%d", n);
    knob_set(knob, v);
    diag("%s=%s", knob, v);
}


/* Each group size on the form that serves it: 3 and 5 leave part of the
   swapped form's 8 columns as padding, 12 part of the 16-row form's rows,
   16 fills them, 20 takes two blocks of rows, the second mostly
   padding. */
static void
decode_group_cases(void)
{
    static const int  groups[] = { 1, 2, 3, 4, 5, 8, 12, 16, 20 };
    int               n = sizeof(groups) / sizeof(groups[0]), h, i;

    for (h = 64; h <= 128; h += 64) {
        for (i = 0; i < n; i++) {
            decode_case(16, h, 2 * groups[i], 2, 4, 2500);
        }
    }
}


/* the last decode launch merged its splits through a cluster (1) or not */
static void
check_cluster(int want, const char *what)
{
    is_int(pl_cuda_decode_cluster(), want, "decode cluster merge: %s", what);
}


/*
 * knob=n, then the split merge's cases: a long sequence, twelve of mixed
 * lengths (splits past the short ones are empty), a group of 7 and the
 * 16-row form; each ran n splits, through a cluster or not (cluster).
 */
static void
merge_round(const char *knob, int n, int cluster)
{
    /* block size, head size, heads, KV heads, sequences, longest context */
    static const int    cases[4][6] = { { 16, 128, 8, 1, 1, 5000 },
                                        { 8, 64, 4, 4, 12, 5000 },
                                        { 16, 128, 28, 4, 2, 9000 },
                                        { 16, 128, 32, 1, 3, 5000 } };
    static const char  *what[] = { "one sequence, group 8",
                                   "twelve sequences", "group 7",
                                   "16-row form" };
    int                 k;

    knob_set_int(knob, n);
    for (k = 0; k < 4; k++) {
        decode_case(cases[k][0], cases[k][1], cases[k][2], cases[k][3],
                    cases[k][4], cases[k][5]);
        check_splits(n, what[k]);
        check_cluster(cluster, what[k]);
    }
}


/*
 * The split merge (attn_merge_if_last: the last split block to finish
 * folds every split's partial in, eight splits' loads at a time) at
 * 2, 5, 8, 9, 12 and 16 splits: under, at and past one batch of eight,
 * on a single long sequence, on twelve sequences of mixed lengths
 * (splits past the shorter contexts are empty), on a GQA group of 7 and
 * on the 16-row form (a group of 32, two blocks of 16 query heads per
 * KV head); then on a context-bucket batch whose last split is empty.
 */
static void
decode_merge_cases(void)
{
    static const int  splits[] = { 2, 5, 8, 9, 12, 16 };
    size_t            i;

    for (i = 0; i < sizeof(splits) / sizeof(splits[0]); i++) {
        merge_round("PAGEDLLM_CUDA_ATTN_SPLITS", splits[i], 0);
    }
    knob_set("PAGEDLLM_CUDA_ATTN_SPLITS", "4");
    knob_set("PAGEDLLM_CUDA_ATTN_SPLIT_MIN", "64");
    diag("PAGEDLLM_CUDA_ATTN_SPLITS=4 PAGEDLLM_CUDA_ATTN_SPLIT_MIN=64");
    decode_bucket_case(128, 32, 32, 1);
    check_splits(4, "context bucket, empty last split");
    knob_unset("PAGEDLLM_CUDA_ATTN_SPLIT_MIN");
    knob_unset("PAGEDLLM_CUDA_ATTN_SPLITS");
}


/*
 * The split merge over a thread-block cluster's shared memory: the
 * default's choice on a long single sequence (splits in a cluster of up
 * to 8), then each cluster size forced (PAGEDLLM_CUDA_ATTN_CLUSTER=n) on
 * the cases of decode_merge_cases: a long sequence, twelve of mixed
 * lengths (the splits past the short ones are empty: they take part in
 * the merge with nothing), a group of 7, the 16-row form, and a context
 * bucket whose last split is empty; =0 keeps the global merge.
 */
static void
decode_cluster_cases(void)
{
    static const int  sizes[] = { 2, 3, 5, 8 };
    size_t            i;
    int               st;

    decode_case(16, 128, 32, 32, 1, 4096);
    check_cluster(1, "default, one sequence, 32 heads");
    knob_set("PAGEDLLM_CUDA_ATTN_SPLIT_MIN", "64");
    for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        merge_round("PAGEDLLM_CUDA_ATTN_CLUSTER", sizes[i], 1);
        decode_bucket_case(128, 32, 32, 1);
        /* splits of whole 64-token tiles over the bucket: 5 and 8 make 4,
           the last past the context */
        st = ((256 + sizes[i] - 1) / sizes[i] + 63) / 64 * 64;
        check_splits((256 + st - 1) / st, "cluster, context bucket");
        check_cluster(1, "context bucket");
    }
    knob_set_int("PAGEDLLM_CUDA_ATTN_CLUSTER", 0);
    decode_case(16, 128, 32, 32, 1, 4096);
    check_cluster(0, "off, one sequence, 32 heads");
    knob_unset("PAGEDLLM_CUDA_ATTN_CLUSTER");
    knob_unset("PAGEDLLM_CUDA_ATTN_SPLIT_MIN");
}


static void long_case(void);


/* the last decode launch's blocks each took want KV heads */
static void
check_heads(int want, const char *what)
{
    is_int(pl_cuda_decode_heads(), want, "decode KV heads a block: %s",
           what);
}


/*
 * Blocks of several KV heads (the swapped form's HB: a tile is 64 / HB tokens
 * of HB heads, warp w computes head w / (4 / HB)), forced with
 * PAGEDLLM_CUDA_ATTN_HEADS=2 and 4: groups 1 to 8 where their query heads fit
 * (HB - 1 groups and the last warp's 8 rows in 16), larger ones on one head a
 * block; head sizes 64 and 128, block sizes 1, 4, 8, 16, 32 and 64 (with
 * HB = 4 a tile of 16 tokens: sixteen blocks, four, two, one, half of one, a
 * quarter of one); contexts of 1 to 3000 tokens in
 * one batch, a context bucket past every context, rows of short query chunks
 * and prefill rows beside (mixed_case), 32k tokens (the staged table page
 * turns over); a KV head count that HB does not divide stays on one head a
 * block.  Then the default's choice (enough (row, KV head) pairs for a wave of
 * blocks: 12 rows of 128 KV heads or of 64): 4 for groups of one at contexts
 * up to 256, 1 past that; 2 for groups of 4 at any context; 1 for 12 rows of 8
 * KV heads (it splits them instead), and 1 under HEADS=1.
 */
static void
decode_heads_cases(void)
{
    static const int  groups[] = { 1, 2, 3, 4, 8 };
    static const int  bss[] = { 1, 4, 8, 16, 32, 64 };
    /* the default's choice, 12 rows: head size, heads, KV heads, longest
       context, KV heads a block */
    static const struct {
        int          hd, nh, nkv, ctx, want;
        const char  *what;
    }                 dflt[] = {
        { 128, 128, 128, 256, 4, "default, 1536 pairs, contexts to 256" },
        { 64, 128, 128, 257, 1, "default, 1536 pairs, contexts to 257" },
        { 128, 256, 64, 256, 2, "default, 768 pairs, group 4, to 256" },
        { 128, 256, 64, 2000, 2, "default, 768 pairs, group 4, to 2000" },
        { 128, 8, 8, 2000, 1, "default, 96 pairs" },
    };
    size_t            i;
    int               hb, fits, b;

    for (hb = 2; hb <= 4; hb *= 2) {
        knob_set_int("PAGEDLLM_CUDA_ATTN_HEADS", hb);
        for (i = 0; i < sizeof(groups) / sizeof(groups[0]); i++) {
            fits = (hb - 1) * groups[i] + 8 <= 16;
            for (b = 0; b < (int) (sizeof(bss) / sizeof(bss[0])); b++) {
                decode_case(bss[b], 128, 4 * groups[i], 4, 12, 3000);
                check_heads(fits ? hb : 1, "head 128");
            }
            decode_case(16, 64, 4 * groups[i], 4, 12, 3000);
            check_heads(fits ? hb : 1, "head 64");
        }
        decode_bucket_case(128, 32, 32, 12);
        check_heads(hb, "context bucket 256, group 1");
        decode_bucket_case(64, 8, 2, 5);
        check_heads(hb == 2 ? 2 : 1, "context bucket 256, 2 KV heads");
        mixed_case(16, 128, 8, 8);
        check_heads(hb, "mixed batch, group 1");
        mixed_case(32, 64, 16, 4);
        check_heads(hb == 2 ? 2 : 1, "mixed batch, group 4");
        long_case();
        check_heads(hb == 2 ? 2 : 1, "long contexts, 2 KV heads");
        decode_case(16, 128, 6, 6, 5, 1000);
        check_heads(hb == 2 ? 2 : 1, "6 KV heads");
    }
    knob_set_int("PAGEDLLM_CUDA_ATTN_HEADS", 1);
    decode_case(16, 128, 128, 128, 12, 256);
    check_heads(1, "HEADS=1, 1536 (row, KV head) pairs");
    knob_unset("PAGEDLLM_CUDA_ATTN_HEADS");
    for (i = 0; i < sizeof(dflt) / sizeof(dflt[0]); i++) {
        decode_case(16, dflt[i].hd, dflt[i].nh, dflt[i].nkv, 12,
                    dflt[i].ctx);
        check_heads(dflt[i].want, dflt[i].what);
    }
}


/*
 * The decode kernel's other launch knobs (pl_cuda.cuh): blocks numbered
 * rows first (ORDER=0, the default past 65535 rows); 7 splits (a count
 * that does not divide the contexts); as many splits as allowed
 * (ATTN_MAX_SPLITS: the in-kernel merge of many partials, empty ones
 * among them); one split a row, so that a 32k context walks four pages
 * of the staged block table; the global merge where the default takes a
 * cluster (CLUSTER=0).  A single sequence in the context bucket (the
 * engine's batch-1 decode) and the long contexts run under each setting.
 */
static const char  *decode_knobs[][2] = {
    { "PAGEDLLM_CUDA_ATTN_ORDER=0", NULL },
    { "PAGEDLLM_CUDA_ATTN_SPLITS=7", NULL },
    { "PAGEDLLM_CUDA_ATTN_SPLIT_MIN=64", "PAGEDLLM_CUDA_ATTN_SPLITS=64" },
    { "PAGEDLLM_CUDA_ATTN_SPLITS=1", NULL },
    { "PAGEDLLM_CUDA_ATTN_CLUSTER=0", NULL },
};

static void set_variant(const char *const *kv, int on);

static void
decode_knob_cases(void)
{
    size_t  i;

    for (i = 0; i < sizeof(decode_knobs) / sizeof(decode_knobs[0]); i++) {
        set_variant(decode_knobs[i], 1);
        decode_case(16, 128, 8, 1, 1, 5000);
        decode_case(8, 64, 4, 4, 12, 3000);
        decode_case(32, 128, 32, 1, 3, 2000);
        decode_case(16, 128, 32, 32, 2, 700);
        decode_bucket_case(128, 32, 32, 12);
        decode_bucket_case(64, 8, 2, 5);
        decode_bucket_case(128, 32, 32, 1);
        long_case();
        set_variant(decode_knobs[i], 0);
    }
}


/*
 * The prefill kernels' edges: whole prefills of 16, 64 (the second
 * group of a 128-row tile empty), 65, 128 and 1000 rows; chunks over a
 * cached prefix off the tile grid (77 tokens), on it (256), far in (17
 * rows after 983) and spanning a tile boundary, next to a decode row and
 * a sequence sharing blocks; the chunks again with q = 0 (when only
 * those fail, S = Q K^T is wrong); and (many_tiles_case) a 2100-row
 * chunk, 17 KV tiles, so the ring of KV stages wraps many times.
 */
static void
tile_edge_cases(int bs, int nh, int nkv)
{
    attn_case_t  whole = { bs, 128, nh, nkv, 5, {
        { 1000, 1000, 0 },
        { 16, 16, 0 },
        { 64, 64, 0 },
        { 65, 65, 0 },
        { 128, 128, 0 },
    } };
    attn_case_t  chunks = { bs, 128, nh, nkv, 6, {
        { 300, 377, 0 },
        { 256, 512, 0 },
        { 17, 1000, 0 },
        { 1, 900, 0 },
        { 129, 129 + 255, 1 },
        { 100 + pair_int(100), 700 + pair_int(300), 0 },
    } };

    run_case(&whole, "whole prefills");
    run_case(&chunks, "chunks over cached context");
    run_case_q(&chunks, "chunks, q = 0", 0.0f);
}


static void
many_tiles_case(int bs)
{
    attn_case_t  c = { bs, 128, 4, 1, 2, {
        { 2100, 2100 + pair_int(300), 0 },
        { 1, 40, 0 },
    } };

    run_case(&c, "many KV tiles");
}


/*
 * Chunks of sequences that are not the batch's last, their last tile of
 * rows partial (so a TMA copy of Q reads the next sequence's rows:
 * 203 = 128 + 75, 150 = 128 + 22), next to a last one whose tile runs
 * past the batch's rows; contexts off the 128-token tile and off the
 * block size (203, 1001, 555, 4099); chunks over a longer context
 * (qlen < context: a prefix of 801, of 3099 tokens, of one token).
 */
static void
chunk_cases(int bs, int nh, int nkv)
{
    attn_case_t  partial = { bs, 128, nh, nkv, 4, {
        { 203, 203, 0 },
        { 150, 161 + pair_int(60), 0 },
        { 1, 300, 0 },
        { 77, 77, 0 },
    } };
    attn_case_t  chunked = { bs, 128, nh, nkv, 5, {
        { 200, 1001, 0 },
        { 1000, 4099, 0 },
        { 40, 41, 0 },
        { 16, 555, 1 },
        { 129, 129 + pair_int(400), 0 },
    } };

    run_case(&partial, "partial tiles of sequences not last");
    run_case(&chunked, "chunks over longer contexts");
}


/*
 * Block sizes either side of the 8 to 32 above: 1, 2 and 4 (each 16-byte
 * chunk row of a 64-token decode tile, each row of a 128-token prefill
 * tile, gathered through a table entry of its own token or of a few; the
 * Hopper prefill kernel loads them with cp.async, TMA's box needing 8
 * rows) and 64 (a decode tile per block, two TMA boxes a prefill KV
 * tile); both head sizes, the swapped and 16-row decode forms, prefill
 * chunks, whole prefills and shared prompt blocks.
 */
static void
block_size_cases(void)
{
    static const int  bss[] = { 1, 2, 4, 64 };
    int               i, hd;

    for (i = 0; i < (int) (sizeof(bss) / sizeof(bss[0])); i++) {
        for (hd = 64; hd <= 128; hd += 64) {
            mixed_case(bss[i], hd, 8, 8);
            mixed_case(bss[i], hd, 32, 2);
            prefill_case(bss[i], hd, 8, 2);
            decode_case(bss[i], hd, 8, 1, 1, 5000);
            decode_case(bss[i], hd, 4, 4, 12, 3000);
            decode_case(bss[i], hd, 32, 2, 3, 2000);
        }
    }
}


static void
long_case(void)
{
    attn_case_t  c = { 16, 128, 8, 2, 3, {
        { 1, 32768, 0 },
        { 3, 20000 + pair_int(5000), 1 },
        { 1, 1, 0 },
    } };

    run_case(&c, "long contexts");
}


/* the prefill kernels: the default (wgmma with TMA loads on Hopper), its
   cp.async loads, the mma.sync kernel */
static const char  *prefill_variants[][2] = {
    { NULL, NULL },
    { "PAGEDLLM_CUDA_PREFILL_LOADS=cpasync", NULL },
    { "PAGEDLLM_CUDA_PREFILL=mma", NULL },
};


/* set (on) or unset the "NAME=value" settings of a variant */
static void
set_variant(const char *const *kv, int on)
{
    char  name[64];
    int   k;

    for (k = 0; k < 2 && kv[k] != NULL; k++) {
        size_t  n = strcspn(kv[k], "=");

        snprintf(name, sizeof(name), "%.*s", (int) n, kv[k]);
        if (on) {
            knob_set(name, kv[k] + n + 1);
            diag("%s", kv[k]);
        } else {
            knob_unset(name);
        }
    }
}


/* the fp16 subset (see the top): one pass over the same cases */
static void
fp16_cases(void)
{
    static const int    bss[] = { 8, 16, 32 };
    /* decode knobs, and the prefill kernels (fp16 builds the Hopper
       kernel's TMA and cp.async producers and the mma.sync kernel) */
    static const char  *knobs[][2] = {
        { "PAGEDLLM_CUDA_ATTN_SPLIT_MIN=128", NULL },
        { "PAGEDLLM_CUDA_ATTN_SPLITS=1", NULL },
        { "PAGEDLLM_CUDA_ATTN_SPLITS=64", "PAGEDLLM_CUDA_ATTN_ORDER=0" },
    };
    int                 i, j;

    if (!pair_act(P.gpu, PL_DT_F16)) {
        return;
    }
    for (i = 0; i < 3; i++) {
        for (j = 0; j < 2; j++) {
            mixed_case(bss[i], 64 * (j + 1), 16, 4);
            prefill_case(bss[i], 64 * (j + 1), 8, 2);
        }
    }
    mixed_case(16, 96, 14, 2);
    mixed_case(16, 256, 4, 2);
    mixed_case(1, 128, 8, 2);
    mixed_case(2, 64, 16, 4);
    mixed_case(64, 128, 32, 2);
    decode_case(16, 128, 8, 1, 1, 5000);
    decode_case(8, 64, 4, 4, 12, 3000);
    decode_bucket_case(128, 32, 32, 12);
    decode_bucket_case(64, 8, 2, 5);
    decode_group_cases();
    decode_merge_cases();
    decode_heads_cases();
    long_case();
    for (i = 0; i < 3; i++) {
        set_variant(knobs[i], 1);
        decode_case(16, 128, 8, 1, 1, 5000);
        decode_case(8, 64, 4, 4, 12, 3000);
        decode_bucket_case(128, 32, 32, 1);
        set_variant(knobs[i], 0);
    }
    for (i = 0; i < 3; i++) {
        set_variant(prefill_variants[i], 1);
        tile_edge_cases(16, 8, 8);
        tile_edge_cases(32, 8, 2);
        many_tiles_case(16);
        chunk_cases(8, 4, 2);
        chunk_cases(4, 4, 2);
        chunk_cases(1, 8, 2);
        chunk_cases(64, 4, 2);
        if (i == 0) {
            chunk_cases(256, 4, 2);
        }
        set_variant(prefill_variants[i], 0);
    }
}


int
main(void)
{
    static const int  bss[] = { 8, 16, 32 };
    static const int  hds[] = { 64, 128 };
    int               i, j;

    if (!pair_start(&P)) {
        return done_testing();
    }
    for (i = 0; i < 3; i++) {
        for (j = 0; j < 2; j++) {
            mixed_case(bss[i], hds[j], 8, 8);
            mixed_case(bss[i], hds[j], 16, 4);
            prefill_case(bss[i], hds[j], 8, 2);
            decode_case(bss[i], hds[j], 8, 1, 1, 5000);
            decode_case(bss[i], hds[j], 4, 4, 12, 3000);
        }
    }
    mixed_case(16, 96, 14, 2);
    mixed_case(16, 256, 4, 2);
    mixed_case(32, 64, 24, 2);
    prefill_case(16, 96, 6, 2);
    decode_case(16, 128, 28, 4, 2, 9000);
    decode_case(16, 128, 32, 1, 3, 2000);
    decode_bucket_case(128, 32, 32, 12);
    decode_bucket_case(64, 8, 2, 5);
    decode_group_cases();
    decode_merge_cases();
    decode_cluster_cases();
    decode_heads_cases();
    decode_knob_cases();
    mixed_case(16, 64, 40, 2);
    long_case();
    block_size_cases();

    /* the prefill edges on the default kernel (wgmma with TMA loads on
       Hopper), with the cp.async producer, then on the mma.sync one */
    for (i = 0; i < (int) (sizeof(prefill_variants)
                           / sizeof(prefill_variants[0])); i++)
    {
        set_variant(prefill_variants[i], 1);
        tile_edge_cases(16, 8, 8);
        tile_edge_cases(32, 8, 2);
        tile_edge_cases(8, 12, 2);
        many_tiles_case(16);
        chunk_cases(8, 4, 2);
        chunk_cases(16, 8, 8);
        chunk_cases(32, 4, 1);
        chunk_cases(4, 4, 2);
        chunk_cases(1, 8, 2);
        chunk_cases(2, 4, 1);
        chunk_cases(64, 8, 8);
        tile_edge_cases(1, 8, 2);
        tile_edge_cases(64, 12, 2);
        many_tiles_case(64);
        if (i < 2) {
            chunk_cases(256, 4, 2);
        }
        set_variant(prefill_variants[i], 0);
    }
    fp16_cases();
    P.gpu->destroy(P.gpu);
    P.cpu->destroy(P.cpu);
    return done_testing();
}
