
/*
 * ngx_http_pagedllm_cors: Cross-Origin Resource Sharing (pagedllm_cors),
 * so that a page of another origin may call the API from a browser.
 *
 * It runs first in the pagedllm handler.  For an allowed origin it pushes
 * Access-Control-Allow-Origin onto the response headers before anything
 * else is decided, so every answer of the location carries it: JSON, an
 * SSE stream, an error, a 503.  A preflight (OPTIONS with Origin and
 * Access-Control-Request-Method) is answered here, 204, for any path of
 * the location: it asks about the origin, not about one resource.
 *
 * An origin not allowed gets no CORS headers; its preflight gets a 403
 * with an OpenAI-style error rather than a bare 204: the browser refuses
 * either way, but a 403 shows the refusal, and why, to whoever reads the
 * access log, the metrics or the answer in the browser's network panel.
 * Vary: Origin is on every answer of a location with CORS on, since the
 * headers depend on the request's origin.
 */


#include "ngx_http_pagedllm_module.h"
#include "ngx_http_pagedllm_handler.h"


/* what a browser may cache a preflight's answer for, in seconds */
#define NGX_HTTP_PAGEDLLM_CORS_MAX_AGE  "600"


static ngx_table_elt_t *ngx_http_pagedllm_header_in(ngx_http_request_t *r,
    const char *name);
static ngx_uint_t ngx_http_pagedllm_cors_allowed(
    ngx_http_pagedllm_loc_conf_t *plcf, ngx_str_t *origin);
static ngx_int_t ngx_http_pagedllm_cors_preflight(ngx_http_request_t *r);
static ngx_int_t ngx_http_pagedllm_cors_refuse(ngx_http_request_t *r,
    ngx_str_t *origin);


/*
 * NGX_DECLINED: go on serving the request (with the CORS headers its
 * origin earns); anything else is the preflight's answer.
 */
ngx_int_t
ngx_http_pagedllm_cors(ngx_http_request_t *r)
{
    ngx_str_t                      value;
    ngx_uint_t                     preflight;
    ngx_table_elt_t               *origin;
    ngx_http_pagedllm_loc_conf_t  *plcf;

    plcf = ngx_http_get_module_loc_conf(r, ngx_http_pagedllm_module);

    if (plcf->cors == NGX_HTTP_PAGEDLLM_CORS_OFF) {
        return NGX_DECLINED;
    }

    ngx_str_set(&value, "Origin");

    if (ngx_http_pagedllm_add_header(r, "Vary", &value) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    origin = ngx_http_pagedllm_header_in(r, "Origin");

    if (origin == NULL) {
        return NGX_DECLINED;
    }

    preflight = (r->method == NGX_HTTP_OPTIONS
                 && ngx_http_pagedllm_header_in(r,
                        "Access-Control-Request-Method") != NULL);

    if (!ngx_http_pagedllm_cors_allowed(plcf, &origin->value)) {
        return preflight
               ? ngx_http_pagedllm_cors_refuse(r, &origin->value)
               : NGX_DECLINED;
    }

    if (ngx_http_pagedllm_add_header(r, "Access-Control-Allow-Origin",
                                     &origin->value)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (preflight) {
        return ngx_http_pagedllm_cors_preflight(r);
    }

    /* scripts read only the headers named: a 503's Retry-After, a
       completion's X-Request-Id */

    ngx_str_set(&value, "Retry-After, X-Request-Id");

    if (ngx_http_pagedllm_add_header(r, "Access-Control-Expose-Headers",
                                     &value)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return NGX_DECLINED;
}


static ngx_table_elt_t *
ngx_http_pagedllm_header_in(ngx_http_request_t *r, const char *name)
{
    size_t            len;
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    len = ngx_strlen(name);
    part = &r->headers_in.headers.part;
    h = part->elts;

    for (i = 0; /* void */; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                return NULL;
            }

            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].key.len == len
            && ngx_strncasecmp(h[i].key.data, (u_char *) name, len) == 0)
        {
            return &h[i];
        }
    }
}


/* scheme and host are case-insensitive; browsers send them lowercase */
static ngx_uint_t
ngx_http_pagedllm_cors_allowed(ngx_http_pagedllm_loc_conf_t *plcf,
    ngx_str_t *origin)
{
    ngx_str_t   *allowed;
    ngx_uint_t   i;

    if (plcf->cors == NGX_HTTP_PAGEDLLM_CORS_ANY) {
        return 1;
    }

    allowed = plcf->cors_origins->elts;

    for (i = 0; i < plcf->cors_origins->nelts; i++) {
        if (allowed[i].len == origin->len
            && ngx_strncasecmp(allowed[i].data, origin->data, origin->len)
               == 0)
        {
            return 1;
        }
    }

    return 0;
}


/* 204 with what the API takes; the headers asked for are granted */
static ngx_int_t
ngx_http_pagedllm_cors_preflight(ngx_http_request_t *r)
{
    ngx_str_t         value;
    ngx_table_elt_t  *asked;

    if (ngx_http_discard_request_body(r) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    asked = ngx_http_pagedllm_header_in(r, "Access-Control-Request-Headers");

    if (asked != NULL && asked->value.len != 0) {
        value = asked->value;

    } else {
        ngx_str_set(&value, "Authorization, Content-Type");
    }

    if (ngx_http_pagedllm_add_header(r, "Access-Control-Allow-Headers",
                                     &value)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_str_set(&value, "GET, POST, OPTIONS");

    if (ngx_http_pagedllm_add_header(r, "Access-Control-Allow-Methods",
                                     &value)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_str_set(&value, NGX_HTTP_PAGEDLLM_CORS_MAX_AGE);

    if (ngx_http_pagedllm_add_header(r, "Access-Control-Max-Age", &value)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    r->headers_out.status = NGX_HTTP_NO_CONTENT;
    r->headers_out.content_length_n = 0;
    r->header_only = 1;

    return ngx_http_send_header(r);
}


static ngx_int_t
ngx_http_pagedllm_cors_refuse(ngx_http_request_t *r, ngx_str_t *origin)
{
    ngx_http_pagedllm_error_t  err;

    if (ngx_http_discard_request_body(r) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_http_pagedllm_error_set(&err, NGX_HTTP_FORBIDDEN, NULL,
                                "Origin %V is not allowed by pagedllm_cors",
                                origin);
    err.code = "origin_not_allowed";

    return ngx_http_pagedllm_send_error(r, &err);
}
