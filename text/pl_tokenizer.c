/*
 * pl_tokenizer: loads a Hugging Face tokenizer.json into the read-only
 * form of pl_tok_internal.h.
 *
 * The model must be BPE (byte-level like GPT-2, Llama 3 and Qwen, or
 * SentencePiece-style with byte fallback like Llama 2 and Mistral).  The
 * vocabulary becomes a string pool plus an open-addressing hash, the
 * merges a hash from (left id, right id) to (rank, merged id).  Each
 * pipeline stage (normalizer, pre-tokenizer, post-processor, decoder) is
 * flattened into a small list of steps (pl_tok_pipeline.c); a component
 * we do not implement makes the load fail with a message that names it,
 * never a silent approximation.  Encoding lives in pl_tok_encode.c,
 * decoding in pl_tok_decode.c.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pl_tok_internal.h"
#include "pl_tok_json.h"

#define PL_TOK_MAX_ID     (1 << 24)
#define PL_TOK_MAX_FILE   ((size_t) 1 << 30)
#define PL_TOK_MAX_PIECE  1024
#define PL_TOK_FNV_BASIS  0xcbf29ce484222325ULL

#if defined(__GNUC__)
#define PL_PREFETCH(p)    __builtin_prefetch(p)
#else
#define PL_PREFETCH(p)    ((void) (p))
#endif

int
pl_tok_fail(pl_tok_loader_t *ld, const char *fmt, const char *arg)
{
    snprintf(ld->err, ld->errlen, fmt, arg ? arg : "");
    return -1;
}

static uint64_t
pl_tok_fnv(uint64_t h, const char *s, size_t len)
{
    size_t  i;

    for (i = 0; i < len; i++) {
        h = (h ^ (uint8_t) s[i]) * 0x100000001b3ULL;
    }
    return h;
}

static uint64_t
pl_tok_mix(uint64_t h)
{
    return h ^ (h >> 29);
}

static uint64_t
pl_tok_hash(const char *s, size_t len)
{
    return pl_tok_mix(pl_tok_fnv(PL_TOK_FNV_BASIS, s, len));
}

static int32_t
pl_tok_lookup_h(const pl_tokenizer_t *t, const char *s, size_t len,
    uint64_t h)
{
    uint32_t  tag = (uint32_t) (h >> 32);
    size_t    i = (size_t) h & t->hashmask;

    for (;;) {
        int32_t  id = t->hash[i].id;

        if (id < 0) {
            return -1;
        }
        if (t->hash[i].tag == tag && t->hash[i].len == len
            && memcmp(t->pool + t->hash[i].off, s, len) == 0)
        {
            return id;
        }
        i = (i + 1) & t->hashmask;
    }
}

int32_t
pl_tok_lookup(const pl_tokenizer_t *t, const char *s, size_t len)
{
    return pl_tok_lookup_h(t, s, len, pl_tok_hash(s, len));
}

static int
pl_tok_pool_add(pl_tok_loader_t *ld, const char *s, size_t len,
    uint32_t *off)
{
    pl_tokenizer_t  *t = ld->t;

    if (t->poollen + len + 1 > t->poolcap) {
        size_t  cap = t->poolcap ? t->poolcap : 1 << 16;
        char   *p;

        while (cap < t->poollen + len + 1) {
            cap *= 2;
        }
        if (cap > UINT32_MAX) {
            return pl_tok_fail(ld, "vocabulary too large%s", NULL);
        }
        p = realloc(t->pool, cap);
        if (p == NULL) {
            return pl_tok_fail(ld, "out of memory%s", NULL);
        }
        t->pool = p;
        t->poolcap = cap;
    }
    *off = (uint32_t) t->poollen;
    memcpy(t->pool + t->poollen, s, len);
    t->pool[t->poollen + len] = '\0';
    t->poollen += len + 1;
    return 0;
}

/* Sets the piece of id (first definition wins, added tokens override). */
static int
pl_tok_set_piece(pl_tok_loader_t *ld, int32_t id, const char *s, size_t len,
    int added)
{
    pl_tokenizer_t  *t = ld->t;

    if ((t->flags[id] & PL_TOK_PRESENT) && !added) {
        return 0;
    }
    if (pl_tok_pool_add(ld, s, len, &t->piece_off[id]) != 0) {
        return -1;
    }
    t->piece_len[id] = (uint32_t) len;
    t->flags[id] |= PL_TOK_PRESENT | (added ? PL_TOK_ADDED : 0);
    return 0;
}

