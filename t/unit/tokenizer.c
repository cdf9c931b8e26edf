/*
 * tokenizer.c: unit tests of the tokenizer's parts (UTF-8, Unicode
 * normalization, the regex engine, BPE, pre-tokenizers, added tokens,
 * streaming decode) and of its refusals: invalid UTF-8, small buffers,
 * malformed or unsupported tokenizer.json files.  Comparison with the
 * reference implementation on real vocabularies is t/30-tokenizer-ref.t.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pl_regex.h"
#include "pl_tokenizer.h"
#include "pl_unicode.h"
#include "tap.h"

static char  tmpdir[] = "/tmp/pl-tok-XXXXXX";

static const char *
write_file(const char *name, const char *text)
{
    static char  path[256];
    FILE        *f;

    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

/* A tokenizer.json with the given model extras and pipeline parts. */
static pl_tokenizer_t *
load_json(const char *json, char *err, size_t errlen)
{
    return pl_tokenizer_load(write_file("tok.json", json), err, errlen);
}

#define BYTE_LEVEL_MODEL                                                     \
    "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, "        \
    "\"c\": 2, \"\\u0120\": 3, \"ab\": 4, \"abc\": 5, \"\\u0120a\": 6, "     \
    "\"bc\": 7, \"aa\": 8}, \"merges\": [\"a b\", \"ab c\", \"\\u0120 a\", " \
    "\"b c\", \"a a\"]}"

static void
test_utf8(void)
{
    ok(pl_utf8_valid("h\xc3\xa9llo \xf0\x9f\x98\x80", 11), "valid UTF-8");
    ok(!pl_utf8_valid("\xc0\xaf", 2), "overlong encoding refused");
    ok(!pl_utf8_valid("\xed\xa0\x80", 3), "surrogate refused");
    ok(!pl_utf8_valid("\xf4\x90\x80\x80", 4), "above U+10FFFF refused");
    ok(!pl_utf8_valid("\xe2\x82", 2), "truncated sequence refused");
    ok(!pl_utf8_valid("\x80", 1), "lone continuation byte refused");
    ok(pl_utf8_valid("a\0b", 3), "NUL is valid UTF-8");
}

static void
check_norm(pl_uc_form_t form, const char *in, const char *want,
    const char *name)
{
    size_t  n;
    char   *out = pl_uc_normalize(form, in, strlen(in), &n);

    is_str(out, want, "%s", name);
    free(out);
}

static void
test_normalization(void)
{
    check_norm(PL_UC_NFC, "e\xcc\x81", "\xc3\xa9", "NFC composes e + acute");
    check_norm(PL_UC_NFD, "\xc3\xa9", "e\xcc\x81", "NFD decomposes");
    check_norm(PL_UC_NFC, "\xe2\x84\xab", "\xc3\x85",
               "NFC maps the Angstrom sign to A with ring");
    check_norm(PL_UC_NFC, "\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8",
               "\xea\xb0\x81", "NFC composes Hangul jamo");
    check_norm(PL_UC_NFD, "\xea\xb0\x81",
               "\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8",
               "NFD decomposes a Hangul syllable");
    check_norm(PL_UC_NFD, "q\xcc\x87\xcc\xa3", "q\xcc\xa3\xcc\x87",
               "marks are put in canonical order");
    check_norm(PL_UC_NFKC, "\xef\xac\x81", "fi", "NFKC expands the fi ligature");
    check_norm(PL_UC_NFC, "\xef\xac\x81", "\xef\xac\x81",
               "NFC keeps compatibility characters");
    check_norm(PL_UC_NFC, "plain ascii", "plain ascii", "ASCII unchanged");
}

static int
re_match(const char *pattern, const char *text, size_t from, size_t *s,
    size_t *e)
{
    char               err[160];
    pl_regex_t        *re = pl_regex_compile(pattern, strlen(pattern), err,
                                             sizeof(err));
    pl_regex_stack_t   st = { NULL, 0, 0 };
    int                r;

    if (re == NULL) {
        diag("compile %s: %s", pattern, err);
        return -9;
    }
    r = pl_regex_search(re, text, strlen(text), from, s, e, &st);
    free(st.data);
    pl_regex_free(re);
    return r;
}

