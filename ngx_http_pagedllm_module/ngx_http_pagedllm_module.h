
/*
 * ngx_http_pagedllm_module: OpenAI-style (chat) completions served by
 * pagedllm-engine through per-worker shared-memory rings.
 *
 * The module is split by concern; a concern of several files shares a
 * private header that no other concern includes:
 *   ngx_http_pagedllm_module.c      directives, configuration, process init
 *   ngx_http_pagedllm_tokenizer.c   the engine's tokenizer, loaded on a
 *                                   thread, reference-counted
 * the worker's engine connection (ngx_http_pagedllm_channel.h):
 *   ngx_http_pagedllm_channel.c     the calls the module makes: parking,
 *                                   submit and abort records, stats
 *   ngx_http_pagedllm_attach.c      attach, re-attach, the engine lost
 *   ngx_http_pagedllm_drain.c       the completion ring drained, each
 *                                   record handed to its request
 * the request side (ngx_http_pagedllm_handler.h):
 *   ngx_http_pagedllm_handler.c     entry, routing, answers sent whole,
 *                                   cleanup
 *   ngx_http_pagedllm_completion.c  a completion's steps up to submitting,
 *                                   thread-pool offloads
 *   ngx_http_pagedllm_choice.c      the engine's output into each choice,
 *                                   stop strings
 *   ngx_http_pagedllm_output.c      SSE events or one JSON body out
 *   ngx_http_pagedllm_cors.c        CORS headers, preflights answered
 *   ngx_http_pagedllm_limit.c       token quotas per key in shared zones
 *   ngx_http_pagedllm_error.c       OpenAI JSON for nginx's own errors
 * OpenAI JSON in (ngx_http_pagedllm_request.h):
 *   ngx_http_pagedllm_request.c     the body decoded, fields checked
 *                                   together, the length
 *   ngx_http_pagedllm_fields.c      the field tables, each field's parser
 *   ngx_http_pagedllm_prompt.c      chat messages, tokenizing
 *   ngx_http_pagedllm_guided.c      structured outputs: the grammar
 *   ngx_http_pagedllm_tools.c       tool calling: tools in, calls out
 * and
 *   ngx_http_pagedllm_response.c    OpenAI JSON and SSE out, errors
 *   ngx_http_pagedllm_metrics.c     Prometheus metrics, HTTP outcome counters
 *   ngx_http_pagedllm_variables.c   $pagedllm_* variables, read from a
 *                                   request's ctx
 *   ngx_http_pagedllm_health.c      /health: attached, engine heartbeat
 *   ngx_http_pagedllm_ui.c          the playground page (ui/index.html,
 *                                   built in) and the live KV block map
 *   ngx_http_pagedllm_prefix.c      the prefix hash of a prompt's first
 *                                   K ids (plain C, its own header)
 *   ngx_http_pagedllm_route_only.c  pagedllm_route_only: a front tier's
 *                                   prompt made from the body, no engine
 *
 * Calls go one way: the handler calls the channel, the request parser
 * and the response writer; the channel calls a request back only through
 * the events its context carries (set by the handler).  Work that may take
 * milliseconds (loading the tokenizer, decoding a long body, tokenizing a
 * long prompt) runs on the thread pool of pagedllm_thread_pool, never in
 * the event loop.
 */


#ifndef _NGX_HTTP_PAGEDLLM_MODULE_H_INCLUDED_
#define _NGX_HTTP_PAGEDLLM_MODULE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "pl_proto.h"
#include "pl_ring.h"
#include "pl_version.h"
#include "pl_tokenizer.h"
#include "pl_chat.h"

#include <jansson.h>


/* what GET /version answers */
#define NGX_HTTP_PAGEDLLM_VERSION      PL_VERSION

#define NGX_HTTP_PAGEDLLM_ERR_LEN      512
#define NGX_HTTP_PAGEDLLM_MAX_STOP     4
#define NGX_HTTP_PAGEDLLM_MAX_PROMPTS  PL_MAX_PROMPTS   /* batched */
#define NGX_HTTP_PAGEDLLM_STOP_LEN     1024

#define NGX_HTTP_PAGEDLLM_CORS_OFF     0
#define NGX_HTTP_PAGEDLLM_CORS_ANY     1     /* pagedllm_cors on */
#define NGX_HTTP_PAGEDLLM_CORS_LIST    2     /* the origins listed */

