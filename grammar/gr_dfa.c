/*
 * gr_dfa: a compiled grammar (pl_grammar_t): its NFA and the DFA built
 * from it on demand, with each DFA state's token mask.
 *
 * A DFA state is the set of live NFA byte states reached (after epsilon
 * moves), kept sorted and found again by hash.  A state's 256 transitions
 * start unknown and are filled as bytes are tried, so a grammar pays only
 * for the states its outputs visit.  The mask of a state is filled at its
 * first request by walking the vocabulary in byte order (pl_vocab_t keeps
 * that order and each token's common prefix with the one before): the
 * states along the previous token's bytes are reused up to the common
 * prefix, and a dead prefix rules out every following token that shares
 * it without another step.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gr_internal.h"
#include "gr_vocab.h"

#define GR_UNKNOWN  (-2)
#define GR_NOMEM    (-2)

typedef struct {
    int32_t    *set;             /* NFA byte states, sorted */
    int32_t     n;
    uint32_t    hash;
    int         accept;
    int32_t     next[256];       /* GR_UNKNOWN until tried */
    uint64_t   *mask;            /* allowed ids, once asked */
} gr_dstate_t;

struct pl_grammar_s {
    gr_nfa_t      nfa;
    gr_dstate_t  *d;
    int32_t       n_d;
    int32_t       cap_d;
    int32_t      *table;         /* hash -> state index + 1, 0: empty */
    uint32_t      table_size;
    int32_t       start;

    /* scratch for closures */
    uint32_t     *mark;
    uint32_t      gen;
    int32_t      *stack;
    int32_t      *found;
};


static uint32_t
gr_set_hash(const int32_t *set, int32_t n)
{
    uint32_t  h = 2166136261u;
    int32_t   i;

    for (i = 0; i < n; i++) {
        h = (h ^ (uint32_t) set[i]) * 16777619u;
    }

    return h;
}


static int
gr_int_cmp(const void *a, const void *b)
{
    int32_t  x = *(const int32_t *) a, y = *(const int32_t *) b;

    return x < y ? -1 : x > y;
}


static int
gr_table_grow(pl_grammar_t *g)
{
    uint32_t  size = g->table_size ? g->table_size * 2 : 256, i, j;
    int32_t  *t = calloc(size, sizeof(int32_t));
    int32_t   k;

    if (t == NULL) {
        return -1;
    }
    for (k = 0; k < g->n_d; k++) {
        for (i = g->d[k].hash & (size - 1), j = 1; t[i]; j++) {
            i = (i + j) & (size - 1);
        }
        t[i] = k + 1;
    }
    free(g->table);
    g->table = t;
    g->table_size = size;

    return 0;
}


/* the DFA state of found[0..n) (sorted here), created when new */
static int32_t
gr_dstate(pl_grammar_t *g, int32_t n, int accept)
{
    gr_dstate_t  *d, *p;
    uint32_t      h, i, j;
    int32_t       k;

    qsort(g->found, (size_t) n, sizeof(int32_t), gr_int_cmp);
    h = gr_set_hash(g->found, n) ^ (uint32_t) accept;

    if ((uint32_t) (g->n_d + 1) * 2 > g->table_size && gr_table_grow(g)) {
        return GR_NOMEM;
    }

    for (i = h & (g->table_size - 1), j = 1; g->table[i]; j++) {
        d = &g->d[g->table[i] - 1];
        if (d->hash == h && d->n == n && d->accept == accept
            && memcmp(d->set, g->found, (size_t) n * sizeof(int32_t)) == 0)
        {
            return g->table[i] - 1;
        }
        i = (i + j) & (g->table_size - 1);
    }

    if (g->n_d == g->cap_d) {
        k = g->cap_d ? g->cap_d * 2 : 64;
        p = realloc(g->d, (size_t) k * sizeof(gr_dstate_t));
        if (p == NULL) {
            return GR_NOMEM;
        }
        g->d = p;
        g->cap_d = k;
    }

    d = &g->d[g->n_d];
    d->set = malloc((size_t) (n ? n : 1) * sizeof(int32_t));
    if (d->set == NULL) {
        return GR_NOMEM;
    }
    memcpy(d->set, g->found, (size_t) n * sizeof(int32_t));
    d->n = n;
    d->hash = h;
    d->accept = accept;
    d->mask = NULL;
    for (k = 0; k < 256; k++) {
        d->next[k] = GR_UNKNOWN;
    }
    g->table[i] = ++g->n_d;

    return g->n_d - 1;
}


