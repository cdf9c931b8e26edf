
/*
 * ngx_http_pagedllm_request: the OpenAI completions and chat completions
 * requests in.
 *
 * The request body is parsed with jansson and every field is checked
 * against a table of the fields we know (one per endpoint); a field we do
 * not support that asks for something is refused by name rather than
 * ignored.  A string prompt, or a conversation rendered by the model's
 * chat template, is tokenized here, in the worker, with the engine's
 * tokenizer, by ngx_http_pagedllm_tokenize(): it is thread-safe, so that
 * the handler can run a long prompt's on the thread pool.
 */


#include "ngx_http_pagedllm_module.h"
#include "pl_params.h"

#include <jansson.h>
#include <math.h>


#define NGX_HTTP_PAGEDLLM_MARKER      "\xef\xbf\xbe"   /* U+FFFE */
#define NGX_HTTP_PAGEDLLM_MARKER_LEN  3


typedef struct ngx_http_pagedllm_parse_s  ngx_http_pagedllm_parse_t;

typedef ngx_int_t (*ngx_http_pagedllm_field_pt)(ngx_http_pagedllm_parse_t *ps,
    json_t *v);


/* A request field.  param: the row of PL_PARAMS a sampling parameter
   takes its type, range and default from (-1 for other fields); post: a
   PL_SUBMIT_* flag the field sets, or for an unsupported field the JSON of
   the value that asks for nothing. */
typedef struct {
    const char                   *name;
    ngx_http_pagedllm_field_pt    parse;
    ngx_int_t                     param;
    void                         *post;
} ngx_http_pagedllm_field_t;


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


static void ngx_http_pagedllm_decode_cleanup(void *data);
static void ngx_http_pagedllm_ids_cleanup(void *data);
static json_t *ngx_http_pagedllm_load(ngx_pool_t *pool,
    ngx_http_pagedllm_decode_t *d, ngx_http_pagedllm_error_t *err);
static u_char *ngx_http_pagedllm_sanitize(ngx_pool_t *pool, u_char *body,
    size_t len, size_t *out_len);
static ngx_int_t ngx_http_pagedllm_find_marker(json_t *root,
    ngx_http_pagedllm_error_t *err);
static ngx_int_t ngx_http_pagedllm_has_marker(json_t *v);
static ngx_int_t ngx_http_pagedllm_fields(ngx_http_pagedllm_parse_t *ps,
    json_t *root, ngx_http_pagedllm_field_t *own);
static ngx_http_pagedllm_field_t *ngx_http_pagedllm_find_field(
    ngx_http_pagedllm_field_t *known, const char *key);
static ngx_int_t ngx_http_pagedllm_required(json_t *root,
    ngx_http_pagedllm_params_t *p, ngx_http_pagedllm_error_t *err);
static ngx_uint_t ngx_http_pagedllm_given(json_t *root, const char *name);

