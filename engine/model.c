/*
 * model: the Llama family (Llama 2/3, Mistral without sliding window) on
 * any backend, loaded from a Hugging Face folder.
 *
 * Loading checks every tensor of model.safetensors against config.json
 * (presence, dtype, shape) and fuses, for speed, the q/k/v projections into
 * one QKV weight and gate/up into one gate_up weight, so each layer runs
 * four matmuls.  The fused copies are made on the host in the checkpoint's
 * dtype; a backend that copies weights into its own memory (its pointer
 * differs from ours after weight_load) lets us drop the host copy, and the
 * model frees that backend memory at the end.
 *
 * One forward pass, for all the batch's tokens at once:
 *
 *     x = embed(tokens)
 *     per layer:  h = rmsnorm(x)              (fused with x += y after 0)
 *                 q, k, v = split(h . Wqkv)   (gather_rows by head)
 *                 rope(q, k); kv_write(k, v)
 *                 y = attention(q, cache) . Wo
 *                 x += y; h = rmsnorm(x)
 *                 y = (silu(h . Wgate) * (h . Wup)) . Wdown
 *     x += y; h = rmsnorm(x); logits = h[logits_rows] . Wlm_head
 *
 * The batch comes from the engine's runner but is checked in full before
 * any kernel sees it: a bad index gives an error, never a stray access.
 */

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model_config.h"
#include "pl_model.h"
#include "safetensors.h"

typedef struct {
    pl_weight_t  input_norm;
    pl_weight_t  post_norm;
    pl_weight_t  qkv;           /* [(nh + 2 nkv) hd][hidden] */
    pl_weight_t  o;             /* [hidden][nh hd] */
    pl_weight_t  gate_up;       /* [2 inter][hidden] */
    pl_weight_t  down;          /* [hidden][inter] */
} pl_layer_t;

/* activation scratch, all in backend memory, sized for max_tokens rows */
typedef struct {
    void     *x;                /* residual stream [T][hidden] */
    void     *h;                /* normed [T][hidden] */
    void     *qkv;              /* [T][(nh + 2 nkv) hd] */
    void     *q;                /* [T][nh hd] */
    void     *k;                /* [T][nkv hd] */
    void     *v;                /* [T][nkv hd] */
    void     *attn;             /* [T][nh hd] */
    void     *y;                /* block output [T][hidden] */
    void     *gate_up;          /* [T][2 inter] */
    void     *act;              /* [T][inter] */
    void     *rows;             /* [S][hidden] */
    void     *logits;           /* [S][vocab] */
    int32_t  *split_q;          /* head rows of qkv, see split_indices() */
    int32_t  *split_k;
    int32_t  *split_v;
} pl_scratch_t;

/* memory the model frees at the end: backend memory or host malloc */
typedef struct {
    void        *p;
    int          backend;
} pl_owned_t;

struct pl_model_s {
    pl_model_config_t   cfg;
    pl_rope_scaling_t   rope;
    pl_backend_t       *be;
    pl_safetensors_t   *st;
    char                st_path[4096];

    pl_weight_t         embed;
    pl_weight_t         norm;
    pl_weight_t         lm_head;
    pl_layer_t         *layers;
    float              *inv_freq;       /* backend memory [head_dim / 2] */

    pl_owned_t         *owned;
    int                 n_owned;
    int                 owned_cap;

    int                 max_tokens;
    int                 max_seqs;
    pl_scratch_t        s;

    int                 num_blocks;
    int                 block_size;
    void              **k_cache;        /* [num_layers] */
    void              **v_cache;
};


static int
model_fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list  ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}


/* p is freed with the model: by be->free when from_backend, else free() */
static int
model_own(pl_model_t *m, void *p, int from_backend)
{
    pl_owned_t  *grown;
    int          cap;

    if (m->n_owned == m->owned_cap) {
        cap = m->owned_cap ? 2 * m->owned_cap : 64;
        grown = realloc(m->owned, (size_t) cap * sizeof(pl_owned_t));
        if (grown == NULL) {
            return -1;
        }
        m->owned = grown;
        m->owned_cap = cap;
    }
    m->owned[m->n_owned++] = (pl_owned_t) { p, from_backend };
    return 0;
}


