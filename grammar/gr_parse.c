/*
 * gr_parse: the EBNF subset and the regex syntax of grammar.h into a
 * tree of nodes.  Both are recursive descent over a cursor.  Rules are
 * created at their first mention, by definition or by reference, and a
 * reference to a rule never defined is an error once the text is read.
 * Character classes become code point ranges; a literal becomes its UTF-8
 * bytes (inside a JSON string, with JSON's escapes where it needs them).
 */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gr_internal.h"

#define GR_CHUNK  (64 * 1024)

struct gr_chunk_s {
    gr_chunk_t  *next;
    size_t       used;
    size_t       size;
    _Alignas(16) unsigned char  data[];
};

typedef struct {
    gr_tree_t   *t;
    const char  *s;
    size_t       pos;
    size_t       len;
    int          json;          /* regex: inside a JSON string */
    int          depth;
    char        *err;
    size_t       errlen;
    int          failed;
} gr_cursor_t;

#define GR_MAX_DEPTH  200       /* nesting of groups while parsing */


void *
gr_alloc(gr_arena_t *a, size_t size)
{
    gr_chunk_t  *c = a->chunks;
    size_t       want;
    void        *p;

    size = (size + 15) & ~(size_t) 15;

    if (c == NULL || c->size - c->used < size) {
        want = size > GR_CHUNK ? size : GR_CHUNK;
        c = malloc(sizeof(gr_chunk_t) + want);
        if (c == NULL) {
            a->oom = 1;
            return NULL;
        }
        c->next = a->chunks;
        c->used = 0;
        c->size = want;
        a->chunks = c;
    }

    p = c->data + c->used;
    c->used += size;
    memset(p, 0, size);

    return p;
}


void
gr_arena_free(gr_arena_t *a)
{
    gr_chunk_t  *c, *next;

    for (c = a->chunks; c; c = next) {
        next = c->next;
        free(c);
    }
    a->chunks = NULL;
}


void
gr_tree_free(gr_tree_t *t)
{
    free(t->rules);
    gr_arena_free(&t->arena);
    memset(t, 0, sizeof(*t));
}


static int
gr_fail(gr_cursor_t *c, const char *fmt, ...)
{
    va_list  ap;
    int      n = 0;

    if (c->failed) {
        return -1;
    }
    c->failed = 1;

    if (c->errlen > 0) {
        va_start(ap, fmt);
        n = vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
    }
    if (n >= 0 && (size_t) n < c->errlen) {
        snprintf(c->err + n, c->errlen - (size_t) n, " at offset %zu",
                 c->pos);
    }

    return -1;
}


static gr_node_t *
gr_node(gr_cursor_t *c, gr_kind_t kind)
{
    gr_node_t  *n = gr_alloc(&c->t->arena, sizeof(gr_node_t));

    if (n == NULL) {
        gr_fail(c, "out of memory");
        return NULL;
    }
    n->kind = kind;

    return n;
}


/* a node of kind with the n nodes of kids */
static gr_node_t *
gr_node_kids(gr_cursor_t *c, gr_kind_t kind, gr_node_t **kids, int n)
{
    gr_node_t  *node;

    if (n == 1 && kind != GR_REPEAT) {
        return kids[0];
    }

    node = gr_node(c, kind);
    if (node == NULL) {
        return NULL;
    }
    node->kids = gr_alloc(&c->t->arena, (size_t) (n ? n : 1)
                                        * sizeof(gr_node_t *));
    if (node->kids == NULL) {
        gr_fail(c, "out of memory");
        return NULL;
    }
    memcpy(node->kids, kids, (size_t) n * sizeof(gr_node_t *));
    node->n_kids = n;

    return node;
}


static gr_node_t *
gr_node_bytes(gr_cursor_t *c, const uint8_t *b, int len)
{
    gr_node_t  *n = gr_node(c, GR_BYTES);

    if (n == NULL) {
        return NULL;
    }
    n->bytes = gr_alloc(&c->t->arena, (size_t) (len ? len : 1));
    if (n->bytes == NULL) {
        gr_fail(c, "out of memory");
        return NULL;
    }
    memcpy(n->bytes, b, (size_t) len);
    n->len = len;

    return n;
}


/* ---- code points ---- */

