
/*
 * ngx_http_pagedllm_metrics: the engine's counters and the API's HTTP
 * outcomes in Prometheus text exposition format 0.0.4.
 *
 *     location = /metrics { pagedllm_metrics; }
 *
 * Engine series come from the pl_stats_t each engine publishes into this
 * worker's region; an engine's are left out while the worker is detached
 * from it, and pagedllm_engine_attached says which it is (the answer is
 * 200 either way, so a scrape of a detached worker still succeeds).  The
 * engines of pagedllm_engines groups carry an engine="PATH" label (the
 * socket path) in every sample; the one engine of pagedllm_engine keeps
 * its series unlabelled.  HTTP responses
 * by status class and client aborts are counted by a log phase handler
 * for every request served by a "pagedllm" location, in a small shared
 * memory zone: every worker adds to the same counters, so any worker's
 * scrape reports all of them, and they survive a reload.
 *
 * The latency and length histograms live in that zone too, observed by
 * the same log phase handler once per completion the engine finished
 * (docs/ARCHITECTURE.md says why here and not in the engine): time to
 * first token, mean time per output token after the first, end-to-end
 * latency (the handler taking the request to its last byte handed to
 * nginx's output), the engine's queue time, and prompt and generation
 * lengths.  Buckets are counted one by one and summed into Prometheus'
 * cumulative le buckets at scrape time; _count is the +Inf bucket, so
 * the two always agree even while workers add.  Times are kept in
 * microseconds, printed in seconds.
 */


#include "ngx_http_pagedllm_module.h"


/* pages; nginx reuses a zone across a reload only at the same size, so a
   new layout of ngx_http_pagedllm_counters_t comes with a new size */
#define NGX_HTTP_PAGEDLLM_METRICS_ZONE   16
#define NGX_HTTP_PAGEDLLM_METRICS_SIZE   65536
#define NGX_HTTP_PAGEDLLM_ENGINE_SIZE    8192     /* each engine's series */
#define NGX_HTTP_PAGEDLLM_MAX_BUCKETS    24


typedef enum {
    NGX_HTTP_PAGEDLLM_H_TTFT = 0,
    NGX_HTTP_PAGEDLLM_H_TPOT,
    NGX_HTTP_PAGEDLLM_H_E2E,
    NGX_HTTP_PAGEDLLM_H_QUEUE,
    NGX_HTTP_PAGEDLLM_H_PROMPT,
    NGX_HTTP_PAGEDLLM_H_GENERATION,
    NGX_HTTP_PAGEDLLM_H_COUNT
} ngx_http_pagedllm_hist_e;


/* one histogram's counts: bucket i holds observations in
   (bound[i - 1], bound[i]]; the last, past every bound */
typedef struct {
    ngx_atomic_t                  buckets[NGX_HTTP_PAGEDLLM_MAX_BUCKETS + 1];
    ngx_atomic_t                  sum;           /* us, or tokens */
} ngx_http_pagedllm_hist_t;


typedef struct {
    ngx_atomic_t                  responses[5];  /* 1xx .. 5xx */
    ngx_atomic_t                  client_aborts;
    ngx_http_pagedllm_hist_t      hist[NGX_HTTP_PAGEDLLM_H_COUNT];
} ngx_http_pagedllm_counters_t;


/* upper bounds: in us for times, as le prints them */
typedef struct {
    uint64_t                      bound;
    const char                   *le;
} ngx_http_pagedllm_bucket_t;


typedef struct {
    const char                   *name;
    const char                   *help;
    ngx_http_pagedllm_bucket_t   *buckets;
    ngx_uint_t                    n;
    unsigned                      seconds:1;
} ngx_http_pagedllm_histogram_t;


/* One engine as a scrape sees it: engine NULL while it is detached. */
typedef struct {
    ngx_http_pagedllm_engine_conf_t  *ec;
    ngx_http_pagedllm_engine_t       *engine;
    pl_stats_t                        stats;
} ngx_http_pagedllm_scrape_t;


