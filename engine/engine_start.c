/*
 * engine_start: pagedllm-engine's start-up and shutdown.  Opens the
 * backend, loads the model, sizes the paged KV cache from what the device
 * has left after the weights and the profiled activations, builds the
 * block manager, scheduler, runner and sampler, publishes the model's
 * identity (name, vocabulary, tokenizer path and hash) for the workers,
 * and listens on the socket; shutdown undoes it in reverse.
 */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "engine_internal.h"


void
pl_engine_config_defaults(pl_engine_config_t *cfg)
{
    *cfg = (pl_engine_config_t) {
        .device = "auto",
        .cuda_device = -1,
        .block_size = 16,
        .kv_cache_mb = 512,
        .gpu_memory_utilization = 0.90,
        .max_num_seqs = 256,
        .max_num_batched_tokens = 2048,
        .socket_mode = 0660,
        .max_workers = 64,
        .max_waiting = 1024,
        .max_queue_time = 60,
        .prefix_caching = 1,
        .preemption_mode = PL_PREEMPT_RECOMPUTE,
        .swap_space_mb = 1024,
        .kv_policy = PL_KV_PAGED,
        .log_stats_interval = 10,
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

    /* cuda:N counts the devices CUDA_VISIBLE_DEVICES leaves visible, as
       the CUDA runtime numbers them */

    e->be = strcmp(dev, "cuda") == 0
            ? pl_backend_cuda_create(e->cfg.cuda_device < 0 ? 0
                                     : e->cfg.cuda_device, err,
                                     sizeof(err))
            : pl_backend_cpu_create(e->cfg.threads, err, sizeof(err));

    if (e->be == NULL) {
        if (e->cfg.cuda_device >= 0) {
            pl_log(PL_LOG_ERROR, "device cuda:%d: %s", e->cfg.cuda_device,
                   err);
        } else {
            pl_log(PL_LOG_ERROR, "device %s: %s", dev, err);
        }
        return -1;
    }

    if (e->cfg.cuda_device >= 0) {
        snprintf(e->totals.device, sizeof(e->totals.device), "%s:%d",
                 e->be->name, e->cfg.cuda_device);
    } else {
        snprintf(e->totals.device, sizeof(e->totals.device), "%s",
                 e->be->name);
    }
    pl_log(PL_LOG_INFO, "device: %s%s", e->totals.device,
           strcmp(e->cfg.device, "auto") == 0 ? " (auto)" : "");

    /* what others (another engine on this GPU) hold is theirs: the
       budget counts only what this engine takes from here on */
    if (e->be->mem_info != NULL) {
        size_t  total;

        if (e->be->mem_info(e->be, &e->free_at_open, &total) != 0) {
            e->free_at_open = 0;
        }
    }

    return 0;
}


static int
pl_engine_load_model(pl_engine_t *e)
{
    char    err[512];
    size_t  other;
    double  start = (double) pl_now_us();

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
    pl_model_memory(e->model, &e->weight_bytes, &other);
    pl_log(PL_LOG_INFO, "weights loaded: %.1f MiB in %.2f s",
           (double) e->weight_bytes / PL_MIB,
           ((double) pl_now_us() - start) / 1e6);

    if (pl_model_prepare(e->model, e->cfg.max_num_batched_tokens,
                         e->cfg.max_num_seqs, err, sizeof(err)) != 0)
    {
        pl_log(PL_LOG_ERROR, "activation memory: %s", err);
        return -1;
    }

    pl_model_memory(e->model, &e->weight_bytes, &e->activation_bytes);
    e->activation_bytes -= other;

    return 0;
}


/* What the model holds on its device, in one line: weights, activations
   (the largest batch's scratch), the KV cache and how many tokens it
   holds. */
static void
pl_engine_memory_summary(pl_engine_t *e)
{
    double  kv = (double) pl_model_kv_block_bytes(e->model, e->cfg.block_size)
                 * e->num_blocks;

    pl_log(PL_LOG_INFO, "memory%s: weights %.1f MiB, activations %.1f MiB "
           "(batches up to %d tokens), KV cache %.1f MiB = %d tokens; "
           "%.1f MiB in all", pl_model_tp_size(e->model) > 1 ? " per rank"
           : "", (double) e->weight_bytes / PL_MIB,
           (double) e->activation_bytes / PL_MIB,
           e->cfg.max_num_batched_tokens, kv / PL_MIB,
           e->num_blocks * e->cfg.block_size,
           ((double) e->weight_bytes + (double) e->activation_bytes + kv)
           / PL_MIB);
}


/*
 * Bytes of the GPU the KV cache may take: --gpu-memory-utilization of the
 * card, minus what this engine holds after a profiling run of the largest
 * batch the scheduler may plan (weights, activation scratch, workspaces
 * and whatever else the backend makes on first use) but the run's own
 * temporary cache, minus room for the decode graphs recorded later (one
 * measured, times the shapes possible).  What this engine holds is the
 * device's free memory when it opened the device less the free memory
 * now, so the fraction is the engine's own: two engines at 0.45 share a
 * card as two halves, whichever starts first.  What is free now (less the
 * graphs' room) bounds the result, so a fraction others have already
 * taken is never promised.  0, or -1 when it cannot be measured.
 */
static int
pl_engine_gpu_budget(pl_engine_t *e, double *budget)
{
    pl_model_profile_t  prof;
    size_t              free_b, total_b;
    double              in_use, graphs, free_now;
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

    free_now = (double) free_b + (double) prof.kv_bytes;
    in_use = e->free_at_open > free_b
             ? (double) (e->free_at_open - free_b) - (double) prof.kv_bytes
             : 0;
    graphs = (double) prof.graph_bytes * prof.graph_shapes;

    pl_log(PL_LOG_INFO, "profiling run of %d tokens in %d sequences: "
           "this engine holds %.0f MiB of the device's %.0f MiB after it, "
           "%.0f MiB are free", prof.tokens, prof.seqs, in_use / PL_MIB,
           (double) total_b / PL_MIB, free_now / PL_MIB);
    if (prof.graph_shapes > 0) {
        pl_log(PL_LOG_INFO, "decode graphs: up to %d shapes, recorded when "
               "first used; one took %.1f MiB, %.1f MiB kept for them",
               prof.graph_shapes, (double) prof.graph_bytes / PL_MIB,
               graphs / PL_MIB);
    }

    *budget = e->cfg.gpu_memory_utilization * (double) total_b - in_use
              - graphs;
    if (*budget > free_now - graphs) {
        pl_log(PL_LOG_WARN, "--gpu-memory-utilization %.2f asks for more "
               "than the device has free; the KV cache takes what is",
               e->cfg.gpu_memory_utilization);
        *budget = free_now - graphs;
    }

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


static const char *
pl_engine_preemption_name(pl_preempt_mode_t mode)
{
    switch (mode) {
    case PL_PREEMPT_SWAP:  return "swap";
    case PL_PREEMPT_AUTO:  return "swap or recompute, whichever costs less";
    default:               return "recompute";
    }
}


/* The block manager's prefix cache and, in swap and auto modes, its host
   pool (pinned where the backend can); auto's costs. */
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

    if (e->cfg.preemption_mode != PL_PREEMPT_RECOMPUTE) {
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
           pl_engine_preemption_name(e->sched.preemption_mode), n,
           e->cfg.kv_policy);

    return e->sched.preemption_mode == PL_PREEMPT_AUTO
           ? pl_engine_preemption_costs(e) : 0;
}


/* Room for the most draws one iteration makes: every planned sequence
   forking into a whole group. */
static int
pl_engine_init_draws(pl_engine_t *e)
{
    size_t  n = (size_t) e->cfg.max_num_seqs * PL_SEQ_GROUP_MAX;

    e->draws = malloc(n * sizeof(pl_seq_t *));
    e->tokens = malloc(n * sizeof(int32_t));
    e->beam_jobs = malloc((size_t) e->cfg.max_num_seqs
                          * sizeof(pl_beam_job_t));

    return e->draws && e->tokens && e->beam_jobs ? 0 : -1;
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
    pl_grammar_cache_init(&e->grammars, e->identity.tokenizer_path,
                          (uint32_t) e->mc->vocab_size, e->identity.eos_ids,
                          (int) e->identity.n_eos);

    if (pl_block_map_init(&e->map, &e->bm) != 0) {
        pl_log(PL_LOG_ERROR, "out of memory for the block map");
        return -1;
    }
    e->identity.map = e->map.map;
    e->identity.map_bytes = e->map.bytes;

    e->recbuf_cap = PL_IPC_RING_SIZE;
    e->recbuf = malloc(e->recbuf_cap);

    return e->recbuf ? 0 : -1;
}


int
pl_engine_watch(pl_engine_t *e, int fd, uint32_t events, pl_watch_t *w)
{
    struct epoll_event  ev = { .events = events, .data.ptr = w };

    return epoll_ctl(e->ep, EPOLL_CTL_ADD, fd, &ev);
}


/*
 * Descriptors for workers: the soft limit raised to the hard one, and a
 * spare descriptor kept to be given up when accept() finds none left
 * (engine.c), so the engine can still take a connection off the backlog
 * and close it rather than leave it hanging.
 */
static void
pl_engine_reserve_fds(pl_engine_t *e)
{
    struct rlimit  rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
            pl_log(PL_LOG_WARN, "raising the descriptor limit: %s",
                   strerror(errno));
        }
    }

    e->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}


