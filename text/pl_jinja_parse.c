/*
 * pl_jinja_parse: the Jinja interpreter's parser.  Recursive descent over
 * the pieces and tokens of pl_jinja_lex.c into a tree of pl_jn_t nodes in
 * the template's arena: expressions by precedence, then the statements
 * (if, for, set, macro, break, continue) and their blocks.  Holds
 * pl_jinja_parse() and pl_jinja_free().
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pl_jinja_internal.h"

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

                l->op = 1;      /* a tuple */
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
                || pl_j_is(&t, T_OP, "[") || pl_j_is(&t, T_OP, "{")
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

/* A sign binds tighter than a filter, as in jinja2: -x|abs is (-x)|abs. */
static pl_jn_t *
pl_j_signed(pl_jctx_t *c, int filters)
{
    pl_jn_t  *n;

    if (++c->depth > PL_J_MAX_DEPTH) {
        pl_j_fail(c, "expression nested too deeply");
    }
    if (pl_j_accept(c, T_OP, "-")) {
        n = pl_j_node(c, E_NEG);
        n->a = pl_j_signed(c, 0);
    } else if (pl_j_accept(c, T_OP, "+")) {
        n = pl_j_signed(c, 0);
    } else {
        n = pl_j_postfix(c);
    }
    c->depth--;
    return filters ? pl_j_filters(c, n) : n;
}

static pl_jn_t *
pl_j_unary(pl_jctx_t *c)
{
    return pl_j_signed(c, 1);
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
