/*
 * pl_regex: the regular expression subset that tokenizer.json files use
 * (Oniguruma syntax as the Rust tokenizers crate sees it), compiled to a
 * small backtracking program over UTF-8 text.
 *
 * Supported: literals and escapes (\n \r \t \f \v \a \e \xHH \x{H} \uHHHH),
 * ., classes [...] with ranges, negation and nested classes, \p{..} \P{..}
 * for general categories (and Alphabetic, White_Space), \s \S \d \D \w \W
 * \h \H, groups (...) (?:...) (?i:...) (?i) (?<name>...), lookahead (?=...)
 * (?!...), alternation, greedy and lazy * + ? {n} {n,} {n,m}, anchors ^ $
 * \A \z \Z \b \B.  Case-insensitive matching folds ASCII only.  Anything
 * else (lookbehind, atomic groups, possessive quantifiers, scripts,
 * backreferences) is refused at compile time with a message naming it.
 */

#ifndef PL_REGEX_H
#define PL_REGEX_H

#include <stddef.h>
#include <stdint.h>

typedef struct pl_regex_s  pl_regex_t;

/* Backtracking stack, owned by the caller (one per encode call). */
typedef struct {
    size_t  *data;
    size_t   n;
    size_t   cap;
} pl_regex_stack_t;

pl_regex_t *pl_regex_compile(const char *pattern, size_t len, char *err,
    size_t errlen);
void pl_regex_free(pl_regex_t *re);

/*
 * Leftmost match in the valid UTF-8 text s[len] starting the search at
 * byte offset from: 1 with the match in [*mstart, *mend), 0 when none,
 * -1 when out of memory.  Empty matches are reported like any other.
 */
int pl_regex_search(const pl_regex_t *re, const char *s, size_t len,
    size_t from, size_t *mstart, size_t *mend, pl_regex_stack_t *stack);

#endif /* PL_REGEX_H */
