/*
 * mma: the tensor-core and async-copy building blocks of the attention
 * kernels: 16-byte cp.async into shared memory (zero-filled when the
 * source is out of range), ldmatrix (plain and transposed), movmatrix
 * (an 8x8 fragment transposed in registers), the bf16 m16n8k16 MMA
 * with fp32 accumulators, and the XOR swizzle of 16-byte
 * chunks that keeps ldmatrix free of bank conflicts for rows of D bf16.
 *
 * Fragment layouts follow the PTX ISA for mma.m16n8k16: for lane l,
 * g = l / 4 and c = l % 4; A holds rows g and g + 8, columns 2c, 2c + 1
 * and 2c + 8, 2c + 9; B columns g, rows 2c, 2c + 1 and 2c + 8, 2c + 9; C
 * rows g and g + 8, columns 2c, 2c + 1.  Every MMA here has an fp16 twin
 * (mma_f16, wgmma_*_f16) of the same layouts, and a form templated on the
 * operand type (mma_f32acc<T>, wgmma_*_of<T>) for kernels templated on T.
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


/*
 * The transpose of an 8x8 matrix of 16-bit elements across the warp: lane
 * l holds row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1 of the matrix in
 * a and of its transpose in the result.  A C fragment packed to 16 bits
 * is such a matrix in each of its row halves; transposed, it is a B
 * fragment register (rows 2c, 2c + 1 of column g).
 */
static __device__ __forceinline__ uint32_t
movmatrix_trans(uint32_t a)
{
    uint32_t  d;

    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n"
                 : "=r"(d) : "r"(a));
    return d;
}


/* the m16n8k16 MMA with operands of PTX type TY ("bf16" or "f16") */
#define MMA_16816(TY)                                                      \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TY "." TY      \
                 ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "    \
                 "{%0, %1, %2, %3};\n"                                    \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])         \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]),            \
                   "r"(b0), "r"(b1))

/* d += a . b for one 16x8x16 tile */
static __device__ __forceinline__ void
mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    MMA_16816("bf16");
}


static __device__ __forceinline__ uint32_t
pack_bf16(float lo, float hi)
{
    __nv_bfloat162  v = __floats2bfloat162_rn(lo, hi);

    return *(uint32_t *) &v;
}


/* the same tile with fp16 operands (same fragment layouts) */
static __device__ __forceinline__ void
mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    MMA_16816("f16");
}

#undef MMA_16816


/* d += a . b with operands of T (__nv_bfloat16 or __half), fp32
   accumulators: the MMA of a kernel templated on T; operands pack with
   pl_pack2<T> (pl_cuda.cuh) */
template <typename T>
static __device__ __forceinline__ void
mma_f32acc(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    if constexpr (std::is_same_v<T, __half>) {
        mma_f16(d, a, b0, b1);
    } else {
        mma_bf16(d, a, b0, b1);
    }
}


/* byte offset of 16-byte chunk c of row r in a swizzled [rows][D] tile */
template <int D>
static __device__ __forceinline__ uint32_t
swz(int r, int c)
{
    return (uint32_t) (r * D * 2 + ((c ^ (r & 7)) << 4));
}


/*
 * Hopper (sm_90a only: compiled where __CUDA_ARCH_FEAT_SM90_ALL is set)
 *
 * wgmma: a warpgroup (4 consecutive warps, the first one's index a
 * multiple of 4) computes D[64][N] (+)= A[64][16] . B[16][N].  D, fp32,
 * N / 2 registers per thread: warp w of the group holds rows 16w .. 16w +
 * 15, and each 8-column chunk n of them is laid out as an mma.m16n8 C
 * fragment: d[4n + e] is row g + 8 (e / 2), column 8n + 2c + (e % 2)
 * (g = lane / 4, c = lane % 4).  A from registers is the mma.m16n8k16 A
 * fragment of the warp's 16 rows, so the D of one product, two 8-column
 * chunks at a time, packed to bf16, is the A of the next.
 *
 * Operands in shared memory are read through a 64-bit descriptor: start
 * address, leading (LBO) and stride (SBO) byte offsets, each >> 4, and
 * the swizzle mode (1 << 62: 128-byte).  The 128-byte swizzle lays a
 * matrix out in rows of 128 bytes (64 bf16) and XORs the 16-byte chunk
 * index of each row with the row's index modulo 8, the pattern repeating
 * every 1024 bytes (so every tile base is 1024-aligned); sw128() below
 * is that address.
 *   K-major (the 16 k of one instruction contiguous: Q for S = Q K^T,
 *   and K as its B): rows of the M or N index, 8-row groups SBO apart;
 *   the k-th 16-wide slice of a 64-wide row starts 32k bytes in.  LBO
 *   is unused.
 *   MN-major (B = V for O = P V, "transposed"): rows of the K index
 *   (tokens), each holding 64 consecutive n; 8-row groups SBO apart,
 *   64-wide n blocks LBO apart.
 * Writes by ordinary stores or cp.async become visible to wgmma (the
 * async proxy) only after fence.proxy.async in the writing thread, before
 * the barrier that hands the tile over.
 */

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

