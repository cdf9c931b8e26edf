/*
 * gr_schema: the request side's translators into the EBNF subset of
 * grammar.h: JSON Schema, any JSON object, a regex, a list of choices.
 *
 * JSON is written compact (no whitespace between tokens), which is the
 * one form every schema's language contains and keeps a model from
 * spending its tokens on blanks.  Numbers are bounded to what a double
 * holds: up to 16 integer digits, 15 fraction digits, 3 exponent digits.
 * Properties come in the schema's order; a property not required may be
 * left out; additional properties are never generated (a schema without
 * properties whose additionalProperties is a schema is a map of string
 * keys to it).  A $ref becomes a rule, so recursion is bounded by the
 * compiler's nesting limit.  string formats: date-time, date, time,
 * uuid, email, ipv4.  Every other keyword that constrains the value is
 * refused by name.
 */

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"

#define GR_SCHEMA_MAX_DEPTH  64      /* nesting of the schema document */
#define GR_SCHEMA_MAX_REFS   256

/* the building blocks every translation may use */
static const char  gr_base_rules[] =
    "chr ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ([\"\\\\/bfnrt] "
    "| \"u\" [0-9a-fA-F]{4})\n"
    "str ::= \"\\\"\" chr* \"\\\"\"\n"
    "int ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n"
    "num ::= int (\".\" [0-9]{1,15})? ([eE] [-+]? [0-9]{1,3})?\n"
    "bool ::= \"true\" | \"false\"\n"
    "null ::= \"null\"\n"
    "val ::= obj | arr | str | num | bool | null\n"
    "obj ::= \"{\" (str \":\" val (\",\" str \":\" val)*)? \"}\"\n"
    "arr ::= \"[\" (val (\",\" val)*)? \"]\"\n";

static const char *const  gr_formats[][2] = {
    { "date-time", "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])"
                   "T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
                   "(\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])" },
    { "date", "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])" },
    { "time", "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?"
              "(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])" },
    { "uuid", "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}"
              "-[0-9a-f]{12}" },
    { "email", "[a-z0-9_+-]{1,32}(\\.[a-z0-9_+-]{1,32}){0,3}@"
               "([a-z0-9]{1,20}\\.){1,3}[a-z]{2,8}" },
    { "ipv4", "((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}"
              "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])" },
};

static const char *const  gr_annotations[] = {
    "title", "description", "default", "examples", "$schema", "$id",
    "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
    "definitions", NULL
};

static const char *const  gr_keywords[] = {
    "type", "enum", "const", "anyOf", "$ref", "pattern", "format",
    "minLength", "maxLength", "items", "minItems", "maxItems",
    "properties", "required", "additionalProperties", NULL
};

typedef struct {
    json_t       *root;
    pl_gtext_t   *out;          /* the expression being written */
    pl_gtext_t    rules;        /* the rules of subschemas, written */
    int           n_rules;
    json_t       *refs[GR_SCHEMA_MAX_REFS];
    int           n_refs;
    char         *err;
    size_t        errlen;
    int           failed;
} gr_schema_t;


/* ---- text ---- */

void
pl_gtext_free(pl_gtext_t *t)
{
    free(t->data);
    memset(t, 0, sizeof(*t));
}


static void
gt_put(pl_gtext_t *t, const char *s, size_t n)
{
    size_t  cap;
    char   *p;

    if (t->oom) {
        return;
    }
    if (t->len + n + 1 > t->cap) {
        cap = t->cap ? t->cap : 256;
        while (cap < t->len + n + 1) {
            cap *= 2;
        }
        p = realloc(t->data, cap);
        if (p == NULL) {
            t->oom = 1;
            return;
        }
        t->data = p;
        t->cap = cap;
    }
    memcpy(t->data + t->len, s, n);
    t->len += n;
    t->data[t->len] = '\0';
}


static void
gt_str(pl_gtext_t *t, const char *s)
{
    gt_put(t, s, strlen(s));
}


static void
gt_printf(pl_gtext_t *t, const char *fmt, ...)
{
    char     buf[128];
    va_list  ap;
    int      n;

    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    gt_put(t, buf, n > 0 ? (size_t) n : 0);
}


