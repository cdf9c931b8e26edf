/*
 * golden_beam on CUDA: t/unit/golden_beam.c's cases (transformers' beam
 * search over the golden fixtures) with the engine on the GPU.  Its
 * activations are bf16 or fp16, so beams must equal transformers' where
 * the fixture's case withstands log-prob noise of GB_STABLE, and
 * elsewhere the best beam's score must be close to transformers' best;
 * scores and cumulative logprobs within GB_ATOL + GB_RTOL |ref| (a bf16
 * step's logprob error is about 1e-2; the longest beams have 12 tokens).
 */

#define GB_DEVICE     "cuda"
#define GB_STABLE     3e-2
#define GB_ATOL       0.15
#define GB_RTOL       3e-2

#include "../unit/golden_beam.c"
