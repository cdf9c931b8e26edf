/*
 * Every operation of the CUDA backend against its CPU twin on fresh random
 * inputs, with bf16 activations and again with fp16 ones: same inputs on
 * both sides (exact in either type), GPU outputs poisoned before each
 * run, relative error ||gpu - cpu|| / ||cpu|| bounded as for results
 * rounded to the activation type (METHOD.md: 1e-3 to 1e-2 for bf16; fp16
 * keeps 3 more mantissa bits, so 1e-3, which a result rounded to bf16
 * would exceed), exact where the operation only moves values.  The
 * attention case here is a small ragged batch, on the tensor-core kernels
 * for head sizes 64 and 128 and on the CUDA-core one for the others
 * (t/gpu/attention.c covers them in depth, in both types).
 */

#include "pair.h"

#define BF16_BOUND  1e-2
#define F16_BOUND   1e-3

static pair_t  P;
static double  bound;           /* of the current activation type */


static void
test_backend_basics(void)
{
    size_t       free_b = 0, total_b = 0;
    pl_weight_t  bad = { NULL, (pl_dtype_t) 7, 2, 2 };
    float        raw[4] = { 1, 2, 3, 4 };

    is_str(P.gpu->name, "cuda", "backend is named cuda");
    is_int(P.gpu->act_dtype, PL_DT_BF16, "activations are bf16");
    ok(P.gpu->mem_info(P.gpu, &free_b, &total_b) == 0
       && free_b > 0 && free_b <= total_b,
       "mem_info reports free %zu <= total %zu", free_b, total_b);
    ok(P.gpu->weight_load(P.gpu, &bad, raw) == -1,
       "weight_load refuses an unknown dtype");
}


static void
test_set_act_dtype(void)
{
    char  err[256] = "";

    ok(P.gpu->set_act_dtype(P.gpu, PL_DT_BF16, err, sizeof(err)) == 0
       && P.gpu->act_dtype == PL_DT_BF16, "set_act_dtype takes bf16");
    ok(P.gpu->set_act_dtype(P.gpu, PL_DT_F32, err, sizeof(err)) == -1
       && P.gpu->act_dtype == PL_DT_BF16,
       "set_act_dtype refuses fp32 activations: %s", err);
    ok(P.gpu->set_act_dtype(P.gpu, PL_DT_F16, err, sizeof(err)) == 0
       && P.gpu->act_dtype == PL_DT_F16,
       "set_act_dtype takes fp16: every kernel takes it");
    ok(P.gpu->set_act_dtype(P.gpu, PL_DT_F32, err, sizeof(err)) == -1
       && P.gpu->act_dtype == PL_DT_F16,
       "set_act_dtype refuses fp32 and keeps fp16: %s", err);
    ok(P.gpu->set_act_dtype(P.gpu, PL_DT_BF16, err, sizeof(err)) == 0
       && P.gpu->act_dtype == PL_DT_BF16, "set_act_dtype goes back to bf16");
}


/* dim 200 with a table in the activation dtype takes the 16-byte copy,
   196 and the other dtypes the element loop */
static void
test_embedding(pl_dtype_t dt, int dim)
{
    int          vocab = 1000, n = 37, i;
    float       *table = pair_rand((size_t) vocab * dim, 2.0f);
    void        *bytes = pair_weight_bytes(table, (size_t) vocab * dim, dt);
    int32_t      ids[37];
    pl_weight_t  wc, wg;
    void        *ic, *ig, *oc, *og;

    for (i = 0; i < n; i++) {
        ids[i] = i == 0 ? 0 : i == 1 ? vocab - 1 : pair_int(vocab);
    }
    ok(pair_weight(&P, &wc, &wg, bytes, dt, vocab, dim) == 0,
       "embedding %s, dim %d: table loads", pl_dtype_name(dt), dim);
    ic = P.cpu->alloc(P.cpu, sizeof(ids));
    ig = P.gpu->alloc(P.gpu, sizeof(ids));
    P.cpu->upload(P.cpu, ic, ids, sizeof(ids));
    P.gpu->upload(P.gpu, ig, ids, sizeof(ids));
    oc = P.cpu->alloc(P.cpu, (size_t) n * dim * 4);
    og = P.gpu->alloc(P.gpu, (size_t) n * dim * 2);
    pair_poison(P.gpu, og, (size_t) n * dim);
    P.cpu->embedding(P.cpu, oc, &wc, ic, n);
    P.gpu->embedding(P.gpu, og, &wg, ig, n);
    pair_close(&P, og, oc, (size_t) n * dim, 0.0,
               "embedding copies rows exactly");
    P.gpu->free(P.gpu, wg.data);
    P.gpu->free(P.gpu, ig);
    P.gpu->free(P.gpu, og);
    P.cpu->free(P.cpu, ic);
    P.cpu->free(P.cpu, oc);
    free(bytes);
    free(table);
}


