/*
 * bench/blockmap: what publishing the live KV block map costs the engine.
 *
 *   blockmap [WORKERS]
 *
 * For pools of 2 048 (the tiny model's CPU default), 16 384 and 131 072
 * blocks, 90% held by sequences of 1 024 tokens (64 blocks each), it times
 * what the engine does per publication (block_map.h): one build from the
 * block manager and the running queue, then one seqlocked copy into each
 * of WORKERS regions (default 4).  The engine publishes at most every
 * PL_BMAP_INTERVAL_MS while requests run, so the share of the serving
 * loop is the time per publication over that interval; it is printed
 * beside the time.  The best of 200 rounds is taken.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_clock.h"
#include "pl_cli.h"
#include "block_manager.h"
#include "block_map.h"
#include "scheduler.h"
#include "sequence.h"

#define SEQ_TOKENS  1024
#define ROUNDS      200

/* Sequences holding 90% of bm's blocks, on sc's running queue. */
static int
fill_pool(pl_block_manager_t *bm, pl_scheduler_t *sc)
{
    int        i, n = bm->num_blocks * 9 / 10 / (SEQ_TOKENS / 16);
    pl_seq_t  *s, *prev = NULL;

    for (i = 0; i < n; i++) {
        s = pl_seq_create((uint64_t) i + 1, NULL, 0, SEQ_TOKENS);
        if (s == NULL || pl_bm_ensure(bm, &s->blocks, SEQ_TOKENS) != 0) {
            return -1;
        }
        s->leader = s;
        s->n_tokens = SEQ_TOKENS;
        s->prev = prev;
        if (prev) {
            prev->next = s;
        } else {
            sc->running.head = s;
        }
        sc->running.tail = s;
        sc->running.n++;
        prev = s;
    }

    return n;
}


static int
bench_pool(int num_blocks, int workers)
{
    pl_block_manager_t   bm;
    pl_scheduler_t       sc;
    pl_block_map_t       m;
    pl_bmap_hdr_t      **regions;
    double               t, best = 1e9;
    int                  i, r, seqs;

    memset(&sc, 0, sizeof(sc));
    if (pl_bm_init(&bm, num_blocks, 16) != 0
        || pl_bm_enable_caching(&bm) != 0
        || (seqs = fill_pool(&bm, &sc)) < 0
        || pl_block_map_init(&m, &bm) != 0)
    {
        fprintf(stderr, "blockmap: out of memory\n");
        return -1;
    }

    regions = calloc((size_t) workers, sizeof(*regions));
    for (i = 0; i < workers; i++) {
        regions[i] = aligned_alloc(64, (m.bytes + 63) / 64 * 64);
        if (regions[i] == NULL) {
            fprintf(stderr, "blockmap: out of memory\n");
            return -1;
        }
        memset(regions[i], 0, m.bytes);
    }

    for (r = 0; r < ROUNDS; r++) {
        t = bench_now_s();
        pl_block_map_build(&m, &bm, &sc, (uint64_t) r);
        for (i = 0; i < workers; i++) {
            pl_bmap_publish(regions[i], m.map, m.bytes);
        }
        t = bench_now_s() - t;
        best = t < best ? t : best;
    }

    printf("%8d blocks %5d requests %4d workers  %8.1f us/publication  "
           "%6.3f%% of the loop at %d ms  (%u owners, %u past the table)\n",
           num_blocks, seqs, workers, best * 1e6,
           best * 1e5 / PL_BMAP_INTERVAL_MS, PL_BMAP_INTERVAL_MS,
           m.map->n_owners, m.map->owners_dropped);

    for (i = 0; i < workers; i++) {
        free(regions[i]);
    }
    free(regions);
    pl_block_map_free(&m);

    return 0;
}


static const char  usage_text[] =
"usage: blockmap [WORKERS]\n"
"  the block map's publication into WORKERS regions (default 4) for pools\n"
"  of 2,048, 16,384 and 131,072 blocks: time per publication\n"
"  --help      this text\n"
"  --version   the version\n";


int
main(int argc, char **argv)
{
    static const int  pools[] = { 2048, 16384, 131072 };
    int               workers = 4;
    size_t            i;
    char             *end;

    pl_cli_standard(argc, argv, "blockmap", usage_text);
    if (argc > 2) {
        return pl_cli_error("blockmap", "unexpected argument '%s'", argv[2]);
    }
    if (argc > 1) {
        if (argv[1][0] == '-') {
            return pl_cli_error("blockmap", "unknown option '%s'", argv[1]);
        }
        workers = (int) strtol(argv[1], &end, 10);
        if (*end != '\0' || workers < 1 || workers > 1024) {
            return pl_cli_error("blockmap", "WORKERS '%s' is not in 1..1024",
                                argv[1]);
        }
    }

    for (i = 0; i < sizeof(pools) / sizeof(pools[0]); i++) {
        if (bench_pool(pools[i], workers) != 0) {
            return 1;
        }
    }

    return 0;
}
