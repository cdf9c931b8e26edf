
/*
 * ngx_http_pagedllm_channel: one worker's connections to its engines, one
 * channel per engine of the configuration (every worker attaches to every
 * engine of every group), as the rest of the module calls them: the
 * engine a request is parsed with and the one it is submitted to (chosen
 * by ngx_http_pagedllm_route.c), requests parked until an attach succeeds
 * or fails, SUBMIT and ABORT records written to the submission ring of
 * the request's channel and its doorbell rung, each engine's stats read.
 * An ABORT that finds the submission ring full waits in a small queue of
 * its channel and is retried.  Attaching is in
 * ngx_http_pagedllm_attach.c, the completion rings in
 * ngx_http_pagedllm_drain.c.
 */


#include "ngx_http_pagedllm_module.h"
#include "ngx_http_pagedllm_channel.h"


#define NGX_HTTP_PAGEDLLM_ABORT_RETRY       50


static void ngx_http_pagedllm_channel_open(ngx_cycle_t *cycle,
    ngx_http_pagedllm_main_conf_t *pmcf, ngx_http_pagedllm_channel_t *ch,
    ngx_http_pagedllm_engine_conf_t *ec);
static ngx_int_t ngx_http_pagedllm_park_on(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_channel_t *ch);
static void ngx_http_pagedllm_abort(ngx_http_pagedllm_channel_t *ch,
    uint64_t id);
static void ngx_http_pagedllm_ring_bell(ngx_http_pagedllm_channel_t *ch);


static ngx_http_pagedllm_channel_t  *ngx_http_pagedllm_channels;
static ngx_uint_t                    ngx_http_pagedllm_nchannels;


ngx_int_t
ngx_http_pagedllm_channel_init(ngx_cycle_t *cycle,
    ngx_http_pagedllm_main_conf_t *pmcf)
{
    ngx_uint_t                        i, n;
    ngx_http_pagedllm_engine_conf_t  *ec;

    ec = pmcf->engines.elts;
    n = pmcf->engines.nelts;

    ngx_http_pagedllm_channels = ngx_pcalloc(cycle->pool,
                                     n * sizeof(ngx_http_pagedllm_channel_t));
    if (ngx_http_pagedllm_channels == NULL) {
        return NGX_ERROR;
    }

    ngx_http_pagedllm_nchannels = n;

    for (i = 0; i < n; i++) {
        ngx_http_pagedllm_channel_open(cycle, pmcf,
                                       &ngx_http_pagedllm_channels[i], &ec[i]);
    }

    return NGX_OK;
}


static void
ngx_http_pagedllm_channel_open(ngx_cycle_t *cycle,
    ngx_http_pagedllm_main_conf_t *pmcf, ngx_http_pagedllm_channel_t *ch,
    ngx_http_pagedllm_engine_conf_t *ec)
{
    ch->conf = pmcf;
    ch->ec = ec;
    ch->log = cycle->log;
    ch->sub_bell = NGX_INVALID_FILE;
    ch->comp_bell = NGX_INVALID_FILE;

    ngx_rbtree_init(&ch->tree, &ch->sentinel, ngx_rbtree_insert_value);
    ngx_queue_init(&ch->parked);
    ngx_queue_init(&ch->dirty);

    ch->timer.handler = ngx_http_pagedllm_timer_handler;
    ch->timer.data = ch;
    ch->timer.log = cycle->log;
    ch->timer.cancelable = 1;

    if (ngx_http_pagedllm_connect(ch) != NGX_OK) {
        ngx_add_timer(&ch->timer, pmcf->reattach_interval);
    }
}


void
ngx_http_pagedllm_channel_exit(ngx_cycle_t *cycle)
{
    ngx_uint_t                    i;
    ngx_http_pagedllm_channel_t  *ch;

    for (i = 0; i < ngx_http_pagedllm_nchannels; i++) {
        ch = &ngx_http_pagedllm_channels[i];

        if (ch->timer.timer_set) {
            ngx_del_timer(&ch->timer);
        }

        ngx_http_pagedllm_detach(ch);

        ngx_http_pagedllm_tok_release(ch->engine.tok);
        ch->engine.tok = NULL;

        if (ch->aborts) {
            ngx_free(ch->aborts);
            ch->aborts = NULL;
        }
    }

    ngx_http_pagedllm_nchannels = 0;
}


