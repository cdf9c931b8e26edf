/*
 * pl_jinja_internal: what the files of the Jinja interpreter share; the
 * API is pl_jinja.h.
 *
 * Three stages.  The source is preprocessed the way the reference does it
 * (trailing newline, lstrip_blocks, trim_blocks), then cut into text,
 * {{ expression }} and {% statement %} pieces with whitespace control
 * applied (pl_jinja_lex.c), and parsed by recursive descent into a tree of
 * pl_jn_t nodes allocated from an arena that lives as long as the template
 * (pl_jinja_parse.c).  Rendering walks the tree (pl_jinja_render.c, with
 * the callables, tests and filters in pl_jinja_builtins.c) with values
 * (pl_jv_t, pl_jinja_value.c) allocated from a second arena that is
 * dropped when the render returns, so values need no reference counts.
 * Errors unwind with longjmp to the entry point, which owns every
 * allocation, so nothing leaks on any path.  Loops, output size, macro
 * recursion and expression nesting are bounded.
 */

#ifndef PL_JINJA_INTERNAL_H
#define PL_JINJA_INTERNAL_H

#include <setjmp.h>
#include <stddef.h>

#include "pl_jinja.h"

#define PL_JA_CHUNK        (64 * 1024)
#define PL_J_MAX_DEPTH     64
#define PL_J_MAX_OUTPUT    (16 * 1024 * 1024)
#define PL_J_MAX_RANGE     100000
#define PL_J_MAX_CALLS     64
#define PL_J_MAX_STEPS     1000000
#define PL_J_MAX_ITEMS     1000000
#define PL_J_MAX_MEMORY    (256 << 20)

/* ---- arena ---- */

typedef struct pl_ja_chunk_s  pl_ja_chunk_t;

struct pl_ja_chunk_s {
    pl_ja_chunk_t  *next;
    size_t          used;
    size_t          size;
    max_align_t     data[];
};

typedef struct {
    pl_ja_chunk_t  *head;
    size_t          total;
} pl_ja_t;

/* ---- values ---- */

typedef enum {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT,
    JV_MACRO
} pl_jv_type_t;

typedef struct pl_jstr_s   pl_jstr_t;
typedef struct pl_jlist_s  pl_jlist_t;
typedef struct pl_jdict_s  pl_jdict_t;
typedef struct pl_jn_s     pl_jn_t;

typedef struct {
    int  type;
    union {
        int               b;
        long long         i;
        double            f;
        pl_jstr_t        *s;
        pl_jlist_t       *l;
        pl_jdict_t       *d;
        const pl_jn_t    *m;
    } u;
} pl_jv_t;

struct pl_jstr_s {
    size_t  n;
    char    s[];
};

struct pl_jlist_s {
    size_t    n;
    size_t    cap;
    pl_jv_t  *v;
    int       tuple;   /* printed (a, b), as a Python tuple */
};

struct pl_jdict_s {
    size_t       n;
    size_t       cap;
    pl_jstr_t  **k;
    pl_jv_t     *v;
    int          ns;       /* a namespace(): attributes may be set */
};

/* ---- tree ---- */

enum {
    S_TEXT, S_OUT, S_IF, S_FOR, S_SET, S_BLOCKSET, S_MACRO, S_BREAK,
    S_CONTINUE,
    E_LIT, E_NAME, E_ATTR, E_INDEX, E_SLICE, E_CALL, E_KWARG, E_FILTER,
    E_TEST, E_BIN, E_NOT, E_NEG, E_COND, E_LIST, E_DICT, E_PAIR, E_AND,
    E_OR
};

enum {
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FDIV, OP_MOD, OP_POW, OP_CAT, OP_EQ,
    OP_NE, OP_LT, OP_GT, OP_LE, OP_GE, OP_IN, OP_NOTIN
};

struct pl_jn_s {
    int         kind;
    int         op;
    pl_jn_t    *a;
    pl_jn_t    *b;
    pl_jn_t    *c;
    pl_jn_t    *d;
    pl_jn_t    *e;
    pl_jn_t    *next;
    pl_jstr_t  *name;
    pl_jv_t     lit;
    size_t      pos;
};

struct pl_jinja_s {
    pl_ja_t   arena;
    pl_jn_t  *body;
};

/* ---- shared context (parser and renderer) ---- */

typedef struct pl_jframe_s  pl_jframe_t;

