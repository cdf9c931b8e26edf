/*
 * pl_tok_internal: the loaded form of a tokenizer.json, shared by the
 * loader (pl_tokenizer.c, pl_tok_pipeline.c), the encoder
 * (pl_tok_encode.c) and the decoder (pl_tok_decode.c).  Nothing here
 * changes after pl_tokenizer_load returns, so one tokenizer may serve any
 * number of callers.
 */

#ifndef PL_TOK_INTERNAL_H
#define PL_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "pl_regex.h"
#include "pl_tok_json.h"
#include "pl_tokenizer.h"
#include "pl_unicode.h"

#define PL_TOK_PRESENT  0x01
#define PL_TOK_ADDED    0x02
#define PL_TOK_SPECIAL  0x04

enum {
    PL_NORM_UNICODE, PL_NORM_LOWERCASE, PL_NORM_PREPEND, PL_NORM_REPLACE,
    PL_NORM_STRIP, PL_NORM_STRIP_ACCENTS
};

enum {
    PL_PRE_SPLIT, PL_PRE_BYTELEVEL, PL_PRE_METASPACE, PL_PRE_WSPLIT
};

enum {
    PL_SPLIT_ISOLATED, PL_SPLIT_REMOVED, PL_SPLIT_MERGED_PREV,
    PL_SPLIT_MERGED_NEXT, PL_SPLIT_CONTIGUOUS
};

enum {
    PL_PREPEND_ALWAYS, PL_PREPEND_FIRST, PL_PREPEND_NEVER
};

typedef struct {
    int          type;
    int          form;          /* PL_NORM_UNICODE */
    int          left, right;   /* PL_NORM_STRIP */
    char        *text;          /* prepend text, or replace string pattern */
    size_t       textlen;
    char        *content;       /* replace content */
    size_t       contentlen;
    pl_regex_t  *re;            /* replace regex pattern */
} pl_tok_norm_t;

typedef struct {
    int          type;
    pl_regex_t  *re;            /* split / byte-level regex (or NULL) */
    char        *str;           /* split string pattern, or replacement */
    size_t       strlen;
    int          behavior;
    int          invert;
    int          add_prefix_space;
    int          prepend_scheme;
    int          split;
} pl_tok_pre_t;

typedef struct {
    char    *from;
    size_t   fromlen;
    char    *to;
    size_t   tolen;
} pl_tok_replace_t;

/* The supported decoder chains, flattened into one streaming plan. */
typedef struct {
    int                byte_level;
    int                byte_fallback;
    int                metaspace;      /* replace the char, strip token 0 */
    char               meta_char[8];
    size_t             meta_len;
    int                meta_strip_first;
    pl_tok_replace_t  *replaces;       /* at most one, before byte fallback */
    size_t             nreplaces;
    char               strip_char[8];  /* whole-text Strip(content, start) */
    size_t             strip_len;
    int                strip_start;
} pl_tok_decoder_t;

typedef struct {
    uint32_t  rank;             /* UINT32_MAX: no merge */
    int32_t   id;
} pl_tok_pair_t;

typedef struct {
    uint64_t  key;              /* (left << 32 | right) + 1; 0: empty */
    uint32_t  rank;
    int32_t   id;
} pl_tok_merge_t;

typedef struct {
    uint32_t  tag;              /* high bits of the piece's hash */
    int32_t   id;               /* -1: empty */
    uint32_t  off;              /* the piece in the pool */
    uint32_t  len;
} pl_tok_slot_t;

typedef struct {
    int32_t   id;
    uint32_t  off;              /* content in the string pool */
    uint32_t  len;
    uint8_t   special;
    uint8_t   lstrip;
    uint8_t   rstrip;
    uint8_t   normalized;
} pl_tok_added_t;

struct pl_tokenizer_s {
    char              *pool;         /* all piece strings, NUL-separated */
    size_t             poollen;
    size_t             poolcap;
    uint32_t           nvocab;       /* highest id + 1 */
    uint32_t          *piece_off;    /* by id */
    uint32_t          *piece_len;
    uint8_t           *flags;

    pl_tok_slot_t     *hash;         /* piece -> id, open addressing */
    size_t             hashmask;

    pl_tok_merge_t    *merges;       /* (left, right) -> rank, merged id */
    size_t             mmask;

    int32_t            unk_id;
    int                byte_fallback;
    int                fuse_unk;
    int                ignore_merges;
    int                byte_level;   /* ByteLevel pre-tokenizer present */
    int32_t            byte_ids[256];     /* byte-level char of each byte */
    int32_t            fallback_ids[256]; /* <0xXX> pieces */
    pl_tok_pair_t     *byte_pairs;   /* byte-level: merges of two bytes, */
                                     /* indexed by first << 8 | second */

    pl_tok_added_t    *added;        /* sorted by first byte, longest first */
    size_t             nadded;
    uint32_t           added_first[257];

    pl_tok_norm_t     *norms;
    size_t             nnorms;
    pl_tok_pre_t      *pres;
    size_t             npres;

    int32_t           *prefix;       /* post-processor ids around A */
    size_t             nprefix;
    int32_t           *suffix;
    size_t             nsuffix;

    pl_tok_decoder_t   dec;
    size_t             max_push;     /* pl_detok_max_bytes */
};

/* Id of piece s[len], -1 when absent. */
int32_t pl_tok_lookup(const pl_tokenizer_t *t, const char *s, size_t len);

/* Rank and result of merging pieces a and b (pl_tok_encode.c). */
int pl_tok_merge_find(const pl_tokenizer_t *t, int32_t a, int32_t b,
    uint32_t *rank, int32_t *merged);

/* The most bytes one streaming push can write (pl_tok_decode.c). */
size_t pl_tok_decode_bound(const pl_tokenizer_t *t);

static inline uint64_t
pl_tok_merge_key(int32_t left, int32_t right)
{
    return (((uint64_t) (uint32_t) left << 32) | (uint32_t) right) + 1;
}

static inline size_t
pl_tok_merge_slot(uint64_t key, size_t mask)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return (size_t) key & mask;
}

static inline const char *
pl_tok_piece(const pl_tokenizer_t *t, int32_t id, size_t *len)
{
    *len = t->piece_len[id];
    return t->pool + t->piece_off[id];
}

/* ---- loading (pl_tokenizer.c: the model; pl_tok_pipeline.c: the rest) */

typedef struct {
    pl_tokenizer_t  *t;
    char            *err;
    size_t           errlen;
} pl_tok_loader_t;

int pl_tok_fail(pl_tok_loader_t *ld, const char *fmt, const char *arg);
int pl_tok_id_of(pl_tok_loader_t *ld, const pl_json_t *v, const char *what,
    int32_t *id);
int pl_tok_load_normalizer(pl_tok_loader_t *ld, const pl_json_t *cfg);
int pl_tok_load_pre(pl_tok_loader_t *ld, const pl_json_t *cfg);
int pl_tok_load_post(pl_tok_loader_t *ld, const pl_json_t *cfg);
int pl_tok_load_decoder(pl_tok_loader_t *ld, const pl_json_t *cfg);

#endif /* PL_TOK_INTERNAL_H */
