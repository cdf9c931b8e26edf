/*
 * model_llama: the Llama family (Llama 2/3, Mistral without sliding
 * window, Qwen2 with its q/k/v biases): pre-RMSNorm layers, RoPE, SwiGLU.
 *
 *   x = embed(tokens)
 *   per layer:  h = rmsnorm(x)            (fused with x += y after layer 0)
 *               y = attention(h)          (RoPE on q and k)
 *               x += y; h = rmsnorm(x)
 *               y = (silu(h . Wgate) * (h . Wup)) . Wdown
 *   x += y; h = rmsnorm(x)                (the final norm)
 *
 * Each layer leaves its MLP output pending in y; the next norm adds it
 * to x in the same kernel (add_rmsnorm).  gate and up are one fused
 * weight [2 inter][hidden], so the MLP is two matmuls.  The RoPE
 * frequencies, scaling applied (model_config.c), are computed once at
 * load into backend memory.
 */

#include <stdio.h>
#include <stdlib.h>

#include "model_internal.h"


static int
load_rope(pl_shard_t *m, char *err, size_t errlen)
{
    size_t  bytes = (size_t) (m->cfg.head_dim / 2) * sizeof(float);
    float  *host = malloc(bytes);

    if (host == NULL) {
        return model_fail(err, errlen, "out of memory");
    }
    m->inv_freq = model_alloc(m, bytes, "rope frequencies", err, errlen);
    if (m->inv_freq == NULL) {
        free(host);
        return -1;
    }
    pl_rope_inv_freq(&m->cfg, &m->arch.rope, host);
    m->be->upload(m->be, m->inv_freq, host, bytes);
    m->be->sync(m->be);
    free(host);
    return 0;
}


/* "model.embed_tokens", "model.norm" and the RoPE frequencies */
static int
llama_load_outer(pl_shard_t *m, char *err, size_t errlen)
{
    return model_load_vocab(m, &m->embed, "model.embed_tokens.weight", 1,
                            err, errlen) != 0
           || model_load_linear(m, &m->norm, "model.", "norm", 0,
                                m->cfg.hidden_size, 0, err, errlen) != 0
           || load_rope(m, err, errlen) != 0 ? -1 : 0;
}


static int
llama_load_layer(pl_shard_t *m, int l, char *err, size_t errlen)
{
    const pl_model_config_t  *c = &m->cfg;
    pl_layer_t               *L = &m->layers[l];
    int64_t                   hid = c->hidden_size;
    int64_t                   inter = c->intermediate_size;
    int64_t                   qd = (int64_t) c->num_heads * c->head_dim;
    int64_t                   qn = (int64_t) m->sh.n_heads * c->head_dim;
    int64_t                   gu_rows[2] = { inter, inter };
    int64_t                   gu_first[2] = { m->sh.inter_first,
                                              m->sh.inter_first };
    int64_t                   gu_count[2] = { m->sh.inter, m->sh.inter };
    char                      n[2][128];
    char                      p[64];

    snprintf(p, sizeof(p), "model.layers.%d.", l);
    snprintf(n[0], sizeof(n[0]), "%smlp.gate_proj.weight", p);
    snprintf(n[1], sizeof(n[1]), "%smlp.up_proj.weight", p);
    return model_load_qkv(m, L, p, m->arch.qkv_bias, err, errlen) != 0
           || model_load_fused(m, &L->up.w, n, gu_rows, gu_first, gu_count,
                               2, hid, err, errlen) != 0
           || model_load_linear(m, &L->attn_norm, p, "input_layernorm", 0,
                                hid, 0, err, errlen) != 0
           || model_load_linear(m, &L->mlp_norm, p,
                                "post_attention_layernorm", 0, hid, 0, err,
                                errlen) != 0
           || model_load_row_parallel(m, &L->o, p, "self_attn.o_proj", hid,
                                      qd, m->sh.rank * qn, qn, 0, err,
                                      errlen) != 0
           || model_load_row_parallel(m, &L->down, p, "mlp.down_proj", hid,
                                      inter, m->sh.inter_first, m->sh.inter,
                                      0, err, errlen) != 0 ? -1 : 0;
}


/* pre-RMSNorm, SwiGLU; x += y is left pending in y and fused into the
   next norm */
static void
llama_layer(pl_shard_t *m, int l, const pl_batch_t *b)
{
    pl_backend_t             *be = m->be;
    const pl_model_config_t  *c = &m->cfg;
    const pl_layer_t         *L = &m->layers[l];
    pl_scratch_t             *s = &m->s;
    int                       T = b->num_tokens, hid = c->hidden_size;
    float                     eps = c->rms_norm_eps;

    if (l == 0) {
        be->rmsnorm(be, s->h, s->x, &L->attn_norm.w, T, hid, eps);
    } else {
        be->add_rmsnorm(be, s->h, s->x, s->y, &L->attn_norm.w, T, hid, eps);
    }
    model_attention_block(m, l, b, s->h, s->y);
    be->add_rmsnorm(be, s->h, s->x, s->y, &L->mlp_norm.w, T, hid, eps);
    be->matmul(be, s->up, s->h, &L->up.w, NULL, T);
    be->silu_mul(be, s->act, s->up, T, m->sh.inter);
    be->matmul(be, s->y, s->act, &L->down.w, NULL, T);
    model_all_reduce(m, s->y, (size_t) T * hid);
}


/* the last layer's pending y added, then the final norm */
static const void *
llama_final_hidden(pl_shard_t *m, const pl_batch_t *b)
{
    const pl_model_config_t  *c = &m->cfg;

    m->be->add_rmsnorm(m->be, m->s.h, m->s.x, m->s.y, &m->norm.w,
                       b->num_tokens, c->hidden_size, c->rms_norm_eps);
    return m->s.h;
}


const pl_family_t  pl_family_llama = {
    .up_rows = 2,
    .learned_positions = 0,
    .check_backend = NULL,
    .load_outer = llama_load_outer,
    .load_layer = llama_load_layer,
    .embed = model_embed_tokens,
    .layer = llama_layer,
    .final_hidden = llama_final_hidden,
};
