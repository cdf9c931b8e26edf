/*
 * The KV cache manager through the real pagedllm-engine (tiny model; on
 * the CPU unless PAGEDLLM_TEST_DEVICE names another device, e.g. cuda),
 * driven by a fake worker (fake_worker.h): greedy output is the same token
 * for token whether requests run alone in an ample pool, or together in a
 * pool far too small, preempted by recompute, by swap, or by auto's choice
 * (its costs measured, or injected so that swap always wins, or recompute
 * always does, each choice counted); a second request
 * sharing a long prefix reuses cached blocks (counted, and reported in
 * its FINISH as cached tokens) and gives the output it gives without
 * prefix caching; the Orca-Max baseline policy
 * serves the same tokens; every block, device and host, comes back.
 * Then every block size from 1 to 64 (powers of two) serves the same
 * tokens as the reference (16) in a pool of 1024 tokens, with prefix
 * caching and swap preemption both at work.
 */

#include "fake_worker.h"

#define N_REQ      6
#define N_PROMPT   200
#define N_GEN      200

typedef struct {
    int32_t   toks[N_GEN];
    int       n;
    int       finished;
    uint32_t  cached;           /* the FINISH's cached_tokens */
} result_t;

static result_t  res[64];
static int32_t   prompts[N_REQ][N_PROMPT];
static int32_t   ref[N_REQ][N_GEN];
static int32_t   px[300], py[300], ref_x[N_GEN], ref_y[N_GEN];


/* Greedy, ignoring EOS, max_tokens N_GEN. */
static void
submit(fw_t *w, uint64_t id, const int32_t *prompt, uint32_t n)
{
    pl_rec_submit_t  r = { .req_id = id, .max_tokens = N_GEN,
                           .flags = PL_SUBMIT_IGNORE_EOS, .top_p = 1,
                           .n_prompt = n };

    memset(&res[id], 0, sizeof(res[id]));
    if (fw_submit(w, &r, prompt, NULL, NULL) != 0) {
        diag("submit %llu failed", (unsigned long long) id);
    }
}


static void
take(uint32_t type, const uint8_t *buf, uint32_t len)
{
    pl_rec_tokens_t  t;
    pl_rec_finish_t  f;

    if (type == PL_REC_TOKENS && len >= sizeof(t)) {
        memcpy(&t, buf, sizeof(t));
        if (t.req_id < 64 && res[t.req_id].n + (int) t.n <= N_GEN) {
            memcpy(res[t.req_id].toks + res[t.req_id].n, buf + sizeof(t),
                   t.n * sizeof(int32_t));
            res[t.req_id].n += (int) t.n;
        }
    } else if (type == PL_REC_FINISH && len >= sizeof(f)) {
        memcpy(&f, buf, sizeof(f));
        if (f.req_id < 64) {
            res[f.req_id].finished = 1;
            res[f.req_id].cached = f.cached_tokens;
        }
    } else {
        diag("unexpected record %u", type);
    }
}


static int
finished(int id)
{
    return res[id].finished;
}


/* Pump until requests [first, first + n) have finished. */
static int
wait_all(fw_t *w, int first, int n)
{
    return fw_wait(w, finished, first, first + n);
}


/* Run the N_REQ requests together; 1 when each got its reference tokens. */
static int
run_together(fw_t *w)
{
    int  i, same = 1;

    for (i = 0; i < N_REQ; i++) {
        submit(w, (uint64_t) (10 + i), prompts[i], N_PROMPT);
    }
    if (wait_all(w, 10, N_REQ) != 0) {
        return 0;
    }
    for (i = 0; i < N_REQ; i++) {
        same &= res[10 + i].n == N_GEN
                && memcmp(res[10 + i].toks, ref[i], sizeof(ref[i])) == 0;
    }

    return same;
}


static void
make_prompts(void)
{
    int  i, j;

    for (i = 0; i < N_REQ; i++) {
        for (j = 0; j < N_PROMPT; j++) {
            prompts[i][j] = (i * 37 + j * 11 + 5) % 500;
        }
    }
    for (j = 0; j < 300; j++) {
        px[j] = (j * 13 + 1) % 500;
        py[j] = j < 288 ? px[j] : (j * 7 + 3) % 500;
    }
}


