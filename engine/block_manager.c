/*
 * block_manager: physical KV blocks and per-sequence block tables.
 *
 * Free blocks sit on a doubly linked list threaded through two index
 * arrays: allocation takes the head (the block freed longest ago), freeing
 * appends at the tail, both O(1).  The list is doubly linked so that a
 * block can later leave it from the middle (a prefix-cache hit on a freed
 * block that still holds valid KV), and its order is already LRU, the
 * order in which such cached blocks would be evicted.
 *
 * Every block carries a real reference count: a table holds one reference
 * per block it lists, and a block returns to the free list only when its
 * count drops to zero.  Sharing blocks between sequences (fork, beam
 * search, prefix caching) therefore needs no change to free or growth.
 */

#include <stdlib.h>
#include <string.h>

#include "block_manager.h"

#define PL_BM_NONE  (-1)


int
pl_bm_init(pl_block_manager_t *bm, int num_blocks, int block_size)
{
    int  i;

    memset(bm, 0, sizeof(*bm));

    if (num_blocks <= 0 || block_size <= 0) {
        return -1;
    }

    bm->refcount = calloc(num_blocks, sizeof(int32_t));
    bm->free_next = malloc(num_blocks * sizeof(int32_t));
    bm->free_prev = malloc(num_blocks * sizeof(int32_t));

    if (bm->refcount == NULL || bm->free_next == NULL
        || bm->free_prev == NULL)
    {
        pl_bm_destroy(bm);
        return -1;
    }

    for (i = 0; i < num_blocks; i++) {
        bm->free_next[i] = i + 1 < num_blocks ? i + 1 : PL_BM_NONE;
        bm->free_prev[i] = i > 0 ? i - 1 : PL_BM_NONE;
    }

    bm->num_blocks = num_blocks;
    bm->block_size = block_size;
    bm->num_free = num_blocks;
    bm->free_head = 0;
    bm->free_tail = num_blocks - 1;

    return 0;
}


void
pl_bm_destroy(pl_block_manager_t *bm)
{
    free(bm->refcount);
    free(bm->free_next);
    free(bm->free_prev);
    memset(bm, 0, sizeof(*bm));
}


int
pl_bm_num_free(const pl_block_manager_t *bm)
{
    return bm->num_free;
}


int
pl_bm_num_used(const pl_block_manager_t *bm)
{
    return bm->num_blocks - bm->num_free;
}


int
pl_bm_refcount(const pl_block_manager_t *bm, int32_t block)
{
    if (block < 0 || block >= bm->num_blocks) {
        return -1;
    }

    return bm->refcount[block];
}


int
pl_bm_blocks_for(const pl_block_manager_t *bm, int n_tokens)
{
    return n_tokens <= 0 ? 0 : (n_tokens - 1) / bm->block_size + 1;
}


int
pl_bm_can_allocate(const pl_block_manager_t *bm, int n_tokens)
{
    return pl_bm_blocks_for(bm, n_tokens) <= bm->num_free;
}


int
pl_bm_can_append(const pl_block_manager_t *bm,
    const pl_block_table_t *table, int n_tokens)
{
    return pl_bm_blocks_for(bm, n_tokens) - table->n <= bm->num_free;
}


int
pl_bm_capacity(const pl_block_manager_t *bm, const pl_block_table_t *table)
{
    return (table->n + bm->num_free) * bm->block_size;
}


/* Take the least recently freed block off the free list. */
static int32_t
pl_bm_take_free(pl_block_manager_t *bm)
{
    int32_t  b = bm->free_head;

    bm->free_head = bm->free_next[b];
    if (bm->free_head == PL_BM_NONE) {
        bm->free_tail = PL_BM_NONE;
    } else {
        bm->free_prev[bm->free_head] = PL_BM_NONE;
    }

    bm->num_free--;
    bm->refcount[b] = 1;

    return b;
}


static void
pl_bm_put_free(pl_block_manager_t *bm, int32_t b)
{
    bm->free_next[b] = PL_BM_NONE;
    bm->free_prev[b] = bm->free_tail;

    if (bm->free_tail == PL_BM_NONE) {
        bm->free_head = b;
    } else {
        bm->free_next[bm->free_tail] = b;
    }

    bm->free_tail = b;
    bm->num_free++;
}


static void
pl_bm_release(pl_block_manager_t *bm, int32_t b)
{
    if (--bm->refcount[b] == 0) {
        pl_bm_put_free(bm, b);
    }
}


static int
pl_block_table_reserve(pl_block_table_t *table, int n)
{
    int       cap;
    int32_t  *ids;

    if (n <= table->cap) {
        return 0;
    }

    cap = table->cap ? table->cap : 4;
    while (cap < n) {
        cap *= 2;
    }

    ids = realloc(table->ids, cap * sizeof(int32_t));
    if (ids == NULL) {
        return -1;
    }

    table->ids = ids;
    table->cap = cap;

    return 0;
}


int
pl_bm_ensure(pl_block_manager_t *bm, pl_block_table_t *table, int n_tokens)
{
    int  need = pl_bm_blocks_for(bm, n_tokens);

    if (need <= table->n) {
        return 0;
    }

    if (need - table->n > bm->num_free
        || pl_block_table_reserve(table, need) != 0)
    {
        return -1;
    }

    while (table->n < need) {
        table->ids[table->n++] = pl_bm_take_free(bm);
    }

    return 0;
}


void
pl_bm_free_table(pl_block_manager_t *bm, pl_block_table_t *table)
{
    int  i;

    for (i = table->n - 1; i >= 0; i--) {
        pl_bm_release(bm, table->ids[i]);
    }

    table->n = 0;
}


void
pl_block_table_release(pl_block_table_t *table)
{
    free(table->ids);
    memset(table, 0, sizeof(*table));
}
