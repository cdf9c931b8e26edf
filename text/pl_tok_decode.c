/*
 * pl_tok_decode: token ids back to text, as a stream.
 *
 * The loader flattened the tokenizer's decoder chain into one plan
 * (pl_tok_decoder_t): byte-level pieces become raw bytes through GPT-2's
 * table, <0xXX> pieces become bytes (byte fallback), other pieces are text
 * after the decoder's Replace / Metaspace rule; a Metaspace decoder drops
 * the first token's leading space and a Strip after Fuse drops leading
 * characters of the whole text.  Bytes go through a streaming UTF-8
 * decoder that emits a character once it is complete and one U+FFFD per
 * maximal invalid subsequence (the WHATWG / from_utf8_lossy rule) where
 * the reference decodes a run of bytes: at the end, before an added token
 * (byte-level) and before a text piece (byte fallback).
 *
 * Full decoding is the stream run over all ids, so the concatenation of
 * incremental output always equals pl_tokenizer_decode.  Each push works
 * on a copy of the state and commits it only when the output fitted.
 */

#include <string.h>

#include "pl_tok_internal.h"

typedef struct {
    char    *out;        /* NULL: only count */
    size_t   cap;
    size_t   n;
    int      overflow;
} pl_dec_out_t;

static const char  pl_replacement_char[] = "\xef\xbf\xbd";

static void
pl_dec_text(pl_detok_t *d, pl_dec_out_t *o, const char *s, size_t n)
{
    const pl_tok_decoder_t  *dec = &d->tok->dec;

    while (d->state[0] > 0 && n > 0) {
        if (n >= dec->strip_len && memcmp(s, dec->strip_char, dec->strip_len)
                                   == 0)
        {
            s += dec->strip_len;
            n -= dec->strip_len;
            d->state[0]--;
        } else {
            d->state[0] = 0;
        }
    }
    if (n > o->cap - o->n) {
        o->overflow = 1;
        return;
    }
    if (o->out != NULL) {
        memcpy(o->out + o->n, s, n);
    }
    o->n += n;
}

static void
pl_dec_flush_bytes(pl_detok_t *d, pl_dec_out_t *o)
{
    if (d->npending) {
        d->npending = 0;
        pl_dec_text(d, o, pl_replacement_char, 3);
    }
}

static size_t
pl_utf8_need(uint8_t lead)
{
    return lead < 0xe0 ? 2 : lead < 0xf0 ? 3 : 4;
}

static int
pl_utf8_cont_ok(const uint8_t *pending, size_t npending, uint8_t b)
{
    uint8_t  lo = 0x80, hi = 0xbf;

    if (npending == 1) {
        lo = (pending[0] == 0xe0) ? 0xa0 : (pending[0] == 0xf0) ? 0x90 : 0x80;
        hi = (pending[0] == 0xed) ? 0x9f : (pending[0] == 0xf4) ? 0x8f : 0xbf;
    }
    return b >= lo && b <= hi;
}

static void
pl_dec_byte(pl_detok_t *d, pl_dec_out_t *o, uint8_t b)
{
    for (;;) {
        if (d->npending == 0) {
            if (b < 0x80) {
                pl_dec_text(d, o, (const char *) &b, 1);
            } else if (b >= 0xc2 && b <= 0xf4) {
                d->pending[d->npending++] = b;
            } else {
                pl_dec_text(d, o, pl_replacement_char, 3);
            }
            return;
        }
        if (pl_utf8_cont_ok(d->pending, d->npending, b)) {
            d->pending[d->npending++] = b;
            if (d->npending == pl_utf8_need(d->pending[0])) {
                d->npending = 0;
                pl_dec_text(d, o, (const char *) d->pending,
                            pl_utf8_need(d->pending[0]));
            }
            return;
        }
        pl_dec_flush_bytes(d, o);
    }
}

/* Inverse of GPT-2's byte table: the byte of cp, or -1.  Printable
   bytes stand for themselves; the others (0x00-0x20, 0x7F-0xA0, 0xAD)
   were given U+0100 onwards in byte order. */
static int
pl_byte_of_char(uint32_t cp)
{
    if ((cp >= 0x21 && cp <= 0x7e) || (cp >= 0xa1 && cp <= 0xac)
        || (cp >= 0xae && cp <= 0xff))
    {
        return (int) cp;
    }
    if (cp >= 0x100 && cp <= 0x120) {
        return (int) (cp - 0x100);
    }
    if (cp >= 0x121 && cp <= 0x142) {
        return (int) (cp - 0x121 + 0x7f);
    }
    return cp == 0x143 ? 0xad : -1;
}

static void
pl_dec_byte_level(pl_detok_t *d, pl_dec_out_t *o, const char *p, size_t n)
{
    const uint8_t  *s = (const uint8_t *) p;
    size_t          i = 0, k;
    uint32_t        cp;
    int             b;

    while (i < n) {
        k = pl_utf8_next(s + i, &cp);
        b = pl_byte_of_char(cp);
        if (b >= 0) {
            pl_dec_byte(d, o, (uint8_t) b);
        } else {
            pl_dec_flush_bytes(d, o);
            pl_dec_text(d, o, p + i, k);
        }
        i += k;
    }
}

static int
pl_hexval(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if ((c | 32) >= 'a' && (c | 32) <= 'f') {
        return (c | 32) - 'a' + 10;
    }
    return -1;
}

