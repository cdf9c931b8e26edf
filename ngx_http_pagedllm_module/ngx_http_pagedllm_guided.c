
/*
 * ngx_http_pagedllm_guided: structured outputs on the way in.  OpenAI's
 * response_format ({"type": "json_object"}, {"type": "json_schema",
 * "json_schema": {"name", "schema", "strict"}}) and vLLM's guided_json,
 * guided_regex, guided_choice and guided_grammar each become one grammar
 * text (grammar/grammar.h's EBNF subset), compiled here once so a bad
 * schema, regex or grammar is a 400 naming what is wrong before anything
 * is submitted, and sent to the engine in the SUBMIT record, which
 * compiles it again (or finds it compiled) and masks every draw with it.
 * One constraint per request.
 */


#include "ngx_http_pagedllm_module.h"
#include "ngx_http_pagedllm_guided.h"

#include <grammar.h>
#include <jansson.h>


static ngx_int_t ngx_http_pagedllm_guided_schema(
    ngx_http_pagedllm_parse_t *ps, json_t *schema);
static ngx_int_t ngx_http_pagedllm_guided_choice(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_guided_error(
    ngx_http_pagedllm_parse_t *ps, const char *fmt, const char *arg);


ngx_int_t
ngx_http_pagedllm_guided_response_format(ngx_http_pagedllm_parse_t *ps,
    json_t *v)
{
    json_t      *type, *spec, *schema;
    pl_gtext_t   text = { 0 };
    const char  *t;

    if (json_is_null(v)) {
        return NGX_OK;
    }

    type = json_object_get(v, "type");
    if (!json_is_object(v) || !json_is_string(type)) {
        return ngx_http_pagedllm_guided_error(ps, "'%s' must be an object "
                                              "with a 'type' string",
                                              ps->field->name);
    }
    t = json_string_value(type);

    if (ngx_strcmp(t, "text") == 0) {
        return NGX_OK;
    }

    if (ngx_strcmp(t, "json_object") == 0) {
        return ngx_http_pagedllm_guided_set(ps, &text,
                                            pl_grammar_from_json_object(&text),
                                            "out of memory");
    }

    if (ngx_strcmp(t, "json_schema") != 0) {
        return ngx_http_pagedllm_guided_error(ps, "response_format type "
                                              "'%s' is not supported "
                                              "(text, json_object and "
                                              "json_schema are)", t);
    }

    spec = json_object_get(v, "json_schema");
    if (!json_is_object(spec)) {
        return ngx_http_pagedllm_guided_error(ps, "'%s' of type "
                                              "json_schema needs a "
                                              "'json_schema' object",
                                              ps->field->name);
    }
    if (json_object_get(spec, "name") != NULL
        && !json_is_string(json_object_get(spec, "name")))
    {
        return ngx_http_pagedllm_guided_error(ps, "'%s': json_schema's "
                                              "'name' must be a string",
                                              ps->field->name);
    }
    if (json_object_get(spec, "strict") != NULL
        && !json_is_boolean(json_object_get(spec, "strict"))
        && !json_is_null(json_object_get(spec, "strict")))
    {
        return ngx_http_pagedllm_guided_error(ps, "'%s': json_schema's "
                                              "'strict' must be a boolean",
                                              ps->field->name);
    }

    schema = json_object_get(spec, "schema");

    return ngx_http_pagedllm_guided_schema(ps, schema);
}


ngx_int_t
ngx_http_pagedllm_guided_field(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    pl_gtext_t   text = { 0 };
    json_t      *schema;
    json_error_t jerr;
    ngx_int_t    rc;
    const char  *name = ps->field->name;

    if (json_is_null(v)) {
        return NGX_OK;
    }

    if (ngx_strcmp(name, "guided_json") == 0) {
        if (!json_is_string(v)) {
            return ngx_http_pagedllm_guided_schema(ps, v);
        }
        schema = json_loadb(json_string_value(v), json_string_length(v),
                            JSON_DECODE_ANY, &jerr);
        if (schema == NULL) {
            return ngx_http_pagedllm_guided_error(ps, "'guided_json' is "
                                                  "not valid JSON: %s",
                                                  jerr.text);
        }
        rc = ngx_http_pagedllm_guided_schema(ps, schema);
        json_decref(schema);
        return rc;
    }

    if (ngx_strcmp(name, "guided_choice") == 0) {
        return ngx_http_pagedllm_guided_choice(ps, v);
    }

    if (!json_is_string(v) || json_string_length(v) == 0) {
        return ngx_http_pagedllm_guided_error(ps, "'%s' must be a "
                                              "non-empty string", name);
    }

    if (ngx_strcmp(name, "guided_regex") == 0) {
        return ngx_http_pagedllm_guided_set(ps, &text,
                   pl_grammar_from_regex(json_string_value(v),
                                         json_string_length(v), &text),
                   "out of memory");
    }

    /* guided_grammar: the EBNF as it is */
    text.data = malloc(json_string_length(v) + 1);
    if (text.data == NULL) {
        return ngx_http_pagedllm_guided_set(ps, &text, -1, "out of memory");
    }
    ngx_memcpy(text.data, json_string_value(v), json_string_length(v));
    text.len = json_string_length(v);

    return ngx_http_pagedllm_guided_set(ps, &text, 0, NULL);
}


/* a JSON Schema (absent: any JSON value) into the grammar */
static ngx_int_t
ngx_http_pagedllm_guided_schema(ngx_http_pagedllm_parse_t *ps,
    json_t *schema)
{
    pl_gtext_t   text = { 0 };
    char        *s, why[256];
    int          rc;

    if (schema != NULL && !json_is_object(schema) && !json_is_true(schema)) {
        return ngx_http_pagedllm_guided_error(ps, "'%s': the schema must be "
                                              "an object", ps->field->name);
    }

    s = schema ? json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY)
               : strdup("{}");
    if (s == NULL) {
        return ngx_http_pagedllm_guided_set(ps, &text, -1, "out of memory");
    }

    rc = pl_grammar_from_schema_text(s, ngx_strlen(s), &text, why,
                                     sizeof(why));
    free(s);

    return ngx_http_pagedllm_guided_set(ps, &text, rc, why);
}


