
/*
 * ngx_http_pagedllm_guided.h: structured outputs on the way in
 * (ngx_http_pagedllm_guided.c): the fields that constrain the output,
 * parsed into the grammar text the SUBMIT record carries.
 */


#ifndef _NGX_HTTP_PAGEDLLM_GUIDED_H_INCLUDED_
#define _NGX_HTTP_PAGEDLLM_GUIDED_H_INCLUDED_


#include "ngx_http_pagedllm_request.h"

#include <grammar.h>


/* response_format: text, json_object or json_schema */
ngx_int_t ngx_http_pagedllm_guided_response_format(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
/* vLLM's guided_json, guided_regex, guided_choice, guided_grammar */
ngx_int_t ngx_http_pagedllm_guided_field(ngx_http_pagedllm_parse_t *ps,
    json_t *v);
/* the grammar text a translator made (rc 0; else why) checked and kept
   as the request's constraint; text is freed */
ngx_int_t ngx_http_pagedllm_guided_set(ngx_http_pagedllm_parse_t *ps,
    pl_gtext_t *text, int rc, const char *why);

#endif /* _NGX_HTTP_PAGEDLLM_GUIDED_H_INCLUDED_ */