static void
pl_tok_hash_insert(pl_tokenizer_t *t, int32_t id)
{
    size_t    len = t->piece_len[id];
    uint64_t  h = pl_tok_hash(t->pool + t->piece_off[id], len);
    uint32_t  tag = (uint32_t) (h >> 32);
    size_t    i = (size_t) h & t->hashmask;

    for (;;) {
        int32_t  cur = t->hash[i].id;

        if (cur < 0) {
            t->hash[i].id = id;
            t->hash[i].tag = tag;
            t->hash[i].off = t->piece_off[id];
            t->hash[i].len = (uint32_t) len;
            return;
        }
        if (t->hash[i].tag == tag && t->piece_len[cur] == len
            && memcmp(t->pool + t->piece_off[cur], t->pool + t->piece_off[id],
                      len) == 0)
        {
            if (t->flags[id] & PL_TOK_ADDED) {
                t->hash[i].id = id;
                t->hash[i].off = t->piece_off[id];
            }
            return;
        }
        i = (i + 1) & t->hashmask;
    }
}

int
pl_tok_id_of(pl_tok_loader_t *ld, const pl_json_t *v, const char *what,
    int32_t *id)
{
    if (v == NULL || v->type != PL_JSON_NUMBER || v->u.num < 0
        || v->u.num >= PL_TOK_MAX_ID || v->u.num != (double) (int32_t) v->u.num)
    {
        return pl_tok_fail(ld, "%s: bad token id", what);
    }
    *id = (int32_t) v->u.num;
    return 0;
}

static int
pl_tok_alloc_vocab(pl_tok_loader_t *ld, uint32_t n)
{
    pl_tokenizer_t  *t = ld->t;
    size_t           hsize = 1024;

    t->nvocab = n;
    t->piece_off = calloc(n ? n : 1, sizeof(uint32_t));
    t->piece_len = calloc(n ? n : 1, sizeof(uint32_t));
    t->flags = calloc(n ? n : 1, 1);
    while (hsize < (size_t) n * 2) {
        hsize *= 2;
    }
    t->hash = malloc(hsize * sizeof(pl_tok_slot_t));
    if (t->piece_off == NULL || t->piece_len == NULL || t->flags == NULL
        || t->hash == NULL)
    {
        return pl_tok_fail(ld, "out of memory%s", NULL);
    }
    memset(t->hash, 0xff, hsize * sizeof(pl_tok_slot_t));
    t->hashmask = hsize - 1;
    return 0;
}

static int
pl_tok_load_vocab(pl_tok_loader_t *ld, const pl_json_t *vocab,
    const pl_json_t *added)
{
    int32_t          id, maxid = -1;
    size_t           i;

    if (vocab == NULL || vocab->type != PL_JSON_OBJECT) {
        return pl_tok_fail(ld, "model.vocab: missing or not an object%s",
                           NULL);
    }
    if (added != NULL && added->type != PL_JSON_ARRAY) {
        return pl_tok_fail(ld, "added_tokens: not an array%s", NULL);
    }
    for (i = 0; i < vocab->n; i++) {
        if (pl_tok_id_of(ld, &vocab->u.kids[2 * i + 1], "model.vocab", &id)
            != 0)
        {
            return -1;
        }
        maxid = id > maxid ? id : maxid;
    }
    for (i = 0; added != NULL && i < added->n; i++) {
        if (pl_tok_id_of(ld, pl_json_get(&added->u.kids[i], "id"),
                         "added_tokens", &id) != 0)
        {
            return -1;
        }
        maxid = id > maxid ? id : maxid;
    }
    if (pl_tok_alloc_vocab(ld, (uint32_t) (maxid + 1)) != 0) {
        return -1;
    }
    for (i = 0; i < vocab->n; i++) {
        const pl_json_t  *k = &vocab->u.kids[2 * i];

        id = (int32_t) vocab->u.kids[2 * i + 1].u.num;
        if (pl_tok_set_piece(ld, id, k->u.s, k->n, 0) != 0) {
            return -1;
        }
    }
    return 0;
}

