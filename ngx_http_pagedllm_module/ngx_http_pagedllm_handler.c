
/*
 * ngx_http_pagedllm_handler: the request side's entry.  Routes
 * /v1/completions, /v1/chat/completions, /v1/models, vLLM's /tokenize,
 * /detokenize and /version, and the status location, answers the GETs
 * (parked until the engine attaches), gives a POST its ctx and reads its
 * body; and sends the answers made whole: JSON, OpenAI-style errors, 503
 * with Retry-After, 405 with Allow.  CORS (ngx_http_pagedllm_cors.c) comes
 * first, before routing.
 * Every request gets a cleanup handler, so whichever way it ends (499
 * included) a running generation is aborted exactly once.
 */


#include "ngx_http_pagedllm_module.h"
#include "ngx_http_pagedllm_handler.h"


typedef enum {
    NGX_HTTP_PAGEDLLM_ROUTE_NONE = 0,
    NGX_HTTP_PAGEDLLM_ROUTE_COMPLETIONS,
    NGX_HTTP_PAGEDLLM_ROUTE_CHAT,
    NGX_HTTP_PAGEDLLM_ROUTE_MODELS,
    NGX_HTTP_PAGEDLLM_ROUTE_TOKENIZE,
    NGX_HTTP_PAGEDLLM_ROUTE_DETOKENIZE,
    NGX_HTTP_PAGEDLLM_ROUTE_VERSION
} ngx_http_pagedllm_route_e;


typedef struct {
    ngx_str_t                     path;          /* below the location */
    ngx_http_pagedllm_route_e     route;
} ngx_http_pagedllm_path_t;


static ngx_http_pagedllm_route_e ngx_http_pagedllm_route(
    ngx_http_request_t *r, ngx_str_t *id);
static ngx_http_pagedllm_ctx_t *ngx_http_pagedllm_create_ctx(
    ngx_http_request_t *r, ngx_http_pagedllm_resume_pt resume);
static void ngx_http_pagedllm_cleanup(void *data);
static ngx_int_t ngx_http_pagedllm_get(ngx_http_request_t *r,
    ngx_http_pagedllm_resume_pt resume, ngx_uint_t need_engine);
static ngx_int_t ngx_http_pagedllm_models_answer(ngx_http_request_t *r);
static void ngx_http_pagedllm_models_resume(ngx_http_request_t *r);
static void ngx_http_pagedllm_status_resume(ngx_http_request_t *r);
static ngx_int_t ngx_http_pagedllm_send_status(ngx_http_request_t *r);
static void ngx_http_pagedllm_body_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_pagedllm_not_allowed(ngx_http_request_t *r,
    ngx_str_t *allow);
static ngx_int_t ngx_http_pagedllm_retry_after(ngx_http_request_t *r);


static ngx_http_pagedllm_path_t  ngx_http_pagedllm_paths[] = {
    { ngx_string("completions"), NGX_HTTP_PAGEDLLM_ROUTE_COMPLETIONS },
    { ngx_string("chat/completions"), NGX_HTTP_PAGEDLLM_ROUTE_CHAT },
    { ngx_string("models"), NGX_HTTP_PAGEDLLM_ROUTE_MODELS },
    { ngx_string("tokenize"), NGX_HTTP_PAGEDLLM_ROUTE_TOKENIZE },
    { ngx_string("detokenize"), NGX_HTTP_PAGEDLLM_ROUTE_DETOKENIZE },
    { ngx_string("version"), NGX_HTTP_PAGEDLLM_ROUTE_VERSION },
    { ngx_null_string, NGX_HTTP_PAGEDLLM_ROUTE_NONE }
};


static const ngx_http_pagedllm_events_t  ngx_http_pagedllm_events = {
    ngx_http_pagedllm_on_tokens,
    ngx_http_pagedllm_on_finish,
    ngx_http_pagedllm_on_error,
    ngx_http_pagedllm_flush
};


