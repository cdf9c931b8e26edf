/*
 * pl_tok_encode: text to token ids, in the order Hugging Face's
 * tokenizers run the pipeline:
 *
 *   1. split the text on added tokens (special ones only when asked to),
 *      honouring lstrip / rstrip;
 *   2. normalize each remaining section;
 *   3. pre-tokenize it into pieces (regex splits, Metaspace, ByteLevel);
 *   4. run BPE on each piece: start from characters (or bytes mapped to
 *      GPT-2's printable alphabet), repeatedly merge the adjacent pair of
 *      lowest rank, leftmost first; unknown characters become byte-fallback
 *      pieces <0xXX> or the unknown token;
 *   5. wrap the result in the post-processor's ids (BOS/EOS).
 *
 * Sections and pieces are byte ranges into one growing work buffer, so a
 * step that rewrites text (normalizers, Metaspace, prefix spaces) appends
 * its output and later steps refer to it by offset.  All scratch memory
 * belongs to one call and is freed before it returns.
 */

#include <stdlib.h>
#include <string.h>

#include "pl_tok_internal.h"

#define PL_BPE_SCAN_MAX  32

enum {
    PL_ENC_OK = 0, PL_ENC_INVALID = -1, PL_ENC_FULL = -2, PL_ENC_NOMEM = -3
};

typedef struct {
    size_t  off;
    size_t  len;
} pl_span_t;

typedef struct {
    pl_span_t  *v;
    size_t      n;
    size_t      cap;
} pl_spans_t;

typedef struct {
    int32_t   id;        /* -1: not in the vocabulary, -2: merged away */
    int32_t   next;
    int32_t   prev;
    uint32_t  off;
    uint32_t  len;
    uint32_t  rank;      /* of the pair starting here; UINT32_MAX: none */
    int32_t   merged;    /* the pair's merged id */
} pl_bpe_sym_t;

typedef struct {
    size_t  off;
    size_t  len;
    int     match;
} pl_piece_t;

typedef struct {
    uint64_t  key;    /* rank << 32 | position */
    int32_t   left;
    int32_t   right;
    int32_t   lid;
    int32_t   rid;
} pl_bpe_cand_t;

typedef struct {
    const pl_tokenizer_t  *t;
    char                  *buf;
    size_t                 len;
    size_t                 cap;
    char                  *spell;
    size_t                 capspell;
    pl_spans_t             a;
    pl_spans_t             b;
    pl_regex_stack_t       stack;
    int32_t               *ids;
    size_t                 nids;
    size_t                 capids;
    int                    rc;
    int                    last_unk;
    pl_bpe_sym_t          *sym;
    const uint8_t         *word;       /* the piece being merged */
    size_t                 capsym;
    pl_piece_t            *pieces;
    size_t                 npieces;
    size_t                 cappieces;
    pl_bpe_cand_t         *heap;
    size_t                 nheap;
    size_t                 capheap;
} pl_enc_t;

static int
pl_enc_grow(pl_enc_t *w, void **p, size_t *cap, size_t need, size_t size)
{
    size_t  ncap = *cap ? *cap : 64;
    void   *np;

    if (need <= *cap) {
        return 0;
    }
    while (ncap < need) {
        ncap *= 2;
    }
    np = realloc(*p, ncap * size);
    if (np == NULL) {
        w->rc = PL_ENC_NOMEM;
        return -1;
    }
    *p = np;
    *cap = ncap;
    return 0;
}

/* Appends bytes (which may lie in the work buffer itself) to the work
   buffer; their offset, or -1. */
static long
pl_enc_append(pl_enc_t *w, const char *s, size_t n)
{
    size_t  off = w->len;
    int     inside = (w->buf != NULL && s >= w->buf && s < w->buf + w->cap);
    size_t  from = inside ? (size_t) (s - w->buf) : 0;

    if (pl_enc_grow(w, (void **) &w->buf, &w->cap, w->len + n + 1, 1) != 0) {
        return -1;
    }
    if (inside) {
        s = w->buf + from;
    }
    memcpy(w->buf + off, s, n);
    w->len += n;
    return (long) off;
}