/* the code point at the cursor (UTF-8), advancing; -1 at bad UTF-8 */
static int32_t
gr_next_cp(gr_cursor_t *c)
{
    const uint8_t  *p = (const uint8_t *) c->s + c->pos;
    size_t          left = c->len - c->pos;
    uint32_t        cp;
    int             n, i;

    if (p[0] < 0x80) {
        c->pos++;
        return p[0];
    }
    n = (p[0] & 0xe0) == 0xc0 ? 2 : (p[0] & 0xf0) == 0xe0 ? 3
        : (p[0] & 0xf8) == 0xf0 ? 4 : 0;
    if (n == 0 || (size_t) n > left) {
        return gr_fail(c, "invalid UTF-8");
    }
    cp = p[0] & (0x7f >> n);
    for (i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80) {
            return gr_fail(c, "invalid UTF-8");
        }
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    c->pos += (size_t) n;

    return (int32_t) cp;
}


static int
gr_hexval(int ch)
{
    return ch >= '0' && ch <= '9' ? ch - '0'
           : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
           : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
}


/* n hex digits at the cursor; -1 when they are not there */
static int32_t
gr_hex(gr_cursor_t *c, int n)
{
    int32_t  v = 0;
    int      i, d;

    for (i = 0; i < n; i++) {
        if (c->pos >= c->len || (d = gr_hexval(c->s[c->pos])) < 0) {
            return gr_fail(c, "bad hexadecimal escape");
        }
        v = v * 16 + d;
        c->pos++;
    }

    return v;
}


/* \uXXXX (a surrogate pair joined) or \u{X...}, after the u */
static int32_t
gr_unicode_escape(gr_cursor_t *c)
{
    int32_t  cp, lo;
    size_t   save;

    if (c->pos < c->len && c->s[c->pos] == '{') {
        c->pos++;
        for (cp = 0; c->pos < c->len && c->s[c->pos] != '}'; c->pos++) {
            if (gr_hexval(c->s[c->pos]) < 0 || cp > GR_MAX_CP) {
                return gr_fail(c, "bad \\u{} escape");
            }
            cp = cp * 16 + gr_hexval(c->s[c->pos]);
        }
        if (c->pos >= c->len || cp > GR_MAX_CP) {
            return gr_fail(c, "bad \\u{} escape");
        }
        c->pos++;
        return cp;
    }

    cp = gr_hex(c, 4);
    if (cp >= 0xd800 && cp < 0xdc00 && c->pos + 6 <= c->len
        && c->s[c->pos] == '\\' && c->s[c->pos + 1] == 'u')
    {
        save = c->pos;
        c->pos += 2;
        lo = gr_hex(c, 4);
        if (lo >= 0xdc00 && lo < 0xe000) {
            return 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        }
        c->pos = save;
        c->failed = 0;
    }

    return cp;
}


/* ---- classes ---- */

typedef struct {
    uint32_t  *r;
    int        n;
    int        cap;
} gr_ranges_t;


static int
gr_ranges_add(gr_ranges_t *rs, uint32_t lo, uint32_t hi)
{
    uint32_t  *p;

    if (rs->n + 1 > rs->cap) {
        rs->cap = rs->cap ? rs->cap * 2 : 16;
        p = realloc(rs->r, (size_t) rs->cap * 2 * sizeof(uint32_t));
        if (p == NULL) {
            return -1;
        }
        rs->r = p;
    }
    rs->r[2 * rs->n] = lo;
    rs->r[2 * rs->n + 1] = hi;
    rs->n++;

    return 0;
}


static int
gr_range_cmp(const void *a, const void *b)
{
    const uint32_t  *x = a, *y = b;

    return x[0] < y[0] ? -1 : x[0] > y[0];
}


int
gr_ranges_normalize(uint32_t *r, int n)
{
    int  i, k = 0;

    if (n == 0) {
        return 0;
    }
    qsort(r, (size_t) n, 2 * sizeof(uint32_t), gr_range_cmp);

    for (i = 1; i < n; i++) {
        if (r[2 * i] <= r[2 * k + 1] + 1) {
            if (r[2 * i + 1] > r[2 * k + 1]) {
                r[2 * k + 1] = r[2 * i + 1];
            }
        } else {
            k++;
            r[2 * k] = r[2 * i];
            r[2 * k + 1] = r[2 * i + 1];
        }
    }

    return k + 1;
}


