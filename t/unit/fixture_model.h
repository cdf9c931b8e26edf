/*
 * fixture_model.h: what the model tests (t/unit's forward, golden, tp,
 * checkpoint, decode_pad; t/gpu's golden, model, graphs) all do with
 * model folders: read a file whole, load a folder into a model ready to
 * run a batch (weights, workspace, KV cache), read a golden fixture of
 * t/fixtures/golden (transformers' tokens and logits), and remove the
 * temporary folder tree they wrote.  Static inline functions, like
 * tap.h: one copy per test program.
 */

#ifndef PL_FIXTURE_MODEL_H
#define PL_FIXTURE_MODEL_H

#include <ftw.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pl_model.h"
#include "tap.h"


/* path's bytes (allocated one larger) and their count; NULL when it
   cannot be read */
static inline unsigned char *
fm_read_file(const char *path, size_t *len)
{
    FILE           *f = fopen(path, "rb");
    unsigned char  *buf = NULL;
    long            size;

    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0
        || fseek(f, 0, SEEK_SET) != 0 || (buf = malloc(size + 1)) == NULL
        || fread(buf, 1, size, f) != (size_t) size)
    {
        free(buf);
        buf = NULL;
    }
    if (f != NULL) {
        fclose(f);
    }
    *len = buf != NULL ? (size_t) size : 0;
    return buf;
}


/* dir on backend be, loaded as opts say (NULL: pl_model_load()'s
   defaults), prepared for batches of max_tokens tokens in max_seqs
   sequences, with n_blocks KV blocks of block_size tokens; NULL (with
   err) when any step fails */
static inline pl_model_t *
fm_open(const char *dir, pl_backend_t *be, const pl_model_options_t *opts,
    int max_tokens, int max_seqs, int n_blocks, int block_size, char *err,
    size_t errlen)
{
    pl_model_t  *m = opts != NULL
                     ? pl_model_load_opts(dir, be, opts, err, errlen)
                     : pl_model_load(dir, be, err, errlen);

    if (m != NULL
        && (pl_model_prepare(m, max_tokens, max_seqs, err, errlen) != 0
            || pl_model_kv_alloc(m, n_blocks, block_size, err, errlen)
               != 0))
    {
        pl_model_free(m);
        return NULL;
    }
    return m;
}


/* fm_open() with the defaults; the reason in a diag when it fails */
static inline pl_model_t *
fm_load(const char *dir, pl_backend_t *be, int max_tokens, int max_seqs,
    int n_blocks, int block_size)
{
    char         err[512];
    pl_model_t  *m = fm_open(dir, be, NULL, max_tokens, max_seqs, n_blocks,
                             block_size, err, sizeof(err));

    if (m == NULL) {
        diag("load %s: %s", dir, err);
    }
    return m;
}


/* ---- golden fixtures: t/fixtures/golden/<name>/ ---- */

#define FM_GOLDEN        "t/fixtures/golden"
#define FM_GOLDEN_CASES  3
#define FM_GOLDEN_LEN    64

/* one prompt: its tokens, then transformers' greedy continuation */
typedef struct {
    int32_t  tok[FM_GOLDEN_LEN];
    int      len;               /* prompt + greedy */
    int      prompt_len;
    long     logits_offset;     /* in floats, into logits.bin */
} fm_case_t;

/* golden.json's cases and logits.bin: transformers' logits at every
   position of every case */
typedef struct {
    char       dir[256];
    int        vocab;
    fm_case_t  cases[FM_GOLDEN_CASES];
    int        n_cases;
    float     *logits;
    long       n_logits;
} fm_golden_t;


static inline int
fm_golden_case(fm_case_t *c, json_t *j)
{
    json_t  *prompt = json_object_get(j, "prompt");
    json_t  *greedy = json_object_get(j, "greedy");
    size_t   i, np = json_array_size(prompt), ng = json_array_size(greedy);

    if (np == 0 || ng == 0 || np + ng > FM_GOLDEN_LEN) {
        return -1;
    }
    for (i = 0; i < np + ng; i++) {
        c->tok[i] = (int32_t) json_integer_value(
            i < np ? json_array_get(prompt, i)
                   : json_array_get(greedy, i - np));
    }
    c->prompt_len = (int) np;
    c->len = (int) (np + ng);
    c->logits_offset = (long) json_integer_value(json_object_get(j,
                                                 "logits_offset"));
    return 0;
}


/* The fixture name (a folder of FM_GOLDEN); 0, or -1 when it does not
   read or its logits.bin is shorter than its cases say. */
static inline int
fm_golden_read(fm_golden_t *g, const char *name)
{
    char          path[320];
    json_error_t  jerr;
    json_t       *root, *cases;
    size_t        i, len;
    int           rc = 0;

    memset(g, 0, sizeof(*g));
    snprintf(g->dir, sizeof(g->dir), FM_GOLDEN "/%s", name);
    snprintf(path, sizeof(path), "%s/golden.json", g->dir);
    root = json_load_file(path, 0, &jerr);
    cases = json_object_get(root, "cases");
    g->vocab = (int) json_integer_value(json_object_get(root, "vocab_size"));
    g->n_cases = (int) json_array_size(cases);
    if (root == NULL || g->n_cases < 1 || g->n_cases > FM_GOLDEN_CASES) {
        json_decref(root);
        return -1;
    }
    for (i = 0; i < (size_t) g->n_cases; i++) {
        rc |= fm_golden_case(&g->cases[i], json_array_get(cases, i));
    }
    json_decref(root);
    snprintf(path, sizeof(path), "%s/logits.bin", g->dir);
    g->logits = (float *) fm_read_file(path, &len);
    g->n_logits = (long) (len / sizeof(float));
    for (i = 0; rc == 0 && i < (size_t) g->n_cases; i++) {
        const fm_case_t  *c = &g->cases[i];

        rc = c->logits_offset + (long) c->len * g->vocab > g->n_logits;
    }
    return g->logits != NULL && rc == 0 ? 0 : -1;
}


/* transformers' logits of case c at position pos */
static inline const float *
fm_golden_row(const fm_golden_t *g, const fm_case_t *c, int pos)
{
    return g->logits + c->logits_offset + (long) pos * g->vocab;
}


static inline void
fm_golden_free(fm_golden_t *g)
{
    free(g->logits);
    g->logits = NULL;
}


static inline int
fm_remove_entry(const char *path, const struct stat *sb, int flag,
    struct FTW *ftw)
{
    (void) sb;
    (void) flag;
    (void) ftw;
    return remove(path);
}


/* dir and everything below it */
static inline void
fm_rmtree(const char *dir)
{
    if (nftw(dir, fm_remove_entry, 8, FTW_DEPTH | FTW_PHYS) != 0) {
        diag("could not remove %s", dir);
    }
}

#endif /* PL_FIXTURE_MODEL_H */
