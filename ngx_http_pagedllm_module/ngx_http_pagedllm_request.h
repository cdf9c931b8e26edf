
/*
 * ngx_http_pagedllm_request.h: what the files of OpenAI JSON in share:
 * ngx_http_pagedllm_request.c (the body decoded, its fields walked and
 * checked together), ngx_http_pagedllm_fields.c (the tables of the fields
 * each endpoint takes, and the parser of each) and
 * ngx_http_pagedllm_prompt.c (chat messages reduced, prompts tokenized).
 */


#ifndef _NGX_HTTP_PAGEDLLM_REQUEST_H_INCLUDED_
#define _NGX_HTTP_PAGEDLLM_REQUEST_H_INCLUDED_


#include "ngx_http_pagedllm_module.h"
#include "pl_params.h"


typedef struct ngx_http_pagedllm_parse_s  ngx_http_pagedllm_parse_t;

typedef ngx_int_t (*ngx_http_pagedllm_field_pt)(ngx_http_pagedllm_parse_t *ps,
    json_t *v);


/* A request field.  param: the row of PL_PARAMS a sampling parameter
   takes its type, range and default from (-1 for other fields); post: a
   PL_SUBMIT_* flag the field sets, or for a field read for its type only
   its ngx_http_pagedllm_typed_t. */
typedef struct {
    const char                   *name;
    ngx_http_pagedllm_field_pt    parse;
    ngx_int_t                     param;
    void                         *post;
} ngx_http_pagedllm_field_t;


/* What a field read for its JSON type only must be: types, a mask of
   1 << json_type; what, the types in words; neutral, the JSON array of
   the values that ask for nothing (NULL: any value of the types); why,
   the reason another value is refused (NULL: none given). */
typedef struct {
    unsigned                      types;
    const char                   *what;
    const char                   *neutral;
    const char                   *why;
} ngx_http_pagedllm_typed_t;


/* One request being parsed: the field at hand names itself in errors and
   tells the generic parsers where its value goes. */
struct ngx_http_pagedllm_parse_s {
    ngx_http_pagedllm_field_t    *field;
    ngx_http_pagedllm_params_t   *params;
    ngx_http_pagedllm_engine_t   *engine;
    ngx_pool_t                   *pool;
    ngx_http_pagedllm_error_t    *err;
};


/* What differs between /v1/completions and /v1/chat/completions on the
   way in; indexed by params.chat. */
typedef struct {
    ngx_http_pagedllm_field_t    *fields;        /* its own */
    const char                   *prompt;        /* the prompt's field */
    ngx_uint_t                    fill;          /* max_tokens left out:
                                                    what fits */
} ngx_http_pagedllm_api_t;


extern ngx_http_pagedllm_field_t  ngx_http_pagedllm_common_fields[];
extern ngx_http_pagedllm_api_t    ngx_http_pagedllm_apis[];
extern ngx_http_pagedllm_field_t  ngx_http_pagedllm_tokenize_fields[];
extern ngx_http_pagedllm_field_t  ngx_http_pagedllm_tokenize_chat_fields[];
extern ngx_http_pagedllm_field_t  ngx_http_pagedllm_detokenize_fields[];


/* fields */
void ngx_http_pagedllm_param_set(ngx_http_pagedllm_params_t *p,
    pl_param_id_t id, double v);
ngx_int_t ngx_http_pagedllm_prompt_logprobs(ngx_http_pagedllm_params_t *p,
    ngx_http_pagedllm_error_t *err);

/* prompt */
json_t *ngx_http_pagedllm_content(json_t *c, ngx_pool_t *pool);
ngx_int_t ngx_http_pagedllm_no_specials(json_t *v,
    ngx_http_pagedllm_tok_t *tok, const char *name,
    ngx_http_pagedllm_error_t *err);
json_t *ngx_http_pagedllm_message(json_t *m, ngx_pool_t *pool,
    ngx_http_pagedllm_error_t *err);
ngx_uint_t ngx_http_pagedllm_truncate(ngx_http_pagedllm_params_t *p,
    int32_t *ids, ngx_uint_t n);

#endif /* _NGX_HTTP_PAGEDLLM_REQUEST_H_INCLUDED_ */
