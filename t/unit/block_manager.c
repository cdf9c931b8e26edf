/*
 * Block manager: allocation, growth, slots, exhaustion, LRU order, runs
 * of blocks for growing tables, fork and copy-on-write, prefix caching
 * (hits, verification of tokens and parents, eviction in LRU order),
 * contiguous reservations, swapping a group out and in, and a randomized
 * property test that replays every logged block move onto a shadow KV
 * cache and checks, after every operation, reference counts, the
 * free/evictable lists, the prefix cache and the KV content of every
 * computed token of every live sequence; the same checks after every step
 * of randomized beam-search groups (fork the surviving beams, free the
 * pruned, append with copy-on-write, preempt by swap or recompute, end or
 * abort), which must end with no block held.
 */

#include "tap.h"

#include "block_manager.h"


static void
test_growth_and_slots(void)
{
    pl_block_manager_t  bm;
    pl_block_table_t    t = { 0 };

    is_int(pl_bm_init(&bm, 8, 4), 0, "init 8 blocks of 4 tokens");
    is_int(pl_bm_num_free(&bm), 8, "all blocks start free");

    is_int(pl_bm_ensure(&bm, &t, 1), 0, "room for 1 token");
    is_int(t.n, 1, "1 token takes 1 block");
    is_int(pl_bm_ensure(&bm, &t, 4), 0, "room for 4 tokens");
    is_int(t.n, 1, "4 tokens still fit in 1 block");
    is_int(pl_bm_ensure(&bm, &t, 5), 0, "room for 5 tokens");
    is_int(t.n, 2, "the 5th token opens a 2nd block");
    is_int(pl_bm_num_used(&bm), 2, "2 blocks used");
    is_int(pl_bm_refcount(&bm, t.ids[0]), 1, "an allocated block has ref 1");
    ok(t.ids[0] != t.ids[1], "the two blocks differ");

    is_int(pl_bm_slot(&bm, &t, 0), t.ids[0] * 4, "slot of position 0");
    is_int(pl_bm_slot(&bm, &t, 3), t.ids[0] * 4 + 3, "slot of position 3");
    is_int(pl_bm_slot(&bm, &t, 4), t.ids[1] * 4, "slot of position 4");

    pl_bm_free_table(&bm, &t);
    is_int(t.n, 0, "a freed table is empty");
    is_int(pl_bm_num_free(&bm), 8, "freeing returns every block");
    is_int(pl_bm_refcount(&bm, 0), 0, "a free block has ref 0");

    pl_block_table_release(&t);
    pl_bm_destroy(&bm);
}


static void
test_exhaustion(void)
{
    pl_block_manager_t  bm;
    pl_block_table_t    a = { 0 }, b = { 0 };

    pl_bm_init(&bm, 4, 16);

    ok(pl_bm_can_allocate(&bm, 64), "64 tokens fit an empty pool of 64");
    ok(!pl_bm_can_allocate(&bm, 65), "65 tokens do not");

    is_int(pl_bm_ensure(&bm, &a, 40), 0, "a takes 3 blocks");
    ok(pl_bm_can_append(&bm, &a, 48), "a can grow within its last block");
    ok(pl_bm_can_append(&bm, &a, 64), "a can grow into the last free block");
    ok(!pl_bm_can_append(&bm, &a, 65), "a cannot grow past the pool");
    ok(!pl_bm_can_allocate(&bm, 17), "17 new tokens need 2 blocks: refused");
    is_int(pl_bm_capacity(&bm, &a), 64, "a could hold 64 tokens");

    is_int(pl_bm_ensure(&bm, &b, 17), -1, "b cannot get 2 blocks");
    is_int(b.n, 0, "a refused growth leaves the table unchanged");
    is_int(pl_bm_num_free(&bm), 1, "and takes no block");
    is_int(pl_bm_ensure(&bm, &b, 16), 0, "b gets the last block");
    is_int(pl_bm_ensure(&bm, &a, 49), -1, "the pool is exhausted");

    pl_bm_free_table(&bm, &a);
    is_int(pl_bm_num_free(&bm), 3, "freeing a returns its 3 blocks");
    pl_bm_free_table(&bm, &b);
    is_int(pl_bm_num_free(&bm), 4, "no block leaked");

    pl_block_table_release(&a);
    pl_block_table_release(&b);
    pl_bm_destroy(&bm);
}


static void
test_lru_reuse(void)
{
    pl_block_manager_t  bm;
    pl_block_table_t    a = { 0 }, b = { 0 }, c = { 0 };
    int32_t             a0, b0;

    /* blocks of 64 tokens: runs of one block (PL_BM_RUN_TOKENS) */
    pl_bm_init(&bm, 3, 64);
    pl_bm_ensure(&bm, &a, 1);
    pl_bm_ensure(&bm, &b, 1);
    a0 = a.ids[0];
    b0 = b.ids[0];
    pl_bm_free_table(&bm, &a);
    pl_bm_free_table(&bm, &b);

    pl_bm_ensure(&bm, &c, 3 * 64);
    is_int(c.ids[0], 2, "the never-used block is handed out first");
    is_int(c.ids[1], a0, "then the block freed longest ago");
    is_int(c.ids[2], b0, "and the most recently freed block last");
    is_int(pl_bm_num_free(&bm), 0, "all three in use");

    pl_bm_free_table(&bm, &c);
    pl_block_table_release(&a);
    pl_block_table_release(&b);
    pl_block_table_release(&c);
    pl_bm_destroy(&bm);
}


