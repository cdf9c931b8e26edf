/*
 * pl_unicode: UTF-8 helpers, simple lowercase and the Unicode
 * normalization forms (UAX #15) over the generated tables.
 *
 * Normalization works on a code point buffer: full decomposition
 * (canonical, or compatibility too for the K forms; Hangul syllables by
 * arithmetic), canonical ordering of combining marks by combining class,
 * then for the C forms canonical composition with the "blocked" rule.
 * An all-ASCII input is already normalized in every form and is copied.
 */

#include <stdlib.h>
#include <string.h>

#include "pl_tokenizer.h"
#include "pl_unicode.h"

#define HANGUL_S  0xAC00
#define HANGUL_L  0x1100
#define HANGUL_V  0x1161
#define HANGUL_T  0x11A7
#define HANGUL_LN 19
#define HANGUL_VN 21
#define HANGUL_TN 28
#define HANGUL_NN (HANGUL_VN * HANGUL_TN)
#define HANGUL_SN (HANGUL_LN * HANGUL_NN)

typedef struct {
    uint32_t  *cp;
    size_t     n;
    size_t     cap;
} pl_cpbuf_t;

size_t
pl_utf8_seq_len(const uint8_t *s, size_t len)
{
    uint8_t  c = s[0];
    size_t   need, i;
    uint8_t  lo = 0x80, hi = 0xbf;

    if (c < 0x80) {
        return 1;
    }
    if (c >= 0xc2 && c <= 0xdf) {
        need = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        need = 3;
        lo = (c == 0xe0) ? 0xa0 : 0x80;
        hi = (c == 0xed) ? 0x9f : 0xbf;
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 4;
        lo = (c == 0xf0) ? 0x90 : 0x80;
        hi = (c == 0xf4) ? 0x8f : 0xbf;
    } else {
        return 0;
    }
    if (len < need || s[1] < lo || s[1] > hi) {
        return 0;
    }
    for (i = 2; i < need; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            return 0;
        }
    }
    return need;
}

int
pl_utf8_valid(const char *s, size_t len)
{
    const uint8_t  *p = (const uint8_t *) s;
    size_t          i = 0, n;

    while (i < len) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        n = pl_utf8_seq_len(p + i, len - i);
        if (n == 0) {
            return 0;
        }
        i += n;
    }
    return 1;
}

