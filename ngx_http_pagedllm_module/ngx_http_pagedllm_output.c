
/*
 * ngx_http_pagedllm_output: a running request's output, once per drain of
 * the completion ring: SSE events, each carrying its choice's index, or
 * one JSON body once every choice has ended.  While streaming, the tail
 * of a choice's text that might still become a stop string is held back;
 * output buffers are reused once sent, and a client that lets too much
 * pile up unsent, in nginx's buffers and the kernel's send queue, ends
 * its generation.  The engine's silence for
 * pagedllm_timeout fails the request.
 */


#include "ngx_http_pagedllm_module.h"
#include "ngx_http_pagedllm_handler.h"
#include "ngx_http_pagedllm_tools.h"

#if (NGX_LINUX)
#include <linux/sockios.h>
#endif


#define NGX_HTTP_PAGEDLLM_OUT_MIN      4096


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
static void ngx_http_pagedllm_after_write(ngx_http_pagedllm_ctx_t *ctx,
    ngx_int_t rc);
static size_t ngx_http_pagedllm_unsent(ngx_http_pagedllm_ctx_t *ctx);
static size_t ngx_http_pagedllm_kernel_unsent(ngx_http_request_t *r);
static ngx_int_t ngx_http_pagedllm_write_timer(ngx_http_request_t *r);
static void ngx_http_pagedllm_flush_whole(ngx_http_pagedllm_ctx_t *ctx);


/* Called once per drain for every request the drain touched. */
void
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

        ngx_http_pagedllm_limit_finish(ctx);

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


static void
ngx_http_pagedllm_flush_stream(ngx_http_pagedllm_ctx_t *ctx)
{
    size_t                       size, calls;
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
        calls = ngx_http_pagedllm_tools_sse_prepare(ctx, ch);
        lpj[i] = NULL;
        any |= emit[i] || calls || (ch->finished && !ch->final_sent);

        if ((ctx->params.flags & PL_SUBMIT_LOGPROBS) && emit[i]
            && ngx_http_pagedllm_piece_logprobs(ctx, ch, emit[i], &lpj[i])
               != NGX_OK)
        {
            ngx_http_finalize_request(r, NGX_ERROR);
            return;
        }

        size += calls + ngx_http_pagedllm_stream_size(ctx, ch, emit[i],
                                                      lpj[i]);
    }

    if (!any) {
        return;
    }

    if (!r->header_sent) {
        if (ctx->finished && ctx->finish_reason == PL_FINISH_ERROR) {
            ngx_http_pagedllm_flush_whole(ctx);
            return;
        }

        rc = ngx_http_pagedllm_stream_header(r);

        if (rc == NGX_ERROR || rc > NGX_OK) {
            ngx_http_finalize_request(r, rc);
            return;
        }

        r->write_event_handler = ngx_http_pagedllm_write_handler;
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

    safe = ngx_http_pagedllm_tools_safe(ctx, ch, ch->text_len - hold);

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
    ch->prompt_pieces -= ngx_min(n, ch->prompt_pieces);
    ch->prompt_first = ch->prompt_first && n == 0;
}


static size_t
ngx_http_pagedllm_stream_size(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, ngx_uint_t emit, ngx_str_t *lpj)
{
    size_t      size;
    ngx_str_t  *echo;
    ngx_uint_t  i;

    size = (emit + 2) * ngx_http_pagedllm_sse_bound(ctx, 0)
           + ngx_http_pagedllm_sse_bound(ctx, ch->text_len);

    echo = ngx_http_pagedllm_choice_echo(ctx, ch->index);

    if (echo->len && !ch->echo_sent) {
        size += ngx_http_pagedllm_sse_bound(ctx, echo->len);
    }

    for (i = 0; lpj && i < emit; i++) {
        size += lpj[i].len;
    }

    return size;
}


/* ch's events: its role first (chat), its emittable pieces, its tool
   calls, and once it has ended normally its finish_reason (on the last
   piece, or alone). */