/* the complement of normalized ranges within 0..GR_MAX_CP */
static int
gr_ranges_negate(gr_ranges_t *rs)
{
    gr_ranges_t  out = { 0 };
    uint32_t     next = 0;
    int          i;

    rs->n = gr_ranges_normalize(rs->r, rs->n);
    for (i = 0; i < rs->n; i++) {
        if (rs->r[2 * i] > next && gr_ranges_add(&out, next,
                                                rs->r[2 * i] - 1) != 0)
        {
            free(out.r);
            return -1;
        }
        next = rs->r[2 * i + 1] + 1;
    }
    if (next <= GR_MAX_CP && gr_ranges_add(&out, next, GR_MAX_CP) != 0) {
        free(out.r);
        return -1;
    }

    free(rs->r);
    *rs = out;

    return 0;
}


/* what a JSON string cannot hold unescaped, taken out of rs */
static int
gr_ranges_json(gr_ranges_t *rs)
{
    static const uint32_t  cut[] = { 0, 0x1f, '"', '"', '\\', '\\' };
    gr_ranges_t            keep = { 0 };
    int                    i, j, rc = 0;
    uint32_t               lo, hi;

    rs->n = gr_ranges_normalize(rs->r, rs->n);
    for (i = 0; i < rs->n && rc == 0; i++) {
        lo = rs->r[2 * i];
        hi = rs->r[2 * i + 1];
        for (j = 0; j < 3 && lo <= hi; j++) {
            if (cut[2 * j + 1] < lo || cut[2 * j] > hi) {
                continue;
            }
            if (cut[2 * j] > lo) {
                rc |= gr_ranges_add(&keep, lo, cut[2 * j] - 1);
            }
            lo = cut[2 * j + 1] + 1;
        }
        if (lo <= hi) {
            rc |= gr_ranges_add(&keep, lo, hi);
        }
    }

    free(rs->r);
    *rs = keep;

    return rc;
}


/* \d \w \s (negated for upper case) into rs; 0 when ch is none of them */
static int
gr_class_escape(gr_ranges_t *rs, int ch, int *err)
{
    static const uint32_t  digit[] = { '0', '9' };
    static const uint32_t  word[] = { '0', '9', 'A', 'Z', '_', '_',
                                      'a', 'z' };
    static const uint32_t  space[] = { 9, 13, ' ', ' ', 0xa0, 0xa0,
                                       0x1680, 0x1680, 0x2000, 0x200a,
                                       0x2028, 0x2029, 0x202f, 0x202f,
                                       0x205f, 0x205f, 0x3000, 0x3000,
                                       0xfeff, 0xfeff };
    const uint32_t        *set;
    gr_ranges_t            one = { 0 };
    int                    n, i, rc = 0;

    switch (ch | 0x20) {
    case 'd': set = digit; n = 1; break;
    case 'w': set = word; n = 4; break;
    case 's': set = space; n = 10; break;
    default: return 0;
    }

    for (i = 0; i < n; i++) {
        rc |= gr_ranges_add(&one, set[2 * i], set[2 * i + 1]);
    }
    if (rc == 0 && (ch == 'D' || ch == 'W' || ch == 'S')) {
        rc = gr_ranges_negate(&one);
    }
    for (i = 0; rc == 0 && i < one.n; i++) {
        rc = gr_ranges_add(rs, one.r[2 * i], one.r[2 * i + 1]);
    }
    free(one.r);
    *err = rc;

    return 1;
}


/* an escape's code point after the backslash (not a class escape) */
static int32_t
gr_escape_cp(gr_cursor_t *c, int in_class)
{
    int  ch;

    if (c->pos >= c->len) {
        return gr_fail(c, "a backslash ends the pattern");
    }
    ch = (unsigned char) c->s[c->pos++];

    switch (ch) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case 'f': return '\f';
    case 'v': return '\v';
    case '0': return 0;
    case 'x': return gr_hex(c, 2);
    case 'u': return gr_unicode_escape(c);
    case 'b':
        if (in_class) {
            return '\b';
        }
        break;
    default:
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')
            || (ch >= '1' && ch <= '9'))
        {
            break;
        }
        c->pos--;
        return gr_next_cp(c);
    }

    c->pos--;
    return gr_fail(c, "unsupported escape \\%c", ch);
}


