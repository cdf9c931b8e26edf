/*
 * gr_nfa: a grammar's tree into a Thompson NFA over bytes.
 *
 * Every piece is a fragment with one entry and one exit state (an
 * epsilon state whose out is patched by what follows).  Repetition
 * builds its child once per copy it needs ({2,4}: two copies, then two
 * optional ones; * and +: a loop).  A rule reference builds the rule's
 * body in place, and a rule already PL_GRAMMAR_MAX_NEST deep in the
 * current expansion matches nothing there: that bound is what keeps a
 * recursive grammar finite.  A code point class becomes the alternation
 * of its UTF-8 byte sequences, split so that each is a chain of byte
 * ranges (the usual UTF-8 range construction).
 *
 * After the build, the states from which the accept state can still be
 * reached are marked live; the DFA follows live states only, so every
 * prefix the automaton allows can still be completed.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gr_internal.h"

typedef struct {
    gr_nfa_t         *nfa;
    const gr_tree_t  *t;
    int              *active;      /* per rule: expansions on the stack */
    char             *err;
    size_t            errlen;
    int               failed;
} gr_build_t;

typedef struct {
    int32_t  in;
    int32_t  out;                   /* an epsilon state, out unpatched */
} gr_frag_t;


static int32_t
gr_state(gr_build_t *b, int kind, uint8_t lo, uint8_t hi)
{
    gr_nfa_t     *nfa = b->nfa;
    gr_nstate_t  *p;
    int32_t       cap;

    if (b->failed) {
        return -1;
    }
    if (nfa->n == PL_GRAMMAR_MAX_STATES) {
        snprintf(b->err, b->errlen, "the grammar is too large (over %d "
                 "automaton states)", PL_GRAMMAR_MAX_STATES);
        b->failed = 1;
        return -1;
    }
    if (nfa->n == nfa->cap) {
        cap = nfa->cap ? nfa->cap * 2 : 1024;
        p = realloc(nfa->s, (size_t) cap * sizeof(gr_nstate_t));
        if (p == NULL) {
            snprintf(b->err, b->errlen, "out of memory");
            b->failed = 1;
            return -1;
        }
        nfa->s = p;
        nfa->cap = cap;
    }

    nfa->s[nfa->n] = (gr_nstate_t) { .kind = (uint8_t) kind, .lo = lo,
                                     .hi = hi, .out = -1, .out2 = -1 };
    return nfa->n++;
}


/* an epsilon state in and out of the same state: matches "" */
static gr_frag_t
gr_empty(gr_build_t *b)
{
    int32_t  s = gr_state(b, GR_N_EPS, 0, 0);

    return (gr_frag_t) { s, s };
}


/* an entry that leads nowhere, and an exit nothing reaches */
static gr_frag_t
gr_nothing(gr_build_t *b)
{
    int32_t  in = gr_state(b, GR_N_EPS, 0, 0);

    return (gr_frag_t) { in, gr_state(b, GR_N_EPS, 0, 0) };
}


/* from's exit continues to to */
static void
gr_link(gr_build_t *b, int32_t from, int32_t to)
{
    if (!b->failed) {
        b->nfa->s[from].out = to;
    }
}


/* a chain of byte ranges lo[i]..hi[i] */
static gr_frag_t
gr_chain(gr_build_t *b, const uint8_t *lo, const uint8_t *hi, int n)
{
    gr_frag_t  f;
    int32_t    s, prev = -1;
    int        i;

    f.in = -1;
    for (i = 0; i < n; i++) {
        s = gr_state(b, GR_N_BYTE, lo[i], hi[i]);
        if (prev >= 0) {
            gr_link(b, prev, s);
        } else {
            f.in = s;
        }
        prev = s;
    }
    f.out = gr_state(b, GR_N_EPS, 0, 0);
    if (prev >= 0) {
        gr_link(b, prev, f.out);
    } else {
        f.in = f.out;
    }

    return f;
}


/* alternatives: a split chain into each entry, each exit to one exit */
typedef struct {
    int32_t  split;                 /* the last split, out2 free */
    gr_frag_t f;
    int       n;
} gr_alt_t;


