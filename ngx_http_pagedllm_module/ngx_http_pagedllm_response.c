
/*
 * ngx_http_pagedllm_response: the OpenAI answers out.  SSE events are
 * formatted straight into output buffers (they are per token and must be
 * cheap); whole bodies, errors and logprobs go through jansson.
 */


#include "ngx_http_pagedllm_module.h"
#include "ngx_http_pagedllm_tools.h"

#include <jansson.h>
#include <math.h>


#define NGX_HTTP_PAGEDLLM_TOKEN_TEXT  256


typedef json_t *(*ngx_http_pagedllm_logprobs_pt)(ngx_pool_t *pool,
    ngx_http_pagedllm_ctx_t *ctx, ngx_http_pagedllm_choice_t *ch,
    ngx_uint_t first, ngx_uint_t n);


/* What differs between /v1/completions and /v1/chat/completions on the
   way out; indexed by params.chat. */
typedef struct {
    const char                   *object;
    const char                   *chunk_object;
    ngx_str_t                     text_open;     /* a chunk's text in */
    ngx_str_t                     text_close;
    const char                   *text_key;      /* a whole choice's */
    ngx_uint_t                    message;       /* text as a message */
    ngx_http_pagedllm_logprobs_pt logprobs;
} ngx_http_pagedllm_api_t;


static void ngx_http_pagedllm_json_cleanup(void *data);
static void ngx_http_pagedllm_utf8_end(u_char *s);
static size_t ngx_http_pagedllm_token_text(const pl_tokenizer_t *tok,
    int32_t id, char *buf);
static json_t *ngx_http_pagedllm_logprobs_obj(ngx_pool_t *pool,
    ngx_http_pagedllm_ctx_t *ctx, ngx_http_pagedllm_choice_t *ch,
    ngx_uint_t first, ngx_uint_t n);
static json_t *ngx_http_pagedllm_prompt_entry(ngx_http_pagedllm_ctx_t *ctx,
    int32_t id, float lp, uint32_t rank);
static json_t *ngx_http_pagedllm_prompt_lp_json(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_prompt_lp_t *plp);
static json_t *ngx_http_pagedllm_prompt_position(
    ngx_http_pagedllm_ctx_t *ctx, ngx_http_pagedllm_prompt_lp_t *plp,
    ngx_uint_t i);
static json_t *ngx_http_pagedllm_chat_logprobs_obj(ngx_pool_t *pool,
    ngx_http_pagedllm_ctx_t *ctx, ngx_http_pagedllm_choice_t *ch,
    ngx_uint_t first, ngx_uint_t n);
static u_char *ngx_http_pagedllm_sse_choice(u_char *p,
    ngx_http_pagedllm_ctx_t *ctx, ngx_uint_t index);
static u_char *ngx_http_pagedllm_sse_end(u_char *p,
    ngx_http_pagedllm_ctx_t *ctx, ngx_str_t *logprobs,
    uint32_t finish_reason);
static json_t *ngx_http_pagedllm_choice_text(ngx_pool_t *pool,
    ngx_http_pagedllm_ctx_t *ctx, ngx_http_pagedllm_choice_t *ch);
static json_t *ngx_http_pagedllm_choice_json(ngx_pool_t *pool,
    ngx_http_pagedllm_ctx_t *ctx, ngx_http_pagedllm_choice_t *ch);
static json_t *ngx_http_pagedllm_choice_prompt_lp(
    ngx_http_pagedllm_ctx_t *ctx, ngx_http_pagedllm_choice_t *ch,
    json_t *j);

static u_char *ngx_http_pagedllm_sse_head(u_char *p,
    ngx_http_pagedllm_ctx_t *ctx);
static const char *ngx_http_pagedllm_reason(uint32_t reason);


static ngx_http_pagedllm_api_t  ngx_http_pagedllm_apis[] = {

    { "text_completion", "text_completion",
      ngx_string("\"text\":\""), ngx_string("\""),
      "text", 0, ngx_http_pagedllm_logprobs_obj },

    { "chat.completion", "chat.completion.chunk",
      ngx_string("\"delta\":{\"content\":\""), ngx_string("\"}"),
      "message", 1, ngx_http_pagedllm_chat_logprobs_obj }
};


/*
 * A JSON value the pool owns: released when the pool is destroyed.  Every
 * document this module builds or parses has its root owned this way; the
 * values inside belong to their container.  NULL when j is NULL or no
 * cleanup could be added (j is then released at once).
 */