/* px, then py (sharing its first 288 tokens), one after the other; the
   stats once idle.  Their tokens in res[0] and res[1]. */
static pl_stats_t
run_prefix_pair(fw_t *w)
{
    submit(w, 0, px, 300);
    wait_all(w, 0, 1);
    submit(w, 1, py, 300);
    wait_all(w, 1, 1);

    return fw_wait_idle(w);
}


/* References: each request alone, ample pool, no prefix caching. */
static int
references(const char *build)
{
    const char  *flags[] = {
        "--device", NULL, "--block-size", "16", "--num-blocks", "512",
        "--no-prefix-caching", NULL
    };
    fw_t        w;
    pl_stats_t  st;
    int         i, good = 1;

    flags[1] = fw_device();
    if (!ok(fw_engine_start(build, flags, NULL) == 0
            && fw_attach(&w, take) == 0,
            "reference engine: ample pool, prefix caching off"))
    {
        fw_show_log();
        return -1;
    }

    for (i = 0; i < N_REQ; i++) {
        submit(&w, (uint64_t) i, prompts[i], N_PROMPT);
        good &= wait_all(&w, i, 1) == 0 && res[i].n == N_GEN;
        memcpy(ref[i], res[i].toks, sizeof(ref[i]));
    }
    submit(&w, 0, px, 300);
    good &= wait_all(&w, 0, 1) == 0;
    memcpy(ref_x, res[0].toks, sizeof(ref_x));
    submit(&w, 1, py, 300);
    good &= wait_all(&w, 1, 1) == 0;
    memcpy(ref_y, res[1].toks, sizeof(ref_y));
    ok(good, "every reference request finishes alone");
    ok(res[0].cached == 0 && res[1].cached == 0,
       "without prefix caching a FINISH reports no cached tokens");

    ok(run_together(&w), "together in an ample pool: the same tokens");
    st = fw_wait_idle(&w);
    ok(st.preemptions_total == 0 && st.prefix_cache_queries == 0
       && st.kv_blocks_cached == 0, "no preemption; no prefix cache used");

    fw_detach(&w);
    ok(fw_engine_stop() == 0, "the reference engine stops cleanly");

    return 0;
}


static void
test_recompute_and_prefix(const char *build)
{
    const char  *flags[] = {
        "--device", NULL, "--block-size", "16", "--num-blocks", "64",
        "--preemption-mode", "recompute", NULL
    };
    fw_t        w;
    pl_stats_t  st, before;

    flags[1] = fw_device();
    if (!ok(fw_engine_start(build, flags, NULL) == 0
            && fw_attach(&w, take) == 0,
            "engine: 64 blocks (1024 tokens) for 6 x 400 tokens, "
            "recompute, prefix caching on"))
    {
        fw_show_log();
        return;
    }

    ok(run_together(&w), "preempted by recompute: every request's greedy "
       "tokens equal its tokens alone");
    st = fw_wait_idle(&w);
    ok(st.preemptions_recompute > 0 && st.preemptions_swap == 0,
       "the pool was too small: %llu recompute preemptions",
       (unsigned long long) st.preemptions_recompute);
    is_int(st.kv_blocks_used, 0, "every block comes back");

    before = st;
    st = run_prefix_pair(&w);
    ok(st.prefix_cache_hits - before.prefix_cache_hits >= 18,
       "a second request sharing a 288-token prefix reuses 18 cached blocks "
       "(%llu hits of %llu queries)",
       (unsigned long long) (st.prefix_cache_hits - before.prefix_cache_hits),
       (unsigned long long) (st.prefix_cache_queries
                             - before.prefix_cache_queries));
    ok(memcmp(res[0].toks, ref_x, sizeof(ref_x)) == 0
       && memcmp(res[1].toks, ref_y, sizeof(ref_y)) == 0,
       "and both give the tokens they give without prefix caching");
    ok(res[0].cached == 0 && res[1].cached == 288,
       "their FINISH records report 0 and 288 cached tokens (%u, %u)",
       res[0].cached, res[1].cached);
    ok(st.kv_blocks_cached > 0 && st.kv_blocks_used == 0,
       "idle: cached blocks kept (%u), none referenced", st.kv_blocks_cached);

    fw_detach(&w);
    ok(fw_engine_stop() == 0, "the engine stops cleanly");
}


