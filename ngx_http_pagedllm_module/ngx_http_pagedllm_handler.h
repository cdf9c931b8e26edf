
/*
 * ngx_http_pagedllm_handler.h: what the files of the request side share:
 * ngx_http_pagedllm_handler.c (entry, answers sent whole),
 * ngx_http_pagedllm_completion.c (a completion's steps up to submitting),
 * ngx_http_pagedllm_choice.c (the engine's output into each choice),
 * ngx_http_pagedllm_output.c (SSE events or one JSON body out),
 * ngx_http_pagedllm_cors.c (CORS headers, preflights),
 * ngx_http_pagedllm_limit.c (token quotas) and
 * ngx_http_pagedllm_error.c (nginx's own errors as JSON).  The
 * channel does not include it: it calls a request back only through the
 * events the request's ctx carries.
 */


#ifndef _NGX_HTTP_PAGEDLLM_HANDLER_H_INCLUDED_
#define _NGX_HTTP_PAGEDLLM_HANDLER_H_INCLUDED_


#include "ngx_http_pagedllm_module.h"


/* handler */
ngx_int_t ngx_http_pagedllm_send_json(ngx_http_request_t *r,
    ngx_uint_t status, ngx_buf_t *b);
ngx_int_t ngx_http_pagedllm_send_error(ngx_http_request_t *r,
    ngx_http_pagedllm_error_t *err);
ngx_int_t ngx_http_pagedllm_unavailable(ngx_http_request_t *r,
    const char *reason);
ngx_int_t ngx_http_pagedllm_send_retry(ngx_http_request_t *r,
    ngx_http_pagedllm_error_t *err);
ngx_int_t ngx_http_pagedllm_add_header(ngx_http_request_t *r,
    const char *name, ngx_str_t *value);

/* cors */
ngx_int_t ngx_http_pagedllm_cors(ngx_http_request_t *r);

/* completion */
void ngx_http_pagedllm_completions(ngx_http_request_t *r);
ngx_int_t ngx_http_pagedllm_stream_header(ngx_http_request_t *r);

/* limit */
ngx_int_t ngx_http_pagedllm_limit_admit(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx);
void ngx_http_pagedllm_limit_finish(ngx_http_pagedllm_ctx_t *ctx);

/* choice */
ngx_int_t ngx_http_pagedllm_on_tokens(ngx_http_pagedllm_ctx_t *ctx,
    ngx_uint_t index, const int32_t *ids, ngx_uint_t n, const float *lp,
    const pl_top_logprob_t *top, ngx_uint_t n_top, const uint32_t *rank);
ngx_int_t ngx_http_pagedllm_on_finish(ngx_http_pagedllm_ctx_t *ctx,
    ngx_uint_t index, uint32_t reason, double cum_logprob);
void ngx_http_pagedllm_on_error(ngx_http_pagedllm_ctx_t *ctx,
    ngx_uint_t status, u_char *msg, size_t len);

/* output */
void ngx_http_pagedllm_flush(ngx_http_pagedllm_ctx_t *ctx);
void ngx_http_pagedllm_write_handler(ngx_http_request_t *r);
void ngx_http_pagedllm_timeout(ngx_event_t *ev);

#endif /* _NGX_HTTP_PAGEDLLM_HANDLER_H_INCLUDED_ */