static gr_node_t *
gr_class_node(gr_cursor_t *c, gr_ranges_t *rs)
{
    gr_node_t  *n;

    if (c->json && gr_ranges_json(rs) != 0) {
        free(rs->r);
        gr_fail(c, "out of memory");
        return NULL;
    }
    rs->n = gr_ranges_normalize(rs->r, rs->n);

    n = gr_node(c, rs->n ? GR_CLASS : GR_FAIL);
    if (n != NULL && rs->n) {
        n->ranges = gr_alloc(&c->t->arena,
                             (size_t) rs->n * 2 * sizeof(uint32_t));
        if (n->ranges == NULL) {
            gr_fail(c, "out of memory");
            n = NULL;
        } else {
            memcpy(n->ranges, rs->r, (size_t) rs->n * 2 * sizeof(uint32_t));
            n->n_ranges = rs->n;
        }
    }
    free(rs->r);

    return n;
}


/* one member of a class: a code point, or a class escape (-2) */
static int32_t
gr_class_atom(gr_cursor_t *c, gr_ranges_t *rs)
{
    int  ch, err = 0;

    if (c->s[c->pos] != '\\') {
        return gr_next_cp(c);
    }
    c->pos++;
    if (c->pos < c->len
        && gr_class_escape(rs, (unsigned char) c->s[c->pos], &err))
    {
        c->pos++;
        return err ? gr_fail(c, "out of memory") : -2;
    }
    ch = gr_escape_cp(c, 1);

    return ch;
}


/* [...] with the cursor on the [ */
static gr_node_t *
gr_class(gr_cursor_t *c)
{
    gr_ranges_t  rs = { 0 };
    int32_t      lo, hi;
    int          neg = 0;

    c->pos++;
    if (c->pos < c->len && c->s[c->pos] == '^') {
        neg = 1;
        c->pos++;
    }

    while (c->pos < c->len && c->s[c->pos] != ']') {
        lo = gr_class_atom(c, &rs);
        if (lo == -1) {
            goto failed;
        }
        if (lo == -2) {
            continue;
        }
        hi = lo;
        if (c->pos + 1 < c->len && c->s[c->pos] == '-'
            && c->s[c->pos + 1] != ']')
        {
            c->pos++;
            hi = gr_class_atom(c, &rs);
            if (hi < 0 || hi < lo) {
                gr_fail(c, "bad range in a character class");
                goto failed;
            }
        }
        if (gr_ranges_add(&rs, (uint32_t) lo, (uint32_t) hi) != 0) {
            gr_fail(c, "out of memory");
            goto failed;
        }
    }

    if (c->pos >= c->len) {
        gr_fail(c, "unterminated character class");
        goto failed;
    }
    c->pos++;

    if (neg && gr_ranges_negate(&rs) != 0) {
        gr_fail(c, "out of memory");
        goto failed;
    }

    return gr_class_node(c, &rs);

failed:

    free(rs.r);
    return NULL;
}


/* a code point as the bytes it is in the output */
static gr_node_t *
gr_literal(gr_cursor_t *c, uint32_t cp)
{
    static const char  hex[] = "0123456789abcdef";
    uint8_t            b[8];
    int                n;

    if (c->json && (cp < 0x20 || cp == '"' || cp == '\\')) {
        b[0] = '\\';
        switch (cp) {
        case '"': b[1] = '"'; n = 2; break;
        case '\\': b[1] = '\\'; n = 2; break;
        case '\n': b[1] = 'n'; n = 2; break;
        case '\r': b[1] = 'r'; n = 2; break;
        case '\t': b[1] = 't'; n = 2; break;
        default:
            memcpy(b + 1, "u00", 3);
            b[4] = (uint8_t) hex[cp >> 4];
            b[5] = (uint8_t) hex[cp & 15];
            n = 6;
        }
        return gr_node_bytes(c, b, n);
    }

    if (cp >= 0xd800 && cp < 0xe000) {
        gr_fail(c, "a lone surrogate");
        return NULL;
    }

    return gr_node_bytes(c, b, pl_utf8_put(cp, b));
}


/* "." : any code point but line terminators */
static gr_node_t *
gr_dot(gr_cursor_t *c)
{
    gr_ranges_t  rs = { 0 };

    if (gr_ranges_add(&rs, '\n', '\n') || gr_ranges_add(&rs, '\r', '\r')
        || gr_ranges_add(&rs, 0x2028, 0x2029) || gr_ranges_negate(&rs))
    {
        free(rs.r);
        gr_fail(c, "out of memory");
        return NULL;
    }

    return gr_class_node(c, &rs);
}


/* ---- quantifiers (shared) ---- */

