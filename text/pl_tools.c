/*
 * pl_tools: the tool-call formats of chat templates (see pl_tools.h):
 * which one a template uses, the grammar that forces a call in it, where
 * a stream must hold its text back, and the parser of an answer's calls.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE     /* memmem */
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pl_tools.h"

#define PL_TOOLS_HERMES_OPEN    "<tool_call>"
#define PL_TOOLS_HERMES_CLOSE   "</tool_call>"
#define PL_TOOLS_MISTRAL_MARK   "[TOOL_CALLS]"
#define PL_TOOLS_LLAMA_TAG      "<|python_tag|>"

/* the key of a call's arguments in each format, and the text of the
   forced form: before the first call, between calls, after the last */
typedef struct {
    const char  *name;
    const char  *args_key;
    const char  *open;
    const char  *sep;
    const char  *close;
} pl_tools_form_t;

static const pl_tools_form_t  pl_tools_forms[] = {
    { "json", "arguments", "[", ",", "]" },
    { "hermes", "arguments", "<tool_call>\n", "\n</tool_call>\n<tool_call>\n",
      "\n</tool_call>" },
    { "llama", "parameters", "", "; ", "" },
    { "mistral", "arguments", "[", ",", "]" },
};

/* values that are data, not schemas: their "$ref" keys are not
   references */
static const char *const  pl_tools_data_keys[] = {
    "const", "enum", "default", "examples", NULL
};


pl_tools_format_t
pl_tools_detect(const char *src)
{
    if (strstr(src, PL_TOOLS_MISTRAL_MARK) != NULL) {
        return PL_TOOLS_MISTRAL;
    }
    if (strstr(src, PL_TOOLS_HERMES_OPEN) != NULL) {
        return PL_TOOLS_HERMES;
    }
    if (strstr(src, PL_TOOLS_LLAMA_TAG) != NULL
        || strstr(src, "Environment: ipython") != NULL)
    {
        return PL_TOOLS_LLAMA;
    }
    return PL_TOOLS_JSON;
}


const char *
pl_tools_format_name(pl_tools_format_t f)
{
    return pl_tools_forms[f].name;
}


static int
pl_tools_is_data_key(const char *key)
{
    int  i;

    for (i = 0; pl_tools_data_keys[i] != NULL; i++) {
        if (strcmp(key, pl_tools_data_keys[i]) == 0) {
            return 1;
        }
    }
    return 0;
}


/* every local "$ref" in schema s prefixed with base (where s now is) */
static int
pl_tools_rebase(json_t *s, const char *base)
{
    const char  *key, *ref;
    json_t      *v;
    size_t       i, n;
    char        *to;

    if (json_is_array(s)) {
        json_array_foreach(s, i, v) {
            if (pl_tools_rebase(v, base) != 0) {
                return -1;
            }
        }
        return 0;
    }

    json_object_foreach(s, key, v) {
        if (pl_tools_is_data_key(key)) {
            continue;
        }
        ref = json_string_value(v);
        if (strcmp(key, "$ref") == 0 && ref != NULL && ref[0] == '#') {
            n = strlen(base) + strlen(ref);
            to = malloc(n + 1);
            if (to == NULL) {
                return -1;
            }
            snprintf(to, n + 1, "%s%s", base, ref + 1);
            if (json_string_set(v, to) != 0) {
                free(to);
                return -1;
            }
            free(to);
            continue;
        }
        if (pl_tools_rebase(v, base) != 0) {
            return -1;
        }
    }
    return 0;
}


/* one function's branch: {name: const, args_key: a $ref to its
   parameters, kept at #/$defs/fI} */