static ngx_int_t ngx_http_pagedllm_f_model(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_prompt(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_prompt_text(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_prompt_ids(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_token_ids(ngx_http_pagedllm_parse_t *ps,
    json_t *v, const char *what, int32_t **out);
static ngx_int_t ngx_http_pagedllm_f_flag(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_param(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static void ngx_http_pagedllm_param_set(ngx_http_pagedllm_params_t *p,
    pl_param_id_t id, double v);
static ngx_int_t ngx_http_pagedllm_f_seed(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_stream(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_early_stopping(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_beam_search(json_t *root,
    ngx_http_pagedllm_params_t *p, ngx_http_pagedllm_error_t *err);
static ngx_int_t ngx_http_pagedllm_f_stream_options(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_user(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_unsupported(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_logit_bias(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_stop(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_stop_token_ids(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_messages(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static void ngx_http_pagedllm_defaults(json_t *root,
    ngx_http_pagedllm_params_t *p, ngx_http_pagedllm_engine_t *engine);


/* where each row of PL_PARAMS goes in the parameters */
#define NGX_HTTP_PAGEDLLM_OFFSET(name, ...)                                  \
    offsetof(ngx_http_pagedllm_params_t, name),

static size_t  ngx_http_pagedllm_param_offsets[] = {
    PL_PARAMS(NGX_HTTP_PAGEDLLM_OFFSET)
};

#define NGX_HTTP_PAGEDLLM_PARAM(name)                                        \
    ngx_http_pagedllm_f_param, PL_P_##name

static uint32_t  ngx_http_pagedllm_ignore_eos = PL_SUBMIT_IGNORE_EOS;
static uint32_t  ngx_http_pagedllm_want_logprobs = PL_SUBMIT_LOGPROBS;
static uint32_t  ngx_http_pagedllm_use_beam_search = PL_SUBMIT_BEAM_SEARCH;


/* The fields both endpoints take, after the endpoint's own. */
static ngx_http_pagedllm_field_t  ngx_http_pagedllm_common_fields[] = {
    { "model", ngx_http_pagedllm_f_model, -1, NULL },
    { "max_tokens", NGX_HTTP_PAGEDLLM_PARAM(max_tokens), NULL },
    { "temperature", NGX_HTTP_PAGEDLLM_PARAM(temperature), NULL },
    { "top_p", NGX_HTTP_PAGEDLLM_PARAM(top_p), NULL },
    { "top_k", NGX_HTTP_PAGEDLLM_PARAM(top_k), NULL },
    { "seed", ngx_http_pagedllm_f_seed, -1, NULL },
    { "n", NGX_HTTP_PAGEDLLM_PARAM(n), NULL },
    { "stream", ngx_http_pagedllm_f_stream, -1, NULL },
    { "stream_options", ngx_http_pagedllm_f_stream_options, -1, NULL },
    { "ignore_eos", ngx_http_pagedllm_f_flag, -1,
      &ngx_http_pagedllm_ignore_eos },
    { "user", ngx_http_pagedllm_f_user, -1, NULL },
    { "stop", ngx_http_pagedllm_f_stop, -1, NULL },
    { "logit_bias", ngx_http_pagedllm_f_logit_bias, -1, NULL },
    { "presence_penalty", NGX_HTTP_PAGEDLLM_PARAM(presence_penalty), NULL },
    { "frequency_penalty", NGX_HTTP_PAGEDLLM_PARAM(frequency_penalty),
      NULL },
    { "min_p", NGX_HTTP_PAGEDLLM_PARAM(min_p), NULL },
    { "repetition_penalty", NGX_HTTP_PAGEDLLM_PARAM(repetition_penalty),
      NULL },
    { "min_tokens", NGX_HTTP_PAGEDLLM_PARAM(min_tokens), NULL },
    { "stop_token_ids", ngx_http_pagedllm_f_stop_token_ids, -1, NULL },
    { "use_beam_search", ngx_http_pagedllm_f_flag, -1,
      &ngx_http_pagedllm_use_beam_search },
    { "length_penalty", NGX_HTTP_PAGEDLLM_PARAM(length_penalty), NULL },
    { "early_stopping", ngx_http_pagedllm_f_early_stopping, -1, NULL },
    { NULL, NULL, -1, NULL }
};


/* /v1/completions: a prompt; logprobs is the number of top entries */
static ngx_http_pagedllm_field_t  ngx_http_pagedllm_completion_fields[] = {
    { "prompt", ngx_http_pagedllm_f_prompt, -1, NULL },
    { "best_of", NGX_HTTP_PAGEDLLM_PARAM(best_of), NULL },
    { "logprobs", NGX_HTTP_PAGEDLLM_PARAM(logprobs),
      &ngx_http_pagedllm_want_logprobs },
    { "echo", ngx_http_pagedllm_f_unsupported, -1, NULL },
    { "suffix", ngx_http_pagedllm_f_unsupported, -1, NULL },
    { NULL, NULL, -1, NULL }
};


/* /v1/chat/completions: messages; logprobs a boolean and top_logprobs
   the number of top entries */
static ngx_http_pagedllm_field_t  ngx_http_pagedllm_chat_fields[] = {
    { "messages", ngx_http_pagedllm_f_messages, -1, NULL },
    { "max_completion_tokens", NGX_HTTP_PAGEDLLM_PARAM(max_tokens), NULL },
    { "logprobs", ngx_http_pagedllm_f_flag, -1,
      &ngx_http_pagedllm_want_logprobs },
    { "top_logprobs", NGX_HTTP_PAGEDLLM_PARAM(logprobs), NULL },
    { "tools", ngx_http_pagedllm_f_unsupported, -1, NULL },
    { "tool_choice", ngx_http_pagedllm_f_unsupported, -1, "\"none\"" },
    { "parallel_tool_calls", ngx_http_pagedllm_f_unsupported, -1, "true" },
    { "response_format", ngx_http_pagedllm_f_unsupported, -1,
      "{\"type\": \"text\"}" },
    { NULL, NULL, -1, NULL }
};


/* indexed by params.chat */
static ngx_http_pagedllm_api_t  ngx_http_pagedllm_apis[] = {
    { ngx_http_pagedllm_completion_fields, "prompt", 0 },
    { ngx_http_pagedllm_chat_fields, "messages", 1 }
};


/* d is to decode body; the pool releases what it decodes. */
ngx_int_t
ngx_http_pagedllm_decode_init(ngx_pool_t *pool, ngx_http_pagedllm_decode_t *d,
    u_char *body, size_t len)
{
    ngx_pool_cleanup_t  *cln;

    ngx_memzero(d, sizeof(ngx_http_pagedllm_decode_t));
    d->body = body;
    d->len = len;

    cln = ngx_pool_cleanup_add(pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    cln->handler = ngx_http_pagedllm_decode_cleanup;
    cln->data = d;

    return NGX_OK;
}


static void
ngx_http_pagedllm_decode_cleanup(void *data)
{
    ngx_http_pagedllm_decode_t  *d = data;

    json_decref(d->root);
}


/* The body's JSON, thread-safe: it touches nothing but d. */
void
ngx_http_pagedllm_decode(ngx_http_pagedllm_decode_t *d)
{
    d->decoded = 1;
    d->bad_utf8 = !pl_utf8_valid((char *) d->body, d->len);

    if (!d->bad_utf8) {
        d->root = json_loadb((char *) d->body, d->len, JSON_REJECT_DUPLICATES,
                             &d->jerr);
    }
}


ngx_int_t
ngx_http_pagedllm_parse_completion(ngx_http_request_t *r,
    ngx_http_pagedllm_decode_t *d, ngx_http_pagedllm_engine_t *engine,
    ngx_uint_t chat, ngx_http_pagedllm_params_t *p,
    ngx_http_pagedllm_error_t *err)
{
    json_t                     *root;
    ngx_int_t                   rc;
    ngx_uint_t                  id;
    ngx_http_pagedllm_api_t    *api;
    ngx_http_pagedllm_parse_t   ps;

    ngx_memzero(p, sizeof(ngx_http_pagedllm_params_t));
    p->chat = chat;

    for (id = 0; id < PL_P_COUNT; id++) {
        ngx_http_pagedllm_param_set(p, id, pl_param(id)->dflt);
    }

    api = &ngx_http_pagedllm_apis[p->chat];

    if (api->fill) {
        p->max_tokens = 0;
    }

    root = ngx_http_pagedllm_load(r->pool, d, err);
    if (root == NULL) {
        return NGX_ERROR;
    }

    ps.field = NULL;
    ps.params = p;
    ps.engine = engine;
    ps.pool = r->pool;
    ps.err = err;

    rc = ngx_http_pagedllm_fields(&ps, root, api->fields);
    if (rc == NGX_OK) {
        rc = ngx_http_pagedllm_required(root, p, err);
    }

    if (rc != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_http_pagedllm_defaults(root, p, engine);

    return NGX_OK;
}


/* d's root, decoded here if it was not on a thread; a body that is not
   valid UTF-8 decoded with markers to name the field at fault. */
static json_t *
ngx_http_pagedllm_load(ngx_pool_t *pool, ngx_http_pagedllm_decode_t *d,
    ngx_http_pagedllm_error_t *err)
{
    u_char  *body;
    size_t   len;

    if (!d->decoded) {
        ngx_http_pagedllm_decode(d);
    }

    if (d->bad_utf8) {
        body = ngx_http_pagedllm_sanitize(pool, d->body, d->len, &len);
        if (body == NULL) {
            ngx_http_pagedllm_error_set(err, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                        NULL, "out of memory");
            return NULL;
        }

        d->root = json_loadb((char *) body, len, JSON_REJECT_DUPLICATES,
                             &d->jerr);
    }

    if (d->root == NULL) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, NULL,
                                    "We could not parse the JSON body of "
                                    "your request: %s (line %d, column %d)",
                                    d->jerr.text, d->jerr.line,
                                    d->jerr.column);
        return NULL;
    }

    if (!json_is_object(d->root)) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, NULL,
                                    "The request body must be a JSON "
                                    "object");
        return NULL;
    }

    if (d->bad_utf8) {
        ngx_http_pagedllm_find_marker(d->root, err);
        return NULL;
    }

    return d->root;
}


/*
 * jansson refuses invalid UTF-8 anywhere in a document, which would hide
 * which field was at fault; so each invalid byte is replaced by a marker
 * (U+FFFE) and the field whose value holds a marker is named.
 */
static u_char *
ngx_http_pagedllm_sanitize(ngx_pool_t *pool, u_char *body, size_t len,
    size_t *out_len)
{
    u_char  *out, *o, c;
    size_t   i, n;

    out = ngx_pnalloc(pool, len * NGX_HTTP_PAGEDLLM_MARKER_LEN + 1);
    if (out == NULL) {
        return NULL;
    }

    o = out;

    for (i = 0; i < len; i += n) {
        c = body[i];
        n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3
            : (c >> 3) == 30 ? 4 : 0;

        if (n && i + n <= len && pl_utf8_valid((char *) body + i, n)) {
            o = ngx_cpymem(o, body + i, n);
            continue;
        }

        o = ngx_cpymem(o, NGX_HTTP_PAGEDLLM_MARKER,
                       NGX_HTTP_PAGEDLLM_MARKER_LEN);
        n = 1;
    }

    *out_len = o - out;

    return out;
}


static ngx_int_t
ngx_http_pagedllm_find_marker(json_t *root, ngx_http_pagedllm_error_t *err)
{
    json_t      *v;
    const char  *key;

    json_object_foreach(root, key, v) {
        if (ngx_http_pagedllm_has_marker(v)) {
            ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, key,
                                        "'%s' is not valid UTF-8", key);
            return NGX_OK;
        }
    }

    ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, NULL,
                                "The request body is not valid UTF-8");
    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_has_marker(json_t *v)
{
    size_t       i;
    json_t      *e;
    const char  *key;

    if (json_is_string(v)) {
        return ngx_strnstr((u_char *) json_string_value(v),
                           NGX_HTTP_PAGEDLLM_MARKER, json_string_length(v))
               != NULL;
    }

    if (json_is_array(v)) {
        json_array_foreach(v, i, e) {
            if (ngx_http_pagedllm_has_marker(e)) {
                return 1;
            }
        }
    }

    if (json_is_object(v)) {
        json_object_foreach(v, key, e) {
            if (ngx_http_pagedllm_has_marker(e)
                || ngx_strstr(key, NGX_HTTP_PAGEDLLM_MARKER))
            {
                return 1;
            }
        }
    }

    return 0;
}


static ngx_int_t
ngx_http_pagedllm_fields(ngx_http_pagedllm_parse_t *ps, json_t *root,
    ngx_http_pagedllm_field_t *own)
{
    json_t                     *v;
    const char                 *key;
    ngx_http_pagedllm_field_t  *f;

    json_object_foreach(root, key, v) {

        f = ngx_http_pagedllm_find_field(own, key);

        if (f == NULL) {
            f = ngx_http_pagedllm_find_field(ngx_http_pagedllm_common_fields,
                                             key);
        }

        if (f == NULL) {
            ngx_http_pagedllm_error_set(ps->err, NGX_HTTP_BAD_REQUEST, key,
                                        "Unrecognized request argument "
                                        "supplied: %s", key);
            return NGX_ERROR;
        }

        ps->field = f;

        if (f->parse(ps, v) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


static ngx_http_pagedllm_field_t *
ngx_http_pagedllm_find_field(ngx_http_pagedllm_field_t *known,
    const char *key)
{
    ngx_http_pagedllm_field_t  *f;

    for (f = known; f->name; f++) {
        if (ngx_strcmp(key, f->name) == 0) {
            return f;
        }
    }

    return NULL;
}


/* Fields that must be there, and fields that only go together. */
static ngx_int_t
ngx_http_pagedllm_required(json_t *root, ngx_http_pagedllm_params_t *p,
    ngx_http_pagedllm_error_t *err)
{
    const char  *name;

    if (p->prompt == NULL && p->text == NULL && p->messages == NULL) {
        name = ngx_http_pagedllm_apis[p->chat].prompt;
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, name,
                                    "'%s' is a required property", name);
        return NGX_ERROR;
    }

    if (ngx_http_pagedllm_given(root, "top_logprobs")
        && !(p->flags & PL_SUBMIT_LOGPROBS))
    {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST,
                                    "top_logprobs",
                                    "'top_logprobs' requires 'logprobs' to "
                                    "be true");
        return NGX_ERROR;
    }

    if (p->best_of && p->best_of < p->n) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, "best_of",
                                    "'best_of' (%uD) must be at least 'n' "
                                    "(%uD)", p->best_of, p->n);
        return NGX_ERROR;
    }

    if (ngx_http_pagedllm_given(root, "stream_options") && !p->stream) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST,
                                    "stream_options",
                                    "'stream_options' is only allowed when "
                                    "'stream' is true");
        return NGX_ERROR;
    }

    if (p->flags & PL_SUBMIT_BEAM_SEARCH) {
        return ngx_http_pagedllm_beam_search(root, p, err);
    }

    if (p->early_stopping != PL_EARLY_STOPPING_FALSE) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST,
                                    "early_stopping",
                                    "early_stopping is not effective and "
                                    "must be False when not using beam "
                                    "search");
        return NGX_ERROR;
    }

    if (p->stream && p->best_of > p->n) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, "best_of",
                                    "'best_of' greater than 'n' cannot be "
                                    "streamed");
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * use_beam_search, as vLLM's OpenAI server takes it: the width is best_of
 * (n when absent; chat has only n) and must be above 1; the search is
 * greedy, so temperature must be 0, top_p 1 and top_k off, and when
 * absent they are that (not the model's generation_config.json).  Like
 * vLLM's /v1/completions, stream: true answers one JSON response: nothing
 * is known before the search is over.  What beam search scores without
 * (penalties, logit_bias, min_p, logprobs) the engine refuses by name.
 */
static ngx_int_t
ngx_http_pagedllm_beam_search(json_t *root, ngx_http_pagedllm_params_t *p,
    ngx_http_pagedllm_error_t *err)
{
    uint32_t  width = p->best_of ? p->best_of : p->n;

    if (width < 2) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST,
                                    p->best_of ? "best_of" : "n",
                                    "best_of must be greater than 1 when "
                                    "using beam search. Got %uD.", width);
        return NGX_ERROR;
    }

    if (!ngx_http_pagedllm_given(root, "temperature")) {
        p->temperature = 0;

    } else if (p->temperature != 0) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, "temperature",
                                    "temperature must be 0 when using beam "
                                    "search.");
        return NGX_ERROR;
    }

    if (p->top_p != 1) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, "top_p",
                                    "top_p must be 1 when using beam "
                                    "search.");
        return NGX_ERROR;
    }

    if (p->top_k != 0) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, "top_k",
                                    "top_k must be -1 when using beam "
                                    "search.");
        return NGX_ERROR;
    }

    p->stream = 0;
    p->include_usage = 0;

    return NGX_OK;
}


/* A field there and not null. */
static ngx_uint_t
ngx_http_pagedllm_given(json_t *root, const char *name)
{
    json_t  *v;

    v = json_object_get(root, name);

    return v != NULL && !json_is_null(v);
}


/* What the request left out comes from the model's generation_config.json
   (as the engine published it), else OpenAI's defaults. */
static void
ngx_http_pagedllm_defaults(json_t *root, ngx_http_pagedllm_params_t *p,
    ngx_http_pagedllm_engine_t *engine)
{
    double  ctx, vocab;

    if (p->flags & PL_SUBMIT_BEAM_SEARCH) {
        return;         /* greedy: ngx_http_pagedllm_beam_search */
    }

    ctx = engine->max_model_len;
    vocab = engine->vocab_size;

    if (!ngx_http_pagedllm_given(root, "temperature")
        && pl_param_in_range(pl_param(PL_P_temperature),
                             engine->default_temperature, ctx, vocab))
    {
        p->temperature = engine->default_temperature;
    }

    if (!ngx_http_pagedllm_given(root, "top_p")
        && pl_param_in_range(pl_param(PL_P_top_p), engine->default_top_p,
                             ctx, vocab))
    {
        p->top_p = engine->default_top_p;
    }

    if (!ngx_http_pagedllm_given(root, "top_k")
        && engine->default_top_k > 0
        && (uint32_t) engine->default_top_k <= engine->vocab_size)
    {
        p->top_k = engine->default_top_k;
    }
}


/* Once tokenized: the prompt and max_tokens within the model's context. */
ngx_int_t
ngx_http_pagedllm_check_length(ngx_http_pagedllm_params_t *p,
    ngx_http_pagedllm_engine_t *engine, ngx_http_pagedllm_error_t *err)
{
    if (p->n_prompt >= engine->max_model_len
        || p->n_prompt > engine->max_prompt)
    {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST,
                                    ngx_http_pagedllm_apis[p->chat].prompt,
                                    "This model's maximum context length is "
                                    "%uD tokens, however your prompt has "
                                    "%ui tokens", engine->max_model_len,
                                    p->n_prompt);
        return NGX_ERROR;
    }

    if (p->max_tokens == 0) {
        p->max_tokens = engine->max_model_len - p->n_prompt;
    }

    if (p->min_tokens > p->max_tokens) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, "min_tokens",
                                    "'min_tokens' (%uD) must not exceed "
                                    "'max_tokens' (%uD)", p->min_tokens,
                                    p->max_tokens);
        return NGX_ERROR;
    }

    if (p->n_prompt + p->max_tokens > engine->max_model_len) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, "max_tokens",
                                    "This model's maximum context length is "
                                    "%uD tokens, however you requested %uL "
                                    "tokens (%ui in the prompt, %uD for the "
                                    "completion)", engine->max_model_len,
                                    (uint64_t) p->n_prompt + p->max_tokens,
                                    p->n_prompt, p->max_tokens);
        return NGX_ERROR;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_type_error(ngx_http_pagedllm_parse_t *ps, const char *what)
{
    ngx_http_pagedllm_error_set(ps->err, NGX_HTTP_BAD_REQUEST,
                                ps->field->name, "'%s' must be %s",
                                ps->field->name, what);
    return NGX_ERROR;
}


