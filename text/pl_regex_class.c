/*
 * pl_regex_class: builds the character classes of pl_regex.  A class is a
 * union of items (ranges, general-category masks, property masks, nested
 * classes, each possibly negated), flattened here into a bitmap over the
 * Basic Multilingual Plane.  This file parses [...] classes, escapes
 * (\d, \w, \s, \p{...}, \x, \u) and Unicode property names into
 * them; pl_regex.c tests a code point against one while matching.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pl_regex_internal.h"

typedef struct {
    const char  *name;
    int          props;
    uint32_t     mask;
} pl_re_prop_name_t;

static const pl_re_prop_name_t  pl_re_prop_names[] = {
    { "L", 0, PL_RE_L }, { "Letter", 0, PL_RE_L },
    { "Lu", 0, PL_RE_CAT(LU) }, { "Ll", 0, PL_RE_CAT(LL) },
    { "Lt", 0, PL_RE_CAT(LT) }, { "Lm", 0, PL_RE_CAT(LM) },
    { "Lo", 0, PL_RE_CAT(LO) },
    { "LC", 0, PL_RE_CAT(LU) | PL_RE_CAT(LL) | PL_RE_CAT(LT) },
    { "M", 0, PL_RE_M }, { "Mark", 0, PL_RE_M },
    { "Mn", 0, PL_RE_CAT(MN) }, { "Mc", 0, PL_RE_CAT(MC) },
    { "Me", 0, PL_RE_CAT(ME) },
    { "N", 0, PL_RE_N }, { "Number", 0, PL_RE_N },
    { "Nd", 0, PL_RE_CAT(ND) }, { "Nl", 0, PL_RE_CAT(NL) },
    { "No", 0, PL_RE_CAT(NO) },
    { "P", 0, PL_RE_P }, { "Punctuation", 0, PL_RE_P },
    { "Pc", 0, PL_RE_CAT(PC) }, { "Pd", 0, PL_RE_CAT(PD) },
    { "Ps", 0, PL_RE_CAT(PS) }, { "Pe", 0, PL_RE_CAT(PE) },
    { "Pi", 0, PL_RE_CAT(PI) }, { "Pf", 0, PL_RE_CAT(PF) },
    { "Po", 0, PL_RE_CAT(PO) },
    { "S", 0, PL_RE_S }, { "Symbol", 0, PL_RE_S },
    { "Sm", 0, PL_RE_CAT(SM) }, { "Sc", 0, PL_RE_CAT(SC) },
    { "Sk", 0, PL_RE_CAT(SK) }, { "So", 0, PL_RE_CAT(SO) },
    { "Z", 0, PL_RE_Z }, { "Separator", 0, PL_RE_Z },
    { "Zs", 0, PL_RE_CAT(ZS) }, { "Zl", 0, PL_RE_CAT(ZL) },
    { "Zp", 0, PL_RE_CAT(ZP) },
    { "C", 0, PL_RE_C }, { "Other", 0, PL_RE_C },
    { "Cc", 0, PL_RE_CAT(CC) }, { "Cf", 0, PL_RE_CAT(CF) },
    { "Cs", 0, PL_RE_CAT(CS) }, { "Co", 0, PL_RE_CAT(CO) },
    { "Cn", 0, PL_RE_CAT(CN) },
    { "Alphabetic", 1, PL_UC_ALPHABETIC }, { "Alpha", 1, PL_UC_ALPHABETIC },
    { "White_Space", 1, PL_UC_WHITE_SPACE },
    { "Space", 1, PL_UC_WHITE_SPACE },
};

/* ---- building classes ---- */

