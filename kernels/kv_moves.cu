/*
 * kv_moves: the CUDA backend's memory moves for KV blocks.
 *
 *     copy        device to device on the compute stream (copy-on-write:
 *                 ordered with the kernels around it, nothing waits)
 *     copy_blocks a step's copy-on-write blocks, every layer's K and V, in
 *                 one kernel: the block numbers and layer bases travel as
 *                 the launch's parameters, so a step of beam search that
 *                 copies dozens of blocks over 64 layer caches costs a
 *                 launch, not thousands of copies
 *     alloc_host  pinned (page-locked, portable to every device) host
 *                 memory, so that swaps run as DMA at full link speed
 *     swap        chunks between the cache and pinned host memory on a
 *                 stream of their own
 *
 * A swap is ordered by two events: the copy stream waits for everything
 * queued on the compute stream so far (a swap-out reads blocks the last
 * forward pass wrote), and the compute stream waits for the copies (the
 * next forward pass reads swapped-in blocks, or reuses the blocks just
 * swapped out).  The host thread never waits: all of a step's copies are
 * queued at once and run as one batch of DMA transfers beside whatever
 * the host does next.
 */

#include <string.h>

#include "pl_cuda.cuh"


struct pl_cuda_moves_s {
    cudaStream_t  stream;
    cudaEvent_t   before;       /* compute stream -> copy stream */
    cudaEvent_t   after;        /* copy stream -> compute stream */
};


static struct pl_cuda_moves_s *
moves(pl_cuda_t *cu)
{
    struct pl_cuda_moves_s  *mv = cu->moves;

    if (mv != NULL) {
        return mv;
    }
    mv = (struct pl_cuda_moves_s *) calloc(1, sizeof(*mv));
    if (mv == NULL) {
        pl_cuda_fail("swap", "out of memory");
    }
    pl_cuda_check(cudaStreamCreateWithFlags(&mv->stream,
                                            cudaStreamNonBlocking), "swap");
    pl_cuda_check(cudaEventCreateWithFlags(&mv->before,
                                           cudaEventDisableTiming), "swap");
    pl_cuda_check(cudaEventCreateWithFlags(&mv->after,
                                           cudaEventDisableTiming), "swap");
    cu->moves = mv;
    return mv;
}


void
pl_cuda_moves_free(pl_cuda_t *cu)
{
    struct pl_cuda_moves_s  *mv = cu->moves;

    if (mv == NULL) {
        return;
    }
    cudaStreamSynchronize(mv->stream);
    cudaEventDestroy(mv->before);
    cudaEventDestroy(mv->after);
    cudaStreamDestroy(mv->stream);
    free(mv);
    cu->moves = NULL;
}


extern "C" void
pl_cuda_copy(pl_backend_t *be, void *dst, const void *src, size_t bytes)
{
    pl_cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                  pl_cuda(be)->stream), "copy");
}


/* What one launch of kv_copy_blocks carries as its parameters (under
   the 4 KB every CUDA version takes): more bases or blocks than these
   take more launches. */
#define KV_COPY_BASES   128
#define KV_COPY_BLOCKS  192

typedef struct {
    char      *base[KV_COPY_BASES];
    int32_t    src[KV_COPY_BLOCKS];
    int32_t    dst[KV_COPY_BLOCKS];
    size_t     vecs;                    /* 16-byte units a block */
} kv_copy_args_t;


/* block blockIdx.x of the list in cache blockIdx.y, 16 bytes a thread */
__global__ void
kv_copy_blocks(const kv_copy_args_t a)
{
    const uint4  *s = (const uint4 *) (a.base[blockIdx.y]
                      + (size_t) a.src[blockIdx.x] * a.vecs * 16);
    uint4        *d = (uint4 *) (a.base[blockIdx.y]
                      + (size_t) a.dst[blockIdx.x] * a.vecs * 16);
    size_t        k;

    for (k = threadIdx.x; k < a.vecs; k += blockDim.x) {
        d[k] = s[k];
    }
}


extern "C" void
pl_cuda_copy_blocks(pl_backend_t *be, void *const *base, int n_bases,
    size_t bytes, const int32_t *src, const int32_t *dst, int n)
{
    kv_copy_args_t  a;
    int             b, i, nb, ni;

    a.vecs = bytes / 16;
    for (b = 0; b < n_bases; b += KV_COPY_BASES) {
        nb = n_bases - b < KV_COPY_BASES ? n_bases - b : KV_COPY_BASES;
        memcpy(a.base, base + b, (size_t) nb * sizeof(char *));
        for (i = 0; i < n; i += KV_COPY_BLOCKS) {
            ni = n - i < KV_COPY_BLOCKS ? n - i : KV_COPY_BLOCKS;
            memcpy(a.src, src + i, (size_t) ni * sizeof(int32_t));
            memcpy(a.dst, dst + i, (size_t) ni * sizeof(int32_t));
            kv_copy_blocks<<<dim3(ni, nb), 256, 0, pl_cuda(be)->stream>>>(a);
        }
    }
    pl_cuda_check(cudaGetLastError(), "copy_blocks");
}


extern "C" void *
pl_cuda_alloc_host(pl_backend_t *be, size_t bytes)
{
    void  *p = NULL;

    (void) be;
    if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable)
        != cudaSuccess)
    {
        cudaGetLastError();
        return NULL;
    }
    return p;
}


extern "C" void
pl_cuda_free_host(pl_backend_t *be, void *p)
{
    pl_cuda_t  *cu = pl_cuda(be);

    if (p == NULL) {
        return;
    }
    /* nothing may still be copying from or to it */
    pl_cuda_check(cudaStreamSynchronize(cu->stream), "free_host");
    if (cu->moves != NULL) {
        pl_cuda_check(cudaStreamSynchronize(cu->moves->stream), "free_host");
    }
    pl_cuda_check(cudaFreeHost(p), "free_host");
}


extern "C" void
pl_cuda_swap(pl_backend_t *be, void *const *dst, const void *const *src,
    int n, size_t bytes, int to_host)
{
    pl_cuda_t               *cu = pl_cuda(be);
    struct pl_cuda_moves_s  *mv;
    cudaMemcpyKind           kind = to_host ? cudaMemcpyDeviceToHost
                                            : cudaMemcpyHostToDevice;
    int                      i;

    if (n <= 0) {
        return;
    }
    mv = moves(cu);
    pl_cuda_check(cudaEventRecord(mv->before, cu->stream), "swap");
    pl_cuda_check(cudaStreamWaitEvent(mv->stream, mv->before, 0), "swap");
    for (i = 0; i < n; i++) {
        pl_cuda_check(cudaMemcpyAsync(dst[i], src[i], bytes, kind,
                                      mv->stream), "swap");
    }
    pl_cuda_check(cudaEventRecord(mv->after, mv->stream), "swap");
    pl_cuda_check(cudaStreamWaitEvent(cu->stream, mv->after, 0), "swap");
}
