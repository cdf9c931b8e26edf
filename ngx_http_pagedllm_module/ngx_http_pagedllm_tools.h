
/*
 * ngx_http_pagedllm_tools.h: tool calling on /v1/chat/completions
 * (ngx_http_pagedllm_tools.c): the tools, tool_choice and
 * parallel_tool_calls fields, tool messages in the history, and the calls
 * of an answer out, whole or streamed.
 */


#ifndef _NGX_HTTP_PAGEDLLM_TOOLS_H_INCLUDED_
#define _NGX_HTTP_PAGEDLLM_TOOLS_H_INCLUDED_


#include "ngx_http_pagedllm_module.h"


/* the parse state of ngx_http_pagedllm_request.h, which the files of the
   output side do not include */
typedef struct ngx_http_pagedllm_parse_s  ngx_http_pagedllm_parse_t;


/* a choice that ended in calls: its finish_reason ("tool_calls"), past
   the engine's PL_FINISH_* */
#define NGX_HTTP_PAGEDLLM_FINISH_TOOL_CALLS  16


/* in: the fields, then the request's tools resolved once every field is
   read */
ngx_int_t ngx_http_pagedllm_tools_field(ngx_http_pagedllm_parse_t *ps,
    json_t *v);
ngx_int_t ngx_http_pagedllm_tools_resolve(ngx_http_pagedllm_parse_t *ps);

/* a tool message, or an assistant message with tool_calls, reduced to
   what a chat template reads */
ngx_uint_t ngx_http_pagedllm_tools_message_is(json_t *m);
json_t *ngx_http_pagedllm_tools_message(json_t *m, ngx_pool_t *pool,
    ngx_http_pagedllm_error_t *err);

/* out: a choice's calls parsed when it ends; the text a stream may send
   before them; the message with its calls; the streamed call deltas
   made (their room), then written */
void ngx_http_pagedllm_tools_end(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch);
size_t ngx_http_pagedllm_tools_safe(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, size_t safe);
json_t *ngx_http_pagedllm_tools_message_out(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, json_t *content);
size_t ngx_http_pagedllm_tools_sse_prepare(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch);
u_char *ngx_http_pagedllm_tools_sse(u_char *p, ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch);

#endif /* _NGX_HTTP_PAGEDLLM_TOOLS_H_INCLUDED_ */
