/*
 * cpu_backend: the portable reference backend.
 *
 * Memory is ordinary host memory (64-byte aligned, zeroed), uploads and
 * downloads are memcpy, and every operation runs synchronously on OpenMP
 * threads, so sync() has nothing to wait for.  Weights are used in place:
 * weight_load keeps the caller's pointer, usually into an mmap'ed
 * safetensors file.  This backend is the oracle the CUDA kernels are tested
 * against, so each operation favours plain, exact loops.
 */

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>

#include "cpu_ops.h"

#define PL_CPU_ALIGN  64


static void *
cpu_alloc(pl_backend_t *be, size_t bytes)
{
    size_t  rounded;
    void   *p;

    (void) be;
    if (bytes > SIZE_MAX - PL_CPU_ALIGN) {
        return NULL;
    }
    rounded = (bytes + PL_CPU_ALIGN - 1) / PL_CPU_ALIGN * PL_CPU_ALIGN;
    if (rounded == 0) {
        rounded = PL_CPU_ALIGN;
    }
    p = aligned_alloc(PL_CPU_ALIGN, rounded);
    if (p != NULL) {
        memset(p, 0, rounded);
    }
    return p;
}


static void
cpu_free(pl_backend_t *be, void *p)
{
    (void) be;
    free(p);
}


static void
cpu_copy(pl_backend_t *be, void *dst, const void *src, size_t bytes)
{
    (void) be;
    if (bytes > 0) {
        memcpy(dst, src, bytes);
    }
}


static void
cpu_sync(pl_backend_t *be)
{
    (void) be;
}


static void
cpu_destroy(pl_backend_t *be)
{
    if (be != NULL) {
        free(be->priv);
        free(be);
    }
}


static int
cpu_mem_info(pl_backend_t *be, size_t *free_bytes, size_t *total_bytes)
{
    struct sysinfo  si;

    (void) be;
    if (sysinfo(&si) != 0) {
        return -1;
    }
    *free_bytes = ((size_t) si.freeram + si.bufferram) * si.mem_unit;
    *total_bytes = (size_t) si.totalram * si.mem_unit;
    return 0;
}


static int
cpu_weight_load(pl_backend_t *be, pl_weight_t *w, const void *host)
{
    (void) be;
    w->data = (void *) host;
    return 0;
}


static const pl_batch_t *
cpu_batch_upload(pl_backend_t *be, const pl_batch_t *host)
{
    (void) be;
    return host;
}


static void
cpu_download_f32(pl_backend_t *be, float *dst, const void *src, size_t count)
{
    cpu_copy(be, dst, src, count * sizeof(float));
}


pl_backend_t *
pl_backend_cpu_create(int threads, char *err, size_t errlen)
{
    pl_backend_t  *be;
    pl_cpu_t      *cpu;

    if (threads < 0) {
        snprintf(err, errlen, "cpu backend: threads must be 0 (all cores) "
                 "or positive, not %d", threads);
        return NULL;
    }
    be = calloc(1, sizeof(*be));
    cpu = calloc(1, sizeof(*cpu));
    if (be == NULL || cpu == NULL) {
        free(be);
        free(cpu);
        snprintf(err, errlen, "cpu backend: out of memory");
        return NULL;
    }
    cpu->threads = threads > 0 ? threads : omp_get_num_procs();

    be->name = "cpu";
    be->act_dtype = PL_DT_F32;
    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->upload = cpu_copy;
    be->download = cpu_copy;
    be->sync = cpu_sync;
    be->destroy = cpu_destroy;
    be->mem_info = cpu_mem_info;
    be->weight_load = cpu_weight_load;
    be->batch_upload = cpu_batch_upload;
    be->embedding = pl_cpu_embedding;
    be->rmsnorm = pl_cpu_rmsnorm;
    be->add_rmsnorm = pl_cpu_add_rmsnorm;
    be->matmul = pl_cpu_matmul;
    be->qkv_rope_store = pl_cpu_qkv_rope_store;
    be->attention = pl_cpu_attention;
    be->silu_mul = pl_cpu_silu_mul;
    be->gather_rows = pl_cpu_gather_rows;
    be->download_f32 = cpu_download_f32;
    be->sample = pl_cpu_sample;
    be->layernorm = pl_cpu_layernorm;
    be->add = pl_cpu_add;
    be->relu = pl_cpu_relu;
    be->copy = cpu_copy;
    be->priv = cpu;
    return be;
}
