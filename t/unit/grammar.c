/*
 * grammar: the token side of structured outputs.  Masks over a small
 * hand-made vocabulary (only the tokens whose bytes keep the output in the
 * language; eos exactly in accepting states; special tokens never), the
 * per-state mask cache, tokens advanced through the automaton, the
 * sampler's restriction (a row of bits, no -inf entries, biases kept, only
 * allowed ids ever drawn), the byte strings read from the tiny model's
 * byte-level tokenizer.json, the compiler's refusals, a deeply nested
 * schema, integer bounds and multipleOf checked on every integer of a
 * window, and random and mutated grammars.
 */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gr_vocab.h"
#include "grammar.h"
#include "sampler.h"
#include "tap.h"

enum { T_LBRACE, T_RBRACE, T_QUOTE, T_A, T_AB, T_QA, T_LQ, T_SPECIAL,
       T_EOS, N_IDS };

static const char *const  tok[N_IDS] = {
    "{", "}", "\"", "a", "ab", "\"a", "{\"", "", ""
};


static pl_vocab_t *
small_vocab(void)
{
    const uint8_t  *bytes[N_IDS];
    uint32_t        lens[N_IDS];
    int32_t         eos = T_EOS;
    int             i;

    for (i = 0; i < N_IDS; i++) {
        bytes[i] = (const uint8_t *) tok[i];
        lens[i] = (uint32_t) strlen(tok[i]);
    }

    return pl_vocab_from_bytes(bytes, lens, N_IDS, &eos, 1);
}


static pl_grammar_t *
compile_regex(const char *re)
{
    pl_gtext_t     t = { 0 };
    pl_grammar_t  *g;
    char           err[256];

    pl_grammar_from_regex(re, strlen(re), &t);
    g = pl_grammar_compile(t.data, t.len, err, sizeof(err));
    if (g == NULL) {
        diag("%s: %s", re, err);
    }
    pl_gtext_free(&t);

    return g;
}


static int
allowed(const uint64_t *m, int id)
{
    return (int) (m[id / 64] >> (id % 64) & 1);
}


/* the ids set in m as a string of their indices, e.g. "06" */
static const char *
ids(const uint64_t *m)
{
    static char  buf[N_IDS + 1];
    int          i, n = 0;

    for (i = 0; i < N_IDS; i++) {
        if (allowed(m, i)) {
            buf[n++] = (char) ('0' + i);
        }
    }
    buf[n] = '\0';

    return buf;
}


static void
test_masks(void)
{
    pl_vocab_t      *v = small_vocab();
    pl_grammar_t    *g = compile_regex("\\{\"a*\"\\}");
    const uint64_t  *m, *again;
    int32_t          s;

    ok(v != NULL && g != NULL, "a vocabulary and the grammar {\"a*\"}");

    s = pl_grammar_start(g);
    m = pl_grammar_mask(g, v, s);
    is_str(ids(m), "06", "at the start only '{' and '{\"' may come");
    again = pl_grammar_mask(g, v, s);
    ok(again == m, "a state's mask is computed once and kept");

    s = pl_grammar_advance(g, v, s, T_LQ);
    is_str(ids(pl_grammar_mask(g, v, s)), "23",
           "after '{\"': '\"' and 'a'; 'ab' and '\"a' would leave the "
           "language");
    s = pl_grammar_advance(g, v, s, T_A);
    ok(s >= 0 && !pl_grammar_accepts(g, s), "'a' keeps it going, not done");
    is_int(pl_grammar_advance(g, v, s, T_EOS), PL_GRAMMAR_DEAD,
           "eos where the output is not complete is refused");
    is_int(pl_grammar_advance(g, v, s, T_AB), PL_GRAMMAR_DEAD,
           "'ab' (a byte outside) is refused");
    s = pl_grammar_advance(g, v, s, T_QUOTE);
    s = pl_grammar_advance(g, v, s, T_RBRACE);
    ok(s >= 0 && pl_grammar_accepts(g, s), "'\"' then '}' completes it");
    is_str(ids(pl_grammar_mask(g, v, s)), "8",
           "complete with nothing to add: only eos");
    is_int(pl_grammar_advance(g, v, s, T_EOS), s,
           "eos in an accepting state keeps the state");
    ok(!allowed(pl_grammar_mask(g, v, pl_grammar_start(g)), T_SPECIAL),
       "a special token (no bytes) is never allowed");

    pl_grammar_free(g);
    pl_vocab_free(v);
}