static void
check_re(const char *pattern, const char *text, size_t ws, size_t we,
    const char *name)
{
    size_t  s = 0, e = 0;
    int     r = re_match(pattern, text, 0, &s, &e);

    ok(r == 1 && s == ws && e == we, "regex %s", name);
    if (r != 1 || s != ws || e != we) {
        diag("  /%s/ on \"%s\": r=%d [%zu,%zu), want [%zu,%zu)", pattern,
             text, r, s, e, ws, we);
    }
}

static void
check_re_refused(const char *pattern, const char *word)
{
    char         err[160] = "";
    pl_regex_t  *re = pl_regex_compile(pattern, strlen(pattern), err,
                                       sizeof(err));

    ok(re == NULL && strstr(err, word) != NULL, "regex refuses %s (%s)",
       pattern, err);
    pl_regex_free(re);
}

static void
test_regex(void)
{
    size_t  s, e;

    check_re("\\p{L}+", "12 h\xc3\xa9llo!", 3, 9, "letters include é");
    check_re("\\s+(?!\\S)", "a   b", 1, 3,
             "negative lookahead leaves the last space");
    check_re("(?i:'s|'t)", "it'S", 2, 4, "case-insensitive group");
    check_re("\\p{N}{1,3}", "x12345", 1, 4, "counted repetition");
    check_re("[^\\r\\n\\p{L}\\p{N}]?\\p{L}+", "  word", 1, 6,
             "negated class with properties");
    check_re("a+?", "aaa", 0, 1, "lazy quantifier");
    check_re("\\d+|[a-c]+", "zzbca9", 2, 5, "alternation and ranges");
    check_re("[\\u4e00-\\u9fff]+", "ab\xe4\xb8\xad\xe6\x96\x87" "c", 2, 8,
             "\\u ranges over CJK");
    check_re("\\w+", "\xc3\xa9t\xc3\xa9 x", 0, 5, "\\w is Unicode-aware");
    check_re("x(?=y)", "xzxy", 2, 3, "positive lookahead");
    check_re("^b", "a\nb", 2, 3, "^ matches after a newline");
    check_re("\\x{1F600}", "a\xf0\x9f\x98\x80", 1, 5, "\\x{...} code point");
    ok(re_match("q", "abc", 0, &s, &e) == 0, "regex: no match is 0");
    check_re_refused("(?<=a)b", "lookbehind");
    check_re_refused("(?>a)", "atomic");
    check_re_refused("a++", "possessive");
    check_re_refused("\\p{Han}", "Han");
    check_re_refused("(a*)*", "empty");
    check_re_refused("(ab", "missing )");
    check_re_refused("[a-", "unterminated");
    {
        char  deep[512];

        memset(deep, '(', 300);
        strcpy(deep + 300, "a");
        check_re_refused(deep, "nested too deeply");
        memset(deep, '[', 300);
        strcpy(deep + 300, "a");
        check_re_refused(deep, "nested too deeply");
    }
}

static void
check_encode(const pl_tokenizer_t *t, const char *text, int add_special,
    int parse_special, const int32_t *want, int nwant, const char *name)
{
    int32_t  ids[64];
    int      n = pl_tokenizer_encode(t, text, strlen(text), add_special,
                                     parse_special, ids, 64), i, same;

    same = (n == nwant);
    for (i = 0; same && i < n; i++) {
        same = ids[i] == want[i];
    }
    ok(same, "%s", name);
    if (!same) {
        printf("#   got %d ids:", n);
        for (i = 0; i < n; i++) {
            printf(" %d", ids[i]);
        }
        printf("\n");
    }
}

