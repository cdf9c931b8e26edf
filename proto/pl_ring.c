/*
 * pl_ring: SPSC record ring in shared memory.  See pl_ring.h for the layout
 * and the trust model.
 */

#include <string.h>

#include "pl_ring.h"

#define PL_ROUND8(n)  (((n) + 7u) & ~(uint64_t) 7u)


size_t
pl_ring_bytes(uint64_t size)
{
    return sizeof(pl_ring_shared_t) + size;
}


uint32_t
pl_ring_max_payload(const pl_ring_t *r)
{
    return (uint32_t) (r->size / 4 - PL_RING_HDR);
}


void
pl_ring_init(pl_ring_t *r, void *mem, uint64_t size)
{
    pl_ring_shared_t  *sh = mem;

    atomic_store_explicit(&sh->head, 0, memory_order_relaxed);
    atomic_store_explicit(&sh->tail, 0, memory_order_relaxed);
    sh->size = size;
    memset((uint8_t *) mem + sizeof(pl_ring_shared_t), 0, size);
    atomic_thread_fence(memory_order_release);

    r->sh = sh;
    r->data = (uint8_t *) mem + sizeof(pl_ring_shared_t);
    r->size = size;
    r->local = 0;
}


void
pl_ring_attach_producer(pl_ring_t *r, void *mem, uint64_t size)
{
    r->sh = mem;
    r->data = (uint8_t *) mem + sizeof(pl_ring_shared_t);
    r->size = size;
    r->local = atomic_load_explicit(&r->sh->head, memory_order_acquire);
}


void
pl_ring_attach_consumer(pl_ring_t *r, void *mem, uint64_t size)
{
    r->sh = mem;
    r->data = (uint8_t *) mem + sizeof(pl_ring_shared_t);
    r->size = size;
    r->local = atomic_load_explicit(&r->sh->tail, memory_order_acquire);
}


uint64_t
pl_ring_free_bytes(const pl_ring_t *r)
{
    uint64_t  tail = atomic_load_explicit(&r->sh->tail, memory_order_acquire);
    uint64_t  used = r->local - tail;

    return used > r->size ? 0 : r->size - used;
}


static void
pl_ring_put_header(uint8_t *p, uint32_t len, uint32_t type)
{
    memcpy(p, &len, 4);
    memcpy(p + 4, &type, 4);
}


int
pl_ring_write(pl_ring_t *r, uint32_t type, const void *a, uint32_t alen,
    const void *b, uint32_t blen)
{
    uint64_t  payload = (uint64_t) alen + blen;
    uint64_t  need, off, room, tail, used;
    uint8_t  *p;

    if (payload > pl_ring_max_payload(r)) {
        return -1;
    }

    need = PL_ROUND8(PL_RING_HDR + payload);
    off = r->local & (r->size - 1);
    room = r->size - off;

    tail = atomic_load_explicit(&r->sh->tail, memory_order_acquire);
    used = r->local - tail;

    if (used > r->size) {
        return -1;          /* consumer counter is nonsense: never write */
    }

    if (need > room) {
        /* pad to the end, then the record starts at offset 0 */
        if (used + room + need > r->size) {
            return -1;
        }
        pl_ring_put_header(r->data + off, (uint32_t) room, PL_RING_TYPE_PAD);
        r->local += room;
        off = 0;

    } else if (used + need > r->size) {
        return -1;
    }

    p = r->data + off;
    pl_ring_put_header(p, (uint32_t) need, type);
    if (alen) {
        memcpy(p + PL_RING_HDR, a, alen);
    }
    if (blen) {
        memcpy(p + PL_RING_HDR + alen, b, blen);
    }

    r->local += need;
    atomic_store_explicit(&r->sh->head, r->local, memory_order_release);

    return 0;
}


int
pl_ring_read(pl_ring_t *r, uint32_t *type, void *buf, uint32_t bufcap,
    uint32_t *len)
{
    uint64_t  head, avail, off;
    uint32_t  rlen, rtype;

    for ( ;; ) {
        head = atomic_load_explicit(&r->sh->head, memory_order_acquire);
        avail = head - r->local;

        if (avail == 0) {
            return 0;
        }

        if (avail > r->size || (avail & 7) != 0) {
            return -1;
        }

        off = r->local & (r->size - 1);

        memcpy(&rlen, r->data + off, 4);
        memcpy(&rtype, r->data + off + 4, 4);

        if (rlen < PL_RING_HDR || (rlen & 7) != 0 || rlen > avail
            || rlen > r->size - off)
        {
            return -1;
        }

        if (rtype == PL_RING_TYPE_PAD) {
            if (off + rlen != r->size) {
                return -1;
            }
            r->local += rlen;
            atomic_store_explicit(&r->sh->tail, r->local,
                                  memory_order_release);
            continue;
        }

        if (rlen - PL_RING_HDR > bufcap) {
            return -2;
        }

        memcpy(buf, r->data + off + PL_RING_HDR, rlen - PL_RING_HDR);
        *type = rtype;
        *len = rlen - PL_RING_HDR;

        r->local += rlen;
        atomic_store_explicit(&r->sh->tail, r->local, memory_order_release);

        return 1;
    }
}
