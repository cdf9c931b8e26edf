
/*
 * ngx_http_pagedllm_choice: what the channel hands a running request, into
 * its choices.  A request has n choices (parallel sampling), each with its
 * own detokenizer, text, stop-string matching and finish_reason.  Stop
 * strings are matched here on the decoded text, across token boundaries:
 * a match cuts the choice's text where the stop string starts and ends
 * that choice (the generation is aborted once no choice is left).  With
 * prompt logprobs a choice's first tokens are its prompt's, with their
 * logprobs: kept for vLLM's prompt_logprobs list, and with echo and
 * logprobs its first pieces.
 */


#include "ngx_http_pagedllm_module.h"
#include "ngx_http_pagedllm_handler.h"
#include "ngx_http_pagedllm_tools.h"


#define NGX_HTTP_PAGEDLLM_DETOK_MAX    256


static ngx_int_t ngx_http_pagedllm_on_prompt(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, const int32_t *ids, ngx_uint_t n,
    const float *lp, const pl_top_logprob_t *top, ngx_uint_t n_top,
    const uint32_t *rank);
static long ngx_http_pagedllm_piece_add(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, int32_t id, const float *lp,
    const pl_top_logprob_t *top);
static void ngx_http_pagedllm_choice_end(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch);
static void ngx_http_pagedllm_batch_cached(ngx_http_pagedllm_ctx_t *ctx,
    ngx_uint_t index);
static ngx_int_t ngx_http_pagedllm_pieces_reserve(
    ngx_http_pagedllm_ctx_t *ctx, ngx_http_pagedllm_choice_t *ch,
    ngx_uint_t n);
static ngx_uint_t ngx_http_pagedllm_stop_check(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, size_t len);
static ngx_int_t ngx_http_pagedllm_text_reserve(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, size_t more);
static void ngx_http_pagedllm_finish_text(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch);


ngx_int_t
ngx_http_pagedllm_on_tokens(ngx_http_pagedllm_ctx_t *ctx, ngx_uint_t index,
    const int32_t *ids, ngx_uint_t n, const float *lp,
    const pl_top_logprob_t *top, ngx_uint_t n_top, const uint32_t *rank)
{
    long                          len;
    ngx_uint_t                    i;
    ngx_http_pagedllm_choice_t   *ch;

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
        ctx->ttft_us = ngx_http_pagedllm_now_us() - ctx->start_us;
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                       "pagedllm: request %uL first token",
                       (uint64_t) ctx->node.key);
    }

    if (ch->prompt_left > 0) {
        return ngx_http_pagedllm_on_prompt(ctx, ch, ids, n, lp, top, n_top,
                                           rank);
    }

    if (rank != NULL || (lp && n_top != ctx->n_top)
        || ngx_http_pagedllm_pieces_reserve(ctx, ch, n) != NGX_OK)
    {
        return NGX_ERROR;
    }

    for (i = 0; i < n; i++) {
        len = ngx_http_pagedllm_piece_add(ctx, ch, ids[i],
                                          lp ? &lp[i] : NULL,
                                          top + i * n_top);
        if (len < 0) {
            return NGX_ERROR;
        }

        ch->completion_tokens++;

        if (ctx->params.n_stop && ngx_http_pagedllm_stop_check(ctx, ch, len))
        {
            return NGX_OK;
        }
    }

    return NGX_OK;
}


/*
 * Prompt tokens with their logprobs, each of n_top (the request's
 * prompt_logprobs) best entries and a rank: kept for the prompt_logprobs
 * list, and with echo and logprobs made the choice's first pieces (with
 * the first logprobs entries of each), neither counted as completion
 * tokens nor searched for stop strings.
 */
static ngx_int_t
ngx_http_pagedllm_on_prompt(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, const int32_t *ids, ngx_uint_t n,
    const float *lp, const pl_top_logprob_t *top, ngx_uint_t n_top,
    const uint32_t *rank)
{
    ngx_uint_t                      i;
    ngx_http_pagedllm_prompt_lp_t  *plp = ch->plp;

    if (lp == NULL || rank == NULL || n > ch->prompt_left
        || n_top != ctx->params.prompt_logprobs)
    {
        return NGX_ERROR;           /* or a record across the prompt's end */
    }

    if (plp) {
        ngx_memcpy(plp->ids + plp->n, ids, n * sizeof(int32_t));
        ngx_memcpy(plp->lp + plp->n, lp, n * sizeof(float));
        ngx_memcpy(plp->rank + plp->n, rank, n * sizeof(uint32_t));
        ngx_memcpy(plp->top + plp->n * n_top, top,
                   n * n_top * sizeof(pl_top_logprob_t));
        plp->n += n;
    }

    ch->prompt_left -= n;

    if (!ctx->params.echo_lp) {
        return NGX_OK;
    }

    if (ngx_http_pagedllm_pieces_reserve(ctx, ch, n) != NGX_OK) {
        return NGX_ERROR;
    }

    for (i = 0; i < n; i++) {
        if (ngx_http_pagedllm_piece_add(ctx, ch, ids[i], &lp[i],
                                        top + i * n_top)
            < 0)
        {
            return NGX_ERROR;
        }

        ch->prompt_pieces++;
    }

    return NGX_OK;
}