ngx_http_pagedllm_channel_t *
ngx_http_pagedllm_channel_get(ngx_uint_t i)
{
    return i < ngx_http_pagedllm_nchannels ? &ngx_http_pagedllm_channels[i]
                                           : NULL;
}


ngx_uint_t
ngx_http_pagedllm_channel_count(void)
{
    return ngx_http_pagedllm_nchannels;
}


/*
 * The engine that serves ctx at its step: once submitted, the one it was
 * submitted to; before its tokenizer is held, an attached engine serving
 * the model the body names (any of the location's, before the body is
 * decoded or when it names none), to parse and tokenize with; after,
 * the one the location's pagedllm_route picks among the attached engines
 * serving that model with that tokenizer, which a submit then uses.
 * NULL: none is attached.
 */
ngx_http_pagedllm_engine_t *
ngx_http_pagedllm_channel_engine(ngx_http_pagedllm_ctx_t *ctx)
{
    json_t                       *v;
    ngx_str_t                     model, *m;
    ngx_http_pagedllm_channel_t  *ch;

    if (ctx->channel) {
        ch = ctx->channel;
        return ch->state == NGX_HTTP_PAGEDLLM_ATTACHED ? &ch->engine : NULL;
    }

    if (ctx->tok) {
        ch = ngx_http_pagedllm_route_pick(ctx);
        ctx->routed = ch;
        return ch ? &ch->engine : NULL;
    }

    m = NULL;
    v = ctx->decode.root ? json_object_get(ctx->decode.root, "model") : NULL;

    if (json_is_string(v)) {
        model.data = (u_char *) json_string_value(v);
        model.len = json_string_length(v);
        m = &model;
    }

    ch = ngx_http_pagedllm_route_model(ctx->request, m);

    return ch ? &ch->engine : NULL;
}


/* Parks ctx on an engine of its location that is attaching (one that is
   detached is tried at once): NGX_DECLINED when none is. */
ngx_int_t
ngx_http_pagedllm_channel_park(ngx_http_pagedllm_ctx_t *ctx)
{
    ngx_uint_t                     i, n;
    ngx_http_pagedllm_group_t     *group;
    ngx_http_pagedllm_member_t    *member;
    ngx_http_pagedllm_loc_conf_t  *plcf;

    plcf = ngx_http_get_module_loc_conf(ctx->request,
                                        ngx_http_pagedllm_module);
    group = plcf->group;

    if (group == NULL) {
        for (i = 0; i < ngx_http_pagedllm_nchannels; i++) {
            if (ngx_http_pagedllm_park_on(ctx, &ngx_http_pagedllm_channels[i])
                == NGX_OK)
            {
                return NGX_OK;
            }
        }

        return NGX_DECLINED;
    }

    member = group->members.elts;
    n = group->members.nelts;

    for (i = 0; i < n; i++) {
        if (ngx_http_pagedllm_park_on(ctx,
                ngx_http_pagedllm_channel_get(member[i].engine))
            == NGX_OK)
        {
            return NGX_OK;
        }
    }

    return NGX_DECLINED;
}


static ngx_int_t
ngx_http_pagedllm_park_on(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_channel_t *ch)
{
    if (ch == NULL) {
        return NGX_DECLINED;
    }

    if (ch->state == NGX_HTTP_PAGEDLLM_DETACHED
        && ngx_http_pagedllm_connect(ch) != NGX_OK)
    {
        return NGX_DECLINED;
    }

    if (ch->state != NGX_HTTP_PAGEDLLM_CONNECTING
        && ch->state != NGX_HTTP_PAGEDLLM_LOADING)
    {
        return NGX_DECLINED;
    }

    ctx->state = NGX_HTTP_PAGEDLLM_PARKED;
    ngx_queue_insert_tail(&ch->parked, &ctx->queue);

    return NGX_OK;
}


