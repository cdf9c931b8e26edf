/*
 * engine: the loop that owns the model, the KV cache and every request.
 *
 * One thread, one epoll set: the listening socket, a signalfd, every
 * worker's socket (EOF = the worker is gone) and every worker's submission
 * doorbell.  A pass of the loop:
 *
 *   1. wait for events: not at all while there is work to run, briefly
 *      while output is stuck behind a full completion ring, else up to
 *      200 ms so the published counters stay fresh when idle;
 *   2. accept and attach workers, note the ones that went away;
 *   3. drain every submission ring: SUBMIT becomes a sequence in the
 *      scheduler (or an ERROR + FINISH when it is invalid), ABORT removes
 *      its sequences and frees their blocks at once;
 *   4. close the connections found dead or corrupt, freeing their
 *      requests' blocks;
 *   5. plan one iteration, execute the KV block moves it needs (copies,
 *      swaps), run the model once for the whole batch, sample a token for
 *      every sequence whose tokens are all computed (one sampling call
 *      on the backend for all of them; only the token ids, and the rows
 *      whose log-probabilities are asked for, come to the host), and
 *      check the stop conditions;
 *   6. write each worker's pending TOKENS / FINISH records, ringing its
 *      doorbell at most once; what does not fit stays with the sequence
 *      (n_sent, finish_sent) and is retried next pass, so a full ring
 *      never stalls the batch;
 *   7. publish the counters into every region.
 *
 * Connections are only ever closed in step 4, so no sequence disappears
 * between planning an iteration and sampling its result.
 *
 * Parallel sampling: a request with n (or best_of) > 1 is one sequence
 * until its prompt has run; at its first sample it forks into best_of
 * members sharing the prompt's blocks, each drawing its first token from
 * the same logits with its own random stream, then sampling, stopping
 * and freeing its blocks on its own.  The request is over when all have
 * finished.  With best_of > n nothing is sent until then: the n members
 * with the highest cumulative log-probability go out as choices 0..n-1.
 */

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "block_manager.h"
#include "engine.h"
#include "ipc.h"
#include "pl_model.h"
#include "pl_params.h"
#include "runner.h"
#include "sampler.h"
#include "scheduler.h"

#define PL_MAX_EVENTS        64
#define PL_IDLE_TIMEOUT_MS   200
#define PL_MAX_QUEUED        65536
#define PL_MIB               (1024.0 * 1024.0)

_Static_assert(PL_MAX_SEQS == PL_SEQ_GROUP_MAX,
               "the protocol's n and best_of limit is the group's");

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
    int                        host_row;        /* of host_row_data */
    const float               *host_row_data;
    pl_ipc_identity_t          identity;

    int                        lfd;
    int                        sfd;
    int                        ep;
    pl_watch_t                 listen_watch;
    pl_watch_t                 signal_watch;
    int                        stop;

    pl_conn_t                 *conns;
    uint32_t                   next_worker_id;
    int                        output_stuck;

    uint8_t                   *recbuf;
    uint32_t                   recbuf_cap;
    uint64_t                   arrivals;
    uint64_t                   seed_counter;

    pl_stats_t                 totals;
} pl_engine_t;

pl_log_level_t  pl_log_level = PL_LOG_INFO;


void
pl_log(pl_log_level_t level, const char *fmt, ...)
{
    static const char  *names[] = { "error", "warn", "info", "debug" };
    struct timespec     ts;
    struct tm           tm;
    char                when[32];
    va_list             ap;

    if (level > pl_log_level) {
        return;
    }

    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);

    fprintf(stderr, "%s.%03ld [%s] ", when, ts.tv_nsec / 1000000,
            names[level]);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}


void
pl_engine_config_defaults(pl_engine_config_t *cfg)
{
    *cfg = (pl_engine_config_t) {
        .device = "auto",
        .block_size = 16,
        .kv_cache_mb = 512,
        .gpu_memory_utilization = 0.90,
        .max_num_seqs = 256,
        .max_num_batched_tokens = 2048,
        .socket_mode = 0660,
        .prefix_caching = 1,
        .preemption_mode = PL_PREEMPT_RECOMPUTE,
        .swap_space_mb = 1024,
        .kv_policy = PL_KV_PAGED,
    };
}


/* ---- start-up ---- */


static int
pl_engine_open_backend(pl_engine_t *e)
{
    const char  *dev = e->cfg.device;
    char         err[512];

    if (strcmp(dev, "auto") == 0) {
        dev = pl_cuda_available() ? "cuda" : "cpu";
    }

    e->be = strcmp(dev, "cuda") == 0
            ? pl_backend_cuda_create(0, err, sizeof(err))
            : pl_backend_cpu_create(e->cfg.threads, err, sizeof(err));

    if (e->be == NULL) {
        pl_log(PL_LOG_ERROR, "device %s: %s", dev, err);
        return -1;
    }

    snprintf(e->totals.device, sizeof(e->totals.device), "%s", e->be->name);
    pl_log(PL_LOG_INFO, "device: %s%s", e->be->name,
           strcmp(e->cfg.device, "auto") == 0 ? " (auto)" : "");

    return 0;
}


static int
pl_engine_load_model(pl_engine_t *e)
{
    char  err[512];

    pl_log(PL_LOG_INFO, "model: %s", e->cfg.model_dir);

    e->model = pl_model_load(e->cfg.model_dir, e->be, err, sizeof(err));
    if (e->model == NULL) {
        pl_log(PL_LOG_ERROR, "loading the model: %s", err);
        return -1;
    }

    e->mc = pl_model_config(e->model);
    if (e->cfg.enforce_eager) {
        pl_model_set_decode_mode(e->model, PL_DECODE_EAGER);
        pl_log(PL_LOG_INFO, "decode iterations run eagerly "
               "(--enforce-eager)");
    }
    pl_log(PL_LOG_INFO, "architecture: %s, %d layers, hidden %d, %d heads "
           "(%d kv), vocab %d, %s weights, %s activations", e->mc->arch,
           e->mc->num_layers, e->mc->hidden_size, e->mc->num_heads,
           e->mc->num_kv_heads, e->mc->vocab_size,
           pl_dtype_name(e->mc->dtype), pl_dtype_name(e->be->act_dtype));
    pl_log(PL_LOG_INFO, "weights loaded");

    if (pl_model_prepare(e->model, e->cfg.max_num_batched_tokens,
                         e->cfg.max_num_seqs, err, sizeof(err)) != 0)
    {
        pl_log(PL_LOG_ERROR, "activation memory: %s", err);
        return -1;
    }

    return 0;
}


/*
 * Bytes of the GPU the KV cache may take: --gpu-memory-utilization of the
 * card, minus everything in use after a profiling run of the largest
 * batch the scheduler may plan (weights, activation scratch, workspaces
 * and whatever else the backend makes on first use) but the run's own
 * temporary cache, minus room for the decode graphs recorded later (one
 * measured, times the shapes possible).  0, or -1 when it cannot be
 * measured.
 */
