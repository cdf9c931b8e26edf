/*
 * sample_math: the arithmetic of the sampling definition (pl_ops.h, above
 * pl_sample_req_t), shared bit for bit by the CPU twin
 * (kernels/cpu/cpu_sample.c) and the CUDA kernel (kernels/sample.cu).
 *
 * The same seeded request must draw the same token on every backend, so
 * nothing here may round differently on the two sides:
 *
 *   - every float operation is one IEEE operation rounded to nearest.  In
 *     device code they are written as __fadd_rn and friends, which nvcc
 *     never fuses into an FMA; host code is compiled as ISO C11, where gcc
 *     does not contract either (-ffp-contract=off);
 *   - ln and exp are computed here from those operations (range reduction
 *     and a short series), not taken from libm or CUDA's math library,
 *     whose last bits differ;
 *   - the probability mass top_p compares is an integer: exp(z) in fixed
 *     point with 40 fraction bits, so sums are exact in any order and a
 *     block reduction gives the CPU's total to the last bit.
 *
 * Thresholds are chosen in the "key" space of a float: a uint32 whose
 * unsigned order is the float's order (the sign bit flipped for positive
 * values, every bit for negative ones; -0 is folded onto +0), so an exact
 * k-th largest value or top_p cut is a search over 32 bits.
 */

#ifndef PL_SAMPLE_MATH_H
#define PL_SAMPLE_MATH_H

#include <stdint.h>
#include <string.h>

#include "philox.h"
#include "pl_ops.h"

#if !defined(__CUDACC__) && defined(__GNUC__) && !defined(__clang__) \
    && !defined(__STRICT_ANSI__)
#error "sample_math.h needs ISO C (-std=c11): gnu modes fuse a * b + c"
#endif
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#ifdef __CUDA_ARCH__
#define PL_FADD(a, b)  __fadd_rn((a), (b))
#define PL_FSUB(a, b)  __fsub_rn((a), (b))
#define PL_FMUL(a, b)  __fmul_rn((a), (b))
#define PL_FDIV(a, b)  __fdiv_rn((a), (b))
#else
#define PL_FADD(a, b)  ((a) + (b))
#define PL_FSUB(a, b)  ((a) - (b))
#define PL_FMUL(a, b)  ((a) * (b))
#define PL_FDIV(a, b)  ((a) / (b))
#endif

#define PL_SAMPLE_INF        __builtin_inff()
#define PL_SAMPLE_W_ONE      0x1p40f      /* fixed-point 1.0 of a weight */
#define PL_SAMPLE_Z_FLOOR    -32.0f       /* exp(z) * 2^40 < 1 below it */
#define PL_SAMPLE_NOISE_MAX  17.0f        /* > -ln(-ln(1 - 2^-24)) */


static inline PL_HOSTDEV uint32_t
pl_sample_f2u(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t  u;

    memcpy(&u, &f, sizeof(u));
    return u;
#endif
}


static inline PL_HOSTDEV float
pl_sample_u2f(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float  f;

    memcpy(&f, &u, sizeof(f));
    return f;
#endif
}


/* the order-preserving key of a float that is not NaN */
static inline PL_HOSTDEV uint32_t
pl_sample_key(float f)
{
    uint32_t  u = pl_sample_f2u(f == 0.0f ? 0.0f : f);

    return u ^ ((u & 0x80000000u) ? 0xffffffffu : 0x80000000u);
}


/*
 * ln(x) for a positive normal or subnormal x (0 -> -inf): x = m 2^e with
 * m in [sqrt(1/2), sqrt(2)), f = m - 1 exact, s = f / (2 + f), and
 * ln(m) = 2 atanh(s) = 2s + 2s^3/3 + ... + 2s^9/9, within a few ulps.
 */
static inline PL_HOSTDEV float
pl_sample_log(float x)
{
    uint32_t  u;
    float     m, f, s, s2, p;
    int       e = 0;

    if (!(x > 0.0f)) {
        return x == 0.0f ? -PL_SAMPLE_INF : x - x;
    }
    if (x == PL_SAMPLE_INF) {
        return x;
    }
    if (x < 0x1p-126f) {
        x = PL_FMUL(x, 0x1p24f);
        e = -24;
    }

    u = pl_sample_f2u(x);
    e += (int) (u >> 23) - 127;
    u = (u & 0x007fffffu) | 0x3f800000u;
    if (u > 0x3fb504f3u) {              /* m > sqrt(2): halve it */
        u -= 0x00800000u;
        e++;
    }
    m = pl_sample_u2f(u);

    f = PL_FSUB(m, 1.0f);
    s = PL_FDIV(f, PL_FADD(2.0f, f));
    s2 = PL_FMUL(s, s);
    p = PL_FMUL(s2, 0.22222222f);                       /* 2/9 */
    p = PL_FMUL(s2, PL_FADD(p, 0.28571429f));           /* 2/7 */
    p = PL_FMUL(s2, PL_FADD(p, 0.4f));                  /* 2/5 */
    p = PL_FMUL(s2, PL_FADD(p, 0.66666667f));           /* 2/3 */
    p = PL_FMUL(s, PL_FADD(p, 2.0f));

    /* e ln 2 in two parts: the high one has 16 bits, so e * hi is exact */
    return PL_FADD(PL_FMUL((float) e, 0.693145751953125f),
                   PL_FADD(p, PL_FMUL((float) e, 1.42860677e-06f)));
}


