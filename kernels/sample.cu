/*
 * sample: the sampling operation (pl_ops.h, above pl_sample_req_t) on the
 * device, bit for bit the CPU twin's (kernels/cpu/cpu_sample.c).
 *
 * Layout: logits [rows][vocab] of bf16, f16 or f32 in device memory;
 * requests, their adjust entries and the mask rows of the masked ones
 * (one bit per id, (vocab + 63) / 64 64-bit words a row) are packed with
 * the output tokens in one pinned staging buffer, go up in one copy, and
 * the tokens come back in one copy (int32 [n]).
 *
 * Grid: one thread block per request.  A block reads its row in chunks of
 * eight ids per thread (16-byte loads where the row allows).  Ids with an
 * adjust entry are flagged in a shared-memory bitmap of the vocabulary
 * and skipped in the row; the block walks the entries instead, so the
 * row is never copied.  A masked request reads its mask word with each
 * chunk of the row (and with each entry): an id whose bit is clear is
 * -inf.  Every decision is an exact, order-free reduction:
 * max with the lowest id on ties, integer counts and integer masses (the
 * fixed-point weights of sample_math.h), so a run repeats itself and
 * matches the CPU whatever the thread count or the atomics' order.
 *
 *   1. max and argmax: greedy requests end here (one pass of the row);
 *   2. top_k: the k-th largest value among the ids min_p keeps, by a
 *      radix search over the value keys (11, 11, 10 bits: three passes
 *      with a 2048-bin histogram in shared memory);
 *   3. when top_k left at most SAMPLE_LIST ids, they are gathered into
 *      shared memory and what follows reads that list, not the row;
 *   4. top_p: the same radix search over z keys, weighted by mass (the
 *      first pass also gives the total);
 *   5. the draw: each kept id's score z - ln(e), e from its Philox word;
 *      ids whose z is too low for any noise to lift them past the best
 *      score so far are skipped before their noise is computed.
 */

#include <limits.h>
#include <string.h>

#include "pl_cuda.cuh"
#include "sample_math.h"

#define SAMPLE_THREADS  512
#define SAMPLE_WARPS    (SAMPLE_THREADS / 32)
#define SAMPLE_BINS     2048
#define SAMPLE_LIST     2048
#define SAMPLE_CHUNK    8

struct pl_cuda_sample_s {
    void    *host;              /* pinned: requests, adjust, tokens */
    void    *dev;               /* the same layout on the device */
    size_t   cap;
    size_t   smem_set[3];       /* dynamic shared memory allowed, by dtype */
};

typedef struct {
    float     red_v[SAMPLE_WARPS];
    int32_t   red_i[SAMPLE_WARPS];
    uint32_t  bin;
    uint64_t  above;
    int       skip;
    int       list_n;
} sample_shared_t;

/* where a block's values come from: its row (less the adjusted ids) and
   its adjust entries, or the gathered list */
template <typename T>
struct sample_src_t {
    const T                  *row;
    int                       vocab;
    int                       vec;          /* row 16-byte aligned */
    const pl_logit_adjust_t  *adj;
    int                       n_adj;
    float                     rp;
    const uint32_t           *skip;         /* adjusted-id bitmap */
    const uint32_t           *allow;        /* mask row, or NULL */
    int                       list_n;       /* -1: read the row */
    const int32_t            *list_id;
    const float              *list_v;
};


static __device__ __forceinline__ float
sample_clean(float x)
{
    return x != x ? -PL_SAMPLE_INF : x;
}


static __device__ __forceinline__ float
sample_at(const float *row, int i)
{
    return row[i];
}


static __device__ __forceinline__ float
sample_at(const __nv_bfloat16 *row, int i)
{
    return __bfloat162float(row[i]);
}


static __device__ __forceinline__ float
sample_at(const __half *row, int i)
{
    return __half2float(row[i]);
}


