/*
 * pl_ops: the operations a model needs, behind one backend interface.
 *
 * A model is written once against pl_backend_t; the CPU backend
 * (kernels/cpu/) is the portable reference and the CUDA backend
 * (kernels/NAME.cu) the fast one.  Every pointer passed to an operation lives
 * in the backend's memory (be->alloc, or a weight the backend loaded);
 * operations may run asynchronously in order, be->sync() waits for them.
 *
 * Activations and the KV cache use be->act_dtype (F32 on the CPU; BF16 or
 * F16 on CUDA, chosen by set_act_dtype before the weights load).  Weights
 * come in their checkpoint dtype (F32, F16 or BF16) and a backend may
 * store them in another (CUDA: matrices in act_dtype, vectors in F32);
 * arithmetic accumulates in fp32 everywhere.
 *
 * Shapes are row-major; "[n][d]" means n rows of d contiguous elements.
 *
 * KV cache, one K and one V buffer per layer:
 *     [num_blocks][block_size][n_kv_heads][head_dim]
 * A token's slot is block * block_size + offset; a sequence's block table
 * maps its logical block i to a physical block.
 */

#ifndef PL_OPS_H
#define PL_OPS_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    PL_DT_F32 = 0,
    PL_DT_F16 = 1,
    PL_DT_BF16 = 2
} pl_dtype_t;

size_t      pl_dtype_size(pl_dtype_t dt);
const char *pl_dtype_name(pl_dtype_t dt);

/* conversions used by loaders and CPU kernels */
float    pl_bf16_to_f32(uint16_t h);
uint16_t pl_f32_to_bf16(float f);        /* round to nearest even */
float    pl_f16_to_f32(uint16_t h);
uint16_t pl_f32_to_f16(float f);         /* round to nearest even */

/* How many of the count values at data (of dtype dt) are finite but round
   to infinity in f16 (magnitude 65520 or more); *worst (when not NULL)
   receives the largest such magnitude, 0 when there is none.  What a
   weight converted to f16 activations must not hold. */
int64_t  pl_f16_overflows(const void *data, pl_dtype_t dt, int64_t count,
                          float *worst);

/* A weight matrix [rows][cols] (a vector has rows = 1). */
typedef struct {
    void       *data;
    pl_dtype_t  dtype;
    int64_t     rows;
    int64_t     cols;
} pl_weight_t;

/*
 * One iteration's batch.  The runner fills a host copy; be->batch_upload()
 * returns the same description with pointers the backend's kernels can read
 * (the CPU backend returns its argument).  Sequence s owns query rows
 * [query_start[s], query_start[s + 1]); its new tokens sit at positions
 * context_lens[s] - qlen .. context_lens[s] - 1 and have already been
 * written to the cache (qkv_rope_store) before attention runs.  Attention
 * for those rows is causal over the sequence's whole context.  Logits are
 * projected for one row per sequence, then for num_extra_logits more rows
 * (any of the batch's, for the prompt logprobs of the requests that ask),
 * at most PL_EXTRA_LOGITS: the model's buffers hold num_seqs + that many.
 */
#define PL_EXTRA_LOGITS  128

typedef struct {
    int             num_tokens;
    int             num_seqs;
    const int32_t  *token_ids;       /* [num_tokens] */
    const int32_t  *positions;       /* [num_tokens] */
    const int32_t  *slot_mapping;    /* [num_tokens] */
    const int32_t  *query_start;     /* [num_seqs + 1] */
    const int32_t  *context_lens;    /* [num_seqs] */
    const int32_t  *block_tables;    /* [num_seqs][max_blocks_per_seq] */
    const int32_t  *logits_rows;     /* [num_seqs + num_extra_logits]: row
                                        to project, usually query_start[s
                                        + 1] - 1; then the extra rows */
    int             max_blocks_per_seq;
    int             max_query_len;
    int             max_context_len;
    int             num_extra_logits;   /* rows projected after the
                                           sequences'; 0: none */
} pl_batch_t;


/* The rows of logits a batch projects. */
static inline int
pl_batch_logits(const pl_batch_t *b)
{
    return b->num_seqs + b->num_extra_logits;
}