static int
pl_spans_push(pl_enc_t *w, pl_spans_t *l, size_t off, size_t len)
{
    if (len == 0) {
        return 0;
    }
    if (pl_enc_grow(w, (void **) &l->v, &l->cap, l->n + 1, sizeof(pl_span_t))
        != 0)
    {
        return -1;
    }
    l->v[l->n].off = off;
    l->v[l->n].len = len;
    l->n++;
    return 0;
}

static void
pl_enc_emit(pl_enc_t *w, int32_t id)
{
    if (w->nids >= w->capids) {
        w->rc = PL_ENC_FULL;
        return;
    }
    w->ids[w->nids++] = id;
}

/* ---- BPE ---- */

int
pl_tok_merge_find(const pl_tokenizer_t *t, int32_t a, int32_t b,
    uint32_t *rank, int32_t *merged)
{
    uint64_t               key = pl_tok_merge_key(a, b);
    size_t                 i;
    const pl_tok_merge_t  *m;

    if (a < 0 || b < 0) {
        return 0;
    }
    i = pl_tok_merge_slot(key, t->mmask);
    while ((m = &t->merges[i])->key != 0) {
        if (m->key == key) {
            *rank = m->rank;
            *merged = m->id;
            return 1;
        }
        i = (i + 1) & t->mmask;
    }
    return 0;
}

static void
pl_bpe_merge_at(pl_enc_t *w, int32_t left, int32_t merged)
{
    int32_t  right = w->sym[left].next;

    w->sym[left].id = merged;
    w->sym[left].len += w->sym[right].len;
    w->sym[left].next = w->sym[right].next;
    if (w->sym[right].next >= 0) {
        w->sym[w->sym[right].next].prev = left;
    }
    w->sym[right].id = -2;
}

/* Caches the rank of the pair (i, i + 1) of a contiguous symbol array. */
static void
pl_bpe_pair(pl_enc_t *w, int32_t i, int32_t n)
{
    pl_bpe_sym_t  *s = &w->sym[i];

    if (i + 1 >= n) {
        s->rank = UINT32_MAX;
    } else if (w->t->byte_pairs != NULL && s->len == 1 && s[1].len == 1) {
        const pl_tok_pair_t  *p = &w->t->byte_pairs[
            (unsigned) w->word[s->off] << 8 | w->word[s[1].off]];

        s->rank = p->rank;
        s->merged = p->id;
    } else if (!pl_tok_merge_find(w->t, s->id, s[1].id, &s->rank,
                                  &s->merged))
    {
        s->rank = UINT32_MAX;
    }
}

/* Short words: the symbols stay contiguous; each round finds the lowest
   cached pair rank (leftmost on ties), merges it and closes the gap, so
   only the two pairs around the merge need a new lookup.  Returns the
   number of symbols left, linked in order for the caller. */
static int32_t
pl_bpe_scan(pl_enc_t *w, int32_t n)
{
    pl_bpe_sym_t  *s = w->sym;
    uint32_t       best;
    int32_t        at, i;

    for (i = 0; i < n; i++) {
        pl_bpe_pair(w, i, n);
    }
    for (;;) {
        best = UINT32_MAX;
        at = -1;
        for (i = 0; i + 1 < n; i++) {
            if (s[i].rank < best) {
                best = s[i].rank;
                at = i;
            }
        }
        if (at < 0) {
            break;
        }
        s[at].id = s[at].merged;
        s[at].len += s[at + 1].len;
        memmove(&s[at + 1], &s[at + 2],
                (size_t) (n - at - 2) * sizeof(pl_bpe_sym_t));
        n--;
        pl_bpe_pair(w, at, n);
        if (at > 0) {
            pl_bpe_pair(w, at - 1, n);
        }
    }
    for (i = 0; i < n; i++) {
        s[i].next = (i + 1 < n) ? i + 1 : -1;
    }
    return n;
}

static int
pl_heap_less(const pl_bpe_cand_t *a, const pl_bpe_cand_t *b)
{
    return a->key < b->key;
}

