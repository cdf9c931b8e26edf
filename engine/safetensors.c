/*
 * safetensors: mmap'ed reader for Hugging Face's safetensors format.
 *
 * Layout: an 8-byte little-endian header length N, N bytes of JSON mapping
 * each tensor name to {dtype, shape, data_offsets: [begin, end]} (offsets
 * relative to the data area that follows the header), and an optional
 * "__metadata__" object.  The file comes from outside, so every field is
 * checked before use: the header must fit the file, each tensor's byte range
 * must lie inside the data area, match its shape and dtype exactly and not
 * overlap another tensor.  Tensors are kept sorted by name for lookup.
 */

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors.h"

#define PL_ST_MAX_HEADER  (100u * 1024 * 1024)

typedef struct {
    pl_st_tensor_t  pub;
    uint64_t        begin;      /* offsets within the data area */
    uint64_t        end;
    void           *copy;       /* owned aligned copy, or NULL */
} st_item_t;

struct pl_safetensors_s {
    char        *path;
    uint8_t     *map;
    size_t       size;
    int          n;
    st_item_t   *items;
};


static void
st_error(char *err, size_t errlen, const char *path, const char *fmt, ...)
{
    va_list  ap;
    int      len;

    len = snprintf(err, errlen, "%s: ", path);
    if (len < 0 || (size_t) len >= errlen) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(err + len, errlen - len, fmt, ap);
    va_end(ap);
}


static int
parse_dtype(const char *s, pl_dtype_t *dt)
{
    if (strcmp(s, "F32") == 0) {
        *dt = PL_DT_F32;
    } else if (strcmp(s, "F16") == 0) {
        *dt = PL_DT_F16;
    } else if (strcmp(s, "BF16") == 0) {
        *dt = PL_DT_BF16;
    } else {
        return -1;
    }
    return 0;
}


/* shape into t; *elems = product of the dimensions */
static int
parse_shape(pl_st_tensor_t *t, json_t *shape, uint64_t *elems,
    const char *path, char *err, size_t errlen)
{
    size_t   i;
    json_t  *dim;

    if (!json_is_array(shape)) {
        st_error(err, errlen, path, "tensor '%s': shape is not an array",
                 t->name);
        return -1;
    }
    if (json_array_size(shape) > PL_ST_MAX_DIMS) {
        st_error(err, errlen, path, "tensor '%s': shape has %zu dimensions "
                 "(at most %d supported)", t->name, json_array_size(shape),
                 PL_ST_MAX_DIMS);
        return -1;
    }
    *elems = 1;
    t->ndim = (int) json_array_size(shape);
    json_array_foreach(shape, i, dim) {
        json_int_t  v = json_is_integer(dim) ? json_integer_value(dim) : -1;

        if (v < 0 || (uint64_t) v > (UINT64_C(1) << 40)) {
            st_error(err, errlen, path, "tensor '%s': shape[%zu] is not a "
                     "sane non-negative integer", t->name, i);
            return -1;
        }
        t->shape[i] = v;
        if (v != 0 && *elems > (UINT64_C(1) << 48) / (uint64_t) v) {
            st_error(err, errlen, path, "tensor '%s': shape is too large",
                     t->name);
            return -1;
        }
        *elems *= (uint64_t) v;
    }
    return 0;
}


static int
parse_offsets(st_item_t *it, json_t *offs, uint64_t data_size,
    const char *path, char *err, size_t errlen)
{
    json_t      *b = json_array_get(offs, 0), *e = json_array_get(offs, 1);
    const char  *name = it->pub.name;

    if (!json_is_array(offs) || json_array_size(offs) != 2
        || !json_is_integer(b) || !json_is_integer(e)
        || json_integer_value(b) < 0 || json_integer_value(e) < 0)
    {
        st_error(err, errlen, path, "tensor '%s': data_offsets is not an "
                 "array of two non-negative integers", name);
        return -1;
    }
    it->begin = (uint64_t) json_integer_value(b);
    it->end = (uint64_t) json_integer_value(e);
    if (it->begin > it->end) {
        st_error(err, errlen, path, "tensor '%s': data_offsets begin %llu "
                 "is after end %llu", name,
                 (unsigned long long) it->begin,
                 (unsigned long long) it->end);
        return -1;
    }
    if (it->end > data_size) {
        st_error(err, errlen, path, "tensor '%s': data_offsets end %llu is "
                 "past the end of the file (%llu bytes of data after the "
                 "header)", name, (unsigned long long) it->end,
                 (unsigned long long) data_size);
        return -1;
    }
    return 0;
}