/* bytes s[0..n) as an EBNF string literal */
static void
gt_literal(pl_gtext_t *t, const char *s, size_t n)
{
    unsigned char  c;
    size_t         i;

    gt_put(t, "\"", 1);
    for (i = 0; i < n; i++) {
        c = (unsigned char) s[i];
        if (c == '"' || c == '\\') {
            gt_put(t, "\\", 1);
            gt_put(t, (const char *) &c, 1);
        } else if (c < 0x20 || c == 0x7f) {
            gt_printf(t, "\\x%02x", c);
        } else {
            gt_put(t, (const char *) &c, 1);
        }
    }
    gt_put(t, "\"", 1);
}


/* a regex as a /regex/ terminal: unescaped slashes outside classes
   escaped */
static void
gt_regex(pl_gtext_t *t, const char *re, size_t n, int json)
{
    int     esc = 0, in_class = 0;
    size_t  i;

    gt_put(t, "/", 1);
    for (i = 0; i < n; i++) {
        if (!esc && re[i] == '/' && !in_class) {
            gt_put(t, "\\", 1);
        }
        if (!esc && re[i] == '[') {
            in_class = 1;
        } else if (!esc && re[i] == ']') {
            in_class = 0;
        }
        esc = !esc && re[i] == '\\';
        gt_put(t, re + i, 1);
    }
    gt_put(t, json ? "/j" : "/", json ? 2 : 1);
}


/* the compact JSON text of v as an EBNF literal */
static int
gt_json(pl_gtext_t *t, json_t *v)
{
    char  *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);

    if (s == NULL) {
        t->oom = 1;
        return -1;
    }
    gt_literal(t, s, strlen(s));
    free(s);

    return 0;
}


/* ---- schemas ---- */

static int
gr_fail(gr_schema_t *c, const char *fmt, ...)
{
    va_list  ap;

    if (!c->failed && c->errlen > 0) {
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
    }
    c->failed = 1;

    return -1;
}


static int
gr_in(const char *const *list, const char *k)
{
    for ( /* void */ ; *list; list++) {
        if (strcmp(*list, k) == 0) {
            return 1;
        }
    }

    return 0;
}


/* a non-negative integer keyword; -1 when absent; -2 when bad */
static long
gr_count(gr_schema_t *c, json_t *s, const char *k)
{
    json_t  *v = json_object_get(s, k);

    if (v == NULL) {
        return -1;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0
        || json_integer_value(v) > PL_GRAMMAR_MAX_REPEAT)
    {
        gr_fail(c, "'%s' must be an integer from 0 to %d", k,
                PL_GRAMMAR_MAX_REPEAT);
        return -2;
    }

    return (long) json_integer_value(v);
}


static int gr_value(gr_schema_t *c, json_t *s, int depth);


/*
 * Subschema s as a rule of its own, referred to by name here: a schema
 * used in two places (an array's items, before and after the comma; a
 * property's value in each branch of the optional ones) is written once,
 * so the text grows with the schema, not with the number of uses.
 */
static int
gr_sub(gr_schema_t *c, json_t *s, int depth)
{
    pl_gtext_t  *outer = c->out, body = { 0 };
    int          n = c->n_rules++;

    gt_printf(outer, " s%d", n);
    c->out = &body;
    gr_value(c, s, depth);
    c->out = outer;
    gt_printf(&c->rules, "s%d ::=", n);
    gt_put(&c->rules, body.data ? body.data : "", body.len);
    gt_str(&c->rules, "\n");
    if (body.oom) {
        c->rules.oom = 1;
    }
    pl_gtext_free(&body);

    return c->failed ? -1 : 0;
}


/* the rule name of the schema $ref points to */
static int
gr_ref(gr_schema_t *c, json_t *s)
{
    const char  *p = json_string_value(json_object_get(s, "$ref"));
    json_t      *at = c->root;
    char         seg[256];
    size_t       n;
    int          i;

    if (p == NULL || p[0] != '#') {
        return gr_fail(c, "'$ref' must be a local reference (\"#...\")");
    }
    for (p++; *p == '/'; ) {
        p++;
        for (n = 0; *p && *p != '/' && n + 1 < sizeof(seg); p++) {
            if (p[0] == '~' && (p[1] == '0' || p[1] == '1')) {
                seg[n++] = p[1] == '0' ? '~' : '/';
                p++;
            } else {
                seg[n++] = *p;
            }
        }
        seg[n] = '\0';
        at = json_object_get(at, seg);
    }
    if (*p != '\0' || at == NULL) {
        return gr_fail(c, "'$ref' %s does not resolve",
                       json_string_value(json_object_get(s, "$ref")));
    }

    for (i = 0; i < c->n_refs && c->refs[i] != at; i++) {
        /* void */
    }
    if (i == c->n_refs) {
        if (i == GR_SCHEMA_MAX_REFS) {
            return gr_fail(c, "more than %d '$ref' targets",
                           GR_SCHEMA_MAX_REFS);
        }
        c->refs[c->n_refs++] = at;
    }
    gt_printf(c->out, " ref%d ", i);

    return 0;
}


