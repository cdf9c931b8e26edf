/*
 * model_tp: a tensor-parallel model as world ranks, each a shard
 * (model_shard.h) on a backend of its own, driven by one thread per rank.
 * It sits above the single-rank model: the shards know only their
 * communicator, never this file.
 *
 * Rank 0 runs on the caller's thread with the caller's backend; ranks 1..
 * world-1 each own a thread that sleeps until the caller posts a job
 * (open a backend, join the communicator, load, prepare, allocate the KV
 * cache, run a batch, profile, free).  A call of the whole model posts
 * the job, runs rank 0's part itself, and waits for the others: the ranks
 * meet inside the job at the communicator's collectives, so every rank
 * must run every job.  A rank's backend and its CUDA device are only ever
 * used from that rank's thread.
 *
 * Backends and communicators follow rank 0's backend: the CPU gives each
 * further rank a one-thread CPU backend and the CPU communicator (ranks
 * sharing host memory); CUDA gives rank r device r and NCCL.
 */

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_tp.h"

#define PL_TP_ERR_LEN  512

typedef struct pl_tp_rank_s  pl_tp_rank_t;

typedef int (*pl_tp_job_t)(pl_tp_rank_t *r, void *arg);

struct pl_tp_rank_s {
    pl_tp_t       *tp;
    int            rank;
    pthread_t      thread;
    pl_backend_t  *be;
    int            own_be;          /* made here, destroyed here */
    pl_comm_t     *comm;
    pl_shard_t    *model;
    int            rc;
    char           err[PL_TP_ERR_LEN];
};

struct pl_tp_s {
    int               world;
    int               threads;      /* rank threads started */
    pl_tp_rank_t     *ranks;
    const char       *dir;
    pl_comm_id_t      nccl_id;

    pthread_mutex_t   lock;
    pthread_cond_t    go;
    pthread_cond_t    done;
    uint64_t          generation;   /* one more per posted job */
    int               busy;         /* rank threads still in the job */
    int               quit;
    pl_tp_job_t       job;
    void             *arg;
};


static void *
rank_main(void *p)
{
    pl_tp_rank_t  *r = p;
    pl_tp_t       *tp = r->tp;
    uint64_t       seen = 0;
    pl_tp_job_t    job;
    void          *arg;

    pthread_mutex_lock(&tp->lock);
    for ( ;; ) {
        while (tp->generation == seen && !tp->quit) {
            pthread_cond_wait(&tp->go, &tp->lock);
        }
        if (tp->quit) {
            break;
        }
        seen = tp->generation;
        job = tp->job;
        arg = tp->arg;
        pthread_mutex_unlock(&tp->lock);
        r->rc = job(r, arg);
        pthread_mutex_lock(&tp->lock);
        if (--tp->busy == 0) {
            pthread_cond_signal(&tp->done);
        }
    }
    pthread_mutex_unlock(&tp->lock);
    return NULL;
}


/* Run job on every rank (rank 0 here) and wait for all; 0, or -1 with
   the first failing rank's message. */
static int
run_all(pl_tp_t *tp, pl_tp_job_t job, void *arg, char *err, size_t errlen)
{
    int  r;

    pthread_mutex_lock(&tp->lock);
    tp->job = job;
    tp->arg = arg;
    tp->busy = tp->world - 1;
    tp->generation++;
    pthread_cond_broadcast(&tp->go);
    pthread_mutex_unlock(&tp->lock);

    tp->ranks[0].rc = job(&tp->ranks[0], arg);

    pthread_mutex_lock(&tp->lock);
    while (tp->busy > 0) {
        pthread_cond_wait(&tp->done, &tp->lock);
    }
    pthread_mutex_unlock(&tp->lock);

    for (r = 0; r < tp->world; r++) {
        if (tp->ranks[r].rc != 0) {
            if (r == 0) {
                snprintf(err, errlen, "%s", tp->ranks[0].err);
            } else {
                snprintf(err, errlen, "tensor parallel rank %d: %s", r,
                         tp->ranks[r].err);
            }
            return -1;
        }
    }
    return 0;
}


/* ---- jobs ---- */


/* a backend of rank 0's kind, with its activation dtype */
static int
job_open_backend(pl_tp_rank_t *r, void *arg)
{
    const char    *kind = arg;
    pl_backend_t  *be0 = r->tp->ranks[0].be;

    if (r->rank == 0) {
        return 0;
    }
    r->be = strcmp(kind, "cuda") == 0
            ? pl_backend_cuda_create(r->rank, r->err, sizeof(r->err))
            : pl_backend_cpu_create(1, r->err, sizeof(r->err));
    r->own_be = r->be != NULL;
    if (r->be == NULL) {
        return -1;
    }
    return r->be->set_act_dtype == NULL
           || r->be->act_dtype == be0->act_dtype
           || r->be->set_act_dtype(r->be, be0->act_dtype, r->err,
                                   sizeof(r->err)) == 0 ? 0 : -1;
}