static void
test_sampler(void)
{
    pl_sampler_t          s;
    pl_sampling_params_t  p = { .temperature = 1, .top_p = 1 };
    pl_logit_bias_t       bias[2] = { { 1, 5 }, { 4, 7 } };
    uint64_t              mask = (1u << 1) | (1u << 2) | (1u << 6);
    float                 logits[N_IDS] = { 0 };
    int32_t               t;
    int                   i, k, bad = 0, seen = 0, n_inf = 0;

    ok(pl_sampler_init(&s, N_IDS) == 0, "a sampler for 9 ids");

    p.n_bias = 2;
    p.bias = bias;
    pl_sampler_reset(&s);
    i = pl_sampler_add(&s, 0, &p, NULL, 1, 0);
    ok(pl_sampler_restrict(&s, i, &mask) == 0, "restricted to ids 1, 2, 6");
    for (k = s.reqs[i].adjust_start;
         k < s.reqs[i].adjust_start + s.reqs[i].adjust_count; k++)
    {
        if (s.adjust[k].id == 1) {
            ok(s.adjust[k].bias == 5, "an allowed id keeps its bias");
        } else if (isinf(s.adjust[k].bias) && s.adjust[k].bias < 0) {
            n_inf++;
        }
    }
    is_int(n_inf, 0, "no id left out becomes an adjust entry");
    ok(s.reqs[i].masked && s.n_masks == 1 && s.masks[0] == mask,
       "the mask travels as the request's row of bits");

    p.n_bias = 0;
    for (k = 0; k < 300; k++) {
        t = pl_sample(&s, logits, &p, NULL, (uint64_t) k, 0, NULL);
        pl_sampler_reset(&s);
        i = pl_sampler_add(&s, 0, &p, NULL, (uint64_t) k, 0);
        pl_sampler_restrict(&s, i, &mask);
        pl_sample_host(&t, logits, N_IDS, s.reqs, 1, s.adjust, s.n_adjust,
                       s.masks, s.n_masks);
        bad += !(mask >> t & 1);
        seen |= 1 << t;
    }
    is_int(bad, 0, "300 draws from flat logits: only allowed ids");
    is_int(seen, (int) mask, "and each allowed id comes up");

    pl_sampler_destroy(&s);
}


static void
test_tokenizer_json(void)
{
    const char      *build = getenv("PAGEDLLM_BUILD");
    char             path[1024], err[256];
    pl_vocab_t      *v;
    const uint8_t   *b;
    size_t           len;
    int32_t          eos = 511;
    uint32_t         i, spaces = 0;

    snprintf(path, sizeof(path), "%s/models/tiny/tokenizer.json",
             build ? build : "build");
    v = pl_vocab_load(path, 520, &eos, 1, err, sizeof(err));
    if (!ok(v != NULL, "the tiny model's tokenizer.json loads")) {
        diag("%s", err);
        return;
    }

    b = pl_vocab_bytes(v, 65, &len);
    ok(len == 1 && b[0] == 'A', "id 65 ('A') is the byte 'A'");
    b = pl_vocab_bytes(v, 32, &len);
    ok(len == 1 && b[0] == ' ', "id 32 ('Ġ' in GPT-2's byte map) is the "
       "byte space");
    b = pl_vocab_bytes(v, 188, &len);
    ok(len == 1 && b[0] == 0xbc, "id 188 ('¼') is the byte 0xbc");
    for (i = 256; i < 510; i++) {
        b = pl_vocab_bytes(v, (int32_t) i, &len);
        spaces += len > 1 && b[0] == ' ';
    }
    ok(spaces > 10, "%u merged tokens begin with a space", spaces);
    pl_vocab_bytes(v, 510, &len);
    is_int(len, 0, "the special begin_of_text has no bytes");
    pl_vocab_bytes(v, 515, &len);
    is_int(len, 0, "padding ids past the tokenizer have none");

    pl_vocab_free(v);
}