ngx_int_t
ngx_http_pagedllm_channel_submit(ngx_http_pagedllm_ctx_t *ctx)
{
    u_char                       *body, *b;
    size_t                        size;
    pl_rec_submit_t               rec;
    ngx_http_pagedllm_channel_t  *ch = ctx->routed;
    ngx_http_pagedllm_params_t   *p = &ctx->params;

    if (ch == NULL
        || ch->state != NGX_HTTP_PAGEDLLM_ATTACHED
        || p->n_prompt > ch->engine.max_prompt
        || p->n_bias > PL_MAX_LOGIT_BIAS || p->n_stop_ids > PL_MAX_STOP_IDS
        || p->grammar_len > PL_MAX_GRAMMAR)
    {
        return NGX_ERROR;
    }

    size = p->n_prompt * sizeof(int32_t) + p->n_bias * sizeof(pl_bias_pair_t)
           + p->n_stop_ids * sizeof(int32_t) + p->grammar_len
           + ngx_http_pagedllm_prompt_lens(p, NULL);

    body = ngx_palloc(ctx->request->pool, size);
    if (body == NULL) {
        return NGX_ERROR;
    }

    /* bias, stop_ids and grammar are NULL when there are none, which
       memcpy() may not be given even for 0 bytes */

    b = ngx_cpymem(body, p->prompt, p->n_prompt * sizeof(int32_t));
    b += ngx_http_pagedllm_prompt_lens(p, b);

    if (p->n_bias) {
        b = ngx_cpymem(b, p->bias, p->n_bias * sizeof(pl_bias_pair_t));
    }

    if (p->n_stop_ids) {
        b = ngx_cpymem(b, p->stop_ids, p->n_stop_ids * sizeof(int32_t));
    }

    if (p->grammar_len) {
        ngx_memcpy(b, p->grammar, p->grammar_len);
    }

    ngx_memzero(&rec, sizeof(pl_rec_submit_t));
    rec.req_id = ch->next_id + 1;
    rec.max_tokens = p->max_tokens;
    rec.flags = p->flags;
    rec.temperature = p->temperature;
    rec.top_p = p->top_p;
    rec.top_k = p->top_k;
    rec.n_prompt = (uint32_t) p->n_prompt;
    rec.seed = p->seed;
    rec.min_p = p->min_p;
    rec.repetition_penalty = p->repetition_penalty;
    rec.presence_penalty = p->presence_penalty;
    rec.frequency_penalty = p->frequency_penalty;
    rec.min_tokens = p->min_tokens;
    rec.logprobs = p->logprobs;
    rec.n_logit_bias = (uint32_t) p->n_bias;
    rec.n_stop_ids = (uint32_t) p->n_stop_ids;
    rec.n = p->n / (p->n_parts > 1 ? p->n_parts : 1);
    rec.n_prompts = (uint32_t) p->n_parts;
    rec.prompt_logprobs = p->prompt_logprobs;
    rec.best_of = p->best_of;
    rec.length_penalty = p->length_penalty;
    rec.early_stopping = p->early_stopping;
    rec.n_grammar = (uint32_t) p->grammar_len;

    if (pl_ring_write(&ch->sub, PL_REC_SUBMIT, &rec, sizeof(rec), body,
                      (uint32_t) size)
        != 0)
    {
        return NGX_AGAIN;
    }

    ch->next_id++;

    ctx->node.key = (ngx_rbtree_key_t) rec.req_id;
    ngx_rbtree_insert(&ch->tree, &ctx->node);
    ch->inflight++;
    ch->recent[ch->nsubmits++ % NGX_HTTP_PAGEDLLM_RECENT] =
                                                ngx_http_pagedllm_now_us();
    ctx->state = NGX_HTTP_PAGEDLLM_RUNNING;
    ctx->generation = ch->generation;
    ctx->channel = ch;

    ngx_http_pagedllm_route_commit(ctx);
    ngx_http_pagedllm_ring_bell(ch);

    return NGX_OK;
}


