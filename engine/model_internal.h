/*
 * model_internal: what the files of the single-rank model share and
 * nothing outside them sees.  One rank's model (pl_shard_t, model_shard.h)
 * is spread over files by concern:
 *
 *   model_load.c     the checkpoint into weights, every tensor checked;
 *                    the rank's split of a tensor-parallel model
 *   model_forward.c  activation scratch, batch checks, the forward pass
 *                    over the family's operations
 *   model_decode.c   decode batches padded to recorded shapes, the
 *                    profiling run before the KV cache is sized
 *   model_kv.c       the paged KV cache, block copies and swaps
 *   model_llama.c,   the families: one table of operations each
 *   model_opt.c      (pl_family_t below)
 *
 * A family is how one kind of decoder layer is loaded and run.  Adding an
 * architecture whose layers match a family's is one line in
 * model_config.c's registry.  Adding a family is one file that fills a
 * pl_family_t with the operations below (model_llama.c is the shorter
 * example), its extern line at the end of this header, one line per
 * architecture in the registry, and, when its config.json has fields the
 * existing readers do not know, a reader in model_config.c.
 */

#ifndef PL_MODEL_INTERNAL_H
#define PL_MODEL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint.h"
#include "model_config.h"
#include "model_shard.h"

/* decode graphs: the widest batch recorded, the shortest context
   bucket */
#define PL_DECODE_MAX_SEQS  256
#define PL_DECODE_MIN_CTX   256

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
    void     *up;               /* [T][up_rows inter] */
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
} pl_split_t;

/*
 * A family's operations.  The loader calls load_outer, then load_layer
 * for every layer; a forward pass calls embed (x := the input of layer
 * 0), layer for every layer, then final_hidden, whose rows go through
 * lm_head.  Between the calls the residual stream lives in s.x, and a
 * family may leave a pending "x += y" in s.y for its next call to fold.
 */
struct pl_family_s {
    int           up_rows;              /* rows of the up projection per
                                           intermediate row (2: Llama's
                                           fused gate_up) */
    int           learned_positions;    /* positions past
                                           max_position_embeddings have
                                           no embedding: refused */

    /* NULL when the family needs only the backend's required ops */
    int         (*check_backend)(const pl_shard_t *m, char *err,
                                 size_t errlen);
    /* embeddings, final norm, and whatever else sits outside the layers */
    int         (*load_outer)(pl_shard_t *m, char *err, size_t errlen);
    int         (*load_layer)(pl_shard_t *m, int l, char *err,
                              size_t errlen);
    /* host: the batch on the host, b: in backend memory */
    void        (*embed)(pl_shard_t *m, const pl_batch_t *host,
                         const pl_batch_t *b);
    void        (*layer)(pl_shard_t *m, int l, const pl_batch_t *b);
    /* the hidden states [T][hidden] lm_head reads */
    const void *(*final_hidden)(pl_shard_t *m, const pl_batch_t *b);
};

struct pl_shard_s {
    pl_model_config_t   cfg;
    pl_arch_t           arch;           /* arch.family: the operations */
    pl_backend_t       *be;
    pl_split_t          sh;
    pl_checkpoint_t    *ckpt;
    char                prefix[32];     /* OPT: "model.decoder." or
                                           "decoder." */

    pl_weight_t         embed;
    pl_weight_t         pos_rows;       /* OPT: embed_positions from row
                                           2 on, indexed by position */
    pl_linear_t         norm;           /* final norm; OPT: may be absent */
    pl_weight_t         lm_head;
    pl_layer_t         *layers;
    float              *inv_freq;       /* Llama: backend memory
                                           [head_dim / 2] */

    pl_owned_t         *owned;
    int                 n_owned;
    int                 owned_cap;
    size_t              weight_bytes;   /* the weights as the backend
                                           holds them */
    size_t              alloc_bytes;    /* model_alloc(): activations,
                                           workspaces, KV cache */

    int                 max_tokens;
    int                 max_seqs;
    pl_scratch_t        s;