static json_t *
pl_tools_branch(pl_tools_format_t f, const json_t *fn, size_t i,
    json_t *defs)
{
    const char  *key = pl_tools_forms[f].args_key;
    json_t      *params;
    char         base[64];

    params = json_object_get(fn, "parameters");
    params = params ? json_deep_copy(params)
                    : json_pack("{s:s,s:{},s:b}", "type", "object",
                                "properties", "additionalProperties", 0);
    snprintf(base, sizeof(base), "#/$defs/f%zu", i);

    if (params == NULL || pl_tools_rebase(params, base) != 0
        || json_object_set_new(defs, base + 8, params) != 0)
    {
        return NULL;
    }

    return json_pack("{s:s,s:{s:{s:O},s:{s:s}},s:[s,s],s:b}",
                     "type", "object",
                     "properties",
                         "name", "const", json_object_get(fn, "name"),
                         key, "$ref", base,
                     "required", "name", key,
                     "additionalProperties", 0);
}


/*
 * The parameters live under $defs, an object, so that a function's
 * references resolve by object keys alone: the document is
 * {"anyOf": [branch...], "$defs": {"f0": parameters, ...}}.
 */
json_t *
pl_tools_call_schema(pl_tools_format_t f, const json_t *functions)
{
    json_t  *any, *defs, *fn, *branch;
    size_t   i;

    any = json_array();
    defs = json_object();
    if (any == NULL || defs == NULL) {
        goto failed;
    }

    json_array_foreach(functions, i, fn) {
        branch = pl_tools_branch(f, fn, i, defs);
        if (branch == NULL || json_array_append_new(any, branch) != 0) {
            goto failed;
        }
    }

    return json_pack("{s:o,s:o}", "anyOf", any, "$defs", defs);

failed:

    json_decref(any);
    json_decref(defs);
    return NULL;
}


/* s as an EBNF string literal (with a space before it) at out; the end */
static char *
pl_tools_literal(char *out, const char *s)
{
    if (*s == '\0') {
        return out;
    }

    *out++ = ' ';
    *out++ = '"';
    for ( ; *s; s++) {
        if (*s == '\n') {
            *out++ = '\\';
            *out++ = 'n';
        } else {
            *out++ = *s;
        }
    }
    *out++ = '"';

    return out;
}


char *
pl_tools_grammar(pl_tools_format_t f, int parallel, const char *call_ebnf,
    size_t len, size_t *out_len)
{
    const pl_tools_form_t  *form = &pl_tools_forms[f];
    static const char       root[] = "root ::=";
    char                   *out, *p;

    if (len < sizeof(root) - 1 || memcmp(call_ebnf, root, sizeof(root) - 1))
    {
        return NULL;
    }

    out = malloc(len + 256);
    if (out == NULL) {
        return NULL;
    }

    p = pl_tools_literal(out + sprintf(out, "root ::="), form->open);
    p += sprintf(p, " call");
    if (parallel) {
        p = pl_tools_literal(p + sprintf(p, " ("), form->sep);
        p += sprintf(p, " call)*");
    }
    p = pl_tools_literal(p, form->close);
    p += sprintf(p, "\ncall");

    memcpy(p, call_ebnf + 4, len - 4);
    p += len - 4;
    *p = '\0';
    *out_len = p - out;

    return out;
}


static int
pl_tools_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}


static size_t
pl_tools_skip_space(const char *text, size_t len, size_t i)
{
    while (i < len && pl_tools_space(text[i])) {
        i++;
    }
    return i;
}


/* whether text[i..len) starts with s */
static int
pl_tools_at(const char *text, size_t len, size_t i, const char *s)
{
    size_t  n = strlen(s);

    return len - i >= n && memcmp(text + i, s, n) == 0;
}


/* the first occurrence of mark; len when none */
static size_t
pl_tools_find(const char *text, size_t len, const char *mark)
{
    const char  *at = memmem(text, len, mark, strlen(mark));

    return at ? (size_t) (at - text) : len;
}


/* the first occurrence of mark, or where a proper prefix of it ends the
   text; len when neither */
static size_t
pl_tools_find_mark(const char *text, size_t len, const char *mark)
{
    size_t  n = strlen(mark), k, at;

    at = pl_tools_find(text, len, mark);
    if (at < len) {
        return at;
    }
    for (k = n - 1 < len ? n - 1 : len; k > 0; k--) {
        if (memcmp(text + len - k, mark, k) == 0) {
            return len - k;
        }
    }
    return len;
}