static __device__ __forceinline__ void
sample_load8(const float *p, float *x)
{
    float4  a = ((const float4 *) p)[0], b = ((const float4 *) p)[1];

    x[0] = a.x; x[1] = a.y; x[2] = a.z; x[3] = a.w;
    x[4] = b.x; x[5] = b.y; x[6] = b.z; x[7] = b.w;
}


static __device__ __forceinline__ void
sample_load8(const __nv_bfloat16 *p, float *x)
{
    pl_bf16x8_to_f32(*(const uint4 *) p, x);
}


static __device__ __forceinline__ void
sample_load8(const __half *p, float *x)
{
    pl_f16x8_to_f32(*(const uint4 *) p, x);
}


/* f(id, v) for every id of the source, each once, in no set order */
template <typename T, typename F>
static __device__ __forceinline__ void
sample_visit(const sample_src_t<T> &s, F f)
{
    if (s.list_n >= 0) {
        for (int j = threadIdx.x; j < s.list_n; j += SAMPLE_THREADS) {
            f(s.list_id[j], s.list_v[j]);
        }
        return;
    }

#pragma unroll 2
    for (int i = threadIdx.x * SAMPLE_CHUNK; i < s.vocab;
         i += SAMPLE_THREADS * SAMPLE_CHUNK)
    {
        float     x[SAMPLE_CHUNK];
        uint32_t  skip = s.n_adj > 0 ? s.skip[i >> 5] >> (i & 31) : 0;
        uint32_t  allow = s.allow ? s.allow[i >> 5] >> (i & 31) : ~0u;

        if (s.vec && i + SAMPLE_CHUNK <= s.vocab) {
            sample_load8(s.row + i, x);
        } else {
#pragma unroll
            for (int j = 0; j < SAMPLE_CHUNK; j++) {
                x[j] = i + j < s.vocab ? sample_at(s.row, i + j) : 0.0f;
            }
        }
#pragma unroll
        for (int j = 0; j < SAMPLE_CHUNK; j++) {
            if (i + j < s.vocab && !((skip >> j) & 1)) {
                f(i + j, (allow >> j) & 1 ? sample_clean(x[j])
                                          : -PL_SAMPLE_INF);
            }
        }
    }

    for (int a = threadIdx.x; a < s.n_adj; a += SAMPLE_THREADS) {
        int32_t  id = s.adj[a].id;

        if (id >= 0 && id < s.vocab) {
            f(id, s.allow && !((s.allow[id >> 5] >> (id & 31)) & 1)
                  ? -PL_SAMPLE_INF
                  : pl_sample_adjust(sample_clean(sample_at(s.row, id)),
                                     &s.adj[a], s.rp));
        }
    }
}


/* (v, id) beats (bv, bi): higher, or as high with a lower id */
static __device__ __forceinline__ bool
sample_beats(float v, int32_t id, float bv, int32_t bi)
{
    return v > bv || (v == bv && id < bi);
}


/* the block's best (v, id), left in every thread */
static __device__ void
sample_argmax(float *v, int32_t *id, sample_shared_t *sh)
{
    const int  lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    for (int o = 16; o > 0; o >>= 1) {
        float    ov = __shfl_down_sync(0xffffffffu, *v, o);
        int32_t  oi = __shfl_down_sync(0xffffffffu, *id, o);

        if (sample_beats(ov, oi, *v, *id)) {
            *v = ov;
            *id = oi;
        }
    }
    if (lane == 0) {
        sh->red_v[warp] = *v;
        sh->red_i[warp] = *id;
    }
    __syncthreads();

    *v = sh->red_v[0];
    *id = sh->red_i[0];
    for (int w = 1; w < SAMPLE_WARPS; w++) {
        if (sample_beats(sh->red_v[w], sh->red_i[w], *v, *id)) {
            *v = sh->red_v[w];
            *id = sh->red_i[w];
        }
    }
    __syncthreads();
}


