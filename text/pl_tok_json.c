/*
 * pl_tok_json: the arena JSON reader behind pl_tokenizer_load (see
 * pl_tok_json.h for why it exists).  A recursive descent parser keeps
 * the children of the value being parsed on a scratch stack and copies
 * them into the arena as one block when the array or object closes.
 * Nesting is limited so hostile input cannot exhaust the C stack.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pl_tok_json.h"
#include "pl_tokenizer.h"
#include "pl_unicode.h"

#define PL_JSON_MAX_DEPTH  128
#define PL_JSON_CHUNK      (1 << 20)

typedef struct pl_json_chunk_s  pl_json_chunk_t;

struct pl_json_chunk_s {
    pl_json_chunk_t  *next;
    size_t            used;
    size_t            size;
    max_align_t       data[];
};

struct pl_json_doc_s {
    pl_json_chunk_t  *chunks;
    pl_json_t         root;
};

typedef struct {
    const char      *p;
    const char      *start;
    const char      *end;
    pl_json_doc_t   *doc;
    pl_json_t       *stack;
    size_t           nstack;
    size_t           capstack;
    char            *err;
    size_t           errlen;
    int              failed;
} pl_json_parser_t;

static int pl_json_value(pl_json_parser_t *ps, pl_json_t *v, int depth);
static int pl_json_number_slow(pl_json_parser_t *ps, pl_json_t *v);

static int
pl_json_fail(pl_json_parser_t *ps, const char *what)
{
    if (!ps->failed) {
        snprintf(ps->err, ps->errlen, "JSON: %s at byte %zu", what,
                 (size_t) (ps->p - ps->start));
        ps->failed = 1;
    }
    return -1;
}

static void *
pl_json_alloc(pl_json_parser_t *ps, size_t size)
{
    pl_json_chunk_t  *c = ps->doc->chunks;
    size_t            align = sizeof(max_align_t);
    void             *p;

    size = (size + align - 1) / align * align;
    if (c == NULL || c->size - c->used < size) {
        size_t  csize = size > PL_JSON_CHUNK ? size : PL_JSON_CHUNK;

        c = malloc(sizeof(pl_json_chunk_t) + csize);
        if (c == NULL) {
            pl_json_fail(ps, "out of memory");
            return NULL;
        }
        c->used = 0;
        c->size = csize;
        c->next = ps->doc->chunks;
        ps->doc->chunks = c;
    }
    p = (char *) c->data + c->used;
    c->used += size;
    return p;
}

static void
pl_json_ws(pl_json_parser_t *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\n'
                               || *ps->p == '\r' || *ps->p == '\t'))
    {
        ps->p++;
    }
}

static int
pl_json_hex4(pl_json_parser_t *ps, uint32_t *v)
{
    int  i;

    *v = 0;
    if (ps->end - ps->p < 4) {
        return pl_json_fail(ps, "short \\u escape");
    }
    for (i = 0; i < 4; i++) {
        char  c = *ps->p++;

        *v <<= 4;
        if (c >= '0' && c <= '9') {
            *v |= (uint32_t) (c - '0');
        } else if ((c | 32) >= 'a' && (c | 32) <= 'f') {
            *v |= (uint32_t) ((c | 32) - 'a' + 10);
        } else {
            return pl_json_fail(ps, "bad \\u escape");
        }
    }
    return 0;
}

/* \uXXXX (with surrogate pair); lone surrogates become U+FFFD. */
static int
pl_json_unicode_escape(pl_json_parser_t *ps, uint32_t *cp)
{
    uint32_t  lo;

    if (pl_json_hex4(ps, cp) != 0) {
        return -1;
    }
    if (*cp >= 0xdc00 && *cp <= 0xdfff) {
        *cp = 0xfffd;
    } else if (*cp >= 0xd800 && *cp <= 0xdbff) {
        if (ps->end - ps->p >= 6 && ps->p[0] == '\\' && ps->p[1] == 'u') {
            const char  *save = ps->p;

            ps->p += 2;
            if (pl_json_hex4(ps, &lo) != 0) {
                return -1;
            }
            if (lo >= 0xdc00 && lo <= 0xdfff) {
                *cp = 0x10000 + ((*cp - 0xd800) << 10) + (lo - 0xdc00);
                return 0;
            }
            ps->p = save;
        }
        *cp = 0xfffd;
    }
    return 0;
}