static ngx_int_t
ngx_http_pagedllm_guided_choice(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    pl_gtext_t    text = { 0 };
    const char  **choices;
    size_t       *lens, i, n;
    json_t       *c;

    n = json_array_size(v);
    if (!json_is_array(v) || n == 0) {
        return ngx_http_pagedllm_guided_error(ps, "'%s' must be a non-empty "
                                              "array of strings",
                                              ps->field->name);
    }

    choices = ngx_palloc(ps->pool, n * sizeof(char *));
    lens = ngx_palloc(ps->pool, n * sizeof(size_t));
    if (choices == NULL || lens == NULL) {
        return ngx_http_pagedllm_guided_set(ps, &text, -1, "out of memory");
    }

    json_array_foreach(v, i, c) {
        if (!json_is_string(c) || json_string_length(c) == 0) {
            return ngx_http_pagedllm_guided_error(ps, "'%s' must be a "
                                                  "non-empty array of "
                                                  "non-empty strings",
                                                  ps->field->name);
        }
        choices[i] = json_string_value(c);
        lens[i] = json_string_length(c);
    }

    return ngx_http_pagedllm_guided_set(ps, &text,
               pl_grammar_from_choices(choices, lens, n, &text),
               "out of memory");
}


/*
 * The grammar text a translator made (rc 0; else why) checked by
 * compiling it, and kept in the request's pool for the SUBMIT record;
 * text is freed either way.  Tool calling's forced calls come this way
 * too (ngx_http_pagedllm_tools.c).
 */
ngx_int_t
ngx_http_pagedllm_guided_set(ngx_http_pagedllm_parse_t *ps, pl_gtext_t *text,
    int rc, const char *why)
{
    ngx_http_pagedllm_params_t  *p = ps->params;
    pl_grammar_t                *g;
    char                         err[256];
    ngx_int_t                    status = NGX_OK;

    if (p->grammar_field != NULL) {
        status = ngx_http_pagedllm_guided_error(ps, "'%s' cannot be "
                                                "combined with another "
                                                "output constraint",
                                                ps->field->name);
        goto done;
    }

    if (rc != 0 || text->oom) {
        status = ngx_http_pagedllm_guided_error(ps, "%s",
                                                text->oom ? "out of memory"
                                                          : why);
        goto done;
    }

    if (text->len > PL_MAX_GRAMMAR) {
        status = ngx_http_pagedllm_guided_error(ps, "'%s' makes a grammar "
                                                "over 64 KiB",
                                                ps->field->name);
        goto done;
    }

    g = pl_grammar_compile(text->data, text->len, err, sizeof(err));
    if (g == NULL) {
        status = ngx_http_pagedllm_guided_error(ps, "%s", err);
        goto done;
    }
    pl_grammar_free(g);

    p->grammar = ngx_pnalloc(ps->pool, text->len);
    if (p->grammar == NULL) {
        status = NGX_ERROR;
        goto done;
    }
    ngx_memcpy(p->grammar, text->data, text->len);
    p->grammar_len = text->len;
    p->grammar_field = ps->field->name;

done:

    pl_gtext_free(text);

    return status;
}


static ngx_int_t
ngx_http_pagedllm_guided_error(ngx_http_pagedllm_parse_t *ps,
    const char *fmt, const char *arg)
{
    ngx_http_pagedllm_error_set(ps->err, NGX_HTTP_BAD_REQUEST,
                                ps->field->name, fmt, arg);
    return NGX_ERROR;
}