/* byte offset of 16-byte chunk c of row r in [c / 8][rows][64] bf16 */
template <int ROWS>
static __device__ __forceinline__ uint32_t
sw128(int r, int c)
{
    return (uint32_t) ((c >> 3) * ROWS * 128 + r * 128
                       + (((c & 7) ^ (r & 7)) << 4));
}


static __device__ __forceinline__ uint64_t
wg_desc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t) ((addr & 0x3ffff) >> 4)
           | (uint64_t) ((lbo & 0x3ffff) >> 4) << 16
           | (uint64_t) ((sbo & 0x3ffff) >> 4) << 32
           | 1ull << 62;
}


#define WG_D8(i)                                                          \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]),           \
    "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define WG_D64                                                            \
    WG_D8(0), WG_D8(8), WG_D8(16), WG_D8(24), WG_D8(32), WG_D8(40),       \
    WG_D8(48), WG_D8(56)
#define WG_R64                                                            \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, "   \
    "%15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, "    \
    "%28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, "    \
    "%41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, "    \
    "%54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

/* the two m64n128k16 wgmmas below with operands of PTX type TY */
#define WGMMA_128_SS(TY)                                                   \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"              \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY \
                 " " WG_R64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"              \
                 : WG_D64                                                 \
                 : "l"(a), "l"(b), "r"(acc)                               \
                 : "memory")
#define WGMMA_128_RS_T(TY)                                                 \
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY \
                 " " WG_R64 ", {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"  \
                 : WG_D64                                                 \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b)     \
                 : "memory")

/* d (+)= A . B, m64n128k16, A and B K-major in shared memory; d = A . B
   when acc is 0 */
static __device__ __forceinline__ void
wgmma_128_ss(float (&d)[64], uint64_t a, uint64_t b, int acc)
{
    WGMMA_128_SS("bf16");
}


/* d += A . B, m64n128k16, A in registers, B MN-major in shared memory */
static __device__ __forceinline__ void
wgmma_128_rs_t(float (&d)[64], const uint32_t (&a)[4], uint64_t b)
{
    WGMMA_128_RS_T("bf16");
}

/* the two above with fp16 operands */
static __device__ __forceinline__ void
wgmma_128_ss_f16(float (&d)[64], uint64_t a, uint64_t b, int acc)
{
    WGMMA_128_SS("f16");
}


static __device__ __forceinline__ void
wgmma_128_rs_t_f16(float (&d)[64], const uint32_t (&a)[4], uint64_t b)
{
    WGMMA_128_RS_T("f16");
}

#undef WGMMA_128_SS
#undef WGMMA_128_RS_T

#undef WG_D8
#undef WG_D64
#undef WG_R64


/* wgmma_128_ss and wgmma_128_rs_t for operands of T (__nv_bfloat16 or
   __half), for kernels templated on T */
template <typename T>
static __device__ __forceinline__ void
wgmma_128_ss_of(float (&d)[64], uint64_t a, uint64_t b, int acc)
{
    if constexpr (std::is_same_v<T, __half>) {
        wgmma_128_ss_f16(d, a, b, acc);
    } else {
        wgmma_128_ss(d, a, b, acc);
    }
}


template <typename T>
static __device__ __forceinline__ void
wgmma_128_rs_t_of(float (&d)[64], const uint32_t (&a)[4], uint64_t b)
{
    if constexpr (std::is_same_v<T, __half>) {
        wgmma_128_rs_t_f16(d, a, b);
    } else {
        wgmma_128_rs_t(d, a, b);
    }
}


/* order register accesses before the next wgmma */
static __device__ __forceinline__ void
wgmma_fence(void)
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}


static __device__ __forceinline__ void
wgmma_commit(void)
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}


template <int N>
static __device__ __forceinline__ void
wgmma_wait(void)
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N)
                 : "memory");
}


