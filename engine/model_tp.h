/*
 * model_tp: the ranks of a tensor-parallel model (see pl_model.h) and the
 * threads that drive them.  Each rank is a shard (model_shard.h) loaded on
 * a backend of its own and joined to the others by a communicator; this
 * file gives each rank a thread and fans every call of the whole model
 * out to the ranks.  model.c puts pl_model.h in front of it.
 */

#ifndef PL_MODEL_TP_H
#define PL_MODEL_TP_H

#include <stddef.h>

#include "model_shard.h"

typedef struct pl_tp_s  pl_tp_t;

/* world ranks of the model in dir, rank 0 on be; NULL with err. */
pl_tp_t *pl_tp_load(const char *dir, pl_backend_t *be, int world, char *err,
    size_t errlen);

void pl_tp_free(pl_tp_t *tp);

/* rank 0's shard: what every rank's shard knows of the whole model */
pl_shard_t *pl_tp_rank0(pl_tp_t *tp);

int pl_tp_prepare(pl_tp_t *tp, int max_tokens, int max_seqs, char *err,
    size_t errlen);
int pl_tp_kv_alloc(pl_tp_t *tp, int num_blocks, int block_size, char *err,
    size_t errlen);
int pl_tp_forward(pl_tp_t *tp, const pl_batch_t *batch, float *logits,
    char *err, size_t errlen);
int pl_tp_kv_copy_blocks(pl_tp_t *tp, const int32_t *src,
    const int32_t *dst, int n);

/* Swap on every rank; rank r's share of host block b sits at
   (b * world + r) * (per-rank block bytes) in host_pool. */
int pl_tp_kv_swap(pl_tp_t *tp, void *host_pool, const int32_t *from,
    const int32_t *to, int n, int direction);

/* pl_shard_profile() on every rank (the temporary cache allocated);
   prof is rank 0's. */
int pl_tp_profile(pl_tp_t *tp, int max_context, pl_model_profile_t *prof,
    char *err, size_t errlen);

int pl_tp_world(const pl_tp_t *tp);

#endif /* PL_MODEL_TP_H */
