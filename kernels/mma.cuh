/*
 * mma: the tensor-core and async-copy building blocks of the attention
 * kernels: 16-byte cp.async into shared memory (zero-filled when the
 * source is out of range), ldmatrix (plain and transposed), the bf16
 * m16n8k16 MMA with fp32 accumulators, and the XOR swizzle of 16-byte
 * chunks that keeps ldmatrix free of bank conflicts for rows of D bf16.
 *
 * Fragment layouts follow the PTX ISA for mma.m16n8k16: for lane l,
 * g = l / 4 and c = l % 4; A holds rows g and g + 8, columns 2c, 2c + 1
 * and 2c + 8, 2c + 9; B columns g, rows 2c, 2c + 1 and 2c + 8, 2c + 9; C
 * rows g and g + 8, columns 2c, 2c + 1.
 */

#ifndef PL_MMA_CUH
#define PL_MMA_CUH

#include "pl_cuda.cuh"

static __device__ __forceinline__ uint32_t
smem_addr(const void *p)
{
    return (uint32_t) __cvta_generic_to_shared(p);
}


static __device__ __forceinline__ void
cp_async16(uint32_t dst, const void *src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(valid ? 16 : 0));
}


static __device__ __forceinline__ void
cp_async_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::);
}


template <int N>
static __device__ __forceinline__ void
cp_async_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N));
}


static __device__ __forceinline__ void
ldsm_x4(uint32_t (&r)[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 "
                 "{%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}


static __device__ __forceinline__ void
ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
                 "{%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}


/* d += a . b for one 16x8x16 tile */
static __device__ __forceinline__ void
mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]),
                   "r"(b0), "r"(b1));
}


static __device__ __forceinline__ uint32_t
pack_bf16(float lo, float hi)
{
    __nv_bfloat162  v = __floats2bfloat162_rn(lo, hi);

    return *(uint32_t *) &v;
}


/* byte offset of 16-byte chunk c of row r in a swizzled [rows][D] tile */
template <int D>
static __device__ __forceinline__ uint32_t
swz(int r, int c)
{
    return (uint32_t) (r * D * 2 + ((c ^ (r & 7)) << 4));
}

#endif /* PL_MMA_CUH */
