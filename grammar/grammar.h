/*
 * grammar: structured outputs.  A request's constraint (a JSON Schema, a
 * regex, a list of choices, any JSON object, or a grammar in the EBNF
 * subset below) becomes one grammar text in that EBNF subset on the
 * request side (pl_grammar_from_*, in the nginx module), travels to the
 * engine in the SUBMIT record, and is compiled there to an automaton over
 * bytes that masks each step's logits to the tokens that keep the output
 * inside the language.
 *
 * The automaton is a DFA built lazily from a Thompson NFA (pl_grammar_t):
 * recursion in the grammar (nested JSON values, a recursive $ref) is
 * inlined up to PL_GRAMMAR_MAX_NEST levels of each rule, which bounds the
 * nesting and makes the language regular.  A DFA state then decides every
 * token of the vocabulary on its own, so the mask of a state is computed
 * once, by one walk of the vocabulary in sorted order that shares common
 * prefixes, and kept with the state: a later visit costs a lookup, and no
 * token is ever left to check at sampling time.
 *
 * The EBNF subset (the syntax of guided_grammar, and of what travels):
 *
 *   grammar  = rule { rule }         the first rule named root is the start
 *   rule     = name "::=" alts       a rule ends where the next one begins
 *   alts     = seq { "|" seq }
 *   seq      = { item }              an empty seq matches the empty string
 *   item     = atom [ "*" | "+" | "?" | "{" m [ "," [ n ] ] "}" ]
 *   atom     = '"' chars '"'         bytes; \n \r \t \" \\ \xHH (a byte)
 *                                    \uXXXX (its UTF-8)
 *            | "[" class "]"         code points, as in a regex class
 *            | "/" regex "/" [ "j" ] a JavaScript-style regex (below); with
 *                                    j, its text inside a JSON string
 *                                    (quote, backslash and control
 *                                    characters written as escapes)
 *            | name | "(" alts ")"
 *   name     = [A-Za-z_][A-Za-z0-9_-]*;  # starts a comment to the line end
 *
 * Regexes (guided_regex, JSON Schema's pattern): literals, ".", classes
 * with ranges and negation, \d \D \w \W \s \S, escapes \n \r \t \f \v \0
 * \xHH \uXXXX \u{X..}, groups ( ) and (?: ), "|", quantifiers * + ? {m}
 * {m,} {m,n} (lazy forms accepted, they match the same strings), and ^ at
 * the start and $ at the end; the match is of the whole output.  Classes
 * and "." are over Unicode code points and produce their UTF-8.
 */

#ifndef PL_GRAMMAR_H
#define PL_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#define PL_GRAMMAR_MAX_NEST     6         /* times a rule may nest in itself */
#define PL_GRAMMAR_MAX_STATES   (1 << 20) /* NFA states of one grammar */
#define PL_GRAMMAR_MAX_REPEAT   1000      /* m and n of {m,n} */
#define PL_GRAMMAR_DEAD         (-1)      /* no byte can follow */

typedef struct pl_grammar_s  pl_grammar_t;
typedef struct pl_vocab_s    pl_vocab_t;

/* A growable text; the translators write EBNF into one. */
typedef struct {
    char     *data;
    size_t    len;
    size_t    cap;
    int       oom;
} pl_gtext_t;

void pl_gtext_free(pl_gtext_t *t);


/* ---- compiling (both sides) ---- */

/* The automaton of an EBNF grammar text, or NULL with a message in err. */
pl_grammar_t *pl_grammar_compile(const char *ebnf, size_t len, char *err,
    size_t errlen);
void          pl_grammar_free(pl_grammar_t *g);

/* The DFA state before any byte. */
int32_t       pl_grammar_start(pl_grammar_t *g);

/* The state after byte b from state s, or PL_GRAMMAR_DEAD (also for a
   dead s); -2 when out of memory. */
int32_t       pl_grammar_step(pl_grammar_t *g, int32_t s, uint8_t b);

/* The state after bytes, or PL_GRAMMAR_DEAD. */
int32_t       pl_grammar_walk(pl_grammar_t *g, int32_t s, const void *bytes,
    size_t len);

/* Whether the output may end in state s. */
int           pl_grammar_accepts(const pl_grammar_t *g, int32_t s);

/* NFA states, for the benchmark and the size checks. */
size_t        pl_grammar_nfa_states(const pl_grammar_t *g);


/* ---- the request side: translators into EBNF (jansson) ---- */

/* A JSON Schema given as JSON text.  -1 with err naming what is wrong:
   an unsupported keyword is named as 'keyword' in the message. */
int pl_grammar_from_schema_text(const char *json, size_t len, pl_gtext_t *out,
    char *err, size_t errlen);
/* Any JSON object ({"type": "json_object"}). */
int pl_grammar_from_json_object(pl_gtext_t *out);
/* A regex matched against the whole output. */
int pl_grammar_from_regex(const char *re, size_t len, pl_gtext_t *out);
/* One of the strings choices[0..n). */
int pl_grammar_from_choices(const char *const *choices, const size_t *lens,
    size_t n, pl_gtext_t *out);


/* ---- the engine side: token masks ---- */

/*
 * The byte string of every token id, from a Hugging Face tokenizer.json
 * (byte-level BPE, or SentencePiece pieces with ▁ and <0xHH> byte
 * fallback).  Special added tokens have no bytes: the grammar never
 * allows them; the end-of-sequence ids are allowed exactly where the
 * grammar accepts.  n_ids: the model's vocabulary size (ids past the
 * tokenizer's are padding, never allowed).
 */
pl_vocab_t   *pl_vocab_load(const char *tokenizer_json, uint32_t n_ids,
    const int32_t *eos, int n_eos, char *err, size_t errlen);
void          pl_vocab_free(pl_vocab_t *v);
uint32_t      pl_vocab_size(const pl_vocab_t *v);

/* token's bytes (NULL, 0 for a special or padding id) */
const uint8_t *pl_vocab_bytes(const pl_vocab_t *v, int32_t id, size_t *len);

/*
 * The allowed ids after state s, as a bitset of pl_vocab_size() bits
 * (bit i of word i / 64), computed at the state's first visit and kept
 * with it; NULL when out of memory.  A grammar serves one vocabulary.
 */
const uint64_t *pl_grammar_mask(pl_grammar_t *g, const pl_vocab_t *v,
    int32_t s);

/* The state after token id from s: its bytes walked, or, for an eos id,
   s itself where s accepts; PL_GRAMMAR_DEAD when id is not allowed. */
int32_t       pl_grammar_advance(pl_grammar_t *g, const pl_vocab_t *v,
    int32_t s, int32_t id);

#endif /* PL_GRAMMAR_H */