json_t *
ngx_http_pagedllm_json_pool(ngx_pool_t *pool, json_t *j)
{
    ngx_pool_cleanup_t  *cln;

    if (j == NULL) {
        return NULL;
    }

    cln = ngx_pool_cleanup_add(pool, 0);
    if (cln == NULL) {
        json_decref(j);
        return NULL;
    }

    cln->handler = ngx_http_pagedllm_json_cleanup;
    cln->data = j;

    return j;
}


static void
ngx_http_pagedllm_json_cleanup(void *data)
{
    json_decref(data);
}


void
ngx_http_pagedllm_error_set(ngx_http_pagedllm_error_t *err,
    ngx_uint_t status, const char *param, const char *fmt, ...)
{
    u_char   *last;
    va_list   args;

    err->status = status;
    err->type = status < 500 ? "invalid_request_error" : "server_error";
    err->code = NULL;

    if (param) {
        ngx_cpystrn((u_char *) err->param, (u_char *) param,
                    sizeof(err->param));
    } else {
        err->param[0] = '\0';
    }

    va_start(args, fmt);
    last = ngx_vslprintf(err->message, err->message + sizeof(err->message) - 1,
                         fmt, args);
    va_end(args);

    *last = '\0';

    /* either may have been cut to its array in the middle of a character;
       the answer is JSON, which takes only whole ones */
    ngx_http_pagedllm_utf8_end((u_char *) err->param);
    ngx_http_pagedllm_utf8_end(err->message);
}


/* Ends UTF-8 string s before a last character that lacks bytes. */
static void
ngx_http_pagedllm_utf8_end(u_char *s)
{
    size_t  len = ngx_strlen(s), lead = len, need;

    while (lead > 0 && len - lead < 4 && (s[lead - 1] & 0xc0) == 0x80) {
        lead--;
    }

    if (lead == 0) {
        return;
    }

    lead--;
    need = s[lead] >= 0xf0 ? 4 : s[lead] >= 0xe0 ? 3 : s[lead] >= 0xc0 ? 2 : 1;

    if (len - lead < need) {
        s[lead] = '\0';
    }
}


ngx_buf_t *
ngx_http_pagedllm_error_json(ngx_pool_t *pool, ngx_http_pagedllm_error_t *err)
{
    json_t  *j, *msg;

    msg = json_string((char *) err->message);
    if (msg == NULL) {
        msg = json_string("invalid request");
    }

    j = json_pack("{s:{s:o,s:s,s:o,s:o}}", "error",
                  "message", msg,
                  "type", err->type,
                  "param", err->param[0] ? json_string(err->param)
                                         : json_null(),
                  "code", err->code ? json_string(err->code) : json_null());

    return ngx_http_pagedllm_json_buf(pool,
                                      ngx_http_pagedllm_json_pool(pool, j));
}


size_t
ngx_http_pagedllm_sse_bound(ngx_http_pagedllm_ctx_t *ctx, size_t text_len)
{
    return sizeof("data: {\"id\":\"\",\"object\":\"text_completion\","
                  "\"created\":,\"model\":\"\",\"choices\":[{\"index\":00,"
                  "\"text\":\"\",\"logprobs\":null,\"finish_reason\":"
                  "\"length\"}]}\n\n")
           + sizeof("chat.completion.chunk\"delta\":{\"content\":}")
           + sizeof(",\"usage\":null")
           + NGX_TIME_T_LEN + ctx->id.len + 6 * ctx->model.len
           + 6 * text_len;
}


static u_char *
ngx_http_pagedllm_sse_head(u_char *p, ngx_http_pagedllm_ctx_t *ctx)
{
    p = ngx_sprintf(p, "data: {\"id\":\"%V\",\"object\":\"%s\","
                    "\"created\":%T,\"model\":\"", &ctx->id,
                    ngx_http_pagedllm_apis[ctx->params.chat].chunk_object,
                    ctx->created);
    p = (u_char *) ngx_escape_json(p, ctx->model.data, ctx->model.len);

    return ngx_cpymem(p, "\",", 2);
}


u_char *
ngx_http_pagedllm_sse_text(u_char *p, ngx_http_pagedllm_ctx_t *ctx,
    ngx_uint_t index, u_char *text, size_t len, ngx_str_t *logprobs,
    uint32_t finish_reason)
{
    ngx_http_pagedllm_api_t  *api;

    api = &ngx_http_pagedllm_apis[ctx->params.chat];

    p = ngx_http_pagedllm_sse_choice(p, ctx, index);
    p = ngx_cpymem(p, api->text_open.data, api->text_open.len);
    p = (u_char *) ngx_escape_json(p, text, len);
    p = ngx_cpymem(p, api->text_close.data, api->text_close.len);

    return ngx_http_pagedllm_sse_end(p, ctx, logprobs, finish_reason);
}