    int                 num_blocks;
    int                 block_size;
    void              **k_cache;        /* [num_layers] */
    void              **v_cache;
    void              **kv_bases;       /* every layer's K then V base, for
                                           the backend's copy_blocks; NULL
                                           when it cannot take this cache */

    pl_decode_t         dec;
};

/* ---- model_load.c ---- */

/* err := the message; -1 */
int model_fail(char *err, size_t errlen, const char *fmt, ...);

/* backend memory freed with the model; NULL (with err) on failure */
void *model_alloc(pl_shard_t *m, size_t bytes, const char *what, char *err,
    size_t errlen);

/* p (from model_alloc or the model's host malloc) freed now */
void model_free_owned(pl_shard_t *m, void *p);

/* The tensor name, checked against config.json's shape: a matrix
   [rows][cols], or a vector [cols] when rows is 0. */
int model_load_weight(pl_shard_t *m, pl_weight_t *w, const char *name,
    int64_t rows, int64_t cols, char *err, size_t errlen);

/* "<p><name>.weight" [rows][cols] (or [cols]) and its bias when bias is
   set: replicated on every rank */
int model_load_linear(pl_shard_t *m, pl_linear_t *lin, const char *p,
    const char *name, int64_t rows, int64_t cols, int bias, char *err,
    size_t errlen);

/* Stack rows [first[i], first[i] + count[i]) of n matrices [rows[i]][cols]
   into one weight; with cols 0, of n vectors [rows[i]] into one vector. */
int model_load_fused(pl_shard_t *m, pl_weight_t *w, char names[][128],
    const int64_t *rows, const int64_t *first, const int64_t *count, int n,
    int64_t cols, char *err, size_t errlen);

/* "<p>self_attn.{q,k,v}_proj" fused into L->qkv (this rank's heads), their
   biases too when bias is set */
int model_load_qkv(pl_shard_t *m, pl_layer_t *L, const char *p, int bias,
    char *err, size_t errlen);

/* Column-parallel "<p><name>" [rows][cols]: output rows [first, first +
   n) of the weight and of its bias when bias is set */
int model_load_col_parallel(pl_shard_t *m, pl_linear_t *lin, const char *p,
    const char *name, int64_t rows, int64_t cols, int64_t first, int64_t n,
    int bias, char *err, size_t errlen);

/* Row-parallel "<p><name>" [rows][cols]: input columns [first, first +
   n); its bias on rank 0 only */
int model_load_row_parallel(pl_shard_t *m, pl_linear_t *lin, const char *p,
    const char *name, int64_t rows, int64_t cols, int64_t first, int64_t n,
    int bias, char *err, size_t errlen);

/* name [vocab][hidden]: this rank's vocabulary slice padded with zero rows
   to the slice size, and with world > 1 extra zero rows more */
int model_load_vocab(pl_shard_t *m, pl_weight_t *w, const char *name,
    int extra, char *err, size_t errlen);

/* ---- model_forward.c ---- */

void model_free_scratch(pl_shard_t *m);

/* the operations the families share */
const pl_weight_t *model_bias(const pl_linear_t *lin);
void model_all_reduce(pl_shard_t *m, void *buf, size_t n);
void model_attention_block(pl_shard_t *m, int l, const pl_batch_t *b,
    const void *in, void *out);
void model_embed_tokens(pl_shard_t *m, const pl_batch_t *host,
    const pl_batch_t *b);

/* One iteration from b's token ids (backend memory) to the logits of its
   rows in s.logits; host (the same batch on the host) is read only with
   tensor parallelism. */
void model_run_layers(pl_shard_t *m, const pl_batch_t *host,
    const pl_batch_t *b);

/* ---- model_decode.c ---- */

void model_free_decode(pl_shard_t *m);

/* 1 with m->dec.batch the padded form of batch, or 0 to run it as it is */
int model_decode_pad(pl_shard_t *m, const pl_batch_t *batch);

/* ---- model_kv.c ---- */

void model_free_kv(pl_shard_t *m);

/* ---- the families (model_llama.c, model_opt.c) ---- */

extern const pl_family_t  pl_family_llama;
extern const pl_family_t  pl_family_opt;

#endif /* PL_MODEL_INTERNAL_H */