static int
pl_tok_added_cmp(const void *a, const void *b, void *pool)
{
    const pl_tok_added_t  *x = a, *y = b;
    const uint8_t         *px = (const uint8_t *) pool + x->off;
    const uint8_t         *py = (const uint8_t *) pool + y->off;

    if (px[0] != py[0]) {
        return px[0] < py[0] ? -1 : 1;
    }
    if (x->len != y->len) {
        return x->len > y->len ? -1 : 1;
    }
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Insertion sort: qsort_r is not in C11 and the list is short. */
static void
pl_tok_sort_added(pl_tokenizer_t *t)
{
    size_t  i, j;

    for (i = 1; i < t->nadded; i++) {
        pl_tok_added_t  a = t->added[i];

        for (j = i; j > 0 && pl_tok_added_cmp(&t->added[j - 1], &a, t->pool)
                             > 0; j--)
        {
            t->added[j] = t->added[j - 1];
        }
        t->added[j] = a;
    }
}

static int
pl_tok_load_added(pl_tok_loader_t *ld, const pl_json_t *added)
{
    pl_tokenizer_t  *t = ld->t;
    size_t           i, n = added ? added->n : 0, k = 0;

    t->added = calloc(n ? n : 1, sizeof(pl_tok_added_t));
    if (t->added == NULL) {
        return pl_tok_fail(ld, "out of memory%s", NULL);
    }
    for (i = 0; i < n; i++) {
        const pl_json_t  *a = &added->u.kids[i];
        const pl_json_t  *c = pl_json_get(a, "content");
        pl_tok_added_t   *at = &t->added[k];

        if (pl_json_str(c) == NULL || c->n == 0) {
            return pl_tok_fail(ld, "added_tokens: missing content%s", NULL);
        }
        at->id = (int32_t) pl_json_get(a, "id")->u.num;
        if (pl_tok_set_piece(ld, at->id, c->u.s, c->n, 1) != 0) {
            return -1;
        }
        at->off = t->piece_off[at->id];
        at->len = c->n;
        at->special = (uint8_t) pl_json_bool(pl_json_get(a, "special"), 0);
        at->lstrip = (uint8_t) pl_json_bool(pl_json_get(a, "lstrip"), 0);
        at->rstrip = (uint8_t) pl_json_bool(pl_json_get(a, "rstrip"), 0);
        at->normalized = (uint8_t) pl_json_bool(pl_json_get(a, "normalized"),
                                                !at->special);
        if (at->special) {
            t->flags[at->id] |= PL_TOK_SPECIAL;
        }
        k++;
    }
    t->nadded = k;
    pl_tok_sort_added(t);
    for (i = 0, k = 0; i < 256; i++) {
        t->added_first[i] = (uint32_t) k;
        while (k < t->nadded && (uint8_t) t->pool[t->added[k].off] == i) {
            k++;
        }
    }
    t->added_first[256] = (uint32_t) t->nadded;
    return 0;
}

/* Fills the merge table from the resolved list; a later duplicate of a
   pair overrides an earlier one, as in the reference.  The table is far
   larger than the caches, so the slot of an entry a few places ahead is
   prefetched. */
static void
pl_tok_merges_fill(pl_tokenizer_t *t, const pl_tok_merge_t *list, size_t n)
{
    size_t  k, i;

    for (k = 0; k < n; k++) {
        if (k + 8 < n) {
            PL_PREFETCH(&t->merges[pl_tok_merge_slot(list[k + 8].key,
                                                     t->mmask)]);
        }
        i = pl_tok_merge_slot(list[k].key, t->mmask);
        while (t->merges[i].key != 0 && t->merges[i].key != list[k].key) {
            i = (i + 1) & t->mmask;
        }
        t->merges[i] = list[k];
    }
}

static int
pl_tok_merge_pair(pl_tok_loader_t *ld, const pl_json_t *m, const char **a,
    size_t *alen, const char **b, size_t *blen)
{
    const char  *sp;

    if (m->type == PL_JSON_ARRAY && m->n == 2
        && m->u.kids[0].type == PL_JSON_STRING
        && m->u.kids[1].type == PL_JSON_STRING)
    {
        *a = m->u.kids[0].u.s;
        *alen = m->u.kids[0].n;
        *b = m->u.kids[1].u.s;
        *blen = m->u.kids[1].n;
        return 0;
    }
    if (m->type != PL_JSON_STRING
        || (sp = memchr(m->u.s, ' ', m->n)) == NULL
        || memchr(sp + 1, ' ', m->n - (size_t) (sp + 1 - m->u.s)) != NULL)
    {
        return pl_tok_fail(ld, "model.merges: entry is not a pair%s", NULL);
    }
    *a = m->u.s;
    *alen = (size_t) (sp - m->u.s);
    *b = sp + 1;
    *blen = m->n - *alen - 1;
    return 0;
}

/* Phase one of loading merges: each pair's three piece hashes (left,
   right, merged), computed in order over the JSON. */
static int
pl_tok_merges_hash(pl_tok_loader_t *ld, const pl_json_t *merges,
    uint64_t *hs)
{
    size_t  i;

    for (i = 0; i < merges->n; i++) {
        const char  *a = NULL, *b = NULL;
        size_t       alen = 0, blen = 0;
        uint64_t     ha;

        if (pl_tok_merge_pair(ld, &merges->u.kids[i], &a, &alen, &b, &blen)
            != 0)
        {
            return -1;
        }
        if (alen + blen > PL_TOK_MAX_PIECE) {
            return pl_tok_fail(ld, "model.merges: piece too long%s", NULL);
        }
        ha = pl_tok_fnv(PL_TOK_FNV_BASIS, a, alen);
        hs[3 * i] = pl_tok_mix(ha);
        hs[3 * i + 1] = pl_tok_hash(b, blen);
        hs[3 * i + 2] = pl_tok_mix(pl_tok_fnv(ha, b, blen));
    }
    return 0;
}

/* Phase two: the ids of the three pieces, with the vocabulary slots of a
   pair a few places ahead prefetched (the lookups are cache misses). */
static int
pl_tok_merges_resolve(pl_tok_loader_t *ld, const pl_json_t *merges,
    const uint64_t *hs, pl_tok_merge_t *list)
{
    pl_tokenizer_t  *t = ld->t;
    size_t           i, k;
    char             buf[PL_TOK_MAX_PIECE];

    for (i = 0; i < merges->n; i++) {
        const char  *a = NULL, *b = NULL;
        size_t       alen = 0, blen = 0;
        int32_t      ia, ib, im;

        for (k = 0; k < 3 && i + 8 < merges->n; k++) {
            PL_PREFETCH(&t->hash[hs[3 * (i + 8) + k] & t->hashmask]);
        }
        pl_tok_merge_pair(ld, &merges->u.kids[i], &a, &alen, &b, &blen);
        memcpy(buf, a, alen);
        memcpy(buf + alen, b, blen);
        ia = pl_tok_lookup_h(t, a, alen, hs[3 * i]);
        ib = pl_tok_lookup_h(t, b, blen, hs[3 * i + 1]);
        im = pl_tok_lookup_h(t, buf, alen + blen, hs[3 * i + 2]);
        if (ia < 0 || ib < 0 || im < 0) {
            snprintf(ld->err, ld->errlen,
                     "model.merges[%zu]: a piece of \"%.*s %.*s\" is not "
                     "in the vocabulary", i, (int) alen, a, (int) blen, b);
            return -1;
        }
        list[i].key = pl_tok_merge_key(ia, ib);
        list[i].rank = (uint32_t) i;
        list[i].id = im;
    }
    return 0;
}

static int
pl_tok_load_merges(pl_tok_loader_t *ld, const pl_json_t *merges)
{
    pl_tokenizer_t  *t = ld->t;
    size_t           msize = 1024;
    pl_tok_merge_t  *list;
    uint64_t        *hs;
    int              rc;

    if (merges == NULL || merges->type != PL_JSON_ARRAY) {
        return pl_tok_fail(ld, "model.merges: missing or not an array%s",
                           NULL);
    }
    while (msize < (size_t) merges->n + merges->n / 2) {
        msize *= 2;
    }
    t->merges = calloc(msize, sizeof(pl_tok_merge_t));
    t->mmask = msize - 1;
    list = malloc((merges->n + 1) * sizeof(pl_tok_merge_t));
    hs = malloc((merges->n + 1) * 3 * sizeof(uint64_t));
    rc = (t->merges == NULL || list == NULL || hs == NULL)
         ? pl_tok_fail(ld, "out of memory%s", NULL)
         : pl_tok_merges_hash(ld, merges, hs);
    if (rc == 0) {
        rc = pl_tok_merges_resolve(ld, merges, hs, list);
    }
    if (rc == 0) {
        pl_tok_merges_fill(t, list, merges->n);
    }
    free(hs);
    free(list);
    return rc;
}

/* GPT-2's byte to printable character table. */
static uint32_t
pl_tok_byte_char(unsigned b)
{
    unsigned  n = 0, c;

    if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac)
        || (b >= 0xae && b <= 0xff))
    {
        return b;
    }
    for (c = 0; c < b; c++) {
        if (!((c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac)
              || (c >= 0xae && c <= 0xff)))
        {
            n++;
        }
    }
    return 256 + n;
}