/* One sample of pl_stats_t; a family is a run of entries with one name. */
typedef struct {
    const char                   *name;
    const char                   *type;
    const char                   *help;
    const char                   *labels;        /* NULL: none */
    size_t                        offset;
    unsigned                      wide:1;        /* uint64_t, else uint32_t */
} ngx_http_pagedllm_metric_t;


static ngx_int_t ngx_http_pagedllm_metrics_zone_init(ngx_shm_zone_t *zone,
    void *data);
static ngx_int_t ngx_http_pagedllm_metrics_log(ngx_http_request_t *r);
static ngx_http_pagedllm_counters_t *ngx_http_pagedllm_counters(
    ngx_http_request_t *r);
static u_char *ngx_http_pagedllm_metrics_engines(u_char *p, u_char *last,
    ngx_http_pagedllm_scrape_t *e, ngx_uint_t n);
static u_char *ngx_http_pagedllm_sample(u_char *p, u_char *last,
    const char *name, ngx_http_pagedllm_engine_conf_t *ec,
    const char *labels);
static u_char *ngx_http_pagedllm_metrics_http(u_char *p, u_char *last,
    ngx_http_pagedllm_counters_t *c);
static u_char *ngx_http_pagedllm_metric_head(u_char *p, u_char *last,
    const char *name, const char *type, const char *help);
static u_char *ngx_http_pagedllm_label_value(u_char *p, u_char *last,
    u_char *s, size_t len);
static void ngx_http_pagedllm_observe_request(ngx_http_request_t *r,
    ngx_http_pagedllm_counters_t *c);
static void ngx_http_pagedllm_observe(ngx_http_pagedllm_counters_t *c,
    ngx_http_pagedllm_hist_e h, uint64_t v);
static u_char *ngx_http_pagedllm_metrics_ratios(u_char *p, u_char *last,
    ngx_http_pagedllm_scrape_t *e, ngx_uint_t n);
static u_char *ngx_http_pagedllm_metrics_histograms(u_char *p,
    u_char *last, ngx_http_pagedllm_counters_t *c);
static u_char *ngx_http_pagedllm_value(u_char *p, u_char *last, uint64_t v,
    ngx_uint_t millionths);


#define ngx_http_pagedllm_stat(name, type, help, labels, field)              \
    { name, type, help, labels, offsetof(pl_stats_t, field),                 \
      sizeof(((pl_stats_t *) 0)->field) == 8 }