#define NGX_HTTP_PAGEDLLM_MAX_ENGINES  64    /* of a group */


/* An engine the workers attach to; one channel each in every worker. */
typedef struct {
    ngx_str_t                     path;          /* socket path, NUL-ended */
    uint64_t                      id;            /* hash of path: affinity */
    unsigned                      labeled:1;     /* in a pagedllm_engines
                                                    group: its series carry
                                                    engine="path" */
} ngx_http_pagedllm_engine_conf_t;


typedef struct {
    ngx_uint_t                    engine;        /* index in engines */
    ngx_uint_t                    weight;
} ngx_http_pagedllm_member_t;


/*
 * A group of engines a "pagedllm" location serves from: pagedllm_engines
 * NAME { ... }, or the one-engine group of pagedllm_engine (its name
 * empty).  rr is the worker's own round-robin position (conf memory is
 * each worker's after fork).
 */
typedef struct {
    ngx_str_t                     name;
    ngx_array_t                   members;       /* of _member_t */
    ngx_uint_t                    rr;
} ngx_http_pagedllm_group_t;


/* pagedllm_route */
#define NGX_HTTP_PAGEDLLM_ROUTE_LEAST_LOAD   0
#define NGX_HTTP_PAGEDLLM_ROUTE_ROUND_ROBIN  1
#define NGX_HTTP_PAGEDLLM_ROUTE_PREFIX       2


typedef struct {
    ngx_uint_t                    policy;
    size_t                        tokens;        /* prefix: K, hashed */
    ngx_uint_t                    spill;         /* prefix: the bound */
} ngx_http_pagedllm_route_conf_t;


typedef struct {
    ngx_array_t                   engines;       /* of _engine_conf_t */
    ngx_array_t                   groups;        /* of _group_t */
    ngx_msec_t                    attach_timeout;
    ngx_msec_t                    reattach_interval;
    ngx_shm_zone_t               *metrics;       /* HTTP outcome counters */
    ngx_str_t                     thread_pool_name;
#if (NGX_THREADS)
    ngx_thread_pool_t            *thread_pool;
#endif
    struct ngx_http_pagedllm_engine_s  *route_only;  /* pagedllm_route_only:
                                                    its tokenizer's model */
} ngx_http_pagedllm_main_conf_t;


typedef struct {
    size_t                        max_unsent;
    time_t                        retry_after;
    ngx_msec_t                    timeout;
    ngx_uint_t                    cors;          /* NGX_HTTP_PAGEDLLM_CORS_ */
    ngx_array_t                  *cors_origins;  /* of ngx_str_t: _LIST */
    ngx_msec_t                    health_max_age;  /* pagedllm_health */
    ngx_array_t                  *limits;        /* of ngx_shm_zone_t *:
                                                    pagedllm_limit_tokens */
    ngx_int_t                     prefix_hash_tokens;  /* K of
                                                    $pagedllm_prefix_hash */
    ngx_str_t                     group_name;    /* pagedllm [NAME] */
    ngx_http_pagedllm_group_t    *group;         /* NULL: no engine */
    ngx_http_pagedllm_route_conf_t  route;       /* pagedllm_route */
} ngx_http_pagedllm_loc_conf_t;


/*
 * The text side of the engine's model: its tokenizer, chat template and
 * the text of its special tokens.  Reference-counted, in the event loop
 * only: the channel holds one reference while it serves it, a request's
 * pool one from parsing until it is destroyed (never while a thread task
 * of the request runs); a re-attach that loads another tokenizer leaves
 * the old one to whoever still holds it, and the last release frees it.
 */
typedef struct {
    pl_tokenizer_t               *tokenizer;
    pl_chat_t                    *chat;          /* NULL: chat_error says */
    char                          chat_error[NGX_HTTP_PAGEDLLM_ERR_LEN];
    ngx_str_t                    *specials;      /* special tokens' text */
    ngx_uint_t                    n_specials;
    char                          path[PL_PATH_LEN];
    uint64_t                      hash;          /* of tokenizer.json */
    ngx_uint_t                    refs;
} ngx_http_pagedllm_tok_t;


