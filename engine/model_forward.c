/*
 * model_forward: one forward pass of a single rank's model, for all the
 * batch's tokens at once, over its family's operations (model_internal.h):
 *
 *   x = embed(tokens)
 *   per layer: the family's layer (attention through the paged cache,
 *              the MLP, the norms and residual adds where it puts them)
 *   h = the family's final hidden states
 *   logits = h[logits_rows] . Wlm_head   (a row per sequence, then the
 *                                         batch's extra rows)
 *
 * where attention(h) = split h . Wqkv + b into q, k, v (RoPE on q and k
 * when the family has frequencies) with k and v stored in the cache,
 * paged attention over the cache, then . Wo + b.  The batch comes from
 * the engine's runner but is checked in full before any kernel sees it:
 * a bad index gives an error, never a stray access.
 *
 * With tensor parallelism the outputs of the row-parallel projections
 * are partial sums, all-reduced here; the embedding looks token ids up in
 * the rank's vocabulary slice (an id outside it reads a zero row) and
 * all-reduces, and the lm_head's slices are gathered on rank 0.  Decode
 * batches may run padded, replaying a recording (model_decode.c).
 */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"


void
model_free_scratch(pl_shard_t *m)
{
    pl_scratch_t  *s = &m->s;
    void          *all[] = {
        s->x, s->h, s->qkv, s->q, s->attn, s->y, s->up, s->act, s->rows,
        s->logits, s->emb_ids, s->gathered
    };
    size_t         i;

    model_free_decode(m);
    for (i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        model_free_owned(m, all[i]);
    }
    free(s->emb_host);
    free(s->gathered_host);
    memset(s, 0, sizeof(*s));
    m->max_tokens = 0;
    m->max_seqs = 0;
}


/* world > 1: local token ids for the embedding slice, and the gathered
   logits slices of every rank (on the host for rank 0) */
static int
parallel_scratch(pl_shard_t *m, int max_tokens, int max_seqs, char *err,
    size_t errlen)
{
    size_t  all = (size_t) m->sh.world * (max_seqs + PL_EXTRA_LOGITS)
                  * m->sh.vocab;

    if (m->sh.world == 1) {
        return 0;
    }
    m->s.emb_host = malloc((size_t) max_tokens * sizeof(int32_t));
    m->s.gathered_host = m->sh.rank == 0 ? malloc(all * sizeof(float))
                                         : NULL;
    if (m->s.emb_host == NULL
        || (m->sh.rank == 0 && m->s.gathered_host == NULL))
    {
        return model_fail(err, errlen, "out of memory");
    }
    m->s.emb_ids = model_alloc(m, (size_t) max_tokens * sizeof(int32_t),
                               "token ids", err, errlen);
    m->s.gathered = m->s.emb_ids == NULL ? NULL
                    : model_alloc(m, all * pl_dtype_size(m->be->act_dtype),
                                  "gathered logits", err, errlen);
    return m->s.gathered != NULL ? 0 : -1;
}


int
pl_shard_prepare(pl_shard_t *m, int max_tokens, int max_seqs, char *err,
    size_t errlen)
{
    const pl_model_config_t  *c = &m->cfg;
    size_t                    a;
    size_t                    T = (size_t) max_tokens;
    size_t                    S = (size_t) max_seqs + PL_EXTRA_LOGITS;
    size_t                    qd = (size_t) m->sh.n_heads * c->head_dim;
    size_t                    kvd = (size_t) m->sh.n_kv_heads * c->head_dim;
    size_t                    hid = c->hidden_size;
    size_t                    inter = m->sh.inter;
    size_t                    up = m->arch.family->up_rows;
    pl_scratch_t             *s = &m->s;

    a = pl_dtype_size(m->be->act_dtype);
    model_free_scratch(m);
    if (max_tokens < 1 || max_seqs < 1
        || max_tokens > (1 << 24) / (c->num_heads + 2 * c->num_kv_heads))
    {
        return model_fail(err, errlen, "model: cannot prepare for %d tokens "
                          "and %d sequences (need at least one of each, and "
                          "tokens x heads < 2^24)", max_tokens, max_seqs);
    }
    if ((s->x = model_alloc(m, T * hid * a, "activations", err, errlen))
        == NULL
        || (s->h = model_alloc(m, T * hid * a, "activations", err, errlen))
           == NULL
        || (s->y = model_alloc(m, T * hid * a, "activations", err, errlen))
           == NULL
        || (s->qkv = model_alloc(m, T * (qd + 2 * kvd) * a, "activations",
                                 err, errlen)) == NULL
        || (s->q = model_alloc(m, T * qd * a, "activations", err, errlen))
           == NULL
        || (s->attn = model_alloc(m, T * qd * a, "activations", err, errlen))
           == NULL
        || (s->up = model_alloc(m, T * up * inter * a, "activations", err,
                                errlen)) == NULL
        || (s->act = model_alloc(m, T * inter * a, "activations", err,
                                 errlen)) == NULL
        || (s->rows = model_alloc(m, S * hid * a, "activations", err,
                                  errlen)) == NULL
        || (s->logits = model_alloc(m, S * m->sh.vocab * a, "logits", err,
                                    errlen)) == NULL
        || parallel_scratch(m, max_tokens, max_seqs, err, errlen) != 0)
    {
        model_free_scratch(m);
        return -1;
    }
    m->max_tokens = max_tokens;
    m->max_seqs = max_seqs;
    return 0;
}


