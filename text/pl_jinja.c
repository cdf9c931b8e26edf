/*
 * pl_jinja: a Jinja interpreter for chat templates (see pl_jinja.h for
 * the supported language).
 *
 * Three stages.  The source is preprocessed the way the reference does it
 * (trailing newline, lstrip_blocks, trim_blocks), then cut into text,
 * {{ expression }} and {% statement %} pieces with whitespace control
 * applied, and parsed by recursive descent into a tree of pl_jn_t nodes
 * allocated from an arena that lives as long as the template.  Rendering
 * walks the tree with values (pl_jv_t) allocated from a second arena that
 * is dropped when the render returns, so values need no reference counts.
 * Errors unwind with longjmp to the entry point, which owns every
 * allocation, so nothing leaks on any path.  Loops, output size, macro
 * recursion and expression nesting are bounded.
 */

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pl_jinja.h"
#include "pl_unicode.h"

#define PL_JA_CHUNK        (64 * 1024)
#define PL_J_MAX_DEPTH     64
#define PL_J_MAX_OUTPUT    (16 * 1024 * 1024)
#define PL_J_MAX_RANGE     100000
#define PL_J_MAX_CALLS     64
#define PL_J_MAX_STEPS     1000000
#define PL_J_MAX_ITEMS     1000000
#define PL_J_MAX_MEMORY    (256 << 20)

/* ---- arena ---- */

typedef struct pl_ja_chunk_s  pl_ja_chunk_t;

struct pl_ja_chunk_s {
    pl_ja_chunk_t  *next;
    size_t          used;
    size_t          size;
    max_align_t     data[];
};

typedef struct {
    pl_ja_chunk_t  *head;
    size_t          total;
} pl_ja_t;

static void
pl_ja_free(pl_ja_t *a)
{
    pl_ja_chunk_t  *c, *next;

    for (c = a->head; c != NULL; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
    a->total = 0;
}

/* ---- values ---- */

typedef enum {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT,
    JV_MACRO
} pl_jv_type_t;

typedef struct pl_jstr_s   pl_jstr_t;
typedef struct pl_jlist_s  pl_jlist_t;
typedef struct pl_jdict_s  pl_jdict_t;
typedef struct pl_jn_s     pl_jn_t;

typedef struct {
    int  type;
    union {
        int               b;
        long long         i;
        double            f;
        pl_jstr_t        *s;
        pl_jlist_t       *l;
        pl_jdict_t       *d;
        const pl_jn_t    *m;
    } u;
} pl_jv_t;

struct pl_jstr_s {
    size_t  n;
    char    s[];
};

struct pl_jlist_s {
    size_t    n;
    size_t    cap;
    pl_jv_t  *v;
};

struct pl_jdict_s {
    size_t       n;
    size_t       cap;
    pl_jstr_t  **k;
    pl_jv_t     *v;
    int          ns;       /* a namespace(): attributes may be set */
};

/* ---- tree ---- */

enum {
    S_TEXT, S_OUT, S_IF, S_FOR, S_SET, S_BLOCKSET, S_MACRO, S_BREAK,
    S_CONTINUE,
    E_LIT, E_NAME, E_ATTR, E_INDEX, E_SLICE, E_CALL, E_KWARG, E_FILTER,
    E_TEST, E_BIN, E_NOT, E_NEG, E_COND, E_LIST, E_DICT, E_PAIR, E_AND,
    E_OR
};

enum {
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FDIV, OP_MOD, OP_POW, OP_CAT, OP_EQ,
    OP_NE, OP_LT, OP_GT, OP_LE, OP_GE, OP_IN, OP_NOTIN
};

struct pl_jn_s {
    int         kind;
    int         op;
    pl_jn_t    *a;
    pl_jn_t    *b;
    pl_jn_t    *c;
    pl_jn_t    *d;
    pl_jn_t    *e;
    pl_jn_t    *next;
    pl_jstr_t  *name;
    pl_jv_t     lit;
    size_t      pos;
};

struct pl_jinja_s {
    pl_ja_t   arena;
    pl_jn_t  *body;
};

/* ---- shared context (parser and renderer) ---- */

typedef struct pl_jframe_s  pl_jframe_t;

struct pl_jframe_s {
    pl_jframe_t  *parent;
    pl_jdict_t   *vars;
};

typedef struct {
    char   *p;
    size_t  n;
    size_t  cap;
} pl_jbuf_t;

typedef struct {
    jmp_buf        jb;
    pl_ja_t       *arena;
    char          *err;
    size_t         errlen;
    /* parser */
    const char    *src;
    size_t         srclen;
    size_t         pos;
    size_t         end;       /* end of the current tag's contents */
    struct pl_jpiece_s  *pieces;
    size_t         npieces;
    size_t         ipiece;
    int            depth;
    /* renderer */
    pl_jbuf_t     *out;
    pl_jframe_t   *globals;
    int            calls;
    int            loopctl;   /* 1 break, 2 continue */
    long           steps;     /* loop iterations so far */
    pl_jbuf_t     *bufs[PL_J_MAX_CALLS + 2];
    int            nbufs;
} pl_jctx_t;

static void pl_j_fail(pl_jctx_t *c, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 2, 3)));

static void
pl_j_fail(pl_jctx_t *c, const char *fmt, ...)
{
    va_list  ap;

    va_start(ap, fmt);
    vsnprintf(c->err, c->errlen, fmt, ap);
    va_end(ap);
    longjmp(c->jb, 1);
}

static void *
pl_j_alloc(pl_jctx_t *c, size_t size)
{
    pl_ja_t        *a = c->arena;
    pl_ja_chunk_t  *ch = a->head;
    size_t          align = sizeof(max_align_t);
    void           *p;

    size = (size + align - 1) / align * align;
    if (ch == NULL || ch->size - ch->used < size) {
        size_t  csize = size > PL_JA_CHUNK ? size : PL_JA_CHUNK;

        if (a->total + csize > PL_J_MAX_MEMORY) {
            pl_j_fail(c, "template needs more than %d MB",
                      PL_J_MAX_MEMORY >> 20);
        }
        a->total += csize;
        ch = malloc(sizeof(pl_ja_chunk_t) + csize);
        if (ch == NULL) {
            pl_j_fail(c, "out of memory");
        }
        ch->used = 0;
        ch->size = csize;
        ch->next = a->head;
        a->head = ch;
    }
    p = (char *) ch->data + ch->used;
    ch->used += size;
    memset(p, 0, size);
    return p;
}

static pl_jstr_t *
pl_j_str(pl_jctx_t *c, const char *s, size_t n)
{
    pl_jstr_t  *r = pl_j_alloc(c, sizeof(pl_jstr_t) + n + 1);

    r->n = n;
    if (n) {
        memcpy(r->s, s, n);
    }
    r->s[n] = '\0';
    return r;
}

static pl_jv_t
pl_jv_str(pl_jctx_t *c, const char *s, size_t n)
{
    pl_jv_t  v;

    v.type = JV_STR;
    v.u.s = pl_j_str(c, s, n);
    return v;
}

static pl_jv_t
pl_jv_int(long long i)
{
    pl_jv_t  v;

    v.type = JV_INT;
    v.u.i = i;
    return v;
}

static pl_jv_t
pl_jv_float(double f)
{
    pl_jv_t  v;

    v.type = JV_FLOAT;
    v.u.f = f;
    return v;
}

static pl_jv_t
pl_jv_bool(int b)
{
    pl_jv_t  v;

    v.type = JV_BOOL;
    v.u.b = !!b;
    return v;
}

static pl_jv_t
pl_jv_of(int type)
{
    pl_jv_t  v;

    memset(&v, 0, sizeof(v));
    v.type = type;
    return v;
}

static pl_jv_t
pl_jv_list(pl_jctx_t *c)
{
    pl_jv_t  v;

    v.type = JV_LIST;
    v.u.l = pl_j_alloc(c, sizeof(pl_jlist_t));
    return v;
}

static pl_jv_t
pl_jv_dict(pl_jctx_t *c)
{
    pl_jv_t  v;

    v.type = JV_DICT;
    v.u.d = pl_j_alloc(c, sizeof(pl_jdict_t));
    return v;
}

static void
pl_jlist_push(pl_jctx_t *c, pl_jlist_t *l, pl_jv_t v)
{
    if (l->n >= PL_J_MAX_ITEMS) {
        pl_j_fail(c, "list longer than %d items", PL_J_MAX_ITEMS);
    }
    if (l->n == l->cap) {
        size_t    cap = l->cap ? l->cap * 2 : 8;
        pl_jv_t  *nv = pl_j_alloc(c, cap * sizeof(pl_jv_t));

        if (l->n) {
            memcpy(nv, l->v, l->n * sizeof(pl_jv_t));
        }
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

static pl_jv_t *
pl_jdict_find(const pl_jdict_t *d, const char *k, size_t n)
{
    size_t  i;

    for (i = 0; i < d->n; i++) {
        if (d->k[i]->n == n && memcmp(d->k[i]->s, k, n) == 0) {
            return &d->v[i];
        }
    }
    return NULL;
}

static void
pl_jdict_set(pl_jctx_t *c, pl_jdict_t *d, pl_jstr_t *k, pl_jv_t v)
{
    pl_jv_t  *slot = pl_jdict_find(d, k->s, k->n);

    if (slot != NULL) {
        *slot = v;
        return;
    }
    if (d->n == d->cap) {
        size_t       cap = d->cap ? d->cap * 2 : 8;
        pl_jstr_t  **nk = pl_j_alloc(c, cap * sizeof(pl_jstr_t *));
        pl_jv_t     *nv = pl_j_alloc(c, cap * sizeof(pl_jv_t));

        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof(pl_jstr_t *));
            memcpy(nv, d->v, d->n * sizeof(pl_jv_t));
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n++] = v;
}

static void
pl_jdict_setc(pl_jctx_t *c, pl_jdict_t *d, const char *k, pl_jv_t v)
{
    pl_jdict_set(c, d, pl_j_str(c, k, strlen(k)), v);
}

static const char *
pl_jv_typename(const pl_jv_t *v)
{
    static const char  *names[] = {
        "undefined", "none", "boolean", "integer", "float", "string", "list",
        "dict", "macro"
    };

    return names[v->type];
}

/* ---- output buffers ---- */

static void
pl_jbuf_add(pl_jctx_t *c, pl_jbuf_t *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t  cap = b->cap ? b->cap : 256;
        char   *p;

        while (cap < b->n + n + 1) {
            cap *= 2;
        }
        if (cap > PL_J_MAX_OUTPUT) {
            pl_j_fail(c, "output larger than %d bytes", PL_J_MAX_OUTPUT);
        }
        p = realloc(b->p, cap);
        if (p == NULL) {
            pl_j_fail(c, "out of memory");
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void
pl_jbuf_cstr(pl_jctx_t *c, pl_jbuf_t *b, const char *s)
{
    pl_jbuf_add(c, b, s, strlen(s));
}

/* A fresh buffer registered with the context, so a longjmp frees it. */
static pl_jbuf_t *
pl_jbuf_open(pl_jctx_t *c)
{
    pl_jbuf_t  *b;

    if (c->nbufs >= PL_J_MAX_CALLS + 2) {
        pl_j_fail(c, "macro calls nested too deeply");
    }
    b = pl_j_alloc(c, sizeof(pl_jbuf_t));
    c->bufs[c->nbufs++] = b;
    return b;
}

/* Closes the innermost buffer, returning its contents as a string. */
static pl_jv_t
pl_jbuf_close(pl_jctx_t *c, pl_jbuf_t *b)
{
    pl_jv_t  v = pl_jv_str(c, b->p ? b->p : "", b->n);

    free(b->p);
    b->p = NULL;
    c->nbufs--;
    return v;
}

/* ---- number and JSON formatting ---- */

/* JavaScript's Number.prototype.toString for finite doubles. */
static void
pl_j_fmt_number(double f, char *out, size_t cap)
{
    char  tmp[40], digits[40], *e;
    int   prec, exp10, nd, i, k;

    if (isnan(f)) {
        snprintf(out, cap, "NaN");
        return;
    }
    if (isinf(f)) {
        snprintf(out, cap, f < 0 ? "-Infinity" : "Infinity");
        return;
    }
    if (f == 0) {
        snprintf(out, cap, "0");
        return;
    }
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) {
            break;
        }
    }
    e = strchr(tmp, 'e');
    exp10 = atoi(e + 1);
    *e = '\0';
    for (i = 0, nd = 0; tmp[i]; i++) {
        if (tmp[i] >= '0' && tmp[i] <= '9') {
            digits[nd++] = tmp[i];
        }
    }
    while (nd > 1 && digits[nd - 1] == '0') {
        nd--;
    }
    digits[nd] = '\0';
    k = 0;
    if (f < 0) {
        out[k++] = '-';
    }
    if (exp10 >= 21 || exp10 <= -7) {
        k += snprintf(out + k, cap - (size_t) k, "%c%s%.*s", digits[0],
                      nd > 1 ? "." : "", nd - 1, digits + 1);
        snprintf(out + k, cap - (size_t) k, "e%c%d", exp10 < 0 ? '-' : '+',
                 exp10 < 0 ? -exp10 : exp10);
    } else if (exp10 >= nd - 1) {
        snprintf(out + k, cap - (size_t) k, "%s%0*d", digits,
                 exp10 - nd + 1, 0);
        if (exp10 - nd + 1 == 0) {
            out[k + nd] = '\0';
        }
    } else if (exp10 >= 0) {
        snprintf(out + k, cap - (size_t) k, "%.*s.%s", exp10 + 1, digits,
                 digits + exp10 + 1);
    } else {
        snprintf(out + k, cap - (size_t) k, "0.%0*d%s", -exp10 - 1, 0,
                 digits);
        if (-exp10 - 1 == 0) {
            snprintf(out + k, cap - (size_t) k, "0.%s", digits);
        }
    }
}

static void
pl_j_json_string(pl_jctx_t *c, pl_jbuf_t *b, const char *s, size_t n)
{
    size_t  i, run = 0;
    char    esc[8];

    pl_jbuf_add(c, b, "\"", 1);
    for (i = 0; i < n; i++) {
        unsigned char  ch = (unsigned char) s[i];
        const char    *rep = NULL;

        switch (ch) {
        case '"': rep = "\\\""; break;
        case '\\': rep = "\\\\"; break;
        case '\b': rep = "\\b"; break;
        case '\f': rep = "\\f"; break;
        case '\n': rep = "\\n"; break;
        case '\r': rep = "\\r"; break;
        case '\t': rep = "\\t"; break;
        default:
            if (ch < 0x20) {
                snprintf(esc, sizeof(esc), "\\u%04x", ch);
                rep = esc;
            }
        }
        if (rep != NULL) {
            pl_jbuf_add(c, b, s + run, i - run);
            pl_jbuf_cstr(c, b, rep);
            run = i + 1;
        }
    }
    pl_jbuf_add(c, b, s + run, n - run);
    pl_jbuf_add(c, b, "\"", 1);
}

static void
pl_j_indent(pl_jctx_t *c, pl_jbuf_t *b, int indent, int depth)
{
    int  i;

    pl_jbuf_add(c, b, "\n", 1);
    for (i = 0; i < indent * depth; i++) {
        pl_jbuf_add(c, b, " ", 1);
    }
}

/* JSON the way the reference's tojson and list/dict printing write it. */
static void
pl_j_json(pl_jctx_t *c, pl_jbuf_t *b, const pl_jv_t *v, int indent,
    int depth)
{
    char    num[48];
    size_t  i, n;

    if (depth > PL_J_MAX_DEPTH) {
        pl_j_fail(c, "value nested too deeply");
    }
    switch (v->type) {
    case JV_UNDEF: case JV_NONE:
        pl_jbuf_cstr(c, b, "null");
        return;
    case JV_BOOL:
        pl_jbuf_cstr(c, b, v->u.b ? "true" : "false");
        return;
    case JV_INT:
        snprintf(num, sizeof(num), "%lld", v->u.i);
        pl_jbuf_cstr(c, b, num);
        return;
    case JV_FLOAT:
        pl_j_fmt_number(v->u.f, num, sizeof(num));
        pl_jbuf_cstr(c, b, num);
        return;
    case JV_STR:
        pl_j_json_string(c, b, v->u.s->s, v->u.s->n);
        return;
    case JV_MACRO:
        pl_j_fail(c, "cannot convert a macro to JSON");
    default:
        break;
    }
    n = (v->type == JV_LIST) ? v->u.l->n : v->u.d->n;
    pl_jbuf_add(c, b, v->type == JV_LIST ? "[" : "{", 1);
    for (i = 0; i < n; i++) {
        if (i > 0) {
            pl_jbuf_cstr(c, b, indent ? "," : ", ");
        }
        if (indent) {
            pl_j_indent(c, b, indent, depth + 1);
        }
        if (v->type == JV_LIST) {
            pl_j_json(c, b, &v->u.l->v[i], indent, depth + 1);
        } else {
            pl_j_json_string(c, b, v->u.d->k[i]->s, v->u.d->k[i]->n);
            pl_jbuf_cstr(c, b, ": ");
            pl_j_json(c, b, &v->u.d->v[i], indent, depth + 1);
        }
    }
    if (indent && n > 0) {
        pl_j_indent(c, b, indent, depth);
    }
    pl_jbuf_add(c, b, v->type == JV_LIST ? "]" : "}", 1);
}

/* How {{ v }} prints v. */
static void
pl_j_print(pl_jctx_t *c, pl_jbuf_t *b, const pl_jv_t *v)
{
    char  num[48];

    switch (v->type) {
    case JV_UNDEF: case JV_NONE:
        return;
    case JV_STR:
        pl_jbuf_add(c, b, v->u.s->s, v->u.s->n);
        return;
    case JV_FLOAT:
        pl_j_fmt_number(v->u.f, num, sizeof(num));
        pl_jbuf_cstr(c, b, num);
        if (strpbrk(num, ".eNI") == NULL) {
            pl_jbuf_cstr(c, b, ".0");
        }
        return;
    case JV_MACRO:
        pl_j_fail(c, "cannot print a macro");
    default:
        pl_j_json(c, b, v, 0, 0);
    }
}

static pl_jv_t
pl_j_tostring(pl_jctx_t *c, const pl_jv_t *v)
{
    pl_jbuf_t  *b;

    if (v->type == JV_STR) {
        return *v;
    }
    b = pl_jbuf_open(c);
    pl_j_print(c, b, v);
    return pl_jbuf_close(c, b);
}

/* ---- lexer ---- */

enum {
    T_EOF, T_NAME, T_STR, T_INT, T_FLOAT, T_OP
};

typedef struct {
    int          type;
    const char  *s;
    size_t       n;
    pl_jstr_t   *str;
    long long    i;
    double       f;
} pl_jtok_t;

static int
pl_j_isname(int ch, int first)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_'
           || (!first && ch >= '0' && ch <= '9');
}

