/*
 * pl_jinja_filters: the filters of jinja2's builtin list beyond the common
 * ones in pl_jinja_builtins.c, written to print what Python's jinja2
 * prints (t/31-chat-jinja2.t renders the same templates with both):
 * dictsort, format (Python's % operator), center, batch, slice, min, max,
 * sum, round, unique, truncate, wordcount, striptags, attr, title, pprint,
 * filesizeformat, urlencode, xmlattr, groupby.
 * Strings are compared as jinja2 does by default, case-insensitively.
 * format refuses a width or precision above 999 (a bound on what one
 * conversion writes; Python has none).
 */

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pl_jinja_internal.h"
#include "pl_unicode.h"

/* Python's ordering of two sort keys; strings lowered unless cs. */
static int
pl_j_key_cmp(pl_jctx_t *c, const pl_jv_t *a, const pl_jv_t *b, int cs)
{
    size_t  i, n;
    int     x, y;

    if (cs || a->type != JV_STR || b->type != JV_STR) {
        return pl_j_compare_order(c, a, b);
    }
    n = a->u.s->n < b->u.s->n ? a->u.s->n : b->u.s->n;
    for (i = 0; i < n; i++) {
        x = tolower((unsigned char) a->u.s->s[i]);
        y = tolower((unsigned char) b->u.s->s[i]);
        if (x != y) {
            return (x > y) - (x < y);
        }
    }
    return (a->u.s->n > b->u.s->n) - (a->u.s->n < b->u.s->n);
}

/* The key an item sorts or groups by: itself, or its attribute. */
static pl_jv_t
pl_j_key_of(const pl_jv_t *x, const pl_jv_t *attr)
{
    if (attr->type == JV_STR) {
        return pl_j_get_attr(x, attr->u.s->s, attr->u.s->n);
    }
    if (attr->type == JV_INT && x->type == JV_LIST
        && attr->u.i >= 0 && (size_t) attr->u.i < x->u.l->n)
    {
        return x->u.l->v[attr->u.i];
    }
    return *x;
}

/* A stable insertion sort of l's items by key (Python's sorted). */
pl_jv_t
pl_j_sort_list(pl_jctx_t *c, const pl_jlist_t *l, const pl_jv_t *attr,
    int cs, int reverse)
{
    pl_jv_t  out = pl_jv_list(c), x, kx, ky;
    size_t   i, j;
    int      r;

    for (i = 0; i < l->n; i++) {
        pl_jlist_push(c, out.u.l, l->v[i]);
    }
    for (i = 1; i < out.u.l->n; i++) {
        x = out.u.l->v[i];
        kx = pl_j_key_of(&x, attr);
        for (j = i; j > 0; j--) {
            ky = pl_j_key_of(&out.u.l->v[j - 1], attr);
            r = pl_j_key_cmp(c, &ky, &kx, cs);
            if (reverse ? r >= 0 : r <= 0) {
                break;
            }
            out.u.l->v[j] = out.u.l->v[j - 1];
        }
        out.u.l->v[j] = x;
    }
    return out;
}

/* dictsort(case_sensitive=false, by='key', reverse=false) */
static pl_jv_t
pl_j_dictsort(pl_jctx_t *c, const pl_jv_t *v, const pl_jargs_t *a)
{
    pl_jv_t  cs = pl_j_arg(a, 0, "case_sensitive"), by = pl_j_arg(a, 1, "by");
    pl_jv_t  rev = pl_j_arg(a, 2, "reverse"), items, pos;

    if (v->type != JV_DICT) {
        pl_j_fail(c, "dictsort expects a mapping, got %s", pl_jv_typename(v));
    }
    items = pl_j_dict_items(c, v->u.d, 'i');
    pos = pl_jv_int(0);
    if (by.type == JV_STR && strcmp(by.u.s->s, "value") == 0) {
        pos = pl_jv_int(1);
    } else if (by.type != JV_UNDEF
               && !(by.type == JV_STR && strcmp(by.u.s->s, "key") == 0))
    {
        pl_j_fail(c, "dictsort: 'by' must be 'key' or 'value'");
    }
    return pl_j_sort_list(c, items.u.l, &pos, pl_j_truthy(&cs),
                          pl_j_truthy(&rev));
}

