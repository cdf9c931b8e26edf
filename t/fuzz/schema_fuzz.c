/*
 * schema_fuzz: a libFuzzer target for the JSON Schema translator
 * (grammar/gr_schema.c) and the compiler it feeds.  Each input is a
 * schema's JSON text: pl_grammar_from_schema_text() refuses it with a
 * message, or its grammar either compiles or is refused with a message
 * (as the module does, texts over PL_MAX_GRAMMAR are not compiled).  A
 * compiled schema then gets the automaton checks of fuzz_grammar.h, and
 * three strings of its language, sampled with the input's bytes as the
 * choices, are held to independent checks:
 *
 *   - each is one JSON text by RFC 8259's grammar (a checker here, not
 *     jansson: jansson refuses some valid texts, 1e999 and lone
 *     surrogate escapes);
 *   - where jansson reads it, the value is valid against the schema for
 *     the keywords the translator supports (type, enum, const, anyOf,
 *     $ref, properties, required, additionalProperties, items, minItems,
 *     maxItems, minLength, maxLength; pattern and format are left to
 *     t/61-structured.t's RegExp and ajv).
 *
 *     make fuzz-schema SECONDS=60
 */

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pl_proto.h"

#include "fuzz_grammar.h"

#define FS_MAX_DEPTH  128


/* ---- RFC 8259's grammar ---- */

typedef struct {
    const uint8_t  *p;
    size_t          n;
    size_t          i;
} fs_text_t;


static int fs_value(fs_text_t *t, int depth);


static int
fs_at(fs_text_t *t, char ch)
{
    if (t->i < t->n && t->p[t->i] == (uint8_t) ch) {
        t->i++;
        return 1;
    }

    return 0;
}


static void
fs_blank(fs_text_t *t)
{
    while (t->i < t->n && (t->p[t->i] == ' ' || t->p[t->i] == '\t'
                           || t->p[t->i] == '\n' || t->p[t->i] == '\r'))
    {
        t->i++;
    }
}


static int
fs_digits(fs_text_t *t)
{
    size_t  start = t->i;

    while (t->i < t->n && t->p[t->i] >= '0' && t->p[t->i] <= '9') {
        t->i++;
    }

    return t->i > start;
}


static int
fs_number(fs_text_t *t)
{
    fs_at(t, '-');
    if (!fs_at(t, '0') && !(t->i < t->n && t->p[t->i] >= '1'
                            && t->p[t->i] <= '9' && fs_digits(t)))
    {
        return 0;
    }
    if (fs_at(t, '.') && !fs_digits(t)) {
        return 0;
    }
    if (fs_at(t, 'e') || fs_at(t, 'E')) {
        if (!fs_at(t, '+')) {
            fs_at(t, '-');
        }
        return fs_digits(t);
    }

    return 1;
}


/* one UTF-8 character of a string (no control character), advancing */
static int
fs_char(fs_text_t *t)
{
    const uint8_t  *p = t->p + t->i;
    size_t          left = t->n - t->i;
    uint32_t        cp;
    int             n, k;

    if (p[0] < 0x20) {
        return 0;
    }
    if (p[0] < 0x80) {
        t->i++;
        return 1;
    }
    n = p[0] >= 0xc2 && p[0] <= 0xdf ? 2 : (p[0] & 0xf0) == 0xe0 ? 3
        : p[0] >= 0xf0 && p[0] <= 0xf4 ? 4 : 0;
    if (n == 0 || (size_t) n > left) {
        return 0;
    }
    cp = p[0] & (0x7f >> n);
    for (k = 1; k < n; k++) {
        if ((p[k] & 0xc0) != 0x80) {
            return 0;
        }
        cp = (cp << 6) | (p[k] & 0x3f);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff))
        || (cp >= 0xd800 && cp < 0xe000))
    {
        return 0;
    }
    t->i += (size_t) n;

    return 1;
}


static int
fs_string(fs_text_t *t)
{
    int  k;

    if (!fs_at(t, '"')) {
        return 0;
    }
    while (t->i < t->n && t->p[t->i] != '"') {
        if (!fs_at(t, '\\')) {
            if (!fs_char(t)) {
                return 0;
            }
            continue;
        }
        if (t->i >= t->n) {
            return 0;
        }
        if (strchr("\"\\/bfnrt", t->p[t->i]) != NULL && t->p[t->i] != 0) {
            t->i++;
            continue;
        }
        if (!fs_at(t, 'u')) {
            return 0;
        }
        for (k = 0; k < 4; k++) {
            if (t->i >= t->n || strchr("0123456789abcdefABCDEF",
                                       t->p[t->i]) == NULL
                || t->p[t->i] == 0)
            {
                return 0;
            }
            t->i++;
        }
    }

    return fs_at(t, '"');
}


