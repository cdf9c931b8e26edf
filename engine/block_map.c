/*
 * block_map: the live KV block map's writer (see block_map.h).
 *
 * Blocks are numbered as the block manager numbers them: device blocks
 * 0..num_blocks-1 first, then host blocks 0..num_host_blocks-1.  A
 * block's owner is the first request whose table names it; a request's
 * sequences find their owner number through a small open-addressing hash
 * of their leader, so a build stays linear in sequences as well as in
 * blocks, and a request past the owner table is remembered there as
 * dropped (counted once, up to 2048 of them).
 */

#include <stdlib.h>
#include <string.h>

#include "block_map.h"
#include "ipc.h"
#include "sequence.h"


int
pl_block_map_init(pl_block_map_t *m, const pl_block_manager_t *bm)
{
    memset(m, 0, sizeof(*m));

    m->bytes = pl_bmap_bytes((uint32_t) bm->num_blocks,
                             (uint32_t) bm->num_host_blocks);
    m->map = aligned_alloc(64, (m->bytes + 63) / 64 * 64);
    if (m->map == NULL) {
        return -1;
    }

    memset(m->map, 0, m->bytes);
    m->map->num_blocks = (uint32_t) bm->num_blocks;
    m->map->num_host_blocks = (uint32_t) bm->num_host_blocks;
    m->map->block_size = (uint32_t) bm->block_size;

    return 0;
}


void
pl_block_map_free(pl_block_map_t *m)
{
    free(m->map);
    m->map = NULL;
}


int
pl_block_map_due(const pl_block_map_t *m, const pl_scheduler_t *sc,
    uint64_t now_ms)
{
    int  busy = sc->running.n > 0 || sc->swapped.n > 0;

    if (busy) {
        return now_ms - m->last_ms >= PL_BMAP_INTERVAL_MS;
    }

    return m->shown_busy;
}


static pl_bmap_block_t *
pl_block_map_blocks(pl_block_map_t *m)
{
    return (pl_bmap_block_t *) (m->map + 1);
}


void
pl_block_map_begin(pl_block_map_t *m, const pl_block_manager_t *bm,
    uint64_t now_ms)
{
    pl_bmap_block_t  *b = pl_block_map_blocks(m);
    int32_t           rc;
    int               i;

    for (i = 0; i < bm->num_blocks; i++) {
        rc = bm->refcount[i];
        b[i].owner = 0;
        b[i].refcount = (uint8_t) (rc > 255 ? 255 : rc);
        b[i].flags = bm->cached && bm->cached[i] ? PL_BMAP_CACHED : 0;
    }

    b += bm->num_blocks;
    for (i = 0; i < bm->num_host_blocks; i++) {
        rc = bm->host_refcount[i];
        b[i].owner = 0;
        b[i].refcount = (uint8_t) (rc > 255 ? 255 : rc);
        b[i].flags = 0;
    }

    memset(m->slot_key, 0, sizeof(m->slot_key));
    m->map->n_owners = 0;
    m->map->owners_dropped = 0;
    m->map->time_ms = now_ms;
    m->map->updates++;
    m->last_ms = now_ms;
}


/* The owner number (1-based) of the request led by key, added when new;
   0 when it is past the owner table. */
static uint16_t
pl_block_map_owner(pl_block_map_t *m, const void *key, uint64_t req_id,
    uint32_t pid, int swapped)
{
    pl_bmap_hdr_t    *h = m->map;
    pl_bmap_owner_t  *o;
    uintptr_t         i;

    i = ((uintptr_t) key >> 4) * 0x9e3779b1u;
    for (i &= PL_BLOCK_MAP_SLOTS - 1; m->slot_key[i];
         i = (i + 1) & (PL_BLOCK_MAP_SLOTS - 1))
    {
        if (m->slot_key[i] == key) {
            return m->slot_owner[i];
        }
    }

    /* a free slot; past three quarters full, newcomers are dropped
       uncounted, so a probe always ends */
    if (h->n_owners + h->owners_dropped >= PL_BLOCK_MAP_SLOTS / 4 * 3) {
        return 0;
    }

    m->slot_key[i] = key;

    if (h->n_owners == PL_BMAP_MAX_OWNERS) {
        h->owners_dropped++;
        m->slot_owner[i] = 0;
        return 0;
    }

    o = &h->owners[h->n_owners];
    memset(o, 0, sizeof(*o));
    o->req_id = req_id;
    o->pid = pid;
    o->state = swapped ? PL_BMAP_SWAPPED : PL_BMAP_RUNNING;
    m->slot_owner[i] = (uint16_t) ++h->n_owners;

    return m->slot_owner[i];
}


void
pl_block_map_add(pl_block_map_t *m, const void *key, uint64_t req_id,
    uint32_t pid, const pl_block_table_t *table, int n_tokens)
{
    pl_bmap_block_t  *b = pl_block_map_blocks(m);
    pl_bmap_owner_t  *o;
    uint32_t          limit, base;
    uint16_t          owner;
    int               i;

    owner = pl_block_map_owner(m, key, req_id, pid, table->on_host);
    if (owner == 0) {
        return;
    }

    o = &m->map->owners[owner - 1];
    o->n_seqs++;
    if ((uint32_t) n_tokens > o->n_tokens) {
        o->n_tokens = (uint32_t) n_tokens;
    }

    base = table->on_host ? m->map->num_blocks : 0;
    limit = table->on_host ? m->map->num_host_blocks : m->map->num_blocks;

    for (i = 0; i < table->n; i++) {
        if (table->ids[i] >= 0 && (uint32_t) table->ids[i] < limit
            && b[base + table->ids[i]].owner == 0)
        {
            b[base + table->ids[i]].owner = owner;
        }
    }
}


static void
pl_block_map_add_queue(pl_block_map_t *m, const pl_seq_queue_t *q)
{
    const pl_seq_t  *s;

    for (s = q->head; s; s = s->next) {
        if (s->blocks.n > 0) {
            pl_block_map_add(m, s->leader, s->leader->req_id,
                             s->leader->conn ? s->leader->conn->pid : 0,
                             &s->blocks, s->n_tokens);
        }
    }
}


void
pl_block_map_build(pl_block_map_t *m, const pl_block_manager_t *bm,
    const pl_scheduler_t *sc, uint64_t now_ms)
{
    pl_block_map_begin(m, bm, now_ms);
    pl_block_map_add_queue(m, &sc->running);
    pl_block_map_add_queue(m, &sc->swapped);
    m->shown_busy = m->map->n_owners > 0;
}
