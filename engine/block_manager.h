/*
 * block_manager: the paged KV cache's bookkeeping (the paper's "KV cache
 * manager").  A fixed pool of physical blocks, each holding block_size
 * tokens, handed out to sequences through per-sequence block tables
 * (logical block i -> physical block).  It knows nothing about tensors: the
 * model owns the memory, this only decides which block goes where.
 */

#ifndef PL_BLOCK_MANAGER_H
#define PL_BLOCK_MANAGER_H

#include <stdint.h>

/* A sequence's block table; grows as the sequence grows. */
typedef struct {
    int32_t  *ids;          /* physical block of logical block i */
    int       n;
    int       cap;
} pl_block_table_t;

typedef struct {
    int       num_blocks;
    int       block_size;
    int       num_free;
    int32_t  *refcount;     /* [num_blocks]; 0 = on the free list */
    int32_t  *free_next;    /* free list, oldest freed first */
    int32_t  *free_prev;
    int32_t   free_head;
    int32_t   free_tail;
} pl_block_manager_t;

/* 0, or -1 when out of memory or the sizes are not positive. */
int  pl_bm_init(pl_block_manager_t *bm, int num_blocks, int block_size);
void pl_bm_destroy(pl_block_manager_t *bm);

int  pl_bm_num_free(const pl_block_manager_t *bm);
int  pl_bm_num_used(const pl_block_manager_t *bm);
int  pl_bm_refcount(const pl_block_manager_t *bm, int32_t block);

/* Blocks needed to hold n_tokens tokens. */
int  pl_bm_blocks_for(const pl_block_manager_t *bm, int n_tokens);

/* Can a new (empty) sequence get room for n_tokens tokens now? */
int  pl_bm_can_allocate(const pl_block_manager_t *bm, int n_tokens);

/* Can table grow to hold n_tokens tokens now? */
int  pl_bm_can_append(const pl_block_manager_t *bm,
    const pl_block_table_t *table, int n_tokens);

/* Tokens table could hold if it took every free block. */
int  pl_bm_capacity(const pl_block_manager_t *bm,
    const pl_block_table_t *table);

/*
 * Grow table so it holds n_tokens tokens.  0, or -1 (table unchanged) when
 * there are not enough free blocks or memory for the table.
 */
int  pl_bm_ensure(pl_block_manager_t *bm, pl_block_table_t *table,
    int n_tokens);

/* Drop the table's reference to each of its blocks; table becomes empty. */
void pl_bm_free_table(pl_block_manager_t *bm, pl_block_table_t *table);

/* Release the table's own memory (after pl_bm_free_table). */
void pl_block_table_release(pl_block_table_t *table);

/* The cache slot of token position pos (the table must cover it). */
static inline int32_t
pl_bm_slot(const pl_block_manager_t *bm, const pl_block_table_t *table,
    int pos)
{
    return table->ids[pos / bm->block_size] * bm->block_size
           + pos % bm->block_size;
}

#endif /* PL_BLOCK_MANAGER_H */