uint32_t
pl_uc_tolower(uint32_t cp)
{
    size_t  lo = 0, hi = pl_uc_lower_count;

    if (cp < 0x80) {
        return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    }
    while (lo < hi) {
        size_t  mid = (lo + hi) / 2;

        if (pl_uc_lower[mid].cp == cp) {
            return pl_uc_lower[mid].mapped;
        }
        if (pl_uc_lower[mid].cp < cp) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return cp;
}

static const pl_uc_decomp_t *
pl_uc_find_decomp(uint32_t cp)
{
    size_t  lo = 0, hi = pl_uc_decomp_count;

    while (lo < hi) {
        size_t  mid = (lo + hi) / 2;

        if (pl_uc_decomp[mid].cp == cp) {
            return &pl_uc_decomp[mid];
        }
        if (pl_uc_decomp[mid].cp < cp) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return NULL;
}

static uint32_t
pl_uc_find_comp(uint32_t first, uint32_t second)
{
    size_t  lo = 0, hi = pl_uc_comp_count;

    while (lo < hi) {
        size_t               mid = (lo + hi) / 2;
        const pl_uc_comp_t  *c = &pl_uc_comp[mid];

        if (c->first == first && c->second == second) {
            return c->composite;
        }
        if (c->first < first || (c->first == first && c->second < second)) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return 0;
}

static int
pl_cpbuf_push(pl_cpbuf_t *b, uint32_t cp)
{
    if (b->n == b->cap) {
        size_t     cap = b->cap ? b->cap * 2 : 64;
        uint32_t  *p = realloc(b->cp, cap * sizeof(uint32_t));

        if (p == NULL) {
            return -1;
        }
        b->cp = p;
        b->cap = cap;
    }
    b->cp[b->n++] = cp;
    return 0;
}

static int
pl_uc_decompose(pl_cpbuf_t *b, uint32_t cp, int compat)
{
    const pl_uc_decomp_t  *d;
    size_t                 i;

    if (cp >= HANGUL_S && cp < HANGUL_S + HANGUL_SN) {
        uint32_t  s = cp - HANGUL_S;

        if (pl_cpbuf_push(b, HANGUL_L + s / HANGUL_NN) != 0
            || pl_cpbuf_push(b, HANGUL_V + (s % HANGUL_NN) / HANGUL_TN) != 0)
        {
            return -1;
        }
        return (s % HANGUL_TN) ? pl_cpbuf_push(b, HANGUL_T + s % HANGUL_TN)
                               : 0;
    }
    d = (cp < 0xa0) ? NULL : pl_uc_find_decomp(cp);
    if (d == NULL || (d->compat && !compat)) {
        return pl_cpbuf_push(b, cp);
    }
    for (i = 0; i < d->len; i++) {
        if (pl_uc_decompose(b, pl_uc_decomp_pool[d->off + i], compat) != 0) {
            return -1;
        }
    }
    return 0;
}

/* Stable insertion sort of each run of non-starters by combining class. */
static void
pl_uc_reorder(pl_cpbuf_t *b)
{
    size_t  i, j;

    for (i = 1; i < b->n; i++) {
        uint32_t  c = b->cp[i];
        unsigned  cc = pl_uc_ccc(c);

        if (cc == 0) {
            continue;
        }
        for (j = i; j > 0 && pl_uc_ccc(b->cp[j - 1]) > cc; j--) {
            b->cp[j] = b->cp[j - 1];
        }
        b->cp[j] = c;
    }
}

static uint32_t
pl_uc_compose_pair(uint32_t a, uint32_t b)
{
    if (a >= HANGUL_L && a < HANGUL_L + HANGUL_LN
        && b >= HANGUL_V && b < HANGUL_V + HANGUL_VN)
    {
        return HANGUL_S + ((a - HANGUL_L) * HANGUL_VN + (b - HANGUL_V))
                          * HANGUL_TN;
    }
    if (a >= HANGUL_S && a < HANGUL_S + HANGUL_SN
        && (a - HANGUL_S) % HANGUL_TN == 0
        && b > HANGUL_T && b < HANGUL_T + HANGUL_TN)
    {
        return a + (b - HANGUL_T);
    }
    return pl_uc_find_comp(a, b);
}

static void
pl_uc_compose(pl_cpbuf_t *b)
{
    size_t    starter = 0, out = 0, i;
    int       have_starter = 0;
    unsigned  last_cc = 0;

    for (i = 0; i < b->n; i++) {
        uint32_t  c = b->cp[i];
        unsigned  cc = pl_uc_ccc(c);

        if (have_starter && (out == starter + 1 || last_cc < cc)) {
            uint32_t  comp = pl_uc_compose_pair(b->cp[starter], c);

            if (comp != 0) {
                b->cp[starter] = comp;
                continue;
            }
        }
        if (cc == 0) {
            starter = out;
            have_starter = 1;
        }
        last_cc = cc;
        b->cp[out++] = c;
    }
    b->n = out;
}

static char *
pl_uc_encode(const pl_cpbuf_t *b, size_t *outlen)
{
    char    *out = malloc(b->n * 4 + 1);
    size_t   i, n = 0;

    if (out == NULL) {
        return NULL;
    }
    for (i = 0; i < b->n; i++) {
        n += pl_utf8_put(b->cp[i], (uint8_t *) out + n);
    }
    out[n] = '\0';
    *outlen = n;
    return out;
}

static int
pl_uc_is_ascii(const uint8_t *s, size_t len)
{
    size_t  i;

    for (i = 0; i < len; i++) {
        if (s[i] >= 0x80) {
            return 0;
        }
    }
    return 1;
}

char *
pl_uc_normalize(pl_uc_form_t form, const char *in, size_t len,
    size_t *outlen)
{
    const uint8_t  *s = (const uint8_t *) in;
    int             compat = (form == PL_UC_NFKC || form == PL_UC_NFKD);
    pl_cpbuf_t      b = { NULL, 0, 0 };
    char           *out;
    size_t          i;

    if (pl_uc_is_ascii(s, len)) {
        out = malloc(len + 1);
        if (out != NULL) {
            memcpy(out, in, len);
            out[len] = '\0';
            *outlen = len;
        }
        return out;
    }
    for (i = 0; i < len; ) {
        uint32_t  cp;

        i += pl_utf8_next(s + i, &cp);
        if (pl_uc_decompose(&b, cp, compat) != 0) {
            free(b.cp);
            return NULL;
        }
    }
    pl_uc_reorder(&b);
    if (form == PL_UC_NFC || form == PL_UC_NFKC) {
        pl_uc_compose(&b);
    }
    out = pl_uc_encode(&b, outlen);
    free(b.cp);
    return out;
}