struct pl_jframe_s {
    pl_jframe_t  *parent;
    pl_jdict_t   *vars;
};

typedef struct {
    char   *p;
    size_t  n;
    size_t  cap;
} pl_jbuf_t;

typedef struct {
    jmp_buf        jb;
    pl_ja_t       *arena;
    char          *err;
    size_t         errlen;
    /* parser */
    const char    *src;
    size_t         srclen;
    size_t         pos;
    size_t         end;       /* end of the current tag's contents */
    struct pl_jpiece_s  *pieces;
    size_t         npieces;
    size_t         ipiece;
    int            depth;
    /* renderer */
    pl_jbuf_t     *out;
    pl_jframe_t   *globals;
    int            calls;
    int            loopctl;   /* 1 break, 2 continue */
    long           steps;     /* loop iterations so far */
    pl_jbuf_t     *bufs[PL_J_MAX_CALLS + 2];
    int            nbufs;
} pl_jctx_t;

/* ---- lexer ---- */

enum {
    T_EOF, T_NAME, T_STR, T_INT, T_FLOAT, T_OP
};

typedef struct {
    int          type;
    const char  *s;
    size_t       n;
    pl_jstr_t   *str;
    long long    i;
    double       f;
} pl_jtok_t;

/* ---- template structure ---- */

typedef struct pl_jpiece_s {
    int     kind;       /* 0 text, 1 expression, 2 statement */
    size_t  start;      /* contents, delimiters and '-' excluded */
    size_t  end;
    int     lstrip;     /* '-' after the opening delimiter */
    int     rstrip;     /* '-' before the closing delimiter */
} pl_jpiece_t;

/* ---- call arguments ---- */

#define PL_J_MAX_ARGS  8

typedef struct {
    pl_jv_t      pos[PL_J_MAX_ARGS];
    int          npos;
    pl_jstr_t   *kwname[PL_J_MAX_ARGS];
    pl_jv_t      kw[PL_J_MAX_ARGS];
    int          nkw;
} pl_jargs_t;

/* json.dumps' options, as transformers' tojson passes them: indent (-1:
   one line), the separators, sort_keys */
typedef struct {
    int          indent;
    const char  *item_sep;
    const char  *key_sep;
    int          sort_keys;
    int          ascii;      /* ensure_ascii: \uXXXX beyond ASCII */
} pl_jjson_t;

/* pl_jinja_value.c: arena, values, output buffers, printing and JSON */

void pl_ja_free(pl_ja_t *a);
void pl_j_fail(pl_jctx_t *c, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 2, 3)));
void *pl_j_alloc(pl_jctx_t *c, size_t size);
pl_jstr_t *pl_j_str(pl_jctx_t *c, const char *s, size_t n);
pl_jv_t pl_jv_str(pl_jctx_t *c, const char *s, size_t n);
pl_jv_t pl_jv_int(long long i);
pl_jv_t pl_jv_float(double f);
pl_jv_t pl_jv_bool(int b);
pl_jv_t pl_jv_of(int type);
pl_jv_t pl_jv_list(pl_jctx_t *c);
pl_jv_t pl_jv_dict(pl_jctx_t *c);
void pl_jlist_push(pl_jctx_t *c, pl_jlist_t *l, pl_jv_t v);
pl_jv_t *pl_jdict_find(const pl_jdict_t *d, const char *k, size_t n);
void pl_jdict_set(pl_jctx_t *c, pl_jdict_t *d, pl_jstr_t *k, pl_jv_t v);
void pl_jdict_setc(pl_jctx_t *c, pl_jdict_t *d, const char *k, pl_jv_t v);
const char *pl_jv_typename(const pl_jv_t *v);
void pl_jbuf_add(pl_jctx_t *c, pl_jbuf_t *b, const char *s, size_t n);
void pl_jbuf_cstr(pl_jctx_t *c, pl_jbuf_t *b, const char *s);
pl_jbuf_t *pl_jbuf_open(pl_jctx_t *c);
pl_jv_t pl_jbuf_close(pl_jctx_t *c, pl_jbuf_t *b);
void pl_j_json(pl_jctx_t *c, pl_jbuf_t *b, const pl_jv_t *v,
    const pl_jjson_t *o, int depth);
