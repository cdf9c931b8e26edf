/*
 * model_load: one rank's model (model_shard.h) from a Hugging Face
 * folder, every tensor checked before use.
 *
 * Loading checks every tensor of the checkpoint (one file or shards, see
 * checkpoint.c) against config.json: presence, shape, and the one dtype
 * config.json names (or the first tensor's when it names none).  The
 * family (model_llama.c, model_opt.c) names the tensors and their shapes
 * through the helpers here.  For speed the q/k/v projections are fused
 * into one QKV weight (their biases likewise) and Llama's gate/up into one
 * gate_up weight, so each layer runs four matmuls.  The fused copies are
 * made on the host; a backend that copies weights into its own memory
 * (its pointer differs from ours after weight_load) lets us drop the host
 * copy, and the model frees that backend memory at the end.
 *
 * Tensor parallelism (model_tp.c runs the ranks): a rank's shard loads
 * only its slices, so the forward pass runs unchanged on smaller tensors.
 * Its query heads (and KV heads) are rows rank * heads/world .. of q, k
 * and v (and their biases), its intermediate rows a contiguous range of
 * gate, up and fc1; Wo, down and fc2 keep the matching columns, their
 * outputs are partial sums all-reduced over the ranks, and their biases
 * live on rank 0 only so they are added once.  The vocabulary is split
 * into equal slices padded with zero rows (model_forward.c looks token ids
 * up in the slice and gathers the logits).  Norms, RoPE and OPT's
 * positions are replicated.
 */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "model_internal.h"


int
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
model_own(pl_shard_t *m, void *p, int from_backend)
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


void *
model_alloc(pl_shard_t *m, size_t bytes, const char *what, char *err,
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
    m->alloc_bytes += bytes;
    return p;
}


void
model_free_owned(pl_shard_t *m, void *p)
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


/*
 * A bf16 or fp32 checkpoint run in fp16 (--dtype float16) must fit fp16's
 * far smaller range: a weight beyond it would become infinity, so the
 * load stops and names the tensor rather than clamp the model into
 * something else.
 */