ngx_int_t
ngx_http_pagedllm_handler(ngx_http_request_t *r)
{
    ngx_int_t                   rc;
    ngx_str_t                   allow;
    ngx_http_pagedllm_ctx_t    *ctx;
    ngx_http_pagedllm_error_t   err;
    ngx_http_pagedllm_route_e   route;

    rc = ngx_http_pagedllm_cors(r);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    route = ngx_http_pagedllm_route(r, NULL);

    if (route == NGX_HTTP_PAGEDLLM_ROUTE_NONE) {
        if (ngx_http_discard_request_body(r) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        ngx_http_pagedllm_error_set(&err, NGX_HTTP_NOT_FOUND, NULL,
                                    "Unknown path: %V", &r->uri);
        err.code = "not_found";
        return ngx_http_pagedllm_send_error(r, &err);
    }

    if (route == NGX_HTTP_PAGEDLLM_ROUTE_MODELS) {
        if (r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD)) {
            return ngx_http_pagedllm_get(r, ngx_http_pagedllm_models_resume,
                                         1);
        }

        ngx_str_set(&allow, "GET, HEAD");

    } else if (route == NGX_HTTP_PAGEDLLM_ROUTE_VERSION) {
        if (r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD)) {
            if (ngx_http_discard_request_body(r) != NGX_OK) {
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }

            return ngx_http_pagedllm_send_json(r, NGX_HTTP_OK,
                                   ngx_http_pagedllm_version_json(r->pool));
        }

        ngx_str_set(&allow, "GET, HEAD");

    } else {
        if (r->method == NGX_HTTP_POST) {
            ctx = ngx_http_pagedllm_create_ctx(r,
                                               ngx_http_pagedllm_completions);
            if (ctx == NULL) {
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }

            ctx->chat = (route == NGX_HTTP_PAGEDLLM_ROUTE_CHAT);
            ctx->tokenize = (route == NGX_HTTP_PAGEDLLM_ROUTE_TOKENIZE);
            ctx->detokenize = (route == NGX_HTTP_PAGEDLLM_ROUTE_DETOKENIZE);

            rc = ngx_http_read_client_request_body(r,
                                              ngx_http_pagedllm_body_handler);
            if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
                return rc;
            }

            return NGX_DONE;
        }

        ngx_str_set(&allow, "POST");
    }

    return ngx_http_pagedllm_not_allowed(r, &allow);
}


ngx_int_t
ngx_http_pagedllm_status_handler(ngx_http_request_t *r)
{
    ngx_str_t  allow;

    if (r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD)) {
        return ngx_http_pagedllm_get(r, ngx_http_pagedllm_status_resume, 0);
    }

    ngx_str_set(&allow, "GET, HEAD");

    return ngx_http_pagedllm_not_allowed(r, &allow);
}


/* The path below the location, "v1/" allowed before it: one of the
   paths above, or "models/ID" (id: ID, or empty; a model's name may hold
   slashes). */
static ngx_http_pagedllm_route_e
ngx_http_pagedllm_route(ngx_http_request_t *r, ngx_str_t *id)
{
    u_char                    *p, *last;
    ngx_http_pagedllm_path_t  *path;
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    p = r->uri.data;
    last = p + r->uri.len;

    if (r->uri.len >= clcf->name.len
        && ngx_strncmp(p, clcf->name.data, clcf->name.len) == 0)
    {
        p += clcf->name.len;
    }

    while (p < last && *p == '/') {
        p++;
    }

    if (last - p >= 3 && ngx_strncmp(p, "v1/", 3) == 0) {
        p += 3;
    }

    if (id != NULL) {
        ngx_str_null(id);
    }

    for (path = ngx_http_pagedllm_paths; path->path.len; path++) {
        if ((size_t) (last - p) == path->path.len
            && ngx_strncmp(p, path->path.data, path->path.len) == 0)
        {
            return path->route;
        }
    }

    if ((size_t) (last - p) > sizeof("models/") - 1
        && ngx_strncmp(p, "models/", sizeof("models/") - 1) == 0)
    {
        if (id != NULL) {
            id->data = p + sizeof("models/") - 1;
            id->len = last - id->data;
        }

        return NGX_HTTP_PAGEDLLM_ROUTE_MODELS;
    }

    return NGX_HTTP_PAGEDLLM_ROUTE_NONE;
}


static ngx_http_pagedllm_ctx_t *
ngx_http_pagedllm_create_ctx(ngx_http_request_t *r,
    ngx_http_pagedllm_resume_pt resume)
{
    ngx_http_cleanup_t       *hcln;
    ngx_http_pagedllm_ctx_t  *ctx;

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_pagedllm_ctx_t));
    if (ctx == NULL) {
        return NULL;
    }

    hcln = ngx_http_cleanup_add(r, 0);
    if (hcln == NULL) {
        return NULL;
    }

    hcln->handler = ngx_http_pagedllm_cleanup;
    hcln->data = ctx;

    ctx->request = r;
    ctx->start_us = ngx_http_pagedllm_now_us();
    ctx->resume = resume;
    ctx->events = &ngx_http_pagedllm_events;
    ctx->timer.handler = ngx_http_pagedllm_timeout;
    ctx->timer.data = ctx;
    ctx->timer.log = r->connection->log;

    ngx_http_set_ctx(r, ctx, ngx_http_pagedllm_module);

    return ctx;
}