void pl_j_print(pl_jctx_t *c, pl_jbuf_t *b, const pl_jv_t *v);
pl_jv_t pl_j_tostring(pl_jctx_t *c, const pl_jv_t *v);
pl_jv_t pl_j_reprstring(pl_jctx_t *c, const pl_jv_t *v, int sorted);
int pl_j_truthy(const pl_jv_t *v);
int pl_j_isnum(const pl_jv_t *v);
double pl_j_num(const pl_jv_t *v);
int pl_j_equal(const pl_jv_t *a, const pl_jv_t *b);
size_t pl_j_cplen(const pl_jstr_t *s);
size_t pl_j_length(pl_jctx_t *c, const pl_jv_t *v);
pl_jlist_t *pl_j_iterable(pl_jctx_t *c, const pl_jv_t *v);
pl_jv_t pl_j_get_attr(const pl_jv_t *obj, const char *name, size_t n);
pl_jv_t pl_j_index(pl_jctx_t *c, const pl_jv_t *obj, const pl_jv_t *key);
pl_jv_t pl_j_slice(pl_jctx_t *c, const pl_jv_t *obj, const pl_jv_t *lo,
    const pl_jv_t *hi, const pl_jv_t *st);

/* pl_jinja_lex.c: preprocessing, pieces, tokens */

void pl_j_skip_ws(pl_jctx_t *c);
pl_jtok_t pl_j_lex(pl_jctx_t *c);
pl_jtok_t pl_j_peek(pl_jctx_t *c);
int pl_j_is(const pl_jtok_t *t, int type, const char *s);
int pl_j_accept(pl_jctx_t *c, int type, const char *s);
void pl_j_expect(pl_jctx_t *c, int type, const char *s);
pl_jstr_t *pl_j_expect_name(pl_jctx_t *c);
char *pl_j_preprocess(const char *src, size_t len, size_t *outlen);
void pl_j_split(pl_jctx_t *c);

/* pl_jinja_builtins.c: calls, methods, tests and filters */

void pl_j_eval_args(pl_jctx_t *c, pl_jframe_t *f, const pl_jn_t *n,
    pl_jargs_t *a);
const pl_jstr_t *pl_j_want_str(pl_jctx_t *c, const pl_jv_t *v,
    const char *what);
pl_jv_t pl_j_call(pl_jctx_t *c, pl_jframe_t *f, const pl_jn_t *n);
int pl_j_global_test(const pl_jn_t *subject, const pl_jstr_t *test);
int pl_j_test(pl_jctx_t *c, const pl_jstr_t *name, const pl_jv_t *v,
    const pl_jargs_t *a);
pl_jv_t pl_j_filter(pl_jctx_t *c, pl_jframe_t *f, const char *t, pl_jv_t v,
    const pl_jargs_t *a);
pl_jv_t pl_j_arg(const pl_jargs_t *a, int i, const char *name);
pl_jv_t pl_j_case(pl_jctx_t *c, const pl_jstr_t *s, int how);
pl_jv_t pl_j_escape(pl_jctx_t *c, const pl_jv_t *v);
pl_jv_t pl_j_dict_items(pl_jctx_t *c, const pl_jdict_t *d, int what);

/* pl_jinja_filters.c: the rest of jinja2's builtin filters */

pl_jv_t pl_j_sort_list(pl_jctx_t *c, const pl_jlist_t *l, const pl_jv_t *attr,
    int cs, int reverse);
int pl_j_filter_more(pl_jctx_t *c, const char *t, const pl_jv_t *v,
    const pl_jargs_t *a, pl_jv_t *out);

/* pl_jinja_render.c: variables, operators, evaluation, statements */

pl_jframe_t *pl_j_frame(pl_jctx_t *c, pl_jframe_t *parent);
pl_jv_t pl_j_lookup(pl_jframe_t *f, const pl_jstr_t *name);
const char *pl_j_find(const char *h, size_t hn, const char *n, size_t nn);
int pl_j_contains(pl_jctx_t *c, const pl_jv_t *hay, const pl_jv_t *needle);
int pl_j_compare_order(pl_jctx_t *c, const pl_jv_t *a, const pl_jv_t *b);
pl_jv_t pl_j_eval(pl_jctx_t *c, pl_jframe_t *f, const pl_jn_t *n);
void pl_j_exec(pl_jctx_t *c, pl_jframe_t *f, const pl_jn_t *n);

#endif /* PL_JINJA_INTERNAL_H */
