/*
 * pl_comm: collective operations between the ranks of a tensor-parallel
 * model, behind one interface.
 *
 * Each rank holds its own pl_comm_t and calls every collective from its
 * own thread, in the same order on every rank (a collective returns once
 * all ranks have reached it).  Buffers live in the rank's backend memory
 * and hold that backend's activations (be->act_dtype); operations run in
 * order with the rank's other backend work.
 *
 * Two implementations: the CPU one, for ranks that are threads of one
 * process sharing host memory (kernels/cpu/cpu_comm.c: shared pointers
 * and a barrier, sums in a fixed rank order so every rank gets the same
 * bits), and the NCCL one (kernels/nccl_comm.cu: one GPU per rank, on the
 * CUDA backend's stream, NVLink multicast kept off).
 */

#ifndef PL_COMM_H
#define PL_COMM_H

#include <stddef.h>

#include "pl_ops.h"

typedef struct pl_comm_s  pl_comm_t;

struct pl_comm_s {
    const char  *name;                  /* "cpu", "nccl" */
    int          rank;
    int          world;

    /* buf[count] = the sum over ranks of their buf[count], in place */
    int   (*all_reduce_sum)(pl_comm_t *c, void *buf, size_t count,
                            pl_dtype_t dt);

    /* out[world][count]: rank r's in[count] lands at out + r * count */
    int   (*all_gather)(pl_comm_t *c, void *out, const void *in,
                        size_t count, pl_dtype_t dt);

    /* returns once every rank has called it */
    int   (*barrier)(pl_comm_t *c);

    void  (*destroy)(pl_comm_t *c);

    void  *priv;
};

/*
 * The CPU communicators of world ranks that are threads of this process:
 * comms[world] share one state (freed with the last one destroyed).
 * 0, or -1 with err.
 */
int pl_comm_cpu_create(int world, pl_comm_t **comms, char *err,
    size_t errlen);

/* An NCCL unique id: made once, handed to every rank's create. */
typedef struct {
    unsigned char  bytes[128];
} pl_comm_id_t;

/*
 * NCCL (CUDA builds): pl_comm_nccl_id() once, then every rank calls
 * pl_comm_nccl_create() at the same time from its own thread, with its
 * CUDA backend (device = that rank's GPU).  Sets NCCL_NVLS_ENABLE=0 unless
 * the environment already sets it.  NULL or -1 with err.
 */
int pl_comm_nccl_id(pl_comm_id_t *id, char *err, size_t errlen);
pl_comm_t *pl_comm_nccl_create(const pl_comm_id_t *id, int rank, int world,
    pl_backend_t *be, char *err, size_t errlen);

#endif /* PL_COMM_H */
