/*
 * pl_utf8.h: one code point written as UTF-8, shared by the text stack
 * (text/, the module's tokenizer) and the grammar engine (grammar/, which
 * the engine links without text/).
 */
#ifndef PL_UTF8_H
#define PL_UTF8_H

#include <stddef.h>
#include <stdint.h>


/* cp (at most 0x10ffff) into out (4 bytes of room); its length. */
static inline size_t
pl_utf8_put(uint32_t cp, uint8_t *out)
{
    if (cp < 0x80) {
        out[0] = (uint8_t) cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t) (0xc0 | (cp >> 6));
        out[1] = (uint8_t) (0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t) (0xe0 | (cp >> 12));
        out[1] = (uint8_t) (0x80 | ((cp >> 6) & 0x3f));
        out[2] = (uint8_t) (0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (uint8_t) (0xf0 | (cp >> 18));
    out[1] = (uint8_t) (0x80 | ((cp >> 12) & 0x3f));
    out[2] = (uint8_t) (0x80 | ((cp >> 6) & 0x3f));
    out[3] = (uint8_t) (0x80 | (cp & 0x3f));
    return 4;
}

#endif
