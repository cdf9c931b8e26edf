/*
 * Shared-memory ring: wrap-around with varied record sizes, full ring,
 * oversized records, corrupted counters and headers, and a producer and a
 * consumer in two processes exchanging a million records.
 */

#include <sched.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"

#include "pl_ring.h"

#define SMALL  1024


static void
fill(uint8_t *p, uint32_t n, uint64_t seed)
{
    uint32_t  i;

    for (i = 0; i < n; i++) {
        p[i] = (uint8_t) (seed * 31 + i * 7);
    }
}


static int
check(const uint8_t *p, uint32_t n, uint64_t seed)
{
    uint32_t  i;

    for (i = 0; i < n; i++) {
        if (p[i] != (uint8_t) (seed * 31 + i * 7)) {
            return 0;
        }
    }

    return 1;
}


/* Writes and reads interleaved irregularly, so the ring is seen at every
   fill level and every wrap position. */
static void
test_wrap_around(void)
{
    static _Alignas(pl_ring_shared_t) uint64_t
                     mem[(sizeof(pl_ring_shared_t) + SMALL) / 8];
    pl_ring_t        w, r;
    uint8_t          a[16], b[256], got[512];
    uint32_t         type, len, n;
    int              i, bad = 0, written = 0, read_n = 0, rc;
    uint64_t         seq_w = 0, seq_r = 0, s;

    pl_ring_init(&w, mem, SMALL);
    pl_ring_attach_consumer(&r, mem, SMALL);

    for (i = 0; i < 20000; i++) {
        n = (uint32_t) ((seq_w * 37) % 200);
        memcpy(a, &seq_w, 8);
        memcpy(a + 8, &n, 4);
        fill(b, n, seq_w);
        if (pl_ring_write(&w, 5 + (seq_w % 3), a, 12, b, n) == 0) {
            seq_w++;
            written++;
        }

        if (i % 7 != 6 && i != 19999) {
            continue;       /* let the ring fill up now and then */
        }

        while ((rc = pl_ring_read(&r, &type, got, sizeof(got), &len)) == 1) {
            memcpy(&s, got, 8);
            memcpy(&n, got + 8, 4);
            bad += s != seq_r || type != 5 + (seq_r % 3)
                   || len != ((12 + n + 7) & ~7u) || !check(got + 12, n, s);
            read_n++;
            seq_r++;
        }
        bad += rc != 0;
    }

    ok(written > 10000 && written < 20000, "20000 attempts on a 1 KiB ring "
       "write %d records, the others finding it full", written);
    is_int(read_n, written, "every record written is read");
    is_int(bad, 0, "in order, with their types and bytes, across many wraps");
}


/* A record layout the wrap test can fully verify. */
static void
test_wrap_contents(void)
{
    static _Alignas(pl_ring_shared_t) uint64_t
                     mem[(sizeof(pl_ring_shared_t) + SMALL) / 8];
    pl_ring_t        w, r;
    uint8_t          buf[256], got[256];
    uint32_t         type, len, n;
    uint64_t         seq;
    int              bad = 0, i;

    pl_ring_init(&w, mem, SMALL);
    pl_ring_attach_consumer(&r, mem, SMALL);

    for (seq = 0; seq < 5000; seq++) {
        n = 8 + (uint32_t) ((seq * 53) % 180);
        memcpy(buf, &seq, 8);
        fill(buf + 8, n - 8, seq);

        if (pl_ring_write(&w, 9, buf, 8, buf + 8, n - 8) != 0) {
            bad++;
            break;
        }
        if (seq % 4 != 3) {
            continue;
        }
        for (i = 0; i < 4; i++) {
            uint64_t  s;

            if (pl_ring_read(&r, &type, got, sizeof(got), &len) != 1) {
                bad++;
                continue;
            }
            memcpy(&s, got, 8);
            n = 8 + (uint32_t) ((s * 53) % 180);
            bad += s != seq - 3 + (uint64_t) i;
            bad += len != ((n + 7) & ~7u);
            bad += !check(got + 8, n - 8, s);
        }
    }

    is_int(bad, 0, "5000 records of 8..187 bytes keep their exact bytes "
           "through padding and wrap-around");
}