static void
test_rmsnorm(int n, int dim, int fused)
{
    size_t       sz = (size_t) n * dim;
    float       *x = pair_rand(sz, 3.0f), *r = pair_rand(sz, 3.0f);
    float       *w = pair_rand(dim, 1.5f);
    void        *wb = pair_weight_bytes(w, dim, PL_DT_BF16);
    pl_weight_t  wc, wg;
    void        *xc = pair_put(P.cpu, x, sz), *xg = pair_put(P.gpu, x, sz);
    void        *rc = pair_put(P.cpu, r, sz), *rg = pair_put(P.gpu, r, sz);
    void        *oc = pair_put(P.cpu, x, sz), *og = pair_put(P.gpu, x, sz);
    char         name[96];

    pair_weight(&P, &wc, &wg, wb, PL_DT_BF16, 1, dim);
    pair_poison(P.gpu, og, sz);
    if (fused) {
        P.cpu->add_rmsnorm(P.cpu, oc, rc, xc, &wc, n, dim, 1e-5f);
        P.gpu->add_rmsnorm(P.gpu, og, rg, xg, &wg, n, dim, 1e-5f);
        snprintf(name, sizeof(name), "add_rmsnorm %dx%d residual", n, dim);
        pair_close(&P, rg, rc, sz, bound, name);
    } else {
        P.cpu->rmsnorm(P.cpu, oc, xc, &wc, n, dim, 1e-6f);
        P.gpu->rmsnorm(P.gpu, og, xg, &wg, n, dim, 1e-6f);
    }
    snprintf(name, sizeof(name), "%s %dx%d", fused ? "add_rmsnorm" : "rmsnorm",
             n, dim);
    pair_close(&P, og, oc, sz, bound, name);
    P.gpu->free(P.gpu, wg.data);
    P.gpu->free(P.gpu, xg);
    P.gpu->free(P.gpu, rg);
    P.gpu->free(P.gpu, og);
    P.cpu->free(P.cpu, xc);
    P.cpu->free(P.cpu, rc);
    P.cpu->free(P.cpu, oc);
    free(x);
    free(r);
    free(w);
    free(wb);
}


static void
test_matmul(int n, int rows, int cols, pl_dtype_t dt, int with_bias)
{
    float       *x = pair_rand((size_t) n * cols, 1.0f);
    float       *w = pair_rand((size_t) rows * cols, 0.1f);
    float       *b = pair_rand(rows, 1.0f);
    void        *wb = pair_weight_bytes(w, (size_t) rows * cols, dt);
    void        *bb = pair_weight_bytes(b, rows, dt);
    pl_weight_t  wc, wg, bc, bg;
    void        *xc = pair_put(P.cpu, x, (size_t) n * cols);
    void        *xg = pair_put(P.gpu, x, (size_t) n * cols);
    void        *oc = P.cpu->alloc(P.cpu, (size_t) n * rows * 4);
    void        *og = P.gpu->alloc(P.gpu, (size_t) n * rows * 2);
    char         name[96];

    pair_weight(&P, &wc, &wg, wb, dt, rows, cols);
    pair_weight(&P, &bc, &bg, bb, dt, 1, rows);
    pair_poison(P.gpu, og, (size_t) n * rows);
    P.cpu->matmul(P.cpu, oc, xc, &wc, with_bias ? &bc : NULL, n);
    P.gpu->matmul(P.gpu, og, xg, &wg, with_bias ? &bg : NULL, n);
    snprintf(name, sizeof(name), "matmul n=%d %dx%d %s%s", n, rows, cols,
             pl_dtype_name(dt), with_bias ? " +bias" : "");
    pair_close(&P, og, oc, (size_t) n * rows, bound, name);
    P.gpu->free(P.gpu, wg.data);
    P.gpu->free(P.gpu, bg.data);
    P.gpu->free(P.gpu, xg);
    P.gpu->free(P.gpu, og);
    P.cpu->free(P.cpu, xc);
    P.cpu->free(P.cpu, oc);
    free(x);
    free(w);
    free(b);
    free(wb);
    free(bb);
}