/* the blocks of t in runs of 4 consecutive blocks, each run aligned */
static int
in_runs(const pl_block_table_t *t)
{
    int  i;

    for (i = 0; i < t->n; i++) {
        if (t->ids[i] != (i % 4 == 0 ? t->ids[i] - t->ids[i] % 4
                                     : t->ids[i - 1] + 1))
        {
            return 0;
        }
    }

    return 1;
}


/*
 * Growing tables take their blocks in runs (blocks of 16 tokens: runs of
 * 4, one 64-token tile of the decode kernel): three tables growing a
 * block at a time in turn, as decoding sequences do, each get aligned
 * runs of consecutive blocks; a table that was freed gives its runs back
 * whole; when only the reserved rest of another table's run is left, a
 * table still gets it (the reservation is a preference, never a loss of
 * capacity); a run start passes a head whose run is not all free for a
 * whole free run further down the free list.
 */
static void
test_runs(void)
{
    pl_block_manager_t  bm;
    pl_block_table_t    t[3] = { { 0 }, { 0 }, { 0 } }, u = { 0 };
    int                 i, k, all = 1;

    pl_bm_init(&bm, 40, 16);

    for (i = 1; i <= 8; i++) {
        for (k = 0; k < 3; k++) {
            pl_bm_ensure(&bm, &t[k], i * 16);
        }
    }
    for (k = 0; k < 3; k++) {
        all = all && t[k].n == 8 && in_runs(&t[k]);
    }
    ok(all, "three tables growing in turn: each in aligned runs of 4");

    pl_bm_free_table(&bm, &t[1]);
    is_int(pl_bm_ensure(&bm, &u, 8 * 16), 0, "a new table of 8 blocks");
    ok(in_runs(&u), "gets whole runs back");

    /* 40 blocks: t[0] and t[2] hold 16, u 8; t[0] takes one more run
       start and reserves the 3 after it */
    pl_bm_ensure(&bm, &t[0], 9 * 16);
    is_int(pl_bm_num_free(&bm), 15, "15 blocks free");
    is_int(pl_bm_ensure(&bm, &t[2], 23 * 16), 0,
           "another table takes them all, the reserved 3 included");
    is_int(pl_bm_num_free(&bm), 0, "none left");
    is_int(pl_bm_ensure(&bm, &t[0], 10 * 16), -1,
           "so the first can grow no more");

    for (k = 0; k < 3; k++) {
        pl_bm_free_table(&bm, &t[k]);
        pl_block_table_release(&t[k]);
    }
    pl_bm_free_table(&bm, &u);
    pl_block_table_release(&u);
    is_int(pl_bm_num_free(&bm), 40, "all blocks free again");
    pl_bm_destroy(&bm);

    /* 12 blocks: three tables take a block each (0, 4, 8; the rest of
       each run to the tail: 1 2 3 5 6 7 9 10 11), the second is freed
       (4 after them); a new table's run start passes the head (1, whose
       run holds 0) for the first whole free run: 4 to 7 */
    pl_bm_init(&bm, 12, 16);
    for (k = 0; k < 3; k++) {
        pl_bm_ensure(&bm, &t[k], 1);
    }
    pl_bm_free_table(&bm, &t[1]);
    pl_bm_ensure(&bm, &u, 1);
    is_int(u.ids[0], 4, "a run start looks past the head for a whole run");
    pl_bm_ensure(&bm, &u, 4 * 16);
    ok(in_runs(&u), "and grows through it");
    for (k = 0; k < 3; k++) {
        pl_bm_free_table(&bm, &t[k]);
        pl_block_table_release(&t[k]);
    }
    pl_bm_free_table(&bm, &u);
    pl_block_table_release(&u);
    pl_bm_destroy(&bm);
}


static void
test_fork_and_cow(void)
{
    pl_block_manager_t     bm;
    pl_block_table_t       p = { 0 }, c = { 0 };
    const pl_block_move_t *mv;
    int32_t                p1;
    int                    n;

    pl_bm_init(&bm, 8, 4);
    pl_bm_ensure(&bm, &p, 6);
    p1 = p.ids[1];

    is_int(pl_bm_fork(&bm, &p, &c), 0, "fork");
    ok(c.n == 2 && c.ids[0] == p.ids[0] && c.ids[1] == p1,
       "the child lists the parent's blocks");
    is_int(pl_bm_refcount(&bm, p1), 2, "each shared block has ref 2");
    is_int(pl_bm_num_used(&bm), 2, "forking takes no block");

    is_int(pl_bm_write_cost(&bm, &c, 6, 7), 1,
           "writing the shared last block costs one copy");
    is_int(pl_bm_prepare_write(&bm, &c, 6, 7), 0, "the child appends");
    mv = pl_bm_moves(&bm, &n);
    ok(n == 1 && mv[0].kind == PL_MOVE_COPY && mv[0].src == p1
       && mv[0].dst == c.ids[1], "one copy is logged: old block -> new");
    ok(c.ids[1] != p1 && p.ids[1] == p1, "the child got a private copy");
    is_int(pl_bm_refcount(&bm, p1), 1, "the parent owns its block alone");
    is_int(pl_bm_refcount(&bm, c.ids[0]), 2, "the full block stays shared");
    pl_bm_clear_moves(&bm);

    is_int(pl_bm_prepare_write(&bm, &p, 6, 9), 0, "the parent appends 3");
    pl_bm_moves(&bm, &n);
    is_int(n, 0, "without a copy: its block is no longer shared");
    is_int(p.n, 3, "and grows a block");
    is_int(bm.counters.cow_copies, 1, "one copy-on-write counted");

    pl_bm_free_table(&bm, &p);
    pl_bm_free_table(&bm, &c);
    is_int(pl_bm_num_free(&bm), 8, "no block leaked");
    pl_block_table_release(&p);
    pl_block_table_release(&c);
    pl_bm_destroy(&bm);
}