void
ngx_http_pagedllm_channel_cancel(ngx_http_pagedllm_ctx_t *ctx)
{
    uint64_t                      id;
    ngx_http_pagedllm_channel_t  *ch = ctx->channel;

    switch (ctx->state) {

    case NGX_HTTP_PAGEDLLM_PARKED:
        ngx_queue_remove(&ctx->queue);
        break;

    case NGX_HTTP_PAGEDLLM_RUNNING:
        id = (uint64_t) ctx->node.key;
        ngx_http_pagedllm_untrack(ch, ctx);

        if (ctx->dirty) {
            ngx_queue_remove(&ctx->queue);
            ctx->dirty = 0;
        }

        if (ch->state == NGX_HTTP_PAGEDLLM_ATTACHED
            && ctx->generation == ch->generation)
        {
            ngx_http_pagedllm_abort(ch, id);
        }

        break;

    default:
        if (ctx->dirty) {
            ngx_queue_remove(&ctx->queue);
            ctx->dirty = 0;
        }
        break;
    }

    ctx->state = NGX_HTTP_PAGEDLLM_DONE;
}


void
ngx_http_pagedllm_untrack(ngx_http_pagedllm_channel_t *ch,
    ngx_http_pagedllm_ctx_t *ctx)
{
    ngx_rbtree_delete(&ch->tree, &ctx->node);
    ch->inflight--;
}


/* Engine i's configuration, and while it is attached (NGX_OK) what it
   serves and its stats; NGX_DECLINED: detached; NGX_ERROR: its stats
   could not be read. */
ngx_int_t
ngx_http_pagedllm_channel_stats(ngx_uint_t i,
    ngx_http_pagedllm_engine_conf_t **ec, ngx_http_pagedllm_engine_t **engine,
    pl_stats_t *stats)
{
    ngx_http_pagedllm_channel_t  *ch;

    ch = ngx_http_pagedllm_channel_get(i);
    if (ch == NULL) {
        return NGX_ERROR;
    }

    *ec = ch->ec;
    *engine = NULL;

    if (ch->state != NGX_HTTP_PAGEDLLM_ATTACHED) {
        return NGX_DECLINED;
    }

    if (pl_stats_read(ch->hdr, stats) != 0) {
        return NGX_ERROR;
    }

    stats->device[sizeof(stats->device) - 1] = '\0';
    *engine = &ch->engine;

    return NGX_OK;
}


/*
 * The tokenizer a channel holds for ch's engine, to share it: one loaded
 * from the same file, or from a file of the same content (hash) for an
 * engine serving the same model name (a model copied to each GPU's
 * folder).  Engines sharing a tokenizer are routed to as one model.
 */
ngx_http_pagedllm_tok_t *
ngx_http_pagedllm_shared_tok(ngx_http_pagedllm_channel_t *ch,
    const char *path, uint64_t hash)
{
    ngx_uint_t                    i;
    ngx_http_pagedllm_tok_t      *tok;
    ngx_http_pagedllm_channel_t  *other;

    for (i = 0; i < ngx_http_pagedllm_nchannels; i++) {
        other = &ngx_http_pagedllm_channels[i];
        tok = other->engine.tok;

        if (tok == NULL || tok->hash != hash) {
            continue;
        }

        if (ngx_strncmp(tok->path, path, PL_PATH_LEN) == 0
            || (other->engine.model.len == ch->engine.model.len
                && ngx_strncmp(other->engine.model.data,
                               ch->engine.model.data,
                               ch->engine.model.len) == 0))
        {
            return tok;
        }
    }

    return NULL;
}


