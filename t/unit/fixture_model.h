/*
 * fixture_model.h: what the model tests (forward, golden, checkpoint)
 * all do with model folders: read a file whole, load a folder into a
 * model ready to run a batch (weights, workspace, KV cache), and remove
 * the temporary folder tree they wrote.  Static inline functions, like
 * tap.h: one copy per test program.
 */

#ifndef PL_FIXTURE_MODEL_H
#define PL_FIXTURE_MODEL_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>

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


/* dir on backend be, prepared for batches of max_tokens tokens in
   max_seqs sequences, with n_blocks KV blocks of block_size tokens;
   NULL (the reason in a diag) when any step fails */
static inline pl_model_t *
fm_load(const char *dir, pl_backend_t *be, int max_tokens, int max_seqs,
    int n_blocks, int block_size)
{
    char         err[512];
    pl_model_t  *m = pl_model_load(dir, be, err, sizeof(err));

    if (m == NULL) {
        diag("load %s: %s", dir, err);
        return NULL;
    }
    if (pl_model_prepare(m, max_tokens, max_seqs, err, sizeof(err)) != 0
        || pl_model_kv_alloc(m, n_blocks, block_size, err, sizeof(err)) != 0)
    {
        diag("%s", err);
        pl_model_free(m);
        return NULL;
    }
    return m;
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