/* 1 when every row of the GPU cache whose slot no token stored still
   holds its first value, bit for bit */
static int
untouched_rows(const void *cache_g, const float *first, const char *stored,
    int slots, size_t row)
{
    float  *g = pair_get(P.gpu, cache_g, (size_t) slots * row);
    size_t  i;
    int     same = 1;

    for (i = 0; i < (size_t) slots * row; i++) {
        if (!stored[i / row] && memcmp(&g[i], &first[i], sizeof(float)) != 0)
        {
            same = 0;
        }
    }
    free(g);
    return same;
}


/*
 * qkv_rope_store from fused rows [n][(nh + 2 nkv) hd]: ragged positions
 * (0 and 32767 among them), shuffled slots over a cache a little larger
 * than the batch, every seventh token's slot -1.
 */
static void
test_qkv_rope_store(int n, int nh, int nkv, int hd, int rope)
{
    int       slots = n + n / 3 + 2, i;
    size_t    row = (size_t) nkv * hd, qs = (size_t) n * nh * hd;
    size_t    xs = (size_t) n * (nh + 2 * nkv) * hd, cs = slots * row;
    float    *x = pair_rand(xs, 2.0f);
    float    *k0 = pair_rand(cs, 1.0f), *v0 = pair_rand(cs, 1.0f);
    float    *inv = malloc(hd / 2 * sizeof(float));
    int32_t  *pos = malloc(n * sizeof(int32_t));
    int32_t  *slot = malloc(n * sizeof(int32_t));
    char     *stored = calloc(slots, 1);
    void     *xc = pair_put(P.cpu, x, xs), *xg = pair_put(P.gpu, x, xs);
    void     *kc = pair_put(P.cpu, k0, cs), *kg = pair_put(P.gpu, k0, cs);
    void     *vc = pair_put(P.cpu, v0, cs), *vg = pair_put(P.gpu, v0, cs);
    void     *qc = P.cpu->alloc(P.cpu, qs * 4);
    void     *qg = P.gpu->alloc(P.gpu, qs * 2);
    void     *ic = NULL, *ig = NULL, *pc, *pg, *sc, *sg;
    char      what[96], name[160];

    for (i = 0; i < hd / 2; i++) {
        inv[i] = powf(500000.0f, -2.0f * i / hd);
    }
    for (i = 0; i < n; i++) {
        int  s;

        pos[i] = i < 2 && n > 1 ? i * 32767 : pair_int(32768);
        do {
            s = pair_int(slots);
        } while (stored[s]);
        stored[s] = 1;
        slot[i] = s;
        if (i % 7 == 3) {
            stored[s] = 0;
            slot[i] = -1;
        }
    }
    if (rope) {
        ic = P.cpu->alloc(P.cpu, hd / 2 * 4);
        ig = P.gpu->alloc(P.gpu, hd / 2 * 4);
        P.cpu->upload(P.cpu, ic, inv, hd / 2 * 4);
        P.gpu->upload(P.gpu, ig, inv, hd / 2 * 4);
    }
    pc = P.cpu->alloc(P.cpu, n * 4);
    pg = P.gpu->alloc(P.gpu, n * 4);
    sc = P.cpu->alloc(P.cpu, n * 4);
    sg = P.gpu->alloc(P.gpu, n * 4);
    P.cpu->upload(P.cpu, pc, pos, n * 4);
    P.gpu->upload(P.gpu, pg, pos, n * 4);
    P.cpu->upload(P.cpu, sc, slot, n * 4);
    P.gpu->upload(P.gpu, sg, slot, n * 4);
    pair_poison(P.gpu, qg, qs);

    P.cpu->qkv_rope_store(P.cpu, qc, kc, vc, xc, pc, sc, ic, n, nh, nkv, hd);
    P.gpu->qkv_rope_store(P.gpu, qg, kg, vg, xg, pg, sg, ig, n, nh, nkv, hd);

    snprintf(what, sizeof(what), "qkv_rope_store n=%d heads %d/%d dim %d%s",
             n, nh, nkv, hd, rope ? "" : " no rope");
    snprintf(name, sizeof(name), "%s: q%s", what, rope ? "" : " exact");
    pair_close(&P, qg, qc, qs, rope ? bound : 0.0, name);
    snprintf(name, sizeof(name), "%s: K cache%s", what, rope ? "" : " exact");
    pair_close(&P, kg, kc, cs, rope ? bound : 0.0, name);
    snprintf(name, sizeof(name), "%s: V cache exact", what);
    pair_close(&P, vg, vc, cs, 0.0, name);
    ok(untouched_rows(kg, k0, stored, slots, row)
       && untouched_rows(vg, v0, stored, slots, row),
       "%s: slots of no token (and of slot -1) untouched", what);

    P.gpu->free(P.gpu, xg);
    P.gpu->free(P.gpu, kg);
    P.gpu->free(P.gpu, vg);
    P.gpu->free(P.gpu, qg);
    P.gpu->free(P.gpu, ig);
    P.gpu->free(P.gpu, pg);
    P.gpu->free(P.gpu, sg);
    P.cpu->free(P.cpu, xc);
    P.cpu->free(P.cpu, kc);
    P.cpu->free(P.cpu, vc);
    P.cpu->free(P.cpu, qc);
    P.cpu->free(P.cpu, ic);
    P.cpu->free(P.cpu, pc);
    P.cpu->free(P.cpu, sc);
    free(x);
    free(k0);
    free(v0);
    free(inv);
    free(pos);
    free(slot);
    free(stored);
}