/*
 * Hand host bytes to the backend.  When the backend keeps our pointer the
 * host copy must live as long as the model (keep_host says it is ours to
 * free then); when it copied, the copy is its memory to free at the end.
 */
static int
model_weight_load(pl_model_t *m, pl_weight_t *w, const void *host,
    void *ours, const char *what, char *err, size_t errlen)
{
    if (m->be->weight_load(m->be, w, host) != 0) {
        free(ours);
        return model_fail(err, errlen, "%s: the %s backend cannot load "
                          "tensor '%s'", m->st_path, m->be->name, what);
    }
    if (w->data == host) {
        if (ours != NULL && model_own(m, ours, 0) != 0) {
            free(ours);
            return model_fail(err, errlen, "out of memory");
        }
        return 0;
    }
    free(ours);
    if (model_own(m, w->data, 1) != 0) {
        m->be->free(m->be, w->data);
        return model_fail(err, errlen, "out of memory");
    }
    return 0;
}


/* the tensor name with shape [rows][cols] (cols only: a vector) */
static const pl_st_tensor_t *
find_tensor(pl_model_t *m, const char *name, int64_t rows, int64_t cols,
    char *err, size_t errlen)
{
    const pl_st_tensor_t  *t = pl_st_find(m->st, name);
    int                    vec = rows == 0;

    if (t == NULL) {
        model_fail(err, errlen, "%s: tensor '%s' is missing", m->st_path,
                   name);
        return NULL;
    }
    if (t->ndim != (vec ? 1 : 2)
        || (vec ? t->shape[0] != cols
                : (t->shape[0] != rows || t->shape[1] != cols)))
    {
        char  want[64], got[96] = "";
        int   i, len = 0;

        if (vec) {
            snprintf(want, sizeof(want), "[%lld]", (long long) cols);
        } else {
            snprintf(want, sizeof(want), "[%lld, %lld]", (long long) rows,
                     (long long) cols);
        }
        for (i = 0; i < t->ndim && len < (int) sizeof(got) - 24; i++) {
            len += snprintf(got + len, sizeof(got) - len, "%s%lld",
                            i ? ", " : "", (long long) t->shape[i]);
        }
        model_fail(err, errlen, "%s: tensor '%s' has shape [%s] but "
                   "config.json implies %s", m->st_path, name, got, want);
        return NULL;
    }
    return t;
}


static int
load_weight(pl_model_t *m, pl_weight_t *w, const char *name, int64_t rows,
    int64_t cols, char *err, size_t errlen)
{
    const pl_st_tensor_t  *t = find_tensor(m, name, rows, cols, err, errlen);

    if (t == NULL) {
        return -1;
    }
    *w = (pl_weight_t) {
        .dtype = t->dtype, .rows = rows ? rows : 1, .cols = cols
    };
    return model_weight_load(m, w, t->data, NULL, name, err, errlen);
}


/* count elements from src (dtype sdt) to dst (dtype ddt) */
static void
convert(void *dst, pl_dtype_t ddt, const void *src, pl_dtype_t sdt,
    size_t count)
{
    size_t  i;
    float   f = 0.0f;

    if (ddt == sdt) {
        memcpy(dst, src, count * pl_dtype_size(sdt));
        return;
    }
    for (i = 0; i < count; i++) {
        switch (sdt) {
        case PL_DT_F32:
            f = ((const float *) src)[i];
            break;
        case PL_DT_F16:
            f = pl_f16_to_f32(((const uint16_t *) src)[i]);
            break;
        case PL_DT_BF16:
            f = pl_bf16_to_f32(((const uint16_t *) src)[i]);
            break;
        }
        switch (ddt) {
        case PL_DT_F32:
            ((float *) dst)[i] = f;
            break;
        case PL_DT_F16:
            ((uint16_t *) dst)[i] = pl_f32_to_f16(f);
            break;
        case PL_DT_BF16:
            ((uint16_t *) dst)[i] = pl_f32_to_bf16(f);
            break;
        }
    }
}


/* Stack n tensors of shape [rows[i]][cols] into one weight, in the dtype
   of the first. */
