
/*
 * ngx_http_pagedllm_tools: tool calling on /v1/chat/completions.
 *
 * In: tools (functions with a JSON Schema of their parameters),
 * tool_choice ("none", "auto", "required" or one named function) and
 * parallel_tool_calls are checked field by field, then together once the
 * body is read.  The tools go to the chat template as its "tools"
 * variable, as transformers' apply_chat_template passes them.  "required"
 * and a named function are enforced: the output is forced by the grammar
 * engine into the template's tool-call format (text/pl_tools.h) around a
 * JSON Schema of the call, whose arguments follow the function's
 * parameters, so a bad schema is a 400 naming the keyword here.  With
 * "auto", a function's parameters are checked the same way only when it
 * asks for strict.  History: tool messages (tool_call_id, content) and
 * assistant messages with tool_calls (content may be null) are reduced
 * for the template as vLLM does, each call's arguments given as an
 * object.
 *
 * Out: when a choice ends with its stop (not cut by max_tokens), unless
 * tool_choice is "none", its text is parsed in the template's format;
 * calls found become tool_calls ("call_" ids, names, the arguments' JSON
 * text), the text before them stays the content (null when blank), and
 * the finish_reason is "tool_calls".  Text that is not calls stays
 * content.  A stream holds its text back from where a call may begin, and
 * sends the calls when the choice ends as OpenAI sends them: a delta
 * with the call's index, id, type, name and empty arguments, then the
 * arguments in fragments.
 */


#include "ngx_http_pagedllm_module.h"
#include "ngx_http_pagedllm_request.h"
#include "ngx_http_pagedllm_guided.h"
#include "ngx_http_pagedllm_tools.h"

#include <jansson.h>


#define NGX_HTTP_PAGEDLLM_TOOL_NAME_MAX   64
#define NGX_HTTP_PAGEDLLM_CALL_ID_LEN     24
#define NGX_HTTP_PAGEDLLM_MISTRAL_ID_LEN  9


typedef enum {
    NGX_HTTP_PAGEDLLM_TOOLS_NONE = 0,
    NGX_HTTP_PAGEDLLM_TOOLS_AUTO,
    NGX_HTTP_PAGEDLLM_TOOLS_REQUIRED,
    NGX_HTTP_PAGEDLLM_TOOLS_NAMED
} ngx_http_pagedllm_tools_mode_e;


/* A streamed choice's calls: the deltas not sent yet, and, for a forced
   output read while it is written, how far its calls have been sent. */
typedef struct {
    ngx_array_t                  *pending;     /* of ngx_str_t, a delta each */
    pl_tools_span_t              *spans;
    size_t                        n_spans;     /* their room */
    ngx_uint_t                    calls;       /* calls announced */
    size_t                        args;        /* the last one's arguments:
                                                  bytes sent */
} ngx_http_pagedllm_tools_stream_t;


struct ngx_http_pagedllm_tools_s {
    json_t                       *tools;       /* the request's, as given */
    json_t                       *names;       /* their functions' names */
    json_t                       *choice;      /* tool_choice; NULL: absent */
    const char                   *named;       /* its function */
    json_t                      **calls;       /* per choice; NULL: none */
    ngx_http_pagedllm_tools_stream_t  *streams;  /* per choice, streamed */
    ngx_uint_t                    mode;
    pl_tools_format_t             format;
    unsigned                      parallel:1;
    unsigned                      forced:1;    /* required or named */
};


static ngx_http_pagedllm_tools_t *ngx_http_pagedllm_tools_get(
    ngx_http_pagedllm_parse_t *ps);
static ngx_int_t ngx_http_pagedllm_tools_list(ngx_http_pagedllm_parse_t *ps,
    ngx_http_pagedllm_tools_t *t, json_t *v);
static ngx_int_t ngx_http_pagedllm_tools_tool(ngx_http_pagedllm_parse_t *ps,
    json_t *tool, size_t i, json_t *names);
static ngx_uint_t ngx_http_pagedllm_tools_object_schema(json_t *schema);
static ngx_uint_t ngx_http_pagedllm_tools_name_ok(json_t *name);
static ngx_int_t ngx_http_pagedllm_tools_choice(
    ngx_http_pagedllm_parse_t *ps, ngx_http_pagedllm_tools_t *t, json_t *v);
static ngx_uint_t ngx_http_pagedllm_tools_known(json_t *names,
    const char *name);
static ngx_int_t ngx_http_pagedllm_tools_kwargs(
    ngx_http_pagedllm_parse_t *ps, ngx_http_pagedllm_tools_t *t);
static ngx_int_t ngx_http_pagedllm_tools_schemas(
    ngx_http_pagedllm_parse_t *ps, ngx_http_pagedllm_tools_t *t);
static ngx_uint_t ngx_http_pagedllm_tools_forces(
    ngx_http_pagedllm_tools_t *t, json_t *fn);
static int ngx_http_pagedllm_tools_translate(json_t *schema,
    pl_gtext_t *text, char *why, size_t len);
static ngx_int_t ngx_http_pagedllm_tools_force(
    ngx_http_pagedllm_parse_t *ps, ngx_http_pagedllm_tools_t *t);
static json_t *ngx_http_pagedllm_tools_calls_in(json_t *calls,
    ngx_pool_t *pool);
static ngx_http_pagedllm_tools_t *ngx_http_pagedllm_tools_active(
    ngx_http_pagedllm_ctx_t *ctx);