static int
gr_number(gr_cursor_t *c, int *v)
{
    size_t  start = c->pos;
    long    n = 0;

    while (c->pos < c->len && c->s[c->pos] >= '0' && c->s[c->pos] <= '9') {
        n = n * 10 + (c->s[c->pos++] - '0');
        if (n > PL_GRAMMAR_MAX_REPEAT) {
            return gr_fail(c, "a repetition count above %d",
                           PL_GRAMMAR_MAX_REPEAT);
        }
    }
    *v = (int) n;

    return c->pos > start ? 0 : 1;
}


/* {m}, {m,}, {m,n} at the cursor into min, max: 0; 1 when the text is
   not one (a regex reads the brace as itself); -1 on error */
static int
gr_braces(gr_cursor_t *c, int *min, int *max)
{
    size_t  save = c->pos;
    int     rc;

    c->pos++;
    rc = gr_number(c, min);
    if (rc != 0) {
        c->pos = save;
        return rc;
    }
    *max = *min;
    if (c->pos < c->len && c->s[c->pos] == ',') {
        c->pos++;
        *max = -1;
        if (c->pos < c->len && c->s[c->pos] != '}') {
            rc = gr_number(c, max);
            if (rc != 0) {
                c->pos = save;
                return rc;
            }
        }
    }
    if (c->pos >= c->len || c->s[c->pos] != '}') {
        c->pos = save;
        return 1;
    }
    c->pos++;
    if (*max >= 0 && *max < *min) {
        return gr_fail(c, "a repetition {%d,%d} with its bounds reversed",
                       *min, *max);
    }

    return 0;
}


/* quantifier at the cursor applied to n (n itself when there is none) */
static gr_node_t *
gr_quantify(gr_cursor_t *c, gr_node_t *n, int lazy_ok)
{
    gr_node_t  *r;
    int         min, max, rc;

    if (n == NULL || c->pos >= c->len) {
        return n;
    }

    switch (c->s[c->pos]) {
    case '*': min = 0; max = -1; c->pos++; break;
    case '+': min = 1; max = -1; c->pos++; break;
    case '?': min = 0; max = 1; c->pos++; break;
    case '{':
        rc = gr_braces(c, &min, &max);
        if (rc != 0) {
            return rc < 0 ? NULL : n;
        }
        break;
    default:
        return n;
    }

    if (lazy_ok && c->pos < c->len && c->s[c->pos] == '?') {
        c->pos++;
    }

    r = gr_node_kids(c, GR_REPEAT, &n, 1);
    if (r != NULL) {
        r->min = min;
        r->max = max;
    }

    return r;
}


/* ---- regex ---- */

static gr_node_t *gr_re_alt(gr_cursor_t *c);


static gr_node_t *
gr_re_group(gr_cursor_t *c)
{
    gr_node_t  *n;

    c->pos++;
    if (c->pos < c->len && c->s[c->pos] == '?') {
        if (c->pos + 1 < c->len && c->s[c->pos + 1] == ':') {
            c->pos += 2;
        } else {
            gr_fail(c, "unsupported group (?%c",
                    c->pos + 1 < c->len ? c->s[c->pos + 1] : ' ');
            return NULL;
        }
    }
    if (++c->depth > GR_MAX_DEPTH) {
        gr_fail(c, "groups nested too deep");
        return NULL;
    }

    n = gr_re_alt(c);
    c->depth--;
    if (n == NULL) {
        return NULL;
    }
    if (c->pos >= c->len || c->s[c->pos] != ')') {
        gr_fail(c, "unbalanced parenthesis");
        return NULL;
    }
    c->pos++;

    return n;
}


static gr_node_t *
gr_re_escape(gr_cursor_t *c)
{
    gr_ranges_t  rs = { 0 };
    int32_t      cp;
    int          err = 0;

    c->pos++;
    if (c->pos < c->len
        && gr_class_escape(&rs, (unsigned char) c->s[c->pos], &err))
    {
        c->pos++;
        if (err) {
            free(rs.r);
            gr_fail(c, "out of memory");
            return NULL;
        }
        return gr_class_node(c, &rs);
    }

    cp = gr_escape_cp(c, 0);

    return cp < 0 ? NULL : gr_literal(c, (uint32_t) cp);
}