/* One %-conversion of Python's "fmt" % args. */
static void
pl_j_format_one(pl_jctx_t *c, pl_jbuf_t *b, char conv, const char *spec,
    const pl_jv_t *x)
{
    char     out[2048], fmt[64];     /* width and precision up to 999 */
    pl_jv_t  s;
    int      width = 0, left = (strchr(spec, '-') != NULL), n;

    switch (conv) {
    case 's': case 'r':
        s = (conv == 's') ? pl_j_tostring(c, x) : pl_j_reprstring(c, x, 0);
        sscanf(spec + strspn(spec, "-+ #0"), "%d", &width);
        n = (int) pl_j_cplen(s.u.s);
        if (left) {
            pl_jbuf_add(c, b, s.u.s->s, s.u.s->n);
        }
        for (; n < width; n++) {
            pl_jbuf_add(c, b, " ", 1);
        }
        if (!left) {
            pl_jbuf_add(c, b, s.u.s->s, s.u.s->n);
        }
        return;
    case 'd': case 'i': case 'x': case 'X': case 'o':
        if (!pl_j_isnum(x) && x->type != JV_BOOL) {
            pl_j_fail(c, "format: %%%c needs a number, got %s", conv,
                      pl_jv_typename(x));
        }
        snprintf(fmt, sizeof(fmt), "%%%sll%c", spec, conv == 'i' ? 'd' : conv);
        snprintf(out, sizeof(out), fmt, x->type == JV_INT ? x->u.i
                 : x->type == JV_BOOL ? (long long) x->u.b
                 : (long long) x->u.f);
        break;
    default:
        if (!pl_j_isnum(x) && x->type != JV_BOOL) {
            pl_j_fail(c, "format: %%%c needs a number, got %s", conv,
                      pl_jv_typename(x));
        }
        snprintf(fmt, sizeof(fmt), "%%%s%c", spec, conv);
        snprintf(out, sizeof(out), fmt, x->type == JV_BOOL ? (double) x->u.b
                                                           : pl_j_num(x));
    }
    pl_jbuf_cstr(c, b, out);
}

/* format(*args): Python's printf-style formatting of the string. */
static pl_jv_t
pl_j_format(pl_jctx_t *c, const pl_jv_t *v, const pl_jargs_t *a)
{
    const pl_jstr_t  *s = pl_j_want_str(c, v, "format");
    pl_jbuf_t        *b = pl_jbuf_open(c);
    char              spec[32];
    size_t            i, k;
    int               next = 0;

    for (i = 0; i < s->n; i++) {
        if (s->s[i] != '%') {
            pl_jbuf_add(c, b, s->s + i, 1);
            continue;
        }
        for (k = 0, i++; i < s->n && k + 1 < sizeof(spec)
             && strchr("-+ #0123456789.", s->s[i]) != NULL; i++)
        {
            spec[k++] = s->s[i];
        }
        spec[k] = '\0';
        if (strspn(spec + strcspn(spec, "123456789"), "0123456789") > 3
            || strspn(spec + strcspn(spec, "."), ".0123456789") > 4)
        {
            pl_j_fail(c, "format: width or precision above 999");
        }
        if (i == s->n || strchr("%sdirxXoeEfFgG", s->s[i]) == NULL) {
            pl_j_fail(c, "format: unsupported conversion in '%s'", s->s);
        }
        if (s->s[i] == '%') {
            pl_jbuf_add(c, b, "%", 1);
            continue;
        }
        if (next >= a->npos) {
            pl_j_fail(c, "format: not enough arguments for format string");
        }
        pl_j_format_one(c, b, s->s[i], spec, &a->pos[next++]);
    }
    if (next < a->npos) {
        pl_j_fail(c, "format: not all arguments converted");
    }
    return pl_jbuf_close(c, b);
}