static void ngx_http_pagedllm_tools_cut(ngx_http_pagedllm_choice_t *ch,
    size_t len);
static ngx_int_t ngx_http_pagedllm_tools_ids(json_t *calls,
    pl_tools_format_t format);
static ngx_int_t ngx_http_pagedllm_tools_deltas(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, json_t *calls);
static ngx_int_t ngx_http_pagedllm_tools_progress(
    ngx_http_pagedllm_ctx_t *ctx, ngx_http_pagedllm_choice_t *ch);
static ngx_int_t ngx_http_pagedllm_tools_spans(ngx_pool_t *pool,
    ngx_http_pagedllm_tools_stream_t *st, ngx_http_pagedllm_tools_t *t,
    ngx_http_pagedllm_choice_t *ch, size_t *n);
static ngx_array_t *ngx_http_pagedllm_tools_pending(
    ngx_http_pagedllm_ctx_t *ctx, ngx_http_pagedllm_choice_t *ch);
static ngx_int_t ngx_http_pagedllm_tools_announce(ngx_array_t *a,
    ngx_uint_t index, json_t *id, const char *name, size_t len);
static ngx_int_t ngx_http_pagedllm_tools_fragment(ngx_array_t *a,
    ngx_uint_t index, const char *args, size_t len);
static ngx_int_t ngx_http_pagedllm_tools_delta(ngx_array_t *a, json_t *d);
static size_t ngx_http_pagedllm_tools_whole_chars(const u_char *p, size_t n);
static ngx_int_t ngx_http_pagedllm_tools_error(ngx_http_pagedllm_parse_t *ps,
    const char *param, const char *fmt, ...);


static ngx_http_pagedllm_field_t  ngx_http_pagedllm_tool_choice_field =
    { "tool_choice", NULL, -1, NULL };

static const char  ngx_http_pagedllm_tools_shape[] =
    "{\"type\": \"function\", \"function\": {\"name\", \"description\", "
    "\"parameters\", \"strict\"}}";


/* tools, tool_choice and parallel_tool_calls, each on its own */
ngx_int_t
ngx_http_pagedllm_tools_field(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    const char                 *name = ps->field->name;
    ngx_http_pagedllm_tools_t  *t;

    t = ngx_http_pagedllm_tools_get(ps);
    if (t == NULL) {
        return NGX_ERROR;
    }

    if (json_is_null(v)) {
        return NGX_OK;
    }

    if (ngx_strcmp(name, "parallel_tool_calls") == 0) {
        if (!json_is_boolean(v)) {
            return ngx_http_pagedllm_tools_error(ps, name, "'%s' must be a "
                                                 "boolean", name);
        }
        t->parallel = json_is_true(v);
        return NGX_OK;
    }

    if (ngx_strcmp(name, "tool_choice") == 0) {
        return ngx_http_pagedllm_tools_choice(ps, t, v);
    }

    return ngx_http_pagedllm_tools_list(ps, t, v);
}


static ngx_http_pagedllm_tools_t *
ngx_http_pagedllm_tools_get(ngx_http_pagedllm_parse_t *ps)
{
    ngx_http_pagedllm_tools_t  *t = ps->params->tools;

    if (t != NULL) {
        return t;
    }

    t = ngx_pcalloc(ps->pool, sizeof(ngx_http_pagedllm_tools_t));
    if (t == NULL) {
        ngx_http_pagedllm_error_set(ps->err, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                    NULL, "out of memory");
        return NULL;
    }

    t->parallel = 1;
    ps->params->tools = t;

    return t;
}


