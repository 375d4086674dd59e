/* Scalar half/bfloat16 conversions (exact IEEE semantics, subnormals kept). */
#ifndef WICK_UTIL_F16_H
#define WICK_UTIL_F16_H

#include <stdint.h>
#include <string.h>

static inline float wk_f32_from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t wk_bits_from_f32(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static inline float wk_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0) {
        if (man == 0) return wk_f32_from_bits(sign);
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (exp == 31) return wk_f32_from_bits(sign | 0x7f800000u | (man << 13));
    return wk_f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

/* Round to nearest even, as the F16C instruction does. */
static inline uint16_t wk_f32_to_f16(float f)
{
    uint32_t x = wk_bits_from_f32(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffff;
    if (ax >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 | ((ax >> 13) & 0x3ff) : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to inf */
    if (ax < 0x38800000u) { /* result is subnormal or zero */
        if (ax < 0x33000000u) return (uint16_t)sign; /* < half of smallest subnormal */
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = ax + 0xfff + ((ax >> 13) & 1);
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

static inline float wk_bf16_to_f32(uint16_t b) { return wk_f32_from_bits((uint32_t)b << 16); }

/* llama.cpp's narrowing: round to nearest even, NaN made quiet. */
static inline uint16_t wk_f32_to_bf16(float f)
{
    uint32_t u = wk_bits_from_f32(f);
    if ((u & 0x7fffffff) > 0x7f800000u) return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

#endif
