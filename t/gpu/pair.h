/*
 * pair.h: helpers for GPU tests that run one operation on the CPU backend
 * (the reference) and on the CUDA backend with the same inputs.
 *
 * Inputs are drawn fresh on every run (the seed is printed) and rounded to
 * bf16, magnitudes under 2^-14 made 0, so they are exact in bf16 and in
 * fp16 alike and both backends see exactly the same values although the
 * CPU keeps fp32 activations.  Outputs are poisoned with NaN before each
 * GPU run, so an element the kernel never writes fails the comparison.
 */

#ifndef PL_GPU_PAIR_H
#define PL_GPU_PAIR_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pl_ops.h"
#include "tap.h"

typedef struct {
    pl_backend_t  *cpu;
    pl_backend_t  *gpu;
} pair_t;

static uint64_t  pair_rng;

static inline void
pair_seed(void)
{
    const char  *s = getenv("PAGEDLLM_TEST_SEED");

    pair_rng = s != NULL ? strtoull(s, NULL, 10)
                         : ((uint64_t) time(NULL) << 20 ^ (uint64_t) getpid())
                           * 2654435761u + 1;
    diag("seed %llu (set PAGEDLLM_TEST_SEED to repeat)",
         (unsigned long long) pair_rng);
}

static inline uint64_t
pair_next(void)
{
    pair_rng ^= pair_rng << 13;
    pair_rng ^= pair_rng >> 7;
    pair_rng ^= pair_rng << 17;
    return pair_rng;
}

/* uniform in [0, n) */
static inline int
pair_int(int n)
{
    return (int) (pair_next() % (uint64_t) n);
}

/* perm[0 .. n) = a random permutation of 0 .. n - 1 (shuffled physical
   blocks) */
static inline void
pair_shuffle(int32_t *perm, int n)
{
    int  i;

    for (i = 0; i < n; i++) {
        perm[i] = i;
    }
    for (i = n - 1; i > 0; i--) {
        int      j = pair_int(i + 1);
        int32_t  x = perm[i];

        perm[i] = perm[j];
        perm[j] = x;
    }
}

/* uniform in [-amp, amp), rounded to bf16; fp16 holds it exactly too
   (no subnormals; amp well under 65504) */
static inline float
pair_val(float amp)
{
    double  u = (double) (pair_next() >> 11) / 9007199254740992.0;
    float   v = pl_bf16_to_f32(pl_f32_to_bf16((float) ((2.0 * u - 1.0)
                                                       * amp)));

    return fabsf(v) < 0x1p-14f ? 0.0f : v;
}

static inline float *
pair_rand(size_t n, float amp)
{
    float  *v = malloc(n * sizeof(float));
    size_t  i;

    for (i = 0; i < n; i++) {
        v[i] = pair_val(amp);
    }
    return v;
}

/* backend copy of host fp32 values, in the backend's act_dtype */
static inline void *
pair_put(pl_backend_t *be, const float *host, size_t n)
{
    void  *dev = be->alloc(be, n * pl_dtype_size(be->act_dtype) + 16);

    if (be->act_dtype == PL_DT_F32) {
        be->upload(be, dev, host, n * sizeof(float));
    } else {
        uint16_t  *h = malloc(n * sizeof(uint16_t) + 1);
        size_t     i;

        for (i = 0; i < n; i++) {
            h[i] = be->act_dtype == PL_DT_F16 ? pl_f32_to_f16(host[i])
                                              : pl_f32_to_bf16(host[i]);
        }
        be->upload(be, dev, h, n * sizeof(uint16_t));
        be->sync(be);
        free(h);
    }
    return dev;
}

/* seed, then both backends (the CPU one with 8 threads); 0 when either
   fails to start, its error given as a diagnostic */
