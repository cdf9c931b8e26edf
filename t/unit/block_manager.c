/*
 * Block manager: allocation, growth, slots, exhaustion, reference counts,
 * and no leaks after many random grow/free cycles.
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

    pl_bm_init(&bm, 3, 1);
    pl_bm_ensure(&bm, &a, 1);
    pl_bm_ensure(&bm, &b, 1);
    a0 = a.ids[0];
    b0 = b.ids[0];
    pl_bm_free_table(&bm, &a);
    pl_bm_free_table(&bm, &b);

    pl_bm_ensure(&bm, &c, 3);
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


#define NT  16

static void
test_random_cycles_no_leak(void)
{
    pl_block_manager_t  bm;
    pl_block_table_t    t[NT] = { { 0 } };
    int                 len[NT] = { 0 };
    int                 owner[64];
    int                 i, k, j, bad = 0, want, used;
    unsigned            x = 12345;

    pl_bm_init(&bm, 64, 8);

    for (i = 0; i < 20000; i++) {
        x = x * 1103515245u + 12345u;
        k = (x >> 16) % NT;
        if ((x >> 8) % 5 == 0) {
            pl_bm_free_table(&bm, &t[k]);
            len[k] = 0;
            continue;
        }
        want = len[k] + 1 + (int) ((x >> 4) % 20);
        if (pl_bm_ensure(&bm, &t[k], want) == 0) {
            len[k] = want;
        }

        used = 0;
        for (j = 0; j < 64; j++) {
            owner[j] = -1;
        }
        for (j = 0; j < NT; j++) {
            used += t[j].n;
            bad += t[j].n != pl_bm_blocks_for(&bm, len[j]);
            for (int b = 0; b < t[j].n; b++) {
                bad += owner[t[j].ids[b]] != -1;
                bad += pl_bm_refcount(&bm, t[j].ids[b]) != 1;
                owner[t[j].ids[b]] = j;
            }
        }
        bad += used != pl_bm_num_used(&bm);
    }

    is_int(bad, 0, "20000 random grow/free steps: tables exact, no block "
           "shared, used count right");

    for (k = 0; k < NT; k++) {
        pl_bm_free_table(&bm, &t[k]);
        pl_block_table_release(&t[k]);
    }
    is_int(pl_bm_num_free(&bm), 64, "everything returns after free");

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
    test_random_cycles_no_leak();

    return done_testing();
}