static int
load_fused(pl_model_t *m, pl_weight_t *w, char names[][128],
    const int64_t *rows, int n, int64_t cols, char *err, size_t errlen)
{
    const pl_st_tensor_t  *t[4];
    int64_t                total = 0, at = 0;
    size_t                 esize;
    uint8_t               *host;
    int                    i;

    for (i = 0; i < n; i++) {
        t[i] = find_tensor(m, names[i], rows[i], cols, err, errlen);
        if (t[i] == NULL) {
            return -1;
        }
        total += rows[i];
    }
    esize = pl_dtype_size(t[0]->dtype);
    host = aligned_alloc(64, ((size_t) (total * cols) * esize + 63) / 64 * 64);
    if (host == NULL) {
        return model_fail(err, errlen, "out of memory fusing '%s'", names[0]);
    }
    for (i = 0; i < n; i++) {
        convert(host + (size_t) (at * cols) * esize, t[0]->dtype,
                t[i]->data, t[i]->dtype, (size_t) (rows[i] * cols));
        at += rows[i];
    }
    *w = (pl_weight_t) { .dtype = t[0]->dtype, .rows = total, .cols = cols };
    return model_weight_load(m, w, host, host, names[0], err, errlen);
}


static int
load_layer(pl_model_t *m, int l, char *err, size_t errlen)
{
    const pl_model_config_t  *c = &m->cfg;
    pl_layer_t               *L = &m->layers[l];
    int64_t                   hid = c->hidden_size;
    int64_t                   qd = (int64_t) c->num_heads * c->head_dim;
    int64_t                   kvd = (int64_t) c->num_kv_heads * c->head_dim;
    int64_t                   qkv_rows[3] = { qd, kvd, kvd };
    int64_t                   gu_rows[2] = { c->intermediate_size,
                                             c->intermediate_size };
    char                      n[3][128];
    char                      p[64];

    snprintf(p, sizeof(p), "model.layers.%d.", l);
    snprintf(n[0], sizeof(n[0]), "%sself_attn.q_proj.weight", p);
    snprintf(n[1], sizeof(n[1]), "%sself_attn.k_proj.weight", p);
    snprintf(n[2], sizeof(n[2]), "%sself_attn.v_proj.weight", p);
    if (load_fused(m, &L->qkv, n, qkv_rows, 3, hid, err, errlen) != 0) {
        return -1;
    }
    snprintf(n[0], sizeof(n[0]), "%smlp.gate_proj.weight", p);
    snprintf(n[1], sizeof(n[1]), "%smlp.up_proj.weight", p);
    if (load_fused(m, &L->gate_up, n, gu_rows, 2, hid, err, errlen) != 0) {
        return -1;
    }
    snprintf(n[0], sizeof(n[0]), "%sinput_layernorm.weight", p);
    snprintf(n[1], sizeof(n[1]), "%spost_attention_layernorm.weight", p);
    snprintf(n[2], sizeof(n[2]), "%sself_attn.o_proj.weight", p);
    if (load_weight(m, &L->input_norm, n[0], 0, hid, err, errlen) != 0
        || load_weight(m, &L->post_norm, n[1], 0, hid, err, errlen) != 0
        || load_weight(m, &L->o, n[2], hid, qd, err, errlen) != 0)
    {
        return -1;
    }
    snprintf(n[0], sizeof(n[0]), "%smlp.down_proj.weight", p);
    return load_weight(m, &L->down, n[0], hid, c->intermediate_size, err,
                       errlen);
}


static int
load_weights(pl_model_t *m, char *err, size_t errlen)
{
    const pl_model_config_t  *c = &m->cfg;
    int                       l;

    if (load_weight(m, &m->embed, "model.embed_tokens.weight", c->vocab_size,
                    c->hidden_size, err, errlen) != 0
        || load_weight(m, &m->norm, "model.norm.weight", 0, c->hidden_size,
                       err, errlen) != 0)
    {
        return -1;
    }
    m->cfg.dtype = pl_st_find(m->st, "model.embed_tokens.weight")->dtype;
    if (c->tie_word_embeddings) {
        m->lm_head = m->embed;
    } else if (load_weight(m, &m->lm_head, "lm_head.weight", c->vocab_size,
                           c->hidden_size, err, errlen) != 0)
    {
        return -1;
    }
    m->layers = calloc(c->num_layers, sizeof(pl_layer_t));
    if (m->layers == NULL) {
        return model_fail(err, errlen, "out of memory");
    }
    for (l = 0; l < c->num_layers; l++) {
        if (load_layer(m, l, err, errlen) != 0) {
            return -1;
        }
    }
    return 0;
}


