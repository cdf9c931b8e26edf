
/*
 * ngx_http_pagedllm_error: OpenAI-shaped JSON for the errors nginx itself
 * answers (pagedllm_error).
 *
 * The API location answers its own errors as OpenAI's JSON, but some
 * never reach its handler: a body over client_max_body_size (413, found
 * from Content-Length before the content phase or while a chunked body
 * is read), a path no location matches (404), limit_req and limit_conn
 * (503, or their *_status), auth_request's 401/403, a client too slow to
 * send its body (408).  nginx sends those as its HTML pages unless an
 * error_page sends them elsewhere, so the documented configuration sends
 * them to a named location with this handler:
 *
 *     error_page 400 401 403 404 405 408 413 414 429 500 502 503 504
 *                @pagedllm_error;
 *     location @pagedllm_error { pagedllm_error; }
 *
 * Without "=" in error_page, nginx keeps the original status in
 * r->err_status and sends it whatever status the named location sets;
 * the handler reads it to choose the message and code.  Reached directly
 * (not through error_page) the handler answers a 404.
 */


#include "ngx_http_pagedllm_module.h"
#include "ngx_http_pagedllm_handler.h"


typedef struct {
    ngx_uint_t                    status;
    const char                   *code;
    const char                   *message;
} ngx_http_pagedllm_http_error_t;


static ngx_http_pagedllm_http_error_t  ngx_http_pagedllm_http_errors[] = {
    { NGX_HTTP_BAD_REQUEST, "bad_request",
      "The request could not be read as HTTP" },
    { NGX_HTTP_UNAUTHORIZED, "unauthorized",
      "Authentication is required" },
    { NGX_HTTP_FORBIDDEN, "forbidden",
      "Access to this resource is forbidden" },
    { NGX_HTTP_NOT_FOUND, "unknown_url", NULL },
    { NGX_HTTP_NOT_ALLOWED, "method_not_allowed",
      "The method is not allowed here" },
    { NGX_HTTP_REQUEST_TIME_OUT, "request_timeout",
      "The request was not received in time" },
    { NGX_HTTP_REQUEST_ENTITY_TOO_LARGE, "request_too_large",
      "The request body is larger than the server accepts "
      "(client_max_body_size)" },
    { NGX_HTTP_REQUEST_URI_TOO_LARGE, "uri_too_long",
      "The request URI is too long" },
    { NGX_HTTP_TOO_MANY_REQUESTS, "rate_limit_exceeded",
      "Too many requests: retry later" },
    { NGX_HTTP_INTERNAL_SERVER_ERROR, "internal_error",
      "The server failed to answer the request" },
    { NGX_HTTP_BAD_GATEWAY, "bad_gateway",
      "The server's upstream failed" },
    { NGX_HTTP_SERVICE_UNAVAILABLE, "service_unavailable",
      "The server cannot take the request now: retry later" },
    { NGX_HTTP_GATEWAY_TIME_OUT, "timeout",
      "The server's upstream did not answer in time" },
    { 0, NULL, NULL }
};


ngx_int_t
ngx_http_pagedllm_error_handler(ngx_http_request_t *r)
{
    ngx_int_t                        rc;
    ngx_uint_t                       status;
    ngx_http_pagedllm_error_t        err;
    ngx_http_pagedllm_http_error_t  *e;

    status = r->err_status ? r->err_status : NGX_HTTP_NOT_FOUND;

    rc = ngx_http_pagedllm_cors(r);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    if (ngx_http_discard_request_body(r) != NGX_OK) {
        r->keepalive = 0;
    }

    for (e = ngx_http_pagedllm_http_errors; e->status; e++) {
        if (e->status == status) {
            break;
        }
    }

    if (status == NGX_HTTP_NOT_FOUND) {
        ngx_http_pagedllm_error_set(&err, status, NULL,
                                    "Unknown request URL: %V %V",
                                    &r->method_name, &r->unparsed_uri);

    } else if (e->status) {
        ngx_http_pagedllm_error_set(&err, status, NULL, "%s", e->message);

    } else {
        ngx_http_pagedllm_error_set(&err, status, NULL, "HTTP error %ui",
                                    status);
    }

    err.code = e->code;

    return ngx_http_pagedllm_send_error(r, &err);
}