/* adds the live byte states and accept reachable from s without a byte
   to found[*n]; returns whether accept is among them */
static int
gr_closure(pl_grammar_t *g, int32_t s, int32_t *n)
{
    gr_nstate_t  *ns = g->nfa.s;
    int32_t       top = 0;
    int           accept = 0;

    if (s < 0 || !ns[s].live || g->mark[s] == g->gen) {
        return 0;
    }
    g->mark[s] = g->gen;
    g->stack[top++] = s;

    while (top > 0) {
        s = g->stack[--top];
        switch (ns[s].kind) {
        case GR_N_ACCEPT:
            accept = 1;
            break;
        case GR_N_BYTE:
            g->found[(*n)++] = s;
            break;
        default:
            if (ns[s].out2 >= 0 && ns[ns[s].out2].live
                && g->mark[ns[s].out2] != g->gen)
            {
                g->mark[ns[s].out2] = g->gen;
                g->stack[top++] = ns[s].out2;
            }
            if (ns[s].out >= 0 && ns[ns[s].out].live
                && g->mark[ns[s].out] != g->gen)
            {
                g->mark[ns[s].out] = g->gen;
                g->stack[top++] = ns[s].out;
            }
        }
    }

    return accept;
}


pl_grammar_t *
pl_grammar_compile(const char *ebnf, size_t len, char *err, size_t errlen)
{
    pl_grammar_t  *g;
    gr_tree_t      t;
    int32_t        n = 0;
    int            accept;

    if (gr_parse_ebnf(&t, ebnf, len, err, errlen) != 0) {
        gr_tree_free(&t);
        return NULL;
    }

    g = calloc(1, sizeof(pl_grammar_t));
    if (g == NULL || gr_nfa_build(&g->nfa, &t, err, errlen) != 0) {
        if (g == NULL) {
            snprintf(err, errlen, "out of memory");
        }
        gr_tree_free(&t);
        free(g);
        return NULL;
    }
    gr_tree_free(&t);

    g->mark = calloc((size_t) g->nfa.n, sizeof(uint32_t));
    g->stack = malloc((size_t) g->nfa.n * sizeof(int32_t));
    g->found = malloc((size_t) g->nfa.n * sizeof(int32_t));
    if (g->mark == NULL || g->stack == NULL || g->found == NULL) {
        goto nomem;
    }

    g->gen = 1;
    accept = gr_closure(g, g->nfa.start, &n);
    g->start = gr_dstate(g, n, accept);
    if (g->start < 0) {
        goto nomem;
    }

    return g;

nomem:

    snprintf(err, errlen, "out of memory");
    pl_grammar_free(g);
    return NULL;
}


void
pl_grammar_free(pl_grammar_t *g)
{
    int32_t  i;

    if (g == NULL) {
        return;
    }
    for (i = 0; i < g->n_d; i++) {
        free(g->d[i].set);
        free(g->d[i].mask);
    }
    free(g->d);
    free(g->table);
    free(g->mark);
    free(g->stack);
    free(g->found);
    gr_nfa_free(&g->nfa);
    free(g);
}


int32_t
pl_grammar_start(pl_grammar_t *g)
{
    return g->start;
}


size_t
pl_grammar_nfa_states(const pl_grammar_t *g)
{
    return (size_t) g->nfa.n;
}


int
pl_grammar_accepts(const pl_grammar_t *g, int32_t s)
{
    return s >= 0 && g->d[s].accept;
}