/* chat: the first chunk names the role */
u_char *
ngx_http_pagedllm_sse_role(u_char *p, ngx_http_pagedllm_ctx_t *ctx,
    ngx_uint_t index)
{
    p = ngx_http_pagedllm_sse_choice(p, ctx, index);
    p = ngx_sprintf(p, "\"delta\":{\"role\":\"assistant\",\"content\":\"\"}");

    return ngx_http_pagedllm_sse_end(p, ctx, NULL, 0);
}


/* chat: a delta given as its JSON text (tool calls) */
u_char *
ngx_http_pagedllm_sse_delta(u_char *p, ngx_http_pagedllm_ctx_t *ctx,
    ngx_uint_t index, ngx_str_t *delta)
{
    p = ngx_http_pagedllm_sse_choice(p, ctx, index);
    p = ngx_cpymem(p, "\"delta\":", sizeof("\"delta\":") - 1);
    p = ngx_cpymem(p, delta->data, delta->len);

    return ngx_http_pagedllm_sse_end(p, ctx, NULL, 0);
}


static u_char *
ngx_http_pagedllm_sse_choice(u_char *p, ngx_http_pagedllm_ctx_t *ctx,
    ngx_uint_t index)
{
    p = ngx_http_pagedllm_sse_head(p, ctx);

    return ngx_sprintf(p, "\"choices\":[{\"index\":%ui,", index);
}


/* A chunk's choice after its text: logprobs and finish_reason; then, when
   the last chunk carries the usage, "usage": null, as OpenAI sends it. */
static u_char *
ngx_http_pagedllm_sse_end(u_char *p, ngx_http_pagedllm_ctx_t *ctx,
    ngx_str_t *logprobs, uint32_t finish_reason)
{
    const char  *reason;

    p = ngx_cpymem(p, ",\"logprobs\":", sizeof(",\"logprobs\":") - 1);

    if (logprobs) {
        p = ngx_cpymem(p, logprobs->data, logprobs->len);

    } else {
        p = ngx_cpymem(p, "null", 4);
    }

    reason = ngx_http_pagedllm_reason(finish_reason);

    if (reason) {
        p = ngx_sprintf(p, ",\"finish_reason\":\"%s\"}]", reason);

    } else {
        p = ngx_cpymem(p, ",\"finish_reason\":null}]",
                       sizeof(",\"finish_reason\":null}]") - 1);
    }

    if (ctx->params.include_usage) {
        p = ngx_cpymem(p, ",\"usage\":null", sizeof(",\"usage\":null") - 1);
    }

    return ngx_cpymem(p, "}\n\n", 3);
}


/* A token's text on its own into buf (2 * NGX_HTTP_PAGEDLLM_TOKEN_TEXT
   bytes), always valid UTF-8 (U+FFFD for a part of a character), special
   tokens included; its length. */
static size_t
ngx_http_pagedllm_token_text(const pl_tokenizer_t *tok, int32_t id,
    char *buf)
{
    long        n, m;
    pl_detok_t  d;

    pl_detok_init(&d, tok, 0);

    n = pl_detok_push(&d, id, buf, NGX_HTTP_PAGEDLLM_TOKEN_TEXT);
    m = pl_detok_flush(&d, buf + (n > 0 ? n : 0),
                       NGX_HTTP_PAGEDLLM_TOKEN_TEXT);

    return (n < 0 || m < 0) ? 0 : (size_t) (n + m);
}


static double
ngx_http_pagedllm_lp_value(float lp)
{
    return (isfinite(lp) && lp > -9999.0f) ? (double) lp : -9999.0;
}


/* Whether piece i is the prompt's first token (echo with logprobs),
   whose logprob OpenAI gives as null: nothing came before it. */
static ngx_uint_t
ngx_http_pagedllm_first_prompt(ngx_http_pagedllm_choice_t *ch, ngx_uint_t i)
{
    return i == 0 && ch->prompt_first;
}