static void
gr_alt_init(gr_build_t *b, gr_alt_t *a)
{
    a->n = 0;
    a->f.in = gr_state(b, GR_N_EPS, 0, 0);
    a->f.out = gr_state(b, GR_N_EPS, 0, 0);
    a->split = a->f.in;
}


static void
gr_alt_add(gr_build_t *b, gr_alt_t *a, gr_frag_t f)
{
    int32_t  s;

    if (b->failed) {
        return;
    }
    if (a->n == 0) {
        b->nfa->s[a->split].out = f.in;
    } else {
        s = gr_state(b, GR_N_EPS, 0, 0);
        if (s < 0) {
            return;
        }
        b->nfa->s[a->split].out2 = s;
        b->nfa->s[s].out = f.in;
        a->split = s;
    }
    gr_link(b, f.out, a->f.out);
    a->n++;
}


/* ---- UTF-8 ranges ---- */

static const uint32_t  gr_utf8_max[] = { 0x7f, 0x7ff, 0xffff, 0x10ffff };


/* lo..hi (same encoded length) as byte range chains into a */
static void
gr_utf8_range(gr_build_t *b, gr_alt_t *a, uint32_t lo, uint32_t hi)
{
    uint8_t   l[4], h[4];
    uint32_t  m;
    int       n, i;

    for (i = 0; i < 3; i++) {
        if (lo <= gr_utf8_max[i] && hi > gr_utf8_max[i]) {
            gr_utf8_range(b, a, lo, gr_utf8_max[i]);
            gr_utf8_range(b, a, gr_utf8_max[i] + 1, hi);
            return;
        }
    }
    if (hi < 0x80) {
        l[0] = (uint8_t) lo;
        h[0] = (uint8_t) hi;
        gr_alt_add(b, a, gr_chain(b, l, h, 1));
        return;
    }

    /* split until every continuation byte spans a whole or equal range */
    for (i = 1; i < 4; i++) {
        m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                gr_utf8_range(b, a, lo, lo | m);
                gr_utf8_range(b, a, (lo | m) + 1, hi);
                return;
            }
            if ((hi & m) != m) {
                gr_utf8_range(b, a, lo, (hi & ~m) - 1);
                gr_utf8_range(b, a, hi & ~m, hi);
                return;
            }
        }
    }

    n = pl_utf8_put(lo, l);
    pl_utf8_put(hi, h);
    gr_alt_add(b, a, gr_chain(b, l, h, n));
}


static gr_frag_t
gr_class_frag(gr_build_t *b, const gr_node_t *n)
{
    gr_alt_t  a;
    uint32_t  lo, hi;
    int       i;

    gr_alt_init(b, &a);

    for (i = 0; i < n->n_ranges; i++) {
        lo = n->ranges[2 * i];
        hi = n->ranges[2 * i + 1];
        /* surrogates have no UTF-8 */
        if (lo < 0xd800 && hi >= 0xd800) {
            gr_utf8_range(b, &a, lo, 0xd7ff);
            lo = 0xe000;
        } else if (lo >= 0xd800 && lo < 0xe000) {
            lo = 0xe000;
        }
        if (lo <= hi) {
            gr_utf8_range(b, &a, lo, hi);
        }
    }

    return a.n ? a.f : gr_nothing(b);
}


/* ---- the tree ---- */

static gr_frag_t gr_frag(gr_build_t *b, const gr_node_t *n);


/* whether two trees match the same strings by being the same */
static int
gr_same(const gr_node_t *a, const gr_node_t *b)
{
    int  i;

    if (a->kind != b->kind || a->n_kids != b->n_kids) {
        return 0;
    }
    switch (a->kind) {
    case GR_BYTES:
        return a->len == b->len && memcmp(a->bytes, b->bytes, a->len) == 0;
    case GR_CLASS:
        return a->n_ranges == b->n_ranges
               && memcmp(a->ranges, b->ranges,
                         (size_t) a->n_ranges * 2 * sizeof(uint32_t)) == 0;
    case GR_RULE:
        return a->rule == b->rule;
    case GR_REPEAT:
        if (a->min != b->min || a->max != b->max) {
            return 0;
        }
        break;
    default:
        break;
    }
    for (i = 0; i < a->n_kids; i++) {
        if (!gr_same(a->kids[i], b->kids[i])) {
            return 0;
        }
    }

    return 1;
}