/* sequence s's query rows and context against the cache and block table */
static int
check_seq(const pl_shard_t *m, const pl_batch_t *b, int s, char *err,
    size_t errlen)
{
    int  q0 = b->query_start[s], q1 = b->query_start[s + 1];
    int  ctx = b->context_lens[s], bs = m->block_size;
    int  i, nblocks;

    if (q1 <= q0 || q1 > b->num_tokens) {
        return model_fail(err, errlen, "batch: sequence %d has query rows "
                          "[%d, %d) (must be non-empty, within %d tokens)",
                          s, q0, q1, b->num_tokens);
    }
    if (ctx < q1 - q0 || ctx > b->max_context_len
        || q1 - q0 > b->max_query_len
        || (ctx + bs - 1) / bs > b->max_blocks_per_seq)
    {
        return model_fail(err, errlen, "batch: sequence %d has context "
                          "length %d for %d query rows (max_context_len %d, "
                          "max_query_len %d, %d blocks of %d)", s, ctx,
                          q1 - q0, b->max_context_len, b->max_query_len,
                          b->max_blocks_per_seq, bs);
    }
    if (b->logits_rows[s] < q0 || b->logits_rows[s] >= q1) {
        return model_fail(err, errlen, "batch: sequence %d's logits row %d "
                          "is not one of its query rows", s,
                          b->logits_rows[s]);
    }
    nblocks = (ctx + bs - 1) / bs;
    for (i = 0; i < nblocks; i++) {
        int32_t  blk = b->block_tables[(int64_t) s * b->max_blocks_per_seq
                                       + i];

        if (blk < 0 || blk >= m->num_blocks) {
            return model_fail(err, errlen, "batch: sequence %d's block %d "
                              "is physical block %d, outside the cache "
                              "(%d blocks)", s, i, blk, m->num_blocks);
        }
    }
    return 0;
}


/* token i, query row j of sequence s: id, position and slot */
static int
check_token(const pl_shard_t *m, const pl_batch_t *b, int s, int i,
    char *err, size_t errlen)
{
    int      q0 = b->query_start[s], bs = m->block_size;
    int      qlen = b->query_start[s + 1] - q0;
    int32_t  pos = b->context_lens[s] - qlen + (i - q0);
    int32_t  blk = b->block_tables[(int64_t) s * b->max_blocks_per_seq
                                   + pos / bs];
    int32_t  slot = b->slot_mapping[i];

    if (b->token_ids[i] < 0 || b->token_ids[i] >= m->cfg.vocab_size) {
        return model_fail(err, errlen, "batch: token %d has id %d, outside "
                          "the vocabulary (%d)", i, b->token_ids[i],
                          m->cfg.vocab_size);
    }
    if (m->arch.family->learned_positions
        && pos >= m->cfg.max_position_embeddings)
    {
        return model_fail(err, errlen, "batch: token %d is at position %d, "
                          "past the model's %d learned positions", i, pos,
                          m->cfg.max_position_embeddings);
    }
    if (b->positions[i] != pos) {
        return model_fail(err, errlen, "batch: token %d has position %d, "
                          "its sequence's context puts it at %d", i,
                          b->positions[i], pos);
    }
    if (slot >= 0 && slot != blk * bs + pos % bs) {
        return model_fail(err, errlen, "batch: token %d has slot %d, its "
                          "block table puts it at %d", i, slot,
                          blk * bs + pos % bs);
    }
    return 0;
}


