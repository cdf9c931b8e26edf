/*
 * pl_jinja_lex: the Jinja interpreter's lexer.  Preprocesses the source
 * (one trailing newline dropped, lstrip_blocks, trim_blocks), cuts it into
 * text, {{ expression }} and {% statement %} pieces with whitespace control
 * applied and comments dropped, and reads the tokens inside a tag.
 */

#include <stdlib.h>
#include <string.h>

#include "pl_jinja_internal.h"
#include "pl_unicode.h"

static int
pl_j_isname(int ch, int first)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_'
           || (!first && ch >= '0' && ch <= '9');
}

void
pl_j_skip_ws(pl_jctx_t *c)
{
    while (c->pos < c->end && strchr(" \t\r\n", c->src[c->pos]) != NULL) {
        c->pos++;
    }
}

static pl_jstr_t *
pl_j_lex_string(pl_jctx_t *c)
{
    static const char  from[] = "ntrbfv'\"\\";
    static const char  to[] = "\n\t\r\b\f\v'\"\\";
    char               q = c->src[c->pos++];
    pl_jbuf_t          b = { NULL, 0, 0 };
    pl_jstr_t         *s;
    const char        *e;

    while (c->pos < c->end && c->src[c->pos] != q) {
        char  ch = c->src[c->pos++];

        if (ch == '\\' && c->pos < c->end) {
            ch = c->src[c->pos++];
            e = (ch != '\0') ? strchr(from, ch) : NULL;
            if (e != NULL) {
                ch = to[e - from];
            } else if (ch == 'u' || ch == 'x') {
                char      hex[8];
                size_t    k = (ch == 'u') ? 4 : 2;
                uint8_t   u8[4];
                uint32_t  cp;

                if (c->end - c->pos < k) {
                    free(b.p);
                    pl_j_fail(c, "bad escape in string literal");
                }
                memcpy(hex, c->src + c->pos, k);
                hex[k] = '\0';
                cp = (uint32_t) strtoul(hex, NULL, 16);
                c->pos += k;
                pl_jbuf_add(c, &b, (const char *) u8, pl_utf8_put(cp, u8));
                continue;
            } else {
                pl_jbuf_add(c, &b, "\\", 1);
            }
        }
        pl_jbuf_add(c, &b, &ch, 1);
    }
    if (c->pos >= c->end) {
        free(b.p);
        pl_j_fail(c, "unterminated string literal at byte %zu", c->pos);
    }
    c->pos++;
    s = pl_j_str(c, b.p ? b.p : "", b.n);
    free(b.p);
    return s;
}

pl_jtok_t
pl_j_lex(pl_jctx_t *c)
{
    static const char  *ops[] = {
        "//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~",
        "<", ">", "=", ".", ",", ":", "|", "(", ")", "[", "]", "{", "}",
        NULL
    };
    pl_jtok_t           t;
    const char         *s;
    int                 i;

    memset(&t, 0, sizeof(t));
    pl_j_skip_ws(c);
    if (c->pos >= c->end) {
        t.type = T_EOF;
        return t;
    }
    s = c->src + c->pos;
    t.s = s;
    if (*s == '\'' || *s == '"') {
        t.type = T_STR;
        t.str = pl_j_lex_string(c);
        return t;
    }
    if (*s >= '0' && *s <= '9') {
        char  *endp;

        t.i = strtoll(s, &endp, 10);
        t.type = T_INT;
        if ((*endp == '.' && endp[1] >= '0' && endp[1] <= '9')
            || ((*endp == 'e' || *endp == 'E')
                && ((endp[1] >= '0' && endp[1] <= '9')
                    || ((endp[1] == '+' || endp[1] == '-')
                        && endp[2] >= '0' && endp[2] <= '9'))))
        {
            t.f = strtod(s, &endp);
            t.type = T_FLOAT;
        }
        c->pos += (size_t) (endp - s);
        t.n = (size_t) (endp - s);
        return t;
    }
    if (pl_j_isname((unsigned char) *s, 1)) {
        t.type = T_NAME;
        while (c->pos < c->end && pl_j_isname((unsigned char) c->src[c->pos],
                                               0))
        {
            c->pos++;
        }
        t.n = (size_t) (c->src + c->pos - s);
        return t;
    }
    for (i = 0; ops[i]; i++) {
        size_t  n = strlen(ops[i]);

        if (c->end - c->pos >= n && memcmp(s, ops[i], n) == 0) {
            t.type = T_OP;
            t.n = n;
            c->pos += n;
            return t;
        }
    }
    pl_j_fail(c, "unexpected character '%c' at byte %zu", *s, c->pos);
}

pl_jtok_t
pl_j_peek(pl_jctx_t *c)
{
    size_t     save = c->pos;
    pl_jtok_t  t = pl_j_lex(c);

    c->pos = save;
    return t;
}

int
pl_j_is(const pl_jtok_t *t, int type, const char *s)
{
    return t->type == type && t->n == strlen(s) && memcmp(t->s, s, t->n) == 0;
}