static int
pl_engine_gpu_budget(pl_engine_t *e, double *budget)
{
    pl_model_profile_t  prof;
    size_t              free_b, total_b;
    double              in_use, graphs;
    char                err[512];

    if (pl_model_profile(e->model, e->cfg.block_size, e->max_model_len,
                         &prof, err, sizeof(err)) != 0)
    {
        pl_log(PL_LOG_ERROR, "profiling run: %s", err);
        return -1;
    }
    if (e->be->mem_info(e->be, &free_b, &total_b) != 0) {
        pl_log(PL_LOG_ERROR, "cannot read the device's free memory");
        return -1;
    }

    in_use = (double) (total_b - free_b) - (double) prof.kv_bytes;
    graphs = (double) prof.graph_bytes * prof.graph_shapes;

    pl_log(PL_LOG_INFO, "profiling run of %d tokens in %d sequences: "
           "%.0f MiB of the device's %.0f MiB in use after it",
           prof.tokens, prof.seqs, in_use / PL_MIB,
           (double) total_b / PL_MIB);
    if (prof.graph_shapes > 0) {
        pl_log(PL_LOG_INFO, "decode graphs: up to %d shapes, recorded when "
               "first used; one took %.1f MiB, %.1f MiB kept for them",
               prof.graph_shapes, (double) prof.graph_bytes / PL_MIB,
               graphs / PL_MIB);
    }

    *budget = e->cfg.gpu_memory_utilization * (double) total_b - in_use
              - graphs;

    return 0;
}


/* Blocks the memory budget allows, or -1; at most what int32 slot
   numbers can address. */
static int
pl_engine_kv_budget(pl_engine_t *e, size_t block_bytes)
{
    double  max = (double) (INT32_MAX / e->cfg.block_size);
    double  budget;

    if (e->cfg.num_blocks > 0) {
        budget = (double) e->cfg.num_blocks * block_bytes;

    } else if (strcmp(e->be->name, "cuda") != 0) {
        budget = (double) e->cfg.kv_cache_mb * PL_MIB;

    } else if (pl_engine_gpu_budget(e, &budget) != 0) {
        return -1;
    }

    budget = budget > 0 ? budget / block_bytes : 0;

    return (int) (budget < max ? budget : max);
}


static int
pl_engine_size_kv(pl_engine_t *e)
{
    size_t  block_bytes = pl_model_kv_block_bytes(e->model,
                                                  e->cfg.block_size);
    char    err[512];
    int     tokens;

    e->num_blocks = pl_engine_kv_budget(e, block_bytes);
    if (e->num_blocks < 0) {
        return -1;
    }
    if (e->num_blocks == 0) {
        pl_log(PL_LOG_ERROR, "no memory left for the KV cache (a block of "
               "%d tokens takes %zu bytes)", e->cfg.block_size, block_bytes);
        return -1;
    }

    tokens = e->num_blocks * e->cfg.block_size;

    if (tokens < e->max_model_len) {
        if (e->cfg.max_model_len > 0) {
            pl_log(PL_LOG_ERROR, "--max-model-len %d does not fit the KV "
                   "cache of %d tokens", e->max_model_len, tokens);
            return -1;
        }
        pl_log(PL_LOG_WARN, "max_model_len lowered from %d to the KV "
               "cache's %d tokens", e->max_model_len, tokens);
        e->max_model_len = tokens;
    }

    if (pl_model_kv_alloc(e->model, e->num_blocks, e->cfg.block_size, err,
                          sizeof(err)) != 0)
    {
        pl_log(PL_LOG_ERROR, "allocating the KV cache: %s", err);
        return -1;
    }

    pl_log(PL_LOG_INFO, "KV cache: %d blocks of %d tokens = %d tokens "
           "(%.1f MiB); max_model_len %d", e->num_blocks, e->cfg.block_size,
           tokens, (double) block_bytes * e->num_blocks / PL_MIB,
           e->max_model_len);

    return 0;
}


static int
pl_engine_check_limits(pl_engine_t *e)
{
    e->max_model_len = e->cfg.max_model_len > 0
                       ? e->cfg.max_model_len
                       : e->mc->max_position_embeddings;

    if (e->max_model_len > e->mc->max_position_embeddings) {
        pl_log(PL_LOG_ERROR, "--max-model-len %d exceeds the model's "
               "max_position_embeddings %d", e->max_model_len,
               e->mc->max_position_embeddings);
        return -1;
    }

    if (e->cfg.max_num_batched_tokens < e->cfg.max_num_seqs) {
        pl_log(PL_LOG_ERROR, "--max-num-batched-tokens %d must be at least "
               "--max-num-seqs %d", e->cfg.max_num_batched_tokens,
               e->cfg.max_num_seqs);
        return -1;
    }

    return 0;
}


static void
pl_engine_model_name(pl_engine_t *e, char *out, size_t len)
{
    const char  *dir = e->cfg.model_dir, *end, *start;

    if (e->cfg.served_model_name) {
        snprintf(out, len, "%s", e->cfg.served_model_name);
        return;
    }

    end = dir + strlen(dir);
    while (end > dir + 1 && end[-1] == '/') {
        end--;
    }
    start = end;
    while (start > dir && start[-1] != '/') {
        start--;
    }

    snprintf(out, len, "%.*s", (int) (end - start), start);
}


