/*
 * block_manager: physical KV blocks, block tables, sharing, prefix caching
 * and swapping.
 *
 * Every device block is in exactly one of three states: referenced
 * (refcount > 0, listed by that many table entries), free (refcount 0, no
 * content worth keeping) or evictable (refcount 0, but registered in the
 * prefix cache, so its KV may still be reused).  Free and evictable blocks
 * sit on two doubly linked lists threaded through the same next/prev
 * arrays: allocation takes the head of the free list, and only when that
 * is empty evicts the head of the evictable list, the block unused the
 * longest (LRU).  A prefix-cache hit on an evictable block unlinks it
 * from the middle.  Everything is O(1) but the prefix lookup, which is
 * O(1) per block through a chained hash table.
 *
 * Runs: a growing table takes its blocks in runs (pl_bm_grow).  At the
 * start of each run of `run` logical blocks it takes the first aligned
 * run of physical blocks that is all free among those of the free list's
 * first PL_BM_RUN_LOOK blocks (else the head), and moves the rest of that
 * run to the tail of the free list, where other tables reach it last;
 * within a run it takes the block after its previous one while that is
 * free.  Nothing depends on it but speed: the decode kernel reads a run
 * faster than as many scattered blocks.  (Looking at 32 blocks rather
 * than the head alone kept 82% of the tiles in runs instead of 26% in
 * pagedllm-sim's ShareGPT workload at 2 req/s, the pool full.)
 *
 * Prefix caching: a full block whose tokens have all been computed is
 * registered under hash(parent's hash, its tokens).  A lookup walks a new
 * request's full blocks from the start and accepts a candidate only when
 * its tokens are equal, and its parent is the block accepted one step
 * before with the same generation (gen counts how often a block received
 * new content): by induction the whole prefix is verified token for
 * token, so a hash collision can cost a miss but never wrong KV.  The
 * block holding a request's last token is never reused, because that
 * token must run through the model to give logits.
 *
 * Writes: a table may only write a block that no other table references
 * and that is not cached; pl_bm_prepare_write() copies any other block
 * first (copy-on-write).  Swapping moves a group's distinct blocks to a
 * host pool with its own reference counts and back.  Every data movement
 * is logged in order; executing the log in order before the forward pass
 * is always correct, even when a block freed by one move is reused by a
 * later one in the same iteration.
 */

#include <stdlib.h>
#include <string.h>

#include "block_manager.h"

#define PL_BM_NONE       (-1)
#define PL_BM_RUN_LOOK   32      /* free blocks a run start looks at */
#define PL_BM_ROOT_HASH  0x6a09e667f3bcc909ull


/* ---- lists ---- */


static void
pl_list_init(pl_block_list_t *l)
{
    l->head = l->tail = PL_BM_NONE;
    l->n = 0;
}


static void
pl_list_push(pl_block_manager_t *bm, pl_block_list_t *l, int32_t b)
{
    bm->next[b] = PL_BM_NONE;
    bm->prev[b] = l->tail;

    if (l->tail == PL_BM_NONE) {
        l->head = b;
    } else {
        bm->next[l->tail] = b;
    }

    l->tail = b;
    l->n++;
}


static void
pl_list_remove(pl_block_manager_t *bm, pl_block_list_t *l, int32_t b)
{
    if (bm->prev[b] == PL_BM_NONE) {
        l->head = bm->next[b];
    } else {
        bm->next[bm->prev[b]] = bm->next[b];
    }

    if (bm->next[b] == PL_BM_NONE) {
        l->tail = bm->prev[b];
    } else {
        bm->prev[bm->next[b]] = bm->prev[b];
    }

    bm->next[b] = bm->prev[b] = PL_BM_NONE;
    l->n--;
}


/* ---- set-up ---- */