/* Admit tokens into t and compute them all (register the full blocks). */
static int
admit_all(pl_block_manager_t *bm, pl_block_table_t *t, const int32_t *tok,
    int n)
{
    int  reused = pl_bm_admit(bm, t, tok, n, n, 1);

    if (reused >= 0) {
        pl_bm_register(bm, t, tok, n);
    }

    return reused;
}


static void
test_prefix_cache(void)
{
    pl_block_manager_t  bm;
    pl_block_table_t    a = { 0 }, b = { 0 }, c = { 0 }, d = { 0 };
    pl_block_table_t    e = { 0 }, f = { 0 };
    int32_t             ta[10] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 };
    int32_t             tb[12] = { 1, 2, 3, 4, 5, 6, 7, 8, 50, 51, 52, 53 };
    int32_t             td[10] = { 9, 2, 3, 4, 5, 6, 7, 8, 9, 10 };
    int32_t             a0, a1;

    pl_bm_init(&bm, 8, 4);
    is_int(pl_bm_enable_caching(&bm), 0, "caching on");

    is_int(admit_all(&bm, &a, ta, 10), 0, "a cold request reuses nothing");
    is_int(pl_bm_num_cached(&bm), 2, "its two full blocks are cached");
    a0 = a.ids[0];
    a1 = a.ids[1];

    is_int(admit_all(&bm, &b, tb, 12), 8, "same 8-token prefix: 8 reused");
    ok(b.ids[0] == a0 && b.ids[1] == a1, "b shares a's blocks");
    is_int(pl_bm_refcount(&bm, a1), 2, "shared blocks have ref 2");
    is_int(b.n, 3, "b got one new block for its tail");

    is_int(admit_all(&bm, &c, ta, 8), 4, "an 8-token prompt that is all "
           "cached reuses only the block before its last token");

    is_int(admit_all(&bm, &d, td, 10), 0, "a different first block misses "
           "even where the second block's tokens match");

    pl_bm_free_table(&bm, &a);
    pl_bm_free_table(&bm, &b);
    pl_bm_free_table(&bm, &c);
    is_int(pl_bm_refcount(&bm, a0), 0, "freed cached blocks are unreferenced");
    is_int(pl_bm_num_cached(&bm), 6, "but stay cached (c's recomputed "
           "block is cached beside a's)");
    is_int(pl_bm_num_free(&bm), 5, "and count as available");

    is_int(admit_all(&bm, &e, tb, 12), 8, "a later request hits the freed "
           "cached blocks");
    ok(e.ids[0] == a0 && pl_bm_refcount(&bm, a0) == 1, "and revives them");
    ok(bm.counters.prefix_hits == 5 && bm.counters.prefix_queries == 9,
       "queries and hits counted in blocks (%llu of %llu)",
       (unsigned long long) bm.counters.prefix_hits,
       (unsigned long long) bm.counters.prefix_queries);

    pl_bm_free_table(&bm, &e);
    pl_bm_free_table(&bm, &d);
    is_int(pl_bm_ensure(&bm, &f, 32), 0, "a request that needs every block");
    is_int(pl_bm_num_cached(&bm), 0, "evicts every cached block");
    is_int(bm.counters.evictions, 7, "7 evictions counted (e cached its tail)");
    pl_bm_free_table(&bm, &f);
    is_int(admit_all(&bm, &a, ta, 10), 0, "evicted prefixes miss");

    pl_bm_free_table(&bm, &a);
    is_int(pl_bm_num_free(&bm), 8, "no block leaked");
    pl_block_table_release(&a);
    pl_block_table_release(&b);
    pl_block_table_release(&c);
    pl_block_table_release(&d);
    pl_block_table_release(&e);
    pl_block_table_release(&f);
    pl_bm_destroy(&bm);
}


static void
test_prefix_verification_and_lru(void)
{
    pl_block_manager_t  bm;
    pl_block_table_t    a = { 0 }, b = { 0 }, c = { 0 }, g = { 0 };
    int32_t             ta[5] = { 1, 2, 3, 4, 5 }, tb[5] = { 6, 7, 8, 9, 5 };
    int32_t             a0, b0;

    pl_bm_init(&bm, 4, 4);
    pl_bm_enable_caching(&bm);

    admit_all(&bm, &a, ta, 5);
    a0 = a.ids[0];
    bm.tokens[a0 * 4 + 2] = 99;
    pl_bm_free_table(&bm, &a);
    is_int(admit_all(&bm, &c, ta, 5), 0, "a block whose hash matches but "
           "whose tokens differ is not reused");
    pl_bm_free_table(&bm, &c);
    pl_bm_destroy(&bm);

    pl_bm_init(&bm, 4, 4);
    pl_bm_enable_caching(&bm);
    admit_all(&bm, &a, ta, 5);
    admit_all(&bm, &b, tb, 5);
    a0 = a.ids[0];
    b0 = b.ids[0];
    pl_bm_free_table(&bm, &a);      /* a's blocks freed first: older */
    pl_bm_free_table(&bm, &b);
    is_int(pl_bm_ensure(&bm, &g, 12), 0, "three blocks wanted, two free");
    ok(pl_bm_refcount(&bm, a0) == 1 && pl_bm_refcount(&bm, b0) == 0,
       "the least recently used cached block is evicted, not the newer");
    pl_bm_free_table(&bm, &g);
    is_int(admit_all(&bm, &c, tb, 5), 4, "the newer prefix still hits");
    is_int(admit_all(&bm, &a, ta, 5), 0, "the evicted one misses");

    pl_bm_free_table(&bm, &a);
    pl_bm_free_table(&bm, &c);
    is_int(pl_bm_num_free(&bm), 4, "no block leaked");
    pl_block_table_release(&a);
    pl_block_table_release(&b);
    pl_block_table_release(&c);
    pl_block_table_release(&g);
    pl_bm_destroy(&bm);
}


