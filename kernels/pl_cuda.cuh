/*
 * pl_cuda: what the files of the CUDA backend share.
 *
 * The backend runs every operation on one stream, in order.  Activations
 * and the KV cache are be->act_dtype, bf16 (the default) or fp16, with fp32
 * arithmetic; weight_load turns every matrix into that dtype (what the
 * GEMMs take) and every vector (norm weights, biases) into fp32.  Kernels
 * are templated on the element type T and launchers pick T from act_dtype
 * (PL_CUDA_ACT below).  Each operation lives in its own .cu file and
 * exposes a host launcher declared here; cuda_backend.cu wires them into
 * pl_backend_t.
 *
 * A launch that fails, or a shape no kernel covers, is a bug in the caller
 * or in this backend, not bad user input: pl_cuda_fail() names it and stops
 * the process rather than let a model compute garbage.
 */

#ifndef PL_CUDA_CUH
#define PL_CUDA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <stdint.h>
#include <stdlib.h>
#include <type_traits>

extern "C" {
#include "pl_ops.h"
}

/* Scratch for split-KV attention partials, reserved at creation so decode
   never allocates. */
#define PL_CUDA_ATTN_SCRATCH  (64u << 20)

/* cuBLAS's workspace, given to the handle at creation: it then never
   allocates, which graph capture requires (32 MiB: what cuBLAS asks for
   on Hopper). */
#define PL_CUDA_CUBLAS_WORKSPACE  (32u << 20)

typedef struct {
    int             device;
    int             num_sms;
    int             cc;                  /* compute capability, major * 10
                                            + minor */
    cudaStream_t    stream;
    cublasHandle_t  cublas;

    void           *attn_scratch;        /* PL_CUDA_ATTN_SCRATCH bytes */
    void           *cublas_workspace;    /* PL_CUDA_CUBLAS_WORKSPACE */

    /* batch_upload: pinned staging and its device twin */
    void           *batch_host;
    void           *batch_dev;
    size_t          batch_cap;
    cudaEvent_t     batch_copied;
    pl_batch_t      batch;
    int             batch_min_qlen;      /* fewest query rows of a
                                            sequence in batch */

    /* download_f32: device fp32 staging */
    float          *f32_stage;
    size_t          f32_cap;

    int             pdl;                 /* programmatic dependent launch
                                            for the decode path's kernels:
                                            sm_90 and pl_cuda_knobs.pdl at
                                            creation */

    struct pl_cuda_sample_s  *sample;    /* sample.cu's staging */
    struct pl_cuda_moves_s   *moves;     /* kv_moves.cu's copy stream */
} pl_cuda_t;

static inline pl_cuda_t *
pl_cuda(pl_backend_t *be)
{
    return (pl_cuda_t *) be->priv;
}

[[noreturn]] void pl_cuda_fail(const char *what, const char *detail);

/* Check a runtime call or the last launch; stop with its name on error. */
void pl_cuda_check(cudaError_t rc, const char *what);
#define PL_CUDA_LAUNCHED(what)  pl_cuda_check(cudaGetLastError(), what)

static inline unsigned
pl_cuda_blocks(int64_t n, unsigned threads)
{
    return (unsigned) ((n + threads - 1) / threads);
}

/*
 * The environment knobs of the CUDA kernels, every one of them (the table
 * is in docs/ARCHITECTURE.md, "Environment knobs").  Read once, when the
 * first backend opens (pl_cuda_knobs_load); kernels read this struct,
 * never the environment.  Each knob reaches a path the defaults also take
 * on some shape or GPU, so that one machine can test it; a CUDA graph
 * keeps the settings of its capture.
 */