static void
test_silu_gather(int n, int inter)
{
    size_t   gs = (size_t) n * 2 * inter, os = (size_t) n * inter;
    float   *gu = pair_rand(gs, 6.0f);
    void    *gc = pair_put(P.cpu, gu, gs), *gg = pair_put(P.gpu, gu, gs);
    void    *oc = P.cpu->alloc(P.cpu, os * 4);
    void    *og = P.gpu->alloc(P.gpu, os * 2);
    void    *rc, *rg, *xc, *xg;
    int32_t  rows[5];
    int      i;

    pair_poison(P.gpu, og, os);
    P.cpu->silu_mul(P.cpu, oc, gc, n, inter);
    P.gpu->silu_mul(P.gpu, og, gg, n, inter);
    pair_close(&P, og, oc, os, bound, "silu_mul");

    for (i = 0; i < 5; i++) {
        rows[i] = i == 0 ? n - 1 : pair_int(n);
    }
    rc = P.cpu->alloc(P.cpu, sizeof(rows));
    rg = P.gpu->alloc(P.gpu, sizeof(rows));
    P.cpu->upload(P.cpu, rc, rows, sizeof(rows));
    P.gpu->upload(P.gpu, rg, rows, sizeof(rows));
    xc = P.cpu->alloc(P.cpu, 5 * (size_t) inter * 4);
    xg = P.gpu->alloc(P.gpu, 5 * (size_t) inter * 2);
    pair_poison(P.gpu, xg, 5 * (size_t) inter);
    P.cpu->gather_rows(P.cpu, xc, gc, rc, 5, inter);
    P.gpu->gather_rows(P.gpu, xg, gg, rg, 5, inter);
    pair_close(&P, xg, xc, 5 * (size_t) inter, 0.0, "gather_rows exact");
    P.gpu->free(P.gpu, gg);
    P.gpu->free(P.gpu, og);
    P.gpu->free(P.gpu, rg);
    P.gpu->free(P.gpu, xg);
    P.cpu->free(P.cpu, gc);
    P.cpu->free(P.cpu, oc);
    P.cpu->free(P.cpu, rc);
    P.cpu->free(P.cpu, xc);
    free(gu);
}


