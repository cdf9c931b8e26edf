/*
 * Scheduler with sequence groups: a request that will fork takes best_of
 * seats from admission on; after the fork its members share the prompt's
 * blocks; when blocks run out the newest group is preempted whole (every
 * member waiting, or every member swapped) and comes back whole; a group
 * that cannot all be admitted is admitted not at all; every block is
 * returned at the end.
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


static void
test_preemption(pl_preempt_mode_t mode, const char *name)
{
    pl_block_manager_t  bm;
    pl_scheduler_t      sc;
    pl_seq_t           *g[3];
    int                 i, j, steps, broken = 0, preempted = 0, done;

    pl_bm_init(&bm, 14, BLOCK);
    if (mode == PL_PREEMPT_SWAP) {
        pl_bm_init_host(&bm, 64);
    }
    pl_sched_init(&sc, &bm, 16, 256);
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


int
main(void)
{
    test_cap_and_sharing();
    test_preemption(PL_PREEMPT_RECOMPUTE, "recompute");
    test_preemption(PL_PREEMPT_SWAP, "swap");

    return done_testing();
}
