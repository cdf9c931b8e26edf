
/*
 * ngx_http_pagedllm_drain: the completion ring.  The completion doorbell
 * lives in the event loop; its handler drains the whole ring at once,
 * hands each record to its request (looked up by id in an rbtree) through
 * the events the request's ctx carries, and then lets every request it
 * touched write once.  A corrupt ring detaches the engine.
 */


#include "ngx_http_pagedllm_module.h"
#include "ngx_http_pagedllm_channel.h"


static ngx_int_t ngx_http_pagedllm_dispatch(ngx_http_pagedllm_channel_t *ch,
    uint32_t type, uint32_t len);
static void ngx_http_pagedllm_tokens(ngx_http_pagedllm_channel_t *ch,
    uint32_t len);
static ngx_int_t ngx_http_pagedllm_finish(ngx_http_pagedllm_channel_t *ch,
    uint32_t len);
static void ngx_http_pagedllm_error(ngx_http_pagedllm_channel_t *ch,
    uint32_t len);
static ngx_http_pagedllm_ctx_t *ngx_http_pagedllm_lookup(
    ngx_http_pagedllm_channel_t *ch, uint64_t id);


void
ngx_http_pagedllm_bell_handler(ngx_event_t *ev)
{
    ssize_t                       n;
    uint64_t                      v;
    ngx_connection_t             *c = ev->data;
    ngx_http_pagedllm_channel_t  *ch = c->data;

    for ( ;; ) {
        n = read(c->fd, &v, sizeof(uint64_t));

        if (n == (ssize_t) sizeof(uint64_t)) {
            continue;
        }

        if (n == -1 && ngx_errno == NGX_EINTR) {
            continue;
        }

        if (n == -1 && ngx_errno == NGX_EAGAIN) {
            ev->ready = 0;
            break;
        }

        ngx_log_error(NGX_LOG_ALERT, ch->log, ngx_errno,
                      "pagedllm: read() of the completion doorbell failed");
        ngx_http_pagedllm_lost(ch);
        return;
    }

    ngx_http_pagedllm_drain(ch);
}


void
ngx_http_pagedllm_drain(ngx_http_pagedllm_channel_t *ch)
{
    int       rc;
    uint32_t  type, len;

    for ( ;; ) {
        rc = pl_ring_read(&ch->comp, &type, ch->rec, ch->rec_cap, &len);

        if (rc == 0) {
            break;
        }

        if (rc != 1 || ngx_http_pagedllm_dispatch(ch, type, len) != NGX_OK) {
            ngx_log_error(NGX_LOG_ALERT, ch->log, 0,
                          "pagedllm: completion ring from engine at \"%V\" "
                          "is corrupt, detaching", &ch->ec->path);
            ngx_http_pagedllm_lost(ch);
            return;
        }
    }

    ngx_http_pagedllm_flush_dirty(ch);
    ngx_http_pagedllm_flush_aborts(ch);
}


static ngx_int_t
ngx_http_pagedllm_dispatch(ngx_http_pagedllm_channel_t *ch, uint32_t type,
    uint32_t len)
{
    switch (type) {

    case PL_REC_TOKENS:
        if (len < sizeof(pl_rec_tokens_t)) {
            return NGX_ERROR;
        }
        ngx_http_pagedllm_tokens(ch, len);
        return NGX_OK;

    case PL_REC_FINISH:
        if (len != sizeof(pl_rec_finish_t)) {
            return NGX_ERROR;
        }
        return ngx_http_pagedllm_finish(ch, len);

    case PL_REC_ERROR:
        if (len < sizeof(pl_rec_error_t)) {
            return NGX_ERROR;
        }
        ngx_http_pagedllm_error(ch, len);
        return NGX_OK;

    default:
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ch->log, 0,
                       "pagedllm: ignoring engine record of type %uD", type);
        return NGX_OK;
    }
}


static void
ngx_http_pagedllm_tokens(ngx_http_pagedllm_channel_t *ch, uint32_t len)
{
    u_char                   *p;
    uint32_t                  want;
    uint64_t                  need, lp_end;
    pl_rec_tokens_t           rec;
    ngx_http_pagedllm_ctx_t  *ctx;

    ngx_memcpy(&rec, ch->rec, sizeof(pl_rec_tokens_t));

    ctx = ngx_http_pagedllm_lookup(ch, rec.req_id);
    if (ctx == NULL) {
        return;
    }

    need = (uint64_t) rec.n * sizeof(int32_t);

    if (rec.flags & PL_TOKENS_LOGPROBS) {
        need += (uint64_t) rec.n * (sizeof(float)
                                    + rec.n_top * sizeof(pl_top_logprob_t));
    }

    lp_end = need;

    /* prompt tokens: their ranks follow, and the request asked for them */
    if (rec.flags & PL_TOKENS_PROMPT) {
        need += (uint64_t) rec.n * sizeof(uint32_t);
    }

    want = (rec.flags & PL_TOKENS_PROMPT) ? PL_SUBMIT_PROMPT_LOGPROBS
                                          : PL_SUBMIT_LOGPROBS;
    p = ch->rec + sizeof(pl_rec_tokens_t);

    if (need > len - sizeof(pl_rec_tokens_t)
        || rec.n_top > PL_MAX_LOGPROBS
        || ((rec.flags & PL_TOKENS_LOGPROBS) != 0)
           != ((ctx->params.flags & want) != 0)
        || ctx->events->tokens(ctx, rec.index, (int32_t *) p, rec.n,
               (rec.flags & PL_TOKENS_LOGPROBS)
               ? (float *) (p + rec.n * sizeof(int32_t)) : NULL,
               (pl_top_logprob_t *) (p + rec.n * (sizeof(int32_t)
                                                  + sizeof(float))),
               rec.n_top,
               (rec.flags & PL_TOKENS_PROMPT) ? (uint32_t *) (p + lp_end)
                                              : NULL)
           != NGX_OK)
    {
        ngx_log_error(NGX_LOG_ERR, ch->log, 0,
                      "pagedllm: engine sent bad tokens for request %uL",
                      rec.req_id);
        ngx_http_pagedllm_channel_cancel(ctx);
        ctx->finished = 1;
        ctx->finish_reason = PL_FINISH_ERROR;
        ctx->error_status = NGX_HTTP_BAD_GATEWAY;
        ngx_str_set(&ctx->error_message, "the engine sent invalid tokens");
    }

    ngx_http_pagedllm_mark(ch, ctx);
}


