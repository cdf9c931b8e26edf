/*
 * tokenizer_fuzz: a libFuzzer target for tokenizer.json loading.  Each
 * input is a whole tokenizer.json: it goes into a memfd and through
 * pl_tokenizer_load(), which must either refuse it with a message or
 * return a tokenizer that encodes a fixed text of several scripts, decodes
 * the ids it produced and streams them through the incremental decoder
 * without crashing, reading out of bounds or producing invalid UTF-8.
 * The deterministic twin in the unit suite is t/unit/tokenizer_fuzz.c.
 *
 *     make fuzz-tokenizer SECONDS=60
 */

#include <stdint.h>
#include <stdlib.h>

#include "fuzz_file.h"
#include "pl_tokenizer.h"

#define FUZZ_IDS  512

static const char  fuzz_text[] =
    "Hello world, 1234 tokens!\n\t  <|begin_of_text|>caf\xc3\xa9 "
    "\xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80 \xd0\x9f\xd1\x80\xd0\xb8 "
    "it's  DON'T   end.";


static void
fuzz_decode(const pl_tokenizer_t *t, const int32_t *ids, size_t n)
{
    char        out[8192], piece[8192];
    size_t      i, cap = pl_detok_max_bytes(t);
    long        len;
    pl_detok_t  d;

    len = pl_tokenizer_decode(t, ids, n, 0, out, sizeof(out));
    if (len >= 0 && !pl_utf8_valid(out, (size_t) len)) {
        abort();
    }

    if (cap > sizeof(piece)) {
        return;
    }
    pl_detok_init(&d, t, 1);
    for (i = 0; i < n; i++) {
        len = pl_detok_push(&d, ids[i], piece, sizeof(piece));
        if (len > 0 && !pl_utf8_valid(piece, (size_t) len)) {
            abort();
        }
    }
    len = pl_detok_flush(&d, piece, sizeof(piece));
    if (len > 0 && !pl_utf8_valid(piece, (size_t) len)) {
        abort();
    }
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char             path[64], err[512];
    int32_t          ids[FUZZ_IDS];
    int              fd = fuzz_file(data, size, path, sizeof(path)), n;
    uint32_t         vocab;
    pl_tokenizer_t  *t;

    if (fd < 0) {
        return 0;
    }
    err[0] = '\0';
    t = pl_tokenizer_load(path, err, sizeof(err));
    close(fd);

    if (t == NULL) {
        if (err[0] == '\0') {
            abort();            /* refused without a message */
        }
        return 0;
    }

    n = pl_tokenizer_encode(t, fuzz_text, sizeof(fuzz_text) - 1, 1, 1, ids,
                            FUZZ_IDS);
    vocab = pl_tokenizer_vocab_size(t);
    if (n > 0) {
        fuzz_decode(t, ids, (size_t) n);
    }
    ids[0] = -1;
    ids[1] = (int32_t) vocab;
    ids[2] = vocab > 0 ? (int32_t) vocab - 1 : 0;
    fuzz_decode(t, ids, 3);

    pl_tokenizer_free(t);

    return 0;
}