/* items of an array or members of an object, after the opening bracket */
static int
fs_members(fs_text_t *t, char close, int object, int depth)
{
    fs_blank(t);
    if (fs_at(t, close)) {
        return 1;
    }
    do {
        fs_blank(t);
        if (object) {
            if (!fs_string(t)) {
                return 0;
            }
            fs_blank(t);
            if (!fs_at(t, ':')) {
                return 0;
            }
        }
        if (!fs_value(t, depth + 1)) {
            return 0;
        }
        fs_blank(t);
    } while (fs_at(t, ','));

    return fs_at(t, close);
}


static int
fs_value(fs_text_t *t, int depth)
{
    static const char *const  words[] = { "true", "false", "null" };
    size_t                    k, len;

    if (depth > FS_MAX_DEPTH) {
        return 0;
    }
    fs_blank(t);
    if (t->i >= t->n) {
        return 0;
    }
    switch (t->p[t->i]) {
    case '{':
        t->i++;
        return fs_members(t, '}', 1, depth);
    case '[':
        t->i++;
        return fs_members(t, ']', 0, depth);
    case '"':
        return fs_string(t);
    }
    for (k = 0; k < 3; k++) {
        len = strlen(words[k]);
        if (t->n - t->i >= len && memcmp(t->p + t->i, words[k], len) == 0) {
            t->i += len;
            return 1;
        }
    }

    return fs_number(t);
}


static int
fs_is_json(const uint8_t *p, size_t n)
{
    fs_text_t  t = { p, n, 0 };

    if (!fs_value(&t, 0)) {
        return 0;
    }
    fs_blank(&t);

    return t.i == n;
}


/* ---- the value against the schema ----
   (written apart from gr_schema.c's type and $ref code on purpose: the
   check shares nothing with what it checks) */

static int fs_valid(json_t *root, json_t *s, json_t *v, int depth);


static json_t *
fs_resolve(json_t *root, const char *ref)
{
    json_t  *at = root;
    char     seg[256];
    size_t   n;

    for (ref++; *ref == '/'; ) {
        ref++;
        for (n = 0; *ref && *ref != '/' && n + 1 < sizeof(seg); ref++) {
            if (ref[0] == '~' && (ref[1] == '0' || ref[1] == '1')) {
                seg[n++] = ref[1] == '0' ? '~' : '/';
                ref++;
            } else {
                seg[n++] = *ref;
            }
        }
        seg[n] = '\0';
        at = json_object_get(at, seg);
    }

    return at;
}


static int
fs_type_is(json_t *v, const char *name)
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
fs_type_ok(json_t *s, json_t *v)
{
    json_t  *type = json_object_get(s, "type"), *t;
    size_t   i;

    if (type == NULL) {
        return 1;
    }
    if (json_is_string(type)) {
        return fs_type_is(v, json_string_value(type));
    }
    json_array_foreach(type, i, t) {
        if (json_is_string(t) && fs_type_is(v, json_string_value(t))) {
            return 1;
        }
    }

    return 0;
}


/* a count keyword holds: min <= n (or n <= max) when it is there */
static int
fs_count_ok(json_t *s, const char *k, size_t n, int is_max)
{
    json_t  *v = json_object_get(s, k);

    if (!json_is_integer(v)) {
        return 1;
    }

    return is_max ? (json_int_t) n <= json_integer_value(v)
                  : (json_int_t) n >= json_integer_value(v);
}


static size_t
fs_code_points(json_t *v)
{
    const char  *p = json_string_value(v);
    size_t       i, n = 0, len = json_string_length(v);

    for (i = 0; i < len; i++) {
        n += ((unsigned char) p[i] & 0xc0) != 0x80;
    }

    return n;
}