static void
test_byte_level_bpe(void)
{
    char             err[256];
    pl_tokenizer_t  *t = load_json("{" BYTE_LEVEL_MODEL ", "
        "\"pre_tokenizer\": {\"type\": \"ByteLevel\", "
        "\"add_prefix_space\": false}, "
        "\"decoder\": {\"type\": \"ByteLevel\"}, "
        "\"added_tokens\": [{\"id\": 9, \"content\": \"<s>\", "
        "\"special\": true}, {\"id\": 10, \"content\": \"[x]\", "
        "\"special\": false, \"lstrip\": true, \"rstrip\": true}], "
        "\"post_processor\": {\"type\": \"TemplateProcessing\", "
        "\"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}}, "
        "{\"Sequence\": {\"id\": \"A\"}}], \"special_tokens\": {\"<s>\": "
        "{\"ids\": [9]}}}}", err, sizeof(err));
    int32_t          ids[8];

    if (!ok(t != NULL, "byte-level tokenizer loads")) {
        diag("%s", err);
        return;
    }
    is_int(pl_tokenizer_vocab_size(t), 11, "vocab size counts added tokens");
    check_encode(t, "abc", 0, 1, (int32_t[]) { 5 }, 1,
                 "merges apply by rank: a b -> ab, ab c -> abc");
    check_encode(t, "aaa", 0, 1, (int32_t[]) { 8, 0 }, 2,
                 "equal ranks merge leftmost first");
    check_encode(t, "abc a", 1, 1, (int32_t[]) { 9, 5, 6 }, 3,
                 "template adds BOS; space joins the next word");
    check_encode(t, "<s>a", 0, 1, (int32_t[]) { 9, 0 }, 2,
                 "special token parsed");
    check_encode(t, "<s>", 0, 0, (int32_t[]) { -1 }, 0,
                 "special token as text has no pieces here");
    check_encode(t, "a  [x]  b", 0, 0, (int32_t[]) { 0, 10, 1 }, 3,
                 "lstrip/rstrip added token eats the spaces around it");
    is_int(pl_tokenizer_encode(t, "a\xff", 2, 1, 1, ids, 8), -1,
           "invalid UTF-8 is refused with -1");
    ids[1] = 77;
    is_int(pl_tokenizer_encode(t, "abc a b", 7, 1, 1, ids, 1), -2,
           "too small an id array is refused with -2");
    is_int(ids[1], 77, "nothing written past cap");
    is_str(pl_tokenizer_id_to_piece(t, 6), "\xc4\xa0" "a", "id to piece");
    is_int(pl_tokenizer_piece_to_id(t, "abc"), 5, "piece to id");
    is_int(pl_tokenizer_piece_to_id(t, "zzz"), -1, "unknown piece is -1");
    ok(pl_tokenizer_is_special(t, 9) && !pl_tokenizer_is_special(t, 10)
       && !pl_tokenizer_is_special(t, 99), "special flags");
    pl_tokenizer_free(t);
}

static long
decode_str(const pl_tokenizer_t *t, const int32_t *ids, size_t n, int skip,
    char *out, size_t cap)
{
    long  len = pl_tokenizer_decode(t, ids, n, skip, out, cap - 1);

    if (len >= 0) {
        out[len] = '\0';
    }
    return len;
}

