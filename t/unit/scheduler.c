/*
 * Scheduler: FCFS admission, chunked prefill mixed with decodes inside the
 * token budget, the sequence cap, preemption by recompute or swap of the
 * newest request which then resumes first, prefix reuse at admission, the
 * Orca reservations, random workloads (overloaded pools, both preemption
 * modes) that run to completion with every block returned, and a fake
 * model whose every token depends on the KV it reads through the block
 * tables, which must produce the same tokens whatever the preemptions.
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


/* ---- a fake model that reads and writes a shadow KV cache ---- */

#define W_BLOCKS  4096
#define W_BS      4
#define W_HOST    2048

static uint64_t  wkv[W_BLOCKS * W_BS];
static uint64_t  whkv[W_HOST * W_BS];


static void
fake_moves(pl_block_manager_t *bm)
{
    const pl_block_move_t *mv;
    int                    n, i, k, s, d;

    mv = pl_bm_moves(bm, &n);
    for (i = 0; i < n; i++) {
        for (k = 0; k < bm->block_size; k++) {
            s = mv[i].src * bm->block_size + k;
            d = mv[i].dst * bm->block_size + k;
            if (mv[i].kind == PL_MOVE_COPY) {
                wkv[d] = wkv[s];
            } else if (mv[i].kind == PL_MOVE_SWAP_OUT) {
                whkv[d] = wkv[s];
            } else {
                wkv[d] = whkv[s];
            }
        }
    }
}


/* KV of position p chains the KV of p - 1 (read through the block table)
   with token p; the next token hashes the last KV.  Corrupt KV anywhere
   in a context changes every later token. */
static int32_t
fake_forward(pl_block_manager_t *bm, pl_seq_t *s, int n_query)
{
    uint64_t  h = 0;
    int       p;

    for (p = s->n_computed; p < s->n_computed + n_query; p++) {
        h = p ? wkv[pl_bm_slot(bm, &s->blocks, p - 1)] : 77;
        h = (h ^ (uint64_t) (s->tokens[p] + 1)) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 31;
        wkv[pl_bm_slot(bm, &s->blocks, p)] = h;
    }

    return (int32_t) (h % 500);
}


/* Run a workload to the end; out[i] gets request i's tokens.  Returns the
   requests finished; *bad counts plans over the budget or cap. */
static int
run_fake(pl_scheduler_t *sc, int n_req, int32_t out[][64], int *bad)
{
    pl_seq_t  *seqs[64], *s, *fin[64];
    int32_t    prompt[200], t[64];
    int        i, j, n_fin, done = 0, it;
    unsigned   x = 99;

    for (i = 0; i < n_req; i++) {
        x = x * 1103515245u + 12345u;
        for (j = 0; j < 200; j++) {
            prompt[j] = (int32_t) ((j < 24 ? j : i * 7 + j * 3) % 500);
        }
        seqs[i] = pl_seq_create((uint64_t) i, prompt, 20 + (int) (x % 150),
                                8 + (int) ((x >> 12) % 56));
        seqs[i]->arrival = (uint64_t) i + 1;
        pl_sched_add(sc, seqs[i]);
    }

    for (it = 0; it < 200000 && pl_sched_has_work(sc); it++) {
        pl_sched_step(sc);
        *bad += sc->n_tokens > sc->max_num_batched_tokens
                || sc->n_entries > sc->max_num_seqs;
        fake_moves(sc->bm);
        for (i = 0; i < sc->n_entries; i++) {
            t[i] = fake_forward(sc->bm, sc->entries[i].seq,
                                sc->entries[i].n_query);
        }
        pl_sched_complete(sc);
        n_fin = 0;
        for (i = 0; i < sc->n_entries; i++) {
            s = sc->entries[i].seq;
            if (s->n_computed == s->n_tokens) {
                pl_seq_append(s, t[i]);
                if (pl_seq_generated(s) == s->max_tokens) {
                    fin[n_fin++] = s;
                }
            }
        }
        for (i = 0; i < n_fin; i++) {
            pl_sched_remove(sc, fin[i]);
            done++;
        }
    }

    for (i = 0; i < n_req; i++) {
        memset(out[i], 0, sizeof(out[i]));
        memcpy(out[i], seqs[i]->tokens + seqs[i]->n_prompt,
               (size_t) pl_seq_generated(seqs[i]) * sizeof(int32_t));
        pl_seq_free(seqs[i]);
    }

    return done;
}


typedef struct {
    const char         *name;
    int                 blocks;
    int                 host;
    int                 caching;
    pl_preempt_mode_t   mode;
} fake_cfg_t;