static inline int
pair_start(pair_t *p)
{
    char  err[256] = "";

    pair_seed();
    p->cpu = pl_backend_cpu_create(8, err, sizeof(err));
    p->gpu = pl_backend_cuda_create(0, err, sizeof(err));
    if (!ok(p->cpu != NULL && p->gpu != NULL, "both backends start")) {
        diag("%s", err);
        return 0;
    }
    return 1;
}

/*
 * The GPU backend's activations in dt for the kernel tests, through
 * set_act_dtype as the engine sets them.  Weights must be loaded after
 * the switch.
 */
static inline int
pair_act(pl_backend_t *gpu, pl_dtype_t dt)
{
    char  err[256] = "";

    return ok(gpu->set_act_dtype(gpu, dt, err, sizeof(err)) == 0
              && gpu->act_dtype == dt, "GPU activations: %s%s%s",
              pl_dtype_name(dt), err[0] ? ": " : "", err);
}

/* fill n activations with NaN (0x7fc0: a NaN in bf16 and in fp16) */
static inline void
pair_poison(pl_backend_t *be, void *dev, size_t n)
{
    size_t  es = pl_dtype_size(be->act_dtype);
    char   *h = malloc(n * es + 1);
    size_t  i;

    for (i = 0; i < n; i++) {
        if (es == 4) {
            float  f = NAN;

            memcpy(h + i * 4, &f, 4);
        } else {
            uint16_t  b = 0x7fc0;

            memcpy(h + i * 2, &b, 2);
        }
    }
    be->upload(be, dev, h, n * es);
    be->sync(be);
    free(h);
}

static inline float *
pair_get(pl_backend_t *be, const void *dev, size_t n)
{
    float  *h = malloc(n * sizeof(float) + 1);

    be->download_f32(be, h, dev, n);
    return h;
}

/* ||got - want|| / ||want||; infinity when got holds a NaN or inf */
static inline double
pair_relerr(const float *got, const float *want, size_t n)
{
    double  num = 0.0, den = 0.0;
    size_t  i;

    for (i = 0; i < n; i++) {
        double  d = (double) got[i] - (double) want[i];

        if (!isfinite(got[i])) {
            return INFINITY;
        }
        num += d * d;
        den += (double) want[i] * want[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

/* compare a GPU result with the CPU's; frees nothing */
static inline int
pair_close(pair_t *p, const void *gpu_out, const void *cpu_out, size_t n,
    double bound, const char *name)
{
    float   *g = pair_get(p->gpu, gpu_out, n);
    float   *c = pair_get(p->cpu, cpu_out, n);
    double   e = pair_relerr(g, c, n);
    int      r;

    r = ok(e <= bound, "%s: relative error %.2e <= %.0e", name, e, bound);
    free(g);
    free(c);
    return r;
}

/* a weight of rows x cols stored as dtype, from fp32 values */
static inline void *
pair_weight_bytes(const float *v, size_t n, pl_dtype_t dt)
{
    char    *b = malloc(n * pl_dtype_size(dt) + 1);
    size_t   i;

    for (i = 0; i < n; i++) {
        if (dt == PL_DT_F32) {
            memcpy(b + i * 4, &v[i], 4);
        } else {
            uint16_t  h = dt == PL_DT_BF16 ? pl_f32_to_bf16(v[i])
                                           : pl_f32_to_f16(v[i]);

            memcpy(b + i * 2, &h, 2);
        }
    }
    return b;
}

/* load the same checkpoint bytes into both backends */
static inline int
pair_weight(pair_t *p, pl_weight_t *wc, pl_weight_t *wg, const void *bytes,
    pl_dtype_t dt, int64_t rows, int64_t cols)
{
    *wc = (pl_weight_t) { NULL, dt, rows, cols };
    *wg = *wc;
    return p->cpu->weight_load(p->cpu, wc, bytes) == 0
           && p->gpu->weight_load(p->gpu, wg, bytes) == 0 ? 0 : -1;
}

#endif /* PL_GPU_PAIR_H */