/* <0xXX>: the byte, or -1 for any other piece. */
static int
pl_fallback_byte(const char *p, size_t n)
{
    if (n != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>'
        || pl_hexval(p[3]) < 0 || pl_hexval(p[4]) < 0)
    {
        return -1;
    }
    return pl_hexval(p[3]) * 16 + pl_hexval(p[4]);
}

/* A text piece through the Replace or Metaspace rule. */
static void
pl_dec_piece_text(pl_detok_t *d, pl_dec_out_t *o, const char *p, size_t n,
    int first)
{
    const pl_tok_decoder_t  *dec = &d->tok->dec;
    const char              *from = NULL, *to = NULL;
    size_t                   fromlen = 0, tolen = 0, i = 0, run = 0;

    if (dec->nreplaces) {
        from = dec->replaces[0].from;
        fromlen = dec->replaces[0].fromlen;
        to = dec->replaces[0].to;
        tolen = dec->replaces[0].tolen;
    } else if (dec->metaspace) {
        from = dec->meta_char;
        fromlen = dec->meta_len;
        to = " ";
        tolen = 1;
    }
    if (first && dec->metaspace && dec->meta_strip_first) {
        if (n >= fromlen && memcmp(p, from, fromlen) == 0) {
            i = run = fromlen;
        } else if (n > 0 && p[0] == ' ') {
            i = run = 1;
        }
    }
    while (i < n) {
        if (fromlen && n - i >= fromlen && memcmp(p + i, from, fromlen) == 0) {
            pl_dec_text(d, o, p + run, i - run);
            pl_dec_text(d, o, to, tolen);
            i += fromlen;
            run = i;
        } else {
            i++;
        }
    }
    pl_dec_text(d, o, p + run, n - run);
}

static void
pl_dec_token(pl_detok_t *d, pl_dec_out_t *o, int32_t id)
{
    const pl_tokenizer_t  *t = d->tok;
    const char            *p;
    size_t                 n;
    int                    b, first;

    if (id < 0 || (uint32_t) id >= t->nvocab
        || !(t->flags[id] & PL_TOK_PRESENT)
        || (d->skip_special && (t->flags[id] & PL_TOK_SPECIAL)))
    {
        return;
    }
    p = pl_tok_piece(t, id, &n);
    first = (d->n_emitted++ == 0);
    if (t->dec.byte_level) {
        if (t->flags[id] & PL_TOK_ADDED) {
            pl_dec_flush_bytes(d, o);
            pl_dec_text(d, o, p, n);
        } else {
            pl_dec_byte_level(d, o, p, n);
        }
        return;
    }
    b = t->dec.byte_fallback ? pl_fallback_byte(p, n) : -1;
    if (b >= 0) {
        pl_dec_byte(d, o, (uint8_t) b);
        return;
    }
    pl_dec_flush_bytes(d, o);
    pl_dec_piece_text(d, o, p, n, first);
}

void
pl_detok_init(pl_detok_t *d, const pl_tokenizer_t *t, int skip_special)
{
    memset(d, 0, sizeof(*d));
    d->tok = t;
    d->skip_special = skip_special;
    d->state[0] = (uint32_t) t->dec.strip_start;
}

long
pl_detok_push(pl_detok_t *d, int32_t id, char *out, size_t cap)
{
    pl_detok_t    tmp = *d;
    pl_dec_out_t  o = { out, cap, 0, 0 };

    pl_dec_token(&tmp, &o, id);
    if (o.overflow) {
        return -1;
    }
    *d = tmp;
    return (long) o.n;
}

long
pl_detok_flush(pl_detok_t *d, char *out, size_t cap)
{
    pl_detok_t    tmp = *d;
    pl_dec_out_t  o = { out, cap, 0, 0 };

    pl_dec_flush_bytes(&tmp, &o);
    if (o.overflow) {
        return -1;
    }
    *d = tmp;
    return (long) o.n;
}

long
pl_tokenizer_decode(const pl_tokenizer_t *t, const int32_t *ids, size_t n,
    int skip_special, char *out, size_t cap)
{
    pl_detok_t    d;
    pl_dec_out_t  o = { out, cap, 0, 0 };
    size_t        i;

    pl_detok_init(&d, t, skip_special);
    for (i = 0; i < n && !o.overflow; i++) {
        pl_dec_token(&d, &o, ids[i]);
    }
    pl_dec_flush_bytes(&d, &o);
    return o.overflow ? -1 : (long) o.n;
}

/* Bound of one push's output for token id: the piece decoded from a
   fresh state (counted, not written; no strip rules, which only remove)
   plus 4 bytes for what an earlier incomplete character can become: a
   U+FFFD, or the rest of a character the piece completes. */
static size_t
pl_dec_piece_bound(const pl_tokenizer_t *t, int32_t id)
{
    pl_detok_t    d;
    pl_dec_out_t  o = { NULL, SIZE_MAX, 0, 0 };

    pl_detok_init(&d, t, 0);
    d.state[0] = 0;
    d.n_emitted = 1;
    pl_dec_token(&d, &o, id);
    return 4 + o.n;
}

size_t
pl_tok_decode_bound(const pl_tokenizer_t *t)
{
    size_t    max = 3, b;
    uint32_t  id;

    for (id = 0; id < t->nvocab; id++) {
        if (t->flags[id] & PL_TOK_PRESENT) {
            b = pl_dec_piece_bound(t, (int32_t) id);
            max = b > max ? b : max;
        }
    }
    return max;
}

size_t
pl_detok_max_bytes(const pl_tokenizer_t *t)
{
    return t->max_push;
}