static void
test_same_tokens_under_preemption(void)
{
    static int32_t      want[48][64], got[48][64];
    static const fake_cfg_t  cfgs[] = {
        { "recompute, pool of 60 blocks", 60, 0, 0, PL_PREEMPT_RECOMPUTE },
        { "swap, pool of 60 blocks", 60, 200, 0, PL_PREEMPT_SWAP },
        { "swap with a host pool of 30 (falls back to recompute)", 60, 30,
          0, PL_PREEMPT_SWAP },
        { "prefix caching, ample pool", W_BLOCKS, 0, 1,
          PL_PREEMPT_RECOMPUTE },
        { "prefix caching and swap, pool of 60", 60, 200, 1,
          PL_PREEMPT_SWAP },
        { "prefix caching and recompute, pool of 60", 60, 0, 1,
          PL_PREEMPT_RECOMPUTE },
    };
    pl_block_manager_t  bm;
    pl_scheduler_t      sc;
    size_t              c;
    int                 bad = 0, done;

    pl_bm_init(&bm, W_BLOCKS, W_BS);
    pl_sched_init(&sc, &bm, 16, 64);
    done = run_fake(&sc, 48, want, &bad);
    is_int(done, 48, "reference run: 48 requests, no preemption (%llu)",
           (unsigned long long) sc.preemptions);
    pl_sched_destroy(&sc);
    pl_bm_destroy(&bm);

    for (c = 0; c < sizeof(cfgs) / sizeof(cfgs[0]); c++) {
        pl_bm_init(&bm, cfgs[c].blocks, W_BS);
        pl_bm_init_host(&bm, cfgs[c].host);
        if (cfgs[c].caching) {
            pl_bm_enable_caching(&bm);
        }
        pl_sched_init(&sc, &bm, 16, 64);
        sc.preemption_mode = cfgs[c].mode;

        done = run_fake(&sc, 48, got, &bad);
        is_int(done, 48, "%s: every request finishes (%llu preemptions: "
               "%llu swap, %llu recompute; %llu prefix hits)", cfgs[c].name,
               (unsigned long long) sc.preemptions,
               (unsigned long long) sc.preempted_swap,
               (unsigned long long) sc.preempted_recompute,
               (unsigned long long) bm.counters.prefix_hits);
        ok(memcmp(want, got, sizeof(want)) == 0, "%s: every token equals "
           "the reference run's", cfgs[c].name);
        ok(cfgs[c].blocks == W_BLOCKS || sc.preemptions > 0,
           "%s: preempts when the pool is too small", cfgs[c].name);
        ok(cfgs[c].mode != PL_PREEMPT_SWAP
           || (sc.preempted_swap > 0
               && (cfgs[c].host >= 200) == (sc.preempted_recompute == 0)),
           "%s: swaps exactly when the mode and the host pool allow",
           cfgs[c].name);
        ok(!cfgs[c].caching || bm.counters.prefix_hits > 0,
           "%s: reuses the shared 24-token prefix when caching is on",
           cfgs[c].name);
        is_int(pl_bm_num_used(&bm) + pl_bm_num_host_used(&bm), 0,
               "%s: no block leaked", cfgs[c].name);

        pl_sched_destroy(&sc);
        pl_bm_destroy(&bm);
    }

    is_int(bad, 0, "no plan exceeded the token budget or the sequence cap");
}


static void
test_swap_victim_resumes_first(void)
{
    pl_block_manager_t     bm;
    pl_scheduler_t         sc;
    pl_seq_t              *s[4], *e, *done[8];
    const pl_block_move_t *mv;
    int                    i, n, n_done = 0, ins = 0;

    pl_bm_init(&bm, 4, 4);
    pl_bm_init_host(&bm, 8);
    pl_sched_init(&sc, &bm, 8, 64);
    sc.preemption_mode = PL_PREEMPT_SWAP;

    for (i = 0; i < 4; i++) {
        s[i] = mkseq(&sc, 3, 3);
    }
    pl_sched_step(&sc);
    run_iteration(&sc, NULL, NULL);
    pl_sched_step(&sc);
    run_iteration(&sc, NULL, NULL);

    pl_sched_step(&sc);     /* position 4 needs a 2nd block for everyone */
    ok(s[3]->state == PL_SEQ_SWAPPED && s[2]->state == PL_SEQ_SWAPPED,
       "the two newest are swapped out");
    ok(s[3]->blocks.on_host && s[3]->n_computed == 4,
       "a swapped request keeps its computed KV, on the host");
    mv = pl_bm_moves(&bm, &n);
    ok(n == 2 && mv[0].kind == PL_MOVE_SWAP_OUT, "two swap-outs logged");
    is_int(sc.preempted_swap, 2, "counted as swap preemptions");
    run_iteration(&sc, done, &n_done);

    e = mkseq(&sc, 2, 1);
    pl_sched_step(&sc);
    mv = pl_bm_moves(&bm, &n);
    for (i = 0; i < n; i++) {
        ins += mv[i].kind == PL_MOVE_SWAP_IN;
    }
    ok(s[2]->state == PL_SEQ_RUNNING && s[3]->state == PL_SEQ_RUNNING
       && ins == 2, "the swapped requests come back in, one block each");
    ok(planned(&sc, s[2]) == 1 && planned(&sc, s[3]) == 1,
       "and decode at once, without recomputing");
    ok(e->state == PL_SEQ_WAITING, "before the newer request");

    while (pl_sched_has_work(&sc)) {
        pl_sched_step(&sc);
        run_iteration(&sc, done, &n_done);
    }
    is_int(n_done, 5, "every request finishes");
    is_int(pl_bm_num_free(&bm) + pl_bm_num_host_used(&bm), 4,
           "all blocks back, host pool empty");
    for (i = 0; i < n_done; i++) {
        pl_seq_free(done[i]);
    }
    pl_sched_destroy(&sc);
    pl_bm_destroy(&bm);
}


