/*
 * bench_gpu.h: what the GPU benchmarks share — the backend they run on,
 * a fixed random stream, device buffers of random bf16, medians, and the
 * device-to-device copy bandwidth that every figure is held against.
 * Each benchmark sets BE (the CUDA backend) before calling any of these.
 */

#ifndef PL_BENCH_GPU_H
#define PL_BENCH_GPU_H

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "pl_ops.h"

/* the backend's stream (kernels/cuda_backend.cu), for event timing */
cudaStream_t pl_cuda_stream(pl_backend_t *be);

static pl_backend_t  *BE;
static uint64_t       bench_rng = 88172645463325252ull;


static inline uint64_t
next(void)
{
    bench_rng ^= bench_rng << 13;
    bench_rng ^= bench_rng >> 7;
    bench_rng ^= bench_rng << 17;
    return bench_rng;
}


static inline void
check(cudaError_t rc, const char *what)
{
    if (rc != cudaSuccess) {
        fprintf(stderr, "bench: %s: %s\n", what, cudaGetErrorString(rc));
        exit(1);
    }
}


static inline void *
dev_alloc(size_t bytes)
{
    void  *p = BE->alloc(BE, bytes);

    if (p == NULL) {
        fprintf(stderr, "bench: cannot allocate %zu bytes\n", bytes);
        exit(1);
    }
    return p;
}


/* random bf16 in [-1, 1): a 64 MiB pattern uploaded once, then doubled on
   the device */
static inline void
fill_random(void *dev, size_t bytes)
{
    size_t        chunk = 64u << 20, done, i;
    uint16_t     *h = malloc(chunk);
    cudaStream_t  st = pl_cuda_stream(BE);

    if (h == NULL) {
        fprintf(stderr, "bench: out of memory\n");
        exit(1);
    }
    for (i = 0; i < chunk / 2; i++) {
        h[i] = pl_f32_to_bf16((float) ((next() >> 40) / 8388608.0 - 1.0));
    }
    done = bytes < chunk ? bytes : chunk;
    BE->upload(BE, dev, h, done);
    BE->sync(BE);
    while (done < bytes) {
        size_t  n = bytes - done < done ? bytes - done : done;

        check(cudaMemcpyAsync((char *) dev + done, dev, n,
                              cudaMemcpyDeviceToDevice, st), "fill");
        done += n;
    }
    BE->sync(BE);
    free(h);
}


static inline int
cmp_float(const void *a, const void *b)
{
    float  x = *(const float *) a, y = *(const float *) b;

    return x < y ? -1 : x > y;
}


static inline float
median(float *v, int n)
{
    qsort(v, n, sizeof(float), cmp_float);
    return v[n / 2];
}


/* Device-to-device copy of 2 GiB, median of 10 timed with events:
   TB/s of bytes read + written; printed as the "ours copy" line. */
static inline double
bench_copy(void)
{
    size_t        bytes = 2ull << 30;
    void         *a = dev_alloc(bytes), *b = dev_alloc(bytes);
    cudaStream_t  st = pl_cuda_stream(BE);
    cudaEvent_t   e0, e1;
    float         ms[10];
    double        tbs;
    int           i;

    check(cudaEventCreate(&e0), "event");
    check(cudaEventCreate(&e1), "event");
    fill_random(a, bytes);
    for (i = 0; i < 10; i++) {
        check(cudaEventRecord(e0, st), "record");
        check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st),
              "copy");
        check(cudaEventRecord(e1, st), "record");
        check(cudaEventSynchronize(e1), "sync");
        check(cudaEventElapsedTime(&ms[i], e0, e1), "elapsed");
    }
    tbs = 2.0 * bytes / (median(ms, 10) / 1e3) / 1e12;
    printf("ours copy d2d %.3f TB/s (read + write of 2 GiB)\n", tbs);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    BE->free(BE, a);
    BE->free(BE, b);
    return tbs;
}


/* Median seconds of one call of fn(arg, i), i = warm.., timed one by one
   with events on the backend's stream after warm untimed calls; reps at
   most 256. */
static inline double
bench_time(void (*fn)(void *arg, int i), void *arg, int warm, int reps)
{
    cudaStream_t  st = pl_cuda_stream(BE);
    cudaEvent_t   ev[257];
    float         ms[256];
    int           i;

    reps = reps < 256 ? reps : 256;
    for (i = 0; i < warm; i++) {
        fn(arg, i);
    }
    for (i = 0; i <= reps; i++) {
        check(cudaEventCreate(&ev[i]), "event");
    }
    check(cudaEventRecord(ev[0], st), "record");
    for (i = 0; i < reps; i++) {
        fn(arg, warm + i);
        check(cudaEventRecord(ev[i + 1], st), "record");
    }
    check(cudaEventSynchronize(ev[reps]), "sync");
    for (i = 0; i < reps; i++) {
        check(cudaEventElapsedTime(&ms[i], ev[i], ev[i + 1]), "elapsed");
    }
    for (i = 0; i <= reps; i++) {
        cudaEventDestroy(ev[i]);
    }
    return median(ms, reps) / 1e3;
}

#endif /* PL_BENCH_GPU_H */
