/*
 * regex_fuzz: a libFuzzer target for the regex parser (grammar/gr_parse.c,
 * guided_regex and JSON Schema's pattern) and the automaton it compiles
 * to.  The first byte of an input picks one of two modes:
 *
 *   even: the rest is a regex as a client sends it (seeds: the regexes of
 *     t/fixtures/grammar/regexes.json).  pl_grammar_from_regex() and
 *     pl_grammar_compile() refuse it with a message or compile it; a
 *     compiled one gets the automaton checks of fuzz_grammar.h, on
 *     strings sampled with the input's bytes as the choices.
 *
 *   odd: the rest chooses a regex in the syntax JavaScript and POSIX
 *     extended regexes share (literals a b c 0 1, ".", bracket classes
 *     with ranges and "^", groups, "|", * + ? {m} {m,} {m,n}, two
 *     quantifiers nested at most), which is compiled here and by the C
 *     library's regcomp() as ^(...)$; on
 *     strings of a b c 0 1 x chosen by the input and on strings sampled
 *     from the automaton, the two agree on what matches.  The strings
 *     hold no newline and no byte above 0x7f, where JavaScript's "." and
 *     a POSIX bracket in the C locale differ.
 *
 *     make fuzz-regex SECONDS=60
 */

#include <regex.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_grammar.h"

#define FR_MAX_RE     512       /* bytes of a chosen regex */
#define FR_MAX_NODES  24        /* pieces of a chosen regex */
#define FR_MAX_STR    24        /* bytes of a chosen string */
#define FR_MAX_REPS   2         /* quantifiers nested in a chosen regex:
                                   glibc's regcomp and regexec take
                                   minutes on ((((a)*){1,}){3,}){2,4} */

static const char  fr_lits[] = "abc01";
static const char  fr_chars[] = "abc01x";

typedef struct {
    fg_rand_t   r;
    char        re[FR_MAX_RE];
    size_t      len;
    int         nodes;
} fr_gen_t;


static void
fr_put(fr_gen_t *g, const char *s)
{
    size_t  n = strlen(s);

    if (g->len + n < FR_MAX_RE) {
        memcpy(g->re + g->len, s, n + 1);
        g->len += n;
    }
}


static void
fr_class(fr_gen_t *g)
{
    char      one[4] = { 0 };
    unsigned  i, n = 1 + fg_take(&g->r) % 3, lo, hi;

    fr_put(g, fg_take(&g->r) % 3 == 0 ? "[^" : "[");
    for (i = 0; i < n; i++) {
        lo = fg_take(&g->r) % 5;
        hi = lo + fg_take(&g->r) % (5 - lo);
        one[0] = fr_lits[lo];
        fr_put(g, one);
        if (hi > lo && fr_lits[hi] >= fr_lits[lo]) {
            one[0] = '-';
            one[1] = fr_lits[hi];
            fr_put(g, one);
            one[1] = '\0';
        }
    }
    fr_put(g, "]");
}


static void
fr_quantifier(fr_gen_t *g)
{
    static const char *const  q[] = { "*", "+", "?" };
    char                      b[16];
    unsigned                  k = fg_take(&g->r) % 6, m, n;

    if (k < 3) {
        fr_put(g, q[k]);
        return;
    }
    m = fg_take(&g->r) % 4;
    n = m + fg_take(&g->r) % 3;
    if (k == 3) {
        snprintf(b, sizeof(b), "{%u}", m);
    } else if (k == 4) {
        snprintf(b, sizeof(b), "{%u,}", m);
    } else {
        snprintf(b, sizeof(b), "{%u,%u}", m, n);
    }
    fr_put(g, b);
}


/* one piece of the regex, depth levels deep at most, inside reps
   quantifiers */
static void
fr_piece(fr_gen_t *g, int depth, int reps)
{
    char      one[2] = { 0 };
    unsigned  k = fg_take(&g->r) % 8, i, n;

    if (++g->nodes > FR_MAX_NODES || depth == 0) {
        k %= 3;
    }
    if (k >= 6 && reps == FR_MAX_REPS) {
        k = 4;
    }
    switch (k) {
    case 0:
    case 1:
        one[0] = fr_lits[fg_take(&g->r) % 5];
        fr_put(g, one);
        return;
    case 2:
        fr_put(g, ".");
        return;
    case 3:
        fr_class(g);
        return;
    case 4:
        n = 2 + fg_take(&g->r) % 2;
        for (i = 0; i < n; i++) {
            fr_piece(g, depth - 1, reps);
        }
        return;
    case 5:
        fr_put(g, "(");
        fr_piece(g, depth - 1, reps);
        fr_put(g, "|");
        fr_piece(g, depth - 1, reps);
        fr_put(g, ")");
        return;
    default:
        fr_put(g, "(");
        fr_piece(g, depth - 1, reps + 1);
        fr_put(g, ")");
        fr_quantifier(g);
    }
}