static int
f16_range_check(pl_shard_t *m, const pl_weight_t *w, const void *host,
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
model_weight_load(pl_shard_t *m, pl_weight_t *w, const void *host,
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
    m->weight_bytes += (size_t) w->rows * (size_t) w->cols
                       * pl_dtype_size(w->dtype);
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
find_tensor(pl_shard_t *m, const char *name, int64_t rows, int64_t cols,
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
int
model_load_weight(pl_shard_t *m, pl_weight_t *w, const char *name,
    int64_t rows, int64_t cols, char *err, size_t errlen)
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
int
model_load_fused(pl_shard_t *m, pl_weight_t *w, char names[][128],
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
int
model_load_qkv(pl_shard_t *m, pl_layer_t *L, const char *p, int bias,
    char *err, size_t errlen)
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
    if (model_load_fused(m, &L->qkv.w, n, rows, first, count, 3,
                         c->hidden_size, err, errlen) != 0)
    {
        return -1;
    }
    if (!bias) {
        return 0;
    }
    for (i = 0; i < 3; i++) {
        snprintf(n[i], sizeof(n[i]), "%sself_attn.%c_proj.bias", p, qkv[i]);
    }
    return model_load_fused(m, &L->qkv.b, n, rows, first, count, 3, 0, err,
                            errlen);
}


/* "<p><name>.weight" [rows][cols] (or [cols]), and its bias [rows] (or
   [cols]) when bias is set */
int
model_load_linear(pl_shard_t *m, pl_linear_t *lin, const char *p,
    const char *name, int64_t rows, int64_t cols, int bias, char *err,
    size_t errlen)
{
    char  n[160];

    snprintf(n, sizeof(n), "%s%s.weight", p, name);
    if (model_load_weight(m, &lin->w, n, rows, cols, err, errlen) != 0) {
        return -1;
    }
    if (!bias) {
        return 0;
    }
    snprintf(n, sizeof(n), "%s%s.bias", p, name);
    return model_load_weight(m, &lin->b, n, 0, rows ? rows : cols, err,
                             errlen);
}


/* Rows [first, first + n) of the matrix name [rows][cols] (of the vector
   [rows] when cols is 0), then pad zero rows.  A slice without padding
   is used in place. */
static int
load_rows(pl_shard_t *m, pl_weight_t *w, const char *name, int64_t rows,
    int64_t cols, int64_t first, int64_t n, int64_t pad, char *err,
    size_t errlen)
{
    const pl_st_tensor_t  *t;
    size_t                 row_bytes;
    uint8_t               *host;

    if (first == 0 && n == rows && pad == 0) {
        return model_load_weight(m, w, name, cols ? rows : 0,
                                 cols ? cols : rows, err, errlen);
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
load_cols(pl_shard_t *m, pl_weight_t *w, const char *name, int64_t rows,
    int64_t cols, int64_t first, int64_t n, char *err, size_t errlen)
{
    const pl_st_tensor_t  *t;
    size_t                 esize;
    uint8_t               *host;
    int64_t                r;

    if (first == 0 && n == cols) {
        return model_load_weight(m, w, name, rows, cols, err, errlen);
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
int
model_load_col_parallel(pl_shard_t *m, pl_linear_t *lin, const char *p,
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
int
model_load_row_parallel(pl_shard_t *m, pl_linear_t *lin, const char *p,
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
    return model_load_weight(m, &lin->b, nm, 0, rows, err, errlen);
}


/* name [vocab][hidden]: this rank's vocabulary slice padded with zero rows
   to the slice size, and with world > 1 extra zero rows more */
int
model_load_vocab(pl_shard_t *m, pl_weight_t *w, const char *name, int extra,
    char *err, size_t errlen)
{
    const pl_split_t  *sh = &m->sh;

    return load_rows(m, w, name, m->cfg.vocab_size, m->cfg.hidden_size,
                     sh->vocab_first, sh->vocab_real,
                     sh->vocab - sh->vocab_real + (sh->world > 1 ? extra : 0),
                     err, errlen);
}


/* Rank 0's progress through the layers, at every quarter: a large
   checkpoint takes minutes to read. */
static void
log_progress(const pl_shard_t *m, int done)
{
    int  n = m->cfg.num_layers;

    if (m->sh.rank == 0 && (done * 4 / n != (done - 1) * 4 / n || done == n))
    {
        pl_log(PL_LOG_INFO, "loading weights: %d of %d layers, %.1f MiB",
               done, n, (double) m->weight_bytes / (1024.0 * 1024.0));
    }
}


/* the family's outer weights, the lm_head (the embedding when tied), then
   every layer */
static int
load_weights(pl_shard_t *m, char *err, size_t errlen)
{
    const pl_model_config_t  *c = &m->cfg;
    const pl_family_t        *fam = m->arch.family;
    int                       l;

    if (fam->load_outer(m, err, errlen) != 0) {
        return -1;
    }
    if (c->tie_word_embeddings) {
        m->lm_head = m->embed;
        m->lm_head.rows = m->sh.vocab;
    } else if (model_load_vocab(m, &m->lm_head, "lm_head.weight", 0, err,
                                errlen) != 0)
    {
        return -1;
    }
    m->layers = calloc(c->num_layers, sizeof(pl_layer_t));
    if (m->layers == NULL) {
        return model_fail(err, errlen, "out of memory");
    }
    for (l = 0; l < c->num_layers; l++) {
        if (fam->load_layer(m, l, err, errlen) != 0) {
            return -1;
        }
        log_progress(m, l + 1);
    }
    pl_ckpt_done(m->ckpt);
    return 0;
}


/* heads split evenly, every rank with some intermediate rows */
int
pl_shard_check_world(const pl_model_config_t *c, int world, char *err,
    size_t errlen)
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
plan_split(pl_shard_t *m, pl_comm_t *comm, char *err, size_t errlen)
{
    const pl_model_config_t  *c = &m->cfg;
    pl_split_t               *sh = &m->sh;
    int                       r = comm != NULL ? comm->rank : 0;
    int                       w = comm != NULL ? comm->world : 1;
    int                       slice = (c->vocab_size + w - 1) / w;

    if (pl_shard_check_world(c, w, err, errlen) != 0) {
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


static int
check_backend(const pl_shard_t *m, char *err, size_t errlen)
{
    const pl_family_t  *fam = m->arch.family;

    return fam->check_backend != NULL
           ? fam->check_backend(m, err, errlen) : 0;
}


pl_shard_t *
pl_shard_load(const char *dir, pl_backend_t *be, pl_comm_t *comm, char *err,
    size_t errlen)
{
    pl_shard_t  *m = calloc(1, sizeof(*m));

    if (m == NULL) {
        model_fail(err, errlen, "out of memory");
        return NULL;
    }
    m->be = be;
    if (pl_model_config_read(dir, &m->cfg, &m->arch, err, errlen) != 0
        || plan_split(m, comm, err, errlen) != 0
        || check_backend(m, err, errlen) != 0
        || (m->ckpt = pl_ckpt_open(dir, err, errlen)) == NULL
        || load_weights(m, err, errlen) != 0)
    {
        pl_shard_free(m);
        return NULL;
    }
    return m;
}


void
pl_shard_memory(const pl_shard_t *m, size_t *weights, size_t *other)
{
    *weights = m->weight_bytes;
    *other = m->alloc_bytes;
}


void
pl_shard_free(pl_shard_t *m)
{
    if (m == NULL) {
        return;
    }
    model_free_kv(m);
    model_free_scratch(m);
    while (m->n_owned > 0) {
        model_free_owned(m, m->owned[0].p);
    }
    free(m->owned);
    free(m->layers);
    pl_ckpt_close(m->ckpt);
    free(m);
}


const pl_model_config_t *
pl_shard_config(const pl_shard_t *m)
{
    return &m->cfg;
}


pl_backend_t *
pl_shard_backend(const pl_shard_t *m)
{
    return m->be;
}
