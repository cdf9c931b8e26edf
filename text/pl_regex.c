/*
 * pl_regex: a backtracking regular expression engine for the split
 * patterns of tokenizer.json (see pl_regex.h for the accepted syntax).
 *
 * A pattern is parsed into a small tree, then emitted as a program of
 * CHAR / CLASS / SPLIT / JMP / LOOK / MATCH instructions that a loop runs
 * with an explicit stack of (pc, position) choice points, which gives
 * Oniguruma's leftmost-first semantics.  Character classes are unions of
 * ranges, general-category masks, property masks and nested classes
 * (each possibly negated, built by pl_regex_class.c); each class is also
 * flattened at compile time into a bitmap over the Basic Multilingual
 * Plane so that matching a class there is one bit test.  An unbounded
 * repetition of an expression that can match empty is refused, so a
 * program always makes progress.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pl_regex_internal.h"
#include "pl_tokenizer.h"

static int32_t pl_re_parse_alt(pl_re_parser_t *ps);

int
pl_re_fail(pl_re_parser_t *ps, const char *what)
{
    if (!ps->failed) {
        snprintf(ps->err, ps->errlen, "regex: %s", what);
        ps->failed = 1;
    }
    return -1;
}

int
pl_re_grow(void **p, size_t *cap, size_t need, size_t size)
{
    void    *np;
    size_t   ncap;

    if (need <= *cap) {
        return 0;
    }
    ncap = *cap ? *cap * 2 : 16;
    while (ncap < need) {
        ncap *= 2;
    }
    np = realloc(*p, ncap * size);
    if (np == NULL) {
        return -1;
    }
    *p = np;
    *cap = ncap;
    return 0;
}

static int32_t
pl_re_node(pl_re_parser_t *ps, int type, uint32_t a, uint32_t b)
{
    pl_re_node_t  *n;

    if (pl_re_grow((void **) &ps->nodes, &ps->capnodes, ps->nnodes + 1,
                   sizeof(pl_re_node_t)) != 0)
    {
        return pl_re_fail(ps, "out of memory");
    }
    n = &ps->nodes[ps->nnodes];
    memset(n, 0, sizeof(*n));
    n->type = (uint8_t) type;
    n->child = -1;
    n->next = -1;
    n->a = a;
    n->b = b;
    return (int32_t) ps->nnodes++;
}

/* ---- character classes ---- */

static int
pl_re_item_has(const pl_regex_t *re, const pl_re_item_t *it, uint32_t cp)
{
    int  in;

    switch (it->kind) {
    case CI_RANGE:
        in = (cp >= it->lo && cp <= it->hi);
        break;
    case CI_CATS:
        in = (it->lo >> pl_uc_category(cp)) & 1;
        break;
    case CI_PROPS:
        in = (pl_uc_prop(cp) & it->lo) != 0;
        break;
    default:
        in = pl_re_class_eval(re, &re->classes[it->lo], cp);
        break;
    }
    return in != it->neg;
}

static int
pl_re_class_raw(const pl_regex_t *re, const pl_re_class_t *c, uint32_t cp)
{
    size_t  i;

    for (i = 0; i < c->n; i++) {
        if (pl_re_item_has(re, &re->items[c->first + i], cp)) {
            return 1;
        }
    }
    return 0;
}

static uint32_t
pl_re_swapcase(uint32_t cp)
{
    if (cp >= 'a' && cp <= 'z') {
        return cp - 32;
    }
    if (cp >= 'A' && cp <= 'Z') {
        return cp + 32;
    }
    return cp;
}

int
pl_re_class_eval(const pl_regex_t *re, const pl_re_class_t *c, uint32_t cp)
{
    int  in = pl_re_class_raw(re, c, cp);

    if (!in && c->fold && pl_re_swapcase(cp) != cp) {
        in = pl_re_class_raw(re, c, pl_re_swapcase(cp));
    }
    return in != c->neg;
}

static inline int
pl_re_class_match(const pl_regex_t *re, const pl_re_class_t *c, uint32_t cp)
{
    if (cp < 0x10000) {
        return (c->bmp[cp >> 5] >> (cp & 31)) & 1;
    }
    return pl_re_class_eval(re, c, cp);
}