/* What the attached engine serves; valid while attached. */
typedef struct ngx_http_pagedllm_engine_s {
    ngx_str_t                     model;
    uint32_t                      vocab_size;
    uint32_t                      max_model_len;
    uint32_t                      max_prompt;    /* fits one SUBMIT record */
    float                         default_temperature;  /* < 0: unset */
    float                         default_top_p;
    int32_t                       default_top_k;
    ngx_http_pagedllm_tok_t      *tok;
} ngx_http_pagedllm_engine_t;


typedef void (*ngx_http_pagedllm_work_pt)(void *data, ngx_log_t *log);
typedef void (*ngx_http_pagedllm_done_pt)(void *data);


/* One prompt of a batch (/v1/completions' prompt as a list): its text
   until tokenized, its ids, and its text for echo. */
typedef struct {
    u_char                       *text;
    size_t                        text_len;
    int32_t                      *ids;
    ngx_uint_t                    n_ids;
    ngx_str_t                     echo;
    ngx_uint_t                    cached_tokens;  /* from its FINISH */
} ngx_http_pagedllm_part_t;

typedef struct ngx_http_pagedllm_tools_s  ngx_http_pagedllm_tools_t;


typedef struct {
    int32_t                      *prompt;
    ngx_uint_t                    n_prompt;
    /* left to tokenize when the prompt came as text: the text, or the
       conversation for the chat template */
    u_char                       *text;
    size_t                        text_len;
    json_t                       *messages;
    json_t                       *template_kwargs;
    uint32_t                      truncate_prompt;  /* 0: the whole */
    uint32_t                      max_tokens;
    uint32_t                      n;             /* choices, 1..16 */
    uint32_t                      best_of;       /* 0: n */
    uint32_t                      flags;         /* PL_SUBMIT_* */
    float                         temperature;
    float                         top_p;
    int32_t                       top_k;
    uint64_t                      seed;
    float                         min_p;
    float                         repetition_penalty;
    float                         presence_penalty;
    float                         frequency_penalty;
    uint32_t                      min_tokens;
    uint32_t                      logprobs;      /* top-N, with the flag */
    uint32_t                      prompt_logprobs;  /* top-N, with the
                                                       prompt flag */
    uint32_t                      prompt_top;    /* prompt_logprobs: of
                                                    them, in the list */
    float                         length_penalty;   /* beam search */
    uint32_t                      early_stopping;   /* PL_EARLY_STOPPING_* */
    pl_bias_pair_t               *bias;
    ngx_uint_t                    n_bias;
    int32_t                      *stop_ids;
    ngx_uint_t                    n_stop_ids;
    ngx_str_t                     stop[NGX_HTTP_PAGEDLLM_MAX_STOP];
    ngx_uint_t                    n_stop;
    ngx_str_t                     echo;          /* echo: the prompt text */
    unsigned                      stream:1;
    unsigned                      include_usage:1;
    unsigned                      chat:1;        /* /v1/chat/completions */
    unsigned                      add_special:1; /* BOS/EOS of the text */
    unsigned                      add_generation_prompt:1;
    unsigned                      keep_specials:1;  /* in the output text */
    unsigned                      continue_final:1; /* the last message */
    unsigned                      keep_stop:1;      /* the stop string */
    /* structured outputs: the grammar the output must match */
    u_char                       *grammar;
    size_t                        grammar_len;
    const char                   *grammar_field;   /* which set it */
    unsigned                      want_echo:1;      /* completions' echo */
    unsigned                      echo_lp:1;        /* echo with logprobs:
                                                       the prompt's tokens
                                                       are pieces */
    unsigned                      want_prompt_lp:1; /* the prompt_logprobs
                                                       list */
    /* batched prompts (n_parts > 1): once joined, prompt holds them end
       to end and n counts the choices of them all, n per prompt */
    ngx_http_pagedllm_part_t     *parts;
    ngx_uint_t                    n_parts;
    /* tool calling (ngx_http_pagedllm_tools.c); NULL: no tool field */
    ngx_http_pagedllm_tools_t    *tools;
} ngx_http_pagedllm_params_t;