int
pl_bm_init(pl_block_manager_t *bm, int num_blocks, int block_size)
{
    int  i;

    memset(bm, 0, sizeof(*bm));

    if (num_blocks <= 0 || block_size <= 0) {
        return -1;
    }

    bm->num_blocks = num_blocks;
    bm->block_size = block_size;
    bm->run = block_size < PL_BM_RUN_TOKENS ? PL_BM_RUN_TOKENS / block_size
                                            : 1;
    bm->refcount = calloc(num_blocks, sizeof(int32_t));
    bm->next = malloc(num_blocks * sizeof(int32_t));
    bm->prev = malloc(num_blocks * sizeof(int32_t));
    bm->cached = calloc(num_blocks, sizeof(uint8_t));
    bm->gen = calloc(num_blocks, sizeof(uint32_t));
    bm->remap = malloc(num_blocks * sizeof(int32_t));

    if (bm->refcount == NULL || bm->next == NULL || bm->prev == NULL
        || bm->cached == NULL || bm->gen == NULL || bm->remap == NULL)
    {
        pl_bm_destroy(bm);
        return -1;
    }

    pl_list_init(&bm->free);
    pl_list_init(&bm->evictable);

    for (i = 0; i < num_blocks; i++) {
        pl_list_push(bm, &bm->free, i);
        bm->remap[i] = PL_BM_NONE;
    }

    return 0;
}


void
pl_bm_destroy(pl_block_manager_t *bm)
{
    free(bm->refcount);
    free(bm->next);
    free(bm->prev);
    free(bm->bucket);
    free(bm->chain);
    free(bm->cached);
    free(bm->hash);
    free(bm->parent);
    free(bm->parent_gen);
    free(bm->gen);
    free(bm->tokens);
    free(bm->lookup);
    free(bm->host_refcount);
    free(bm->host_free);
    free(bm->remap);
    free(bm->moves);
    memset(bm, 0, sizeof(*bm));
}


int
pl_bm_enable_caching(pl_block_manager_t *bm)
{
    uint32_t  n = 16, i;

    while (n < (uint32_t) bm->num_blocks) {
        n *= 2;
    }

    bm->bucket = malloc(n * sizeof(int32_t));
    bm->chain = malloc(bm->num_blocks * sizeof(int32_t));
    bm->hash = calloc(bm->num_blocks, sizeof(uint64_t));
    bm->parent = malloc(bm->num_blocks * sizeof(int32_t));
    bm->parent_gen = calloc(bm->num_blocks, sizeof(uint32_t));
    bm->tokens = malloc((size_t) bm->num_blocks * bm->block_size
                        * sizeof(int32_t));
    bm->lookup = malloc(bm->num_blocks * sizeof(int32_t));

    if (bm->bucket == NULL || bm->chain == NULL || bm->hash == NULL
        || bm->parent == NULL || bm->parent_gen == NULL
        || bm->tokens == NULL || bm->lookup == NULL)
    {
        return -1;
    }

    for (i = 0; i < n; i++) {
        bm->bucket[i] = PL_BM_NONE;
    }

    bm->n_buckets = n;
    bm->caching = 1;

    return 0;
}


int
pl_bm_init_host(pl_block_manager_t *bm, int num_host_blocks)
{
    int       i;
    int32_t  *remap;

    if (num_host_blocks <= 0) {
        return num_host_blocks == 0 ? 0 : -1;
    }

    bm->host_refcount = calloc(num_host_blocks, sizeof(int32_t));
    bm->host_free = malloc(num_host_blocks * sizeof(int32_t));
    if (bm->host_refcount == NULL || bm->host_free == NULL) {
        return -1;
    }

    if (num_host_blocks > bm->num_blocks) {
        remap = realloc(bm->remap, num_host_blocks * sizeof(int32_t));
        if (remap == NULL) {
            return -1;
        }
        bm->remap = remap;
        for (i = bm->num_blocks; i < num_host_blocks; i++) {
            bm->remap[i] = PL_BM_NONE;
        }
    }

    for (i = 0; i < num_host_blocks; i++) {
        bm->host_free[i] = num_host_blocks - 1 - i;
    }

    bm->num_host_blocks = num_host_blocks;
    bm->num_host_free = num_host_blocks;

    return 0;
}