static ngx_int_t
ngx_http_pagedllm_tools_list(ngx_http_pagedllm_parse_t *ps,
    ngx_http_pagedllm_tools_t *t, json_t *v)
{
    size_t   i;
    json_t  *tool, *names;

    if (!json_is_array(v)) {
        return ngx_http_pagedllm_tools_error(ps, "tools", "'tools' must be "
                                             "an array of %s",
                                             ngx_http_pagedllm_tools_shape);
    }

    names = ngx_http_pagedllm_json_pool(ps->pool, json_array());
    if (names == NULL) {
        return ngx_http_pagedllm_tools_error(ps, NULL, "out of memory");
    }

    json_array_foreach(v, i, tool) {
        if (ngx_http_pagedllm_tools_tool(ps, tool, i, names) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    t->tools = v;
    t->names = names;

    return NGX_OK;
}


/* tools[i] checked, its function's name appended to names */
static ngx_int_t
ngx_http_pagedllm_tools_tool(ngx_http_pagedllm_parse_t *ps, json_t *tool,
    size_t i, json_t *names)
{
    json_t      *fn, *type, *name, *x;
    const char  *key;

    fn = json_object_get(tool, "function");
    type = json_object_get(tool, "type");

    if (!json_is_object(tool) || json_object_size(tool) != 2
        || !json_is_string(type)
        || ngx_strcmp(json_string_value(type), "function") != 0
        || !json_is_object(fn))
    {
        return ngx_http_pagedllm_tools_error(ps, "tools", "'tools[%uz]' "
                                             "must be %s", i,
                                             ngx_http_pagedllm_tools_shape);
    }

    json_object_foreach(fn, key, x) {
        if (ngx_strcmp(key, "name") != 0
            && ngx_strcmp(key, "description") != 0
            && ngx_strcmp(key, "parameters") != 0
            && ngx_strcmp(key, "strict") != 0)
        {
            return ngx_http_pagedllm_tools_error(ps, "tools", "'tools[%uz]"
                                                 ".function' has an "
                                                 "unknown field '%s'",
                                                 i, key);
        }
    }

    name = json_object_get(fn, "name");
    x = json_object_get(fn, "description");

    if (!ngx_http_pagedllm_tools_name_ok(name)) {
        return ngx_http_pagedllm_tools_error(ps, "tools", "'tools[%uz]"
                                             ".function.name' must be 1 to "
                                             "64 letters, digits, '_' or "
                                             "'-'", i);
    }

    if ((x != NULL && !json_is_string(x))
        || ((x = json_object_get(fn, "parameters")) != NULL
            && !ngx_http_pagedllm_tools_object_schema(x))
        || ((x = json_object_get(fn, "strict")) != NULL
            && !json_is_boolean(x) && !json_is_null(x)))
    {
        return ngx_http_pagedllm_tools_error(ps, "tools", "'tools[%uz]"
                                             ".function': 'description' "
                                             "must be a string, "
                                             "'parameters' the JSON Schema "
                                             "of an object, 'strict' a "
                                             "boolean", i);
    }

    if (ngx_http_pagedllm_tools_known(names, json_string_value(name))) {
        return ngx_http_pagedllm_tools_error(ps, "tools", "'tools' names "
                                             "the function '%s' twice",
                                             json_string_value(name));
    }

    if (json_array_append(names, name) != 0) {
        return ngx_http_pagedllm_tools_error(ps, NULL, "out of memory");
    }

    return NGX_OK;
}


/* a function's parameters: a schema object whose type, if it says one,
   is "object" (the arguments are an object in every format) */
static ngx_uint_t
ngx_http_pagedllm_tools_object_schema(json_t *schema)
{
    json_t  *type = json_object_get(schema, "type");

    return json_is_object(schema)
           && (type == NULL
               || (json_is_string(type)
                   && ngx_strcmp(json_string_value(type), "object") == 0));
}


/* OpenAI's rule for function names: ^[a-zA-Z0-9_-]{1,64}$ */
static ngx_uint_t
ngx_http_pagedllm_tools_name_ok(json_t *name)
{
    size_t       i, len;
    const char  *s;

    s = json_string_value(name);
    len = json_string_length(name);

    if (s == NULL || len == 0 || len > NGX_HTTP_PAGEDLLM_TOOL_NAME_MAX) {
        return 0;
    }

    for (i = 0; i < len; i++) {
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')
              || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'
              || s[i] == '-'))
        {
            return 0;
        }
    }

    return 1;
}


static ngx_int_t
ngx_http_pagedllm_tools_choice(ngx_http_pagedllm_parse_t *ps,
    ngx_http_pagedllm_tools_t *t, json_t *v)
{
    json_t      *fn, *name;
    const char  *s;

    t->choice = v;
    s = json_string_value(v);

    if (s != NULL) {
        t->mode = ngx_strcmp(s, "none") == 0 ? NGX_HTTP_PAGEDLLM_TOOLS_NONE
                  : ngx_strcmp(s, "auto") == 0 ? NGX_HTTP_PAGEDLLM_TOOLS_AUTO
                  : ngx_strcmp(s, "required") == 0
                    ? NGX_HTTP_PAGEDLLM_TOOLS_REQUIRED
                    : NGX_HTTP_PAGEDLLM_TOOLS_NAMED;

        if (t->mode != NGX_HTTP_PAGEDLLM_TOOLS_NAMED) {
            return NGX_OK;
        }

    } else {
        fn = json_object_get(v, "function");
        name = json_object_get(fn, "name");

        if (json_is_object(v) && json_object_size(v) == 2
            && json_is_string(json_object_get(v, "type"))
            && ngx_strcmp(json_string_value(json_object_get(v, "type")),
                          "function") == 0
            && json_is_object(fn) && json_object_size(fn) == 1
            && json_is_string(name))
        {
            t->mode = NGX_HTTP_PAGEDLLM_TOOLS_NAMED;
            t->named = json_string_value(name);
            return NGX_OK;
        }
    }

    return ngx_http_pagedllm_tools_error(ps, "tool_choice", "'tool_choice' "
                                         "must be \"none\", \"auto\", "
                                         "\"required\" or {\"type\": "
                                         "\"function\", \"function\": "
                                         "{\"name\": ...}}");
}


static ngx_uint_t
ngx_http_pagedllm_tools_known(json_t *names, const char *name)
{
    size_t   i;
    json_t  *n;

    json_array_foreach(names, i, n) {
        if (ngx_strcmp(json_string_value(n), name) == 0) {
            return 1;
        }
    }

    return 0;
}