static void
test_contiguous(void)
{
    pl_block_manager_t  bm;
    pl_block_table_t    t[4] = { { 0 } }, big = { 0 };
    int                 i;

    pl_bm_init(&bm, 8, 2);
    for (i = 0; i < 4; i++) {
        pl_bm_reserve_contiguous(&bm, &t[i], 4);
    }
    ok(t[1].ids[0] == 2 && t[1].ids[1] == 3, "reservations are consecutive "
       "blocks, first fit");
    pl_bm_free_table(&bm, &t[0]);
    pl_bm_free_table(&bm, &t[2]);
    is_int(pl_bm_num_free(&bm), 4, "4 blocks free in two holes");
    is_int(pl_bm_reserve_contiguous(&bm, &big, 6), -1,
           "3 consecutive blocks cannot be found: external fragmentation");
    is_int(pl_bm_reserve_contiguous(&bm, &big, 4), 0, "2 can");
    ok(big.ids[0] == 0 && big.ids[1] == 1, "in the first hole");

    pl_bm_free_table(&bm, &big);
    for (i = 0; i < 4; i++) {
        pl_bm_free_table(&bm, &t[i]);
        pl_block_table_release(&t[i]);
    }
    is_int(pl_bm_num_free(&bm), 8, "no block leaked");
    pl_block_table_release(&big);
    pl_bm_destroy(&bm);
}


static void
test_swap(void)
{
    pl_block_manager_t     bm;
    pl_block_table_t       p = { 0 }, c = { 0 }, x = { 0 };
    pl_block_table_t      *group[2] = { &p, &c };
    const pl_block_move_t *mv;
    int                    n, i, outs = 0;

    pl_bm_init(&bm, 6, 4);
    is_int(pl_bm_init_host(&bm, 3), 0, "a host pool of 3 blocks");
    pl_bm_ensure(&bm, &p, 8);
    pl_bm_fork(&bm, &p, &c);
    pl_bm_prepare_write(&bm, &c, 8, 9);     /* c: 2 shared + 1 own */
    pl_bm_clear_moves(&bm);

    ok(pl_bm_can_swap_out(&bm, group, 2), "3 distinct blocks fit the host");
    is_int(pl_bm_swap_out(&bm, group, 2), 0, "swap the group out");
    mv = pl_bm_moves(&bm, &n);
    for (i = 0; i < n; i++) {
        outs += mv[i].kind == PL_MOVE_SWAP_OUT;
    }
    ok(n == 3 && outs == 3, "each distinct block moves once (%d moves)", n);
    ok(p.on_host && c.on_host && p.ids[0] == c.ids[0],
       "both tables now name host blocks, still shared");
    is_int(pl_bm_num_free(&bm), 6, "the device blocks are free");
    is_int(pl_bm_num_host_used(&bm), 3, "3 host blocks used");
    is_int(bm.host_refcount[p.ids[0]], 2, "a shared host block has ref 2");
    pl_bm_clear_moves(&bm);

    pl_bm_ensure(&bm, &x, 16);
    ok(!pl_bm_can_swap_in(&bm, group, 2), "no room to swap in while the "
       "device is busy");
    is_int(pl_bm_swap_in(&bm, group, 2), -1, "a refused swap-in");
    ok(p.on_host, "changes nothing");
    pl_bm_free_table(&bm, &x);

    is_int(pl_bm_swap_in(&bm, group, 2), 0, "swap the group back in");
    mv = pl_bm_moves(&bm, &n);
    ok(n == 3 && mv[0].kind == PL_MOVE_SWAP_IN, "3 blocks move back");
    ok(!p.on_host && p.ids[0] == c.ids[0] && p.ids[1] == c.ids[1]
       && p.ids[1] != c.ids[2], "sharing is preserved on the device");
    is_int(pl_bm_refcount(&bm, p.ids[0]), 2, "with ref 2");
    is_int(pl_bm_num_host_used(&bm), 0, "the host pool is empty again");
    ok(bm.counters.swapped_out == 3 && bm.counters.swapped_in == 3,
       "swapped blocks counted");

    pl_bm_free_table(&bm, &p);
    pl_bm_free_table(&bm, &c);
    is_int(pl_bm_num_free(&bm), 6, "no block leaked");
    pl_block_table_release(&p);
    pl_block_table_release(&c);
    pl_block_table_release(&x);
    pl_bm_destroy(&bm);
}


/* ---- the randomized property test ---- */

#define P_BLOCKS   48
#define P_HOST     24
#define P_BS       4
#define P_SEQS     12
#define P_MAXLEN   96
#define P_OPS      40000