static int
fs_object_ok(json_t *root, json_t *s, json_t *v, int depth)
{
    json_t      *props = json_object_get(s, "properties");
    json_t      *extra = json_object_get(s, "additionalProperties");
    json_t      *required = json_object_get(s, "required"), *r, *x, *sub;
    const char  *key;
    size_t       i;

    json_array_foreach(required, i, r) {
        if (json_object_get(v, json_string_value(r)) == NULL) {
            return 0;
        }
    }
    json_object_foreach(v, key, x) {
        sub = json_object_get(props, key);
        if (sub == NULL) {
            if (json_is_false(extra)) {
                return 0;
            }
            sub = json_is_object(extra) ? extra : NULL;
        }
        if (sub != NULL && !fs_valid(root, sub, x, depth + 1)) {
            return 0;
        }
    }

    return 1;
}


static int
fs_valid(json_t *root, json_t *s, json_t *v, int depth)
{
    json_t  *list, *x;
    size_t   i;

    if (!json_is_object(s) || depth > FS_MAX_DEPTH) {
        return 1;
    }
    if (json_is_string(json_object_get(s, "$ref"))) {
        x = fs_resolve(root, json_string_value(json_object_get(s, "$ref")));
        return x == NULL || fs_valid(root, x, v, depth + 1);
    }
    if ((list = json_object_get(s, "anyOf")) != NULL) {
        json_array_foreach(list, i, x) {
            if (fs_valid(root, x, v, depth + 1)) {
                return 1;
            }
        }
        return 0;
    }
    if ((list = json_object_get(s, "enum")) != NULL) {
        json_array_foreach(list, i, x) {
            if (json_equal(x, v)) {
                return fs_type_ok(s, v);
            }
        }
        return 0;
    }
    if ((x = json_object_get(s, "const")) != NULL) {
        return json_equal(x, v) && fs_type_ok(s, v);
    }
    if (!fs_type_ok(s, v)) {
        return 0;
    }

    if (json_is_string(v)) {
        return fs_count_ok(s, "minLength", fs_code_points(v), 0)
               && fs_count_ok(s, "maxLength", fs_code_points(v), 1);
    }
    if (json_is_array(v)) {
        if (!fs_count_ok(s, "minItems", json_array_size(v), 0)
            || !fs_count_ok(s, "maxItems", json_array_size(v), 1))
        {
            return 0;
        }
        json_array_foreach(v, i, x) {
            if (!fs_valid(root, json_object_get(s, "items"), x, depth + 1)) {
                return 0;
            }
        }
        return 1;
    }
    if (json_is_object(v)) {
        return fs_object_ok(root, s, v, depth);
    }

    return 1;
}


/* ---- the target ---- */

static void
fs_check_sample(json_t *schema, const uint8_t *out, size_t len)
{
    json_t  *v;

    if (!fs_is_json(out, len)) {
        fprintf(stderr, "schema_fuzz: not JSON: %.*s\n", (int) len,
                (const char *) out);
        abort();
    }
    v = json_loadb((const char *) out, len, JSON_DECODE_ANY, NULL);
    if (v == NULL) {
        return;
    }
    if (!fs_valid(schema, schema, v, 0)) {
        fprintf(stderr, "schema_fuzz: not valid against the schema: %.*s\n",
                (int) len, (const char *) out);
        abort();
    }
    json_decref(v);
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t  out[FG_MAX_SAMPLE];
    pl_gtext_t      text = { 0 };
    pl_grammar_t   *g;
    json_t         *schema;
    fg_rand_t       r = { data, size };
    char            err[256];
    long            len;
    int             i;

    err[0] = '\0';
    if (pl_grammar_from_schema_text((const char *) data, size, &text, err,
                                    sizeof(err)) != 0)
    {
        if (err[0] == '\0') {
            fg_fail("a schema refused without a message");
        }
        pl_gtext_free(&text);
        return 0;
    }
    if (text.len > PL_MAX_GRAMMAR) {
        pl_gtext_free(&text);
        return 0;
    }

    g = pl_grammar_compile(text.data, text.len, err, sizeof(err));
    pl_gtext_free(&text);
    if (g == NULL) {
        if (err[0] == '\0') {
            fg_fail("a schema's grammar refused without a message");
        }
        return 0;
    }

    schema = json_loadb((const char *) data, size, JSON_DECODE_ANY, NULL);
    if (schema == NULL) {
        fg_fail("a schema translated but jansson cannot read it again");
    }
    for (i = 0; i < 3; i++) {
        len = fg_sample(g, &r, 256, i == 0 ? 4 : 0, out);
        if (len >= 0) {
            fs_check_sample(schema, out, (size_t) len);
        }
    }
    json_decref(schema);
    pl_grammar_free(g);

    return 0;
}
