/*
 * Scheduler: FCFS admission, chunked prefill mixed with decodes inside the
 * token budget, the sequence cap, preemption by recompute of the newest
 * request which then resumes first, and a random workload that runs to
 * completion with every block returned.
 */

#include "tap.h"

#include "scheduler.h"

static uint64_t  arrivals;


static pl_seq_t *
mkseq(pl_scheduler_t *sc, int n_prompt, int max_tokens)
{
    int32_t    prompt[4096];
    pl_seq_t  *s;
    int        i;

    for (i = 0; i < n_prompt; i++) {
        prompt[i] = i % 500;
    }

    s = pl_seq_create(++arrivals, prompt, n_prompt, max_tokens);
    s->arrival = arrivals;
    pl_sched_add(sc, s);

    return s;
}


static int
planned(const pl_scheduler_t *sc, const pl_seq_t *s)
{
    int  i;

    for (i = 0; i < sc->n_entries; i++) {
        if (sc->entries[i].seq == s) {
            return sc->entries[i].n_query;
        }
    }

    return 0;
}


/* Run the planned iteration: sample a token for every sequence whose
   tokens are all computed; finish those that reached max_tokens.
   Returns how many finished. */
static int
run_iteration(pl_scheduler_t *sc, pl_seq_t **done, int *n_done)
{
    pl_seq_t  *fin[256];
    int        i, n = 0;

    pl_sched_complete(sc);

    for (i = 0; i < sc->n_entries; i++) {
        pl_seq_t  *s = sc->entries[i].seq;

        if (s->n_computed == s->n_tokens) {
            pl_seq_append(s, 7);
            if (pl_seq_generated(s) == s->max_tokens) {
                fin[n++] = s;
            }
        }
    }

    for (i = 0; i < n; i++) {
        pl_sched_remove(sc, fin[i]);
        if (done) {
            done[(*n_done)++] = fin[i];
        } else {
            pl_seq_free(fin[i]);
        }
    }

    return n;
}


static void
test_fcfs_and_cap(void)
{
    pl_block_manager_t  bm;
    pl_scheduler_t      sc;
    pl_seq_t           *s[4];
    int                 i;

    pl_bm_init(&bm, 64, 4);
    pl_sched_init(&sc, &bm, 2, 100);

    for (i = 0; i < 4; i++) {
        s[i] = mkseq(&sc, 5, i == 1 ? 8 : 3);
    }

    pl_sched_step(&sc);
    is_int(sc.n_entries, 2, "max_num_seqs = 2 admits two of four");
    ok(sc.entries[0].seq == s[0] && sc.entries[1].seq == s[1],
       "the two oldest, in arrival order");
    is_int(sc.waiting.n, 2, "the others wait");

    while (pl_sched_has_work(&sc) && s[2]->state == PL_SEQ_WAITING) {
        pl_sched_step(&sc);
        run_iteration(&sc, NULL, NULL);
    }
    ok(s[3]->state == PL_SEQ_WAITING && s[1]->state == PL_SEQ_RUNNING,
       "when the 1st finishes, the 3rd takes its place, not the 4th");

    while (pl_sched_has_work(&sc)) {
        pl_sched_step(&sc);
        run_iteration(&sc, NULL, NULL);
    }
    is_int(pl_bm_num_free(&bm), 64, "all blocks back after completion");

    pl_sched_destroy(&sc);
    pl_bm_destroy(&bm);
}