static int
pl_re_add_item(pl_re_parser_t *ps, pl_re_items_t *l, int kind, int neg,
    uint32_t lo, uint32_t hi)
{
    pl_re_item_t  *it;

    if (pl_re_grow((void **) &l->v, &l->cap, l->n + 1, sizeof(pl_re_item_t))
        != 0)
    {
        return pl_re_fail(ps, "out of memory");
    }
    it = &l->v[l->n++];
    it->kind = (uint8_t) kind;
    it->neg = (uint8_t) neg;
    it->lo = lo;
    it->hi = hi;
    return 0;
}

/* Turns an item list into a class (bitmap included); its index or -1. */
int32_t
pl_re_class_make(pl_re_parser_t *ps, pl_re_items_t *l, int neg, int fold)
{
    pl_regex_t     *re = ps->re;
    pl_re_class_t  *c;
    size_t          idx;
    uint32_t        cp;

    if (pl_re_grow((void **) &re->items, &ps->capitems, re->nitems + l->n,
                   sizeof(pl_re_item_t)) != 0
        || pl_re_grow((void **) &re->classes, &ps->capclasses,
                      re->nclasses + 1, sizeof(pl_re_class_t)) != 0)
    {
        return pl_re_fail(ps, "out of memory");
    }
    idx = re->nclasses++;
    c = &re->classes[idx];
    c->first = re->nitems;
    c->n = l->n;
    c->neg = (uint8_t) neg;
    c->fold = (uint8_t) fold;
    if (l->n) {
        memcpy(re->items + re->nitems, l->v, l->n * sizeof(pl_re_item_t));
    }
    re->nitems += l->n;
    c->bmp = calloc(PL_RE_BMP_WORDS, sizeof(uint32_t));
    if (c->bmp == NULL) {
        return pl_re_fail(ps, "out of memory");
    }
    for (cp = 0; cp < 0x10000; cp++) {
        if (pl_re_class_eval(re, c, cp)) {
            c->bmp[cp >> 5] |= (uint32_t) 1 << (cp & 31);
        }
    }
    return (int32_t) idx;
}

/* \w as the tokenizers reference sees it (Alphabetic, marks, Nd, Pc and
   the Latin-1 superscript digits and fractions), or \h: nested classes. */
static int
pl_re_add_builtin(pl_re_parser_t *ps, pl_re_items_t *to, int which, int neg)
{
    pl_re_items_t  l = { NULL, 0, 0 };
    int32_t        idx;
    int            rc = 0;

    if (which == 'w') {
        rc |= pl_re_add_item(ps, &l, CI_PROPS, 0, PL_UC_ALPHABETIC, 0);
        rc |= pl_re_add_item(ps, &l, CI_CATS, 0,
                             PL_RE_M | PL_RE_CAT(ND) | PL_RE_CAT(PC), 0);
        rc |= pl_re_add_item(ps, &l, CI_RANGE, 0, 0xb2, 0xb3);
        rc |= pl_re_add_item(ps, &l, CI_RANGE, 0, 0xb9, 0xb9);
        rc |= pl_re_add_item(ps, &l, CI_RANGE, 0, 0xbc, 0xbe);
    } else {
        rc |= pl_re_add_item(ps, &l, CI_RANGE, 0, '0', '9');
        rc |= pl_re_add_item(ps, &l, CI_RANGE, 0, 'a', 'f');
        rc |= pl_re_add_item(ps, &l, CI_RANGE, 0, 'A', 'F');
    }
    idx = rc ? -1 : pl_re_class_make(ps, &l, 0, 0);
    free(l.v);
    if (idx < 0) {
        return -1;
    }
    return pl_re_add_item(ps, to, CI_CLASS, neg, (uint32_t) idx, 0);
}

