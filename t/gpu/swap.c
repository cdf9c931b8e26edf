/*
 * The CUDA backend's KV block moves (kernels/kv_moves.cu): copy on the
 * compute stream, pinned host memory, and swaps on a stream of their own
 * that must still see every operation queued before them and be seen by
 * every operation queued after them.
 *
 * A device buffer of random chunks is swapped out to pinned host memory
 * right after an operation on the compute stream rewrote one of the
 * chunks (the swap must copy the new bytes), the device buffer is then
 * overwritten on the compute stream (which must wait for the swap-out),
 * the chunks come back in reverse order into other places (swap-in), and
 * a copy on the compute stream queued after it moves one chunk again
 * (which must see the swapped-in bytes).  Nothing synchronises between
 * the calls except what the backend itself orders.
 *
 * copy_blocks (a step's copy-on-write blocks over every layer in one
 * launch) moves blocks within each of more caches than one launch takes,
 * more blocks than one launch takes, leaving every other block alone.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pair.h"

#define CHUNKS  64
#define CHUNK   (256 * 1024)

#define CACHES  (2 * 80)        /* an 80-layer model's K and V */
#define BLOCKS  512             /* blocks in each cache */
#define BLOCK   2048            /* bytes a block: 1 token x 8 heads x 128 */
#define MOVES   200


/* copy_blocks over CACHES caches: blocks 0..MOVES-1 to blocks
   BLOCKS-MOVES.. in reverse, checked against the same moves on the host */
static void
check_copy_blocks(pl_backend_t *be)
{
    size_t    bytes = (size_t) CACHES * BLOCKS * BLOCK;
    uint8_t  *want = malloc(bytes), *back = malloc(bytes), *dev;
    void     *base[CACHES];
    int32_t   src[MOVES], dst[MOVES];
    size_t    i;
    int       c, k;

    if (!ok(be->copy_blocks != NULL, "it has copy_blocks")
        || !ok(want && back && (dev = be->alloc(be, bytes)), "memory"))
    {
        free(want);
        free(back);
        return;
    }
    for (i = 0; i < bytes; i++) {
        want[i] = (uint8_t) pair_next();
    }
    be->upload(be, dev, want, bytes);
    for (c = 0; c < CACHES; c++) {
        base[c] = dev + (size_t) c * BLOCKS * BLOCK;
    }
    for (k = 0; k < MOVES; k++) {
        src[k] = k;
        dst[k] = BLOCKS - 1 - k;
    }
    be->copy_blocks(be, base, CACHES, BLOCK, src, dst, MOVES);
    be->download(be, back, dev, bytes);

    for (c = 0; c < CACHES; c++) {
        for (k = 0; k < MOVES; k++) {
            memcpy(want + ((size_t) c * BLOCKS + dst[k]) * BLOCK,
                   want + ((size_t) c * BLOCKS + src[k]) * BLOCK, BLOCK);
        }
    }
    ok(memcmp(back, want, bytes) == 0,
       "copy_blocks: %d blocks in each of %d caches, every other block "
       "unchanged", MOVES, CACHES);

    be->free(be, dev);
    free(want);
    free(back);
}


int
main(void)
{
    pl_backend_t  *be;
    uint8_t       *want, *back, *host, *dev, *zero;
    void          *dst[CHUNKS];
    const void    *src[CHUNKS];
    char           err[256];
    size_t         total = (size_t) CHUNKS * CHUNK, i;
    int            c, bad;

    pair_seed();
    be = pl_backend_cuda_create(0, err, sizeof(err));
    if (!ok(be != NULL, "the CUDA backend starts")) {
        diag("%s", err);
        return done_testing();
    }
    if (!ok(be->swap != NULL && be->alloc_host != NULL && be->copy != NULL,
            "it has swap, pinned host memory and copy"))
    {
        return done_testing();
    }

    want = malloc(total);
    back = malloc(total);
    zero = calloc(1, total);
    host = be->alloc_host(be, total);
    dev = be->alloc(be, 2 * total);
    if (!ok(want && back && zero && host && dev, "memory")) {
        return done_testing();
    }
    for (i = 0; i < total; i++) {
        want[i] = (uint8_t) pair_next();
    }
    memset(host, 0xa5, total);

    /* chunks 0..N-1 in the first half; chunk 0's final bytes come from
       the second half through a copy queued just before the swap-out */
    be->upload(be, dev, want, total);
    be->upload(be, dev + total, want, CHUNK);
    be->upload(be, dev, zero, CHUNK);
    be->copy(be, dev, dev + total, CHUNK);

    for (c = 0; c < CHUNKS; c++) {
        dst[c] = host + (size_t) c * CHUNK;
        src[c] = dev + (size_t) c * CHUNK;
    }
    be->swap(be, dst, src, CHUNKS, CHUNK, 1);

    /* the compute stream overwrites what was just swapped out */
    be->upload(be, dev, zero, total);

    /* swap back in, chunk c into slot N-1-c of the first half */
    for (c = 0; c < CHUNKS; c++) {
        dst[c] = dev + (size_t) (CHUNKS - 1 - c) * CHUNK;
        src[c] = host + (size_t) c * CHUNK;
    }
    be->swap(be, dst, src, CHUNKS, CHUNK, 0);

    /* queued after the swap-in: must copy the swapped-in chunk N-1
       (= original chunk 0) */
    be->copy(be, dev + total, dev + (size_t) (CHUNKS - 1) * CHUNK, CHUNK);

    be->download(be, back, dev, total);
    bad = 0;
    for (c = 0; c < CHUNKS; c++) {
        bad += memcmp(back + (size_t) (CHUNKS - 1 - c) * CHUNK,
                      want + (size_t) c * CHUNK, CHUNK) != 0;
    }
    ok(bad == 0, "%d chunks out and back in, reversed: %d differ", CHUNKS,
       bad);
    be->download(be, back, dev + total, CHUNK);
    ok(memcmp(back, want, CHUNK) == 0,
       "the swap-out saw the copy queued before it, and the copy queued "
       "after the swap-in saw its bytes");
    ok(memcmp(host, want, total) == 0,
       "pinned host memory holds every chunk as swapped out");

    check_copy_blocks(be);

    be->free(be, dev);
    be->free_host(be, host);
    be->destroy(be);
    free(want);
    free(back);
    free(zero);
    return done_testing();
}