/* OpenAI's completions logprobs of pieces [first, first + n). */
static json_t *
ngx_http_pagedllm_logprobs_obj(ngx_pool_t *pool, ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, ngx_uint_t first, ngx_uint_t n)
{
    char               key[2 * NGX_HTTP_PAGEDLLM_TOKEN_TEXT];
    json_t            *j, *tokens, *lps, *tops, *offsets, *top;
    size_t             len;
    uint32_t           start, end;
    ngx_uint_t         i, k;
    pl_top_logprob_t  *t;

    j = ngx_http_pagedllm_json_pool(pool,
            json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs",
                      "top_logprobs", "text_offset"));
    if (j == NULL) {
        return NULL;
    }

    tokens = json_object_get(j, "tokens");
    lps = json_object_get(j, "token_logprobs");
    tops = json_object_get(j, "top_logprobs");
    offsets = json_object_get(j, "text_offset");

    for (i = first; i < first + n; i++) {
        start = i ? ch->piece_end[i - 1] : 0;
        end = ch->piece_end[i];
        top = ngx_http_pagedllm_first_prompt(ch, i) ? json_null()
                                                     : json_object();

        if (json_array_append_new(tokens,
                json_stringn((char *) ch->text + start, end - start))
            || json_array_append_new(lps,
                   ngx_http_pagedllm_first_prompt(ch, i) ? json_null()
                   : json_real(ngx_http_pagedllm_lp_value(ch->piece_lp[i])))
            || json_array_append_new(offsets,
                   json_integer(ch->chars_sent
                                + ngx_http_pagedllm_utf8_chars(ch->text,
                                                               start)))
            || json_array_append_new(tops, top))
        {
            return NULL;
        }

        for (k = 0; json_is_object(top) && k < ctx->n_top; k++) {
            t = &ch->piece_top[i * ctx->n_top + k];
            len = ngx_http_pagedllm_token_text(ctx->tok->tokenizer, t->id, key);

            if (json_object_getn(top, key, len) == NULL
                && json_object_setn_new(top, key, len,
                       json_real(ngx_http_pagedllm_lp_value(t->logprob)))
                   != 0)
            {
                return NULL;
            }
        }
    }

    return j;
}


/* {"logprob", "rank", "decoded_token"}, vLLM's Logprob, of token id */
static json_t *
ngx_http_pagedllm_prompt_entry(ngx_http_pagedllm_ctx_t *ctx, int32_t id,
    float lp, uint32_t rank)
{
    char    text[2 * NGX_HTTP_PAGEDLLM_TOKEN_TEXT];
    size_t  len;

    len = ngx_http_pagedllm_token_text(ctx->tok->tokenizer, id, text);

    return json_pack("{s:f,s:I,s:s%}",
                     "logprob", ngx_http_pagedllm_lp_value(lp),
                     "rank", (json_int_t) rank,
                     "decoded_token", text, len);
}


/*
 * vLLM's prompt_logprobs list: null for the first token (nothing came
 * before it), then for each later one an object keyed by token id (as
 * text): the prompt's own token with its rank, then the prompt_logprobs
 * most likely, ranked 1.. by their place (the prompt's token among them
 * takes its place's rank, as vLLM gives it).
 */
static json_t *
ngx_http_pagedllm_prompt_lp_json(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_prompt_lp_t *plp)
{
    json_t      *list;
    ngx_uint_t   i;

    list = json_array();

    for (i = 0; list && i < plp->n; i++) {
        if (json_array_append_new(list,
                i ? ngx_http_pagedllm_prompt_position(ctx, plp, i)
                  : json_null())
            != 0)
        {
            json_decref(list);
            return NULL;
        }
    }

    return list;
}


/* The object of prompt position i > 0 */
static json_t *
ngx_http_pagedllm_prompt_position(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_prompt_lp_t *plp, ngx_uint_t i)
{
    u_char             key[NGX_INT32_LEN];
    json_t            *pos, *own;
    size_t             len;
    ngx_uint_t         k;
    pl_top_logprob_t  *t;

    pos = json_object();
    own = ngx_http_pagedllm_prompt_entry(ctx, plp->ids[i], plp->lp[i],
                                         plp->rank[i]);
    len = ngx_sprintf(key, "%D", plp->ids[i]) - key;

    if (pos == NULL || json_object_setn_new(pos, (char *) key, len, own)) {
        json_decref(pos);
        return NULL;
    }

    for (k = 0; k < ctx->params.prompt_top; k++) {
        t = &plp->top[i * plp->n_top + k];

        if (t->id == plp->ids[i]) {
            if (json_object_set_new(own, "rank", json_integer(k + 1))) {
                break;
            }
            continue;
        }

        len = ngx_sprintf(key, "%D", t->id) - key;

        if (json_object_setn_new(pos, (char *) key, len,
                ngx_http_pagedllm_prompt_entry(ctx, t->id, t->logprob,
                                               (uint32_t) k + 1)))
        {
            break;
        }
    }

    if (k < ctx->params.prompt_top) {
        json_decref(pos);
        return NULL;
    }

    return pos;
}