static int
check_batch(const pl_shard_t *m, const pl_batch_t *b, char *err,
    size_t errlen)
{
    int  s, i;

    if (m->max_tokens == 0 || m->k_cache == NULL) {
        return model_fail(err, errlen, "model: prepare() and kv_alloc() "
                          "must run before forward()");
    }
    if (b->num_tokens < 1 || b->num_tokens > m->max_tokens
        || b->num_seqs < 1 || b->num_seqs > m->max_seqs
        || b->max_blocks_per_seq < 1 || b->query_start[0] != 0
        || b->query_start[b->num_seqs] != b->num_tokens)
    {
        return model_fail(err, errlen, "batch: %d tokens in %d sequences "
                          "does not fit the %d tokens and %d sequences "
                          "prepared, or its query_start is not [0 .. "
                          "num_tokens]", b->num_tokens, b->num_seqs,
                          m->max_tokens, m->max_seqs);
    }
    if (b->num_extra_logits < 0 || b->num_extra_logits > PL_EXTRA_LOGITS) {
        return model_fail(err, errlen, "batch: %d extra logits rows (at "
                          "most %d)", b->num_extra_logits, PL_EXTRA_LOGITS);
    }
    for (s = b->num_seqs; s < pl_batch_logits(b); s++) {
        if (b->logits_rows[s] < 0 || b->logits_rows[s] >= b->num_tokens) {
            return model_fail(err, errlen, "batch: extra logits row %d is "
                              "token %d, outside the batch's %d", s,
                              b->logits_rows[s], b->num_tokens);
        }
    }
    for (s = 0; s < b->num_seqs; s++) {
        if (check_seq(m, b, s, err, errlen) != 0) {
            return -1;
        }
        for (i = b->query_start[s]; i < b->query_start[s + 1]; i++) {
            if (check_token(m, b, s, i, err, errlen) != 0) {
                return -1;
            }
        }
    }
    return 0;
}


const pl_weight_t *
model_bias(const pl_linear_t *lin)
{
    return lin->b.data != NULL ? &lin->b : NULL;
}


/* world > 1: buf[n] (activations) := its sum over the ranks */
void
model_all_reduce(pl_shard_t *m, void *buf, size_t n)
{
    pl_comm_t  *comm = m->sh.comm;

    if (comm != NULL
        && comm->all_reduce_sum(comm, buf, n, m->be->act_dtype) != 0)
    {
        m->sh.comm_failed = 1;
    }
}


/* s->attn = attention of layer l over s->qkv (the QKV projection): its
   split into q and the cache, RoPE (when the family has frequencies) on
   the way, in one operation; paged attention */
static void
attend(pl_shard_t *m, int l, const pl_batch_t *b)
{
    pl_backend_t  *be = m->be;
    pl_scratch_t  *s = &m->s;
    int            hd = m->cfg.head_dim;
    int            nh = m->sh.n_heads, nkv = m->sh.n_kv_heads;

    be->qkv_rope_store(be, s->q, m->k_cache[l], m->v_cache[l], s->qkv,
                       b->positions, b->slot_mapping,
                       m->inv_freq,
                       b->num_tokens, nh, nkv, hd);
    be->attention(be, s->attn, s->q, m->k_cache[l], m->v_cache[l], b, nh,
                  nkv, hd, m->block_size, 1.0f / sqrtf((float) hd));
}


/* out = attention of layer l over in (both [T][hidden]), through the
   paged cache: QKV projection, attend, output projection */
void
model_attention_block(pl_shard_t *m, int l, const pl_batch_t *b,
    const void *in, void *out)
{
    pl_backend_t      *be = m->be;
    const pl_layer_t  *L = &m->layers[l];
    pl_scratch_t      *s = &m->s;
    int                T = b->num_tokens;

    be->matmul(be, s->qkv, in, &L->qkv.w, model_bias(&L->qkv), T);
    attend(m, l, b);
    be->matmul(be, out, s->attn, &L->o.w, model_bias(&L->o), T);
    model_all_reduce(m, out, (size_t) T * m->cfg.hidden_size);
}


/* world > 1: x = this rank's slice of the embeddings (an id outside it
   reads the zero row after the slice), summed over the ranks */
static void
embed_slice(pl_shard_t *m, const pl_batch_t *host)
{
    pl_backend_t      *be = m->be;
    const pl_split_t  *sh = &m->sh;
    int                T = host->num_tokens, i;
    int32_t            id;

    for (i = 0; i < T; i++) {
        id = host->token_ids[i] - sh->vocab_first;
        m->s.emb_host[i] = id >= 0 && id < sh->vocab_real ? id : sh->vocab;
    }
    be->upload(be, m->s.emb_ids, m->s.emb_host, (size_t) T * sizeof(int32_t));
    be->embedding(be, m->s.x, &m->embed, m->s.emb_ids, T);
    model_all_reduce(m, m->s.x, (size_t) T * m->cfg.hidden_size);
}