static gr_node_t *
gr_re_atom(gr_cursor_t *c)
{
    int32_t  cp;

    switch (c->s[c->pos]) {
    case '(':
        return gr_re_group(c);
    case '[':
        return gr_class(c);
    case '.':
        c->pos++;
        return gr_dot(c);
    case '\\':
        return gr_re_escape(c);
    case '^':
        if (c->pos == 0) {
            c->pos++;
            return gr_node(c, GR_EMPTY);
        }
        gr_fail(c, "'^' inside the pattern");
        return NULL;
    case '$':
        if (c->pos + 1 == c->len) {
            c->pos++;
            return gr_node(c, GR_EMPTY);
        }
        gr_fail(c, "'$' inside the pattern");
        return NULL;
    case '*': case '+': case '?':
        gr_fail(c, "nothing to repeat");
        return NULL;
    case ')':
        gr_fail(c, "unbalanced parenthesis");
        return NULL;
    }

    cp = gr_next_cp(c);

    return cp < 0 ? NULL : gr_literal(c, (uint32_t) cp);
}


/* a growing list of nodes */
typedef struct {
    gr_node_t  **a;
    int          n;
    int          cap;
} gr_list_t;


static int
gr_list_add(gr_cursor_t *c, gr_list_t *l, gr_node_t *n)
{
    gr_node_t  **p;

    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 8;
        p = realloc(l->a, (size_t) l->cap * sizeof(gr_node_t *));
        if (p == NULL) {
            return gr_fail(c, "out of memory");
        }
        l->a = p;
    }
    l->a[l->n++] = n;

    return 0;
}


/* items until end(c), as one node (a sequence, the item, or empty) */
static gr_node_t *
gr_seq_of(gr_cursor_t *c, gr_node_t *(*item)(gr_cursor_t *c),
    int (*end)(gr_cursor_t *c))
{
    gr_list_t   l = { 0 };
    gr_node_t  *n;

    while (!end(c)) {
        n = item(c);
        if (n == NULL || gr_list_add(c, &l, n) != 0) {
            free(l.a);
            return NULL;
        }
    }

    n = l.n ? gr_node_kids(c, GR_SEQ, l.a, l.n) : gr_node(c, GR_EMPTY);
    free(l.a);

    return n;
}


/* seq(c) alternatives separated by "|" (blanks skipped before it with
   skip) */
static gr_node_t *
gr_alt_of(gr_cursor_t *c, gr_node_t *(*seq)(gr_cursor_t *c),
    void (*skip)(gr_cursor_t *c))
{
    gr_list_t   l = { 0 };
    gr_node_t  *n;

    for ( ;; ) {
        n = seq(c);
        if (n == NULL || gr_list_add(c, &l, n) != 0) {
            free(l.a);
            return NULL;
        }
        if (skip) {
            skip(c);
        }
        if (c->pos >= c->len || c->s[c->pos] != '|') {
            break;
        }
        c->pos++;
    }

    n = gr_node_kids(c, GR_ALT, l.a, l.n);
    free(l.a);

    return n;
}


static gr_node_t *
gr_re_item(gr_cursor_t *c)
{
    return gr_quantify(c, gr_re_atom(c), 1);
}


static int
gr_re_end(gr_cursor_t *c)
{
    return c->pos >= c->len || c->s[c->pos] == '|' || c->s[c->pos] == ')';
}


static gr_node_t *
gr_re_seq(gr_cursor_t *c)
{
    return gr_seq_of(c, gr_re_item, gr_re_end);
}


static gr_node_t *
gr_re_alt(gr_cursor_t *c)
{
    return gr_alt_of(c, gr_re_seq, NULL);
}


gr_node_t *
gr_parse_regex(gr_tree_t *t, const char *s, size_t len, int json, char *err,
    size_t errlen)
{
    gr_cursor_t  c = { .t = t, .s = s, .len = len, .json = json,
                       .err = err, .errlen = errlen };
    gr_node_t   *n;

    n = gr_re_alt(&c);
    if (n != NULL && c.pos < c.len) {
        gr_fail(&c, "unbalanced parenthesis");
        return NULL;
    }

    return c.failed ? NULL : n;
}


/* ---- EBNF ---- */

static void
gr_skip(gr_cursor_t *c)
{
    while (c->pos < c->len) {
        if (c->s[c->pos] == '#') {
            while (c->pos < c->len && c->s[c->pos] != '\n') {
                c->pos++;
            }
        } else if (c->s[c->pos] == ' ' || c->s[c->pos] == '\t'
                   || c->s[c->pos] == '\n' || c->s[c->pos] == '\r')
        {
            c->pos++;
        } else {
            break;
        }
    }
}


