/*
 * gr_vocab: each token's byte string, from the model's tokenizer.json,
 * so the engine (which never links the tokenizer) can mask by bytes.
 *
 * tokenizer.json's model.vocab maps token strings to ids.  With a
 * ByteLevel decoder (GPT-2, Llama 3, Qwen) each character of a token
 * string stands for one byte through GPT-2's printable byte map; without
 * one (SentencePiece: Llama 2, Mistral) "▁" is a space and "<0xHH>" a
 * byte.  Added tokens marked special have no bytes, others their content.
 * Read once, at the first request with a grammar.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE     /* qsort_r */
#endif

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gr_vocab.h"


void
pl_vocab_free(pl_vocab_t *v)
{
    if (v == NULL) {
        return;
    }
    free(v->blob);
    free(v->off);
    free(v->sorted);
    free(v->lcp);
    free(v);
}


uint32_t
pl_vocab_size(const pl_vocab_t *v)
{
    return v->n_ids;
}


const uint8_t *
pl_vocab_bytes(const pl_vocab_t *v, int32_t id, size_t *len)
{
    if (id < 0 || (uint32_t) id >= v->n_ids
        || v->off[id + 1] == v->off[id])
    {
        *len = 0;
        return NULL;
    }
    *len = v->off[id + 1] - v->off[id];

    return v->blob + v->off[id];
}


static int
gr_vocab_cmp(const void *a, const void *b, void *arg)
{
    const pl_vocab_t  *v = arg;
    uint32_t           x = *(const uint32_t *) a, y = *(const uint32_t *) b;
    size_t             lx = v->off[x + 1] - v->off[x];
    size_t             ly = v->off[y + 1] - v->off[y];
    int                c;

    c = memcmp(v->blob + v->off[x], v->blob + v->off[y],
               lx < ly ? lx : ly);
    if (c != 0) {
        return c;
    }

    return lx < ly ? -1 : lx > ly ? 1 : (x < y ? -1 : x > y);
}


/* the byte order and common prefixes of the ids with bytes */
static int
gr_vocab_sort(pl_vocab_t *v)
{
    uint32_t  i, a, b;
    size_t    la, lb, l;

    v->sorted = malloc((size_t) (v->n_ids ? v->n_ids : 1) * sizeof(uint32_t));
    v->lcp = malloc((size_t) (v->n_ids ? v->n_ids : 1) * sizeof(uint16_t));
    if (v->sorted == NULL || v->lcp == NULL) {
        return -1;
    }

    for (i = 0; i < v->n_ids; i++) {
        if (v->off[i + 1] > v->off[i]) {
            v->sorted[v->n_sorted++] = i;
        }
    }
    qsort_r(v->sorted, v->n_sorted, sizeof(uint32_t), gr_vocab_cmp, v);

    for (i = 0; i < v->n_sorted; i++) {
        l = 0;
        if (i > 0) {
            a = v->sorted[i - 1];
            b = v->sorted[i];
            la = v->off[a + 1] - v->off[a];
            lb = v->off[b + 1] - v->off[b];
            while (l < la && l < lb
                   && v->blob[v->off[a] + l] == v->blob[v->off[b] + l])
            {
                l++;
            }
        }
        v->lcp[i] = (uint16_t) l;
    }

    return 0;
}


pl_vocab_t *
pl_vocab_from_bytes(const uint8_t *const *bytes, const uint32_t *lens,
    uint32_t n_ids, const int32_t *eos, int n_eos)
{
    pl_vocab_t  *v = calloc(1, sizeof(pl_vocab_t));
    size_t       total = 0;
    uint32_t     i, len;
    int          j;

    if (v == NULL) {
        return NULL;
    }
    v->n_ids = n_ids;

    for (i = 0; i < n_ids; i++) {
        total += lens[i] <= GR_VOCAB_MAX_TOKEN ? lens[i] : 0;
    }
    v->blob = malloc(total ? total : 1);
    v->off = malloc(((size_t) n_ids + 1) * sizeof(uint32_t));
    if (v->blob == NULL || v->off == NULL || total > UINT32_MAX) {
        pl_vocab_free(v);
        return NULL;
    }

    v->off[0] = 0;
    for (i = 0; i < n_ids; i++) {
        len = lens[i] <= GR_VOCAB_MAX_TOKEN ? lens[i] : 0;
        if (len > 0) {
            memcpy(v->blob + v->off[i], bytes[i], len);
        }
        v->off[i + 1] = v->off[i] + len;
    }

    for (j = 0; j < n_eos && v->n_eos < 8; j++) {
        if (eos[j] >= 0 && (uint32_t) eos[j] < n_ids) {
            v->eos[v->n_eos++] = eos[j];
        }
    }

    if (gr_vocab_sort(v) != 0) {
        pl_vocab_free(v);
        return NULL;
    }

    return v;
}


/* ---- tokenizer.json ---- */

/* GPT-2's byte map reversed: code point -> byte, or -1 */
static void
gr_byte_level_map(int *cp_to_byte, int n)
{
    int  b, k = 0;

    for (b = 0; b < n; b++) {
        cp_to_byte[b] = -1;
    }
    for (b = 0; b < 256; b++) {
        if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) {
            cp_to_byte[b] = b;
        } else {
            cp_to_byte[256 + k++] = b;
        }
    }
}