static int
pl_engine_tokenizer(pl_engine_t *e, pl_ipc_identity_t *id)
{
    char     path[PATH_MAX], real[PATH_MAX];
    FILE    *f;
    char    *data;
    long     size;

    snprintf(path, sizeof(path), "%s/tokenizer.json", e->cfg.model_dir);

    if (realpath(path, real) == NULL || strlen(real) >= PL_PATH_LEN
        || (f = fopen(real, "rb")) == NULL)
    {
        pl_log(PL_LOG_ERROR, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }

    fseek(f, 0, SEEK_END);
    size = ftell(f);
    rewind(f);
    data = malloc(size > 0 ? (size_t) size : 1);

    if (size <= 0 || data == NULL || fread(data, 1, size, f) != (size_t) size)
    {
        pl_log(PL_LOG_ERROR, "cannot read %s", real);
        free(data);
        fclose(f);
        return -1;
    }

    id->tokenizer_hash = pl_fnv1a64(data, (size_t) size);
    memcpy(id->tokenizer_path, real, strlen(real) + 1);
    free(data);
    fclose(f);

    pl_log(PL_LOG_INFO, "tokenizer: %s (fnv1a64 %016llx)", real,
           (unsigned long long) id->tokenizer_hash);

    return 0;
}


static int
pl_engine_identity(pl_engine_t *e)
{
    pl_ipc_identity_t  *id = &e->identity;
    int                 i;

    memset(id, 0, sizeof(*id));
    pl_engine_model_name(e, id->model_name, sizeof(id->model_name));
    id->vocab_size = (uint32_t) e->mc->vocab_size;
    id->max_model_len = (uint32_t) e->max_model_len;
    id->bos_id = e->mc->bos_token_id;
    id->n_eos = e->mc->n_eos < PL_MAX_EOS ? (uint32_t) e->mc->n_eos
                                          : PL_MAX_EOS;
    for (i = 0; i < (int) id->n_eos; i++) {
        id->eos_ids[i] = e->mc->eos_token_ids[i];
    }
    id->default_temperature = e->mc->default_temperature;
    id->default_top_p = e->mc->default_top_p;
    id->default_top_k = e->mc->default_top_k;

    pl_log(PL_LOG_INFO, "served model name: %s", id->model_name);

    return pl_engine_tokenizer(e, id);
}


/* The block manager's prefix cache and, in swap mode, its host pool
   (pinned where the backend can). */
static int
pl_engine_kv_manager(pl_engine_t *e)
{
    size_t  block_bytes = pl_model_kv_block_bytes(e->model, e->cfg.block_size)
                          * pl_model_tp_size(e->model);
    size_t  n = 0;

    if (e->cfg.prefix_caching && pl_bm_enable_caching(&e->bm) != 0) {
        pl_log(PL_LOG_ERROR, "out of memory for the prefix cache");
        return -1;
    }

    if (e->cfg.preemption_mode == PL_PREEMPT_SWAP) {
        n = (size_t) e->cfg.swap_space_mb * 1024 * 1024 / block_bytes;
        n = n < (size_t) INT32_MAX ? n : (size_t) INT32_MAX;
        e->host_pool = n == 0 ? NULL
                       : e->be->alloc_host ? e->be->alloc_host(e->be,
                                                               n * block_bytes)
                       : malloc(n * block_bytes);
        if (e->host_pool == NULL || pl_bm_init_host(&e->bm, (int) n) != 0) {
            pl_log(PL_LOG_ERROR, "cannot allocate a swap space of %d MiB "
                   "(blocks of %zu bytes)", e->cfg.swap_space_mb,
                   block_bytes);
            return -1;
        }
    }

    e->sched.preemption_mode = (pl_preempt_mode_t) e->cfg.preemption_mode;
    e->sched.policy = (pl_kv_policy_t) e->cfg.kv_policy;
    e->sched.max_model_len = e->max_model_len;

    pl_log(PL_LOG_INFO, "prefix caching %s; preemption by %s; swap space "
           "%zu blocks; KV policy %d", e->cfg.prefix_caching ? "on" : "off",
           n ? "swap" : "recompute", n, e->cfg.kv_policy);

    return 0;
}


/* Room for the most draws one iteration makes: every planned sequence
   forking into a whole group. */
static int
pl_engine_init_draws(pl_engine_t *e)
{
    size_t  n = (size_t) e->cfg.max_num_seqs * PL_SEQ_GROUP_MAX;

    e->draws = malloc(n * sizeof(pl_seq_t *));
    e->tokens = malloc(n * sizeof(int32_t));

    return e->draws && e->tokens ? 0 : -1;
}


static int
pl_engine_init_parts(pl_engine_t *e)
{
    int  max_blocks = pl_bm_blocks_for(&e->bm, e->max_model_len);

    if (pl_sched_init(&e->sched, &e->bm, e->cfg.max_num_seqs,
                      e->cfg.max_num_batched_tokens) != 0
        || pl_runner_init(&e->runner, e->cfg.max_num_batched_tokens,
                          e->cfg.max_num_seqs, max_blocks,
                          e->mc->vocab_size) != 0
        || pl_sampler_init(&e->sampler, e->mc->vocab_size) != 0
        || pl_engine_init_draws(e) != 0)
    {
        pl_log(PL_LOG_ERROR, "out of memory setting up the engine");
        return -1;
    }

    if (pl_engine_kv_manager(e) != 0) {
        return -1;
    }

    pl_sampler_set_eos(&e->sampler, e->identity.eos_ids,
                       (int) e->identity.n_eos);

    e->recbuf_cap = PL_IPC_RING_SIZE;
    e->recbuf = malloc(e->recbuf_cap);

    return e->recbuf ? 0 : -1;
}


static int
pl_engine_watch(pl_engine_t *e, int fd, uint32_t events, pl_watch_t *w)
{
    struct epoll_event  ev = { .events = events, .data.ptr = w };

    return epoll_ctl(e->ep, EPOLL_CTL_ADD, fd, &ev);
}


static int
pl_engine_listen(pl_engine_t *e)
{
    char      err[512];
    sigset_t  sigs;

    e->lfd = pl_ipc_listen(e->cfg.listen_path, e->cfg.socket_mode, err,
                           sizeof(err));
    if (e->lfd < 0) {
        pl_log(PL_LOG_ERROR, "listen: %s", err);
        return -1;
    }

    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);

    e->sfd = signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC);
    e->ep = epoll_create1(EPOLL_CLOEXEC);
    e->listen_watch.kind = PL_WATCH_LISTEN;
    e->signal_watch.kind = PL_WATCH_SIGNAL;

    if (e->sfd < 0 || e->ep < 0
        || pl_engine_watch(e, e->lfd, EPOLLIN, &e->listen_watch) != 0
        || pl_engine_watch(e, e->sfd, EPOLLIN, &e->signal_watch) != 0)
    {
        pl_log(PL_LOG_ERROR, "epoll/signalfd: %s", strerror(errno));
        return -1;
    }

    pl_log(PL_LOG_INFO, "listening on %s (mode %04o)", e->cfg.listen_path,
           e->cfg.socket_mode);

    return 0;
}


static int
pl_engine_start(pl_engine_t *e)
{
    if (pl_engine_open_backend(e) != 0 || pl_engine_load_model(e) != 0
        || pl_engine_check_limits(e) != 0 || pl_engine_size_kv(e) != 0
        || pl_bm_init(&e->bm, e->num_blocks, e->cfg.block_size) != 0
        || pl_engine_identity(e) != 0 || pl_engine_init_parts(e) != 0)
    {
        return -1;
    }

    e->seed_counter = 0x5eed;
    e->totals.kv_blocks_total = (uint32_t) e->num_blocks;
    e->totals.block_size = (uint32_t) e->cfg.block_size;

    return pl_engine_listen(e);
}


/* ---- requests ---- */


static void
pl_conn_append(pl_conn_t *c, pl_seq_t *s)
{
    s->conn = c;
    s->conn_prev = c->seqs_tail;
    s->conn_next = NULL;

    if (c->seqs_tail) {
        c->seqs_tail->conn_next = s;
    } else {
        c->seqs_head = s;
    }
    c->seqs_tail = s;
}


static void
pl_conn_unlink(pl_conn_t *c, pl_seq_t *s)
{
    if (s->conn_prev) {
        s->conn_prev->conn_next = s->conn_next;
    } else {
        c->seqs_head = s->conn_next;
    }

    if (s->conn_next) {
        s->conn_next->conn_prev = s->conn_prev;
    } else {
        c->seqs_tail = s->conn_prev;
    }
}


/* best_of > n: the n members with the highest cumulative logprob (the
   lower index on ties) become choices 0..n-1. */
static void
pl_engine_rank(pl_seq_t *l)
{
    pl_seq_t  *m;
    int        i, j, rank;

    for (i = 0; i < l->n_members; i++) {
        m = l->members[i];
        rank = 0;
        for (j = 0; j < l->n_members; j++) {
            if (l->members[j]->cum_logprob > m->cum_logprob
                || (l->members[j]->cum_logprob == m->cum_logprob && j < i))
            {
                rank++;
            }
        }
        m->out_index = rank < l->n_return ? rank : -1;
    }
}