static int
pl_re_add_property(pl_re_parser_t *ps, pl_re_items_t *to, int neg)
{
    const uint8_t  *start;
    char            name[64];
    size_t          n, i;

    if (ps->p < ps->end && *ps->p == '{') {
        start = ++ps->p;
        while (ps->p < ps->end && *ps->p != '}') {
            ps->p++;
        }
        if (ps->p == ps->end) {
            return pl_re_fail(ps, "unterminated \\p{...}");
        }
        n = (size_t) (ps->p++ - start);
    } else if (ps->p < ps->end) {
        start = ps->p++;
        n = 1;
    } else {
        return pl_re_fail(ps, "\\p at the end of the pattern");
    }
    if (n > 0 && *start == '^') {
        neg = !neg;
        start++;
        n--;
    }
    if (n >= sizeof(name)) {
        return pl_re_fail(ps, "unsupported Unicode property name");
    }
    memcpy(name, start, n);
    name[n] = '\0';
    for (i = 0; i < sizeof(pl_re_prop_names) / sizeof(pl_re_prop_names[0]);
         i++)
    {
        if (strcmp(pl_re_prop_names[i].name, name) == 0) {
            return pl_re_add_item(ps, to,
                pl_re_prop_names[i].props ? CI_PROPS : CI_CATS, neg,
                pl_re_prop_names[i].mask, 0);
        }
    }
    if (!ps->failed) {
        snprintf(ps->err, ps->errlen,
                 "regex: unsupported Unicode property \\p{%s}", name);
        ps->failed = 1;
    }
    return -1;
}

static int
pl_re_hex(pl_re_parser_t *ps, size_t maxdigits, int braced, uint32_t *cp)
{
    uint32_t  v = 0;
    size_t    n = 0;

    while (ps->p < ps->end && n < maxdigits) {
        int  c = *ps->p, d;

        if (c >= '0' && c <= '9') {
            d = c - '0';
        } else if ((c | 32) >= 'a' && (c | 32) <= 'f') {
            d = (c | 32) - 'a' + 10;
        } else {
            break;
        }
        v = v * 16 + (uint32_t) d;
        n++;
        ps->p++;
        if (v > 0x10ffff) {
            return pl_re_fail(ps, "code point out of range");
        }
    }
    if (n == 0 || (braced && (ps->p == ps->end || *ps->p++ != '}'))) {
        return pl_re_fail(ps, "bad hexadecimal escape");
    }
    *cp = v;
    return 0;
}

static int
pl_re_escape_unsupported(pl_re_parser_t *ps, int c)
{
    char  msg[64];

    snprintf(msg, sizeof(msg), "unsupported escape \\%c", c);
    return pl_re_fail(ps, msg);
}

/*
 * The escape after a backslash: a literal (ESC_LITERAL, *cp), a set added
 * to "to" (ESC_SET), an assertion outside classes (ESC_ASSERT, kind in
 * *cp) or ESC_ERROR.
 */
int
pl_re_escape(pl_re_parser_t *ps, pl_re_items_t *to, uint32_t *cp,
    int in_class)
{
    static const char  lits[] = "n\nr\rt\tf\fv\va\ae\x1b";
    const char        *l;
    int                c;

    if (ps->p == ps->end) {
        return pl_re_fail(ps, "trailing backslash");
    }
    c = *ps->p++;
    for (l = lits; *l; l += 2) {
        if (c == l[0]) {
            *cp = (uint8_t) l[1];
            return ESC_LITERAL;
        }
    }
    switch (c) {
    case '0':
        *cp = 0;
        return ESC_LITERAL;
    case 'x':
        if (ps->p < ps->end && *ps->p == '{') {
            ps->p++;
            return pl_re_hex(ps, 8, 1, cp) == 0 ? ESC_LITERAL : ESC_ERROR;
        }
        return pl_re_hex(ps, 2, 0, cp) == 0 ? ESC_LITERAL : ESC_ERROR;
    case 'u':
        return pl_re_hex(ps, 4, 0, cp) == 0 ? ESC_LITERAL : ESC_ERROR;
    case 's': case 'S':
        return pl_re_add_item(ps, to, CI_PROPS, c == 'S', PL_UC_WHITE_SPACE,
                              0);
    case 'd': case 'D':
        return pl_re_add_item(ps, to, CI_CATS, c == 'D', PL_RE_CAT(ND), 0);
    case 'w': case 'W':
        return pl_re_add_builtin(ps, to, 'w', c == 'W');
    case 'h': case 'H':
        return pl_re_add_builtin(ps, to, 'h', c == 'H');
    case 'p': case 'P':
        return pl_re_add_property(ps, to, c == 'P');
    case 'A': case 'z': case 'Z': case 'b': case 'B':
        if (in_class) {
            return pl_re_escape_unsupported(ps, c);
        }
        *cp = (c == 'A') ? A_BOT : (c == 'z') ? A_EOT
              : (c == 'Z') ? A_EOTNL : (c == 'b') ? A_WORDB : A_NWORDB;
        return ESC_ASSERT;
    default:
        break;
    }
    if ((c >= '1' && c <= '9') || (c >= 'a' && c <= 'z')
        || (c >= 'A' && c <= 'Z'))
    {
        return pl_re_escape_unsupported(ps, c);
    }
    if (c >= 0x80) {
        ps->p--;
        ps->p += pl_utf8_next(ps->p, cp);
        return ESC_LITERAL;
    }
    *cp = (uint32_t) c;
    return ESC_LITERAL;
}