static int
job_load(pl_tp_rank_t *r, void *arg)
{
    (void) arg;
    r->model = pl_shard_load(r->tp->dir, r->be, r->comm, r->err,
                             sizeof(r->err));
    return r->model != NULL ? 0 : -1;
}


static int
job_free(pl_tp_rank_t *r, void *arg)
{
    (void) arg;
    pl_shard_free(r->model);
    r->model = NULL;
    if (r->comm != NULL) {
        r->comm->destroy(r->comm);
        r->comm = NULL;
    }
    if (r->own_be) {
        r->be->destroy(r->be);
    }
    r->be = NULL;
    r->own_be = 0;
    return 0;
}


typedef struct {
    int  a;
    int  b;
} pl_tp_sizes_t;


static int
job_prepare(pl_tp_rank_t *r, void *arg)
{
    const pl_tp_sizes_t  *sz = arg;

    return pl_shard_prepare(r->model, sz->a, sz->b, r->err, sizeof(r->err));
}


static int
job_kv_alloc(pl_tp_rank_t *r, void *arg)
{
    const pl_tp_sizes_t  *sz = arg;

    return pl_shard_kv_alloc(r->model, sz->a, sz->b, r->err,
                             sizeof(r->err));
}


typedef struct {
    const pl_batch_t  *batch;
    float             *logits;
} pl_tp_forward_t;


static int
job_forward(pl_tp_rank_t *r, void *arg)
{
    const pl_tp_forward_t  *f = arg;

    return pl_shard_forward(r->model, f->batch, r->rank == 0 ? f->logits
                                                              : NULL,
                            r->err, sizeof(r->err));
}


typedef struct {
    const int32_t  *src;
    const int32_t  *dst;
    int             n;
} pl_tp_copy_t;


static int
job_kv_copy(pl_tp_rank_t *r, void *arg)
{
    const pl_tp_copy_t  *c = arg;

    if (pl_shard_kv_copy_blocks(r->model, c->src, c->dst, c->n) != 0) {
        snprintf(r->err, sizeof(r->err), "KV block copy failed");
        return -1;
    }
    return 0;
}


typedef struct {
    void           *host_pool;
    const int32_t  *from;
    const int32_t  *to;
    int             n;
    int             direction;
} pl_tp_swap_t;


static int
job_kv_swap(pl_tp_rank_t *r, void *arg)
{
    const pl_tp_swap_t  *s = arg;

    if (pl_shard_kv_swap(r->model, s->host_pool, r->tp->world, r->rank,
                         s->from, s->to, s->n, s->direction) != 0)
    {
        snprintf(r->err, sizeof(r->err), "KV block swap failed");
        return -1;
    }
    return 0;
}


typedef struct {
    int                  max_context;
    pl_model_profile_t  *prof;          /* rank 0's */
} pl_tp_profile_t;


static int
job_profile(pl_tp_rank_t *r, void *arg)
{
    const pl_tp_profile_t  *p = arg;
    pl_model_profile_t      mine;

    return pl_shard_profile(r->model, p->max_context,
                            r->rank == 0 ? p->prof : &mine, r->err,
                            sizeof(r->err));
}


/* ---- the group ---- */


static void
stop_threads(pl_tp_t *tp)
{
    int  r;

    pthread_mutex_lock(&tp->lock);
    tp->quit = 1;
    pthread_cond_broadcast(&tp->go);
    pthread_mutex_unlock(&tp->lock);
    for (r = 1; r <= tp->threads; r++) {
        pthread_join(tp->ranks[r].thread, NULL);
    }
}


void
pl_tp_free(pl_tp_t *tp)
{
    char  err[PL_TP_ERR_LEN];
    int   r;

    if (tp == NULL) {
        return;
    }
    if (tp->threads == tp->world - 1) {
        run_all(tp, job_free, NULL, err, sizeof(err));
    } else {
        for (r = 0; r < tp->world; r++) {
            job_free(&tp->ranks[r], NULL);
        }
    }
    stop_threads(tp);
    pthread_mutex_destroy(&tp->lock);
    pthread_cond_destroy(&tp->go);
    pthread_cond_destroy(&tp->done);
    free(tp->ranks);
    free(tp);
}


static pl_tp_t *
tp_create(const char *dir, pl_backend_t *be, int world)
{
    pl_tp_t  *tp = calloc(1, sizeof(*tp));
    int       r;

    if (tp == NULL) {
        return NULL;
    }
    tp->ranks = calloc(world, sizeof(pl_tp_rank_t));
    if (tp->ranks == NULL) {
        free(tp);
        return NULL;
    }
    tp->world = world;
    tp->dir = dir;
    for (r = 0; r < world; r++) {
        tp->ranks[r].tp = tp;
        tp->ranks[r].rank = r;
    }
    tp->ranks[0].be = be;
    pthread_mutex_init(&tp->lock, NULL);
    pthread_cond_init(&tp->go, NULL);
    pthread_cond_init(&tp->done, NULL);
    return tp;
}