static void
pl_j_skip_ws(pl_jctx_t *c)
{
    while (c->pos < c->end && strchr(" \t\r\n", c->src[c->pos]) != NULL) {
        c->pos++;
    }
}

static pl_jstr_t *
pl_j_lex_string(pl_jctx_t *c)
{
    static const char  from[] = "ntrbfv'\"\\";
    static const char  to[] = "\n\t\r\b\f\v'\"\\";
    char               q = c->src[c->pos++];
    pl_jbuf_t          b = { NULL, 0, 0 };
    pl_jstr_t         *s;
    const char        *e;

    while (c->pos < c->end && c->src[c->pos] != q) {
        char  ch = c->src[c->pos++];

        if (ch == '\\' && c->pos < c->end) {
            ch = c->src[c->pos++];
            e = (ch != '\0') ? strchr(from, ch) : NULL;
            if (e != NULL) {
                ch = to[e - from];
            } else if (ch == 'u' || ch == 'x') {
                char      hex[8];
                size_t    k = (ch == 'u') ? 4 : 2;
                uint8_t   u8[4];
                uint32_t  cp;

                if (c->end - c->pos < k) {
                    free(b.p);
                    pl_j_fail(c, "bad escape in string literal");
                }
                memcpy(hex, c->src + c->pos, k);
                hex[k] = '\0';
                cp = (uint32_t) strtoul(hex, NULL, 16);
                c->pos += k;
                pl_jbuf_add(c, &b, (const char *) u8, pl_utf8_put(cp, u8));
                continue;
            } else {
                pl_jbuf_add(c, &b, "\\", 1);
            }
        }
        pl_jbuf_add(c, &b, &ch, 1);
    }
    if (c->pos >= c->end) {
        free(b.p);
        pl_j_fail(c, "unterminated string literal at byte %zu", c->pos);
    }
    c->pos++;
    s = pl_j_str(c, b.p ? b.p : "", b.n);
    free(b.p);
    return s;
}

static pl_jtok_t
pl_j_lex(pl_jctx_t *c)
{
    static const char  *ops[] = {
        "//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~",
        "<", ">", "=", ".", ",", ":", "|", "(", ")", "[", "]", "{", "}",
        NULL
    };
    pl_jtok_t           t;
    const char         *s;
    int                 i;

    memset(&t, 0, sizeof(t));
    pl_j_skip_ws(c);
    if (c->pos >= c->end) {
        t.type = T_EOF;
        return t;
    }
    s = c->src + c->pos;
    t.s = s;
    if (*s == '\'' || *s == '"') {
        t.type = T_STR;
        t.str = pl_j_lex_string(c);
        return t;
    }
    if (*s >= '0' && *s <= '9') {
        char  *endp;

        t.i = strtoll(s, &endp, 10);
        t.type = T_INT;
        if (*endp == '.' && endp[1] >= '0' && endp[1] <= '9') {
            t.f = strtod(s, &endp);
            t.type = T_FLOAT;
        }
        c->pos += (size_t) (endp - s);
        t.n = (size_t) (endp - s);
        return t;
    }
    if (pl_j_isname((unsigned char) *s, 1)) {
        t.type = T_NAME;
        while (c->pos < c->end && pl_j_isname((unsigned char) c->src[c->pos],
                                               0))
        {
            c->pos++;
        }
        t.n = (size_t) (c->src + c->pos - s);
        return t;
    }
    for (i = 0; ops[i]; i++) {
        size_t  n = strlen(ops[i]);

        if (c->end - c->pos >= n && memcmp(s, ops[i], n) == 0) {
            t.type = T_OP;
            t.n = n;
            c->pos += n;
            return t;
        }
    }
    pl_j_fail(c, "unexpected character '%c' at byte %zu", *s, c->pos);
}

static pl_jtok_t
pl_j_peek(pl_jctx_t *c)
{
    size_t     save = c->pos;
    pl_jtok_t  t = pl_j_lex(c);

    c->pos = save;
    return t;
}

static int
pl_j_is(const pl_jtok_t *t, int type, const char *s)
{
    return t->type == type && t->n == strlen(s) && memcmp(t->s, s, t->n) == 0;
}

static int
pl_j_accept(pl_jctx_t *c, int type, const char *s)
{
    size_t     save = c->pos;
    pl_jtok_t  t = pl_j_lex(c);

    if (pl_j_is(&t, type, s)) {
        return 1;
    }
    c->pos = save;
    return 0;
}

static void
pl_j_expect(pl_jctx_t *c, int type, const char *s)
{
    if (!pl_j_accept(c, type, s)) {
        pl_j_fail(c, "expected '%s' at byte %zu", s, c->pos);
    }
}

static pl_jstr_t *
pl_j_expect_name(pl_jctx_t *c)
{
    pl_jtok_t  t = pl_j_lex(c);

    if (t.type != T_NAME) {
        pl_j_fail(c, "expected a name at byte %zu", c->pos);
    }
    return pl_j_str(c, t.s, t.n);
}

/* ---- expression parser ---- */

static pl_jn_t *pl_j_expr(pl_jctx_t *c);
static pl_jn_t *pl_j_unary(pl_jctx_t *c);
static pl_jn_t *pl_j_or(pl_jctx_t *c);

static pl_jn_t *
pl_j_node(pl_jctx_t *c, int kind)
{
    pl_jn_t  *n = pl_j_alloc(c, sizeof(pl_jn_t));

    n->kind = kind;
    n->pos = c->pos;
    return n;
}

