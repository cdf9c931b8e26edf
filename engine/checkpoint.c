/*
 * checkpoint: a Hugging Face folder's weights, single-file or sharded.
 *
 * model.safetensors wins when present; otherwise model.safetensors.index.json
 * must exist, and its weight_map (tensor name -> shard file) decides which
 * shards are opened.  Every shard is mmap'ed and checked by the safetensors
 * reader, and the index and the shards must agree exactly: each tensor the
 * index lists is in the shard it names, and each tensor a shard holds is
 * listed for that shard.  So a lookup can ask the shards in turn, and a
 * missing or stale shard is an error at start, never a wrong weight.
 *
 * Progress: loading a large model from a cold disk takes minutes, so once
 * a load has run PL_CKPT_QUIET_S seconds a line "loading weights: 12/291
 * tensors, 1.2/13.5 GB" goes to stderr, rewritten in place a few times a
 * second on a terminal and repeated every PL_CKPT_LOG_S seconds into a log,
 * with a last line when done.  Small models load silently.
 */

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"

#define PL_CKPT_MAX_SHARDS  4096
#define PL_CKPT_QUIET_S     0.5
#define PL_CKPT_TTY_S       0.25
#define PL_CKPT_LOG_S       5.0

typedef struct {
    char               *name;           /* file name inside the folder */
    pl_safetensors_t   *st;
} ckpt_shard_t;

struct pl_checkpoint_s {
    char           path[4096];          /* the file or the index */
    char          *dir;
    ckpt_shard_t  *shards;
    int            n_shards;

    int            n_tensors;           /* over all shards */
    size_t         total_bytes;
    int            n_loaded;
    size_t         loaded_bytes;
    double         start;
    double         last_print;
    int            printed;
    int            tty;
};


static int
ckpt_fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list  ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}


static double
now_s(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}


/* the shard called name, opened on first use; NULL with err */
static ckpt_shard_t *
shard_get(pl_checkpoint_t *c, const char *name, char *err, size_t errlen)
{
    char           path[4096];
    ckpt_shard_t  *s;
    int            i;

    for (i = 0; i < c->n_shards; i++) {
        if (strcmp(c->shards[i].name, name) == 0) {
            return &c->shards[i];
        }
    }
    if (name[0] == '\0' || name[0] == '.' || strchr(name, '/') != NULL
        || c->n_shards == PL_CKPT_MAX_SHARDS)
    {
        ckpt_fail(err, errlen, "%s: weight_map names shard '%s', which is "
                  "not a plain file name in the folder (or one shard too "
                  "many)", c->path, name);
        return NULL;
    }
    snprintf(path, sizeof(path), "%s/%s", c->dir, name);
    s = &c->shards[c->n_shards];
    s->name = strdup(name);
    if (s->name == NULL) {
        ckpt_fail(err, errlen, "out of memory");
        return NULL;
    }
    c->n_shards++;
    if (access(path, F_OK) != 0) {
        ckpt_fail(err, errlen, "%s: shard '%s' is missing (%s does not "
                  "exist)", c->path, name, path);
        return NULL;
    }
    s->st = pl_st_open(path, err, errlen);
    return s->st != NULL ? s : NULL;
}


/* each tensor a shard holds must be listed for that shard */
static int
check_shards_listed(pl_checkpoint_t *c, json_t *map, char *err,
    size_t errlen)
{
    int  i, j;

    for (i = 0; i < c->n_shards; i++) {
        for (j = 0; j < pl_st_count(c->shards[i].st); j++) {
            const char  *name = pl_st_tensor(c->shards[i].st, j)->name;
            const char  *want = json_string_value(json_object_get(map,
                                                                  name));

            if (want == NULL || strcmp(want, c->shards[i].name) != 0) {
                return ckpt_fail(err, errlen, "%s: shard '%s' holds tensor "
                                 "'%s', which weight_map puts in '%s'",
                                 c->path, c->shards[i].name, name,
                                 want ? want : "no shard");
            }
        }
    }
    return 0;
}


static int
open_index(pl_checkpoint_t *c, char *err, size_t errlen)
{
    json_error_t   jerr;
    json_t        *root, *map, *file;
    const char    *name;
    ckpt_shard_t  *s;
    int            rc = 0;

    root = json_load_file(c->path, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        return ckpt_fail(err, errlen, "%s: cannot read as JSON: %s (line "
                         "%d)", c->path, jerr.text, jerr.line);
    }
    map = json_object_get(root, "weight_map");
    c->shards = calloc(PL_CKPT_MAX_SHARDS, sizeof(ckpt_shard_t));
    if (!json_is_object(map) || json_object_size(map) == 0) {
        rc = ckpt_fail(err, errlen, "%s: field 'weight_map' must be a "
                       "non-empty object", c->path);
    } else if (c->shards == NULL) {
        rc = ckpt_fail(err, errlen, "out of memory");
    }
    json_object_foreach(map, name, file) {
        if (rc != 0) {
            break;
        }
        if (!json_is_string(file)) {
            rc = ckpt_fail(err, errlen, "%s: weight_map entry '%s' is not "
                           "a file name", c->path, name);
        } else if ((s = shard_get(c, json_string_value(file), err, errlen))
                   == NULL)
        {
            rc = -1;
        } else if (pl_st_find(s->st, name) == NULL) {
            rc = ckpt_fail(err, errlen, "%s: tensor '%s' is not in shard "
                           "'%s', where weight_map puts it", c->path, name,
                           s->name);
        }
    }
    if (rc == 0) {
        rc = check_shards_listed(c, map, err, errlen);
    }
    json_decref(root);
    return rc;
}