/* ---- parser ---- */

static int32_t
pl_re_set_node(pl_re_parser_t *ps, pl_re_items_t *l)
{
    int32_t  idx = pl_re_class_make(ps, l, 0, 0);

    free(l->v);
    if (idx < 0) {
        return -1;
    }
    return pl_re_node(ps, N_CLASS, (uint32_t) idx, 0);
}

static int32_t
pl_re_parse_group(pl_re_parser_t *ps)
{
    int      saved_fold = ps->fold, look = -1;
    int32_t  inner, n;

    if (ps->depth >= PL_RE_MAX_DEPTH) {
        return pl_re_fail(ps, "groups nested too deeply");
    }
    if (ps->p < ps->end && *ps->p == '?') {
        ps->p++;
        if (ps->p == ps->end) {
            return pl_re_fail(ps, "unterminated group");
        }
        if (*ps->p == ':') {
            ps->p++;
        } else if (*ps->p == '=' || *ps->p == '!') {
            look = (*ps->p++ == '!');
        } else if (*ps->p == 'i' && ps->p + 1 < ps->end
                   && (ps->p[1] == ':' || ps->p[1] == ')'))
        {
            ps->fold = 1;
            ps->p++;
            if (*ps->p++ == ')') {
                return pl_re_node(ps, N_EMPTY, 0, 0);
            }
        } else if (*ps->p == '<' && ps->p + 1 < ps->end
                   && ps->p[1] != '=' && ps->p[1] != '!')
        {
            while (ps->p < ps->end && *ps->p != '>') {
                ps->p++;
            }
            if (ps->p == ps->end) {
                return pl_re_fail(ps, "unterminated group name");
            }
            ps->p++;
        } else if (*ps->p == '<') {
            return pl_re_fail(ps, "lookbehind is not supported");
        } else if (*ps->p == '>') {
            return pl_re_fail(ps, "atomic groups are not supported");
        } else {
            return pl_re_fail(ps, "unsupported group syntax (?...)");
        }
    }
    ps->depth++;
    inner = pl_re_parse_alt(ps);
    ps->depth--;
    ps->fold = saved_fold;
    if (inner < 0) {
        return -1;
    }
    if (ps->p == ps->end || *ps->p != ')') {
        return pl_re_fail(ps, "missing )");
    }
    ps->p++;
    if (look < 0) {
        return inner;
    }
    n = pl_re_node(ps, N_LOOK, 0, 0);
    if (n >= 0) {
        ps->nodes[n].child = inner;
        ps->nodes[n].flag = (uint8_t) look;
    }
    return n;
}

static int32_t
pl_re_parse_atom(pl_re_parser_t *ps)
{
    pl_re_items_t  l = { NULL, 0, 0 };
    uint32_t       cp;
    int32_t        idx, n;
    int            r;

    switch (*ps->p) {
    case '(':
        ps->p++;
        return pl_re_parse_group(ps);
    case '[':
        ps->p++;
        idx = pl_re_parse_class(ps);
        return idx < 0 ? -1 : pl_re_node(ps, N_CLASS, (uint32_t) idx, 0);
    case '.':
        ps->p++;
        return pl_re_node(ps, N_ANY, 0, 0);
    case '^':
        ps->p++;
        return pl_re_node(ps, N_ASSERT, A_BOL, 0);
    case '$':
        ps->p++;
        return pl_re_node(ps, N_ASSERT, A_EOL, 0);
    case '*': case '+': case '?':
        return pl_re_fail(ps, "quantifier without an operand");
    case '\\':
        ps->p++;
        r = pl_re_escape(ps, &l, &cp, 0);
        if (r == ESC_SET) {
            return pl_re_set_node(ps, &l);
        }
        free(l.v);
        if (r == ESC_ERROR) {
            return -1;
        }
        if (r == ESC_ASSERT) {
            return pl_re_node(ps, N_ASSERT, cp, 0);
        }
        break;
    default:
        ps->p += pl_utf8_next(ps->p, &cp);
        break;
    }
    n = pl_re_node(ps, N_CHAR, cp, 0);
    if (n >= 0) {
        ps->nodes[n].flag = (uint8_t) (ps->fold
                                       && pl_re_swapcase(cp) != cp);
    }
    return n;
}