static void
pl_tok_byte_tables(pl_tokenizer_t *t)
{
    unsigned  b;
    uint8_t   buf[8];
    char      hex[8];

    for (b = 0; b < 256; b++) {
        size_t  n = pl_utf8_put(pl_tok_byte_char(b), buf);

        t->byte_ids[b] = pl_tok_lookup(t, (const char *) buf, n);
        snprintf(hex, sizeof(hex), "<0x%02X>", b);
        t->fallback_ids[b] = pl_tok_lookup(t, hex, 6);
    }
}

static int
pl_tok_load_model(pl_tok_loader_t *ld, const pl_json_t *root)
{
    pl_tokenizer_t    *t = ld->t;
    const pl_json_t   *model = pl_json_get(root, "model");
    const pl_json_t   *added = pl_json_get(root, "added_tokens");
    const char        *type = pl_json_str(pl_json_get(model, "type"));
    const char        *s;
    size_t             i;

    if (model == NULL || model->type != PL_JSON_OBJECT) {
        return pl_tok_fail(ld, "model: missing%s", NULL);
    }
    if (type != NULL && strcmp(type, "BPE") != 0) {
        return pl_tok_fail(ld, "model type %s is not supported", type);
    }
    s = pl_json_str(pl_json_get(model, "continuing_subword_prefix"));
    if (s != NULL && *s) {
        return pl_tok_fail(ld, "BPE continuing_subword_prefix is not "
                           "supported%s", NULL);
    }
    s = pl_json_str(pl_json_get(model, "end_of_word_suffix"));
    if (s != NULL && *s) {
        return pl_tok_fail(ld, "BPE end_of_word_suffix is not supported%s",
                           NULL);
    }
    if (pl_json_get(model, "dropout") != NULL
        && pl_json_get(model, "dropout")->type == PL_JSON_NUMBER
        && pl_json_get(model, "dropout")->u.num != 0)
    {
        return pl_tok_fail(ld, "BPE dropout is not supported%s", NULL);
    }
    if (pl_tok_load_vocab(ld, pl_json_get(model, "vocab"), added) != 0
        || pl_tok_load_added(ld, added) != 0)
    {
        return -1;
    }
    for (i = 0; i < t->nvocab; i++) {
        if (t->flags[i] & PL_TOK_PRESENT) {
            pl_tok_hash_insert(t, (int32_t) i);
        }
    }
    if (pl_tok_load_merges(ld, pl_json_get(model, "merges")) != 0) {
        return -1;
    }
    t->byte_fallback = pl_json_bool(pl_json_get(model, "byte_fallback"), 0);
    t->fuse_unk = pl_json_bool(pl_json_get(model, "fuse_unk"), 0);
    t->ignore_merges = pl_json_bool(pl_json_get(model, "ignore_merges"), 0);
    t->unk_id = -1;
    s = pl_json_str(pl_json_get(model, "unk_token"));
    if (s != NULL) {
        t->unk_id = pl_tok_lookup(t, s, pl_json_get(model, "unk_token")->n);
        if (t->unk_id < 0) {
            return pl_tok_fail(ld, "model.unk_token %s is not in the "
                               "vocabulary", s);
        }
    }
    pl_tok_byte_tables(t);
    return 0;
}