/* center(width=80) */
static pl_jv_t
pl_j_center(pl_jctx_t *c, const pl_jv_t *v, const pl_jargs_t *a)
{
    pl_jv_t     s = pl_j_tostring(c, v), w = pl_j_arg(a, 0, "width");
    long long   width = (w.type == JV_INT) ? w.u.i : 80, n, pad, l, i;
    pl_jbuf_t  *b = pl_jbuf_open(c);

    n = (long long) pl_j_cplen(s.u.s);
    pad = width > n ? width - n : 0;
    l = pad / 2 + (pad & width & 1);
    for (i = 0; i < l; i++) {
        pl_jbuf_add(c, b, " ", 1);
    }
    pl_jbuf_add(c, b, s.u.s->s, s.u.s->n);
    for (i = l; i < pad; i++) {
        pl_jbuf_add(c, b, " ", 1);
    }
    return pl_jbuf_close(c, b);
}

/* batch(linecount, fill_with=None) and slice(slices, fill_with=None) */
static pl_jv_t
pl_j_batch(pl_jctx_t *c, const char *t, const pl_jv_t *v,
    const pl_jargs_t *a)
{
    pl_jlist_t  *l = pl_j_iterable(c, v);
    pl_jv_t      nv = pl_j_arg(a, 0, t[0] == 'b' ? "linecount" : "slices");
    pl_jv_t      fill = pl_j_arg(a, 1, "fill_with"), out = pl_jv_list(c), g;
    long long    n, per, extra, k, i, at = 0, size;

    if (nv.type != JV_INT || nv.u.i < 1) {
        pl_j_fail(c, "%s expects a positive integer", t);
    }
    n = nv.u.i;
    if (t[0] == 'b') {
        for (i = 0; i < (long long) l->n; i++) {
            if (i % n == 0) {
                g = pl_jv_list(c);
                pl_jlist_push(c, out.u.l, g);
            }
            pl_jlist_push(c, g.u.l, l->v[i]);
        }
        while (fill.type != JV_UNDEF && fill.type != JV_NONE && l->n % n != 0
               && (long long) g.u.l->n < n)
        {
            pl_jlist_push(c, g.u.l, fill);
        }
        return out;
    }
    per = (long long) l->n / n;
    extra = (long long) l->n % n;
    for (k = 0; k < n; k++) {
        size = per + (k < extra);
        g = pl_jv_list(c);
        for (i = 0; i < size; i++) {
            pl_jlist_push(c, g.u.l, l->v[at++]);
        }
        if (fill.type != JV_UNDEF && fill.type != JV_NONE && k >= extra) {
            pl_jlist_push(c, g.u.l, fill);
        }
        pl_jlist_push(c, out.u.l, g);
    }
    return out;
}

/* min / max (case_sensitive=false, attribute=none), sum(attribute, start) */
static pl_jv_t
pl_j_minmax_sum(pl_jctx_t *c, const char *t, const pl_jv_t *v,
    const pl_jargs_t *a)
{
    pl_jlist_t  *l = pl_j_iterable(c, v);
    pl_jv_t      best, k, kb, acc;
    pl_jv_t      attr = pl_j_arg(a, t[1] == 'u' ? 0 : 1, "attribute");
    pl_jv_t      cs = pl_j_arg(a, 0, "case_sensitive");
    size_t       i;

    if (t[1] == 'u') {
        acc = pl_j_arg(a, 1, "start");
        acc = acc.type == JV_UNDEF ? pl_jv_int(0) : acc;
        for (i = 0; i < l->n; i++) {
            k = pl_j_key_of(&l->v[i], &attr);
            if (!pl_j_isnum(&k) || !pl_j_isnum(&acc)) {
                pl_j_fail(c, "sum expects numbers, got %s",
                          pl_jv_typename(&k));
            }
            acc = (k.type == JV_INT && acc.type == JV_INT)
                  ? pl_jv_int(acc.u.i + k.u.i)
                  : pl_jv_float(pl_j_num(&acc) + pl_j_num(&k));
        }
        return acc;
    }
    if (l->n == 0) {
        return pl_jv_of(JV_UNDEF);
    }
    best = l->v[0];
    for (i = 1; i < l->n; i++) {
        k = pl_j_key_of(&l->v[i], &attr);
        kb = pl_j_key_of(&best, &attr);
        if (pl_j_key_cmp(c, &k, &kb, pl_j_truthy(&cs)) * (t[1] == 'i' ? -1 : 1)
            > 0)
        {
            best = l->v[i];
        }
    }
    return best;
}

