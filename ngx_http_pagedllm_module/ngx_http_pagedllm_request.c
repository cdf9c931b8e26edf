
/*
 * ngx_http_pagedllm_request: the OpenAI completions and chat completions
 * requests in.
 *
 * The request body is parsed with jansson and every field is checked
 * against a table of the fields we know (one per endpoint,
 * ngx_http_pagedllm_fields.c); a field we do not support that asks for
 * something is refused by name rather than ignored.  Here: the body
 * decoded (a body that is not valid UTF-8 names the field at fault), its
 * fields walked, the fields that must be there or only go together
 * checked, defaults filled in, and the length checked once tokenized.
 */


#include "ngx_http_pagedllm_module.h"
#include "ngx_http_pagedllm_request.h"
#include "ngx_http_pagedllm_tools.h"

#include <jansson.h>


#define NGX_HTTP_PAGEDLLM_MARKER      "\xef\xbf\xbe"   /* U+FFFE */
#define NGX_HTTP_PAGEDLLM_MARKER_LEN  3

/* a string may hold U+0000 ("\u0000"): text is passed with its length */
#define NGX_HTTP_PAGEDLLM_JSON_FLAGS  (JSON_REJECT_DUPLICATES|JSON_ALLOW_NUL)


static void ngx_http_pagedllm_decode_cleanup(void *data);
static json_t *ngx_http_pagedllm_load(ngx_pool_t *pool,
    ngx_http_pagedllm_decode_t *d, ngx_http_pagedllm_error_t *err);
static const char *ngx_http_pagedllm_json_error(json_error_t *jerr);
static u_char *ngx_http_pagedllm_sanitize(ngx_pool_t *pool, u_char *body,
    size_t len, size_t *out_len);
static ngx_int_t ngx_http_pagedllm_find_marker(json_t *root,
    ngx_http_pagedllm_error_t *err);
static ngx_int_t ngx_http_pagedllm_has_marker(json_t *v);
static ngx_int_t ngx_http_pagedllm_fields(ngx_http_pagedllm_parse_t *ps,
    json_t *root, ngx_http_pagedllm_field_t *own,
    ngx_http_pagedllm_field_t *common);
static ngx_http_pagedllm_field_t *ngx_http_pagedllm_find_field(
    ngx_http_pagedllm_field_t *known, const char *key);
static ngx_int_t ngx_http_pagedllm_required(json_t *root,
    ngx_http_pagedllm_params_t *p, ngx_http_pagedllm_error_t *err);
static ngx_uint_t ngx_http_pagedllm_given(json_t *root, const char *name);
static ngx_int_t ngx_http_pagedllm_beam_search(json_t *root,
    ngx_http_pagedllm_params_t *p, ngx_http_pagedllm_error_t *err);
static void ngx_http_pagedllm_defaults(json_t *root,
    ngx_http_pagedllm_params_t *p, ngx_http_pagedllm_engine_t *engine);


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
        d->root = json_loadb((char *) d->body, d->len,
                             NGX_HTTP_PAGEDLLM_JSON_FLAGS, &d->jerr);
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
    p->add_special = !chat;          /* a chat template writes its own */
    p->add_generation_prompt = 1;

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

    rc = ngx_http_pagedllm_fields(&ps, root, api->fields,
                                  ngx_http_pagedllm_common_fields);
    if (rc == NGX_OK) {
        rc = ngx_http_pagedllm_required(root, p, err);
    }

    if (rc == NGX_OK) {
        rc = ngx_http_pagedllm_tools_resolve(&ps);
    }

    if (rc != NGX_OK) {
        return NGX_ERROR;
    }

    if (p->prompt != NULL) {
        p->n_prompt = ngx_http_pagedllm_truncate(p, p->prompt, p->n_prompt);
    }

    for (id = 0; id < p->n_parts; id++) {
        if (p->parts[id].ids != NULL) {
            p->parts[id].n_ids = ngx_http_pagedllm_truncate(p,
                                     p->parts[id].ids, p->parts[id].n_ids);
        }
    }

    ngx_http_pagedllm_defaults(root, p, engine);

    return NGX_OK;
}