static int
pl_engine_listen(pl_engine_t *e)
{
    char      err[512];
    sigset_t  sigs;

    pl_engine_reserve_fds(e);

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

    pl_log(PL_LOG_INFO, "listening on %s (mode %04o, at most %d workers)",
           e->cfg.listen_path, e->cfg.socket_mode, e->cfg.max_workers);

    return 0;
}


int
pl_engine_start(pl_engine_t *e)
{
    if (pl_engine_open_backend(e) != 0 || pl_engine_load_model(e) != 0
        || pl_engine_check_limits(e) != 0 || pl_engine_size_kv(e) != 0
        || pl_bm_init(&e->bm, e->num_blocks, e->cfg.block_size) != 0
        || pl_engine_identity(e) != 0 || pl_engine_init_parts(e) != 0)
    {
        return -1;
    }

    pl_engine_memory_summary(e);

    e->seed_counter = 0x5eed;
    e->totals.kv_blocks_total = (uint32_t) e->num_blocks;
    e->totals.block_size = (uint32_t) e->cfg.block_size;

    return pl_engine_listen(e);
}



void
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
    if (e->spare_fd >= 0) {
        close(e->spare_fd);
    }
    if (e->ep >= 0) {
        close(e->ep);
    }

    free(e->recbuf);
    free(e->draws);
    free(e->beam_jobs);
    free(e->tokens);
    pl_sampler_destroy(&e->sampler);
    pl_grammar_cache_destroy(&e->grammars);
    pl_runner_destroy(&e->runner);
    pl_sched_destroy(&e->sched);
    pl_block_map_free(&e->map);
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