static int
pl_re_number(pl_re_parser_t *ps, uint32_t *v)
{
    const uint8_t  *start = ps->p;

    *v = 0;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        *v = *v * 10 + (uint32_t) (*ps->p++ - '0');
        if (*v > PL_RE_MAX_REPEAT) {
            return pl_re_fail(ps, "repetition count too large");
        }
    }
    return ps->p > start;
}

/* {n} {n,} {n,m} {,m}; 0 with p unchanged when '{' is a literal here. */
static int
pl_re_braces(pl_re_parser_t *ps, uint32_t *min, uint32_t *max)
{
    const uint8_t  *save = ps->p;
    int             a, b = 0;

    ps->p++;
    a = pl_re_number(ps, min);
    if (a < 0) {
        return -1;
    }
    *max = *min;
    if (ps->p < ps->end && *ps->p == ',') {
        ps->p++;
        b = pl_re_number(ps, max);
        if (b < 0) {
            return -1;
        }
        if (!b) {
            *max = PL_RE_INF;
        }
    }
    if ((!a && !b) || ps->p == ps->end || *ps->p != '}') {
        ps->p = save;
        return 0;
    }
    ps->p++;
    if (*max < *min) {
        return pl_re_fail(ps, "bad repetition range");
    }
    return 1;
}

static int32_t
pl_re_parse_repeat(pl_re_parser_t *ps)
{
    int32_t   atom = pl_re_parse_atom(ps), n;
    uint32_t  min, max;
    int       r;

    while (atom >= 0 && ps->p < ps->end) {
        if (*ps->p == '*' || *ps->p == '+' || *ps->p == '?') {
            min = (*ps->p == '+');
            max = (*ps->p == '?') ? 1 : PL_RE_INF;
            ps->p++;
        } else if (*ps->p == '{') {
            r = pl_re_braces(ps, &min, &max);
            if (r <= 0) {
                return r < 0 ? -1 : atom;
            }
        } else {
            break;
        }
        n = pl_re_node(ps, N_REPEAT, min, max);
        if (n < 0) {
            return -1;
        }
        ps->nodes[n].child = atom;
        ps->nodes[n].flag = 1;
        if (ps->p < ps->end && *ps->p == '?') {
            ps->nodes[n].flag = 0;
            ps->p++;
        } else if (ps->p < ps->end && *ps->p == '+') {
            return pl_re_fail(ps, "possessive quantifiers are not supported");
        }
        atom = n;
    }
    return atom;
}

static int32_t
pl_re_parse_cat(pl_re_parser_t *ps)
{
    int32_t  cat = pl_re_node(ps, N_CAT, 0, 0), last = -1, n;

    while (cat >= 0 && ps->p < ps->end && *ps->p != '|' && *ps->p != ')') {
        n = pl_re_parse_repeat(ps);
        if (n < 0) {
            return -1;
        }
        if (last < 0) {
            ps->nodes[cat].child = n;
        } else {
            ps->nodes[last].next = n;
        }
        last = n;
    }
    return cat;
}

static int32_t
pl_re_parse_alt(pl_re_parser_t *ps)
{
    int32_t  alt = pl_re_node(ps, N_ALT, 0, 0), last = -1, n;

    while (alt >= 0) {
        n = pl_re_parse_cat(ps);
        if (n < 0) {
            return -1;
        }
        if (last < 0) {
            ps->nodes[alt].child = n;
        } else {
            ps->nodes[last].next = n;
        }
        last = n;
        if (ps->p == ps->end || *ps->p != '|') {
            break;
        }
        ps->p++;
    }
    return alt;
}

/* ---- code generation ---- */

