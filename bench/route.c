/*
 * bench/route: what choosing an engine costs an nginx worker per request,
 * next to tokenizing the request's prompt.
 *
 *   route TOKENIZER_JSON [ENGINES...]
 *
 * The prompt is a chat's: a system prompt of about 500 tokens and a short
 * question, encoded as the worker encodes it (BOS template, special
 * tokens parsed).  The routing decision is the module's, per request:
 * for each engine of the group, its stats read from its region under the
 * seqlock (pl_stats_read), its model name compared, the worker's submits
 * since the stats' heartbeat counted (3 of them here), its candidate
 * entry filled; then the policy: least_load, round_robin, or prefix (the hash
 * of the first 64 token ids, the default K; rendezvous ownership; the
 * spill bound), compiled here from the module's own sources.  The
 * regions are real pl_region_hdr_t in this process's memory with stats
 * published by pl_stats_publish, so the reads cost what a worker's cost
 * when the engines' stats lines are in its cache; a stats line the
 * engine just wrote costs a cache miss more.  Prints the best of 5
 * rounds, each the mean over many requests, in microseconds.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_clock.h"
#include "pl_cli.h"
#include "pl_proto.h"
#include "pl_tokenizer.h"

#include "../ngx_http_pagedllm_module/ngx_http_pagedllm_pick.c"
#include "../ngx_http_pagedllm_module/ngx_http_pagedllm_prefix.c"

#define ROUNDS          5
#define PREFIX_TOKENS   64
#define SPILL           8
#define MAX_IDS         8192
#define RECENT          64      /* NGX_HTTP_PAGEDLLM_RECENT */
#define UNPUBLISHED     3       /* submits since the last publication */

enum { LEAST_LOAD, ROUND_ROBIN, PREFIX, N_POLICIES };

static const char  *policy_names[N_POLICIES] = {
    "least_load", "round_robin", "prefix"
};

static const char  usage_text[] =
"usage: route TOKENIZER_JSON [ENGINES...]\n"
"\n"
"Times the module's routing decision per request (for groups of ENGINES\n"
"engines each, default 1 3 8 64) next to tokenizing a chat prompt with a\n"
"500-token system prompt.\n"
"\n"
"  --help                         this text\n"
"  --version                      the version\n";

static const char  *words[] = {
    "the", "server", "reads", "its", "configuration", "and", "listens",
    "for", "requests", "on", "a", "local", "port;", "each", "request",
    "carries", "prompt", "that", "engine", "turns", "into", "tokens,",
    "runs", "model", "over", "them", "streams", "answer", "back", "one",
    "token", "at", "time.", "Memory", "attention", "keys", "values", "is",
    "split", "small", "blocks", "so", "many", "conversations", "share",
    "same", "pool."
};


/* a chat template's text: a system prompt of about 500 tokens, then a
   user question */
