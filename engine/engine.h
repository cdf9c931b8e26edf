/*
 * engine: pagedllm-engine's main loop and its start-up.  Loads the model
 * on a backend, sizes the paged KV cache, listens for workers, and then
 * runs iteration after iteration: drain submissions, schedule, run the
 * model once for the whole batch, sample, stream tokens back.
 */

#ifndef PL_ENGINE_H
#define PL_ENGINE_H

typedef enum {
    PL_LOG_ERROR = 0,
    PL_LOG_WARN,
    PL_LOG_INFO,
    PL_LOG_DEBUG
} pl_log_level_t;

extern pl_log_level_t  pl_log_level;

/* One timestamped line on stderr, when level is enabled. */
void pl_log(pl_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

typedef struct {
    const char  *model_dir;
    const char  *listen_path;
    const char  *device;                /* "auto", "cpu" or "cuda" */
    int          cuda_device;           /* --device cuda:N: N; -1: none
                                           given, the first visible */
    const char  *served_model_name;     /* NULL: the model folder's name */
    int          threads;               /* 0: every core */
    int          block_size;
    int          kv_cache_mb;           /* cpu */
    double       gpu_memory_utilization;    /* cuda */
    int          num_blocks;            /* 0: sized from memory */
    int          max_num_seqs;
    int          max_num_batched_tokens;
    int          max_model_len;         /* 0: from config.json */
    unsigned     socket_mode;
    int          max_workers;           /* attached at once */
    int          max_waiting;           /* queued requests; more: 429 */
    int          max_queue_time;        /* seconds a request may wait for
                                           its first iteration; then 503 */
    int          prefix_caching;        /* automatic prefix caching */
    int          preemption_mode;       /* pl_preempt_mode_t */
    double       preemption_host_gbps;  /* auto's costs given (tests): host
                                           link GB/s, 0: measured */
    double       preemption_prefill_tps;    /* and prefill tokens/s */
    int          swap_space_mb;         /* host pool, swap and auto modes */
    int          kv_policy;             /* pl_kv_policy_t (baselines) */
    int          enforce_eager;         /* no CUDA graphs for decode */
    int          log_stats_interval;    /* seconds; 0: no summary line */
} pl_engine_config_t;

void pl_engine_config_defaults(pl_engine_config_t *cfg);

/*
 * Start the engine and serve until SIGTERM or SIGINT (which the caller
 * has blocked, so the loop can take them through a signalfd).  Returns 0
 * after a clean stop, 1 when it could not start.
 */
int  pl_engine_main(const pl_engine_config_t *cfg);

#endif /* PL_ENGINE_H */
