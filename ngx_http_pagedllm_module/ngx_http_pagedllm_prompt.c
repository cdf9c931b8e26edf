
/*
 * ngx_http_pagedllm_prompt: the prompt to tokens.  A chat message is
 * checked and reduced to what a chat template reads; text, or the
 * conversation rendered by the model's chat template, is tokenized here,
 * in the worker, with the engine's tokenizer, by
 * ngx_http_pagedllm_tokenize(): it is thread-safe, so that the handler
 * can run a long prompt's on the thread pool.  POST /detokenize's ids are
 * decoded back to text the same way, by ngx_http_pagedllm_detokenize().
 */


#include "ngx_http_pagedllm_module.h"
#include "ngx_http_pagedllm_request.h"
#include "ngx_http_pagedllm_tools.h"

#include <jansson.h>


static void ngx_http_pagedllm_job_cleanup(void *data);
static ngx_int_t ngx_http_pagedllm_continue_final(
    ngx_http_pagedllm_params_t *p, char *text, size_t *len,
    ngx_http_pagedllm_error_t *err);
static u_char *ngx_http_pagedllm_rfind(u_char *text, size_t len, u_char *s,
    size_t n);


/* The text of a message's content: a string, or an array of text parts
   joined by newlines (as vLLM does, a string the pool owns); NULL when it
   is neither. */
json_t *
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


/* Text a client wrote (a string, or the strings anywhere in an array or
   object) may not spell a special token of the tokenizer: the rendered
   prompt is tokenized with special tokens parsed (for the template's
   own), so such text would become a control token.  Nor may it hold
   U+0000, where the rendered prompt would end.  name: the field. */
ngx_int_t
ngx_http_pagedllm_no_specials(json_t *v, ngx_http_pagedllm_tok_t *tok,
    const char *name, ngx_http_pagedllm_error_t *err)
{
    size_t       len;
    ngx_uint_t   i;
    const char  *s, *key;
    json_t      *e;

    if (json_is_array(v)) {
        json_array_foreach(v, i, e) {
            if (ngx_http_pagedllm_no_specials(e, tok, name, err) != NGX_OK) {
                return NGX_ERROR;
            }
        }
    }

    if (json_is_object(v)) {
        json_object_foreach(v, key, e) {
            if (ngx_http_pagedllm_no_specials(e, tok, name, err) != NGX_OK) {
                return NGX_ERROR;
            }
        }
    }

    if (!json_is_string(v)) {
        return NGX_OK;
    }

    s = json_string_value(v);
    len = json_string_length(v);

    if (ngx_strlen(s) != len) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, name,
                                    "'%s' may not contain U+0000: the chat "
                                    "template renders text up to it", name);
        return NGX_ERROR;
    }

    for (i = 0; i < tok->n_specials; i++) {
        if (memmem(s, len, tok->specials[i].data, tok->specials[i].len)
            != NULL)
        {
            ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, name,
                                        "'%s' may not contain the special "
                                        "token text \"%V\"", name,
                                        &tok->specials[i]);
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* One message checked and reduced to {role, content[, name]}. */
json_t *
ngx_http_pagedllm_message(json_t *m, ngx_pool_t *pool,
    ngx_http_pagedllm_error_t *err)
{
    json_t      *role, *content, *name, *out;
    const char  *r, *key;
    json_t      *v;

    if (ngx_http_pagedllm_tools_message_is(m)) {
        return ngx_http_pagedllm_tools_message(m, pool, err);
    }

    role = json_object_get(m, "role");
    r = json_string_value(role);

    if (r == NULL || ngx_strlen(r) != json_string_length(role)
        || (ngx_strcmp(r, "system") != 0
                      && ngx_strcmp(r, "developer") != 0
                      && ngx_strcmp(r, "user") != 0
                      && ngx_strcmp(r, "assistant") != 0))
    {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, "messages",
                                    "each message needs a 'role' of "
                                    "\"system\", \"developer\", \"user\", "
                                    "\"assistant\" or \"tool\"");
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


/* job is to tokenize params' text, or decode its ids, with tok; the pool
   frees what it makes. */
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

    cln->handler = ngx_http_pagedllm_job_cleanup;
    cln->data = job;

    return NGX_OK;
}


static void
ngx_http_pagedllm_job_cleanup(void *data)
{
    ngx_http_pagedllm_tokenize_t  *job = data;

    ngx_free(job->ids);
    ngx_free(job->text);
}


/*
 * vLLM's continue_final_message: the rendered conversation ends where the
 * last message's content last appears in it (or that content trimmed, as
 * a template may trim it), so the model goes on with that message rather
 * than starting a new one.
 */
static ngx_int_t
ngx_http_pagedllm_continue_final(ngx_http_pagedllm_params_t *p, char *text,
    size_t *len, ngx_http_pagedllm_error_t *err)
{
    json_t      *c;
    size_t       n;
    u_char      *end;
    const char  *s;

    c = json_object_get(json_array_get(p->messages,
                                       json_array_size(p->messages) - 1),
                        "content");
    s = json_string_value(c);
    n = json_string_length(c);

    end = ngx_http_pagedllm_rfind((u_char *) text, *len, (u_char *) s, n);

    while (end == NULL && n && (s[n - 1] == ' ' || s[n - 1] == '\n')) {
        n--;
    }

    while (end == NULL && n && (s[0] == ' ' || s[0] == '\n')) {
        s++;
        n--;
    }

    if (end == NULL && n) {
        end = ngx_http_pagedllm_rfind((u_char *) text, *len, (u_char *) s,
                                      n);
    }

    if (end == NULL) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST,
                                    "continue_final_message",
                                    "The final message's content is not in "
                                    "the prompt the chat template renders");
        return NGX_ERROR;
    }

    *len = end - (u_char *) text;

    return NGX_OK;
}


