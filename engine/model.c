/*
 * model: the Llama family (Llama 2/3, Mistral without sliding window,
 * Qwen2 with its q/k/v biases) and OPT, on any backend, loaded from a
 * Hugging Face folder.
 *
 * Loading checks every tensor of the checkpoint (one file or shards, see
 * checkpoint.c) against config.json: presence, shape, and the one dtype
 * config.json names.  For speed the q/k/v projections are fused into one
 * QKV weight (their biases likewise) and Llama's gate/up into one gate_up
 * weight, so each layer runs four matmuls.  The fused copies are made on
 * the host; a backend that copies weights into its own memory (its pointer
 * differs from ours after weight_load) lets us drop the host copy, and the
 * model frees that backend memory at the end.
 *
 * One forward pass, for all the batch's tokens at once:
 *
 *   Llama:  x = embed(tokens)
 *           per layer:  h = rmsnorm(x)            (fused with x += y after 0)
 *                       y = attention(h)          (RoPE on q and k)
 *                       x += y; h = rmsnorm(x)
 *                       y = (silu(h . Wgate) * (h . Wup)) . Wdown
 *           x += y; h = rmsnorm(x)
 *   OPT:    x = embed(tokens) + embed_positions(positions + 2)
 *           pre-LN layer:   x += attention(LN(x)); x += fc2(relu(fc1(LN(x))))
 *           post-LN layer:  x = LN(x + attention(x)); x = LN(x + fc2(...))
 *           h = LN(x) when the decoder has a final layer norm, else x
 *   then:   logits = h[logits_rows] . Wlm_head
 *
 * where attention(h) = split h . Wqkv + b into q, k, v (RoPE on q and k for
 * Llama) with k and v stored in the cache, paged attention over the cache,
 * then . Wo + b.  The batch comes from the engine's runner
 * but is checked in full before any kernel sees it: a bad index gives an
 * error, never a stray access.
 *
 * Tensor parallelism (model_tp.c runs the ranks): a rank's shard loads
 * only its slices, so the forward pass above runs unchanged on smaller
 * tensors.  Its query heads h (and KV heads) are rows rank * heads/world
 * .. of q, k and v (and their biases), its intermediate rows a contiguous
 * range of gate, up and fc1; Wo, down and fc2 keep the matching columns,
 * their outputs are partial sums all-reduced over the ranks, and their
 * biases live on rank 0 only so they are added once.  The vocabulary is
 * split into equal slices padded with zero rows: the embedding looks up
 * token ids made local (an id outside the slice reads a zero row) and
 * all-reduces, the lm_head computes the slice's logits and rank 0
 * gathers every slice.  Norms, RoPE and OPT's positions are replicated.
 */

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "model_config.h"
#include "model_tp.h"
#include "pl_model.h"

/* OPT's learned positions start at row 2 of embed_positions */
#define PL_OPT_POS_OFFSET  2

/* decode graphs: the widest batch recorded, the shortest context bucket,
   and the temporary cache of the profiling run */
#define PL_DECODE_MAX_SEQS  256
#define PL_DECODE_MIN_CTX   256
#define PL_PROFILE_BLOCKS   4

/* a weight and its bias (bias.data NULL when the layer has none) */
typedef struct {
    pl_weight_t  w;
    pl_weight_t  b;
} pl_linear_t;

typedef struct {
    pl_linear_t  attn_norm;     /* input_layernorm / self_attn_layer_norm */
    pl_linear_t  mlp_norm;      /* post_attention_layernorm /
                                   final_layer_norm */
    pl_linear_t  qkv;           /* [(nh + 2 nkv) hd][hidden] */
    pl_linear_t  o;             /* [hidden][nh hd] */
    pl_linear_t  up;            /* Llama gate_up [2 inter][hidden],
                                   OPT fc1 [inter][hidden] */
    pl_linear_t  down;          /* [hidden][inter] */
} pl_layer_t;

/* activation scratch, all in backend memory, sized for max_tokens rows */
typedef struct {
    void     *x;                /* residual stream [T][hidden] */
    void     *h;                /* normed [T][hidden] */
    void     *qkv;              /* [T][(nh + 2 nkv) hd] */
    void     *q;                /* [T][nh hd] */
    void     *attn;             /* [T][nh hd] */
    void     *y;                /* block output [T][hidden] */
    void     *up;               /* [T][2 inter] (Llama) or [T][inter] */
    void     *act;              /* [T][inter] */
    void     *rows;             /* [S][hidden] */
    void     *logits;           /* [S][vocab] */
    int32_t  *emb_ids;          /* world > 1: [T] rows of the vocabulary
                                   slice */
    int32_t  *emb_host;         /* their host copy (malloc) */
    void     *gathered;         /* world > 1: [world][S][vocab slice] */
    float    *gathered_host;    /* rank 0: its host copy (malloc) */
} pl_scratch_t;

/* decode iterations padded to recorded shapes (pl_model.h) */
typedef struct {
    pl_decode_mode_t    mode;
    int                 ready;          /* 1: arrays (and set) made,
                                           -1: cannot pad, 0: not yet */
    pl_graphs_t        *set;            /* the backend's recordings */
    int                 max_seqs;       /* padded batches hold at most */
    int                 max_blocks;     /*   these */
    int32_t            *arrays;         /* the padded batch's arrays */
    pl_batch_t          batch;          /* the padded batch (host) */
    long                recorded;
    long                replayed;
} pl_decode_t;

/* memory the model frees at the end: backend memory or host malloc */
typedef struct {
    void        *p;
    int          backend;
} pl_owned_t;

/* this rank's share of the model: everything when world is 1 */
typedef struct {
    int                 rank;
    int                 world;
    pl_comm_t          *comm;           /* NULL when world is 1 */
    int                 n_heads;
    int                 n_kv_heads;
    int                 inter_first;    /* intermediate rows [first, */
    int                 inter;          /*   first + inter) */
    int                 vocab_first;    /* vocabulary rows [first, */
    int                 vocab_real;     /*   first + real), padded to */
    int                 vocab;          /*   vocab rows */
    int                 comm_failed;
} pl_shard_t;

struct pl_model_s {
    pl_model_config_t   cfg;
    pl_arch_t           arch;
    pl_backend_t       *be;
    pl_tp_t            *tp;             /* world > 1: the ranks; this
                                           model then only holds cfg */
    pl_shard_t          sh;
    pl_checkpoint_t    *ckpt;
    char                prefix[32];     /* OPT: "model.decoder." or
                                           "decoder." */

    pl_weight_t         embed;
    pl_weight_t         pos_embed;      /* OPT */
    pl_weight_t         pos_rows;       /* OPT: pos_embed from row 2 on,
                                           indexed by position */
    pl_linear_t         norm;           /* final norm; OPT: may be absent */
    pl_weight_t         lm_head;
    pl_layer_t         *layers;
    float              *inv_freq;       /* Llama: backend memory
                                           [head_dim / 2] */

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