/*
 * exp(z) for z <= 0 (0 below PL_SAMPLE_Z_FLOOR, where its fixed-point
 * weight would be 0 anyway): z = k ln 2 + r, |r| <= ln 2 / 2, a degree 7
 * Taylor polynomial for exp(r), times 2^k built from its bits.
 */
static inline PL_HOSTDEV float
pl_sample_exp(float z)
{
    float  kf, r, p;
    int    k;

    if (!(z >= PL_SAMPLE_Z_FLOOR)) {
        return 0.0f;
    }

    /* k = round(z / ln 2): truncate, then step down for a negative */
    r = PL_FADD(PL_FMUL(z, 1.44269504f), 0.5f);
    k = (int) r;
    if ((float) k > r) {
        k--;
    }
    kf = (float) k;

    r = PL_FSUB(z, PL_FMUL(kf, 0.693145751953125f));
    r = PL_FSUB(r, PL_FMUL(kf, 1.42860677e-06f));

    p = PL_FADD(PL_FMUL(r, 1.98412698e-04f), 1.38888889e-03f);  /* 1/7! 1/6! */
    p = PL_FADD(PL_FMUL(r, p), 8.33333333e-03f);                /* 1/5! */
    p = PL_FADD(PL_FMUL(r, p), 4.16666667e-02f);                /* 1/4! */
    p = PL_FADD(PL_FMUL(r, p), 1.66666667e-01f);                /* 1/3! */
    p = PL_FADD(PL_FMUL(r, p), 0.5f);
    p = PL_FADD(PL_FMUL(r, p), 1.0f);
    p = PL_FADD(PL_FMUL(r, p), 1.0f);

    return PL_FMUL(p, pl_sample_u2f((uint32_t) (k + 127) << 23));
}


/* exp(z) as a fixed-point weight: 2^40 for z = 0 */
static inline PL_HOSTDEV uint64_t
pl_sample_weight(float z)
{
    return (uint64_t) PL_FMUL(pl_sample_exp(z), PL_SAMPLE_W_ONE);
}


/* The mass top_p asks for out of total (>= 1, so the best id is kept). */
static inline PL_HOSTDEV uint64_t
pl_sample_target(float top_p, uint64_t total)
{
    double    want = (double) top_p * (double) total;
    uint64_t  t = want > 0.0 ? (uint64_t) want : 0;

    return t < 1 ? 1 : t > total ? total : t;
}


/* v after one adjust entry (step 1 of the definition) */
static inline PL_HOSTDEV float
pl_sample_adjust(float v, const pl_logit_adjust_t *a, float rp)
{
    v = PL_FADD(v, a->bias);
    if (a->repeat) {
        v = v > 0.0f ? PL_FDIV(v, rp) : PL_FMUL(v, rp);
    }
    v = PL_FADD(v, a->penalty);

    return v != v ? -PL_SAMPLE_INF : v;
}


/* z = (v - max) / temperature */
static inline PL_HOSTDEV float
pl_sample_z(float v, float max, float temperature)
{
    return PL_FDIV(PL_FSUB(v, max), temperature);
}


/* ln(min_p), the lowest z min_p keeps (min_p > 0; 1 and above keep only
   the best ids) */
static inline PL_HOSTDEV float
pl_sample_min_z(float min_p)
{
    return min_p >= 1.0f ? 0.0f : pl_sample_log(min_p);
}


/*
 * The draw's score of id in request (seed, step): z - ln(e), e = -ln(u),
 * u from word id % 4 of Philox-4x32-10 keyed by the seed at counter
 * (id / 4, 0, step).  word is that output word.
 */
static inline PL_HOSTDEV float
pl_sample_score(float z, uint32_t word)
{
    float  e = -pl_sample_log(pl_philox_u01(word));

    return PL_FSUB(z, pl_sample_log(e));
}


/* word i % 4 of w, without indexing an array by a variable (which would
   put w in a GPU thread's local memory) */
static inline PL_HOSTDEV uint32_t
pl_sample_word(const pl_philox_ctr_t *w, uint32_t i)
{
    uint32_t  lo = (i & 1) ? w->v[1] : w->v[0];
    uint32_t  hi = (i & 1) ? w->v[3] : w->v[2];

    return (i & 2) ? hi : lo;
}


static inline PL_HOSTDEV pl_philox_ctr_t
pl_sample_noise4(uint64_t seed, uint64_t step, uint32_t group)
{
    pl_philox_ctr_t  c = { { group, 0, (uint32_t) step,
                             (uint32_t) (step >> 32) } };

    return pl_philox4x32_10(c, (uint32_t) seed, (uint32_t) (seed >> 32));
}

#endif /* PL_SAMPLE_MATH_H */