static void
test_swap(const char *build)
{
    const char  *flags[] = {
        "--device", NULL, "--block-size", "16", "--num-blocks", "64",
        "--preemption-mode", "swap", "--swap-space", "16",
        "--no-prefix-caching", NULL
    };
    fw_t        w;
    pl_stats_t  st;

    flags[1] = fw_device();
    if (!ok(fw_engine_start(build, flags, NULL) == 0
            && fw_attach(&w, take) == 0,
            "engine: 64 blocks, preemption by swap, 16 MiB swap space"))
    {
        fw_show_log();
        return;
    }

    ok(run_together(&w), "preempted by swap: every request's greedy tokens "
       "equal its tokens alone");
    st = fw_wait_idle(&w);
    ok(st.preemptions_swap > 0 && st.blocks_swapped_in > 0
       && st.blocks_swapped_in == st.blocks_swapped_out,
       "%llu swap preemptions moved %llu blocks out and back in",
       (unsigned long long) st.preemptions_swap,
       (unsigned long long) st.blocks_swapped_out);
    ok(st.swap_blocks_total > 0 && st.swap_blocks_used == 0
       && st.kv_blocks_used == 0, "every device and host block comes back");

    fw_detach(&w);
    ok(fw_engine_stop() == 0, "the engine stops cleanly");
}


/* --preemption-mode auto with costs (NULL: measured at start); want:
   the mode every choice must take, or NULL when either may */
static void
test_auto(const char *build, const char *costs, const char *want)
{
    const char  *flags[] = {
        "--device", NULL, "--block-size", "16", "--num-blocks", "64",
        "--preemption-mode", "auto", "--swap-space", "16",
        "--no-prefix-caching", NULL, NULL, NULL
    };
    const char  *what = costs ? costs : "measured";
    fw_t        w;
    pl_stats_t  st;
    uint64_t    chose;

    flags[1] = fw_device();
    if (costs) {
        flags[11] = "--preemption-costs";
        flags[12] = costs;
    }
    if (!ok(fw_engine_start(build, flags, NULL) == 0
            && fw_attach(&w, take) == 0,
            "engine: 64 blocks, auto preemption, costs %s", what))
    {
        fw_show_log();
        return;
    }

    ok(run_together(&w), "auto (%s): every request's greedy tokens equal "
       "its tokens alone", what);
    st = fw_wait_idle(&w);
    chose = st.preemptions_auto_swap + st.preemptions_auto_recompute;
    ok(st.preemptions_total > 0 && chose == st.preemptions_total
       && st.preemptions_swap == st.preemptions_auto_swap
       && st.preemptions_recompute == st.preemptions_auto_recompute
                                      + st.preemptions_swap_full,
       "auto (%s): each of %llu preemptions counted as auto's choice "
       "(%llu swap, %llu recompute, %llu swaps refused by a full pool)",
       what, (unsigned long long) st.preemptions_total,
       (unsigned long long) st.preemptions_auto_swap,
       (unsigned long long) st.preemptions_auto_recompute,
       (unsigned long long) st.preemptions_swap_full);
    if (want != NULL && strcmp(want, "swap") == 0) {
        ok(st.preemptions_auto_recompute == 0
           && st.blocks_swapped_out > 0, "auto (%s): swap chosen every time",
           what);
    } else if (want != NULL) {
        ok(st.preemptions_auto_swap == 0 && st.blocks_swapped_out == 0,
           "auto (%s): recompute chosen every time", what);
    }
    ok(st.blocks_swapped_in == st.blocks_swapped_out
       && st.swap_blocks_used == 0 && st.kv_blocks_used == 0,
       "auto (%s): every device and host block comes back", what);

    fw_detach(&w);
    ok(fw_engine_stop() == 0, "the engine stops cleanly");
}