static void
pl_heap_push(pl_enc_t *w, int32_t left)
{
    const pl_tokenizer_t  *t = w->t;
    int32_t                right = w->sym[left].next, merged;
    uint32_t               rank;
    pl_bpe_cand_t          c;
    size_t                 i;

    if (right < 0
        || !pl_tok_merge_find(t, w->sym[left].id, w->sym[right].id, &rank,
                          &merged)
        || pl_enc_grow(w, (void **) &w->heap, &w->capheap, w->nheap + 1,
                       sizeof(pl_bpe_cand_t)) != 0)
    {
        return;
    }
    c.key = ((uint64_t) rank << 32) | (uint32_t) left;
    c.left = left;
    c.right = right;
    c.lid = w->sym[left].id;
    c.rid = w->sym[right].id;
    i = w->nheap++;
    while (i > 0 && pl_heap_less(&c, &w->heap[(i - 1) / 2])) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = c;
}

static pl_bpe_cand_t
pl_heap_pop(pl_enc_t *w)
{
    pl_bpe_cand_t  top = w->heap[0], last = w->heap[--w->nheap];
    size_t         i = 0, c;

    for (;;) {
        c = 2 * i + 1;
        if (c >= w->nheap) {
            break;
        }
        if (c + 1 < w->nheap && pl_heap_less(&w->heap[c + 1], &w->heap[c])) {
            c++;
        }
        if (!pl_heap_less(&w->heap[c], &last)) {
            break;
        }
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (w->nheap) {
        w->heap[i] = last;
    }
    return top;
}

/* Long words: a heap of candidate pairs, stale entries skipped. */
static void
pl_bpe_heap(pl_enc_t *w)
{
    const pl_tokenizer_t  *t = w->t;
    pl_bpe_cand_t          c;
    uint32_t               rank;
    int32_t                i, merged;

    w->nheap = 0;
    for (i = 0; w->sym[i].next >= 0; i = w->sym[i].next) {
        pl_heap_push(w, i);
    }
    while (w->nheap > 0 && w->rc == PL_ENC_OK) {
        c = pl_heap_pop(w);
        if (w->sym[c.left].id != c.lid || w->sym[c.left].next != c.right
            || w->sym[c.right].id != c.rid)
        {
            continue;
        }
        if (!pl_tok_merge_find(t, c.lid, c.rid, &rank, &merged)) {
            continue;
        }
        pl_bpe_merge_at(w, c.left, merged);
        if (w->sym[c.left].prev >= 0) {
            pl_heap_push(w, w->sym[c.left].prev);
        }
        pl_heap_push(w, c.left);
    }
}

static int
pl_bpe_has_fallback(const pl_tokenizer_t *t, const uint8_t *s, uint32_t len)
{
    uint32_t  i;

    for (i = 0; i < len; i++) {
        if (t->fallback_ids[s[i]] < 0) {
            return 0;
        }
    }
    return 1;
}

static void
pl_bpe_unknown(pl_enc_t *w, const uint8_t *s, uint32_t off, uint32_t len)
{
    const pl_tokenizer_t  *t = w->t;
    uint32_t               i;

    if (t->byte_fallback && pl_bpe_has_fallback(t, s + off, len)) {
        for (i = 0; i < len; i++) {
            pl_enc_emit(w, t->fallback_ids[s[off + i]]);
        }
        w->last_unk = 0;
        return;
    }
    if (t->unk_id >= 0 && !(t->fuse_unk && w->last_unk)) {
        pl_enc_emit(w, t->unk_id);
    }
    w->last_unk = (t->unk_id >= 0);
}

static int
pl_bpe_symbols(pl_enc_t *w, const uint8_t *s, size_t len)
{
    const pl_tokenizer_t  *t = w->t;
    size_t                 i, n = 0, cl;

    if (pl_enc_grow(w, (void **) &w->sym, &w->capsym, len,
                    sizeof(pl_bpe_sym_t)) != 0)
    {
        return -1;
    }
    for (i = 0; i < len; i += cl, n++) {
        cl = t->byte_level ? 1 : pl_utf8_seq_len(s + i, len - i);
        w->sym[n].id = t->byte_level ? t->byte_ids[s[i]]
                       : pl_tok_lookup(t, (const char *) s + i, cl);
        w->sym[n].off = (uint32_t) i;
        w->sym[n].len = (uint32_t) cl;
        w->sym[n].prev = (int32_t) n - 1;
        w->sym[n].next = (int32_t) n + 1;
    }
    w->sym[n - 1].next = -1;
    return (int) n;
}

/* The byte-level spelling of s (for the whole-word vocabulary check):
   its length in w->spell, -1 on error, -2 when a byte has no piece. */
static long
pl_bpe_spell(pl_enc_t *w, const uint8_t *s, size_t len)
{
    const pl_tokenizer_t  *t = w->t;
    size_t                 i, plen, n = 0;
    const char            *p;

    if (pl_enc_grow(w, (void **) &w->spell, &w->capspell, len * 2 + 1, 1)
        != 0)
    {
        return -1;
    }
    for (i = 0; i < len; i++) {
        if (t->byte_ids[s[i]] < 0) {
            return -2;
        }
        p = pl_tok_piece(t, t->byte_ids[s[i]], &plen);
        memcpy(w->spell + n, p, plen);
        n += plen;
    }
    return (long) n;
}

static void
pl_bpe_word(pl_enc_t *w, const uint8_t *s, size_t len)
{
    const pl_tokenizer_t  *t = w->t;
    int32_t                i, id;
    int                    n;

    if (t->ignore_merges) {
        long  n = t->byte_level ? pl_bpe_spell(w, s, len) : -3;

        if (n == -1) {
            return;
        }
        id = (n == -3) ? pl_tok_lookup(t, (const char *) s, len)
             : (n >= 0) ? pl_tok_lookup(t, w->spell, (size_t) n) : -1;
        if (id >= 0) {
            pl_enc_emit(w, id);
            w->last_unk = 0;
            return;
        }
    }
    n = pl_bpe_symbols(w, s, len);
    w->word = s;
    if (n <= 0) {
        return;
    }
    if (n <= PL_BPE_SCAN_MAX) {
        pl_bpe_scan(w, n);
    } else {
        pl_bpe_heap(w);
    }
    for (i = 0; i >= 0; i = w->sym[i].next) {
        if (w->sym[i].id >= 0) {
            pl_enc_emit(w, w->sym[i].id);
            w->last_unk = 0;
        } else {
            pl_bpe_unknown(w, s, w->sym[i].off, w->sym[i].len);
        }
    }
}

/* ---- pre-tokenizers ---- */

static int
pl_is_js_space(uint32_t cp)
{
    return cp == 0x09 || cp == 0x0a || cp == 0x0b || cp == 0x0c
           || cp == 0x0d || cp == 0xfeff || cp == 0x2028 || cp == 0x2029
           || pl_uc_category(cp) == PL_UC_ZS;
}

static const char *
pl_memfind(const char *h, size_t hlen, const char *n, size_t nlen)
{
    const char  *p = h, *end = h + hlen;

    while (nlen && (size_t) (end - p) >= nlen) {
        p = memchr(p, n[0], (size_t) (end - p) - nlen + 1);
        if (p == NULL) {
            return NULL;
        }
        if (memcmp(p, n, nlen) == 0) {
            return p;
        }
        p++;
    }
    return NULL;
}

/* Next non-empty match of the pattern (regex or string) at or after pos. */
static int
pl_pre_find(pl_enc_t *w, const pl_tok_pre_t *p, const char *s, size_t len,
    size_t pos, size_t *ms, size_t *me)
{
    const char  *f;
    int          r;

    if (p->re == NULL) {
        f = pl_memfind(s + pos, len - pos, p->str, p->strlen);
        *ms = f ? (size_t) (f - s) : 0;
        *me = *ms + p->strlen;
        return f != NULL;
    }
    for (;;) {
        r = pl_regex_search(p->re, s, len, pos, ms, me, &w->stack);
        if (r <= 0 || *me > *ms) {
            if (r < 0) {
                w->rc = PL_ENC_NOMEM;
            }
            return r;
        }
        if (*ms >= len) {
            return 0;
        }
        pos = *ms + pl_utf8_seq_len((const uint8_t *) s + *ms, len - *ms);
    }
}

static int
pl_pieces_push(pl_enc_t *w, size_t off, size_t len, int match)
{
    if (len == 0) {
        return 0;
    }
    if (pl_enc_grow(w, (void **) &w->pieces, &w->cappieces, w->npieces + 1,
                    sizeof(pl_piece_t)) != 0)
    {
        return -1;
    }
    w->pieces[w->npieces].off = off;
    w->pieces[w->npieces].len = len;
    w->pieces[w->npieces].match = match;
    w->npieces++;
    return 0;
}

/* Cuts the span into alternating gaps and matches ("match" as seen by
   the behavior: inverted when the pre-tokenizer says invert). */
static int
pl_pre_cut(pl_enc_t *w, const pl_tok_pre_t *p, pl_span_t sp)
{
    const char  *s = w->buf + sp.off;
    size_t       pos = 0, ms, me;
    int          r;

    w->npieces = 0;
    while ((r = pl_pre_find(w, p, s, sp.len, pos, &ms, &me)) == 1) {
        if (pl_pieces_push(w, sp.off + pos, ms - pos, p->invert) != 0
            || pl_pieces_push(w, sp.off + ms, me - ms, !p->invert) != 0)
        {
            return -1;
        }
        pos = me;
    }
    if (r < 0) {
        return -1;
    }
    return pl_pieces_push(w, sp.off + pos, sp.len - pos, p->invert);
}

/* Splits one span by the pattern according to the split behavior. */
static int
pl_pre_split_span(pl_enc_t *w, const pl_tok_pre_t *p, pl_span_t sp,
    pl_spans_t *out)
{
    size_t       i, base = out->n;
    int          prev_match = 0;
    pl_piece_t  *pc;

    if (pl_pre_cut(w, p, sp) != 0) {
        return -1;
    }
    for (i = 0; i < w->npieces; i++) {
        pc = &w->pieces[i];
        if (pc->match && p->behavior == PL_SPLIT_REMOVED) {
            continue;
        }
        if (out->n > base
            && ((pc->match && !prev_match
                 && p->behavior == PL_SPLIT_MERGED_PREV)
                || (pc->match && prev_match
                    && p->behavior == PL_SPLIT_CONTIGUOUS)
                || (!pc->match && prev_match
                    && p->behavior == PL_SPLIT_MERGED_NEXT)))
        {
            out->v[out->n - 1].len += pc->len;
        } else if (pl_spans_push(w, out, pc->off, pc->len) != 0) {
            return -1;
        }
        prev_match = pc->match;
    }
    return 0;
}

static int
pl_pre_wsplit(pl_enc_t *w, pl_span_t sp, pl_spans_t *out)
{
    const uint8_t  *s = (const uint8_t *) w->buf + sp.off;
    size_t          i = 0, start = 0, n;
    uint32_t        cp;
    int             inword = 0;

    while (i < sp.len) {
        n = pl_utf8_next(s + i, &cp);
        if (pl_uc_prop(cp) & PL_UC_WHITE_SPACE) {
            if (inword && pl_spans_push(w, out, sp.off + start, i - start)) {
                return -1;
            }
            inword = 0;
        } else if (!inword) {
            inword = 1;
            start = i;
        }
        i += n;
    }
    return inword ? pl_spans_push(w, out, sp.off + start, i - start) : 0;
}

/* Replaces spaces with the replacement and maybe prepends it. */
static int
pl_pre_metaspace(pl_enc_t *w, const pl_tok_pre_t *p, pl_span_t sp,
    int prepend, pl_spans_t *out)
{
    size_t  start = w->len, i;
    long    r = 0;

    if (prepend && !(sp.len >= p->strlen
                     && memcmp(w->buf + sp.off, p->str, p->strlen) == 0))
    {
        r = pl_enc_append(w, p->str, p->strlen);
    }
    for (i = 0; i < sp.len && r >= 0; i++) {
        char  c = w->buf[sp.off + i];

        r = (c == ' ') ? pl_enc_append(w, p->str, p->strlen)
                       : pl_enc_append(w, &c, 1);
    }
    if (r < 0) {
        return -1;
    }
    sp.off = start;
    sp.len = w->len - start;
    if (!p->split) {
        return pl_spans_push(w, out, sp.off, sp.len);
    }
    {
        pl_tok_pre_t  sp_pre = *p;

        sp_pre.re = NULL;
        sp_pre.behavior = PL_SPLIT_MERGED_NEXT;
        sp_pre.invert = 0;
        return pl_pre_split_span(w, &sp_pre, sp, out);
    }
}

static int
pl_pre_bytelevel(pl_enc_t *w, const pl_tok_pre_t *p, pl_span_t sp,
    pl_spans_t *out)
{
    if (p->add_prefix_space && w->buf[sp.off] != ' ') {
        size_t  start = w->len;

        if (pl_enc_append(w, " ", 1) < 0
            || pl_enc_append(w, w->buf + sp.off, sp.len) < 0)
        {
            return -1;
        }
        sp.off = start;
        sp.len++;
    }
    if (p->re == NULL) {
        return pl_spans_push(w, out, sp.off, sp.len);
    }
    return pl_pre_split_span(w, p, sp, out);
}

static int
pl_pre_step(pl_enc_t *w, const pl_tok_pre_t *p, int first_section)
{
    size_t  i;
    int     rc = 0;

    w->b.n = 0;
    for (i = 0; i < w->a.n && rc == 0; i++) {
        pl_span_t  sp = w->a.v[i];

        switch (p->type) {
        case PL_PRE_SPLIT:
            rc = pl_pre_split_span(w, p, sp, &w->b);
            break;
        case PL_PRE_WSPLIT:
            rc = pl_pre_wsplit(w, sp, &w->b);
            break;
        case PL_PRE_METASPACE:
            rc = pl_pre_metaspace(w, p, sp,
                p->prepend_scheme == PL_PREPEND_ALWAYS
                || (p->prepend_scheme == PL_PREPEND_FIRST && first_section
                    && i == 0), &w->b);
            break;
        default:
            rc = pl_pre_bytelevel(w, p, sp, &w->b);
            break;
        }
    }
    {
        pl_spans_t  tmp = w->a;

        w->a = w->b;
        w->b = tmp;
    }
    return rc;
}

/* ---- normalizers ---- */

static long
pl_norm_replace(pl_enc_t *w, const pl_tok_norm_t *n, size_t off,
    size_t len)
{
    size_t  start = w->len, pos = 0, ms, me;
    int     r;

    while (pos <= len) {
        if (n->re != NULL) {
            r = pl_regex_search(n->re, w->buf + off, len, pos, &ms, &me,
                                &w->stack);
            if (r < 0) {
                w->rc = PL_ENC_NOMEM;
                return -1;
            }
        } else {
            const char *f = (pos + n->textlen <= len)
                ? pl_memfind(w->buf + off + pos, len - pos, n->text, n->textlen)
                : NULL;

            r = (f != NULL);
            ms = f ? (size_t) (f - (w->buf + off)) : 0;
            me = ms + n->textlen;
        }
        if (r == 0 || me == ms) {
            break;
        }
        if (pl_enc_append(w, w->buf + off + pos, ms - pos) < 0
            || pl_enc_append(w, n->content, n->contentlen) < 0)
        {
            return -1;
        }
        pos = me;
    }
    if (pl_enc_append(w, w->buf + off + pos, len - pos) < 0) {
        return -1;
    }
    return (long) start;
}

static long
pl_norm_map(pl_enc_t *w, const pl_tok_norm_t *n, size_t off, size_t len)
{
    const uint8_t  *s;
    size_t          start = w->len, i = 0, k;
    uint8_t         tmp[4];
    uint32_t        cp;

    if (pl_enc_grow(w, (void **) &w->buf, &w->cap, w->len + len * 2 + 1, 1)
        != 0)
    {
        return -1;
    }
    s = (const uint8_t *) w->buf + off;
    while (i < len) {
        i += pl_utf8_next(s + i, &cp);
        if (n->type == PL_NORM_STRIP_ACCENTS) {
            unsigned  c = pl_uc_category(cp);

            if (c == PL_UC_MN || c == PL_UC_MC || c == PL_UC_ME) {
                continue;
            }
        } else if (cp == 0x130) {
            memcpy(w->buf + w->len, "i\xcc\x87", 3);
            w->len += 3;
            continue;
        } else {
            cp = pl_uc_tolower(cp);
        }
        k = pl_utf8_put(cp, tmp);
        memcpy(w->buf + w->len, tmp, k);
        w->len += k;
    }
    return (long) start;
}

static void
pl_norm_strip(pl_enc_t *w, const pl_tok_norm_t *n, pl_span_t *sp)
{
    const uint8_t  *s = (const uint8_t *) w->buf + sp->off;
    size_t          a = 0, b = sp->len, k;
    uint32_t        cp;

    while (n->left && a < b) {
        k = pl_utf8_next(s + a, &cp);
        if (!pl_is_js_space(cp)) {
            break;
        }
        a += k;
    }
    while (n->right && b > a) {
        size_t  q = b - 1;

        while (q > a && (s[q] & 0xc0) == 0x80) {
            q--;
        }
        pl_utf8_next(s + q, &cp);
        if (!pl_is_js_space(cp)) {
            break;
        }
        b = q;
    }
    sp->off += a;
    sp->len = b - a;
}

static long
pl_norm_unicode(pl_enc_t *w, const pl_tok_norm_t *n, const pl_span_t *sp)
{
    size_t  olen;
    char   *o = pl_uc_normalize((pl_uc_form_t) n->form, w->buf + sp->off,
                                sp->len, &olen);
    long    off;

    if (o == NULL) {
        w->rc = PL_ENC_NOMEM;
        return -1;
    }
    off = pl_enc_append(w, o, olen);
    free(o);
    return off;
}

static int
pl_normalize(pl_enc_t *w, pl_span_t *sp)
{
    const pl_tokenizer_t  *t = w->t;
    size_t                 i, start;
    long                   off;

    for (i = 0; i < t->nnorms && sp->len > 0; i++) {
        const pl_tok_norm_t  *n = &t->norms[i];

        start = w->len;
        switch (n->type) {
        case PL_NORM_STRIP:
            pl_norm_strip(w, n, sp);
            continue;
        case PL_NORM_UNICODE:
            off = pl_norm_unicode(w, n, sp);
            break;
        case PL_NORM_PREPEND:
            off = pl_enc_append(w, n->text, n->textlen);
            if (off >= 0 && pl_enc_append(w, w->buf + sp->off, sp->len) < 0) {
                off = -1;
            }
            break;
        case PL_NORM_REPLACE:
            off = pl_norm_replace(w, n, sp->off, sp->len);
            break;
        default:
            off = pl_norm_map(w, n, sp->off, sp->len);
            break;
        }
        if (off < 0) {
            return -1;
        }
        sp->off = (size_t) off;
        sp->len = w->len - start;
    }
    return 0;
}

/* ---- sections ---- */

static void
pl_enc_section(pl_enc_t *w, size_t off, size_t len, int first_section)
{
    const pl_tokenizer_t  *t = w->t;
    pl_span_t              sp = { off, len };
    size_t                 i;

    if (len == 0) {
        return;
    }
    if (pl_normalize(w, &sp) != 0) {
        return;
    }
    w->a.n = 0;
    if (sp.len == 0 || pl_spans_push(w, &w->a, sp.off, sp.len) != 0) {
        return;
    }
    for (i = 0; i < t->npres && w->rc == PL_ENC_OK; i++) {
        if (pl_pre_step(w, &t->pres[i], first_section) != 0) {
            return;
        }
    }
    w->last_unk = 0;
    for (i = 0; i < w->a.n && w->rc == PL_ENC_OK; i++) {
        pl_bpe_word(w, (const uint8_t *) w->buf + w->a.v[i].off,
                    w->a.v[i].len);
    }
}

/* The longest added token at s[pos..len) that may match here, or NULL. */
static const pl_tok_added_t *
pl_enc_added_at(const pl_tokenizer_t *t, const char *s, size_t len,
    size_t pos, int parse_special)
{
    uint8_t  b = (uint8_t) s[pos];
    size_t   k;

    for (k = t->added_first[b]; k < t->added_first[b + 1]; k++) {
        const pl_tok_added_t  *a = &t->added[k];

        if (a->len <= len - pos && (parse_special || !a->special)
            && memcmp(t->pool + a->off, s + pos, a->len) == 0)
        {
            return a;
        }
    }
    return NULL;
}

static size_t
pl_trim_end(const char *s, size_t start, size_t end)
{
    uint32_t  cp;

    while (end > start) {
        size_t  q = end - 1;

        while (q > start && ((uint8_t) s[q] & 0xc0) == 0x80) {
            q--;
        }
        pl_utf8_next((const uint8_t *) s + q, &cp);
        if (!pl_is_js_space(cp)) {
            break;
        }
        end = q;
    }
    return end;
}

static size_t
pl_trim_start(const char *s, size_t pos, size_t len)
{
    uint32_t  cp;
    size_t    k;

    while (pos < len) {
        k = pl_utf8_next((const uint8_t *) s + pos, &cp);
        if (!pl_is_js_space(cp)) {
            break;
        }
        pos += k;
    }
    return pos;
}

static void
pl_enc_text(pl_enc_t *w, const char *text, size_t len, int parse_special)
{
    const pl_tokenizer_t  *t = w->t;
    const pl_tok_added_t  *a;
    size_t                 pos = 0, start = 0, end;
    int                    first = 1;
    long                   off;

    while (pos < len && w->rc == PL_ENC_OK) {
        a = t->nadded ? pl_enc_added_at(t, text, len, pos, parse_special)
                      : NULL;
        if (a == NULL) {
            pos++;
            continue;
        }
        end = a->lstrip ? pl_trim_end(text, start, pos) : pos;
        if (end > start) {
            w->len = 0;
            off = pl_enc_append(w, text + start, end - start);
            if (off < 0) {
                return;
            }
            pl_enc_section(w, (size_t) off, end - start, first);
        }
        first = 0;
        pl_enc_emit(w, a->id);
        pos += a->len;
        start = a->rstrip ? pl_trim_start(text, pos, len) : pos;
        pos = start;
    }
    if (start < len && w->rc == PL_ENC_OK) {
        w->len = 0;
        off = pl_enc_append(w, text + start, len - start);
        if (off >= 0) {
            pl_enc_section(w, (size_t) off, len - start, first);
        }
    }
}

int
pl_tokenizer_encode(const pl_tokenizer_t *t, const char *text, size_t len,
    int add_special, int parse_special, int32_t *ids, size_t cap)
{
    pl_enc_t  w;
    size_t    i;

    if (!pl_utf8_valid(text, len)) {
        return PL_ENC_INVALID;
    }
    memset(&w, 0, sizeof(w));
    w.t = t;
    w.ids = ids;
    w.capids = cap;
    for (i = 0; add_special && i < t->nprefix; i++) {
        pl_enc_emit(&w, t->prefix[i]);
    }
    pl_enc_text(&w, text, len, parse_special);
    for (i = 0; add_special && i < t->nsuffix; i++) {
        pl_enc_emit(&w, t->suffix[i]);
    }
    free(w.buf);
    free(w.spell);
    free(w.a.v);
    free(w.b.v);
    free(w.stack.data);
    free(w.sym);
    free(w.pieces);
    free(w.heap);
    if (w.rc != PL_ENC_OK) {
        return w.rc;
    }
    return w.nids > (size_t) INT32_MAX ? PL_ENC_FULL : (int) w.nids;
}