int
pl_j_accept(pl_jctx_t *c, int type, const char *s)
{
    size_t     save = c->pos;
    pl_jtok_t  t = pl_j_lex(c);

    if (pl_j_is(&t, type, s)) {
        return 1;
    }
    c->pos = save;
    return 0;
}

void
pl_j_expect(pl_jctx_t *c, int type, const char *s)
{
    if (!pl_j_accept(c, type, s)) {
        pl_j_fail(c, "expected '%s' at byte %zu", s, c->pos);
    }
}

pl_jstr_t *
pl_j_expect_name(pl_jctx_t *c)
{
    pl_jtok_t  t = pl_j_lex(c);

    if (t.type != T_NAME) {
        pl_j_fail(c, "expected a name at byte %zu", c->pos);
    }
    return pl_j_str(c, t.s, t.n);
}

/* The reference's preprocessing: drop one trailing newline, lstrip_blocks
   (blanks before {% and {# at a line start) and trim_blocks (a newline
   right after %} or #}). */
char *
pl_j_preprocess(const char *src, size_t len, size_t *outlen)
{
    char    *out = malloc(len + 1);
    size_t   i, n = 0, line = 0;

    if (out == NULL) {
        return NULL;
    }
    if (len > 0 && src[len - 1] == '\n') {
        len--;
    }
    for (i = 0; i < len; i++) {
        char  ch = src[i];

        if (ch == '{' && i + 1 < len && strchr("#%-", src[i + 1])) {
            size_t  k = n;

            while (k > line && (out[k - 1] == ' ' || out[k - 1] == '\t')) {
                k--;
            }
            if (k == line) {
                n = line;
            }
        }
        if (ch == '\n' && n >= 2 && out[n - 1] == '}'
            && strchr("#%-", out[n - 2]))
        {
            line = n;
            continue;
        }
        out[n++] = ch;
        if (ch == '\n' || ch == '\r') {
            line = n;
        }
    }
    out[n] = '\0';
    *outlen = n;
    return out;
}

static void
pl_j_add_piece(pl_jctx_t *c, pl_jpiece_t *p, size_t *cap)
{
    if (c->npieces == *cap) {
        size_t        ncap = *cap ? *cap * 2 : 64;
        pl_jpiece_t  *np = pl_j_alloc(c, ncap * sizeof(pl_jpiece_t));

        if (c->npieces) {
            memcpy(np, c->pieces, c->npieces * sizeof(pl_jpiece_t));
        }
        c->pieces = np;
        *cap = ncap;
    }
    c->pieces[c->npieces++] = *p;
}

/* End of the tag opened at i (index of its closing delimiter). */
static size_t
pl_j_tag_close(pl_jctx_t *c, size_t i, char kind)
{
    const char  *s = c->src;
    char         closer = (kind == '{') ? '}' : kind;
    size_t       k = i + 2;

    while (k + 1 < c->srclen && !(s[k] == closer && s[k + 1] == '}')) {
        if (kind != '#' && (s[k] == '\'' || s[k] == '"')) {
            char  q = s[k++];

            while (k < c->srclen && s[k] != q) {
                k += (s[k] == '\\') ? 2 : 1;
            }
        }
        k++;
    }
    if (k + 1 >= c->srclen) {
        pl_j_fail(c, "unterminated tag at byte %zu", i);
    }
    return k;
}

/* Cuts the source into pieces; comments vanish, whitespace control
   trims the neighbouring text pieces. */
void
pl_j_split(pl_jctx_t *c)
{
    const char   *s = c->src;
    size_t        i = 0, text = 0, cap = 0, close;
    pl_jpiece_t   p;
    int           strip_next = 0;

    while (i <= c->srclen) {
        int  at_tag = (i + 1 < c->srclen && s[i] == '{'
                       && (s[i + 1] == '{' || s[i + 1] == '%'
                           || s[i + 1] == '#'));

        if (!at_tag && i < c->srclen) {
            i++;
            continue;
        }
        memset(&p, 0, sizeof(p));
        p.start = text;
        p.end = i;
        if (strip_next) {
            while (p.start < p.end && strchr(" \t\r\n", s[p.start])) {
                p.start++;
            }
        }
        if (at_tag && i + 2 < c->srclen && s[i + 2] == '-') {
            while (p.end > p.start && strchr(" \t\r\n", s[p.end - 1])) {
                p.end--;
            }
        }
        if (p.end > p.start) {
            pl_j_add_piece(c, &p, &cap);
        }
        if (!at_tag) {
            break;
        }
        close = pl_j_tag_close(c, i, s[i + 1]);
        p.kind = (s[i + 1] == '{') ? 1 : 2;
        p.lstrip = (s[i + 2] == '-');
        p.start = i + 2 + (s[i + 2] == '-' || s[i + 2] == '+');
        p.rstrip = (close > p.start && s[close - 1] == '-');
        p.end = close - (size_t) p.rstrip;
        strip_next = p.rstrip;
        if (s[i + 1] != '#') {
            pl_j_add_piece(c, &p, &cap);
        }
        i = text = close + 2;
    }
}
