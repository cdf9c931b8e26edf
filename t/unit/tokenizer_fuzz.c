/*
 * tokenizer_fuzz.c: properties that must hold for any input, checked on
 * deterministic pseudo-random inputs (a fixed seed, so a failure repeats):
 *
 *   - encode returns -1 exactly when the text is not valid UTF-8, and
 *     never writes past the id array;
 *   - decode and every incremental push produce valid UTF-8, and the
 *     pushes concatenate to the full decode, for arbitrary id sequences
 *     (out-of-range ids included);
 *   - a corrupted tokenizer.json either loads or is refused with a
 *     message; a corrupted chat template either renders or is refused
 *     with a message.
 *
 * Run under AddressSanitizer during development; here it guards against
 * regressions with the same inputs.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pl_jinja.h"
#include "pl_tokenizer.h"
#include "pl_unicode.h"
#include "tap.h"

static unsigned long long  rng = 0x9e3779b97f4a7c15ULL;

static unsigned
rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned) (rng >> 11);
}

/* A byte-level BPE tokenizer.json: the 256 byte characters, a few merges,
   two special tokens, a BOS template. */
static char *
make_tokenizer_json(void)
{
    static const char  *merges[] = {
        "h e", "l l", "he ll", "hell o", "\\u0120 w", "o r", "\\u0120w or",
        "\\u0120wor l", "\\u0120worl d"
    };
    static const char  *merged[] = {
        "he", "ll", "hell", "hello", "\\u0120w", "or", "\\u0120wor",
        "\\u0120worl", "\\u0120world"
    };
    char      *j = malloc(65536);
    size_t     n = 0, i;
    unsigned   b, extra = 0;

    n += (size_t) sprintf(j + n, "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
    for (b = 0; b < 256; b++) {
        unsigned  cp = b;

        if (!((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac)
              || (b >= 0xae)))
        {
            cp = 256 + extra++;
        }
        n += (size_t) sprintf(j + n, "%s\"\\u%04x\": %u", b ? ", " : "", cp,
                              b);
    }
    for (i = 0; i < sizeof(merged) / sizeof(merged[0]); i++) {
        n += (size_t) sprintf(j + n, ", \"%s\": %zu", merged[i], 256 + i);
    }
    n += (size_t) sprintf(j + n, "}, \"merges\": [");
    for (i = 0; i < sizeof(merges) / sizeof(merges[0]); i++) {
        n += (size_t) sprintf(j + n, "%s\"%s\"", i ? ", " : "", merges[i]);
    }
    sprintf(j + n, "]}, \"added_tokens\": [{\"id\": 300, \"content\": "
            "\"<|bos|>\", \"special\": true}, {\"id\": 301, \"content\": "
            "\"<|eos|>\", \"special\": true}], \"pre_tokenizer\": {\"type\": "
            "\"ByteLevel\", \"add_prefix_space\": false}, \"decoder\": "
            "{\"type\": \"ByteLevel\"}, \"post_processor\": {\"type\": "
            "\"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": "
            "\"<|bos|>\"}}, {\"Sequence\": {\"id\": \"A\"}}], "
            "\"special_tokens\": {\"<|bos|>\": {\"ids\": [300]}}}}");
    return j;
}

static size_t
random_text(char *buf, size_t cap)
{
    static const char  *frag[] = {
        " ", "  ", "\n", "\t", "hello", " world", "'s", "123", "\xc3\xa9",
        "e\xcc\x81", "\xe6\x97\xa5", "\xf0\x9f\x98\x80", "<|bos|>",
        "<|eos|>", "<|bos", "\r\n", "!!", "\x01", "\xc2\x85", "\xe2\x80\xa8"
    };
    size_t  n = 0, k = rnd() % 30, j, l;

    for (j = 0; j < k; j++) {
        const char  *f = frag[rnd() % (sizeof(frag) / sizeof(frag[0]))];

        l = strlen(f);
        if (n + l < cap) {
            memcpy(buf + n, f, l);
            n += l;
        }
    }
    if (n > 0 && rnd() % 4 == 0) {
        buf[rnd() % n] = (char) (rnd() & 0xff);
    }
    return n;
}

static void
test_encode_decode(const pl_tokenizer_t *t)
{
    char        text[1024], full[65536], joined[65536], piece[512];
    int32_t     ids[1100];
    int         it, bad_rc = 0, overrun = 0, bad_utf8 = 0, bad_stream = 0;
    int         encoded = 0, over_bound = 0;
    size_t      n, j, m;
    long        len, k;
    pl_detok_t  d;

    for (it = 0; it < 3000; it++) {
        n = random_text(text, sizeof(text));
        ids[1024] = 0x7777;
        k = pl_tokenizer_encode(t, text, n, (int) (rnd() & 1),
                                (int) (rnd() & 1), ids, 1024);
        bad_rc += (k == -1) != !pl_utf8_valid(text, n) || k < -1;
        overrun += ids[1024] != 0x7777;
        encoded += k >= 0;
        m = (k > 0) ? (size_t) k : 0;
        if (rnd() % 2) {
            for (m = 0; m < 40; m++) {
                ids[m] = (int32_t) (rnd() % 320) - 5;
            }
        }
        len = pl_tokenizer_decode(t, ids, m, (int) (rnd() & 1), full,
                                  sizeof(full));
        pl_detok_init(&d, t, 0);
        bad_utf8 += len < 0 || !pl_utf8_valid(full, (size_t) len);
        len = pl_tokenizer_decode(t, ids, m, 0, full, sizeof(full));
        n = 0;
        for (j = 0; j <= m; j++) {
            k = (j < m) ? pl_detok_push(&d, ids[j], piece, sizeof(piece))
                        : pl_detok_flush(&d, piece, sizeof(piece));
            if (k < 0 || !pl_utf8_valid(piece, (size_t) k)) {
                bad_utf8++;
                break;
            }
            over_bound += ((size_t) k > pl_detok_max_bytes(t));
            memcpy(joined + n, piece, (size_t) k);
            n += (size_t) k;
        }
        bad_stream += (len < 0 || n != (size_t) len
                       || memcmp(joined, full, n) != 0);
    }
    ok(encoded > 1000, "most random texts encode (%d of 3000)", encoded);
    is_int(bad_rc, 0, "encode is -1 exactly for invalid UTF-8");
    is_int(overrun, 0, "encode never writes past cap");
    is_int(bad_utf8, 0, "decode and pushes always produce valid UTF-8");
    is_int(bad_stream, 0, "pushes concatenate to the full decode");
    is_int(over_bound, 0, "no push writes more than pl_detok_max_bytes()");
}

static void
test_corrupt_json(const char *json)
{
    char             path[] = "/tmp/pl-fuzz-XXXXXX", err[256];
    size_t           n = strlen(json);
    char            *m = malloc(n + 1);
    int              it, silent = 0, loaded = 0, fd = mkstemp(path);
    pl_tokenizer_t  *t;
    int32_t          ids[64];

    for (it = 0; it < 400 && fd >= 0; it++) {
        int  k;

        memcpy(m, json, n + 1);
        for (k = 1 + (int) (rnd() % 3); k > 0; k--) {
            m[rnd() % n] = "{}[]\",:0a\\ -"[rnd() % 12];
        }
        if (pwrite(fd, m, n, 0) != (ssize_t) n) {
            break;
        }
        err[0] = '\0';
        t = pl_tokenizer_load(path, err, sizeof(err));
        if (t != NULL) {
            loaded++;
            pl_tokenizer_encode(t, "hello <|bos|> world", 19, 1, 1, ids, 64);
            pl_tokenizer_free(t);
        } else {
            silent += (err[0] == '\0');
        }
    }
    ok(it == 400, "400 corrupted tokenizer.json files tried");
    is_int(silent, 0, "every refusal has a message (%d loaded)", loaded);
    if (fd >= 0) {
        close(fd);
        unlink(path);
    }
    free(m);
}

static void
test_corrupt_templates(void)
{
    static const char  src[] =
        "{%- set ns = namespace(n=0) %}{% for m in messages %}"
        "{% if m.role == 'system' and not loop.first %}"
        "{{ raise_exception('system first') }}{% endif %}"
        "{{ '<|' + m.role + '|>' + m.content | trim }}"
        "{% set ns.n = ns.n + 1 %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
        "{{ ns.n }}{{ messages | map(attribute='role') | join(',') }}";
    json_t  *vars = json_loads("{\"messages\": [{\"role\": \"user\", "
                               "\"content\": \" hi \"}, {\"role\": "
                               "\"assistant\", \"content\": \"yo\"}], "
                               "\"add_generation_prompt\": true}", 0, NULL);
    char     m[sizeof(src)], err[256], *out;
    int      it, silent = 0, rendered = 0;
    size_t   len;

    for (it = 0; it < 3000; it++) {
        pl_jinja_t  *t;
        int          k;

        memcpy(m, src, sizeof(src));
        for (k = 1 + (int) (rnd() % 3); k > 0; k--) {
            m[rnd() % (sizeof(src) - 1)] = "{}%()[]'\"|.-+ ~x0\n"[rnd() % 18];
        }
        err[0] = '\0';
        t = pl_jinja_parse(m, sizeof(src) - 1, err, sizeof(err));
        if (t == NULL) {
            silent += (err[0] == '\0');
            continue;
        }
        out = pl_jinja_render(t, vars, &len, err, sizeof(err));
        rendered += (out != NULL);
        silent += (out == NULL && err[0] == '\0');
        free(out);
        pl_jinja_free(t);
    }
    ok(rendered > 100, "some corrupted templates still render (%d)", rendered);
    is_int(silent, 0, "every refused template has a message");
    json_decref(vars);
}

int
main(void)
{
    char             err[256], path[] = "/tmp/pl-fuzz-tok-XXXXXX";
    char            *json = make_tokenizer_json();
    int              fd = mkstemp(path);
    pl_tokenizer_t  *t = NULL;

    if (fd >= 0 && write(fd, json, strlen(json)) == (ssize_t) strlen(json)) {
        t = pl_tokenizer_load(path, err, sizeof(err));
    }
    if (!ok(t != NULL, "fixture tokenizer loads")) {
        diag("%s", err);
    } else {
        test_encode_decode(t);
    }
    pl_tokenizer_free(t);
    if (fd >= 0) {
        close(fd);
        unlink(path);
    }
    test_corrupt_json(json);
    test_corrupt_templates();
    free(json);
    return done_testing();
}
