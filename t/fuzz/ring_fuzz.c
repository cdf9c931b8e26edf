/*
 * ring_fuzz: a libFuzzer target for the records the engine decodes from a
 * worker's submission ring (pl_ring_read + pl_ipc_next in engine/ipc.c).
 * The ring lives in memory a worker can write at any time, so the input
 * is that memory: the counters and every data byte.
 *
 *   byte 0, bit 0 clear: raw ring.  Bytes 1-8: the consumer's tail,
 *     rounded down to a multiple of 8 (the engine's own counter: it
 *     starts at 0 and moves by whole records, and the worker cannot write
 *     it), 9-12: how far the producer's head is past it (any value, even
 *     one the ring cannot hold), the rest: the ring's data, from offset 0.
 *   bit 0 set: producer.  The rest is cut into records (a 2-byte length,
 *     a 1-byte type, the payload) written with pl_ring_write; reading
 *     them back must give each accepted record unchanged, in order.
 *
 * pl_ipc_next must return 0, or -1 with a message, or 1 with a record
 * whose prompt, bias and stop ids all lie inside the read buffer and whose
 * tokens are inside the vocabulary.  It must never read outside the ring
 * or the buffer (AddressSanitizer) and never loop forever.
 *
 *     make fuzz-ring SECONDS=60
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ipc.h"

#define FUZZ_RING   4096u               /* data bytes, a power of two */
#define FUZZ_VOCAB  512u
#define FUZZ_READS  (FUZZ_RING / 8 + 2) /* more than a ring can hold */

/* aligned as the shared header: the region is page-aligned */
static _Alignas(pl_ring_shared_t) uint64_t
                 fuzz_mem[(sizeof(pl_ring_shared_t) + FUZZ_RING) / 8];
static uint64_t  fuzz_buf[FUZZ_RING / 8];


static void
fuzz_check_msg(const pl_ipc_msg_t *m, uint32_t cap)
{
    const uint8_t  *lo = (const uint8_t *) fuzz_buf, *hi = lo + cap;
    const uint8_t  *end;
    uint32_t        i;

    if (m->type == PL_REC_ABORT) {
        return;
    }
    if (m->type != PL_REC_SUBMIT) {
        abort();
    }

    end = (const uint8_t *) (m->stop_ids + m->submit.n_stop_ids);
    if ((const uint8_t *) m->prompt < lo || end > hi
        || (const uint8_t *) m->bias
           != (const uint8_t *) (m->prompt + m->submit.n_prompt))
    {
        abort();
    }
    for (i = 0; i < m->submit.n_prompt; i++) {
        if (m->prompt[i] < 0 || (uint32_t) m->prompt[i] >= FUZZ_VOCAB) {
            abort();
        }
    }
}


/* Reads until the ring is empty or refused; the records it returned. */
static int
fuzz_drain(pl_conn_t *c)
{
    char          err[256];
    pl_ipc_msg_t  m;
    uint32_t      cap = pl_ring_max_payload(&c->sub);
    uint32_t      i;
    int           rc;

    for (i = 0; i < FUZZ_READS; i++) {
        err[0] = '\0';
        rc = pl_ipc_next(c, fuzz_buf, cap, FUZZ_VOCAB, &m, err, sizeof(err));
        if (rc == 0) {
            return i;
        }
        if (rc < 0) {
            if (err[0] == '\0') {
                abort();
            }
            return i;
        }
        fuzz_check_msg(&m, cap);
    }

    abort();        /* more records than the ring can hold */
}


static void
fuzz_raw(pl_conn_t *c, const uint8_t *data, size_t size)
{
    pl_ring_shared_t  *sh = (pl_ring_shared_t *) fuzz_mem;
    uint64_t           tail = 0;
    uint32_t           ahead = 0;

    if (size >= 8) {
        memcpy(&tail, data, 8);
        tail &= ~(uint64_t) 7;
        data += 8;
        size -= 8;
    }
    if (size >= 4) {
        memcpy(&ahead, data, 4);
        data += 4;
        size -= 4;
    }

    pl_ring_init(&c->sub, fuzz_mem, FUZZ_RING);
    memcpy(c->sub.data, data, size < FUZZ_RING ? size : FUZZ_RING);
    atomic_store(&sh->tail, tail);
    atomic_store(&sh->head, tail + ahead);
    pl_ring_attach_consumer(&c->sub, fuzz_mem, FUZZ_RING);

    fuzz_drain(c);
}


/* Reads the oldest record still queued and checks it is the one written. */
static void
fuzz_read_back(pl_conn_t *c, const uint8_t *data, const size_t *q_off,
    const uint16_t *q_len, const uint32_t *q_type, size_t i)
{
    uint32_t  type, len;

    if (pl_ring_read(&c->sub, &type, fuzz_buf, sizeof(fuzz_buf), &len) != 1
        || type != q_type[i] || len < q_len[i] || len - q_len[i] >= 8
        || memcmp(fuzz_buf, data + q_off[i], q_len[i]) != 0)
    {
        abort();
    }
}


/* Writes records cut from data, each in two parts as the module does
   (a header, then the ids); reading them back gives each unchanged. */
static void
fuzz_producer(pl_conn_t *c, const uint8_t *data, size_t size)
{
    static size_t    q_off[FUZZ_READS];
    static uint16_t  q_len[FUZZ_READS];
    static uint32_t  q_type[FUZZ_READS];
    pl_ring_t        prod;
    uint32_t         type, len;
    uint16_t         want;
    size_t           off = 0, head = 0, tail = 0;

    pl_ring_init(&prod, fuzz_mem, FUZZ_RING);
    pl_ring_attach_consumer(&c->sub, fuzz_mem, FUZZ_RING);

    while (off + 3 <= size) {
        memcpy(&want, data + off, 2);
        type = data[off + 2] | 1u;      /* never PAD */
        off += 3;
        if (want > size - off) {
            want = (uint16_t) (size - off);
        }

        while (pl_ring_write(&prod, type, data + off, want / 2,
                             data + off + want / 2, want - want / 2) != 0)
        {
            if (want > pl_ring_max_payload(&prod)) {
                break;                  /* refused for its size */
            }
            if (tail == head) {
                abort();                /* an empty ring refused it */
            }
            fuzz_read_back(c, data, q_off, q_len, q_type,
                           tail++ % FUZZ_READS);
        }
        if (want <= pl_ring_max_payload(&prod)) {
            if (head - tail == FUZZ_READS) {
                abort();
            }
            q_off[head % FUZZ_READS] = off;
            q_len[head % FUZZ_READS] = want;
            q_type[head % FUZZ_READS] = type;
            head++;
        }
        off += want;
    }

    while (tail != head) {
        fuzz_read_back(c, data, q_off, q_len, q_type, tail++ % FUZZ_READS);
    }
    if (pl_ring_read(&c->sub, &type, fuzz_buf, sizeof(fuzz_buf), &len) != 0) {
        abort();
    }
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pl_conn_t  c;

    if (size == 0) {
        return 0;
    }

    memset(&c, 0, sizeof(c));
    c.worker_id = 1;

    if (data[0] & 1) {
        fuzz_producer(&c, data + 1, size - 1);
    } else {
        fuzz_raw(&c, data + 1, size - 1);
    }

    return 0;
}