/*
 * Warp 0 over a histogram of nb bins: the highest bin b at which the
 * mass above the bins already fixed (sh->above) plus bins b..nb-1 reaches
 * target; sh->bin = b, sh->above += the bins above b.  On the first digit
 * (want != NULL) the target is want(total) first, and 0 means no cut.
 */
template <typename W>
static __device__ void
sample_scan(const uint64_t *hist, int nb, uint64_t *target, bool first,
    W want, sample_shared_t *sh)
{
    const int  lane = threadIdx.x & 31, per = nb / 32;
    const int  top = nb - per * lane;           /* lane 0: the top bins */
    uint64_t   sum = 0, incl, t;
    unsigned   cross;

    for (int b = top - per; b < top; b++) {
        sum += hist[b];
    }
    incl = sum;
    for (int o = 1; o < 32; o <<= 1) {
        uint64_t  up = __shfl_up_sync(0xffffffffu, incl, o);

        if (lane >= o) {
            incl += up;
        }
    }

    if (first) {
        uint64_t  total = __shfl_sync(0xffffffffu, incl, 31);

        t = want(total);
        if (t == 0) {
            if (lane == 0) {
                sh->skip = 1;
                sh->above = total;
            }
            return;
        }
        *target = t;
    }
    t = *target;

    cross = __ballot_sync(0xffffffffu, sh->above + incl >= t);
    if (cross == 0) {
        /* cannot happen: the total reaches the target */
        if (lane == 31) {
            sh->bin = 0;
            sh->above += incl - hist[0];
        }
        return;
    }
    if (lane == __ffs(cross) - 1) {
        uint64_t  acc = sh->above + incl - sum;
        int       b = top - 1;

        for ( /* void */ ; b > top - per && acc + hist[b] < t; b--) {
            acc += hist[b];
        }
        sh->bin = (uint32_t) b;
        sh->above = acc;
    }
}


/*
 * The largest key K for which the elements with key >= K weigh at least
 * want(total weight): emit(g) calls g(key, x) for every element, whose
 * weight is weigh(x), asked only while its key matches the bits fixed so
 * far (so top_p's exp runs over the whole row once, not three times);
 * 0 (keep everything) when want answers 0.  *kept: the weight of the
 * elements kept.
 */
template <typename E, typename G, typename W>
static __device__ uint32_t
sample_select(E emit, G weigh, W want, uint64_t *hist, sample_shared_t *sh,
    uint64_t *kept)
{
    uint32_t  prefix = 0, mask = 0;
    uint64_t  target = 0;
    int       d;

    if (threadIdx.x == 0) {
        sh->above = 0;
        sh->skip = 0;
    }

    for (d = 0; d < 3; d++) {
        const int  shift = d == 0 ? 21 : d == 1 ? 10 : 0;
        const int  nb = d == 2 ? 1024 : 2048;

        for (int b = threadIdx.x; b < nb; b += SAMPLE_THREADS) {
            hist[b] = 0;
        }
        __syncthreads();

        emit([&](uint32_t key, float x) {
            if ((key & mask) == prefix) {
                atomicAdd((unsigned long long *) &hist[(key >> shift)
                                                       & (nb - 1)],
                          (unsigned long long) weigh(x));
            }
        });
        __syncthreads();

        if (threadIdx.x < 32) {
            sample_scan(hist, nb, &target, d == 0, want, sh);
        }
        __syncthreads();

        if (sh->skip) {
            *kept = sh->above;      /* the total: nothing was cut */
            __syncthreads();
            return 0;
        }
        prefix |= sh->bin << shift;
        mask |= (uint32_t) (nb - 1) << shift;
    }

    *kept = sh->above + hist[sh->bin];
    __syncthreads();

    return prefix;
}