static void
ngx_http_pagedllm_cleanup(void *data)
{
    ngx_http_pagedllm_ctx_t  *ctx = data;

    if (ctx->timer.timer_set) {
        ngx_del_timer(&ctx->timer);
    }

    if (ctx->state == NGX_HTTP_PAGEDLLM_RUNNING) {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                       "pagedllm: request %uL aborted",
                       (uint64_t) ctx->node.key);
    }

    ngx_http_pagedllm_channel_cancel(ctx);
}


/* A GET that needs an engine's identity: answer now, or park once. */
static ngx_int_t
ngx_http_pagedllm_get(ngx_http_request_t *r,
    ngx_http_pagedllm_resume_pt resume, ngx_uint_t need_engine)
{
    ngx_http_pagedllm_ctx_t  *ctx;

    if (ngx_http_discard_request_body(r) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx = ngx_http_pagedllm_create_ctx(r, resume);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ngx_http_pagedllm_channel_engine(ctx) == NULL
        && ngx_http_pagedllm_channel_park(ctx) == NGX_OK)
    {
        r->main->count++;
        r->read_event_handler = ngx_http_test_reading;
        return NGX_DONE;
    }

    return need_engine ? ngx_http_pagedllm_models_answer(r)
                       : ngx_http_pagedllm_send_status(r);
}


/* GET models (the list of the models the location's engines serve) or
   models/ID (that model; any other ID is a 404, as OpenAI answers an
   unknown model) */
static ngx_int_t
ngx_http_pagedllm_models_answer(ngx_http_request_t *r)
{
    ngx_str_t                    id;
    ngx_uint_t                   i, n;
    ngx_http_pagedllm_error_t    err;
    ngx_http_pagedllm_engine_t  *engines[NGX_HTTP_PAGEDLLM_MAX_ENGINES];

    n = ngx_http_pagedllm_channel_models(r, engines);

    if (n == 0) {
        return ngx_http_pagedllm_unavailable(r, "the engine is not attached");
    }

    (void) ngx_http_pagedllm_route(r, &id);

    if (id.len == 0) {
        return ngx_http_pagedllm_send_json(r, NGX_HTTP_OK,
                   ngx_http_pagedllm_models_json(r->pool, engines, n, 0));
    }

    for (i = 0; i < n; i++) {
        if (id.len == engines[i]->model.len
            && ngx_strncmp(id.data, engines[i]->model.data, id.len) == 0)
        {
            return ngx_http_pagedllm_send_json(r, NGX_HTTP_OK,
                       ngx_http_pagedllm_models_json(r->pool, &engines[i], 1,
                                                     1));
        }
    }

    ngx_http_pagedllm_error_set(&err, NGX_HTTP_NOT_FOUND, "model",
                                "The model `%V` does not exist", &id);
    err.code = "model_not_found";

    return ngx_http_pagedllm_send_error(r, &err);
}


static void
ngx_http_pagedllm_models_resume(ngx_http_request_t *r)
{
    ngx_http_finalize_request(r, ngx_http_pagedllm_models_answer(r));
}


static void
ngx_http_pagedllm_status_resume(ngx_http_request_t *r)
{
    ngx_http_finalize_request(r, ngx_http_pagedllm_send_status(r));
}


/*
 * The status of the engine of pagedllm_engine alone, as one object; with
 * pagedllm_engines groups, {"engines": [...]}, one object per engine
 * with its "name" (the socket path).  503 with Retry-After while none is
 * attached.
 */