int32_t
pl_grammar_step(pl_grammar_t *g, int32_t s, uint8_t b)
{
    gr_nstate_t  *ns = g->nfa.s;
    gr_dstate_t  *d;
    int32_t       i, n = 0, to;
    int           accept = 0;

    if (s < 0) {
        return PL_GRAMMAR_DEAD;
    }
    d = &g->d[s];
    if (d->next[b] != GR_UNKNOWN) {
        return d->next[b];
    }

    if (++g->gen == 0) {
        memset(g->mark, 0, (size_t) g->nfa.n * sizeof(uint32_t));
        g->gen = 1;
    }
    for (i = 0; i < d->n; i++) {
        if (b >= ns[d->set[i]].lo && b <= ns[d->set[i]].hi) {
            accept |= gr_closure(g, ns[d->set[i]].out, &n);
        }
    }

    to = n == 0 && !accept ? PL_GRAMMAR_DEAD : gr_dstate(g, n, accept);
    if (to == GR_NOMEM) {
        return GR_NOMEM;
    }
    g->d[s].next[b] = to;

    return to;
}


int32_t
pl_grammar_walk(pl_grammar_t *g, int32_t s, const void *bytes, size_t len)
{
    const uint8_t  *p = bytes;
    size_t          i;

    for (i = 0; i < len && s >= 0; i++) {
        s = pl_grammar_step(g, s, p[i]);
    }

    return s < 0 ? PL_GRAMMAR_DEAD : s;
}


/* the walk of the vocabulary in byte order from state s into mask */
static int
gr_fill_mask(pl_grammar_t *g, const pl_vocab_t *v, int32_t s, uint64_t *m)
{
    int32_t   at[GR_VOCAB_MAX_TOKEN + 1];
    uint32_t  k, id, dead_at = UINT32_MAX;
    size_t    len, j, l;
    const uint8_t *b;

    at[0] = s;

    for (k = 0; k < v->n_sorted; k++) {
        id = v->sorted[k];
        b = pl_vocab_bytes(v, (int32_t) id, &len);
        l = v->lcp[k];

        /* a prefix shared with the last token that died stays dead */
        if (dead_at != UINT32_MAX && l > dead_at) {
            continue;
        }
        dead_at = UINT32_MAX;

        for (j = l; j < len; j++) {
            at[j + 1] = pl_grammar_step(g, at[j], b[j]);
            if (at[j + 1] == GR_NOMEM) {
                return -1;
            }
            if (at[j + 1] < 0) {
                dead_at = (uint32_t) j;
                break;
            }
        }
        if (j == len) {
            m[id / 64] |= 1ull << (id % 64);
        }
    }

    return 0;
}


const uint64_t *
pl_grammar_mask(pl_grammar_t *g, const pl_vocab_t *v, int32_t s)
{
    uint64_t  *m;
    int        i;

    if (s < 0) {
        return NULL;
    }
    if (g->d[s].mask != NULL) {
        return g->d[s].mask;
    }

    m = calloc((v->n_ids + 63) / 64, sizeof(uint64_t));
    if (m == NULL || gr_fill_mask(g, v, s, m) != 0) {
        free(m);
        return NULL;
    }

    if (g->d[s].accept) {
        for (i = 0; i < v->n_eos; i++) {
            m[v->eos[i] / 64] |= 1ull << (v->eos[i] % 64);
        }
    }

    /* the walk may have grown g->d: index again */
    g->d[s].mask = m;

    return m;
}


int32_t
pl_grammar_advance(pl_grammar_t *g, const pl_vocab_t *v, int32_t s,
    int32_t id)
{
    const uint8_t  *b;
    size_t          len;
    int             i;

    if (s < 0 || id < 0 || (uint32_t) id >= v->n_ids) {
        return PL_GRAMMAR_DEAD;
    }
    for (i = 0; i < v->n_eos; i++) {
        if (v->eos[i] == id) {
            return g->d[s].accept ? s : PL_GRAMMAR_DEAD;
        }
    }

    b = pl_vocab_bytes(v, id, &len);
    if (b == NULL) {
        return PL_GRAMMAR_DEAD;
    }

    return pl_grammar_walk(g, s, b, len);
}
