/*
 * model_config: reading a Hugging Face model folder's config.json and
 * generation_config.json into pl_model_config_t (what the rest of the
 * engine sees) and pl_arch_t (what only the model code needs), refusing
 * (by field name) every option the implementation does not honour.
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

/* The layer shapes the model implements, each a table of operations
   (model_internal.h): Llama (Llama, Mistral, Qwen2: RMSNorm, RoPE, SwiGLU)
   and OPT (LayerNorm, learned positions, ReLU). */
typedef struct pl_family_s  pl_family_t;

typedef struct {
    const pl_family_t *family;
    pl_rope_scaling_t  rope;            /* llama family */
    int                qkv_bias;        /* qwen2: q/k/v projections have
                                           biases */
    int                norm_before;     /* opt: do_layer_norm_before */
    int                final_norm;      /* opt: decoder.final_layer_norm */
    float              layer_norm_eps;  /* opt */
    int                dtype_given;     /* config.json named the dtype */
} pl_arch_t;

/* 0, or -1 with a message naming the file and the field. */
int pl_model_config_read(const char *dir, pl_model_config_t *cfg,
    pl_arch_t *arch, char *err, size_t errlen);

/* inv_freq[head_dim / 2]: RoPE frequencies with any scaling applied. */
void pl_rope_inv_freq(const pl_model_config_t *cfg,
    const pl_rope_scaling_t *rope, float *inv_freq);

#endif /* PL_MODEL_CONFIG_H */