/* backend memory owned by the model; NULL (with err) on failure */
static void *
model_alloc(pl_model_t *m, size_t bytes, const char *what, char *err,
    size_t errlen)
{
    void  *p = m->be->alloc(m->be, bytes);

    if (p == NULL) {
        model_fail(err, errlen, "the %s backend cannot allocate %zu bytes "
                   "for %s", m->be->name, bytes, what);
        return NULL;
    }
    if (model_own(m, p, 1) != 0) {
        m->be->free(m->be, p);
        model_fail(err, errlen, "out of memory");
        return NULL;
    }
    return p;
}


static int
load_rope(pl_model_t *m, char *err, size_t errlen)
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
    pl_rope_inv_freq(&m->cfg, &m->rope, host);
    m->be->upload(m->be, m->inv_freq, host, bytes);
    m->be->sync(m->be);
    free(host);
    return 0;
}


pl_model_t *
pl_model_load(const char *dir, pl_backend_t *be, char *err, size_t errlen)
{
    pl_model_t  *m = calloc(1, sizeof(*m));

    if (m == NULL) {
        model_fail(err, errlen, "out of memory");
        return NULL;
    }
    m->be = be;
    if (pl_model_config_read(dir, &m->cfg, &m->rope, err, errlen) != 0) {
        pl_model_free(m);
        return NULL;
    }
    snprintf(m->st_path, sizeof(m->st_path), "%s/model.safetensors", dir);
    if (access(m->st_path, F_OK) != 0) {
        model_fail(err, errlen, "%s: not found (sharded checkpoints are "
                   "not supported: the weights must be one "
                   "model.safetensors)", m->st_path);
        pl_model_free(m);
        return NULL;
    }
    m->st = pl_st_open(m->st_path, err, errlen);
    if (m->st == NULL || load_weights(m, err, errlen) != 0
        || load_rope(m, err, errlen) != 0)
    {
        pl_model_free(m);
        return NULL;
    }
    return m;
}


static void
free_owned(pl_model_t *m, void *p)
{
    int  i;

    for (i = 0; i < m->n_owned; i++) {
        if (m->owned[i].p == p) {
            if (m->owned[i].backend) {
                m->be->free(m->be, p);
            } else {
                free(p);
            }
            m->owned[i] = m->owned[--m->n_owned];
            return;
        }
    }
}


static void
free_kv(pl_model_t *m)
{
    int  l;

    for (l = 0; m->k_cache != NULL && l < m->cfg.num_layers; l++) {
        free_owned(m, m->k_cache[l]);
        free_owned(m, m->v_cache[l]);
    }
    free(m->k_cache);
    free(m->v_cache);
    m->k_cache = NULL;
    m->v_cache = NULL;
    m->num_blocks = 0;
}


static void
free_scratch(pl_model_t *m)
{
    pl_scratch_t  *s = &m->s;
    void          *all[] = {
        s->x, s->h, s->qkv, s->q, s->k, s->v, s->attn, s->y, s->gate_up,
        s->act, s->rows, s->logits, s->split_q
    };
    size_t         i;

    for (i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        free_owned(m, all[i]);
    }
    memset(s, 0, sizeof(*s));
    m->max_tokens = 0;
    m->max_seqs = 0;
}


void
pl_model_free(pl_model_t *m)
{
    if (m == NULL) {
        return;
    }
    free_kv(m);
    free_scratch(m);
    while (m->n_owned > 0) {
        free_owned(m, m->owned[0].p);
    }
    free(m->owned);
    free(m->layers);
    pl_st_close(m->st);
    free(m);
}


const pl_model_config_t *
pl_model_config(const pl_model_t *m)
{
    return &m->cfg;
}


/*
 * The fused QKV output [T][(nh + 2 nkv) hd] seen as rows of head_dim: token
 * t's query head h is row t (nh + 2 nkv) + h, its KV head j's K row is
 * t (nh + 2 nkv) + nh + j and its V row t (nh + 2 nkv) + nh + nkv + j.
 * Gathering those rows splits q, k and v into contiguous tensors.
 */