template <typename T>
__global__ void __launch_bounds__(SAMPLE_THREADS, 1)
sample_kernel(int32_t *tokens, const T *logits, int vocab,
    const pl_sample_req_t *reqs, const pl_logit_adjust_t *adjust,
    const uint64_t *masks, int n_masks)
{
    extern __shared__ uint64_t  smem[];
    __shared__ sample_shared_t  sh;

    const pl_sample_req_t  r = reqs[blockIdx.x];
    uint64_t              *hist = smem;
    int32_t               *list_id = (int32_t *) (hist + SAMPLE_BINS);
    float                 *list_v = (float *) (list_id + SAMPLE_LIST);
    uint32_t              *bitmap = (uint32_t *) (list_v + SAMPLE_LIST);
    sample_src_t<T>        src;
    float                  mv = -PL_SAMPLE_INF, t = r.temperature, min_z;
    int32_t                mi = INT_MAX;
    uint32_t               kv = 0, kz = 0;
    uint64_t               kept = 0;
    bool                   use_min_p = r.min_p > 0.0f;

    src.row = logits + (int64_t) r.row * vocab;
    src.vocab = vocab;
    src.vec = ((uintptr_t) src.row & 15) == 0;
    src.adj = adjust + r.adjust_start;
    src.n_adj = r.adjust_count;
    src.rp = r.repetition_penalty;
    src.skip = bitmap;
    src.allow = r.masked && r.mask_row >= 0 && r.mask_row < n_masks
                ? (const uint32_t *) (masks + (int64_t) r.mask_row
                                      * ((vocab + 63) / 64))
                : NULL;
    src.list_n = -1;
    src.list_id = list_id;
    src.list_v = list_v;

    if (src.n_adj > 0) {
        for (int w = threadIdx.x; w < (vocab + 31) / 32; w += SAMPLE_THREADS) {
            bitmap[w] = 0;
        }
        __syncthreads();
        for (int a = threadIdx.x; a < src.n_adj; a += SAMPLE_THREADS) {
            int32_t  id = src.adj[a].id;

            if (id >= 0 && id < vocab) {
                atomicOr(&bitmap[id >> 5], 1u << (id & 31));
            }
        }
        __syncthreads();
    }

    /* 1. max; greedy ends here */
    sample_visit(src, [&](int32_t id, float v) {
        if (sample_beats(v, id, mv, mi)) {
            mv = v;
            mi = id;
        }
    });
    sample_argmax(&mv, &mi, &sh);

    if (!(t > 0.0f) || r.top_k == 1 || !isfinite(mv)) {
        if (threadIdx.x == 0) {
            tokens[blockIdx.x] = mi;
        }
        return;
    }

    min_z = use_min_p ? pl_sample_min_z(r.min_p) : -PL_SAMPLE_INF;

    /* min_p's candidates (z is only needed for it) */
    auto candidate = [&](float v) {
        return v > -PL_SAMPLE_INF
               && (!use_min_p || pl_sample_z(v, mv, t) >= min_z);
    };

    /* 2. top_k */
    if (r.top_k > 0) {
        kv = sample_select(
            [&](auto g) {
                sample_visit(src, [&](int32_t id, float v) {
                    if (candidate(v)) {
                        g(pl_sample_key(v), v);
                    }
                });
            },
            [](float) { return (uint64_t) 1; },
            [&](uint64_t total) {
                return total <= (uint64_t) r.top_k ? 0
                                                   : (uint64_t) r.top_k;
            },
            hist, &sh, &kept);

        /* 3. a short list: read it from shared memory from now on */
        if (kept <= SAMPLE_LIST) {
            if (threadIdx.x == 0) {
                sh.list_n = 0;
            }
            __syncthreads();
            sample_visit(src, [&](int32_t id, float v) {
                if (candidate(v) && pl_sample_key(v) >= kv) {
                    int  j = atomicAdd(&sh.list_n, 1);

                    list_id[j] = id;
                    list_v[j] = v;
                }
            });
            __syncthreads();
            src.list_n = sh.list_n;
        }
    }

    /* 4. top_p */
    if (r.top_p < 1.0f) {
        kz = sample_select(
            [&](auto g) {
                sample_visit(src, [&](int32_t id, float v) {
                    float  z;

                    if (!candidate(v) || pl_sample_key(v) < kv) {
                        return;
                    }
                    z = pl_sample_z(v, mv, t);
                    if (z >= PL_SAMPLE_Z_FLOOR) {
                        g(pl_sample_key(z), z);
                    }
                });
            },
            [](float z) { return pl_sample_weight(z); },
            [&](uint64_t total) {
                return pl_sample_target(r.top_p, total);
            },
            hist, &sh, &kept);
    }

    /* 5. the draw; mi (z = 0) is always kept, so it starts as the best */
    {
        pl_philox_ctr_t  words;
        uint32_t         group = (uint32_t) mi >> 2;
        float            top;
        int32_t          token = mi;

        words = pl_sample_noise4(r.seed, r.step, group);
        top = pl_sample_score(0.0f, pl_sample_word(&words, (uint32_t) mi));

        sample_visit(src, [&](int32_t id, float v) {
            float  z, s;

            if (!(v > -PL_SAMPLE_INF)) {
                return;
            }
            z = pl_sample_z(v, mv, t);
            if (PL_FADD(z, PL_SAMPLE_NOISE_MAX) < top
                || (use_min_p && z < min_z) || pl_sample_key(v) < kv
                || pl_sample_key(z) < kz)
            {
                return;
            }
            if ((uint32_t) id >> 2 != group) {
                group = (uint32_t) id >> 2;
                words = pl_sample_noise4(r.seed, r.step, group);
            }
            s = pl_sample_score(z, pl_sample_word(&words, (uint32_t) id));
            if (sample_beats(s, id, top, token)) {
                top = s;
                token = id;
            }
        });
        sample_argmax(&top, &token, &sh);

        if (threadIdx.x == 0) {
            tokens[blockIdx.x] = token;
        }
    }
}


