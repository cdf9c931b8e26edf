/*
 * model_opt: the OPT family: learned positions, LayerNorm with biases,
 * ReLU, biases on every projection.
 *
 *   x = embed(tokens) + embed_positions(positions + 2)
 *   pre-LN layer:   x += attention(LN(x)); x += fc2(relu(fc1(LN(x))))
 *   post-LN layer:  x = LN(x + attention(x)); x = LN(x + fc2(...))
 *   h = LN(x) when the decoder has a final layer norm, else x
 *
 * config.json's do_layer_norm_before picks the layer (post-LN is
 * opt-350m's).  The tensors sit under "model.decoder." or, in some
 * checkpoints, "decoder."; which one is read from the embedding's name.
 * OPT needs the backend's optional layernorm, add and relu.
 */

#include <stdio.h>

#include "model_internal.h"

/* OPT's learned positions start at row 2 of embed_positions */
#define PL_OPT_POS_OFFSET  2


static int
opt_check_backend(const pl_shard_t *m, char *err, size_t errlen)
{
    const pl_backend_t  *be = m->be;

    if (be->layernorm == NULL || be->add == NULL || be->relu == NULL) {
        return model_fail(err, errlen, "the %s backend has no layernorm, add "
                          "or relu operation, which %s models need",
                          be->name, m->cfg.arch);
    }
    return 0;
}


/* the embeddings, the positions from row 2 on, the final norm if any */
static int
opt_load_outer(pl_shard_t *m, char *err, size_t errlen)
{
    const pl_model_config_t  *c = &m->cfg;
    pl_weight_t               pos;
    char                      n[96];

    snprintf(m->prefix, sizeof(m->prefix), "%s",
             pl_ckpt_find(m->ckpt, "decoder.embed_tokens.weight", NULL)
             != NULL ? "decoder." : "model.decoder.");
    snprintf(n, sizeof(n), "%sembed_tokens.weight", m->prefix);
    if (model_load_vocab(m, &m->embed, n, 1, err, errlen) != 0) {
        return -1;
    }
    snprintf(n, sizeof(n), "%sembed_positions.weight", m->prefix);
    if (model_load_weight(m, &pos, n,
                          c->max_position_embeddings + PL_OPT_POS_OFFSET,
                          c->hidden_size, err, errlen) != 0)
    {
        return -1;
    }
    m->pos_rows = pos;
    m->pos_rows.data = (char *) pos.data
                       + (size_t) PL_OPT_POS_OFFSET * c->hidden_size
                         * pl_dtype_size(pos.dtype);
    m->pos_rows.rows -= PL_OPT_POS_OFFSET;
    return m->arch.final_norm
           ? model_load_linear(m, &m->norm, m->prefix, "final_layer_norm", 0,
                               c->hidden_size, 1, err, errlen)
           : 0;
}


static int
opt_load_layer(pl_shard_t *m, int l, char *err, size_t errlen)
{
    const pl_model_config_t  *c = &m->cfg;
    pl_layer_t               *L = &m->layers[l];
    int64_t                   hid = c->hidden_size;
    int64_t                   inter = c->intermediate_size;
    int64_t                   qn = (int64_t) m->sh.n_heads * c->head_dim;
    char                      p[64];

    snprintf(p, sizeof(p), "%slayers.%d.", m->prefix, l);
    return model_load_qkv(m, L, p, 1, err, errlen) != 0
           || model_load_row_parallel(m, &L->o, p, "self_attn.out_proj", hid,
                                      hid, m->sh.rank * qn, qn, 1, err,
                                      errlen) != 0
           || model_load_linear(m, &L->attn_norm, p, "self_attn_layer_norm",
                                0, hid, 1, err, errlen) != 0
           || model_load_linear(m, &L->mlp_norm, p, "final_layer_norm", 0,
                                hid, 1, err, errlen) != 0
           || model_load_col_parallel(m, &L->up, p, "fc1", inter, hid,
                                      m->sh.inter_first, m->sh.inter, 1, err,
                                      errlen) != 0
           || model_load_row_parallel(m, &L->down, p, "fc2", hid, inter,
                                      m->sh.inter_first, m->sh.inter, 1, err,
                                      errlen) != 0 ? -1 : 0;
}