/* whether JSON value v has JSON Schema type name */
static int
gr_type_is(json_t *v, const char *name)
{
    return strcmp(name, "string") == 0 ? json_is_string(v)
           : strcmp(name, "integer") == 0 ? json_is_integer(v)
           : strcmp(name, "number") == 0 ? json_is_number(v)
           : strcmp(name, "boolean") == 0 ? json_is_boolean(v)
           : strcmp(name, "null") == 0 ? json_is_null(v)
           : strcmp(name, "object") == 0 ? json_is_object(v)
           : strcmp(name, "array") == 0 ? json_is_array(v) : 0;
}


static int
gr_type_ok(json_t *s, json_t *v)
{
    json_t  *type = json_object_get(s, "type"), *t;
    size_t   i;

    if (json_is_string(type)) {
        return gr_type_is(v, json_string_value(type));
    }
    json_array_foreach(type, i, t) {
        if (gr_type_is(v, json_string_value(t))) {
            return 1;
        }
    }

    return type == NULL;
}


/* enum or const: the listed values of the right type */
static int
gr_values(gr_schema_t *c, json_t *s)
{
    json_t  *list = json_object_get(s, "enum"), *v, *one = NULL;
    size_t   i;
    int      n = 0;

    if (list == NULL) {
        one = json_array();
        if (one == NULL || json_array_append(one,
                                             json_object_get(s, "const")))
        {
            json_decref(one);
            return gr_fail(c, "out of memory");
        }
        list = one;
    } else if (!json_is_array(list) || json_array_size(list) == 0) {
        return gr_fail(c, "'enum' must be a non-empty array");
    }

    gt_str(c->out, " (");
    json_array_foreach(list, i, v) {
        if (!gr_type_ok(s, v)) {
            continue;
        }
        gt_str(c->out, n++ ? " | " : " ");
        gt_json(c->out, v);
    }
    gt_str(c->out, " )");
    json_decref(one);

    return n ? 0 : gr_fail(c, "no 'enum' value has the schema's 'type'");
}


static int
gr_string(gr_schema_t *c, json_t *s)
{
    json_t      *pattern = json_object_get(s, "pattern");
    json_t      *format = json_object_get(s, "format");
    long         min = gr_count(c, s, "minLength");
    long         max = gr_count(c, s, "maxLength");
    const char  *f;
    size_t       i;

    if (min < -1 || max < -1) {
        return -1;
    }
    if ((pattern || format) && (min >= 0 || max >= 0)) {
        return gr_fail(c, "'%s' with 'minLength' or 'maxLength' is not "
                       "supported", pattern ? "pattern" : "format");
    }
    if (pattern && format) {
        return gr_fail(c, "'pattern' with 'format' is not supported");
    }

    if (pattern) {
        if (!json_is_string(pattern)) {
            return gr_fail(c, "'pattern' must be a string");
        }
        gt_str(c->out, " \"\\\"\" ");
        gt_regex(c->out, json_string_value(pattern),
                 json_string_length(pattern), 1);
        gt_str(c->out, " \"\\\"\"");
        return 0;
    }

    if (format) {
        f = json_string_value(format);
        for (i = 0; f && i < sizeof(gr_formats) / sizeof(gr_formats[0]);
             i++)
        {
            if (strcmp(f, gr_formats[i][0]) == 0) {
                gt_str(c->out, " \"\\\"\" ");
                gt_regex(c->out, gr_formats[i][1], strlen(gr_formats[i][1]),
                         0);
                gt_str(c->out, " \"\\\"\"");
                return 0;
            }
        }
        return gr_fail(c, "'format' %s is not supported (date-time, date, "
                       "time, uuid, email, ipv4 are)", f ? f : "");
    }

    if (min < 0 && max < 0) {
        gt_str(c->out, " str");
    } else if (max < 0) {
        gt_printf(c->out, " \"\\\"\" chr{%ld,} \"\\\"\"", min);
    } else {
        if (min > max) {
            return gr_fail(c, "'minLength' is above 'maxLength'");
        }
        gt_printf(c->out, " \"\\\"\" chr{%ld,%ld} \"\\\"\"",
                  min < 0 ? 0 : min, max);
    }

    return 0;
}