static int
pl_json_string(pl_json_parser_t *ps, pl_json_t *v)
{
    const char  *q = ++ps->p;
    char        *out;
    size_t       n = 0;
    uint32_t     cp;

    while (q < ps->end && *q != '"') {
        q += (*q == '\\' && q + 1 < ps->end) ? 2 : 1;
    }
    if (q >= ps->end) {
        return pl_json_fail(ps, "unterminated string");
    }
    out = pl_json_alloc(ps, (size_t) (q - ps->p) + 1);
    if (out == NULL) {
        return -1;
    }
    while (*ps->p != '"') {
        const char  *run = ps->p;

        while (*ps->p != '"' && *ps->p != '\\'
               && (unsigned char) *ps->p >= 0x20)
        {
            ps->p++;
        }
        memcpy(out + n, run, (size_t) (ps->p - run));
        n += (size_t) (ps->p - run);
        if (*ps->p == '"') {
            break;
        }
        if (*ps->p != '\\') {
            return pl_json_fail(ps, "control character in string");
        }
        ps->p++;
        switch (*ps->p++) {
        case '"': out[n++] = '"'; break;
        case '\\': out[n++] = '\\'; break;
        case '/': out[n++] = '/'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'n': out[n++] = '\n'; break;
        case 'r': out[n++] = '\r'; break;
        case 't': out[n++] = '\t'; break;
        case 'u':
            if (pl_json_unicode_escape(ps, &cp) != 0) {
                return -1;
            }
            n += pl_utf8_put(cp, (uint8_t *) out + n);
            break;
        default:
            return pl_json_fail(ps, "bad escape in string");
        }
    }
    ps->p++;
    out[n] = '\0';
    if (!pl_utf8_valid(out, n)) {
        return pl_json_fail(ps, "string is not valid UTF-8");
    }
    v->type = PL_JSON_STRING;
    v->n = (uint32_t) n;
    v->u.s = out;
    return 0;
}

static int
pl_json_number(pl_json_parser_t *ps, pl_json_t *v)
{
    const char  *p = ps->p;
    long long    iv = 0;

    while (p < ps->end && *p >= '0' && *p <= '9' && p - ps->p < 15) {
        iv = iv * 10 + (*p++ - '0');
    }
    if (p > ps->p && (p == ps->end || strchr(".eE0123456789", *p) == NULL
                      || *p == '\0'))
    {
        ps->p = p;
        v->type = PL_JSON_NUMBER;
        v->n = 0;
        v->u.num = (double) iv;
        return 0;
    }
    return pl_json_number_slow(ps, v);
}

/* Any JSON number through strtod (the fast path above takes plain
   non-negative integers, which is nearly every number in a vocabulary). */
static int
pl_json_number_slow(pl_json_parser_t *ps, pl_json_t *v)
{
    char   buf[64];
    char  *endp;
    size_t n = 0;

    while (ps->p + n < ps->end && n < sizeof(buf) - 1
           && strchr("+-0123456789.eE", ps->p[n]) != NULL && ps->p[n])
    {
        buf[n] = ps->p[n];
        n++;
    }
    buf[n] = '\0';
    v->u.num = strtod(buf, &endp);
    if (n == 0 || endp != buf + n) {
        return pl_json_fail(ps, "bad number");
    }
    ps->p += n;
    v->type = PL_JSON_NUMBER;
    v->n = 0;
    return 0;
}

static int
pl_json_push(pl_json_parser_t *ps, const pl_json_t *v)
{
    if (ps->nstack == ps->capstack) {
        size_t      cap = ps->capstack ? ps->capstack * 2 : 1024;
        pl_json_t  *s = realloc(ps->stack, cap * sizeof(pl_json_t));

        if (s == NULL) {
            return pl_json_fail(ps, "out of memory");
        }
        ps->stack = s;
        ps->capstack = cap;
    }
    ps->stack[ps->nstack++] = *v;
    return 0;
}