typedef struct {
    int               live;
    int32_t           tok[P_MAXLEN];
    uint64_t          fp[P_MAXLEN];     /* fingerprint of tok[0..i] */
    int               n;                /* tokens */
    int               computed;         /* with KV in the cache */
    pl_block_table_t  t;
} pseq_t;

static pseq_t    ps[P_SEQS];
static uint64_t  kv[P_BLOCKS * P_BS];   /* shadow device cache */
static uint64_t  hkv[P_HOST * P_BS];    /* shadow host cache */
static unsigned  rng = 2024;


static unsigned
rnd(unsigned n)
{
    rng = rng * 1103515245u + 12345u;
    return (rng >> 8) % n;
}


static void
set_token(pseq_t *s, int i, int32_t t)
{
    uint64_t  h = i ? s->fp[i - 1] : 0x1234;

    s->tok[i] = t;
    s->fp[i] = (h ^ (uint64_t) (t + 1)) * 0x9e3779b97f4a7c15ull
               + (uint64_t) i;
}


/* Run the logged moves on the shadow caches, as the runner would. */
static void
replay_moves(pl_block_manager_t *bm)
{
    const pl_block_move_t *mv;
    int                    n, i, k;

    mv = pl_bm_moves(bm, &n);
    for (i = 0; i < n; i++) {
        for (k = 0; k < P_BS; k++) {
            int  s = mv[i].src * P_BS + k, d = mv[i].dst * P_BS + k;

            if (mv[i].kind == PL_MOVE_COPY) {
                kv[d] = kv[s];
            } else if (mv[i].kind == PL_MOVE_SWAP_OUT) {
                hkv[d] = kv[s];
            } else {
                kv[d] = hkv[s];
            }
        }
    }
    pl_bm_clear_moves(bm);
}


/* Does any table other than self list device block b? */
static int
readable_by_other(int self, int32_t b)
{
    int  j, i;

    for (j = 0; j < P_SEQS; j++) {
        if (j == self || !ps[j].live || ps[j].t.on_host) {
            continue;
        }
        for (i = 0; i < ps[j].t.n; i++) {
            if (ps[j].t.ids[i] == b) {
                return 1;
            }
        }
    }

    return 0;
}


/* Compute k more tokens of s (appending new ones when its prompt is
   done); 1 if a write hit a block another table could read. */
static int
op_compute(pl_block_manager_t *bm, int i)
{
    pseq_t  *s = &ps[i];
    int      k = 1 + (int) rnd(6), p, bad = 0;
    int32_t  b;

    if (s->computed + k > P_MAXLEN) {
        return 0;
    }
    while (s->n < s->computed + k) {
        set_token(s, s->n, (int32_t) rnd(3));
        s->n++;
    }
    if (pl_bm_prepare_write(bm, &s->t, s->computed, s->computed + k) != 0) {
        return 0;
    }
    replay_moves(bm);

    for (p = s->computed; p < s->computed + k; p++) {
        b = s->t.ids[p / P_BS];
        bad |= pl_bm_refcount(bm, b) != 1 || bm->cached[b]
               || readable_by_other(i, b);
        kv[pl_bm_slot(bm, &s->t, p)] = s->fp[p];
    }
    s->computed += k;
    pl_bm_register(bm, &s->t, s->tok, s->computed);

    return bad;
}


static pseq_t *
free_slot(void)
{
    int  i = (int) rnd(P_SEQS);

    return ps[i].live ? NULL : &ps[i];
}


/* A new sequence: often a prefix of a live or earlier one (to hit). */
static int
op_admit(pl_block_manager_t *bm)
{
    pseq_t  *s = free_slot(), *src = &ps[rnd(P_SEQS)];
    int      n = 1 + (int) rnd(40), i, copy, reused, bad = 0;

    if (s == NULL) {
        return 0;
    }
    copy = rnd(3) ? (int) rnd((unsigned) src->n + 1) : 0;
    for (i = 0; i < n; i++) {
        set_token(s, i, i < copy ? src->tok[i] : (int32_t) rnd(3));
    }
    s->n = n;
    reused = pl_bm_admit(bm, &s->t, s->tok, n, 1 + (int) rnd(8), 1);
    if (reused < 0) {
        return 0;
    }
    bad |= reused % P_BS != 0 || reused >= n;
    for (i = 0; i < reused; i++) {
        bad |= kv[pl_bm_slot(bm, &s->t, i)] != s->fp[i];
    }
    s->live = 1;
    s->computed = reused;

    return bad;
}


static void
op_fork(pl_block_manager_t *bm, int i)
{
    pseq_t  *c = free_slot();

    if (c == NULL || c == &ps[i] || pl_bm_fork(bm, &ps[i].t, &c->t) != 0) {
        return;
    }
    memcpy(c->tok, ps[i].tok, sizeof(c->tok));
    memcpy(c->fp, ps[i].fp, sizeof(c->fp));
    c->n = ps[i].n;
    c->computed = ps[i].computed;
    c->live = 1;
}


static void
op_swap(pl_block_manager_t *bm, int i)
{
    pl_block_table_t  *g[2] = { &ps[i].t, NULL };
    int                j = (int) rnd(P_SEQS), n = 1;

    if (j != i && ps[j].live && ps[j].t.on_host == ps[i].t.on_host) {
        g[n++] = &ps[j].t;
    }
    if (ps[i].t.on_host) {
        pl_bm_swap_in(bm, g, n);
    } else {
        pl_bm_swap_out(bm, g, n);
    }
    replay_moves(bm);
}


