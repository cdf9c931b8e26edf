/*
 * pl_jinja_value: the Jinja interpreter's values (pl_jv_t) and the arena
 * they live in; output buffers; how values print ({{ v }}, tojson, numbers
 * the way JavaScript writes them); comparing, measuring, iterating,
 * indexing and slicing values.
 */

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pl_jinja_internal.h"
#include "pl_unicode.h"

/* ---- arena ---- */

void
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

void
pl_j_fail(pl_jctx_t *c, const char *fmt, ...)
{
    va_list  ap;

    va_start(ap, fmt);
    vsnprintf(c->err, c->errlen, fmt, ap);
    va_end(ap);
    longjmp(c->jb, 1);
}

void *
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

pl_jstr_t *
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

pl_jv_t
pl_jv_str(pl_jctx_t *c, const char *s, size_t n)
{
    pl_jv_t  v;

    v.type = JV_STR;
    v.u.s = pl_j_str(c, s, n);
    return v;
}

pl_jv_t
pl_jv_int(long long i)
{
    pl_jv_t  v;

    v.type = JV_INT;
    v.u.i = i;
    return v;
}

pl_jv_t
pl_jv_float(double f)
{
    pl_jv_t  v;

    v.type = JV_FLOAT;
    v.u.f = f;
    return v;
}

pl_jv_t
pl_jv_bool(int b)
{
    pl_jv_t  v;

    v.type = JV_BOOL;
    v.u.b = !!b;
    return v;
}

pl_jv_t
pl_jv_of(int type)
{
    pl_jv_t  v;

    memset(&v, 0, sizeof(v));
    v.type = type;
    return v;
}

pl_jv_t
pl_jv_list(pl_jctx_t *c)
{
    pl_jv_t  v;

    v.type = JV_LIST;
    v.u.l = pl_j_alloc(c, sizeof(pl_jlist_t));
    return v;
}

pl_jv_t
pl_jv_dict(pl_jctx_t *c)
{
    pl_jv_t  v;

    v.type = JV_DICT;
    v.u.d = pl_j_alloc(c, sizeof(pl_jdict_t));
    return v;
}

void
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

pl_jv_t *
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

void
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

void
pl_jdict_setc(pl_jctx_t *c, pl_jdict_t *d, const char *k, pl_jv_t v)
{
    pl_jdict_set(c, d, pl_j_str(c, k, strlen(k)), v);
}

const char *
pl_jv_typename(const pl_jv_t *v)
{
    static const char  *names[] = {
        "undefined", "none", "boolean", "integer", "float", "string", "list",
        "dict", "macro"
    };

    return names[v->type];
}

/* ---- output buffers ---- */

void
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

void
pl_jbuf_cstr(pl_jctx_t *c, pl_jbuf_t *b, const char *s)
{
    pl_jbuf_add(c, b, s, strlen(s));
}

/* A fresh buffer registered with the context, so a longjmp frees it. */
pl_jbuf_t *
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
pl_jv_t
pl_jbuf_close(pl_jctx_t *c, pl_jbuf_t *b)
{
    pl_jv_t  v = pl_jv_str(c, b->p ? b->p : "", b->n);

    free(b->p);
    b->p = NULL;
    c->nbufs--;
    return v;
}

/* ---- number and JSON formatting ---- */

/*
 * Python's repr() of a float, which str(), print and json.dumps share:
 * the shortest digits that read back to the same double, positional
 * with at least one decimal for exponents -4..15, else d.ddde+XX.
 */
