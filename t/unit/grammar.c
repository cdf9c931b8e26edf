/*
 * grammar: the token side of structured outputs.  Masks over a small
 * hand-made vocabulary (only the tokens whose bytes keep the output in the
 * language; eos exactly in accepting states; special tokens never), the
 * per-state mask cache, tokens advanced through the automaton, the
 * sampler's restriction (a row of bits, no -inf entries, biases kept, only
 * allowed ids ever drawn), the byte strings read from the tiny model's
 * byte-level tokenizer.json, the compiler's refusals, a deeply nested
 * schema, and random and mutated grammars.
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


static void
refused(const char *ebnf, const char *want)
{
    char           err[256];
    pl_grammar_t  *g = pl_grammar_compile(ebnf, strlen(ebnf), err,
                                          sizeof(err));

    ok(g == NULL && strstr(err, want) != NULL, "'%s' refused: %s", ebnf,
       g ? "(compiled)" : err);
    pl_grammar_free(g);
}


static void
test_refusals(void)
{
    char         err[256];
    pl_gtext_t   t = { 0 };
    const char  *min = "{\"type\":\"integer\",\"minimum\":1}";
    const char  *one = "{\"oneOf\":[]}";

    refused("root ::= x", "'x' is used but never defined");
    refused("root ::= \"a\"\nroot ::= \"b\"", "defined twice");
    refused("root ::= [b-a]", "bad range");
    refused("root ::= \"a\"{3,2}", "reversed");
    refused("root ::= \"a\"{2000}", "above 1000");
    refused("root ::= /a(?<n>b)/", "unsupported group");
    refused("root ::= /\\bword/", "unsupported escape");
    refused("root ::= r\nr ::= \"(\" r \")\"", "matches nothing");
    refused("root ::= (\"a\"{1000}){1000}", "too large");

    ok(pl_grammar_from_schema_text(min, strlen(min), &t, err,
                                   sizeof(err)) != 0
       && strstr(err, "'minimum'") != NULL,
       "a schema keyword not supported is named: %s", err);
    pl_gtext_free(&t);
    ok(pl_grammar_from_schema_text(one, strlen(one), &t, err,
                                   sizeof(err)) != 0
       && strstr(err, "'oneOf'") != NULL, "oneOf is named: %s", err);
    pl_gtext_free(&t);
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
    test_random_input();

    return done_testing();
}