static int
pl_re_nullable(const pl_re_parser_t *ps, int32_t i)
{
    const pl_re_node_t  *n = &ps->nodes[i];
    int32_t              c;

    switch (n->type) {
    case N_CHAR: case N_ANY: case N_CLASS:
        return 0;
    case N_CAT:
        for (c = n->child; c >= 0; c = ps->nodes[c].next) {
            if (!pl_re_nullable(ps, c)) {
                return 0;
            }
        }
        return 1;
    case N_ALT:
        for (c = n->child; c >= 0; c = ps->nodes[c].next) {
            if (pl_re_nullable(ps, c)) {
                return 1;
            }
        }
        return 0;
    case N_REPEAT:
        return n->a == 0 || pl_re_nullable(ps, n->child);
    default:
        return 1;
    }
}

static int32_t
pl_re_emit(pl_re_parser_t *ps, int op, int flag, int32_t x, int32_t y,
    uint32_t c)
{
    pl_regex_t    *re = ps->re;
    pl_re_inst_t  *in;

    if (re->ncode >= PL_RE_MAX_CODE) {
        return pl_re_fail(ps, "pattern too large");
    }
    if (pl_re_grow((void **) &re->code, &ps->capcode, re->ncode + 1,
                   sizeof(pl_re_inst_t)) != 0)
    {
        return pl_re_fail(ps, "out of memory");
    }
    in = &re->code[re->ncode];
    in->op = (uint8_t) op;
    in->flag = (uint8_t) flag;
    in->x = x;
    in->y = y;
    in->c = c;
    return (int32_t) re->ncode++;
}

static int pl_re_gen(pl_re_parser_t *ps, int32_t i);

static int
pl_re_gen_alt(pl_re_parser_t *ps, int32_t first)
{
    pl_regex_t  *re = ps->re;
    int32_t      c, split, jmps[256];
    size_t       njmps = 0, k;

    for (c = first; c >= 0; c = ps->nodes[c].next) {
        split = -1;
        if (ps->nodes[c].next >= 0) {
            split = pl_re_emit(ps, OP_SPLIT, 0, 0, 0, 0);
            if (split < 0) {
                return -1;
            }
            re->code[split].x = split + 1;
        }
        if (pl_re_gen(ps, c) != 0) {
            return -1;
        }
        if (ps->nodes[c].next >= 0) {
            if (njmps == sizeof(jmps) / sizeof(jmps[0])) {
                return pl_re_fail(ps, "too many alternatives");
            }
            jmps[njmps] = pl_re_emit(ps, OP_JMP, 0, 0, 0, 0);
            if (jmps[njmps++] < 0) {
                return -1;
            }
            re->code[split].y = (int32_t) re->ncode;
        }
    }
    for (k = 0; k < njmps; k++) {
        re->code[jmps[k]].x = (int32_t) re->ncode;
    }
    return 0;
}

static int
pl_re_gen_repeat(pl_re_parser_t *ps, const pl_re_node_t *n)
{
    pl_regex_t  *re = ps->re;
    int32_t      split, pending[PL_RE_MAX_REPEAT + 1];
    uint32_t     k, npending = 0;
    int          greedy = n->flag;

    for (k = 0; k < n->a; k++) {
        if (pl_re_gen(ps, n->child) != 0) {
            return -1;
        }
    }
    if (n->b == PL_RE_INF) {
        if (pl_re_nullable(ps, n->child)) {
            return pl_re_fail(ps,
                "unbounded repetition of an expression that can be empty");
        }
        split = pl_re_emit(ps, OP_SPLIT, 0, 0, 0, 0);
        if (split < 0 || pl_re_gen(ps, n->child) != 0
            || pl_re_emit(ps, OP_JMP, 0, split, 0, 0) < 0)
        {
            return -1;
        }
        re->code[split].x = greedy ? split + 1 : (int32_t) re->ncode;
        re->code[split].y = greedy ? (int32_t) re->ncode : split + 1;
        return 0;
    }
    for (k = n->a; k < n->b; k++) {
        split = pl_re_emit(ps, OP_SPLIT, 0, 0, 0, 0);
        if (split < 0 || pl_re_gen(ps, n->child) != 0) {
            return -1;
        }
        pending[npending++] = split;
    }
    for (k = 0; k < npending; k++) {
        split = pending[k];
        re->code[split].x = greedy ? split + 1 : (int32_t) re->ncode;
        re->code[split].y = greedy ? (int32_t) re->ncode : split + 1;
    }
    return 0;
}