static ngx_int_t
ngx_http_pagedllm_send_status(ngx_http_request_t *r)
{
    json_t                           *list, *j;
    ngx_int_t                         rc;
    ngx_uint_t                        i, n, attached;
    pl_stats_t                        stats;
    ngx_http_pagedllm_engine_t       *engine;
    ngx_http_pagedllm_engine_conf_t  *ec;

    n = ngx_http_pagedllm_channel_count();

    list = ngx_http_pagedllm_json_pool(r->pool, json_array());
    if (list == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    j = NULL;
    ec = NULL;
    attached = 0;

    for (i = 0; i < n; i++) {
        rc = ngx_http_pagedllm_channel_stats(i, &ec, &engine, &stats);

        if (rc == NGX_ERROR) {
            return NGX_HTTP_SERVICE_UNAVAILABLE;
        }

        attached += (rc == NGX_OK);

        j = ngx_http_pagedllm_status_object(r->pool, engine, &stats);

        if (j == NULL
            || json_object_set_new(j, "name",
                   json_stringn((char *) ec->path.data, ec->path.len))
               != 0
            || json_array_append(list, j) != 0)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    if (n == 1 && !ec->labeled) {
        json_object_del(j, "name");

    } else {
        j = ngx_http_pagedllm_json_pool(r->pool,
                                        json_pack("{s:O}", "engines", list));
    }

    if (j == NULL) {
        j = ngx_http_pagedllm_status_object(r->pool, NULL, NULL);
    }

    if (attached) {
        return ngx_http_pagedllm_send_json(r, NGX_HTTP_OK,
                   ngx_http_pagedllm_json_buf(r->pool, j));
    }

    if (ngx_http_pagedllm_retry_after(r) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_pagedllm_send_json(r, NGX_HTTP_SERVICE_UNAVAILABLE,
               ngx_http_pagedllm_json_buf(r->pool, j));
}


static void
ngx_http_pagedllm_body_handler(ngx_http_request_t *r)
{
    ngx_http_pagedllm_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_pagedllm_module);

    if (ngx_http_pagedllm_channel_engine(ctx) == NULL
        && ngx_http_pagedllm_channel_park(ctx) == NGX_OK)
    {
        r->read_event_handler = ngx_http_test_reading;
        return;
    }

    ngx_http_pagedllm_completions(r);
}


ngx_int_t
ngx_http_pagedllm_send_json(ngx_http_request_t *r, ngx_uint_t status,
    ngx_buf_t *b)
{
    static ngx_str_t  json = ngx_string("application/json");

    return ngx_http_pagedllm_send(r, status, &json, b);
}


/* A whole answer in one buffer (NULL: it could not be made). */
ngx_int_t
ngx_http_pagedllm_send(ngx_http_request_t *r, ngx_uint_t status,
    ngx_str_t *type, ngx_buf_t *b)
{
    ngx_int_t    rc;
    ngx_chain_t  out;

    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    r->headers_out.status = status;
    r->headers_out.content_type = *type;
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;
    r->headers_out.content_length_n = ngx_buf_size(b);

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    b->last_buf = (r == r->main);
    b->last_in_chain = 1;

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


ngx_int_t
ngx_http_pagedllm_send_error(ngx_http_request_t *r,
    ngx_http_pagedllm_error_t *err)
{
    return ngx_http_pagedllm_send_json(r, err->status,
                                 ngx_http_pagedllm_error_json(r->pool, err));
}


ngx_int_t
ngx_http_pagedllm_unavailable(ngx_http_request_t *r, const char *reason)
{
    ngx_http_pagedllm_error_t  err;

    ngx_http_pagedllm_error_set(&err, NGX_HTTP_SERVICE_UNAVAILABLE, NULL,
                                "%s", reason);
    err.code = "engine_unavailable";

    return ngx_http_pagedllm_send_retry(r, &err);
}


/* err, a 429 or 503 the client may retry, with Retry-After. */
ngx_int_t
ngx_http_pagedllm_send_retry(ngx_http_request_t *r,
    ngx_http_pagedllm_error_t *err)
{
    if (ngx_http_pagedllm_retry_after(r) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_pagedllm_send_error(r, err);
}


/* 405 with the methods the path takes in Allow */
static ngx_int_t
ngx_http_pagedllm_not_allowed(ngx_http_request_t *r, ngx_str_t *allow)
{
    ngx_http_pagedllm_error_t  err;

    if (ngx_http_discard_request_body(r) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ngx_http_pagedllm_add_header(r, "Allow", allow) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_http_pagedllm_error_set(&err, NGX_HTTP_NOT_ALLOWED, NULL,
                                "Method %V is not allowed here, use %V",
                                &r->method_name, allow);
    err.code = "method_not_allowed";

    return ngx_http_pagedllm_send_error(r, &err);
}


static ngx_int_t
ngx_http_pagedllm_retry_after(ngx_http_request_t *r)
{
    ngx_str_t                      value;
    ngx_http_pagedllm_loc_conf_t  *plcf;

    plcf = ngx_http_get_module_loc_conf(r, ngx_http_pagedllm_module);

    value.data = ngx_pnalloc(r->pool, NGX_TIME_T_LEN);
    if (value.data == NULL) {
        return NGX_ERROR;
    }

    value.len = ngx_sprintf(value.data, "%T", plcf->retry_after) - value.data;

    return ngx_http_pagedllm_add_header(r, "Retry-After", &value);
}


ngx_int_t
ngx_http_pagedllm_add_header(ngx_http_request_t *r, const char *name,
    ngx_str_t *value)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    h->key.data = (u_char *) name;
    h->key.len = ngx_strlen(name);
    h->value = *value;

    return NGX_OK;
}