/* the schema of items, or any value */
static int
gr_items(gr_schema_t *c, json_t *s, int depth, int *rule)
{
    json_t  *items = json_object_get(s, "items");

    if (items == NULL) {
        gt_str(c->out, " val");
        return 0;
    }
    if (*rule < 0) {
        *rule = c->n_rules;
        return gr_sub(c, items, depth + 1);
    }
    gt_printf(c->out, " s%d", *rule);

    return 0;
}


static int
gr_array(gr_schema_t *c, json_t *s, int depth)
{
    long  min = gr_count(c, s, "minItems");
    long  max = gr_count(c, s, "maxItems");
    int   rule = -1;

    if (min < -1 || max < -1) {
        return -1;
    }
    min = min < 0 ? 0 : min;
    if (max >= 0 && min > max) {
        return gr_fail(c, "'minItems' is above 'maxItems'");
    }
    if (max == 0) {
        gt_str(c->out, " \"[]\"");
        return 0;
    }

    gt_str(c->out, " \"[\" (");
    gr_items(c, s, depth, &rule);
    gt_str(c->out, " (\",\"");
    gr_items(c, s, depth, &rule);
    if (max < 0) {
        gt_printf(c->out, "){%ld,}", min > 0 ? min - 1 : 0);
    } else {
        gt_printf(c->out, "){%ld,%ld}", min > 0 ? min - 1 : 0, max - 1);
    }
    gt_str(c->out, min > 0 ? ") \"]\"" : ")? \"]\"");

    return c->failed ? -1 : 0;
}


/* "key": value, the value's rule written at its first use (*rule) */
static int
gr_member(gr_schema_t *c, const char *key, json_t *v, int depth, int *rule)
{
    json_t  *k = json_string(key);

    if (k == NULL) {
        return gr_fail(c, "out of memory");
    }
    gt_str(c->out, " ");
    gt_json(c->out, k);
    json_decref(k);
    gt_str(c->out, " \":\"");
    if (*rule < 0) {
        *rule = c->n_rules;
        return gr_sub(c, v, depth + 1);
    }
    gt_printf(c->out, " s%d", *rule);

    return c->failed ? -1 : 0;
}


/* properties from i on, after one was written (each preceded by a comma,
   the optional ones optional) */
static int
gr_members_after(gr_schema_t *c, const char **keys, json_t **vals,
    const int *req, int *rules, int i, int n, int depth)
{
    for ( /* void */ ; i < n && !c->failed; i++) {
        gt_str(c->out, " (\",\"");
        gr_member(c, keys[i], vals[i], depth, &rules[i]);
        gt_str(c->out, req[i] ? ")" : ")?");
    }

    return c->failed ? -1 : 0;
}


/* properties from i on, none written yet */
static int
gr_members(gr_schema_t *c, const char **keys, json_t **vals,
    const int *req, int *rules, int i, int n, int depth)
{
    if (i == n) {
        return 0;
    }

    gt_str(c->out, " (");
    gr_member(c, keys[i], vals[i], depth, &rules[i]);
    gr_members_after(c, keys, vals, req, rules, i + 1, n, depth);
    if (!req[i]) {
        gt_str(c->out, " |");
        gr_members(c, keys, vals, req, rules, i + 1, n, depth);
    }
    gt_str(c->out, " )");

    return c->failed ? -1 : 0;
}


/* whether every name in required is a property, marking them in req */
static int
gr_required(gr_schema_t *c, json_t *s, const char **keys, int n, int *req)
{
    json_t  *required = json_object_get(s, "required"), *r;
    size_t   i;
    int      k;

    if (required != NULL && !json_is_array(required)) {
        return gr_fail(c, "'required' must be an array of strings");
    }
    json_array_foreach(required, i, r) {
        for (k = 0; k < n; k++) {
            if (json_is_string(r) && strcmp(json_string_value(r), keys[k])
                                     == 0)
            {
                req[k] = 1;
                break;
            }
        }
        if (k == n) {
            return gr_fail(c, "required property %s is not in "
                           "'properties'",
                           json_is_string(r) ? json_string_value(r) : "?");
        }
    }

    return 0;
}