static void
test_sentencepiece(void)
{
    char             err[256], out[128];
    pl_tokenizer_t  *t = load_json("{\"model\": {\"type\": \"BPE\", "
        "\"byte_fallback\": true, \"fuse_unk\": true, \"unk_token\": "
        "\"<unk>\", \"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"<0xC3>\": 2, "
        "\"<0xA9>\": 3, \"\\u2581\": 4, \"h\": 5, \"i\": 6, \"\\u2581h\": 7, "
        "\"\\u2581hi\": 8, \"<0xE2>\": 9}, \"merges\": [\"\\u2581 h\", "
        "\"\\u2581h i\"]}, "
        "\"added_tokens\": [{\"id\": 1, \"content\": \"<s>\", \"special\": "
        "true}], \"pre_tokenizer\": {\"type\": \"Metaspace\", "
        "\"replacement\": \"\\u2581\", \"prepend_scheme\": \"first\", "
        "\"split\": false}, \"decoder\": {\"type\": \"Sequence\", "
        "\"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": "
        "\"\\u2581\"}, \"content\": \" \"}, {\"type\": \"ByteFallback\"}, "
        "{\"type\": \"Fuse\"}, {\"type\": \"Strip\", \"content\": \" \", "
        "\"start\": 1, \"stop\": 0}]}}", err, sizeof(err));
    pl_detok_t       d;
    long             n1, n2, n3;

    if (!ok(t != NULL, "SentencePiece-style tokenizer loads")) {
        diag("%s", err);
        return;
    }
    check_encode(t, "hi hi", 0, 1, (int32_t[]) { 8, 8 }, 2,
                 "Metaspace prepends and replaces spaces");
    check_encode(t, "<s>hi", 0, 1, (int32_t[]) { 1, 5, 6 }, 3,
                 "prepend_scheme first: no prefix after a special token");
    check_encode(t, "h\xc3\xa9", 0, 1, (int32_t[]) { 7, 2, 3 }, 3,
                 "unknown character falls back to bytes");
    check_encode(t, "xy", 0, 1, (int32_t[]) { 4, 0 }, 2,
                 "characters without byte pieces fuse into one unk");
    is_int(decode_str(t, (int32_t[]) { 8, 8, 2, 3 }, 4, 0, out, sizeof(out)),
           7, "decode length");
    is_str(out, "hi hi\xc3\xa9", "decode strips the first space, joins bytes");
    decode_str(t, (int32_t[]) { 1, 8 }, 2, 1, out, sizeof(out));
    is_str(out, "hi", "skip_special drops <s> and the space strip still applies");
    decode_str(t, (int32_t[]) { 9, 8 }, 2, 0, out, sizeof(out));
    is_str(out, "\xef\xbf\xbd hi", "an incomplete sequence before text is U+FFFD");

    pl_detok_init(&d, t, 0);
    n1 = pl_detok_push(&d, 8, out, sizeof(out));
    is_int(n1, 2, "stream: first token without its leading space");
    n2 = pl_detok_push(&d, 2, out, sizeof(out));
    is_int(n2, 0, "stream: half a character waits");
    n3 = pl_detok_push(&d, 3, out, sizeof(out));
    ok(n3 == 2 && memcmp(out, "\xc3\xa9", 2) == 0,
       "stream: the character comes out once complete");
    is_int(pl_detok_push(&d, 2, out, 1), 0, "stream: pending byte needs no room");
    is_int(pl_detok_push(&d, 8, out, 2), -1, "stream: too small a buffer is -1");
    is_int(pl_detok_push(&d, 8, out, sizeof(out)), 6,
           "stream: state unchanged after -1; U+FFFD then the text");
    is_int(pl_detok_push(&d, 9, out, sizeof(out)), 0, "stream: lead byte held");
    is_int(pl_detok_flush(&d, out, sizeof(out)), 3, "flush: U+FFFD");
    is_int(pl_detok_push(&d, 12345, out, sizeof(out)), 0,
           "stream: unknown id decodes to nothing");
    ok(pl_detok_max_bytes(t) >= 6 && pl_detok_max_bytes(t) < 64,
       "max bytes per push bounds the longest piece (%zu)",
       pl_detok_max_bytes(t));
    pl_tokenizer_free(t);
}

static void
test_split_behaviors(void)
{
    static const struct {
        const char  *behavior;
        int          invert;
        int32_t      want[6];
        int          n;
    } cases[] = {
        { "Isolated", 0, { 0, 3, 1, 3, 2 }, 5 },
        { "Removed", 0, { 0, 1, 2 }, 3 },
        { "MergedWithPrevious", 0, { 4, 5, 2 }, 3 },
        { "MergedWithNext", 0, { 0, 6, 7 }, 3 },
        { "Removed", 1, { 3, 3 }, 2 },
    };
    char             json[1024], err[256];
    size_t           i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        pl_tokenizer_t  *t;

        snprintf(json, sizeof(json), "{\"model\": {\"type\": \"BPE\", "
                 "\"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"-\": 3, "
                 "\"a-\": 4, \"b-\": 5, \"-b\": 6, \"-c\": 7}, \"merges\": "
                 "[\"a -\", \"b -\", \"- b\", \"- c\"]}, \"pre_tokenizer\": "
                 "{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, "
                 "\"behavior\": \"%s\", \"invert\": %s}, \"decoder\": "
                 "{\"type\": \"Fuse\"}}", cases[i].behavior,
                 cases[i].invert ? "true" : "false");
        t = load_json(json, err, sizeof(err));
        if (t == NULL) {
            ok(0, "split %s loads: %s", cases[i].behavior, err);
            continue;
        }
        snprintf(json, sizeof(json), "Split %s%s", cases[i].behavior,
                 cases[i].invert ? " inverted" : "");
        check_encode(t, "a-b-c", 0, 1, cases[i].want, cases[i].n, json);
        pl_tokenizer_free(t);
    }
}