static int
pl_re_gen(pl_re_parser_t *ps, int32_t i)
{
    pl_re_node_t  *n = &ps->nodes[i];
    int32_t        c, look;

    switch (n->type) {
    case N_EMPTY:
        return 0;
    case N_CHAR:
        return pl_re_emit(ps, OP_CHAR, n->flag, 0, 0, n->a) < 0 ? -1 : 0;
    case N_ANY:
        return pl_re_emit(ps, OP_ANY, 0, 0, 0, 0) < 0 ? -1 : 0;
    case N_CLASS:
        return pl_re_emit(ps, OP_CLASS, 0, 0, 0, n->a) < 0 ? -1 : 0;
    case N_ASSERT:
        return pl_re_emit(ps, OP_ASSERT, 0, 0, 0, n->a) < 0 ? -1 : 0;
    case N_CAT:
        for (c = n->child; c >= 0; c = ps->nodes[c].next) {
            if (pl_re_gen(ps, c) != 0) {
                return -1;
            }
        }
        return 0;
    case N_ALT:
        return pl_re_gen_alt(ps, n->child);
    case N_REPEAT:
        return pl_re_gen_repeat(ps, n);
    default:
        look = pl_re_emit(ps, OP_LOOK, n->flag, 0, 0, 0);
        if (look < 0 || pl_re_gen(ps, n->child) != 0
            || pl_re_emit(ps, OP_MATCH, 0, 0, 0, 0) < 0)
        {
            return -1;
        }
        ps->re->code[look].x = (int32_t) ps->re->ncode;
        return 0;
    }
}

/* ---- first-byte sets (lets a SPLIT skip a branch that cannot match) ---- */

static void
pl_re_first_add(pl_re_first_t *f, unsigned b)
{
    f->bits[b >> 5] |= (uint32_t) 1 << (b & 31);
}

static void
pl_re_first_union(pl_re_first_t *to, const pl_re_first_t *from)
{
    int  i;

    for (i = 0; i < 8; i++) {
        to->bits[i] |= from->bits[i];
    }
    to->eps |= from->eps;
}

static void
pl_re_first_class(const pl_regex_t *re, const pl_re_class_t *c,
    pl_re_first_t *f)
{
    unsigned  b;
    int       nonascii = c->neg;
    size_t    i;

    for (b = 0; b < 128; b++) {
        if ((c->bmp[b >> 5] >> (b & 31)) & 1) {
            pl_re_first_add(f, b);
        }
    }
    for (i = 4; i < PL_RE_BMP_WORDS && !nonascii; i++) {
        nonascii = (c->bmp[i] != 0);
    }
    for (i = 0; i < c->n && !nonascii; i++) {
        const pl_re_item_t  *it = &re->items[c->first + i];

        nonascii = it->neg || it->kind != CI_RANGE || it->hi >= 0x10000;
    }
    for (b = 0xc2; nonascii && b <= 0xf4; b++) {
        pl_re_first_add(f, b);
    }
}

static void
pl_re_first_of(pl_regex_t *re, size_t pc)
{
    pl_re_first_t       *f = &re->first[pc];
    const pl_re_inst_t  *in = &re->code[pc];
    uint8_t              u8[4];
    unsigned             b;

    if (f->done) {
        return;
    }
    f->done = 1;
    switch (in->op) {
    case OP_CHAR:
        pl_utf8_put(in->c, u8);
        pl_re_first_add(f, u8[0]);
        if (in->flag) {
            pl_re_first_add(f, pl_re_swapcase(in->c));
        }
        break;
    case OP_ANY:
        for (b = 0; b < 256; b++) {
            if (b != '\n') {
                pl_re_first_add(f, b);
            }
        }
        break;
    case OP_CLASS:
        pl_re_first_class(re, &re->classes[in->c], f);
        break;
    case OP_SPLIT:
        pl_re_first_of(re, (size_t) in->x);
        pl_re_first_of(re, (size_t) in->y);
        pl_re_first_union(f, &re->first[in->x]);
        pl_re_first_union(f, &re->first[in->y]);
        break;
    case OP_JMP:
        pl_re_first_of(re, (size_t) in->x);
        pl_re_first_union(f, &re->first[in->x]);
        break;
    default:
        f->eps = 1;
        break;
    }
}

