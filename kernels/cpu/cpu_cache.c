/*
 * cpu_cache: writing the new tokens' K and V into their paged slots.
 * Cache layout [num_blocks][block_size][n_kv_heads][head_dim], so a slot
 * (block * block_size + offset) is one contiguous row of n_kv_heads *
 * head_dim values; a negative slot is skipped.
 */

#include <string.h>

#include "cpu_ops.h"


void
pl_cpu_kv_write(pl_backend_t *be, void *k_cache, void *v_cache,
    const void *k, const void *v, const int32_t *slot_mapping, int n,
    int n_kv_heads, int head_dim)
{
    int64_t  row = (int64_t) n_kv_heads * head_dim;
    size_t   bytes = (size_t) row * sizeof(float);
    int      i;

    (void) be;
    for (i = 0; i < n; i++) {
        if (slot_mapping[i] < 0) {
            continue;
        }
        memcpy((float *) k_cache + slot_mapping[i] * row,
               (const float *) k + i * row, bytes);
        memcpy((float *) v_cache + slot_mapping[i] * row,
               (const float *) v + i * row, bytes);
    }
}
