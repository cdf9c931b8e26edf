/*
 * block_manager: the paged KV cache's bookkeeping (the paper's "KV cache
 * manager").  A fixed pool of physical blocks on the device, each holding
 * block_size tokens, handed out to sequences through per-sequence block
 * tables (logical block i -> physical block); reference counts let tables
 * share blocks (fork, prefix caching) with copy-on-write; full blocks are
 * remembered by content for automatic prefix caching; a second pool in
 * host memory takes whole sequence groups swapped out.  It knows nothing
 * about tensors: every data movement it decides is logged as a block move
 * that the model runner executes before the next forward pass.
 */

#ifndef PL_BLOCK_MANAGER_H
#define PL_BLOCK_MANAGER_H

#include <stdint.h>

/* Tokens whose blocks a table takes side by side when it grows: the
   decode attention kernel's tile (kernels/decode_attention.cu reads 64
   tokens at a time; four blocks of 16 in one run read faster than four
   scattered ones, docs/BENCHMARKS.md). */
#define PL_BM_RUN_TOKENS  64

/* A sequence's block table; grows as the sequence grows. */
typedef struct {
    int32_t  *ids;          /* physical block of logical block i */
    int       n;
    int       cap;
    int       n_cached;     /* leading blocks registered in the prefix
                               cache (full, computed, immutable) */
    int       on_host;      /* ids name host blocks: swapped out */
} pl_block_table_t;

/* What the runner must do with KV data, in the order logged. */
typedef enum {
    PL_MOVE_COPY = 0,       /* device block src -> device block dst (CoW) */
    PL_MOVE_SWAP_OUT,       /* device block src -> host block dst */
    PL_MOVE_SWAP_IN         /* host block src -> device block dst */
} pl_move_kind_t;

typedef struct {
    int32_t          src;
    int32_t          dst;
    pl_move_kind_t   kind;
} pl_block_move_t;

/* A doubly linked list of blocks threaded through next/prev arrays. */
typedef struct {
    int32_t   head;
    int32_t   tail;
    int       n;
} pl_block_list_t;

typedef struct {
    uint64_t  prefix_queries;       /* full blocks looked up at admission */
    uint64_t  prefix_hits;          /* of them found in the cache */
    uint64_t  evictions;            /* cached blocks reused for new data */
    uint64_t  cow_copies;
    uint64_t  swapped_out;          /* blocks moved device -> host */
    uint64_t  swapped_in;           /* blocks moved host -> device */
} pl_bm_counters_t;

typedef struct {
    int               num_blocks;
    int               block_size;
    int               run;          /* blocks a table takes side by side
                                       (PL_BM_RUN_TOKENS worth) */

    int32_t          *refcount;     /* [num_blocks]; 0 = free or evictable */
    int32_t          *next;         /* list links of refcount-0 blocks */
    int32_t          *prev;
    pl_block_list_t   free;         /* no cached content, never-used first */
    pl_block_list_t   evictable;    /* cached content, least recently used
                                       at the head */

    /* automatic prefix caching (when caching is on) */
    int               caching;
    uint32_t          n_buckets;    /* power of two */
    int32_t          *bucket;       /* [n_buckets] chain heads */
    int32_t          *chain;        /* [num_blocks] next in bucket */
    uint8_t          *cached;       /* [num_blocks] in the hash table */
    uint64_t         *hash;         /* [num_blocks] hash(parent, tokens) */
    int32_t          *parent;       /* [num_blocks] previous block, or -1 */
    uint32_t         *parent_gen;   /* [num_blocks] parent's gen then */
    uint32_t         *gen;          /* [num_blocks] bumped on new content */
    int32_t          *tokens;       /* [num_blocks][block_size] */
    int32_t          *lookup;       /* [num_blocks] scratch */
    int               num_cached;

    /* host pool for swapping */
    int               num_host_blocks;
    int               num_host_free;
    int32_t          *host_refcount;    /* [num_host_blocks] */
    int32_t          *host_free;        /* stack of free host blocks */
    int32_t          *remap;        /* [max(num_blocks, host)] scratch, -1 */

    pl_block_move_t  *moves;        /* logged since pl_bm_clear_moves() */
    int               n_moves;
    int               moves_cap;

    pl_bm_counters_t  counters;
} pl_block_manager_t;

/* 0, or -1 when out of memory or the sizes are not positive. */
int  pl_bm_init(pl_block_manager_t *bm, int num_blocks, int block_size);
void pl_bm_destroy(pl_block_manager_t *bm);

/* Turn on automatic prefix caching.  0, or -1 when out of memory. */
int  pl_bm_enable_caching(pl_block_manager_t *bm);

/* Give the manager a host pool of num_host_blocks for swapping. */
int  pl_bm_init_host(pl_block_manager_t *bm, int num_host_blocks);

/* Blocks available: free plus evictable (cached, unreferenced). */
int  pl_bm_num_free(const pl_block_manager_t *bm);
int  pl_bm_num_used(const pl_block_manager_t *bm);
int  pl_bm_num_cached(const pl_block_manager_t *bm);
int  pl_bm_num_host_used(const pl_block_manager_t *bm);
int  pl_bm_refcount(const pl_block_manager_t *bm, int32_t block);

