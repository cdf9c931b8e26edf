/*
 * pl_jinja_render: the Jinja interpreter's renderer.  Variables from the
 * caller's JSON, scopes, operators, expression evaluation and statement
 * execution over the parsed tree; holds pl_jinja_render().
 */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pl_jinja_internal.h"

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

pl_jframe_t *
pl_j_frame(pl_jctx_t *c, pl_jframe_t *parent)
{
    pl_jframe_t  *f = pl_j_alloc(c, sizeof(pl_jframe_t));

    f->parent = parent;
    f->vars = pl_j_alloc(c, sizeof(pl_jdict_t));
    return f;
}

pl_jv_t
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

/* ---- rendering: operators ---- */

const char *
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

int
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

int
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

/* ---- rendering: expressions ---- */

static pl_jv_t
pl_j_eval_list(pl_jctx_t *c, pl_jframe_t *f, const pl_jn_t *n)
{
    pl_jv_t  out = pl_jv_list(c);

    out.u.l->tuple = n->op;
    for (n = n->b; n != NULL; n = n->next) {
        pl_jlist_push(c, out.u.l, pl_j_eval(c, f, n));
    }
    return out;
}

/* jinja2's Undefined: looking into an undefined value is an error */
static void
pl_j_defined(pl_jctx_t *c, const pl_jv_t *v, const pl_jstr_t *attr)
{
    if (v->type == JV_UNDEF) {
        pl_j_fail(c, "undefined value has no %s%s",
                  attr ? "attribute " : "item", attr ? attr->s : "");
    }
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

pl_jv_t
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
        pl_j_defined(c, &a, n->name);
        return pl_j_get_attr(&a, n->name->s, n->name->n);
    case E_INDEX:
        a = pl_j_eval(c, f, n->a);
        pl_j_defined(c, &a, NULL);
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
        if (a.type == JV_UNDEF && n->a->kind == E_NAME
            && pl_j_global_test(n->a, n->name) >= 0)
        {
            return pl_jv_bool(pl_j_global_test(n->a, n->name) != n->op);
        }
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

void
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