static ngx_http_pagedllm_metric_t  ngx_http_pagedllm_metrics[] = {

    ngx_http_pagedllm_stat("pagedllm_workers", "gauge",
        "nginx workers attached to the engine.", NULL, workers),

    ngx_http_pagedllm_stat("pagedllm_requests_running", "gauge",
        "Requests holding KV blocks on the device.", NULL, running),

    ngx_http_pagedllm_stat("pagedllm_requests_waiting", "gauge",
        "Requests queued for their first KV blocks.", NULL, waiting),

    ngx_http_pagedllm_stat("pagedllm_requests_swapped", "gauge",
        "Requests whose KV blocks are swapped out to host memory.", NULL,
        swapped),

    ngx_http_pagedllm_stat("pagedllm_kv_blocks", "gauge",
        "Device KV cache blocks by state; cached blocks hold a prefix-cache "
        "entry and are also counted as used or free.", "state=\"used\"",
        kv_blocks_used),
    ngx_http_pagedllm_stat("pagedllm_kv_blocks", NULL, NULL,
        "state=\"free\"", kv_blocks_free),
    ngx_http_pagedllm_stat("pagedllm_kv_blocks", NULL, NULL,
        "state=\"cached\"", kv_blocks_cached),

    ngx_http_pagedllm_stat("pagedllm_kv_blocks_capacity", "gauge",
        "Device KV cache blocks in all.", NULL, kv_blocks_total),

    ngx_http_pagedllm_stat("pagedllm_kv_block_size", "gauge",
        "Tokens per KV block.", NULL, block_size),

    ngx_http_pagedllm_stat("pagedllm_swap_blocks_used", "gauge",
        "Host blocks holding swapped-out KV.", NULL, swap_blocks_used),

    ngx_http_pagedllm_stat("pagedllm_swap_blocks_capacity", "gauge",
        "Host blocks for swapping in all.", NULL, swap_blocks_total),

    ngx_http_pagedllm_stat("pagedllm_iterations_total", "counter",
        "Model iterations run.", NULL, iterations),

    ngx_http_pagedllm_stat("pagedllm_requests_total", "counter",
        "Requests the engine accepted.", NULL, requests_total),

    ngx_http_pagedllm_stat("pagedllm_prompt_tokens_total", "counter",
        "Prompt tokens of accepted requests.", NULL, prompt_tokens_total),

    ngx_http_pagedllm_stat("pagedllm_generation_tokens_total", "counter",
        "Tokens generated.", NULL, generation_tokens_total),

    ngx_http_pagedllm_stat("pagedllm_preemptions_total", "counter",
        "Requests preempted for lack of KV blocks, by mode.",
        "mode=\"recompute\"", preemptions_recompute),
    ngx_http_pagedllm_stat("pagedllm_preemptions_total", NULL, NULL,
        "mode=\"swap\"", preemptions_swap),

    ngx_http_pagedllm_stat("pagedllm_preemption_auto_choices_total",
        "counter", "Preemptions --preemption-mode auto decided by cost, "
        "by the cheaper mode.", "choice=\"recompute\"",
        preemptions_auto_recompute),
    ngx_http_pagedllm_stat("pagedllm_preemption_auto_choices_total", NULL,
        NULL, "choice=\"swap\"", preemptions_auto_swap),

    ngx_http_pagedllm_stat("pagedllm_preemption_swap_full_total", "counter",
        "Preemptions that wanted a swap, found the host pool full and "
        "recomputed.", NULL, preemptions_swap_full),

    ngx_http_pagedllm_stat("pagedllm_prefix_cache_queries_total", "counter",
        "Full prompt blocks looked up in the prefix cache.", NULL,
        prefix_cache_queries),

    ngx_http_pagedllm_stat("pagedllm_prefix_cache_hits_total", "counter",
        "Full prompt blocks found in the prefix cache and reused.", NULL,
        prefix_cache_hits),

    ngx_http_pagedllm_stat("pagedllm_swapped_blocks_total", "counter",
        "KV blocks moved between device and host by swap preemption.",
        "direction=\"out\"", blocks_swapped_out),
    ngx_http_pagedllm_stat("pagedllm_swapped_blocks_total", NULL, NULL,
        "direction=\"in\"", blocks_swapped_in),
};


static ngx_http_pagedllm_bucket_t  ngx_http_pagedllm_ttft_buckets[] = {
    { 1000, "0.001" }, { 5000, "0.005" },
    { 10000, "0.01" }, { 20000, "0.02" },
    { 40000, "0.04" }, { 60000, "0.06" },
    { 80000, "0.08" }, { 100000, "0.1" },
    { 250000, "0.25" }, { 500000, "0.5" },
    { 750000, "0.75" }, { 1000000, "1" },
    { 2500000, "2.5" }, { 5000000, "5" },
    { 7500000, "7.5" }, { 10000000, "10" }
};

static ngx_http_pagedllm_bucket_t  ngx_http_pagedllm_tpot_buckets[] = {
    { 1000, "0.001" }, { 2500, "0.0025" },
    { 5000, "0.005" }, { 10000, "0.01" },
    { 25000, "0.025" }, { 50000, "0.05" },
    { 75000, "0.075" }, { 100000, "0.1" },
    { 150000, "0.15" }, { 200000, "0.2" },
    { 300000, "0.3" }, { 400000, "0.4" },
    { 500000, "0.5" }, { 750000, "0.75" },
    { 1000000, "1" }, { 2500000, "2.5" }
};