/*
 * A separated list "X (S X)*": kids[j] is the repetition and the k kids
 * before it are X.  Its k, or 0 when it is not one.  Built as X once
 * with a loop back through S, so X (a nested value, say) is not copied.
 */
static int
gr_sep_list(const gr_node_t *seq, int j, int first)
{
    const gr_node_t  *r = seq->kids[j], *c;
    int               k;

    if (r->kind != GR_REPEAT || r->min != 0 || r->max >= 0
        || r->kids[0]->kind != GR_SEQ)
    {
        return 0;
    }
    c = r->kids[0];
    for (k = c->n_kids - 1; k >= 1; k--) {
        int  i;

        if (j - k < first) {
            continue;
        }
        for (i = 0; i < k; i++) {
            if (!gr_same(c->kids[c->n_kids - k + i], seq->kids[j - k + i])) {
                break;
            }
        }
        if (i == k) {
            return k;
        }
    }

    return 0;
}


static gr_frag_t
gr_seq_frag(gr_build_t *b, const gr_node_t *n)
{
    gr_frag_t   f, k, s;
    int32_t    *ins, split, end;
    int         i, j, x, first = 0;

    ins = malloc((size_t) n->n_kids * sizeof(int32_t));
    if (ins == NULL) {
        snprintf(b->err, b->errlen, "out of memory");
        b->failed = 1;
        return (gr_frag_t) { -1, -1 };
    }

    f = gr_frag(b, n->kids[0]);
    ins[0] = f.in;
    for (i = 1; i < n->n_kids && !b->failed; i++) {
        x = gr_sep_list(n, i, first);
        if (x == 0) {
            k = gr_frag(b, n->kids[i]);
            ins[i] = k.in;
            gr_link(b, f.out, k.in);
            f.out = k.out;
            continue;
        }

        /* the separator: the repetition's kids before X */
        s = gr_frag(b, n->kids[i]->kids[0]->kids[0]);
        for (j = 1; j < n->kids[i]->kids[0]->n_kids - x; j++) {
            k = gr_frag(b, n->kids[i]->kids[0]->kids[j]);
            gr_link(b, s.out, k.in);
            s.out = k.out;
        }
        split = gr_state(b, GR_N_EPS, 0, 0);
        end = gr_state(b, GR_N_EPS, 0, 0);
        if (b->failed) {
            break;
        }
        gr_link(b, f.out, split);
        b->nfa->s[split].out = s.in;
        b->nfa->s[split].out2 = end;
        gr_link(b, s.out, ins[i - x]);
        ins[i] = split;
        f.out = end;
        first = i + 1;
    }
    free(ins);

    return f;
}


static gr_frag_t
gr_alt_frag(gr_build_t *b, const gr_node_t *n)
{
    gr_alt_t  a;
    int       i;

    gr_alt_init(b, &a);
    for (i = 0; i < n->n_kids; i++) {
        gr_alt_add(b, &a, gr_frag(b, n->kids[i]));
    }

    return a.f;
}


static gr_frag_t
gr_repeat_frag(gr_build_t *b, const gr_node_t *n)
{
    gr_frag_t  f = gr_empty(b), k;
    int32_t    split, end;
    int        i;

    for (i = 0; i < n->min && !b->failed; i++) {
        k = gr_frag(b, n->kids[0]);
        gr_link(b, f.out, k.in);
        f.out = k.out;
    }

    if (n->max < 0) {
        /* loop: split -> child -> split, or on */
        split = gr_state(b, GR_N_EPS, 0, 0);
        end = gr_state(b, GR_N_EPS, 0, 0);
        k = gr_frag(b, n->kids[0]);
        if (b->failed) {
            return f;
        }
        b->nfa->s[split].out = k.in;
        b->nfa->s[split].out2 = end;
        gr_link(b, k.out, split);
        gr_link(b, f.out, split);
        f.out = end;
        return f;
    }

    /* optional copies: each may be skipped to the common end */
    end = gr_state(b, GR_N_EPS, 0, 0);
    for (i = n->min; i < n->max && !b->failed; i++) {
        split = gr_state(b, GR_N_EPS, 0, 0);
        k = gr_frag(b, n->kids[0]);
        if (b->failed) {
            return f;
        }
        gr_link(b, f.out, split);
        b->nfa->s[split].out = k.in;
        b->nfa->s[split].out2 = end;
        f.out = k.out;
    }
    gr_link(b, f.out, end);
    f.out = end;

    return f;
}