static void
op_free(pl_block_manager_t *bm, int i)
{
    pl_bm_free_table(bm, &ps[i].t);
    ps[i].live = 0;
    ps[i].n = ps[i].computed = 0;
}


/* Walk one list: its blocks are unreferenced and cached as it says. */
static int
check_list(const pl_block_manager_t *bm, const pl_block_list_t *l,
    int cached, uint8_t *seen)
{
    int      n = 0, bad = 0;
    int32_t  b, prev = -1;

    for (b = l->head; b != -1 && n <= P_BLOCKS; b = bm->next[b], n++) {
        bad |= bm->refcount[b] != 0 || bm->cached[b] != cached
               || seen[b] || bm->prev[b] != prev;
        seen[b] = 1;
        prev = b;
    }

    return bad || n != l->n || l->tail != prev;
}


static int
check_cache(const pl_block_manager_t *bm)
{
    int      b, n = 0, bad = 0;
    int32_t  c;

    for (b = 0; b < P_BLOCKS; b++) {
        if (!bm->cached[b]) {
            continue;
        }
        n++;
        c = bm->bucket[bm->hash[b] & (bm->n_buckets - 1)];
        while (c != -1 && c != b) {
            c = bm->chain[c];
        }
        bad |= c != b;
    }

    return bad || n != bm->num_cached;
}


/* Every invariant; a bit per kind of failure. */
static int
check_all(const pl_block_manager_t *bm)
{
    int      refs[P_BLOCKS] = { 0 }, hrefs[P_HOST] = { 0 };
    uint8_t  seen[P_BLOCKS] = { 0 }, hfree[P_HOST] = { 0 };
    int      i, j, b, bad = 0;

    for (i = 0; i < P_SEQS; i++) {
        if (!ps[i].live) {
            continue;
        }
        for (j = 0; j < ps[i].t.n; j++) {
            (ps[i].t.on_host ? hrefs : refs)[ps[i].t.ids[j]]++;
        }
        bad |= (ps[i].t.n < pl_bm_blocks_for(bm, ps[i].computed)) << 5;
        for (j = 0; j < ps[i].computed; j++) {
            b = ps[i].t.ids[j / P_BS] * P_BS + j % P_BS;
            bad |= ((ps[i].t.on_host ? hkv : kv)[b] != ps[i].fp[j]) << 1;
        }
    }

    for (b = 0; b < P_BLOCKS; b++) {
        bad |= (refs[b] != bm->refcount[b]) << 2;
    }
    bad |= check_list(bm, &bm->free, 0, seen) << 3;
    bad |= check_list(bm, &bm->evictable, 1, seen) << 3;
    for (b = 0; b < P_BLOCKS; b++) {
        bad |= ((bm->refcount[b] == 0) != seen[b]) << 3;
    }
    bad |= check_cache(bm) << 4;

    for (i = 0; i < bm->num_host_free; i++) {
        hfree[bm->host_free[i]]++;
    }
    for (b = 0; b < P_HOST; b++) {
        bad |= (hrefs[b] != bm->host_refcount[b]
                || (hrefs[b] == 0) != (hfree[b] == 1)) << 6;
    }

    return bad;
}


/* check_all after operation op; the first failure's op into *first. */
static int
check_op(const pl_block_manager_t *bm, int op, int *first)
{
    int  r = check_all(bm);

    if (r && *first < 0) {
        *first = op;
        diag("invariant bits 0x%x broken at op %d", r, op);
    }

    return r;
}


static void
test_property(void)
{
    pl_block_manager_t  bm;
    int                 op, i, r, bad = 0, bad_write = 0, bad_hit = 0;
    int                 first_bad = -1;

    pl_bm_init(&bm, P_BLOCKS, P_BS);
    pl_bm_enable_caching(&bm);
    pl_bm_init_host(&bm, P_HOST);

    for (op = 0; op < P_OPS; op++) {
        i = (int) rnd(P_SEQS);
        r = (int) rnd(100);

        if (r < 20) {
            bad_hit |= op_admit(&bm);
        } else if (!ps[i].live) {
            continue;
        } else if (r < 60 && !ps[i].t.on_host) {
            bad_write |= op_compute(&bm, i);
        } else if (r < 68) {
            op_fork(&bm, i);
        } else if (r < 80) {
            op_swap(&bm, i);
        } else if (r < 90) {
            op_free(&bm, i);
        }

        bad |= check_op(&bm, op, &first_bad);
    }

    is_int(bad, 0, "%d random admit/compute/fork/swap/free operations: "
           "refcounts equal table entries, lists exact, no block free and "
           "referenced, cache consistent, every computed token's KV intact "
           "(first failure at %d)", P_OPS, first_bad);
    is_int(bad_write, 0, "copy-on-write: no sequence ever wrote a block "
           "another table lists or the cache holds");
    is_int(bad_hit, 0, "every prefix hit's KV is the request's own tokens'");
    ok(bm.counters.prefix_hits > 100 && bm.counters.evictions > 100
       && bm.counters.cow_copies > 100 && bm.counters.swapped_in > 100,
       "the run exercised hits (%llu), evictions (%llu), copies (%llu) and "
       "swaps (%llu)", (unsigned long long) bm.counters.prefix_hits,
       (unsigned long long) bm.counters.evictions,
       (unsigned long long) bm.counters.cow_copies,
       (unsigned long long) bm.counters.swapped_in);

    for (i = 0; i < P_SEQS; i++) {
        if (ps[i].live) {
            op_free(&bm, i);
        }
        pl_block_table_release(&ps[i].t);
    }
    is_int(pl_bm_num_free(&bm), P_BLOCKS, "every device block comes back");
    is_int(pl_bm_num_host_used(&bm), 0, "every host block comes back");
    is_int(check_all(&bm), 0, "and the lists are consistent when empty");

    pl_bm_destroy(&bm);
}