/* whether decoder (or one of a Sequence's) has type type */
static int
gr_decoder_has(json_t *decoder, const char *type)
{
    json_t  *t = json_object_get(decoder, "type"), *d;
    size_t   i;

    if (json_is_string(t) && strcmp(json_string_value(t), type) == 0) {
        return 1;
    }
    json_array_foreach(json_object_get(decoder, "decoders"), i, d) {
        if (gr_decoder_has(d, type)) {
            return 1;
        }
    }

    return 0;
}


/* the bytes of token string s into out (at most GR_VOCAB_MAX_TOKEN);
   their count, or 0 when s has a character the map lacks */
static uint32_t
gr_token_bytes(const char *s, int byte_level, const int *map, uint8_t *out)
{
    const uint8_t  *p = (const uint8_t *) s;
    uint32_t        n = 0, cp;
    unsigned        h;
    int             k;

    if (!byte_level && strlen(s) == 6 && sscanf(s, "<0x%2X>", &h) == 1
        && s[5] == '>')
    {
        out[0] = (uint8_t) h;
        return 1;
    }

    while (*p && n < GR_VOCAB_MAX_TOKEN) {
        if (!byte_level) {
            if (p[0] == 0xe2 && p[1] == 0x96 && p[2] == 0x81) {
                out[n++] = ' ';
                p += 3;
            } else {
                out[n++] = *p++;
            }
            continue;
        }
        k = *p < 0x80 ? 1 : (*p & 0xe0) == 0xc0 ? 2 : (*p & 0xf0) == 0xe0
            ? 3 : 4;
        cp = k == 1 ? *p : (uint32_t) (*p & (0x7f >> k));
        for (p++; --k > 0 && *p; p++) {
            cp = (cp << 6) | (*p & 0x3f);
        }
        if (cp >= 512 || map[cp] < 0) {
            return 0;
        }
        out[n++] = (uint8_t) map[cp];
    }

    return *p ? 0 : n;
}


/* every entry of tokenizer.json's vocab and added tokens into bytes */
static int
gr_vocab_fill(json_t *root, uint32_t n_ids, uint8_t *buf, uint8_t **bytes,
    uint32_t *lens)
{
    int          map[512], byte_level;
    json_t      *vocab, *id, *t;
    const char  *key;
    uint8_t     *p = buf;
    size_t       i;
    json_int_t   k;

    byte_level = gr_decoder_has(json_object_get(root, "decoder"),
                                "ByteLevel");
    gr_byte_level_map(map, 512);

    vocab = json_object_get(json_object_get(root, "model"), "vocab");
    if (!json_is_object(vocab)) {
        return -1;
    }

    json_object_foreach(vocab, key, id) {
        k = json_integer_value(id);
        if (!json_is_integer(id) || k < 0 || k >= n_ids) {
            continue;
        }
        bytes[k] = p;
        lens[k] = gr_token_bytes(key, byte_level, map, p);
        p += lens[k];
    }

    json_array_foreach(json_object_get(root, "added_tokens"), i, t) {
        k = json_integer_value(json_object_get(t, "id"));
        if (k < 0 || k >= n_ids) {
            continue;
        }
        lens[k] = 0;
        key = json_string_value(json_object_get(t, "content"));
        if (!json_is_true(json_object_get(t, "special")) && key != NULL
            && strlen(key) <= GR_VOCAB_MAX_TOKEN)
        {
            bytes[k] = p;
            lens[k] = (uint32_t) strlen(key);
            memcpy(p, key, lens[k]);
            p += lens[k];
        }
    }

    return 0;
}


/* the bytes of every token string and added token's content: no token's
   bytes are more than its string's */
static size_t
gr_vocab_text_bytes(json_t *root)
{
    json_t      *v, *t;
    const char  *key;
    size_t       n = 0, i;

    json_object_foreach(json_object_get(json_object_get(root, "model"),
                                        "vocab"), key, v)
    {
        n += strlen(key);
    }
    json_array_foreach(json_object_get(root, "added_tokens"), i, t) {
        n += json_string_length(json_object_get(t, "content"));
    }

    return n;
}


pl_vocab_t *
pl_vocab_load(const char *tokenizer_json, uint32_t n_ids, const int32_t *eos,
    int n_eos, char *err, size_t errlen)
{
    json_error_t   jerr;
    json_t        *root;
    uint8_t      **bytes = NULL, *buf = NULL;
    uint32_t      *lens = NULL;
    pl_vocab_t    *v = NULL;
    size_t         cap;

    root = json_load_file(tokenizer_json, 0, &jerr);
    if (root == NULL) {
        snprintf(err, errlen, "%s: %s", tokenizer_json, jerr.text);
        return NULL;
    }

    cap = gr_vocab_text_bytes(root);
    bytes = calloc(n_ids ? n_ids : 1, sizeof(uint8_t *));
    lens = calloc(n_ids ? n_ids : 1, sizeof(uint32_t));
    buf = malloc(cap ? cap : 1);
    if (bytes == NULL || lens == NULL || buf == NULL) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }

    if (gr_vocab_fill(root, n_ids, buf, bytes, lens) != 0) {
        snprintf(err, errlen, "%s has no model.vocab object", tokenizer_json);
        goto done;
    }

    v = pl_vocab_from_bytes((const uint8_t *const *) bytes, lens, n_ids, eos,
                            n_eos);
    if (v == NULL) {
        snprintf(err, errlen, "out of memory");
    }

done:

    json_decref(root);
    free(bytes);
    free(lens);
    free(buf);

    return v;
}
