/*
 * model_decode: decode iterations padded to a few recorded shapes (see
 * pl_model.h, pl_decode_mode_t), and the profiling run that sizes what a
 * backend makes on first use before the KV cache takes the rest.
 *
 * A decode batch (every sequence one query token) is padded to the next
 * batch size of 1, 2, 4, then multiples of 8, and its block tables
 * widened to a context bucket (a power of two from 256 tokens): the
 * bucket fixes the attention's split, so one recording per (size,
 * bucket) serves while contexts grow within it.  Padding rows store
 * nothing and attend to nothing.  The profiling run builds its own
 * batches from the same arrays: the largest prefill iteration prepare()
 * allows, then the widest decode batch recorded, whose device memory it
 * measures.
 */

#include <stdlib.h>
#include <string.h>

#include "model_internal.h"


/*
 * The index arrays of a batch the model builds itself (a padded decode
 * batch, the profiling run's), carved in this order from one block of
 * batch_ints(T, S, W) int32: token ids, positions and slots [T]; context
 * lengths and logits rows [S]; query starts [S + 1]; block tables
 * [S][W].
 */
typedef struct {
    int32_t  *ids, *pos, *slots, *cl, *rows, *qs, *tbl;
} batch_arrays_t;


/* The recordings hold pointers to the cache and the scratch: they go
   whenever either does. */
void
model_free_decode(pl_shard_t *m)
{
    if (m->dec.set != NULL) {
        m->be->graphs_destroy(m->be, m->dec.set);
    }
    free(m->dec.arrays);
    m->dec.set = NULL;
    m->dec.arrays = NULL;
    m->dec.ready = 0;
}


static size_t
batch_ints(int T, int S, int W)
{
    return (size_t) 3 * T + (size_t) 3 * S + 1 + (size_t) S * W;
}


static batch_arrays_t
batch_carve(int32_t *a, int T, int S)
{
    batch_arrays_t  x;

    x.ids = a;
    x.pos = x.ids + T;
    x.slots = x.pos + T;
    x.cl = x.slots + T;
    x.rows = x.cl + S;
    x.qs = x.rows + S;
    x.tbl = x.qs + S + 1;
    return x;
}


/* The batch description of x's arrays, once they are filled. */
static pl_batch_t
batch_of(const batch_arrays_t *x, int T, int S, int W, int max_query_len,
    int max_context_len)
{
    return (pl_batch_t) {
        .num_tokens = T, .num_seqs = S, .token_ids = x->ids,
        .positions = x->pos, .slot_mapping = x->slots, .query_start = x->qs,
        .context_lens = x->cl, .block_tables = x->tbl,
        .logits_rows = x->rows, .max_blocks_per_seq = W,
        .max_query_len = max_query_len, .max_context_len = max_context_len
    };
}


/* The batch size a decode batch of n sequences runs as: 1, 2, 4, then
   the next multiple of 8 (few shapes, little padding), at most most. */
static int
decode_seqs(int n, int most)
{
    int  p = n <= 2 ? n : n <= 4 ? 4 : (n + 7) / 8 * 8;

    return p < most ? p : most;
}


/* The context bucket of a longest context ctx: a power of two from
   PL_DECODE_MIN_CTX.  It sets the attention's split count, so that a
   recording stays valid while contexts grow within it. */
static int
decode_ctx(int ctx)
{
    int  b = PL_DECODE_MIN_CTX;

    while (b < ctx && b < (1 << 30)) {
        b *= 2;
    }
    return b;
}


static int
decode_blocks(const pl_shard_t *m, int bucket)
{
    return (bucket + m->block_size - 1) / m->block_size;
}


/* The padded batch's arrays and, with graphs, the backend's set, made on
   first use for the prepared sizes and the cache: no context can exceed
   the cache or the model's positions.  1, or 0 when decode batches run
   as they are. */
static int
decode_ready(pl_shard_t *m)
{
    pl_decode_t  *d = &m->dec;
    int64_t       ctx = (int64_t) m->num_blocks * m->block_size;
    int           most;

    if (d->ready != 0) {
        return d->ready > 0;
    }
    d->ready = -1;
    if (m->sh.world != 1 || d->mode == PL_DECODE_EAGER
        || (d->mode == PL_DECODE_GRAPHS && m->be->graphs_run == NULL))
    {
        return 0;
    }
    most = m->max_seqs < m->max_tokens ? m->max_seqs : m->max_tokens;
    d->max_seqs = most < PL_DECODE_MAX_SEQS ? most : PL_DECODE_MAX_SEQS;
    if (ctx > m->cfg.max_position_embeddings) {
        ctx = m->cfg.max_position_embeddings;
    }
    d->max_blocks = decode_blocks(m, decode_ctx((int) ctx));
    d->arrays = malloc(batch_ints(d->max_seqs, d->max_seqs, d->max_blocks)
                       * sizeof(int32_t));
    if (d->arrays == NULL) {
        return 0;
    }
    if (d->mode == PL_DECODE_GRAPHS) {
        d->set = m->be->graphs_create(m->be, d->max_seqs, d->max_blocks);
        if (d->set == NULL) {
            free(d->arrays);
            d->arrays = NULL;
            return 0;
        }
    }
    d->ready = 1;
    return 1;
}