size_t
pl_tools_hold(pl_tools_format_t f, const char *text, size_t len,
    int at_start)
{
    size_t  i, mark;

    mark = f == PL_TOOLS_HERMES
           ? pl_tools_find_mark(text, len, PL_TOOLS_HERMES_OPEN)
           : f == PL_TOOLS_MISTRAL
           ? pl_tools_find_mark(text, len, PL_TOOLS_MISTRAL_MARK)
           : len;

    if (!at_start || f == PL_TOOLS_HERMES) {
        return mark;
    }

    i = pl_tools_skip_space(text, len, 0);

    if (i == len || text[i] == (f == PL_TOOLS_LLAMA ? '{' : '[')
        || (f == PL_TOOLS_LLAMA
            && pl_tools_find_mark(text + i, len - i, PL_TOOLS_LLAMA_TAG)
               == 0))
    {
        return 0;
    }

    return mark;
}


/* whether name is one of names */
static int
pl_tools_known(const json_t *names, const char *name)
{
    json_t  *n;
    size_t   i;

    json_array_foreach(names, i, n) {
        if (strcmp(json_string_value(n), name) == 0) {
            return 1;
        }
    }
    return 0;
}


/*
 * Where the JSON value at text[i..len) ends, read only as far as its
 * brackets and strings (jansson checks what is kept): past its closing
 * quote or bracket, or at the delimiter after a scalar.  *complete: 0 when
 * the text ends first, and the end is then len.
 */
static size_t
pl_tools_value_end(const char *text, size_t len, size_t i, int *complete)
{
    int   depth = 0, in_str = 0, esc = 0;
    char  ch;

    *complete = 1;

    for ( ; i < len; i++) {
        ch = text[i];

        if (in_str) {
            if (esc) {
                esc = 0;
            } else if (ch == '\\') {
                esc = 1;
            } else if (ch == '"') {
                in_str = 0;
                if (depth == 0) {
                    return i + 1;
                }
            }
            continue;
        }

        if (ch == '"') {
            in_str = 1;
        } else if (ch == '{' || ch == '[') {
            depth++;
        } else if (ch == '}' || ch == ']') {
            if (--depth <= 0) {
                return depth == 0 ? i + 1 : i;
            }
        } else if (depth == 0 && (ch == ',' || pl_tools_space(ch))) {
            return i;
        }
    }

    *complete = 0;
    return len;
}


/* the span of member key's value in the object at text[i..end) (valid
   JSON, checked by jansson); -1 when it has none */
static int
pl_tools_member(const char *text, size_t end, size_t i, const char *key,
    size_t *at, size_t *n)
{
    json_t  *k;
    size_t   kend, vend;
    int      found, complete;

    for (i++; (i = pl_tools_skip_space(text, end, i)) < end
              && text[i] == '"'; )
    {
        kend = pl_tools_value_end(text, end, i, &complete);
        k = json_loadb(text + i, kend - i, JSON_DECODE_ANY, NULL);
        found = json_is_string(k) && strcmp(json_string_value(k), key) == 0;
        json_decref(k);

        i = pl_tools_skip_space(text, end, kend) + 1;
        i = pl_tools_skip_space(text, end, i);
        vend = pl_tools_value_end(text, end, i, &complete);

        if (found) {
            *at = i;
            *n = vend - i;
            return 0;
        }

        i = pl_tools_skip_space(text, end, vend);
        if (i >= end || text[i] != ',') {
            return -1;
        }
        i++;
    }
    return -1;
}


/*
 * Whether a call of format f may carry key, of value v, beside its name
 * and arguments: Mistral v0.3's template writes each call of the history
 * with its "id" (a string), and Llama 3 models write the "type":
 * "function" of the tools they were shown.  The call is the same without.
 */
static int
pl_tools_extra(pl_tools_format_t f, const char *key, const json_t *v)
{
    if (f == PL_TOOLS_MISTRAL && strcmp(key, "id") == 0) {
        return json_is_string(v);
    }
    if (f == PL_TOOLS_LLAMA && strcmp(key, "type") == 0) {
        return json_is_string(v)
               && strcmp(json_string_value(v), "function") == 0;
    }
    return 0;
}