/* --block-size bs, a pool of 1024 tokens, swap preemption with prefix
   caching on: the reference tokens, a shared prefix reused, and every
   block back. */
static void
test_block_size(const char *build, int bs)
{
    char         size[16], blocks[16];
    const char  *flags[] = {
        "--device", NULL, "--block-size", size, "--num-blocks", blocks,
        "--preemption-mode", "swap", "--swap-space", "16", NULL
    };
    fw_t        w;
    pl_stats_t  st, before;

    flags[1] = fw_device();
    snprintf(size, sizeof(size), "%d", bs);
    snprintf(blocks, sizeof(blocks), "%d", 1024 / bs);
    if (!ok(fw_engine_start(build, flags, NULL) == 0
            && fw_attach(&w, take) == 0,
            "engine: blocks of %d tokens, %d of them, swap, prefix caching",
            bs, 1024 / bs))
    {
        fw_show_log();
        return;
    }

    ok(run_together(&w), "block size %d: every request's greedy tokens "
       "equal its tokens alone at block size 16", bs);
    st = fw_wait_idle(&w);
    ok(st.preemptions_swap > 0 && st.block_size == (uint32_t) bs,
       "block size %d: %llu swap preemptions", bs,
       (unsigned long long) st.preemptions_swap);

    before = st;
    st = run_prefix_pair(&w);
    ok(st.prefix_cache_hits - before.prefix_cache_hits >= (uint64_t) (288 / bs)
       && memcmp(res[0].toks, ref_x, sizeof(ref_x)) == 0
       && memcmp(res[1].toks, ref_y, sizeof(ref_y)) == 0,
       "block size %d: a shared 288-token prefix reused (%llu blocks), "
       "the same tokens", bs,
       (unsigned long long) (st.prefix_cache_hits - before.prefix_cache_hits));
    ok(st.kv_blocks_used == 0 && st.swap_blocks_used == 0
       && st.blocks_swapped_in == st.blocks_swapped_out,
       "block size %d: every device and host block comes back", bs);

    fw_detach(&w);
    ok(fw_engine_stop() == 0, "the engine stops cleanly");
}


static void
test_orca_max(const char *build)
{
    const char  *flags[] = {
        "--device", NULL, "--block-size", "16", "--num-blocks", "64",
        "--kv-policy", "orca-max", "--max-model-len", "512", NULL
    };
    fw_t        w;
    pl_stats_t  st;

    flags[1] = fw_device();
    if (!ok(fw_engine_start(build, flags, NULL) == 0
            && fw_attach(&w, take) == 0,
            "engine: the Orca-Max baseline, 512-token reservations"))
    {
        fw_show_log();
        return;
    }

    ok(run_together(&w), "Orca-Max serves the same tokens");
    st = fw_wait_idle(&w);
    ok(st.preemptions_total == 0 && st.kv_blocks_used == 0,
       "without preemption, and frees every reservation");

    fw_detach(&w);
    ok(fw_engine_stop() == 0, "the engine stops cleanly");
}


int
main(void)
{
    const char  *build = getenv("PAGEDLLM_BUILD");
    int          bs;

    build = build ? build : "build";
    if (fw_setup("kv") != 0) {
        ok(0, "temp dir");
        return done_testing();
    }

    make_prompts();
    if (references(build) == 0) {
        test_recompute_and_prefix(build);
        test_swap(build);
        test_auto(build, "1000,1", "swap");
        test_auto(build, "0.000001,1000000000", "recompute");
        test_auto(build, NULL, NULL);
        test_orca_max(build);
        for (bs = 1; bs <= 64; bs *= 2) {
            test_block_size(build, bs);
        }
    }

    if (tap_failed) {
        fw_show_log();
    }
    fw_cleanup();

    return done_testing();
}