static int
parse_tensor(st_item_t *it, const char *name, json_t *desc,
    uint64_t data_size, const char *path, char *err, size_t errlen)
{
    json_t    *dtype = json_object_get(desc, "dtype");
    uint64_t   elems, need;

    it->pub.name = strdup(name);
    if (it->pub.name == NULL) {
        st_error(err, errlen, path, "out of memory");
        return -1;
    }
    if (!json_is_object(desc)) {
        st_error(err, errlen, path, "tensor '%s': description is not an "
                 "object", name);
        return -1;
    }
    if (!json_is_string(dtype)) {
        st_error(err, errlen, path, "tensor '%s': dtype is missing or not a "
                 "string", name);
        return -1;
    }
    if (parse_dtype(json_string_value(dtype), &it->pub.dtype) != 0) {
        st_error(err, errlen, path, "tensor '%s': dtype '%s' is not "
                 "supported (F32, F16 and BF16 are)", name,
                 json_string_value(dtype));
        return -1;
    }
    if (parse_shape(&it->pub, json_object_get(desc, "shape"), &elems, path,
                    err, errlen) != 0
        || parse_offsets(it, json_object_get(desc, "data_offsets"),
                         data_size, path, err, errlen) != 0)
    {
        return -1;
    }
    need = elems * pl_dtype_size(it->pub.dtype);
    if (it->end - it->begin != need) {
        st_error(err, errlen, path, "tensor '%s': data_offsets [%llu, %llu] "
                 "hold %llu bytes but its shape and dtype %s need %llu",
                 name, (unsigned long long) it->begin,
                 (unsigned long long) it->end,
                 (unsigned long long) (it->end - it->begin),
                 pl_dtype_name(it->pub.dtype), (unsigned long long) need);
        return -1;
    }
    it->pub.nbytes = (size_t) need;
    return 0;
}


static int
cmp_by_begin(const void *a, const void *b)
{
    const st_item_t  *x = a, *y = b;

    return x->begin < y->begin ? -1 : x->begin > y->begin;
}


static int
cmp_by_name(const void *a, const void *b)
{
    return strcmp(((const st_item_t *) a)->pub.name,
                  ((const st_item_t *) b)->pub.name);
}


static int
check_overlaps(pl_safetensors_t *st, char *err, size_t errlen)
{
    int  i;

    qsort(st->items, st->n, sizeof(st_item_t), cmp_by_begin);
    for (i = 1; i < st->n; i++) {
        if (st->items[i].begin < st->items[i - 1].end) {
            st_error(err, errlen, st->path, "tensors '%s' and '%s' overlap "
                     "in the data area", st->items[i - 1].pub.name,
                     st->items[i].pub.name);
            return -1;
        }
    }
    return 0;
}


/* Point each tensor at its bytes; copy the few a file placed unaligned. */
static int
place_data(pl_safetensors_t *st, const uint8_t *data, char *err,
    size_t errlen)
{
    int  i;

    for (i = 0; i < st->n; i++) {
        st_item_t      *it = &st->items[i];
        const uint8_t  *p = data + it->begin;
        size_t          align = pl_dtype_size(it->pub.dtype);

        it->pub.data = p;
        if ((uintptr_t) p % align == 0) {
            continue;
        }
        it->copy = aligned_alloc(64, (it->pub.nbytes + 64) / 64 * 64);
        if (it->copy == NULL) {
            st_error(err, errlen, st->path, "out of memory copying tensor "
                     "'%s'", it->pub.name);
            return -1;
        }
        memcpy(it->copy, p, it->pub.nbytes);
        it->pub.data = it->copy;
    }
    return 0;
}


