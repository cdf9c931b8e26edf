/*
 * cache_ops: writing a batch's new K and V rows into their paged slots.
 *
 *     k_cache[slot_mapping[i]] = k[i], v_cache[slot_mapping[i]] = v[i]
 *
 * k, v [n][n_kv_heads * head_dim] bf16; the caches
 * [num_blocks][block_size][n_kv_heads][head_dim], so a slot is one
 * contiguous row of n_kv_heads * head_dim.  One thread block per token,
 * 16-byte copies when the row allows; a negative slot stores nothing.
 */

#include "pl_cuda.cuh"


template <typename T>
__global__ void
kv_write_kernel(T *k_cache, T *v_cache, const T *k, const T *v,
    const int32_t *slot_mapping, int row)
{
    int64_t  slot = slot_mapping[blockIdx.x];
    int64_t  src = (int64_t) blockIdx.x * row;

    if (slot < 0) {
        return;
    }
    for (int c = threadIdx.x; c < row; c += blockDim.x) {
        k_cache[slot * row + c] = k[src + c];
        v_cache[slot * row + c] = v[src + c];
    }
}


void
pl_cuda_kv_write(pl_backend_t *be, void *k_cache, void *v_cache,
    const void *k, const void *v, const int32_t *slot_mapping, int n,
    int n_kv_heads, int head_dim)
{
    cudaStream_t  st = pl_cuda(be)->stream;
    int           row = n_kv_heads * head_dim;

    if (n <= 0) {
        return;
    }
    if (row % 8 == 0) {
        kv_write_kernel<uint4><<<n, 128, 0, st>>>(
            (uint4 *) k_cache, (uint4 *) v_cache, (const uint4 *) k,
            (const uint4 *) v, slot_mapping, row / 8);
    } else {
        kv_write_kernel<__nv_bfloat16><<<n, 128, 0, st>>>(
            (__nv_bfloat16 *) k_cache, (__nv_bfloat16 *) v_cache,
            (const __nv_bfloat16 *) k, (const __nv_bfloat16 *) v,
            slot_mapping, row);
    }
    PL_CUDA_LAUNCHED("kv_write");
}
