
/*
 * ngx_http_pagedllm_variables: nginx variables of a completion, for
 * log_format, map, limit_req keys and headers:
 *
 *   $pagedllm_request_id         the response's id ("cmpl-...",
 *                                "chatcmpl-..."), also X-Request-Id
 *   $pagedllm_model              the model that served it
 *   $pagedllm_prompt_tokens      usage.prompt_tokens
 *   $pagedllm_completion_tokens  usage.completion_tokens, all choices
 *   $pagedllm_ttft               time to the first token: ms, three
 *                                decimals, from the pagedllm handler
 *                                taking the request to the first token
 *                                of any choice coming from the engine
 *   $pagedllm_finish_reason      each choice's reason, by index, comma
 *                                separated: stop, length, abort, error
 *
 * Each reads the main request's ctx.  A completion that was never
 * submitted (refused, still parsing, not a completion) has none of them:
 * the variable is not found, and a log writes "-".  None is cached: the
 * token counts, the first token and the reasons come while the request
 * runs.  The time is read from the monotonic clock at both ends, not
 * from nginx's cached time: a small model answers within the cached
 * clock's millisecond, which would log most first tokens as 0.
 */


#include "ngx_http_pagedllm_module.h"


static ngx_http_pagedllm_ctx_t *ngx_http_pagedllm_var_ctx(
    ngx_http_request_t *r);
static ngx_int_t ngx_http_pagedllm_var_str(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_pagedllm_var_number(ngx_http_variable_value_t *v,
    ngx_pool_t *pool, ngx_uint_t n);
static ngx_int_t ngx_http_pagedllm_var_prompt_tokens(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_pagedllm_var_completion_tokens(
    ngx_http_request_t *r, ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_pagedllm_var_ttft(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_pagedllm_var_finish_reason(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_str_t *ngx_http_pagedllm_var_reason(uint32_t reason);


static ngx_http_variable_t  ngx_http_pagedllm_vars[] = {

    { ngx_string("pagedllm_request_id"), NULL, ngx_http_pagedllm_var_str,
      offsetof(ngx_http_pagedllm_ctx_t, id), NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("pagedllm_model"), NULL, ngx_http_pagedllm_var_str,
      offsetof(ngx_http_pagedllm_ctx_t, model), NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("pagedllm_prompt_tokens"), NULL,
      ngx_http_pagedllm_var_prompt_tokens, 0, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("pagedllm_completion_tokens"), NULL,
      ngx_http_pagedllm_var_completion_tokens, 0,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("pagedllm_ttft"), NULL, ngx_http_pagedllm_var_ttft, 0,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("pagedllm_finish_reason"), NULL,
      ngx_http_pagedllm_var_finish_reason, 0, NGX_HTTP_VAR_NOCACHEABLE, 0 },

      ngx_http_null_variable
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
    ngx_http_variable_t  *var, *v;

    for (v = ngx_http_pagedllm_vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

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


/* the completion's ctx once it was submitted (it has its id), or NULL */
static ngx_http_pagedllm_ctx_t *
ngx_http_pagedllm_var_ctx(ngx_http_request_t *r)
{
    ngx_http_pagedllm_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r->main, ngx_http_pagedllm_module);

    if (ctx == NULL || ctx->id.len == 0 || ctx->choices == NULL) {
        return NULL;
    }

    return ctx;
}


static ngx_int_t
ngx_http_pagedllm_var_str(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_str_t                *s;
    ngx_http_pagedllm_ctx_t  *ctx;

    ctx = ngx_http_pagedllm_var_ctx(r);
    if (ctx == NULL) {
        v->not_found = 1;
        return NGX_OK;
    }

    s = (ngx_str_t *) ((u_char *) ctx + data);

    v->len = s->len;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;
    v->data = s->data;

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_var_number(ngx_http_variable_value_t *v, ngx_pool_t *pool,
    ngx_uint_t n)
{
    u_char  *p;

    p = ngx_pnalloc(pool, NGX_INT_T_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    v->len = ngx_sprintf(p, "%ui", n) - p;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;
    v->data = p;

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_var_prompt_tokens(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_http_pagedllm_ctx_t  *ctx;

    ctx = ngx_http_pagedllm_var_ctx(r);
    if (ctx == NULL) {
        v->not_found = 1;
        return NGX_OK;
    }

    return ngx_http_pagedllm_var_number(v, r->pool, ctx->params.n_prompt);
}


static ngx_int_t
ngx_http_pagedllm_var_completion_tokens(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_uint_t                i, n;
    ngx_http_pagedllm_ctx_t  *ctx;

    ctx = ngx_http_pagedllm_var_ctx(r);
    if (ctx == NULL) {
        v->not_found = 1;
        return NGX_OK;
    }

    n = 0;

    for (i = 0; i < ctx->params.n; i++) {
        n += ctx->choices[i].completion_tokens;
    }

    return ngx_http_pagedllm_var_number(v, r->pool, n);
}


static ngx_int_t
ngx_http_pagedllm_var_ttft(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char                   *p;
    ngx_http_pagedllm_ctx_t  *ctx;

    ctx = ngx_http_pagedllm_var_ctx(r);
    if (ctx == NULL || !ctx->first_token) {
        v->not_found = 1;
        return NGX_OK;
    }

    p = ngx_pnalloc(r->pool, NGX_INT64_LEN + sizeof(".000") - 1);
    if (p == NULL) {
        return NGX_ERROR;
    }

    v->len = ngx_sprintf(p, "%uL.%03uL", ctx->ttft_us / 1000,
                         ctx->ttft_us % 1000)
             - p;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;
    v->data = p;

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_var_finish_reason(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char                   *p;
    size_t                    len;
    ngx_str_t                *s;
    ngx_uint_t                i, found;
    ngx_http_pagedllm_ctx_t  *ctx;

    ctx = ngx_http_pagedllm_var_ctx(r);
    if (ctx == NULL) {
        v->not_found = 1;
        return NGX_OK;
    }

    len = ctx->params.n * (sizeof("length,") - 1);

    p = ngx_pnalloc(r->pool, len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    v->data = p;
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

    if (!found) {
        v->not_found = 1;
        return NGX_OK;
    }

    v->len = p - v->data;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
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
