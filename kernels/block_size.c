/*
 * block_size: the KV block sizes (tokens per block) each backend's paged
 * attention takes, known before a backend is open, so that the engine can
 * refuse another --block-size at start with a message instead of a
 * kernel's shape check stopping the process later.
 *
 * The CPU kernel (cpu/cpu_attention.c) finds a token's slot by division:
 * any size from 1.  The CUDA kernels (paged_attention.cu, prefill and
 * decode) find it by shift and mask: powers of two from 1 to 1024.
 */

#include <string.h>

#include "pl_ops.h"

#define CUDA_BLOCK_MAX  1024


static int
cuda_block_size_ok(int n)
{
    return n >= 1 && n <= CUDA_BLOCK_MAX && (n & (n - 1)) == 0;
}


int
pl_block_size_ok(const char *kind, int n, const char **sizes)
{
    if (strcmp(kind, "cuda") == 0) {
        *sizes = "powers of two from 1 to 1024";
        return cuda_block_size_ok(n);
    }
    *sizes = "any size from 1";
    return n >= 1;
}