/* The fields together, once every one is read. */
ngx_int_t
ngx_http_pagedllm_tools_resolve(ngx_http_pagedllm_parse_t *ps)
{
    ngx_http_pagedllm_tools_t   *t = ps->params->tools;
    ngx_http_pagedllm_params_t  *p = ps->params;

    if (t == NULL) {
        return NGX_OK;
    }

    if (json_array_size(t->tools) == 0) {
        if (t->choice != NULL && t->mode != NGX_HTTP_PAGEDLLM_TOOLS_NONE) {
            return ngx_http_pagedllm_tools_error(ps, "tool_choice",
                                                 "'tool_choice' is only "
                                                 "allowed when 'tools' are "
                                                 "given");
        }
        t->mode = NGX_HTTP_PAGEDLLM_TOOLS_NONE;
        return NGX_OK;
    }

    if (t->choice == NULL) {
        t->mode = NGX_HTTP_PAGEDLLM_TOOLS_AUTO;
    }

    if (t->mode == NGX_HTTP_PAGEDLLM_TOOLS_NAMED
        && !ngx_http_pagedllm_tools_known(t->names, t->named))
    {
        return ngx_http_pagedllm_tools_error(ps, "tool_choice",
                                             "'tool_choice' names the "
                                             "function '%s', which is not "
                                             "in 'tools'", t->named);
    }

    if (ps->engine->tok->chat == NULL) {
        return NGX_OK;
    }

    t->format = pl_chat_tool_format(ps->engine->tok->chat);

    t->calls = ngx_pcalloc(ps->pool, p->n * sizeof(json_t *));
    t->streams = ngx_pcalloc(ps->pool,
                             p->n * sizeof(ngx_http_pagedllm_tools_stream_t));
    if (t->calls == NULL || t->streams == NULL) {
        return ngx_http_pagedllm_tools_error(ps, NULL, "out of memory");
    }

    /* the template renders the tools' text among its own special tokens */
    if (ngx_http_pagedllm_no_specials(t->tools, ps->engine->tok, "tools",
                                      ps->err)
        != NGX_OK
        || ngx_http_pagedllm_tools_kwargs(ps, t) != NGX_OK
        || ngx_http_pagedllm_tools_schemas(ps, t) != NGX_OK)
    {
        return NGX_ERROR;
    }

    t->forced = t->mode == NGX_HTTP_PAGEDLLM_TOOLS_REQUIRED
                || t->mode == NGX_HTTP_PAGEDLLM_TOOLS_NAMED;

    return t->forced ? ngx_http_pagedllm_tools_force(ps, t) : NGX_OK;
}


/* the chat template's variables: chat_template_kwargs' and "tools" */
static ngx_int_t
ngx_http_pagedllm_tools_kwargs(ngx_http_pagedllm_parse_t *ps,
    ngx_http_pagedllm_tools_t *t)
{
    json_t                      *kw;
    ngx_http_pagedllm_params_t  *p = ps->params;

    kw = p->template_kwargs ? json_copy(p->template_kwargs) : json_object();
    kw = ngx_http_pagedllm_json_pool(ps->pool, kw);

    if (kw == NULL || json_object_set(kw, "tools", t->tools) != 0) {
        return ngx_http_pagedllm_tools_error(ps, NULL, "out of memory");
    }

    p->template_kwargs = kw;

    return NGX_OK;
}


/*
 * The parameters of the functions the grammar will force (all of them
 * for "required", the named one), and of those that ask for strict,
 * translated on their own, so that what the grammar engine does not
 * support is refused with the function's index and the keyword.
 */
static ngx_int_t
ngx_http_pagedllm_tools_schemas(ngx_http_pagedllm_parse_t *ps,
    ngx_http_pagedllm_tools_t *t)
{
    int          rc;
    char         why[256];
    size_t       i;
    json_t      *tool, *fn, *params;
    pl_gtext_t   text;

    json_array_foreach(t->tools, i, tool) {
        fn = json_object_get(tool, "function");
        params = json_object_get(fn, "parameters");

        if (params == NULL
            || (!ngx_http_pagedllm_tools_forces(t, fn)
                && !json_is_true(json_object_get(fn, "strict"))))
        {
            continue;
        }

        rc = ngx_http_pagedllm_tools_translate(params, &text, why,
                                               sizeof(why));
        pl_gtext_free(&text);

        if (rc != 0) {
            return ngx_http_pagedllm_tools_error(ps, "tools", "'tools[%uz]"
                                                 ".function.parameters': %s",
                                                 i, why);
        }
    }

    return NGX_OK;
}


/* whether function fn is one tool_choice forces a call to */
static ngx_uint_t
ngx_http_pagedllm_tools_forces(ngx_http_pagedllm_tools_t *t, json_t *fn)
{
    return t->mode == NGX_HTTP_PAGEDLLM_TOOLS_REQUIRED
           || (t->mode == NGX_HTTP_PAGEDLLM_TOOLS_NAMED
               && ngx_strcmp(json_string_value(json_object_get(fn, "name")),
                             t->named) == 0);
}


/* JSON Schema schema into the grammar's EBNF (text, to be freed);
   -1 with why */
static int
ngx_http_pagedllm_tools_translate(json_t *schema, pl_gtext_t *text,
    char *why, size_t len)
{
    int    rc;
    char  *s;

    ngx_memzero(text, sizeof(pl_gtext_t));

    s = schema ? json_dumps(schema, JSON_COMPACT) : NULL;
    if (s == NULL) {
        ngx_cpystrn((u_char *) why, (u_char *) "out of memory", len);
        return -1;
    }

    rc = pl_grammar_from_schema_text(s, ngx_strlen(s), text, why, len);
    free(s);

    return rc;
}