/* Blocks needed to hold n_tokens tokens. */
int  pl_bm_blocks_for(const pl_block_manager_t *bm, int n_tokens);

/* Can a new (empty) sequence get room for n_tokens tokens now? */
int  pl_bm_can_allocate(const pl_block_manager_t *bm, int n_tokens);

/* Can table grow to hold n_tokens tokens now? */
int  pl_bm_can_append(const pl_block_manager_t *bm,
    const pl_block_table_t *table, int n_tokens);

/* Tokens table could hold if it took every available block. */
int  pl_bm_capacity(const pl_block_manager_t *bm,
    const pl_block_table_t *table);

/*
 * Grow table so it holds n_tokens tokens.  0, or -1 (table unchanged) when
 * there are not enough blocks or memory for the table.
 */
int  pl_bm_ensure(pl_block_manager_t *bm, pl_block_table_t *table,
    int n_tokens);

/*
 * New blocks table needs before tokens [from, to) can be written: growth
 * plus a copy of every shared block in that range.
 */
int  pl_bm_write_cost(const pl_block_manager_t *bm,
    const pl_block_table_t *table, int from, int to);

/*
 * Make tokens [from, to) of table writable: grow it and give it a private
 * copy of every block in the range another table also references
 * (copy-on-write; each copy is logged as a PL_MOVE_COPY).  0, or -1 with
 * nothing changed when blocks or memory are short.
 */
int  pl_bm_prepare_write(pl_block_manager_t *bm, pl_block_table_t *table,
    int from, int to);

/* child (empty) shares every block of parent.  0, or -1 (out of memory). */
int  pl_bm_fork(pl_block_manager_t *bm, const pl_block_table_t *parent,
    pl_block_table_t *child);

/* Drop the table's reference to each of its blocks (device or host);
   the table becomes empty. */
void pl_bm_free_table(pl_block_manager_t *bm, pl_block_table_t *table);

/* Release the table's own memory (after pl_bm_free_table). */
void pl_block_table_release(pl_block_table_t *table);

/*
 * Admit a sequence of tokens[0..n_tokens) into empty table: reuse the
 * longest cached prefix of full blocks (only blocks wholly before the last
 * token, which must be run to get logits; every block's tokens and parent
 * are verified, not only its hash) and make sure reserve more tokens fit
 * behind it.  lookup 0: no reuse, every token is run (a request whose
 * prompt logprobs need every position's logits).  Returns the tokens
 * whose KV is reused (a multiple of block_size), or -1 with nothing
 * changed when the blocks are short.
 */
int  pl_bm_admit(pl_block_manager_t *bm, pl_block_table_t *table,
    const int32_t *tokens, int n_tokens, int reserve, int lookup);

/*
 * Register every full block of table whose tokens are all computed
 * (n_computed) in the prefix cache.  Nothing when caching is off.
 */
void pl_bm_register(pl_block_manager_t *bm, pl_block_table_t *table,
    const int32_t *tokens, int n_computed);

/*
 * Give empty table n_tokens worth of blocks that are consecutive in the
 * pool (the Orca baselines' contiguous reservation; first fit).  0, or -1
 * with nothing changed.
 */
int  pl_bm_reserve_contiguous(pl_block_manager_t *bm,
    pl_block_table_t *table, int n_tokens);

/*
 * Swapping a sequence group, given as its n tables (blocks shared inside
 * the group move once).  group_blocks counts the blocks a swap moves; the
 * can_ functions say whether the target pool has room; swap_out / swap_in
 * move every block, log the moves, and return 0, or -1 with nothing
 * changed.
 */
int  pl_bm_group_blocks(pl_block_manager_t *bm, pl_block_table_t **tables,
    int n);
int  pl_bm_can_swap_out(pl_block_manager_t *bm, pl_block_table_t **tables,
    int n);
int  pl_bm_can_swap_in(pl_block_manager_t *bm, pl_block_table_t **tables,
    int n);
int  pl_bm_swap_out(pl_block_manager_t *bm, pl_block_table_t **tables,
    int n);
int  pl_bm_swap_in(pl_block_manager_t *bm, pl_block_table_t **tables,
    int n);

/* The block moves logged since the last clear, in execution order. */
static inline const pl_block_move_t *
pl_bm_moves(const pl_block_manager_t *bm, int *n)
{
    *n = bm->n_moves;
    return bm->moves;
}

static inline void
pl_bm_clear_moves(pl_block_manager_t *bm)
{
    bm->n_moves = 0;
}

/* The cache slot of token position pos (the table must cover it). */
static inline int32_t
pl_bm_slot(const pl_block_manager_t *bm, const pl_block_table_t *table,
    int pos)
{
    return table->ids[pos / bm->block_size] * bm->block_size
           + pos % bm->block_size;
}

#endif /* PL_BLOCK_MANAGER_H */