/* round(precision=0, method='common'): always a float, as in jinja2 */
static pl_jv_t
pl_j_round(pl_jctx_t *c, const pl_jv_t *v, const pl_jargs_t *a)
{
    pl_jv_t  p = pl_j_arg(a, 0, "precision"), m = pl_j_arg(a, 1, "method");
    double   x, scale;
    char     buf[64];

    if (!pl_j_isnum(v)) {
        pl_j_fail(c, "round expects a number, got %s", pl_jv_typename(v));
    }
    x = pl_j_num(v);
    scale = pow(10, p.type == JV_INT ? (double) p.u.i : 0);
    if (m.type == JV_STR && strcmp(m.u.s->s, "floor") == 0) {
        return pl_jv_float(floor(x * scale) / scale);
    }
    if (m.type == JV_STR && strcmp(m.u.s->s, "ceil") == 0) {
        return pl_jv_float(ceil(x * scale) / scale);
    }
    if (m.type != JV_UNDEF
        && !(m.type == JV_STR && strcmp(m.u.s->s, "common") == 0))
    {
        pl_j_fail(c, "round: method must be common, ceil or floor");
    }
    /* Python's round(): half to even on the decimal the double is */
    snprintf(buf, sizeof(buf), "%.*f",
             p.type == JV_INT && p.u.i > 0 ? (int) p.u.i : 0, x);
    if (p.type == JV_INT && p.u.i < 0) {
        return pl_jv_float(nearbyint(x * scale) / scale);
    }
    return pl_jv_float(strtod(buf, NULL));
}

/* unique(case_sensitive=false, attribute=none): the first of each */
static pl_jv_t
pl_j_unique(pl_jctx_t *c, const pl_jv_t *v, const pl_jargs_t *a)
{
    pl_jlist_t  *l = pl_j_iterable(c, v);
    pl_jv_t      cs = pl_j_arg(a, 0, "case_sensitive");
    pl_jv_t      attr = pl_j_arg(a, 1, "attribute"), out = pl_jv_list(c);
    pl_jv_t      k, ko;
    size_t       i, j;

    for (i = 0; i < l->n; i++) {
        k = pl_j_key_of(&l->v[i], &attr);
        for (j = 0; j < out.u.l->n; j++) {
            ko = pl_j_key_of(&out.u.l->v[j], &attr);
            if (k.type == JV_STR && ko.type == JV_STR
                ? pl_j_key_cmp(c, &k, &ko, pl_j_truthy(&cs)) == 0
                : pl_j_equal(&k, &ko))
            {
                break;
            }
        }
        if (j == out.u.l->n) {
            pl_jlist_push(c, out.u.l, l->v[i]);
        }
    }
    return out;
}

/* Byte offset of code point i of s. */
static size_t
pl_j_cp_offset(const pl_jstr_t *s, size_t i)
{
    size_t  off = 0;

    while (off < s->n && i > 0) {
        off++;
        while (off < s->n && ((unsigned char) s->s[off] & 0xc0) == 0x80) {
            off++;
        }
        i--;
    }
    return off;
}

/* truncate(length=255, killwords=false, end='...', leeway=5) */
static pl_jv_t
pl_j_truncate(pl_jctx_t *c, const pl_jv_t *v, const pl_jargs_t *a)
{
    const pl_jstr_t  *s = pl_j_want_str(c, v, "truncate");
    pl_jv_t           lv = pl_j_arg(a, 0, "length");
    pl_jv_t           kill = pl_j_arg(a, 1, "killwords");
    pl_jv_t           end = pl_j_arg(a, 2, "end"), lw = pl_j_arg(a, 3,
                                                                 "leeway");
    long long         len = lv.type == JV_INT ? lv.u.i : 255;
    long long         leeway = lw.type == JV_INT ? lw.u.i : 5, endn;
    pl_jbuf_t        *b;
    size_t            cut, sp;

    if (end.type != JV_STR) {
        end = pl_jv_str(c, "...", 3);
    }
    endn = (long long) pl_j_cplen(end.u.s);
    if (len < endn) {
        pl_j_fail(c, "truncate: length is shorter than the end");
    }
    if ((long long) pl_j_cplen(s) <= len + leeway) {
        return *v;
    }
    cut = pl_j_cp_offset(s, (size_t) (len - endn));
    if (!pl_j_truthy(&kill)) {
        for (sp = cut; sp > 0 && s->s[sp - 1] != ' '; sp--) {
            /* back to the last space: rsplit(' ', 1)[0] */
        }
        cut = sp > 0 ? sp - 1 : cut;
    }
    b = pl_jbuf_open(c);
    pl_jbuf_add(c, b, s->s, cut);
    pl_jbuf_add(c, b, end.u.s->s, end.u.s->n);
    return pl_jbuf_close(c, b);
}