static void
test_prefix_admission(void)
{
    pl_block_manager_t  bm;
    pl_scheduler_t      sc;
    pl_seq_t           *a, *b;

    pl_bm_init(&bm, 64, 4);
    pl_bm_enable_caching(&bm);
    pl_sched_init(&sc, &bm, 8, 64);

    a = mkseq(&sc, 30, 2);
    pl_sched_step(&sc);
    is_int(planned(&sc, a), 30, "the first request computes its prompt");
    run_iteration(&sc, NULL, NULL);

    b = mkseq(&sc, 30, 2);
    pl_sched_step(&sc);
    is_int(b->n_computed, 28, "the same prompt reuses 7 cached blocks");
    is_int(planned(&sc, b), 2, "and computes only the last 2 tokens");
    ok(b->blocks.ids[6] == a->blocks.ids[6], "sharing a's blocks");

    while (pl_sched_has_work(&sc)) {
        pl_sched_step(&sc);
        run_iteration(&sc, NULL, NULL);
    }
    is_int(pl_bm_num_free(&bm), 64, "all blocks back (cached ones are "
           "available)");
    pl_sched_destroy(&sc);
    pl_bm_destroy(&bm);
}


static void
test_orca_reservations(void)
{
    static const struct {
        pl_kv_policy_t  policy;
        const char     *name;
        int             blocks;
    } pol[] = {
        { PL_KV_ORCA_MAX, "orca-max reserves max_model_len (64)", 16 },
        { PL_KV_ORCA_POW2, "orca-pow2 reserves 10 + 32", 11 },
        { PL_KV_ORCA_ORACLE, "orca-oracle reserves 10 + 20", 8 },
    };
    pl_block_manager_t  bm;
    pl_scheduler_t      sc;
    pl_seq_t           *a, *b;
    size_t              i;

    for (i = 0; i < sizeof(pol) / sizeof(pol[0]); i++) {
        pl_bm_init(&bm, 32, 4);
        pl_sched_init(&sc, &bm, 8, 64);
        sc.policy = pol[i].policy;
        sc.max_model_len = 64;

        a = mkseq(&sc, 10, 20);
        b = mkseq(&sc, 10, 20);
        pl_sched_step(&sc);
        is_int(a->blocks.n, pol[i].blocks, "%s", pol[i].name);
        ok(a->blocks.ids[a->blocks.n - 1] - a->blocks.ids[0]
           == a->blocks.n - 1, "%s: in consecutive blocks", pol[i].name);
        ok(b->state == (2 * pol[i].blocks <= 32 ? PL_SEQ_RUNNING
                                                : PL_SEQ_WAITING),
           "%s: a second request runs only if its reservation fits",
           pol[i].name);
        while (pl_sched_has_work(&sc)) {
            pl_sched_step(&sc);
            run_iteration(&sc, NULL, NULL);
        }
        is_int(sc.preemptions, 0, "%s: never preempts", pol[i].name);
        is_int(pl_bm_num_free(&bm), 32, "%s: no block leaked", pol[i].name);
        pl_sched_destroy(&sc);
        pl_bm_destroy(&bm);
    }
}


int
main(void)
{
    test_fcfs_and_cap();
    test_chunked_prefill();
    test_preemption();
    test_remove();
    test_random_workload();
    test_swap_victim_resumes_first();
    test_prefix_admission();
    test_orca_reservations();
    test_same_tokens_under_preemption();

    return done_testing();
}