/* end-to-end latency and queue time */
static ngx_http_pagedllm_bucket_t  ngx_http_pagedllm_e2e_buckets[] = {
    { 1000, "0.001" }, { 10000, "0.01" },
    { 50000, "0.05" }, { 100000, "0.1" },
    { 300000, "0.3" }, { 500000, "0.5" },
    { 800000, "0.8" }, { 1000000, "1" },
    { 1500000, "1.5" }, { 2000000, "2" },
    { 2500000, "2.5" }, { 5000000, "5" },
    { 10000000, "10" }, { 15000000, "15" },
    { 20000000, "20" }, { 30000000, "30" },
    { 40000000, "40" }, { 50000000, "50" },
    { 60000000, "60" }, { 120000000, "120" }
};

/* prompt and generation lengths in tokens: 1, 2, 5 per decade */
static ngx_http_pagedllm_bucket_t  ngx_http_pagedllm_length_buckets[] = {
    { 1, "1" }, { 2, "2" }, { 5, "5" }, { 10, "10" }, { 20, "20" },
    { 50, "50" }, { 100, "100" }, { 200, "200" }, { 500, "500" },
    { 1000, "1000" }, { 2000, "2000" }, { 5000, "5000" },
    { 10000, "10000" }, { 20000, "20000" }, { 50000, "50000" },
    { 100000, "100000" }, { 200000, "200000" }, { 500000, "500000" },
    { 1000000, "1000000" }
};


#define ngx_http_pagedllm_histogram(name, help, b, seconds)                  \
    { name, help, b, sizeof(b) / sizeof(ngx_http_pagedllm_bucket_t),         \
      seconds }

/* in ngx_http_pagedllm_hist_e's order */
static ngx_http_pagedllm_histogram_t  ngx_http_pagedllm_histograms[] = {

    ngx_http_pagedllm_histogram("pagedllm_time_to_first_token_seconds",
        "Time from the request's arrival to its first token, all workers.",
        ngx_http_pagedllm_ttft_buckets, 1),

    ngx_http_pagedllm_histogram("pagedllm_time_per_output_token_seconds",
        "Mean time between a request's output tokens after the first, all "
        "workers.", ngx_http_pagedllm_tpot_buckets, 1),

    ngx_http_pagedllm_histogram("pagedllm_e2e_request_latency_seconds",
        "Time from the request's arrival to its last byte, all workers.",
        ngx_http_pagedllm_e2e_buckets, 1),

    ngx_http_pagedllm_histogram("pagedllm_request_queue_time_seconds",
        "Time from the engine taking a request to its first iteration, all "
        "workers.", ngx_http_pagedllm_e2e_buckets, 1),

    ngx_http_pagedllm_histogram("pagedllm_request_prompt_tokens",
        "Prompt tokens of each finished request, all workers.",
        ngx_http_pagedllm_length_buckets, 0),

    ngx_http_pagedllm_histogram("pagedllm_request_generation_tokens",
        "Tokens generated for each finished request, all choices, all "
        "workers.", ngx_http_pagedllm_length_buckets, 0)
};


