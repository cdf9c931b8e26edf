
/*
 * ngx_http_pagedllm_variables: nginx variables of a completion, for
 * log_format, map, limit_req keys and headers:
 *
 *   $pagedllm_request_id         the response's id ("cmpl-...",
 *                                "chatcmpl-..."), also X-Request-Id
 *   $pagedllm_model              the model that served it
 *   $pagedllm_prompt_tokens      usage.prompt_tokens
 *   $pagedllm_completion_tokens  usage.completion_tokens, all choices
 *   $pagedllm_cached_tokens      prompt tokens whose KV the engine
 *                                found in its prefix cache, as
 *                                usage.prompt_tokens_details.cached_tokens
 *   $pagedllm_ttft               time to the first token: ms, three
 *                                decimals, from the pagedllm handler
 *                                taking the request to the first token
 *                                of any choice coming from the engine
 *   $pagedllm_queue_time         ms, three decimals, from the engine
 *                                taking the request to the first
 *                                iteration that ran it (the engine's
 *                                clock)
 *   $pagedllm_finish_reason      each choice's reason, by index, comma
 *                                separated: stop, length, abort, error
 *   $pagedllm_prefix_hash        16 hex digits: the prefix hash
 *                                (ngx_http_pagedllm_prefix.h) of the
 *                                prompt's first pagedllm_prefix_hash_tokens
 *                                tokens, below
 *
 * Each reads the main request's ctx.  A completion that was never
 * submitted (refused, still parsing, not a completion) has none of them:
 * the variable is not found, and a log writes "-".  None is cached: the
 * token counts, the first token and the reasons come while the request
 * runs; cached tokens and the queue time come with the engine's first
 * FINISH that ends a choice.  The time is read from the monotonic clock
 * at both ends, not
 * from nginx's cached time: a small model answers within the cached
 * clock's millisecond, which would log most first tokens as 0.
 *
 * $pagedllm_prefix_hash is the key a front tier routes by
 * ("hash $pagedllm_prefix_hash consistent"), so it is also had without a
 * submitted completion.  Its prompt is the one a serving nginx submits:
 * the ids of a chat's conversation rendered by the chat template (so a
 * shared system prompt is a shared prefix), of a completion's prompt
 * text with the tokenizer's BOS, or the ids given.  A serving nginx hashes
 * the ids it submitted; a pagedllm_route_only nginx makes them from the
 * request body, which the proxy module has read by the time an upstream's
 * hash is evaluated (with proxy_request_buffering on, the default).  A
 * body in a temp file hashes by its raw first bytes instead
 * (ngx_http_pagedllm_route_only.c).  Anything else (not a completion,
 * a body the parser refuses, a body not read yet) has no value: the
 * variable is not found, "" as a hash key, which puts all such requests
 * on one instance.  A value once made is cached for the request, and so
 * is its absence once the body is read; an absence before is not, so
 * that a later reading may find a value.
 */


#include "ngx_http_pagedllm_module.h"
#include "ngx_http_pagedllm_prefix.h"


/* a variable's value from a submitted request's ctx: NGX_OK, NGX_DECLINED
   (none yet), NGX_ERROR */
typedef ngx_int_t (*ngx_http_pagedllm_value_pt)(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx, ngx_str_t *value);

typedef struct {
    ngx_str_t                     name;
    ngx_http_pagedllm_value_pt    value;
} ngx_http_pagedllm_var_t;


static ngx_int_t ngx_http_pagedllm_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_pagedllm_number(ngx_pool_t *pool, ngx_uint_t n,
    ngx_str_t *value);
static ngx_int_t ngx_http_pagedllm_var_request_id(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx, ngx_str_t *value);
static ngx_int_t ngx_http_pagedllm_var_model(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx, ngx_str_t *value);
static ngx_int_t ngx_http_pagedllm_var_prompt_tokens(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx, ngx_str_t *value);
static ngx_int_t ngx_http_pagedllm_var_completion_tokens(
    ngx_http_request_t *r, ngx_http_pagedllm_ctx_t *ctx, ngx_str_t *value);
static ngx_int_t ngx_http_pagedllm_var_cached_tokens(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx, ngx_str_t *value);
static ngx_int_t ngx_http_pagedllm_var_ttft(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx, ngx_str_t *value);
static ngx_int_t ngx_http_pagedllm_var_queue_time(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx, ngx_str_t *value);
static ngx_int_t ngx_http_pagedllm_ms(ngx_pool_t *pool, uint64_t us,
    ngx_str_t *value);
