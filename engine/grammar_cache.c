/*
 * grammar_cache: compiled grammars shared by request, kept while used and
 * a while after (see grammar_cache.h).  A list, searched by hash: a
 * handful of distinct grammars are live at once, and compiling one costs
 * far more than walking it.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_cache.h"
#include "engine.h"
#include "pl_proto.h"


static void
pl_grammar_entry_free(pl_shared_grammar_t *e)
{
    pl_grammar_free(e->g);
    free(e->text);
    free(e);
}


/* the idle entries past PL_GRAMMAR_CACHE_IDLE, oldest first, freed */
static void
pl_grammar_cache_trim(pl_grammar_cache_t *c)
{
    pl_shared_grammar_t  **pp, **oldest, *e;
    int                    idle;

    for ( ;; ) {
        idle = 0;
        oldest = NULL;
        for (pp = &c->list; *pp; pp = &(*pp)->next) {
            if ((*pp)->refs == 0) {
                idle++;
                if (oldest == NULL || (*pp)->used < (*oldest)->used) {
                    oldest = pp;
                }
            }
        }
        if (idle <= PL_GRAMMAR_CACHE_IDLE) {
            return;
        }
        e = *oldest;
        *oldest = e->next;
        pl_grammar_entry_free(e);
    }
}


void
pl_grammar_cache_init(pl_grammar_cache_t *c, const char *tokenizer_json,
    uint32_t n_ids, const int32_t *eos, int n_eos)
{
    memset(c, 0, sizeof(*c));
    c->vocab = pl_vocab_load(tokenizer_json, n_ids, eos, n_eos, c->why,
                             sizeof(c->why));
    if (c->vocab == NULL) {
        pl_log(PL_LOG_WARN, "structured outputs are off: the vocabulary's "
               "bytes cannot be read (%s)", c->why);
    }
}


pl_shared_grammar_t *
pl_grammar_cache_take(pl_grammar_cache_t *c, const char *text, size_t len,
    char *err, size_t errlen)
{
    pl_shared_grammar_t  *e;
    uint64_t              h = pl_fnv1a64(text, len);

    pl_grammar_cache_trim(c);

    if (c->vocab == NULL) {
        snprintf(err, errlen, "structured outputs are off on this engine: "
                 "%s", c->why);
        return NULL;
    }

    for (e = c->list; e; e = e->next) {
        if (e->hash == h && e->len == len && memcmp(e->text, text, len) == 0)
        {
            e->refs++;
            e->used = ++c->takes;
            return e;
        }
    }

    e = calloc(1, sizeof(pl_shared_grammar_t));
    if (e == NULL || (e->text = malloc(len ? len : 1)) == NULL) {
        free(e);
        snprintf(err, errlen, "the engine is out of memory");
        return NULL;
    }
    memcpy(e->text, text, len);
    e->len = len;
    e->hash = h;
    e->g = pl_grammar_compile(text, len, err, errlen);
    if (e->g == NULL) {
        free(e->text);
        free(e);
        return NULL;
    }

    e->refs = 1;
    e->used = ++c->takes;
    e->next = c->list;
    c->list = e;

    return e;
}


void
pl_grammar_cache_destroy(pl_grammar_cache_t *c)
{
    pl_shared_grammar_t  *e, *next;

    for (e = c->list; e; e = next) {
        next = e->next;
        pl_grammar_entry_free(e);
    }
    pl_vocab_free(c->vocab);
    memset(c, 0, sizeof(*c));
}
