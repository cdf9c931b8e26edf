/*
 * checkpoint: the weights of a Hugging Face folder, from one
 * model.safetensors or from the shards model.safetensors.index.json names,
 * each shard mmap'ed, looked up by tensor name.  While a model takes its
 * tensors it reports them here, and a progress line goes to stderr for
 * loads that take long enough to wonder about.
 */

#ifndef PL_CHECKPOINT_H
#define PL_CHECKPOINT_H

#include <stddef.h>

#include "safetensors.h"

typedef struct pl_checkpoint_s  pl_checkpoint_t;

/* NULL with a message naming the file (and the shard or tensor). */
pl_checkpoint_t *pl_ckpt_open(const char *dir, char *err, size_t errlen);
void pl_ckpt_close(pl_checkpoint_t *c);

/* The tensor called name, NULL when no file holds it; *file (when not
   NULL) receives the path of the file that does, or of the checkpoint. */
const pl_st_tensor_t *pl_ckpt_find(const pl_checkpoint_t *c,
    const char *name, const char **file);

/* the checkpoint's path for messages: model.safetensors or the index */
const char *pl_ckpt_path(const pl_checkpoint_t *c);

/* Count a tensor as loaded; prints progress at most a few times a second
   once loading has taken PL_CKPT_QUIET_S, and a last line at done(). */
void pl_ckpt_loaded(pl_checkpoint_t *c, const pl_st_tensor_t *t);
void pl_ckpt_done(pl_checkpoint_t *c);

#endif /* PL_CHECKPOINT_H */