ngx_int_t
ngx_http_pagedllm_metrics_init(ngx_conf_t *cf)
{
    ngx_str_t                       name = ngx_string("pagedllm_metrics");
    ngx_http_handler_pt            *h;
    ngx_http_core_main_conf_t      *cmcf;
    ngx_http_pagedllm_main_conf_t  *pmcf;

    pmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_pagedllm_module);

    pmcf->metrics = ngx_shared_memory_add(cf, &name,
                                     NGX_HTTP_PAGEDLLM_METRICS_ZONE
                                     * ngx_pagesize,
                                     &ngx_http_pagedllm_module);
    if (pmcf->metrics == NULL) {
        return NGX_ERROR;
    }

    pmcf->metrics->init = ngx_http_pagedllm_metrics_zone_init;

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_LOG_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = ngx_http_pagedllm_metrics_log;

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_metrics_zone_init(ngx_shm_zone_t *zone, void *data)
{
    ngx_slab_pool_t               *shpool;
    ngx_http_pagedllm_counters_t  *c;

    if (data) {
        zone->data = data;
        return NGX_OK;
    }

    shpool = (ngx_slab_pool_t *) zone->shm.addr;

    if (zone->shm.exists) {
        zone->data = shpool->data;
        return NGX_OK;
    }

    c = ngx_slab_calloc(shpool, sizeof(ngx_http_pagedllm_counters_t));
    if (c == NULL) {
        return NGX_ERROR;
    }

    shpool->data = c;
    zone->data = c;

    return NGX_OK;
}


/* Counts the outcome of every request a "pagedllm" location served. */
static ngx_int_t
ngx_http_pagedllm_metrics_log(ngx_http_request_t *r)
{
    ngx_uint_t                     status;
    ngx_http_core_loc_conf_t      *clcf;
    ngx_http_pagedllm_counters_t  *c;

    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    c = ngx_http_pagedllm_counters(r);

    if (clcf->handler != ngx_http_pagedllm_handler || c == NULL) {
        return NGX_OK;
    }

    status = r->err_status ? r->err_status : r->headers_out.status;

    if (status >= 100 && status < 600) {
        (void) ngx_atomic_fetch_add(&c->responses[status / 100 - 1], 1);
    }

    if (r->connection->error || status == NGX_HTTP_CLIENT_CLOSED_REQUEST) {
        (void) ngx_atomic_fetch_add(&c->client_aborts, 1);
    }

    ngx_http_pagedllm_observe_request(r, c);

    return NGX_OK;
}


/* A completion the engine finished (a FINISH ended one of its choices)
   into every histogram that has a value for it. */
static void
ngx_http_pagedllm_observe_request(ngx_http_request_t *r,
    ngx_http_pagedllm_counters_t *c)
{
    uint64_t                  e2e;
    ngx_uint_t                out;
    ngx_http_pagedllm_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_pagedllm_module);

    if (ctx == NULL || ctx->choices == NULL || !ctx->engine_timed) {
        return;
    }

    e2e = ngx_http_pagedllm_now_us() - ctx->start_us;
    out = ngx_http_pagedllm_completion_tokens(ctx);

    ngx_http_pagedllm_observe(c, NGX_HTTP_PAGEDLLM_H_E2E, e2e);
    ngx_http_pagedllm_observe(c, NGX_HTTP_PAGEDLLM_H_QUEUE,
                              ctx->queue_time_us);
    ngx_http_pagedllm_observe(c, NGX_HTTP_PAGEDLLM_H_PROMPT,
                              ctx->params.n_prompt);
    ngx_http_pagedllm_observe(c, NGX_HTTP_PAGEDLLM_H_GENERATION, out);

    if (!ctx->first_token) {
        return;
    }

    ngx_http_pagedllm_observe(c, NGX_HTTP_PAGEDLLM_H_TTFT, ctx->ttft_us);

    if (out > ctx->params.n && e2e > ctx->ttft_us) {
        ngx_http_pagedllm_observe(c, NGX_HTTP_PAGEDLLM_H_TPOT,
                                  (e2e - ctx->ttft_us)
                                  / (out - ctx->params.n));
    }
}