/* One class member: literal (returned in *cp, result 1) or set (0). */
static int
pl_re_class_atom(pl_re_parser_t *ps, pl_re_items_t *l, uint32_t *cp)
{
    int32_t  idx;

    if (*ps->p == '[') {
        if (ps->p + 1 < ps->end && ps->p[1] == ':') {
            return pl_re_fail(ps, "POSIX bracket classes are not supported");
        }
        if (ps->depth >= PL_RE_MAX_DEPTH) {
            return pl_re_fail(ps, "classes nested too deeply");
        }
        ps->p++;
        ps->depth++;
        idx = pl_re_parse_class(ps);
        ps->depth--;
        if (idx < 0) {
            return -1;
        }
        return pl_re_add_item(ps, l, CI_CLASS, 0, (uint32_t) idx, 0);
    }
    if (*ps->p == '\\') {
        ps->p++;
        return pl_re_escape(ps, l, cp, 1);
    }
    ps->p += pl_utf8_next(ps->p, cp);
    return 1;
}

/* After '[': parses up to and including ']'; the class index or -1. */
int32_t
pl_re_parse_class(pl_re_parser_t *ps)
{
    pl_re_items_t  l = { NULL, 0, 0 };
    int            neg = 0, first = 1, r;
    int32_t        idx = -1;
    uint32_t       lo, hi;

    if (ps->p < ps->end && *ps->p == '^') {
        neg = 1;
        ps->p++;
    }
    for (;;) {
        if (ps->p == ps->end) {
            pl_re_fail(ps, "unterminated character class");
            goto done;
        }
        if (*ps->p == ']' && !first) {
            ps->p++;
            break;
        }
        if (*ps->p == '&' && ps->p + 1 < ps->end && ps->p[1] == '&') {
            pl_re_fail(ps, "class intersection && is not supported");
            goto done;
        }
        first = 0;
        r = pl_re_class_atom(ps, &l, &lo);
        if (r < 0) {
            goto done;
        }
        if (r == 0) {
            continue;
        }
        hi = lo;
        if (ps->p + 1 < ps->end && *ps->p == '-' && ps->p[1] != ']') {
            ps->p++;
            r = pl_re_class_atom(ps, &l, &hi);
            if (r < 0) {
                goto done;
            }
            if (r == 0 || hi < lo) {
                pl_re_fail(ps, "bad range in character class");
                goto done;
            }
        }
        if (pl_re_add_item(ps, &l, CI_RANGE, 0, lo, hi) != 0) {
            goto done;
        }
    }
    idx = pl_re_class_make(ps, &l, neg, ps->fold);
done:
    free(l.v);
    return idx;
}