/* ---- randomized beam-search groups ---- */

#define B_GROUPS   3
#define B_WIDTH    4
#define B_OPS      20000

typedef enum { BG_NONE = 0, BG_DEVICE, BG_HOST, BG_RECOMPUTE } bg_state_t;

typedef struct {
    bg_state_t  state;
    int         n;                  /* beams */
    int         beam[B_WIDTH];      /* their ps[] slots */
} bgroup_t;

static bgroup_t  bg[B_GROUPS];


/* A slot no sequence holds, or -1. */
static int
beam_slot(void)
{
    int  i;

    for (i = 0; i < P_SEQS; i++) {
        if (!ps[i].live) {
            return i;
        }
    }

    return -1;
}


/* Compute every token of beam slot i not computed yet; 1 if a write hit
   a block another table could read, -1 when blocks are short. */
static int
beam_compute(pl_block_manager_t *bm, int i)
{
    pseq_t  *s = &ps[i];
    int      p, bad = 0;
    int32_t  b;

    if (pl_bm_prepare_write(bm, &s->t, s->computed, s->n) != 0) {
        return -1;
    }
    replay_moves(bm);

    for (p = s->computed; p < s->n; p++) {
        b = s->t.ids[p / P_BS];
        bad |= pl_bm_refcount(bm, b) != 1 || bm->cached[b]
               || readable_by_other(i, b);
        kv[pl_bm_slot(bm, &s->t, p)] = s->fp[p];
    }
    s->computed = s->n;
    pl_bm_register(bm, &s->t, s->tok, s->computed);

    return bad;
}


/* The request ends or is aborted: every beam's table released. */
static void
beam_end(pl_block_manager_t *bm, bgroup_t *g)
{
    int  j;

    for (j = 0; j < g->n; j++) {
        op_free(bm, g->beam[j]);
    }
    g->n = 0;
    g->state = BG_NONE;
}


/* Preempt g whole: swap out, or (host pool short, or by lot) recompute. */
static void
beam_preempt(pl_block_manager_t *bm, bgroup_t *g)
{
    pl_block_table_t  *t[B_WIDTH];
    int                j;

    for (j = 0; j < g->n; j++) {
        t[j] = &ps[g->beam[j]].t;
    }
    if (rnd(2) && pl_bm_swap_out(bm, t, g->n) == 0) {
        replay_moves(bm);
        g->state = BG_HOST;
        return;
    }
    for (j = 0; j < g->n; j++) {
        pl_bm_free_table(bm, t[j]);
        ps[g->beam[j]].computed = 0;
    }
    g->state = BG_RECOMPUTE;
}


/* A new request: one beam, its prompt admitted and computed. */
static int
beam_start(pl_block_manager_t *bm, bgroup_t *g)
{
    int      i = beam_slot(), n = 1 + (int) rnd(20), j, reused, bad;
    pseq_t  *s;

    if (i < 0) {
        return 0;
    }
    s = &ps[i];
    for (j = 0; j < n; j++) {
        set_token(s, j, (int32_t) rnd(3));
    }
    s->n = n;
    reused = pl_bm_admit(bm, &s->t, s->tok, n, 1, 1);
    if (reused < 0) {
        return 0;
    }
    s->live = 1;
    s->computed = reused;
    g->n = 1;
    g->beam[0] = i;
    g->state = BG_DEVICE;

    bad = beam_compute(bm, i);
    if (bad < 0) {
        beam_preempt(bm, g);
        return 0;
    }

    return bad;
}


/* Swap g back in, or admit and recompute every beam. */
static int
beam_resume(pl_block_manager_t *bm, bgroup_t *g)
{
    pl_block_table_t  *t[B_WIDTH];
    int                j, bad = 0, r;
    pseq_t            *s;

    if (g->state == BG_HOST) {
        for (j = 0; j < g->n; j++) {
            t[j] = &ps[g->beam[j]].t;
        }
        if (pl_bm_swap_in(bm, t, g->n) == 0) {
            replay_moves(bm);
            g->state = BG_DEVICE;
        }
        return 0;
    }

    for (j = 0; j < g->n; j++) {
        s = &ps[g->beam[j]];
        if (s->t.n == 0) {
            r = pl_bm_admit(bm, &s->t, s->tok, s->n, 1, 1);
            if (r < 0) {
                beam_preempt(bm, g);
                return bad;
            }
            s->computed = r;
        }
        r = beam_compute(bm, g->beam[j]);
        if (r < 0) {
            beam_preempt(bm, g);
            return bad;
        }
        bad |= r;
    }
    g->state = BG_DEVICE;

    return bad;
}


/* x (a free slot, or a pruned beam's) becomes a fork of beam p. */
static int
beam_fork(pl_block_manager_t *bm, int x, int p)
{
    if (pl_bm_fork(bm, &ps[p].t, &ps[x].t) != 0) {
        return -1;
    }
    memcpy(ps[x].tok, ps[p].tok, sizeof(ps[x].tok));
    memcpy(ps[x].fp, ps[p].fp, sizeof(ps[x].fp));
    ps[x].n = ps[p].n;
    ps[x].computed = ps[p].computed;
    ps[x].live = 1;

    return 0;
}


