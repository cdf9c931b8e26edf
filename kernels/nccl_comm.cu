/*
 * nccl_comm: the communicator for ranks that are GPUs of one host, one
 * thread per GPU in one process, over NCCL.
 *
 * Every collective is enqueued on the rank's CUDA backend stream, so it
 * runs in order with the model's kernels and the host never waits for it.
 * Ranks meet at creation through an NCCL unique id made once
 * (ncclGetUniqueId) and ncclCommInitRank called by all ranks at the same
 * time.  NVLink multicast (NVLS) stays off: NCCL_NVLS_ENABLE=0 is set
 * before the first communicator is made unless the environment sets it.
 *
 * Built when the CUDA toolkit ships NCCL (PL_HAVE_NCCL, set by the
 * Makefile); otherwise both entry points refuse with the reason.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pl_cuda.cuh"

extern "C" {
#include "pl_comm.h"
}

#ifdef PL_HAVE_NCCL

#include <nccl.h>

static_assert(sizeof(ncclUniqueId) <= sizeof(pl_comm_id_t),
              "pl_comm_id_t holds an ncclUniqueId");

typedef struct {
    ncclComm_t     comm;
    cudaStream_t   stream;
} pl_nccl_t;


static ncclDataType_t
nccl_type(pl_dtype_t dt)
{
    switch (dt) {
    case PL_DT_F16:
        return ncclFloat16;
    case PL_DT_BF16:
        return ncclBfloat16;
    default:
        return ncclFloat32;
    }
}


static pl_nccl_t *
nccl_of(pl_comm_t *c)
{
    return (pl_nccl_t *) c->priv;
}


static int
nccl_all_reduce_sum(pl_comm_t *c, void *buf, size_t count, pl_dtype_t dt)
{
    pl_nccl_t  *n = nccl_of(c);

    return ncclAllReduce(buf, buf, count, nccl_type(dt), ncclSum, n->comm,
                         n->stream) == ncclSuccess ? 0 : -1;
}


static int
nccl_all_gather(pl_comm_t *c, void *out, const void *in, size_t count,
    pl_dtype_t dt)
{
    pl_nccl_t  *n = nccl_of(c);

    return ncclAllGather(in, out, count, nccl_type(dt), n->comm, n->stream)
           == ncclSuccess ? 0 : -1;
}


/* an all-reduce of nothing meets every rank; then wait for it */
static int
nccl_barrier(pl_comm_t *c)
{
    pl_nccl_t  *n = nccl_of(c);

    if (ncclAllReduce(NULL, NULL, 0, ncclFloat32, ncclSum, n->comm,
                      n->stream) != ncclSuccess)
    {
        return -1;
    }
    return cudaStreamSynchronize(n->stream) == cudaSuccess ? 0 : -1;
}


static void
nccl_destroy(pl_comm_t *c)
{
    if (c == NULL) {
        return;
    }
    ncclCommDestroy(nccl_of(c)->comm);
    free(c->priv);
    free(c);
}


static void
nvls_off(void)
{
    setenv("NCCL_NVLS_ENABLE", "0", 0);
}


extern "C" int
pl_comm_nccl_id(pl_comm_id_t *id, char *err, size_t errlen)
{
    ncclUniqueId  uid;
    ncclResult_t  rc;

    nvls_off();
    rc = ncclGetUniqueId(&uid);
    if (rc != ncclSuccess) {
        snprintf(err, errlen, "nccl: cannot make a unique id: %s",
                 ncclGetErrorString(rc));
        return -1;
    }
    memset(id, 0, sizeof(*id));
    memcpy(id->bytes, &uid, sizeof(uid));
    return 0;
}


extern "C" pl_comm_t *
pl_comm_nccl_create(const pl_comm_id_t *id, int rank, int world,
    pl_backend_t *be, char *err, size_t errlen)
{
    pl_comm_t     *c = (pl_comm_t *) calloc(1, sizeof(pl_comm_t));
    pl_nccl_t     *n = (pl_nccl_t *) calloc(1, sizeof(pl_nccl_t));
    ncclUniqueId   uid;
    ncclResult_t   rc;

    if (c == NULL || n == NULL || strcmp(be->name, "cuda") != 0) {
        free(c);
        free(n);
        snprintf(err, errlen, "nccl: rank %d needs a cuda backend (and "
                 "memory)", rank);
        return NULL;
    }
    nvls_off();
    memcpy(&uid, id->bytes, sizeof(uid));
    n->stream = pl_cuda_stream(be);
    cudaSetDevice(pl_cuda(be)->device);
    rc = ncclCommInitRank(&n->comm, world, uid, rank);
    if (rc != ncclSuccess) {
        free(c);
        free(n);
        snprintf(err, errlen, "nccl: rank %d of %d cannot join: %s", rank,
                 world, ncclGetErrorString(rc));
        return NULL;
    }
    *c = (pl_comm_t) {
        .name = "nccl", .rank = rank, .world = world,
        .all_reduce_sum = nccl_all_reduce_sum,
        .all_gather = nccl_all_gather, .barrier = nccl_barrier,
        .destroy = nccl_destroy, .priv = n
    };
    return c;
}

#else /* !PL_HAVE_NCCL */

extern "C" int
pl_comm_nccl_id(pl_comm_id_t *id, char *err, size_t errlen)
{
    (void) id;
    snprintf(err, errlen, "this build has no NCCL (the CUDA toolkit at "
             "build time shipped no libnccl), so it cannot run tensor "
             "parallelism on GPUs");
    return -1;
}


extern "C" pl_comm_t *
pl_comm_nccl_create(const pl_comm_id_t *id, int rank, int world,
    pl_backend_t *be, char *err, size_t errlen)
{
    (void) id;
    (void) rank;
    (void) world;
    (void) be;
    pl_comm_nccl_id(NULL, err, errlen);
    return NULL;
}

#endif /* PL_HAVE_NCCL */
