/*
 * gr_internal: what the grammar files share.  The parsers (gr_parse.c)
 * turn EBNF and regex text into a tree of nodes held in an arena; the
 * NFA builder (gr_nfa.c) turns the tree into Thompson NFA states; the DFA
 * (gr_dfa.c) is built from those on demand.
 */

#ifndef PL_GR_INTERNAL_H
#define PL_GR_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "pl_utf8.h"

#include "grammar.h"

#define GR_MAX_CP  0x10ffff

/* ---- the tree ---- */

typedef enum {
    GR_EMPTY = 0,       /* the empty string */
    GR_FAIL,            /* nothing */
    GR_BYTES,           /* a fixed byte string */
    GR_CLASS,           /* one code point of ranges, as UTF-8 */
    GR_SEQ,
    GR_ALT,
    GR_REPEAT,          /* kids[0] min..max times; max < 0: unbounded */
    GR_RULE             /* a reference to rule `rule` */
} gr_kind_t;

typedef struct gr_node_s  gr_node_t;

struct gr_node_s {
    gr_kind_t     kind;
    int           min, max;
    int           rule;
    uint8_t      *bytes;
    int           len;
    uint32_t     *ranges;       /* lo, hi pairs, sorted, disjoint */
    int           n_ranges;
    gr_node_t   **kids;
    int           n_kids;
};

typedef struct gr_chunk_s  gr_chunk_t;

typedef struct {
    gr_chunk_t   *chunks;
    int           oom;
} gr_arena_t;

void  *gr_alloc(gr_arena_t *a, size_t size);
void   gr_arena_free(gr_arena_t *a);

typedef struct {
    char         *name;
    gr_node_t    *body;
} gr_rule_t;

typedef struct {
    gr_arena_t    arena;
    gr_rule_t    *rules;
    int           n_rules;
    int           cap_rules;
    int           root;
} gr_tree_t;

/* EBNF text into t (root = the rule named root); -1 with err */
int        gr_parse_ebnf(gr_tree_t *t, const char *s, size_t len, char *err,
    size_t errlen);
/* a regex into a node of t's arena; json: as the inside of a JSON
   string; NULL with err */
gr_node_t *gr_parse_regex(gr_tree_t *t, const char *s, size_t len, int json,
    char *err, size_t errlen);
void       gr_tree_free(gr_tree_t *t);

/* cp's UTF-8 into out; its length */

/* code point ranges: n pairs in r sorted and merged in place; returns
   the new n */
int        gr_ranges_normalize(uint32_t *r, int n);


/* ---- the NFA ---- */

typedef enum {
    GR_N_EPS = 0,       /* out, out2 (-1: none) without a byte */
    GR_N_BYTE,          /* a byte in lo..hi to out */
    GR_N_ACCEPT
} gr_nkind_t;

typedef struct {
    uint8_t       kind;
    uint8_t       lo, hi;
    uint8_t       live;         /* accept is reachable from it */
    int32_t       out, out2;
} gr_nstate_t;

typedef struct {
    gr_nstate_t  *s;
    int32_t       n;
    int32_t       cap;
    int32_t       start;
    int32_t       accept;
} gr_nfa_t;

/* the tree's root into nfa; -1 with err */
int  gr_nfa_build(gr_nfa_t *nfa, const gr_tree_t *t, char *err,
    size_t errlen);
void gr_nfa_free(gr_nfa_t *nfa);

#endif /* PL_GR_INTERNAL_H */
