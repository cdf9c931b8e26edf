/*
 * model_shard: one rank's model, the layer under pl_model.h.  A shard is
 * the whole model when it runs alone (comm NULL), or one rank's slices of
 * a tensor-parallel model joined to the other ranks by a communicator,
 * whose collectives it calls inside its forward pass.  It knows nothing
 * of threads or of the other ranks' shards: model_tp.c drives a group of
 * them, model.c puts pl_model.h in front of one shard or of such a group.
 * The functions do what their pl_model_* namesakes say (pl_model.h) for
 * this shard alone.
 */

#ifndef PL_MODEL_SHARD_H
#define PL_MODEL_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "pl_comm.h"
#include "pl_model.h"

typedef struct pl_shard_s  pl_shard_t;

/* The model in dir on be; with comm, rank comm->rank's slices of it.
   The backend's activation dtype is set before.  NULL with err. */
pl_shard_t *pl_shard_load(const char *dir, pl_backend_t *be,
    pl_comm_t *comm, char *err, size_t errlen);
void pl_shard_free(pl_shard_t *m);

/* The model's size splits over world ranks; 0, or -1 with err. */
int pl_shard_check_world(const pl_model_config_t *c, int world, char *err,
    size_t errlen);

const pl_model_config_t *pl_shard_config(const pl_shard_t *m);
pl_backend_t *pl_shard_backend(const pl_shard_t *m);

int pl_shard_prepare(pl_shard_t *m, int max_tokens, int max_seqs,
    char *err, size_t errlen);
size_t pl_shard_kv_block_bytes(const pl_shard_t *m, int block_size);
/* Backend bytes this rank holds: its weights, and what it allocated
   besides (activations, workspaces, KV cache once allocated). */
void pl_shard_memory(const pl_shard_t *m, size_t *weights, size_t *other);
int pl_shard_kv_alloc(pl_shard_t *m, int num_blocks, int block_size,
    char *err, size_t errlen);

/* With tensor parallelism every rank runs every batch; rank 0 gathers the
   logits into host_logits (logits), the others pass NULL. */
int pl_shard_forward_logits(pl_shard_t *m, const pl_batch_t *batch,
    float *host_logits, pl_logits_t *out, char *err, size_t errlen);
int pl_shard_forward(pl_shard_t *m, const pl_batch_t *batch, float *logits,
    char *err, size_t errlen);

int pl_shard_kv_copy_blocks(pl_shard_t *m, const int32_t *src,
    const int32_t *dst, int n);

/* The swap of pl_model_kv_swap() for this shard: its share of host block
   b sits at (b * world + rank) * (its block bytes) in host_pool. */
int pl_shard_kv_swap(pl_shard_t *m, void *host_pool, int world, int rank,
    const int32_t *from, const int32_t *to, int n, int direction);

void pl_shard_set_decode_mode(pl_shard_t *m, pl_decode_mode_t mode);
void pl_shard_graph_counts(const pl_shard_t *m, long *recorded,
    long *replayed);

/*
 * pl_model_profile() on this shard, once the caller has allocated the
 * temporary cache of PL_PROFILE_BLOCKS blocks (on every rank, each of
 * which then runs this at once: the forward pass meets at the
 * collectives).  The decode recording is made with one rank only.
 */
#define PL_PROFILE_BLOCKS  4

int pl_shard_profile(pl_shard_t *m, int max_context,
    pl_model_profile_t *prof, char *err, size_t errlen);

#endif /* PL_MODEL_SHARD_H */