/*
 * One beam-search step of g, as engine_beam.c takes it: the next beams'
 * parents drawn from a few of the live beams, the pruned ones' tables
 * released at once, the first child of a parent keeps its sequence,
 * every further one forks the parent's table into a pruned beam's slot
 * (or a new one); then each appends a token and computes it (a shared
 * last block copied on write).  Blocks short: the group is preempted.
 */
static int
beam_step(pl_block_manager_t *bm, bgroup_t *g)
{
    int  parent[B_WIDTH], kids[B_WIDTH] = { 0 }, kept[B_WIDTH] = { 0 };
    int  pruned[B_WIDTH], to[B_WIDTH], width = 2 + (int) rnd(3);
    int  n_pruned = 0, j, x, r, bad = 0, n_next;

    n_next = g->n > width ? g->n : width;
    for (j = 0; j < n_next; j++) {
        parent[j] = (int) rnd((unsigned) (g->n < 2 ? g->n : 2));
        kids[parent[j]]++;
    }
    if (ps[g->beam[0]].n >= P_MAXLEN - 1) {
        beam_end(bm, g);
        return 0;
    }

    for (j = 0; j < g->n; j++) {
        if (kids[j] == 0) {
            pl_bm_free_table(bm, &ps[g->beam[j]].t);
            pruned[n_pruned++] = g->beam[j];
        }
    }

    for (j = 0; j < n_next; j++) {
        if (!kept[parent[j]]) {
            kept[parent[j]] = 1;
            to[j] = g->beam[parent[j]];
            continue;
        }
        x = n_pruned > 0 ? pruned[--n_pruned] : beam_slot();
        if (x < 0 || beam_fork(bm, x, g->beam[parent[j]]) != 0) {
            return -1;
        }
        to[j] = x;
    }
    for (j = 0; j < n_pruned; j++) {
        op_free(bm, pruned[j]);
    }

    for (j = 0; j < n_next; j++) {
        set_token(&ps[to[j]], ps[to[j]].n, (int32_t) rnd(3));
        ps[to[j]].n++;
        g->beam[j] = to[j];
    }
    g->n = n_next;

    for (j = 0; j < n_next; j++) {
        r = beam_compute(bm, to[j]);
        if (r < 0) {
            beam_preempt(bm, g);
            return bad;
        }
        bad |= r;
    }

    return bad;
}


static void
test_beam_groups(void)
{
    pl_block_manager_t  bm;
    bgroup_t           *g;
    int                 op, r, i, bad = 0, bad_write = 0, first_bad = -1;
    int                 steps = 0, preempted = 0, ended = 0;

    memset(ps, 0, sizeof(ps));
    memset(bg, 0, sizeof(bg));
    pl_bm_init(&bm, P_BLOCKS, P_BS);
    pl_bm_enable_caching(&bm);
    pl_bm_init_host(&bm, P_HOST);

    for (op = 0; op < B_OPS; op++) {
        g = &bg[rnd(B_GROUPS)];
        r = (int) rnd(100);

        if (g->state == BG_NONE) {
            r = beam_start(&bm, g);
        } else if (g->state != BG_DEVICE) {
            r = beam_resume(&bm, g);
        } else if (r < 80) {
            r = beam_step(&bm, g);
            steps++;
        } else if (r < 90) {
            beam_preempt(&bm, g);
            preempted++;
            r = 0;
        } else {
            beam_end(&bm, g);
            ended++;
            r = 0;
        }
        if (r < 0) {
            bad |= 1 << 7;
            diag("out of memory or slots at op %d", op);
            break;
        }
        bad_write |= r;

        bad |= check_op(&bm, op, &first_bad);
    }

    is_int(bad, 0, "%d random beam-group operations (%d steps, %d "
           "preemptions, %d ends): refcounts equal the tables holding each "
           "block, every free block in exactly one list, every beam's KV "
           "intact (first failure at %d)", B_OPS, steps, preempted, ended,
           first_bad);
    is_int(bad_write, 0, "no beam ever wrote a block another table lists: "
           "shared last blocks were copied first");
    ok(bm.counters.cow_copies > 100 && bm.counters.swapped_out > 100,
       "the run copied last blocks on write (%llu) and swapped groups "
       "(%llu blocks)", (unsigned long long) bm.counters.cow_copies,
       (unsigned long long) bm.counters.swapped_out);

    for (i = 0; i < B_GROUPS; i++) {
        beam_end(&bm, &bg[i]);
    }
    for (i = 0; i < P_SEQS; i++) {
        pl_block_table_release(&ps[i].t);
    }
    is_int(pl_bm_num_used(&bm), 0, "no block leaks once every request "
           "ended, was aborted or preempted");
    is_int(pl_bm_num_host_used(&bm), 0, "nor a host block");
    is_int(check_all(&bm), 0, "and the lists are consistent when empty");

    pl_bm_destroy(&bm);
}


int
main(void)
{
    pl_block_manager_t  bm;

    is_int(pl_bm_init(&bm, 0, 16), -1, "an empty pool is refused");

    test_growth_and_slots();
    test_exhaustion();
    test_lru_reuse();
    test_runs();
    test_fork_and_cow();
    test_prefix_cache();
    test_prefix_verification_and_lru();
    test_contiguous();
    test_swap();
    test_property();
    test_beam_groups();

    return done_testing();
}