static void
pl_j_fmt_number(double f, char *out, size_t cap, int json)
{
    char  tmp[40], digits[40], *e;
    int   prec, exp10, nd, i, k;

    if (isnan(f) || isinf(f)) {
        snprintf(out, cap, "%s%s", f < 0 ? "-" : "",
                 isnan(f) ? (json ? "NaN" : "nan")
                          : (json ? "Infinity" : "inf"));
        return;
    }
    if (f == 0) {
        snprintf(out, cap, "%s0.0", signbit(f) ? "-" : "");
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
    if (exp10 >= 16 || exp10 < -4) {
        k += snprintf(out + k, cap - (size_t) k, "%c%s%.*s", digits[0],
                      nd > 1 ? "." : "", nd - 1, digits + 1);
        snprintf(out + k, cap - (size_t) k, "e%c%02d", exp10 < 0 ? '-' : '+',
                 exp10 < 0 ? -exp10 : exp10);
    } else if (exp10 >= nd - 1) {
        snprintf(out + k, cap - (size_t) k, "%s%0*d.0", digits,
                 exp10 - nd + 1, 0);
        if (exp10 - nd + 1 == 0) {
            snprintf(out + k, cap - (size_t) k, "%s.0", digits);
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

/* A JSON string as json.dumps writes it; ascii: ensure_ascii, every
   character beyond ASCII as \uXXXX (a surrogate pair above U+FFFF). */
static void
pl_j_json_string(pl_jctx_t *c, pl_jbuf_t *b, const char *s, size_t n,
    int ascii)
{
    size_t    i, run = 0, len;
    char      esc[16];
    uint32_t  cp;

    pl_jbuf_add(c, b, "\"", 1);
    for (i = 0; i < n; i += len) {
        unsigned char  ch = (unsigned char) s[i];
        const char    *rep = NULL;

        len = 1;
        switch (ch) {
        case '"': rep = "\\\""; break;
        case '\\': rep = "\\\\"; break;
        case '\b': rep = "\\b"; break;
        case '\f': rep = "\\f"; break;
        case '\n': rep = "\\n"; break;
        case '\r': rep = "\\r"; break;
        case '\t': rep = "\\t"; break;
        default:
            if (ch < 0x20 || (ascii && ch == 0x7f)) {
                snprintf(esc, sizeof(esc), "\\u%04x", ch);
                rep = esc;
            } else if (ascii && ch >= 0x80
                       && (len = pl_utf8_seq_len((const uint8_t *) s + i,
                                                 n - i)) != 0)
            {
                pl_utf8_next((const uint8_t *) s + i, &cp);
                if (cp > 0xffff) {
                    cp -= 0x10000;
                    snprintf(esc, sizeof(esc), "\\u%04x\\u%04x",
                             0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
                } else {
                    snprintf(esc, sizeof(esc), "\\u%04x", cp);
                }
                rep = esc;
            } else if (len == 0) {
                len = 1;
            }
        }
        if (rep != NULL) {
            pl_jbuf_add(c, b, s + run, i - run);
            pl_jbuf_cstr(c, b, rep);
            run = i + len;
        }
    }
    pl_jbuf_add(c, b, s + run, n - run);
    pl_jbuf_add(c, b, "\"", 1);
}

/* The order of a dict's keys by their bytes (pprint, tojson's sort_keys). */
static size_t *
pl_j_key_order(pl_jctx_t *c, const pl_jdict_t *d)
{
    size_t      *o = pl_j_alloc(c, (d->n + 1) * sizeof(size_t)), i, j, x;
    pl_jstr_t   *a, *k;
    int          r;

    for (i = 0; i < d->n; i++) {
        x = i;
        k = d->k[x];
        for (j = i; j > 0; j--) {
            a = d->k[o[j - 1]];
            r = memcmp(a->s, k->s, a->n < k->n ? a->n : k->n);
            if (r < 0 || (r == 0 && a->n <= k->n)) {
                break;
            }
            o[j] = o[j - 1];
        }
        o[j] = x;
    }
    return o;
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
void
pl_j_json(pl_jctx_t *c, pl_jbuf_t *b, const pl_jv_t *v,
    const pl_jjson_t *o, int depth)
{
    char     num[48];
    size_t   i, k, n, *order = NULL;

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
        pl_j_fmt_number(v->u.f, num, sizeof(num), 1);
        pl_jbuf_cstr(c, b, num);
        return;
    case JV_STR:
        pl_j_json_string(c, b, v->u.s->s, v->u.s->n, o->ascii);
        return;
    case JV_MACRO:
        pl_j_fail(c, "cannot convert a macro to JSON");
    default:
        break;
    }
    n = (v->type == JV_LIST) ? v->u.l->n : v->u.d->n;
    if (o->sort_keys && v->type == JV_DICT) {
        order = pl_j_key_order(c, v->u.d);
    }
    pl_jbuf_add(c, b, v->type == JV_LIST ? "[" : "{", 1);
    for (i = 0; i < n; i++) {
        if (i > 0) {
            pl_jbuf_cstr(c, b, o->item_sep);
        }
        if (o->indent >= 0) {
            pl_j_indent(c, b, o->indent, depth + 1);
        }
        k = order ? order[i] : i;
        if (v->type == JV_LIST) {
            pl_j_json(c, b, &v->u.l->v[i], o, depth + 1);
        } else {
            pl_j_json_string(c, b, v->u.d->k[k]->s, v->u.d->k[k]->n,
                             o->ascii);
            pl_jbuf_cstr(c, b, o->key_sep);
            pl_j_json(c, b, &v->u.d->v[k], o, depth + 1);
        }
    }
    if (o->indent >= 0 && n > 0) {
        pl_j_indent(c, b, o->indent, depth);
    }
    pl_jbuf_add(c, b, v->type == JV_LIST ? "]" : "}", 1);
}

/* Python's repr() of a string: single quotes unless it holds one and no
   double quote; backslash, the quote, control characters escaped. */
static void
pl_j_py_string(pl_jctx_t *c, pl_jbuf_t *b, const char *s, size_t n)
{
    char           q, esc[8];
    size_t         i;
    unsigned char  ch;

    q = (memchr(s, '\'', n) != NULL && memchr(s, '"', n) == NULL)
        ? '"' : '\'';
    pl_jbuf_add(c, b, &q, 1);
    for (i = 0; i < n; i++) {
        ch = (unsigned char) s[i];
        if (ch == '\\' || ch == (unsigned char) q) {
            esc[0] = '\\';
            esc[1] = (char) ch;
            pl_jbuf_add(c, b, esc, 2);
        } else if (ch == '\n' || ch == '\r' || ch == '\t') {
            pl_jbuf_cstr(c, b, ch == '\n' ? "\\n" : ch == '\r' ? "\\r"
                                                            : "\\t");
        } else if (ch < 0x20 || ch == 0x7f) {
            snprintf(esc, sizeof(esc), "\\x%02x", ch);
            pl_jbuf_cstr(c, b, esc);
        } else if (ch == 0xc2 && i + 1 < n
                   && (((unsigned char) s[i + 1] >= 0x80
                        && (unsigned char) s[i + 1] <= 0xa0)
                       || (unsigned char) s[i + 1] == 0xad))
        {
            /* U+0080..U+00A0 and U+00AD: unprintable to Python */
            snprintf(esc, sizeof(esc), "\\x%02x", (unsigned char) s[++i]);
            pl_jbuf_cstr(c, b, esc);
        } else {
            pl_jbuf_add(c, b, s + i, 1);
        }
    }
    pl_jbuf_add(c, b, &q, 1);
}

/* Python's repr() of a value, as str() of a list or dict shows items;
   sorted: dicts by key, as pprint shows them. */
static void
pl_j_repr(pl_jctx_t *c, pl_jbuf_t *b, const pl_jv_t *v, int depth,
    int sorted)
{
    size_t  i, k, n, *order = NULL;
    int     tuple;

    if (depth > PL_J_MAX_DEPTH) {
        pl_j_fail(c, "value nested too deeply");
    }
    if (v->type == JV_STR) {
        pl_j_py_string(c, b, v->u.s->s, v->u.s->n);
        return;
    }
    if (v->type != JV_LIST && v->type != JV_DICT) {
        if (v->type == JV_UNDEF) {
            pl_jbuf_cstr(c, b, "Undefined");
            return;
        }
        pl_j_print(c, b, v);
        return;
    }
    if (v->type == JV_DICT && v->u.d->ns) {
        pl_jbuf_cstr(c, b, "<Namespace ");
    }
    n = (v->type == JV_LIST) ? v->u.l->n : v->u.d->n;
    if (sorted && v->type == JV_DICT) {
        order = pl_j_key_order(c, v->u.d);
    }
    tuple = v->type == JV_LIST && v->u.l->tuple;
    pl_jbuf_add(c, b, tuple ? "(" : v->type == JV_LIST ? "[" : "{", 1);
    for (i = 0; i < n; i++) {
        if (i > 0) {
            pl_jbuf_cstr(c, b, ", ");
        }
        k = order ? order[i] : i;
        if (v->type == JV_LIST) {
            pl_j_repr(c, b, &v->u.l->v[i], depth + 1, sorted);
        } else {
            pl_j_py_string(c, b, v->u.d->k[k]->s, v->u.d->k[k]->n);
            pl_jbuf_cstr(c, b, ": ");
            pl_j_repr(c, b, &v->u.d->v[k], depth + 1, sorted);
        }
    }
    if (tuple && n == 1) {
        pl_jbuf_add(c, b, ",", 1);
    }
    pl_jbuf_add(c, b, tuple ? ")" : v->type == JV_LIST ? "]" : "}", 1);
    if (v->type == JV_DICT && v->u.d->ns) {
        pl_jbuf_cstr(c, b, ">");
    }
}

/* How {{ v }} prints v: Python's str(), an undefined value as nothing. */
void
pl_j_print(pl_jctx_t *c, pl_jbuf_t *b, const pl_jv_t *v)
{
    char  num[48];

    switch (v->type) {
    case JV_UNDEF:
        return;
    case JV_NONE:
        pl_jbuf_cstr(c, b, "None");
        return;
    case JV_BOOL:
        pl_jbuf_cstr(c, b, v->u.b ? "True" : "False");
        return;
    case JV_INT:
        snprintf(num, sizeof(num), "%lld", v->u.i);
        pl_jbuf_cstr(c, b, num);
        return;
    case JV_STR:
        pl_jbuf_add(c, b, v->u.s->s, v->u.s->n);
        return;
    case JV_FLOAT:
        pl_j_fmt_number(v->u.f, num, sizeof(num), 0);
        pl_jbuf_cstr(c, b, num);
        return;
    case JV_MACRO:
        pl_j_fail(c, "cannot print a macro");
    default:
        pl_j_repr(c, b, v, 0, 0);
    }
}

/* repr() for the format filter's %r; sorted for the pprint filter
   (pprint's line wrapping at 80 columns is not reproduced) */
pl_jv_t
pl_j_reprstring(pl_jctx_t *c, const pl_jv_t *v, int sorted)
{
    pl_jbuf_t  *b = pl_jbuf_open(c);

    pl_j_repr(c, b, v, 0, sorted);
    return pl_jbuf_close(c, b);
}

pl_jv_t
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

/* ---- value helpers ---- */

int
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

int
pl_j_isnum(const pl_jv_t *v)
{
    return v->type == JV_INT || v->type == JV_FLOAT;
}

double
pl_j_num(const pl_jv_t *v)
{
    return v->type == JV_INT ? (double) v->u.i : v->u.f;
}

static int
pl_j_equal_at(const pl_jv_t *a, const pl_jv_t *b, int depth);

int
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
size_t
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

size_t
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
pl_jlist_t *
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

pl_jv_t
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

pl_jv_t
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

pl_jv_t
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