static ngx_int_t ngx_http_pagedllm_var_finish_reason(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx, ngx_str_t *value);
static ngx_str_t *ngx_http_pagedllm_var_reason(uint32_t reason);
static ngx_int_t ngx_http_pagedllm_prefix_hash_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_pagedllm_prefix_of(ngx_http_request_t *r,
    uint64_t *hash);


static ngx_str_t  ngx_http_pagedllm_prefix_hash_name =
    ngx_string("pagedllm_prefix_hash");


static ngx_http_pagedllm_var_t  ngx_http_pagedllm_vars[] = {
    { ngx_string("pagedllm_request_id"), ngx_http_pagedllm_var_request_id },
    { ngx_string("pagedllm_model"), ngx_http_pagedllm_var_model },
    { ngx_string("pagedllm_prompt_tokens"),
      ngx_http_pagedllm_var_prompt_tokens },
    { ngx_string("pagedllm_completion_tokens"),
      ngx_http_pagedllm_var_completion_tokens },
    { ngx_string("pagedllm_ttft"), ngx_http_pagedllm_var_ttft },
    { ngx_string("pagedllm_finish_reason"),
      ngx_http_pagedllm_var_finish_reason },
    { ngx_string("pagedllm_cached_tokens"),
      ngx_http_pagedllm_var_cached_tokens },
    { ngx_string("pagedllm_queue_time"), ngx_http_pagedllm_var_queue_time }
};


static ngx_str_t  ngx_http_pagedllm_reasons[] = {
    ngx_string("stop"),              /* PL_FINISH_STOP */
    ngx_string("length"),            /* PL_FINISH_LENGTH */
    ngx_string("abort"),             /* PL_FINISH_ABORT */
    ngx_string("error")              /* PL_FINISH_ERROR */
};


ngx_int_t
ngx_http_pagedllm_add_variables(ngx_conf_t *cf)
{
    ngx_uint_t            i;
    ngx_http_variable_t  *var;

    for (i = 0; i < sizeof(ngx_http_pagedllm_vars)
                    / sizeof(ngx_http_pagedllm_var_t); i++)
    {
        var = ngx_http_add_variable(cf, &ngx_http_pagedllm_vars[i].name,
                                    NGX_HTTP_VAR_NOCACHEABLE);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = ngx_http_pagedllm_variable;
        var->data = i;
    }

    /* cacheable once it has a value: the getter says when */

    var = ngx_http_add_variable(cf, &ngx_http_pagedllm_prefix_hash_name, 0);
    if (var == NULL) {
        return NGX_ERROR;
    }

    var->get_handler = ngx_http_pagedllm_prefix_hash_variable;

    return NGX_OK;
}


/* a monotonic clock in microseconds, for the times a request logs */
uint64_t
ngx_http_pagedllm_now_us(void)
{
    struct timespec  ts;

    (void) clock_gettime(CLOCK_MONOTONIC, &ts);

    return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}


/* data: the index in ngx_http_pagedllm_vars; a completion has values
   once it was submitted (it has its id) */
