
/*
 * ngx_http_pagedllm_module: directives, configuration and process init.
 *
 *     pagedllm_engine unix:/run/pagedllm/engine.sock;     (http)
 *     pagedllm_attach_timeout 1s;         (http) wait for the engine's hello
 *     pagedllm_reattach_interval 1s;      (http) retry while detached
 *     pagedllm_thread_pool default;       (http) nginx thread pool for
 *                                         tokenizer loads, long prompts
 *     location /v1/ { pagedllm; }         /v1/completions, /v1/models,
 *                                         /v1/tokenize (location /: vLLM's
 *                                         /tokenize, /detokenize, /version)
 *     location = /pagedllm/status { pagedllm_status; }
 *     location = /metrics { pagedllm_metrics; }   Prometheus text format
 *     pagedllm_max_unsent 1m;             unsent output before an abort
 *     pagedllm_retry_after 1s;            Retry-After of a 503
 *     pagedllm_timeout 300s;              engine silence before a 504
 *     pagedllm_cors on | off | ORIGIN...; browsers of these origins (on:
 *                                         any) may call the API
 *     location = /health { pagedllm_health [5s]; }   200 while the engine
 *                                         ran its loop within the time
 *     pagedllm_limit_tokens zone=NAME:SIZE key=$var rate=N/m [burst=M];
 *                                         token quotas per key
 *     location /ui/ { pagedllm_ui; }      the playground page at /ui/, the
 *                                         live KV block map at /ui/blockmap
 *     pagedllm_route_only DIR [model=NAME];   (http) no engine: a front
 *                                         tier that computes
 *                                         $pagedllm_prefix_hash with the
 *                                         tokenizer of the model folder DIR
 *     pagedllm_prefix_hash_tokens 64;     K: $pagedllm_prefix_hash hashes
 *                                         the prompt's first K tokens
 */


#include "ngx_http_pagedllm_module.h"