static int
open_single(pl_checkpoint_t *c, char *err, size_t errlen)
{
    c->shards = calloc(1, sizeof(ckpt_shard_t));
    if (c->shards == NULL || (c->shards[0].name = strdup("model.safetensors"))
                             == NULL)
    {
        return ckpt_fail(err, errlen, "out of memory");
    }
    c->n_shards = 1;
    c->shards[0].st = pl_st_open(c->path, err, errlen);
    return c->shards[0].st != NULL ? 0 : -1;
}


static int
open_files(pl_checkpoint_t *c, const char *dir, char *err, size_t errlen)
{
    snprintf(c->path, sizeof(c->path), "%s/model.safetensors", dir);
    if (access(c->path, F_OK) == 0) {
        return open_single(c, err, errlen);
    }
    snprintf(c->path, sizeof(c->path), "%s/model.safetensors.index.json",
             dir);
    if (access(c->path, F_OK) == 0) {
        return open_index(c, err, errlen);
    }
    return ckpt_fail(err, errlen, "%s: no weights: neither "
                     "model.safetensors nor model.safetensors.index.json "
                     "exists", dir);
}


pl_checkpoint_t *
pl_ckpt_open(const char *dir, char *err, size_t errlen)
{
    pl_checkpoint_t  *c = calloc(1, sizeof(*c));
    int               i, j;

    if (c == NULL || (c->dir = strdup(dir)) == NULL) {
        free(c);
        ckpt_fail(err, errlen, "out of memory");
        return NULL;
    }
    if (open_files(c, dir, err, errlen) != 0) {
        pl_ckpt_close(c);
        return NULL;
    }
    for (i = 0; i < c->n_shards; i++) {
        for (j = 0; j < pl_st_count(c->shards[i].st); j++) {
            c->total_bytes += pl_st_tensor(c->shards[i].st, j)->nbytes;
        }
        c->n_tensors += pl_st_count(c->shards[i].st);
    }
    c->start = now_s();
    c->tty = isatty(STDERR_FILENO);
    return c;
}


void
pl_ckpt_close(pl_checkpoint_t *c)
{
    int  i;

    if (c == NULL) {
        return;
    }
    for (i = 0; c->shards != NULL && i < c->n_shards; i++) {
        pl_st_close(c->shards[i].st);
        free(c->shards[i].name);
    }
    free(c->shards);
    free(c->dir);
    free(c);
}


const pl_st_tensor_t *
pl_ckpt_find(const pl_checkpoint_t *c, const char *name, const char **file)
{
    const pl_st_tensor_t  *t;
    int                    i;

    if (file != NULL) {
        *file = c->path;
    }
    for (i = 0; i < c->n_shards; i++) {
        t = pl_st_find(c->shards[i].st, name);
        if (t != NULL) {
            if (file != NULL && c->n_shards > 1) {
                *file = c->shards[i].name;
            }
            return t;
        }
    }
    return NULL;
}


const char *
pl_ckpt_path(const pl_checkpoint_t *c)
{
    return c->path;
}


static void
print_progress(pl_checkpoint_t *c, int last)
{
    double  unit = c->total_bytes >= 1000000000 ? 1e9 : 1e6;
    char    took[32] = "";

    if (last) {
        snprintf(took, sizeof(took), " in %.1f s", now_s() - c->start);
    }
    fprintf(stderr, "%sloading weights: %d/%d tensors, %.1f/%.1f %s%s%s",
            c->tty && c->printed ? "\r" : "", c->n_loaded, c->n_tensors,
            (double) c->loaded_bytes / unit, (double) c->total_bytes / unit,
            unit == 1e9 ? "GB" : "MB", took, c->tty && !last ? "" : "\n");
    c->printed = 1;
}


void
pl_ckpt_loaded(pl_checkpoint_t *c, const pl_st_tensor_t *t)
{
    double  now = now_s();

    c->n_loaded++;
    c->loaded_bytes += t->nbytes;
    if (now - c->start >= PL_CKPT_QUIET_S
        && now - c->last_print >= (c->tty ? PL_CKPT_TTY_S : PL_CKPT_LOG_S))
    {
        print_progress(c, 0);
        c->last_print = now;
    }
}


void
pl_ckpt_done(pl_checkpoint_t *c)
{
    if (c->printed || now_s() - c->start >= PL_CKPT_QUIET_S) {
        print_progress(c, 1);
    }
}
