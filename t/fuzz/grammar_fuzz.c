/*
 * grammar_fuzz: a libFuzzer target for the EBNF subset of grammar.h
 * (guided_grammar, and every grammar text that travels in a SUBMIT
 * record) through grammar/gr_parse.c, gr_nfa.c and gr_dfa.c.  Each input
 * is a grammar text: pl_grammar_compile() refuses it with a message or
 * compiles it, and a compiled one gets the automaton checks of
 * fuzz_grammar.h on three strings sampled with the input's bytes as the
 * choices (viable states, a sample accepted when walked again, token
 * masks equal to one-token advances).  No reference matcher for the EBNF
 * exists in C; the regex and schema targets compare what they can.
 *
 *     make fuzz-grammar SECONDS=60
 */

#include <stdint.h>
#include <stdlib.h>

#include "fuzz_grammar.h"


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t  out[FG_MAX_SAMPLE];
    fg_rand_t       r = { data, size };
    pl_grammar_t   *g;
    char            err[256];
    int             k;

    err[0] = '\0';
    g = pl_grammar_compile((const char *) data, size, err, sizeof(err));
    if (g == NULL) {
        if (err[0] == '\0') {
            fg_fail("a grammar refused without a message");
        }
        return 0;
    }
    for (k = 0; k < 3; k++) {
        fg_sample(g, &r, 256, k == 0 ? 4 : 0, out);
    }
    pl_grammar_free(g);

    return 0;
}
