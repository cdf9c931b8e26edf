/*
 * cpu_ops: what the files of the CPU backend share.  Each operation of
 * pl_backend_t lives in its own file under kernels/cpu/ and is wired into
 * the backend by cpu_backend.c.  Activations and the KV cache are fp32;
 * weights are read in their checkpoint dtype and widened to fp32 on the fly.
 */

#ifndef PL_CPU_OPS_H
#define PL_CPU_OPS_H

#include "pl_ops.h"

typedef struct {
    int  threads;       /* OpenMP threads each operation uses */
} pl_cpu_t;

/*
 * Threads for an operation of about work element-operations: one below
 * PL_CPU_MIN_WORK, where waking a team costs more than it saves (and, on a
 * busy machine, waiting for a descheduled thread costs milliseconds).
 */
#define PL_CPU_MIN_WORK  (1 << 18)

static inline int
pl_cpu_team(const pl_backend_t *be, int64_t work)
{
    return work < PL_CPU_MIN_WORK ? 1 : ((const pl_cpu_t *) be->priv)->threads;
}

/* dst[count] = elements [first, first + count) of w, widened to fp32 */
void pl_cpu_weight_to_f32(float *dst, const pl_weight_t *w, int64_t first,
    int64_t count);

/* dot product of two fp32 vectors */
float pl_cpu_dot(const float *a, const float *b, int n);

void pl_cpu_embedding(pl_backend_t *be, void *out, const pl_weight_t *table,
    const int32_t *ids, int n);
void pl_cpu_rmsnorm(pl_backend_t *be, void *out, const void *x,
    const pl_weight_t *w, int n, int dim, float eps);
void pl_cpu_add_rmsnorm(pl_backend_t *be, void *out, void *residual,
    const void *x, const pl_weight_t *w, int n, int dim, float eps);
void pl_cpu_matmul(pl_backend_t *be, void *out, const void *x,
    const pl_weight_t *w, const pl_weight_t *bias, int n);
void pl_cpu_qkv_rope_store(pl_backend_t *be, void *q, void *k_cache,
    void *v_cache, const void *qkv, const int32_t *positions,
    const int32_t *slot_mapping, const float *inv_freq, int n, int n_heads,
    int n_kv_heads, int head_dim);
void pl_cpu_attention(pl_backend_t *be, void *out, const void *q,
    const void *k_cache, const void *v_cache, const pl_batch_t *batch,
    int n_heads, int n_kv_heads, int head_dim, int block_size, float scale);
void pl_cpu_silu_mul(pl_backend_t *be, void *out, const void *gate_up, int n,
    int inter);
void pl_cpu_layernorm(pl_backend_t *be, void *out, const void *x,
    const pl_weight_t *w, const pl_weight_t *b, int n, int dim, float eps);
void pl_cpu_relu(pl_backend_t *be, void *out, const void *x, int n, int dim);
void pl_cpu_add(pl_backend_t *be, void *residual, const void *x, int n,
    int dim);
void pl_cpu_sample(pl_backend_t *be, int32_t *tokens, const void *logits,
    pl_dtype_t dtype, int vocab, const pl_sample_req_t *reqs, int n,
    const pl_logit_adjust_t *adjust, int n_adjust, const uint64_t *masks,
    int n_masks);
void pl_cpu_gather_rows(pl_backend_t *be, void *out, const void *x,
    const int32_t *rows, int n, int dim);

#endif /* PL_CPU_OPS_H */
