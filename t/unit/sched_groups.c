/*
 * Scheduler with sequence groups: a request that will fork takes best_of
 * seats from admission on; after the fork its members share the prompt's
 * blocks; when blocks run out the newest group is preempted whole (every
 * member waiting, or every member swapped) and comes back whole; a group
 * that cannot all be admitted is admitted not at all; every block is
 * returned at the end.  Auto preemption, with its costs injected, swaps
 * a group whose members share their prompt (many computed tokens per
 * distinct block) and recomputes a lone sequence (fewer), falls back to
 * recompute when the host pool is full, and counts each choice.
 */

#include "tap.h"

#include "scheduler.h"

#define BLOCK  16


static pl_seq_t *
mkgroup(pl_scheduler_t *sc, uint64_t arrival, int n_prompt, int max_tokens,
    int best_of)
{
    int32_t    prompt[512];
    pl_seq_t  *s;
    int        i;

    for (i = 0; i < n_prompt; i++) {
        prompt[i] = (int32_t) ((i * 7 + arrival) % 500);
    }

    s = pl_seq_create(arrival, prompt, n_prompt, max_tokens);
    s->arrival = arrival;
    s->best_of = s->n_return = best_of;
    pl_sched_add(sc, s);

    return s;
}


/* Fork leader l (prompt just run) into its members. */
static void
fork_group(pl_scheduler_t *sc, pl_seq_t *l)
{
    pl_seq_t  *c;

    while (l->n_members < l->best_of) {
        c = pl_seq_fork(l, l->n_members);
        pl_bm_fork(sc->bm, &l->blocks, &c->blocks);
        l->members[l->n_members++] = c;
        pl_sched_fork(sc, c);
    }
}


/* Every member of l's group in one state: 1, else 0. */
static int
whole(const pl_seq_t *l)
{
    int  i;

    for (i = 1; i < l->n_members; i++) {
        if (l->members[i]->state != l->state) {
            return 0;
        }
    }

    return 1;
}


/* One iteration: complete the plan, fork leaders whose prompt ran, append
   a token to each sequence that was sampled; finish those at max_tokens. */
static void
iterate(pl_scheduler_t *sc)
{
    pl_seq_t  *planned[64], *s;
    int        i, j, n = sc->n_entries;

    pl_sched_complete(sc);
    for (i = 0; i < n; i++) {
        planned[i] = sc->entries[i].seq;
    }

    for (i = 0; i < n; i++) {
        s = planned[i];
        if (s->state != PL_SEQ_RUNNING || s->n_computed < s->n_tokens) {
            continue;
        }
        if (s->n_members < s->best_of) {
            fork_group(sc, s);
            for (j = 0; j < s->n_members; j++) {
                pl_seq_append(s->members[j], 7 + j);
            }
            continue;
        }
        pl_seq_append(s, 7);
        if (pl_seq_generated(s) == s->max_tokens) {
            pl_sched_remove(sc, s);
        }
    }
}


static void
test_cap_and_sharing(void)
{
    pl_block_manager_t  bm;
    pl_scheduler_t      sc;
    pl_seq_t           *a, *b;
    int                 i;

    pl_bm_init(&bm, 64, BLOCK);
    pl_sched_init(&sc, &bm, 4, 512);

    a = mkgroup(&sc, 1, 40, 8, 3);
    b = mkgroup(&sc, 2, 40, 8, 2);

    pl_sched_step(&sc);
    ok(a->state == PL_SEQ_RUNNING && b->state == PL_SEQ_WAITING,
       "a group of best_of 3 takes three of four seats: a group of 2 waits");

    iterate(&sc);
    is_int(a->n_members, 3, "after its prompt the group forks into 3");
    is_int(pl_bm_num_used(&bm), 3, "sharing the prompt's 3 blocks");
    is_int(sc.running.n, 3, "3 sequences run");

    pl_sched_step(&sc);
    ok(b->state == PL_SEQ_WAITING, "no seat for the next group yet");
    is_int(pl_bm_num_used(&bm), 3 + 2, "the shared last block is copied "
           "for two members on their first write (copy-on-write)");

    for (i = 0; i < 20 && pl_sched_has_work(&sc); i++) {
        iterate(&sc);
        pl_sched_step(&sc);
    }
    ok(!pl_sched_has_work(&sc), "both groups run to the end");
    is_int(pl_bm_num_used(&bm), 0, "every block returned");

    for (i = 0; i < a->n_members; i++) {
        if (i) {
            pl_seq_free(a->members[i]);
        }
    }
    for (i = 1; i < b->n_members; i++) {
        pl_seq_free(b->members[i]);
    }
    pl_seq_free(a);
    pl_seq_free(b);
    pl_sched_destroy(&sc);
    pl_bm_destroy(&bm);
}