/* An OpenAI-style error answer. */
typedef struct {
    ngx_uint_t                    status;
    const char                   *type;
    const char                   *code;          /* NULL: null */
    char                          param[64];     /* "": null */
    u_char                        message[NGX_HTTP_PAGEDLLM_ERR_LEN];
} ngx_http_pagedllm_error_t;


/*
 * Decoding a request body's JSON, on a thread or inline: the root is the
 * request pool's (a cleanup releases it); bad_utf8 leaves the decoding to
 * the parser, which names the field at fault.
 */
typedef struct {
    u_char                       *body;
    size_t                        len;
    json_t                       *root;
    json_error_t                  jerr;
    unsigned                      decoded:1;
    unsigned                      bad_utf8:1;
} ngx_http_pagedllm_decode_t;


/*
 * Tokenizing a prompt given as text, or decoding ids to text (POST
 * /detokenize), on a thread or inline: only the reference-counted
 * tokenizer and what the job holds are touched.  ids and text are
 * malloc()ed and the request pool's (a cleanup frees them).
 */
typedef struct {
    ngx_http_pagedllm_tok_t      *tok;
    ngx_http_pagedllm_params_t   *params;        /* text, messages or ids */
    int32_t                      *ids;
    ngx_uint_t                    n_ids;
    u_char                       *text;          /* params' ids decoded */
    size_t                        text_len;
    ngx_int_t                     rc;
    ngx_http_pagedllm_error_t     err;
} ngx_http_pagedllm_tokenize_t;


typedef enum {
    NGX_HTTP_PAGEDLLM_NEW = 0,
    NGX_HTTP_PAGEDLLM_PARKED,        /* waiting for the engine to attach */
    NGX_HTTP_PAGEDLLM_OFFLOADED,     /* its body or prompt on a thread */
    NGX_HTTP_PAGEDLLM_RUNNING,       /* submitted, in the request table */
    NGX_HTTP_PAGEDLLM_DONE           /* finished, failed or aborted */
} ngx_http_pagedllm_state_e;


typedef void (*ngx_http_pagedllm_resume_pt)(ngx_http_request_t *r);

typedef struct ngx_http_pagedllm_ctx_s  ngx_http_pagedllm_ctx_t;
typedef struct ngx_http_pagedllm_channel_s  ngx_http_pagedllm_channel_t;
typedef struct ngx_http_pagedllm_limit_req_s  ngx_http_pagedllm_limit_req_t;


/* What the channel hands a running request while it drains the completion
   ring: its tokens, a choice's end, the engine's error; then flush, once
   per drain for every request the drain touched. */
typedef struct {
    ngx_int_t                   (*tokens)(ngx_http_pagedllm_ctx_t *ctx,
                                    ngx_uint_t index, const int32_t *ids,
                                    ngx_uint_t n, const float *lp,
                                    const pl_top_logprob_t *top,
                                    ngx_uint_t n_top, const uint32_t *rank);
    ngx_int_t                   (*finish)(ngx_http_pagedllm_ctx_t *ctx,
                                    ngx_uint_t index, uint32_t reason,
                                    double cum_logprob);
    void                        (*error)(ngx_http_pagedllm_ctx_t *ctx,
                                    ngx_uint_t status, u_char *msg,
                                    size_t len);
    void                        (*flush)(ngx_http_pagedllm_ctx_t *ctx);
} ngx_http_pagedllm_events_t;


/* A prompt's logprobs for the prompt_logprobs list: per token its id,
   logprob, rank and n_top most likely entries, as the engine sent them. */
typedef struct {
    int32_t                      *ids;
    float                        *lp;
    uint32_t                     *rank;
    pl_top_logprob_t             *top;
    ngx_uint_t                    n;             /* tokens received */
    ngx_uint_t                    n_top;
} ngx_http_pagedllm_prompt_lp_t;