static gr_frag_t
gr_rule_frag(gr_build_t *b, const gr_node_t *n)
{
    gr_frag_t  f;

    if (b->active[n->rule] >= PL_GRAMMAR_MAX_NEST) {
        return gr_nothing(b);
    }
    b->active[n->rule]++;
    f = gr_frag(b, b->t->rules[n->rule].body);
    b->active[n->rule]--;

    return f;
}


static gr_frag_t
gr_frag(gr_build_t *b, const gr_node_t *n)
{
    if (b->failed) {
        return (gr_frag_t) { -1, -1 };
    }

    switch (n->kind) {
    case GR_EMPTY:
        return gr_empty(b);
    case GR_FAIL:
        return gr_nothing(b);
    case GR_BYTES:
        return gr_chain(b, n->bytes, n->bytes, n->len);
    case GR_CLASS:
        return gr_class_frag(b, n);
    case GR_SEQ:
        return gr_seq_frag(b, n);
    case GR_ALT:
        return gr_alt_frag(b, n);
    case GR_REPEAT:
        return gr_repeat_frag(b, n);
    case GR_RULE:
        return gr_rule_frag(b, n);
    }

    return gr_nothing(b);
}


/* live: the accept state is reachable; by reverse edges from it */
static int
gr_mark_live(gr_nfa_t *nfa)
{
    int32_t  *head, *next, *from, *stack;
    int32_t   i, j, n = nfa->n, top = 0, e = 0;
    int       rc = -1;

    head = malloc((size_t) n * sizeof(int32_t));
    next = malloc((size_t) n * 2 * sizeof(int32_t));
    from = malloc((size_t) n * 2 * sizeof(int32_t));
    stack = malloc((size_t) n * sizeof(int32_t));
    if (head == NULL || next == NULL || from == NULL || stack == NULL) {
        goto done;
    }

    for (i = 0; i < n; i++) {
        head[i] = -1;
    }
    for (i = 0; i < n; i++) {
        int32_t  outs[2] = { nfa->s[i].out, nfa->s[i].out2 };

        for (j = 0; j < 2; j++) {
            if (outs[j] >= 0) {
                from[e] = i;
                next[e] = head[outs[j]];
                head[outs[j]] = e++;
            }
        }
    }

    nfa->s[nfa->accept].live = 1;
    stack[top++] = nfa->accept;
    while (top > 0) {
        i = stack[--top];
        for (j = head[i]; j >= 0; j = next[j]) {
            if (!nfa->s[from[j]].live) {
                nfa->s[from[j]].live = 1;
                stack[top++] = from[j];
            }
        }
    }
    rc = 0;

done:

    free(head);
    free(next);
    free(from);
    free(stack);

    return rc;
}


int
gr_nfa_build(gr_nfa_t *nfa, const gr_tree_t *t, char *err, size_t errlen)
{
    gr_build_t  b = { .nfa = nfa, .t = t, .err = err, .errlen = errlen };
    gr_frag_t   f;

    memset(nfa, 0, sizeof(*nfa));
    b.active = calloc((size_t) t->n_rules, sizeof(int));
    if (b.active == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }

    b.active[t->root] = 1;
    f = gr_frag(&b, t->rules[t->root].body);
    nfa->accept = gr_state(&b, GR_N_ACCEPT, 0, 0);
    gr_link(&b, f.out, nfa->accept);
    nfa->start = f.in;
    free(b.active);

    if (b.failed) {
        gr_nfa_free(nfa);
        return -1;
    }
    if (gr_mark_live(nfa) != 0) {
        snprintf(err, errlen, "out of memory");
        gr_nfa_free(nfa);
        return -1;
    }
    if (!nfa->s[nfa->start].live) {
        snprintf(err, errlen, "the grammar matches nothing");
        gr_nfa_free(nfa);
        return -1;
    }

    return 0;
}


void
gr_nfa_free(gr_nfa_t *nfa)
{
    free(nfa->s);
    memset(nfa, 0, sizeof(*nfa));
}
