
/*
 * ngx_http_pagedllm_completion: a completion's steps once its body is
 * read: the body decoded, parsed and checked, the prompt tokenized, its
 * length checked against the engine attached then, the request submitted
 * to the channel and its output started.  A long body is decoded and a
 * long prompt tokenized on the thread pool, the request blocked
 * meanwhile.  POST /tokenize and /detokenize take the same steps and are
 * answered where a completion would be submitted.  Batched prompts (a
 * list of them) are prepared one after the other, each tokenized or
 * decoded for echo as a single prompt is, then joined into one SUBMIT
 * that the engine runs as a request per prompt.
 */


#include "ngx_http_pagedllm_module.h"
#include "ngx_http_pagedllm_handler.h"


/*
 * Bodies and prompts of fewer bytes are decoded and tokenized in the event
 * loop: at the 35 MB/s bench/tokenizer measures with Llama 3's tokenizer
 * (and about 40 MB/s for jansson on a long string), 4 KiB is about 0.1 ms,
 * on the order of a thread pool round trip (a task posted, a thread woken,
 * its completion notified back through the event loop); longer ones go to
 * the thread pool.
 */
#define NGX_HTTP_PAGEDLLM_INLINE_MAX   4096


static void ngx_http_pagedllm_step(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx, ngx_http_pagedllm_work_pt work,
    void (*next)(ngx_http_request_t *r, ngx_http_pagedllm_ctx_t *ctx),
    ngx_uint_t offload);
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
static void ngx_http_pagedllm_echo(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx);
static void ngx_http_pagedllm_echo_decoded(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx);
static void ngx_http_pagedllm_submit(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx);
static void ngx_http_pagedllm_detokenize_work(void *data, ngx_log_t *log);
static void ngx_http_pagedllm_tokens_answer(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx);
static ngx_http_pagedllm_engine_t *ngx_http_pagedllm_same_engine(
    ngx_http_request_t *r, ngx_http_pagedllm_ctx_t *ctx);
static ngx_int_t ngx_http_pagedllm_choices(ngx_http_pagedllm_ctx_t *ctx);
static ngx_uint_t ngx_http_pagedllm_echo_text(ngx_http_pagedllm_params_t *p);
static ngx_int_t ngx_http_pagedllm_prompt_expected(
    ngx_http_pagedllm_ctx_t *ctx, ngx_http_pagedllm_choice_t *ch);
static ngx_uint_t ngx_http_pagedllm_job_failed(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx);
static void ngx_http_pagedllm_batch_next(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx);
static void ngx_http_pagedllm_batch_tokenized(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx);
static void ngx_http_pagedllm_batch_decoded(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx);
static u_char *ngx_http_pagedllm_batch_keep(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx, void **data, size_t len);
static ngx_int_t ngx_http_pagedllm_check_prompts(
    ngx_http_pagedllm_params_t *p, ngx_http_pagedllm_engine_t *engine,
    ngx_http_pagedllm_error_t *err);
static ngx_int_t ngx_http_pagedllm_batch_join(ngx_pool_t *pool,
    ngx_http_pagedllm_params_t *p);
static ngx_int_t ngx_http_pagedllm_start(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx);


/*
 * Body read and the engine attached (or not): the steps of a completion
 * are decoding the body, parsing it, tokenizing the prompt and submitting
 * it; a long body or prompt is decoded or tokenized on the thread pool.
 */