/* ---- counts ---- */


int
pl_bm_num_free(const pl_block_manager_t *bm)
{
    return bm->free.n + bm->evictable.n;
}


int
pl_bm_num_used(const pl_block_manager_t *bm)
{
    return bm->num_blocks - pl_bm_num_free(bm);
}


int
pl_bm_num_cached(const pl_block_manager_t *bm)
{
    return bm->num_cached;
}


int
pl_bm_num_host_used(const pl_block_manager_t *bm)
{
    return bm->num_host_blocks - bm->num_host_free;
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
    return pl_bm_blocks_for(bm, n_tokens) <= pl_bm_num_free(bm);
}


int
pl_bm_can_append(const pl_block_manager_t *bm,
    const pl_block_table_t *table, int n_tokens)
{
    return pl_bm_blocks_for(bm, n_tokens) - table->n <= pl_bm_num_free(bm);
}


int
pl_bm_capacity(const pl_block_manager_t *bm, const pl_block_table_t *table)
{
    return (table->n + pl_bm_num_free(bm)) * bm->block_size;
}


/* ---- the prefix cache's hash table ---- */


static uint64_t
pl_bm_hash(uint64_t parent, const int32_t *tokens, int n)
{
    uint64_t  h = parent ^ 0x9e3779b97f4a7c15ull;
    int       i;

    for (i = 0; i < n; i++) {
        h = (h ^ (uint32_t) tokens[i]) * 0x100000001b3ull;
        h ^= h >> 29;
    }

    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;

    return h;
}


static void
pl_bm_cache_insert(pl_block_manager_t *bm, int32_t b)
{
    uint32_t  i = (uint32_t) bm->hash[b] & (bm->n_buckets - 1);

    bm->chain[b] = bm->bucket[i];
    bm->bucket[i] = b;
    bm->cached[b] = 1;
    bm->num_cached++;
}


static void
pl_bm_cache_remove(pl_block_manager_t *bm, int32_t b)
{
    int32_t  *pp = &bm->bucket[(uint32_t) bm->hash[b] & (bm->n_buckets - 1)];

    while (*pp != b) {
        pp = &bm->chain[*pp];
    }

    *pp = bm->chain[b];
    bm->cached[b] = 0;
    bm->num_cached--;
}


/* The cached block holding tokens after parent (at parent_gen), or -1. */
static int32_t
pl_bm_cache_find(const pl_block_manager_t *bm, uint64_t h,
    const int32_t *tokens, int32_t parent, uint32_t parent_gen)
{
    int32_t  b = bm->bucket[(uint32_t) h & (bm->n_buckets - 1)];

    for ( ; b != PL_BM_NONE; b = bm->chain[b]) {
        if (bm->hash[b] == h && bm->parent[b] == parent
            && (parent == PL_BM_NONE || bm->parent_gen[b] == parent_gen)
            && memcmp(bm->tokens + (size_t) b * bm->block_size, tokens,
                      bm->block_size * sizeof(int32_t)) == 0)
        {
            return b;
        }
    }

    return PL_BM_NONE;
}


/* ---- taking and releasing blocks ---- */


/* Block b, off its list, now holds new content: one reference. */
static int32_t
pl_bm_claim(pl_block_manager_t *bm, int32_t b)
{
    bm->gen[b]++;
    bm->refcount[b] = 1;

    return b;
}


/* Evictable block b, off its list and out of the prefix cache. */
static void
pl_bm_evict(pl_block_manager_t *bm, int32_t b)
{
    pl_list_remove(bm, &bm->evictable, b);
    pl_bm_cache_remove(bm, b);
    bm->counters.evictions++;
}