static void
test_full_ring(void)
{
    static _Alignas(pl_ring_shared_t) uint64_t
                     mem[(sizeof(pl_ring_shared_t) + SMALL) / 8];
    pl_ring_t        w, r;
    uint8_t          buf[248] = { 0 }, got[256];
    uint32_t         type, len;
    int              n = 0;

    pl_ring_init(&w, mem, SMALL);
    pl_ring_attach_consumer(&r, mem, SMALL);

    while (pl_ring_write(&w, 1, buf, 120, NULL, 0) == 0) {
        n++;
    }

    is_int(n, 8, "a 1 KiB ring takes eight 128-byte records");
    is_int(pl_ring_free_bytes(&w), 0, "and is then full");
    is_int(pl_ring_write(&w, 1, buf, 8, NULL, 0), -1, "a full ring refuses "
           "even a small record");
    is_int(pl_ring_read(&r, &type, got, sizeof(got), &len), 1,
           "the consumer reads one");
    is_int(pl_ring_write(&w, 1, buf, 120, NULL, 0), 0,
           "then the producer can write again");
    is_int(pl_ring_write(&w, 1, buf, 0, NULL, 0), -1, "but no more");
}


static void
test_oversized(void)
{
    static _Alignas(pl_ring_shared_t) uint64_t
                     mem[(sizeof(pl_ring_shared_t) + SMALL) / 8];
    pl_ring_t        w, r;
    uint8_t          buf[1024] = { 0 }, got[16];
    uint32_t         type, len;

    pl_ring_init(&w, mem, SMALL);
    pl_ring_attach_consumer(&r, mem, SMALL);

    is_int(pl_ring_max_payload(&w), SMALL / 4 - 8, "largest payload is a "
           "quarter of the ring minus the header");
    is_int(pl_ring_write(&w, 1, buf, SMALL / 4 - 8, NULL, 0), 0,
           "the largest payload fits");
    is_int(pl_ring_write(&w, 1, buf, SMALL / 4 - 8, buf, 1), -1,
           "one byte more is refused on a ring with room");
    is_int(pl_ring_read(&r, &type, got, sizeof(got), &len), -2,
           "a record larger than the reader's buffer is reported");
    is_int(pl_ring_read(&r, &type, buf, sizeof(buf), &len), 1,
           "and stays in place for a larger buffer");
}


static void
test_corruption(void)
{
    static _Alignas(pl_ring_shared_t) uint64_t
                     mem[(sizeof(pl_ring_shared_t) + SMALL) / 8];
    pl_ring_t        w, r;
    pl_ring_shared_t *sh = (pl_ring_shared_t *) mem;
    uint8_t          buf[64] = { 0 }, got[1024];
    uint8_t         *data = (uint8_t *) mem + sizeof(pl_ring_shared_t);
    uint32_t         type, len, v;

    pl_ring_init(&w, mem, SMALL);
    pl_ring_attach_consumer(&r, mem, SMALL);

    atomic_store(&sh->head, SMALL + 8);
    is_int(pl_ring_read(&r, &type, got, sizeof(got), &len), -1,
           "head more than a ring ahead of tail is corrupt");

    atomic_store(&sh->head, 12);
    is_int(pl_ring_read(&r, &type, got, sizeof(got), &len), -1,
           "head not a multiple of 8 is corrupt");

    pl_ring_init(&w, mem, SMALL);
    pl_ring_attach_consumer(&r, mem, SMALL);
    pl_ring_write(&w, 1, buf, 16, NULL, 0);
    v = 0;
    memcpy(data, &v, 4);
    is_int(pl_ring_read(&r, &type, got, sizeof(got), &len), -1,
           "a record length of 0 is corrupt");
    v = 64;
    memcpy(data, &v, 4);
    is_int(pl_ring_read(&r, &type, got, sizeof(got), &len), -1,
           "a record longer than what was published is corrupt");
    v = 20;
    memcpy(data, &v, 4);
    is_int(pl_ring_read(&r, &type, got, sizeof(got), &len), -1,
           "a record length not a multiple of 8 is corrupt");
    v = 24;
    memcpy(data, &v, 4);
    v = PL_RING_TYPE_PAD;
    memcpy(data + 4, &v, 4);
    is_int(pl_ring_read(&r, &type, got, sizeof(got), &len), -1,
           "a padding record that does not reach the end is corrupt");

    pl_ring_init(&w, mem, SMALL);
    atomic_store(&sh->tail, 4096);
    is_int(pl_ring_write(&w, 1, buf, 8, NULL, 0), -1,
           "the producer refuses to write when tail is ahead of head");
    is_int(pl_ring_free_bytes(&w), 0, "and sees no free space");
}


