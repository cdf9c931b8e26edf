/*
 * pl_ring: a single-producer / single-consumer ring of length-prefixed
 * records living in shared memory.
 *
 * Layout: a pl_ring_shared_t (head and tail counters on their own cache
 * lines) followed by `size` bytes of data, size a power of two.  head and
 * tail count bytes ever written / consumed; they only grow.  Each record is
 * an 8-byte header {uint32 len, uint32 type} followed by its payload, padded
 * so len is a multiple of 8.  A record never wraps: when it does not fit
 * before the end of the data area the producer writes a PAD record that
 * covers the rest, and the record starts again at offset 0.
 *
 * The consumer treats the shared counters and records as hostile: it only
 * ever trusts its own copy of `size` and its own tail, checks every length
 * against what the producer has published, and copies each payload out
 * before the caller looks at it.
 */

#ifndef PL_RING_H
#define PL_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define PL_RING_ALIGN      8
#define PL_RING_HDR        8
#define PL_RING_TYPE_PAD   0

typedef struct {
    _Alignas(64) _Atomic uint64_t head;     /* written by the producer */
    _Alignas(64) _Atomic uint64_t tail;     /* written by the consumer */
    _Alignas(64) uint64_t         size;     /* informational only */
} pl_ring_shared_t;

typedef struct {
    pl_ring_shared_t *sh;
    uint8_t          *data;
    uint64_t          size;     /* trusted copy, power of two */
    uint64_t          local;    /* producer: head we own; consumer: tail */
} pl_ring_t;

/* Bytes a ring of `size` data bytes needs in shared memory. */
size_t pl_ring_bytes(uint64_t size);

/* Largest payload a single record may carry in a ring of this size. */
uint32_t pl_ring_max_payload(const pl_ring_t *r);

/* Producer side that creates the memory: zeroes counters. */
void pl_ring_init(pl_ring_t *r, void *mem, uint64_t size);

/* Either side attaching to an existing ring (size known from the creator). */
void pl_ring_attach_producer(pl_ring_t *r, void *mem, uint64_t size);
void pl_ring_attach_consumer(pl_ring_t *r, void *mem, uint64_t size);

/*
 * Append one record made of two pieces (either may be empty).  Returns 0,
 * or -1 when it does not fit now (ring full; try later) or can never fit
 * (payload larger than pl_ring_max_payload()).
 */
int pl_ring_write(pl_ring_t *r, uint32_t type, const void *a, uint32_t alen,
    const void *b, uint32_t blen);

/* Free bytes the producer sees now. */
uint64_t pl_ring_free_bytes(const pl_ring_t *r);

/*
 * Read the next record into buf (copying it out of shared memory).
 * Returns 1 with *type and *len set (the payload length rounded up to a
 * multiple of 8: records carry their own exact counts), 0 when empty, -1 when the ring is
 * corrupt (bad counters or a record header that cannot be right) and -2
 * when the record is larger than bufcap (it is left in place).
 */
int pl_ring_read(pl_ring_t *r, uint32_t *type, void *buf, uint32_t bufcap,
    uint32_t *len);

#endif /* PL_RING_H */