/* the grammar of the calls tool_choice asks for, as the constraint */
static ngx_int_t
ngx_http_pagedllm_tools_force(ngx_http_pagedllm_parse_t *ps,
    ngx_http_pagedllm_tools_t *t)
{
    int          rc;
    char        *ebnf, why[256];
    size_t       i, len;
    json_t      *fns, *tool, *fn;
    pl_gtext_t   text, forced;

    fns = ngx_http_pagedllm_json_pool(ps->pool, json_array());
    if (fns == NULL) {
        return ngx_http_pagedllm_tools_error(ps, NULL, "out of memory");
    }

    json_array_foreach(t->tools, i, tool) {
        fn = json_object_get(tool, "function");
        if (ngx_http_pagedllm_tools_forces(t, fn)
            && json_array_append(fns, fn) != 0)
        {
            return ngx_http_pagedllm_tools_error(ps, NULL, "out of memory");
        }
    }

    rc = ngx_http_pagedllm_tools_translate(
             ngx_http_pagedllm_json_pool(ps->pool,
                                         pl_tools_call_schema(t->format, fns)),
             &text, why, sizeof(why));

    if (rc != 0) {
        pl_gtext_free(&text);
        return ngx_http_pagedllm_tools_error(ps, "tools", "'tools': %s",
                                             why);
    }

    ebnf = pl_tools_grammar(t->format,
                            t->parallel
                            && t->mode == NGX_HTTP_PAGEDLLM_TOOLS_REQUIRED,
                            text.data, text.len, &len);
    pl_gtext_free(&text);

    forced.data = ebnf;
    forced.len = ebnf ? len : 0;
    forced.cap = forced.len;
    forced.oom = 0;

    ps->field = &ngx_http_pagedllm_tool_choice_field;

    return ngx_http_pagedllm_guided_set(ps, &forced, ebnf ? 0 : -1,
                                        "out of memory");
}


ngx_uint_t
ngx_http_pagedllm_tools_message_is(json_t *m)
{
    const char  *r = json_string_value(json_object_get(m, "role"));

    return r != NULL
           && (ngx_strcmp(r, "tool") == 0
               || (ngx_strcmp(r, "assistant") == 0
                   && json_object_get(m, "tool_calls") != NULL));
}


/*
 * A tool message to {role, content, tool_call_id[, name]}; an assistant
 * message with tool_calls to {role, content ("" when null), tool_calls
 * [, name]}, each call's arguments an object (tool_calls null or empty:
 * none, as clients that copy a message back send them).
 */
json_t *
ngx_http_pagedllm_tools_message(json_t *m, ngx_pool_t *pool,
    ngx_http_pagedllm_error_t *err)
{
    json_t      *c, *content, *name, *id, *out, *calls;
    ngx_uint_t   tool;
    const char  *key, *own;

    tool = ngx_strcmp(json_string_value(json_object_get(m, "role")), "tool")
           == 0;
    own = tool ? "tool_call_id" : "tool_calls";

    json_object_foreach(m, key, c) {
        if (ngx_strcmp(key, "role") != 0 && ngx_strcmp(key, "content") != 0
            && ngx_strcmp(key, "name") != 0 && ngx_strcmp(key, own) != 0)
        {
            ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, "messages",
                                        "message field '%s' is not "
                                        "supported in a%s message", key,
                                        tool ? " tool"
                                             : "n assistant tool call");
            return NULL;
        }
    }

    c = json_object_get(m, "content");
    name = json_object_get(m, "name");
    id = json_object_get(m, "tool_call_id");

    content = (!tool && (c == NULL || json_is_null(c)))
              ? ngx_http_pagedllm_json_pool(pool, json_string(""))
              : ngx_http_pagedllm_content(c, pool);

    if (content == NULL || (name && !json_is_string(name))
        || (tool && !json_is_string(id)))
    {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, "messages",
                                    "a tool message needs a 'content' "
                                    "string or text parts and a "
                                    "'tool_call_id' string; a 'name' must "
                                    "be a string");
        return NULL;
    }

    out = ngx_http_pagedllm_json_pool(pool,
              json_pack("{s:s,s:O}", "role", tool ? "tool" : "assistant",
                        "content", content));
    if (out == NULL) {
        goto oom;
    }

    if ((name && json_object_set(out, "name", name) != 0)
        || (tool && json_object_set(out, "tool_call_id", id) != 0))
    {
        goto oom;
    }

    calls = json_object_get(m, "tool_calls");

    if (tool || json_is_null(calls)
        || (json_is_array(calls) && json_array_size(calls) == 0))
    {
        return out;
    }

    calls = ngx_http_pagedllm_tools_calls_in(calls, pool);
    if (calls == NULL) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, "messages",
                                    "an assistant message's 'tool_calls' "
                                    "must be an array of {\"id\", "
                                    "\"type\": \"function\", \"function\": "
                                    "{\"name\", \"arguments\"}}, the "
                                    "arguments a JSON object");
        return NULL;
    }

    if (json_object_set(out, "tool_calls", calls) == 0) {
        return out;
    }

oom:

    ngx_http_pagedllm_error_set(err, NGX_HTTP_INTERNAL_SERVER_ERROR, NULL,
                                "out of memory");
    return NULL;
}


/* a message's tool_calls with each call's arguments an object (as the
   templates read them); NULL when they are not well formed */
static json_t *
ngx_http_pagedllm_tools_calls_in(json_t *calls, ngx_pool_t *pool)
{
    size_t   i;
    json_t  *out, *c, *fn, *args, *type, *call;

    if (!json_is_array(calls)) {
        return NULL;
    }

    out = ngx_http_pagedllm_json_pool(pool, json_array());
    if (out == NULL) {
        return NULL;
    }

    json_array_foreach(calls, i, c) {
        fn = json_object_get(c, "function");
        type = json_object_get(c, "type");
        args = json_object_get(fn, "arguments");

        if (!json_is_string(json_object_get(c, "id"))
            || (type != NULL && !(json_is_string(type)
                                  && ngx_strcmp(json_string_value(type),
                                                "function") == 0))
            || !ngx_http_pagedllm_tools_name_ok(json_object_get(fn, "name")))
        {
            return NULL;
        }

        args = json_is_string(args)
               ? json_loadb(json_string_value(args),
                            json_string_length(args), 0, NULL)
               : json_incref(args);

        if (!json_is_object(args)) {
            json_decref(args);
            return NULL;
        }

        call = json_pack("{s:O,s:s,s:{s:O,s:o}}",
                         "id", json_object_get(c, "id"),
                         "type", "function",
                         "function",
                             "name", json_object_get(fn, "name"),
                             "arguments", args);

        if (json_array_append_new(out, call) != 0) {
            return NULL;
        }
    }

    return out;
}