void
ngx_http_pagedllm_completions(ngx_http_request_t *r)
{
    u_char                     *body;
    size_t                      len;
    ngx_http_pagedllm_ctx_t    *ctx;
    ngx_http_pagedllm_error_t   err;

    ctx = ngx_http_get_module_ctx(r, ngx_http_pagedllm_module);

    if (ngx_http_pagedllm_channel_engine(ctx) == NULL) {
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

    ngx_http_pagedllm_step(r, ctx, ngx_http_pagedllm_decode_work,
                           ngx_http_pagedllm_parse,
                           len >= NGX_HTTP_PAGEDLLM_INLINE_MAX);
}


/* work, on the thread pool when offload, else here and now; then next */
static void
ngx_http_pagedllm_step(ngx_http_request_t *r, ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_work_pt work,
    void (*next)(ngx_http_request_t *r, ngx_http_pagedllm_ctx_t *ctx),
    ngx_uint_t offload)
{
    if (offload) {
        ngx_http_pagedllm_offload(r, ctx, work, next);
        return;
    }

    work(ctx, r->connection->log);
    next(r, ctx);
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
    ngx_int_t                    rc;
    ngx_http_pagedllm_error_t    err;
    ngx_http_pagedllm_engine_t  *engine;

    engine = ngx_http_pagedllm_channel_engine(ctx);

    if (engine == NULL) {
        ngx_http_finalize_request(r, ngx_http_pagedllm_unavailable(r,
                                  "the engine is not attached"));
        return;
    }

    if (ctx->tokenize || ctx->detokenize) {
        rc = ngx_http_pagedllm_parse_tokens(r, &ctx->decode, engine,
                                            ctx->detokenize, &ctx->params,
                                            &err);

    } else {
        rc = ngx_http_pagedllm_parse_completion(r, &ctx->decode, engine,
                                                ctx->chat, &ctx->params,
                                                &err);
    }

    if (rc != NGX_OK) {
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

    if (ctx->params.n_parts > 1) {
        if (ngx_http_pagedllm_tokenize_init(r->pool, &ctx->job, ctx->tok,
                                            &ctx->params)
            != NGX_OK)
        {
            ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }

        ngx_http_pagedllm_batch_next(r, ctx);
        return;
    }

    if (ctx->params.prompt != NULL && !ctx->detokenize) {
        ngx_http_pagedllm_echo(r, ctx);
        return;
    }

    if (ngx_http_pagedllm_tokenize_init(r->pool, &ctx->job, ctx->tok,
                                        &ctx->params)
        != NGX_OK)
    {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    /* /detokenize: the ids decoded, on the thread pool when the body was
       long enough to be decoded there */

    if (ctx->detokenize) {
        ngx_http_pagedllm_step(r, ctx, ngx_http_pagedllm_detokenize_work,
                               ngx_http_pagedllm_tokens_answer,
                               ctx->decode.len
                               >= NGX_HTTP_PAGEDLLM_INLINE_MAX);
        return;
    }

    ngx_http_pagedllm_step(r, ctx, ngx_http_pagedllm_tokenize_work,
                           ngx_http_pagedllm_tokenized,
                           ctx->params.text_len
                           >= NGX_HTTP_PAGEDLLM_INLINE_MAX);
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
    if (ctx->tokenize) {
        ngx_http_pagedllm_tokens_answer(r, ctx);
        return;
    }

    if (ngx_http_pagedllm_job_failed(r, ctx)) {
        return;
    }

    ctx->params.prompt = ctx->job.ids;
    ctx->params.n_prompt = ctx->job.n_ids;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "pagedllm: tokenized, %ui prompt tokens",
                   ctx->params.n_prompt);

    ngx_http_pagedllm_echo(r, ctx);
}


/*
 * echo: the prompt's text, which each choice's text begins with, as vLLM
 * makes it: a prompt given as text is echoed as given (truncated or not),
 * one given as ids is those ids (truncated) decoded, special tokens
 * included, on the thread pool when they are many.
 */
static void
ngx_http_pagedllm_echo(ngx_http_request_t *r, ngx_http_pagedllm_ctx_t *ctx)
{
    ngx_http_pagedllm_params_t  *p = &ctx->params;

    if (!p->want_echo || p->text != NULL || p->echo_lp) {
        p->echo.data = p->text;
        p->echo.len = ngx_http_pagedllm_echo_text(p) ? p->text_len : 0;
        ngx_http_pagedllm_submit(r, ctx);
        return;
    }

    if (ngx_http_pagedllm_tokenize_init(r->pool, &ctx->job, ctx->tok, p)
        != NGX_OK)
    {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_http_pagedllm_step(r, ctx, ngx_http_pagedllm_detokenize_work,
                           ngx_http_pagedllm_echo_decoded,
                           p->n_prompt * sizeof(int32_t)
                           >= NGX_HTTP_PAGEDLLM_INLINE_MAX);
}


static void
ngx_http_pagedllm_echo_decoded(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx)
{
    if (ngx_http_pagedllm_job_failed(r, ctx)) {
        return;
    }

    ctx->params.echo.data = ctx->job.text;
    ctx->params.echo.len = ctx->job.text_len;

    ngx_http_pagedllm_submit(r, ctx);
}


static void
ngx_http_pagedllm_detokenize_work(void *data, ngx_log_t *log)
{
    ngx_http_pagedllm_ctx_t  *ctx = data;

    ngx_http_pagedllm_detokenize(&ctx->job, log);
}


/* /tokenize or /detokenize done: the answer, while the engine whose
   tokenizer made it is attached (its max_model_len goes with the ids) */
static void
ngx_http_pagedllm_tokens_answer(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx)
{
    ngx_buf_t                   *b;
    ngx_http_pagedllm_engine_t  *engine;

    if (ngx_http_pagedllm_job_failed(r, ctx)) {
        return;
    }

    engine = ngx_http_pagedllm_same_engine(r, ctx);
    if (engine == NULL) {
        return;
    }

    b = ctx->tokenize
        ? ngx_http_pagedllm_tokenize_json(r->pool, engine, ctx->job.ids,
                                          ctx->job.n_ids)
        : ngx_http_pagedllm_detokenize_json(r->pool, ctx->job.text,
                                            ctx->job.text_len);

    ngx_http_finalize_request(r, ngx_http_pagedllm_send_json(r, NGX_HTTP_OK,
                                                             b));
}


/* The engine attached now if it is still the one the request was parsed
   for; else the request is answered 503 and NULL returned. */
static ngx_http_pagedllm_engine_t *
ngx_http_pagedllm_same_engine(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx)
{
    ngx_http_pagedllm_engine_t  *engine;

    engine = ngx_http_pagedllm_channel_engine(ctx);

    if (engine == NULL || engine->tok != ctx->tok) {
        ngx_http_finalize_request(r, ngx_http_pagedllm_unavailable(r,
                                  "the engine went away or changed its "
                                  "model, try again"));
        return NULL;
    }

    return engine;
}


/* Tokenized: check the length against the engine that is attached now
   (still the one parsed for), submit, start. */
static void
ngx_http_pagedllm_submit(ngx_http_request_t *r, ngx_http_pagedllm_ctx_t *ctx)
{
    ngx_int_t                    rc;
    ngx_http_pagedllm_error_t    err;
    ngx_http_pagedllm_engine_t  *engine;

    engine = ngx_http_pagedllm_same_engine(r, ctx);
    if (engine == NULL) {
        return;
    }

    if (ngx_http_pagedllm_check_prompts(&ctx->params, engine, &err)
        != NGX_OK)
    {
        ngx_http_finalize_request(r, ngx_http_pagedllm_send_error(r, &err));
        return;
    }

    if (ctx->params.n_parts > 1
        && ngx_http_pagedllm_batch_join(r->pool, &ctx->params) != NGX_OK)
    {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
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

    rc = ngx_http_pagedllm_limit_admit(r, ctx);
    if (rc != NGX_DECLINED) {
        ngx_http_finalize_request(r, rc);
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


/* Whether the tokenizing job failed: then its error is the answer. */
static ngx_uint_t
ngx_http_pagedllm_job_failed(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx)
{
    if (ctx->job.rc == NGX_OK) {
        return 0;
    }

    ngx_http_finalize_request(r, ngx_http_pagedllm_send_error(r,
                                                              &ctx->job.err));
    return 1;
}


/*
 * The next step of batched prompts: part ctx->part tokenized when it came
 * as text (truncate_prompt_tokens as for one prompt), truncated when it
 * came as ids, then with echo its text (as given, or its ids decoded);
 * the parts done, the submission.  The job's results move into the pool
 * at once, so the one job (and its one cleanup) serves every part.
 */
static void
ngx_http_pagedllm_batch_next(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx)
{
    ngx_http_pagedllm_part_t    *part;
    ngx_http_pagedllm_params_t  *p = &ctx->params;

    for ( /* void */ ; ctx->part < p->n_parts; ctx->part++) {
        part = &p->parts[ctx->part];

        if (part->ids == NULL) {
            p->text = part->text;
            p->text_len = part->text_len;
            ngx_http_pagedllm_step(r, ctx, ngx_http_pagedllm_tokenize_work,
                                   ngx_http_pagedllm_batch_tokenized,
                                   p->text_len
                                   >= NGX_HTTP_PAGEDLLM_INLINE_MAX);
            return;
        }

        if (ngx_http_pagedllm_echo_text(p) && part->echo.data == NULL) {
            p->prompt = part->ids;
            p->n_prompt = part->n_ids;
            ngx_http_pagedllm_step(r, ctx, ngx_http_pagedllm_detokenize_work,
                                   ngx_http_pagedllm_batch_decoded,
                                   p->n_prompt * sizeof(int32_t)
                                   >= NGX_HTTP_PAGEDLLM_INLINE_MAX);
            return;
        }
    }

    p->text = NULL;
    p->text_len = 0;
    ngx_http_pagedllm_submit(r, ctx);
}


/* A text part tokenized: its ids, its text as its echo. */
static void
ngx_http_pagedllm_batch_tokenized(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx)
{
    ngx_http_pagedllm_part_t  *part = &ctx->params.parts[ctx->part];

    if (ngx_http_pagedllm_job_failed(r, ctx)) {
        return;
    }

    part->n_ids = ctx->job.n_ids;
    part->ids = (int32_t *) ngx_http_pagedllm_batch_keep(r, ctx,
                                (void **) &ctx->job.ids,
                                part->n_ids * sizeof(int32_t));
    if (part->ids == NULL) {
        return;
    }

    if (ngx_http_pagedllm_echo_text(&ctx->params)) {
        part->echo.data = part->text;
        part->echo.len = part->text_len;
    }

    ngx_http_pagedllm_batch_next(r, ctx);
}


/* An ids part decoded: its echo. */
static void
ngx_http_pagedllm_batch_decoded(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx)
{
    ngx_http_pagedllm_part_t  *part = &ctx->params.parts[ctx->part];

    if (ngx_http_pagedllm_job_failed(r, ctx)) {
        return;
    }

    part->echo.len = ctx->job.text_len;
    part->echo.data = ngx_http_pagedllm_batch_keep(r, ctx,
                                                   (void **) &ctx->job.text,
                                                   part->echo.len + 1);
    if (part->echo.data == NULL) {
        return;
    }

    ngx_http_pagedllm_batch_next(r, ctx);
}


/* The job's malloc()ed *data (len bytes) copied into the request pool
   and freed; NULL, the request finalized, when the pool is out. */
static u_char *
ngx_http_pagedllm_batch_keep(ngx_http_request_t *r,
    ngx_http_pagedllm_ctx_t *ctx, void **data, size_t len)
{
    u_char  *kept;

    kept = ngx_pnalloc(r->pool, len ? len : 1);
    if (kept != NULL && len) {
        ngx_memcpy(kept, *data, len);
    }

    ngx_free(*data);
    *data = NULL;

    if (kept == NULL) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
    }

    return kept;
}


/*
 * The prompt, or each of the batched prompts, and max_tokens within the
 * model's context; batched prompts also within one SUBMIT record together.
 */
static ngx_int_t
ngx_http_pagedllm_check_prompts(ngx_http_pagedllm_params_t *p,
    ngx_http_pagedllm_engine_t *engine, ngx_http_pagedllm_error_t *err)
{
    ngx_uint_t  i, total;

    if (p->n_parts <= 1) {
        return ngx_http_pagedllm_check_length(p, engine, err);
    }

    total = 0;

    for (i = 0; i < p->n_parts; i++) {
        p->n_prompt = p->parts[i].n_ids;

        if (ngx_http_pagedllm_check_length(p, engine, err) != NGX_OK) {
            return NGX_ERROR;
        }

        total += p->parts[i].n_ids;
    }

    p->n_prompt = total;

    if (total > engine->max_prompt) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, "prompt",
                                    "The %ui prompts hold %ui tokens "
                                    "together, more than the %uD one "
                                    "request may carry", p->n_parts, total,
                                    engine->max_prompt);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* Batched prompts end to end as the request's prompt, and n choices for
   each of them. */
static ngx_int_t
ngx_http_pagedllm_batch_join(ngx_pool_t *pool, ngx_http_pagedllm_params_t *p)
{
    int32_t     *all;
    ngx_uint_t   i, at;

    all = ngx_palloc(pool, p->n_prompt * sizeof(int32_t));
    if (all == NULL) {
        return NGX_ERROR;
    }

    for (i = 0, at = 0; i < p->n_parts; i++) {
        ngx_memcpy(all + at, p->parts[i].ids,
                   p->parts[i].n_ids * sizeof(int32_t));
        at += p->parts[i].n_ids;
    }

    p->prompt = all;

    p->n *= p->n_parts;
    ngx_str_null(&p->echo);

    return NGX_OK;
}


/* The SUBMIT's prompt_lens for batched prompts, written at dst unless
   NULL: their bytes (0 for one prompt). */
size_t
ngx_http_pagedllm_prompt_lens(ngx_http_pagedllm_params_t *p, u_char *dst)
{
    uint32_t    len;
    ngx_uint_t  i;

    if (p->n_parts <= 1) {
        return 0;
    }

    for (i = 0; dst != NULL && i < p->n_parts; i++) {
        len = (uint32_t) p->parts[i].n_ids;
        ngx_memcpy(dst + i * sizeof(uint32_t), &len, sizeof(uint32_t));
    }

    return p->n_parts * sizeof(uint32_t);
}


/* Whether echo sends the prompt as text ahead of each choice's: yes,
   unless the prompt comes back as tokens with their logprobs. */
static ngx_uint_t
ngx_http_pagedllm_echo_text(ngx_http_pagedllm_params_t *p)
{
    return p->want_echo && !p->echo_lp;
}


/* Prompt logprobs: the prompt tokens choice ch receives first, its own
   prompt's when the prompts were batched; the first choice of each
   prompt keeps them for the prompt_logprobs list. */
static ngx_int_t
ngx_http_pagedllm_prompt_expected(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch)
{
    ngx_uint_t                      per, n, top;
    ngx_pool_t                     *pool = ctx->request->pool;
    ngx_http_pagedllm_params_t     *p = &ctx->params;
    ngx_http_pagedllm_prompt_lp_t  *plp;

    if (!(p->flags & PL_SUBMIT_PROMPT_LOGPROBS)) {
        return NGX_OK;
    }

    per = p->n / ngx_max(p->n_parts, 1);
    n = p->n_parts > 1 ? p->parts[ch->index / per].n_ids : p->n_prompt;

    ch->prompt_left = n;
    ch->prompt_first = p->echo_lp;

    if (!p->want_prompt_lp || ch->index % per != 0) {
        return NGX_OK;
    }

    top = p->prompt_logprobs;

    plp = ngx_pcalloc(pool, sizeof(ngx_http_pagedllm_prompt_lp_t));
    if (plp == NULL) {
        return NGX_ERROR;
    }

    plp->ids = ngx_palloc(pool, n * sizeof(int32_t));
    plp->lp = ngx_palloc(pool, n * sizeof(float));
    plp->rank = ngx_palloc(pool, n * sizeof(uint32_t));
    plp->top = ngx_palloc(pool, n * (top + 1) * sizeof(pl_top_logprob_t));
    plp->n_top = top;

    if (plp->ids == NULL || plp->lp == NULL || plp->rank == NULL
        || plp->top == NULL)
    {
        return NGX_ERROR;
    }

    ch->plp = plp;

    return NGX_OK;
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
        pl_detok_init(&ctx->choices[i].detok, ctx->tok->tokenizer,
                      !ctx->params.keep_specials);

        if (ngx_http_pagedllm_prompt_expected(ctx, &ctx->choices[i])
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    ctx->n_top = (ctx->params.flags & PL_SUBMIT_LOGPROBS)
                 ? ctx->params.logprobs : 0;

    return NGX_OK;
}


/* The whole body as one piece of memory (it may sit in a temp file). */
u_char *
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

    if (ngx_http_pagedllm_add_header(r, "X-Request-Id", &ctx->id) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_add_timer(&ctx->timer, plcf->timeout);

    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_request_empty_handler;

    return NGX_OK;
}


/* A stream's 200 goes out with its first event, not at submission: until
   the engine has run the request, it may still refuse it (a full queue,
   a wait too long) with a status of its own. */
ngx_int_t
ngx_http_pagedllm_stream_header(ngx_http_request_t *r)
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