/*
 * Costs for auto preemption where swapping beats recomputing exactly when
 * a group holds more than 18 computed tokens per distinct block: a block
 * of 1 MB crosses a 1 GB/s link in 1 ms each way, and 18 tokens take 2 ms
 * at 9000 tokens/s.  A lone sequence holds at most BLOCK (16) per block;
 * four members sharing their prompt hold more.
 */
static void
auto_costs(pl_scheduler_t *sc)
{
    sc->preemption_mode = PL_PREEMPT_AUTO;
    sc->costs = (pl_preempt_costs_t) { 1e9, 9000, 1e6 };
}


static void
test_preemption(pl_preempt_mode_t mode, const char *name)
{
    pl_block_manager_t  bm;
    pl_scheduler_t      sc;
    pl_seq_t           *g[3];
    int                 i, j, steps, broken = 0, preempted = 0, done;

    pl_bm_init(&bm, 14, BLOCK);
    if (mode != PL_PREEMPT_RECOMPUTE) {
        pl_bm_init_host(&bm, 64);
    }
    pl_sched_init(&sc, &bm, 16, 256);
    if (mode == PL_PREEMPT_AUTO) {
        auto_costs(&sc);
    }
    sc.preemption_mode = mode;

    for (i = 0; i < 3; i++) {
        g[i] = mkgroup(&sc, (uint64_t) i + 1, 20, 40, 3);
    }

    for (steps = 0; steps < 2000 && pl_sched_has_work(&sc); steps++) {
        pl_sched_step(&sc);
        preempted += sc.n_preempted;
        for (i = 0; i < 3; i++) {
            broken += !whole(g[i]) && g[i]->state != PL_SEQ_FINISHED;
        }
        for (i = 0; i < sc.n_entries; i++) {
            broken += sc.entries[i].seq->leader->state == PL_SEQ_WAITING;
        }
        iterate(&sc);
    }

    for (done = 1, i = 0; i < 3; i++) {
        for (j = 0; j < g[i]->n_members; j++) {
            done &= pl_seq_generated(g[i]->members[j]) == 40;
        }
    }

    ok(preempted > 0, "%s: three groups of 3 on 14 blocks get preempted "
       "(%d times)", name, preempted);
    is_int(broken, 0, "%s: after every step each group is wholly running, "
           "waiting or swapped", name);
    ok(done && !pl_sched_has_work(&sc), "%s: every member generates its "
       "40 tokens", name);
    is_int(pl_bm_num_used(&bm) + pl_bm_num_host_used(&bm), 0,
           "%s: every block returned", name);

    for (i = 0; i < 3; i++) {
        for (j = g[i]->n_members - 1; j >= 0; j--) {
            pl_seq_free(g[i]->members[j]);
        }
    }
    pl_sched_destroy(&sc);
    pl_bm_destroy(&bm);
}


static void
test_swap_cheaper(void)
{
    pl_block_manager_t  bm;
    pl_scheduler_t      sc;

    pl_bm_init(&bm, 8, BLOCK);
    pl_sched_init(&sc, &bm, 4, 64);
    auto_costs(&sc);

    ok(!pl_sched_swap_cheaper(&sc, 10, 180), "auto: 18 tokens a block is "
       "a tie (20 ms either way): recompute");
    ok(pl_sched_swap_cheaper(&sc, 10, 181), "181 tokens on 10 blocks: "
       "swap");
    ok(!pl_sched_swap_cheaper(&sc, 10, 179), "179 tokens on 10 blocks: "
       "recompute");
    sc.costs.host_bytes_per_s = 0;
    ok(!pl_sched_swap_cheaper(&sc, 1, 100000), "no host link: recompute");
    sc.costs = (pl_preempt_costs_t) { 1e9, 0, 1e6 };
    ok(pl_sched_swap_cheaper(&sc, 1000, 1), "no prefill rate: swap");

    pl_sched_destroy(&sc);
    pl_bm_destroy(&bm);
}


/* Step and iterate until a step preempts; 1 when one did. */
static int
until_preempted(pl_scheduler_t *sc)
{
    int  steps;

    for (steps = 0; steps < 500 && pl_sched_has_work(sc); steps++) {
        pl_sched_step(sc);
        if (sc->n_preempted > 0) {
            return 1;
        }
        iterate(sc);
    }

    return 0;
}


/* Run the rest; 1 when every member of g[0..n) generated its
   max_tokens. */
static int
run_out(pl_scheduler_t *sc, pl_seq_t **g, int n)
{
    int  i, j, steps, done = 1;

    iterate(sc);
    for (steps = 0; steps < 2000 && pl_sched_has_work(sc); steps++) {
        pl_sched_step(sc);
        iterate(sc);
    }

    for (i = 0; i < n; i++) {
        for (j = 0; j < g[i]->n_members; j++) {
            done &= pl_seq_generated(g[i]->members[j])
                    == g[i]->members[j]->max_tokens;
        }
    }

    return done && !pl_sched_has_work(sc);
}