ngx_int_t
ngx_http_pagedllm_channel_block_map(ngx_pool_t *pool, pl_bmap_hdr_t **map)
{
    size_t                        size;
    uint64_t                      off, blocks;
    ngx_uint_t                    i;
    pl_bmap_hdr_t                *m;
    ngx_http_pagedllm_channel_t  *ch;

    /* the first engine attached: the block map shows one device */

    for (i = 0; i < ngx_http_pagedllm_nchannels; i++) {
        if (ngx_http_pagedllm_channels[i].state
            == NGX_HTTP_PAGEDLLM_ATTACHED)
        {
            break;
        }
    }

    if (i == ngx_http_pagedllm_nchannels) {
        return NGX_DECLINED;
    }

    ch = &ngx_http_pagedllm_channels[i];

    off = ch->hdr->map_offset;
    size = (size_t) ch->hdr->map_size;

    if (size < sizeof(pl_bmap_hdr_t) || off % 64 != 0
        || off > ch->region_size || ch->region_size - off < size)
    {
        return NGX_DECLINED;
    }

    m = ngx_pmemalign(pool, size, 64);
    if (m == NULL) {
        return NGX_ERROR;
    }

    if (pl_bmap_read((pl_bmap_hdr_t *) (ch->region + off), size, m) != 0) {
        return NGX_ERROR;
    }

    blocks = (uint64_t) m->num_blocks + m->num_host_blocks;

    if (m->n_owners > PL_BMAP_MAX_OWNERS
        || blocks > (size - sizeof(pl_bmap_hdr_t)) / sizeof(pl_bmap_block_t))
    {
        return NGX_ERROR;
    }

    *map = m;

    return NGX_OK;
}


static void
ngx_http_pagedllm_abort(ngx_http_pagedllm_channel_t *ch, uint64_t id)
{
    uint64_t        *a;
    pl_rec_abort_t   rec;

    if (ch->naborts == 0) {
        rec.req_id = id;

        if (pl_ring_write(&ch->sub, PL_REC_ABORT, &rec, sizeof(rec), NULL, 0)
            == 0)
        {
            ngx_http_pagedllm_ring_bell(ch);
            return;
        }
    }

    if (ch->naborts == ch->aborts_cap) {
        a = ngx_alloc((ch->aborts_cap * 2 + 16) * sizeof(uint64_t), ch->log);
        if (a == NULL) {
            return;
        }

        if (ch->aborts) {
            ngx_memcpy(a, ch->aborts, ch->naborts * sizeof(uint64_t));
            ngx_free(ch->aborts);
        }

        ch->aborts = a;
        ch->aborts_cap = ch->aborts_cap * 2 + 16;
    }

    ch->aborts[ch->naborts++] = id;

    if (!ch->timer.timer_set) {
        ngx_add_timer(&ch->timer, NGX_HTTP_PAGEDLLM_ABORT_RETRY);
    }
}


void
ngx_http_pagedllm_flush_aborts(ngx_http_pagedllm_channel_t *ch)
{
    ngx_uint_t      i;
    pl_rec_abort_t  rec;

    if (ch->naborts == 0 || ch->state != NGX_HTTP_PAGEDLLM_ATTACHED) {
        return;
    }

    for (i = 0; i < ch->naborts; i++) {
        rec.req_id = ch->aborts[i];

        if (pl_ring_write(&ch->sub, PL_REC_ABORT, &rec, sizeof(rec), NULL, 0)
            != 0)
        {
            break;
        }
    }

    if (i > 0) {
        ngx_memmove(ch->aborts, ch->aborts + i,
                    (ch->naborts - i) * sizeof(uint64_t));
        ch->naborts -= i;
        ngx_http_pagedllm_ring_bell(ch);
    }

    if (ch->naborts && !ch->timer.timer_set) {
        ngx_add_timer(&ch->timer, NGX_HTTP_PAGEDLLM_ABORT_RETRY);
    }
}


static void
ngx_http_pagedllm_ring_bell(ngx_http_pagedllm_channel_t *ch)
{
    uint64_t  one = 1;

    if (write(ch->sub_bell, &one, sizeof(uint64_t)) == -1
        && ngx_errno != NGX_EAGAIN)
    {
        ngx_log_error(NGX_LOG_ALERT, ch->log, ngx_errno,
                      "pagedllm: write() of the submission doorbell failed");
    }
}