/*
 * A FINISH whose request fields cannot be the engine's (cache hits past
 * the prompt, a nonzero reserved field) means the ring is corrupt: the
 * channel is dropped, as for a bad record length.
 */
static ngx_int_t
ngx_http_pagedllm_finish(ngx_http_pagedllm_channel_t *ch, uint32_t len)
{
    pl_rec_finish_t           rec;
    ngx_http_pagedllm_ctx_t  *ctx;

    ngx_memcpy(&rec, ch->rec, sizeof(pl_rec_finish_t));

    if (rec.cached_tokens > rec.prompt_tokens || rec.reserved != 0) {
        return NGX_ERROR;
    }

    ctx = ngx_http_pagedllm_lookup(ch, rec.req_id);
    if (ctx == NULL) {
        return NGX_OK;
    }

    if (rec.reason == PL_FINISH_STOP || rec.reason == PL_FINISH_LENGTH) {
        ctx->cached_tokens = rec.cached_tokens;
        ctx->queue_time_us = rec.queue_time_us;
        ctx->engine_timed = 1;
    }

    if ((rec.reason == PL_FINISH_STOP || rec.reason == PL_FINISH_LENGTH)
        && ctx->events->finish(ctx, rec.index, rec.reason, rec.cum_logprob)
           == NGX_OK)
    {
        /* one choice ended; the request, once all have (or it was cut) */
        if (ctx->finished && ctx->state == NGX_HTTP_PAGEDLLM_RUNNING) {
            ngx_http_pagedllm_untrack(ch, ctx);
            ctx->state = NGX_HTTP_PAGEDLLM_DONE;
        }

        ngx_http_pagedllm_mark(ch, ctx);
        return NGX_OK;
    }

    ngx_http_pagedllm_untrack(ch, ctx);
    ctx->state = NGX_HTTP_PAGEDLLM_DONE;
    ctx->finished = 1;

    switch (rec.reason) {

    default:
        ctx->finish_reason = PL_FINISH_ERROR;

        if (ctx->error_status == 0) {
            ctx->error_status = NGX_HTTP_INTERNAL_SERVER_ERROR;
            ngx_str_set(&ctx->error_message,
                        "the engine failed the request");
        }

        break;
    }

    ngx_http_pagedllm_mark(ch, ctx);

    return NGX_OK;
}


static void
ngx_http_pagedllm_error(ngx_http_pagedllm_channel_t *ch, uint32_t len)
{
    pl_rec_error_t            rec;
    ngx_uint_t                status;
    ngx_http_pagedllm_ctx_t  *ctx;

    ngx_memcpy(&rec, ch->rec, sizeof(pl_rec_error_t));

    ctx = ngx_http_pagedllm_lookup(ch, rec.req_id);
    if (ctx == NULL) {
        return;
    }

    status = (rec.status >= 400 && rec.status <= 599)
             ? rec.status : NGX_HTTP_INTERNAL_SERVER_ERROR;

    ctx->events->error(ctx, status, ch->rec + sizeof(pl_rec_error_t),
                       ngx_min(rec.len, len - sizeof(pl_rec_error_t)));
    ngx_http_pagedllm_mark(ch, ctx);
}


void
ngx_http_pagedllm_mark(ngx_http_pagedllm_channel_t *ch,
    ngx_http_pagedllm_ctx_t *ctx)
{
    if (!ctx->dirty) {
        ctx->dirty = 1;
        ngx_queue_insert_tail(&ch->dirty, &ctx->queue);
    }
}


void
ngx_http_pagedllm_flush_dirty(ngx_http_pagedllm_channel_t *ch)
{
    ngx_queue_t              *q;
    ngx_connection_t         *c;
    ngx_http_pagedllm_ctx_t  *ctx;

    while (!ngx_queue_empty(&ch->dirty)) {
        q = ngx_queue_head(&ch->dirty);
        ngx_queue_remove(q);

        ctx = ngx_queue_data(q, ngx_http_pagedllm_ctx_t, queue);
        ctx->dirty = 0;
        c = ctx->request->connection;

        ctx->events->flush(ctx);
        ngx_http_run_posted_requests(c);
    }
}


static ngx_http_pagedllm_ctx_t *
ngx_http_pagedllm_lookup(ngx_http_pagedllm_channel_t *ch, uint64_t id)
{
    ngx_rbtree_key_t    key = (ngx_rbtree_key_t) id;
    ngx_rbtree_node_t  *node, *sentinel;

    node = ch->tree.root;
    sentinel = ch->tree.sentinel;

    while (node != sentinel) {

        if (key == node->key) {
            return (ngx_http_pagedllm_ctx_t *) node;
        }

        node = (key < node->key) ? node->left : node->right;
    }

    return NULL;
}