/* x = the token embeddings; host is read only with tensor parallelism */
void
model_embed_tokens(pl_shard_t *m, const pl_batch_t *host,
    const pl_batch_t *b)
{
    if (m->sh.world == 1) {
        m->be->embedding(m->be, m->s.x, &m->embed, b->token_ids,
                         b->num_tokens);
    } else {
        embed_slice(m, host);
    }
}


/* world > 1: every rank's logits slice [S][slice] gathered; rank 0
   (logits not NULL) writes rank r's slice of row s at logits[s][r slice
   ..], dropping the padding after the vocabulary */
static void
gather_logits(pl_shard_t *m, int S, float *logits)
{
    pl_backend_t      *be = m->be;
    const pl_split_t  *sh = &m->sh;
    size_t             slice = (size_t) S * sh->vocab;
    int                V = m->cfg.vocab_size, r, s, n;

    if (sh->comm->all_gather(sh->comm, m->s.gathered, m->s.logits, slice,
                             be->act_dtype) != 0)
    {
        m->sh.comm_failed = 1;
        return;
    }
    if (logits == NULL) {
        return;
    }
    be->download_f32(be, m->s.gathered_host, m->s.gathered,
                     slice * sh->world);
    be->sync(be);
    for (r = 0; r < sh->world; r++) {
        n = V - r * sh->vocab < sh->vocab ? V - r * sh->vocab : sh->vocab;
        for (s = 0; s < S && n > 0; s++) {
            memcpy(logits + (size_t) s * V + (size_t) r * sh->vocab,
                   m->s.gathered_host + r * slice + (size_t) s * sh->vocab,
                   (size_t) n * sizeof(float));
        }
    }
}


void
model_run_layers(pl_shard_t *m, const pl_batch_t *host, const pl_batch_t *b)
{
    pl_backend_t             *be = m->be;
    const pl_family_t        *fam = m->arch.family;
    const pl_model_config_t  *c = &m->cfg;
    int                       l;

    fam->embed(m, host, b);
    for (l = 0; l < c->num_layers; l++) {
        fam->layer(m, l, b);
    }
    be->gather_rows(be, m->s.rows, fam->final_hidden(m, b), b->logits_rows,
                    pl_batch_logits(b), c->hidden_size);
    be->matmul(be, m->s.logits, m->s.rows, &m->lm_head, NULL,
               pl_batch_logits(b));
}


/* what a decode recording runs (one rank: the host batch is not read) */
static void
record_layers(void *arg, const pl_batch_t *b)
{
    model_run_layers(arg, NULL, b);
}


int
pl_shard_forward_logits(pl_shard_t *m, const pl_batch_t *batch,
    float *host_logits, pl_logits_t *out, char *err, size_t errlen)
{
    pl_backend_t      *be = m->be;
    const pl_batch_t  *run = batch, *b;
    int                rc;

    if (check_batch(m, batch, err, errlen) != 0) {
        return -1;
    }
    if (model_decode_pad(m, batch)) {
        run = &m->dec.batch;
        if (m->dec.mode == PL_DECODE_GRAPHS) {
            rc = be->graphs_run(be, m->dec.set, run, record_layers, m);
            if (rc >= 0) {
                m->dec.recorded += rc == 0;
                m->dec.replayed += rc == 1;
                *out = (pl_logits_t) { m->s.logits, be->act_dtype, 0 };
                return 0;
            }
        }
    }
    b = be->batch_upload(be, run);
    if (b == NULL) {
        return model_fail(err, errlen, "the %s backend cannot take the "
                          "batch", be->name);
    }
    model_run_layers(m, run, b);
    if (m->sh.world == 1) {
        *out = (pl_logits_t) { m->s.logits, be->act_dtype, 0 };
    } else {
        /* a rank of a tensor-parallel model: rank 0 gathers to the host */
        gather_logits(m, pl_batch_logits(b), host_logits);
        *out = (pl_logits_t) { host_logits, PL_DT_F32, 1 };
        be->sync(be);
    }
    if (m->sh.comm_failed) {
        m->sh.comm_failed = 0;
        return model_fail(err, errlen, "the %s communicator of rank %d "
                          "failed", m->sh.comm->name, m->sh.rank);
    }
    return 0;
}


int
pl_shard_forward(pl_shard_t *m, const pl_batch_t *batch, float *logits,
    char *err, size_t errlen)
{
    pl_logits_t  out;

    if (pl_shard_forward_logits(m, batch, logits, &out, err, errlen) != 0) {
        return -1;
    }
    if (!out.on_host) {
        m->be->download_f32(m->be, logits, out.data,
                            (size_t) pl_batch_logits(batch)
                            * m->cfg.vocab_size);
    }
    return 0;
}