/* End sequence s: out of the scheduler (blocks freed); once its whole
   group has ended, the request leaves the live index.  Its remaining
   output and FINISH go out with the next flush. */
static void
pl_engine_finish(pl_engine_t *e, pl_seq_t *s, int reason)
{
    pl_seq_t  *l = s->leader;

    if (s->state != PL_SEQ_FINISHED) {
        pl_sched_remove(&e->sched, s);
    }

    if (s->finish_reason != 0) {
        return;
    }

    s->finish_reason = reason;
    if (reason == PL_FINISH_ABORT || reason == PL_FINISH_ERROR) {
        l->fail_reason = l->fail_reason ? l->fail_reason : reason;
    }

    if (++l->n_finished == l->n_members) {
        pl_seq_index_remove(&l->conn->live, l);
        if (l->best_of > l->n_return && l->fail_reason == 0) {
            pl_engine_rank(l);
        }
    }
}


/* End every member of s's request that is still running with reason. */
static void
pl_engine_end_group(pl_engine_t *e, pl_seq_t *s, int reason)
{
    pl_seq_t  *l = s->leader;
    int        i;

    for (i = 0; i < l->n_members; i++) {
        pl_engine_finish(e, l->members[i], reason);
    }
}


static void
pl_engine_fail(pl_engine_t *e, pl_seq_t *s, uint32_t status, const char *msg)
{
    pl_seq_t  *l = s->leader;

    if (l->error == NULL) {
        l->error = strdup(msg);
        l->error_status = status;
    }
    pl_engine_end_group(e, s, PL_FINISH_ERROR);
}


/* The value of parameter id in a SUBMIT. */
static double
pl_engine_param_value(const pl_rec_submit_t *r, pl_param_id_t id)
{
#define PL_ENGINE_PARAM_VALUE(name, ...)                                    \
    case PL_P_##name:                                                       \
        return (double) r->name;

    switch (id) {
    PL_PARAMS(PL_ENGINE_PARAM_VALUE)
    default:
        return NAN;
    }

#undef PL_ENGINE_PARAM_VALUE
}


/* Every parameter of PL_PARAMS within its range (0 where that is "off"),
   or what is wrong. */
static const char *
pl_engine_check_params(pl_engine_t *e, const pl_rec_submit_t *r, char *buf,
    size_t len)
{
    int                id;
    double             v;
    const pl_param_t  *p;

    for (id = 0; id < PL_P_COUNT; id++) {
        p = pl_param(id);
        v = pl_engine_param_value(r, id);

        if ((p->zero_off && v == 0)
            || pl_param_in_range(p, v, e->max_model_len, e->mc->vocab_size))
        {
            continue;
        }

        snprintf(buf, len, "%s must be in %s%g, %g]%s, got %g", p->name,
                 p->open_lo ? "(" : "[", p->lo,
                 pl_param_hi(p, e->max_model_len, e->mc->vocab_size),
                 p->zero_off ? " or 0" : "", v);
        return buf;
    }

    return NULL;
}


/* The SUBMIT's sampling values, or NULL when they are all fine. */
static const char *
pl_engine_check_sampling(pl_engine_t *e, const pl_ipc_msg_t *m, char *buf,
    size_t len)
{
    const pl_rec_submit_t  *r = &m->submit;
    const char             *why;
    uint32_t                i;

    why = pl_engine_check_params(e, r, buf, len);
    if (why) {
        return why;
    }
    if (r->min_tokens > r->max_tokens) {
        return "min_tokens must not exceed max_tokens";
    }

    for (i = 0; i < r->n_logit_bias; i++) {
        if (m->bias[i].id < 0 || m->bias[i].id >= e->mc->vocab_size) {
            snprintf(buf, len, "logit_bias token %d is outside the "
                     "vocabulary", m->bias[i].id);
            return buf;
        }
        if (!(m->bias[i].bias >= PL_PARAM_BIAS_LO
              && m->bias[i].bias <= PL_PARAM_BIAS_HI))
        {
            snprintf(buf, len, "logit_bias values must be in [%d, %d]",
                     PL_PARAM_BIAS_LO, PL_PARAM_BIAS_HI);
            return buf;
        }
    }

    for (i = 0; i < r->n_stop_ids; i++) {
        if (m->stop_ids[i] < 0 || m->stop_ids[i] >= e->mc->vocab_size) {
            snprintf(buf, len, "stop token %d is outside the vocabulary",
                     m->stop_ids[i]);
            return buf;
        }
    }

    return NULL;
}


/* Whether the queue has room and req_id is free on c. */
static const char *
pl_engine_check_room(pl_engine_t *e, pl_conn_t *c, uint64_t req_id,
    char *buf, size_t len, uint32_t *status)
{
    if (pl_seq_index_find(&c->live, req_id)) {
        snprintf(buf, len, "request id %llu is already in flight",
                 (unsigned long long) req_id);
        return buf;
    }
    if (e->sched.waiting.n >= PL_MAX_QUEUED) {
        *status = 503;
        return "the engine's queue is full";
    }

    return NULL;
}


/* n and best_of (0: the default) within their limits, and the whole
   group, each member at its longest, within the KV cache (so the oldest
   group can always finish). */
static const char *
pl_engine_check_group(pl_engine_t *e, const pl_rec_submit_t *r, char *buf,
    size_t len)
{
    uint32_t  n = r->n ? r->n : 1;
    uint32_t  best_of = r->best_of ? r->best_of : n;
    int       blocks;

    if (best_of < n) {
        return "best_of must be at least n";
    }
    if ((int) best_of > e->cfg.max_num_seqs) {
        snprintf(buf, len, "best_of (or n) %u exceeds the engine's "
                 "--max-num-seqs %d", best_of, e->cfg.max_num_seqs);
        return buf;
    }

    blocks = pl_bm_blocks_for(&e->bm, (int) (r->n_prompt + r->max_tokens));
    if (best_of > 1 && (int64_t) blocks * best_of > e->num_blocks) {
        snprintf(buf, len, "%u sequences of %u tokens (prompt plus "
                 "max_tokens) do not fit the KV cache of %d blocks", best_of,
                 r->n_prompt + r->max_tokens, e->num_blocks);
        return buf;
    }

    return NULL;
}


