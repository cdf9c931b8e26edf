/*
 * rope: rotary position embedding in place, rotate-half convention.  For
 * each head vector h of a token at position p and i < head_dim / 2:
 *
 *     a = p * inv_freq[i]
 *     h[i]       = h[i] * cos a - h[i + d/2] * sin a
 *     h[i + d/2] = h[i + d/2] * cos a + h[i] * sin a
 *
 * q [n][n_heads * head_dim], k [n][n_kv_heads * head_dim], bf16.  One
 * thread block per token; its threads walk the (head, i) pairs of q, then
 * of k.  The angle uses full-precision sincosf, as the CPU twin does.
 */

#include "pl_cuda.cuh"


__device__ __forceinline__ void
rotate_pair(__nv_bfloat16 *h, int i, int half, float c, float s)
{
    float  a = __bfloat162float(h[i]);
    float  b = __bfloat162float(h[i + half]);

    h[i] = __float2bfloat16_rn(a * c - b * s);
    h[i + half] = __float2bfloat16_rn(b * c + a * s);
}


__global__ void
rope_kernel(__nv_bfloat16 *q, __nv_bfloat16 *k, const int32_t *positions,
    const float *inv_freq, int n_heads, int n_kv_heads, int head_dim)
{
    int             half = head_dim / 2;
    int             pairs = (n_heads + n_kv_heads) * half;
    float           pos = (float) positions[blockIdx.x];
    __nv_bfloat16  *qt = q + (int64_t) blockIdx.x * n_heads * head_dim;
    __nv_bfloat16  *kt = k + (int64_t) blockIdx.x * n_kv_heads * head_dim;

    for (int j = threadIdx.x; j < pairs; j += blockDim.x) {
        int    head = j / half, i = j - head * half;
        float  s, c;

        sincosf(pos * inv_freq[i], &s, &c);
        if (head < n_heads) {
            rotate_pair(qt + head * head_dim, i, half, c, s);
        } else {
            rotate_pair(kt + (head - n_heads) * head_dim, i, half, c, s);
        }
    }
}


void
pl_cuda_rope(pl_backend_t *be, void *q, void *k, const int32_t *positions,
    const float *inv_freq, int n, int n_heads, int n_kv_heads, int head_dim)
{
    if (n <= 0) {
        return;
    }
    if (head_dim % 2 != 0) {
        pl_cuda_fail("rope", "odd head_dim");
    }
    rope_kernel<<<n, 256, 0, pl_cuda(be)->stream>>>(
        (__nv_bfloat16 *) q, (__nv_bfloat16 *) k, positions, inv_freq,
        n_heads, n_kv_heads, head_dim);
    PL_CUDA_LAUNCHED("rope");
}