typedef struct {
    int  pdl;               /* PAGEDLLM_CUDA_PDL: 0 launches every kernel
                               plainly (as on GPUs before sm_90) */
    int  attn_split_min;    /* PAGEDLLM_CUDA_ATTN_SPLIT_MIN: fewest tokens
                               of a KV split; 0: each kernel's own */
    int  attn_splits;       /* PAGEDLLM_CUDA_ATTN_SPLITS: a fixed split
                               count, merged through global partials;
                               0: chosen */
    int  attn_cluster;      /* PAGEDLLM_CUDA_ATTN_CLUSTER: 2..8 splits in
                               clusters of that size, 0 the global merge
                               always; -1: chosen */
    int  attn_heads;        /* PAGEDLLM_CUDA_ATTN_HEADS: KV heads a decode
                               block, 1, 2 or 4 where it fits; -1: chosen */
    int  attn_rows_first;   /* PAGEDLLM_CUDA_ATTN_ORDER=0: decode blocks
                               numbered rows first (the default past 65535
                               rows) */
    int  prefill_mma;       /* PAGEDLLM_CUDA_PREFILL=mma: the mma.sync
                               prefill kernel on Hopper too */
    int  prefill_cpasync;   /* PAGEDLLM_CUDA_PREFILL_LOADS=cpasync: Hopper's
                               prefill gathers with cp.async, as it does for
                               block sizes under 8 */
} pl_cuda_knobs_t;

extern pl_cuda_knobs_t  pl_cuda_knobs;

/* Fill pl_cuda_knobs from the environment, once per process (every
   backend's open calls it); pl_cuda_knobs_reload (pl_ops.h) reads it
   again, for tests and benchmarks that switch knobs. */
void pl_cuda_knobs_load(void);

/*
 * Programmatic dependent launch (sm_90).  A decode step is some 290 short
 * kernels; launched with the attribute below, a kernel's blocks start
 * while the previous kernel drains, run a prologue that reads only what no
 * kernel of the step writes (weights; the batch arrays, which copies put
 * in place before the step's first kernel, and a copy is never overlapped
 * with a kernel), then pl_grid_wait().  That waits until the previous
 * kernel has completed and its writes are visible (PTX griddepcontrol:
 * completion, not the trigger, whatever the previous kernel released
 * early), so every kernel launched this way must wait in every block
 * before its first read of activations and before its first global write,
 * and must not exit before waiting: a grid completes only after its own
 * wait, which makes waits chain back over the whole stream.
 * pl_grid_release() lets the next kernel launch (once every block has
 * called it or exited); it only moves the next kernel's prologue earlier.
 * Both are no-ops in a kernel launched without the attribute.
 * PAGEDLLM_CUDA_PDL=0 launches every kernel plainly.
 */
static __device__ __forceinline__ void
pl_grid_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