/*
 * Sampling on the backend.  One request draws one token from one row of
 * logits; several requests may read the same row (a group's first draw).
 * Every backend implements the same definition with the same arithmetic
 * (kernels/sample_math.h: IEEE operations in a fixed order, its own ln
 * and exp, integer masses), so a seeded draw is the same token on the CPU
 * and on the GPU, to the bit:
 *
 *   1. v[i] = logits[row][i] (NaN -> -inf), then each of the request's
 *      adjust entries for id i (at most one per id):
 *          v = v + bias;  if (repeat) v = v > 0 ? v / rp : v * rp;
 *          v = v + penalty        (rp: repetition_penalty; NaN -> -inf)
 *      then, for a masked request, v[i] = -inf for every id whose bit is
 *      clear in its row of the masks (structured outputs: one bit per id,
 *      bit i % 64 of 64-bit word i / 64, (vocab + 63) / 64 words a row);
 *   2. greedy (temperature <= 0, top_k == 1, or max v not finite):
 *      the highest v, lowest id on ties.
 *   3. otherwise, with z[i] = (v[i] - max v) / temperature, the kept ids
 *      are those with v[i] > -inf and
 *        min_p > 0:  z[i] >= ln(min(min_p, 1))
 *        top_k > 0:  v[i] >= the top_k-th largest kept v (ties kept)
 *        top_p < 1:  z[i] >= t, t the largest value for which the kept
 *                    ids with z >= t weigh >= top_p of the kept total,
 *                    a weight being exp(z) in fixed point (2^40 = 1; 0
 *                    below z = -32), the target at least 1
 *      and the token is the kept id with the largest z[i] - ln(e[i]),
 *      lowest id on ties, e[i] = -ln(u[i]), u[i] in (0, 1) the uniform
 *      of output word i % 4 of Philox-4x32-10 with key = seed, counter =
 *      (i / 4, 0, step): an exact draw from softmax(z) over the kept ids
 *      (the exponential race), reproducible from (seed, step) alone.
 */
typedef struct {
    int32_t   row;                  /* logits row this request reads */
    float     temperature;          /* <= 0: greedy */
    float     top_p;                /* >= 1: off */
    float     min_p;                /* <= 0: off */
    int32_t   top_k;                /* <= 0: off */
    float     repetition_penalty;   /* for entries with repeat set */
    int32_t   adjust_start;         /* this request's adjust entries */
    int32_t   adjust_count;
    int32_t   masked;               /* 1: masks row mask_row restricts */
    int32_t   mask_row;             /* the ids it may draw */
    uint64_t  seed;                 /* the sequence's random stream */
    uint64_t  step;                 /* the position drawn */
} pl_sample_req_t;

typedef struct {
    int32_t   id;                   /* < vocab; one entry per id */
    int32_t   repeat;               /* 1: apply repetition_penalty */
    float     bias;                 /* added first; -inf masks the id */
    float     penalty;              /* added last */
} pl_logit_adjust_t;

typedef struct pl_backend_s  pl_backend_t;

/* A backend's recordings of decode iterations (opaque; see graphs_run). */
typedef struct pl_graphs_s   pl_graphs_t;

/* What a recording runs: the operations of one iteration over the
   backend batch b. */
typedef void (*pl_graph_record_t)(void *arg, const pl_batch_t *b);

struct pl_backend_s {
    const char   *name;              /* "cpu", "cuda" */
    pl_dtype_t    act_dtype;

    void        *(*alloc)(pl_backend_t *be, size_t bytes);  /* zeroed; NULL
                                                               on failure */
    void         (*free)(pl_backend_t *be, void *p);
    void         (*upload)(pl_backend_t *be, void *dst, const void *src,
                           size_t bytes);
    void         (*download)(pl_backend_t *be, void *dst, const void *src,
                             size_t bytes);
    void         (*sync)(pl_backend_t *be);
    void         (*destroy)(pl_backend_t *be);

    /* Memory the backend can still allocate and its total, in bytes (for
       the CPU: available and total system memory). 0 or -1. */
    int          (*mem_info)(pl_backend_t *be, size_t *free_bytes,
                             size_t *total_bytes);

    /* Make a weight usable by kernels: the CPU keeps the (mmap'ed) host
       pointer, the CUDA backend copies it to the device. 0 or -1. */
    int          (*weight_load)(pl_backend_t *be, pl_weight_t *w,
                                const void *host);