/*
 * A decode batch (every sequence one query row) that graphs or the
 * padded mode run: m->dec.batch := it padded to its shape.  Rows past
 * the batch hold token 0 at position 0 with no slot (nothing stored),
 * context 0 (nothing attended; the kernels write zeros) and themselves
 * as logits row; block tables widen to the bucket's width with block 0,
 * which nothing reads past a context.  1, or 0 to run the batch as it
 * is (prefill, eager mode, or too wide for what was prepared).
 */
int
model_decode_pad(pl_shard_t *m, const pl_batch_t *batch)
{
    pl_decode_t     *d = &m->dec;
    int              n = batch->num_seqs, S, W, ctx, w, s;
    batch_arrays_t   x;

    if (d->mode == PL_DECODE_EAGER || batch->num_tokens != n
        || !decode_ready(m))
    {
        return 0;
    }
    S = decode_seqs(n, d->max_seqs);
    ctx = decode_ctx(batch->max_context_len);
    W = decode_blocks(m, ctx);
    if (n > S || W > d->max_blocks) {
        return 0;
    }
    x = batch_carve(d->arrays, S, S);
    w = batch->max_blocks_per_seq < W ? batch->max_blocks_per_seq : W;
    memcpy(x.ids, batch->token_ids, (size_t) n * sizeof(int32_t));
    memcpy(x.pos, batch->positions, (size_t) n * sizeof(int32_t));
    memcpy(x.slots, batch->slot_mapping, (size_t) n * sizeof(int32_t));
    memcpy(x.cl, batch->context_lens, (size_t) n * sizeof(int32_t));
    memset(x.tbl, 0, (size_t) S * W * sizeof(int32_t));
    for (s = 0; s < n; s++) {
        memcpy(x.tbl + (size_t) s * W,
               batch->block_tables + (size_t) s * batch->max_blocks_per_seq,
               (size_t) w * sizeof(int32_t));
    }
    for (s = n; s < S; s++) {
        x.ids[s] = 0;
        x.pos[s] = 0;
        x.slots[s] = -1;
        x.cl[s] = 0;
    }
    for (s = 0; s < S; s++) {
        x.qs[s] = s;
        x.rows[s] = s;
    }
    x.qs[S] = S;
    d->batch = batch_of(&x, S, S, W, 1, ctx);
    return 1;
}


void
pl_shard_set_decode_mode(pl_shard_t *m, pl_decode_mode_t mode)
{
    model_free_decode(m);
    m->dec.mode = mode;
}


void
pl_shard_graph_counts(const pl_shard_t *m, long *recorded, long *replayed)
{
    *recorded = m->dec.recorded;
    *replayed = m->dec.replayed;
}


/* ---- the profiling run before the KV cache is sized ---- */


/*
 * b := sequences of len[s] tokens from position 0 (prompt chunks), in a
 * cache of nb blocks: slots -1 (nothing is stored, so sequences may share
 * blocks), block tables cycling over the blocks.  a has room for the
 * arrays.
 */
static void
profile_batch(pl_batch_t *b, int32_t *a, const int *len, int S, int W,
    int nb)
{
    batch_arrays_t  x;
    int             s, i, T = 0, max_len = 0;

    for (s = 0; s < S; s++) {
        T += len[s];
    }
    x = batch_carve(a, T, S);
    T = 0;
    for (s = 0; s < S; s++) {
        x.qs[s] = T;
        for (i = 0; i < len[s]; i++, T++) {
            x.ids[T] = 0;
            x.pos[T] = i;
            x.slots[T] = -1;
        }
        x.cl[s] = len[s];
        x.rows[s] = T - 1;
        max_len = len[s] > max_len ? len[s] : max_len;
        for (i = 0; i < W; i++) {
            x.tbl[(size_t) s * W + i] = i % nb;
        }
    }
    x.qs[S] = T;
    *b = batch_of(&x, T, S, W, max_len, max_len);
}


/* recordings possible for contexts up to max_context (and the model's
   positions): batch sizes times context buckets */