static ngx_int_t
ngx_http_pagedllm_f_model(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    ngx_http_pagedllm_engine_t  *engine = ps->engine;
    ngx_http_pagedllm_error_t   *err = ps->err;

    if (json_is_null(v)) {
        return NGX_OK;
    }

    if (!json_is_string(v)) {
        return ngx_http_pagedllm_type_error(ps, "a string");
    }

    if (json_string_length(v) != engine->model.len
        || ngx_strncmp(json_string_value(v), engine->model.data,
                       engine->model.len) != 0)
    {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_NOT_FOUND, "model",
                                    "The model `%s` does not exist",
                                    json_string_value(v));
        err->code = "model_not_found";
        return NGX_ERROR;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_f_prompt(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    json_t                     *first;
    ngx_http_pagedllm_error_t  *err = ps->err;

    if (json_is_string(v)) {
        return ngx_http_pagedllm_prompt_text(ps, v);
    }

    if (!json_is_array(v) || json_array_size(v) == 0) {
        return ngx_http_pagedllm_type_error(ps,
                   "a string, an array of token ids, or a one-element "
                   "array of either");
    }

    first = json_array_get(v, 0);

    if (json_is_integer(first)) {
        return ngx_http_pagedllm_prompt_ids(ps, v);
    }

    if (json_array_size(v) > 1
        && (json_is_string(first) || json_is_array(first)))
    {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, "prompt",
                                    "Batched prompts are not supported: "
                                    "send one prompt per request");
        return NGX_ERROR;
    }

    if (json_is_string(first)) {
        return ngx_http_pagedllm_prompt_text(ps, first);
    }

    if (json_is_array(first) && json_array_size(first) > 0) {
        return ngx_http_pagedllm_prompt_ids(ps, first);
    }

    return ngx_http_pagedllm_type_error(ps,
               "a string, an array of token ids, or a one-element array "
               "of either");
}