/* ebnf refused with an error that holds want, or with whole that error */
static void
refused_as(const char *ebnf, const char *want, int whole)
{
    char           err[256];
    pl_grammar_t  *g = pl_grammar_compile(ebnf, strlen(ebnf), err,
                                          sizeof(err));

    ok(g == NULL && (whole ? strcmp(err, want) == 0
                           : strstr(err, want) != NULL),
       "'%s' refused: %s", ebnf, g ? "(compiled)" : err);
    pl_grammar_free(g);
}


static void
refused(const char *ebnf, const char *want)
{
    refused_as(ebnf, want, 0);
}


static void
test_refusals(void)
{
    char         err[256];
    pl_gtext_t   t = { 0 };
    const char  *min = "{\"type\":\"array\",\"uniqueItems\":true}";
    const char  *one = "{\"oneOf\":[]}";
    const char  *nul = "{\"const\":\"a\\u0000b\"}";

    refused("root ::= x", "'x' is used but never defined");
    refused("root ::= \"a\"\nroot ::= \"b\"", "defined twice");
    refused("root ::= [b-a]", "bad range");
    refused("root ::= \"a\"{3,2}", "reversed");
    refused("root ::= \"a\"{2000}", "above 1000");
    refused("root ::= /a(?<n>b)/", "unsupported group");
    refused("root ::= /\\bword/", "unsupported escape");
    refused("root ::= r\nr ::= \"(\" r \")\"", "matches nothing");
    refused("root ::= (\"a\"{1000}){1000}", "too large");

    /* a regex's error is located in the regex, once, the regex named */
    refused_as("root ::= \"x\" /a{100000}/", "in the regex /a{100000}/: a "
               "repetition count above 1000 at offset 7", 1);
    refused_as("root ::= /0123456789012345678901234567890123456789(/",
               "in the regex /0123456789012345678901234567890123456789.../: "
               "unbalanced parenthesis at offset 41", 1);

    ok(pl_grammar_from_schema_text(min, strlen(min), &t, err,
                                   sizeof(err)) != 0
       && strstr(err, "'uniqueItems'") != NULL,
       "a schema keyword not supported is named: %s", err);
    pl_gtext_free(&t);
    ok(pl_grammar_from_schema_text(one, strlen(one), &t, err,
                                   sizeof(err)) != 0
       && strstr(err, "'oneOf'") != NULL, "oneOf is named: %s", err);
    pl_gtext_free(&t);
    ok(pl_grammar_from_schema_text(nul, strlen(nul), &t, err,
                                   sizeof(err)) != 0
       && strcmp(err, "a NUL character (U+0000) is not supported in a "
                 "schema") == 0, "a NUL in a schema is named so: %s", err);
    pl_gtext_free(&t);
}



static pl_grammar_t *
compile_schema(const char *schema, char *err, size_t errlen)
{
    pl_gtext_t     t = { 0 };
    pl_grammar_t  *g = NULL;

    if (pl_grammar_from_schema_text(schema, strlen(schema), &t, err,
                                    errlen) == 0)
    {
        g = pl_grammar_compile(t.data, t.len, err, errlen);
    }
    pl_gtext_free(&t);

    return g;
}


static int
matches(pl_grammar_t *g, const char *s)
{
    return pl_grammar_accepts(g, pl_grammar_walk(g, pl_grammar_start(g), s,
                                                 strlen(s)));
}


/* the integers of [from, to] the grammar of schema takes are exactly
   those of [lo, hi] that k divides; 0, or -1 with a diagnostic */