static __device__ __forceinline__ void
pl_grid_release(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* kernel<<<grid, block, smem, cu->stream>>>(args), with programmatic
   dependent launch when cu->pdl */
template <typename... Params, typename... Args>
static inline void
pl_cuda_launch(pl_cuda_t *cu, const char *what, void (*kernel)(Params...),
    dim3 grid, dim3 block, size_t smem, Args... args)
{
    cudaLaunchConfig_t   cfg = {};
    cudaLaunchAttribute  at[1];

    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = cu->stream;
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = cu->pdl ? 1 : 0;
    pl_cuda_check(cudaLaunchKernelEx(&cfg, kernel, args...), what);
}

/* fp32 value of a weight element: F32, F16 or BF16 storage */
static __device__ __forceinline__ float
pl_weight_at(const void *p, pl_dtype_t dt, int64_t i)
{
    if (dt == PL_DT_F32) {
        return ((const float *) p)[i];
    }
    if (dt == PL_DT_BF16) {
        return __bfloat162float(((const __nv_bfloat16 *) p)[i]);
    }
    return __half2float(((const __half *) p)[i]);
}

/* Eight bf16 in 16 bytes, widened to fp32. */
static __device__ __forceinline__ void
pl_bf16x8_to_f32(uint4 v, float *f)
{
    const uint32_t  w[4] = { v.x, v.y, v.z, v.w };

#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

/*
 * The two 16-bit activation types, T = __nv_bfloat16 or __half, under one
 * set of names for kernels templated on T: a scalar to and from fp32
 * (round to nearest even), eight elements through one 16-byte access, two
 * floats packed into the 32-bit register an MMA operand takes.  For bf16
 * they are the helpers above, so a kernel templated on T compiles to the
 * same instructions for bf16 as the bf16-only kernel did.
 */
static __device__ __forceinline__ float
pl_to_f32(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}

static __device__ __forceinline__ float
pl_to_f32(__half v)
{
    return __half2float(v);
}

template <typename T>
static __device__ __forceinline__ T pl_from_f32(float f);

template <>
__device__ __forceinline__ float
pl_from_f32<float>(float f)
{
    return f;
}

template <>
__device__ __forceinline__ __nv_bfloat16
pl_from_f32<__nv_bfloat16>(float f)
{
    return __float2bfloat16_rn(f);
}

template <>
__device__ __forceinline__ __half
pl_from_f32<__half>(float f)
{
    return __float2half_rn(f);
}


/* Eight fp16 in 16 bytes, widened to fp32. */
static __device__ __forceinline__ void
pl_f16x8_to_f32(uint4 v, float *f)
{
    const uint32_t  w[4] = { v.x, v.y, v.z, v.w };

#pragma unroll
    for (int i = 0; i < 4; i++) {
        __half2  h;
        float2   p;

        memcpy(&h, &w[i], sizeof(h));
        p = __half22float2(h);
        f[2 * i] = p.x;
        f[2 * i + 1] = p.y;
    }
}

/* eight T in 16 bytes to fp32 */
template <typename T>
static __device__ __forceinline__ void
pl_x8_to_f32(uint4 v, float *f)
{
    if constexpr (std::is_same_v<T, __half>) {
        pl_f16x8_to_f32(v, f);
    } else {
        pl_bf16x8_to_f32(v, f);
    }
}

/* lo and hi rounded to T, lo in the low half (an MMA operand register) */
template <typename T>
static __device__ __forceinline__ uint32_t
pl_pack2(float lo, float hi)
{
    uint32_t  r;

    if constexpr (std::is_same_v<T, __half>) {
        __half2  v = __floats2half2_rn(lo, hi);

        memcpy(&r, &v, sizeof(r));
    } else {
        __nv_bfloat162  v = __floats2bfloat162_rn(lo, hi);

        memcpy(&r, &v, sizeof(r));
    }
    return r;
}

/* eight fp32 rounded to T (nearest even), packed in 16 bytes */
template <typename T>
static __device__ __forceinline__ uint4
pl_f32_to_x8(const float *f)
{
    return make_uint4(pl_pack2<T>(f[0], f[1]), pl_pack2<T>(f[2], f[3]),
                      pl_pack2<T>(f[4], f[5]), pl_pack2<T>(f[6], f[7]));
}

/* VEC (8 or 1) elements of T at p to fp32 and back: one 16-byte access
   for 8 */
template <int VEC, typename T>
static __device__ __forceinline__ void
pl_load(const T *p, float *v)
{
    if constexpr (VEC == 8) {
        pl_x8_to_f32<T>(*(const uint4 *) p, v);
    } else {
        v[0] = pl_to_f32(*p);
    }
}

template <int VEC, typename T>
static __device__ __forceinline__ void
pl_store(T *p, const float *v)
{
    if constexpr (VEC == 8) {
        *(uint4 *) p = pl_f32_to_x8<T>(v);
    } else {
        *p = pl_from_f32<T>(v[0]);
    }
}

/*
 * A launcher templated on T called with the backend's activation dtype:
 * PL_CUDA_ACT(be, what, f, args) runs f<__nv_bfloat16>(args) or
 * f<__half>(args), and stops on any other dtype (a bug: set_act_dtype
 * allows no other).
 */
#define PL_CUDA_ACT(be, what, f, ...)                                      \
    do {                                                                   \
        if ((be)->act_dtype == PL_DT_BF16) {                               \
            f<__nv_bfloat16>(__VA_ARGS__);                                 \
        } else if ((be)->act_dtype == PL_DT_F16) {                         \
            f<__half>(__VA_ARGS__);                                        \
        } else {                                                           \
            pl_cuda_fail(what, "activations must be bf16 or fp16");        \
        }                                                                  \
    } while (0)


/* The backend's stream, for benchmarks that time it with events. */
extern "C" cudaStream_t pl_cuda_stream(pl_backend_t *be);

/* kv_moves.cu: KV block copies, pinned host memory, swaps on a stream of
   their own */
extern "C" void  pl_cuda_copy(pl_backend_t *be, void *dst, const void *src,
    size_t bytes);
extern "C" void  pl_cuda_copy_blocks(pl_backend_t *be, void *const *base,
    int n_bases, size_t bytes, const int32_t *src, const int32_t *dst,
    int n);
extern "C" void *pl_cuda_alloc_host(pl_backend_t *be, size_t bytes);
extern "C" void  pl_cuda_free_host(pl_backend_t *be, void *p);
extern "C" void  pl_cuda_swap(pl_backend_t *be, void *const *dst,
    const void *const *src, int n, size_t bytes, int to_host);
void pl_cuda_moves_free(pl_cuda_t *cu);

/* launchers, one per operation file */
void pl_cuda_embedding(pl_backend_t *be, void *out, const pl_weight_t *table,
    const int32_t *ids, int n);
void pl_cuda_rmsnorm(pl_backend_t *be, void *out, const void *x,
    const pl_weight_t *w, int n, int dim, float eps);
void pl_cuda_add_rmsnorm(pl_backend_t *be, void *out, void *residual,
    const void *x, const pl_weight_t *w, int n, int dim, float eps);
void pl_cuda_matmul(pl_backend_t *be, void *out, const void *x,
    const pl_weight_t *w, const pl_weight_t *bias, int n);
void pl_cuda_qkv_rope_store(pl_backend_t *be, void *q, void *k_cache,
    void *v_cache, const void *qkv, const int32_t *positions,
    const int32_t *slot_mapping, const float *inv_freq, int n, int n_heads,
    int n_kv_heads, int head_dim);
void pl_cuda_attention(pl_backend_t *be, void *out, const void *q,
    const void *k_cache, const void *v_cache, const pl_batch_t *batch,
    int n_heads, int n_kv_heads, int head_dim, int block_size, float scale);
void pl_cuda_layernorm(pl_backend_t *be, void *out, const void *x,
    const pl_weight_t *w, const pl_weight_t *b, int n, int dim, float eps);
void pl_cuda_add(pl_backend_t *be, void *residual, const void *x, int n,
    int dim);
void pl_cuda_relu(pl_backend_t *be, void *out, const void *x, int n,
    int dim);
void pl_cuda_silu_mul(pl_backend_t *be, void *out, const void *gate_up,
    int n, int inter);
void pl_cuda_gather_rows(pl_backend_t *be, void *out, const void *x,
    const int32_t *rows, int n, int dim);
void pl_cuda_sample(pl_backend_t *be, int32_t *tokens, const void *logits,
    pl_dtype_t dtype, int vocab, const pl_sample_req_t *reqs, int n,
    const pl_logit_adjust_t *adjust, int n_adjust, const uint64_t *masks,
    int n_masks);
void pl_cuda_sample_free(pl_cuda_t *cu);

/* dst (fp32, bf16 or fp16, chosen by dst_dtype) = src[count] of dtype
   src_dtype */
void pl_cuda_convert(pl_backend_t *be, void *dst, pl_dtype_t dst_dtype,
    const void *src, pl_dtype_t src_dtype, int64_t count);

#endif /* PL_CUDA_CUH */