static ngx_int_t
ngx_http_pagedllm_prompt_text(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    size_t       len;
    const char  *s;

    s = json_string_value(v);
    len = json_string_length(v);

    if (!pl_utf8_valid(s, len)) {
        ngx_http_pagedllm_error_set(ps->err, NGX_HTTP_BAD_REQUEST, "prompt",
                                    "'prompt' is not valid UTF-8");
        return NGX_ERROR;
    }

    ps->params->text = (u_char *) s;
    ps->params->text_len = len;

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_prompt_ids(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    ngx_http_pagedllm_params_t  *p = ps->params;

    if (ngx_http_pagedllm_token_ids(ps, v, "a string, an array of token ids, "
                                    "or a one-element array of either",
                                    &p->prompt)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    p->n_prompt = json_array_size(v);

    return NGX_OK;
}


/* The ids of an array checked against the vocabulary; what: the field's
   type, for the error an element that is no integer gets. */
static ngx_int_t
ngx_http_pagedllm_token_ids(ngx_http_pagedllm_parse_t *ps, json_t *v,
    const char *what, int32_t **out)
{
    size_t       i;
    json_t      *e;
    int32_t     *ids;
    json_int_t   id;
    const char  *name;

    ids = ngx_palloc(ps->pool, json_array_size(v) * sizeof(int32_t) + 1);
    if (ids == NULL) {
        ngx_http_pagedllm_error_set(ps->err, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                    NULL, "out of memory");
        return NGX_ERROR;
    }

    name = ps->field->name;

    json_array_foreach(v, i, e) {
        if (!json_is_integer(e)) {
            return ngx_http_pagedllm_type_error(ps, what);
        }

        id = json_integer_value(e);

        if (id < 0 || id >= (json_int_t) ps->engine->vocab_size) {
            ngx_http_pagedllm_error_set(ps->err, NGX_HTTP_BAD_REQUEST, name,
                                        "Token id %L in '%s' is out of "
                                        "vocabulary (0..%uD)", (int64_t) id,
                                        name, ps->engine->vocab_size - 1);
            return NGX_ERROR;
        }

        ids[i] = (int32_t) id;
    }

    *out = ids;

    return NGX_OK;
}







/*
 * A sampling parameter: its type and range from its row of PL_PARAMS (an
 * integral number such as 2.0 is an integer).  A negative integer, top_k's
 * -1, is "off" and goes on as 0.  post: a PL_SUBMIT_* flag it sets too.
 */
static ngx_int_t
ngx_http_pagedllm_f_param(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    double             d, ctx, vocab;
    uint32_t          *flag;
    const char        *name;
    const pl_param_t  *row;

    if (json_is_null(v)) {
        return NGX_OK;
    }

    row = pl_param(ps->field->param);
    name = ps->field->name;
    d = json_number_value(v);

    if (!json_is_number(v) || (row->type == PL_PARAM_INT && d != floor(d)))
    {
        return ngx_http_pagedllm_type_error(ps, row->type == PL_PARAM_INT
                                                ? "an integer" : "a number");
    }

    ctx = ps->engine->max_model_len;
    vocab = ps->engine->vocab_size;

    if (!pl_param_in_range(row, d, ctx, vocab)) {

        if (row->type == PL_PARAM_INT) {
            ngx_http_pagedllm_error_set(ps->err, NGX_HTTP_BAD_REQUEST, name,
                                        "'%s' must be an integer from %L to "
                                        "%L, got %.0f", name,
                                        (int64_t) row->lo,
                                        (int64_t) pl_param_hi(row, ctx,
                                                              vocab), d);
        } else {
            ngx_http_pagedllm_error_set(ps->err, NGX_HTTP_BAD_REQUEST, name,
                                        "'%s' must be in %s%.1f, %.1f], got "
                                        "%.3f", name,
                                        row->open_lo ? "(" : "[", row->lo,
                                        row->hi, d);
        }

        return NGX_ERROR;
    }

    ngx_http_pagedllm_param_set(ps->params, ps->field->param, d);

    flag = ps->field->post;

    if (flag) {
        ps->params->flags |= *flag;
    }

    return NGX_OK;
}


/* Parameter id set to v, in its type; negative integers are 0 ("off"). */
static void
ngx_http_pagedllm_param_set(ngx_http_pagedllm_params_t *p, pl_param_id_t id,
    double v)
{
    u_char  *slot;

    slot = (u_char *) p + ngx_http_pagedllm_param_offsets[id];

    if (pl_param(id)->type == PL_PARAM_FLOAT) {
        *(float *) slot = (float) v;

    } else {
        *(uint32_t *) slot = v < 0 ? 0 : (uint32_t) v;
    }
}


static ngx_int_t
ngx_http_pagedllm_f_seed(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    ngx_http_pagedllm_params_t  *p = ps->params;

    if (json_is_null(v)) {
        return NGX_OK;
    }

    if (!json_is_integer(v)) {
        return ngx_http_pagedllm_type_error(ps, "an integer");
    }

    p->seed = (uint64_t) json_integer_value(v);
    p->flags |= PL_SUBMIT_HAS_SEED;

    return NGX_OK;
}



static ngx_int_t
ngx_http_pagedllm_bool(ngx_http_pagedllm_parse_t *ps, json_t *v,
    ngx_uint_t *out)
{
    if (json_is_null(v)) {
        *out = 0;
        return NGX_OK;
    }

    if (!json_is_boolean(v)) {
        return ngx_http_pagedllm_type_error(ps, "a boolean");
    }

    *out = json_is_true(v);

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_f_stream(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    ngx_uint_t                   b;
    ngx_http_pagedllm_params_t  *p = ps->params;

    if (ngx_http_pagedllm_bool(ps, v, &b) != NGX_OK) {
        return NGX_ERROR;
    }

    p->stream = b;

    return NGX_OK;
}


/* early_stopping: true, false or "never" */
static ngx_int_t
ngx_http_pagedllm_f_early_stopping(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    ngx_http_pagedllm_params_t  *p = ps->params;

    if (json_is_string(v) && ngx_strcmp(json_string_value(v), "never") == 0)
    {
        p->early_stopping = PL_EARLY_STOPPING_NEVER;
        return NGX_OK;
    }

    if (!json_is_boolean(v) && !json_is_null(v)) {
        return ngx_http_pagedllm_type_error(ps, "true, false or \"never\"");
    }

    p->early_stopping = json_is_true(v) ? PL_EARLY_STOPPING_TRUE
                                        : PL_EARLY_STOPPING_FALSE;

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_f_stream_options(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    json_t                      *e;
    ngx_uint_t                   b;
    const char                  *key;
    ngx_http_pagedllm_params_t  *p = ps->params;
    ngx_http_pagedllm_error_t   *err = ps->err;

    if (json_is_null(v)) {
        return NGX_OK;
    }

    if (!json_is_object(v)) {
        return ngx_http_pagedllm_type_error(ps, "an object");
    }

    json_object_foreach(v, key, e) {
        if (ngx_strcmp(key, "include_usage") != 0) {
            ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST,
                                        "stream_options",
                                        "Unrecognized stream option: %s",
                                        key);
            return NGX_ERROR;
        }

        if (ngx_http_pagedllm_bool(ps, e, &b) != NGX_OK) {
            return NGX_ERROR;
        }

        p->include_usage = b;
    }

    return NGX_OK;
}


/* A boolean that, true, sets the PL_SUBMIT_* flag post points to. */
static ngx_int_t
ngx_http_pagedllm_f_flag(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    uint32_t                    *flag;
    ngx_uint_t                   b;
    ngx_http_pagedllm_params_t  *p = ps->params;

    if (ngx_http_pagedllm_bool(ps, v, &b) != NGX_OK) {
        return NGX_ERROR;
    }

    flag = ps->field->post;

    if (b) {
        p->flags |= *flag;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_f_user(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    if (!json_is_null(v) && !json_is_string(v)) {
        return ngx_http_pagedllm_type_error(ps, "a string");
    }

    return NGX_OK;
}


/* Accepted only when it asks for nothing: null, false, "", [] or {}, or
   the value the field's post spells in JSON (what OpenAI does without the
   feature, e.g. a response_format of {"type": "text"}). */
static ngx_int_t
ngx_http_pagedllm_f_unsupported(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    json_t                     *neutral;
    ngx_http_pagedllm_error_t  *err = ps->err;

    if (json_is_null(v) || json_is_false(v)
        || (json_is_string(v) && json_string_length(v) == 0)
        || (json_is_array(v) && json_array_size(v) == 0)
        || (json_is_object(v) && json_object_size(v) == 0))
    {
        return NGX_OK;
    }

    if (ps->field->post != NULL) {
        neutral = ngx_http_pagedllm_json_pool(ps->pool,
                      json_loads(ps->field->post, JSON_DECODE_ANY, NULL));

        if (neutral != NULL && json_equal(v, neutral)) {
            return NGX_OK;
        }
    }

    ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST,
                                ps->field->name,
                                "'%s' is not supported",
                                ps->field->name);
    return NGX_ERROR;
}



/* A token id written as a decimal string, as logit_bias keys are. */
static ngx_int_t
ngx_http_pagedllm_id_key(const char *key, ngx_http_pagedllm_engine_t *engine,
    int32_t *id)
{
    size_t     len;
    ngx_int_t  n;

    len = ngx_strlen(key);

    if (len == 0 || len > 10) {
        return NGX_ERROR;
    }

    n = ngx_atoi((u_char *) key, len);

    if (n == NGX_ERROR || (uint64_t) n >= engine->vocab_size) {
        return NGX_ERROR;
    }

    *id = (int32_t) n;

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_f_logit_bias(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    double                       d;
    json_t                      *e;
    const char                  *key;
    ngx_http_pagedllm_params_t  *p = ps->params;
    ngx_http_pagedllm_engine_t  *engine = ps->engine;
    ngx_pool_t                  *pool = ps->pool;
    ngx_http_pagedllm_error_t   *err = ps->err;

    if (json_is_null(v)) {
        return NGX_OK;
    }

    if (!json_is_object(v)) {
        return ngx_http_pagedllm_type_error(ps, "an object of token ids "
                                            "to numbers");
    }

    if (json_object_size(v) > PL_MAX_LOGIT_BIAS) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, "logit_bias",
                                    "'logit_bias' may hold at most %d "
                                    "tokens", PL_MAX_LOGIT_BIAS);
        return NGX_ERROR;
    }

    p->bias = ngx_palloc(pool, json_object_size(v) * sizeof(pl_bias_pair_t)
                               + 1);
    if (p->bias == NULL) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                    NULL, "out of memory");
        return NGX_ERROR;
    }

    json_object_foreach(v, key, e) {
        if (ngx_http_pagedllm_id_key(key, engine, &p->bias[p->n_bias].id)
            != NGX_OK)
        {
            ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST,
                                        "logit_bias",
                                        "'logit_bias' key \"%s\" is not a "
                                        "token id (0..%uD)", key,
                                        engine->vocab_size - 1);
            return NGX_ERROR;
        }

        if (!json_is_number(e)) {
            return ngx_http_pagedllm_type_error(ps, "an object of token ids "
                                                "to numbers");
        }

        d = json_number_value(e);

        if (d < PL_PARAM_BIAS_LO || d > PL_PARAM_BIAS_HI) {
            ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST,
                                        "logit_bias",
                                        "'logit_bias' values must be in "
                                        "[%d, %d], got %.3f",
                                        PL_PARAM_BIAS_LO, PL_PARAM_BIAS_HI,
                                        d);
            return NGX_ERROR;
        }

        p->bias[p->n_bias++].bias = (float) d;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_stop_string(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    ngx_http_pagedllm_params_t  *p = ps->params;
    ngx_http_pagedllm_error_t   *err = ps->err;

    size_t  len;

    if (!json_is_string(v)) {
        return ngx_http_pagedllm_type_error(ps, "a string or an array of "
                                            "up to 4 strings");
    }

    len = json_string_length(v);

    if (len == 0 || len > NGX_HTTP_PAGEDLLM_STOP_LEN) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, "stop",
                                    "each 'stop' string must be 1 to %d "
                                    "bytes long", NGX_HTTP_PAGEDLLM_STOP_LEN);
        return NGX_ERROR;
    }

    p->stop[p->n_stop].data = ngx_pnalloc(ps->pool, len);
    if (p->stop[p->n_stop].data == NULL) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                    NULL, "out of memory");
        return NGX_ERROR;
    }

    ngx_memcpy(p->stop[p->n_stop].data, json_string_value(v), len);
    p->stop[p->n_stop].len = len;
    p->n_stop++;

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_f_stop(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    size_t                      i;
    json_t                     *e;
    ngx_http_pagedllm_error_t  *err = ps->err;

    if (json_is_null(v)) {
        return NGX_OK;
    }

    if (!json_is_array(v)) {
        return ngx_http_pagedllm_stop_string(ps, v);
    }

    if (json_array_size(v) > NGX_HTTP_PAGEDLLM_MAX_STOP) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, "stop",
                                    "'stop' may hold at most %d strings",
                                    NGX_HTTP_PAGEDLLM_MAX_STOP);
        return NGX_ERROR;
    }

    json_array_foreach(v, i, e) {
        if (ngx_http_pagedllm_stop_string(ps, e) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_f_stop_token_ids(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    ngx_http_pagedllm_params_t  *p = ps->params;
    ngx_http_pagedllm_error_t   *err = ps->err;

    if (json_is_null(v)) {
        return NGX_OK;
    }

    if (!json_is_array(v)) {
        return ngx_http_pagedllm_type_error(ps, "an array of token ids");
    }

    if (json_array_size(v) > PL_MAX_STOP_IDS) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST,
                                    "stop_token_ids",
                                    "'stop_token_ids' may hold at most %d "
                                    "ids", PL_MAX_STOP_IDS);
        return NGX_ERROR;
    }

    if (ngx_http_pagedllm_token_ids(ps, v, "an array of token ids",
                                    &p->stop_ids)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    p->n_stop_ids = json_array_size(v);

    return NGX_OK;
}


/* The text of a message's content: a string, or an array of text parts
   joined by newlines (as vLLM does, a string the pool owns); NULL when it
   is neither. */
static json_t *
ngx_http_pagedllm_content(json_t *c, ngx_pool_t *pool)
{
    u_char  *buf, *b;
    size_t   i, len;
    json_t  *part, *type, *text;

    if (json_is_string(c)) {
        return c;
    }

    if (!json_is_array(c)) {
        return NULL;
    }

    len = 0;

    json_array_foreach(c, i, part) {
        type = json_object_get(part, "type");
        text = json_object_get(part, "text");

        if (!json_is_string(type)
            || ngx_strcmp(json_string_value(type), "text") != 0
            || !json_is_string(text) || json_object_size(part) != 2)
        {
            return NULL;
        }

        len += json_string_length(text) + 1;
    }

    buf = ngx_pnalloc(pool, len + 1);
    if (buf == NULL) {
        return NULL;
    }

    b = buf;

    json_array_foreach(c, i, part) {
        text = json_object_get(part, "text");
        if (i > 0) {
            *b++ = '\n';
        }
        b = ngx_cpymem(b, json_string_value(text), json_string_length(text));
    }

    return ngx_http_pagedllm_json_pool(pool,
                                       json_stringn((char *) buf, b - buf));
}


/* Text a client wrote may not spell a special token of the tokenizer:
   the rendered prompt is tokenized with special tokens parsed (for the
   template's own), so such text would become a control token. */
static ngx_int_t
ngx_http_pagedllm_no_specials(json_t *v, ngx_http_pagedllm_tok_t *tok,
    ngx_http_pagedllm_error_t *err)
{
    size_t       len;
    ngx_uint_t   i;
    const char  *s;

    if (v == NULL) {
        return NGX_OK;
    }

    s = json_string_value(v);
    len = json_string_length(v);

    for (i = 0; i < tok->n_specials; i++) {
        if (memmem(s, len, tok->specials[i].data, tok->specials[i].len)
            != NULL)
        {
            ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST,
                                        "messages",
                                        "'messages' may not contain the "
                                        "special token text \"%V\"",
                                        &tok->specials[i]);
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* One message checked and reduced to {role, content[, name]}. */
static json_t *
ngx_http_pagedllm_message(json_t *m, ngx_pool_t *pool,
    ngx_http_pagedllm_error_t *err)
{
    json_t      *role, *content, *name, *out;
    const char  *r, *key;
    json_t      *v;

    role = json_object_get(m, "role");
    r = json_string_value(role);

    if (r == NULL || (ngx_strcmp(r, "system") != 0
                      && ngx_strcmp(r, "developer") != 0
                      && ngx_strcmp(r, "user") != 0
                      && ngx_strcmp(r, "assistant") != 0))
    {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, "messages",
                                    "each message needs a 'role' of "
                                    "\"system\", \"developer\", \"user\" "
                                    "or \"assistant\"");
        return NULL;
    }

    json_object_foreach(m, key, v) {
        if (ngx_strcmp(key, "role") != 0 && ngx_strcmp(key, "content") != 0
            && ngx_strcmp(key, "name") != 0)
        {
            ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, "messages",
                                        "message field '%s' is not "
                                        "supported", key);
            return NULL;
        }
    }

    name = json_object_get(m, "name");
    content = ngx_http_pagedllm_content(json_object_get(m, "content"), pool);

    if (content == NULL || (name && !json_is_string(name))) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, "messages",
                                    "a message's 'content' must be a string "
                                    "or an array of text parts, its 'name' "
                                    "a string");
        return NULL;
    }

    /* OpenAI's newer name for the system message: chat templates know
       only "system" */
    out = ngx_strcmp(r, "developer") == 0
          ? json_pack("{s:s,s:O}", "role", "system", "content", content)
          : json_pack("{s:O,s:O}", "role", role, "content", content);

    out = ngx_http_pagedllm_json_pool(pool, out);

    if (out == NULL || (name && json_object_set(out, "name", name) != 0)) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                    NULL, "out of memory");
        return NULL;
    }

    return out;
}