static char *ngx_http_pagedllm_api_set(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_pagedllm_set_handler(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static char *ngx_http_pagedllm_cors_set(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static void *ngx_http_pagedllm_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_pagedllm_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_http_pagedllm_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_pagedllm_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static ngx_int_t ngx_http_pagedllm_init_process(ngx_cycle_t *cycle);
static void ngx_http_pagedllm_exit_process(ngx_cycle_t *cycle);
#if (NGX_THREADS)
static void ngx_http_pagedllm_thread_handler(void *data, ngx_log_t *log);
static void ngx_http_pagedllm_thread_done(ngx_event_t *ev);
#endif


/* Work handed to the thread pool, and what runs after it in the event
   loop. */
typedef struct {
    ngx_http_pagedllm_work_pt      work;
    ngx_http_pagedllm_done_pt      done;
    void                          *data;
} ngx_http_pagedllm_job_t;


/* pagedllm_prefix_hash_tokens: a prompt's first 1 to 64K tokens */
static ngx_conf_num_bounds_t  ngx_http_pagedllm_prefix_hash_bounds = {
    ngx_conf_check_num_bounds, 1, 65536
};


/* the content handler each location directive installs */
static ngx_http_handler_pt  ngx_http_pagedllm_api = ngx_http_pagedllm_handler;
static ngx_http_handler_pt  ngx_http_pagedllm_status =
    ngx_http_pagedllm_status_handler;
static ngx_http_handler_pt  ngx_http_pagedllm_metrics =
    ngx_http_pagedllm_metrics_handler;
static ngx_http_handler_pt  ngx_http_pagedllm_ui =
    ngx_http_pagedllm_ui_handler;
static ngx_http_handler_pt  ngx_http_pagedllm_error =
    ngx_http_pagedllm_error_handler;


static ngx_command_t  ngx_http_pagedllm_commands[] = {

    { ngx_string("pagedllm_engine"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_pagedllm_engine_set,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("pagedllm_engines"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_BLOCK|NGX_CONF_TAKE1,
      ngx_http_pagedllm_engines_block,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("pagedllm_route"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_pagedllm_route_set,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("pagedllm_attach_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_pagedllm_main_conf_t, attach_timeout),
      NULL },

    { ngx_string("pagedllm_reattach_interval"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_pagedllm_main_conf_t, reattach_interval),
      NULL },

    { ngx_string("pagedllm_thread_pool"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_pagedllm_main_conf_t, thread_pool_name),
      NULL },

    { ngx_string("pagedllm"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS|NGX_CONF_TAKE1,
      ngx_http_pagedllm_api_set,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      &ngx_http_pagedllm_api },

    { ngx_string("pagedllm_status"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_pagedllm_set_handler,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      &ngx_http_pagedllm_status },

    { ngx_string("pagedllm_metrics"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_pagedllm_set_handler,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      &ngx_http_pagedllm_metrics },

    { ngx_string("pagedllm_max_unsent"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_pagedllm_loc_conf_t, max_unsent),
      NULL },

    { ngx_string("pagedllm_retry_after"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_sec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_pagedllm_loc_conf_t, retry_after),
      NULL },

    { ngx_string("pagedllm_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_pagedllm_loc_conf_t, timeout),
      NULL },

    { ngx_string("pagedllm_cors"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_pagedllm_cors_set,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("pagedllm_health"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS|NGX_CONF_TAKE1,
      ngx_http_pagedllm_health_set,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("pagedllm_limit_tokens"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE3
                        |NGX_CONF_TAKE4,
      ngx_http_pagedllm_limit_tokens_set,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("pagedllm_ui"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_pagedllm_set_handler,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      &ngx_http_pagedllm_ui },

    { ngx_string("pagedllm_error"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_pagedllm_set_handler,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      &ngx_http_pagedllm_error },

    { ngx_string("pagedllm_route_only"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE12,
      ngx_http_pagedllm_route_only_set,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("pagedllm_prefix_hash_tokens"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_pagedllm_loc_conf_t, prefix_hash_tokens),
      &ngx_http_pagedllm_prefix_hash_bounds },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_pagedllm_module_ctx = {
    ngx_http_pagedllm_add_variables,       /* preconfiguration */
    ngx_http_pagedllm_metrics_init,        /* postconfiguration */

    ngx_http_pagedllm_create_main_conf,    /* create main configuration */
    ngx_http_pagedllm_init_main_conf,      /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_pagedllm_create_loc_conf,     /* create location configuration */
    ngx_http_pagedllm_merge_loc_conf       /* merge location configuration */
};


ngx_module_t  ngx_http_pagedllm_module = {
    NGX_MODULE_V1,
    &ngx_http_pagedllm_module_ctx,         /* module context */
    ngx_http_pagedllm_commands,            /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    ngx_http_pagedllm_init_process,        /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_pagedllm_exit_process,        /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


/* pagedllm [GROUP]: the API handler, serving from GROUP (resolved once the
   http block is read: ngx_http_pagedllm_group_find()) */
static char *
ngx_http_pagedllm_api_set(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_pagedllm_loc_conf_t *plcf = conf;

    ngx_str_t  *value;

    if (plcf->group_name.data) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (cf->args->nelts == 2) {
        plcf->group_name = value[1];

    } else {
        ngx_str_set(&plcf->group_name, "");
    }

    return ngx_http_pagedllm_set_handler(cf, cmd, conf);
}


/* pagedllm, pagedllm_status, pagedllm_metrics, pagedllm_error: cmd->post
   is the handler */
static char *
ngx_http_pagedllm_set_handler(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_handler_pt       *handler = cmd->post;
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = *handler;

    return NGX_CONF_OK;
}


/*
 * pagedllm_cors on | off | ORIGIN...: an origin is what a browser sends
 * in Origin, "scheme://host[:port]" with no path, so one written with a
 * path or a trailing slash, which would never match, is refused here.
 */
static char *
ngx_http_pagedllm_cors_set(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_pagedllm_loc_conf_t *plcf = conf;

    u_char      *host;
    ngx_str_t   *value, *origin;
    ngx_uint_t   i;

    if (plcf->cors != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (cf->args->nelts == 2 && ngx_strcmp(value[1].data, "off") == 0) {
        plcf->cors = NGX_HTTP_PAGEDLLM_CORS_OFF;
        return NGX_CONF_OK;
    }

    if (cf->args->nelts == 2 && ngx_strcmp(value[1].data, "on") == 0) {
        plcf->cors = NGX_HTTP_PAGEDLLM_CORS_ANY;
        return NGX_CONF_OK;
    }

    plcf->cors_origins = ngx_array_create(cf->pool, cf->args->nelts - 1,
                                          sizeof(ngx_str_t));
    if (plcf->cors_origins == NULL) {
        return NGX_CONF_ERROR;
    }

    for (i = 1; i < cf->args->nelts; i++) {
        host = (u_char *) ngx_strstr(value[i].data, "://");

        if (host == NULL
            || (ngx_strncmp(value[i].data, "http://", 7) != 0
                && ngx_strncmp(value[i].data, "https://", 8) != 0)
            || host[3] == '\0'
            || ngx_strlchr(host + 3, value[i].data + value[i].len, '/'))
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid origin \"%V\": \"on\", \"off\" or "
                               "origins like \"https://example.com:8443\"",
                               &value[i]);
            return NGX_CONF_ERROR;
        }

        origin = ngx_array_push(plcf->cors_origins);
        if (origin == NULL) {
            return NGX_CONF_ERROR;
        }

        *origin = value[i];
    }

    plcf->cors = NGX_HTTP_PAGEDLLM_CORS_LIST;

    return NGX_CONF_OK;
}


static void *
ngx_http_pagedllm_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_pagedllm_main_conf_t  *pmcf;

    pmcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_pagedllm_main_conf_t));
    if (pmcf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     pmcf->metrics = NULL;
     *     pmcf->thread_pool_name = { 0, NULL };
     *     pmcf->route_only = NULL;
     */

    if (ngx_array_init(&pmcf->engines, cf->pool, 4,
                       sizeof(ngx_http_pagedllm_engine_conf_t))
        != NGX_OK
        || ngx_array_init(&pmcf->groups, cf->pool, 2,
                          sizeof(ngx_http_pagedllm_group_t))
           != NGX_OK)
    {
        return NULL;
    }

    pmcf->attach_timeout = NGX_CONF_UNSET_MSEC;
    pmcf->reattach_interval = NGX_CONF_UNSET_MSEC;

    return pmcf;
}


static char *
ngx_http_pagedllm_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_pagedllm_main_conf_t *pmcf = conf;

    ngx_conf_init_msec_value(pmcf->attach_timeout, 1000);
    ngx_conf_init_msec_value(pmcf->reattach_interval, 1000);

    if (pmcf->engines.nelts && pmcf->route_only) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"pagedllm_route_only\" is for an nginx that "
                           "attaches to no engine: drop \"pagedllm_engine\" "
                           "(and \"pagedllm_engines\") or it");
        return NGX_CONF_ERROR;
    }

    if (pmcf->engines.nelts == 0) {
        return NGX_CONF_OK;
    }

#if (NGX_THREADS)

    /* NULL: nginx's "default" pool, made if no thread_pool names it */

    pmcf->thread_pool = ngx_thread_pool_add(cf,
                            pmcf->thread_pool_name.len
                            ? &pmcf->thread_pool_name : NULL);
    if (pmcf->thread_pool == NULL) {
        return NGX_CONF_ERROR;
    }

#else

    if (pmcf->thread_pool_name.len) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"pagedllm_thread_pool\" needs nginx built "
                           "--with-threads");
        return NGX_CONF_ERROR;
    }

#endif

    return NGX_CONF_OK;
}


static void *
ngx_http_pagedllm_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_pagedllm_loc_conf_t  *plcf;

    plcf = ngx_palloc(cf->pool, sizeof(ngx_http_pagedllm_loc_conf_t));
    if (plcf == NULL) {
        return NULL;
    }

    plcf->max_unsent = NGX_CONF_UNSET_SIZE;
    plcf->retry_after = NGX_CONF_UNSET;
    plcf->timeout = NGX_CONF_UNSET_MSEC;
    plcf->cors = NGX_CONF_UNSET_UINT;
    plcf->cors_origins = NULL;
    plcf->health_max_age = NGX_CONF_UNSET_MSEC;
    plcf->limits = NGX_CONF_UNSET_PTR;
    plcf->prefix_hash_tokens = NGX_CONF_UNSET;
    ngx_str_null(&plcf->group_name);
    plcf->group = NULL;
    plcf->route.policy = NGX_CONF_UNSET_UINT;
    plcf->route.tokens = NGX_CONF_UNSET_SIZE;
    plcf->route.spill = NGX_CONF_UNSET_UINT;

    return plcf;
}


static char *
ngx_http_pagedllm_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_pagedllm_loc_conf_t *prev = parent;
    ngx_http_pagedllm_loc_conf_t *conf = child;

    ngx_conf_merge_size_value(conf->max_unsent, prev->max_unsent,
                              1024 * 1024);
    ngx_conf_merge_sec_value(conf->retry_after, prev->retry_after, 1);
    ngx_conf_merge_msec_value(conf->timeout, prev->timeout, 300000);

    if (conf->cors == NGX_CONF_UNSET_UINT) {
        conf->cors = prev->cors;
        conf->cors_origins = prev->cors_origins;
    }

    ngx_conf_merge_uint_value(conf->cors, prev->cors,
                              NGX_HTTP_PAGEDLLM_CORS_OFF);
    ngx_conf_merge_ptr_value(conf->limits, prev->limits, NULL);
    ngx_conf_merge_value(conf->prefix_hash_tokens, prev->prefix_hash_tokens,
                         64);

    ngx_http_pagedllm_route_merge(&conf->route, &prev->route);

    if (conf->group_name.data) {
        return ngx_http_pagedllm_group_find(cf, conf);
    }

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_pagedllm_init_process(ngx_cycle_t *cycle)
{
    ngx_http_pagedllm_main_conf_t  *pmcf;

    pmcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_pagedllm_module);
    if (pmcf == NULL || pmcf->engines.nelts == 0) {
        return NGX_OK;
    }

    /* cache managers and loaders run init_process too: only workers attach */

    if (ngx_process != NGX_PROCESS_WORKER
        && ngx_process != NGX_PROCESS_SINGLE)
    {
        return NGX_OK;
    }

    return ngx_http_pagedllm_channel_init(cycle, pmcf);
}


static void
ngx_http_pagedllm_exit_process(ngx_cycle_t *cycle)
{
    ngx_http_pagedllm_channel_exit(cycle);
}


/*
 * Runs work(data) on the thread pool, then done(data) in the event loop.
 * Without threads, or when the pool's queue is full, both run here and
 * now: the caller must expect done() to have run when this returns.
 */
ngx_int_t
ngx_http_pagedllm_thread_run(ngx_pool_t *pool, ngx_log_t *log,
    ngx_http_pagedllm_work_pt work, ngx_http_pagedllm_done_pt done,
    void *data)
{
#if (NGX_THREADS)
    ngx_thread_task_t              *task;
    ngx_http_pagedllm_job_t        *job;
    ngx_http_pagedllm_main_conf_t  *pmcf;

    pmcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_pagedllm_module);

    task = ngx_thread_task_alloc(pool, sizeof(ngx_http_pagedllm_job_t));
    if (task == NULL) {
        return NGX_ERROR;
    }

    job = task->ctx;
    job->work = work;
    job->done = done;
    job->data = data;

    task->handler = ngx_http_pagedllm_thread_handler;
    task->event.handler = ngx_http_pagedllm_thread_done;
    task->event.data = job;
    task->event.log = log;

    if (ngx_thread_task_post(pmcf->thread_pool, task) == NGX_OK) {
        return NGX_OK;
    }

    ngx_log_error(NGX_LOG_WARN, log, 0,
                  "pagedllm: thread pool queue full, working inline");
#endif

    work(data, log);
    done(data);

    return NGX_OK;
}


#if (NGX_THREADS)

static void
ngx_http_pagedllm_thread_handler(void *data, ngx_log_t *log)
{
    ngx_http_pagedllm_job_t  *job = data;

    job->work(job->data, log);
}


static void
ngx_http_pagedllm_thread_done(ngx_event_t *ev)
{
    ngx_http_pagedllm_job_t  *job = ev->data;

    job->done(job->data);
}

#endif
