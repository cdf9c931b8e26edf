/*
 * safetensors: a read-only view of a .safetensors file.
 *
 * The file is mmap'ed and its JSON header checked completely before any
 * tensor is handed out, so a tensor's data pointer always lies inside the
 * file and holds exactly product(shape) elements of its dtype.
 */

#ifndef PL_SAFETENSORS_H
#define PL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "pl_ops.h"

#define PL_ST_MAX_DIMS  8

typedef struct {
    char         *name;
    pl_dtype_t    dtype;
    int           ndim;
    int64_t       shape[PL_ST_MAX_DIMS];
    const void   *data;         /* inside the mapping, or an aligned copy
                                   when the file placed it unaligned */
    size_t        nbytes;
} pl_st_tensor_t;

typedef struct pl_safetensors_s  pl_safetensors_t;

/* NULL with a message naming the file and the tensor or field on any
   problem. */
pl_safetensors_t *pl_st_open(const char *path, char *err, size_t errlen);
void pl_st_close(pl_safetensors_t *st);

int pl_st_count(const pl_safetensors_t *st);
const pl_st_tensor_t *pl_st_tensor(const pl_safetensors_t *st, int i);
/* NULL when absent */
const pl_st_tensor_t *pl_st_find(const pl_safetensors_t *st,
    const char *name);

#endif /* PL_SAFETENSORS_H */
