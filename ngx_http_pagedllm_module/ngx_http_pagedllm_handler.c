
/*
 * ngx_http_pagedllm_handler: the request side.  Routes /v1/completions,
 * /v1/chat/completions, /v1/models and the status location, reads and
 * checks the body, submits to the engine, and turns what the channel hands
 * back into SSE events or one JSON body.  A request has n choices (parallel
 * sampling), each with its own detokenizer, text, stop-string matching
 * and finish_reason; streamed events carry their choice's index, and the
 * request ends when every choice has.  Stop strings are matched here on
 * the decoded text, across token boundaries: a match cuts the choice's
 * text where the stop string starts and ends that choice (the generation
 * is aborted once no choice is left), and while streaming, the tail that
 * might still become a stop string is held back.  A long body is decoded
 * and a long prompt tokenized on the thread pool, the request blocked
 * meanwhile.  Every request gets a cleanup handler, so whichever way it
 * ends (499 included) a running generation is aborted exactly once.
 */


#include "ngx_http_pagedllm_module.h"


#define NGX_HTTP_PAGEDLLM_DETOK_MAX    256
#define NGX_HTTP_PAGEDLLM_OUT_MIN      4096

/*
 * Bodies and prompts of fewer bytes are decoded and tokenized in the event
 * loop: at the 35 MB/s bench/tokenizer measures with Llama 3's tokenizer
 * (and about 40 MB/s for jansson on a long string), 4 KiB is about 0.1 ms,
 * on the order of a thread pool round trip (a task posted, a thread woken,
 * its completion notified back through the event loop); longer ones go to
 * the thread pool.
 */
#define NGX_HTTP_PAGEDLLM_INLINE_MAX   4096


typedef enum {
    NGX_HTTP_PAGEDLLM_ROUTE_NONE = 0,
    NGX_HTTP_PAGEDLLM_ROUTE_COMPLETIONS,
    NGX_HTTP_PAGEDLLM_ROUTE_CHAT,
    NGX_HTTP_PAGEDLLM_ROUTE_MODELS
} ngx_http_pagedllm_route_e;


static ngx_http_pagedllm_route_e ngx_http_pagedllm_route(
    ngx_http_request_t *r, ngx_str_t *id);
static ngx_int_t ngx_http_pagedllm_models_answer(ngx_http_request_t *r,
    ngx_http_pagedllm_engine_t *engine);
static ngx_http_pagedllm_ctx_t *ngx_http_pagedllm_create_ctx(
    ngx_http_request_t *r, ngx_http_pagedllm_resume_pt resume);
static void ngx_http_pagedllm_cleanup(void *data);
static ngx_int_t ngx_http_pagedllm_get(ngx_http_request_t *r,
    ngx_http_pagedllm_resume_pt resume, ngx_uint_t need_engine);
static void ngx_http_pagedllm_models_resume(ngx_http_request_t *r);
static void ngx_http_pagedllm_status_resume(ngx_http_request_t *r);
static ngx_int_t ngx_http_pagedllm_send_status(ngx_http_request_t *r);
static void ngx_http_pagedllm_body_handler(ngx_http_request_t *r);
static void ngx_http_pagedllm_completions(ngx_http_request_t *r);
static void ngx_http_pagedllm_offload(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx, ngx_http_pagedllm_work_pt work,
    void (*next)(ngx_http_request_t *r, ngx_http_pagedllm_ctx_t *ctx));
static void ngx_http_pagedllm_offload_done(void *data);
static void ngx_http_pagedllm_decode_work(void *data, ngx_log_t *log);
static void ngx_http_pagedllm_parse(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx);
static void ngx_http_pagedllm_tokenize_work(void *data, ngx_log_t *log);
static void ngx_http_pagedllm_tokenized(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx);
static void ngx_http_pagedllm_submit(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx);
static u_char *ngx_http_pagedllm_body(ngx_http_request_t *r, size_t *len);
static ngx_int_t ngx_http_pagedllm_start(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx);
static ngx_int_t ngx_http_pagedllm_send_stream_header(ngx_http_request_t *r);
static ngx_int_t ngx_http_pagedllm_choices(ngx_http_pagedllm_ctx_t *ctx);
static ngx_int_t ngx_http_pagedllm_on_tokens(ngx_http_pagedllm_ctx_t *ctx,
    ngx_uint_t index, const int32_t *ids, ngx_uint_t n, const float *lp,
    const pl_top_logprob_t *top, ngx_uint_t n_top);
static ngx_int_t ngx_http_pagedllm_on_finish(ngx_http_pagedllm_ctx_t *ctx,
    ngx_uint_t index, uint32_t reason, double cum_logprob);
static void ngx_http_pagedllm_on_error(ngx_http_pagedllm_ctx_t *ctx,
    ngx_uint_t status, u_char *msg, size_t len);
static void ngx_http_pagedllm_flush(ngx_http_pagedllm_ctx_t *ctx);
static void ngx_http_pagedllm_choice_end(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch);
static ngx_int_t ngx_http_pagedllm_text_reserve(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, size_t more);
static void ngx_http_pagedllm_finish_text(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch);
static ngx_int_t ngx_http_pagedllm_pieces_reserve(
    ngx_http_pagedllm_ctx_t *ctx, ngx_http_pagedllm_choice_t *ch,
    ngx_uint_t n);
static ngx_uint_t ngx_http_pagedllm_stop_check(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, size_t len);
static void ngx_http_pagedllm_flush_stream(ngx_http_pagedllm_ctx_t *ctx);
static ngx_uint_t ngx_http_pagedllm_emittable(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch);
static ngx_int_t ngx_http_pagedllm_piece_logprobs(
    ngx_http_pagedllm_ctx_t *ctx, ngx_http_pagedllm_choice_t *ch,
    ngx_uint_t n, ngx_str_t **out);
static void ngx_http_pagedllm_consume(ngx_http_pagedllm_choice_t *ch,
    ngx_uint_t n, ngx_uint_t n_top);