/* wordcount: runs of word characters, Python's \w+ (letters, numbers
   and '_') */
static pl_jv_t
pl_j_wordcount(pl_jctx_t *c, const pl_jv_t *v)
{
    pl_jv_t         s = pl_j_tostring(c, v);
    const uint8_t  *p = (const uint8_t *) s.u.s->s;
    long long       n = 0;
    size_t          i, len;
    uint32_t        cp;
    unsigned        cat;
    int             in = 0, w;

    for (i = 0; i < s.u.s->n; i += len) {
        len = pl_utf8_seq_len(p + i, s.u.s->n - i);
        if (len == 0) {
            len = 1;
            cp = 0xfffd;
        } else {
            pl_utf8_next(p + i, &cp);
        }
        cat = pl_uc_category(cp);
        w = cp == '_' || cat <= PL_UC_LO
            || (cat >= PL_UC_ND && cat <= PL_UC_NO);
        n += (w && !in);
        in = w;
    }
    return pl_jv_int(n);
}

/* striptags: tags and comments removed, whitespace runs made one space */
static pl_jv_t
pl_j_striptags(pl_jctx_t *c, const pl_jv_t *v)
{
    pl_jv_t      s = pl_j_tostring(c, v);
    pl_jbuf_t   *b = pl_jbuf_open(c);
    const char  *p = s.u.s->s, *e = p + s.u.s->n, *q;
    int          space = 0, any = 0;

    while (p < e) {
        if (*p == '<' && (q = memchr(p, '>', (size_t) (e - p))) != NULL) {
            p = q + 1;
            continue;
        }
        if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'
            || *p == '\f' || *p == '\v')
        {
            space = any;
            p++;
            continue;
        }
        if (space) {
            pl_jbuf_add(c, b, " ", 1);
            space = 0;
        }
        pl_jbuf_add(c, b, p++, 1);
        any = 1;
    }
    return pl_jbuf_close(c, b);
}

/* filesizeformat(binary=false) */
static pl_jv_t
pl_j_filesize(pl_jctx_t *c, const pl_jv_t *v, const pl_jargs_t *a)
{
    static const char  *dec[] = { "kB", "MB", "GB", "TB", "PB", "EB", "ZB",
                                  "YB" };
    static const char  *bin[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB",
                                  "ZiB", "YiB" };
    pl_jv_t             bv = pl_j_arg(a, 0, "binary");
    double              bytes, base, unit = 1;
    char                out[64];
    int                 i;

    if (!pl_j_isnum(v)) {
        pl_j_fail(c, "filesizeformat expects a number");
    }
    bytes = pl_j_num(v);
    base = pl_j_truthy(&bv) ? 1024 : 1000;
    if (bytes == 1) {
        return pl_jv_str(c, "1 Byte", 6);
    }
    if (bytes < base) {
        snprintf(out, sizeof(out), "%d Bytes", (int) bytes);
        return pl_jv_str(c, out, strlen(out));
    }
    for (i = 0; i < 8; i++) {
        unit *= base;
        if (bytes < unit * base || i == 7) {
            break;
        }
    }
    snprintf(out, sizeof(out), "%.1f %s", bytes / unit,
             pl_j_truthy(&bv) ? bin[i] : dec[i]);
    return pl_jv_str(c, out, strlen(out));
}

/* urlencode: a string quoted as urllib's quote(safe='/'), a dict as
   k=v pairs joined by &, quoted for a query string (space as '+') */