static size_t
sample_smem(int vocab)
{
    return SAMPLE_BINS * sizeof(uint64_t)
           + SAMPLE_LIST * (sizeof(int32_t) + sizeof(float))
           + (size_t) (vocab + 31) / 32 * sizeof(uint32_t);
}


static size_t
sample_align(size_t n)
{
    return (n + 15) & ~(size_t) 15;
}


static struct pl_cuda_sample_s *
sample_state(pl_cuda_t *cu, size_t bytes)
{
    struct pl_cuda_sample_s  *st = cu->sample;

    if (st == NULL) {
        st = (struct pl_cuda_sample_s *) calloc(1, sizeof(*st));
        if (st == NULL) {
            pl_cuda_fail("sample", "out of memory");
        }
        cu->sample = st;
    }
    if (bytes > st->cap) {
        /* the previous call waited for its copies: nothing reads these */
        cudaFreeHost(st->host);
        cudaFree(st->dev);
        bytes += bytes / 2;
        if (cudaMallocHost(&st->host, bytes) != cudaSuccess
            || cudaMalloc(&st->dev, bytes) != cudaSuccess)
        {
            pl_cuda_fail("sample", "out of memory for the requests");
        }
        st->cap = bytes;
    }
    return st;
}


template <typename T>
static void
sample_launch(struct pl_cuda_sample_s *st, int slot, cudaStream_t stream,
    int32_t *tokens, const void *logits, int vocab,
    const pl_sample_req_t *reqs, int n, const pl_logit_adjust_t *adjust,
    const uint64_t *masks, int n_masks)
{
    size_t  smem = sample_smem(vocab);

    if (smem > st->smem_set[slot]) {
        pl_cuda_check(cudaFuncSetAttribute(sample_kernel<T>,
                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                          (int) smem),
                      "sample: shared memory for the vocabulary");
        st->smem_set[slot] = smem;
    }
    sample_kernel<T><<<n, SAMPLE_THREADS, smem, stream>>>(
        tokens, (const T *) logits, vocab, reqs, adjust, masks, n_masks);
    PL_CUDA_LAUNCHED("sample");
}