static void
free_groups(pl_seq_t **g, int n)
{
    int  i, j;

    for (i = 0; i < n; i++) {
        for (j = g[i]->n_members - 1; j >= 0; j--) {
            pl_seq_free(g[i]->members[j]);
        }
    }
}


/*
 * An old lone sequence A (32 + 100 tokens), then a group B of four
 * sharing a 32-token prompt (32 + 32 tokens each), on 13 blocks with
 * prefix caching (host pool: host_blocks): when B's members reach their
 * fourth block, B, the newest, is preempted holding 192 computed tokens
 * on at most 10 distinct blocks.  Swapped, it comes back on its distinct
 * blocks (not one per member and table entry); recomputed, its members
 * find their blocks in the prefix cache.
 */
static void
test_auto_group(int host_blocks, const char *name)
{
    pl_block_manager_t  bm;
    pl_scheduler_t      sc;
    pl_seq_t           *g[2];
    pl_block_table_t   *tables[4];
    int                 i, tokens = 0;

    pl_bm_init(&bm, 13, BLOCK);
    pl_bm_enable_caching(&bm);
    pl_bm_init_host(&bm, host_blocks);
    pl_sched_init(&sc, &bm, 8, 256);
    auto_costs(&sc);

    g[0] = mkgroup(&sc, 1, 32, 100, 1);
    g[1] = mkgroup(&sc, 2, 32, 32, 4);

    if (!ok(until_preempted(&sc), "%s: the group is preempted", name)) {
        return;
    }
    ok(g[0]->state == PL_SEQ_RUNNING && whole(g[1]), "%s: the lone older "
       "sequence runs on, the group was preempted whole", name);
    ok(sc.auto_swap == 1 && sc.auto_recompute == 0, "%s: auto chose swap",
       name);

    if (g[1]->state == PL_SEQ_SWAPPED) {
        for (i = 0; i < g[1]->n_members; i++) {
            tables[i] = &g[1]->members[i]->blocks;
            tokens += g[1]->members[i]->n_computed;
        }
        ok(tokens > 18 * pl_bm_group_blocks(&bm, tables, 4)
           && sc.preempted_swap == 1 && sc.swap_full == 0,
           "%s: and swapped it out: %d computed tokens on %d distinct "
           "blocks, more than 18 a block", name, tokens,
           pl_bm_group_blocks(&bm, tables, 4));
    } else {
        ok(g[1]->state == PL_SEQ_WAITING && sc.preempted_recompute == 1
           && sc.swap_full == 1, "%s: the host pool of %d blocks is full: "
           "recomputed, counted as swap_full", name, host_blocks);
    }

    ok(run_out(&sc, g, 2), "%s: every sequence generates its tokens",
       name);
    is_int(pl_bm_num_used(&bm) + pl_bm_num_host_used(&bm), 0,
           "%s: every block returned", name);

    free_groups(g, 2);
    pl_sched_destroy(&sc);
    pl_bm_destroy(&bm);
}


/* Two lone sequences of 32 prompt tokens on 4 blocks: the newer one is
   preempted holding 16 computed tokens a block, and recomputed. */
static void
test_auto_single(void)
{
    pl_block_manager_t  bm;
    pl_scheduler_t      sc;
    pl_seq_t           *g[2];

    pl_bm_init(&bm, 4, BLOCK);
    pl_bm_init_host(&bm, 64);
    pl_sched_init(&sc, &bm, 8, 256);
    auto_costs(&sc);

    g[0] = mkgroup(&sc, 1, 32, 20, 1);
    g[1] = mkgroup(&sc, 2, 32, 20, 1);

    if (!ok(until_preempted(&sc), "lone sequence: preempted")) {
        return;
    }
    ok(g[1]->state == PL_SEQ_WAITING && g[1]->n_computed == 0
       && g[0]->state == PL_SEQ_RUNNING, "lone sequence: the newer one is "
       "sent back to recompute");
    ok(sc.auto_recompute == 1 && sc.auto_swap == 0
       && sc.preempted_recompute == 1 && sc.swap_full == 0,
       "lone sequence: auto chose recompute (32 tokens on 2 blocks)");
    ok(run_out(&sc, g, 2), "lone sequences: both generate 20 tokens");
    is_int(pl_bm_num_used(&bm) + pl_bm_num_host_used(&bm), 0,
           "lone sequences: every block returned");

    free_groups(g, 2);
    pl_sched_destroy(&sc);
    pl_bm_destroy(&bm);
}


int
main(void)
{
    test_cap_and_sharing();
    test_preemption(PL_PREEMPT_RECOMPUTE, "recompute");
    test_preemption(PL_PREEMPT_SWAP, "swap");
    test_preemption(PL_PREEMPT_AUTO, "auto");
    test_swap_cheaper();
    test_auto_group(64, "auto, room on the host");
    test_auto_group(2, "auto, host pool full");
    test_auto_single();

    return done_testing();
}