static int
takes_exactly(const char *schema, long long lo, long long hi, int k,
    long long from, long long to)
{
    pl_grammar_t  *g;
    char           err[256], num[32];
    long long      v;
    int            want;

    g = compile_schema(schema, err, sizeof(err));
    if (g == NULL) {
        diag("%s: %s", schema, err);
        return -1;
    }
    for (v = from; v <= to; v++) {
        snprintf(num, sizeof(num), "%lld", v);
        want = v >= lo && v <= hi && v % k == 0;
        if (matches(g, num) != want) {
            diag("%s: %s is %s", schema, num, want ? "refused" : "taken");
            pl_grammar_free(g);
            return -1;
        }
    }
    pl_grammar_free(g);

    return 0;
}


/* every pair lo <= hi of these bounds (and either left open), with and
   without multipleOf, on every integer from -1200 to 1200 */
static void
test_integer_ranges(void)
{
    static const long long  at[] = {
        -1000, -999, -990, -101, -100, -99, -42, -10, -9, -1, 0, 1, 7, 9,
        10, 11, 19, 99, 100, 101, 555, 909, 999, 1000, 1009
    };
    static const int        ks[] = { 1, 2, 5, 8, 25, 1000 };
    char                    schema[256], *p;
    long long               lo, hi;
    size_t                  n = sizeof(at) / sizeof(at[0]), i, j, m;
    int                     bad = 0, checked = 0;

    for (i = 0; i <= n; i++) {
        for (j = 0; j <= n; j++) {
            if (i < n && j < n && at[i] > at[j]) {
                continue;
            }
            for (m = 0; m < sizeof(ks) / sizeof(ks[0]); m++) {
                if (m > 0 && (i + j + m) % 3 != 0) {
                    continue;
                }
                p = schema + sprintf(schema, "{\"type\":\"integer\"");
                if (i < n) {
                    p += sprintf(p, ",\"minimum\":%lld", at[i]);
                }
                if (j < n) {
                    p += sprintf(p, ",\"maximum\":%lld", at[j]);
                }
                if (ks[m] > 1) {
                    p += sprintf(p, ",\"multipleOf\":%d", ks[m]);
                }
                sprintf(p, "}");
                lo = i < n ? at[i] : -9999999999999999LL;
                hi = j < n ? at[j] : 9999999999999999LL;
                if (lo + (ks[m] - lo % ks[m]) % ks[m] > hi) {
                    continue;       /* no multiple: refused, below */
                }
                bad += takes_exactly(schema, lo, hi, ks[m], -1200, 1200)
                       != 0;
                checked++;
            }
        }
    }
    ok(bad == 0, "%d integer ranges: every integer from -1200 to 1200 is "
       "taken exactly when it is in range (and a multiple)", checked);
}