/*
 * Token id decoded onto ch's text as its next piece, with its logprob and
 * the first n_top (the request's logprobs) of its top entries when lp is
 * not NULL; the bytes it added, or -1 for an id outside the vocabulary
 * or no memory.
 */
static long
ngx_http_pagedllm_piece_add(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, int32_t id, const float *lp,
    const pl_top_logprob_t *top)
{
    long                         len;
    ngx_http_pagedllm_engine_t  *engine;

    engine = ngx_http_pagedllm_channel_engine(ctx);

    if (id < 0 || (uint32_t) id >= engine->vocab_size
        || ngx_http_pagedllm_text_reserve(ctx, ch,
                                          NGX_HTTP_PAGEDLLM_DETOK_MAX)
           != NGX_OK)
    {
        return -1;
    }

    len = pl_detok_push(&ch->detok, id, (char *) ch->text + ch->text_len,
                        NGX_HTTP_PAGEDLLM_DETOK_MAX);
    if (len < 0) {
        return -1;
    }

    ch->text_len += len;

    if (lp) {
        ch->piece_lp[ch->npieces] = *lp;
        ngx_memcpy(ch->piece_top + ch->npieces * ctx->n_top, top,
                   ctx->n_top * sizeof(pl_top_logprob_t));
    }

    ch->piece_end[ch->npieces++] = (uint32_t) ch->text_len;

    return len;
}


/*
 * The engine ended choice index normally (STOP or LENGTH).  A choice
 * already cut at a stop string keeps that ending.  NGX_ERROR when the
 * index names no choice.
 */
ngx_int_t
ngx_http_pagedllm_on_finish(ngx_http_pagedllm_ctx_t *ctx, ngx_uint_t index,
    uint32_t reason, double cum_logprob)
{
    ngx_http_pagedllm_choice_t  *ch;

    if (index >= ctx->params.n) {
        return NGX_ERROR;
    }

    ch = &ctx->choices[index];

    if (ctx->params.n_parts > 1) {
        ngx_http_pagedllm_batch_cached(ctx, index);
    }

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

    ngx_http_pagedllm_tools_end(ctx, ch);
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


/*
 * Batched prompts: the cached_tokens of a FINISH are its prompt's, so the
 * request's are the sum over the prompts, each counted once.
 */
static void
ngx_http_pagedllm_batch_cached(ngx_http_pagedllm_ctx_t *ctx, ngx_uint_t index)
{
    ngx_uint_t                   i, sum;
    ngx_http_pagedllm_params_t  *p = &ctx->params;

    p->parts[index / (p->n / p->n_parts)].cached_tokens = ctx->cached_tokens;

    sum = 0;

    for (i = 0; i < p->n_parts; i++) {
        sum += p->parts[i].cached_tokens;
    }

    ctx->cached_tokens = sum;
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
 * starts (where it ends, with include_stop_str_in_output), the pieces
 * after the cut are dropped, and the choice ends with
 * "stop".
 */
static ngx_uint_t
ngx_http_pagedllm_stop_check(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, size_t len)
{
    u_char      *m;
    size_t       from, cut, keep, floor;
    ngx_str_t   *st;
    ngx_uint_t   i;

    cut = ch->text_len + 1;
    keep = 0;

    /* a stop string is looked for in the completion, not the prompt */
    floor = ch->prompt_pieces ? ch->piece_end[ch->prompt_pieces - 1] : 0;

    for (i = 0; i < ctx->params.n_stop; i++) {
        st = &ctx->params.stop[i];

        from = ch->text_len - len;
        from = from >= st->len - 1 ? from - (st->len - 1) : 0;
        from = ngx_max(from, floor);

        m = memmem(ch->text + from, ch->text_len - from, st->data,
                   st->len);
        if (m && (size_t) (m - ch->text) < cut) {
            cut = m - ch->text;
            keep = ctx->params.keep_stop ? st->len : 0;
        }
    }

    if (cut > ch->text_len) {
        return 0;
    }

    cut += keep;

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


void
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