/* Characters (code points) in valid UTF-8: the bytes that start one. */
size_t
ngx_http_pagedllm_utf8_chars(u_char *p, size_t n)
{
    size_t  i, chars;

    chars = 0;

    for (i = 0; i < n; i++) {
        chars += (p[i] & 0xc0) != 0x80;
    }

    return chars;
}


/* {"token", "logprob", "bytes"} of one token's text */
static json_t *
ngx_http_pagedllm_chat_entry(u_char *text, size_t len, float lp)
{
    size_t   i;
    json_t  *bytes;

    bytes = json_array();

    for (i = 0; bytes && i < len; i++) {
        json_array_append_new(bytes, json_integer(text[i]));
    }

    return json_pack("{s:s%,s:f,s:o}", "token", (char *) text, len,
                     "logprob", ngx_http_pagedllm_lp_value(lp),
                     "bytes", bytes);
}


/* OpenAI's chat logprobs of pieces [first, first + n). */
static json_t *
ngx_http_pagedllm_chat_logprobs_obj(ngx_pool_t *pool,
    ngx_http_pagedllm_ctx_t *ctx, ngx_http_pagedllm_choice_t *ch,
    ngx_uint_t first, ngx_uint_t n)
{
    char               key[2 * NGX_HTTP_PAGEDLLM_TOKEN_TEXT];
    json_t            *j, *content, *e, *top;
    size_t             len;
    uint32_t           start, end;
    ngx_uint_t         i, k;
    pl_top_logprob_t  *t;

    j = ngx_http_pagedllm_json_pool(pool, json_pack("{s:[]}", "content"));
    if (j == NULL) {
        return NULL;
    }

    content = json_object_get(j, "content");

    for (i = first; i < first + n; i++) {
        start = i ? ch->piece_end[i - 1] : 0;
        end = ch->piece_end[i];

        e = ngx_http_pagedllm_chat_entry(ch->text + start, end - start,
                                         ch->piece_lp[i]);
        top = json_array();

        if (json_array_append_new(content, e) != 0
            || json_object_set_new(e, "top_logprobs", top) != 0)
        {
            return NULL;
        }

        for (k = 0; k < ctx->n_top; k++) {
            t = &ch->piece_top[i * ctx->n_top + k];
            len = ngx_http_pagedllm_token_text(ctx->tok->tokenizer, t->id, key);

            if (json_array_append_new(top,
                    ngx_http_pagedllm_chat_entry((u_char *) key, len,
                                                 t->logprob))
                != 0)
            {
                return NULL;
            }
        }
    }

    return j;
}


/* The logprobs of pieces [first, first + n) as JSON text in the request's
   pool; the document is built in a pool of its own, gone once dumped (a
   streamed request makes one per token). */
ngx_int_t
ngx_http_pagedllm_logprobs_text(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, ngx_uint_t first, ngx_uint_t n,
    ngx_str_t *out)
{
    char        *s;
    json_t      *j;
    ngx_int_t    rc;
    ngx_pool_t  *pool;

    pool = ngx_create_pool(NGX_DEFAULT_POOL_SIZE,
                           ctx->request->connection->log);
    if (pool == NULL) {
        return NGX_ERROR;
    }

    rc = NGX_ERROR;

    j = ngx_http_pagedllm_apis[ctx->params.chat].logprobs(pool, ctx, ch,
                                                          first, n);
    s = j ? json_dumps(j, JSON_COMPACT) : NULL;

    if (s != NULL) {
        out->len = ngx_strlen(s);
        out->data = ngx_pnalloc(ctx->request->pool, out->len);

        if (out->data != NULL) {
            ngx_memcpy(out->data, s, out->len);
            rc = NGX_OK;
        }

        free(s);
    }

    ngx_destroy_pool(pool);

    return rc;
}


/* usage counts every choice's tokens */
ngx_uint_t
ngx_http_pagedllm_completion_tokens(ngx_http_pagedllm_ctx_t *ctx)
{
    ngx_uint_t  i, n;

    n = 0;

    for (i = 0; i < ctx->params.n; i++) {
        n += ctx->choices[i].completion_tokens;
    }

    return n;
}