static void
test_chunked_prefill(void)
{
    pl_block_manager_t  bm;
    pl_scheduler_t      sc;
    pl_seq_t           *a, *b;

    pl_bm_init(&bm, 64, 4);
    pl_sched_init(&sc, &bm, 8, 8);

    a = mkseq(&sc, 3, 10);
    pl_sched_step(&sc);
    is_int(planned(&sc, a), 3, "a short prompt runs whole");
    run_iteration(&sc, NULL, NULL);

    b = mkseq(&sc, 20, 2);
    pl_sched_step(&sc);
    is_int(sc.n_entries, 2, "a decode and a prompt chunk share the iteration");
    ok(sc.entries[0].seq == a && sc.entries[0].n_query == 1,
       "the decode comes first");
    is_int(planned(&sc, b), 7, "the chunk takes what is left of the budget");
    is_int(sc.n_tokens, 8, "the budget of 8 is used exactly");
    is_int(b->blocks.n, 2, "blocks are reserved for the chunk only");
    run_iteration(&sc, NULL, NULL);
    is_int(b->n_computed, 7, "7 prompt tokens computed");
    is_int(b->n_tokens, 20, "no token sampled from a partial prompt");

    pl_sched_step(&sc);
    is_int(planned(&sc, a), 1, "the decode continues");
    is_int(planned(&sc, b), 7, "the next chunk is 7 again");
    run_iteration(&sc, NULL, NULL);

    pl_sched_step(&sc);
    is_int(planned(&sc, b), 6, "the last chunk is the remaining 6");
    run_iteration(&sc, NULL, NULL);
    is_int(b->n_tokens, 21, "the last chunk samples the first token");

    pl_sched_step(&sc);
    is_int(planned(&sc, b), 1, "then b decodes");
    run_iteration(&sc, NULL, NULL);
    ok(sc.running.n == 1 && sc.running.head == a,
       "b is done after max_tokens = 2");

    while (pl_sched_has_work(&sc)) {
        pl_sched_step(&sc);
        run_iteration(&sc, NULL, NULL);
    }
    is_int(pl_bm_num_free(&bm), 64, "no block leaked");

    pl_sched_destroy(&sc);
    pl_bm_destroy(&bm);
}


static void
test_preemption(void)
{
    pl_block_manager_t  bm;
    pl_scheduler_t      sc;
    pl_seq_t           *s[4], *e, *done[8];
    int                 i, n_done = 0;

    /* 4 blocks of 4 tokens; four prompts of 4 fill the pool */
    pl_bm_init(&bm, 4, 4);
    pl_sched_init(&sc, &bm, 8, 64);

    for (i = 0; i < 4; i++) {
        s[i] = mkseq(&sc, 3, 3);
    }

    pl_sched_step(&sc);
    is_int(sc.n_entries, 4, "four prompts admitted");
    run_iteration(&sc, NULL, NULL);
    is_int(pl_bm_num_free(&bm), 0, "the pool is full");

    pl_sched_step(&sc);     /* each decode at position 3 fits block 0 */
    run_iteration(&sc, NULL, NULL);

    pl_sched_step(&sc);     /* position 4 needs a 2nd block for everyone */
    is_int(sc.n_preempted, 2, "two requests preempted");
    ok(s[3]->state == PL_SEQ_WAITING && s[2]->state == PL_SEQ_WAITING,
       "the victims are the two newest");
    ok(planned(&sc, s[0]) == 1 && planned(&sc, s[1]) == 1,
       "the two oldest keep decoding");
    is_int(s[3]->n_computed, 0, "a victim's KV is dropped (recompute)");
    is_int(s[3]->blocks.n, 0, "and its blocks are freed");
    ok(sc.waiting.head == s[2] && s[2]->next == s[3],
       "victims wait in arrival order at the front");
    is_int(pl_seq_generated(s[3]), 2, "a victim keeps its generated tokens");
    run_iteration(&sc, done, &n_done);
    is_int(n_done, 2, "the two oldest finish");

    e = mkseq(&sc, 2, 1);
    ok(sc.waiting.tail == e, "a newer request queues behind the victims");

    pl_sched_step(&sc);
    ok(planned(&sc, s[2]) == 5 && planned(&sc, s[3]) == 5,
       "the victims resume first, recomputing prompt + generated tokens");
    ok(e->state == PL_SEQ_WAITING && sc.n_entries == 2,
       "before the newer request");

    while (pl_sched_has_work(&sc)) {
        pl_sched_step(&sc);
        run_iteration(&sc, done, &n_done);
    }
    is_int(n_done, 5, "every request finishes");
    is_int(pl_seq_generated(s[3]), 3, "a resumed request still stops at "
           "max_tokens");
    is_int(pl_bm_num_free(&bm), 4, "all blocks back");
    ok(sc.preemptions >= 2, "preemptions are counted (%llu)",
       (unsigned long long) sc.preemptions);

    for (i = 0; i < n_done; i++) {
        pl_seq_free(done[i]);
    }
    pl_sched_destroy(&sc);
    pl_bm_destroy(&bm);
}


