/*
 * philox: the Philox-4x32-10 counter-based generator (Salmon, Moraes,
 * Dror and Shaw, "Parallel Random Numbers: As Easy as 1, 2, 3", SC 2011),
 * for C and for CUDA device code alike.
 *
 * A counter-based generator has no state to carry: the output is a keyed
 * bijection of the counter, so any thread may compute the random number of
 * (key, counter) on its own, in any order, and the CPU gets the same bits
 * as the GPU.  Sampling keys it with the sequence's seed and counts with
 * (token position, vocabulary id).
 *
 * Ten rounds; each multiplies two of the four words by a constant, keeps
 * both halves of the 64-bit products and mixes them with the other two
 * words and the key (a Feistel-like permutation); the key is bumped by
 * two Weyl constants between rounds.
 */

#ifndef PL_PHILOX_H
#define PL_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define PL_HOSTDEV  __host__ __device__
#else
#define PL_HOSTDEV
#endif

#define PL_PHILOX_M0  0xd2511f53u
#define PL_PHILOX_M1  0xcd9e8d57u
#define PL_PHILOX_W0  0x9e3779b9u          /* golden ratio */
#define PL_PHILOX_W1  0xbb67ae85u          /* sqrt(3) - 1 */

typedef struct {
    uint32_t  v[4];
} pl_philox_ctr_t;


static inline PL_HOSTDEV void
pl_philox_round(uint32_t *c, const uint32_t *k)
{
    uint64_t  p0 = (uint64_t) PL_PHILOX_M0 * c[0];
    uint64_t  p1 = (uint64_t) PL_PHILOX_M1 * c[2];
    uint32_t  hi0 = (uint32_t) (p0 >> 32), lo0 = (uint32_t) p0;
    uint32_t  hi1 = (uint32_t) (p1 >> 32), lo1 = (uint32_t) p1;

    c[0] = hi1 ^ c[1] ^ k[0];
    c[1] = lo1;
    c[2] = hi0 ^ c[3] ^ k[1];
    c[3] = lo0;
}


/* The four output words of Philox-4x32-10 for counter ctr and key. */
static inline PL_HOSTDEV pl_philox_ctr_t
pl_philox4x32_10(pl_philox_ctr_t ctr, uint32_t key0, uint32_t key1)
{
    uint32_t  k[2] = { key0, key1 };
    int       r;

    for (r = 0; r < 10; r++) {
        if (r > 0) {
            k[0] += PL_PHILOX_W0;
            k[1] += PL_PHILOX_W1;
        }
        pl_philox_round(ctr.v, k);
    }

    return ctr;
}


/*
 * A uniform float in (0, 1) from one output word: the top 23 bits pick
 * one of 2^23 equal cells and u is its centre, (2j + 1) / 2^24.  Both u
 * and 1 - u are exact floats, never 0 nor 1, so -ln(u) is finite and
 * positive without a special case.
 */
static inline PL_HOSTDEV float
pl_philox_u01(uint32_t x)
{
    return (float) ((x >> 9) * 2u + 1u) * 0x1p-24f;
}

#endif /* PL_PHILOX_H */