/* The conversation rendered by the model's chat template and tokenized;
   special tokens in the rendered text are the template's own. */
static ngx_int_t
ngx_http_pagedllm_f_messages(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    size_t                       i;
    json_t                      *msgs, *m, *one;
    ngx_http_pagedllm_params_t  *p = ps->params;
    ngx_http_pagedllm_engine_t  *engine = ps->engine;
    ngx_http_pagedllm_error_t   *err = ps->err;

    if (engine->tok->chat == NULL) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, NULL, "%s",
                                    engine->tok->chat_error);
        return NGX_ERROR;
    }

    if (!json_is_array(v) || json_array_size(v) == 0) {
        return ngx_http_pagedllm_type_error(ps, "a non-empty array of "
                                            "messages");
    }

    msgs = ngx_http_pagedllm_json_pool(ps->pool, json_array());
    if (msgs == NULL) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                    NULL, "out of memory");
        return NGX_ERROR;
    }

    json_array_foreach(v, i, m) {
        if (!json_is_object(m)) {
            return ngx_http_pagedllm_type_error(ps, "an array of objects");
        }

        one = ngx_http_pagedllm_message(m, ps->pool, err);
        if (one == NULL) {
            return NGX_ERROR;
        }

        if (json_array_append(msgs, one) != 0) {
            ngx_http_pagedllm_error_set(err, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                        NULL, "out of memory");
            return NGX_ERROR;
        }

        p->text_len += json_string_length(json_object_get(one, "content"));
    }

    p->messages = msgs;

    return NGX_OK;
}


