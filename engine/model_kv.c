/*
 * model_kv: the paged KV cache of one rank's model and the block moves
 * the block manager decides: copy-on-write copies and swaps to and from
 * a host pool.
 *
 * Each layer has a K and a V array of num_blocks blocks, a block holding
 * block_size tokens of the rank's KV heads (the layout the attention
 * kernels read, kernels/pl_ops.h).  A host block holds layer 0's K block,
 * layer 0's V block, layer 1's K block and so on; with tensor parallelism
 * each rank keeps its stripe of every host block.  A backend with a swap
 * operation moves all of a step's chunks in one call, else each goes
 * through download or upload.
 */

#include <stdint.h>
#include <stdlib.h>

#include "model_internal.h"


void
model_free_kv(pl_shard_t *m)
{
    int  l;

    model_free_decode(m);
    for (l = 0; m->k_cache != NULL && l < m->cfg.num_layers; l++) {
        model_free_owned(m, m->k_cache[l]);
        model_free_owned(m, m->v_cache[l]);
    }
    free(m->k_cache);
    free(m->v_cache);
    free(m->kv_bases);
    m->k_cache = NULL;
    m->v_cache = NULL;
    m->kv_bases = NULL;
    m->num_blocks = 0;
}


size_t
pl_shard_kv_block_bytes(const pl_shard_t *m, int block_size)
{
    return 2 * (size_t) m->cfg.num_layers * (size_t) block_size
           * (size_t) m->sh.n_kv_heads * (size_t) m->cfg.head_dim
           * pl_dtype_size(m->be->act_dtype);
}


/* The base of every layer's K then V cache, as the backend's copy_blocks
   takes them, or NULL when it has no such call or the cache does not suit
   it (its copies move 16-byte words: every base and the block's bytes in
   one layer must be multiples of 16).  Made once with the cache: the
   copies of every step use it. */
static void **
kv_copy_bases(pl_shard_t *m)
{
    void  **base;
    int     l, layers = m->cfg.num_layers;

    if (m->be->copy_blocks == NULL
        || pl_shard_kv_block_bytes(m, m->block_size) / 2 / layers % 16 != 0
        || (base = malloc(2 * (size_t) layers * sizeof(void *))) == NULL)
    {
        return NULL;
    }
    for (l = 0; l < layers; l++) {
        base[l] = m->k_cache[l];
        base[layers + l] = m->v_cache[l];
        if ((uintptr_t) base[l] % 16 != 0
            || (uintptr_t) base[layers + l] % 16 != 0)
        {
            free(base);
            return NULL;
        }
    }
    return base;
}


int
pl_shard_kv_alloc(pl_shard_t *m, int num_blocks, int block_size, char *err,
    size_t errlen)
{
    size_t  bytes;
    int     l;

    model_free_kv(m);
    if (num_blocks < 1 || block_size < 1
        || (int64_t) num_blocks * block_size > INT32_MAX)
    {
        return model_fail(err, errlen, "model: cannot allocate a KV cache of "
                          "%d blocks of %d tokens", num_blocks, block_size);
    }
    bytes = pl_shard_kv_block_bytes(m, block_size) / 2
            / (size_t) m->cfg.num_layers * (size_t) num_blocks;
    m->k_cache = calloc(m->cfg.num_layers, sizeof(void *));
    m->v_cache = calloc(m->cfg.num_layers, sizeof(void *));
    if (m->k_cache == NULL || m->v_cache == NULL) {
        model_free_kv(m);
        return model_fail(err, errlen, "out of memory");
    }
    for (l = 0; l < m->cfg.num_layers; l++) {
        m->k_cache[l] = model_alloc(m, bytes, "the KV cache", err, errlen);
        m->v_cache[l] = m->k_cache[l] == NULL ? NULL
                        : model_alloc(m, bytes, "the KV cache", err, errlen);
        if (m->v_cache[l] == NULL) {
            model_free_kv(m);
            return -1;
        }
    }
    m->num_blocks = num_blocks;
    m->block_size = block_size;
    m->kv_bases = kv_copy_bases(m);
    return 0;
}


/* Bytes of one block of one layer's K (or V) cache. */
static size_t
kv_layer_block_bytes(const pl_shard_t *m)
{
    return pl_shard_kv_block_bytes(m, m->block_size) / 2
           / (size_t) m->cfg.num_layers;
}


static int
kv_block_ok(const pl_shard_t *m, int32_t b)
{
    return b >= 0 && b < m->num_blocks;
}


/* dst = src in backend memory, through bounce when the backend has no
   copy of its own. */
static void
kv_copy(pl_shard_t *m, void *dst, const void *src, size_t bytes,
    void *bounce)
{
    if (m->be->copy) {
        m->be->copy(m->be, dst, src, bytes);
    } else {
        m->be->download(m->be, bounce, src, bytes);
        m->be->upload(m->be, dst, bounce, bytes);
    }
}


