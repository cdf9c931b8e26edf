/*
 * kv_moves: the CUDA backend's memory moves for KV blocks.
 *
 *     copy        device to device on the compute stream (copy-on-write:
 *                 ordered with the kernels around it, nothing waits)
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
