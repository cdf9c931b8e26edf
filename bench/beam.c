/*
 * bench/beam: the host's share of a beam-search iteration: every beam's
 * row of logits through pl_beam_row (log-softmax normalizer and best
 * candidates over the whole vocabulary), one row after another on one
 * core, then the rows spread over every core as the engine scores them
 * (engine_beam.c).
 *
 *   build/bench/beam
 *
 * Vocabulary 32,000 (Llama-2's), 9 groups of width 6 (54 beams, about
 * what the paper's beam runs carried per iteration on the H200).
 */

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_clock.h"
#include "pl_cli.h"
#include "beam.h"

#define VOCAB   32000
#define GROUPS  9
#define WIDTH   6
#define ROUNDS  20

static const char  usage_text[] =
"usage: beam [--help | --version]\n"
"  time a beam-search iteration's host work: 54 rows of 32,000 logits\n"
"  through pl_beam_row on one core, then over every core\n"
"  --help      this text\n"
"  --version   the version\n";


/* Seconds an iteration's rows take over threads cores. */
static double
iteration(pl_beam_t **groups, const float *logits, int threads)
{
    int     r, i, rows = GROUPS * WIDTH;
    double  t0 = bench_now_s();

    for (r = 0; r < ROUNDS; r++) {
        #pragma omp parallel for schedule(static) num_threads(threads)
        for (i = 0; i < rows; i++) {
            pl_beam_row(groups[i / WIDTH], i % WIDTH,
                        logits + (size_t) i * VOCAB, VOCAB, 5);
        }
    }

    return (bench_now_s() - t0) / ROUNDS;
}


int
main(int argc, char **argv)
{
    pl_beam_t  *groups[GROUPS];
    float      *logits;
    int32_t     eos = 2;
    int         g, i, cores = omp_get_num_procs();
    double      one, all;

    pl_cli_standard(argc, argv, "beam", usage_text);
    if (argc > 1) {
        return pl_cli_error("beam", argv[1][0] == '-'
                                    ? "unknown option '%s'"
                                    : "unexpected argument '%s'", argv[1]);
    }

    logits = malloc((size_t) GROUPS * WIDTH * VOCAB * sizeof(float));
    if (logits == NULL) {
        return 1;
    }
    srand(1);
    for (i = 0; i < GROUPS * WIDTH * VOCAB; i++) {
        logits[i] = (float) rand() / RAND_MAX * 8 - 4;
    }
    for (g = 0; g < GROUPS; g++) {
        groups[g] = pl_beam_create(WIDTH, 1.0f, 1, 100, 0, &eos, 1);
        if (groups[g] == NULL) {
            return 1;
        }
    }

    one = iteration(groups, logits, 1);
    all = iteration(groups, logits, cores);

    printf("beam rows: %d beams x %d ids\n", GROUPS * WIDTH, VOCAB);
    printf("  1 core     %8.2f ms an iteration (%.0f us a row)\n",
           one * 1e3, one * 1e6 / (GROUPS * WIDTH));
    printf("  %d cores  %8.2f ms an iteration (%.1fx)\n", cores, all * 1e3,
           one / all);

    for (g = 0; g < GROUPS; g++) {
        pl_beam_free(groups[g]);
    }
    free(logits);

    return 0;
}
