/*
 * bench/tokenizer: encoding and decoding speed of pl_tokenizer.
 *
 *   tokenizer TOKENIZER_JSON CORPUS [ROUNDS]
 *
 * CORPUS holds one JSON string per line (t/node/corpus.mjs writes one);
 * each line is encoded as one request would be (BOS template, special
 * tokens parsed), ROUNDS times over the whole corpus, then the ids are
 * decoded back.  Prints the load time and MB/s and tokens/s of the best
 * round; bench/tokenizer.sh runs this next to the JavaScript reference.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "bench_clock.h"
#include "pl_cli.h"
#include "pl_tokenizer.h"

typedef struct {
    char    **text;
    size_t   *len;
    size_t    n;
    size_t    bytes;
} corpus_t;


static int
read_corpus(const char *path, corpus_t *c)
{
    FILE          *f = fopen(path, "r");
    char          *line = NULL;
    size_t         cap = 0;
    ssize_t        n;
    json_error_t   err;

    if (f == NULL) {
        perror(path);
        return -1;
    }
    memset(c, 0, sizeof(*c));
    while ((n = getline(&line, &cap, f)) > 0) {
        json_t  *s = json_loadb(line, (size_t) n, JSON_DECODE_ANY, &err);

        if (!json_is_string(s)) {
            fprintf(stderr, "%s: not a JSON string per line\n", path);
            fclose(f);
            return -1;
        }
        c->text = realloc(c->text, (c->n + 1) * sizeof(char *));
        c->len = realloc(c->len, (c->n + 1) * sizeof(size_t));
        c->len[c->n] = json_string_length(s);
        c->text[c->n] = malloc(c->len[c->n] + 1);
        memcpy(c->text[c->n], json_string_value(s), c->len[c->n] + 1);
        c->bytes += c->len[c->n];
        c->n++;
        json_decref(s);
    }
    free(line);
    fclose(f);
    return 0;
}

static const char  usage_text[] =
"usage: tokenizer TOKENIZER_JSON CORPUS [ROUNDS]\n"
"\n"
"Encodes every line of CORPUS (one JSON string a line) ROUNDS times\n"
"(default 3) with TOKENIZER_JSON, decodes the ids back, and prints the\n"
"load time and the best round's MB/s and tokens/s.\n"
"\n"
"  --help       this text\n"
"  --version    the name and version\n";


int
main(int argc, char **argv)
{
    char             err[512], *out;
    corpus_t         c;
    pl_tokenizer_t  *t;
    int32_t         *ids;
    size_t          *start, i, ntok = 0, cap, outcap = 1 << 22;
    double           t0, load, enc = 1e9, dec = 1e9, t1;
    int              r, rounds = argc > 3 ? atoi(argv[3]) : 3, n;

    pl_cli_standard(argc, argv, "tokenizer", usage_text);
    for (i = 1; i < (size_t) argc; i++) {
        if (argv[i][0] == '-') {
            return pl_cli_error("tokenizer", "unknown option '%s'", argv[i]);
        }
    }
    if (argc < 3 || argc > 4) {
        return pl_cli_error("tokenizer", "TOKENIZER_JSON and CORPUS "
                            "expected, and optionally ROUNDS");
    }
    if (read_corpus(argv[2], &c) != 0) {
        return 1;
    }
    t0 = bench_now_s();
    t = pl_tokenizer_load(argv[1], err, sizeof(err));
    load = bench_now_s() - t0;
    if (t == NULL) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    cap = c.bytes + c.n * PL_TOKENIZER_EXTRA;
    ids = malloc(cap * sizeof(int32_t));
    start = malloc((c.n + 1) * sizeof(size_t));
    out = malloc(outcap);
    for (r = 0; r < rounds; r++) {
        ntok = 0;
        t0 = bench_now_s();
        for (i = 0; i < c.n; i++) {
            start[i] = ntok;
            n = pl_tokenizer_encode(t, c.text[i], c.len[i], 1, 1, ids + ntok,
                                    cap - ntok);
            if (n < 0) {
                fprintf(stderr, "encode failed on line %zu\n", i + 1);
                return 1;
            }
            ntok += (size_t) n;
        }
        start[c.n] = ntok;
        t1 = bench_now_s() - t0;
        enc = t1 < enc ? t1 : enc;
        t0 = bench_now_s();
        for (i = 0; i < c.n; i++) {
            if (pl_tokenizer_decode(t, ids + start[i], start[i + 1] - start[i],
                                    0, out, outcap) < 0)
            {
                fprintf(stderr, "decode failed on line %zu\n", i + 1);
                return 1;
            }
        }
        t1 = bench_now_s() - t0;
        dec = t1 < dec ? t1 : dec;
    }
    printf("impl=pagedllm load_ms=%.1f strings=%zu bytes=%zu tokens=%zu "
           "encode_MBps=%.2f encode_tokps=%.0f decode_tokps=%.0f\n",
           load * 1e3, c.n, c.bytes, ntok, c.bytes / enc / 1e6, ntok / enc,
           ntok / (dec > 0 ? dec : 1e-9));
    pl_tokenizer_free(t);
    return 0;
}