static void
test_opt_ops(int n, int dim)
{
    size_t       sz = (size_t) n * dim;
    float       *x = pair_rand(sz, 3.0f), *r = pair_rand(sz, 3.0f);
    float       *w = pair_rand(dim, 1.5f), *b = pair_rand(dim, 1.0f);
    void        *wb = pair_weight_bytes(w, dim, PL_DT_F16);
    void        *bb = pair_weight_bytes(b, dim, PL_DT_F16);
    pl_weight_t  wc, wg, bc, bg;
    void        *xc = pair_put(P.cpu, x, sz), *xg = pair_put(P.gpu, x, sz);
    void        *rc = pair_put(P.cpu, r, sz), *rg = pair_put(P.gpu, r, sz);
    void        *oc = pair_put(P.cpu, x, sz), *og = pair_put(P.gpu, x, sz);
    char         name[96];

    pair_weight(&P, &wc, &wg, wb, PL_DT_F16, 1, dim);
    pair_weight(&P, &bc, &bg, bb, PL_DT_F16, 1, dim);
    pair_poison(P.gpu, og, sz);
    P.cpu->layernorm(P.cpu, oc, xc, &wc, &bc, n, dim, 1e-5f);
    P.gpu->layernorm(P.gpu, og, xg, &wg, &bg, n, dim, 1e-5f);
    snprintf(name, sizeof(name), "layernorm %dx%d", n, dim);
    pair_close(&P, og, oc, sz, bound, name);

    pair_poison(P.gpu, og, sz);
    P.cpu->relu(P.cpu, oc, xc, n, dim);
    P.gpu->relu(P.gpu, og, xg, n, dim);
    pair_close(&P, og, oc, sz, 0.0, "relu exact");
    P.cpu->relu(P.cpu, xc, xc, n, dim);
    P.gpu->relu(P.gpu, xg, xg, n, dim);
    pair_close(&P, xg, xc, sz, 0.0, "relu in place");

    P.cpu->add(P.cpu, rc, xc, n, dim);
    P.gpu->add(P.gpu, rg, xg, n, dim);
    snprintf(name, sizeof(name), "add %dx%d", n, dim);
    pair_close(&P, rg, rc, sz, bound, name);

    P.gpu->free(P.gpu, wg.data);
    P.gpu->free(P.gpu, bg.data);
    P.gpu->free(P.gpu, xg);
    P.gpu->free(P.gpu, rg);
    P.gpu->free(P.gpu, og);
    P.cpu->free(P.cpu, xc);
    P.cpu->free(P.cpu, rc);
    P.cpu->free(P.cpu, oc);
    free(x);
    free(r);
    free(w);
    free(b);
    free(wb);
    free(bb);
}


/*
 * Paged attention over a ragged batch: decode rows, a prefill chunk over
 * earlier context, a whole prefill, a long decode; block tables over a
 * shuffled pool.
 */
static void
test_attention(int bs, int hd, int nh, int nkv)
{
    static const int  qlen[] = { 1, 20, 37, 1, 1 };
    static const int  ctx[] = { 300, 50, 37, 1, 2500 };
    enum { NS = 5 };
    int32_t           qs[NS + 1], cl[NS], rows[NS], *tables, *perm;
    int32_t          *pos, *slot;
    int               s, i, t = 0, mb = 0, nb = 0, T;
    size_t            qn, cn;
    float            *q, *kv;
    void             *qc, *qg, *kc, *kg, *vc, *vg, *oc, *og;
    pl_batch_t        b;
    char              name[128];

    for (s = 0; s < NS; s++) {
        qs[s] = t;
        t += qlen[s];
        cl[s] = ctx[s];
        rows[s] = t - 1;
        mb = (ctx[s] + bs - 1) / bs > mb ? (ctx[s] + bs - 1) / bs : mb;
        nb += (ctx[s] + bs - 1) / bs;
    }
    qs[NS] = T = t;
    tables = calloc((size_t) NS * mb, sizeof(int32_t));
    perm = malloc((size_t) nb * sizeof(int32_t));
    pos = malloc((size_t) T * sizeof(int32_t));
    slot = malloc((size_t) T * sizeof(int32_t));
    pair_shuffle(perm, nb);
    for (s = 0, i = 0; s < NS; s++) {
        int  k;

        for (k = 0; k < (ctx[s] + bs - 1) / bs; k++) {
            tables[s * mb + k] = perm[i++];
        }
    }
    for (s = 0; s < NS; s++) {
        for (i = qs[s]; i < qs[s + 1]; i++) {
            pos[i] = ctx[s] - (qs[s + 1] - i);
            slot[i] = tables[s * mb + pos[i] / bs] * bs + pos[i] % bs;
        }
    }

    memset(&b, 0, sizeof(b));
    b.num_tokens = T;
    b.num_seqs = NS;
    b.positions = pos;
    b.slot_mapping = slot;
    b.query_start = qs;
    b.context_lens = cl;
    b.block_tables = tables;
    b.logits_rows = rows;
    b.max_blocks_per_seq = mb;
    b.max_query_len = 37;
    b.max_context_len = 2500;

    qn = (size_t) T * nh * hd;
    cn = (size_t) nb * bs * nkv * hd;
    q = pair_rand(qn, 2.0f);
    kv = pair_rand(2 * cn, 1.0f);
    qc = pair_put(P.cpu, q, qn);
    qg = pair_put(P.gpu, q, qn);
    kc = pair_put(P.cpu, kv, cn);
    kg = pair_put(P.gpu, kv, cn);
    vc = pair_put(P.cpu, kv + cn, cn);
    vg = pair_put(P.gpu, kv + cn, cn);
    oc = pair_put(P.cpu, q, qn);
    og = pair_put(P.gpu, q, qn);
    pair_poison(P.gpu, og, qn);

    P.cpu->attention(P.cpu, oc, qc, kc, vc, P.cpu->batch_upload(P.cpu, &b),
                     nh, nkv, hd, bs, 1.0f / sqrtf((float) hd));
    P.gpu->attention(P.gpu, og, qg, kg, vg, P.gpu->batch_upload(P.gpu, &b),
                     nh, nkv, hd, bs, 1.0f / sqrtf((float) hd));
    snprintf(name, sizeof(name), "attention block %d, head %d, heads %d/%d",
             bs, hd, nh, nkv);
    pair_close(&P, og, oc, qn, bound, name);

    P.gpu->free(P.gpu, qg);
    P.gpu->free(P.gpu, kg);
    P.gpu->free(P.gpu, vg);
    P.gpu->free(P.gpu, og);
    P.cpu->free(P.cpu, qc);
    P.cpu->free(P.cpu, kc);
    P.cpu->free(P.cpu, vc);
    P.cpu->free(P.cpu, oc);
    free(q);
    free(kv);
    free(tables);
    free(perm);
    free(pos);
    free(slot);
}