static int
pl_re_first_compute(pl_regex_t *re)
{
    size_t  pc;

    re->first = calloc(re->ncode, sizeof(pl_re_first_t));
    if (re->first == NULL) {
        return -1;
    }
    for (pc = re->ncode; pc-- > 0; ) {
        pl_re_first_of(re, pc);
    }
    return 0;
}

/* Whether the branch at pc can match at pos. */
static inline int
pl_re_can_start(const pl_regex_t *re, int32_t pc, const uint8_t *s,
    size_t len, size_t pos)
{
    const pl_re_first_t  *f = &re->first[pc];

    return f->eps
           || (pos < len && ((f->bits[s[pos] >> 5] >> (s[pos] & 31)) & 1));
}

pl_regex_t *
pl_regex_compile(const char *pattern, size_t len, char *err, size_t errlen)
{
    pl_re_parser_t  ps;
    int32_t         root;

    memset(&ps, 0, sizeof(ps));
    ps.err = err;
    ps.errlen = errlen;
    if (!pl_utf8_valid(pattern, len)) {
        snprintf(err, errlen, "regex: pattern is not valid UTF-8");
        return NULL;
    }
    ps.re = calloc(1, sizeof(pl_regex_t));
    if (ps.re == NULL) {
        snprintf(err, errlen, "regex: out of memory");
        return NULL;
    }
    ps.p = (const uint8_t *) pattern;
    ps.end = ps.p + len;
    root = pl_re_parse_alt(&ps);
    if (root >= 0 && ps.p != ps.end) {
        pl_re_fail(&ps, "unbalanced )");
        root = -1;
    }
    if (root < 0 || pl_re_gen(&ps, root) != 0
        || pl_re_emit(&ps, OP_MATCH, 0, 0, 0, 0) < 0
        || (pl_re_first_compute(ps.re) != 0
            && pl_re_fail(&ps, "out of memory") < 0))
    {
        free(ps.nodes);
        pl_regex_free(ps.re);
        return NULL;
    }
    free(ps.nodes);
    return ps.re;
}

void
pl_regex_free(pl_regex_t *re)
{
    size_t  i;

    if (re == NULL) {
        return;
    }
    for (i = 0; i < re->nclasses; i++) {
        free(re->classes[i].bmp);
    }
    free(re->classes);
    free(re->items);
    free(re->code);
    free(re->first);
    free(re);
}

/* ---- matching ---- */

static inline size_t
pl_re_decode(const uint8_t *s, size_t pos, uint32_t *cp)
{
    if (s[pos] < 0x80) {
        *cp = s[pos];
        return 1;
    }
    return pl_utf8_next(s + pos, cp);
}

static int
pl_re_is_word(const uint8_t *s, size_t len,
    size_t pos, int before)
{
    uint32_t  cp;
    unsigned  p;

    if (before) {
        if (pos == 0) {
            return 0;
        }
        do {
            pos--;
        } while (pos > 0 && (s[pos] & 0xc0) == 0x80);
    } else if (pos >= len) {
        return 0;
    }
    pl_re_decode(s, pos, &cp);
    p = pl_uc_prop(cp);
    return (p & PL_UC_ALPHABETIC)
           || ((PL_RE_M | PL_RE_CAT(ND) | PL_RE_CAT(PC))
               >> (p & PL_UC_CAT_MASK) & 1)
           || cp == 0xb2 || cp == 0xb3 || cp == 0xb9
           || (cp >= 0xbc && cp <= 0xbe);
}