static ngx_http_pagedllm_tools_t *
ngx_http_pagedllm_tools_active(ngx_http_pagedllm_ctx_t *ctx)
{
    ngx_http_pagedllm_tools_t  *t = ctx->params.tools;

    return t != NULL && t->mode != NGX_HTTP_PAGEDLLM_TOOLS_NONE
           && t->calls != NULL ? t : NULL;
}


/*
 * Choice ch has ended: its text parsed for calls when it ended with its
 * stop.  The formats that are the whole answer are looked for only while
 * nothing has been streamed; the text ch keeps is the text not sent.  A
 * forced output streamed has sent its calls as it was written: what is
 * left of them is sent now, and its text is never content.
 */
void
ngx_http_pagedllm_tools_end(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch)
{
    size_t                      i, content;
    json_t                     *calls;
    ngx_uint_t                  stop;
    ngx_pool_t                 *pool = ctx->request->pool;
    ngx_http_pagedllm_tools_t  *t;

    t = ngx_http_pagedllm_tools_active(ctx);
    if (t == NULL) {
        return;
    }

    stop = ch->finish_reason == PL_FINISH_STOP;

    if (t->forced && ctx->params.stream) {
        (void) ngx_http_pagedllm_tools_progress(ctx, ch);

        if (stop && t->streams[ch->index].calls > 0) {
            ch->finish_reason = NGX_HTTP_PAGEDLLM_FINISH_TOOL_CALLS;
        }

        ngx_http_pagedllm_tools_cut(ch, 0);
        return;
    }

    if (!stop
        || (ch->chars_sent
            && t->format != PL_TOOLS_HERMES && t->format != PL_TOOLS_MISTRAL))
    {
        return;
    }

    calls = ngx_http_pagedllm_json_pool(pool,
                pl_tools_parse(t->format, (char *) ch->text, ch->text_len,
                               t->names, &content));
    if (calls == NULL
        || ngx_http_pagedllm_tools_ids(calls, t->format) != NGX_OK
        || (ctx->params.stream
            && ngx_http_pagedllm_tools_deltas(ctx, ch, calls) != NGX_OK))
    {
        return;
    }

    for (i = 0; i < content && (ch->text[i] == ' ' || ch->text[i] == '\n'
                                || ch->text[i] == '\t' || ch->text[i] == '\r');
         i++)
    {
        /* void */
    }

    ngx_http_pagedllm_tools_cut(ch, i == content && ch->chars_sent == 0
                                    ? 0 : content);

    t->calls[ch->index] = calls;
    ch->finish_reason = NGX_HTTP_PAGEDLLM_FINISH_TOOL_CALLS;
}


/* ch's text and pieces ended at len */
static void
ngx_http_pagedllm_tools_cut(ngx_http_pagedllm_choice_t *ch, size_t len)
{
    ngx_uint_t  n;

    for (n = 0; n < ch->npieces && ch->piece_end[n] <= len; n++) {
        /* void */
    }

    if (n < ch->npieces && (n ? ch->piece_end[n - 1] : 0) < len) {
        ch->piece_end[n++] = (uint32_t) len;
    }

    ch->npieces = n;
    ch->text_len = len;
}


/*
 * Each call's id: "call_" and 24 random letters and digits, as OpenAI
 * writes them; for Mistral's format, 9 letters and digits, the only ids
 * its template takes back in the history.
 */