/* What is wrong with this SUBMIT, or NULL; status gets the HTTP status. */
static const char *
pl_engine_check_submit(pl_engine_t *e, pl_conn_t *c, const pl_ipc_msg_t *m,
    char *buf, size_t len, uint32_t *status)
{
    const pl_rec_submit_t  *r = &m->submit;
    const char             *why;

    *status = 400;

    if (r->n_prompt == 0) {
        return "the prompt is empty";
    }
    if ((uint64_t) r->n_prompt + r->max_tokens
        > (uint64_t) e->max_model_len)
    {
        snprintf(buf, len, "the prompt (%u tokens) plus max_tokens (%u) "
                 "exceeds the model's context of %d tokens", r->n_prompt,
                 r->max_tokens, e->max_model_len);
        return buf;
    }
    if (r->flags & ~(PL_SUBMIT_IGNORE_EOS | PL_SUBMIT_HAS_SEED
                     | PL_SUBMIT_LOGPROBS))
    {
        snprintf(buf, len, "unknown flags 0x%x", r->flags);
        return buf;
    }

    why = pl_engine_check_sampling(e, m, buf, len);
    if (why == NULL) {
        why = pl_engine_check_group(e, r, buf, len);
    }
    if (why) {
        return why;
    }

    return pl_engine_check_room(e, c, r->req_id, buf, len, status);
}


/* The SUBMIT's sampling parameters, logit bias and stop ids into s: 0,
   or -1 when out of memory. */
static int
pl_engine_sampling(pl_seq_t *s, const pl_ipc_msg_t *m)
{
    const pl_rec_submit_t  *r = &m->submit;
    pl_sampling_params_t   *p = &s->sampling;
    size_t                  nb = r->n_logit_bias, ns = r->n_stop_ids;

    *p = (pl_sampling_params_t) {
        .temperature = r->temperature,
        .top_p = r->top_p,
        .top_k = r->top_k,
        .min_p = r->min_p,
        .repetition_penalty = r->repetition_penalty,
        .presence_penalty = r->presence_penalty,
        .frequency_penalty = r->frequency_penalty,
        .min_tokens = (int32_t) r->min_tokens,
        .logprobs = (r->flags & PL_SUBMIT_LOGPROBS)
                    ? (int32_t) r->logprobs + 1 : 0,
    };

    if (nb) {
        p->bias = malloc(nb * sizeof(pl_logit_bias_t));
        if (p->bias == NULL) {
            return -1;
        }
        memcpy(p->bias, m->bias, nb * sizeof(pl_logit_bias_t));
        p->n_bias = (uint32_t) nb;
    }

    if (ns) {
        p->stop_ids = malloc(ns * sizeof(int32_t));
        if (p->stop_ids == NULL) {
            return -1;
        }
        memcpy(p->stop_ids, m->stop_ids, ns * sizeof(int32_t));
        p->n_stop_ids = (uint32_t) ns;
    }

    return 0;
}


static void
pl_engine_reject(pl_conn_t *c, uint64_t req_id, uint32_t status,
    const char *why)
{
    pl_seq_t  *s = pl_seq_create(req_id, NULL, 0, 0);

    pl_log(PL_LOG_DEBUG, "worker %u request %llu rejected (%u): %s",
           c->worker_id, (unsigned long long) req_id, status, why);

    if (s == NULL || (s->error = strdup(why)) == NULL) {
        c->dead = 1;
        pl_log(PL_LOG_ERROR, "out of memory: dropping worker %u",
               c->worker_id);
        if (s) {
            pl_seq_free(s);
        }
        return;
    }

    s->error_status = status;
    s->finish_reason = PL_FINISH_ERROR;
    s->fail_reason = PL_FINISH_ERROR;
    s->n_finished = 1;
    s->state = PL_SEQ_FINISHED;
    pl_conn_append(c, s);
}


static void
pl_engine_submit(pl_engine_t *e, pl_conn_t *c, const pl_ipc_msg_t *m)
{
    const pl_rec_submit_t  *r = &m->submit;
    const char             *why;
    char                    buf[256];
    uint32_t                status;
    pl_seq_t               *s;

    why = pl_engine_check_submit(e, c, m, buf, sizeof(buf), &status);
    if (why) {
        pl_engine_reject(c, r->req_id, status, why);
        return;
    }

    s = pl_seq_create(r->req_id, m->prompt, (int) r->n_prompt,
                      (int) r->max_tokens);
    if (s == NULL || pl_engine_sampling(s, m) != 0
        || pl_seq_index_add(&c->live, s) != 0)
    {
        if (s) {
            pl_seq_free(s);
        }
        pl_engine_reject(c, r->req_id, 503, "the engine is out of memory");
        return;
    }

    s->ignore_eos = (r->flags & PL_SUBMIT_IGNORE_EOS) != 0;
    s->seed = (r->flags & PL_SUBMIT_HAS_SEED) ? r->seed : e->seed_counter++;
    s->arrival = ++e->arrivals;
    s->n_return = r->n ? (int) r->n : 1;
    s->best_of = r->best_of ? (int) r->best_of : s->n_return;
    s->out_index = s->best_of > s->n_return ? -1 : 0;

    pl_conn_append(c, s);
    pl_sched_add(&e->sched, s);

    e->totals.requests_total++;
    e->totals.prompt_tokens_total += r->n_prompt;

    pl_log(PL_LOG_DEBUG, "worker %u request %llu: %u prompt tokens, "
           "max_tokens %u, n %d, best_of %d", c->worker_id,
           (unsigned long long) r->req_id, r->n_prompt, r->max_tokens,
           s->n_return, s->best_of);
}


static void
pl_engine_abort(pl_engine_t *e, pl_conn_t *c, uint64_t req_id)
{
    pl_seq_t  *s = pl_seq_index_find(&c->live, req_id);

    if (s == NULL) {
        pl_log(PL_LOG_DEBUG, "worker %u: abort of %llu, not in flight",
               c->worker_id, (unsigned long long) req_id);
        return;
    }

    pl_engine_end_group(e, s, PL_FINISH_ABORT);

    pl_log(PL_LOG_DEBUG, "worker %u request %llu aborted", c->worker_id,
           (unsigned long long) req_id);
}


static void
pl_engine_drain(pl_engine_t *e, pl_conn_t *c)
{
    pl_ipc_msg_t  m;
    char          err[256];
    int           rc;

    while (!c->dead) {
        rc = pl_ipc_next(c, e->recbuf, e->recbuf_cap,
                         (uint32_t) e->mc->vocab_size, &m, err, sizeof(err));
        if (rc == 0) {
            return;
        }
        if (rc < 0) {
            pl_log(PL_LOG_WARN, "worker %u: %s; dropping the connection",
                   c->worker_id, err);
            c->dead = 1;
            return;
        }

        if (m.type == PL_REC_SUBMIT) {
            pl_engine_submit(e, c, &m);
        } else {
            pl_engine_abort(e, c, m.abort_id);
        }
    }
}


/* ---- counters ---- */


static void
pl_engine_stats(const pl_engine_t *e, pl_stats_t *st)
{
    *st = e->totals;
    st->running = (uint32_t) e->sched.running.n;
    st->waiting = (uint32_t) e->sched.waiting.n;
    st->swapped = (uint32_t) e->sched.swapped.n;
    st->preemptions_total = e->sched.preemptions;
    st->kv_blocks_used = (uint32_t) pl_bm_num_used(&e->bm);
    st->kv_blocks_free = (uint32_t) pl_bm_num_free(&e->bm);
    st->kv_blocks_cached = (uint32_t) pl_bm_num_cached(&e->bm);
    st->swap_blocks_total = (uint32_t) e->bm.num_host_blocks;
    st->swap_blocks_used = (uint32_t) pl_bm_num_host_used(&e->bm);
    st->prefix_cache_queries = e->bm.counters.prefix_queries;
    st->prefix_cache_hits = e->bm.counters.prefix_hits;
    st->preemptions_recompute = e->sched.preempted_recompute;
    st->preemptions_swap = e->sched.preempted_swap;
    st->blocks_swapped_out = e->bm.counters.swapped_out;
    st->blocks_swapped_in = e->bm.counters.swapped_in;
}


