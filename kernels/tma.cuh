/*
 * tma: tensor maps for Hopper's bulk tensor copies (cp.async.bulk.tensor,
 * the "tensor memory accelerator").  A map describes a tensor in device
 * memory and the box one copy moves; it is encoded on the host by the
 * driver's cuTensorMapEncodeTiled, reached through the runtime's
 * driver entry point so the backend does not link libcuda, and passed to
 * the kernel as a __grid_constant__ parameter.
 */

#ifndef PL_TMA_CUH
#define PL_TMA_CUH

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

/*
 * A tensor of 16-bit elements, fp16 when fp16 is nonzero, else bf16
 * (copies move bits either way; the type is the map's declared one),
 * [dims[2]][dims[1]][dims[0]], dims[0] contiguous, rows of
 * dims[1] and dims[2] strides[0] and strides[1] bytes apart, read in boxes
 * of box[0] x box[1] x box[2] elements with the 128-byte swizzle (box[0]
 * * 2 bytes at most 128; the box lands in shared memory as rows of
 * box[0] elements, 16-byte chunk c of row r at chunk c ^ (r % 8) when
 * the destination is 1024-aligned); positions outside the tensor read as
 * zero.  Returns 0, or -1 when the driver cannot encode it (no entry
 * point, unaligned address or stride): the caller then copies another
 * way.
 */
int pl_tma_map_16(CUtensorMap *map, int fp16, const void *base,
    const uint64_t dims[3], const uint64_t strides[2], const uint32_t box[3]);

/* Rows of row_bytes from p to the end of p's allocation; 0 when the
   driver cannot say. */
uint64_t pl_tma_rows_left(const void *p, size_t row_bytes);

#endif /* PL_TMA_CUH */