/* x = token embeddings + the learned positions */
static void
opt_embed(pl_shard_t *m, const pl_batch_t *host, const pl_batch_t *b)
{
    pl_backend_t  *be = m->be;
    int            T = b->num_tokens;

    model_embed_tokens(m, host, b);
    be->embedding(be, m->s.y, &m->pos_rows, b->positions, T);
    be->add(be, m->s.x, m->s.y, T, m->cfg.hidden_size);
}


/* the feed-forward: out = fc2(relu(fc1(in))) */
static void
opt_mlp(pl_shard_t *m, const pl_layer_t *L, int T, const void *in,
    void *out)
{
    pl_backend_t  *be = m->be;

    be->matmul(be, m->s.up, in, &L->up.w, model_bias(&L->up), T);
    be->relu(be, m->s.act, m->s.up, T, m->sh.inter);
    be->matmul(be, out, m->s.act, &L->down.w, model_bias(&L->down), T);
    model_all_reduce(m, out, (size_t) T * m->cfg.hidden_size);
}


/* with do_layer_norm_before (all but opt-350m): norms inside the residual
   branches, the stream x only ever added to */
static void
opt_layer_pre_ln(pl_shard_t *m, int l, const pl_batch_t *b)
{
    pl_backend_t      *be = m->be;
    const pl_layer_t  *L = &m->layers[l];
    pl_scratch_t      *s = &m->s;
    int                T = b->num_tokens, hid = m->cfg.hidden_size;
    float              eps = m->arch.layer_norm_eps;

    be->layernorm(be, s->h, s->x, &L->attn_norm.w, &L->attn_norm.b, T, hid,
                  eps);
    model_attention_block(m, l, b, s->h, s->y);
    be->add(be, s->x, s->y, T, hid);
    be->layernorm(be, s->h, s->x, &L->mlp_norm.w, &L->mlp_norm.b, T, hid,
                  eps);
    opt_mlp(m, L, T, s->h, s->y);
    be->add(be, s->x, s->y, T, hid);
}


/* without do_layer_norm_before: each branch's sum is normed, the stream
   moving x -> h -> x */
static void
opt_layer_post_ln(pl_shard_t *m, int l, const pl_batch_t *b)
{
    pl_backend_t      *be = m->be;
    const pl_layer_t  *L = &m->layers[l];
    pl_scratch_t      *s = &m->s;
    int                T = b->num_tokens, hid = m->cfg.hidden_size;
    float              eps = m->arch.layer_norm_eps;

    model_attention_block(m, l, b, s->x, s->y);
    be->add(be, s->x, s->y, T, hid);
    be->layernorm(be, s->h, s->x, &L->attn_norm.w, &L->attn_norm.b, T, hid,
                  eps);
    opt_mlp(m, L, T, s->h, s->y);
    be->add(be, s->h, s->y, T, hid);
    be->layernorm(be, s->x, s->h, &L->mlp_norm.w, &L->mlp_norm.b, T, hid,
                  eps);
}


static void
opt_layer(pl_shard_t *m, int l, const pl_batch_t *b)
{
    if (m->arch.norm_before) {
        opt_layer_pre_ln(m, l, b);
    } else {
        opt_layer_post_ln(m, l, b);
    }
}


static const void *
opt_final_hidden(pl_shard_t *m, const pl_batch_t *b)
{
    if (!m->arch.final_norm) {
        return m->s.x;
    }
    m->be->layernorm(m->be, m->s.h, m->s.x, &m->norm.w, &m->norm.b,
                     b->num_tokens, m->cfg.hidden_size,
                     m->arch.layer_norm_eps);
    return m->s.h;
}


const pl_family_t  pl_family_opt = {
    .up_rows = 1,
    .learned_positions = 1,
    .check_backend = opt_check_backend,
    .load_outer = opt_load_outer,
    .load_layer = opt_load_layer,
    .embed = opt_embed,
    .layer = opt_layer,
    .final_hidden = opt_final_hidden,
};