static void
pl_engine_publish(pl_engine_t *e)
{
    pl_stats_t  st;
    pl_conn_t  *c;

    pl_engine_stats(e, &st);

    for (c = e->conns; c; c = c->next) {
        if (c->attached && !c->dead) {
            pl_stats_publish(c->hdr, &st);
        }
    }
}


/* ---- connections ---- */


static void
pl_engine_accept(pl_engine_t *e)
{
    pl_conn_t  *c;

    while ((c = pl_ipc_accept(e->lfd, ++e->next_worker_id)) != NULL) {
        if (pl_engine_watch(e, c->fd, EPOLLIN | EPOLLRDHUP, &c->sock_watch)
            != 0)
        {
            pl_ipc_close(c);
            continue;
        }

        c->next = e->conns;
        if (e->conns) {
            e->conns->prev = c;
        }
        e->conns = c;
    }
}


static void
pl_engine_attach(pl_engine_t *e, pl_conn_t *c)
{
    char        err[256];
    pl_stats_t  st;
    int         rc;

    e->totals.workers++;
    pl_engine_stats(e, &st);
    e->totals.workers--;

    rc = pl_ipc_attach(c, &e->identity, &st, err, sizeof(err));
    if (rc == 0) {
        return;
    }

    if (rc < 0
        || pl_engine_watch(e, c->sub_efd, EPOLLIN, &c->bell_watch) != 0)
    {
        /* a probe that connects and closes is no cause for alarm */
        pl_log(c->attach_got ? PL_LOG_WARN : PL_LOG_DEBUG,
               "connection %u: attach failed: %s", c->worker_id,
               rc < 0 ? err : strerror(errno));
        c->dead = 1;
        return;
    }

    e->totals.workers++;
    pl_log(PL_LOG_INFO, "worker %u (pid %u) attached", c->worker_id, c->pid);
}


static void
pl_engine_socket_event(pl_engine_t *e, pl_conn_t *c, uint32_t events)
{
    if (c->dead) {
        return;
    }

    if (!c->attached) {
        pl_engine_attach(e, c);
        return;
    }

    if (pl_ipc_socket_event(c) != 0 || (events & (EPOLLHUP | EPOLLERR))) {
        pl_log(PL_LOG_INFO, "worker %u (pid %u) detached", c->worker_id,
               c->pid);
        c->dead = 1;
    }
}


/* Free request l's sequences, taking any still scheduled out first;
   whether any was. */
static int
pl_engine_free_group(pl_engine_t *e, pl_seq_t *l)
{
    int  i, live = 0;

    for (i = l->n_members - 1; i >= 0; i--) {
        if (l->members[i]->state != PL_SEQ_FINISHED) {
            pl_sched_remove(&e->sched, l->members[i]);
            live = 1;
        }
        pl_seq_free(l->members[i]);
    }

    return live;
}


static void
pl_engine_close(pl_engine_t *e, pl_conn_t *c)
{
    pl_seq_t  *s, *next;
    int        aborted = 0;

    for (s = c->seqs_head; s; s = next) {
        next = s->conn_next;
        aborted += pl_engine_free_group(e, s);
    }

    if (aborted) {
        pl_log(PL_LOG_INFO, "worker %u: %d requests aborted, their blocks "
               "freed", c->worker_id, aborted);
    }

    epoll_ctl(e->ep, EPOLL_CTL_DEL, c->fd, NULL);
    if (c->attached) {
        epoll_ctl(e->ep, EPOLL_CTL_DEL, c->sub_efd, NULL);
        e->totals.workers--;
    }

    if (c->prev) {
        c->prev->next = c->next;
    } else {
        e->conns = c->next;
    }
    if (c->next) {
        c->next->prev = c->prev;
    }

    pl_ipc_close(c);
}


static void
pl_engine_reap(pl_engine_t *e)
{
    pl_conn_t  *c, *next;
    uint64_t    now = pl_now_ms();

    for (c = e->conns; c; c = next) {
        next = c->next;

        if (!c->attached && !c->dead && now > c->deadline_ms) {
            pl_log(PL_LOG_WARN, "connection %u: no attach within %d ms",
                   c->worker_id, PL_IPC_ATTACH_TIMEOUT);
            c->dead = 1;
        }

        if (c->dead) {
            pl_engine_close(e, c);
        }
    }
}


/* ---- one iteration ---- */


static int
pl_engine_is_eos(const pl_engine_t *e, int32_t t)
{
    uint32_t  i;

    for (i = 0; i < e->identity.n_eos; i++) {
        if (e->identity.eos_ids[i] == t) {
            return 1;
        }
    }

    return 0;
}


static int
pl_engine_is_stop_id(const pl_seq_t *s, int32_t t)
{
    uint32_t  i;

    for (i = 0; i < s->sampling.n_stop_ids; i++) {
        if (s->sampling.stop_ids[i] == t) {
            return 1;
        }
    }

    return 0;
}


/* eos (unless ignored) and the request's stop ids end it, but only once
   min_tokens are out: the sampler masks them before that. */
static int
pl_engine_stop_reason(const pl_engine_t *e, const pl_seq_t *s, int32_t t)
{
    if (pl_seq_generated(s) >= s->sampling.min_tokens
        && ((!s->ignore_eos && pl_engine_is_eos(e, t))
            || pl_engine_is_stop_id(s, t)))
    {
        return PL_FINISH_STOP;
    }

    if (pl_seq_generated(s) >= s->max_tokens
        || s->n_tokens >= e->max_model_len)
    {
        return PL_FINISH_LENGTH;
    }

    return 0;
}


static void
pl_engine_forward_failed(pl_engine_t *e, const char *err)
{
    pl_seq_t  *failed[e->sched.n_entries > 0 ? e->sched.n_entries : 1];
    char       msg[600];
    int        i, n = e->sched.n_entries;

    pl_log(PL_LOG_ERROR, "model forward failed: %s", err);
    snprintf(msg, sizeof(msg), "the model failed: %s", err);

    for (i = 0; i < n; i++) {
        failed[i] = e->sched.entries[i].seq;
    }
    for (i = 0; i < n; i++) {
        pl_engine_fail(e, failed[i], 500, msg);
    }
}


/* Room for one more token's logprobs: 0, or -1 when out of memory. */
static int
pl_engine_logprobs_room(pl_seq_t *s)
{
    pl_logprobs_t  *lp;
    int             cap;

    if (pl_seq_generated(s) < s->logprobs_cap) {
        return 0;
    }

    cap = s->logprobs_cap ? s->logprobs_cap * 2 : 16;
    cap = cap < s->max_tokens ? cap : s->max_tokens;

    lp = realloc(s->logprobs, (size_t) cap * sizeof(pl_logprobs_t));
    if (lp == NULL) {
        return -1;
    }

    s->logprobs = lp;
    s->logprobs_cap = cap;

    return 0;
}