/* every operation with the GPU's activations in act */
static void
test_ops(pl_dtype_t act)
{
    pair_act(P.gpu, act);
    bound = act == PL_DT_F16 ? F16_BOUND : BF16_BOUND;
    test_embedding(PL_DT_F32, 200);
    test_embedding(PL_DT_BF16, 200);
    test_embedding(PL_DT_BF16, 196);
    test_embedding(PL_DT_F16, 200);
    test_rmsnorm(13, 4096, 0);
    test_rmsnorm(3, 777, 0);
    test_rmsnorm(13, 4096, 1);
    test_rmsnorm(5, 896, 1);
    test_rmsnorm(1, 4096, 1);
    test_rmsnorm(64, 4096, 1);
    test_rmsnorm(2, 8192, 1);
    test_rmsnorm(2, 16384, 0);
    test_rmsnorm(3, 1001, 1);
    test_rmsnorm(2, 24, 0);
    test_matmul(1, 1024, 4096, PL_DT_BF16, 0);
    test_matmul(37, 4864, 896, PL_DT_F16, 1);
    test_matmul(300, 333, 1000, PL_DT_F32, 0);
    test_matmul(64, 1152, 896, PL_DT_BF16, 1);
    test_matmul(3, 4096, 4096, PL_DT_F16, 1);
    test_qkv_rope_store(1, 32, 32, 128, 1);      /* Llama-2-7B decode */
    test_qkv_rope_store(64, 32, 32, 128, 1);
    test_qkv_rope_store(300, 32, 8, 128, 1);     /* GQA, a prefill */
    test_qkv_rope_store(1, 14, 2, 64, 1);
    test_qkv_rope_store(37, 14, 2, 64, 1);
    test_qkv_rope_store(20, 12, 12, 64, 0);      /* OPT: no rotation */
    test_qkv_rope_store(1, 12, 12, 64, 0);
    test_qkv_rope_store(9, 4, 2, 12, 1);         /* head_dim % 16 != 0 */
    test_qkv_rope_store(9, 3, 3, 12, 0);
    test_silu_gather(9, 1000);
    test_silu_gather(4, 4864);
    test_silu_gather(1, 11008);
    test_silu_gather(3, 1001);
    test_opt_ops(11, 768);
    test_opt_ops(3, 2050);
    test_opt_ops(1, 4096);
    test_opt_ops(2, 7000);
    test_attention(16, 128, 32, 8);
    test_attention(16, 64, 12, 12);
    test_attention(8, 96, 14, 2);
    test_attention(32, 256, 4, 4);
    test_attention(16, 40, 6, 3);
}


int
main(void)
{
    if (!pair_start(&P)) {
        return done_testing();
    }
    test_backend_basics();
    test_set_act_dtype();
    test_ops(PL_DT_BF16);
    test_ops(PL_DT_F16);
    P.gpu->destroy(P.gpu);
    P.cpu->destroy(P.cpu);
    return done_testing();
}
