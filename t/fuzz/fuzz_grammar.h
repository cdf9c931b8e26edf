/*
 * fuzz_grammar.h: the checks the grammar targets (schema, regex, grammar)
 * share on a compiled automaton, beyond "no crash":
 *
 *   - every state a walk reaches is viable: it accepts, or some byte
 *     leads to a live state (the NFA's live marking promises that);
 *   - strings of the language, sampled by a walk whose byte choices come
 *     from the fuzzer's input and completed by the shortest way to an
 *     accepting state, walk again from the start to an accepting state;
 *   - the token mask of a state (pl_grammar_mask, its walk of the sorted
 *     vocabulary sharing prefixes) allows exactly the ids that
 *     pl_grammar_advance, one token at a time, does not kill, over the
 *     tiny model's vocabulary ($PAGEDLLM_BUILD/models/tiny).
 *
 * A failed check aborts, which libFuzzer reports as a crash.
 */

#ifndef PL_FUZZ_GRAMMAR_H
#define PL_FUZZ_GRAMMAR_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"

#define FG_NOMEM        (-2)      /* pl_grammar_step out of memory */
#define FG_MAX_SAMPLE   4096      /* bytes of one sampled string */
#define FG_MAX_BFS      256       /* DFA states a completion may visit */
#define FG_TINY_IDS     520       /* the tiny model's vocabulary */
#define FG_TINY_EOS     511

/* the input's bytes as a source of choices (0 once used up) */
typedef struct {
    const uint8_t  *p;
    size_t          n;
} fg_rand_t;

static pl_vocab_t  *fg_vocab;


static unsigned
fg_take(fg_rand_t *r)
{
    if (r->n == 0) {
        return 0;
    }
    r->n--;

    return *r->p++;
}


static void
fg_fail(const char *what)
{
    fprintf(stderr, "fuzz_grammar: %s\n", what);
    abort();
}


/* the tiny model's vocabulary, for the mask check */
int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char  *build = getenv("PAGEDLLM_BUILD");
    char         path[1024], err[256];
    int32_t      eos = FG_TINY_EOS;

    (void) argc;
    (void) argv;

    snprintf(path, sizeof(path), "%s/models/tiny/tokenizer.json",
             build ? build : "build");
    fg_vocab = pl_vocab_load(path, FG_TINY_IDS, &eos, 1, err, sizeof(err));
    if (fg_vocab == NULL) {
        fprintf(stderr, "fuzz_grammar: %s: %s\n", path, err);
        abort();
    }

    return 0;
}


/* the bytes allowed after s into out; their count, -1 when out of memory */
static int
fg_allowed(pl_grammar_t *g, int32_t s, uint8_t *out)
{
    int      b, n = 0;
    int32_t  to;

    for (b = 0; b < 256; b++) {
        to = pl_grammar_step(g, s, (uint8_t) b);
        if (to == FG_NOMEM) {
            return -1;
        }
        if (to >= 0) {
            out[n++] = (uint8_t) b;
        }
    }
    if (n == 0 && !pl_grammar_accepts(g, s)) {
        fg_fail("a live state neither accepts nor continues");
    }

    return n;
}


/* mask(s) against advance(s, id) for every id */
static void
fg_check_mask(pl_grammar_t *g, int32_t s)
{
    const uint64_t  *m = pl_grammar_mask(g, fg_vocab, s);
    int32_t          id;
    int              bit, live;

    if (m == NULL) {
        return;
    }
    for (id = 0; id < FG_TINY_IDS; id++) {
        bit = (m[id / 64] >> (id % 64)) & 1;
        live = pl_grammar_advance(g, fg_vocab, s, id) >= 0;
        if (bit != live) {
            fprintf(stderr, "fuzz_grammar: state %d, id %d: mask %d, "
                    "advance %d\n", (int) s, (int) id, bit, live);
            abort();
        }
    }
}


/*
 * The shortest bytes from s to an accepting state, appended to out at
 * *len (breadth first over DFA states, ids dense from 0); 0, or -1 when
 * more than FG_MAX_BFS states or the room in out would be needed.
 */
static int
fg_complete(pl_grammar_t *g, int32_t s, uint8_t *out, size_t *len,
    size_t cap)
{
    int32_t   queue[FG_MAX_BFS], from[FG_MAX_BFS], *seen = NULL, to, at;
    uint8_t   by[FG_MAX_BFS], path[FG_MAX_BFS];
    size_t    n_seen = 0, head = 0, tail = 0, k;
    int       b, rc = -1;

    queue[tail] = s;
    from[tail++] = -1;

    while (head < tail) {
        at = queue[head];
        if (pl_grammar_accepts(g, at)) {
            for (k = 0, to = (int32_t) head; from[to] >= 0; to = from[to]) {
                path[k++] = by[to];
            }
            if (*len + k > cap) {
                break;
            }
            while (k > 0) {
                out[(*len)++] = path[--k];
            }
            rc = 0;
            break;
        }
        for (b = 0; b < 256; b++) {
            to = pl_grammar_step(g, at, (uint8_t) b);
            if (to < 0) {
                continue;
            }
            if ((size_t) to >= n_seen) {
                int32_t  *p = realloc(seen, ((size_t) to + 1) * 2
                                            * sizeof(int32_t));
                if (p == NULL) {
                    goto done;
                }
                memset(p + n_seen, 0, (((size_t) to + 1) * 2 - n_seen)
                                      * sizeof(int32_t));
                seen = p;
                n_seen = ((size_t) to + 1) * 2;
            }
            if (seen[to] || to == s) {
                continue;
            }
            if (tail == FG_MAX_BFS) {
                goto done;
            }
            seen[to] = 1;
            queue[tail] = to;
            from[tail] = (int32_t) head;
            by[tail++] = (uint8_t) b;
        }
        head++;
    }

done:

    free(seen);

    return rc;
}


/*
 * A string of g's language into out (at most FG_MAX_SAMPLE bytes): a walk
 * of up to `steps` bytes chosen by r (stopping early where the state
 * accepts and r says so), then the shortest completion.  Every state on
 * the way is checked viable; the first `masks` states' masks are checked.
 * Its length, or -1 when no sample was made (memory, a completion too
 * far).
 */
static long
fg_sample(pl_grammar_t *g, fg_rand_t *r, size_t steps, int masks,
    uint8_t *out)
{
    uint8_t  allowed[256];
    int32_t  s = pl_grammar_start(g);
    size_t   len = 0;
    int      n;

    while (len < steps) {
        if (masks-- > 0) {
            fg_check_mask(g, s);
        }
        n = fg_allowed(g, s, allowed);
        if (n < 0) {
            return -1;
        }
        if (n == 0 || (pl_grammar_accepts(g, s) && fg_take(r) % 4 == 0)) {
            break;
        }
        out[len++] = allowed[fg_take(r) % (unsigned) n];
        s = pl_grammar_step(g, s, out[len - 1]);
        if (s < 0) {
            fg_fail("an allowed byte led to a dead state");
        }
    }

    if (fg_complete(g, s, out, &len, FG_MAX_SAMPLE) != 0) {
        return -1;
    }
    if (!pl_grammar_accepts(g, pl_grammar_walk(g, pl_grammar_start(g), out,
                                                len)))
    {
        fg_fail("a sampled string is not accepted when walked again");
    }

    return (long) len;
}

#endif /* PL_FUZZ_GRAMMAR_H */