    /* Optional: activations and the KV cache in dt from now on, set
       before any weight is loaded (weights are stored to suit it); NULL
       where act_dtype is the backend's only one (the CPU's F32).  0, or
       -1 with the reason in err. */
    int          (*set_act_dtype)(pl_backend_t *be, pl_dtype_t dt,
                                  char *err, size_t errlen);

    const pl_batch_t *(*batch_upload)(pl_backend_t *be,
                                      const pl_batch_t *host);

    /* out[n][dim] = table[ids[i]] */
    void (*embedding)(pl_backend_t *be, void *out, const pl_weight_t *table,
                      const int32_t *ids, int n);

    /* out[n][dim] = x / rms(x) * w */
    void (*rmsnorm)(pl_backend_t *be, void *out, const void *x,
                    const pl_weight_t *w, int n, int dim, float eps);

    /* residual[n][dim] += x; out = rmsnorm(residual) * w  (fused) */
    void (*add_rmsnorm)(pl_backend_t *be, void *out, void *residual,
                        const void *x, const pl_weight_t *w, int n, int dim,
                        float eps);

    /* out[n][w.rows] = x[n][w.cols] . w^T (+ bias[w.rows] when not NULL) */
    void (*matmul)(pl_backend_t *be, void *out, const void *x,
                   const pl_weight_t *w, const pl_weight_t *bias, int n);

    /* The attention block's prologue.  qkv [n][(n_heads + 2 n_kv_heads)
       * head_dim] holds each token's query heads, then its K heads, then
       its V heads (the fused projection); q[n][n_heads * head_dim] = the
       query heads, and k_cache/v_cache[slot_mapping[i]] = token i's K/V
       heads (a negative slot stores nothing).  With inv_freq ([head_dim /
       2], backend memory, any RoPE scaling already in it) q and K turn by
       positions[i] * inv_freq, rotate-half (GPT-NeoX / Hugging Face Llama)
       convention; NULL: no rotation (OPT). */
    void (*qkv_rope_store)(pl_backend_t *be, void *q, void *k_cache,
                           void *v_cache, const void *qkv,
                           const int32_t *positions,
                           const int32_t *slot_mapping,
                           const float *inv_freq, int n, int n_heads,
                           int n_kv_heads, int head_dim);

    /* Paged attention for every query row of the batch (prefill chunks and
       decodes alike): out[num_tokens][n_heads * head_dim]. */
    void (*attention)(pl_backend_t *be, void *out, const void *q,
                      const void *k_cache, const void *v_cache,
                      const pl_batch_t *batch, int n_heads, int n_kv_heads,
                      int head_dim, int block_size, float scale);

    /* out[n][inter] = silu(gu[n][0:inter]) * gu[n][inter:2*inter] */
    void (*silu_mul)(pl_backend_t *be, void *out, const void *gate_up, int n,
                     int inter);

    /* out[i][dim] = x[rows[i]][dim], i < n */
    void (*gather_rows)(pl_backend_t *be, void *out, const void *x,
                        const int32_t *rows, int n, int dim);

    /* host f32 dst[count] from backend activations src (act_dtype) */
    void (*download_f32)(pl_backend_t *be, float *dst, const void *src,
                         size_t count);

    /* tokens[i] (host memory) = the draw for reqs[i] (host memory) from
       logits [rows][vocab] of dtype in backend memory, as defined above
       pl_sample_req_t; adjust (host memory) holds every request's
       entries, masks (host memory) n_masks rows of (vocab + 63) / 64
       words.  Waits for the result. */
    void (*sample)(pl_backend_t *be, int32_t *tokens, const void *logits,
                   pl_dtype_t dtype, int vocab, const pl_sample_req_t *reqs,
                   int n, const pl_logit_adjust_t *adjust, int n_adjust,
                   const uint64_t *masks, int n_masks);

    /* Optional operations, NULL where a backend lacks them: a model that
       needs one refuses to load on that backend.  OPT uses them. */

    /* out[n][dim] = (x - mean(x)) / sqrt(var(x) + eps) * w + b */
    void (*layernorm)(pl_backend_t *be, void *out, const void *x,
                      const pl_weight_t *w, const pl_weight_t *b, int n,
                      int dim, float eps);

    /* residual[n][dim] += x */
    void (*add)(pl_backend_t *be, void *residual, const void *x, int n,
                int dim);

