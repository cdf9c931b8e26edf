/*
 * model: pl_model.h in front of the model's one rank (model_shard.h) or,
 * with tensor parallelism, of the group of ranks model_tp.c drives.
 * Every call goes to one or the other; nothing below knows this layer.
 * Before anything loads, the activation dtype is chosen here from
 * --dtype, the checkpoint and what the backend can run.
 *
 * The single-rank model is split by concern around model_internal.h
 * (which lists its files); a family of architectures is one file
 * (model_llama.c, model_opt.c) that fills a table of operations, chosen
 * by model_config.c's registry from config.json.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "model_config.h"
#include "model_shard.h"
#include "model_tp.h"
#include "pl_model.h"

/* one rank, or world ranks behind tp */
struct pl_model_s {
    pl_shard_t  *one;
    pl_tp_t     *tp;
};


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
        snprintf(err, errlen, "--dtype %s: the %s backend computes in %s "
                 "only", dtype_word(dt), be->name, dtype_word(be->act_dtype));
        return -1;
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
    snprintf(err, errlen, "--dtype %s: %s", dtype_word(dt), why);
    return -1;
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


/* world ranks, the split checked on config.json before any thread starts;
   world 1 is the one rank on the caller's thread */
static int
load_ranks(pl_model_t *m, const char *dir, pl_backend_t *be, int world,
    char *err, size_t errlen)
{
    pl_model_config_t  c;
    pl_arch_t          a;

    if (world == 1) {
        m->one = pl_shard_load(dir, be, NULL, err, errlen);
        return m->one != NULL ? 0 : -1;
    }
    if (pl_model_config_read(dir, &c, &a, err, errlen) != 0
        || pl_shard_check_world(&c, world, err, errlen) != 0)
    {
        return -1;
    }
    m->tp = pl_tp_load(dir, be, world, err, errlen);
    return m->tp != NULL ? 0 : -1;
}


pl_model_t *
pl_model_load_opts(const char *dir, pl_backend_t *be,
    const pl_model_options_t *opts, char *err, size_t errlen)
{
    int          world = opts != NULL ? opts->tensor_parallel_size : 1;
    pl_model_t  *m;

    if (choose_act_dtype(dir, be, opts != NULL ? opts->dtype
                                               : PL_MODEL_DTYPE_AUTO,
                         err, errlen) != 0)
    {
        return NULL;
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (load_ranks(m, dir, be, world, err, errlen) != 0) {
        free(m);
        return NULL;
    }
    return m;
}


void
pl_model_free(pl_model_t *m)
{
    if (m == NULL) {
        return;
    }
    pl_tp_free(m->tp);
    pl_shard_free(m->one);
    free(m);
}


/* the one rank, or rank 0: what every rank knows of the whole model */
static pl_shard_t *
rank0(const pl_model_t *m)
{
    return m->tp != NULL ? pl_tp_rank0(m->tp) : m->one;
}


const pl_model_config_t *
pl_model_config(const pl_model_t *m)
{
    return pl_shard_config(rank0(m));
}


int
pl_model_prepare(pl_model_t *m, int max_tokens, int max_seqs, char *err,
    size_t errlen)
{
    return m->tp != NULL
           ? pl_tp_prepare(m->tp, max_tokens, max_seqs, err, errlen)
           : pl_shard_prepare(m->one, max_tokens, max_seqs, err, errlen);
}


void
pl_model_memory(const pl_model_t *m, size_t *weights, size_t *other)
{
    pl_shard_memory(rank0(m), weights, other);
}


size_t
pl_model_kv_block_bytes(const pl_model_t *m, int block_size)
{
    return pl_shard_kv_block_bytes(rank0(m), block_size);
}


int
pl_model_kv_alloc(pl_model_t *m, int num_blocks, int block_size, char *err,
    size_t errlen)
{
    return m->tp != NULL
           ? pl_tp_kv_alloc(m->tp, num_blocks, block_size, err, errlen)
           : pl_shard_kv_alloc(m->one, num_blocks, block_size, err,
                               errlen);
}


int
pl_model_forward_logits(pl_model_t *m, const pl_batch_t *batch,
    float *host_logits, pl_logits_t *out, char *err, size_t errlen)
{
    if (m->tp != NULL) {
        *out = (pl_logits_t) { host_logits, PL_DT_F32, 1 };
        return pl_tp_forward(m->tp, batch, host_logits, err, errlen);
    }
    return pl_shard_forward_logits(m->one, batch, host_logits, out, err,
                                   errlen);
}


int
pl_model_forward(pl_model_t *m, const pl_batch_t *batch, float *logits,
    char *err, size_t errlen)
{
    return m->tp != NULL
           ? pl_tp_forward(m->tp, batch, logits, err, errlen)
           : pl_shard_forward(m->one, batch, logits, err, errlen);
}


int
pl_model_kv_copy_blocks(pl_model_t *m, const int32_t *src,
    const int32_t *dst, int n)
{
    return m->tp != NULL ? pl_tp_kv_copy_blocks(m->tp, src, dst, n)
                         : pl_shard_kv_copy_blocks(m->one, src, dst, n);
}


int
pl_model_kv_swap(pl_model_t *m, void *host_pool, const int32_t *from,
    const int32_t *to, int n, int direction)
{
    return m->tp != NULL
           ? pl_tp_kv_swap(m->tp, host_pool, from, to, n, direction)
           : pl_shard_kv_swap(m->one, host_pool, 1, 0, from, to, n,
                              direction);
}


/* tensor-parallel ranks always run their batches as they come */
void
pl_model_set_decode_mode(pl_model_t *m, pl_decode_mode_t mode)
{
    if (m->one != NULL) {
        pl_shard_set_decode_mode(m->one, mode);
    }
}


void
pl_model_graph_counts(const pl_model_t *m, long *recorded, long *replayed)
{
    *recorded = 0;
    *replayed = 0;
    if (m->one != NULL) {
        pl_shard_graph_counts(m->one, recorded, replayed);
    }
}


int
pl_model_profile(pl_model_t *m, int block_size, int max_context,
    pl_model_profile_t *prof, char *err, size_t errlen)
{
    memset(prof, 0, sizeof(*prof));
    if (pl_model_kv_alloc(m, PL_PROFILE_BLOCKS, block_size, err, errlen)
        != 0)
    {
        return -1;
    }
    return m->tp != NULL
           ? pl_tp_profile(m->tp, max_context, prof, err, errlen)
           : pl_shard_profile(m->one, max_context, prof, err, errlen);
}


int
pl_model_tp_size(const pl_model_t *m)
{
    return m->tp != NULL ? pl_tp_world(m->tp) : 1;
}