/* No dst[i] is any src[j] or another dst[j]: the copies may run in any
   order, at once (the log may reuse a block a move freed). */
static int
kv_copies_disjoint(const int32_t *src, const int32_t *dst, int n)
{
    int  i, j;

    for (i = 0; i < n; i++) {
        for (j = 0; j < n; j++) {
            if (dst[i] == src[j] || (j != i && dst[i] == dst[j])) {
                return 0;
            }
        }
    }

    return 1;
}


/* The n copies over every layer's K and V in one backend call: 0, or -1
   when the backend has no such call or the copies do not suit it. */
static int
kv_copy_blocks_at_once(pl_shard_t *m, const int32_t *src,
    const int32_t *dst, int n, size_t lb)
{
    if (m->kv_bases == NULL || !kv_copies_disjoint(src, dst, n)) {
        return -1;
    }
    m->be->copy_blocks(m->be, m->kv_bases, 2 * m->cfg.num_layers, lb, src,
                       dst, n);
    return 0;
}


int
pl_shard_kv_copy_blocks(pl_shard_t *m, const int32_t *src,
    const int32_t *dst, int n)
{
    size_t  lb;
    void   *bounce = NULL;
    int     i, l;

    lb = kv_layer_block_bytes(m);
    for (i = 0; i < n; i++) {
        if (!kv_block_ok(m, src[i]) || !kv_block_ok(m, dst[i])) {
            return -1;
        }
    }
    if (n > 0 && kv_copy_blocks_at_once(m, src, dst, n, lb) == 0) {
        return 0;
    }
    if (m->be->copy == NULL && n > 0 && (bounce = malloc(lb)) == NULL) {
        return -1;
    }

    for (i = 0; i < n; i++) {
        for (l = 0; l < m->cfg.num_layers; l++) {
            kv_copy(m, (char *) m->k_cache[l] + (size_t) dst[i] * lb,
                    (char *) m->k_cache[l] + (size_t) src[i] * lb, lb, bounce);
            kv_copy(m, (char *) m->v_cache[l] + (size_t) dst[i] * lb,
                    (char *) m->v_cache[l] + (size_t) src[i] * lb, lb, bounce);
        }
    }

    free(bounce);
    return 0;
}


int
pl_shard_kv_swap(pl_shard_t *m, void *host_pool, int world, int rank,
    const int32_t *from, const int32_t *to, int n, int direction)
{
    size_t   lb, hb;
    int32_t  dev;
    char    *host, *k, *v;
    void   **dst = NULL, **src = NULL;
    int      i, l, j = 0, out = direction == PL_KV_SWAP_OUT;

    lb = kv_layer_block_bytes(m);
    hb = 2 * lb * m->cfg.num_layers;
    for (i = 0; i < n; i++) {
        if (!kv_block_ok(m, out ? from[i] : to[i])) {
            return -1;
        }
    }
    if (n <= 0) {
        return 0;
    }

    /* with the backend's swap, every chunk of the step in one call */
    if (m->be->swap != NULL) {
        dst = malloc((size_t) n * 2 * m->cfg.num_layers * sizeof(void *));
        src = malloc((size_t) n * 2 * m->cfg.num_layers * sizeof(void *));
        if (dst == NULL || src == NULL) {
            free(dst);
            free(src);
            return -1;
        }
    }

    for (i = 0; i < n; i++) {
        dev = out ? from[i] : to[i];
        host = (char *) host_pool
               + ((size_t) (out ? to[i] : from[i]) * world + rank) * hb;
        for (l = 0; l < m->cfg.num_layers; l++) {
            k = (char *) m->k_cache[l] + (size_t) dev * lb;
            v = (char *) m->v_cache[l] + (size_t) dev * lb;
            if (dst != NULL) {
                dst[j] = out ? (void *) (host + 2 * l * lb) : (void *) k;
                src[j++] = out ? (void *) k : (void *) (host + 2 * l * lb);
                dst[j] = out ? (void *) (host + (2 * l + 1) * lb) : (void *) v;
                src[j++] = out ? (void *) v
                               : (void *) (host + (2 * l + 1) * lb);
            } else if (out) {
                m->be->download(m->be, host + 2 * l * lb, k, lb);
                m->be->download(m->be, host + (2 * l + 1) * lb, v, lb);
            } else {
                m->be->upload(m->be, k, host + 2 * l * lb, lb);
                m->be->upload(m->be, v, host + (2 * l + 1) * lb, lb);
            }
        }
    }

    if (dst != NULL) {
        m->be->swap(m->be, dst, (const void *const *) src, j, lb, out);
        free(dst);
        free(src);
    }
    return 0;
}
