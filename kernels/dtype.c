/*
 * dtype: element sizes, names and the scalar conversions between fp32 and
 * the two 16-bit float formats checkpoints use.
 *
 * bf16 is the top half of an fp32; f16 is IEEE binary16.  Both directions
 * round to nearest even and keep infinities and NaNs, so loaders, tests and
 * the CPU kernels agree bit for bit with PyTorch's casts.  f16's range is
 * far smaller than the others': pl_f16_overflows finds what it cannot hold.
 */

#include <math.h>
#include <string.h>

#include "pl_ops.h"


size_t
pl_dtype_size(pl_dtype_t dt)
{
    switch (dt) {
    case PL_DT_F32:
        return 4;
    case PL_DT_F16:
    case PL_DT_BF16:
        return 2;
    }
    return 0;
}


const char *
pl_dtype_name(pl_dtype_t dt)
{
    switch (dt) {
    case PL_DT_F32:
        return "F32";
    case PL_DT_F16:
        return "F16";
    case PL_DT_BF16:
        return "BF16";
    }
    return "unknown";
}


static float
bits_to_f32(uint32_t u)
{
    float  f;

    memcpy(&f, &u, sizeof(f));
    return f;
}


static uint32_t
f32_to_bits(float f)
{
    uint32_t  u;

    memcpy(&u, &f, sizeof(u));
    return u;
}


float
pl_bf16_to_f32(uint16_t h)
{
    return bits_to_f32((uint32_t) h << 16);
}


uint16_t
pl_f32_to_bf16(float f)
{
    uint32_t  u = f32_to_bits(f);

    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (uint16_t) ((u >> 16) | 0x0040u);    /* quiet NaN */
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t) (u >> 16);
}


float
pl_f16_to_f32(uint16_t h)
{
    uint32_t  sign = (uint32_t) (h & 0x8000u) << 16;
    uint32_t  exp = (h >> 10) & 0x1fu;
    uint32_t  mant = h & 0x3ffu;
    float     sub;

    if (exp == 0) {
        sub = (float) mant * 0x1p-24f;
        return sign ? -sub : sub;
    }
    if (exp == 31) {
        return bits_to_f32(sign | 0x7f800000u | (mant << 13));
    }
    return bits_to_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}


/* Shift mant right by shift bits, rounding to nearest even. */
static uint32_t
shift_round_even(uint32_t mant, int shift)
{
    uint32_t  kept = mant >> shift;
    uint32_t  rem = mant & ((1u << shift) - 1u);
    uint32_t  half = 1u << (shift - 1);

    if (rem > half || (rem == half && (kept & 1u))) {
        kept++;
    }
    return kept;
}


uint16_t
pl_f32_to_f16(float f)
{
    uint32_t  u = f32_to_bits(f);
    uint32_t  sign = (u >> 16) & 0x8000u;
    int       exp = (int) ((u >> 23) & 0xffu);
    uint32_t  mant = u & 0x7fffffu;
    int       e = exp - 127 + 15;

    if (exp == 0xff) {
        return (uint16_t) (sign | 0x7c00u | (mant ? 0x200u : 0u));
    }
    if (e >= 31) {
        return (uint16_t) (sign | 0x7c00u);
    }
    if (e <= 0) {
        if (e < -10) {
            return (uint16_t) sign;
        }
        /* subnormal: the carry of a round-up may make it the smallest
           normal, which the bit layout encodes correctly */
        return (uint16_t) (sign | shift_round_even(mant | 0x800000u, 14 - e));
    }
    /* a carry out of the mantissa bumps the exponent, up to infinity */
    return (uint16_t) (sign | shift_round_even(((uint32_t) e << 23) | mant,
                                               13));
}


int64_t
pl_f16_overflows(const void *data, pl_dtype_t dt, int64_t count,
    float *worst)
{
    const uint16_t  *h = data;
    const float     *f = data;
    int64_t          i, n = 0;
    float            most = 0.0f, a;

    if (dt == PL_DT_F16) {
        count = 0;
    }
    for (i = 0; i < count; i++) {
        a = fabsf(dt == PL_DT_F32 ? f[i] : pl_bf16_to_f32(h[i]));
        /* 65520 is halfway between 65504, the largest f16, and 2^16,
           and rounds (to even) up to infinity */
        if (a >= 65520.0f && a != INFINITY) {
            n++;
            most = a > most ? a : most;
        }
    }
    if (worst != NULL) {
        *worst = most;
    }
    return n;
}