static int
pl_re_assert(const uint8_t *s, size_t len, size_t pos,
    uint32_t kind)
{
    switch (kind) {
    case A_BOL:
        return pos == 0 || s[pos - 1] == '\n';
    case A_EOL:
        return pos == len || s[pos] == '\n';
    case A_BOT:
        return pos == 0;
    case A_EOT:
        return pos == len;
    case A_EOTNL:
        return pos == len || (pos + 1 == len && s[pos] == '\n');
    case A_WORDB:
        return pl_re_is_word(s, len, pos, 1)
               != pl_re_is_word(s, len, pos, 0);
    default:
        return pl_re_is_word(s, len, pos, 1)
               == pl_re_is_word(s, len, pos, 0);
    }
}

static int
pl_re_push(pl_regex_stack_t *st, size_t pc, size_t pos)
{
    if (st->n + 2 > st->cap) {
        size_t   cap = st->cap ? st->cap * 2 : 256;
        size_t  *p = realloc(st->data, cap * sizeof(size_t));

        if (p == NULL) {
            return -1;
        }
        st->data = p;
        st->cap = cap;
    }
    st->data[st->n++] = pc;
    st->data[st->n++] = pos;
    return 0;
}

/* Runs the program from pc at pos; 1 with *end on a match, 0, -1. */
static int
pl_re_run(const pl_regex_t *re, const uint8_t *s, size_t len, size_t pc,
    size_t pos, size_t *end, pl_regex_stack_t *st)
{
    size_t               base = st->n, n;
    const pl_re_inst_t  *in;
    uint32_t             cp;
    int                  r;

    for (;;) {
        in = &re->code[pc];
        switch (in->op) {
        case OP_CHAR:
            if (pos < len) {
                n = pl_re_decode(s, pos, &cp);
                if (cp == in->c
                    || (in->flag && pl_re_swapcase(cp) == in->c))
                {
                    pos += n;
                    pc++;
                    continue;
                }
            }
            break;
        case OP_ANY:
            if (pos < len && s[pos] != '\n') {
                pos += pl_re_decode(s, pos, &cp);
                pc++;
                continue;
            }
            break;
        case OP_CLASS:
            if (pos < len) {
                n = pl_re_decode(s, pos, &cp);
                if (pl_re_class_match(re, &re->classes[in->c], cp)) {
                    pos += n;
                    pc++;
                    continue;
                }
            }
            break;
        case OP_SPLIT:
            if (!pl_re_can_start(re, in->x, s, len, pos)) {
                pc = (size_t) in->y;
                continue;
            }
            if (pl_re_can_start(re, in->y, s, len, pos)
                && pl_re_push(st, (size_t) in->y, pos) != 0)
            {
                return -1;
            }
            pc = (size_t) in->x;
            continue;
        case OP_JMP:
            pc = (size_t) in->x;
            continue;
        case OP_ASSERT:
            if (pl_re_assert(s, len, pos, in->c)) {
                pc++;
                continue;
            }
            break;
        case OP_LOOK:
            r = pl_re_run(re, s, len, pc + 1, pos, &n, st);
            if (r < 0) {
                return -1;
            }
            if (r != in->flag) {
                pc = (size_t) in->x;
                continue;
            }
            break;
        default:
            *end = pos;
            st->n = base;
            return 1;
        }
        if (st->n == base) {
            return 0;
        }
        st->n -= 2;
        pc = st->data[st->n];
        pos = st->data[st->n + 1];
    }
}

int
pl_regex_search(const pl_regex_t *re, const char *s, size_t len,
    size_t from, size_t *mstart, size_t *mend, pl_regex_stack_t *stack)
{
    const uint8_t  *u = (const uint8_t *) s;
    size_t          pos = from;
    int             r;

    for (;;) {
        if (!pl_re_can_start(re, 0, u, len, pos)) {
            r = 0;
        } else {
            r = pl_re_run(re, u, len, 0, pos, mend, stack);
        }
        if (r != 0) {
            *mstart = pos;
            return r;
        }
        if (pos >= len) {
            return 0;
        }
        pos++;
        while (pos < len && (u[pos] & 0xc0) == 0x80) {
            pos++;
        }
    }
}
