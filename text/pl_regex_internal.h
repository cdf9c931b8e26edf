/*
 * pl_regex_internal: what pl_regex.c (parser, code generator, matcher) and
 * pl_regex_class.c (character classes) share; the API is pl_regex.h.
 */

#ifndef PL_REGEX_INTERNAL_H
#define PL_REGEX_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "pl_regex.h"
#include "pl_unicode.h"

#define PL_RE_MAX_REPEAT  1000
#define PL_RE_MAX_CODE    200000
#define PL_RE_MAX_DEPTH   100
#define PL_RE_INF         UINT32_MAX
#define PL_RE_BMP_WORDS   (65536 / 32)
#define PL_RE_CAT(x)      ((uint32_t) 1 << PL_UC_##x)

enum {
    N_EMPTY, N_CHAR, N_ANY, N_CLASS, N_CAT, N_ALT, N_REPEAT, N_LOOK,
    N_ASSERT
};

enum {
    A_BOL, A_EOL, A_BOT, A_EOT, A_EOTNL, A_WORDB, A_NWORDB
};

enum {
    OP_CHAR, OP_ANY, OP_CLASS, OP_SPLIT, OP_JMP, OP_LOOK, OP_MATCH,
    OP_ASSERT
};

enum {
    CI_RANGE, CI_CATS, CI_PROPS, CI_CLASS
};

typedef struct {
    uint8_t   type;
    uint8_t   flag;
    int32_t   child;
    int32_t   next;
    uint32_t  a;
    uint32_t  b;
} pl_re_node_t;

typedef struct {
    uint8_t   kind;
    uint8_t   neg;
    uint32_t  lo;
    uint32_t  hi;
} pl_re_item_t;

typedef struct {
    pl_re_item_t  *v;
    size_t         n;
    size_t         cap;
} pl_re_items_t;

typedef struct {
    uint32_t  *bmp;
    size_t     first;
    size_t     n;
    uint8_t    neg;
    uint8_t    fold;
} pl_re_class_t;

typedef struct {
    uint8_t   op;
    uint8_t   flag;
    int32_t   x;
    int32_t   y;
    uint32_t  c;
} pl_re_inst_t;

/* Bytes that can start a match from an instruction; eps: it may also
   succeed without consuming (or depends on an assertion). */
typedef struct {
    uint32_t  bits[8];
    int       eps;
    int       done;
} pl_re_first_t;

struct pl_regex_s {
    pl_re_inst_t   *code;
    size_t          ncode;
    pl_re_first_t  *first;
    pl_re_class_t  *classes;
    size_t          nclasses;
    pl_re_item_t   *items;
    size_t          nitems;
};

typedef struct {
    const uint8_t  *p;
    const uint8_t  *end;
    int             fold;
    pl_re_node_t   *nodes;
    size_t          nnodes;
    size_t          capnodes;
    size_t          capcode;
    size_t          capclasses;
    size_t          capitems;
    pl_regex_t     *re;
    char           *err;
    size_t          errlen;
    int             failed;
    int             depth;
} pl_re_parser_t;

#define PL_RE_L  (PL_RE_CAT(LU) | PL_RE_CAT(LL) | PL_RE_CAT(LT) \
                  | PL_RE_CAT(LM) | PL_RE_CAT(LO))
#define PL_RE_M  (PL_RE_CAT(MN) | PL_RE_CAT(MC) | PL_RE_CAT(ME))
#define PL_RE_N  (PL_RE_CAT(ND) | PL_RE_CAT(NL) | PL_RE_CAT(NO))
#define PL_RE_P  (PL_RE_CAT(PC) | PL_RE_CAT(PD) | PL_RE_CAT(PS) \
                  | PL_RE_CAT(PE) | PL_RE_CAT(PI) | PL_RE_CAT(PF) \
                  | PL_RE_CAT(PO))
#define PL_RE_S  (PL_RE_CAT(SM) | PL_RE_CAT(SC) | PL_RE_CAT(SK) \
                  | PL_RE_CAT(SO))
#define PL_RE_Z  (PL_RE_CAT(ZS) | PL_RE_CAT(ZL) | PL_RE_CAT(ZP))
#define PL_RE_C  (PL_RE_CAT(CC) | PL_RE_CAT(CF) | PL_RE_CAT(CS) \
                  | PL_RE_CAT(CO) | PL_RE_CAT(CN))

/* what pl_re_escape() found */
enum {
    ESC_ERROR = -1, ESC_SET = 0, ESC_LITERAL = 1, ESC_ASSERT = 2
};

/* pl_regex.c */

int pl_re_fail(pl_re_parser_t *ps, const char *what);
int pl_re_grow(void **p, size_t *cap, size_t need, size_t size);
int pl_re_class_eval(const pl_regex_t *re, const pl_re_class_t *c,
    uint32_t cp);

/* pl_regex_class.c */

int32_t pl_re_class_make(pl_re_parser_t *ps, pl_re_items_t *l, int neg,
    int fold);
int pl_re_escape(pl_re_parser_t *ps, pl_re_items_t *to, uint32_t *cp,
    int in_class);
int32_t pl_re_parse_class(pl_re_parser_t *ps);

#endif /* PL_REGEX_INTERNAL_H */