/* One choice (one of the request's n sequences) and its output. */
typedef struct {
    ngx_uint_t                    index;
    pl_detok_t                    detok;
    ngx_uint_t                    completion_tokens;
    uint32_t                      finish_reason; /* PL_FINISH_*, 0: none */
    double                        cum_logprob;   /* beam search: FINISH's */

    /* text decoded and not sent yet (all of it when not streaming); one
       piece per token, with its logprobs when they were asked for */
    u_char                       *text;
    size_t                        text_len;
    size_t                        text_cap;
    size_t                        chars_sent;    /* characters streamed */
    uint32_t                     *piece_end;
    float                        *piece_lp;      /* chosen logprob */
    pl_top_logprob_t             *piece_top;     /* n_top per piece */
    ngx_uint_t                    npieces;
    ngx_uint_t                    pieces_cap;

    unsigned                      finished:1;
    unsigned                      engine_done:1; /* its FINISH came */
    unsigned                      stopped:1;     /* cut at a stop string */
    unsigned                      final_sent:1;  /* its finish_reason */
    unsigned                      role_sent:1;   /* chat: first delta */
    unsigned                      echo_sent:1;   /* echo: the prompt */
    /* prompt logprobs: the prompt's tokens come first; with echo_lp as
       pieces; kept for the prompt_logprobs list by the first choice of
       each prompt (plp; NULL for the others) */
    ngx_http_pagedllm_prompt_lp_t  *plp;
    ngx_uint_t                    prompt_left;   /* still to come */
    ngx_uint_t                    prompt_pieces; /* of the pieces kept */
    unsigned                      prompt_first:1;   /* piece 0 is the
                                                       prompt's first */
} ngx_http_pagedllm_choice_t;


struct ngx_http_pagedllm_ctx_s {
    ngx_rbtree_node_t             node;          /* key: request id */
    ngx_queue_t                   queue;         /* parked or dirty list */
    ngx_http_request_t           *request;
    ngx_http_pagedllm_resume_pt   resume;
    const ngx_http_pagedllm_events_t  *events;
    ngx_http_pagedllm_state_e     state;
    ngx_uint_t                    generation;    /* attach it ran on */
    ngx_event_t                   timer;         /* engine silence limit */

    ngx_http_pagedllm_params_t    params;
    ngx_str_t                     id;            /* "cmpl-..." */
    ngx_str_t                     model;
    time_t                        created;
    ngx_http_pagedllm_tok_t      *tok;           /* held: parsed with it */
    ngx_http_pagedllm_decode_t    decode;
    ngx_http_pagedllm_tokenize_t  job;
    void                        (*next)(ngx_http_request_t *r,
                                      ngx_http_pagedllm_ctx_t *ctx);

    /* the request: STOP once every choice has ended normally (each
       choice has its own reason), ERROR when it failed */
    uint32_t                      finish_reason;
    ngx_uint_t                    error_status;
    ngx_str_t                     error_message;

    ngx_http_pagedllm_choice_t   *choices;       /* params.n of them */
    ngx_uint_t                    n_finished;    /* choices ended */
    ngx_uint_t                    n_top;
    uint64_t                      start_us;      /* _now_us() at entry */
    uint64_t                      ttft_us;       /* with first_token */
    /* the engine's, from a FINISH that ended a choice (engine_timed) */
    ngx_uint_t                    cached_tokens; /* prefix-cache hits */
    uint64_t                      queue_time_us;
    ngx_http_pagedllm_channel_t  *channel;       /* submitted to */
    ngx_http_pagedllm_channel_t  *routed;        /* picked to submit to */

    ngx_chain_t                  *free;
    ngx_chain_t                  *busy;
    ngx_http_pagedllm_limit_req_t  *limit;       /* its token quotas */

    unsigned                      dirty:1;
    unsigned                      first_token:1;
    unsigned                      engine_timed:1;
    unsigned                      finished:1;
    unsigned                      chat:1;        /* /v1/chat/completions */
    unsigned                      tokenize:1;    /* POST /tokenize */
    unsigned                      detokenize:1;  /* POST /detokenize */
    ngx_uint_t                    part;          /* batched prompts: the
                                                    one being prepared */
};


extern ngx_module_t  ngx_http_pagedllm_module;


/* module */
ngx_int_t ngx_http_pagedllm_thread_run(ngx_pool_t *pool, ngx_log_t *log,
    ngx_http_pagedllm_work_pt work, ngx_http_pagedllm_done_pt done,
    void *data);

/* tokenizer */
ngx_http_pagedllm_tok_t *ngx_http_pagedllm_tok_load(const char *path,
    uint64_t hash, ngx_log_t *log, u_char *err, size_t len);
ngx_http_pagedllm_tok_t *ngx_http_pagedllm_tok_open(const char *path,
    uint64_t hash, ngx_log_t *log, u_char *err, size_t len);