static int
gr_name_char(int ch, int first)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_'
           || (!first && ((ch >= '0' && ch <= '9') || ch == '-'));
}


/* the length of the name at pos, 0 if none */
static size_t
gr_name_len(const gr_cursor_t *c, size_t pos)
{
    size_t  n = 0;

    while (pos + n < c->len && gr_name_char(c->s[pos + n], n == 0)) {
        n++;
    }

    return n;
}


/* whether a rule definition "name ::=" starts at the cursor */
static int
gr_at_rule(gr_cursor_t *c)
{
    gr_cursor_t  k = *c;
    size_t       n = gr_name_len(c, c->pos);

    if (n == 0) {
        return 0;
    }
    k.pos += n;
    gr_skip(&k);

    return k.pos + 3 <= k.len && memcmp(k.s + k.pos, "::=", 3) == 0;
}


/* the index of rule name (created when new); -1 when out of memory */
static int
gr_rule_index(gr_cursor_t *c, const char *name, size_t n)
{
    gr_tree_t  *t = c->t;
    gr_rule_t  *r;
    int         i;

    for (i = 0; i < t->n_rules; i++) {
        if (strlen(t->rules[i].name) == n
            && memcmp(t->rules[i].name, name, n) == 0)
        {
            return i;
        }
    }

    if (t->n_rules == t->cap_rules) {
        t->cap_rules = t->cap_rules ? t->cap_rules * 2 : 16;
        r = realloc(t->rules, (size_t) t->cap_rules * sizeof(gr_rule_t));
        if (r == NULL) {
            return gr_fail(c, "out of memory");
        }
        t->rules = r;
    }
    r = &t->rules[t->n_rules];
    r->name = gr_alloc(&t->arena, n + 1);
    if (r->name == NULL) {
        return gr_fail(c, "out of memory");
    }
    memcpy(r->name, name, n);
    r->body = NULL;

    return t->n_rules++;
}


/* "..." with the cursor on the quote */
static gr_node_t *
gr_ebnf_string(gr_cursor_t *c)
{
    uint8_t     *b, tmp[4];
    gr_node_t   *n;
    int32_t      cp;
    int          len = 0, ch;

    b = malloc(c->len - c->pos + 1);
    if (b == NULL) {
        gr_fail(c, "out of memory");
        return NULL;
    }
    c->pos++;

    while (c->pos < c->len && c->s[c->pos] != '"') {
        ch = (unsigned char) c->s[c->pos++];
        if (ch != '\\') {
            b[len++] = (uint8_t) ch;
            continue;
        }
        if (c->pos >= c->len) {
            break;
        }
        ch = c->s[c->pos++];
        switch (ch) {
        case 'n': b[len++] = '\n'; break;
        case 'r': b[len++] = '\r'; break;
        case 't': b[len++] = '\t'; break;
        case '"': case '\\': case '/': b[len++] = (uint8_t) ch; break;
        case 'x':
            cp = gr_hex(c, 2);
            if (cp < 0) {
                goto failed;
            }
            b[len++] = (uint8_t) cp;
            break;
        case 'u':
            cp = gr_unicode_escape(c);
            if (cp < 0) {
                goto failed;
            }
            memcpy(b + len, tmp, (size_t) pl_utf8_put((uint32_t) cp, tmp));
            len += pl_utf8_put((uint32_t) cp, tmp);
            break;
        default:
            c->pos--;
            gr_fail(c, "unsupported escape \\%c in a string", ch);
            goto failed;
        }
    }

    if (c->pos >= c->len) {
        gr_fail(c, "unterminated string");
        goto failed;
    }
    c->pos++;

    n = len ? gr_node_bytes(c, b, len) : gr_node(c, GR_EMPTY);
    free(b);
    return n;

failed:

    free(b);
    return NULL;
}


/* /regex/ or /regex/j with the cursor on the first slash */
static gr_node_t *
gr_ebnf_regex(gr_cursor_t *c)
{
    size_t      start = ++c->pos;
    int         in_class = 0, json = 0;
    gr_node_t  *n;
    char        err[200];

    while (c->pos < c->len && (c->s[c->pos] != '/' || in_class)) {
        if (c->s[c->pos] == '\\') {
            c->pos++;
        } else if (c->s[c->pos] == '[') {
            in_class = 1;
        } else if (c->s[c->pos] == ']') {
            in_class = 0;
        }
        c->pos++;
    }
    if (c->pos >= c->len) {
        gr_fail(c, "unterminated /regex/");
        return NULL;
    }
    c->pos++;
    if (c->pos < c->len && c->s[c->pos] == 'j'
        && (c->pos + 1 >= c->len || !gr_name_char(c->s[c->pos + 1], 0)))
    {
        json = 1;
        c->pos++;
    }

    n = gr_parse_regex(c->t, c->s + start, c->pos - json - 1 - start, json,
                       err, sizeof(err));
    if (n == NULL) {
        gr_fail(c, "in a regex: %s", err);
    }

    return n;
}


