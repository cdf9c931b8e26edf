/*
 * pl_model: a transformer loaded from a Hugging Face folder, run on a
 * backend.  The model knows nothing about requests or scheduling: it gets a
 * pl_batch_t describing which tokens to run and where their KV slots are,
 * and returns the logits of one row per sequence.
 */

#ifndef PL_MODEL_H
#define PL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "pl_ops.h"

#define PL_ARCH_LEN  64

typedef struct {
    char        arch[PL_ARCH_LEN];      /* "llama", "mistral", "qwen2",
                                           "opt" */
    int         vocab_size;
    int         hidden_size;
    int         intermediate_size;
    int         num_layers;
    int         num_heads;
    int         num_kv_heads;
    int         head_dim;
    int         max_position_embeddings;
    float       rms_norm_eps;
    float       rope_theta;
    int         tie_word_embeddings;
    int         bos_token_id;           /* -1 when none */
    int         n_eos;
    int         eos_token_ids[8];
    pl_dtype_t  dtype;                  /* of the checkpoint's weights */
    /* sampling defaults from generation_config.json: -1 when unset */
    float       default_temperature;
    float       default_top_p;
    int         default_top_k;
} pl_model_config_t;

typedef struct pl_model_s  pl_model_t;

/*
 * Load config.json, generation_config.json (when present) and the weights
 * (model.safetensors, or the shards model.safetensors.index.json names)
 * from dir, made usable by be.  NULL with a message naming the file and
 * the field on any problem.
 */
pl_model_t *pl_model_load(const char *dir, pl_backend_t *be, char *err,
    size_t errlen);

void pl_model_free(pl_model_t *m);

const pl_model_config_t *pl_model_config(const pl_model_t *m);

/*
 * Allocate activation scratch for batches of up to max_tokens tokens and
 * max_seqs sequences; forward() refuses larger batches.  Call before
 * sizing the KV cache, so what is left can go to it.  0, or -1 with err.
 */
int pl_model_prepare(pl_model_t *m, int max_tokens, int max_seqs, char *err,
    size_t errlen);

/* Backend bytes rank 0 holds: its weights, and what it allocated besides
   (activations and workspaces after pl_model_prepare(), then the KV
   cache too). */
void pl_model_memory(const pl_model_t *m, size_t *weights, size_t *other);

/* Bytes one KV block takes over all layers (K and V). */
size_t pl_model_kv_block_bytes(const pl_model_t *m, int block_size);

/* Allocate the paged KV cache: num_blocks blocks of block_size tokens.
   0, or -1 with err set. */
int pl_model_kv_alloc(pl_model_t *m, int num_blocks, int block_size,
    char *err, size_t errlen);

/*
 * Run one iteration.  batch is a host description (see pl_ops.h); logits
 * receives pl_batch_logits(batch) rows of vocab_size floats on the host.
 * Returns 0 or -1 (with err) when the batch does not fit what was
 * allocated.
 */
int pl_model_forward(pl_model_t *m, const pl_batch_t *batch, float *logits,
    char *err, size_t errlen);

/* Where one iteration's logits are: pl_batch_logits(batch) rows of
   vocab_size elements of dtype, in backend memory, or in host memory
   (on_host: F32, when tensor parallelism gathered them there).  Valid
   until the next forward pass. */
typedef struct {
    const void  *data;
    pl_dtype_t   dtype;
    int          on_host;
} pl_logits_t;

/*
 * pl_model_forward() without the copy to the host: the logits stay where
 * the model computed them, for sampling on the backend.  host_logits
 * (pl_batch_logits(batch) x vocab_size floats) is used only when the
 * logits must be gathered on the host (tensor parallelism).  0, or -1
 * with err.
 */
int pl_model_forward_logits(pl_model_t *m, const pl_batch_t *batch,
    float *host_logits, pl_logits_t *out, char *err, size_t errlen);

/*
 * KV block moves, decided by the block manager and run before a forward
 * pass.  kv_copy_blocks copies blocks src[i] -> dst[i] (K and V, every
 * layer; copy-on-write).  kv_swap moves blocks between the cache and a
 * host pool of pl_model_kv_block_bytes() * pl_model_tp_size() bytes per
 * block, each rank's share holding layer 0's K block, layer 0's V block,
 * layer 1's K block, and so on: PL_KV_SWAP_OUT copies cache block from[i] to host block to[i],
 * PL_KV_SWAP_IN host block from[i] to cache block to[i].  Host block
 * numbers are the caller's to check.  0, or -1 when a cache block number
 * is out of range or memory for a bounce buffer is short.
 */
#define PL_KV_SWAP_OUT  0
#define PL_KV_SWAP_IN   1

int pl_model_kv_copy_blocks(pl_model_t *m, const int32_t *src,
    const int32_t *dst, int n);
int pl_model_kv_swap(pl_model_t *m, void *host_pool, const int32_t *from,
    const int32_t *to, int n, int direction);