/* whether call object c has keys other than its name, its arguments
   (under args_key) and the extras format f allows */
static int
pl_tools_stray_key(pl_tools_format_t f, const json_t *c,
    const char *args_key)
{
    const char  *key;
    json_t      *v;

    json_object_foreach((json_t *) c, key, v) {
        if (strcmp(key, "name") != 0 && strcmp(key, args_key) != 0
            && !pl_tools_extra(f, key, v))
        {
            return 1;
        }
    }
    return 0;
}


/*
 * Call object c of format f, written at text[start..end), appended to
 * calls as {"name", "arguments": the arguments' text as the model wrote
 * it}; -1 when c is not a call to one of names.
 */
static int
pl_tools_add(pl_tools_format_t f, json_t *calls, const json_t *c,
    const char *text, size_t start, size_t end, const json_t *names)
{
    json_t      *name, *args;
    const char  *key = "arguments";
    size_t       at, n;

    name = json_object_get(c, "name");
    args = json_object_get(c, key);
    if (args == NULL) {
        key = "parameters";
        args = json_object_get(c, key);
    }

    if (!json_is_object(c) || pl_tools_stray_key(f, c, key)
        || !json_is_string(name) || !json_is_object(args)
        || !pl_tools_known(names, json_string_value(name))
        || pl_tools_member(text, end, start, key, &at, &n) != 0)
    {
        return -1;
    }

    return json_array_append_new(calls, json_pack("{s:O,s:s%}", "name",
                                                  name, "arguments",
                                                  text + at, n));
}


/* the JSON value at text[*i..len), *i moved past it; NULL when none, or
   when an object in it repeats a key (the call's arguments are taken
   from the text by their key, which must name one value) */
static json_t *
pl_tools_value(const char *text, size_t len, size_t *i)
{
    json_error_t  err;
    json_t       *v;

    v = json_loadb(text + *i, len - *i,
                   JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY
                   | JSON_REJECT_DUPLICATES, &err);
    if (v != NULL) {
        *i += err.position;
    }
    return v;
}


/* one call object of format f at text[*i..len) */
static int
pl_tools_object(pl_tools_format_t f, json_t *calls, const char *text,
    size_t len, size_t *i, const json_t *names)
{
    json_t  *c;
    size_t   start = *i;
    int      rc;

    if (*i >= len || text[*i] != '{') {
        return -1;
    }
    c = pl_tools_value(text, len, i);
    rc = c ? pl_tools_add(f, calls, c, text, start, *i, names) : -1;
    json_decref(c);

    return rc;
}


/* a non-empty array of call objects of format f at text[*i..len) */
static int
pl_tools_array(pl_tools_format_t f, json_t *calls, const char *text,
    size_t len, size_t *i, const json_t *names)
{
    if (*i >= len || text[*i] != '[') {
        return -1;
    }

    for ((*i)++; ; (*i)++) {
        *i = pl_tools_skip_space(text, len, *i);
        if (pl_tools_object(f, calls, text, len, i, names) != 0) {
            return -1;
        }
        *i = pl_tools_skip_space(text, len, *i);
        if (*i < len && text[*i] == ']') {
            (*i)++;
            return 0;
        }
        if (*i >= len || text[*i] != ',') {
            return -1;
        }
    }
}


/* Hermes: blocks of <tool_call> object </tool_call> from i */
static int
pl_tools_hermes(json_t *calls, const char *text, size_t len, size_t i,
    const json_t *names)
{
    while ((i = pl_tools_skip_space(text, len, i)) < len) {
        if (!pl_tools_at(text, len, i, PL_TOOLS_HERMES_OPEN)) {
            return -1;
        }
        i = pl_tools_skip_space(text, len,
                                i + sizeof(PL_TOOLS_HERMES_OPEN) - 1);
        if (pl_tools_object(PL_TOOLS_HERMES, calls, text, len, &i, names)
            != 0)
        {
            return -1;
        }
        i = pl_tools_skip_space(text, len, i);
        if (!pl_tools_at(text, len, i, PL_TOOLS_HERMES_CLOSE)) {
            return -1;
        }
        i += sizeof(PL_TOOLS_HERMES_CLOSE) - 1;
    }
    return 0;
}