/* ---- loading ---- */

static char *
pl_tok_read_file(const char *path, size_t *len, char *err, size_t errlen)
{
    FILE  *f = fopen(path, "rb");
    char  *buf;
    long   size;

    if (f == NULL) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0
        || (size_t) size > PL_TOK_MAX_FILE || fseek(f, 0, SEEK_SET) != 0)
    {
        snprintf(err, errlen, "%s: cannot size the file", path);
        fclose(f);
        return NULL;
    }
    buf = malloc((size_t) size + 1);
    if (buf == NULL || fread(buf, 1, (size_t) size, f) != (size_t) size) {
        snprintf(err, errlen, "%s: read failed", path);
        free(buf);
        fclose(f);
        return NULL;
    }
    fclose(f);
    buf[size] = '\0';
    *len = (size_t) size;
    return buf;
}

/* Byte-level BPE starts every word from single bytes, so the merges of
   two bytes get a dense table that stays in cache. */
static int
pl_tok_byte_pairs(pl_tok_loader_t *ld)
{
    pl_tokenizer_t  *t = ld->t;
    unsigned         a, b;

    t->byte_pairs = malloc(65536 * sizeof(pl_tok_pair_t));
    if (t->byte_pairs == NULL) {
        return pl_tok_fail(ld, "out of memory%s", NULL);
    }
    for (a = 0; a < 256; a++) {
        for (b = 0; b < 256; b++) {
            pl_tok_pair_t  *p = &t->byte_pairs[a << 8 | b];

            if (!pl_tok_merge_find(t, t->byte_ids[a], t->byte_ids[b],
                                   &p->rank, &p->id))
            {
                p->rank = UINT32_MAX;
                p->id = -1;
            }
        }
    }
    return 0;
}