/* Take free block b for new content. */
static int32_t
pl_bm_take_free(pl_block_manager_t *bm, int32_t b)
{
    pl_list_remove(bm, &bm->free, b);

    return pl_bm_claim(bm, b);
}


/* A block for new content: a free one, else the LRU evictable one. */
static int32_t
pl_bm_take(pl_block_manager_t *bm)
{
    int32_t  b;

    if (bm->free.n > 0) {
        return pl_bm_take_free(bm, bm->free.head);
    }

    b = bm->evictable.head;
    pl_bm_evict(bm, b);

    return pl_bm_claim(bm, b);
}


/* Is block b free (no references, no cached content)? */
static int
pl_bm_is_free(const pl_block_manager_t *bm, int32_t b)
{
    return b >= 0 && b < bm->num_blocks && bm->refcount[b] == 0
           && !bm->cached[b];
}


/* Is the aligned run from base all free (the last one: up to the pool's
   end)? */
static int
pl_bm_run_free(const pl_block_manager_t *bm, int32_t base)
{
    int32_t  i;

    for (i = base; i < base + bm->run && i < bm->num_blocks; i++) {
        if (!pl_bm_is_free(bm, i)) {
            return 0;
        }
    }

    return 1;
}


/* The next block of a growing table (see the top of the file). */
static int32_t
pl_bm_grow(pl_block_manager_t *bm, const pl_block_table_t *table)
{
    int32_t  b, base, i, c;
    int      k;

    if (table->n % bm->run != 0) {
        b = table->ids[table->n - 1] + 1;
        return pl_bm_is_free(bm, b) ? pl_bm_take_free(bm, b)
                                    : pl_bm_take(bm);
    }

    if (bm->free.n == 0) {
        return pl_bm_take(bm);
    }

    /* the first of the free list's first PL_BM_RUN_LOOK blocks whose
       aligned run is all free, else the head */
    b = bm->free.head;

    for (c = b, k = 0; c != PL_BM_NONE && k < PL_BM_RUN_LOOK;
         c = bm->next[c], k++)
    {
        if (pl_bm_run_free(bm, c - c % bm->run)) {
            b = c - c % bm->run;
            break;
        }
    }

    base = b - b % bm->run;
    pl_bm_take_free(bm, b);

    for (i = b + 1; i < base + bm->run; i++) {
        if (pl_bm_is_free(bm, i)) {
            pl_list_remove(bm, &bm->free, i);
            pl_list_push(bm, &bm->free, i);
        }
    }

    return b;
}


/* One more reference to a block, wherever it is now. */
static void
pl_bm_ref(pl_block_manager_t *bm, int32_t b)
{
    if (bm->refcount[b]++ == 0) {
        pl_list_remove(bm, bm->cached[b] ? &bm->evictable : &bm->free, b);
    }
}


static void
pl_bm_release(pl_block_manager_t *bm, int32_t b)
{
    if (--bm->refcount[b] == 0) {
        pl_list_push(bm, bm->cached[b] ? &bm->evictable : &bm->free, b);
    }
}