static int
parse_header(pl_safetensors_t *st, json_t *hdr, uint64_t hlen, char *err,
    size_t errlen)
{
    uint64_t     data_size = st->size - 8 - hlen;
    const char  *key;
    json_t      *val;

    st->items = calloc(json_object_size(hdr) + 1, sizeof(st_item_t));
    if (st->items == NULL) {
        st_error(err, errlen, st->path, "out of memory");
        return -1;
    }
    json_object_foreach(hdr, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(val)) {
                st_error(err, errlen, st->path, "__metadata__ is not an "
                         "object");
                return -1;
            }
            continue;
        }
        if (parse_tensor(&st->items[st->n++], key, val, data_size, st->path,
                         err, errlen) != 0)
        {
            return -1;
        }
    }
    if (check_overlaps(st, err, errlen) != 0
        || place_data(st, st->map + 8 + hlen, err, errlen) != 0)
    {
        return -1;
    }
    qsort(st->items, st->n, sizeof(st_item_t), cmp_by_name);
    return 0;
}


static uint64_t
read_le64(const uint8_t *p)
{
    uint64_t  v = 0;
    int       i;

    for (i = 7; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}


static int
map_file(pl_safetensors_t *st, char *err, size_t errlen)
{
    struct stat  sb;
    int          fd = open(st->path, O_RDONLY | O_CLOEXEC);

    if (fd < 0) {
        st_error(err, errlen, st->path, "cannot open: %s", strerror(errno));
        return -1;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st_error(err, errlen, st->path, "not a regular file");
        close(fd);
        return -1;
    }
    st->size = (size_t) sb.st_size;
    if (st->size < 8) {
        st_error(err, errlen, st->path, "file is too short (%zu bytes) to "
                 "hold a safetensors header", st->size);
        close(fd);
        return -1;
    }
    st->map = mmap(NULL, st->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (st->map == MAP_FAILED) {
        st->map = NULL;
        st_error(err, errlen, st->path, "cannot mmap: %s", strerror(errno));
        return -1;
    }
    return 0;
}


static int
load(pl_safetensors_t *st, char *err, size_t errlen)
{
    uint64_t      hlen;
    json_t       *hdr;
    json_error_t  jerr;
    int           rc;

    if (map_file(st, err, errlen) != 0) {
        return -1;
    }
    hlen = read_le64(st->map);
    if (hlen > st->size - 8) {
        st_error(err, errlen, st->path, "header length %llu is past the end "
                 "of the file (%zu bytes)", (unsigned long long) hlen,
                 st->size);
        return -1;
    }
    if (hlen > PL_ST_MAX_HEADER) {
        st_error(err, errlen, st->path, "header length %llu is over the "
                 "100 MB limit", (unsigned long long) hlen);
        return -1;
    }
    hdr = json_loadb((const char *) st->map + 8, hlen,
                     JSON_REJECT_DUPLICATES, &jerr);
    if (hdr == NULL) {
        st_error(err, errlen, st->path, "header is not valid JSON: %s "
                 "(line %d, column %d)", jerr.text, jerr.line, jerr.column);
        return -1;
    }
    if (!json_is_object(hdr)) {
        st_error(err, errlen, st->path, "header is not a JSON object");
        json_decref(hdr);
        return -1;
    }
    rc = parse_header(st, hdr, hlen, err, errlen);
    json_decref(hdr);
    return rc;
}


pl_safetensors_t *
pl_st_open(const char *path, char *err, size_t errlen)
{
    pl_safetensors_t  *st = calloc(1, sizeof(*st));

    if (st == NULL || (st->path = strdup(path)) == NULL) {
        free(st);
        snprintf(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    if (load(st, err, errlen) != 0) {
        pl_st_close(st);
        return NULL;
    }
    return st;
}


void
pl_st_close(pl_safetensors_t *st)
{
    int  i;

    if (st == NULL) {
        return;
    }
    for (i = 0; st->items != NULL && i < st->n; i++) {
        free(st->items[i].pub.name);
        free(st->items[i].copy);
    }
    free(st->items);
    if (st->map != NULL) {
        munmap(st->map, st->size);
    }
    free(st->path);
    free(st);
}


int
pl_st_count(const pl_safetensors_t *st)
{
    return st->n;
}


const pl_st_tensor_t *
pl_st_tensor(const pl_safetensors_t *st, int i)
{
    return i >= 0 && i < st->n ? &st->items[i].pub : NULL;
}


const pl_st_tensor_t *
pl_st_find(const pl_safetensors_t *st, const char *name)
{
    st_item_t   key;
    st_item_t  *it;

    key.pub.name = (char *) name;
    it = bsearch(&key, st->items, st->n, sizeof(st_item_t), cmp_by_name);
    return it != NULL ? &it->pub : NULL;
}