static int
split_indices(pl_model_t *m, int max_tokens, char *err, size_t errlen)
{
    int       nh = m->cfg.num_heads, nkv = m->cfg.num_kv_heads;
    int       stride = nh + 2 * nkv;
    size_t    n = (size_t) max_tokens * stride;
    int32_t  *host = malloc(n * sizeof(int32_t));
    int32_t  *q = host, *k = host + (size_t) max_tokens * nh;
    int32_t  *v = k + (size_t) max_tokens * nkv;
    int       t, j;

    if (host == NULL) {
        return model_fail(err, errlen, "out of memory");
    }
    for (t = 0; t < max_tokens; t++) {
        for (j = 0; j < nh; j++) {
            q[t * nh + j] = t * stride + j;
        }
        for (j = 0; j < nkv; j++) {
            k[t * nkv + j] = t * stride + nh + j;
            v[t * nkv + j] = t * stride + nh + nkv + j;
        }
    }
    m->s.split_q = model_alloc(m, n * sizeof(int32_t), "split indices", err,
                               errlen);
    if (m->s.split_q != NULL) {
        m->be->upload(m->be, m->s.split_q, host, n * sizeof(int32_t));
        m->be->sync(m->be);
        m->s.split_k = m->s.split_q + (size_t) max_tokens * nh;
        m->s.split_v = m->s.split_k + (size_t) max_tokens * nkv;
    }
    free(host);
    return m->s.split_q != NULL ? 0 : -1;
}


int
pl_model_prepare(pl_model_t *m, int max_tokens, int max_seqs, char *err,
    size_t errlen)
{
    const pl_model_config_t  *c = &m->cfg;
    size_t                    a = pl_dtype_size(m->be->act_dtype);
    size_t                    T = (size_t) max_tokens, S = (size_t) max_seqs;
    size_t                    qd = (size_t) c->num_heads * c->head_dim;
    size_t                    kvd = (size_t) c->num_kv_heads * c->head_dim;
    size_t                    hid = c->hidden_size;
    size_t                    inter = c->intermediate_size;
    pl_scratch_t             *s = &m->s;

    free_scratch(m);
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
        || (s->k = model_alloc(m, T * kvd * a, "activations", err, errlen))
           == NULL
        || (s->v = model_alloc(m, T * kvd * a, "activations", err, errlen))
           == NULL
        || (s->attn = model_alloc(m, T * qd * a, "activations", err, errlen))
           == NULL
        || (s->gate_up = model_alloc(m, T * 2 * inter * a, "activations",
                                     err, errlen)) == NULL
        || (s->act = model_alloc(m, T * inter * a, "activations", err,
                                 errlen)) == NULL
        || (s->rows = model_alloc(m, S * hid * a, "activations", err,
                                  errlen)) == NULL
        || (s->logits = model_alloc(m, S * c->vocab_size * a, "logits", err,
                                    errlen)) == NULL
        || split_indices(m, max_tokens, err, errlen) != 0)
    {
        free_scratch(m);
        return -1;
    }
    m->max_tokens = max_tokens;
    m->max_seqs = max_seqs;
    return 0;
}


size_t
pl_model_kv_block_bytes(const pl_model_t *m, int block_size)
{
    return 2 * (size_t) m->cfg.num_layers * (size_t) block_size
           * (size_t) m->cfg.num_kv_heads * (size_t) m->cfg.head_dim
           * pl_dtype_size(m->be->act_dtype);
}


int
pl_model_kv_alloc(pl_model_t *m, int num_blocks, int block_size, char *err,
    size_t errlen)
{
    size_t  bytes;
    int     l;

    free_kv(m);
    if (num_blocks < 1 || block_size < 1
        || (int64_t) num_blocks * block_size > INT32_MAX)
    {
        return model_fail(err, errlen, "model: cannot allocate a KV cache of "
                          "%d blocks of %d tokens", num_blocks, block_size);
    }
    bytes = pl_model_kv_block_bytes(m, block_size) / 2
            / (size_t) m->cfg.num_layers * (size_t) num_blocks;
    m->k_cache = calloc(m->cfg.num_layers, sizeof(void *));
    m->v_cache = calloc(m->cfg.num_layers, sizeof(void *));
    if (m->k_cache == NULL || m->v_cache == NULL) {
        free_kv(m);
        return model_fail(err, errlen, "out of memory");
    }
    for (l = 0; l < m->cfg.num_layers; l++) {
        m->k_cache[l] = model_alloc(m, bytes, "the KV cache", err, errlen);
        m->v_cache[l] = m->k_cache[l] == NULL ? NULL
                        : model_alloc(m, bytes, "the KV cache", err, errlen);
        if (m->v_cache[l] == NULL) {
            free_kv(m);
            return -1;
        }
    }
    m->num_blocks = num_blocks;
    m->block_size = block_size;
    return 0;
}


