/*
 * golden_beam on CUDA: t/unit/golden_beam.c's cases (transformers' beam
 * search over the golden fixtures) with the engine on the GPU.  Its
 * activations are bf16 or fp16, so beams must equal transformers' where
 * the fixture's case withstands log-prob noise of GB_STABLE, and
 * elsewhere the best beam's score must be within GB_SCORE_TOL (relative)
 * of transformers' best.
 */

#define GB_DEVICE     "cuda"
#define GB_STABLE     3e-2
#define GB_SCORE_TOL  3e-2

#include "../unit/golden_beam.c"