static int
gr_object(gr_schema_t *c, json_t *s, int depth)
{
    json_t       *props = json_object_get(s, "properties"), *v;
    json_t       *extra = json_object_get(s, "additionalProperties");
    const char   *key, **keys;
    json_t      **vals;
    int          *req, *rules, n = 0, rc;

    if (props != NULL && !json_is_object(props)) {
        return gr_fail(c, "'properties' must be an object");
    }
    if (json_object_size(props) == 0) {
        /* a required name is never a property here: refused */
        if (gr_required(c, s, NULL, 0, NULL) != 0) {
            return -1;
        }
        if (json_is_false(extra)) {
            gt_str(c->out, " \"{}\"");
            return 0;
        }
        if (!json_is_object(extra)) {
            gt_str(c->out, " obj");
            return 0;
        }
        n = c->n_rules;
        gt_str(c->out, " \"{\" (str \":\"");
        gr_sub(c, extra, depth + 1);
        gt_printf(c->out, " (\",\" str \":\" s%d)*)? \"}\"", n);
        return c->failed ? -1 : 0;
    }

    keys = calloc(json_object_size(props), sizeof(char *));
    vals = calloc(json_object_size(props), sizeof(json_t *));
    req = calloc(json_object_size(props), sizeof(int));
    rules = malloc(json_object_size(props) * sizeof(int));
    if (keys == NULL || vals == NULL || req == NULL || rules == NULL) {
        rc = gr_fail(c, "out of memory");
        goto done;
    }
    json_object_foreach(props, key, v) {
        keys[n] = key;
        rules[n] = -1;
        vals[n++] = v;
    }

    rc = gr_required(c, s, keys, n, req);
    if (rc == 0) {
        gt_str(c->out, " \"{\"");
        gr_members(c, keys, vals, req, rules, 0, n, depth);
        gt_str(c->out, " \"}\"");
        rc = c->failed ? -1 : 0;
    }

done:

    free(keys);
    free(vals);
    free(req);
    free(rules);

    return rc;
}


/* a schema of one type name */
static int
gr_typed(gr_schema_t *c, json_t *s, const char *type, int depth)
{
    if (strcmp(type, "string") == 0) {
        return gr_string(c, s);
    }
    if (strcmp(type, "object") == 0) {
        return gr_object(c, s, depth);
    }
    if (strcmp(type, "array") == 0) {
        return gr_array(c, s, depth);
    }
    if (strcmp(type, "integer") == 0 || strcmp(type, "number") == 0
        || strcmp(type, "boolean") == 0 || strcmp(type, "null") == 0)
    {
        gt_str(c->out, type[0] == 'i' ? " int" : type[0] == 'n'
                       ? (type[1] == 'u' && type[2] == 'm' ? " num" : " null")
                       : " bool");
        return 0;
    }

    return gr_fail(c, "'type' %s is not a JSON Schema type", type);
}


/* the type a schema without one implies by its keywords */
static const char *
gr_implied_type(json_t *s)
{
    if (json_object_get(s, "properties")
        || json_object_get(s, "additionalProperties")
        || json_object_get(s, "required"))
    {
        return "object";
    }
    if (json_object_get(s, "items") || json_object_get(s, "minItems")
        || json_object_get(s, "maxItems"))
    {
        return "array";
    }
    if (json_object_get(s, "pattern") || json_object_get(s, "format")
        || json_object_get(s, "minLength") || json_object_get(s, "maxLength"))
    {
        return "string";
    }

    return NULL;
}


static int
gr_types(gr_schema_t *c, json_t *s, int depth)
{
    json_t      *type = json_object_get(s, "type"), *t;
    const char  *implied;
    size_t       i;

    if (type == NULL) {
        implied = gr_implied_type(s);
        if (implied == NULL) {
            gt_str(c->out, " val");
            return 0;
        }
        return gr_typed(c, s, implied, depth);
    }
    if (json_is_string(type)) {
        return gr_typed(c, s, json_string_value(type), depth);
    }
    if (!json_is_array(type) || json_array_size(type) == 0) {
        return gr_fail(c, "'type' must be a string or a non-empty array");
    }

    gt_str(c->out, " (");
    json_array_foreach(type, i, t) {
        if (!json_is_string(t)) {
            return gr_fail(c, "'type' must be a string or a non-empty "
                           "array of strings");
        }
        gt_str(c->out, i ? " |" : "");
        if (gr_typed(c, s, json_string_value(t), depth) != 0) {
            return -1;
        }
    }
    gt_str(c->out, " )");

    return 0;
}