static void
check_refused(const char *json, const char *word, const char *name)
{
    char             err[256] = "";
    pl_tokenizer_t  *t = load_json(json, err, sizeof(err));

    ok(t == NULL && strstr(err, word) != NULL, "refuses %s: %s", name, err);
    pl_tokenizer_free(t);
}

static void
test_refusals(void)
{
    char             err[256] = "";
    pl_tokenizer_t  *t;

    t = pl_tokenizer_load("/nonexistent/tokenizer.json", err, sizeof(err));
    ok(t == NULL && strstr(err, "No such file") != NULL,
       "refuses a missing file: %s", err);
    check_refused("{\"model\": {\"type\": \"BPE\", ", "JSON", "truncated JSON");
    check_refused("[1, 2]", "not an object", "a JSON array");
    check_refused("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}",
                  "WordPiece", "an unsupported model");
    check_refused("{" BYTE_LEVEL_MODEL ", \"normalizer\": {\"type\": "
                  "\"BertNormalizer\"}, \"decoder\": {\"type\": \"Fuse\"}}",
                  "BertNormalizer", "an unsupported normalizer");
    check_refused("{" BYTE_LEVEL_MODEL ", \"pre_tokenizer\": {\"type\": "
                  "\"BertPreTokenizer\"}, \"decoder\": {\"type\": \"Fuse\"}}",
                  "BertPreTokenizer", "an unsupported pre-tokenizer");
    check_refused("{" BYTE_LEVEL_MODEL ", \"decoder\": {\"type\": "
                  "\"WordPiece\"}}", "WordPiece", "an unsupported decoder");
    check_refused("{" BYTE_LEVEL_MODEL ", \"post_processor\": {\"type\": "
                  "\"Whatever\"}, \"decoder\": {\"type\": \"Fuse\"}}",
                  "Whatever", "an unsupported post-processor");
    check_refused("{" BYTE_LEVEL_MODEL ", \"pre_tokenizer\": {\"type\": "
                  "\"Split\", \"pattern\": {\"Regex\": \"(?<=x)y\"}, "
                  "\"behavior\": \"Isolated\"}, \"decoder\": {\"type\": "
                  "\"Fuse\"}}", "lookbehind", "an unsupported regex");
    check_refused("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
                  "\"merges\": [\"a q\"]}, \"decoder\": {\"type\": \"Fuse\"}}",
                  "not in the vocabulary", "a merge of unknown pieces");
    check_refused("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -4}, "
                  "\"merges\": []}}", "bad token id", "a negative id");
    check_refused("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
                  "\"merges\": [\"a\"]}}", "not a pair", "a malformed merge");
    check_refused("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
                  "\"merges\": []}, \"decoder\": {\"type\": \"Fuse\"}, "
                  "\"x\": \"\\ud800\\u00\"}", "JSON", "a bad escape");
    check_refused("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\xff\": 0},"
                  " \"merges\": []}}", "UTF-8", "invalid UTF-8 in a string");
}

int
main(void)
{
    if (mkdtemp(tmpdir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    test_utf8();
    test_normalization();
    test_regex();
    test_byte_level_bpe();
    test_sentencepiece();
    test_split_behaviors();
    test_refusals();
    unlink(write_file("tok.json", ""));
    rmdir(tmpdir);
    return done_testing();
}
