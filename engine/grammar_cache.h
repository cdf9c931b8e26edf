/*
 * grammar_cache: structured outputs in the engine.  The compiled
 * grammars (grammar/grammar.h) of live requests, shared by every request
 * that sends the same grammar text, so the DFA states and token masks one
 * request built serve the next; up to PL_GRAMMAR_CACHE_IDLE grammars no
 * request uses are kept for later ones, the least recently used dropped
 * first (at the next take).  A DFA state costs 1 KiB of transitions and,
 * once masked, vocabulary / 8 bytes (16 KiB for Llama 3's): a schema's
 * outputs visit a few hundred to a few thousand states.
 *
 * And the vocabulary's byte strings, read from the model's tokenizer.json
 * at start (0.7 to 1.2 s for Llama 3's 128k tokens on the 2-core
 * development machine, which would stall every stream if the first
 * request with a grammar paid it).
 */

#ifndef PL_GRAMMAR_CACHE_H
#define PL_GRAMMAR_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "grammar.h"

#define PL_GRAMMAR_CACHE_IDLE  8

typedef struct pl_shared_grammar_s  pl_shared_grammar_t;

struct pl_shared_grammar_s {
    uint64_t               hash;        /* of text */
    char                  *text;
    size_t                 len;
    pl_grammar_t          *g;
    int                    refs;        /* sequences using it */
    uint64_t               used;        /* last taken, in takes */
    pl_shared_grammar_t   *next;
};

typedef struct {
    pl_vocab_t            *vocab;       /* NULL: no structured outputs */
    char                   why[256];    /* then the reason */
    pl_shared_grammar_t   *list;
    uint64_t               takes;
} pl_grammar_cache_t;

/* The vocabulary of tokenizer_json (n_ids ids, eos ids); a tokenizer it
   cannot read is logged, and leaves structured outputs refused. */
void pl_grammar_cache_init(pl_grammar_cache_t *c, const char *tokenizer_json,
    uint32_t n_ids, const int32_t *eos, int n_eos);

/*
 * The compiled grammar of text with one more reference, compiled when no
 * entry has it.  NULL with err when text does not compile, there is no
 * vocabulary, or memory is short.
 */
pl_shared_grammar_t *pl_grammar_cache_take(pl_grammar_cache_t *c,
    const char *text, size_t len, char *err, size_t errlen);

/* One reference less (g may be NULL); the next take trims the idle. */
static inline void
pl_grammar_unref(pl_shared_grammar_t *g)
{
    if (g != NULL) {
        g->refs--;
    }
}

void pl_grammar_cache_destroy(pl_grammar_cache_t *c);

#endif /* PL_GRAMMAR_CACHE_H */
