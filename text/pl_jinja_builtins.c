/*
 * pl_jinja_builtins: what a template can call.  Argument lists, string,
 * list and dict methods, macros, namespace(), range(), the tests (is ...)
 * and the filters (| ...).
 */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pl_jinja_internal.h"

/* ---- rendering: calls ---- */

void
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
pl_jv_t
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

const pl_jstr_t *
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
pl_jv_t
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

pl_jv_t
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
            pair.u.l->tuple = 1;
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
        /* transformers renders in jinja2's ImmutableSandboxedEnvironment,
           where changing a list is a SecurityError */
        pl_j_fail(c, "list.append() is not allowed: templates run "
                  "sandboxed, with immutable lists");
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

/* transformers' strftime_now(format): the local time now, formatted */
static pl_jv_t
pl_j_strftime_now(pl_jctx_t *c, const pl_jargs_t *a)
{
    pl_jv_t     fmt = pl_j_arg(a, 0, "format");
    char        out[256];
    time_t      now = time(NULL);
    struct tm   tm;
    size_t      n;

    pl_j_want_str(c, &fmt, "strftime_now");
    localtime_r(&now, &tm);
    n = strftime(out, sizeof(out), fmt.u.s->s, &tm);
    if (n == 0 && fmt.u.s->n != 0) {
        pl_j_fail(c, "strftime_now: format too long or empty result");
    }
    return pl_jv_str(c, out, n);
}

pl_jv_t
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
        if (callee.type == JV_UNDEF && strcmp(name, "strftime_now") == 0) {
            return pl_j_strftime_now(c, &a);
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

/* jinja2's global functions and transformers' (a name that is not set
   otherwise): a test of one, such as Llama 3.2's "strftime_now is
   defined", sees a callable; -1 when subject names none of them */
int
pl_j_global_test(const pl_jn_t *subject, const pl_jstr_t *test)
{
    static const char  *globals[] = {
        "range", "dict", "lipsum", "cycler", "joiner", "namespace",
        "raise_exception", "strftime_now", NULL
    };
    int                  i;

    for (i = 0; globals[i] != NULL; i++) {
        if (strcmp(subject->name->s, globals[i]) == 0) {
            return strcmp(test->s, "defined") == 0
                   || strcmp(test->s, "callable") == 0;
        }
    }
    return -1;
}

/* ---- rendering: tests and filters ---- */

static const char  *pl_j_filter_names[] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default",
    "dictsort", "e", "escape", "filesizeformat", "first", "float",
    "forceescape", "format", "groupby", "indent", "int", "items", "join",
    "last", "length", "list", "lower", "map", "max", "min", "pprint",
    "reject", "rejectattr", "replace", "reverse", "round", "safe", "select",
    "selectattr", "slice", "sort", "string", "striptags", "sum", "title",
    "tojson", "trim", "truncate", "unique", "upper", "urlencode",
    "wordcount", "xmlattr", NULL
};

static const char  *pl_j_test_names[] = {
    "!=", "<", "<=", "==", ">", ">=", "boolean", "callable", "defined",
    "divisibleby", "eq", "equalto", "escaped", "even", "false", "filter",
    "float", "ge", "greaterthan", "gt", "in", "integer", "iterable", "le",
    "lessthan", "lower", "lt", "mapping", "ne", "none", "number", "odd",
    "sameas", "sequence", "string", "test", "true", "undefined", "upper",
    NULL
};

/* Python's "is": one object; None, booleans and the small integers
   CPython caches are one object per value, other values one per making */
static int
pl_j_same(const pl_jv_t *a, const pl_jv_t *b)
{
    if (a->type != b->type) {
        return 0;
    }
    switch (a->type) {
    case JV_UNDEF: case JV_NONE: return 1;
    case JV_BOOL: return a->u.b == b->u.b;
    case JV_INT: return a->u.i == b->u.i && a->u.i >= -5 && a->u.i <= 256;
    case JV_STR: return a->u.s == b->u.s;
    case JV_LIST: return a->u.l == b->u.l;
    case JV_DICT: return a->u.d == b->u.d;
    case JV_MACRO: return a->u.m == b->u.m;
    default: return 0;
    }
}

/* "x is filter" / "x is test": whether a filter or test is named x */
static int
pl_j_builtin_name(pl_jctx_t *c, const char *t, const pl_jv_t *v)
{
    const char  **n = (t[0] == 'f') ? pl_j_filter_names : pl_j_test_names;

    if (v->type != JV_STR) {
        pl_j_fail(c, "test %s expects a string", t);
    }
    for (; *n != NULL; n++) {
        if (strcmp(*n, v->u.s->s) == 0) {
            return 1;
        }
    }
    return 0;
}