/* Array or object: children parsed onto the stack, then moved. */
static int
pl_json_container(pl_json_parser_t *ps, pl_json_t *v, int depth)
{
    int         is_obj = (*ps->p == '{');
    char        close = is_obj ? '}' : ']';
    size_t      base = ps->nstack, count;
    pl_json_t   item;

    if (depth >= PL_JSON_MAX_DEPTH) {
        return pl_json_fail(ps, "nesting too deep");
    }
    ps->p++;
    pl_json_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
    } else {
        for (;;) {
            pl_json_ws(ps);
            if (is_obj) {
                if (ps->p >= ps->end || *ps->p != '"') {
                    return pl_json_fail(ps, "expected a member name");
                }
                if (pl_json_string(ps, &item) != 0
                    || pl_json_push(ps, &item) != 0)
                {
                    return -1;
                }
                pl_json_ws(ps);
                if (ps->p >= ps->end || *ps->p++ != ':') {
                    return pl_json_fail(ps, "expected ':'");
                }
            }
            if (pl_json_value(ps, &item, depth + 1) != 0
                || pl_json_push(ps, &item) != 0)
            {
                return -1;
            }
            pl_json_ws(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            if (ps->p < ps->end && *ps->p == close) {
                ps->p++;
                break;
            }
            return pl_json_fail(ps, is_obj ? "expected ',' or '}'"
                                           : "expected ',' or ']'");
        }
    }
    count = ps->nstack - base;
    v->type = is_obj ? PL_JSON_OBJECT : PL_JSON_ARRAY;
    v->n = (uint32_t) (is_obj ? count / 2 : count);
    v->u.kids = NULL;
    if (count) {
        v->u.kids = pl_json_alloc(ps, count * sizeof(pl_json_t));
        if (v->u.kids == NULL) {
            return -1;
        }
        memcpy(v->u.kids, ps->stack + base, count * sizeof(pl_json_t));
    }
    ps->nstack = base;
    return 0;
}

static int
pl_json_literal(pl_json_parser_t *ps, pl_json_t *v, const char *word,
    pl_json_type_t type)
{
    size_t  n = strlen(word);

    if ((size_t) (ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0) {
        return pl_json_fail(ps, "unexpected character");
    }
    ps->p += n;
    v->type = type;
    v->n = 0;
    return 0;
}

static int
pl_json_value(pl_json_parser_t *ps, pl_json_t *v, int depth)
{
    pl_json_ws(ps);
    if (ps->p >= ps->end) {
        return pl_json_fail(ps, "unexpected end of input");
    }
    switch (*ps->p) {
    case '"':
        return pl_json_string(ps, v);
    case '{': case '[':
        return pl_json_container(ps, v, depth);
    case 't':
        return pl_json_literal(ps, v, "true", PL_JSON_TRUE);
    case 'f':
        return pl_json_literal(ps, v, "false", PL_JSON_FALSE);
    case 'n':
        return pl_json_literal(ps, v, "null", PL_JSON_NULL);
    default:
        return pl_json_number(ps, v);
    }
}

pl_json_doc_t *
pl_json_parse(const char *buf, size_t len, char *err, size_t errlen)
{
    pl_json_parser_t  ps;

    memset(&ps, 0, sizeof(ps));
    ps.p = ps.start = buf;
    ps.end = buf + len;
    ps.err = err;
    ps.errlen = errlen;
    ps.doc = calloc(1, sizeof(pl_json_doc_t));
    if (ps.doc == NULL) {
        snprintf(err, errlen, "JSON: out of memory");
        return NULL;
    }
    if (pl_json_value(&ps, &ps.doc->root, 0) == 0) {
        pl_json_ws(&ps);
        if (ps.p != ps.end) {
            pl_json_fail(&ps, "trailing characters");
        }
    }
    free(ps.stack);
    if (ps.failed) {
        pl_json_free(ps.doc);
        return NULL;
    }
    return ps.doc;
}

const pl_json_t *
pl_json_root(const pl_json_doc_t *doc)
{
    return &doc->root;
}

void
pl_json_free(pl_json_doc_t *doc)
{
    pl_json_chunk_t  *c, *next;

    if (doc == NULL) {
        return;
    }
    for (c = doc->chunks; c != NULL; c = next) {
        next = c->next;
        free(c);
    }
    free(doc);
}

const pl_json_t *
pl_json_get(const pl_json_t *v, const char *key)
{
    size_t  i, klen = strlen(key);

    if (v == NULL || v->type != PL_JSON_OBJECT) {
        return NULL;
    }
    for (i = 0; i < v->n; i++) {
        const pl_json_t  *k = &v->u.kids[2 * i];

        if (k->n == klen && memcmp(k->u.s, key, klen) == 0) {
            return &v->u.kids[2 * i + 1];
        }
    }
    return NULL;
}

const pl_json_t *
pl_json_at(const pl_json_t *v, size_t i)
{
    if (v == NULL || v->type != PL_JSON_ARRAY || i >= v->n) {
        return NULL;
    }
    return &v->u.kids[i];
}

const char *
pl_json_str(const pl_json_t *v)
{
    return (v != NULL && v->type == PL_JSON_STRING) ? v->u.s : NULL;
}

int
pl_json_bool(const pl_json_t *v, int dflt)
{
    if (v == NULL || v->type == PL_JSON_NULL) {
        return dflt;
    }
    return v->type == PL_JSON_TRUE ? 1 : v->type == PL_JSON_FALSE ? 0 : dflt;
}