    /* out[n][dim] = max(x, 0); out may be x */
    void (*relu)(pl_backend_t *be, void *out, const void *x, int n, int dim);

    /* Optional memory operations for KV block moves (copy-on-write and
       swapping); NULL where a backend lacks them, and callers fall back. */

    /* dst = src, both backend memory (fallback: download then upload
       through a host buffer) */
    void (*copy)(pl_backend_t *be, void *dst, const void *src, size_t bytes);

    /* for every b < n_bases and i < n: the bytes bytes at base[b] +
       src[i] * bytes copied to base[b] + dst[i] * bytes, all of them at
       once on the compute path (no dst[i] is any src[j] or other dst[j]); bytes and every
       base a multiple of 16.  A step's copy-on-write blocks over every
       layer's K and V in one launch instead of a copy each (NULL: callers
       use copy) */
    void (*copy_blocks)(pl_backend_t *be, void *const *base, int n_bases,
                        size_t bytes, const int32_t *src, const int32_t *dst,
                        int n);

    /* host memory the backend moves data to and from fast (pinned);
       fallback: malloc and free */
    void *(*alloc_host)(pl_backend_t *be, size_t bytes);
    void  (*free_host)(pl_backend_t *be, void *p);

    /* dst[i] = src[i], bytes each, i < n, between backend memory and host
       memory from alloc_host (to_host: dst is host memory), off the
       compute path: ordered after every operation queued before and
       before every operation queued after, without the caller waiting
       (fallback: download or upload, chunk by chunk) */
    void  (*swap)(pl_backend_t *be, void *const *dst, const void *const *src,
                  int n, size_t bytes, int to_host);

    /* Optional replay of recorded decode iterations (CUDA graphs); NULL
       where a backend lacks it, and callers then run every operation
       themselves.  A set holds one recording per batch shape: num_seqs
       sequences of one query token each, max_blocks_per_seq block-table
       entries, max_context_len; at most max_seqs and max_blocks.  The
       recording keeps every operation's arguments (the model's buffers
       included), so a set must go before any buffer it saw does. */
    pl_graphs_t *(*graphs_create)(pl_backend_t *be, int max_seqs,
                                  int max_blocks);
    void (*graphs_destroy)(pl_backend_t *be, pl_graphs_t *g);

    /* Copy host (a batch of one of the set's shapes) into that shape's
       own backend arrays, then: the first time the shape is seen, run
       record(arg, b) with b describing those arrays and record it; every
       later time replay the recording without calling record.  What
       record queues may depend on the batch only through b's arrays and
       its shape, and must not wait for the backend.  Returns 1 replayed,
       0 ran and recorded, -1 when host is no shape of the set (nothing
       ran). */
    int  (*graphs_run)(pl_backend_t *be, pl_graphs_t *g,
                       const pl_batch_t *host, pl_graph_record_t record,
                       void *arg);

    void   *priv;
};

/* The sampling definition above on host f32 logits: the CPU backend's
   sample operation, and what samples logits gathered on the host. */
void pl_sample_host(int32_t *tokens, const float *logits, int vocab,
    const pl_sample_req_t *reqs, int n, const pl_logit_adjust_t *adjust,
    int n_adjust, const uint64_t *masks, int n_masks);

/* The 64-bit words of one row of sampling masks. */
static inline int
pl_sample_mask_words(int vocab)
{
    return (vocab + 63) / 64;
}

/* Backend constructors; NULL (with a reason in err) when unavailable. */
pl_backend_t *pl_backend_cpu_create(int threads, char *err, size_t errlen);
pl_backend_t *pl_backend_cuda_create(int device, char *err, size_t errlen);

/* Whether the paged attention of backend kind ("cpu" or "cuda") takes KV
   blocks of n tokens (block_size.c), known before a backend is open;
   *sizes says in words which sizes that kind takes. */
int pl_block_size_ok(const char *kind, int n, const char **sizes);

/* Read the CUDA kernels' environment knobs again (pl_cuda.cuh; a backend
   reads them once, when the first one opens).  For tests and benchmarks
   that setenv a knob between launches in one process, only. */
void pl_cuda_knobs_reload(void);

/* 1 when this build has the CUDA backend and a GPU is visible. */
int pl_cuda_available(void);

#endif /* PL_OPS_H */