/* Where the last occurrence of s in text ends; NULL if it has none. */
static u_char *
ngx_http_pagedllm_rfind(u_char *text, size_t len, u_char *s, size_t n)
{
    u_char  *at, *end;

    end = NULL;

    while (n && (at = memmem(text, len, s, n)) != NULL) {
        end = at + n;
        len -= end - text;
        text = end;
    }

    return end;
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
                                              job->tok, name, &job->err)
                != NGX_OK
                || ngx_http_pagedllm_no_specials(json_object_get(m, "name"),
                                                 job->tok, name, &job->err)
                   != NGX_OK
                || ngx_http_pagedllm_no_specials(
                       json_object_get(m, "tool_calls"), job->tok, name,
                       &job->err)
                   != NGX_OK
                || ngx_http_pagedllm_no_specials(
                       json_object_get(m, "tool_call_id"), job->tok, name,
                       &job->err)
                   != NGX_OK)
            {
                return;
            }
        }

        if (ngx_http_pagedllm_no_specials(p->template_kwargs, job->tok,
                                          "chat_template_kwargs", &job->err)
            != NGX_OK)
        {
            return;
        }

        text = pl_chat_render(job->tok->chat, p->messages,
                              p->add_generation_prompt, p->template_kwargs,
                              rerr, sizeof(rerr));
        if (text == NULL) {
            ngx_http_pagedllm_error_set(&job->err, NGX_HTTP_BAD_REQUEST,
                                        name, "The chat template failed: %s",
                                        rerr);
            return;
        }

        len = ngx_strlen(text);

        if (p->continue_final
            && ngx_http_pagedllm_continue_final(p, text, &len, &job->err)
               != NGX_OK)
        {
            free(text);
            return;
        }

    } else {
        text = (char *) p->text;
        len = p->text_len;
    }

    cap = len + PL_TOKENIZER_EXTRA;

    job->ids = ngx_alloc(cap * sizeof(int32_t), log);
    n = job->ids ? pl_tokenizer_encode(job->tok->tokenizer, text, len,
                                       p->add_special, chat, job->ids, cap)
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

    job->n_ids = ngx_http_pagedllm_truncate(p, job->ids, n);
    job->rc = NGX_OK;
}


/* truncate_prompt_tokens: the last k of the n ids moved to the front */
ngx_uint_t
ngx_http_pagedllm_truncate(ngx_http_pagedllm_params_t *p, int32_t *ids,
    ngx_uint_t n)
{
    ngx_uint_t  k = p->truncate_prompt;

    if (k == 0 || n <= k) {
        return n;
    }

    ngx_memmove(ids, ids + n - k, k * sizeof(int32_t));

    return k;
}



/*
 * The job's ids decoded, special tokens included (as vLLM's /detokenize
 * does); bytes that end in an incomplete character become U+FFFD.  The
 * text is malloc()ed: a first guess of a few bytes a token, doubled while
 * it is short, up to the tokenizer's bound, so that a long list of ids
 * does not reserve its worst case.  Runs on a thread: it touches only the
 * job, its ids and the held tokenizer.
 */
void
ngx_http_pagedllm_detokenize(ngx_http_pagedllm_tokenize_t *job,
    ngx_log_t *log)
{
    long                         n;
    size_t                       cap, max;
    ngx_http_pagedllm_params_t  *p = job->params;

    job->rc = NGX_ERROR;

    max = p->n_prompt * pl_detok_max_bytes(job->tok->tokenizer) + 1;
    cap = ngx_min(p->n_prompt * 8 + 64, max);

    for ( ;; ) {
        job->text = ngx_alloc(cap, log);
        if (job->text == NULL) {
            break;
        }

        n = pl_tokenizer_decode(job->tok->tokenizer, p->prompt, p->n_prompt,
                                0, (char *) job->text, cap);
        if (n >= 0) {
            job->text_len = n;
            job->rc = NGX_OK;
            return;
        }

        ngx_free(job->text);
        job->text = NULL;

        if (cap == max) {
            break;
        }

        cap = ngx_min(cap * 2, max);
    }

    ngx_http_pagedllm_error_set(&job->err, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                "tokens", "'tokens' could not be decoded");
}