static int
gr_any_of(gr_schema_t *c, json_t *s, int depth)
{
    json_t  *list = json_object_get(s, "anyOf"), *v;
    size_t   i;

    if (!json_is_array(list) || json_array_size(list) == 0) {
        return gr_fail(c, "'anyOf' must be a non-empty array");
    }

    gt_str(c->out, " (");
    json_array_foreach(list, i, v) {
        gt_str(c->out, i ? " | (" : " (");
        if (gr_value(c, v, depth + 1) != 0) {
            return -1;
        }
        gt_str(c->out, " )");
    }
    gt_str(c->out, " )");

    return 0;
}


/* every keyword known; of the ones that choose the form, one at most */
static int
gr_check_keywords(gr_schema_t *c, json_t *s)
{
    static const char *const  forms[] = { "enum", "const", "anyOf", "$ref" };
    const char               *key, *form = NULL;
    json_t                   *v;
    size_t                    i;

    json_object_foreach(s, key, v) {
        if (!gr_in(gr_keywords, key) && !gr_in(gr_annotations, key)) {
            return gr_fail(c, "'%s' is not supported", key);
        }
    }
    for (i = 0; i < 4; i++) {
        if (json_object_get(s, forms[i]) == NULL) {
            continue;
        }
        if (form != NULL) {
            return gr_fail(c, "'%s' with '%s' is not supported", form,
                           forms[i]);
        }
        form = forms[i];
    }
    if (form != NULL && form[0] != 'e' && form[0] != 'c'
        && json_object_get(s, "type") != NULL)
    {
        return gr_fail(c, "'%s' with 'type' is not supported", form);
    }

    return 0;
}


static int
gr_value(gr_schema_t *c, json_t *s, int depth)
{
    if (c->failed) {
        return -1;
    }
    if (depth > GR_SCHEMA_MAX_DEPTH) {
        return gr_fail(c, "the schema nests deeper than %d",
                       GR_SCHEMA_MAX_DEPTH);
    }
    if (json_is_true(s)) {
        gt_str(c->out, " val");
        return 0;
    }
    if (!json_is_object(s)) {
        return gr_fail(c, "a schema must be an object or true");
    }
    if (gr_check_keywords(c, s) != 0) {
        return -1;
    }

    if (json_object_get(s, "$ref")) {
        return gr_ref(c, s);
    }
    if (json_object_get(s, "anyOf")) {
        return gr_any_of(c, s, depth);
    }
    if (json_object_get(s, "enum") || json_object_get(s, "const")) {
        return gr_values(c, s);
    }

    return gr_types(c, s, depth);
}


int
pl_grammar_from_schema_text(const char *json, size_t len, pl_gtext_t *out,
    char *err, size_t errlen)
{
    gr_schema_t   c = { .out = out, .err = err, .errlen = errlen };
    json_error_t  jerr;
    int           i;

    c.root = json_loadb(json, len, JSON_DECODE_ANY, &jerr);
    if (c.root == NULL) {
        snprintf(err, errlen, "the schema is not valid JSON: %s", jerr.text);
        return -1;
    }

    gt_str(out, "root ::=");
    gr_value(&c, c.root, 0);
    gt_str(out, "\n");
    for (i = 0; i < c.n_refs && !c.failed; i++) {
        gt_printf(out, "ref%d ::=", i);
        gr_value(&c, c.refs[i], 0);
        gt_str(out, "\n");
    }
    gt_put(out, c.rules.data ? c.rules.data : "", c.rules.len);
    gt_str(out, gr_base_rules);
    json_decref(c.root);
    if (c.rules.oom) {
        out->oom = 1;
    }
    pl_gtext_free(&c.rules);

    if (out->oom && !c.failed) {
        gr_fail(&c, "out of memory");
    }

    return c.failed ? -1 : 0;
}


int
pl_grammar_from_json_object(pl_gtext_t *out)
{
    gt_str(out, "root ::= obj\n");
    gt_str(out, gr_base_rules);

    return out->oom ? -1 : 0;
}


int
pl_grammar_from_regex(const char *re, size_t len, pl_gtext_t *out)
{
    gt_str(out, "root ::= ");
    gt_regex(out, re, len, 0);
    gt_str(out, "\n");

    return out->oom ? -1 : 0;
}


int
pl_grammar_from_choices(const char *const *choices, const size_t *lens,
    size_t n, pl_gtext_t *out)
{
    size_t  i;

    gt_str(out, "root ::=");
    for (i = 0; i < n; i++) {
        gt_str(out, i ? " | " : " ");
        gt_literal(out, choices[i], lens[i]);
    }
    gt_str(out, "\n");

    return out->oom ? -1 : 0;
}