void
pl_cuda_sample(pl_backend_t *be, int32_t *tokens, const void *logits,
    pl_dtype_t dtype, int vocab, const pl_sample_req_t *reqs, int n,
    const pl_logit_adjust_t *adjust, int n_adjust, const uint64_t *masks,
    int n_masks)
{
    pl_cuda_t                *cu = pl_cuda(be);
    struct pl_cuda_sample_s  *st;
    size_t                    at_adj, at_mask, at_tok, in_bytes, bytes;
    size_t                    mask_bytes;
    char                     *h, *d;
    int32_t                  *d_tok;
    const pl_sample_req_t    *d_reqs;
    const pl_logit_adjust_t  *d_adj;
    const uint64_t           *d_mask;

    if (n <= 0) {
        return;
    }

    mask_bytes = (size_t) n_masks * pl_sample_mask_words(vocab)
                 * sizeof(uint64_t);
    at_adj = sample_align((size_t) n * sizeof(pl_sample_req_t));
    at_mask = at_adj + sample_align((size_t) n_adjust
                                    * sizeof(pl_logit_adjust_t));
    at_tok = at_mask + sample_align(mask_bytes);
    in_bytes = at_tok + (size_t) n * sizeof(int32_t);
    bytes = sample_align(in_bytes);

    st = sample_state(cu, bytes);
    h = (char *) st->host;
    d = (char *) st->dev;

    /* requests, entries, masks, and the tokens poisoned (-1): one copy */
    memcpy(h, reqs, (size_t) n * sizeof(pl_sample_req_t));
    if (n_adjust > 0) {
        memcpy(h + at_adj, adjust, (size_t) n_adjust * sizeof(*adjust));
    }
    if (mask_bytes > 0) {
        memcpy(h + at_mask, masks, mask_bytes);
    }
    memset(h + at_tok, 0xff, (size_t) n * sizeof(int32_t));
    pl_cuda_check(cudaMemcpyAsync(d, h, in_bytes, cudaMemcpyHostToDevice,
                                  cu->stream), "sample: upload");

    d_tok = (int32_t *) (d + at_tok);
    d_reqs = (const pl_sample_req_t *) d;
    d_adj = (const pl_logit_adjust_t *) (d + at_adj);
    d_mask = (const uint64_t *) (d + at_mask);

    switch (dtype) {
    case PL_DT_BF16:
        sample_launch<__nv_bfloat16>(st, 0, cu->stream, d_tok, logits, vocab,
                                     d_reqs, n, d_adj, d_mask, n_masks);
        break;
    case PL_DT_F16:
        sample_launch<__half>(st, 1, cu->stream, d_tok, logits, vocab,
                              d_reqs, n, d_adj, d_mask, n_masks);
        break;
    case PL_DT_F32:
        sample_launch<float>(st, 2, cu->stream, d_tok, logits, vocab,
                             d_reqs, n, d_adj, d_mask, n_masks);
        break;
    default:
        pl_cuda_fail("sample", "logits of an unknown dtype");
    }

    pl_cuda_check(cudaMemcpyAsync(h + at_tok, d + at_tok,
                                  (size_t) n * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost, cu->stream),
                  "sample: download");
    pl_cuda_check(cudaStreamSynchronize(cu->stream), "sample");
    memcpy(tokens, h + at_tok, (size_t) n * sizeof(int32_t));
}


void
pl_cuda_sample_free(pl_cuda_t *cu)
{
    if (cu->sample != NULL) {
        cudaFreeHost(cu->sample->host);
        cudaFree(cu->sample->dev);
        free(cu->sample);
        cu->sample = NULL;
    }
}