/* whether the automaton and regexec agree on s */
static void
fr_agree(pl_grammar_t *gr, regex_t *px, const char *re, const uint8_t *s,
    size_t n)
{
    char  str[FG_MAX_SAMPLE + 1];
    int   ours, theirs;

    memcpy(str, s, n);
    str[n] = '\0';
    ours = pl_grammar_accepts(gr, pl_grammar_walk(gr, pl_grammar_start(gr),
                                                  s, n));
    theirs = regexec(px, str, 0, NULL, 0) == 0;
    if (ours != theirs) {
        fprintf(stderr, "regex_fuzz: /%s/ on \"%s\": ours %d, regexec %d\n",
                re, str, ours, theirs);
        abort();
    }
}


/* whether s (n bytes) holds only what both matchers read alike */
static int
fr_plain(const uint8_t *s, size_t n)
{
    size_t  i;

    for (i = 0; i < n; i++) {
        if (s[i] < 0x20 || s[i] > 0x7e) {
            return 0;
        }
    }

    return 1;
}


static void
fr_compare(fg_rand_t *r)
{
    static uint8_t  out[FG_MAX_SAMPLE];
    fr_gen_t        g = { .r = *r };
    pl_gtext_t      text = { 0 };
    pl_grammar_t   *gr;
    regex_t         px;
    char            anchored[FR_MAX_RE + 8], err[256];
    uint8_t         s[FR_MAX_STR];
    size_t          n, i;
    long            len;
    int             k;

    fr_piece(&g, 4, 0);
    *r = g.r;

    if (pl_grammar_from_regex(g.re, g.len, &text) != 0) {
        pl_gtext_free(&text);
        return;
    }
    gr = pl_grammar_compile(text.data, text.len, err, sizeof(err));
    pl_gtext_free(&text);
    if (gr == NULL) {
        if (strstr(err, "matches nothing") == NULL) {
            fprintf(stderr, "regex_fuzz: /%s/ refused: %s\n", g.re, err);
            abort();
        }
        return;
    }

    snprintf(anchored, sizeof(anchored), "^(%s)$", g.re);
    if (regcomp(&px, anchored, REG_EXTENDED | REG_NOSUB) != 0) {
        pl_grammar_free(gr);
        return;
    }

    for (k = 0; k < 8; k++) {
        n = fg_take(r) % FR_MAX_STR;
        for (i = 0; i < n; i++) {
            s[i] = (uint8_t) fr_chars[fg_take(r) % 6];
        }
        fr_agree(gr, &px, g.re, s, n);
    }
    for (k = 0; k < 3; k++) {
        len = fg_sample(gr, r, 64, k == 0 ? 2 : 0, out);
        if (len >= 0 && fr_plain(out, (size_t) len)) {
            fr_agree(gr, &px, g.re, out, (size_t) len);
        }
    }

    regfree(&px);
    pl_grammar_free(gr);
}


static void
fr_text(const uint8_t *data, size_t size)
{
    static uint8_t  out[FG_MAX_SAMPLE];
    fg_rand_t       r = { data, size };
    pl_gtext_t      text = { 0 };
    pl_grammar_t   *g;
    char            err[256];
    int             k;

    if (pl_grammar_from_regex((const char *) data, size, &text) != 0) {
        pl_gtext_free(&text);
        return;
    }
    err[0] = '\0';
    g = pl_grammar_compile(text.data, text.len, err, sizeof(err));
    pl_gtext_free(&text);
    if (g == NULL) {
        if (err[0] == '\0') {
            fg_fail("a regex refused without a message");
        }
        return;
    }
    for (k = 0; k < 3; k++) {
        fg_sample(g, &r, 128, k == 0 ? 4 : 0, out);
    }
    pl_grammar_free(g);
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fg_rand_t  r = { data + 1, size ? size - 1 : 0 };

    if (size == 0) {
        return 0;
    }
    if (data[0] & 1) {
        fr_compare(&r);
    } else {
        fr_text(data + 1, size - 1);
    }

    return 0;
}