u_char *
ngx_http_pagedllm_sse_usage(u_char *p, ngx_http_pagedllm_ctx_t *ctx)
{
    ngx_uint_t  n;

    n = ngx_http_pagedllm_completion_tokens(ctx);
    p = ngx_http_pagedllm_sse_head(p, ctx);

    return ngx_sprintf(p, "\"choices\":[],\"usage\":{\"prompt_tokens\":%ui,"
                       "\"completion_tokens\":%ui,\"total_tokens\":%ui,"
                       "\"prompt_tokens_details\":{\"cached_tokens\":%ui}}}"
                       "\n\n", ctx->params.n_prompt, n,
                       ctx->params.n_prompt + n, ctx->cached_tokens);
}


u_char *
ngx_http_pagedllm_sse_error(u_char *p, ngx_http_pagedllm_ctx_t *ctx,
    ngx_uint_t status, ngx_str_t *message)
{
    p = ngx_sprintf(p, "data: {\"error\":{\"message\":\"");
    p = (u_char *) ngx_escape_json(p, message->data, message->len);

    return ngx_sprintf(p, "\",\"type\":\"%s\",\"param\":null,\"code\":%ui}}"
                       "\n\n",
                       status < 500 ? "invalid_request_error"
                                    : "server_error",
                       status);
}


/* The prompt text choice index begins with (echo): its own prompt's when
   the prompts were batched, the one prompt's otherwise; empty without
   echo.  Here, not in _choice.c, so that the request parser's fuzz target
   links without the engine connection. */
ngx_str_t *
ngx_http_pagedllm_choice_echo(ngx_http_pagedllm_ctx_t *ctx, ngx_uint_t index)
{
    ngx_http_pagedllm_params_t  *p = &ctx->params;

    if (p->n_parts > 1) {
        return &p->parts[index / (p->n / p->n_parts)].echo;
    }

    return &p->echo;
}


/* the choice's text, after the prompt's with echo */
static json_t *
ngx_http_pagedllm_choice_text(ngx_pool_t *pool, ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch)
{
    u_char     *all;
    ngx_str_t  *echo;

    echo = ngx_http_pagedllm_choice_echo(ctx, ch->index);

    if (echo->len == 0) {
        return json_stringn((char *) ch->text, ch->text_len);
    }

    all = ngx_pnalloc(pool, echo->len + ch->text_len);
    if (all == NULL) {
        return NULL;
    }

    ngx_memcpy(ngx_cpymem(all, echo->data, echo->len), ch->text,
               ch->text_len);

    return json_stringn((char *) all, echo->len + ch->text_len);
}


static json_t *
ngx_http_pagedllm_choice_json(ngx_pool_t *pool, ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch)
{
    json_t                   *text, *lp;
    ngx_http_pagedllm_api_t  *api;

    api = &ngx_http_pagedllm_apis[ctx->params.chat];

    lp = (ctx->params.flags & PL_SUBMIT_LOGPROBS)
         ? api->logprobs(pool, ctx, ch, 0, ch->npieces) : json_null();

    if (lp == NULL) {
        return NULL;
    }

    text = ngx_http_pagedllm_choice_text(pool, ctx, ch);

    if (api->message) {
        text = ngx_http_pagedllm_tools_message_out(ctx, ch, text);
    }

    if (ctx->params.want_prompt_lp && !ctx->params.chat) {
        return ngx_http_pagedllm_choice_prompt_lp(ctx, ch, json_pack(
                   "{s:I,s:o,s:O,s:s}", "index", (json_int_t) ch->index,
                   api->text_key, text, "logprobs", lp, "finish_reason",
                   ngx_http_pagedllm_reason(ch->finish_reason)));
    }

    if (ctx->params.flags & PL_SUBMIT_BEAM_SEARCH) {
        return json_pack("{s:I,s:o,s:O,s:s,s:f}", "index",
                         (json_int_t) ch->index, api->text_key, text,
                         "logprobs", lp, "finish_reason",
                         ngx_http_pagedllm_reason(ch->finish_reason),
                         "cumulative_logprob", ch->cum_logprob);
    }

    return json_pack("{s:I,s:o,s:O,s:s}", "index", (json_int_t) ch->index,
                     api->text_key, text, "logprobs", lp,
                     "finish_reason",
                     ngx_http_pagedllm_reason(ch->finish_reason));
}


/* /v1/completions: choice j carries its prompt's prompt_logprobs list,
   which the first choice of that prompt kept */
static json_t *
ngx_http_pagedllm_choice_prompt_lp(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, json_t *j)
{
    ngx_uint_t                   per;
    ngx_http_pagedllm_params_t  *p = &ctx->params;

    per = p->n / ngx_max(p->n_parts, 1);

    if (j != NULL
        && json_object_set_new(j, "prompt_logprobs",
               ngx_http_pagedllm_prompt_lp_json(ctx,
                   ctx->choices[ch->index - ch->index % per].plp))
           != 0)
    {
        json_decref(j);
        return NULL;
    }

    return j;
}