static void
pl_bm_host_release(pl_block_manager_t *bm, int32_t h)
{
    if (--bm->host_refcount[h] == 0) {
        bm->host_free[bm->num_host_free++] = h;
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


static int
pl_bm_reserve_moves(pl_block_manager_t *bm, int more)
{
    int               cap = bm->moves_cap ? bm->moves_cap : 64;
    pl_block_move_t  *m;

    if (bm->n_moves + more <= bm->moves_cap) {
        return 0;
    }

    while (cap < bm->n_moves + more) {
        cap *= 2;
    }

    m = realloc(bm->moves, cap * sizeof(pl_block_move_t));
    if (m == NULL) {
        return -1;
    }

    bm->moves = m;
    bm->moves_cap = cap;

    return 0;
}


static void
pl_bm_log(pl_block_manager_t *bm, int32_t src, int32_t dst,
    pl_move_kind_t kind)
{
    bm->moves[bm->n_moves++] = (pl_block_move_t) { src, dst, kind };
}


/* ---- growth and writes ---- */


int
pl_bm_ensure(pl_block_manager_t *bm, pl_block_table_t *table, int n_tokens)
{
    int  need = pl_bm_blocks_for(bm, n_tokens);

    if (need <= table->n) {
        return 0;
    }

    if (table->on_host || need - table->n > pl_bm_num_free(bm)
        || pl_block_table_reserve(table, need) != 0)
    {
        return -1;
    }

    while (table->n < need) {
        table->ids[table->n] = pl_bm_grow(bm, table);
        table->n++;
    }

    return 0;
}


/* Must block b be copied before this table writes it? */
static int
pl_bm_needs_copy(const pl_block_manager_t *bm, int32_t b)
{
    return bm->refcount[b] > 1 || bm->cached[b];
}


int
pl_bm_write_cost(const pl_block_manager_t *bm, const pl_block_table_t *table,
    int from, int to)
{
    int  need = pl_bm_blocks_for(bm, to);
    int  j, cost = need > table->n ? need - table->n : 0;

    for (j = from / bm->block_size; j < table->n && j < need; j++) {
        cost += pl_bm_needs_copy(bm, table->ids[j]);
    }

    return cost;
}


int
pl_bm_prepare_write(pl_block_manager_t *bm, pl_block_table_t *table,
    int from, int to)
{
    int      need = pl_bm_blocks_for(bm, to);
    int      j, cost = pl_bm_write_cost(bm, table, from, to);
    int32_t  src, dst;

    if (table->on_host || cost > pl_bm_num_free(bm)
        || pl_block_table_reserve(table, need) != 0
        || pl_bm_reserve_moves(bm, cost) != 0)
    {
        return -1;
    }

    for (j = from / bm->block_size; j < table->n && j < need; j++) {
        src = table->ids[j];
        if (pl_bm_needs_copy(bm, src)) {
            dst = pl_bm_take(bm);
            pl_bm_log(bm, src, dst, PL_MOVE_COPY);
            pl_bm_release(bm, src);
            table->ids[j] = dst;
            bm->counters.cow_copies++;
            if (table->n_cached > j) {
                table->n_cached = j;
            }
        }
    }

    return pl_bm_ensure(bm, table, to);
}


int
pl_bm_fork(pl_block_manager_t *bm, const pl_block_table_t *parent,
    pl_block_table_t *child)
{
    int  i;

    if (child->n != 0 || pl_block_table_reserve(child, parent->n) != 0) {
        return -1;
    }

    for (i = 0; i < parent->n; i++) {
        child->ids[i] = parent->ids[i];
        if (parent->on_host) {
            bm->host_refcount[parent->ids[i]]++;
        } else {
            pl_bm_ref(bm, parent->ids[i]);
        }
    }

    child->n = parent->n;
    child->n_cached = parent->n_cached;
    child->on_host = parent->on_host;

    return 0;
}


void
pl_bm_free_table(pl_block_manager_t *bm, pl_block_table_t *table)
{
    int  i;

    /* last block first: the tail of a sequence is evicted before the
       prefix it shares with others */
    for (i = table->n - 1; i >= 0; i--) {
        if (table->on_host) {
            pl_bm_host_release(bm, table->ids[i]);
        } else {
            pl_bm_release(bm, table->ids[i]);
        }
    }

    table->n = 0;
    table->n_cached = 0;
    table->on_host = 0;
}


void
pl_block_table_release(pl_block_table_t *table)
{
    free(table->ids);
    memset(table, 0, sizeof(*table));
}


/* ---- prefix caching ---- */


/* Cached blocks holding tokens' longest prefix, into bm->lookup. */
static int
pl_bm_lookup(const pl_block_manager_t *bm, const int32_t *tokens,
    int n_tokens, int *n_queried)
{
    int       bs = bm->block_size, j, max = (n_tokens - 1) / bs;
    uint64_t  h = PL_BM_ROOT_HASH;
    int32_t   b, parent = PL_BM_NONE;

    max = max < bm->num_blocks ? max : bm->num_blocks;
    *n_queried = max > 0 ? max : 0;

    for (j = 0; j < max; j++) {
        h = pl_bm_hash(h, tokens + (size_t) j * bs, bs);
        b = pl_bm_cache_find(bm, h, tokens + (size_t) j * bs, parent,
                             parent == PL_BM_NONE ? 0 : bm->gen[parent]);
        if (b == PL_BM_NONE) {
            break;
        }
        bm->lookup[j] = b;
        parent = b;
    }

    return j;
}


int
pl_bm_admit(pl_block_manager_t *bm, pl_block_table_t *table,
    const int32_t *tokens, int n_tokens, int max_new, int lookup)
{
    int  k = 0, queried = 0, revived = 0, j, reused, grow;

    if (table->n != 0 || n_tokens <= 0 || max_new <= 0) {
        return -1;
    }

    if (bm->caching && lookup) {
        k = pl_bm_lookup(bm, tokens, n_tokens, &queried);
        for (j = 0; j < k; j++) {
            revived += bm->refcount[bm->lookup[j]] == 0;
        }
    }

    reused = k * bm->block_size;
    grow = n_tokens - reused < max_new ? n_tokens - reused : max_new;

    if (pl_bm_blocks_for(bm, n_tokens) - k > pl_bm_num_free(bm) - revived
        || pl_block_table_reserve(table, pl_bm_blocks_for(bm, n_tokens))
           != 0)
    {
        return -1;
    }

    for (j = 0; j < k; j++) {
        pl_bm_ref(bm, bm->lookup[j]);
        table->ids[j] = bm->lookup[j];
    }
    table->n = k;
    table->n_cached = k;

    bm->counters.prefix_queries += (uint64_t) queried;
    bm->counters.prefix_hits += (uint64_t) k;

    pl_bm_ensure(bm, table, reused + grow);

    return reused;
}


void
pl_bm_register(pl_block_manager_t *bm, pl_block_table_t *table,
    const int32_t *tokens, int n_computed)
{
    int      bs = bm->block_size, j;
    int32_t  b, parent;

    if (!bm->caching || table->on_host) {
        return;
    }

    for (j = table->n_cached; j < table->n && (j + 1) * bs <= n_computed;
         j++)
    {
        b = table->ids[j];
        if (bm->cached[b]) {
            continue;
        }
        parent = j > 0 ? table->ids[j - 1] : PL_BM_NONE;
        bm->parent[b] = parent;
        bm->parent_gen[b] = j > 0 ? bm->gen[parent] : 0;
        bm->hash[b] = pl_bm_hash(j > 0 ? bm->hash[parent] : PL_BM_ROOT_HASH,
                                 tokens + (size_t) j * bs, bs);
        memcpy(bm->tokens + (size_t) b * bs, tokens + (size_t) j * bs,
               bs * sizeof(int32_t));
        pl_bm_cache_insert(bm, b);
    }

    table->n_cached = j;
}


/* ---- contiguous reservation (the Orca baselines) ---- */


int
pl_bm_reserve_contiguous(pl_block_manager_t *bm, pl_block_table_t *table,
    int n_tokens)
{
    int      need = pl_bm_blocks_for(bm, n_tokens), run = 0, i;
    int32_t  b;

    if (table->n != 0 || need <= 0 || need > pl_bm_num_free(bm)
        || pl_block_table_reserve(table, need) != 0)
    {
        return -1;
    }

    for (i = 0; i < bm->num_blocks && run < need; i++) {
        run = bm->refcount[i] == 0 ? run + 1 : 0;
    }

    if (run < need) {
        return -1;
    }

    for (b = i - need; b < i; b++) {
        if (bm->cached[b]) {
            pl_bm_evict(bm, b);
        } else {
            pl_list_remove(bm, &bm->free, b);
        }
        table->ids[table->n++] = pl_bm_claim(bm, b);
    }

    return 0;
}


/* ---- swapping ---- */


/* Distinct blocks over a group's tables (all on one side). */
int
pl_bm_group_blocks(pl_block_manager_t *bm, pl_block_table_t **tables, int n)
{
    int      t, i, count = 0;
    int32_t  b;

    for (t = 0; t < n; t++) {
        for (i = 0; i < tables[t]->n; i++) {
            b = tables[t]->ids[i];
            if (bm->remap[b] == PL_BM_NONE) {
                bm->remap[b] = 0;
                count++;
            }
        }
    }

    for (t = 0; t < n; t++) {
        for (i = 0; i < tables[t]->n; i++) {
            bm->remap[tables[t]->ids[i]] = PL_BM_NONE;
        }
    }

    return count;
}


static int
pl_bm_group_on(pl_block_table_t **tables, int n, int on_host)
{
    int  t;

    for (t = 0; t < n; t++) {
        if (tables[t]->on_host != on_host) {
            return 0;
        }
    }

    return 1;
}


int
pl_bm_can_swap_out(pl_block_manager_t *bm, pl_block_table_t **tables, int n)
{
    return pl_bm_group_on(tables, n, 0)
           && pl_bm_group_blocks(bm, tables, n) <= bm->num_host_free;
}


int
pl_bm_can_swap_in(pl_block_manager_t *bm, pl_block_table_t **tables, int n)
{
    return pl_bm_group_on(tables, n, 1)
           && pl_bm_group_blocks(bm, tables, n) <= pl_bm_num_free(bm);
}


/* Move one group across; the caller has checked room. */
static void
pl_bm_swap(pl_block_manager_t *bm, pl_block_table_t **tables, int n,
    int out)
{
    int      t, i, first = bm->n_moves;
    int32_t  b, to;

    for (t = 0; t < n; t++) {
        for (i = 0; i < tables[t]->n; i++) {
            b = tables[t]->ids[i];
            if (bm->remap[b] == PL_BM_NONE) {
                to = out ? bm->host_free[--bm->num_host_free] : pl_bm_take(bm);
                if (out) {
                    bm->host_refcount[to] = 0;
                } else {
                    bm->refcount[to] = 0;
                }
                pl_bm_log(bm, b, to, out ? PL_MOVE_SWAP_OUT : PL_MOVE_SWAP_IN);
                bm->remap[b] = to;
            }
            to = bm->remap[b];
            if (out) {
                bm->host_refcount[to]++;
                pl_bm_release(bm, b);
            } else {
                bm->refcount[to]++;
                pl_bm_host_release(bm, b);
            }
            tables[t]->ids[i] = to;
        }
        tables[t]->on_host = out;
        tables[t]->n_cached = 0;
    }

    for (i = first; i < bm->n_moves; i++) {
        bm->remap[bm->moves[i].src] = PL_BM_NONE;
    }

    if (out) {
        bm->counters.swapped_out += (uint64_t) (bm->n_moves - first);
    } else {
        bm->counters.swapped_in += (uint64_t) (bm->n_moves - first);
    }
}


int
pl_bm_swap_out(pl_block_manager_t *bm, pl_block_table_t **tables, int n)
{
    if (!pl_bm_can_swap_out(bm, tables, n)
        || pl_bm_reserve_moves(bm, pl_bm_group_blocks(bm, tables, n)) != 0)
    {
        return -1;
    }

    pl_bm_swap(bm, tables, n, 1);

    return 0;
}


int
pl_bm_swap_in(pl_block_manager_t *bm, pl_block_table_t **tables, int n)
{
    if (!pl_bm_can_swap_in(bm, tables, n)
        || pl_bm_reserve_moves(bm, pl_bm_group_blocks(bm, tables, n)) != 0)
    {
        return -1;
    }

    pl_bm_swap(bm, tables, n, 0);

    return 0;
}