static void
ngx_http_pagedllm_observe(ngx_http_pagedllm_counters_t *c,
    ngx_http_pagedllm_hist_e h, uint64_t v)
{
    ngx_uint_t                      i;
    ngx_http_pagedllm_histogram_t  *hg = &ngx_http_pagedllm_histograms[h];

    for (i = 0; i < hg->n && v > hg->buckets[i].bound; i++) {
        /* void */
    }

    (void) ngx_atomic_fetch_add(&c->hist[h].buckets[i], 1);
    (void) ngx_atomic_fetch_add(&c->hist[h].sum, (ngx_atomic_int_t) v);
}


static ngx_http_pagedllm_counters_t *
ngx_http_pagedllm_counters(ngx_http_request_t *r)
{
    ngx_http_pagedllm_main_conf_t  *pmcf;

    pmcf = ngx_http_get_module_main_conf(r, ngx_http_pagedllm_module);

    return pmcf->metrics ? pmcf->metrics->data : NULL;
}


ngx_int_t
ngx_http_pagedllm_metrics_handler(ngx_http_request_t *r)
{
    ngx_int_t                      rc;
    ngx_buf_t                     *b;
    ngx_uint_t                     i, n;
    ngx_http_pagedllm_scrape_t    *e;
    ngx_http_pagedllm_counters_t  *c;

    static ngx_str_t  type =
        ngx_string("text/plain; version=0.0.4; charset=utf-8");

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    if (ngx_http_discard_request_body(r) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    n = ngx_http_pagedllm_channel_count();

    e = ngx_palloc(r->pool, (n + 1) * sizeof(ngx_http_pagedllm_scrape_t));
    if (e == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    for (i = 0; i < n; i++) {
        rc = ngx_http_pagedllm_channel_stats(i, &e[i].ec, &e[i].engine,
                                             &e[i].stats);
        if (rc == NGX_ERROR) {
            return NGX_HTTP_SERVICE_UNAVAILABLE;
        }
    }

    b = ngx_create_temp_buf(r->pool, NGX_HTTP_PAGEDLLM_METRICS_SIZE
                                     + n * NGX_HTTP_PAGEDLLM_ENGINE_SIZE);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b->last = ngx_http_pagedllm_metrics_engines(b->last, b->end, e, n);

    c = ngx_http_pagedllm_counters(r);

    if (c) {
        b->last = ngx_http_pagedllm_metrics_http(b->last, b->end, c);
        b->last = ngx_http_pagedllm_metrics_histograms(b->last, b->end, c);
    }

    return ngx_http_pagedllm_send(r, NGX_HTTP_OK, &type, b);
}


/*
 * Every engine's series, family by family.  An engine of a
 * pagedllm_engines group carries engine="PATH" in each of its samples;
 * the engine of pagedllm_engine alone keeps its samples unlabelled.
 */
static u_char *
ngx_http_pagedllm_metrics_engines(u_char *p, u_char *last,
    ngx_http_pagedllm_scrape_t *e, ngx_uint_t n)
{
    u_char                      *field;
    uint64_t                     v;
    ngx_uint_t                   i, k, attached;
    ngx_http_pagedllm_metric_t  *m;

    p = ngx_http_pagedllm_metric_head(p, last, "pagedllm_engine_attached",
            "gauge", "1 when this worker is attached to pagedllm-engine.");

    attached = 0;

    for (k = 0; k < n; k++) {
        attached += (e[k].engine != NULL);
        p = ngx_http_pagedllm_sample(p, last, "pagedllm_engine_attached",
                                     e[k].ec, NULL);
        p = ngx_slprintf(p, last, " %d\n", e[k].engine ? 1 : 0);
    }

    if (n == 0) {
        p = ngx_slprintf(p, last, "pagedllm_engine_attached 0\n");
    }

    if (attached == 0) {
        return p;
    }

    p = ngx_http_pagedllm_metric_head(p, last, "pagedllm_model_info",
            "gauge", "The model the engine serves, on which device.");

    for (k = 0; k < n; k++) {
        if (e[k].engine == NULL) {
            continue;
        }

        p = ngx_http_pagedllm_sample(p, last, "pagedllm_model_info",
                                     e[k].ec, "");
        p = ngx_slprintf(p, last, "model=\"");
        p = ngx_http_pagedllm_label_value(p, last, e[k].engine->model.data,
                                          e[k].engine->model.len);
        p = ngx_slprintf(p, last, "\",device=\"");
        p = ngx_http_pagedllm_label_value(p, last,
                                          (u_char *) e[k].stats.device,
                                          ngx_strlen(e[k].stats.device));
        p = ngx_slprintf(p, last, "\"} 1\n");
    }

    for (i = 0; i < sizeof(ngx_http_pagedllm_metrics)
                    / sizeof(ngx_http_pagedllm_metric_t); i++)
    {
        m = &ngx_http_pagedllm_metrics[i];

        if (m->type) {
            p = ngx_http_pagedllm_metric_head(p, last, m->name, m->type,
                                              m->help);
        }

        for (k = 0; k < n; k++) {
            if (e[k].engine == NULL) {
                continue;
            }

            field = (u_char *) &e[k].stats + m->offset;
            v = m->wide ? *(uint64_t *) field : *(uint32_t *) field;

            p = ngx_http_pagedllm_sample(p, last, m->name, e[k].ec,
                                         m->labels);
            p = ngx_slprintf(p, last, " %uL\n", v);
        }
    }

    return ngx_http_pagedllm_metrics_ratios(p, last, e, n);
}


/*
 * A sample's name and labels: engine="PATH" for an engine of a group,
 * then labels; labels "" leaves the set open for the caller's (which
 * closes it).
 */
static u_char *
ngx_http_pagedllm_sample(u_char *p, u_char *last, const char *name,
    ngx_http_pagedllm_engine_conf_t *ec, const char *labels)
{
    p = ngx_slprintf(p, last, "%s", name);

    if (!ec->labeled) {
        if (labels == NULL) {
            return p;
        }

        return *labels ? ngx_slprintf(p, last, "{%s}", labels)
                       : ngx_slprintf(p, last, "{");
    }

    p = ngx_slprintf(p, last, "{engine=\"");
    p = ngx_http_pagedllm_label_value(p, last, ec->path.data, ec->path.len);

    if (labels == NULL) {
        return ngx_slprintf(p, last, "\"}");
    }

    return *labels ? ngx_slprintf(p, last, "\",%s}", labels)
                   : ngx_slprintf(p, last, "\",");
}


/* vLLM's two ratios: the KV cache's used share, and the prefix cache's
   hits per full block looked up since the engine started (0 before the
   first lookup). */
static u_char *
ngx_http_pagedllm_metrics_ratios(u_char *p, u_char *last,
    ngx_http_pagedllm_scrape_t *e, ngx_uint_t n)
{
    uint64_t     used, hits;
    ngx_uint_t   k;
    pl_stats_t  *st;

    p = ngx_http_pagedllm_metric_head(p, last, "pagedllm_kv_cache_usage_ratio",
            "gauge", "Share of the device's KV cache blocks in use, 0 to 1.");

    for (k = 0; k < n; k++) {
        if (e[k].engine == NULL) {
            continue;
        }

        st = &e[k].stats;
        used = st->kv_blocks_total
               ? (uint64_t) st->kv_blocks_used * 1000000 / st->kv_blocks_total
               : 0;

        p = ngx_http_pagedllm_sample(p, last, "pagedllm_kv_cache_usage_ratio",
                                     e[k].ec, NULL);
        p = ngx_slprintf(p, last, " ");
        p = ngx_http_pagedllm_value(p, last, used, 1);
    }

    p = ngx_http_pagedllm_metric_head(p, last,
            "pagedllm_prefix_cache_hit_ratio", "gauge",
            "Share of the full prompt blocks looked up in the prefix cache "
            "that were found, since the engine started, 0 to 1.");

    for (k = 0; k < n; k++) {
        if (e[k].engine == NULL) {
            continue;
        }

        st = &e[k].stats;
        hits = st->prefix_cache_queries
               ? st->prefix_cache_hits * 1000000 / st->prefix_cache_queries
               : 0;

        p = ngx_http_pagedllm_sample(p, last,
                                     "pagedllm_prefix_cache_hit_ratio",
                                     e[k].ec, NULL);
        p = ngx_slprintf(p, last, " ");
        p = ngx_http_pagedllm_value(p, last, hits, 1);
    }

    return p;
}


static u_char *
ngx_http_pagedllm_metrics_histograms(u_char *p, u_char *last,
    ngx_http_pagedllm_counters_t *c)
{
    uint64_t                        total;
    ngx_uint_t                      h, i;
    ngx_http_pagedllm_histogram_t  *hg;

    for (h = 0; h < NGX_HTTP_PAGEDLLM_H_COUNT; h++) {
        hg = &ngx_http_pagedllm_histograms[h];
        total = 0;

        p = ngx_http_pagedllm_metric_head(p, last, hg->name, "histogram",
                                          hg->help);

        for (i = 0; i < hg->n; i++) {
            total += c->hist[h].buckets[i];
            p = ngx_slprintf(p, last, "%s_bucket{le=\"%s\"} %uL\n",
                             hg->name, hg->buckets[i].le, total);
        }

        total += c->hist[h].buckets[hg->n];

        p = ngx_slprintf(p, last, "%s_bucket{le=\"+Inf\"} %uL\n%s_sum ",
                         hg->name, total, hg->name);
        p = ngx_http_pagedllm_value(p, last, c->hist[h].sum, hg->seconds);
        p = ngx_slprintf(p, last, "%s_count %uL\n", hg->name, total);
    }

    return p;
}


/* v and a newline; with millionths, v millionths as a decimal (a time
   in us as seconds, a ratio) */
static u_char *
ngx_http_pagedllm_value(u_char *p, u_char *last, uint64_t v,
    ngx_uint_t millionths)
{
    if (!millionths) {
        return ngx_slprintf(p, last, "%uL\n", v);
    }

    return ngx_slprintf(p, last, "%uL.%06uL\n", v / 1000000, v % 1000000);
}


static u_char *
ngx_http_pagedllm_metrics_http(u_char *p, u_char *last,
    ngx_http_pagedllm_counters_t *c)
{
    ngx_uint_t  i;

    p = ngx_http_pagedllm_metric_head(p, last,
            "pagedllm_http_responses_total", "counter",
            "Responses of the API locations by status class, all workers.");

    for (i = 0; i < 5; i++) {
        p = ngx_slprintf(p, last,
                         "pagedllm_http_responses_total{code=\"%uixx\"} %uA\n",
                         i + 1, c->responses[i]);
    }

    p = ngx_http_pagedllm_metric_head(p, last, "pagedllm_client_aborts_total",
            "counter", "API requests whose client closed the connection or "
            "reset the stream before the end, all workers.");

    return ngx_slprintf(p, last, "pagedllm_client_aborts_total %uA\n",
                        c->client_aborts);
}


static u_char *
ngx_http_pagedllm_metric_head(u_char *p, u_char *last, const char *name,
    const char *type, const char *help)
{
    return ngx_slprintf(p, last, "# HELP %s %s\n# TYPE %s %s\n",
                        name, help, name, type);
}


/* A label value: backslash, double quote and newline escaped. */
static u_char *
ngx_http_pagedllm_label_value(u_char *p, u_char *last, u_char *s, size_t len)
{
    size_t  i;

    for (i = 0; i < len && last - p >= 2; i++) {

        switch (s[i]) {

        case '\\':
        case '"':
            *p++ = '\\';
            *p++ = s[i];
            break;

        case '\n':
            *p++ = '\\';
            *p++ = 'n';
            break;

        default:
            *p++ = s[i];
        }
    }

    return p;
}