static gr_node_t *gr_ebnf_alt(gr_cursor_t *c);


static gr_node_t *
gr_ebnf_atom(gr_cursor_t *c)
{
    gr_node_t  *n;
    size_t      len;
    int         i;

    switch (c->s[c->pos]) {
    case '"':
        return gr_ebnf_string(c);
    case '[':
        return gr_class(c);
    case '/':
        return gr_ebnf_regex(c);
    case '(':
        c->pos++;
        if (++c->depth > GR_MAX_DEPTH) {
            gr_fail(c, "groups nested too deep");
            return NULL;
        }
        n = gr_ebnf_alt(c);
        c->depth--;
        gr_skip(c);
        if (n == NULL || c->pos >= c->len || c->s[c->pos] != ')') {
            gr_fail(c, "expected ')'");
            return NULL;
        }
        c->pos++;
        return n;
    }

    len = gr_name_len(c, c->pos);
    if (len == 0) {
        gr_fail(c, "unexpected '%c'", c->s[c->pos]);
        return NULL;
    }
    i = gr_rule_index(c, c->s + c->pos, len);
    c->pos += len;
    if (i < 0) {
        return NULL;
    }
    n = gr_node(c, GR_RULE);
    if (n != NULL) {
        n->rule = i;
    }

    return n;
}


static gr_node_t *
gr_ebnf_item(gr_cursor_t *c)
{
    return gr_quantify(c, gr_ebnf_atom(c), 0);
}


/* blanks skipped: the end of the text, "|", ")" or the next rule */
static int
gr_ebnf_end(gr_cursor_t *c)
{
    gr_skip(c);

    return c->pos >= c->len || c->s[c->pos] == '|' || c->s[c->pos] == ')'
           || gr_at_rule(c);
}


static gr_node_t *
gr_ebnf_seq(gr_cursor_t *c)
{
    return gr_seq_of(c, gr_ebnf_item, gr_ebnf_end);
}


static gr_node_t *
gr_ebnf_alt(gr_cursor_t *c)
{
    return gr_alt_of(c, gr_ebnf_seq, gr_skip);
}


static int
gr_ebnf_rule(gr_cursor_t *c)
{
    size_t      len = gr_name_len(c, c->pos);
    gr_node_t  *body;
    int         i;

    if (!gr_at_rule(c)) {
        return gr_fail(c, "expected a rule (name ::= ...)");
    }
    i = gr_rule_index(c, c->s + c->pos, len);
    if (i < 0) {
        return -1;
    }
    if (c->t->rules[i].body != NULL) {
        return gr_fail(c, "rule '%s' is defined twice", c->t->rules[i].name);
    }
    c->pos += len;
    gr_skip(c);
    c->pos += 3;

    /* the body may add rules (moving the table): assign after */
    body = gr_ebnf_alt(c);
    c->t->rules[i].body = body;

    return body ? 0 : -1;
}


int
gr_parse_ebnf(gr_tree_t *t, const char *s, size_t len, char *err,
    size_t errlen)
{
    gr_cursor_t  c = { .t = t, .s = s, .len = len, .err = err,
                       .errlen = errlen };
    int          i;

    memset(t, 0, sizeof(*t));
    t->root = -1;

    for (gr_skip(&c); c.pos < c.len; gr_skip(&c)) {
        if (gr_ebnf_rule(&c) != 0) {
            return -1;
        }
    }

    for (i = 0; i < t->n_rules; i++) {
        if (t->rules[i].body == NULL) {
            c.pos = len;
            return gr_fail(&c, "rule '%s' is used but never defined",
                           t->rules[i].name);
        }
        if (strcmp(t->rules[i].name, "root") == 0) {
            t->root = i;
        }
    }
    if (t->root < 0) {
        c.pos = len;
        return gr_fail(&c, "no rule named root");
    }

    return 0;
}