static char *
make_prompt(size_t system_words)
{
    size_t   i, len, cap = system_words * 16 + 512;
    char    *p = malloc(cap);

    if (p == NULL) {
        return NULL;
    }
    len = (size_t) snprintf(p, cap, "<|start_header_id|>system"
                                    "<|end_header_id|>\n\n");
    for (i = 0; i < system_words; i++) {
        len += (size_t) snprintf(p + len, cap - len, "%s ",
                                 words[(i * 7 + i / 5) % (sizeof(words)
                                                          / sizeof(words[0]))]);
    }
    snprintf(p + len, cap - len, "<|eot_id|><|start_header_id|>user"
             "<|end_header_id|>\n\nWhat does the engine do with a prompt?"
             "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    return p;
}


/* a channel's ring of submit times: the last UNPUBLISHED after the
   heartbeat of make_regions' stats */
static uint64_t  recent[RECENT];
static uint64_t  nsubmits = 5 * RECENT + 7;


static void
make_recent(void)
{
    uint64_t  k;

    for (k = 0; k < RECENT; k++) {
        recent[(nsubmits - 1 - k) % RECENT] = k < UNPUBLISHED ? 2000 : 500;
    }
}


/* n regions with stats as a busy group's: loads and free blocks vary */
static pl_region_hdr_t *
make_regions(size_t n)
{
    size_t            i;
    pl_stats_t        st;
    pl_region_hdr_t  *h;

    h = aligned_alloc(64, n * sizeof(pl_region_hdr_t));
    if (h == NULL) {
        return NULL;
    }
    memset(h, 0, n * sizeof(pl_region_hdr_t));
    for (i = 0; i < n; i++) {
        snprintf(h[i].model_name, sizeof(h[i].model_name),
                 "meta-llama/Llama-3.1-8B-Instruct");
        memset(&st, 0, sizeof(st));
        st.running = (uint32_t) (20 + (i * 37) % 50);
        st.waiting = (uint32_t) ((i * 11) % 7);
        st.kv_blocks_free = (uint32_t) (1000 + (i * 997) % 9000);
        st.heartbeat_us = 1000;
        pl_stats_publish(&h[i], &st);
    }
    return h;
}


/* the module's decision for one request: every engine's stats read and
   its entry filled, then the policy */
static size_t
route(pl_region_hdr_t *h, size_t n, ngx_http_pagedllm_cand_t *cand,
    const char *model, size_t model_len, int policy, uint64_t turn,
    const int32_t *ids, size_t n_ids)
{
    size_t      i, k;
    uint32_t    published;
    pl_stats_t  st;

    k = 0;
    for (i = 0; i < n; i++) {
        if (strncmp(h[i].model_name, model, model_len) != 0) {
            continue;
        }
        published = 0;
        cand[k].free = 0;
        if (pl_stats_read(&h[i], &st) == 0) {
            published = st.running + st.waiting + st.swapped
                        + ngx_http_pagedllm_pick_unpublished(recent, RECENT,
                              nsubmits, st.heartbeat_us);
            cand[k].free = st.kv_blocks_free;
        }
        cand[k].id = ngx_http_pagedllm_pick_mix(i + 1);
        cand[k].weight = 1;
        cand[k].load = published;
        k++;
    }

    switch (policy) {
    case ROUND_ROBIN:
        return ngx_http_pagedllm_pick_round_robin(cand, k, turn);
    case PREFIX:
        return ngx_http_pagedllm_pick_prefix(cand, k, turn,
                   ngx_http_pagedllm_prefix_hash(ids, n_ids, PREFIX_TOKENS),
                   SPILL);
    default:
        return ngx_http_pagedllm_pick_least_load(cand, k, turn);
    }
}


static double
time_route(size_t engines, int policy, const int32_t *ids, size_t n_ids)
{
    const char                *model = "meta-llama/Llama-3.1-8B-Instruct";
    size_t                     r, i, reps, sink = 0;
    double                     t0, t, best = 1e30;
    pl_region_hdr_t           *h;
    ngx_http_pagedllm_cand_t  *cand;

    h = make_regions(engines);
    cand = malloc(engines * sizeof(*cand));
    if (h == NULL || cand == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    reps = 2000000 / engines + 1000;

    for (r = 0; r < ROUNDS; r++) {
        t0 = bench_now_s();
        for (i = 0; i < reps; i++) {
            sink += route(h, engines, cand, model, strlen(model) + 1, policy,
                          i, ids, n_ids);
        }
        t = (bench_now_s() - t0) / (double) reps;
        best = t < best ? t : best;
    }
    if (sink == (size_t) -1) {
        printf("%zu\n", sink);
    }
    free(cand);
    free(h);
    return best * 1e6;
}


int
main(int argc, char **argv)
{
    int              n, p;
    char             err[512], *prompt;
    size_t           r, i, reps, prompt_len, engines_default[] = { 1, 3, 8,
                                                                     64 };
    size_t          *engines, n_engines;
    double           t0, t, tok = 1e30;
    int32_t         *ids;
    pl_tokenizer_t  *tk;

    pl_cli_standard(argc, argv, "route", usage_text);
    if (argc < 2) {
        return pl_cli_error("route", "a tokenizer.json is required");
    }
    for (i = 1; i < (size_t) argc; i++) {
        if (argv[i][0] == '-') {
            return pl_cli_error("route", "unknown option '%s'", argv[i]);
        }
    }

    n_engines = argc > 2 ? (size_t) (argc - 2) : 4;
    engines = malloc(n_engines * sizeof(size_t));
    for (i = 0; i < n_engines; i++) {
        engines[i] = argc > 2 ? (size_t) atol(argv[i + 2])
                              : engines_default[i];
        if (engines[i] < 1 || engines[i] > 64) {
            return pl_cli_error("route", "ENGINES must be 1 to 64");
        }
    }

    make_recent();

    tk = pl_tokenizer_load(argv[1], err, sizeof(err));
    if (tk == NULL) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }

    prompt = make_prompt(440);
    ids = malloc(MAX_IDS * sizeof(int32_t));
    if (prompt == NULL || ids == NULL) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    prompt_len = strlen(prompt);

    n = 0;
    reps = 200;
    for (r = 0; r < ROUNDS; r++) {
        t0 = bench_now_s();
        for (i = 0; i < reps; i++) {
            n = pl_tokenizer_encode(tk, prompt, prompt_len, 1, 1, ids,
                                    MAX_IDS);
        }
        t = (bench_now_s() - t0) / (double) reps;
        tok = t < tok ? t : tok;
    }
    if (n < 0) {
        fprintf(stderr, "encoding failed (%d)\n", n);
        return 1;
    }

    printf("prompt: %zu bytes, %d tokens; tokenizing: %.2f us\n\n",
           prompt_len, n, tok * 1e6);
    printf("%-8s %-12s %12s %16s\n", "engines", "policy", "route us",
           "of tokenizing");

    for (i = 0; i < n_engines; i++) {
        for (p = 0; p < N_POLICIES; p++) {
            t = time_route(engines[i], p, ids, (size_t) n);
            printf("%-8zu %-12s %12.3f %15.3f%%\n", engines[i],
                   policy_names[p], t, 100 * t / (tok * 1e6));
        }
    }

    free(ids);
    free(prompt);
    free(engines);
    pl_tokenizer_free(tk);
    return 0;
}
