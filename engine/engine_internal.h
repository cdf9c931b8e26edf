/*
 * engine_internal: the engine's state, shared by the files that make up
 * pagedllm-engine's loop: engine.c (the loop, connections, one
 * iteration, output), engine_start.c (start-up and shutdown),
 * engine_requests.c (submissions in: validation, admission, abort),
 * engine_beam.c (beam search's steps on the block tables) and
 * engine_costs.c (auto preemption's costs, measured at start).
 * Nothing outside the engine includes it; engine.h is the public face.
 */

#ifndef PL_ENGINE_INTERNAL_H
#define PL_ENGINE_INTERNAL_H

#include "block_manager.h"
#include "block_map.h"
#include "engine.h"
#include "ipc.h"
#include "pl_model.h"
#include "runner.h"
#include "sampler.h"
#include "scheduler.h"

#define PL_MAX_EVENTS        64
#define PL_ACCEPT_BATCH      (PL_IPC_MAX_PENDING / 2)
#define PL_IDLE_TIMEOUT_MS   PL_HEARTBEAT_MS
#define PL_MIB               (1024.0 * 1024.0)

_Static_assert(PL_MAX_SEQS == PL_SEQ_GROUP_MAX,
               "the protocol's n and best_of limit is the group's");


/* A beam's row of logits on the host, scored in parallel with the
   iteration's other beam rows. */
typedef struct {
    pl_seq_t                  *seq;
    int                        index;           /* its row in the batch */
    const float               *row;
} pl_beam_job_t;

typedef struct {
    pl_engine_config_t         cfg;
    pl_backend_t              *be;
    pl_model_t                *model;
    const pl_model_config_t   *mc;
    int                        max_model_len;
    int                        num_blocks;

    pl_block_manager_t         bm;
    pl_scheduler_t             sched;
    void                      *host_pool;       /* swapped-out KV blocks */
    pl_runner_t                runner;
    pl_sampler_t               sampler;
    pl_seq_t                 **draws;           /* sampler request i's */
    int32_t                   *tokens;          /* what it drew */
    pl_beam_job_t             *beam_jobs;       /* the iteration's beam rows */
    int                        host_row;        /* of host_row_data */
    const float               *host_row_data;
    pl_ipc_identity_t          identity;
    pl_grammar_cache_t         grammars;        /* structured outputs */

    int                        lfd;
    int                        sfd;
    int                        ep;
    pl_watch_t                 listen_watch;
    pl_watch_t                 signal_watch;
    int                        stop;

    pl_conn_t                 *conns;
    uint32_t                   next_worker_id;
    uint32_t                   evicted;         /* before hello, this pass */
    int                        spare_fd;        /* given up at EMFILE */
    int                        output_stuck;

    uint8_t                   *recbuf;
    uint32_t                   recbuf_cap;
    uint64_t                   arrivals;
    uint64_t                   seed_counter;

    pl_stats_t                 totals;

    size_t                     weight_bytes;    /* for the start-up log */
    size_t                     activation_bytes;
    size_t                     free_at_open;    /* device memory free when
                                                   the engine opened it */
    uint64_t                   summary_at;      /* the periodic log line */
    pl_stats_t                 summary_totals;  /* as it was then */
    pl_block_map_t             map;             /* the live block map */
} pl_engine_t;

/* engine_start.c */
int   pl_engine_start(pl_engine_t *e);
void  pl_engine_shutdown(pl_engine_t *e);
/* add fd to the loop's epoll set, events delivered with w */
int   pl_engine_watch(pl_engine_t *e, int fd, uint32_t events, pl_watch_t *w);

/* engine_costs.c */
/* fill e->sched.costs for auto preemption (given, or measured on blocks
   nobody holds yet); 0, or -1 when they cannot be measured */
int   pl_engine_preemption_costs(pl_engine_t *e);

/* engine_requests.c */
/* drain c's submission ring: SUBMIT admitted or rejected, ABORT applied */
void  pl_engine_drain(pl_engine_t *e, pl_conn_t *c);
/* fail with a 503 every request that has waited --max-queue-time for its
   first iteration */
void  pl_engine_expire_waiting(pl_engine_t *e);
/* end s with a finish reason, or with an error status and message */
void  pl_engine_finish(pl_engine_t *e, pl_seq_t *s, int reason);
void  pl_engine_fail(pl_engine_t *e, pl_seq_t *s, uint32_t status,
                     const char *msg);
/* take s off its connection's list of sequences */
void  pl_conn_unlink(pl_conn_t *c, pl_seq_t *s);

/* engine.c */
/* close a worker's connection, aborting its requests and freeing their
   blocks */
void  pl_engine_close(pl_engine_t *e, pl_conn_t *c);
/* row row of this iteration's logits on the host */
const float *pl_engine_host_row(pl_engine_t *e, const pl_logits_t *logits,
    int row);

/* engine_beam.c */
/* s, a new beam-search request (best_of is its width): its search state;
   0, or -1 when out of memory */
int   pl_engine_beam_init(pl_engine_t *e, pl_seq_t *s,
    const pl_rec_submit_t *r);
/* the iteration's rows of beam-search sequences (planned[i] ran as row
   i), and a step of every group that has all its rows */
void  pl_engine_beam_rows(pl_engine_t *e, pl_seq_t *const *planned, int n,
    const pl_logits_t *logits);

#endif /* PL_ENGINE_INTERNAL_H */