static u_char *
ngx_http_pagedllm_stream_events(u_char *p, ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, ngx_uint_t emit, ngx_str_t *lpj)
{
    uint32_t    reason, start, end;
    ngx_str_t  *echo;
    ngx_uint_t  i, final, calls;

    final = ch->finished && !ch->final_sent
            && ctx->finish_reason != PL_FINISH_ERROR;
    calls = final
            && ch->finish_reason == NGX_HTTP_PAGEDLLM_FINISH_TOOL_CALLS;
    start = 0;

    if (ctx->chat && !ch->role_sent && (emit || final)) {
        p = ngx_http_pagedllm_sse_role(p, ctx, ch->index);
        ch->role_sent = 1;
    }

    echo = ngx_http_pagedllm_choice_echo(ctx, ch->index);

    if (echo->len && !ch->echo_sent && (emit || final)) {
        p = ngx_http_pagedllm_sse_text(p, ctx, ch->index, echo->data,
                                       echo->len, NULL, 0);
        ch->echo_sent = 1;
    }

    for (i = 0; i < emit; i++) {
        end = ch->piece_end[i];
        reason = (i == ch->npieces - 1 && final && !calls)
                 ? ch->finish_reason : 0;

        p = ngx_http_pagedllm_sse_text(p, ctx, ch->index, ch->text + start,
                                       end - start, lpj ? &lpj[i] : NULL,
                                       reason);
        start = end;
    }

    p = ngx_http_pagedllm_tools_sse(p, ctx, ch);

    if (final && (emit == 0 || calls)) {
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
                      "bytes unsent (nginx and kernel), aborting the "
                      "generation",
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

    return size + ngx_http_pagedllm_kernel_unsent(ctx->request);
}


/*
 * What the kernel holds in the connection's send queue and has not sent
 * yet (SIOCOUTQNSD): for a client that never reads, up to the socket's
 * send buffer, 4 MB with Linux's default tcp_wmem, parked on top of
 * nginx's buffers.  Bytes sent and not yet acknowledged are left out: a
 * reading client on a distant link has a round trip's worth of them in
 * flight.  Counted on HTTP/1.x over TCP only, where the queue holds this
 * response alone (TLS adds its record overhead to it).  An HTTP/2 or
 * HTTP/3 connection shares its socket among all its streams; there a
 * stream's share of the queue is bounded by the flow-control window the
 * client gives it, and only nginx's buffers count.
 */
static size_t
ngx_http_pagedllm_kernel_unsent(ngx_http_request_t *r)
{
#if (NGX_LINUX && defined SIOCOUTQNSD)
    int                n;
    ngx_connection_t  *c;

    c = r->connection;

    if (r->http_version >= NGX_HTTP_VERSION_20
        || c->fd == (ngx_socket_t) -1
        || (c->sockaddr->sa_family != AF_INET
            && c->sockaddr->sa_family != AF_INET6))
    {
        return 0;
    }

    if (ioctl(c->fd, SIOCOUTQNSD, &n) == -1) {
        ngx_log_error(NGX_LOG_ALERT, c->log, ngx_socket_errno,
                      "ioctl(SIOCOUTQNSD) failed");
        return 0;
    }

    return n > 0 ? (size_t) n : 0;
#else
    return 0;
#endif
}


void
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
void
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

    if (ctx->error_status == NGX_HTTP_SERVICE_UNAVAILABLE
        || ctx->error_status == NGX_HTTP_TOO_MANY_REQUESTS)
    {
        err.code = ctx->error_status == NGX_HTTP_SERVICE_UNAVAILABLE
                   ? "engine_unavailable" : "too_many_requests";
        ngx_http_finalize_request(r, ngx_http_pagedllm_send_retry(r, &err));
        return;
    }

    ngx_http_finalize_request(r, ngx_http_pagedllm_send_error(r, &err));
}