/*
 * Decode iterations (every sequence one query token) on a backend that
 * records them (be->graphs_run, CUDA graphs): the batch is padded to the
 * next recorded size (1, 2, 4, then multiples of 8 up to 256, at most
 * the prepared max_seqs) with rows that store nothing and attend to
 * nothing, its block tables widened to a context bucket (powers of two
 * from 256) that fixes the attention's split, and the iteration replays
 * the recording of that shape, made on the shape's first use.  Prefill
 * iterations, tensor parallelism and backends without recordings run
 * every operation from the host.
 *
 *   PL_DECODE_GRAPHS   the default
 *   PL_DECODE_EAGER    batches as they come (--enforce-eager)
 *   PL_DECODE_PADDED   batches padded as for graphs but launched one
 *                      operation at a time on any backend: what a replay
 *                      must reproduce bit for bit (tests), and the cost
 *                      of padding alone
 */
typedef enum {
    PL_DECODE_GRAPHS = 0,
    PL_DECODE_EAGER,
    PL_DECODE_PADDED
} pl_decode_mode_t;

void pl_model_set_decode_mode(pl_model_t *m, pl_decode_mode_t mode);

/* Decode iterations recorded (each a new shape) and replayed so far. */
void pl_model_graph_counts(const pl_model_t *m, long *recorded,
    long *replayed);

/*
 * Before sizing the KV cache: the largest iteration prepare() allows
 * (max_tokens tokens in max_seqs sequences: prompt chunks of up to
 * max_position_embeddings tokens and single tokens) runs once against a
 * temporary cache of a few blocks of block_size, so that everything a
 * backend makes on first use exists and shows in its free memory; with
 * decode graphs on, the widest decode batch is recorded too and the
 * device memory the recording took measured.  The temporary cache stays
 * until the next pl_model_kv_alloc() replaces it.  0, or -1 with err.
 */
typedef struct {
    int     tokens;             /* the iteration run */
    int     seqs;
    size_t  kv_bytes;           /* the temporary cache (per rank) */
    size_t  graph_bytes;        /* one decode recording; 0 without */
    int     graph_shapes;       /* recordings possible for contexts up
                                   to max_context (0 without graphs) */
} pl_model_profile_t;

int pl_model_profile(pl_model_t *m, int block_size, int max_context,
    pl_model_profile_t *prof, char *err, size_t errlen);

/* Ranks the model is split over (1 without tensor parallelism). */
int pl_model_tp_size(const pl_model_t *m);

/*
 * The dtype of activations and the KV cache (the engine's --dtype), on a
 * backend that has a choice (CUDA: bf16 or fp16; the CPU computes in fp32
 * and refuses anything but auto or float32).  auto follows the
 * checkpoint: fp16 runs in fp16, bf16 in bf16, fp32 in bf16; where the
 * backend cannot run fp16 yet, an fp16 checkpoint runs in bf16.  A bf16
 * or fp32 checkpoint forced to fp16 loads only when every weight is within
 * fp16's range.
 */
typedef enum {
    PL_MODEL_DTYPE_AUTO = 0,
    PL_MODEL_DTYPE_F16,
    PL_MODEL_DTYPE_BF16,
    PL_MODEL_DTYPE_F32
} pl_model_dtype_t;

/* "auto", "float16" or "half", "bfloat16", "float32" or "float"; 0, or -1
   for anything else */
int pl_model_dtype_parse(const char *s, pl_model_dtype_t *out);

/* The activation dtype want asks for with a checkpoint of dtype
   checkpoint (before the backend's say). */
pl_dtype_t pl_model_dtype_wanted(pl_model_dtype_t want,
    pl_dtype_t checkpoint);

/*
 * Tensor parallelism (Megatron-style): the model split over
 * tensor_parallel_size ranks.  Each rank holds its share of the attention
 * and KV heads (column-parallel q/k/v, row-parallel output projection),
 * of the MLP's intermediate rows (column-parallel gate/up or fc1,
 * row-parallel down or fc2), and of the vocabulary (embedding and
 * lm_head); the row-parallel outputs and the embedding are summed over
 * the ranks by an all-reduce and the logits slices gathered.  Rank 0 runs
 * on the caller's thread with be, each other rank on a thread of its own
 * with a backend of be's kind (cpu: one OpenMP thread; cuda: device =
 * rank).  Every rank uses the same batch and block tables and holds its
 * KV heads' share of every block, so pl_model_kv_block_bytes() is the
 * size on each rank; pl_model_kv_copy_blocks() and pl_model_kv_swap()
 * move blocks on every rank.  The size must divide the attention heads and the KV heads;
 * load refuses any other with the reason.
 */
typedef struct {
    int               tensor_parallel_size;     /* 1: no tensor
                                                   parallelism */
    pl_model_dtype_t  dtype;                    /* --dtype */
} pl_model_options_t;

pl_model_t *pl_model_load_opts(const char *dir, pl_backend_t *be,
    const pl_model_options_t *opts, char *err, size_t errlen);

/* The options pl_model_load() applies (one rank unless set): a program
   sets them once before loading (the engine's --tensor-parallel-size). */
void pl_model_set_default_options(const pl_model_options_t *opts);

#endif /* PL_MODEL_H */
