/*
 * rope: the attention block's prologue, qkv_rope_store.  From the fused
 * projection qkv [n][(nh + 2 nkv) hd] of T, the activation dtype (bf16 or
 * fp16; per token: nh query heads, nkv K heads, nkv V heads, hd each):
 *
 *     q[t][h]             = turn(query head h)
 *     k_cache[slot[t]][j] = turn(K head j),  v_cache[slot[t]][j] = V head j
 *
 * q [n][nh hd]; the caches [num_blocks][block_size][nkv][hd], so a slot is
 * one contiguous row of nkv hd; a negative slot stores nothing.  turn is
 * rotary position embedding, rotate-half, at position p = positions[t]:
 * for i < hd / 2 and a = p * inv_freq[i],
 *
 *     h[i]        = h[i] cos a - h[i + hd/2] sin a
 *     h[i + hd/2] = h[i + hd/2] cos a + h[i] sin a
 *
 * and the identity when inv_freq is NULL (OPT).
 *
 * Grid (n, chunks): blockIdx.x is a token, its heads cut into units of VEC
 * elements of the first half and the VEC matching ones of the second (16
 * bytes each when hd % 16 == 0: 8 threads per head of 128), numbered over
 * the query heads, then K, then V, QKV_THREADS units a block, so even one
 * token spreads over many SMs.  Each block first computes its token's
 * hd / 2 angles (full-precision sincosf of the fp32 product, as the CPU
 * twin) into shared memory, once for all its query and K heads.
 *
 * Launched with programmatic dependent launch (pl_cuda.cuh): positions
 * and slot_mapping (batch arrays, copied in before the step) and inv_freq
 * are read and the angles computed before the wait for the previous
 * kernel; qkv is read and q and the caches written after it.
 */

#include "pl_cuda.cuh"

#define QKV_THREADS  64


/* VEC elements from src to dst unchanged */
template <int VEC, typename T>
__device__ __forceinline__ void
copy_elems(T *dst, const T *src)
{
    if constexpr (VEC == 8) {
        *(uint4 *) dst = *(const uint4 *) src;
    } else {
        *dst = *src;
    }
}


template <typename T, int VEC>
__global__ void __launch_bounds__(QKV_THREADS)
qkv_rope_store_kernel(T *q, T *k_cache, T *v_cache, const T *qkv,
    const int32_t *positions, const int32_t *slot_mapping,
    const float *inv_freq, int nh, int nkv, int hd)
{
    extern __shared__ float  angle[];           /* cos [hd/2], sin [hd/2] */
    int                      half = hd / 2, per = half / VEC;
    int                      heads = nh + 2 * nkv;
    int                      t = blockIdx.x;
    int                      u = blockIdx.y * QKV_THREADS + threadIdx.x;
    int64_t                  slot = slot_mapping[t];
    int                      head, i;
    const T                 *src;
    T                       *dst;

    if (inv_freq != NULL) {
        float  pos = (float) positions[t];

        for (i = threadIdx.x; i < half; i += QKV_THREADS) {
            sincosf(pos * inv_freq[i], &angle[half + i], &angle[i]);
        }
        __syncthreads();
    }
    pl_grid_wait();
    pl_grid_release();
    if (u >= heads * per) {
        return;
    }
    head = u / per;
    i = (u - head * per) * VEC;
    src = qkv + ((int64_t) t * heads + head) * hd + i;
    if (head < nh) {
        dst = q + ((int64_t) t * nh + head) * hd + i;
    } else if (slot < 0) {
        return;
    } else if (head < nh + nkv) {
        dst = k_cache + (slot * nkv + head - nh) * hd + i;
    } else {
        dst = v_cache + (slot * nkv + head - nh - nkv) * hd + i;
    }

    if (inv_freq == NULL || head >= nh + nkv) {
        copy_elems<VEC>(dst, src);
        copy_elems<VEC>(dst + half, src + half);
        return;
    }

    float  a[VEC], b[VEC], ra[VEC], rb[VEC];

    pl_load<VEC>(src, a);
    pl_load<VEC>(src + half, b);
#pragma unroll
    for (int e = 0; e < VEC; e++) {
        float  c = angle[i + e], s = angle[half + i + e];

        ra[e] = a[e] * c - b[e] * s;
        rb[e] = b[e] * c + a[e] * s;
    }
    pl_store<VEC>(dst, ra);
    pl_store<VEC>(dst + half, rb);
}


template <typename T>
static void
qkv_rope_store_t(pl_cuda_t *cu, int vec, dim3 grid, size_t smem, void *q,
    void *k_cache, void *v_cache, const void *qkv, const int32_t *positions,
    const int32_t *slot_mapping, const float *inv_freq, int n_heads,
    int n_kv_heads, int head_dim)
{
    if (vec == 8) {
        pl_cuda_launch(cu, "qkv_rope_store", qkv_rope_store_kernel<T, 8>,
                       grid, QKV_THREADS, smem, (T *) q, (T *) k_cache,
                       (T *) v_cache, (const T *) qkv, positions,
                       slot_mapping, inv_freq, n_heads, n_kv_heads,
                       head_dim);
    } else {
        pl_cuda_launch(cu, "qkv_rope_store", qkv_rope_store_kernel<T, 1>,
                       grid, QKV_THREADS, smem, (T *) q, (T *) k_cache,
                       (T *) v_cache, (const T *) qkv, positions,
                       slot_mapping, inv_freq, n_heads, n_kv_heads,
                       head_dim);
    }
}


void
pl_cuda_qkv_rope_store(pl_backend_t *be, void *q, void *k_cache,
    void *v_cache, const void *qkv, const int32_t *positions,
    const int32_t *slot_mapping, const float *inv_freq, int n, int n_heads,
    int n_kv_heads, int head_dim)
{
    int     vec = head_dim % 16 == 0 ? 8 : 1;
    int     units = (n_heads + 2 * n_kv_heads) * (head_dim / 2 / vec);
    dim3    grid(n, pl_cuda_blocks(units, QKV_THREADS));
    size_t  smem = (size_t) head_dim * sizeof(float);

    if (n <= 0) {
        return;
    }
    if (head_dim % 2 != 0) {
        pl_cuda_fail("qkv_rope_store", "odd head_dim");
    }
    PL_CUDA_ACT(be, "qkv_rope_store", qkv_rope_store_t, pl_cuda(be), vec,
                grid, smem, q, k_cache, v_cache, qkv, positions,
                slot_mapping, inv_freq, n_heads, n_kv_heads, head_dim);
    PL_CUDA_LAUNCHED("qkv_rope_store");
}