static void
pl_j_url_quote(pl_jctx_t *c, pl_jbuf_t *b, const pl_jv_t *v, int slash)
{
    pl_jv_t      s = pl_j_tostring(c, v);
    char         esc[4];
    size_t       i;

    for (i = 0; i < s.u.s->n; i++) {
        unsigned char  ch = (unsigned char) s.u.s->s[i];

        if (isalnum(ch) || strchr("_.-~", ch) != NULL
            || (slash && ch == '/'))
        {
            pl_jbuf_add(c, b, (char *) &ch, 1);
        } else if (!slash && ch == ' ') {
            pl_jbuf_add(c, b, "+", 1);
        } else {
            snprintf(esc, sizeof(esc), "%%%02X", ch);
            pl_jbuf_add(c, b, esc, 3);
        }
    }
}

static pl_jv_t
pl_j_urlencode(pl_jctx_t *c, const pl_jv_t *v)
{
    pl_jbuf_t  *b = pl_jbuf_open(c);
    pl_jv_t     key = { JV_STR, { 0 } };
    size_t      i;

    if (v->type != JV_DICT) {
        pl_j_url_quote(c, b, v, 1);
        return pl_jbuf_close(c, b);
    }
    for (i = 0; i < v->u.d->n; i++) {
        if (i > 0) {
            pl_jbuf_add(c, b, "&", 1);
        }
        key.u.s = v->u.d->k[i];
        pl_j_url_quote(c, b, &key, 0);
        pl_jbuf_add(c, b, "=", 1);
        pl_j_url_quote(c, b, &v->u.d->v[i], 0);
    }
    return pl_jbuf_close(c, b);
}

/* groupby(attribute, default=none, case_sensitive=false): sorted
   (grouper, list) pairs */
static pl_jv_t
pl_j_groupby(pl_jctx_t *c, const pl_jv_t *v, const pl_jargs_t *a)
{
    pl_jv_t      attr = pl_j_arg(a, 0, "attribute");
    pl_jv_t      dflt = pl_j_arg(a, 1, "default");
    pl_jv_t      cs = pl_j_arg(a, 2, "case_sensitive");
    pl_jv_t      sorted, out = pl_jv_list(c), pair, k, last;
    pl_jlist_t  *l;
    size_t       i;

    sorted = pl_j_sort_list(c, pl_j_iterable(c, v), &attr,
                            pl_j_truthy(&cs), 0);
    l = sorted.u.l;
    for (i = 0; i < l->n; i++) {
        k = pl_j_key_of(&l->v[i], &attr);
        if (k.type == JV_UNDEF) {
            k = dflt;
        }
        if (i == 0 || pl_j_key_cmp(c, &k, &last, pl_j_truthy(&cs)) != 0) {
            pair = pl_jv_list(c);
            pl_jlist_push(c, pair.u.l, k);
            pl_jlist_push(c, pair.u.l, pl_jv_list(c));
            pl_jlist_push(c, out.u.l, pair);
            last = k;
        }
        pl_jlist_push(c, pair.u.l->v[1].u.l, l->v[i]);
    }
    return out;
}

/* title: each word capitalized, words beginning after whitespace, '-',
   '(', '{', '[' or '<' (jinja2's rule, not str.title()'s) */
static pl_jv_t
pl_j_title(pl_jctx_t *c, const pl_jv_t *v)
{
    const pl_jstr_t  *s = pl_j_tostring(c, v).u.s;
    pl_jbuf_t        *b = pl_jbuf_open(c);
    pl_jv_t           w;
    size_t            i = 0, j;
    int               sep;

    while (i < s->n) {
        sep = strchr("-({[< \t\n\r\f\v", s->s[i]) != NULL;
        for (j = i; j < s->n
             && (strchr("-({[< \t\n\r\f\v", s->s[j]) != NULL) == sep
             && s->s[j] != '\0'; j++)
        {
            /* a run of separators, or a word */
        }
        if (j == i) {
            j = i + 1;
        }
        w = pl_j_case(c, pl_j_str(c, s->s + i, j - i), 'c');
        pl_jbuf_add(c, b, w.u.s->s, w.u.s->n);
        i = j;
    }
    return pl_jbuf_close(c, b);
}

