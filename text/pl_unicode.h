/*
 * pl_unicode: the Unicode character data the tokenizer and its regex
 * engine need (general category, White_Space, Alphabetic, canonical
 * combining class, decompositions, compositions, lowercase) plus UTF-8
 * helpers and the four normalization forms.  The tables live in the
 * generated pl_unicode_tables.c (tools/gen-unicode-tables), so the code
 * here never depends on the C library's locale.
 */

#ifndef PL_UNICODE_H
#define PL_UNICODE_H

#include <stddef.h>
#include <stdint.h>

#include "pl_utf8.h"

/* General categories, in the order of pl_uc_prop's low five bits. */
enum {
    PL_UC_LU, PL_UC_LL, PL_UC_LT, PL_UC_LM, PL_UC_LO,
    PL_UC_MN, PL_UC_MC, PL_UC_ME,
    PL_UC_ND, PL_UC_NL, PL_UC_NO,
    PL_UC_PC, PL_UC_PD, PL_UC_PS, PL_UC_PE, PL_UC_PI, PL_UC_PF, PL_UC_PO,
    PL_UC_SM, PL_UC_SC, PL_UC_SK, PL_UC_SO,
    PL_UC_ZS, PL_UC_ZL, PL_UC_ZP,
    PL_UC_CC, PL_UC_CF, PL_UC_CS, PL_UC_CO, PL_UC_CN,
    PL_UC_NCATS
};

#define PL_UC_CAT_MASK     0x1f
#define PL_UC_WHITE_SPACE  0x20
#define PL_UC_ALPHABETIC   0x40

typedef struct {
    uint32_t  cp;
    uint16_t  off;
    uint8_t   len;
    uint8_t   compat;
} pl_uc_decomp_t;

typedef struct {
    uint32_t  first;
    uint32_t  second;
    uint32_t  composite;
} pl_uc_comp_t;

typedef struct {
    uint32_t  cp;
    uint32_t  mapped;
} pl_uc_case_t;

extern const uint16_t        pl_uc_prop_index[];
extern const uint8_t         pl_uc_prop_blocks[];
extern const uint16_t        pl_uc_ccc_index[];
extern const uint8_t         pl_uc_ccc_blocks[];
extern const pl_uc_decomp_t  pl_uc_decomp[];
extern const uint32_t        pl_uc_decomp_pool[];
extern const size_t          pl_uc_decomp_count;
extern const pl_uc_comp_t    pl_uc_comp[];
extern const size_t          pl_uc_comp_count;
extern const pl_uc_case_t    pl_uc_lower[];
extern const size_t          pl_uc_lower_count;

/* Category in the low bits, PL_UC_WHITE_SPACE / PL_UC_ALPHABETIC above. */
static inline unsigned
pl_uc_prop(uint32_t cp)
{
    if (cp >= 0x110000) {
        return PL_UC_CN;
    }
    return pl_uc_prop_blocks[(size_t) pl_uc_prop_index[cp >> 8] * 256
                             + (cp & 0xff)];
}

static inline unsigned
pl_uc_category(uint32_t cp)
{
    return pl_uc_prop(cp) & PL_UC_CAT_MASK;
}

static inline unsigned
pl_uc_ccc(uint32_t cp)
{
    if (cp >= 0x110000) {
        return 0;
    }
    return pl_uc_ccc_blocks[(size_t) pl_uc_ccc_index[cp >> 8] * 256
                            + (cp & 0xff)];
}

/*
 * Decodes one code point from valid UTF-8 at s (at least one byte before
 * end); returns its length.  Callers validate text first (pl_utf8_valid).
 */
static inline size_t
pl_utf8_next(const uint8_t *s, uint32_t *cp)
{
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    if (s[0] < 0xe0) {
        *cp = ((uint32_t) (s[0] & 0x1f) << 6) | (s[1] & 0x3f);
        return 2;
    }
    if (s[0] < 0xf0) {
        *cp = ((uint32_t) (s[0] & 0x0f) << 12)
              | ((uint32_t) (s[1] & 0x3f) << 6) | (s[2] & 0x3f);
        return 3;
    }
    *cp = ((uint32_t) (s[0] & 0x07) << 18) | ((uint32_t) (s[1] & 0x3f) << 12)
          | ((uint32_t) (s[2] & 0x3f) << 6) | (s[3] & 0x3f);
    return 4;
}

/* pl_utf8_put: cp as UTF-8 (proto/pl_utf8.h) */

/* Length of the valid UTF-8 sequence at s[len], 0 when invalid there. */
size_t pl_utf8_seq_len(const uint8_t *s, size_t len);

uint32_t pl_uc_tolower(uint32_t cp);

typedef enum {
    PL_UC_NFC, PL_UC_NFD, PL_UC_NFKC, PL_UC_NFKD
} pl_uc_form_t;

/*
 * Normalizes valid UTF-8 in[len] into a malloc'ed NUL-terminated string
 * (*outlen bytes).  NULL when out of memory.
 */
char *pl_uc_normalize(pl_uc_form_t form, const char *in, size_t len,
    size_t *outlen);

#endif /* PL_UNICODE_H */