static void
test_remove(void)
{
    pl_block_manager_t  bm;
    pl_scheduler_t      sc;
    pl_seq_t           *a, *b;

    pl_bm_init(&bm, 8, 4);
    pl_sched_init(&sc, &bm, 1, 64);

    a = mkseq(&sc, 9, 4);
    b = mkseq(&sc, 3, 4);
    pl_sched_step(&sc);
    is_int(pl_bm_num_used(&bm), 3, "a running request holds its blocks");

    pl_sched_remove(&sc, b);
    is_int(sc.waiting.n, 0, "removing a waiting request empties the queue");
    pl_sched_remove(&sc, a);
    is_int(sc.running.n, 0, "removing a running request");
    is_int(sc.n_entries, 0, "drops it from the plan");
    is_int(pl_bm_num_free(&bm), 8, "and frees its blocks");
    ok(a->state == PL_SEQ_FINISHED && b->state == PL_SEQ_FINISHED,
       "removed requests are finished");

    pl_seq_free(a);
    pl_seq_free(b);
    pl_sched_destroy(&sc);
    pl_bm_destroy(&bm);
}


static void
test_random_workload(void)
{
    pl_block_manager_t  bm;
    pl_scheduler_t      sc;
    pl_seq_t           *done[400], *s, *newest;
    int                 n_done = 0, i, it, bad_budget = 0, bad_victim = 0;
    int                 submitted = 0, gen_ok = 1;
    unsigned            x = 777;

    pl_bm_init(&bm, 40, 8);             /* 320 tokens */
    pl_sched_init(&sc, &bm, 16, 64);

    for (it = 0; it < 100000 && (submitted < 400 || pl_sched_has_work(&sc));
         it++)
    {
        x = x * 1103515245u + 12345u;
        if (submitted < 400 && (x >> 16) % 3 == 0) {
            mkseq(&sc, 1 + (int) ((x >> 4) % 150), 1 + (int) ((x >> 9) % 60));
            submitted++;
        }

        newest = sc.running.tail;
        pl_sched_step(&sc);
        bad_budget += sc.n_tokens > 64 || sc.n_entries > 16;
        if (sc.n_preempted && newest) {
            bad_victim += newest->state != PL_SEQ_WAITING;
        }
        run_iteration(&sc, done, &n_done);
        if (n_done == 400) {
            break;
        }
    }

    is_int(n_done, 400, "400 random requests on a small pool all finish "
           "(%d iterations, %llu preemptions)", it,
           (unsigned long long) sc.preemptions);
    is_int(bad_budget, 0, "no plan exceeds the token budget or the cap");
    is_int(bad_victim, 0, "a preemption always takes the newest running");
    for (i = 0; i < n_done; i++) {
        s = done[i];
        gen_ok &= pl_seq_generated(s) == s->max_tokens;
        pl_seq_free(s);
    }
    ok(gen_ok, "each generated exactly max_tokens");
    is_int(pl_bm_num_free(&bm), 40, "no block leaked");

    pl_sched_destroy(&sc);
    pl_bm_destroy(&bm);
}


int
main(void)
{
    test_fcfs_and_cap();
    test_chunked_prefill();
    test_preemption();
    test_remove();
    test_random_workload();

    return done_testing();
}