void ngx_http_pagedllm_tok_hold(ngx_http_pagedllm_tok_t *tok);
void ngx_http_pagedllm_tok_release(ngx_http_pagedllm_tok_t *tok);
ngx_int_t ngx_http_pagedllm_tok_hold_pool(ngx_pool_t *pool,
    ngx_http_pagedllm_tok_t *tok);

/* channel */
ngx_int_t ngx_http_pagedllm_channel_init(ngx_cycle_t *cycle,
    ngx_http_pagedllm_main_conf_t *pmcf);
void ngx_http_pagedllm_channel_exit(ngx_cycle_t *cycle);
ngx_http_pagedllm_engine_t *ngx_http_pagedllm_channel_engine(
    ngx_http_pagedllm_ctx_t *ctx);
ngx_int_t ngx_http_pagedllm_channel_park(ngx_http_pagedllm_ctx_t *ctx);
ngx_int_t ngx_http_pagedllm_channel_submit(ngx_http_pagedllm_ctx_t *ctx);
void ngx_http_pagedllm_channel_cancel(ngx_http_pagedllm_ctx_t *ctx);
ngx_uint_t ngx_http_pagedllm_channel_count(void);
ngx_int_t ngx_http_pagedllm_channel_stats(ngx_uint_t i,
    ngx_http_pagedllm_engine_conf_t **ec, ngx_http_pagedllm_engine_t **engine,
    pl_stats_t *stats);
ngx_int_t ngx_http_pagedllm_channel_block_map(ngx_pool_t *pool,
    pl_bmap_hdr_t **map);
ngx_uint_t ngx_http_pagedllm_channel_models(ngx_http_request_t *r,
    ngx_http_pagedllm_engine_t **engines);

