/*
 * Paged attention on the CUDA backend against the CPU backend: ragged
 * batches mixing decode rows, prefill chunks over earlier context and
 * whole prefills; physical blocks shuffled; prompt blocks shared between
 * sequences; contexts from 1 to 32k tokens; block sizes 8, 16, 32; head
 * sizes 64, 96, 128, 256; grouped-query ratios 1 to 32 (7, 12, 20 among
 * them).
 * The batch reaches the GPU through batch_upload, as the model sends it.
 */

#include "pair.h"

#define ATTN_BOUND  1e-2

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


/* Fill host batch arrays: block tables over a shuffled pool. */
static int
build_batch(const attn_case_t *c, pl_batch_t *b, int32_t *qs, int32_t *cl,
    int32_t **tables, int *num_blocks)
{
    int   bs = c->block_size, s, i, mb = 0, total = 0, next = 0, *perm;

    for (s = 0; s < c->num_seqs; s++) {
        int  nb = (c->seqs[s].ctx + bs - 1) / bs;

        mb = nb > mb ? nb : mb;
        total += nb;
    }
    total += 7;
    perm = malloc(total * sizeof(int));
    for (i = 0; i < total; i++) {
        perm[i] = i;
    }
    for (i = total - 1; i > 0; i--) {
        int  j = pair_int(i + 1), t = perm[i];

        perm[i] = perm[j];
        perm[j] = t;
    }
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
    b->num_seqs = c->num_seqs;
    b->num_tokens = qs[c->num_seqs];
    b->query_start = qs;
    b->context_lens = cl;
    b->block_tables = *tables;
    b->max_blocks_per_seq = mb;
    *num_blocks = total;
    return b->num_tokens;
}


static void
run_case(const attn_case_t *c, const char *what)
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
    q = pair_rand(qn, 3.0f);
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
    snprintf(name, sizeof(name), "attention %s: block %d, head %d, heads "
             "%d/%d, %d seqs, %d rows, max context %d", what, c->block_size,
             c->head_dim, c->n_heads, c->n_kv_heads, c->num_seqs, rows,
             hb.max_context_len);
    pair_close(&P, og, oc, qn, ATTN_BOUND, name);

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


int
main(void)
{
    static const int  bss[] = { 8, 16, 32 };
    static const int  hds[] = { 64, 128 };
    char              err[256];
    int               i, j;

    pair_seed();
    P.cpu = pl_backend_cpu_create(8, err, sizeof(err));
    P.gpu = pl_backend_cuda_create(0, err, sizeof(err));
    if (!ok(P.cpu != NULL && P.gpu != NULL, "both backends start")) {
        diag("%s", err);
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
    mixed_case(16, 64, 40, 2);
    long_case();
    P.gpu->destroy(P.gpu);
    P.cpu->destroy(P.cpu);
    return done_testing();
}