/* The compiler sees a wgmma's accumulators as written when it is
   issued; this pins every later access of d after the wait. */
static __device__ __forceinline__ void
wgmma_hold(float (&d)[64])
{
#pragma unroll
    for (int i = 0; i < 64; i++) {
        asm volatile("" : "+f"(d[i]) :: "memory");
    }
}


static __device__ __forceinline__ void
fence_proxy_async(void)
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}


static __device__ __forceinline__ void
mbar_init(uint32_t bar, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n"
                 :: "r"(bar), "r"(count) : "memory");
}


static __device__ __forceinline__ void
mbar_arrive(uint32_t bar)
{
    asm volatile("{\n.reg .b64 st;\n"
                 "mbarrier.arrive.shared::cta.b64 st, [%0];\n}\n"
                 :: "r"(bar) : "memory");
}


/* one arrival on bar once every cp.async the thread issued so far has
   landed, without waiting for them (.noinc: the arrival is one of the
   count given to mbar_init) */
static __device__ __forceinline__ void
cp_async_mbar_arrive(uint32_t bar)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n"
                 :: "r"(bar) : "memory");
}


static __device__ __forceinline__ void
cp_async_wait_all(void)
{
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}


/* named barrier id (1 .. 15; 0 is __syncthreads) of n threads, whole
   warps: wait for the other arrivals, or arrive without waiting */
static __device__ __forceinline__ void
named_bar_sync(int id, int n)
{
    asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(n) : "memory");
}


static __device__ __forceinline__ void
named_bar_arrive(int id, int n)
{
    asm volatile("bar.arrive %0, %1;\n" :: "r"(id), "r"(n) : "memory");
}


/*
 * Wait until the phase of the given parity has completed; called by whole
 * warps, which leave it converged for the .aligned instructions after it.
 * A wait of 2^31 cycles (a second) can only be a protocol bug: the thread
 * exits, so the launch ends with its output unwritten instead of hanging
 * the device.  (exit, not trap: a trap makes ptxas ignore setmaxnreg
 * when it allocates the registers of the code around it.)
 */
static __device__ __forceinline__ void
mbar_wait(uint32_t bar, int parity)
{
    long long  t0 = clock64();
    uint32_t   done;

    for ( ;; ) {
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], "
                     "%2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
        if (done) {
            break;
        }
        if (clock64() - t0 > (1ll << 31)) {
            asm volatile("exit;\n" ::: "memory");
        }
    }
    __syncwarp();
}


static __device__ __forceinline__ float
ex2(float x)
{
    float  y;

    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

#endif /* __CUDA_ARCH_FEAT_SM90_ALL */


/*
 * Hopper bulk tensor copies (TMA, sm_90a): one thread issues the copy of
 * a whole box of a tensor map (tma.cuh) into shared memory; the copy
 * counts its bytes off the transaction count of an mbarrier, which one
 * thread raises by the bytes of all the phase's copies with
 * mbar_arrive_expect_tx (before or after they land: the count may go
 * below zero meanwhile, and the phase cannot complete before that
 * arrival), so the phase completes once every byte landed.  The copies
 * write through the async proxy, as wgmma reads, so no proxy fence is
 * needed between them.
 */

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

/* one arrival on bar, and tx more bytes for the phase to wait for */
static __device__ __forceinline__ void
mbar_arrive_expect_tx(uint32_t bar, uint32_t tx)
{
    asm volatile("{\n.reg .b64 st;\n"
                 "mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;"
                 "\n}\n"
                 :: "r"(bar), "r"(tx) : "memory");
}


/* the box of map at (c0, c1, c2) into shared memory at dst, completing
   on bar; map: the generic address of a __grid_constant__ CUtensorMap */
static __device__ __forceinline__ void
tma_load_3d(uint32_t dst, const void *map, int c0, int c1, int c2,
    uint32_t bar)
{
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global"
                 ".mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
                 "[%5];\n"
                 :: "r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(c2),
                    "r"(bar)
                 : "memory");
}


static __device__ __forceinline__ void
tma_prefetch_map(const void *map)
{
    asm volatile("prefetch.tensormap [%0];\n" :: "l"(map) : "memory");
}


/* after mbar_init of barriers that copies complete: makes the
   initialization visible to the async proxy (with the block barrier
   that follows it) */
static __device__ __forceinline__ void
mbar_init_fence(void)
{
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

#endif /* __CUDA_ARCH_FEAT_SM90_ALL */

#endif /* PL_MMA_CUH */