int
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
    if (strcmp(t, "equalto") == 0 || strcmp(t, "eq") == 0) {
        return pl_j_equal(v, &a0);
    }
    if (strcmp(t, "sameas") == 0) {
        return pl_j_same(v, &a0);
    }
    if (strcmp(t, "ne") == 0 || strcmp(t, "!=") == 0) {
        return !pl_j_equal(v, &a0);
    }
    if (strcmp(t, "==") == 0) return pl_j_equal(v, &a0);
    if (strcmp(t, "lt") == 0 || strcmp(t, "<") == 0
        || strcmp(t, "lessthan") == 0)
    {
        return pl_j_compare_order(c, v, &a0) < 0;
    }
    if (strcmp(t, "gt") == 0 || strcmp(t, ">") == 0
        || strcmp(t, "greaterthan") == 0)
    {
        return pl_j_compare_order(c, v, &a0) > 0;
    }
    if (strcmp(t, "le") == 0 || strcmp(t, "<=") == 0) {
        return pl_j_compare_order(c, v, &a0) <= 0;
    }
    if (strcmp(t, "ge") == 0 || strcmp(t, ">=") == 0) {
        return pl_j_compare_order(c, v, &a0) >= 0;
    }
    if (strcmp(t, "escaped") == 0) return 0;
    if (strcmp(t, "filter") == 0 || strcmp(t, "test") == 0) {
        return pl_j_builtin_name(c, t, v);
    }
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

/* sort(reverse=false, case_sensitive=false, attribute=none) */
static pl_jv_t
pl_j_sorted(pl_jctx_t *c, const pl_jv_t *v, const pl_jargs_t *a)
{
    pl_jv_t  rev = pl_j_arg(a, 0, "reverse");
    pl_jv_t  cs = pl_j_arg(a, 1, "case_sensitive");
    pl_jv_t  attr = pl_j_arg(a, 2, "attribute");

    return pl_j_sort_list(c, pl_j_iterable(c, v), &attr, pl_j_truthy(&cs),
                          pl_j_truthy(&rev));
}

/* transformers' tojson(x, ensure_ascii=False, indent=None,
   separators=None, sort_keys=False): json.dumps with those */
static pl_jv_t
pl_j_tojson(pl_jctx_t *c, const pl_jv_t *v, const pl_jargs_t *a)
{
    pl_jv_t     ind = pl_j_arg(a, 1, "indent"), sep = pl_j_arg(a, 2,
                                                           "separators");
    pl_jv_t     sk = pl_j_arg(a, 3, "sort_keys");
    pl_jv_t     ea = pl_j_arg(a, 0, "ensure_ascii");
    pl_jbuf_t  *buf = pl_jbuf_open(c);
    pl_jjson_t  o;

    if (ind.type != JV_UNDEF && ind.type != JV_NONE && ind.type != JV_INT) {
        pl_j_fail(c, "tojson: indent must be an integer");
    }
    o.ascii = pl_j_truthy(&ea);
    o.indent = ind.type == JV_INT ? (int) ind.u.i : -1;
    o.item_sep = o.indent >= 0 ? "," : ", ";
    o.key_sep = ": ";
    o.sort_keys = pl_j_truthy(&sk);
    if (sep.type == JV_LIST && sep.u.l->n == 2
        && sep.u.l->v[0].type == JV_STR && sep.u.l->v[1].type == JV_STR)
    {
        o.item_sep = sep.u.l->v[0].u.s->s;
        o.key_sep = sep.u.l->v[1].u.s->s;
    } else if (sep.type != JV_UNDEF && sep.type != JV_NONE) {
        pl_j_fail(c, "tojson: separators must be two strings");
    }
    pl_j_json(c, buf, v, &o, 0);
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

pl_jv_t
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

pl_jv_t
pl_j_filter(pl_jctx_t *c, pl_jframe_t *f, const char *t, pl_jv_t v,
    const pl_jargs_t *a)
{
    pl_jv_t  a0 = pl_j_arg(a, 0, NULL), a1 = pl_j_arg(a, 1, NULL);

    /* jinja2's string filters take any value as its str(): an undefined
       one as "" (Hermes 2 Pro's template trims a missing description) */
    if (strcmp(t, "trim") == 0) {
        return pl_j_strip(c, pl_j_tostring(c, &v).u.s, &a0, 1, 1);
    }
    if (strcmp(t, "length") == 0 || strcmp(t, "count") == 0) {
        return pl_jv_int((long long) pl_j_length(c, &v));
    }
    if (strcmp(t, "tojson") == 0) {
        return pl_j_tojson(c, &v, a);
    }
    if (strcmp(t, "upper") == 0 || strcmp(t, "lower") == 0
        || strcmp(t, "capitalize") == 0)
    {
        return pl_j_case(c, pl_j_tostring(c, &v).u.s, t[0] == 'u' ? 'u'
                         : t[0] == 'l' ? 'l' : 'c');
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

        return pl_j_replace(c, pl_j_tostring(c, &v).u.s, &a0, &a1, &a2);
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
    if (strcmp(t, "forceescape") == 0) {
        return pl_j_escape(c, &v);
    }
    if (pl_j_filter_more(c, t, &v, a, &a0)) {
        return a0;
    }
    pl_j_fail(c, "unsupported filter '%s'", t);
}