static void
test_integer_bounds(void)
{
    static const struct {
        const char  *schema;
        long long    lo, hi, from, to;
        int          k;
    } cases[] = {
        { "{\"type\":\"integer\",\"minimum\":0.5,\"maximum\":7.9}",
          1, 7, -20, 20, 1 },
        { "{\"type\":\"integer\",\"exclusiveMinimum\":-3,"
          "\"exclusiveMaximum\":4}", -2, 3, -20, 20, 1 },
        { "{\"type\":\"integer\",\"exclusiveMinimum\":-3.5,"
          "\"exclusiveMaximum\":-0.5}", -3, -1, -20, 20, 1 },
        { "{\"type\":\"integer\",\"minimum\":2,\"exclusiveMinimum\":4,"
          "\"maximum\":9,\"exclusiveMaximum\":9}", 5, 8, -20, 20, 1 },
        { "{\"type\":\"integer\",\"minimum\":123456789012,"
          "\"maximum\":123456790345}", 123456789012LL, 123456790345LL,
          123456788000LL, 123456791000LL, 1 },
        { "{\"type\":\"integer\",\"minimum\":-123456790345,"
          "\"maximum\":-123456789012,\"multipleOf\":8}",
          -123456790345LL, -123456789012LL, -123456791000LL,
          -123456788000LL, 8 },
        { "{\"type\":\"integer\",\"minimum\":9999999999998000}",
          9999999999998000LL, 9999999999999999LL, 9999999999997000LL,
          9999999999999999LL, 1 },
        { "{\"type\":\"integer\",\"maximum\":1e300}",
          -9999999999999999LL, 9999999999999999LL, 9999999999997000LL,
          9999999999999999LL, 1 },
        { "{\"type\":\"number\",\"multipleOf\":5,\"minimum\":-12.5,"
          "\"maximum\":30}", -10, 30, -40, 40, 5 },
        { "{\"type\":\"number\",\"multipleOf\":1.0,\"exclusiveMinimum\":0}",
          1, 9999999999999999LL, -100, 100, 1 },
        { "{\"type\":[\"integer\",\"null\"],\"minimum\":3,\"maximum\":3}",
          3, 3, -100, 100, 1 },
    };
    static const char *const  junk[] = {
        "-0", "01", "00", "-01", "+1", "1.0", "1e1", " 1", "1 ", "", "-",
        "10000000000000000"
    };
    pl_grammar_t             *g;
    size_t                    i;
    char                      err[256];
    int                       bad = 0;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ok(takes_exactly(cases[i].schema, cases[i].lo, cases[i].hi,
                         cases[i].k, cases[i].from, cases[i].to) == 0,
           "%s: exactly %lld to %lld", cases[i].schema, cases[i].lo,
           cases[i].hi);
    }

    g = compile_schema("{\"type\":\"integer\",\"minimum\":-100,"
                       "\"maximum\":100000000000000000}", err, sizeof(err));
    for (i = 0; g != NULL && i < sizeof(junk) / sizeof(junk[0]); i++) {
        if (matches(g, junk[i])) {
            diag("'%s' taken", junk[i]);
            bad++;
        }
    }
    ok(g != NULL && bad == 0 && matches(g, "9999999999999999"),
       "not integers as JSON writes them ('-0', '01', '+1', '1.0', "
       "17 digits) are refused; 16 digits are taken");
    pl_grammar_free(g);
}


static void
schema_refused(const char *schema, const char *want)
{
    pl_grammar_t  *g;
    char           err[256];

    err[0] = '\0';
    g = compile_schema(schema, err, sizeof(err));
    ok(g == NULL && strstr(err, want) != NULL, "%s refused: %s", schema,
       g ? "(compiled)" : err);
    pl_grammar_free(g);
}


static void
test_numeric_refusals(void)
{
    schema_refused("{\"type\":\"integer\",\"minimum\":5,\"maximum\":3}",
                   "'minimum' and 'maximum' leave no integer");
    schema_refused("{\"type\":\"integer\",\"exclusiveMinimum\":1,"
                   "\"exclusiveMaximum\":2}",
                   "'exclusiveMinimum' and 'exclusiveMaximum' leave no "
                   "integer");
    schema_refused("{\"type\":\"integer\",\"minimum\":0.2,\"maximum\":0.8}",
                   "leave no integer");
    schema_refused("{\"type\":\"integer\",\"minimum\":1e17}",
                   "'minimum' leaves no integer of at most 16 digits");
    schema_refused("{\"type\":\"integer\",\"maximum\":-1e17}",
                   "'maximum' leaves no integer of at most 16 digits");
    schema_refused("{\"type\":\"integer\",\"minimum\":99999999999999999999}",
                   "not valid JSON");
    schema_refused("{\"type\":\"integer\",\"minimum\":\"3\"}",
                   "'minimum' must be a number");
    schema_refused("{\"type\":\"integer\",\"multipleOf\":3}",
                   "'multipleOf' 3 is not supported");
    schema_refused("{\"type\":\"integer\",\"multipleOf\":0.5}",
                   "'multipleOf' 0.5 is not supported");
    schema_refused("{\"type\":\"integer\",\"multipleOf\":0}",
                   "'multipleOf' must be a number above 0");
    schema_refused("{\"type\":\"integer\",\"multipleOf\":8,\"minimum\":1,"
                   "\"maximum\":7}", "no multiple of 8");
    schema_refused("{\"enum\":[1,5],\"minimum\":3}",
                   "'minimum' with 'enum' is not supported");
    schema_refused("{\"anyOf\":[{\"type\":\"integer\"}],\"multipleOf\":2}",
                   "'multipleOf' with 'anyOf' is not supported");
}