/* sequence s's query rows and context against the cache and block table */
static int
check_seq(const pl_model_t *m, const pl_batch_t *b, int s, char *err,
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
check_token(const pl_model_t *m, const pl_batch_t *b, int s, int i,
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
check_batch(const pl_model_t *m, const pl_batch_t *b, char *err,
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


static void
forward_layer(pl_model_t *m, int l, const pl_batch_t *b)
{
    pl_backend_t             *be = m->be;
    const pl_model_config_t  *c = &m->cfg;
    const pl_layer_t         *L = &m->layers[l];
    pl_scratch_t             *s = &m->s;
    int                       T = b->num_tokens, hd = c->head_dim;
    int                       nh = c->num_heads, nkv = c->num_kv_heads;

    if (l == 0) {
        be->rmsnorm(be, s->h, s->x, &L->input_norm, T, c->hidden_size,
                    c->rms_norm_eps);
    } else {
        be->add_rmsnorm(be, s->h, s->x, s->y, &L->input_norm, T,
                        c->hidden_size, c->rms_norm_eps);
    }
    be->matmul(be, s->qkv, s->h, &L->qkv, NULL, T);
    be->gather_rows(be, s->q, s->qkv, s->split_q, T * nh, hd);
    be->gather_rows(be, s->k, s->qkv, s->split_k, T * nkv, hd);
    be->gather_rows(be, s->v, s->qkv, s->split_v, T * nkv, hd);
    be->rope(be, s->q, s->k, b->positions, m->inv_freq, T, nh, nkv, hd);
    be->kv_write(be, m->k_cache[l], m->v_cache[l], s->k, s->v,
                 b->slot_mapping, T, nkv, hd);
    be->attention(be, s->attn, s->q, m->k_cache[l], m->v_cache[l], b, nh,
                  nkv, hd, m->block_size, 1.0f / sqrtf((float) hd));
    be->matmul(be, s->y, s->attn, &L->o, NULL, T);

    be->add_rmsnorm(be, s->h, s->x, s->y, &L->post_norm, T, c->hidden_size,
                    c->rms_norm_eps);
    be->matmul(be, s->gate_up, s->h, &L->gate_up, NULL, T);
    be->silu_mul(be, s->act, s->gate_up, T, c->intermediate_size);
    be->matmul(be, s->y, s->act, &L->down, NULL, T);
}


int
pl_model_forward(pl_model_t *m, const pl_batch_t *batch, float *logits,
    char *err, size_t errlen)
{
    pl_backend_t             *be = m->be;
    const pl_model_config_t  *c = &m->cfg;
    const pl_batch_t         *b;
    int                       l;

    if (check_batch(m, batch, err, errlen) != 0) {
        return -1;
    }
    b = be->batch_upload(be, batch);
    if (b == NULL) {
        return model_fail(err, errlen, "the %s backend cannot take the "
                          "batch", be->name);
    }
    be->embedding(be, m->s.x, &m->embed, b->token_ids, b->num_tokens);
    for (l = 0; l < c->num_layers; l++) {
        forward_layer(m, l, b);
    }
    be->add_rmsnorm(be, m->s.h, m->s.x, m->s.y, &m->norm, b->num_tokens,
                    c->hidden_size, c->rms_norm_eps);
    be->gather_rows(be, m->s.rows, m->s.h, b->logits_rows, b->num_seqs,
                    c->hidden_size);
    be->matmul(be, m->s.logits, m->s.rows, &m->lm_head, NULL, b->num_seqs);
    be->download_f32(be, logits, m->s.logits,
                     (size_t) b->num_seqs * c->vocab_size);
    be->sync(be);
    return 0;
}
