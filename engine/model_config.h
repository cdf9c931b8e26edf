/*
 * model_config: reading a Hugging Face model folder's config.json and
 * generation_config.json into pl_model_config_t, refusing (by field name)
 * every option the Llama implementation does not honour.
 */

#ifndef PL_MODEL_CONFIG_H
#define PL_MODEL_CONFIG_H

#include <stddef.h>

#include "pl_model.h"

typedef enum {
    PL_ROPE_DEFAULT = 0,
    PL_ROPE_LINEAR,
    PL_ROPE_LLAMA3
} pl_rope_type_t;

typedef struct {
    pl_rope_type_t  type;
    float           factor;
    float           low_freq_factor;                /* llama3 only */
    float           high_freq_factor;               /* llama3 only */
    int             original_max_position_embeddings;  /* llama3 only */
} pl_rope_scaling_t;

/* 0, or -1 with a message naming the file and the field. */
int pl_model_config_read(const char *dir, pl_model_config_t *cfg,
    pl_rope_scaling_t *rope, char *err, size_t errlen);

/* inv_freq[head_dim / 2]: RoPE frequencies with any scaling applied. */
void pl_rope_inv_freq(const pl_model_config_t *cfg,
    const pl_rope_scaling_t *rope, float *inv_freq);

#endif /* PL_MODEL_CONFIG_H */