/* xmlattr(autospace=true): key="value" pairs, HTML-escaped, of the
   items that are not none; a key with a space, '/', '>' or '=' is an
   error as in jinja2 */
static pl_jv_t
pl_j_xmlattr(pl_jctx_t *c, const pl_jv_t *v, const pl_jargs_t *a)
{
    pl_jv_t     sp = pl_j_arg(a, 0, "autospace"), key = { JV_STR, { 0 } }, e;
    pl_jbuf_t  *b = pl_jbuf_open(c);
    size_t      i, n = 0;

    if (v->type != JV_DICT) {
        pl_j_fail(c, "xmlattr expects a mapping, got %s", pl_jv_typename(v));
    }
    for (i = 0; i < v->u.d->n; i++) {
        if (v->u.d->v[i].type == JV_NONE || v->u.d->v[i].type == JV_UNDEF) {
            continue;
        }
        key.u.s = v->u.d->k[i];
        if (strpbrk(key.u.s->s, " \t\n\f/>=") != NULL) {
            pl_j_fail(c, "xmlattr: invalid character in attribute name");
        }
        if (n++ > 0 || sp.type == JV_UNDEF || pl_j_truthy(&sp)) {
            pl_jbuf_add(c, b, " ", 1);
        }
        e = pl_j_escape(c, &key);
        pl_jbuf_add(c, b, e.u.s->s, e.u.s->n);
        pl_jbuf_add(c, b, "=\"", 2);
        e = pl_j_escape(c, &v->u.d->v[i]);
        pl_jbuf_add(c, b, e.u.s->s, e.u.s->n);
        pl_jbuf_add(c, b, "\"", 1);
    }
    return pl_jbuf_close(c, b);
}

/* The filters of this file; 0 when t is none of them. */
int
pl_j_filter_more(pl_jctx_t *c, const char *t, const pl_jv_t *v,
    const pl_jargs_t *a, pl_jv_t *out)
{
    pl_jv_t  a0 = pl_j_arg(a, 0, "name");

    if (strcmp(t, "dictsort") == 0) {
        *out = pl_j_dictsort(c, v, a);
    } else if (strcmp(t, "format") == 0) {
        *out = pl_j_format(c, v, a);
    } else if (strcmp(t, "center") == 0) {
        *out = pl_j_center(c, v, a);
    } else if (strcmp(t, "batch") == 0 || strcmp(t, "slice") == 0) {
        *out = pl_j_batch(c, t, v, a);
    } else if (strcmp(t, "min") == 0 || strcmp(t, "max") == 0
               || strcmp(t, "sum") == 0)
    {
        *out = pl_j_minmax_sum(c, t, v, a);
    } else if (strcmp(t, "round") == 0) {
        *out = pl_j_round(c, v, a);
    } else if (strcmp(t, "unique") == 0) {
        *out = pl_j_unique(c, v, a);
    } else if (strcmp(t, "truncate") == 0) {
        *out = pl_j_truncate(c, v, a);
    } else if (strcmp(t, "wordcount") == 0) {
        *out = pl_j_wordcount(c, v);
    } else if (strcmp(t, "striptags") == 0) {
        *out = pl_j_striptags(c, v);
    } else if (strcmp(t, "filesizeformat") == 0) {
        *out = pl_j_filesize(c, v, a);
    } else if (strcmp(t, "urlencode") == 0) {
        *out = pl_j_urlencode(c, v);
    } else if (strcmp(t, "groupby") == 0) {
        *out = pl_j_groupby(c, v, a);
    } else if (strcmp(t, "xmlattr") == 0) {
        *out = pl_j_xmlattr(c, v, a);
    } else if (strcmp(t, "pprint") == 0) {
        *out = pl_j_reprstring(c, v, 1);
    } else if (strcmp(t, "attr") == 0) {
        /* getattr(): a mapping's items are not its attributes */
        pl_j_want_str(c, &a0, "attr");
        *out = v->type == JV_DICT && !v->u.d->ns ? pl_jv_of(JV_UNDEF)
               : pl_j_get_attr(v, a0.u.s->s, a0.u.s->n);
    } else if (strcmp(t, "title") == 0) {
        *out = pl_j_title(c, v);
    } else {
        return 0;
    }
    return 1;
}