static pl_jn_t *
pl_j_bin(pl_jctx_t *c, int kind, int op, pl_jn_t *a, pl_jn_t *b)
{
    pl_jn_t  *n = pl_j_node(c, kind);

    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

/* Comma-separated expressions up to close; kwargs as E_KWARG nodes. */
static pl_jn_t *
pl_j_args(pl_jctx_t *c, const char *close, int kwargs)
{
    pl_jn_t   *head = NULL, **tail = &head, *n;
    pl_jtok_t  t;
    size_t     save;

    while (!pl_j_accept(c, T_OP, close)) {
        save = c->pos;
        t = pl_j_lex(c);
        if (kwargs && t.type == T_NAME && pl_j_accept(c, T_OP, "=")) {
            n = pl_j_node(c, E_KWARG);
            n->name = pl_j_str(c, t.s, t.n);
            n->a = pl_j_expr(c);
        } else {
            c->pos = save;
            n = pl_j_expr(c);
        }
        *tail = n;
        tail = &n->next;
        if (!pl_j_accept(c, T_OP, ",")) {
            pl_j_expect(c, T_OP, close);
            break;
        }
    }
    return head;
}

static pl_jn_t *
pl_j_literal(pl_jctx_t *c, pl_jv_t v)
{
    pl_jn_t  *n = pl_j_node(c, E_LIT);

    n->lit = v;
    return n;
}

static pl_jn_t *
pl_j_dict_literal(pl_jctx_t *c)
{
    pl_jn_t  *d = pl_j_node(c, E_DICT), **tail = &d->b, *p;

    while (!pl_j_accept(c, T_OP, "}")) {
        p = pl_j_node(c, E_PAIR);
        p->a = pl_j_expr(c);
        pl_j_expect(c, T_OP, ":");
        p->b = pl_j_expr(c);
        *tail = p;
        tail = &p->next;
        if (!pl_j_accept(c, T_OP, ",")) {
            pl_j_expect(c, T_OP, "}");
            break;
        }
    }
    return d;
}

static pl_jn_t *
pl_j_primary(pl_jctx_t *c)
{
    pl_jtok_t  t = pl_j_lex(c);
    pl_jn_t   *n;

    switch (t.type) {
    case T_STR:
        n = pl_j_node(c, E_LIT);
        n->lit.type = JV_STR;
        n->lit.u.s = t.str;
        while (pl_j_peek(c).type == T_STR) {
            pl_jtok_t  more = pl_j_lex(c);
            pl_jbuf_t  b = { NULL, 0, 0 };

            pl_jbuf_add(c, &b, n->lit.u.s->s, n->lit.u.s->n);
            pl_jbuf_add(c, &b, more.str->s, more.str->n);
            n->lit.u.s = pl_j_str(c, b.p, b.n);
            free(b.p);
        }
        return n;
    case T_INT:
        return pl_j_literal(c, pl_jv_int(t.i));
    case T_FLOAT:
        return pl_j_literal(c, pl_jv_float(t.f));
    case T_NAME:
        if (pl_j_is(&t, T_NAME, "true") || pl_j_is(&t, T_NAME, "True")) {
            return pl_j_literal(c, pl_jv_bool(1));
        }
        if (pl_j_is(&t, T_NAME, "false") || pl_j_is(&t, T_NAME, "False")) {
            return pl_j_literal(c, pl_jv_bool(0));
        }
        if (pl_j_is(&t, T_NAME, "none") || pl_j_is(&t, T_NAME, "None")) {
            return pl_j_literal(c, pl_jv_of(JV_NONE));
        }
        n = pl_j_node(c, E_NAME);
        n->name = pl_j_str(c, t.s, t.n);
        return n;
    case T_OP:
        if (pl_j_is(&t, T_OP, "(")) {
            n = pl_j_expr(c);
            if (pl_j_accept(c, T_OP, ",")) {
                pl_jn_t  *l = pl_j_node(c, E_LIST);

                l->b = n;
                n->next = pl_j_args(c, ")", 0);
                return l;
            }
            pl_j_expect(c, T_OP, ")");
            return n;
        }
        if (pl_j_is(&t, T_OP, "[")) {
            n = pl_j_node(c, E_LIST);
            n->b = pl_j_args(c, "]", 0);
            return n;
        }
        if (pl_j_is(&t, T_OP, "{")) {
            return pl_j_dict_literal(c);
        }
        break;
    default:
        break;
    }
    pl_j_fail(c, "unexpected token at byte %zu", c->pos);
}

static pl_jn_t *
pl_j_subscript(pl_jctx_t *c, pl_jn_t *obj)
{
    pl_jn_t  *n, *parts[3] = { NULL, NULL, NULL };
    int       k = 0, slice = 0;

    for (;;) {
        if (pl_j_accept(c, T_OP, "]")) {
            break;
        }
        if (pl_j_accept(c, T_OP, ":")) {
            slice = 1;
            if (++k > 2) {
                pl_j_fail(c, "bad slice at byte %zu", c->pos);
            }
            continue;
        }
        parts[k] = pl_j_expr(c);
    }
    if (!slice) {
        if (parts[0] == NULL) {
            pl_j_fail(c, "empty subscript at byte %zu", c->pos);
        }
        return pl_j_bin(c, E_INDEX, 0, obj, parts[0]);
    }
    n = pl_j_node(c, E_SLICE);
    n->a = obj;
    n->b = parts[0];
    n->c = parts[1];
    n->d = parts[2];
    return n;
}

static pl_jn_t *
pl_j_postfix(pl_jctx_t *c)
{
    pl_jn_t  *n = pl_j_primary(c), *m;

    for (;;) {
        if (pl_j_accept(c, T_OP, ".")) {
            m = pl_j_node(c, E_ATTR);
            m->a = n;
            m->name = pl_j_expect_name(c);
            n = m;
        } else if (pl_j_accept(c, T_OP, "[")) {
            n = pl_j_subscript(c, n);
        } else if (pl_j_accept(c, T_OP, "(")) {
            m = pl_j_node(c, E_CALL);
            m->a = n;
            m->b = pl_j_args(c, ")", 1);
            n = m;
        } else {
            return n;
        }
    }
}

/* filters (x | f(args)) and tests (x is [not] t(args)) */
static pl_jn_t *
pl_j_filters(pl_jctx_t *c, pl_jn_t *n)
{
    pl_jn_t  *m;

    for (;;) {
        if (pl_j_accept(c, T_OP, "|")) {
            m = pl_j_node(c, E_FILTER);
        } else if (pl_j_accept(c, T_NAME, "is")) {
            m = pl_j_node(c, E_TEST);
            m->op = pl_j_accept(c, T_NAME, "not");
        } else {
            return n;
        }
        m->a = n;
        m->name = pl_j_expect_name(c);
        if (pl_j_accept(c, T_OP, "(")) {
            m->b = pl_j_args(c, ")", 1);
        } else if (m->kind == E_TEST) {
            pl_jtok_t  t = pl_j_peek(c);

            if (t.type == T_STR || t.type == T_INT || t.type == T_FLOAT
                || (t.type == T_NAME && !pl_j_is(&t, T_NAME, "and")
                    && !pl_j_is(&t, T_NAME, "or")
                    && !pl_j_is(&t, T_NAME, "else")
                    && !pl_j_is(&t, T_NAME, "if")))
            {
                m->b = pl_j_postfix(c);
            }
        }
        n = m;
    }
}

static pl_jn_t *
pl_j_unary(pl_jctx_t *c)
{
    pl_jn_t  *n;

    if (++c->depth > PL_J_MAX_DEPTH) {
        pl_j_fail(c, "expression nested too deeply");
    }
    if (pl_j_accept(c, T_OP, "-")) {
        n = pl_j_node(c, E_NEG);
        n->a = pl_j_unary(c);
    } else if (pl_j_accept(c, T_OP, "+")) {
        n = pl_j_unary(c);
    } else {
        n = pl_j_filters(c, pl_j_postfix(c));
    }
    c->depth--;
    return n;
}

static pl_jn_t *
pl_j_pow(pl_jctx_t *c)
{
    pl_jn_t  *n = pl_j_unary(c);

    while (pl_j_accept(c, T_OP, "**")) {
        n = pl_j_bin(c, E_BIN, OP_POW, n, pl_j_unary(c));
    }
    return n;
}

static pl_jn_t *
pl_j_mul(pl_jctx_t *c)
{
    pl_jn_t  *n = pl_j_pow(c);

    for (;;) {
        if (pl_j_accept(c, T_OP, "*")) {
            n = pl_j_bin(c, E_BIN, OP_MUL, n, pl_j_pow(c));
        } else if (pl_j_accept(c, T_OP, "//")) {
            n = pl_j_bin(c, E_BIN, OP_FDIV, n, pl_j_pow(c));
        } else if (pl_j_accept(c, T_OP, "/")) {
            n = pl_j_bin(c, E_BIN, OP_DIV, n, pl_j_pow(c));
        } else if (pl_j_accept(c, T_OP, "%")) {
            n = pl_j_bin(c, E_BIN, OP_MOD, n, pl_j_pow(c));
        } else {
            return n;
        }
    }
}

static pl_jn_t *
pl_j_concat(pl_jctx_t *c)
{
    pl_jn_t  *n = pl_j_mul(c);

    while (pl_j_accept(c, T_OP, "~")) {
        n = pl_j_bin(c, E_BIN, OP_CAT, n, pl_j_mul(c));
    }
    return n;
}

static pl_jn_t *
pl_j_add(pl_jctx_t *c)
{
    pl_jn_t  *n = pl_j_concat(c);

    for (;;) {
        if (pl_j_accept(c, T_OP, "+")) {
            n = pl_j_bin(c, E_BIN, OP_ADD, n, pl_j_concat(c));
        } else if (pl_j_accept(c, T_OP, "-")) {
            n = pl_j_bin(c, E_BIN, OP_SUB, n, pl_j_concat(c));
        } else {
            return n;
        }
    }
}

static pl_jn_t *
pl_j_compare(pl_jctx_t *c)
{
    static const struct {
        const char  *s;
        int          op;
    } cmps[] = {
        { "==", OP_EQ }, { "!=", OP_NE }, { "<=", OP_LE }, { ">=", OP_GE },
        { "<", OP_LT }, { ">", OP_GT }
    };
    pl_jn_t  *n = pl_j_add(c);
    size_t    i, save;

    for (;;) {
        for (i = 0; i < sizeof(cmps) / sizeof(cmps[0]); i++) {
            if (pl_j_accept(c, T_OP, cmps[i].s)) {
                n = pl_j_bin(c, E_BIN, cmps[i].op, n, pl_j_add(c));
                break;
            }
        }
        if (i < sizeof(cmps) / sizeof(cmps[0])) {
            continue;
        }
        if (pl_j_accept(c, T_NAME, "in")) {
            n = pl_j_bin(c, E_BIN, OP_IN, n, pl_j_add(c));
            continue;
        }
        save = c->pos;
        if (pl_j_accept(c, T_NAME, "not") && pl_j_accept(c, T_NAME, "in")) {
            n = pl_j_bin(c, E_BIN, OP_NOTIN, n, pl_j_add(c));
            continue;
        }
        c->pos = save;
        return n;
    }
}

static pl_jn_t *
pl_j_not(pl_jctx_t *c)
{
    pl_jn_t  *n;

    if (pl_j_accept(c, T_NAME, "not")) {
        n = pl_j_node(c, E_NOT);
        n->a = pl_j_not(c);
        return n;
    }
    return pl_j_compare(c);
}

static pl_jn_t *
pl_j_and(pl_jctx_t *c)
{
    pl_jn_t  *n = pl_j_not(c);

    while (pl_j_accept(c, T_NAME, "and")) {
        n = pl_j_bin(c, E_AND, 0, n, pl_j_not(c));
    }
    return n;
}

static pl_jn_t *
pl_j_or(pl_jctx_t *c)
{
    pl_jn_t  *n = pl_j_and(c);

    while (pl_j_accept(c, T_NAME, "or")) {
        n = pl_j_bin(c, E_OR, 0, n, pl_j_and(c));
    }
    return n;
}

static pl_jn_t *
pl_j_expr(pl_jctx_t *c)
{
    pl_jn_t  *n = pl_j_or(c), *m;

    if (++c->depth > PL_J_MAX_DEPTH) {
        pl_j_fail(c, "expression nested too deeply");
    }
    if (pl_j_accept(c, T_NAME, "if")) {
        m = pl_j_node(c, E_COND);
        m->a = n;
        m->b = pl_j_or(c);
        m->c = pl_j_accept(c, T_NAME, "else") ? pl_j_expr(c) : NULL;
        n = m;
    }
    c->depth--;
    return n;
}

/* ---- template structure ---- */

typedef struct pl_jpiece_s {
    int     kind;       /* 0 text, 1 expression, 2 statement */
    size_t  start;      /* contents, delimiters and '-' excluded */
    size_t  end;
    int     lstrip;     /* '-' after the opening delimiter */
    int     rstrip;     /* '-' before the closing delimiter */
} pl_jpiece_t;

/* The reference's preprocessing: drop one trailing newline, lstrip_blocks
   (blanks before {% and {# at a line start) and trim_blocks (a newline
   right after %} or #}). */
static char *
pl_j_preprocess(const char *src, size_t len, size_t *outlen)
{
    char    *out = malloc(len + 1);
    size_t   i, n = 0, line = 0;

    if (out == NULL) {
        return NULL;
    }
    if (len > 0 && src[len - 1] == '\n') {
        len--;
    }
    for (i = 0; i < len; i++) {
        char  ch = src[i];

        if (ch == '{' && i + 1 < len && strchr("#%-", src[i + 1])) {
            size_t  k = n;

            while (k > line && (out[k - 1] == ' ' || out[k - 1] == '\t')) {
                k--;
            }
            if (k == line) {
                n = line;
            }
        }
        if (ch == '\n' && n >= 2 && out[n - 1] == '}'
            && strchr("#%-", out[n - 2]))
        {
            line = n;
            continue;
        }
        out[n++] = ch;
        if (ch == '\n' || ch == '\r') {
            line = n;
        }
    }
    out[n] = '\0';
    *outlen = n;
    return out;
}

static void
pl_j_add_piece(pl_jctx_t *c, pl_jpiece_t *p, size_t *cap)
{
    if (c->npieces == *cap) {
        size_t        ncap = *cap ? *cap * 2 : 64;
        pl_jpiece_t  *np = pl_j_alloc(c, ncap * sizeof(pl_jpiece_t));

        if (c->npieces) {
            memcpy(np, c->pieces, c->npieces * sizeof(pl_jpiece_t));
        }
        c->pieces = np;
        *cap = ncap;
    }
    c->pieces[c->npieces++] = *p;
}

/* End of the tag opened at i (index of its closing delimiter). */
static size_t
pl_j_tag_close(pl_jctx_t *c, size_t i, char kind)
{
    const char  *s = c->src;
    char         closer = (kind == '{') ? '}' : kind;
    size_t       k = i + 2;

    while (k + 1 < c->srclen && !(s[k] == closer && s[k + 1] == '}')) {
        if (kind != '#' && (s[k] == '\'' || s[k] == '"')) {
            char  q = s[k++];

            while (k < c->srclen && s[k] != q) {
                k += (s[k] == '\\') ? 2 : 1;
            }
        }
        k++;
    }
    if (k + 1 >= c->srclen) {
        pl_j_fail(c, "unterminated tag at byte %zu", i);
    }
    return k;
}

/* Cuts the source into pieces; comments vanish, whitespace control
   trims the neighbouring text pieces. */
static void
pl_j_split(pl_jctx_t *c)
{
    const char   *s = c->src;
    size_t        i = 0, text = 0, cap = 0, close;
    pl_jpiece_t   p;
    int           strip_next = 0;

    while (i <= c->srclen) {
        int  at_tag = (i + 1 < c->srclen && s[i] == '{'
                       && (s[i + 1] == '{' || s[i + 1] == '%'
                           || s[i + 1] == '#'));

        if (!at_tag && i < c->srclen) {
            i++;
            continue;
        }
        memset(&p, 0, sizeof(p));
        p.start = text;
        p.end = i;
        if (strip_next) {
            while (p.start < p.end && strchr(" \t\r\n", s[p.start])) {
                p.start++;
            }
        }
        if (at_tag && i + 2 < c->srclen && s[i + 2] == '-') {
            while (p.end > p.start && strchr(" \t\r\n", s[p.end - 1])) {
                p.end--;
            }
        }
        if (p.end > p.start) {
            pl_j_add_piece(c, &p, &cap);
        }
        if (!at_tag) {
            break;
        }
        close = pl_j_tag_close(c, i, s[i + 1]);
        p.kind = (s[i + 1] == '{') ? 1 : 2;
        p.lstrip = (s[i + 2] == '-');
        p.start = i + 2 + (s[i + 2] == '-' || s[i + 2] == '+');
        p.rstrip = (close > p.start && s[close - 1] == '-');
        p.end = close - (size_t) p.rstrip;
        strip_next = p.rstrip;
        if (s[i + 1] != '#') {
            pl_j_add_piece(c, &p, &cap);
        }
        i = text = close + 2;
    }
}

typedef struct {
    pl_jn_t   *head;
    pl_jn_t  **tail;
} pl_jseq_t;

static void
pl_j_append(pl_jseq_t *l, pl_jn_t *n)
{
    *l->tail = n;
    l->tail = &n->next;
}

static void
pl_j_enter(pl_jctx_t *c, const pl_jpiece_t *p)
{
    c->pos = p->start;
    c->end = p->end;
}

static void
pl_j_stmt_end(pl_jctx_t *c)
{
    pl_j_skip_ws(c);
    if (c->pos != c->end) {
        pl_j_fail(c, "unexpected text in tag at byte %zu", c->pos);
    }
}

static pl_jn_t *pl_j_block(pl_jctx_t *c, const char *const *ends, int nends,
    pl_jtok_t *endtok);

static pl_jn_t *
pl_j_parse_if(pl_jctx_t *c)
{
    static const char *const  ends[] = { "elif", "else", "endif" };
    pl_jn_t                  *n = pl_j_node(c, S_IF);
    pl_jtok_t                 end;

    n->a = pl_j_expr(c);
    pl_j_stmt_end(c);
    n->b = pl_j_block(c, ends, 3, &end);
    if (pl_j_is(&end, T_NAME, "elif")) {
        n->c = pl_j_parse_if(c);
        return n;
    }
    if (pl_j_is(&end, T_NAME, "else")) {
        pl_j_stmt_end(c);
        n->d = pl_j_block(c, ends + 2, 1, &end);
    }
    pl_j_stmt_end(c);
    return n;
}

/* Assignment targets: name, name.attr, or a tuple of names. */
static pl_jn_t *
pl_j_target(pl_jctx_t *c)
{
    pl_jn_t   *n = pl_j_node(c, E_NAME), *m;
    pl_jtok_t  next;

    n->name = pl_j_expect_name(c);
    if (pl_j_accept(c, T_OP, ".")) {
        m = pl_j_node(c, E_ATTR);
        m->a = n;
        m->name = pl_j_expect_name(c);
        return m;
    }
    next = pl_j_peek(c);
    if (pl_j_is(&next, T_OP, ",")) {
        m = pl_j_node(c, E_LIST);
        m->b = n;
        while (pl_j_accept(c, T_OP, ",")) {
            n->next = pl_j_node(c, E_NAME);
            n = n->next;
            n->name = pl_j_expect_name(c);
        }
        return m;
    }
    return n;
}

static pl_jn_t *
pl_j_parse_for(pl_jctx_t *c)
{
    static const char *const  ends[] = { "else", "endfor" };
    pl_jn_t                  *n = pl_j_node(c, S_FOR);
    pl_jtok_t                 end;

    n->c = pl_j_target(c);
    if (n->c->kind == E_ATTR) {
        pl_j_fail(c, "bad for loop target at byte %zu", c->pos);
    }
    pl_j_expect(c, T_NAME, "in");
    n->a = pl_j_or(c);
    if (pl_j_accept(c, T_NAME, "if")) {
        n->d = pl_j_expr(c);
    }
    if (pl_j_accept(c, T_NAME, "recursive")) {
        pl_j_fail(c, "recursive for loops are not supported");
    }
    pl_j_stmt_end(c);
    n->b = pl_j_block(c, ends, 2, &end);
    if (pl_j_is(&end, T_NAME, "else")) {
        pl_j_stmt_end(c);
        n->e = pl_j_block(c, ends + 1, 1, &end);
    }
    pl_j_stmt_end(c);
    return n;
}

static pl_jn_t *
pl_j_parse_set(pl_jctx_t *c)
{
    static const char *const  ends[] = { "endset" };
    pl_jn_t                  *n = pl_j_node(c, S_SET);
    pl_jtok_t                 end;

    n->a = pl_j_target(c);
    if (pl_j_accept(c, T_OP, "=")) {
        n->b = pl_j_expr(c);
        if (pl_j_accept(c, T_OP, ",")) {
            pl_jn_t  *l = pl_j_node(c, E_LIST);

            l->b = n->b;
            n->b->next = pl_j_args(c, "", 0);
            n->b = l;
        }
        pl_j_stmt_end(c);
        return n;
    }
    if (n->a->kind != E_NAME) {
        pl_j_fail(c, "block set needs a plain name at byte %zu", c->pos);
    }
    pl_j_stmt_end(c);
    n->kind = S_BLOCKSET;
    n->b = pl_j_block(c, ends, 1, &end);
    pl_j_stmt_end(c);
    return n;
}

static pl_jn_t *
pl_j_parse_macro(pl_jctx_t *c)
{
    static const char *const  ends[] = { "endmacro" };
    pl_jn_t                  *n = pl_j_node(c, S_MACRO);
    pl_jn_t                  *p;
    pl_jtok_t                 end;

    n->name = pl_j_expect_name(c);
    pl_j_expect(c, T_OP, "(");
    n->a = pl_j_args(c, ")", 1);
    for (p = n->a; p != NULL; p = p->next) {
        if (p->kind != E_NAME && p->kind != E_KWARG) {
            pl_j_fail(c, "macro %s: parameters must be names", n->name->s);
        }
    }
    pl_j_stmt_end(c);
    n->b = pl_j_block(c, ends, 1, &end);
    pl_j_accept(c, T_NAME, n->name->s);
    pl_j_stmt_end(c);
    return n;
}

static pl_jn_t *
pl_j_statement(pl_jctx_t *c, pl_jtok_t *kw)
{
    pl_jn_t  *n;

    if (pl_j_is(kw, T_NAME, "if")) {
        return pl_j_parse_if(c);
    }
    if (pl_j_is(kw, T_NAME, "for")) {
        return pl_j_parse_for(c);
    }
    if (pl_j_is(kw, T_NAME, "set")) {
        return pl_j_parse_set(c);
    }
    if (pl_j_is(kw, T_NAME, "macro")) {
        return pl_j_parse_macro(c);
    }
    if (pl_j_is(kw, T_NAME, "break") || pl_j_is(kw, T_NAME, "continue")) {
        n = pl_j_node(c, pl_j_is(kw, T_NAME, "break") ? S_BREAK : S_CONTINUE);
        pl_j_stmt_end(c);
        return n;
    }
    if (pl_j_is(kw, T_NAME, "generation")
        || pl_j_is(kw, T_NAME, "endgeneration"))
    {
        pl_j_stmt_end(c);
        return NULL;
    }
    pl_j_fail(c, "unsupported statement {%% %.*s %%}", (int) kw->n, kw->s);
}

/* Statements until one of ends (returned in *endtok, its tag entered). */
static pl_jn_t *
pl_j_block(pl_jctx_t *c, const char *const *ends, int nends,
    pl_jtok_t *endtok)
{
    pl_jseq_t  seq = { NULL, &seq.head };
    pl_jn_t   *n;
    pl_jtok_t  kw;
    int        i;

    if (++c->depth > PL_J_MAX_DEPTH) {
        pl_j_fail(c, "blocks nested too deeply");
    }
    while (c->ipiece < c->npieces) {
        pl_jpiece_t  *p = &c->pieces[c->ipiece++];

        if (p->kind == 0) {
            n = pl_j_node(c, S_TEXT);
            n->name = pl_j_str(c, c->src + p->start, p->end - p->start);
            pl_j_append(&seq, n);
            continue;
        }
        pl_j_enter(c, p);
        if (p->kind == 1) {
            n = pl_j_node(c, S_OUT);
            n->a = pl_j_expr(c);
            pl_j_stmt_end(c);
            pl_j_append(&seq, n);
            continue;
        }
        kw = pl_j_lex(c);
        for (i = 0; i < nends; i++) {
            if (pl_j_is(&kw, T_NAME, ends[i])) {
                *endtok = kw;
                c->depth--;
                return seq.head;
            }
        }
        n = pl_j_statement(c, &kw);
        if (n != NULL) {
            pl_j_append(&seq, n);
        }
    }
    if (nends > 0) {
        pl_j_fail(c, "missing {%% %s %%}", ends[nends - 1]);
    }
    c->depth--;
    return seq.head;
}

pl_jinja_t *
pl_jinja_parse(const char *src, size_t len, char *err, size_t errlen)
{
    pl_jctx_t    c;
    pl_jinja_t  *volatile t = calloc(1, sizeof(pl_jinja_t));
    char        *volatile pre;
    size_t       prelen = 0;

    pre = t ? pl_j_preprocess(src, len, &prelen) : NULL;
    if (pre == NULL) {
        free(t);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    memset(&c, 0, sizeof(c));
    c.arena = &t->arena;
    c.err = err;
    c.errlen = errlen;
    c.src = pre;
    c.srclen = prelen;
    if (setjmp(c.jb) != 0) {
        free(pre);
        pl_jinja_free(t);
        return NULL;
    }
    pl_j_split(&c);
    t->body = pl_j_block(&c, NULL, 0, NULL);
    free(pre);
    return t;
}

void
pl_jinja_free(pl_jinja_t *t)
{
    if (t != NULL) {
        pl_ja_free(&t->arena);
        free(t);
    }
}

/* ---- rendering: variables ---- */

static pl_jv_t
pl_j_from_json(pl_jctx_t *c, const json_t *j, int depth)
{
    pl_jv_t      v;
    size_t       i;
    const char  *k;
    json_t      *m;

    if (depth > PL_J_MAX_DEPTH) {
        pl_j_fail(c, "variables nested too deeply");
    }
    switch (json_typeof(j)) {
    case JSON_STRING:
        return pl_jv_str(c, json_string_value(j), json_string_length(j));
    case JSON_INTEGER:
        return pl_jv_int(json_integer_value(j));
    case JSON_REAL:
        return pl_jv_float(json_real_value(j));
    case JSON_TRUE:
        return pl_jv_bool(1);
    case JSON_FALSE:
        return pl_jv_bool(0);
    case JSON_ARRAY:
        v = pl_jv_list(c);
        for (i = 0; i < json_array_size(j); i++) {
            pl_jlist_push(c, v.u.l,
                          pl_j_from_json(c, json_array_get(j, i), depth + 1));
        }
        return v;
    case JSON_OBJECT:
        v = pl_jv_dict(c);
        json_object_foreach((json_t *) j, k, m) {
            pl_jdict_setc(c, v.u.d, k, pl_j_from_json(c, m, depth + 1));
        }
        return v;
    default:
        return pl_jv_of(JV_NONE);
    }
}

static pl_jframe_t *
pl_j_frame(pl_jctx_t *c, pl_jframe_t *parent)
{
    pl_jframe_t  *f = pl_j_alloc(c, sizeof(pl_jframe_t));

    f->parent = parent;
    f->vars = pl_j_alloc(c, sizeof(pl_jdict_t));
    return f;
}

static pl_jv_t
pl_j_lookup(pl_jframe_t *f, const pl_jstr_t *name)
{
    pl_jv_t  *v;

    for (; f != NULL; f = f->parent) {
        v = pl_jdict_find(f->vars, name->s, name->n);
        if (v != NULL) {
            return *v;
        }
    }
    return pl_jv_of(JV_UNDEF);
}

/* ---- rendering: value helpers ---- */

static int
pl_j_truthy(const pl_jv_t *v)
{
    switch (v->type) {
    case JV_BOOL: return v->u.b;
    case JV_INT: return v->u.i != 0;
    case JV_FLOAT: return v->u.f != 0;
    case JV_STR: return v->u.s->n != 0;
    case JV_LIST: return v->u.l->n != 0;
    case JV_DICT: return v->u.d->n != 0 || v->u.d->ns;
    case JV_MACRO: return 1;
    default: return 0;
    }
}

static int
pl_j_isnum(const pl_jv_t *v)
{
    return v->type == JV_INT || v->type == JV_FLOAT;
}

static double
pl_j_num(const pl_jv_t *v)
{
    return v->type == JV_INT ? (double) v->u.i : v->u.f;
}

static int
pl_j_equal_at(const pl_jv_t *a, const pl_jv_t *b, int depth);

static int
pl_j_equal(const pl_jv_t *a, const pl_jv_t *b)
{
    return pl_j_equal_at(a, b, 0);
}

/* Deep equality; below PL_J_MAX_DEPTH levels containers compare by
   identity, so a list that contains itself cannot recurse forever. */
static int
pl_j_equal_at(const pl_jv_t *a, const pl_jv_t *b, int depth)
{
    size_t     i;
    pl_jv_t   *o;

    if (pl_j_isnum(a) && pl_j_isnum(b)) {
        return pl_j_num(a) == pl_j_num(b);
    }
    if (a->type != b->type) {
        return 0;
    }
    if (depth > PL_J_MAX_DEPTH && (a->type == JV_LIST || a->type == JV_DICT)) {
        return a->u.l == b->u.l;
    }
    switch (a->type) {
    case JV_BOOL:
        return a->u.b == b->u.b;
    case JV_STR:
        return a->u.s->n == b->u.s->n
               && memcmp(a->u.s->s, b->u.s->s, a->u.s->n) == 0;
    case JV_LIST:
        if (a->u.l->n != b->u.l->n) {
            return 0;
        }
        for (i = 0; i < a->u.l->n; i++) {
            if (!pl_j_equal_at(&a->u.l->v[i], &b->u.l->v[i], depth + 1)) {
                return 0;
            }
        }
        return 1;
    case JV_DICT:
        if (a->u.d->n != b->u.d->n) {
            return 0;
        }
        for (i = 0; i < a->u.d->n; i++) {
            o = pl_jdict_find(b->u.d, a->u.d->k[i]->s, a->u.d->k[i]->n);
            if (o == NULL || !pl_j_equal_at(&a->u.d->v[i], o, depth + 1)) {
                return 0;
            }
        }
        return 1;
    case JV_MACRO:
        return a->u.m == b->u.m;
    default:
        return 1;
    }
}

/* Code point count and the byte offset of code point k. */
static size_t
pl_j_cplen(const pl_jstr_t *s)
{
    size_t  i, n = 0;

    for (i = 0; i < s->n; i++) {
        n += ((uint8_t) s->s[i] & 0xc0) != 0x80;
    }
    return n;
}

static size_t
pl_j_cpoff(const pl_jstr_t *s, size_t k)
{
    size_t  i;

    for (i = 0; i < s->n; i++) {
        if (((uint8_t) s->s[i] & 0xc0) != 0x80 && k-- == 0) {
            return i;
        }
    }
    return s->n;
}

static size_t
pl_j_length(pl_jctx_t *c, const pl_jv_t *v)
{
    switch (v->type) {
    case JV_STR: return pl_j_cplen(v->u.s);
    case JV_LIST: return v->u.l->n;
    case JV_DICT: return v->u.d->n;
    default:
        pl_j_fail(c, "%s has no length", pl_jv_typename(v));
    }
}

/* Items to iterate: lists as they are, dicts by key, strings by char. */
static pl_jlist_t *
pl_j_iterable(pl_jctx_t *c, const pl_jv_t *v)
{
    pl_jv_t  l;
    size_t   i, k;

    switch (v->type) {
    case JV_LIST:
        return v->u.l;
    case JV_DICT:
        l = pl_jv_list(c);
        for (i = 0; i < v->u.d->n; i++) {
            pl_jv_t  key = { JV_STR, { 0 } };

            key.u.s = v->u.d->k[i];
            pl_jlist_push(c, l.u.l, key);
        }
        return l.u.l;
    case JV_STR:
        l = pl_jv_list(c);
        for (i = 0; i < v->u.s->n; i += k) {
            k = pl_utf8_seq_len((const uint8_t *) v->u.s->s + i,
                                v->u.s->n - i);
            k = k ? k : 1;
            pl_jlist_push(c, l.u.l, pl_jv_str(c, v->u.s->s + i, k));
        }
        return l.u.l;
    case JV_UNDEF: case JV_NONE:
        l = pl_jv_list(c);
        return l.u.l;
    default:
        pl_j_fail(c, "cannot iterate over %s", pl_jv_typename(v));
    }
}

static pl_jv_t
pl_j_get_attr(const pl_jv_t *obj, const char *name, size_t n)
{
    pl_jv_t  *v;

    if (obj->type == JV_DICT) {
        v = pl_jdict_find(obj->u.d, name, n);
        if (v != NULL) {
            return *v;
        }
    }
    return pl_jv_of(JV_UNDEF);
}

static pl_jv_t
pl_j_index(pl_jctx_t *c, const pl_jv_t *obj, const pl_jv_t *key)
{
    long long  i, n;

    if (obj->type == JV_DICT && key->type == JV_STR) {
        return pl_j_get_attr(obj, key->u.s->s, key->u.s->n);
    }
    if ((obj->type == JV_LIST || obj->type == JV_STR)
        && key->type == JV_INT)
    {
        n = (long long) pl_j_length(c, obj);
        i = key->u.i < 0 ? key->u.i + n : key->u.i;
        if (i < 0 || i >= n) {
            return pl_jv_of(JV_UNDEF);
        }
        if (obj->type == JV_LIST) {
            return obj->u.l->v[i];
        }
        {
            size_t  a = pl_j_cpoff(obj->u.s, (size_t) i);
            size_t  b = pl_j_cpoff(obj->u.s, (size_t) i + 1);

            return pl_jv_str(c, obj->u.s->s + a, b - a);
        }
    }
    if (obj->type == JV_UNDEF || obj->type == JV_NONE) {
        return pl_jv_of(JV_UNDEF);
    }
    pl_j_fail(c, "cannot index %s with %s", pl_jv_typename(obj),
              pl_jv_typename(key));
}

static long long
pl_j_slice_bound(const pl_jv_t *v, long long dflt, long long n)
{
    long long  i;

    if (v->type != JV_INT) {
        return dflt;
    }
    i = v->u.i < 0 ? v->u.i + n : v->u.i;
    return i;
}

static pl_jv_t
pl_j_slice(pl_jctx_t *c, const pl_jv_t *obj, const pl_jv_t *lo,
    const pl_jv_t *hi, const pl_jv_t *st)
{
    long long  n = (long long) pl_j_length(c, obj), step, a, b, i;
    pl_jv_t    out = pl_jv_list(c), s = { 0, { 0 } };

    step = (st->type == JV_INT) ? st->u.i : 1;
    if (step == 0) {
        pl_j_fail(c, "slice step cannot be zero");
    }
    if (step > 0) {
        a = pl_j_slice_bound(lo, 0, n);
        b = pl_j_slice_bound(hi, n, n);
        a = a < 0 ? 0 : a > n ? n : a;
        b = b < 0 ? 0 : b > n ? n : b;
    } else {
        a = pl_j_slice_bound(lo, n - 1, n);
        b = pl_j_slice_bound(hi, -1, n);
        a = a < -1 ? -1 : a > n - 1 ? n - 1 : a;
        b = (hi->type == JV_INT) ? (b < -1 ? -1 : b > n - 1 ? n - 1 : b) : -1;
    }
    for (i = a; step > 0 ? i < b : i > b; i += step) {
        pl_jv_t  k = pl_jv_int(i);

        pl_jlist_push(c, out.u.l, pl_j_index(c, obj, &k));
    }
    if (obj->type != JV_STR) {
        return out;
    }
    {
        pl_jbuf_t  *buf = pl_jbuf_open(c);

        for (i = 0; i < (long long) out.u.l->n; i++) {
            pl_jbuf_add(c, buf, out.u.l->v[i].u.s->s, out.u.l->v[i].u.s->n);
        }
        s = pl_jbuf_close(c, buf);
    }
    return s;
}

/* ---- rendering: operators ---- */

static const char *
pl_j_find(const char *h, size_t hn, const char *n, size_t nn)
{
    const char  *p = h, *end = h + hn;

    if (nn == 0) {
        return h;
    }
    while ((size_t) (end - p) >= nn) {
        p = memchr(p, n[0], (size_t) (end - p) - nn + 1);
        if (p == NULL) {
            return NULL;
        }
        if (memcmp(p, n, nn) == 0) {
            return p;
        }
        p++;
    }
    return NULL;
}

static pl_jv_t
pl_j_concat_values(pl_jctx_t *c, const pl_jv_t *a, const pl_jv_t *b)
{
    pl_jbuf_t  *buf = pl_jbuf_open(c);

    pl_j_print(c, buf, a);
    pl_j_print(c, buf, b);
    return pl_jbuf_close(c, buf);
}

static pl_jv_t
pl_j_arith(pl_jctx_t *c, int op, const pl_jv_t *a, const pl_jv_t *b)
{
    double  x = pl_j_num(a), y = pl_j_num(b), r;
    int     ints = (a->type == JV_INT && b->type == JV_INT);

    switch (op) {
    case OP_ADD:
        return ints ? pl_jv_int(a->u.i + b->u.i) : pl_jv_float(x + y);
    case OP_SUB:
        return ints ? pl_jv_int(a->u.i - b->u.i) : pl_jv_float(x - y);
    case OP_MUL:
        return ints ? pl_jv_int(a->u.i * b->u.i) : pl_jv_float(x * y);
    case OP_DIV:
        if (y == 0) {
            pl_j_fail(c, "division by zero");
        }
        return pl_jv_float(x / y);
    case OP_POW:
        return ints && b->u.i >= 0 ? pl_jv_int((long long) pow(x, y))
                                   : pl_jv_float(pow(x, y));
    default:
        if (y == 0) {
            pl_j_fail(c, "division by zero");
        }
        if (op == OP_FDIV) {
            r = floor(x / y);
            return ints ? pl_jv_int((long long) r) : pl_jv_float(r);
        }
        r = x - y * floor(x / y);
        return ints ? pl_jv_int((long long) r) : pl_jv_float(r);
    }
}

static int
pl_j_contains(pl_jctx_t *c, const pl_jv_t *hay, const pl_jv_t *needle)
{
    size_t  i;

    switch (hay->type) {
    case JV_STR:
        if (needle->type != JV_STR) {
            pl_j_fail(c, "'in <string>' needs a string");
        }
        return needle->u.s->n == 0
               || (needle->u.s->n <= hay->u.s->n
                   && pl_j_find(hay->u.s->s, hay->u.s->n, needle->u.s->s,
                             needle->u.s->n) != NULL);
    case JV_LIST:
        for (i = 0; i < hay->u.l->n; i++) {
            if (pl_j_equal(&hay->u.l->v[i], needle)) {
                return 1;
            }
        }
        return 0;
    case JV_DICT:
        return needle->type == JV_STR
               && pl_jdict_find(hay->u.d, needle->u.s->s, needle->u.s->n);
    case JV_UNDEF:
        return 0;
    default:
        pl_j_fail(c, "'in' needs a string, list or dict, not %s",
                  pl_jv_typename(hay));
    }
}

static int
pl_j_compare_order(pl_jctx_t *c, const pl_jv_t *a, const pl_jv_t *b)
{
    size_t  n;
    int     r;

    if (pl_j_isnum(a) && pl_j_isnum(b)) {
        return (pl_j_num(a) > pl_j_num(b)) - (pl_j_num(a) < pl_j_num(b));
    }
    if (a->type == JV_STR && b->type == JV_STR) {
        n = a->u.s->n < b->u.s->n ? a->u.s->n : b->u.s->n;
        r = memcmp(a->u.s->s, b->u.s->s, n);
        return r ? (r > 0) - (r < 0) : (a->u.s->n > b->u.s->n)
                                        - (a->u.s->n < b->u.s->n);
    }
    pl_j_fail(c, "cannot compare %s with %s", pl_jv_typename(a),
              pl_jv_typename(b));
}

static pl_jv_t
pl_j_binop(pl_jctx_t *c, int op, const pl_jv_t *a, const pl_jv_t *b)
{
    pl_jv_t  r;
    size_t   i;

    switch (op) {
    case OP_EQ: return pl_jv_bool(pl_j_equal(a, b));
    case OP_NE: return pl_jv_bool(!pl_j_equal(a, b));
    case OP_LT: return pl_jv_bool(pl_j_compare_order(c, a, b) < 0);
    case OP_GT: return pl_jv_bool(pl_j_compare_order(c, a, b) > 0);
    case OP_LE: return pl_jv_bool(pl_j_compare_order(c, a, b) <= 0);
    case OP_GE: return pl_jv_bool(pl_j_compare_order(c, a, b) >= 0);
    case OP_IN: return pl_jv_bool(pl_j_contains(c, b, a));
    case OP_NOTIN: return pl_jv_bool(!pl_j_contains(c, b, a));
    case OP_CAT: return pl_j_concat_values(c, a, b);
    default:
        break;
    }
    if (pl_j_isnum(a) && pl_j_isnum(b)) {
        return pl_j_arith(c, op, a, b);
    }
    if (op == OP_ADD && a->type == JV_STR && b->type == JV_STR) {
        return pl_j_concat_values(c, a, b);
    }
    if (op == OP_ADD && a->type == JV_LIST && b->type == JV_LIST) {
        r = pl_jv_list(c);
        for (i = 0; i < a->u.l->n; i++) {
            pl_jlist_push(c, r.u.l, a->u.l->v[i]);
        }
        for (i = 0; i < b->u.l->n; i++) {
            pl_jlist_push(c, r.u.l, b->u.l->v[i]);
        }
        return r;
    }
    if (op == OP_MUL && a->type == JV_STR && b->type == JV_INT) {
        pl_jbuf_t  *buf = pl_jbuf_open(c);
        long long   k;

        for (k = 0; k < b->u.i; k++) {
            pl_jbuf_add(c, buf, a->u.s->s, a->u.s->n);
        }
        return pl_jbuf_close(c, buf);
    }
    pl_j_fail(c, "unsupported operands %s and %s", pl_jv_typename(a),
              pl_jv_typename(b));
}

/* ---- rendering: calls ---- */

#define PL_J_MAX_ARGS  8

typedef struct {
    pl_jv_t      pos[PL_J_MAX_ARGS];
    int          npos;
    pl_jstr_t   *kwname[PL_J_MAX_ARGS];
    pl_jv_t      kw[PL_J_MAX_ARGS];
    int          nkw;
} pl_jargs_t;

static pl_jv_t pl_j_eval(pl_jctx_t *c, pl_jframe_t *f, const pl_jn_t *n);
static void pl_j_exec(pl_jctx_t *c, pl_jframe_t *f, const pl_jn_t *n);

static void
pl_j_eval_args(pl_jctx_t *c, pl_jframe_t *f, const pl_jn_t *n, pl_jargs_t *a)
{
    memset(a, 0, sizeof(*a));
    for (; n != NULL; n = n->next) {
        if (a->npos + a->nkw >= PL_J_MAX_ARGS) {
            pl_j_fail(c, "too many arguments");
        }
        if (n->kind == E_KWARG) {
            a->kwname[a->nkw] = n->name;
            a->kw[a->nkw++] = pl_j_eval(c, f, n->a);
        } else {
            a->pos[a->npos++] = pl_j_eval(c, f, n);
        }
    }
}

/* Argument i, or keyword name, or undefined. */
static pl_jv_t
pl_j_arg(const pl_jargs_t *a, int i, const char *name)
{
    int  k;

    if (i < a->npos) {
        return a->pos[i];
    }
    for (k = 0; name != NULL && k < a->nkw; k++) {
        if (strcmp(a->kwname[k]->s, name) == 0) {
            return a->kw[k];
        }
    }
    return pl_jv_of(JV_UNDEF);
}

static const pl_jstr_t *
pl_j_want_str(pl_jctx_t *c, const pl_jv_t *v, const char *what)
{
    if (v->type != JV_STR) {
        pl_j_fail(c, "%s expects a string, got %s", what, pl_jv_typename(v));
    }
    return v->u.s;
}

static int
pl_j_in_set(char ch, const pl_jstr_t *set)
{
    return set ? memchr(set->s, ch, set->n) != NULL
               : (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r'
                  || ch == '\f' || ch == '\v');
}

/* strip / lstrip / rstrip with optional characters (ASCII sets). */
static pl_jv_t
pl_j_strip(pl_jctx_t *c, const pl_jstr_t *s, const pl_jv_t *chars, int left,
    int right)
{
    const pl_jstr_t  *set = NULL;
    size_t            a = 0, b = s->n;

    if (chars->type == JV_STR) {
        set = chars->u.s;
    } else if (chars->type != JV_UNDEF && chars->type != JV_NONE) {
        pl_j_fail(c, "strip expects a string");
    }
    while (left && a < b && pl_j_in_set(s->s[a], set)) {
        a++;
    }
    while (right && b > a && pl_j_in_set(s->s[b - 1], set)) {
        b--;
    }
    return pl_jv_str(c, s->s + a, b - a);
}

static pl_jv_t
pl_j_str_split(pl_jctx_t *c, const pl_jstr_t *s, const pl_jv_t *sepv,
    const pl_jv_t *maxv)
{
    pl_jv_t      out = pl_jv_list(c);
    long long    max = (maxv->type == JV_INT) ? maxv->u.i : -1;
    size_t       i = 0, start;
    const char  *f;

    if (sepv->type == JV_STR) {
        const pl_jstr_t  *sep = sepv->u.s;

        if (sep->n == 0) {
            pl_j_fail(c, "split: empty separator");
        }
        for (;;) {
            f = (max != 0) ? pl_j_find(s->s + i, s->n - i, sep->s, sep->n) : NULL;
            if (f == NULL) {
                break;
            }
            pl_jlist_push(c, out.u.l, pl_jv_str(c, s->s + i,
                                                (size_t) (f - s->s) - i));
            i = (size_t) (f - s->s) + sep->n;
            max--;
        }
        pl_jlist_push(c, out.u.l, pl_jv_str(c, s->s + i, s->n - i));
        return out;
    }
    while (i < s->n) {
        while (i < s->n && pl_j_in_set(s->s[i], NULL)) {
            i++;
        }
        if (i == s->n) {
            break;
        }
        start = i;
        if (max == 0) {
            i = s->n;
            while (i > start && pl_j_in_set(s->s[i - 1], NULL)) {
                i--;
            }
        } else {
            while (i < s->n && !pl_j_in_set(s->s[i], NULL)) {
                i++;
            }
        }
        pl_jlist_push(c, out.u.l, pl_jv_str(c, s->s + start, i - start));
        max--;
    }
    return out;
}

static pl_jv_t
pl_j_replace(pl_jctx_t *c, const pl_jstr_t *s, const pl_jv_t *from,
    const pl_jv_t *to, const pl_jv_t *count)
{
    const pl_jstr_t  *a = pl_j_want_str(c, from, "replace");
    const pl_jstr_t  *b = pl_j_want_str(c, to, "replace");
    long long         max = (count->type == JV_INT) ? count->u.i : -1;
    pl_jbuf_t        *buf = pl_jbuf_open(c);
    size_t            i = 0;
    const char       *f;

    while (max != 0 && a->n > 0
           && (f = pl_j_find(s->s + i, s->n - i, a->s, a->n)) != NULL)
    {
        pl_jbuf_add(c, buf, s->s + i, (size_t) (f - s->s) - i);
        pl_jbuf_add(c, buf, b->s, b->n);
        i = (size_t) (f - s->s) + a->n;
        max--;
    }
    pl_jbuf_add(c, buf, s->s + i, s->n - i);
    return pl_jbuf_close(c, buf);
}

/* upper / lower / title / capitalize (ASCII and simple lowercase). */
static pl_jv_t
pl_j_case(pl_jctx_t *c, const pl_jstr_t *s, int how)
{
    pl_jv_t  r = pl_jv_str(c, s->s, s->n);
    char    *p = r.u.s->s;
    size_t   i;
    int      word_start = 1;

    for (i = 0; i < s->n; i++) {
        int  up = (how == 'u') || (how == 't' && word_start)
                  || (how == 'c' && i == 0);

        if (up && p[i] >= 'a' && p[i] <= 'z') {
            p[i] = (char) (p[i] - 32);
        } else if (!up && how != 'u' && p[i] >= 'A' && p[i] <= 'Z') {
            p[i] = (char) (p[i] + 32);
        }
        word_start = !((p[i] >= 'a' && p[i] <= 'z')
                       || (p[i] >= 'A' && p[i] <= 'Z')
                       || (p[i] >= '0' && p[i] <= '9')
                       || ((uint8_t) p[i] & 0x80));
    }
    return r;
}

static pl_jv_t
pl_j_str_method(pl_jctx_t *c, const pl_jstr_t *s, const char *m,
    const pl_jargs_t *a)
{
    pl_jv_t  a0 = pl_j_arg(a, 0, NULL), a1 = pl_j_arg(a, 1, NULL);

    if (strcmp(m, "startswith") == 0 || strcmp(m, "endswith") == 0) {
        const pl_jstr_t  *p = pl_j_want_str(c, &a0, m);

        return pl_jv_bool(p->n <= s->n
            && memcmp(m[0] == 's' ? s->s : s->s + s->n - p->n, p->s, p->n)
               == 0);
    }
    if (strcmp(m, "strip") == 0) {
        return pl_j_strip(c, s, &a0, 1, 1);
    }
    if (strcmp(m, "lstrip") == 0) {
        return pl_j_strip(c, s, &a0, 1, 0);
    }
    if (strcmp(m, "rstrip") == 0) {
        return pl_j_strip(c, s, &a0, 0, 1);
    }
    if (strcmp(m, "split") == 0) {
        return pl_j_str_split(c, s, &a0, &a1);
    }
    if (strcmp(m, "replace") == 0) {
        pl_jv_t  a2 = pl_j_arg(a, 2, NULL);

        return pl_j_replace(c, s, &a0, &a1, &a2);
    }
    if (strcmp(m, "upper") == 0 || strcmp(m, "lower") == 0
        || strcmp(m, "title") == 0 || strcmp(m, "capitalize") == 0)
    {
        return pl_j_case(c, s, m[0] == 'u' ? 'u' : m[0] == 'l' ? 'l'
                                 : m[0] == 't' ? 't' : 'c');
    }
    if (strcmp(m, "find") == 0) {
        const pl_jstr_t  *p = pl_j_want_str(c, &a0, m);
        const char       *f = pl_j_find(s->s, s->n, p->s, p->n);

        return pl_jv_int(f ? (long long) pl_j_cplen(pl_j_str(c, s->s,
                                                     (size_t) (f - s->s)))
                           : -1);
    }
    if (strcmp(m, "join") == 0) {
        pl_jlist_t  *l = pl_j_iterable(c, &a0);
        pl_jbuf_t   *buf = pl_jbuf_open(c);
        size_t       i;

        for (i = 0; i < l->n; i++) {
            if (i) {
                pl_jbuf_add(c, buf, s->s, s->n);
            }
            pl_j_print(c, buf, &l->v[i]);
        }
        return pl_jbuf_close(c, buf);
    }
    pl_j_fail(c, "unsupported string method %s()", m);
}

static pl_jv_t
pl_j_dict_items(pl_jctx_t *c, const pl_jdict_t *d, int what)
{
    pl_jv_t  out = pl_jv_list(c), key = { JV_STR, { 0 } }, pair;
    size_t   i;

    for (i = 0; i < d->n; i++) {
        key.u.s = d->k[i];
        if (what == 'k') {
            pl_jlist_push(c, out.u.l, key);
        } else if (what == 'v') {
            pl_jlist_push(c, out.u.l, d->v[i]);
        } else {
            pair = pl_jv_list(c);
            pl_jlist_push(c, pair.u.l, key);
            pl_jlist_push(c, pair.u.l, d->v[i]);
            pl_jlist_push(c, out.u.l, pair);
        }
    }
    return out;
}

static pl_jv_t
pl_j_method(pl_jctx_t *c, pl_jv_t *obj, const char *m, const pl_jargs_t *a)
{
    pl_jv_t  a0 = pl_j_arg(a, 0, NULL), *v;

    if (obj->type == JV_STR) {
        return pl_j_str_method(c, obj->u.s, m, a);
    }
    if (obj->type == JV_DICT) {
        if (strcmp(m, "items") == 0 || strcmp(m, "keys") == 0
            || strcmp(m, "values") == 0)
        {
            return pl_j_dict_items(c, obj->u.d, m[0]);
        }
        if (strcmp(m, "get") == 0) {
            pl_j_want_str(c, &a0, "get");
            v = pl_jdict_find(obj->u.d, a0.u.s->s, a0.u.s->n);
            return v ? *v : a->npos > 1 ? a->pos[1] : pl_jv_of(JV_NONE);
        }
    }
    if (obj->type == JV_LIST && strcmp(m, "append") == 0) {
        pl_jlist_push(c, obj->u.l, a0);
        return pl_jv_of(JV_NONE);
    }
    pl_j_fail(c, "unsupported method %s() on %s", m, pl_jv_typename(obj));
}

static pl_jv_t
pl_j_call_macro(pl_jctx_t *c, const pl_jn_t *def, const pl_jargs_t *a)
{
    pl_jframe_t  *f;
    pl_jbuf_t    *saved = c->out, *buf;
    const pl_jn_t *p;
    int           i = 0, k;
    pl_jv_t       v;

    if (++c->calls > PL_J_MAX_CALLS) {
        pl_j_fail(c, "macro calls nested too deeply");
    }
    f = pl_j_frame(c, c->globals);
    for (p = def->a; p != NULL; p = p->next, i++) {
        v = pl_j_arg(a, i, p->name->s);
        if (v.type == JV_UNDEF && p->kind == E_KWARG) {
            v = pl_j_eval(c, f, p->a);
        }
        pl_jdict_set(c, f->vars, p->name, v);
    }
    for (k = 0; k < a->nkw; k++) {
        if (pl_jdict_find(f->vars, a->kwname[k]->s, a->kwname[k]->n) == NULL)
        {
            pl_j_fail(c, "macro %s has no argument %s", def->name->s,
                      a->kwname[k]->s);
        }
    }
    buf = pl_jbuf_open(c);
    c->out = buf;
    pl_j_exec(c, f, def->b);
    c->out = saved;
    c->calls--;
    return pl_jbuf_close(c, buf);
}

static pl_jv_t
pl_j_namespace(pl_jctx_t *c, const pl_jargs_t *a)
{
    pl_jv_t  ns = pl_jv_dict(c);
    int      k;

    ns.u.d->ns = 1;
    if (a->npos == 1 && a->pos[0].type == JV_DICT) {
        size_t  i;

        for (i = 0; i < a->pos[0].u.d->n; i++) {
            pl_jdict_set(c, ns.u.d, a->pos[0].u.d->k[i], a->pos[0].u.d->v[i]);
        }
    }
    for (k = 0; k < a->nkw; k++) {
        pl_jdict_set(c, ns.u.d, a->kwname[k], a->kw[k]);
    }
    return ns;
}

static pl_jv_t
pl_j_range(pl_jctx_t *c, const pl_jargs_t *a)
{
    long long  lo = 0, hi, step = 1, i;
    pl_jv_t    out = pl_jv_list(c);
    int        k;

    for (k = 0; k < a->npos; k++) {
        if (a->pos[k].type != JV_INT) {
            pl_j_fail(c, "range() expects integers");
        }
    }
    if (a->npos == 1) {
        hi = a->pos[0].u.i;
    } else if (a->npos >= 2) {
        lo = a->pos[0].u.i;
        hi = a->pos[1].u.i;
        step = (a->npos > 2) ? a->pos[2].u.i : 1;
    } else {
        pl_j_fail(c, "range() needs arguments");
    }
    if (step == 0) {
        pl_j_fail(c, "range() step cannot be zero");
    }
    for (i = lo; step > 0 ? i < hi : i > hi; i += step) {
        if (out.u.l->n >= PL_J_MAX_RANGE) {
            pl_j_fail(c, "range() longer than %d", PL_J_MAX_RANGE);
        }
        pl_jlist_push(c, out.u.l, pl_jv_int(i));
    }
    return out;
}

static pl_jv_t
pl_j_call(pl_jctx_t *c, pl_jframe_t *f, const pl_jn_t *n)
{
    pl_jargs_t  a;
    pl_jv_t     obj, callee;

    if (n->a->kind == E_ATTR) {
        obj = pl_j_eval(c, f, n->a->a);
        if (obj.type == JV_STR || obj.type == JV_LIST
            || (obj.type == JV_DICT && !obj.u.d->ns
                && pl_jdict_find(obj.u.d, n->a->name->s, n->a->name->n)
                   == NULL))
        {
            pl_j_eval_args(c, f, n->b, &a);
            return pl_j_method(c, &obj, n->a->name->s, &a);
        }
    }
    pl_j_eval_args(c, f, n->b, &a);
    if (n->a->kind == E_NAME) {
        const char  *name = n->a->name->s;

        callee = pl_j_lookup(f, n->a->name);
        if (callee.type == JV_UNDEF && strcmp(name, "raise_exception") == 0) {
            pl_jv_t  msg = pl_j_arg(&a, 0, NULL);

            pl_j_fail(c, "raise_exception: %s",
                      msg.type == JV_STR ? msg.u.s->s : "(no message)");
        }
        if (callee.type == JV_UNDEF && strcmp(name, "namespace") == 0) {
            return pl_j_namespace(c, &a);
        }
        if (callee.type == JV_UNDEF && strcmp(name, "range") == 0) {
            return pl_j_range(c, &a);
        }
        if (callee.type == JV_UNDEF && strcmp(name, "dict") == 0) {
            pl_jv_t  d = pl_j_namespace(c, &a);

            d.u.d->ns = 0;
            return d;
        }
    } else {
        callee = pl_j_eval(c, f, n->a);
    }
    if (callee.type != JV_MACRO) {
        pl_j_fail(c, "cannot call %s", n->a->kind == E_NAME
                  ? n->a->name->s : pl_jv_typename(&callee));
    }
    return pl_j_call_macro(c, callee.u.m, &a);
}

/* ---- rendering: tests and filters ---- */

static int
pl_j_test(pl_jctx_t *c, const pl_jstr_t *name, const pl_jv_t *v,
    const pl_jargs_t *a)
{
    const char  *t = name->s;
    pl_jv_t      a0 = pl_j_arg(a, 0, NULL);

    if (strcmp(t, "defined") == 0) return v->type != JV_UNDEF;
    if (strcmp(t, "undefined") == 0) return v->type == JV_UNDEF;
    if (strcmp(t, "none") == 0) return v->type == JV_NONE;
    if (strcmp(t, "string") == 0) return v->type == JV_STR;
    if (strcmp(t, "number") == 0) return pl_j_isnum(v);
    if (strcmp(t, "integer") == 0) return v->type == JV_INT;
    if (strcmp(t, "float") == 0) return v->type == JV_FLOAT;
    if (strcmp(t, "boolean") == 0) return v->type == JV_BOOL;
    if (strcmp(t, "true") == 0) return v->type == JV_BOOL && v->u.b;
    if (strcmp(t, "false") == 0) return v->type == JV_BOOL && !v->u.b;
    if (strcmp(t, "mapping") == 0) return v->type == JV_DICT;
    if (strcmp(t, "sequence") == 0 || strcmp(t, "iterable") == 0) {
        return v->type == JV_LIST || v->type == JV_STR
               || (t[0] == 'i' && v->type == JV_DICT);
    }
    if (strcmp(t, "callable") == 0) return v->type == JV_MACRO;
    if (strcmp(t, "odd") == 0 || strcmp(t, "even") == 0) {
        if (v->type != JV_INT) {
            pl_j_fail(c, "test %s expects an integer", t);
        }
        return (int) ((v->u.i % 2 != 0) == (t[0] == 'o'));
    }
    if (strcmp(t, "divisibleby") == 0) {
        return v->type == JV_INT && a0.type == JV_INT && a0.u.i != 0
               && v->u.i % a0.u.i == 0;
    }
    if (strcmp(t, "equalto") == 0 || strcmp(t, "eq") == 0
        || strcmp(t, "sameas") == 0)
    {
        return pl_j_equal(v, &a0);
    }
    if (strcmp(t, "ne") == 0) return !pl_j_equal(v, &a0);
    if (strcmp(t, "in") == 0) return pl_j_contains(c, &a0, v);
    if (strcmp(t, "lower") == 0 || strcmp(t, "upper") == 0) {
        pl_jv_t  x;

        if (v->type != JV_STR) {
            return 0;
        }
        x = pl_j_case(c, v->u.s, t[0] == 'l' ? 'l' : 'u');
        return pl_j_equal(&x, v);
    }
    pl_j_fail(c, "unsupported test '%s'", t);
}

static pl_jv_t pl_j_filter(pl_jctx_t *c, pl_jframe_t *f, const char *name,
    pl_jv_t v, const pl_jargs_t *a);

/* selectattr / rejectattr / select / reject / map */
static pl_jv_t
pl_j_select(pl_jctx_t *c, pl_jframe_t *f, const char *name, const pl_jv_t *v,
    const pl_jargs_t *a)
{
    int          attr = (strstr(name, "attr") != NULL);
    int          keep = (name[0] == 's');
    pl_jlist_t  *l = pl_j_iterable(c, v);
    pl_jv_t      out = pl_jv_list(c), x, key = pl_j_arg(a, 0, "attribute");
    pl_jargs_t   sub;
    size_t       i;
    int          k, first = attr ? 1 : 0;

    memset(&sub, 0, sizeof(sub));
    for (k = first + 1; k < a->npos; k++) {
        sub.pos[sub.npos++] = a->pos[k];
    }
    for (i = 0; i < l->n; i++) {
        x = l->v[i];
        if (strcmp(name, "map") == 0) {
            if (key.type == JV_STR && a->nkw > 0) {
                x = pl_j_get_attr(&x, key.u.s->s, key.u.s->n);
            } else if (key.type == JV_STR) {
                x = pl_j_filter(c, f, key.u.s->s, x, &sub);
            }
            pl_jlist_push(c, out.u.l, x);
            continue;
        }
        if (attr) {
            pl_j_want_str(c, &key, name);
            x = pl_j_get_attr(&x, key.u.s->s, key.u.s->n);
        }
        if (a->npos > first) {
            pl_jv_t  test = a->pos[first];

            pl_j_want_str(c, &test, name);
            k = pl_j_test(c, test.u.s, &x, &sub);
        } else {
            k = pl_j_truthy(&x);
        }
        if (k == keep) {
            pl_jlist_push(c, out.u.l, l->v[i]);
        }
    }
    return out;
}

static pl_jv_t
pl_j_join(pl_jctx_t *c, const pl_jv_t *v, const pl_jargs_t *a)
{
    pl_jlist_t  *l = pl_j_iterable(c, v);
    pl_jv_t      sep = pl_j_arg(a, 0, "d"), attr = pl_j_arg(a, 1, "attribute");
    pl_jbuf_t   *buf = pl_jbuf_open(c);
    size_t       i;

    for (i = 0; i < l->n; i++) {
        pl_jv_t  x = l->v[i];

        if (i > 0 && sep.type == JV_STR) {
            pl_jbuf_add(c, buf, sep.u.s->s, sep.u.s->n);
        }
        if (attr.type == JV_STR) {
            x = pl_j_get_attr(&x, attr.u.s->s, attr.u.s->n);
        }
        pl_j_print(c, buf, &x);
    }
    return pl_jbuf_close(c, buf);
}

static pl_jv_t
pl_j_sorted(pl_jctx_t *c, const pl_jv_t *v, const pl_jargs_t *a)
{
    pl_jlist_t  *l = pl_j_iterable(c, v);
    pl_jv_t      out = pl_jv_list(c), rev = pl_j_arg(a, 0, "reverse");
    pl_jv_t      attr = pl_j_arg(a, 2, "attribute");
    size_t       i, j;

    for (i = 0; i < l->n; i++) {
        pl_jlist_push(c, out.u.l, l->v[i]);
    }
    for (i = 1; i < out.u.l->n; i++) {
        pl_jv_t  x = out.u.l->v[i], kx = x;

        if (attr.type == JV_STR) {
            kx = pl_j_get_attr(&x, attr.u.s->s, attr.u.s->n);
        }
        for (j = i; j > 0; j--) {
            pl_jv_t  ky = out.u.l->v[j - 1];
            int      r;

            if (attr.type == JV_STR) {
                ky = pl_j_get_attr(&ky, attr.u.s->s, attr.u.s->n);
            }
            r = pl_j_compare_order(c, &ky, &kx);
            if (pl_j_truthy(&rev) ? r >= 0 : r <= 0) {
                break;
            }
            out.u.l->v[j] = out.u.l->v[j - 1];
        }
        out.u.l->v[j] = x;
    }
    return out;
}

static pl_jv_t
pl_j_tojson(pl_jctx_t *c, const pl_jv_t *v, const pl_jargs_t *a)
{
    pl_jv_t     ind = pl_j_arg(a, 0, "indent");
    pl_jbuf_t  *buf = pl_jbuf_open(c);

    if (ind.type != JV_UNDEF && ind.type != JV_NONE && ind.type != JV_INT) {
        pl_j_fail(c, "tojson: indent must be an integer");
    }
    pl_j_json(c, buf, v, ind.type == JV_INT ? (int) ind.u.i : 0, 0);
    return pl_jbuf_close(c, buf);
}

static pl_jv_t
pl_j_indent_filter(pl_jctx_t *c, const pl_jv_t *v, const pl_jargs_t *a)
{
    pl_jv_t           w = pl_j_arg(a, 0, "width"), first = pl_j_arg(a, 1,
                                                                   "first");
    const pl_jstr_t  *s = pl_j_want_str(c, v, "indent");
    pl_jbuf_t        *buf = pl_jbuf_open(c);
    long long         n = (w.type == JV_INT) ? w.u.i : 4, k;
    size_t            i;

    for (i = 0; i <= s->n; i++) {
        if ((i == 0 && pl_j_truthy(&first))
            || (i > 0 && s->s[i - 1] == '\n' && i < s->n && s->s[i] != '\n'))
        {
            for (k = 0; k < n; k++) {
                pl_jbuf_add(c, buf, " ", 1);
            }
        }
        if (i < s->n) {
            pl_jbuf_add(c, buf, s->s + i, 1);
        }
    }
    return pl_jbuf_close(c, buf);
}

static pl_jv_t
pl_j_list_filter(pl_jctx_t *c, const char *t, const pl_jv_t *v)
{
    pl_jlist_t  *l = pl_j_iterable(c, v);
    pl_jv_t      out = pl_jv_list(c);
    size_t       i;

    if (strcmp(t, "first") == 0 || strcmp(t, "last") == 0) {
        if (l->n == 0) {
            return pl_jv_of(JV_UNDEF);
        }
        return l->v[t[0] == 'f' ? 0 : l->n - 1];
    }
    for (i = 0; i < l->n; i++) {
        pl_jlist_push(c, out.u.l, l->v[t[0] == 'r' ? l->n - 1 - i : i]);
    }
    if (t[0] == 'r' && v->type == JV_STR) {
        pl_jbuf_t  *buf = pl_jbuf_open(c);

        for (i = 0; i < out.u.l->n; i++) {
            pl_jbuf_add(c, buf, out.u.l->v[i].u.s->s, out.u.l->v[i].u.s->n);
        }
        return pl_jbuf_close(c, buf);
    }
    return out;
}

static pl_jv_t
pl_j_number_filter(const char *t, const pl_jv_t *v)
{
    double  d;
    char   *end;

    if (v->type == JV_STR) {
        d = strtod(v->u.s->s, &end);
        if (end == v->u.s->s || *end != '\0') {
            d = 0;
        }
    } else if (pl_j_isnum(v)) {
        d = pl_j_num(v);
    } else if (v->type == JV_BOOL) {
        d = v->u.b;
    } else {
        d = 0;
    }
    if (strcmp(t, "abs") == 0) {
        return v->type == JV_INT ? pl_jv_int(v->u.i < 0 ? -v->u.i : v->u.i)
                                 : pl_jv_float(fabs(d));
    }
    return t[0] == 'i' ? pl_jv_int((long long) d) : pl_jv_float(d);
}

static pl_jv_t
pl_j_escape(pl_jctx_t *c, const pl_jv_t *v)
{
    pl_jv_t     s = pl_j_tostring(c, v);
    pl_jbuf_t  *buf = pl_jbuf_open(c);
    size_t      i;

    for (i = 0; i < s.u.s->n; i++) {
        char  ch = s.u.s->s[i];

        switch (ch) {
        case '&': pl_jbuf_cstr(c, buf, "&amp;"); break;
        case '<': pl_jbuf_cstr(c, buf, "&lt;"); break;
        case '>': pl_jbuf_cstr(c, buf, "&gt;"); break;
        case '"': pl_jbuf_cstr(c, buf, "&#34;"); break;
        case '\'': pl_jbuf_cstr(c, buf, "&#39;"); break;
        default: pl_jbuf_add(c, buf, &ch, 1);
        }
    }
    return pl_jbuf_close(c, buf);
}

static pl_jv_t
pl_j_filter(pl_jctx_t *c, pl_jframe_t *f, const char *t, pl_jv_t v,
    const pl_jargs_t *a)
{
    pl_jv_t  a0 = pl_j_arg(a, 0, NULL), a1 = pl_j_arg(a, 1, NULL);

    if (strcmp(t, "trim") == 0) {
        return pl_j_strip(c, pl_j_want_str(c, &v, t), &a0, 1, 1);
    }
    if (strcmp(t, "length") == 0 || strcmp(t, "count") == 0) {
        return pl_jv_int((long long) pl_j_length(c, &v));
    }
    if (strcmp(t, "tojson") == 0) {
        return pl_j_tojson(c, &v, a);
    }
    if (strcmp(t, "upper") == 0 || strcmp(t, "lower") == 0
        || strcmp(t, "title") == 0 || strcmp(t, "capitalize") == 0)
    {
        return pl_j_case(c, pl_j_want_str(c, &v, t), t[0] == 'u' ? 'u'
                         : t[0] == 'l' ? 'l' : t[0] == 't' ? 't' : 'c');
    }
    if (strcmp(t, "default") == 0 || strcmp(t, "d") == 0) {
        pl_jv_t  b = pl_j_arg(a, 1, "boolean");

        return (v.type == JV_UNDEF || (pl_j_truthy(&b) && !pl_j_truthy(&v)))
               ? a0 : v;
    }
    if (strcmp(t, "first") == 0 || strcmp(t, "last") == 0
        || strcmp(t, "list") == 0 || strcmp(t, "reverse") == 0)
    {
        return pl_j_list_filter(c, t, &v);
    }
    if (strcmp(t, "join") == 0) {
        return pl_j_join(c, &v, a);
    }
    if (strcmp(t, "replace") == 0) {
        pl_jv_t  a2 = pl_j_arg(a, 2, NULL);

        return pl_j_replace(c, pl_j_want_str(c, &v, t), &a0, &a1, &a2);
    }
    if (strcmp(t, "string") == 0) {
        return pl_j_tostring(c, &v);
    }
    if (strcmp(t, "int") == 0 || strcmp(t, "float") == 0
        || strcmp(t, "abs") == 0)
    {
        return pl_j_number_filter(t, &v);
    }
    if (strcmp(t, "items") == 0 && v.type == JV_DICT) {
        return pl_j_dict_items(c, v.u.d, 'i');
    }
    if (strcmp(t, "sort") == 0) {
        return pl_j_sorted(c, &v, a);
    }
    if (strcmp(t, "map") == 0 || strcmp(t, "select") == 0
        || strcmp(t, "reject") == 0 || strcmp(t, "selectattr") == 0
        || strcmp(t, "rejectattr") == 0)
    {
        return pl_j_select(c, f, t, &v, a);
    }
    if (strcmp(t, "safe") == 0) {
        return v;
    }
    if (strcmp(t, "e") == 0 || strcmp(t, "escape") == 0) {
        return pl_j_escape(c, &v);
    }
    if (strcmp(t, "indent") == 0) {
        return pl_j_indent_filter(c, &v, a);
    }
    pl_j_fail(c, "unsupported filter '%s'", t);
}

/* ---- rendering: expressions ---- */

static pl_jv_t
pl_j_eval_list(pl_jctx_t *c, pl_jframe_t *f, const pl_jn_t *n)
{
    pl_jv_t  out = pl_jv_list(c);

    for (n = n->b; n != NULL; n = n->next) {
        pl_jlist_push(c, out.u.l, pl_j_eval(c, f, n));
    }
    return out;
}

static pl_jv_t
pl_j_eval_dict(pl_jctx_t *c, pl_jframe_t *f, const pl_jn_t *n)
{
    pl_jv_t  out = pl_jv_dict(c), k;

    for (n = n->b; n != NULL; n = n->next) {
        k = pl_j_eval(c, f, n->a);
        pl_jdict_set(c, out.u.d, (pl_jstr_t *) pl_j_want_str(c, &k,
                                                             "dict key"),
                     pl_j_eval(c, f, n->b));
    }
    return out;
}

static pl_jv_t
pl_j_eval(pl_jctx_t *c, pl_jframe_t *f, const pl_jn_t *n)
{
    pl_jv_t     a, b, d;
    pl_jargs_t  args;

    switch (n->kind) {
    case E_LIT:
        return n->lit;
    case E_NAME:
        return pl_j_lookup(f, n->name);
    case E_ATTR:
        a = pl_j_eval(c, f, n->a);
        return pl_j_get_attr(&a, n->name->s, n->name->n);
    case E_INDEX:
        a = pl_j_eval(c, f, n->a);
        b = pl_j_eval(c, f, n->b);
        return pl_j_index(c, &a, &b);
    case E_SLICE:
        a = pl_j_eval(c, f, n->a);
        b = n->b ? pl_j_eval(c, f, n->b) : pl_jv_of(JV_NONE);
        d = n->c ? pl_j_eval(c, f, n->c) : pl_jv_of(JV_NONE);
        {
            pl_jv_t  s = n->d ? pl_j_eval(c, f, n->d) : pl_jv_of(JV_NONE);

            return pl_j_slice(c, &a, &b, &d, &s);
        }
    case E_CALL:
        return pl_j_call(c, f, n);
    case E_FILTER:
        a = pl_j_eval(c, f, n->a);
        pl_j_eval_args(c, f, n->b, &args);
        return pl_j_filter(c, f, n->name->s, a, &args);
    case E_TEST:
        a = pl_j_eval(c, f, n->a);
        pl_j_eval_args(c, f, n->b, &args);
        return pl_jv_bool(pl_j_test(c, n->name, &a, &args) != n->op);
    case E_BIN:
        a = pl_j_eval(c, f, n->a);
        b = pl_j_eval(c, f, n->b);
        return pl_j_binop(c, n->op, &a, &b);
    case E_AND:
        a = pl_j_eval(c, f, n->a);
        return pl_j_truthy(&a) ? pl_j_eval(c, f, n->b) : a;
    case E_OR:
        a = pl_j_eval(c, f, n->a);
        return pl_j_truthy(&a) ? a : pl_j_eval(c, f, n->b);
    case E_NOT:
        a = pl_j_eval(c, f, n->a);
        return pl_jv_bool(!pl_j_truthy(&a));
    case E_NEG:
        a = pl_j_eval(c, f, n->a);
        if (!pl_j_isnum(&a)) {
            pl_j_fail(c, "cannot negate %s", pl_jv_typename(&a));
        }
        return a.type == JV_INT ? pl_jv_int(-a.u.i) : pl_jv_float(-a.u.f);
    case E_COND:
        b = pl_j_eval(c, f, n->b);
        if (pl_j_truthy(&b)) {
            return pl_j_eval(c, f, n->a);
        }
        return n->c ? pl_j_eval(c, f, n->c) : pl_jv_of(JV_UNDEF);
    case E_LIST:
        return pl_j_eval_list(c, f, n);
    case E_DICT:
        return pl_j_eval_dict(c, f, n);
    default:
        pl_j_fail(c, "internal error: bad expression node");
    }
}

/* ---- rendering: statements ---- */

static void
pl_j_assign(pl_jctx_t *c, pl_jframe_t *f, const pl_jn_t *target, pl_jv_t v)
{
    const pl_jn_t  *t;
    size_t          i;

    if (target->kind == E_NAME) {
        pl_jdict_set(c, f->vars, target->name, v);
        return;
    }
    if (target->kind == E_ATTR) {
        pl_jv_t  ns = pl_j_lookup(f, target->a->name);

        if (ns.type != JV_DICT || !ns.u.d->ns) {
            pl_j_fail(c, "cannot set an attribute of %s (not a namespace)",
                      target->a->name->s);
        }
        pl_jdict_set(c, ns.u.d, target->name, v);
        return;
    }
    if (v.type != JV_LIST) {
        pl_j_fail(c, "cannot unpack %s", pl_jv_typename(&v));
    }
    for (t = target->b, i = 0; t != NULL; t = t->next, i++) {
        if (i >= v.u.l->n) {
            pl_j_fail(c, "not enough values to unpack");
        }
        pl_jdict_set(c, f->vars, t->name, v.u.l->v[i]);
    }
    if (i != v.u.l->n) {
        pl_j_fail(c, "too many values to unpack");
    }
}

static void
pl_j_loop_vars(pl_jctx_t *c, pl_jdict_t *loop, const pl_jlist_t *items,
    size_t i, size_t n)
{
    static const char *const  names[] = {
        "index", "index0", "revindex", "revindex0", "first", "last",
        "length", "previtem", "nextitem"
    };
    pl_jv_t                   v[9];
    size_t                    k;

    v[0] = pl_jv_int((long long) i + 1);
    v[1] = pl_jv_int((long long) i);
    v[2] = pl_jv_int((long long) (n - i));
    v[3] = pl_jv_int((long long) (n - i - 1));
    v[4] = pl_jv_bool(i == 0);
    v[5] = pl_jv_bool(i + 1 == n);
    v[6] = pl_jv_int((long long) n);
    v[7] = i > 0 ? items->v[i - 1] : pl_jv_of(JV_UNDEF);
    v[8] = i + 1 < n ? items->v[i + 1] : pl_jv_of(JV_UNDEF);
    for (k = 0; k < 9; k++) {
        if (loop->n < 9) {
            pl_jdict_setc(c, loop, names[k], v[k]);
        } else {
            loop->v[k] = v[k];
        }
    }
}

static void
pl_j_exec_for(pl_jctx_t *c, pl_jframe_t *f, const pl_jn_t *n)
{
    pl_jv_t       it = pl_j_eval(c, f, n->a), loopv;
    pl_jlist_t   *src = pl_j_iterable(c, &it), *items = src;
    pl_jframe_t  *lf = pl_j_frame(c, f);
    size_t        i, count;

    if (n->d != NULL) {
        pl_jv_t  kept = pl_jv_list(c);

        for (i = 0; i < src->n; i++) {
            pl_jv_t  ok;

            pl_j_assign(c, lf, n->c, src->v[i]);
            ok = pl_j_eval(c, lf, n->d);
            if (pl_j_truthy(&ok)) {
                pl_jlist_push(c, kept.u.l, src->v[i]);
            }
        }
        items = kept.u.l;
    }
    count = items->n;
    if (count == 0) {
        pl_j_exec(c, f, n->e);
        return;
    }
    loopv = pl_jv_dict(c);
    pl_jdict_setc(c, lf->vars, "loop", loopv);
    for (i = 0; i < count; i++) {
        if (++c->steps > PL_J_MAX_STEPS) {
            pl_j_fail(c, "more than %d loop iterations", PL_J_MAX_STEPS);
        }
        pl_j_loop_vars(c, loopv.u.d, items, i, count);
        pl_j_assign(c, lf, n->c, items->v[i]);
        pl_j_exec(c, lf, n->b);
        if (c->loopctl == 1) {
            c->loopctl = 0;
            break;
        }
        c->loopctl = 0;
    }
}

static void
pl_j_exec(pl_jctx_t *c, pl_jframe_t *f, const pl_jn_t *n)
{
    pl_jv_t  v;

    for (; n != NULL && c->loopctl == 0; n = n->next) {
        switch (n->kind) {
        case S_TEXT:
            pl_jbuf_add(c, c->out, n->name->s, n->name->n);
            break;
        case S_OUT:
            v = pl_j_eval(c, f, n->a);
            pl_j_print(c, c->out, &v);
            break;
        case S_IF:
            v = pl_j_eval(c, f, n->a);
            if (pl_j_truthy(&v)) {
                pl_j_exec(c, f, n->b);
            } else if (n->c != NULL) {
                pl_j_exec(c, f, n->c);
            } else {
                pl_j_exec(c, f, n->d);
            }
            break;
        case S_FOR:
            pl_j_exec_for(c, f, n);
            break;
        case S_SET:
            pl_j_assign(c, f, n->a, pl_j_eval(c, f, n->b));
            break;
        case S_BLOCKSET: {
            pl_jbuf_t  *saved = c->out, *buf = pl_jbuf_open(c);

            c->out = buf;
            pl_j_exec(c, f, n->b);
            c->out = saved;
            pl_j_assign(c, f, n->a, pl_jbuf_close(c, buf));
            break;
        }
        case S_MACRO:
            v.type = JV_MACRO;
            v.u.m = n;
            pl_jdict_set(c, f->vars, n->name, v);
            break;
        case S_BREAK:
            c->loopctl = 1;
            break;
        default:
            c->loopctl = 2;
            break;
        }
    }
}

char *
pl_jinja_render(const pl_jinja_t *tpl, const json_t *vars, size_t *outlen,
    char *err, size_t errlen)
{
    pl_jctx_t   c;
    pl_ja_t     arena = { NULL, 0 };
    pl_jbuf_t   out = { NULL, 0, 0 };
    const char *k;
    json_t     *v;
    int         i;

    memset(&c, 0, sizeof(c));
    c.arena = &arena;
    c.err = err;
    c.errlen = errlen;
    c.out = &out;
    if (setjmp(c.jb) != 0) {
        for (i = 0; i < c.nbufs; i++) {
            free(c.bufs[i]->p);
        }
        free(out.p);
        pl_ja_free(&arena);
        return NULL;
    }
    c.globals = pl_j_frame(&c, NULL);
    if (vars != NULL && json_is_object(vars)) {
        json_object_foreach((json_t *) vars, k, v) {
            pl_jdict_setc(&c, c.globals->vars, k, pl_j_from_json(&c, v, 0));
        }
    }
    pl_jbuf_add(&c, &out, "", 0);
    pl_j_exec(&c, c.globals, tpl->body);
    pl_ja_free(&arena);
    *outlen = out.n;
    return out.p;
}