/* Llama: objects separated by ";" from i, after an optional python tag */
static int
pl_tools_llama(json_t *calls, const char *text, size_t len, size_t i,
    const json_t *names)
{
    i = pl_tools_skip_space(text, len, i);
    if (pl_tools_at(text, len, i, PL_TOOLS_LLAMA_TAG)) {
        i += sizeof(PL_TOOLS_LLAMA_TAG) - 1;
    }

    for ( ;; ) {
        i = pl_tools_skip_space(text, len, i);
        if (pl_tools_object(PL_TOOLS_LLAMA, calls, text, len, &i, names)
            != 0)
        {
            return -1;
        }
        i = pl_tools_skip_space(text, len, i);
        if (i == len) {
            return 0;
        }
        if (text[i++] != ';') {
            return -1;
        }
    }
}


json_t *
pl_tools_parse(pl_tools_format_t f, const char *text, size_t len,
    const json_t *names, size_t *content_len)
{
    json_t  *calls;
    size_t   start, i;
    int      rc;

    calls = json_array();
    if (calls == NULL) {
        return NULL;
    }

    start = 0;

    switch (f) {

    case PL_TOOLS_HERMES:
        start = pl_tools_find(text, len, PL_TOOLS_HERMES_OPEN);
        rc = start < len ? pl_tools_hermes(calls, text, len, start, names)
                         : -1;
        break;

    case PL_TOOLS_LLAMA:
        rc = pl_tools_llama(calls, text, len, 0, names);
        break;

    default:
        i = 0;
        if (f == PL_TOOLS_MISTRAL) {
            start = pl_tools_find(text, len, PL_TOOLS_MISTRAL_MARK);
            i = start < len ? start + sizeof(PL_TOOLS_MISTRAL_MARK) - 1 : 0;
            start = start < len ? start : 0;
        }
        i = pl_tools_skip_space(text, len, i);
        rc = pl_tools_array(f, calls, text, len, &i, names);
        if (rc == 0 && pl_tools_skip_space(text, len, i) != len) {
            rc = -1;
        }
        break;
    }

    if (rc != 0 || json_array_size(calls) == 0) {
        json_decref(calls);
        return NULL;
    }

    *content_len = start;

    return calls;
}


/* whether text[*i..len) starts with s (moved past it): 1; 0 when the
   text ends or differs first */
static int
pl_tools_take(const char *text, size_t len, size_t *i, const char *s)
{
    if (!pl_tools_at(text, len, *i, s)) {
        return 0;
    }
    *i += strlen(s);
    return 1;
}


size_t
pl_tools_progress(pl_tools_format_t f, const char *text, size_t len,
    pl_tools_span_t *spans, size_t max)
{
    const pl_tools_form_t  *form = &pl_tools_forms[f];
    const char             *q;
    pl_tools_span_t        *sp;
    size_t                  n, i;
    int                     complete;
    char                    key[16];

    snprintf(key, sizeof(key), "\",\"%s\":", form->args_key);
    i = 0;

    if (!pl_tools_take(text, len, &i, form->open)) {
        return 0;
    }

    for (n = 0; n < max; n++) {
        if (!pl_tools_take(text, len, &i, "{\"name\":\"")
            || (q = memchr(text + i, '"', len - i)) == NULL)
        {
            return n;
        }

        sp = &spans[n];
        sp->name = i;
        sp->name_len = q - (text + i);
        sp->args = 0;
        sp->args_len = 0;
        sp->done = 0;
        i = q - text;

        if (!pl_tools_take(text, len, &i, key)) {
            return n + 1;
        }

        sp->args = i;
        i = pl_tools_value_end(text, len, i, &complete);
        sp->args_len = i - sp->args;
        sp->done = complete;

        if (!complete || !pl_tools_take(text, len, &i, "}")
            || !pl_tools_take(text, len, &i, form->sep))
        {
            return n + 1;
        }
    }

    return n;
}