    pl_decode_t         dec;
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
 * A bf16 or fp32 checkpoint run in fp16 (--dtype float16) must fit fp16's
 * far smaller range: a weight beyond it would become infinity, so the
 * load stops and names the tensor rather than clamp the model into
 * something else.
 */
static int
f16_range_check(pl_model_t *m, const pl_weight_t *w, const void *host,
    const char *what, char *err, size_t errlen)
{
    int64_t  n;
    float    worst;

    if (m->be->act_dtype != PL_DT_F16 || w->dtype == PL_DT_F16) {
        return 0;
    }
    n = pl_f16_overflows(host, w->dtype, w->rows * w->cols, &worst);
    if (n == 0) {
        return 0;
    }
    return model_fail(err, errlen, "%s: tensor '%s' holds %lld values "
                      "beyond float16's range (the largest %g; float16 "
                      "ends at 65504): run this checkpoint in bfloat16 "
                      "(--dtype bfloat16)", pl_ckpt_path(m->ckpt), what,
                      (long long) n, worst);
}


/*
 * Hand host bytes to the backend.  When the backend keeps our pointer the
 * host copy must live as long as the model (ours, when not NULL, is then
 * ours to free); when it copied, the copy is its memory to free at the end.
 */
static int
model_weight_load(pl_model_t *m, pl_weight_t *w, const void *host,
    void *ours, const char *what, char *err, size_t errlen)
{
    if (f16_range_check(m, w, host, what, err, errlen) != 0) {
        free(ours);
        return -1;
    }
    if (m->be->weight_load(m->be, w, host) != 0) {
        free(ours);
        return model_fail(err, errlen, "%s: the %s backend cannot load "
                          "tensor '%s'", pl_ckpt_path(m->ckpt), m->be->name,
                          what);
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


static void
shape_string(char *buf, size_t len, const int64_t *shape, int ndim)
{
    size_t  at = 0;
    int     i;

    buf[0] = '\0';
    for (i = 0; i < ndim && at + 24 < len; i++) {
        at += snprintf(buf + at, len - at, "%s%lld", i ? ", " : "",
                       (long long) shape[i]);
    }
}


/* The tensor name with shape [rows][cols], or [cols] when rows is 0, in
   the checkpoint's one dtype; counted for the progress line. */
static const pl_st_tensor_t *
find_tensor(pl_model_t *m, const char *name, int64_t rows, int64_t cols,
    char *err, size_t errlen)
{
    const char            *file;
    const pl_st_tensor_t  *t = pl_ckpt_find(m->ckpt, name, &file);
    int64_t                want[2] = { rows ? rows : cols, cols };
    int                    ndim = rows ? 2 : 1;
    char                   got[96], exp[64];

    if (t == NULL) {
        model_fail(err, errlen, "%s: tensor '%s' is missing", file, name);
        return NULL;
    }
    if (t->ndim != ndim || t->shape[0] != want[0]
        || (ndim == 2 && t->shape[1] != want[1]))
    {
        shape_string(got, sizeof(got), t->shape, t->ndim);
        shape_string(exp, sizeof(exp), want, ndim);
        model_fail(err, errlen, "%s: tensor '%s' has shape [%s] but "
                   "config.json implies [%s]", file, name, got, exp);
        return NULL;
    }
    if (!m->arch.dtype_given) {
        m->cfg.dtype = t->dtype;
        m->arch.dtype_given = 1;
    }
    if (t->dtype != m->cfg.dtype) {
        model_fail(err, errlen, "%s: tensor '%s' is %s but the checkpoint "
                   "is %s (config.json's dtype, or its first tensor's)",
                   file, name, pl_dtype_name(t->dtype),
                   pl_dtype_name(m->cfg.dtype));
        return NULL;
    }
    pl_ckpt_loaded(m->ckpt, t);
    return t;
}


/* a matrix [rows][cols], or a vector [cols] when rows is 0 */
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


/* zeroed host memory, 64-byte aligned, for weights made here */
static uint8_t *
host_alloc(size_t bytes)
{
    size_t    rounded = (bytes + 63) / 64 * 64;
    uint8_t  *p = aligned_alloc(64, rounded ? rounded : 64);

    if (p != NULL) {
        memset(p, 0, rounded);
    }
    return p;
}


/* Stack rows [first[i], first[i] + count[i]) of n matrices [rows[i]][cols]
   into one weight; with cols 0, of n vectors [rows[i]] into one vector. */
static int
load_fused(pl_model_t *m, pl_weight_t *w, char names[][128],
    const int64_t *rows, const int64_t *first, const int64_t *count, int n,
    int64_t cols, char *err, size_t errlen)
{
    const pl_st_tensor_t  *t;
    int64_t                total = 0, width = cols ? cols : 1;
    size_t                 esize = pl_dtype_size(m->cfg.dtype), at = 0;
    uint8_t               *host;
    int                    i;

    for (i = 0; i < n; i++) {
        total += count[i];
    }
    host = host_alloc((size_t) (total * width) * esize);
    if (host == NULL) {
        return model_fail(err, errlen, "out of memory fusing '%s'", names[0]);
    }
    for (i = 0; i < n; i++) {
        t = find_tensor(m, names[i], cols ? rows[i] : 0, cols ? cols
                                                              : rows[i],
                        err, errlen);
        if (t == NULL) {
            free(host);
            return -1;
        }
        memcpy(host + at, (const uint8_t *) t->data
                          + (size_t) (first[i] * width) * esize,
               (size_t) (count[i] * width) * esize);
        at += (size_t) (count[i] * width) * esize;
    }
    *w = cols ? (pl_weight_t) { .dtype = m->cfg.dtype, .rows = total,
                                .cols = cols }
              : (pl_weight_t) { .dtype = m->cfg.dtype, .rows = 1,
                                .cols = total };
    return model_weight_load(m, w, host, host, names[0], err, errlen);
}


/* q, k and v of layer l (p: the layer's prefix), weights and maybe biases,
   fused */
static int
load_qkv(pl_model_t *m, pl_layer_t *L, const char *p, int bias, char *err,
    size_t errlen)
{
    const pl_model_config_t  *c = &m->cfg;
    int64_t                   qd = (int64_t) c->num_heads * c->head_dim;
    int64_t                   kvd = (int64_t) c->num_kv_heads * c->head_dim;
    int64_t                   qn = (int64_t) m->sh.n_heads * c->head_dim;
    int64_t                   kvn = (int64_t) m->sh.n_kv_heads * c->head_dim;
    int64_t                   rows[3] = { qd, kvd, kvd };
    int64_t                   first[3] = { m->sh.rank * qn, m->sh.rank * kvn,
                                           m->sh.rank * kvn };
    int64_t                   count[3] = { qn, kvn, kvn };
    static const char         qkv[] = "qkv";
    char                      n[3][128];
    int                       i;

    for (i = 0; i < 3; i++) {
        snprintf(n[i], sizeof(n[i]), "%sself_attn.%c_proj.weight", p,
                 qkv[i]);
    }
    if (load_fused(m, &L->qkv.w, n, rows, first, count, 3, c->hidden_size,
                   err, errlen) != 0)
    {
        return -1;
    }
    if (!bias) {
        return 0;
    }
    for (i = 0; i < 3; i++) {
        snprintf(n[i], sizeof(n[i]), "%sself_attn.%c_proj.bias", p, qkv[i]);
    }
    return load_fused(m, &L->qkv.b, n, rows, first, count, 3, 0, err,
                      errlen);
}


/* "<p><name>.weight" [rows][cols] (or [cols]), and its bias [rows] (or
   [cols]) when bias is set */
static int
load_linear(pl_model_t *m, pl_linear_t *lin, const char *p, const char *name,
    int64_t rows, int64_t cols, int bias, char *err, size_t errlen)
{
    char  n[160];

    snprintf(n, sizeof(n), "%s%s.weight", p, name);
    if (load_weight(m, &lin->w, n, rows, cols, err, errlen) != 0) {
        return -1;
    }
    if (!bias) {
        return 0;
    }
    snprintf(n, sizeof(n), "%s%s.bias", p, name);
    return load_weight(m, &lin->b, n, 0, rows ? rows : cols, err, errlen);
}


/* Rows [first, first + n) of the matrix name [rows][cols] (of the vector
   [rows] when cols is 0), then pad zero rows.  A slice without padding
   is used in place. */
static int
load_rows(pl_model_t *m, pl_weight_t *w, const char *name, int64_t rows,
    int64_t cols, int64_t first, int64_t n, int64_t pad, char *err,
    size_t errlen)
{
    const pl_st_tensor_t  *t;
    size_t                 row_bytes;
    uint8_t               *host;

    if (first == 0 && n == rows && pad == 0) {
        return load_weight(m, w, name, cols ? rows : 0, cols ? cols : rows,
                           err, errlen);
    }
    t = find_tensor(m, name, cols ? rows : 0, cols ? cols : rows, err,
                    errlen);
    if (t == NULL) {
        return -1;
    }
    row_bytes = (size_t) (cols ? cols : 1) * pl_dtype_size(t->dtype);
    *w = cols ? (pl_weight_t) { .dtype = t->dtype, .rows = n + pad,
                                .cols = cols }
              : (pl_weight_t) { .dtype = t->dtype, .rows = 1,
                                .cols = n + pad };
    if (pad == 0) {
        return model_weight_load(m, w, (const uint8_t *) t->data
                                       + (size_t) first * row_bytes,
                                 NULL, name, err, errlen);
    }
    host = host_alloc((size_t) (n + pad) * row_bytes);
    if (host == NULL) {
        return model_fail(err, errlen, "out of memory slicing '%s'", name);
    }
    memcpy(host, (const uint8_t *) t->data + (size_t) first * row_bytes,
           (size_t) n * row_bytes);
    return model_weight_load(m, w, host, host, name, err, errlen);
}


/* Columns [first, first + n) of the matrix name [rows][cols] */
static int
load_cols(pl_model_t *m, pl_weight_t *w, const char *name, int64_t rows,
    int64_t cols, int64_t first, int64_t n, char *err, size_t errlen)
{
    const pl_st_tensor_t  *t;
    size_t                 esize;
    uint8_t               *host;
    int64_t                r;

    if (first == 0 && n == cols) {
        return load_weight(m, w, name, rows, cols, err, errlen);
    }
    t = find_tensor(m, name, rows, cols, err, errlen);
    if (t == NULL) {
        return -1;
    }
    esize = pl_dtype_size(t->dtype);
    host = host_alloc((size_t) (rows * n) * esize);
    if (host == NULL) {
        return model_fail(err, errlen, "out of memory slicing '%s'", name);
    }
    for (r = 0; r < rows; r++) {
        memcpy(host + (size_t) (r * n) * esize, (const uint8_t *) t->data
                                                + (size_t) (r * cols + first)
                                                  * esize,
               (size_t) n * esize);
    }
    *w = (pl_weight_t) { .dtype = t->dtype, .rows = rows, .cols = n };
    return model_weight_load(m, w, host, host, name, err, errlen);
}


/* Column-parallel "<p><name>" [rows][cols]: output rows [first, first +
   n) of the weight and of its bias when bias is set */
static int
load_col_parallel(pl_model_t *m, pl_linear_t *lin, const char *p,
    const char *name, int64_t rows, int64_t cols, int64_t first, int64_t n,
    int bias, char *err, size_t errlen)
{
    char  nm[160];

    snprintf(nm, sizeof(nm), "%s%s.weight", p, name);
    if (load_rows(m, &lin->w, nm, rows, cols, first, n, 0, err, errlen)
        != 0)
    {
        return -1;
    }
    if (!bias) {
        return 0;
    }
    snprintf(nm, sizeof(nm), "%s%s.bias", p, name);
    return load_rows(m, &lin->b, nm, rows, 0, first, n, 0, err, errlen);
}


/* Row-parallel "<p><name>" [rows][cols]: input columns [first, first +
   n) of the weight; its bias (when bias is set) is checked everywhere but
   kept by rank 0 only, so the all-reduce that follows adds it once */
static int
load_row_parallel(pl_model_t *m, pl_linear_t *lin, const char *p,
    const char *name, int64_t rows, int64_t cols, int64_t first, int64_t n,
    int bias, char *err, size_t errlen)
{
    char  nm[160];

    snprintf(nm, sizeof(nm), "%s%s.weight", p, name);
    if (load_cols(m, &lin->w, nm, rows, cols, first, n, err, errlen) != 0) {
        return -1;
    }
    if (!bias) {
        return 0;
    }
    snprintf(nm, sizeof(nm), "%s%s.bias", p, name);
    if (m->sh.rank != 0) {
        return find_tensor(m, nm, 0, rows, err, errlen) != NULL ? 0 : -1;
    }
    return load_weight(m, &lin->b, nm, 0, rows, err, errlen);
}


/* name [vocab][hidden]: this rank's vocabulary slice padded with zero rows
   to the slice size, and with world > 1 extra zero rows more */
static int
load_vocab(pl_model_t *m, pl_weight_t *w, const char *name, int extra,
    char *err, size_t errlen)
{
    const pl_shard_t  *sh = &m->sh;

    return load_rows(m, w, name, m->cfg.vocab_size, m->cfg.hidden_size,
                     sh->vocab_first, sh->vocab_real,
                     sh->vocab - sh->vocab_real + (sh->world > 1 ? extra : 0),
                     err, errlen);
}


static int
load_layer_llama(pl_model_t *m, int l, char *err, size_t errlen)
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
    return load_qkv(m, L, p, m->arch.qkv_bias, err, errlen) != 0
           || load_fused(m, &L->up.w, n, gu_rows, gu_first, gu_count, 2, hid,
                         err, errlen) != 0
           || load_linear(m, &L->attn_norm, p, "input_layernorm", 0, hid, 0,
                          err, errlen) != 0
           || load_linear(m, &L->mlp_norm, p, "post_attention_layernorm", 0,
                          hid, 0, err, errlen) != 0
           || load_row_parallel(m, &L->o, p, "self_attn.o_proj", hid, qd,
                                m->sh.rank * qn, qn, 0, err, errlen) != 0
           || load_row_parallel(m, &L->down, p, "mlp.down_proj", hid, inter,
                                m->sh.inter_first, m->sh.inter, 0, err,
                                errlen) != 0 ? -1 : 0;
}


static int
load_layer_opt(pl_model_t *m, int l, char *err, size_t errlen)
{
    const pl_model_config_t  *c = &m->cfg;
    pl_layer_t               *L = &m->layers[l];
    int64_t                   hid = c->hidden_size;
    int64_t                   inter = c->intermediate_size;
    int64_t                   qn = (int64_t) m->sh.n_heads * c->head_dim;
    char                      p[64];

    snprintf(p, sizeof(p), "%slayers.%d.", m->prefix, l);
    return load_qkv(m, L, p, 1, err, errlen) != 0
           || load_row_parallel(m, &L->o, p, "self_attn.out_proj", hid, hid,
                                m->sh.rank * qn, qn, 1, err, errlen) != 0
           || load_linear(m, &L->attn_norm, p, "self_attn_layer_norm", 0,
                          hid, 1, err, errlen) != 0
           || load_linear(m, &L->mlp_norm, p, "final_layer_norm", 0, hid, 1,
                          err, errlen) != 0
           || load_col_parallel(m, &L->up, p, "fc1", inter, hid,
                                m->sh.inter_first, m->sh.inter, 1, err,
                                errlen) != 0
           || load_row_parallel(m, &L->down, p, "fc2", hid, inter,
                                m->sh.inter_first, m->sh.inter, 1, err,
                                errlen) != 0 ? -1 : 0;
}


/* embeddings and final norm: Llama's "model.", OPT's decoder prefix */
static int
load_outer(pl_model_t *m, char *err, size_t errlen)
{
    const pl_model_config_t  *c = &m->cfg;
    char                      n[96];

    if (m->arch.family == PL_FAMILY_LLAMA) {
        snprintf(n, sizeof(n), "model.embed_tokens.weight");
        return load_vocab(m, &m->embed, n, 1, err, errlen) != 0
               || load_linear(m, &m->norm, "model.", "norm", 0,
                              c->hidden_size, 0, err, errlen) != 0 ? -1 : 0;
    }
    snprintf(m->prefix, sizeof(m->prefix), "%s",
             pl_ckpt_find(m->ckpt, "decoder.embed_tokens.weight", NULL)
             != NULL ? "decoder." : "model.decoder.");
    snprintf(n, sizeof(n), "%sembed_tokens.weight", m->prefix);
    if (load_vocab(m, &m->embed, n, 1, err, errlen) != 0) {
        return -1;
    }
    snprintf(n, sizeof(n), "%sembed_positions.weight", m->prefix);
    if (load_weight(m, &m->pos_embed, n,
                    c->max_position_embeddings + PL_OPT_POS_OFFSET,
                    c->hidden_size, err, errlen) != 0)
    {
        return -1;
    }
    m->pos_rows = m->pos_embed;
    m->pos_rows.data = (char *) m->pos_embed.data
                       + (size_t) PL_OPT_POS_OFFSET * c->hidden_size
                         * pl_dtype_size(m->pos_embed.dtype);
    m->pos_rows.rows -= PL_OPT_POS_OFFSET;
    return m->arch.final_norm
           ? load_linear(m, &m->norm, m->prefix, "final_layer_norm", 0,
                         c->hidden_size, 1, err, errlen)
           : 0;
}


static int
load_weights(pl_model_t *m, char *err, size_t errlen)
{
    const pl_model_config_t  *c = &m->cfg;
    int                       l;

    if (load_outer(m, err, errlen) != 0) {
        return -1;
    }
    if (c->tie_word_embeddings) {
        m->lm_head = m->embed;
        m->lm_head.rows = m->sh.vocab;
    } else if (load_vocab(m, &m->lm_head, "lm_head.weight", 0, err, errlen)
               != 0)
    {
        return -1;
    }
    m->layers = calloc(c->num_layers, sizeof(pl_layer_t));
    if (m->layers == NULL) {
        return model_fail(err, errlen, "out of memory");
    }
    for (l = 0; l < c->num_layers; l++) {
        if ((m->arch.family == PL_FAMILY_OPT
             ? load_layer_opt(m, l, err, errlen)
             : load_layer_llama(m, l, err, errlen)) != 0)
        {
            return -1;
        }
    }
    pl_ckpt_done(m->ckpt);
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
    pl_rope_inv_freq(&m->cfg, &m->arch.rope, host);
    m->be->upload(m->be, m->inv_freq, host, bytes);
    m->be->sync(m->be);
    free(host);
    return 0;
}


/* OPT runs on backends that have its optional operations */
static int
check_backend(pl_model_t *m, char *err, size_t errlen)
{
    pl_backend_t  *be = m->be;

    if (m->arch.family == PL_FAMILY_OPT
        && (be->layernorm == NULL || be->add == NULL || be->relu == NULL))
    {
        return model_fail(err, errlen, "the %s backend has no layernorm, add "
                          "or relu operation, which %s models need",
                          be->name, m->cfg.arch);
    }
    return 0;
}


/* heads split evenly, every rank with some intermediate rows */
static int
check_world(const pl_model_config_t *c, int world, char *err, size_t errlen)
{
    if (world < 1 || c->num_heads % world != 0
        || c->num_kv_heads % world != 0 || c->intermediate_size < world)
    {
        return model_fail(err, errlen, "tensor parallel size %d does not "
                          "divide the model's %d attention heads and %d KV "
                          "heads (it must divide both)", world, c->num_heads,
                          c->num_kv_heads);
    }
    return 0;
}


/* this rank's share: comm NULL is the whole model */
static int
plan_shard(pl_model_t *m, pl_comm_t *comm, char *err, size_t errlen)
{
    const pl_model_config_t  *c = &m->cfg;
    pl_shard_t               *sh = &m->sh;
    int                       r = comm != NULL ? comm->rank : 0;
    int                       w = comm != NULL ? comm->world : 1;
    int                       slice = (c->vocab_size + w - 1) / w;

    if (check_world(c, w, err, errlen) != 0) {
        return -1;
    }
    sh->rank = r;
    sh->world = w;
    sh->comm = comm;
    sh->n_heads = c->num_heads / w;
    sh->n_kv_heads = c->num_kv_heads / w;
    sh->inter_first = (int) ((int64_t) c->intermediate_size * r / w);
    sh->inter = (int) ((int64_t) c->intermediate_size * (r + 1) / w)
                - sh->inter_first;
    sh->vocab = slice;
    sh->vocab_first = r * slice < c->vocab_size ? r * slice : c->vocab_size;
    sh->vocab_real = c->vocab_size - sh->vocab_first < slice
                     ? c->vocab_size - sh->vocab_first : slice;
    return 0;
}


static pl_model_options_t  default_options = { 1, PL_MODEL_DTYPE_AUTO };


/* --dtype's values; "half" and "float" as vLLM takes them */
static const struct {
    const char        *name;
    pl_model_dtype_t   dtype;
} dtype_names[] = {
    { "auto", PL_MODEL_DTYPE_AUTO },
    { "float16", PL_MODEL_DTYPE_F16 },
    { "half", PL_MODEL_DTYPE_F16 },
    { "bfloat16", PL_MODEL_DTYPE_BF16 },
    { "float32", PL_MODEL_DTYPE_F32 },
    { "float", PL_MODEL_DTYPE_F32 },
};


int
pl_model_dtype_parse(const char *s, pl_model_dtype_t *out)
{
    size_t  i;

    for (i = 0; i < sizeof(dtype_names) / sizeof(dtype_names[0]); i++) {
        if (strcmp(s, dtype_names[i].name) == 0) {
            *out = dtype_names[i].dtype;
            return 0;
        }
    }
    return -1;
}


/* vLLM's rule, but fp32 checkpoints in bf16 (its range, half the bytes) */
pl_dtype_t
pl_model_dtype_wanted(pl_model_dtype_t want, pl_dtype_t checkpoint)
{
    switch (want) {
    case PL_MODEL_DTYPE_F16:
        return PL_DT_F16;
    case PL_MODEL_DTYPE_BF16:
        return PL_DT_BF16;
    case PL_MODEL_DTYPE_F32:
        return PL_DT_F32;
    default:
        return checkpoint == PL_DT_F16 ? PL_DT_F16 : PL_DT_BF16;
    }
}


static const char *
dtype_word(pl_dtype_t dt)
{
    return dt == PL_DT_F16 ? "float16" : dt == PL_DT_BF16 ? "bfloat16"
                                                          : "float32";
}


/* config.json's dtype, else the embedding's (the first tensor a load
   takes, whose dtype every other must have) */
static int
checkpoint_dtype(const char *dir, pl_dtype_t *dt, char *err, size_t errlen)
{
    static const char *const  embed[] = {
        "model.embed_tokens.weight", "model.decoder.embed_tokens.weight",
        "decoder.embed_tokens.weight"
    };
    pl_model_config_t         c;
    pl_arch_t                 a;
    pl_checkpoint_t          *ck;
    const pl_st_tensor_t     *t = NULL;
    size_t                    i;

    if (pl_model_config_read(dir, &c, &a, err, errlen) != 0) {
        return -1;
    }
    *dt = c.dtype;
    if (a.dtype_given) {
        return 0;
    }
    ck = pl_ckpt_open(dir, err, errlen);
    if (ck == NULL) {
        return -1;
    }
    for (i = 0; t == NULL && i < sizeof(embed) / sizeof(embed[0]); i++) {
        t = pl_ckpt_find(ck, embed[i], NULL);
    }
    if (t != NULL) {
        *dt = t->dtype;
    }
    pl_ckpt_close(ck);
    return 0;
}


/*
 * The activation dtype, set on rank 0's backend before anything loads
 * (further ranks take the same, model_tp.c).  A backend without a choice
 * keeps its own for auto and refuses any other.  auto falls back to
 * bf16 where the backend refuses an fp16 checkpoint's fp16 (CUDA takes
 * it: its cuda_fp16_missing is NULL since every kernel does).
 */
static int
choose_act_dtype(const char *dir, pl_backend_t *be, pl_model_dtype_t want,
    char *err, size_t errlen)
{
    pl_dtype_t  ckpt, dt;
    char        why[256];

    if (be->set_act_dtype == NULL) {
        dt = pl_model_dtype_wanted(want, PL_DT_F32);
        if (want == PL_MODEL_DTYPE_AUTO || dt == be->act_dtype) {
            return 0;
        }
        return model_fail(err, errlen, "--dtype %s: the %s backend computes "
                          "in %s only", dtype_word(dt), be->name,
                          dtype_word(be->act_dtype));
    }
    if (checkpoint_dtype(dir, &ckpt, err, errlen) != 0) {
        return -1;
    }
    dt = pl_model_dtype_wanted(want, ckpt);
    if (be->set_act_dtype(be, dt, why, sizeof(why)) == 0) {
        return 0;
    }
    if (want == PL_MODEL_DTYPE_AUTO && dt != PL_DT_BF16
        && be->set_act_dtype(be, PL_DT_BF16, err, errlen) == 0)
    {
        return 0;
    }
    return model_fail(err, errlen, "--dtype %s: %s", dtype_word(dt), why);
}


void
pl_model_set_default_options(const pl_model_options_t *opts)
{
    default_options = *opts;
}


pl_model_t *
pl_model_load(const char *dir, pl_backend_t *be, char *err, size_t errlen)
{
    return pl_model_load_opts(dir, be, &default_options, err, errlen);
}


/* world ranks behind one model that holds only the config */
static pl_model_t *
load_parallel(const char *dir, pl_backend_t *be, int world, char *err,
    size_t errlen)
{
    pl_model_t  *m = calloc(1, sizeof(*m));

    if (m == NULL) {
        model_fail(err, errlen, "out of memory");
        return NULL;
    }
    if (pl_model_config_read(dir, &m->cfg, &m->arch, err, errlen) != 0
        || check_world(&m->cfg, world, err, errlen) != 0
        || (m->tp = pl_tp_load(dir, be, world, err, errlen)) == NULL)
    {
        free(m);
        return NULL;
    }
    m->be = be;
    m->cfg = pl_tp_rank0(m->tp)->cfg;
    m->arch = pl_tp_rank0(m->tp)->arch;
    return m;
}


pl_model_t *
pl_model_load_opts(const char *dir, pl_backend_t *be,
    const pl_model_options_t *opts, char *err, size_t errlen)
{
    int  world = opts != NULL ? opts->tensor_parallel_size : 1;

    if (choose_act_dtype(dir, be, opts != NULL ? opts->dtype
                                               : PL_MODEL_DTYPE_AUTO,
                         err, errlen) != 0)
    {
        return NULL;
    }
    return world == 1 ? pl_model_load_shard(dir, be, NULL, err, errlen)
                      : load_parallel(dir, be, world, err, errlen);
}


pl_model_t *
pl_model_load_shard(const char *dir, pl_backend_t *be, pl_comm_t *comm,
    char *err, size_t errlen)
{
    pl_model_t  *m = calloc(1, sizeof(*m));

    if (m == NULL) {
        model_fail(err, errlen, "out of memory");
        return NULL;
    }
    m->be = be;
    if (pl_model_config_read(dir, &m->cfg, &m->arch, err, errlen) != 0
        || plan_shard(m, comm, err, errlen) != 0
        || check_backend(m, err, errlen) != 0
        || (m->ckpt = pl_ckpt_open(dir, err, errlen)) == NULL
        || load_weights(m, err, errlen) != 0
        || (m->arch.family == PL_FAMILY_LLAMA
            && load_rope(m, err, errlen) != 0))
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


/* The recordings hold pointers to the cache and the scratch: they go
   whenever either does. */
static void
free_decode(pl_model_t *m)
{
    if (m->dec.set != NULL) {
        m->be->graphs_destroy(m->be, m->dec.set);
    }
    free(m->dec.arrays);
    m->dec.set = NULL;
    m->dec.arrays = NULL;
    m->dec.ready = 0;
}


static void
free_kv(pl_model_t *m)
{
    int  l;

    free_decode(m);
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
        s->x, s->h, s->qkv, s->q, s->attn, s->y, s->up, s->act, s->rows,
        s->logits, s->emb_ids, s->gathered
    };
    size_t         i;

    free_decode(m);
    for (i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        free_owned(m, all[i]);
    }
    free(s->emb_host);
    free(s->gathered_host);
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
    pl_tp_free(m->tp);
    free_kv(m);
    free_scratch(m);
    while (m->n_owned > 0) {
        free_owned(m, m->owned[0].p);
    }
    free(m->owned);
    free(m->layers);
    pl_ckpt_close(m->ckpt);
    free(m);
}


const pl_model_config_t *
pl_model_config(const pl_model_t *m)
{
    return &m->cfg;
}


/* world > 1: local token ids for the embedding slice, and the gathered
   logits slices of every rank (on the host for rank 0) */
static int
parallel_scratch(pl_model_t *m, int max_tokens, int max_seqs, char *err,
    size_t errlen)
{
    size_t  all = (size_t) m->sh.world * max_seqs * m->sh.vocab;

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
pl_model_prepare(pl_model_t *m, int max_tokens, int max_seqs, char *err,
    size_t errlen)
{
    const pl_model_config_t  *c = &m->cfg;
    size_t                    a;
    size_t                    T = (size_t) max_tokens, S = (size_t) max_seqs;
    size_t                    qd = (size_t) m->sh.n_heads * c->head_dim;
    size_t                    kvd = (size_t) m->sh.n_kv_heads * c->head_dim;
    size_t                    hid = c->hidden_size;
    size_t                    inter = m->sh.inter;
    size_t                    up = m->arch.family == PL_FAMILY_LLAMA ? 2 : 1;
    pl_scratch_t             *s = &m->s;

    if (m->tp != NULL) {
        return pl_tp_prepare(m->tp, max_tokens, max_seqs, err, errlen);
    }
    a = pl_dtype_size(m->be->act_dtype);
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
    if (m->tp != NULL) {
        return pl_model_kv_block_bytes(pl_tp_rank0(m->tp), block_size);
    }
    return 2 * (size_t) m->cfg.num_layers * (size_t) block_size
           * (size_t) m->sh.n_kv_heads * (size_t) m->cfg.head_dim
           * pl_dtype_size(m->be->act_dtype);
}


int
pl_model_kv_alloc(pl_model_t *m, int num_blocks, int block_size, char *err,
    size_t errlen)
{
    size_t  bytes;
    int     l;

    if (m->tp != NULL) {
        return pl_tp_kv_alloc(m->tp, num_blocks, block_size, err, errlen);
    }
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
    if (m->arch.family == PL_FAMILY_OPT
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


/* ---- decode iterations: padding to recorded shapes ---- */


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
decode_blocks(const pl_model_t *m, int bucket)
{
    return (bucket + m->block_size - 1) / m->block_size;
}


/* The padded batch's arrays and, with graphs, the backend's set, made on
   first use for the prepared sizes and the cache: no context can exceed
   the cache or the model's positions.  1, or 0 when decode batches run
   as they are. */
static int
decode_ready(pl_model_t *m)
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
static int
decode_pad(pl_model_t *m, const pl_batch_t *batch)
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
pl_model_set_decode_mode(pl_model_t *m, pl_decode_mode_t mode)
{
    free_decode(m);
    m->dec.mode = mode;
}


void
pl_model_graph_counts(const pl_model_t *m, long *recorded, long *replayed)
{
    *recorded = m->dec.recorded;
    *replayed = m->dec.replayed;
}


static const pl_weight_t *
bias_of(const pl_linear_t *lin)
{
    return lin->b.data != NULL ? &lin->b : NULL;
}


/* world > 1: buf[n] (activations) := its sum over the ranks */
static void
all_reduce(pl_model_t *m, void *buf, size_t n)
{
    pl_comm_t  *comm = m->sh.comm;

    if (comm != NULL
        && comm->all_reduce_sum(comm, buf, n, m->be->act_dtype) != 0)
    {
        m->sh.comm_failed = 1;
    }
}


/* s->attn = attention of layer l over s->qkv (the QKV projection): its
   split into q and the cache, RoPE (Llama) on the way, in one operation;
   paged attention */
static void
attend(pl_model_t *m, int l, const pl_batch_t *b)
{
    pl_backend_t  *be = m->be;
    pl_scratch_t  *s = &m->s;
    int            hd = m->cfg.head_dim;
    int            nh = m->sh.n_heads, nkv = m->sh.n_kv_heads;

    be->qkv_rope_store(be, s->q, m->k_cache[l], m->v_cache[l], s->qkv,
                       b->positions, b->slot_mapping,
                       m->arch.family == PL_FAMILY_LLAMA ? m->inv_freq : NULL,
                       b->num_tokens, nh, nkv, hd);
    be->attention(be, s->attn, s->q, m->k_cache[l], m->v_cache[l], b, nh,
                  nkv, hd, m->block_size, 1.0f / sqrtf((float) hd));
}


/* out = attention of layer l over in (both [T][hidden]), through the
   paged cache: QKV projection, attend, output projection */
static void
attention_block(pl_model_t *m, int l, const pl_batch_t *b, const void *in,
    void *out)
{
    pl_backend_t      *be = m->be;
    const pl_layer_t  *L = &m->layers[l];
    pl_scratch_t      *s = &m->s;
    int                T = b->num_tokens;

    be->matmul(be, s->qkv, in, &L->qkv.w, bias_of(&L->qkv), T);
    attend(m, l, b);
    be->matmul(be, out, s->attn, &L->o.w, bias_of(&L->o), T);
    all_reduce(m, out, (size_t) T * m->cfg.hidden_size);
}


/* Llama, Mistral, Qwen2: pre-RMSNorm, SwiGLU; x += y is left pending in
   y and fused into the next norm */
static void
llama_layer(pl_model_t *m, int l, const pl_batch_t *b)
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
    attention_block(m, l, b, s->h, s->y);
    be->add_rmsnorm(be, s->h, s->x, s->y, &L->mlp_norm.w, T, hid, eps);
    be->matmul(be, s->up, s->h, &L->up.w, NULL, T);
    be->silu_mul(be, s->act, s->up, T, m->sh.inter);
    be->matmul(be, s->y, s->act, &L->down.w, NULL, T);
    all_reduce(m, s->y, (size_t) T * hid);
}


/* OPT's feed-forward: out = fc2(relu(fc1(in))) */
static void
opt_mlp(pl_model_t *m, const pl_layer_t *L, int T, const void *in, void *out)
{
    pl_backend_t  *be = m->be;

    be->matmul(be, m->s.up, in, &L->up.w, bias_of(&L->up), T);
    be->relu(be, m->s.act, m->s.up, T, m->sh.inter);
    be->matmul(be, out, m->s.act, &L->down.w, bias_of(&L->down), T);
    all_reduce(m, out, (size_t) T * m->cfg.hidden_size);
}


/* OPT with do_layer_norm_before (all but opt-350m): norms inside the
   residual branches, the stream x only ever added to */
static void
opt_layer_pre_ln(pl_model_t *m, int l, const pl_batch_t *b)
{
    pl_backend_t      *be = m->be;
    const pl_layer_t  *L = &m->layers[l];
    pl_scratch_t      *s = &m->s;
    int                T = b->num_tokens, hid = m->cfg.hidden_size;
    float              eps = m->arch.layer_norm_eps;

    be->layernorm(be, s->h, s->x, &L->attn_norm.w, &L->attn_norm.b, T, hid,
                  eps);
    attention_block(m, l, b, s->h, s->y);
    be->add(be, s->x, s->y, T, hid);
    be->layernorm(be, s->h, s->x, &L->mlp_norm.w, &L->mlp_norm.b, T, hid,
                  eps);
    opt_mlp(m, L, T, s->h, s->y);
    be->add(be, s->x, s->y, T, hid);
}


/* OPT without do_layer_norm_before: each branch's sum is normed, the
   stream moving x -> h -> x */
static void
opt_layer_post_ln(pl_model_t *m, int l, const pl_batch_t *b)
{
    pl_backend_t      *be = m->be;
    const pl_layer_t  *L = &m->layers[l];
    pl_scratch_t      *s = &m->s;
    int                T = b->num_tokens, hid = m->cfg.hidden_size;
    float              eps = m->arch.layer_norm_eps;

    attention_block(m, l, b, s->x, s->y);
    be->add(be, s->x, s->y, T, hid);
    be->layernorm(be, s->h, s->x, &L->attn_norm.w, &L->attn_norm.b, T, hid,
                  eps);
    opt_mlp(m, L, T, s->h, s->y);
    be->add(be, s->h, s->y, T, hid);
    be->layernorm(be, s->x, s->h, &L->mlp_norm.w, &L->mlp_norm.b, T, hid,
                  eps);
}


/* world > 1: x = this rank's slice of the embeddings (an id outside it
   reads the zero row after the slice), summed over the ranks */
static void
embed_slice(pl_model_t *m, const pl_batch_t *host)
{
    pl_backend_t      *be = m->be;
    const pl_shard_t  *sh = &m->sh;
    int                T = host->num_tokens, i;
    int32_t            id;

    for (i = 0; i < T; i++) {
        id = host->token_ids[i] - sh->vocab_first;
        m->s.emb_host[i] = id >= 0 && id < sh->vocab_real ? id : sh->vocab;
    }
    be->upload(be, m->s.emb_ids, m->s.emb_host, (size_t) T * sizeof(int32_t));
    be->embedding(be, m->s.x, &m->embed, m->s.emb_ids, T);
    all_reduce(m, m->s.x, (size_t) T * m->cfg.hidden_size);
}


/* x = token embeddings (+ OPT's learned positions); host is read only
   with tensor parallelism */
static void
embed(pl_model_t *m, const pl_batch_t *host, const pl_batch_t *b)
{
    pl_backend_t  *be = m->be;
    int            T = b->num_tokens;

    if (m->sh.world == 1) {
        be->embedding(be, m->s.x, &m->embed, b->token_ids, T);
    } else {
        embed_slice(m, host);
    }
    if (m->arch.family != PL_FAMILY_OPT) {
        return;
    }
    be->embedding(be, m->s.y, &m->pos_rows, b->positions, T);
    be->add(be, m->s.x, m->s.y, T, m->cfg.hidden_size);
}


/* the final hidden states [T][hidden], normed where the model norms them */
static const void *
final_hidden(pl_model_t *m, const pl_batch_t *b)
{
    pl_backend_t             *be = m->be;
    const pl_model_config_t  *c = &m->cfg;
    int                       T = b->num_tokens;

    if (m->arch.family == PL_FAMILY_LLAMA) {
        be->add_rmsnorm(be, m->s.h, m->s.x, m->s.y, &m->norm.w, T,
                        c->hidden_size, c->rms_norm_eps);
        return m->s.h;
    }
    if (!m->arch.final_norm) {
        return m->s.x;
    }
    be->layernorm(be, m->s.h, m->s.x, &m->norm.w, &m->norm.b, T,
                  c->hidden_size, m->arch.layer_norm_eps);
    return m->s.h;
}


/* world > 1: every rank's logits slice [S][slice] gathered; rank 0
   (logits not NULL) writes rank r's slice of row s at logits[s][r slice
   ..], dropping the padding after the vocabulary */
static void
gather_logits(pl_model_t *m, int S, float *logits)
{
    pl_backend_t      *be = m->be;
    const pl_shard_t  *sh = &m->sh;
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


/* One iteration from the token ids of b (backend memory) to the logits
   of its sequences' rows in m->s.logits; host (the same batch on the
   host) is read only with tensor parallelism. */
static void
run_layers(pl_model_t *m, const pl_batch_t *host, const pl_batch_t *b)
{
    pl_backend_t             *be = m->be;
    const pl_model_config_t  *c = &m->cfg;
    int                       l;

    embed(m, host, b);
    for (l = 0; l < c->num_layers; l++) {
        if (m->arch.family == PL_FAMILY_LLAMA) {
            llama_layer(m, l, b);
        } else if (m->arch.norm_before) {
            opt_layer_pre_ln(m, l, b);
        } else {
            opt_layer_post_ln(m, l, b);
        }
    }
    be->gather_rows(be, m->s.rows, final_hidden(m, b), b->logits_rows,
                    b->num_seqs, c->hidden_size);
    be->matmul(be, m->s.logits, m->s.rows, &m->lm_head, NULL, b->num_seqs);
}


/* what a decode recording runs (one rank: the host batch is not read) */
static void
record_layers(void *arg, const pl_batch_t *b)
{
    run_layers(arg, NULL, b);
}


int
pl_model_forward_logits(pl_model_t *m, const pl_batch_t *batch,
    float *host_logits, pl_logits_t *out, char *err, size_t errlen)
{
    pl_backend_t      *be = m->be;
    const pl_batch_t  *run = batch, *b;
    int                rc;

    if (m->tp != NULL) {
        *out = (pl_logits_t) { host_logits, PL_DT_F32, 1 };
        return pl_tp_forward(m->tp, batch, host_logits, err, errlen);
    }
    if (check_batch(m, batch, err, errlen) != 0) {
        return -1;
    }
    if (decode_pad(m, batch)) {
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
    run_layers(m, run, b);
    if (m->sh.world == 1) {
        *out = (pl_logits_t) { m->s.logits, be->act_dtype, 0 };
    } else {
        /* a rank of a tensor-parallel model: rank 0 gathers to the host */
        gather_logits(m, b->num_seqs, host_logits);
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
pl_model_forward(pl_model_t *m, const pl_batch_t *batch, float *logits,
    char *err, size_t errlen)
{
    pl_logits_t  out;

    if (pl_model_forward_logits(m, batch, logits, &out, err, errlen) != 0) {
        return -1;
    }
    if (!out.on_host) {
        m->be->download_f32(m->be, logits, out.data,
                            (size_t) batch->num_seqs * m->cfg.vocab_size);
    }
    return 0;
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
decode_shapes(const pl_model_t *m, int max_context)
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
profile_graph(pl_model_t *m, pl_model_profile_t *prof, int32_t *a,
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
    run_layers(m, &b, dev);
    be->sync(be);
    if (be->mem_info(be, &before, &total) != 0) {
        return model_fail(err, errlen, "the %s backend cannot tell its "
                          "free memory", be->name);
    }
    if (pl_model_forward_logits(m, &b, logits, &out, err, errlen) != 0) {
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
pl_model_profile(pl_model_t *m, int block_size, int max_context,
    pl_model_profile_t *prof, char *err, size_t errlen)
{
    const pl_model_t  *r0 = m->tp != NULL ? pl_tp_rank0(m->tp) : m;
    int                S = r0->max_seqs, T = r0->max_tokens;
    int                cap = m->cfg.max_position_embeddings;
    int               *len = NULL, s, left, add, W, rc = -1;
    int32_t           *a = NULL;
    float             *logits = NULL;
    pl_batch_t         b;

    memset(prof, 0, sizeof(*prof));
    if (T == 0) {
        return model_fail(err, errlen, "model: prepare() must run before "
                          "the profiling run");
    }
    S = S < T ? S : T;
    if (pl_model_kv_alloc(m, PL_PROFILE_BLOCKS, block_size, err, errlen)
        != 0)
    {
        return -1;
    }
    prof->kv_bytes = PL_PROFILE_BLOCKS
                     * pl_model_kv_block_bytes(m, block_size);

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
    W = (len[0] + block_size - 1) / block_size;
    a = malloc(batch_ints(T, S, W) * sizeof(int32_t));
    logits = malloc((size_t) S * m->cfg.vocab_size * sizeof(float));
    if (a == NULL || logits == NULL) {
        goto oom;
    }
    profile_batch(&b, a, len, S, W, PL_PROFILE_BLOCKS);
    if (pl_model_forward(m, &b, logits, err, errlen) == 0
        && (m->tp != NULL
            || profile_graph(m, prof, a, logits, max_context, err, errlen)
               == 0))
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


/* ---- KV block moves: copy-on-write and swapping ---- */


/* Bytes of one block of one layer's K (or V) cache. */
static size_t
kv_layer_block_bytes(const pl_model_t *m)
{
    return pl_model_kv_block_bytes(m, m->block_size) / 2
           / (size_t) m->cfg.num_layers;
}


static int
kv_block_ok(const pl_model_t *m, int32_t b)
{
    return b >= 0 && b < m->num_blocks;
}


/* dst = src in backend memory, through bounce when the backend has no
   copy of its own. */
static void
kv_copy(pl_model_t *m, void *dst, const void *src, size_t bytes,
    void *bounce)
{
    if (m->be->copy) {
        m->be->copy(m->be, dst, src, bytes);
    } else {
        m->be->download(m->be, bounce, src, bytes);
        m->be->upload(m->be, dst, bounce, bytes);
    }
}


int
pl_model_kv_copy_blocks(pl_model_t *m, const int32_t *src,
    const int32_t *dst, int n)
{
    size_t  lb;
    void   *bounce = NULL;
    int     i, l;

    if (m->tp != NULL) {
        return pl_tp_kv_copy_blocks(m->tp, src, dst, n);
    }
    lb = kv_layer_block_bytes(m);
    for (i = 0; i < n; i++) {
        if (!kv_block_ok(m, src[i]) || !kv_block_ok(m, dst[i])) {
            return -1;
        }
    }
    if (m->be->copy == NULL && n > 0 && (bounce = malloc(lb)) == NULL) {
        return -1;
    }

    for (i = 0; i < n; i++) {
        for (l = 0; l < m->cfg.num_layers; l++) {
            kv_copy(m, (char *) m->k_cache[l] + (size_t) dst[i] * lb,
                    (char *) m->k_cache[l] + (size_t) src[i] * lb, lb, bounce);
            kv_copy(m, (char *) m->v_cache[l] + (size_t) dst[i] * lb,
                    (char *) m->v_cache[l] + (size_t) src[i] * lb, lb, bounce);
        }
    }

    free(bounce);
    return 0;
}


int
pl_model_kv_swap_rank(pl_model_t *m, void *host_pool, int world, int rank,
    const int32_t *from, const int32_t *to, int n, int direction)
{
    size_t   lb, hb;
    int32_t  dev;
    char    *host, *k, *v;
    void   **dst = NULL, **src = NULL;
    int      i, l, j = 0, out = direction == PL_KV_SWAP_OUT;

    lb = kv_layer_block_bytes(m);
    hb = 2 * lb * m->cfg.num_layers;
    for (i = 0; i < n; i++) {
        if (!kv_block_ok(m, out ? from[i] : to[i])) {
            return -1;
        }
    }
    if (n <= 0) {
        return 0;
    }

    /* with the backend's swap, every chunk of the step in one call */
    if (m->be->swap != NULL) {
        dst = malloc((size_t) n * 2 * m->cfg.num_layers * sizeof(void *));
        src = malloc((size_t) n * 2 * m->cfg.num_layers * sizeof(void *));
        if (dst == NULL || src == NULL) {
            free(dst);
            free(src);
            return -1;
        }
    }

    for (i = 0; i < n; i++) {
        dev = out ? from[i] : to[i];
        host = (char *) host_pool
               + ((size_t) (out ? to[i] : from[i]) * world + rank) * hb;
        for (l = 0; l < m->cfg.num_layers; l++) {
            k = (char *) m->k_cache[l] + (size_t) dev * lb;
            v = (char *) m->v_cache[l] + (size_t) dev * lb;
            if (dst != NULL) {
                dst[j] = out ? (void *) (host + 2 * l * lb) : (void *) k;
                src[j++] = out ? (void *) k : (void *) (host + 2 * l * lb);
                dst[j] = out ? (void *) (host + (2 * l + 1) * lb) : (void *) v;
                src[j++] = out ? (void *) v
                               : (void *) (host + (2 * l + 1) * lb);
            } else if (out) {
                m->be->download(m->be, host + 2 * l * lb, k, lb);
                m->be->download(m->be, host + (2 * l + 1) * lb, v, lb);
            } else {
                m->be->upload(m->be, k, host + 2 * l * lb, lb);
                m->be->upload(m->be, v, host + (2 * l + 1) * lb, lb);
            }
        }
    }

    if (dst != NULL) {
        m->be->swap(m->be, dst, (const void *const *) src, j, lb, out);
        free(dst);
        free(src);
    }
    return 0;
}


int
pl_model_kv_swap(pl_model_t *m, void *host_pool, const int32_t *from,
    const int32_t *to, int n, int direction)
{
    if (m->tp != NULL) {
        return pl_tp_kv_swap(m->tp, host_pool, from, to, n, direction);
    }
    return pl_model_kv_swap_rank(m, host_pool, 1, 0, from, to, n, direction);
}


int
pl_model_tp_size(const pl_model_t *m)
{
    return m->tp != NULL ? pl_tp_world(m->tp) : 1;
}