static ngx_int_t
ngx_http_pagedllm_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_int_t                 rc;
    ngx_str_t                 value;
    ngx_http_pagedllm_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r->main, ngx_http_pagedllm_module);

    if (ctx == NULL || ctx->id.len == 0 || ctx->choices == NULL) {
        v->not_found = 1;
        return NGX_OK;
    }

    rc = ngx_http_pagedllm_vars[data].value(r, ctx, &value);

    if (rc == NGX_DECLINED) {
        v->not_found = 1;
        return NGX_OK;
    }

    if (rc != NGX_OK) {
        return NGX_ERROR;
    }

    v->len = value.len;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;
    v->data = value.data;

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_number(ngx_pool_t *pool, ngx_uint_t n, ngx_str_t *value)
{
    value->data = ngx_pnalloc(pool, NGX_INT_T_LEN);
    if (value->data == NULL) {
        return NGX_ERROR;
    }

    value->len = ngx_sprintf(value->data, "%ui", n) - value->data;

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_var_request_id(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx, ngx_str_t *value)
{
    *value = ctx->id;

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_var_model(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx, ngx_str_t *value)
{
    *value = ctx->model;

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_var_prompt_tokens(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx, ngx_str_t *value)
{
    return ngx_http_pagedllm_number(r->pool, ctx->params.n_prompt, value);
}


static ngx_int_t
ngx_http_pagedllm_var_completion_tokens(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx, ngx_str_t *value)
{
    return ngx_http_pagedllm_number(r->pool,
                                    ngx_http_pagedllm_completion_tokens(ctx),
                                    value);
}


static ngx_int_t
ngx_http_pagedllm_var_cached_tokens(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx, ngx_str_t *value)
{
    if (!ctx->engine_timed) {
        return NGX_DECLINED;
    }

    return ngx_http_pagedllm_number(r->pool, ctx->cached_tokens, value);
}


static ngx_int_t
ngx_http_pagedllm_var_ttft(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx, ngx_str_t *value)
{
    if (!ctx->first_token) {
        return NGX_DECLINED;
    }

    return ngx_http_pagedllm_ms(r->pool, ctx->ttft_us, value);
}


static ngx_int_t
ngx_http_pagedllm_var_queue_time(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx, ngx_str_t *value)
{
    if (!ctx->engine_timed) {
        return NGX_DECLINED;
    }

    return ngx_http_pagedllm_ms(r->pool, ctx->queue_time_us, value);
}


/* us as ms with three decimals */
static ngx_int_t
ngx_http_pagedllm_ms(ngx_pool_t *pool, uint64_t us, ngx_str_t *value)
{
    value->data = ngx_pnalloc(pool, NGX_INT64_LEN + sizeof(".000") - 1);
    if (value->data == NULL) {
        return NGX_ERROR;
    }

    value->len = ngx_sprintf(value->data, "%uL.%03uL", us / 1000, us % 1000)
                 - value->data;

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_var_finish_reason(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx, ngx_str_t *value)
{
    u_char      *p;
    ngx_str_t   *s;
    ngx_uint_t   i, found;

    p = ngx_pnalloc(r->pool, ctx->params.n * (sizeof("length,") - 1));
    if (p == NULL) {
        return NGX_ERROR;
    }

    value->data = p;
    found = 0;

    for (i = 0; i < ctx->params.n; i++) {
        s = ngx_http_pagedllm_var_reason(ctx->choices[i].finish_reason);

        if (s != NULL) {
            found = 1;
        }

        if (i > 0) {
            *p++ = ',';
        }

        p = s ? ngx_cpymem(p, s->data, s->len) : ngx_cpymem(p, "-", 1);
    }

    value->len = p - value->data;

    return found ? NGX_OK : NGX_DECLINED;
}


/* a choice's PL_FINISH_* by name; NULL: it has not ended */
static ngx_str_t *
ngx_http_pagedllm_var_reason(uint32_t reason)
{
    if (reason < PL_FINISH_STOP || reason > PL_FINISH_ERROR) {
        return NULL;
    }

    return &ngx_http_pagedllm_reasons[reason - PL_FINISH_STOP];
}


static ngx_int_t
ngx_http_pagedllm_prefix_hash_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char     *p;
    uint64_t    hash;
    ngx_int_t   rc;

    rc = ngx_http_pagedllm_prefix_of(r, &hash);

    if (rc == NGX_ERROR) {
        return NGX_ERROR;
    }

    if (rc != NGX_OK) {
        v->not_found = 1;
        v->no_cacheable = (rc == NGX_AGAIN);
        return NGX_OK;
    }

    p = ngx_pnalloc(r->pool, 16);
    if (p == NULL) {
        return NGX_ERROR;
    }

    v->len = ngx_sprintf(p, "%016xL", hash) - p;
    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    v->data = p;

    return NGX_OK;
}


/* The hash of the ids a serving nginx submitted, or the one a
   pagedllm_route_only nginx makes from the body: NGX_OK, NGX_DECLINED
   (none, for good), NGX_AGAIN (none yet), NGX_ERROR. */
static ngx_int_t
ngx_http_pagedllm_prefix_of(ngx_http_request_t *r, uint64_t *hash)
{
    size_t                         k;
    ngx_http_pagedllm_ctx_t       *ctx;
    ngx_http_pagedllm_loc_conf_t  *plcf;

    plcf = ngx_http_get_module_loc_conf(r, ngx_http_pagedllm_module);
    ctx = ngx_http_get_module_ctx(r->main, ngx_http_pagedllm_module);
    k = (size_t) plcf->prefix_hash_tokens;

    if (ctx == NULL) {
        return ngx_http_pagedllm_route_hash(r, k, hash);
    }

    if (ctx->id.len == 0 || ctx->params.prompt == NULL) {
        return NGX_AGAIN;
    }

    *hash = ngx_http_pagedllm_prefix_hash(ctx->params.prompt,
                                          ctx->params.n_prompt, k);

    return NGX_OK;
}