static size_t ngx_http_pagedllm_stream_size(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, ngx_uint_t emit, ngx_str_t *lpj);
static u_char *ngx_http_pagedllm_stream_events(u_char *p,
    ngx_http_pagedllm_ctx_t *ctx, ngx_http_pagedllm_choice_t *ch,
    ngx_uint_t emit, ngx_str_t *lpj);
static u_char *ngx_http_pagedllm_stream_end(u_char *p,
    ngx_http_pagedllm_ctx_t *ctx);
static ngx_chain_t *ngx_http_pagedllm_out_buf(ngx_http_pagedllm_ctx_t *ctx,
    size_t size);
static void ngx_http_pagedllm_flush_whole(ngx_http_pagedllm_ctx_t *ctx);
static void ngx_http_pagedllm_after_write(ngx_http_pagedllm_ctx_t *ctx,
    ngx_int_t rc);
static size_t ngx_http_pagedllm_unsent(ngx_http_pagedllm_ctx_t *ctx);
static void ngx_http_pagedllm_write_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_pagedllm_write_timer(ngx_http_request_t *r);
static void ngx_http_pagedllm_timeout(ngx_event_t *ev);
static ngx_int_t ngx_http_pagedllm_send_json(ngx_http_request_t *r,
    ngx_uint_t status, ngx_buf_t *b);
static ngx_int_t ngx_http_pagedllm_send_error(ngx_http_request_t *r,
    ngx_http_pagedllm_error_t *err);
static ngx_int_t ngx_http_pagedllm_unavailable(ngx_http_request_t *r,
    const char *reason);
static ngx_int_t ngx_http_pagedllm_retry_after(ngx_http_request_t *r);
static ngx_int_t ngx_http_pagedllm_not_allowed(ngx_http_request_t *r,
    ngx_str_t *allow);
