/*
 * cpu_comm: the communicator for ranks that are threads of one process,
 * their buffers all in host memory (the CPU backend's).
 *
 * A collective publishes each rank's pointer in a shared slot, waits at a
 * barrier until every rank has published, does its share of the work
 * straight on the other ranks' memory, and waits at the barrier again so
 * that nobody reuses a buffer another rank is still reading.  An
 * all-reduce splits the elements into one chunk per rank; the rank that
 * owns an element adds the ranks' values in rank order (0, 1, ...) in
 * fp32 and writes the one result to every rank, so all ranks hold the
 * same bits and a run is reproducible.
 */

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pl_comm.h"

typedef struct {
    int                 world;
    atomic_int          refs;
    pthread_barrier_t   barrier;
    void              **bufs;           /* [world] published per call */
    const void        **ins;
} pl_cpu_comm_shared_t;


static void
comm_wait(pl_cpu_comm_shared_t *sh)
{
    pthread_barrier_wait(&sh->barrier);
}


static float
load_f32(const void *p, size_t i, pl_dtype_t dt)
{
    switch (dt) {
    case PL_DT_F16:
        return pl_f16_to_f32(((const uint16_t *) p)[i]);
    case PL_DT_BF16:
        return pl_bf16_to_f32(((const uint16_t *) p)[i]);
    default:
        return ((const float *) p)[i];
    }
}


static void
store_f32(void *p, size_t i, pl_dtype_t dt, float v)
{
    switch (dt) {
    case PL_DT_F16:
        ((uint16_t *) p)[i] = pl_f32_to_f16(v);
        break;
    case PL_DT_BF16:
        ((uint16_t *) p)[i] = pl_f32_to_bf16(v);
        break;
    default:
        ((float *) p)[i] = v;
    }
}


/* elements [lo, hi) of every rank's buffer := their sum in rank order */
static void
reduce_chunk(void **bufs, int world, size_t lo, size_t hi, pl_dtype_t dt)
{
    size_t  i;
    float   sum;
    int     r;

    for (i = lo; i < hi; i++) {
        sum = load_f32(bufs[0], i, dt);
        for (r = 1; r < world; r++) {
            sum += load_f32(bufs[r], i, dt);
        }
        for (r = 0; r < world; r++) {
            store_f32(bufs[r], i, dt, sum);
        }
    }
}


static int
cpu_all_reduce_sum(pl_comm_t *c, void *buf, size_t count, pl_dtype_t dt)
{
    pl_cpu_comm_shared_t  *sh = c->priv;
    size_t                 lo = count * c->rank / c->world;
    size_t                 hi = count * (c->rank + 1) / c->world;

    sh->bufs[c->rank] = buf;
    comm_wait(sh);
    reduce_chunk(sh->bufs, c->world, lo, hi, dt);
    comm_wait(sh);
    return 0;
}


static int
cpu_all_gather(pl_comm_t *c, void *out, const void *in, size_t count,
    pl_dtype_t dt)
{
    pl_cpu_comm_shared_t  *sh = c->priv;
    size_t                 bytes = count * pl_dtype_size(dt);
    int                    r;

    sh->ins[c->rank] = in;
    comm_wait(sh);
    for (r = 0; r < c->world; r++) {
        if (bytes > 0 && (uint8_t *) out + r * bytes != sh->ins[r]) {
            memcpy((uint8_t *) out + r * bytes, sh->ins[r], bytes);
        }
    }
    comm_wait(sh);
    return 0;
}


static int
cpu_barrier(pl_comm_t *c)
{
    comm_wait(c->priv);
    return 0;
}


static void
shared_release(pl_cpu_comm_shared_t *sh)
{
    if (atomic_fetch_sub(&sh->refs, 1) != 1) {
        return;
    }
    pthread_barrier_destroy(&sh->barrier);
    free(sh->bufs);
    free(sh->ins);
    free(sh);
}


static void
cpu_comm_destroy(pl_comm_t *c)
{
    if (c != NULL) {
        shared_release(c->priv);
        free(c);
    }
}


static pl_cpu_comm_shared_t *
shared_create(int world)
{
    pl_cpu_comm_shared_t  *sh = calloc(1, sizeof(*sh));

    if (sh == NULL) {
        return NULL;
    }
    sh->world = world;
    sh->bufs = calloc(world, sizeof(void *));
    sh->ins = calloc(world, sizeof(void *));
    if (sh->bufs == NULL || sh->ins == NULL
        || pthread_barrier_init(&sh->barrier, NULL, world) != 0)
    {
        free(sh->bufs);
        free(sh->ins);
        free(sh);
        return NULL;
    }
    atomic_init(&sh->refs, 0);
    return sh;
}


int
pl_comm_cpu_create(int world, pl_comm_t **comms, char *err, size_t errlen)
{
    pl_cpu_comm_shared_t  *sh;
    int                    r;

    if (world < 1) {
        snprintf(err, errlen, "cpu communicator: %d ranks", world);
        return -1;
    }
    sh = shared_create(world);
    if (sh == NULL) {
        snprintf(err, errlen, "cpu communicator: out of memory");
        return -1;
    }
    atomic_store(&sh->refs, world);
    for (r = 0; r < world; r++) {
        comms[r] = calloc(1, sizeof(pl_comm_t));
        if (comms[r] == NULL) {
            atomic_store(&sh->refs, r + 1);
            while (r-- > 0) {
                cpu_comm_destroy(comms[r]);
            }
            shared_release(sh);
            snprintf(err, errlen, "cpu communicator: out of memory");
            return -1;
        }
        *comms[r] = (pl_comm_t) {
            .name = "cpu", .rank = r, .world = world,
            .all_reduce_sum = cpu_all_reduce_sum,
            .all_gather = cpu_all_gather, .barrier = cpu_barrier,
            .destroy = cpu_comm_destroy, .priv = sh
        };
    }
    return 0;
}