static int
decode_shapes(const pl_shard_t *m, int max_context)
{
    int  most = m->dec.max_seqs, sizes = 0, buckets = 1, n;
    int  top = decode_ctx(max_context < m->cfg.max_position_embeddings
                          ? max_context : m->cfg.max_position_embeddings);

    for (n = 1; n <= most; n = decode_seqs(n, most) + 1) {
        sizes++;
    }
    for (n = PL_DECODE_MIN_CTX; n < top; n *= 2) {
        buckets++;
    }
    return sizes * buckets;
}


/* The widest decode batch (every sequence at position 0), recorded; the
   device memory the recording took.  A backend that did not record it
   leaves graph_shapes 0. */
static int
profile_graph(pl_shard_t *m, pl_model_profile_t *prof, int32_t *a,
    float *logits, int max_context, char *err, size_t errlen)
{
    pl_backend_t      *be = m->be;
    long               recorded = m->dec.recorded;
    pl_batch_t         b;
    const pl_batch_t  *dev;
    pl_logits_t        out;
    size_t             before, after, total;
    int               *len, S, s;

    if (m->dec.mode != PL_DECODE_GRAPHS || !decode_ready(m)) {
        return 0;
    }
    S = m->dec.max_seqs;
    len = malloc((size_t) S * sizeof(int));
    if (len == NULL) {
        return model_fail(err, errlen, "out of memory");
    }
    for (s = 0; s < S; s++) {
        len[s] = 1;
    }
    profile_batch(&b, a, len, S, 1, PL_PROFILE_BLOCKS);
    free(len);

    /* first eagerly, so that kernels loaded on first use are not counted
       as the recording's */
    dev = be->batch_upload(be, &b);
    if (dev == NULL) {
        return model_fail(err, errlen, "the %s backend cannot take the "
                          "batch", be->name);
    }
    model_run_layers(m, &b, dev);
    be->sync(be);
    if (be->mem_info(be, &before, &total) != 0) {
        return model_fail(err, errlen, "the %s backend cannot tell its "
                          "free memory", be->name);
    }
    if (pl_shard_forward_logits(m, &b, logits, &out, err, errlen) != 0) {
        return -1;
    }
    be->sync(be);
    if (m->dec.recorded == recorded) {
        return 0;
    }
    if (be->mem_info(be, &after, &total) != 0) {
        return model_fail(err, errlen, "the %s backend cannot tell its "
                          "free memory", be->name);
    }
    prof->graph_bytes = before > after ? before - after : 0;
    prof->graph_shapes = decode_shapes(m, max_context);
    return 0;
}


int
pl_shard_profile(pl_shard_t *m, int max_context, pl_model_profile_t *prof,
    char *err, size_t errlen)
{
    int          S = m->max_seqs, T = m->max_tokens, bs = m->block_size;
    int          cap = m->cfg.max_position_embeddings;
    int         *len = NULL, s, left, add, W, rc = -1;
    int32_t     *a = NULL;
    float       *logits = NULL;
    pl_batch_t   b;

    memset(prof, 0, sizeof(*prof));
    if (T == 0) {
        return model_fail(err, errlen, "model: prepare() must run before "
                          "the profiling run");
    }
    if (m->num_blocks != PL_PROFILE_BLOCKS) {
        return model_fail(err, errlen, "model: the profiling run needs a "
                          "cache of %d blocks", PL_PROFILE_BLOCKS);
    }
    S = S < T ? S : T;
    prof->kv_bytes = PL_PROFILE_BLOCKS * pl_shard_kv_block_bytes(m, bs);

    /* one token each, then the rest as long chunks as positions allow */
    len = malloc((size_t) S * sizeof(int));
    if (len == NULL) {
        goto oom;
    }
    left = T - S;
    for (s = 0; s < S; s++) {
        add = left < cap - 1 ? left : cap - 1;
        len[s] = 1 + add;
        left -= add;
    }
    prof->tokens = T - left;
    prof->seqs = S;
    W = (len[0] + bs - 1) / bs;
    a = malloc(batch_ints(T, S, W) * sizeof(int32_t));
    logits = malloc((size_t) S * m->cfg.vocab_size * sizeof(float));
    if (a == NULL || logits == NULL) {
        goto oom;
    }
    profile_batch(&b, a, len, S, W, PL_PROFILE_BLOCKS);
    if (pl_shard_forward(m, &b, m->sh.rank == 0 ? logits : NULL, err,
                         errlen) == 0
        && profile_graph(m, prof, a, logits, max_context, err, errlen) == 0)
    {
        rc = 0;
    }
    free(len);
    free(a);
    free(logits);
    return rc;

oom:
    free(len);
    free(a);
    free(logits);
    return model_fail(err, errlen, "out of memory for the profiling run");
}