static ngx_int_t
ngx_http_pagedllm_tools_ids(json_t *calls, pl_tools_format_t format)
{
    size_t              i, k, start, len;
    json_t             *c;
    u_char              id[sizeof("call_") - 1 + NGX_HTTP_PAGEDLLM_CALL_ID_LEN];
    static const char   alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                  "abcdefghijklmnopqrstuvwxyz0123456789";

    start = format == PL_TOOLS_MISTRAL ? 0 : sizeof("call_") - 1;
    len = format == PL_TOOLS_MISTRAL ? NGX_HTTP_PAGEDLLM_MISTRAL_ID_LEN
                                     : sizeof(id);

    json_array_foreach(calls, i, c) {
        ngx_memcpy(id, "call_", sizeof("call_") - 1);

        for (k = start; k < len; k++) {
            id[k] = alnum[ngx_random() % (sizeof(alnum) - 1)];
        }

        if (json_object_set_new(c, "id", json_stringn((char *) id, len))
            != 0)
        {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* Stream: the text of ch that may be sent, up to safe, before a call. */
size_t
ngx_http_pagedllm_tools_safe(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, size_t safe)
{
    size_t                      hold;
    ngx_http_pagedllm_tools_t  *t;

    t = ngx_http_pagedllm_tools_active(ctx);
    if (t == NULL) {
        return safe;
    }

    hold = pl_tools_hold(t->format, (char *) ch->text, ch->text_len,
                         ch->chars_sent == 0);

    return ngx_min(safe, hold);
}


/* The message of a chat choice: its content, and its calls if it made
   any (content null when it has no text). */
json_t *
ngx_http_pagedllm_tools_message_out(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, json_t *content)
{
    size_t                      i;
    json_t                     *calls, *out, *c;
    ngx_http_pagedllm_tools_t  *t = ctx->params.tools;

    calls = t && t->calls ? t->calls[ch->index] : NULL;

    if (calls == NULL) {
        return json_pack("{s:s,s:o}", "role", "assistant", "content",
                         content);
    }

    if (ch->text_len == 0) {
        json_decref(content);
        content = json_null();
    }

    out = json_array();

    json_array_foreach(calls, i, c) {
        json_array_append_new(out,
            json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", json_object_get(c, "id"),
                      "type", "function", "function",
                      "name", json_object_get(c, "name"),
                      "arguments", json_object_get(c, "arguments")));
    }

    return json_pack("{s:s,s:o,s:o}", "role", "assistant", "content",
                     content, "tool_calls", out);
}


/*
 * The deltas of an answer's calls, found when it ended, as OpenAI sends
 * them: for each call, its index, id, type, name and empty arguments,
 * then its arguments in fragments, each ending after a comma.
 */
static ngx_int_t
ngx_http_pagedllm_tools_deltas(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch, json_t *calls)
{
    size_t        i, at, end, len;
    json_t       *c, *name;
    ngx_array_t  *a;
    const char   *s, *comma;

    a = ngx_http_pagedllm_tools_pending(ctx, ch);
    if (a == NULL) {
        return NGX_ERROR;
    }

    json_array_foreach(calls, i, c) {
        name = json_object_get(c, "name");

        if (ngx_http_pagedllm_tools_announce(a, i, json_object_get(c, "id"),
                                             json_string_value(name),
                                             json_string_length(name))
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        s = json_string_value(json_object_get(c, "arguments"));
        len = json_string_length(json_object_get(c, "arguments"));

        for (at = 0; at < len; at = end) {
            comma = memchr(s + at, ',', len - at);
            end = comma ? (size_t) (comma - s) + 1 : len;

            if (ngx_http_pagedllm_tools_fragment(a, i, s + at, end - at)
                != NGX_OK)
            {
                return NGX_ERROR;
            }
        }
    }

    return NGX_OK;
}


/*
 * A forced output streamed, read as it is written: each call announced
 * once its name is complete (with its id), then its arguments sent as
 * they grow, in whole characters.  The grammar guarantees the form, so
 * what is sent is never taken back.
 */
static ngx_int_t
ngx_http_pagedllm_tools_progress(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch)
{
    size_t                             n, k, end;
    json_t                            *id;
    u_char                            *text = ch->text;
    ngx_array_t                       *a;
    pl_tools_span_t                   *sp;
    ngx_http_pagedllm_tools_t         *t = ctx->params.tools;
    ngx_http_pagedllm_tools_stream_t  *st = &t->streams[ch->index];

    a = ngx_http_pagedllm_tools_pending(ctx, ch);
    if (a == NULL
        || ngx_http_pagedllm_tools_spans(ctx->request->pool, st, t, ch, &n)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    for (k = st->calls ? st->calls - 1 : 0; k < n; k++) {
        sp = &st->spans[k];

        if (k == st->calls) {
            id = ngx_http_pagedllm_json_pool(ctx->request->pool,
                                             json_array());
            if (id == NULL
                || json_array_append_new(id, json_object()) != 0
                || ngx_http_pagedllm_tools_ids(id, t->format) != NGX_OK
                || ngx_http_pagedllm_tools_announce(a, k,
                       json_object_get(json_array_get(id, 0), "id"),
                       (char *) text + sp->name, sp->name_len)
                   != NGX_OK)
            {
                return NGX_ERROR;
            }

            st->calls++;
            st->args = 0;
        }

        end = sp->done ? sp->args_len
                       : ngx_http_pagedllm_tools_whole_chars(
                             text + sp->args, sp->args_len);

        if (sp->args && end > st->args) {
            if (ngx_http_pagedllm_tools_fragment(a, k,
                    (char *) text + sp->args + st->args, end - st->args)
                != NGX_OK)
            {
                return NGX_ERROR;
            }

            st->args = end;
        }
    }

    return NGX_OK;
}


/* the calls of ch's forced text so far into st's spans, grown as needed;
   their number in *n */
static ngx_int_t
ngx_http_pagedllm_tools_spans(ngx_pool_t *pool,
    ngx_http_pagedllm_tools_stream_t *st, ngx_http_pagedllm_tools_t *t,
    ngx_http_pagedllm_choice_t *ch, size_t *n)
{
    for ( ;; ) {
        *n = st->n_spans ? pl_tools_progress(t->format, (char *) ch->text,
                                             ch->text_len, st->spans,
                                             st->n_spans)
                         : 0;
        if (*n < st->n_spans) {
            return NGX_OK;
        }

        st->n_spans = st->n_spans ? 2 * st->n_spans : 4;
        st->spans = ngx_palloc(pool, st->n_spans * sizeof(pl_tools_span_t));
        if (st->spans == NULL) {
            return NGX_ERROR;
        }
    }
}


/* the deltas of ch not sent yet */
static ngx_array_t *
ngx_http_pagedllm_tools_pending(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch)
{
    ngx_http_pagedllm_tools_stream_t  *st;

    st = &ctx->params.tools->streams[ch->index];

    if (st->pending == NULL) {
        st->pending = ngx_array_create(ctx->request->pool, 4,
                                       sizeof(ngx_str_t));
    }

    return st->pending;
}


/* a call's first delta: index, id, type, name, empty arguments */
static ngx_int_t
ngx_http_pagedllm_tools_announce(ngx_array_t *a, ngx_uint_t index, json_t *id,
    const char *name, size_t len)
{
    return ngx_http_pagedllm_tools_delta(a,
               json_pack("{s:[{s:I,s:O,s:s,s:{s:s%,s:s}}]}", "tool_calls",
                         "index", (json_int_t) index, "id", id,
                         "type", "function", "function", "name", name, len,
                         "arguments", ""));
}


/* a fragment of a call's arguments */
static ngx_int_t
ngx_http_pagedllm_tools_fragment(ngx_array_t *a, ngx_uint_t index,
    const char *args, size_t len)
{
    return ngx_http_pagedllm_tools_delta(a,
               json_pack("{s:[{s:I,s:{s:s%}}]}", "tool_calls",
                         "index", (json_int_t) index, "function",
                         "arguments", args, len));
}


/* the first n bytes of UTF-8 text p without a last character that lacks
   bytes */
static size_t
ngx_http_pagedllm_tools_whole_chars(const u_char *p, size_t n)
{
    size_t  i, need;

    for (i = n; i > 0 && n - i < 4; i--) {
        if ((p[i - 1] & 0xc0) != 0x80) {
            need = p[i - 1] < 0x80 ? 1 : p[i - 1] >= 0xf0 ? 4
                   : p[i - 1] >= 0xe0 ? 3 : 2;
            return n - (i - 1) >= need ? n : i - 1;
        }
    }

    return n;
}


/* delta d (a new reference) appended to a as its JSON text */
static ngx_int_t
ngx_http_pagedllm_tools_delta(ngx_array_t *a, json_t *d)
{
    char       *s;
    ngx_str_t  *out;

    s = d ? json_dumps(d, JSON_COMPACT) : NULL;
    json_decref(d);

    out = ngx_array_push(a);
    if (s == NULL || out == NULL) {
        free(s);
        return NGX_ERROR;
    }

    out->len = ngx_strlen(s);
    out->data = ngx_pnalloc(a->pool, out->len);
    if (out->data == NULL) {
        free(s);
        return NGX_ERROR;
    }

    ngx_memcpy(out->data, s, out->len);
    free(s);

    return NGX_OK;
}


/*
 * Stream: the calls ch has made since the last flush turned into deltas
 * (a forced output as it is written; an answer's calls when it ends, in
 * ngx_http_pagedllm_tools_end), and the room they take, the role's first
 * event included.
 */
size_t
ngx_http_pagedllm_tools_sse_prepare(ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch)
{
    size_t                      size;
    ngx_str_t                  *d;
    ngx_uint_t                  i;
    ngx_array_t                *a;
    ngx_http_pagedllm_tools_t  *t;

    t = ngx_http_pagedllm_tools_active(ctx);
    if (t == NULL) {
        return 0;
    }

    if (t->forced && !ch->finished
        && ngx_http_pagedllm_tools_progress(ctx, ch) != NGX_OK)
    {
        ngx_log_error(NGX_LOG_ERR, ctx->request->connection->log, 0,
                      "pagedllm: tool call deltas not made");
    }

    a = t->streams[ch->index].pending;
    if (a == NULL || a->nelts == 0) {
        return 0;
    }

    size = ngx_http_pagedllm_sse_bound(ctx, 0);
    d = a->elts;

    for (i = 0; i < a->nelts; i++) {
        size += ngx_http_pagedllm_sse_bound(ctx, 0) + d[i].len;
    }

    return size;
}


/* ch's call deltas made and not sent, after its role's event if that is
   not sent yet */
u_char *
ngx_http_pagedllm_tools_sse(u_char *p, ngx_http_pagedllm_ctx_t *ctx,
    ngx_http_pagedllm_choice_t *ch)
{
    ngx_str_t                  *d;
    ngx_uint_t                  i;
    ngx_array_t                *a;
    ngx_http_pagedllm_tools_t  *t = ctx->params.tools;

    a = t && t->streams ? t->streams[ch->index].pending : NULL;
    if (a == NULL || a->nelts == 0) {
        return p;
    }

    if (!ch->role_sent) {
        p = ngx_http_pagedllm_sse_role(p, ctx, ch->index);
        ch->role_sent = 1;
    }

    d = a->elts;

    for (i = 0; i < a->nelts; i++) {
        p = ngx_http_pagedllm_sse_delta(p, ctx, ch->index, &d[i]);
    }

    a->nelts = 0;

    return p;
}


static ngx_int_t
ngx_http_pagedllm_tools_error(ngx_http_pagedllm_parse_t *ps,
    const char *param, const char *fmt, ...)
{
    u_char   msg[NGX_HTTP_PAGEDLLM_ERR_LEN], *last;
    va_list  args;

    va_start(args, fmt);
    last = ngx_vslprintf(msg, msg + sizeof(msg) - 1, fmt, args);
    va_end(args);
    *last = '\0';

    ngx_http_pagedllm_error_set(ps->err, param ? NGX_HTTP_BAD_REQUEST
                                               : NGX_HTTP_INTERNAL_SERVER_ERROR,
                                param, "%s", msg);
    return NGX_ERROR;
}