static int
pl_tok_load_root(pl_tok_loader_t *ld, const pl_json_t *root)
{
    if (root->type != PL_JSON_OBJECT) {
        return pl_tok_fail(ld, "tokenizer.json: not an object%s", NULL);
    }
    if (pl_tok_load_model(ld, root) != 0
        || pl_tok_load_normalizer(ld, pl_json_get(root, "normalizer")) != 0
        || pl_tok_load_pre(ld, pl_json_get(root, "pre_tokenizer")) != 0
        || pl_tok_load_post(ld, pl_json_get(root, "post_processor")) != 0
        || pl_tok_load_decoder(ld, pl_json_get(root, "decoder")) != 0)
    {
        return -1;
    }
    if (ld->t->dec.byte_level != ld->t->byte_level) {
        return pl_tok_fail(ld, "ByteLevel pre-tokenizer and decoder must be "
                           "used together%s", NULL);
    }
    ld->t->max_push = pl_tok_decode_bound(ld->t);
    return ld->t->byte_level ? pl_tok_byte_pairs(ld) : 0;
}

pl_tokenizer_t *
pl_tokenizer_load(const char *path, char *err, size_t errlen)
{
    pl_tok_loader_t  ld;
    pl_json_doc_t   *doc;
    char            *buf, jerr[160];
    size_t           len;
    int              rc;

    buf = pl_tok_read_file(path, &len, err, errlen);
    if (buf == NULL) {
        return NULL;
    }
    doc = pl_json_parse(buf, len, jerr, sizeof(jerr));
    free(buf);
    if (doc == NULL) {
        snprintf(err, errlen, "%s: %s", path, jerr);
        return NULL;
    }
    ld.err = err;
    ld.errlen = errlen;
    ld.t = calloc(1, sizeof(pl_tokenizer_t));
    rc = ld.t ? pl_tok_load_root(&ld, pl_json_root(doc))
              : pl_tok_fail(&ld, "out of memory%s", NULL);
    pl_json_free(doc);
    if (rc != 0) {
        pl_tokenizer_free(ld.t);
        return NULL;
    }
    return ld.t;
}

void
pl_tokenizer_free(pl_tokenizer_t *t)
{
    size_t  i;

    if (t == NULL) {
        return;
    }
    for (i = 0; i < t->nnorms; i++) {
        free(t->norms[i].text);
        free(t->norms[i].content);
        pl_regex_free(t->norms[i].re);
    }
    for (i = 0; i < t->npres; i++) {
        free(t->pres[i].str);
        pl_regex_free(t->pres[i].re);
    }
    for (i = 0; i < t->dec.nreplaces; i++) {
        free(t->dec.replaces[i].from);
        free(t->dec.replaces[i].to);
    }
    free(t->dec.replaces);
    free(t->norms);
    free(t->pres);
    free(t->prefix);
    free(t->suffix);
    free(t->added);
    free(t->merges);
    free(t->byte_pairs);
    free(t->hash);
    free(t->piece_off);
    free(t->piece_len);
    free(t->flags);
    free(t->pool);
    free(t);
}

uint32_t
pl_tokenizer_vocab_size(const pl_tokenizer_t *t)
{
    return t->nvocab;
}

const char *
pl_tokenizer_id_to_piece(const pl_tokenizer_t *t, int32_t id)
{
    if (id < 0 || (uint32_t) id >= t->nvocab
        || !(t->flags[id] & PL_TOK_PRESENT))
    {
        return NULL;
    }
    return t->pool + t->piece_off[id];
}

int32_t
pl_tokenizer_piece_to_id(const pl_tokenizer_t *t, const char *piece)
{
    return pl_tok_lookup(t, piece, strlen(piece));
}

int
pl_tokenizer_is_special(const pl_tokenizer_t *t, int32_t id)
{
    return id >= 0 && (uint32_t) id < t->nvocab
           && (t->flags[id] & PL_TOK_SPECIAL) != 0;
}