/* 60 nested arrays: the schema's text and automaton grow linearly
   (an unbounded list holds one copy of its item; maxItems n holds n) */
static void
test_deep_schema(void)
{
    pl_gtext_t     t = { 0 };
    pl_grammar_t  *g;
    char           schema[8192], err[256], *p = schema;
    int            i, rc, depth = 60;

    for (i = 0; i < depth; i++) {
        p += sprintf(p, "{\"type\":\"array\",\"items\":");
    }
    p += sprintf(p, "{\"type\":\"integer\"}");
    for (i = 0; i < depth; i++) {
        *p++ = '}';
    }
    *p = '\0';

    rc = pl_grammar_from_schema_text(schema, strlen(schema), &t, err,
                                     sizeof(err));
    ok(rc == 0 && t.len < 20000, "60 nested arrays: %zu bytes of grammar",
       t.len);
    g = pl_grammar_compile(t.data, t.len, err, sizeof(err));
    ok(g != NULL && pl_grammar_accepts(g, pl_grammar_walk(g,
                                       pl_grammar_start(g), "[[[],[]]]", 9))
       && pl_grammar_walk(g, pl_grammar_start(g), "[[[1]]]", 7) < 0,
       "and it compiles: '[[[],[]]]' is an answer, '[[[1]]]' (an integer "
       "59 levels too high) is not");
    pl_grammar_free(g);
    pl_gtext_free(&t);
}


/* random bytes, and fixtures' grammars cut and mutated, never crash the
   compiler: each compiles or is refused with a message */
static void
test_random_input(void)
{
    static const char  alphabet[] = "root ::=\"[]()|*+?{},/\\abx09-^$.#\n";
    const char        *seeds[] = {
        "root ::= \"{\" (str \":\" val)* \"}\"\nstr ::= /\"[a-z]*\"/\n"
        "val ::= [0-9]+ | root",
        "root ::= /(a|b{2,3})*[^x-z]\\d?/ \"\\u00e9\"",
    };
    char               buf[256], err[256];
    pl_grammar_t      *g;
    uint64_t           x = 42;
    int                i, k, n, silent = 0, compiled = 0;

    for (i = 0; i < 3000; i++) {
        if (i % 2) {
            n = (int) (x % 60);
            for (k = 0; k < n; k++) {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                buf[k] = alphabet[x % (sizeof(alphabet) - 1)];
            }
        } else {
            n = (int) strlen(seeds[(i / 2) % 2]);
            memcpy(buf, seeds[(i / 2) % 2], (size_t) n);
            for (k = 0; k < 3; k++) {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                buf[x % (uint64_t) n] = alphabet[(x >> 20)
                                                 % (sizeof(alphabet) - 1)];
            }
            n = (int) ((x >> 40) % (uint64_t) n) + 1;
        }
        err[0] = '\0';
        g = pl_grammar_compile(buf, (size_t) n, err, sizeof(err));
        compiled += g != NULL;
        silent += g == NULL && err[0] == '\0';
        pl_grammar_free(g);
    }
    ok(silent == 0, "3000 random and mutated grammars: %d compiled, every "
       "other refused with a message", compiled);
}


int
main(void)
{
    test_masks();
    test_sampler();
    test_tokenizer_json();
    test_refusals();
    test_deep_schema();
    test_integer_ranges();
    test_integer_bounds();
    test_numeric_refusals();
    test_random_input();

    return done_testing();
}