/* job is to tokenize params' text with tok; the pool frees its ids. */
ngx_int_t
ngx_http_pagedllm_tokenize_init(ngx_pool_t *pool,
    ngx_http_pagedllm_tokenize_t *job, ngx_http_pagedllm_tok_t *tok,
    ngx_http_pagedllm_params_t *params)
{
    ngx_pool_cleanup_t  *cln;

    ngx_memzero(job, sizeof(ngx_http_pagedllm_tokenize_t));
    job->tok = tok;
    job->params = params;

    cln = ngx_pool_cleanup_add(pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    cln->handler = ngx_http_pagedllm_ids_cleanup;
    cln->data = job;

    return NGX_OK;
}


static void
ngx_http_pagedllm_ids_cleanup(void *data)
{
    ngx_http_pagedllm_tokenize_t  *job = data;

    ngx_free(job->ids);
}


/*
 * The job's prompt text, or its conversation rendered by the chat template
 * (whose special tokens are its own: the text of a message may not spell
 * one, or it would become a control token), tokenized.  Runs on a thread: it
 * touches only the job, its parameters and the held tokenizer.
 */
void
ngx_http_pagedllm_tokenize(ngx_http_pagedllm_tokenize_t *job, ngx_log_t *log)
{
    int                          n, chat;
    char                        *text, rerr[256];
    size_t                       i, len, cap;
    json_t                      *m;
    const char                  *name;
    ngx_http_pagedllm_params_t  *p = job->params;

    chat = (p->messages != NULL);
    name = chat ? "messages" : "prompt";
    job->rc = NGX_ERROR;

    if (chat) {
        json_array_foreach(p->messages, i, m) {
            if (ngx_http_pagedllm_no_specials(json_object_get(m, "content"),
                                              job->tok, &job->err)
                != NGX_OK
                || ngx_http_pagedllm_no_specials(json_object_get(m, "name"),
                                                 job->tok, &job->err)
                   != NGX_OK)
            {
                return;
            }
        }

        text = pl_chat_render(job->tok->chat, p->messages, 1, NULL, rerr,
                              sizeof(rerr));
        if (text == NULL) {
            ngx_http_pagedllm_error_set(&job->err, NGX_HTTP_BAD_REQUEST,
                                        name, "The chat template failed: %s",
                                        rerr);
            return;
        }

        len = ngx_strlen(text);

    } else {
        text = (char *) p->text;
        len = p->text_len;
    }

    cap = len + PL_TOKENIZER_EXTRA;

    job->ids = ngx_alloc(cap * sizeof(int32_t), log);
    n = job->ids ? pl_tokenizer_encode(job->tok->tokenizer, text, len, !chat,
                                       chat, job->ids, cap)
                 : -3;

    if (chat) {
        free(text);
    }

    if (n <= 0) {
        ngx_http_pagedllm_error_set(&job->err,
                                    n == -3 ? NGX_HTTP_INTERNAL_SERVER_ERROR
                                            : NGX_HTTP_BAD_REQUEST,
                                    name,
                                    n == 0 ? "'%s' must not be empty"
                                    : n == -1 ? "'%s' is not valid UTF-8"
                                    : "'%s' cannot be tokenized", name);
        return;
    }

    job->n_ids = n;
    job->rc = NGX_OK;
}