/* Queue s's next draw, from logits row row, in the sampler's batch;
   -1 when out of memory. */
static int
pl_engine_queue(pl_engine_t *e, pl_seq_t *s, int row)
{
    pl_history_t  h = { s->tokens, s->n_prompt, s->n_tokens };
    int           i;

    i = pl_sampler_add(&e->sampler, row, &s->sampling, &h,
                       pl_seq_stream_seed(s->leader->seed, s->index),
                       (uint64_t) pl_seq_generated(s));
    if (i < 0) {
        return -1;
    }
    e->draws[i] = s;

    return 0;
}


/* Fork leader l, whose prompt has just run, into its best_of members. */
static int
pl_engine_fork(pl_engine_t *e, pl_seq_t *l)
{
    pl_seq_t  *c;

    while (l->n_members < l->best_of) {
        c = pl_seq_fork(l, l->n_members);
        if (c == NULL) {
            return -1;
        }
        if (pl_bm_fork(&e->bm, &l->blocks, &c->blocks) != 0) {
            pl_seq_free(c);
            return -1;
        }
        l->members[l->n_members++] = c;
        pl_sched_fork(&e->sched, c);
    }

    return 0;
}


/* Queue the draws from s's row of logits: one for s, or, at a
   request's first sample, one for each member of the group it forks
   into (every member reads the same row). */
static void
pl_engine_queue_row(pl_engine_t *e, pl_seq_t *s, int row)
{
    int  i;

    if (s->n_members >= s->best_of) {
        if (pl_engine_queue(e, s, row) != 0) {
            pl_engine_fail(e, s, 503, "the engine is out of memory");
        }
        return;
    }

    if (pl_engine_fork(e, s) != 0) {
        pl_engine_fail(e, s, 503, "the engine is out of memory");
        return;
    }

    for (i = 0; i < s->n_members; i++) {
        if (pl_engine_queue(e, s->members[i], row) != 0) {
            pl_engine_fail(e, s, 503, "the engine is out of memory");
            return;
        }
    }
}


/* Every queued draw at once: on the backend, where the logits are, or on
   the host when tensor parallelism gathered them there. */
static void
pl_engine_draw(pl_engine_t *e, const pl_logits_t *logits)
{
    pl_sampler_t  *sm = &e->sampler;

    if (sm->n_reqs == 0) {
        return;
    }

    if (logits->on_host) {
        pl_sample_host(e->tokens, logits->data, e->mc->vocab_size, sm->reqs,
                       sm->n_reqs, sm->adjust, sm->n_adjust);
    } else {
        e->be->sample(e->be, e->tokens, logits->data, logits->dtype,
                      e->mc->vocab_size, sm->reqs, sm->n_reqs, sm->adjust,
                      sm->n_adjust);
    }
}


/* Row row of logits on the host; the draws of one row come one after
   the other, so the last row brought down is kept. */
static const float *
pl_engine_host_row(pl_engine_t *e, const pl_logits_t *logits, int row)
{
    if (e->host_row != row) {
        e->host_row_data = pl_runner_host_row(&e->runner, e->be, logits,
                                              row);
        e->host_row = row;
    }

    return e->host_row_data;
}


/* The log-probabilities of s drawing t from row, where the request asks
   for them, and its cumulative logprob when best_of ranks the group;
   -1 when its logprobs have no memory. */
static int
pl_engine_logprobs(pl_engine_t *e, pl_seq_t *s, int32_t t,
    const pl_logits_t *logits, int row)
{
    int             ranks = s->leader->best_of > s->leader->n_return;
    pl_logprobs_t  *lp, chosen;
    const float    *host;

    if (!s->sampling.logprobs && !ranks) {
        return 0;
    }

    lp = &chosen;
    if (s->sampling.logprobs) {
        if (pl_engine_logprobs_room(s) != 0) {
            return -1;
        }
        lp = &s->logprobs[pl_seq_generated(s)];
    }

    host = pl_engine_host_row(e, logits, row);
    pl_sampler_logprobs(&e->sampler, host, t,
                        s->sampling.logprobs ? s->sampling.logprobs - 1 : 0,
                        lp);

    if (ranks) {
        s->cum_logprob += lp->logprob;
    }

    return 0;
}


/* s drew t from row: append it; s finishes when it stops.  Nothing when
   its request failed while the draws were queued. */
static void
pl_engine_step(pl_engine_t *e, pl_seq_t *s, int32_t t,
    const pl_logits_t *logits, int row)
{
    int  reason;

    if (s->finish_reason != 0) {
        return;
    }

    if (pl_engine_logprobs(e, s, t, logits, row) != 0) {
        pl_engine_fail(e, s, 503, "the engine is out of memory");
        return;
    }
    pl_seq_append(s, t);
    e->totals.generation_tokens_total++;

    reason = pl_engine_stop_reason(e, s, t);
    if (reason) {
        pl_engine_finish(e, s, reason);
    }
}


static void
pl_engine_iterate(pl_engine_t *e)
{
    pl_scheduler_t  *sc = &e->sched;
    pl_seq_t        *planned[sc->max_num_seqs];
    pl_logits_t      logits;
    int              i, n;
    pl_seq_t        *s;
    char             err[512];

    n = pl_sched_step(sc);

    /* copies and swaps first, even when nothing runs: a swap-out must
       land before the next plan reuses its blocks */
    if (pl_runner_moves(e->model, &e->bm, e->host_pool, err, sizeof(err))
        != 0)
    {
        pl_engine_forward_failed(e, err);
        return;
    }
    if (n == 0) {
        return;
    }

    pl_runner_build(&e->runner, &e->bm, sc->entries, n);
    if (pl_runner_forward(&e->runner, e->model, &logits, err, sizeof(err))
        != 0)
    {
        pl_engine_forward_failed(e, err);
        return;
    }

    pl_sched_complete(sc);
    e->totals.iterations++;

    /* finishing a sequence voids the plan: walk a copy of it */
    for (i = 0; i < n; i++) {
        planned[i] = sc->entries[i].seq;
    }

    /* one draw per sequence whose tokens are all computed, all drawn in
       one call, then appended in the plan's order */
    pl_sampler_reset(&e->sampler);
    for (i = 0; i < n; i++) {
        s = planned[i];
        if (s->state == PL_SEQ_FINISHED || s->n_computed < s->n_tokens) {
            continue;       /* its request failed, or a prompt chunk */
        }
        pl_engine_queue_row(e, s, i);
    }

    pl_engine_draw(e, &logits);

    e->host_row = -1;
    for (i = 0; i < e->sampler.n_reqs; i++) {
        pl_engine_step(e, e->draws[i], e->tokens[i], &logits,
                       e->sampler.reqs[i].row);
    }
}


/* ---- output ---- */


/* Send member s's pending tokens, and its FINISH once it stopped
   normally; -1 when the ring filled up. */