ngx_buf_t *
ngx_http_pagedllm_completion_json(ngx_http_pagedllm_ctx_t *ctx)
{
    json_t      *j, *choices;
    ngx_uint_t   i, tokens;
    ngx_pool_t  *pool;

    pool = ctx->request->pool;
    tokens = ngx_http_pagedllm_completion_tokens(ctx);

    j = ngx_http_pagedllm_json_pool(pool,
            json_pack("{s:s%,s:s,s:I,s:s%,s:[],s:{s:I,s:I,s:I,s:{s:I}}}",
                "id", ctx->id.data, ctx->id.len,
                "object", ngx_http_pagedllm_apis[ctx->params.chat].object,
                "created", (json_int_t) ctx->created,
                "model", ctx->model.data, ctx->model.len,
                "choices",
                "usage",
                    "prompt_tokens", (json_int_t) ctx->params.n_prompt,
                    "completion_tokens", (json_int_t) tokens,
                    "total_tokens",
                    (json_int_t) (ctx->params.n_prompt + tokens),
                    "prompt_tokens_details",
                        "cached_tokens", (json_int_t) ctx->cached_tokens));
    if (j == NULL) {
        return NULL;
    }

    choices = json_object_get(j, "choices");

    /* chat: one list for the request, after the usage, as vLLM puts it */
    if (ctx->params.want_prompt_lp && ctx->params.chat
        && json_object_set_new(j, "prompt_logprobs",
               ngx_http_pagedllm_prompt_lp_json(ctx, ctx->choices[0].plp))
           != 0)
    {
        return NULL;
    }

    for (i = 0; i < ctx->params.n; i++) {
        if (json_array_append_new(choices,
                ngx_http_pagedllm_choice_json(pool, ctx, &ctx->choices[i]))
            != 0)
        {
            return NULL;
        }
    }

    return ngx_http_pagedllm_json_buf(pool, j);
}


/* GET models: the list of the models served (n engines, one each); one:
   the first's object alone (GET models/ID) */
ngx_buf_t *
ngx_http_pagedllm_models_json(ngx_pool_t *pool,
    ngx_http_pagedllm_engine_t **engines, ngx_uint_t n, ngx_uint_t one)
{
    json_t      *j, *list;
    ngx_uint_t   i;

    list = ngx_http_pagedllm_json_pool(pool, json_array());
    if (list == NULL) {
        return NULL;
    }

    for (i = 0; i < n; i++) {
        j = json_pack("{s:s%,s:s,s:I,s:s,s:I}",
                      "id", engines[i]->model.data, engines[i]->model.len,
                      "object", "model",
                      "created", (json_int_t) ngx_time(),
                      "owned_by", "pagedllm",
                      "max_model_len",
                      (json_int_t) engines[i]->max_model_len);

        if (one) {
            return ngx_http_pagedllm_json_buf(pool,
                                      ngx_http_pagedllm_json_pool(pool, j));
        }

        if (json_array_append_new(list, j) != 0) {
            return NULL;
        }
    }

    j = json_pack("{s:s,s:O}", "object", "list", "data", list);

    return ngx_http_pagedllm_json_buf(pool,
                                      ngx_http_pagedllm_json_pool(pool, j));
}


/* POST /tokenize: {"count", "max_model_len", "tokens"}, as vLLM answers */
ngx_buf_t *
ngx_http_pagedllm_tokenize_json(ngx_pool_t *pool,
    ngx_http_pagedllm_engine_t *engine, int32_t *ids, ngx_uint_t n)
{
    json_t      *j, *tokens;
    ngx_uint_t   i;

    tokens = ngx_http_pagedllm_json_pool(pool, json_array());
    if (tokens == NULL) {
        return NULL;
    }

    for (i = 0; i < n; i++) {
        if (json_array_append_new(tokens, json_integer(ids[i])) != 0) {
            return NULL;
        }
    }

    j = json_pack("{s:I,s:I,s:O}",
                  "count", (json_int_t) n,
                  "max_model_len", (json_int_t) engine->max_model_len,
                  "tokens", tokens);

    return ngx_http_pagedllm_json_buf(pool,
                                      ngx_http_pagedllm_json_pool(pool, j));
}


