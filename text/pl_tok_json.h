/*
 * pl_tok_json: a small, fast, read-only JSON reader for tokenizer.json.
 *
 * jansson needs about 150 ms for a 9 MB Llama 3 tokenizer.json; loading
 * must take well under 100 ms, so the file is parsed here into one arena:
 * every value is a node, arrays and objects hold their children in one
 * contiguous block, strings are unescaped and NUL-terminated (they may
 * also contain NUL: use the length).  The whole tree is freed at once.
 */

#ifndef PL_TOK_JSON_H
#define PL_TOK_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    PL_JSON_NULL, PL_JSON_FALSE, PL_JSON_TRUE, PL_JSON_NUMBER,
    PL_JSON_STRING, PL_JSON_ARRAY, PL_JSON_OBJECT
} pl_json_type_t;

typedef struct pl_json_s  pl_json_t;

struct pl_json_s {
    uint32_t  type;
    uint32_t  n;            /* string bytes, array items, object members */
    union {
        const char  *s;
        double       num;
        pl_json_t   *kids;  /* arrays: n items; objects: n key,value pairs */
    } u;
};

typedef struct pl_json_doc_s  pl_json_doc_t;

/* Parses buf[len]; NULL with a message (and byte offset) in err. */
pl_json_doc_t *pl_json_parse(const char *buf, size_t len, char *err,
    size_t errlen);
const pl_json_t *pl_json_root(const pl_json_doc_t *doc);
void pl_json_free(pl_json_doc_t *doc);

/* Member of an object (NULL when absent or v is not an object). */
const pl_json_t *pl_json_get(const pl_json_t *v, const char *key);
/* Item of an array (NULL when out of range or not an array). */
const pl_json_t *pl_json_at(const pl_json_t *v, size_t i);
/* String value or NULL when v is not a string. */
const char *pl_json_str(const pl_json_t *v);
/* 1 for true, 0 for false, dflt when absent, null or not a boolean. */
int pl_json_bool(const pl_json_t *v, int dflt);

#endif /* PL_TOK_JSON_H */