static int
start_threads(pl_tp_t *tp, char *err, size_t errlen)
{
    int  r;

    for (r = 1; r < tp->world; r++) {
        if (pthread_create(&tp->ranks[r].thread, NULL, rank_main,
                           &tp->ranks[r]) != 0)
        {
            snprintf(err, errlen, "tensor parallel: cannot start the "
                     "thread of rank %d", r);
            return -1;
        }
        tp->threads = r;
    }
    return 0;
}


#ifdef PL_HAVE_CUDA

static int
job_join_nccl(pl_tp_rank_t *r, void *arg)
{
    (void) arg;
    r->comm = pl_comm_nccl_create(&r->tp->nccl_id, r->rank, r->tp->world,
                                  r->be, r->err, sizeof(r->err));
    return r->comm != NULL ? 0 : -1;
}


/* CUDA ranks join NCCL each from its own thread, all at once */
static int
connect_nccl(pl_tp_t *tp, char *err, size_t errlen)
{
    return pl_comm_nccl_id(&tp->nccl_id, err, errlen) != 0
           || run_all(tp, job_join_nccl, NULL, err, errlen) != 0 ? -1 : 0;
}

#else

static int
connect_nccl(pl_tp_t *tp, char *err, size_t errlen)
{
    (void) tp;
    snprintf(err, errlen, "this build has no CUDA backend");
    return -1;
}

#endif


/* CPU ranks share one communicator state made here */
static int
connect_ranks(pl_tp_t *tp, const char *kind, char *err, size_t errlen)
{
    pl_comm_t  **comms;
    int          r, rc;

    if (strcmp(kind, "cuda") == 0) {
        return connect_nccl(tp, err, errlen);
    }
    comms = calloc(tp->world, sizeof(pl_comm_t *));
    if (comms == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    rc = pl_comm_cpu_create(tp->world, comms, err, errlen);
    for (r = 0; rc == 0 && r < tp->world; r++) {
        tp->ranks[r].comm = comms[r];
    }
    free(comms);
    return rc;
}


pl_tp_t *
pl_tp_load(const char *dir, pl_backend_t *be, int world, char *err,
    size_t errlen)
{
    pl_tp_t  *tp;

    if (strcmp(be->name, "cpu") != 0 && strcmp(be->name, "cuda") != 0) {
        snprintf(err, errlen, "tensor parallelism runs on the cpu and cuda "
                 "backends, not %s", be->name);
        return NULL;
    }
    tp = tp_create(dir, be, world);
    if (tp == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (start_threads(tp, err, errlen) != 0
        || run_all(tp, job_open_backend, (void *) be->name, err, errlen)
           != 0
        || connect_ranks(tp, be->name, err, errlen) != 0
        || run_all(tp, job_load, NULL, err, errlen) != 0)
    {
        pl_tp_free(tp);
        return NULL;
    }
    return tp;
}


pl_shard_t *
pl_tp_rank0(pl_tp_t *tp)
{
    return tp->ranks[0].model;
}


int
pl_tp_prepare(pl_tp_t *tp, int max_tokens, int max_seqs, char *err,
    size_t errlen)
{
    pl_tp_sizes_t  sz = { max_tokens, max_seqs };

    return run_all(tp, job_prepare, &sz, err, errlen);
}


int
pl_tp_kv_alloc(pl_tp_t *tp, int num_blocks, int block_size, char *err,
    size_t errlen)
{
    pl_tp_sizes_t  sz = { num_blocks, block_size };

    return run_all(tp, job_kv_alloc, &sz, err, errlen);
}


int
pl_tp_forward(pl_tp_t *tp, const pl_batch_t *batch, float *logits,
    char *err, size_t errlen)
{
    pl_tp_forward_t  f = { batch, logits };

    return run_all(tp, job_forward, &f, err, errlen);
}


int
pl_tp_kv_copy_blocks(pl_tp_t *tp, const int32_t *src, const int32_t *dst,
    int n)
{
    pl_tp_copy_t  c = { src, dst, n };
    char          err[PL_TP_ERR_LEN];

    return run_all(tp, job_kv_copy, &c, err, sizeof(err));
}


int
pl_tp_kv_swap(pl_tp_t *tp, void *host_pool, const int32_t *from,
    const int32_t *to, int n, int direction)
{
    pl_tp_swap_t  sw = { host_pool, from, to, n, direction };
    char          err[PL_TP_ERR_LEN];

    return run_all(tp, job_kv_swap, &sw, err, sizeof(err));
}


int
pl_tp_profile(pl_tp_t *tp, int max_context, pl_model_profile_t *prof,
    char *err, size_t errlen)
{
    pl_tp_profile_t  p = { max_context, prof };

    return run_all(tp, job_profile, &p, err, errlen);
}


int
pl_tp_world(const pl_tp_t *tp)
{
    return tp->world;
}