#define N_RECORDS  1000000
#define BIG        (64 * 1024)

typedef struct {
    _Atomic uint64_t  sum;
    _Atomic int       done;
} shared_result_t;


static uint64_t
mix(uint64_t a, uint64_t b)
{
    return (a ^ b) * 0x100000001b3ull + 0x9e3779b97f4a7c15ull;
}


static void
producer(void *mem, shared_result_t *res)
{
    pl_ring_t  w;
    uint8_t    buf[512];
    uint64_t   seq, sum = 0;
    uint32_t   n;

    pl_ring_attach_producer(&w, mem, BIG);

    for (seq = 0; seq < N_RECORDS; seq++) {
        n = (uint32_t) ((seq * 2654435761u) >> 7) % 300;
        memcpy(buf, &seq, 8);
        memcpy(buf + 8, &n, 4);
        fill(buf + 12, n, seq);
        while (pl_ring_write(&w, 3, buf, 12, buf + 12, n) != 0) {
            sched_yield();
        }
        sum = mix(sum, seq + n);
    }

    atomic_store(&res->sum, sum);
    atomic_store(&res->done, 1);
}


static void
test_two_processes(void)
{
    size_t            bytes = pl_ring_bytes(BIG) + sizeof(shared_result_t);
    uint8_t          *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    shared_result_t  *res = (shared_result_t *) (mem + pl_ring_bytes(BIG));
    pl_ring_t         r;
    uint8_t           got[1024];
    uint32_t          type, len, n;
    uint64_t          seq, expect = 0, sum = 0;
    int               rc, lost = 0, corrupt = 0, status;
    pid_t             pid;

    pl_ring_init(&r, mem, BIG);

    pid = fork();
    if (pid == 0) {
        producer(mem, res);
        _exit(0);
    }

    while (expect < N_RECORDS) {
        rc = pl_ring_read(&r, &type, got, sizeof(got), &len);
        if (rc == 0) {
            sched_yield();
            continue;
        }
        if (rc != 1) {
            corrupt++;
            break;
        }
        memcpy(&seq, got, 8);
        memcpy(&n, got + 8, 4);
        lost += seq != expect;
        corrupt += type != 3 || n >= 300 || len != ((12 + n + 7) & ~7u)
                   || !check(got + 12, n, seq);
        sum = mix(sum, seq + n);
        expect = seq + 1;
    }

    waitpid(pid, &status, 0);

    ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the producer process "
       "finished");
    is_int(expect, N_RECORDS, "1,000,000 records crossed between processes");
    is_int(lost, 0, "none lost or reordered");
    is_int(corrupt, 0, "none corrupted");
    ok(atomic_load(&res->done) && atomic_load(&res->sum) == sum,
       "the checksums of both sides agree");
    is_int(pl_ring_read(&r, &type, got, sizeof(got), &len), 0,
           "and nothing is left over");

    munmap(mem, bytes);
}


int
main(void)
{
    test_wrap_around();
    test_wrap_contents();
    test_full_ring();
    test_oversized();
    test_corruption();
    test_two_processes();

    return done_testing();
}