static int
pl_engine_flush_seq(pl_conn_t *c, pl_seq_t *s)
{
    int       want_lp = s->logprobs != NULL;
    uint32_t  n_top = want_lp ? (uint32_t) s->sampling.logprobs - 1 : 0;
    uint32_t  max = pl_ipc_max_tokens_per_record(c, want_lp, n_top), n;
    uint32_t  index = (uint32_t) s->out_index;

    while (s->n_prompt + s->n_sent < s->n_tokens) {
        n = (uint32_t) (s->n_tokens - s->n_prompt - s->n_sent);
        n = n < max ? n : max;
        if (pl_ipc_send_tokens(c, s->req_id, index,
                               s->tokens + s->n_prompt + s->n_sent, n,
                               want_lp ? s->logprobs + s->n_sent : NULL,
                               n_top) != 0)
        {
            return -1;
        }
        s->n_sent += (int) n;
    }

    if ((s->finish_reason == PL_FINISH_STOP
         || s->finish_reason == PL_FINISH_LENGTH) && !s->finish_sent)
    {
        if (pl_ipc_send_finish(c, s->req_id, index,
                               (uint32_t) s->finish_reason,
                               (uint32_t) s->n_prompt,
                               (uint32_t) pl_seq_generated(s)) != 0)
        {
            return -1;
        }
        s->finish_sent = 1;
    }

    return 0;
}


/*
 * Send what request l has pending: its ERROR first, then each returned
 * member's tokens and FINISH (nothing while best_of still ranks), and
 * after an abort or error one FINISH of that reason for the request.
 * 1 when everything is out, 0 when more is to come, -1 when the ring
 * filled up.
 */
static int
pl_engine_flush_group(pl_conn_t *c, pl_seq_t *l)
{
    int  i, all = l->n_finished == l->n_members;

    if (l->error && !l->error_sent) {
        if (pl_ipc_send_error(c, l->req_id, l->error_status, l->error) != 0) {
            return -1;
        }
        l->error_sent = 1;
    }

    for (i = 0; i < l->n_members && l->fail_reason != PL_FINISH_ABORT; i++) {
        if (l->members[i]->out_index >= 0
            && pl_engine_flush_seq(c, l->members[i]) != 0)
        {
            return -1;
        }
    }

    if (!all) {
        return 0;
    }

    if (l->fail_reason) {
        if (!l->fail_sent
            && pl_ipc_send_finish(c, l->req_id, 0, (uint32_t) l->fail_reason,
                                  (uint32_t) l->n_prompt, 0) != 0)
        {
            return -1;
        }
        l->fail_sent = 1;
    }

    return 1;
}


static void
pl_engine_flush(pl_engine_t *e)
{
    pl_conn_t  *c;
    pl_seq_t   *s, *next;
    int         rc;

    e->output_stuck = 0;

    for (c = e->conns; c; c = c->next) {
        if (!c->attached || c->dead) {
            continue;
        }

        for (s = c->seqs_head; s; s = next) {
            next = s->conn_next;
            rc = pl_engine_flush_group(c, s);
            if (rc < 0) {
                e->output_stuck = 1;
                break;
            }
            if (rc > 0) {
                pl_conn_unlink(c, s);
                pl_engine_free_group(e, s);
            }
        }
    }
}


/* Wake every worker that got records this pass, each at most once. */
static void
pl_engine_ring(pl_engine_t *e)
{
    pl_conn_t  *c;

    for (c = e->conns; c; c = c->next) {
        if (c->attached && !c->dead) {
            pl_ipc_flush_doorbell(c);
        }
    }
}


/* ---- the loop ---- */


static void
pl_engine_events(pl_engine_t *e)
{
    struct epoll_event   ev[PL_MAX_EVENTS];
    struct signalfd_siginfo  si;
    pl_watch_t          *w;
    int                  i, n, timeout;

    timeout = pl_sched_has_work(&e->sched) ? 0
              : e->output_stuck ? 1 : PL_IDLE_TIMEOUT_MS;

    n = epoll_wait(e->ep, ev, PL_MAX_EVENTS, timeout);

    for (i = 0; i < n; i++) {
        w = ev[i].data.ptr;

        switch (w->kind) {
        case PL_WATCH_LISTEN:
            pl_engine_accept(e);
            break;
        case PL_WATCH_SIGNAL:
            if (read(e->sfd, &si, sizeof(si)) == (ssize_t) sizeof(si)) {
                pl_log(PL_LOG_INFO, "signal %u: stopping", si.ssi_signo);
                e->stop = 1;
            }
            break;
        case PL_WATCH_SOCKET:
            pl_engine_socket_event(e, w->conn, ev[i].events);
            break;
        case PL_WATCH_DOORBELL:
            pl_ipc_doorbell_clear(w->conn);
            break;
        }
    }
}


static void
pl_engine_pass(pl_engine_t *e)
{
    pl_conn_t  *c;

    pl_engine_events(e);

    for (c = e->conns; c; c = c->next) {
        if (c->attached && !c->dead) {
            pl_engine_drain(e, c);
        }
    }

    pl_engine_reap(e);

    if (pl_sched_has_work(&e->sched)) {
        pl_engine_iterate(e);
    }

    pl_engine_flush(e);

    /* the state first, then the doorbells: a worker woken here answers
       its client at once, and that client may ask any worker how the
       engine stands */
    pl_engine_publish(e);
    pl_engine_ring(e);
}


static void
pl_engine_shutdown(pl_engine_t *e)
{
    while (e->conns) {
        pl_engine_close(e, e->conns);
    }

    if (e->lfd >= 0) {
        close(e->lfd);
        unlink(e->cfg.listen_path);
    }
    if (e->sfd >= 0) {
        close(e->sfd);
    }
    if (e->ep >= 0) {
        close(e->ep);
    }

    free(e->recbuf);
    free(e->draws);
    free(e->tokens);
    pl_sampler_destroy(&e->sampler);
    pl_runner_destroy(&e->runner);
    pl_sched_destroy(&e->sched);
    pl_bm_destroy(&e->bm);

    if (e->host_pool && e->be->free_host) {
        e->be->free_host(e->be, e->host_pool);
    } else {
        free(e->host_pool);
    }

    if (e->model) {
        pl_model_free(e->model);
    }
    if (e->be) {
        e->be->destroy(e->be);
    }
}


int
pl_engine_main(const pl_engine_config_t *cfg)
{
    static pl_engine_t  engine;
    pl_engine_t        *e = &engine;
    int                 rc = 0;

    e->cfg = *cfg;
    e->lfd = e->sfd = e->ep = -1;

    if (pl_engine_start(e) != 0) {
        rc = 1;
    } else {
        pl_log(PL_LOG_INFO, "ready");
        while (!e->stop) {
            pl_engine_pass(e);
        }
        pl_log(PL_LOG_INFO, "stopped after %llu iterations, %llu requests",
               (unsigned long long) e->totals.iterations,
               (unsigned long long) e->totals.requests_total);
    }

    pl_engine_shutdown(e);

    return rc;
}
