/*
 * block_map: the live picture of the paged KV cache that the playground's
 * block map draws (the paper's Figs. 6-9 as they happen): for every
 * physical block of the device and host pools, the request that owns it,
 * its reference count and whether it holds a prefix-cache entry.
 *
 * It is built in the engine's own memory from the block manager's
 * counts and the block tables of the running and swapped sequences, then
 * copied into every worker's region under a seqlock (pl_bmap_publish).
 * A build walks every block once and every table entry once; it runs at
 * most every PL_BMAP_INTERVAL_MS while requests hold blocks, and once
 * more when the last one is gone, so an idle engine does nothing and a
 * busy one spends microseconds per tenth of a second on it
 * (bench/blockmap.c; docs/BENCHMARKS.md).
 */

#ifndef PL_BLOCK_MAP_H
#define PL_BLOCK_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "block_manager.h"
#include "pl_proto.h"
#include "scheduler.h"

/* Slots of the leader -> owner hash, a power of two; it takes up to
   three quarters of them: every owner and up to 2048 dropped requests. */
#define PL_BLOCK_MAP_SLOTS  (4 * PL_BMAP_MAX_OWNERS)

typedef struct {
    pl_bmap_hdr_t     *map;         /* the next publication */
    size_t             bytes;       /* pl_bmap_bytes() of the pools */
    const void        *slot_key[PL_BLOCK_MAP_SLOTS];    /* leaders seen */
    uint16_t           slot_owner[PL_BLOCK_MAP_SLOTS];  /* 0: dropped */
    uint64_t           last_ms;     /* of the last build */
    int                shown_busy;  /* the last build had owners */
} pl_block_map_t;

/* Room for bm's pools (device and host: pl_bm_init_host comes first).
   0, or -1 when out of memory. */
int   pl_block_map_init(pl_block_map_t *m, const pl_block_manager_t *bm);
void  pl_block_map_free(pl_block_map_t *m);

/* Should a map be built at now_ms: the interval has passed while
   sequences hold blocks, or the last map showed some that are gone. */
int   pl_block_map_due(const pl_block_map_t *m, const pl_scheduler_t *sc,
    uint64_t now_ms);

/* Rebuild the map from bm and the running and swapped sequences of sc. */
void  pl_block_map_build(pl_block_map_t *m, const pl_block_manager_t *bm,
    const pl_scheduler_t *sc, uint64_t now_ms);

/* Start a map over: every block's count and cache flag, no owners. */
void  pl_block_map_begin(pl_block_map_t *m, const pl_block_manager_t *bm,
    uint64_t now_ms);

/* Mark table's blocks as owned by the request whose leader is key
   (several sequences of one request give one owner). */
void  pl_block_map_add(pl_block_map_t *m, const void *key, uint64_t req_id,
    uint32_t pid, const pl_block_table_t *table, int n_tokens);

#endif /* PL_BLOCK_MAP_H */
