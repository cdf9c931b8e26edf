/*
 * gr_vocab: the vocabulary as the grammar sees it: each token id's bytes
 * in one blob, and the ids that have bytes in byte order with each one's
 * common prefix with the one before (what the mask walk in gr_dfa.c
 * shares).  Filled by gr_vocab.c from tokenizer.json, or by
 * pl_vocab_from_bytes() for tests and benchmarks.
 */

#ifndef PL_GR_VOCAB_H
#define PL_GR_VOCAB_H

#include <stdint.h>

#include "grammar.h"

#define GR_VOCAB_MAX_TOKEN  1024     /* bytes of one token; longer: never */

struct pl_vocab_s {
    uint32_t    n_ids;          /* the model's vocabulary */
    uint8_t    *blob;
    uint32_t   *off;            /* n_ids + 1 offsets into blob */
    uint32_t   *sorted;         /* ids with bytes, in byte order */
    uint16_t   *lcp;            /* with the id before in sorted */
    uint32_t    n_sorted;
    int32_t     eos[8];
    int         n_eos;
};

/* a vocabulary from each id's bytes (lens[i] == 0: none) */
pl_vocab_t *pl_vocab_from_bytes(const uint8_t *const *bytes,
    const uint32_t *lens, uint32_t n_ids, const int32_t *eos, int n_eos);

#endif /* PL_GR_VOCAB_H */
