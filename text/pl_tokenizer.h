/*
 * pl_tokenizer: Hugging Face tokenizer.json in C, shared by the nginx
 * module (encode, incremental decode) and the engine (tools, checks).
 *
 * Encoding never allocates per call beyond internal scratch that is freed
 * before returning; the caller provides the output array.  A text of len
 * bytes never needs more than len + PL_TOKENIZER_EXTRA ids.
 */

#ifndef PL_TOKENIZER_H
#define PL_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#define PL_TOKENIZER_EXTRA  16

typedef struct pl_tokenizer_s  pl_tokenizer_t;

/* NULL with a clear message in err when the file is unreadable,
   malformed or uses a feature we do not implement (named in err). */
pl_tokenizer_t *pl_tokenizer_load(const char *path, char *err,
    size_t errlen);
void pl_tokenizer_free(pl_tokenizer_t *t);

uint32_t pl_tokenizer_vocab_size(const pl_tokenizer_t *t);

/* Token text as stored in the vocabulary (NULL when id is out of range). */
const char *pl_tokenizer_id_to_piece(const pl_tokenizer_t *t, int32_t id);
/* -1 when absent */
int32_t pl_tokenizer_piece_to_id(const pl_tokenizer_t *t, const char *piece);

/* 1 when id is a special (added, special=true) token. */
int pl_tokenizer_is_special(const pl_tokenizer_t *t, int32_t id);

/*
 * Encode text[len] (UTF-8).  add_special: apply the post-processor (BOS /
 * EOS template) as Hugging Face's encode(text, add_special_tokens) does.
 * parse_special: match special added tokens in the text (when 0 they are
 * encoded as plain text).  Returns the number of ids written, -1 when the
 * text is not valid UTF-8, -2 when cap is too small, -3 when out of memory.
 */
int pl_tokenizer_encode(const pl_tokenizer_t *t, const char *text,
    size_t len, int add_special, int parse_special, int32_t *ids,
    size_t cap);

/*
 * Full decode into out[cap]; returns bytes written (not NUL-terminated),
 * or -1 when cap is too small.  skip_special drops special tokens.
 */
long pl_tokenizer_decode(const pl_tokenizer_t *t, const int32_t *ids,
    size_t n, int skip_special, char *out, size_t cap);

/*
 * Incremental decoding for streaming.  Feed ids one at a time; each push
 * returns only text that forms complete UTF-8, and the concatenation of
 * all pushes and the final flush equals pl_tokenizer_decode() of all ids.
 */
typedef struct {
    const pl_tokenizer_t  *tok;
    int                    skip_special;
    int                    n_emitted;      /* tokens seen so far */
    uint8_t                pending[64];    /* bytes of an incomplete char */
    size_t                 npending;
    uint32_t               state[4];       /* decoder-specific */
} pl_detok_t;

void pl_detok_init(pl_detok_t *d, const pl_tokenizer_t *t, int skip_special);

/* Bytes written to out (0 is normal while a character is incomplete);
   -1 when cap is too small (cap >= 256 always suffices for the Llama 3,
   Qwen3 and Llama 2 vocabularies; pl_detok_max_bytes() is the bound for
   any tokenizer).  After -1 the state is unchanged: retry with more room. */
long pl_detok_push(pl_detok_t *d, int32_t id, char *out, size_t cap);

/* The most bytes one pl_detok_push or pl_detok_flush can write. */
size_t pl_detok_max_bytes(const pl_tokenizer_t *t);

/* End of stream: emits any incomplete bytes as U+FFFD. */
long pl_detok_flush(pl_detok_t *d, char *out, size_t cap);

/* 1 when s[len] is valid UTF-8 (no overlongs, no surrogates). */
int pl_utf8_valid(const char *s, size_t len);

#endif /* PL_TOKENIZER_H */