/*
 * POST /tokenize or /detokenize, as vLLM takes them: a conversation when
 * "messages" is there (the template's special tokens are its own, so
 * add_special_tokens defaults to false), else a prompt (true); or the ids
 * to decode.
 */
ngx_int_t
ngx_http_pagedllm_parse_tokens(ngx_http_request_t *r,
    ngx_http_pagedllm_decode_t *d, ngx_http_pagedllm_engine_t *engine,
    ngx_uint_t detokenize, ngx_http_pagedllm_params_t *p,
    ngx_http_pagedllm_error_t *err)
{
    json_t                     *root;
    const char                 *name;
    ngx_http_pagedllm_field_t  *own;
    ngx_http_pagedllm_parse_t   ps;

    ngx_memzero(p, sizeof(ngx_http_pagedllm_params_t));
    p->add_generation_prompt = 1;

    root = ngx_http_pagedllm_load(r->pool, d, err);
    if (root == NULL) {
        return NGX_ERROR;
    }

    if (detokenize) {
        own = ngx_http_pagedllm_detokenize_fields;
        name = "tokens";

    } else if (json_object_get(root, "messages") != NULL) {
        own = ngx_http_pagedllm_tokenize_chat_fields;
        name = "messages";

    } else {
        own = ngx_http_pagedllm_tokenize_fields;
        name = "prompt";
        p->add_special = 1;
    }

    ps.field = NULL;
    ps.params = p;
    ps.engine = engine;
    ps.pool = r->pool;
    ps.err = err;

    if (ngx_http_pagedllm_fields(&ps, root, own, NULL) != NGX_OK) {
        return NGX_ERROR;
    }

    if (!ngx_http_pagedllm_given(root, name)) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, name,
                                    "'%s' is a required property", name);
        return NGX_ERROR;
    }

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

        d->root = json_loadb((char *) body, len,
                             NGX_HTTP_PAGEDLLM_JSON_FLAGS, &d->jerr);
    }

    if (d->root == NULL) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, NULL,
                                    "We could not parse the JSON body of "
                                    "your request: %s (line %d, column %d)",
                                    ngx_http_pagedllm_json_error(&d->jerr),
                                    d->jerr.line, d->jerr.column);
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


/* What is wrong with a body jansson refused, in our words (its own
   texts change between versions and quote its internals). */
static const char *
ngx_http_pagedllm_json_error(json_error_t *jerr)
{
    switch (json_error_code(jerr)) {

    case json_error_end_of_input_expected:
        return "more follows the JSON value";

    case json_error_premature_end_of_input:
        return "the body ends inside the JSON value";

    case json_error_duplicate_key:
        return "an object holds the same key twice";

    case json_error_null_byte_in_key:
        return "an object key holds U+0000";

    case json_error_numeric_overflow:
        return "a number is too large";

    case json_error_invalid_utf8:
        return "the body is not valid UTF-8";

    default:
        return "the body is not valid JSON";
    }
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
    ngx_http_pagedllm_field_t *own, ngx_http_pagedllm_field_t *common)
{
    json_t                     *v;
    const char                 *key;
    ngx_http_pagedllm_field_t  *f;

    json_object_foreach(root, key, v) {

        f = ngx_http_pagedllm_find_field(own, key);

        if (f == NULL && common != NULL) {
            f = ngx_http_pagedllm_find_field(common, key);
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

    if (p->prompt == NULL && p->text == NULL && p->messages == NULL
        && p->parts == NULL)
    {
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

    if (p->continue_final && json_is_true(json_object_get(root,
                                               "add_generation_prompt")))
    {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST,
                                    "continue_final_message",
                                    "Cannot set both 'continue_final_message'"
                                    " and 'add_generation_prompt' to true");
        return NGX_ERROR;
    }

    if (ngx_http_pagedllm_prompt_logprobs(p, err) != NGX_OK) {
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