static ngx_int_t ngx_http_pagedllm_add_header(ngx_http_request_t *r,
    const char *name, ngx_str_t *value);


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

    } else {
        if (r->method == NGX_HTTP_POST) {
            ctx = ngx_http_pagedllm_create_ctx(r,
                                               ngx_http_pagedllm_completions);
            if (ctx == NULL) {
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }

            ctx->chat = (route == NGX_HTTP_PAGEDLLM_ROUTE_CHAT);

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


/* The path below the location: "completions", "chat/completions",
   "models" or "models/ID" (id: ID, or empty; a model's name may hold
   slashes), "v1/" allowed. */
static ngx_http_pagedllm_route_e
ngx_http_pagedllm_route(ngx_http_request_t *r, ngx_str_t *id)
{
    u_char                    *p, *last;
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

    if ((size_t) (last - p) == sizeof("completions") - 1
        && ngx_strncmp(p, "completions", last - p) == 0)
    {
        return NGX_HTTP_PAGEDLLM_ROUTE_COMPLETIONS;
    }

    if ((size_t) (last - p) == sizeof("chat/completions") - 1
        && ngx_strncmp(p, "chat/completions", last - p) == 0)
    {
        return NGX_HTTP_PAGEDLLM_ROUTE_CHAT;
    }

    if ((size_t) (last - p) == sizeof("models") - 1
        && ngx_strncmp(p, "models", last - p) == 0)
    {
        if (id != NULL) {
            ngx_str_null(id);
        }

        return NGX_HTTP_PAGEDLLM_ROUTE_MODELS;
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


/* A GET that needs the engine's identity: answer now, or park once. */
static ngx_int_t
ngx_http_pagedllm_get(ngx_http_request_t *r,
    ngx_http_pagedllm_resume_pt resume, ngx_uint_t need_engine)
{
    ngx_http_pagedllm_ctx_t  *ctx;

    if (ngx_http_discard_request_body(r) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ngx_http_pagedllm_channel_engine() == NULL) {
        ctx = ngx_http_pagedllm_create_ctx(r, resume);
        if (ctx == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (ngx_http_pagedllm_channel_park(ctx) == NGX_OK) {
            r->main->count++;
            r->read_event_handler = ngx_http_test_reading;
            return NGX_DONE;
        }
    }

    if (need_engine && ngx_http_pagedllm_channel_engine() == NULL) {
        return ngx_http_pagedllm_unavailable(r, "the engine is not attached");
    }

    return need_engine
           ? ngx_http_pagedllm_models_answer(r,
                                          ngx_http_pagedllm_channel_engine())
           : ngx_http_pagedllm_send_status(r);
}


/* GET models (the list) or models/ID (the engine's model; any other ID is
   a 404, as OpenAI answers an unknown model) */
static ngx_int_t
ngx_http_pagedllm_models_answer(ngx_http_request_t *r,
    ngx_http_pagedllm_engine_t *engine)
{
    ngx_str_t                  id;
    ngx_http_pagedllm_error_t  err;

    (void) ngx_http_pagedllm_route(r, &id);

    if (id.len != 0
        && (id.len != engine->model.len
            || ngx_strncmp(id.data, engine->model.data, id.len) != 0))
    {
        ngx_http_pagedllm_error_set(&err, NGX_HTTP_NOT_FOUND, "model",
                                    "The model `%V` does not exist", &id);
        err.code = "model_not_found";
        return ngx_http_pagedllm_send_error(r, &err);
    }

    return ngx_http_pagedllm_send_json(r, NGX_HTTP_OK,
               ngx_http_pagedllm_models_json(r->pool, engine, id.len != 0));
}


static void
ngx_http_pagedllm_models_resume(ngx_http_request_t *r)
{
    ngx_http_pagedllm_engine_t  *engine;

    engine = ngx_http_pagedllm_channel_engine();

    if (engine == NULL) {
        ngx_http_finalize_request(r, ngx_http_pagedllm_unavailable(r,
                                  "the engine is not attached"));
        return;
    }

    ngx_http_finalize_request(r, ngx_http_pagedllm_models_answer(r, engine));
}


static void
ngx_http_pagedllm_status_resume(ngx_http_request_t *r)
{
    ngx_http_finalize_request(r, ngx_http_pagedllm_send_status(r));
}


static ngx_int_t
ngx_http_pagedllm_send_status(ngx_http_request_t *r)
{
    ngx_int_t   rc;
    pl_stats_t  stats;

    rc = ngx_http_pagedllm_channel_stats(&stats);

    if (rc == NGX_ERROR) {
        return NGX_HTTP_SERVICE_UNAVAILABLE;
    }

    if (rc == NGX_OK) {
        return ngx_http_pagedllm_send_json(r, NGX_HTTP_OK,
                   ngx_http_pagedllm_status_json(r->pool,
                       ngx_http_pagedllm_channel_engine(), &stats));
    }

    if (ngx_http_pagedllm_retry_after(r) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_pagedllm_send_json(r, NGX_HTTP_SERVICE_UNAVAILABLE,
               ngx_http_pagedllm_status_json(r->pool, NULL, NULL));
}


static void
ngx_http_pagedllm_body_handler(ngx_http_request_t *r)
{
    ngx_http_pagedllm_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_pagedllm_module);

    if (ngx_http_pagedllm_channel_engine() == NULL
        && ngx_http_pagedllm_channel_park(ctx) == NGX_OK)
    {
        r->read_event_handler = ngx_http_test_reading;
        return;
    }

    ngx_http_pagedllm_completions(r);
}


/*
 * Body read and the engine attached (or not): the steps of a completion
 * are decoding the body, parsing it, tokenizing the prompt and submitting
 * it; a long body or prompt is decoded or tokenized on the thread pool.
 */
static void
ngx_http_pagedllm_completions(ngx_http_request_t *r)
{
    u_char                     *body;
    size_t                      len;
    ngx_http_pagedllm_ctx_t    *ctx;
    ngx_http_pagedllm_error_t   err;

    ctx = ngx_http_get_module_ctx(r, ngx_http_pagedllm_module);

    if (ngx_http_pagedllm_channel_engine() == NULL) {
        ngx_http_finalize_request(r, ngx_http_pagedllm_unavailable(r,
                                  "the engine is not attached"));
        return;
    }

    body = ngx_http_pagedllm_body(r, &len);

    if (body == NULL) {
        ngx_http_pagedllm_error_set(&err, NGX_HTTP_BAD_REQUEST, NULL,
                                    "The request body is empty or "
                                    "unreadable");
        ngx_http_finalize_request(r, ngx_http_pagedllm_send_error(r, &err));
        return;
    }

    if (ngx_http_pagedllm_decode_init(r->pool, &ctx->decode, body, len)
        != NGX_OK)
    {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (len >= NGX_HTTP_PAGEDLLM_INLINE_MAX) {
        ngx_http_pagedllm_offload(r, ctx, ngx_http_pagedllm_decode_work,
                                  ngx_http_pagedllm_parse);
        return;
    }

    ngx_http_pagedllm_parse(r, ctx);
}


/*
 * work goes to the thread pool, next follows in the event loop.  The
 * request is blocked meanwhile (r->main->blocked): a client that goes
 * away terminates it, but its pool, which owns what the work touches (the
 * body, the decoded JSON, the prompt's ids, a reference to the tokenizer),
 * stays until the work is done.
 */
static void
ngx_http_pagedllm_offload(ngx_http_request_t *r, ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_work_pt work,
    void (*next)(ngx_http_request_t *r, ngx_http_pagedllm_ctx_t *ctx))
{
    ctx->next = next;
    ctx->state = NGX_HTTP_PAGEDLLM_OFFLOADED;
    r->main->blocked++;
    r->read_event_handler = ngx_http_test_reading;

    if (ngx_http_pagedllm_thread_run(r->pool, r->connection->log, work,
                                     ngx_http_pagedllm_offload_done, ctx)
        != NGX_OK)
    {
        work(ctx, r->connection->log);
        ngx_http_pagedllm_offload_done(ctx);
    }
}


/* The work done: the next step, or the end of a request terminated
   meanwhile. */
static void
ngx_http_pagedllm_offload_done(void *data)
{
    ngx_http_pagedllm_ctx_t  *ctx = data;

    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    r = ctx->request;
    c = r->connection;

    ngx_http_set_log_request(c->log, r);

    r->main->blocked--;

    if (c->error) {
        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, c->log, 0,
                       "pagedllm: client gone while on the thread pool");
        r->write_event_handler(r);

    } else {
        ctx->state = NGX_HTTP_PAGEDLLM_NEW;
        ctx->next(r, ctx);
    }

    ngx_http_run_posted_requests(c);
}


static void
ngx_http_pagedllm_decode_work(void *data, ngx_log_t *log)
{
    ngx_http_pagedllm_ctx_t  *ctx = data;

    ngx_http_pagedllm_decode(&ctx->decode);
}


/* Decoded: check every field, hold the tokenizer, tokenize. */
static void
ngx_http_pagedllm_parse(ngx_http_request_t *r, ngx_http_pagedllm_ctx_t *ctx)
{
    ngx_http_pagedllm_error_t    err;
    ngx_http_pagedllm_engine_t  *engine;

    engine = ngx_http_pagedllm_channel_engine();

    if (engine == NULL) {
        ngx_http_finalize_request(r, ngx_http_pagedllm_unavailable(r,
                                  "the engine is not attached"));
        return;
    }

    if (ngx_http_pagedllm_parse_completion(r, &ctx->decode, engine,
                                           ctx->chat, &ctx->params, &err)
        != NGX_OK)
    {
        ngx_http_finalize_request(r, ngx_http_pagedllm_send_error(r, &err));
        return;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "pagedllm: parsed, %uz bytes of prompt text, max_tokens "
                   "%uD", ctx->params.text_len, ctx->params.max_tokens);

    if (ngx_http_pagedllm_tok_hold_pool(r->pool, engine->tok) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ctx->tok = engine->tok;

    if (ctx->params.prompt != NULL) {
        ngx_http_pagedllm_submit(r, ctx);
        return;
    }

    if (ngx_http_pagedllm_tokenize_init(r->pool, &ctx->job, ctx->tok,
                                        &ctx->params)
        != NGX_OK)
    {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (ctx->params.text_len >= NGX_HTTP_PAGEDLLM_INLINE_MAX) {
        ngx_http_pagedllm_offload(r, ctx, ngx_http_pagedllm_tokenize_work,
                                  ngx_http_pagedllm_tokenized);
        return;
    }

    ngx_http_pagedllm_tokenize(&ctx->job, r->connection->log);
    ngx_http_pagedllm_tokenized(r, ctx);
}


static void
ngx_http_pagedllm_tokenize_work(void *data, ngx_log_t *log)
{
    ngx_http_pagedllm_ctx_t  *ctx = data;

    ngx_http_pagedllm_tokenize(&ctx->job, log);
}


static void
ngx_http_pagedllm_tokenized(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx)
{
    if (ctx->job.rc != NGX_OK) {
        ngx_http_finalize_request(r,
                                  ngx_http_pagedllm_send_error(r,
                                                               &ctx->job.err));
        return;
    }

    ctx->params.prompt = ctx->job.ids;
    ctx->params.n_prompt = ctx->job.n_ids;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "pagedllm: tokenized, %ui prompt tokens",
                   ctx->params.n_prompt);

    ngx_http_pagedllm_submit(r, ctx);
}


/* Tokenized: check the length against the engine that is attached now
   (still the one parsed for), submit, start. */
static void
ngx_http_pagedllm_submit(ngx_http_request_t *r, ngx_http_pagedllm_ctx_t *ctx)
{
    ngx_int_t                    rc;
    ngx_http_pagedllm_error_t    err;
    ngx_http_pagedllm_engine_t  *engine;

    engine = ngx_http_pagedllm_channel_engine();

    if (engine == NULL || engine->tok != ctx->tok) {
        ngx_http_finalize_request(r, ngx_http_pagedllm_unavailable(r,
                                  "the engine went away or changed its "
                                  "model, try again"));
        return;
    }

    if (ngx_http_pagedllm_check_length(&ctx->params, engine, &err)
        != NGX_OK)
    {
        ngx_http_finalize_request(r, ngx_http_pagedllm_send_error(r, &err));
        return;
    }

    ctx->model.len = engine->model.len;
    ctx->model.data = ngx_pstrdup(r->pool, &engine->model);
    if (ctx->model.data == NULL) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (ngx_http_pagedllm_choices(ctx) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    rc = ngx_http_pagedllm_channel_submit(ctx);

    if (rc == NGX_AGAIN) {
        ngx_http_finalize_request(r, ngx_http_pagedllm_unavailable(r,
                                  "the engine is busy, try again"));
        return;
    }

    if (rc != NGX_OK) {
        ngx_http_finalize_request(r, ngx_http_pagedllm_unavailable(r,
                                  "the engine is not attached"));
        return;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "pagedllm: request %uL submitted",
                   (uint64_t) ctx->node.key);

    rc = ngx_http_pagedllm_start(r, ctx);

    if (rc != NGX_OK) {
        ngx_http_finalize_request(r, rc);
    }
}


/* One output state per choice, each with its own detokenizer. */
static ngx_int_t
ngx_http_pagedllm_choices(ngx_http_pagedllm_ctx_t *ctx)
{
    ngx_uint_t  i;

    ctx->choices = ngx_pcalloc(ctx->request->pool,
                       ctx->params.n * sizeof(ngx_http_pagedllm_choice_t));
    if (ctx->choices == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < ctx->params.n; i++) {
        ctx->choices[i].index = i;
        pl_detok_init(&ctx->choices[i].detok, ctx->tok->tokenizer, 1);
    }

    ctx->n_top = (ctx->params.flags & PL_SUBMIT_LOGPROBS)
                 ? ctx->params.logprobs : 0;

    return NGX_OK;
}


/* The whole body as one piece of memory (it may sit in a temp file). */
static u_char *
ngx_http_pagedllm_body(ngx_http_request_t *r, size_t *len)
{
    u_char       *p, *body;
    off_t         size;
    ssize_t       n;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    if (r->request_body == NULL || r->request_body->bufs == NULL) {
        return NULL;
    }

    size = 0;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        size += ngx_buf_size(cl->buf);
    }

    if (size == 0) {
        return NULL;
    }

    cl = r->request_body->bufs;

    if (cl->next == NULL && !cl->buf->in_file) {
        *len = (size_t) size;
        return cl->buf->pos;
    }

    body = ngx_pnalloc(r->pool, (size_t) size);
    if (body == NULL) {
        return NULL;
    }

    p = body;

    for ( /* void */ ; cl; cl = cl->next) {
        b = cl->buf;

        if (!b->in_file) {
            p = ngx_cpymem(p, b->pos, b->last - b->pos);
            continue;
        }

        n = ngx_read_file(b->file, p, (size_t) (b->file_last - b->file_pos),
                          b->file_pos);
        if (n != b->file_last - b->file_pos) {
            return NULL;
        }

        p += n;
    }

    *len = (size_t) size;

    return body;
}


static ngx_int_t
ngx_http_pagedllm_start(ngx_http_request_t *r, ngx_http_pagedllm_ctx_t *ctx)
{
    ngx_int_t                      rc;
    ngx_http_pagedllm_loc_conf_t  *plcf;

    plcf = ngx_http_get_module_loc_conf(r, ngx_http_pagedllm_module);

    ctx->id.data = ngx_pnalloc(r->pool, sizeof("chatcmpl-") - 1 + 8 + 16);
    if (ctx->id.data == NULL) {
        return NGX_ERROR;
    }

    ctx->id.len = ngx_sprintf(ctx->id.data, "%s%08xD%016xL",
                              ctx->chat ? "chatcmpl-" : "cmpl-",
                              (uint32_t) ngx_pid, (uint64_t) ctx->node.key)
                  - ctx->id.data;
    ctx->created = ngx_time();

    ngx_add_timer(&ctx->timer, plcf->timeout);

    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_request_empty_handler;

    if (!ctx->params.stream) {
        return NGX_OK;
    }

    rc = ngx_http_pagedllm_send_stream_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK) {
        return rc;
    }

    r->write_event_handler = ngx_http_pagedllm_write_handler;

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_send_stream_header(ngx_http_request_t *r)
{
    ngx_str_t  value;

    r->headers_out.status = NGX_HTTP_OK;
    ngx_str_set(&r->headers_out.content_type, "text/event-stream");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;
    ngx_http_clear_content_length(r);
    ngx_http_clear_accept_ranges(r);

    ngx_str_set(&value, "no-cache");

    if (ngx_http_pagedllm_add_header(r, "Cache-Control", &value) != NGX_OK) {
        return NGX_ERROR;
    }

    return ngx_http_send_header(r);
}


static ngx_int_t
ngx_http_pagedllm_on_tokens(ngx_http_pagedllm_ctx_t *ctx, ngx_uint_t index,
    const int32_t *ids, ngx_uint_t n, const float *lp,
    const pl_top_logprob_t *top, ngx_uint_t n_top)
{
    long                          len;
    ngx_uint_t                    i;
    ngx_http_pagedllm_engine_t   *engine;
    ngx_http_pagedllm_choice_t   *ch;

    engine = ngx_http_pagedllm_channel_engine();

    if (ctx->finished) {
        return NGX_OK;
    }

    if (index >= ctx->params.n) {
        return NGX_ERROR;
    }

    ch = &ctx->choices[index];

    if (ch->finished) {
        return NGX_OK;              /* cut at a stop string: ignored */
    }

    if (!ctx->first_token) {
        ctx->first_token = 1;
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                       "pagedllm: request %uL first token",
                       (uint64_t) ctx->node.key);
    }

    if ((lp && n_top != ctx->n_top)
        || ngx_http_pagedllm_pieces_reserve(ctx, ch, n) != NGX_OK)
    {
        return NGX_ERROR;
    }

    for (i = 0; i < n; i++) {
        if (ids[i] < 0 || (uint32_t) ids[i] >= engine->vocab_size
            || ngx_http_pagedllm_text_reserve(ctx, ch,
                                              NGX_HTTP_PAGEDLLM_DETOK_MAX)
               != NGX_OK)
        {
            return NGX_ERROR;
        }

        len = pl_detok_push(&ch->detok, ids[i], (char *) ch->text
                            + ch->text_len, NGX_HTTP_PAGEDLLM_DETOK_MAX);
        if (len < 0) {
            return NGX_ERROR;
        }

        ch->text_len += len;
        ch->completion_tokens++;

        if (lp) {
            ch->piece_lp[ch->npieces] = lp[i];
            ngx_memcpy(ch->piece_top + ch->npieces * n_top, top + i * n_top,
                       n_top * sizeof(pl_top_logprob_t));
        }

        ch->piece_end[ch->npieces++] = (uint32_t) ch->text_len;

        if (ctx->params.n_stop && ngx_http_pagedllm_stop_check(ctx, ch, len))
        {
            return NGX_OK;
        }
    }

    return NGX_OK;
}


/*
 * The engine ended choice index normally (STOP or LENGTH).  A choice
 * already cut at a stop string keeps that ending.  NGX_ERROR when the
 * index names no choice.
 */
static ngx_int_t
ngx_http_pagedllm_on_finish(ngx_http_pagedllm_ctx_t *ctx, ngx_uint_t index,
    uint32_t reason, double cum_logprob)
{
    ngx_http_pagedllm_choice_t  *ch;

    if (index >= ctx->params.n) {
        return NGX_ERROR;
    }

    ch = &ctx->choices[index];

    if (ctx->finished || ch->engine_done) {
        return ch->engine_done ? NGX_ERROR : NGX_OK;
    }

    ch->engine_done = 1;
    ch->cum_logprob = cum_logprob;

    if (!ch->finished) {
        ch->finish_reason = reason;
        ngx_http_pagedllm_finish_text(ctx, ch);
        ngx_http_pagedllm_choice_end(ctx, ch);
    }

    return NGX_OK;
}


/*
 * Choice ch has ended.  Once every choice has, the request is over; if
 * the engine is still generating for one of them (cut at a stop string
 * here), the request is aborted there, which frees its blocks.
 */
static void
ngx_http_pagedllm_choice_end(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch)
{
    ngx_uint_t  i, live;

    ch->finished = 1;

    if (++ctx->n_finished < ctx->params.n) {
        return;
    }

    live = 0;

    for (i = 0; i < ctx->params.n; i++) {
        live |= !ctx->choices[i].engine_done;
    }

    if (live) {
        ngx_http_pagedllm_channel_cancel(ctx);
    }

    ctx->finished = 1;
    ctx->finish_reason = PL_FINISH_STOP;
}


/* Room for n more pieces (and their logprobs). */
static ngx_int_t
ngx_http_pagedllm_pieces_reserve(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, ngx_uint_t n)
{
    void               *pe, *lp, *top;
    ngx_uint_t          cap;
    ngx_pool_t         *pool = ctx->request->pool;

    if (ch->npieces + n <= ch->pieces_cap) {
        return NGX_OK;
    }

    cap = ngx_max(ch->pieces_cap * 2, ch->npieces + n);
    cap = ngx_max(cap, 16);

    pe = ngx_palloc(pool, cap * sizeof(uint32_t));
    lp = ngx_palloc(pool, cap * sizeof(float));
    top = ngx_palloc(pool, cap * (ctx->n_top + 1) * sizeof(pl_top_logprob_t));

    if (pe == NULL || lp == NULL || top == NULL) {
        return NGX_ERROR;
    }

    if (ch->npieces) {
        ngx_memcpy(pe, ch->piece_end, ch->npieces * sizeof(uint32_t));
        ngx_memcpy(lp, ch->piece_lp, ch->npieces * sizeof(float));
        ngx_memcpy(top, ch->piece_top,
                   ch->npieces * ctx->n_top * sizeof(pl_top_logprob_t));
    }

    ch->piece_end = pe;
    ch->piece_lp = lp;
    ch->piece_top = top;
    ch->pieces_cap = cap;

    return NGX_OK;
}


/*
 * The last token of ch added len bytes: look for the earliest stop string
 * that ends in them.  On a match the text is cut where the stop string
 * starts, the pieces after the cut are dropped, and the choice ends with
 * "stop".
 */
static ngx_uint_t
ngx_http_pagedllm_stop_check(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, size_t len)
{
    u_char      *m;
    size_t       from, cut;
    ngx_str_t   *st;
    ngx_uint_t   i;

    cut = ch->text_len + 1;

    for (i = 0; i < ctx->params.n_stop; i++) {
        st = &ctx->params.stop[i];

        from = ch->text_len - len;
        from = from >= st->len - 1 ? from - (st->len - 1) : 0;

        m = memmem(ch->text + from, ch->text_len - from, st->data,
                   st->len);
        if (m && (size_t) (m - ch->text) < cut) {
            cut = m - ch->text;
        }
    }

    if (cut > ch->text_len) {
        return 0;
    }

    ch->text_len = cut;

    while (ch->npieces > 1 && ch->piece_end[ch->npieces - 2] >= cut) {
        ch->npieces--;
    }

    ch->piece_end[ch->npieces - 1] = (uint32_t) cut;

    ch->stopped = 1;
    ch->finish_reason = PL_FINISH_STOP;
    ngx_http_pagedllm_choice_end(ctx, ch);

    return 1;
}


static void
ngx_http_pagedllm_on_error(ngx_http_pagedllm_ctx_t *ctx, ngx_uint_t status,
    u_char *msg, size_t len)
{
    len = ngx_min(len, NGX_HTTP_PAGEDLLM_ERR_LEN);

    ctx->error_status = status;
    ctx->error_message.data = ngx_pnalloc(ctx->request->pool, len);

    if (ctx->error_message.data == NULL || len == 0
        || !pl_utf8_valid((char *) msg, len))
    {
        ngx_str_set(&ctx->error_message, "the engine failed the request");
        return;
    }

    ngx_memcpy(ctx->error_message.data, msg, len);
    ctx->error_message.len = len;
}


static ngx_int_t
ngx_http_pagedllm_text_reserve(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, size_t more)
{
    u_char  *p;
    size_t   cap;

    if (ch->text_len + more <= ch->text_cap) {
        return NGX_OK;
    }

    cap = ngx_max(ch->text_cap * 2, ch->text_len + more);
    cap = ngx_max(cap, 1024);

    p = ngx_pnalloc(ctx->request->pool, cap);
    if (p == NULL) {
        return NGX_ERROR;
    }

    if (ch->text_len) {
        ngx_memcpy(p, ch->text, ch->text_len);
    }

    if (ch->text) {
        ngx_pfree(ctx->request->pool, ch->text);
    }

    ch->text = p;
    ch->text_cap = cap;

    return NGX_OK;
}


/* Called once per drain for every request the drain touched. */
static void
ngx_http_pagedllm_flush(ngx_http_pagedllm_ctx_t *ctx)
{
    ngx_http_pagedllm_loc_conf_t  *plcf;

    if (ctx->finished) {
        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                       "pagedllm: request %uL finished, reason %uD",
                       (uint64_t) ctx->node.key, ctx->finish_reason);

        if (ctx->timer.timer_set) {
            ngx_del_timer(&ctx->timer);
        }

    } else {
        plcf = ngx_http_get_module_loc_conf(ctx->request,
                                            ngx_http_pagedllm_module);
        ngx_add_timer(&ctx->timer, plcf->timeout);
    }

    if (ctx->params.stream) {
        ngx_http_pagedllm_flush_stream(ctx);

    } else if (ctx->finished) {
        ngx_http_pagedllm_flush_whole(ctx);
    }
}


/* The end of ch's text: bytes of an incomplete character become
   U+FFFD. */
static void
ngx_http_pagedllm_finish_text(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch)
{
    long  len;

    if (ngx_http_pagedllm_text_reserve(ctx, ch, NGX_HTTP_PAGEDLLM_DETOK_MAX)
        != NGX_OK)
    {
        return;
    }

    len = pl_detok_flush(&ch->detok, (char *) ch->text + ch->text_len,
                         NGX_HTTP_PAGEDLLM_DETOK_MAX);
    if (len <= 0) {
        return;
    }

    ch->text_len += len;

    if (ch->npieces) {
        ch->piece_end[ch->npieces - 1] = (uint32_t) ch->text_len;
    }
}


static void
ngx_http_pagedllm_flush_stream(ngx_http_pagedllm_ctx_t *ctx)
{
    size_t                       size;
    ngx_int_t                    rc;
    ngx_buf_t                   *b;
    ngx_str_t                   *lpj[PL_MAX_SEQS];
    ngx_uint_t                   i, any, emit[PL_MAX_SEQS];
    ngx_chain_t                 *out;
    ngx_http_request_t          *r = ctx->request;
    ngx_http_pagedllm_choice_t  *ch;

    any = ctx->finished;
    size = 0;

    for (i = 0; i < ctx->params.n; i++) {
        ch = &ctx->choices[i];
        emit[i] = ngx_http_pagedllm_emittable(ctx, ch);
        lpj[i] = NULL;
        any |= emit[i] || (ch->finished && !ch->final_sent);

        if ((ctx->params.flags & PL_SUBMIT_LOGPROBS) && emit[i]
            && ngx_http_pagedllm_piece_logprobs(ctx, ch, emit[i], &lpj[i])
               != NGX_OK)
        {
            ngx_http_finalize_request(r, NGX_ERROR);
            return;
        }

        size += ngx_http_pagedllm_stream_size(ctx, ch, emit[i], lpj[i]);
    }

    if (!any) {
        return;
    }

    if (ctx->finished) {
        size += 2 * ngx_http_pagedllm_sse_bound(ctx, 0) + 512
                + 6 * ctx->error_message.len + sizeof("data: [DONE]\n\n");
    }

    out = ngx_http_pagedllm_out_buf(ctx, size);
    if (out == NULL) {
        ngx_http_finalize_request(r, NGX_ERROR);
        return;
    }

    b = out->buf;

    for (i = 0; i < ctx->params.n; i++) {
        ch = &ctx->choices[i];
        b->last = ngx_http_pagedllm_stream_events(b->last, ctx, ch, emit[i],
                                                  lpj[i]);
        ngx_http_pagedllm_consume(ch, emit[i], ctx->n_top);
    }

    b->last = ngx_http_pagedllm_stream_end(b->last, ctx);
    b->flush = 1;
    b->last_buf = ctx->finished && r == r->main;
    b->last_in_chain = 1;

    rc = ngx_http_output_filter(r, out);

    ngx_chain_update_chains(r->pool, &ctx->free, &ctx->busy, &out,
                            (ngx_buf_tag_t) &ngx_http_pagedllm_module);

    ngx_http_pagedllm_after_write(ctx, rc);
}


/*
 * Pieces of ch that may be streamed now: all once it has ended; before
 * that, those that end before the text that might still become a stop
 * string (the longest tail of the text that is a proper prefix of one).
 * None once the request has failed.
 */
static ngx_uint_t
ngx_http_pagedllm_emittable(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch)
{
    size_t       hold, k, safe;
    ngx_str_t   *st;
    ngx_uint_t   i, n;

    if (ch->finished || ctx->finished) {
        return ctx->finish_reason == PL_FINISH_ERROR ? 0 : ch->npieces;
    }

    hold = 0;

    for (i = 0; i < ctx->params.n_stop; i++) {
        st = &ctx->params.stop[i];

        for (k = ngx_min(st->len - 1, ch->text_len); k > hold; k--) {
            if (ngx_memcmp(ch->text + ch->text_len - k, st->data, k) == 0)
            {
                hold = k;
                break;
            }
        }
    }

    safe = ch->text_len - hold;

    for (n = 0; n < ch->npieces && ch->piece_end[n] <= safe; n++) {
        /* void */
    }

    return n;
}


/* The logprobs object of each of the first n pieces, one event each. */
static ngx_int_t
ngx_http_pagedllm_piece_logprobs(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, ngx_uint_t n, ngx_str_t **out)
{
    ngx_str_t   *lpj;
    ngx_uint_t   i;

    lpj = ngx_palloc(ctx->request->pool, n * sizeof(ngx_str_t));
    if (lpj == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < n; i++) {
        if (ngx_http_pagedllm_logprobs_text(ctx, ch, i, 1, &lpj[i])
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    *out = lpj;

    return NGX_OK;
}


/* Forget the first n pieces of ch (streamed), keeping the rest in
   place. */
static void
ngx_http_pagedllm_consume(ngx_http_pagedllm_choice_t *ch, ngx_uint_t n,
    ngx_uint_t n_top)
{
    size_t      bytes;
    ngx_uint_t  i, rest;

    bytes = (n == ch->npieces) ? ch->text_len
                               : (n ? ch->piece_end[n - 1] : 0);
    rest = ch->npieces - n;

    ch->chars_sent += ngx_http_pagedllm_utf8_chars(ch->text, bytes);
    ngx_memmove(ch->text, ch->text + bytes, ch->text_len - bytes);
    ch->text_len -= bytes;

    for (i = 0; i < rest; i++) {
        ch->piece_end[i] = ch->piece_end[n + i] - bytes;
        ch->piece_lp[i] = ch->piece_lp[n + i];
    }

    if (rest && n_top) {
        ngx_memmove(ch->piece_top, ch->piece_top + n * n_top,
                    rest * n_top * sizeof(pl_top_logprob_t));
    }

    ch->npieces = rest;
}


static size_t
ngx_http_pagedllm_stream_size(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, ngx_uint_t emit, ngx_str_t *lpj)
{
    size_t      size;
    ngx_uint_t  i;

    size = (emit + 2) * ngx_http_pagedllm_sse_bound(ctx, 0)
           + ngx_http_pagedllm_sse_bound(ctx, ch->text_len);

    for (i = 0; lpj && i < emit; i++) {
        size += lpj[i].len;
    }

    return size;
}


/* ch's events: its role first (chat), its emittable pieces, and once it
   has ended normally its finish_reason (on the last piece, or alone). */
static u_char *
ngx_http_pagedllm_stream_events(u_char *p, ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, ngx_uint_t emit, ngx_str_t *lpj)
{
    uint32_t    reason, start, end;
    ngx_uint_t  i, final;

    final = ch->finished && !ch->final_sent
            && ctx->finish_reason != PL_FINISH_ERROR;
    start = 0;

    if (ctx->chat && !ch->role_sent && (emit || final)) {
        p = ngx_http_pagedllm_sse_role(p, ctx, ch->index);
        ch->role_sent = 1;
    }

    for (i = 0; i < emit; i++) {
        end = ch->piece_end[i];
        reason = (i == ch->npieces - 1 && final) ? ch->finish_reason : 0;

        p = ngx_http_pagedllm_sse_text(p, ctx, ch->index, ch->text + start,
                                       end - start, lpj ? &lpj[i] : NULL,
                                       reason);
        start = end;
    }

    if (final && emit == 0) {
        p = ngx_http_pagedllm_sse_text(p, ctx, ch->index, ch->text, 0,
                                       NULL, ch->finish_reason);
    }

    ch->final_sent |= final;

    return p;
}


/* Once the request is over: the error event, or the usage; then
   [DONE]. */
static u_char *
ngx_http_pagedllm_stream_end(u_char *p, ngx_http_pagedllm_ctx_t *ctx)
{
    if (!ctx->finished) {
        return p;
    }

    if (ctx->finish_reason == PL_FINISH_ERROR) {
        p = ngx_http_pagedllm_sse_error(p, ctx, ctx->error_status,
                                        &ctx->error_message);

    } else if (ctx->params.include_usage) {
        p = ngx_http_pagedllm_sse_usage(p, ctx);
    }

    return ngx_cpymem(p, "data: [DONE]\n\n", sizeof("data: [DONE]\n\n") - 1);
}


/* An output buffer of at least size bytes, reused once it has been sent. */
static ngx_chain_t *
ngx_http_pagedllm_out_buf(ngx_http_pagedllm_ctx_t *ctx, size_t size)
{
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    cl = ngx_chain_get_free_buf(ctx->request->pool, &ctx->free);
    if (cl == NULL) {
        return NULL;
    }

    b = cl->buf;

    if (b->start == NULL || (size_t) (b->end - b->start) < size) {
        size = ngx_max(size, NGX_HTTP_PAGEDLLM_OUT_MIN);

        b->start = ngx_palloc(ctx->request->pool, size);
        if (b->start == NULL) {
            return NULL;
        }

        b->end = b->start + size;
    }

    b->pos = b->start;
    b->last = b->start;
    b->temporary = 1;
    b->tag = (ngx_buf_tag_t) &ngx_http_pagedllm_module;

    return cl;
}


static void
ngx_http_pagedllm_after_write(ngx_http_pagedllm_ctx_t *ctx, ngx_int_t rc)
{
    ngx_http_request_t            *r = ctx->request;
    ngx_http_pagedllm_loc_conf_t  *plcf;

    if (ctx->finished || rc == NGX_ERROR) {
        ngx_http_finalize_request(r, rc);
        return;
    }

    plcf = ngx_http_get_module_loc_conf(r, ngx_http_pagedllm_module);

    if (ngx_http_pagedllm_unsent(ctx) > plcf->max_unsent) {
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "pagedllm: client reads too slowly, more than %uz "
                      "bytes unsent, aborting the generation",
                      plcf->max_unsent);
        ngx_http_finalize_request(r, NGX_ERROR);
        return;
    }

    if (ngx_http_pagedllm_write_timer(r) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_ERROR);
    }
}


static size_t
ngx_http_pagedllm_unsent(ngx_http_pagedllm_ctx_t *ctx)
{
    size_t        size;
    ngx_chain_t  *cl;

    size = 0;

    for (cl = ctx->busy; cl; cl = cl->next) {
        size += ngx_buf_size(cl->buf);
    }

    return size;
}


static void
ngx_http_pagedllm_write_handler(ngx_http_request_t *r)
{
    ngx_int_t                 rc;
    ngx_chain_t              *out;
    ngx_connection_t         *c;
    ngx_http_pagedllm_ctx_t  *ctx;

    c = r->connection;
    ctx = ngx_http_get_module_ctx(r, ngx_http_pagedllm_module);

    if (c->write->timedout) {
        c->timedout = 1;
        ngx_log_error(NGX_LOG_INFO, c->log, NGX_ETIMEDOUT,
                      "client timed out");
        ngx_http_finalize_request(r, NGX_HTTP_REQUEST_TIME_OUT);
        return;
    }

    rc = ngx_http_output_filter(r, NULL);

    out = NULL;
    ngx_chain_update_chains(r->pool, &ctx->free, &ctx->busy, &out,
                            (ngx_buf_tag_t) &ngx_http_pagedllm_module);

    if (rc == NGX_ERROR || ngx_http_pagedllm_write_timer(r) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_ERROR);
    }
}


static ngx_int_t
ngx_http_pagedllm_write_timer(ngx_http_request_t *r)
{
    ngx_event_t               *wev;
    ngx_http_core_loc_conf_t  *clcf;

    wev = r->connection->write;
    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    if (ngx_handle_write_event(wev, clcf->send_lowat) != NGX_OK) {
        return NGX_ERROR;
    }

    if (wev->active && !wev->ready) {
        ngx_add_timer(wev, clcf->send_timeout);

    } else if (wev->timer_set) {
        ngx_del_timer(wev);
    }

    return NGX_OK;
}


/* The engine said nothing for pagedllm_timeout: give up on it. */
static void
ngx_http_pagedllm_timeout(ngx_event_t *ev)
{
    ngx_connection_t                *c;
    ngx_http_pagedllm_ctx_t         *ctx = ev->data;

    c = ctx->request->connection;

    ngx_log_error(NGX_LOG_ERR, c->log, NGX_ETIMEDOUT,
                  "pagedllm: the engine produced nothing in time");

    ngx_http_pagedllm_channel_cancel(ctx);

    ctx->finished = 1;
    ctx->finish_reason = PL_FINISH_ERROR;
    ctx->error_status = NGX_HTTP_GATEWAY_TIME_OUT;
    ngx_str_set(&ctx->error_message, "the engine timed out");

    ngx_http_pagedllm_flush(ctx);
    ngx_http_run_posted_requests(c);
}


static void
ngx_http_pagedllm_flush_whole(ngx_http_pagedllm_ctx_t *ctx)
{
    ngx_buf_t                  *b;
    ngx_http_request_t         *r = ctx->request;
    ngx_http_pagedllm_error_t   err;

    if (ctx->finish_reason == PL_FINISH_STOP
        || ctx->finish_reason == PL_FINISH_LENGTH)
    {
        b = ngx_http_pagedllm_completion_json(ctx);
        ngx_http_finalize_request(r, ngx_http_pagedllm_send_json(r,
                                  NGX_HTTP_OK, b));
        return;
    }

    ngx_http_pagedllm_error_set(&err, ctx->error_status, NULL, "%V",
                                &ctx->error_message);

    if (ctx->error_status == NGX_HTTP_SERVICE_UNAVAILABLE) {
        ngx_http_finalize_request(r, ngx_http_pagedllm_unavailable(r,
                                  (char *) err.message));
        return;
    }

    ngx_http_finalize_request(r, ngx_http_pagedllm_send_error(r, &err));
}


static ngx_int_t
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


static ngx_int_t
ngx_http_pagedllm_send_error(ngx_http_request_t *r,
    ngx_http_pagedllm_error_t *err)
{
    return ngx_http_pagedllm_send_json(r, err->status,
                                 ngx_http_pagedllm_error_json(r->pool, err));
}


static ngx_int_t
ngx_http_pagedllm_unavailable(ngx_http_request_t *r, const char *reason)
{
    ngx_http_pagedllm_error_t  err;

    if (ngx_http_pagedllm_retry_after(r) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_http_pagedllm_error_set(&err, NGX_HTTP_SERVICE_UNAVAILABLE, NULL,
                                "%s", reason);
    err.code = "engine_unavailable";

    return ngx_http_pagedllm_send_error(r, &err);
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


static ngx_int_t
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