/* route */
char *ngx_http_pagedllm_route_set(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
void ngx_http_pagedllm_route_merge(ngx_http_pagedllm_route_conf_t *conf,
    ngx_http_pagedllm_route_conf_t *prev);
char *ngx_http_pagedllm_engine_set(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_pagedllm_engines_block(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_pagedllm_group_find(ngx_conf_t *cf,
    ngx_http_pagedllm_loc_conf_t *plcf);

/* handler */
ngx_int_t ngx_http_pagedllm_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_pagedllm_status_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_pagedllm_send(ngx_http_request_t *r, ngx_uint_t status,
    ngx_str_t *type, ngx_buf_t *b);

/* error */
ngx_int_t ngx_http_pagedllm_error_handler(ngx_http_request_t *r);

/* metrics */
ngx_int_t ngx_http_pagedllm_metrics_init(ngx_conf_t *cf);
ngx_int_t ngx_http_pagedllm_metrics_handler(ngx_http_request_t *r);

/* health */
char *ngx_http_pagedllm_health_set(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
ngx_int_t ngx_http_pagedllm_health_handler(ngx_http_request_t *r);
/* ui */
ngx_int_t ngx_http_pagedllm_ui_handler(ngx_http_request_t *r);

/* variables */
ngx_int_t ngx_http_pagedllm_add_variables(ngx_conf_t *cf);
uint64_t ngx_http_pagedllm_now_us(void);

/* route only */
char *ngx_http_pagedllm_route_only_set(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
ngx_int_t ngx_http_pagedllm_route_hash(ngx_http_request_t *r, size_t k,
    uint64_t *hash);

/* limit */
char *ngx_http_pagedllm_limit_tokens_set(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);

/* request */
u_char *ngx_http_pagedllm_body(ngx_http_request_t *r, size_t *len);
ngx_int_t ngx_http_pagedllm_decode_init(ngx_pool_t *pool,
    ngx_http_pagedllm_decode_t *d, u_char *body, size_t len);
void ngx_http_pagedllm_decode(ngx_http_pagedllm_decode_t *d);
ngx_int_t ngx_http_pagedllm_parse_completion(ngx_http_request_t *r,
    ngx_http_pagedllm_decode_t *d, ngx_http_pagedllm_engine_t *engine,
    ngx_uint_t chat, ngx_http_pagedllm_params_t *params,
    ngx_http_pagedllm_error_t *err);
ngx_int_t ngx_http_pagedllm_parse_tokens(ngx_http_request_t *r,
    ngx_http_pagedllm_decode_t *d, ngx_http_pagedllm_engine_t *engine,
    ngx_uint_t detokenize, ngx_http_pagedllm_params_t *params,
    ngx_http_pagedllm_error_t *err);
ngx_int_t ngx_http_pagedllm_tokenize_init(ngx_pool_t *pool,
    ngx_http_pagedllm_tokenize_t *job, ngx_http_pagedllm_tok_t *tok,
    ngx_http_pagedllm_params_t *params);
void ngx_http_pagedllm_tokenize(ngx_http_pagedllm_tokenize_t *job,
    ngx_log_t *log);
void ngx_http_pagedllm_detokenize(ngx_http_pagedllm_tokenize_t *job,
    ngx_log_t *log);
ngx_int_t ngx_http_pagedllm_check_length(ngx_http_pagedllm_params_t *p,
    ngx_http_pagedllm_engine_t *engine, ngx_http_pagedllm_error_t *err);

/* response */
json_t *ngx_http_pagedllm_json_pool(ngx_pool_t *pool, json_t *j);
void ngx_http_pagedllm_error_set(ngx_http_pagedllm_error_t *err,
    ngx_uint_t status, const char *param, const char *fmt, ...);
ngx_buf_t *ngx_http_pagedllm_error_json(ngx_pool_t *pool,
    ngx_http_pagedllm_error_t *err);
size_t ngx_http_pagedllm_sse_bound(ngx_http_pagedllm_ctx_t *ctx,
    size_t text_len);
u_char *ngx_http_pagedllm_sse_text(u_char *p, ngx_http_pagedllm_ctx_t *ctx,
    ngx_uint_t index, u_char *text, size_t len, ngx_str_t *logprobs,
    uint32_t finish_reason);
size_t ngx_http_pagedllm_utf8_chars(u_char *p, size_t n);
ngx_int_t ngx_http_pagedllm_logprobs_text(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, ngx_uint_t first, ngx_uint_t n,
    ngx_str_t *out);
u_char *ngx_http_pagedllm_sse_role(u_char *p, ngx_http_pagedllm_ctx_t *ctx,
    ngx_uint_t index);
u_char *ngx_http_pagedllm_sse_delta(u_char *p, ngx_http_pagedllm_ctx_t *ctx,
    ngx_uint_t index, ngx_str_t *delta);
u_char *ngx_http_pagedllm_sse_usage(u_char *p, ngx_http_pagedllm_ctx_t *ctx);
u_char *ngx_http_pagedllm_sse_error(u_char *p, ngx_http_pagedllm_ctx_t *ctx,
    ngx_uint_t status, ngx_str_t *message);
ngx_uint_t ngx_http_pagedllm_completion_tokens(ngx_http_pagedllm_ctx_t *ctx);
ngx_buf_t *ngx_http_pagedllm_completion_json(ngx_http_pagedllm_ctx_t *ctx);
ngx_buf_t *ngx_http_pagedllm_models_json(ngx_pool_t *pool,
    ngx_http_pagedllm_engine_t **engines, ngx_uint_t n, ngx_uint_t one);
ngx_buf_t *ngx_http_pagedllm_tokenize_json(ngx_pool_t *pool,
    ngx_http_pagedllm_engine_t *engine, int32_t *ids, ngx_uint_t n);
ngx_buf_t *ngx_http_pagedllm_detokenize_json(ngx_pool_t *pool, u_char *text,
    size_t len);
ngx_buf_t *ngx_http_pagedllm_version_json(ngx_pool_t *pool);
json_t *ngx_http_pagedllm_status_object(ngx_pool_t *pool,
    ngx_http_pagedllm_engine_t *engine, pl_stats_t *stats);
ngx_buf_t *ngx_http_pagedllm_json_buf(ngx_pool_t *pool, json_t *j);

/* batched prompts */
ngx_str_t *ngx_http_pagedllm_choice_echo(ngx_http_pagedllm_ctx_t *ctx,
    ngx_uint_t index);
size_t ngx_http_pagedllm_prompt_lens(ngx_http_pagedllm_params_t *p,
    u_char *dst);

#endif /* _NGX_HTTP_PAGEDLLM_MODULE_H_INCLUDED_ */