/* POST /detokenize: {"prompt"} */
ngx_buf_t *
ngx_http_pagedllm_detokenize_json(ngx_pool_t *pool, u_char *text, size_t len)
{
    json_t  *j;

    j = json_pack("{s:s%}", "prompt", text, len);

    return ngx_http_pagedllm_json_buf(pool,
                                      ngx_http_pagedllm_json_pool(pool, j));
}


/* GET /version */
ngx_buf_t *
ngx_http_pagedllm_version_json(ngx_pool_t *pool)
{
    json_t  *j;

    j = json_pack("{s:s}", "version", NGX_HTTP_PAGEDLLM_VERSION);

    return ngx_http_pagedllm_json_buf(pool,
                                      ngx_http_pagedllm_json_pool(pool, j));
}


/* One engine's status, the pool's: {"engine": "detached"} while it is
   detached (engine NULL). */
json_t *
ngx_http_pagedllm_status_object(ngx_pool_t *pool,
    ngx_http_pagedllm_engine_t *engine, pl_stats_t *s)
{
    json_t  *j;

    if (engine == NULL) {
        j = json_pack("{s:s}", "engine", "detached");
        return ngx_http_pagedllm_json_pool(pool, j);
    }

    j = json_pack("{s:s,s:s%,s:s,s:I,s:{s:I,s:I,s:I},"
                  "s:{s:I,s:I,s:I,s:I,s:I},s:I,s:I,s:I,s:I,s:I}",
                  "engine", "attached",
                  "model", engine->model.data, engine->model.len,
                  "device", s->device,
                  "workers", (json_int_t) s->workers,
                  "requests",
                      "running", (json_int_t) s->running,
                      "waiting", (json_int_t) s->waiting,
                      "swapped", (json_int_t) s->swapped,
                  "kv_blocks",
                      "total", (json_int_t) s->kv_blocks_total,
                      "used", (json_int_t) s->kv_blocks_used,
                      "free", (json_int_t) s->kv_blocks_free,
                      "cached", (json_int_t) s->kv_blocks_cached,
                      "block_size", (json_int_t) s->block_size,
                  "iterations", (json_int_t) s->iterations,
                  "requests_total", (json_int_t) s->requests_total,
                  "prompt_tokens_total", (json_int_t) s->prompt_tokens_total,
                  "generation_tokens_total",
                  (json_int_t) s->generation_tokens_total,
                  "preemptions_total", (json_int_t) s->preemptions_total);

    j = ngx_http_pagedllm_json_pool(pool, j);

    if (j == NULL
        || json_object_update_new(j,
               json_pack("{s:{s:I,s:I},s:{s:I,s:I},s:{s:I,s:I,s:I,s:I,s:I},"
                         "s:{s:I,s:I}}",
                   "swap_blocks",
                       "total", (json_int_t) s->swap_blocks_total,
                       "used", (json_int_t) s->swap_blocks_used,
                   "prefix_cache",
                       "queries", (json_int_t) s->prefix_cache_queries,
                       "hits", (json_int_t) s->prefix_cache_hits,
                   "preemptions",
                       "recompute", (json_int_t) s->preemptions_recompute,
                       "swap", (json_int_t) s->preemptions_swap,
                       "auto_recompute",
                       (json_int_t) s->preemptions_auto_recompute,
                       "auto_swap", (json_int_t) s->preemptions_auto_swap,
                       "swap_full", (json_int_t) s->preemptions_swap_full,
                   "blocks_swapped",
                       "out", (json_int_t) s->blocks_swapped_out,
                       "in", (json_int_t) s->blocks_swapped_in))
           != 0)
    {
        return NULL;
    }

    return j;
}


/* j's text and a newline in a buffer of the pool; j stays its owner's */
ngx_buf_t *
ngx_http_pagedllm_json_buf(ngx_pool_t *pool, json_t *j)
{
    char       *s;
    size_t      len;
    ngx_buf_t  *b;

    if (j == NULL) {
        return NULL;
    }

    s = json_dumps(j, JSON_COMPACT);

    if (s == NULL) {
        return NULL;
    }

    len = ngx_strlen(s);

    b = ngx_create_temp_buf(pool, len + 1);
    if (b != NULL) {
        b->last = ngx_cpymem(b->last, s, len);
        *b->last++ = '\n';
    }

    free(s);

    return b;
}


static const char *
ngx_http_pagedllm_reason(uint32_t reason)
{
    switch (reason) {
    case PL_FINISH_STOP:
        return "stop";
    case PL_FINISH_LENGTH:
        return "length";
    case NGX_HTTP_PAGEDLLM_FINISH_TOOL_CALLS:
        return "tool_calls";
    default:
        return NULL;
    }
}
