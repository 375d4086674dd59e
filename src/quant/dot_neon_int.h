/* NEON dot kernels of the block-quantized types, written once for two
 * builds: dot_neon.c (Armv8.0 NEON: widening multiplies) and
 * dot_neon_dotprod.c (Armv8.2 SDOT). The including file defines
 *
 *     static inline int32x4_t neon_dot_i8(int32x4_t acc, int8x16_t a, int8x16_t b);
 *
 * adding the 16 products a[i]·b[i] into the four lanes of acc (which lane
 * gets which product differs between the two; every caller only needs the
 * sum of the lanes over one scale group).
 *
 * Integer math per block is exact and equals dot_scalar.c's. The K-quant
 * kernels then add each super-block with the scalar kernels' own F32
 * expression (so with the same compiler settings they give scalar's bits);
 * the 32-element types accumulate blocks in four F32 lanes, so they differ
 * from scalar by summation order only. Internal to quant/. */
#ifndef WICK_QUANT_DOT_NEON_INT_H
#define WICK_QUANT_DOT_NEON_INT_H

#include <arm_neon.h>
#include <string.h>

#include "quant/blocks.h"
#include "quant/quant_impl.h"

static inline float neon_h2f(uint16_t h)
{
    __fp16 f;
    memcpy(&f, &h, 2);
    return (float)f; /* exact, like wk_f16_to_f32 */
}

/* Σ of 32 products (two vectors of each row) in four lanes. */
static inline int32x4_t neon_dot32(int8x16_t a0, int8x16_t a1, const int8_t *y)
{
    return neon_dot_i8(neon_dot_i8(vdupq_n_s32(0), a0, vld1q_s8(y)), a1, vld1q_s8(y + 16));
}

/* 16 bits → 16 bytes of 0x10 where the bit is set (Q5 fifth bits). */
static inline uint8x16_t neon_bits16_to_0x10(uint32_t bits)
{
    static const uint8_t sel[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t v = vcombine_u8(vdup_n_u8((uint8_t)bits), vdup_n_u8((uint8_t)(bits >> 8)));
    return vandq_u8(vtstq_u8(v, vld1q_u8(sel)), vdupq_n_u8(0x10));
}

static void neon_dot_q8_0(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q8_0 *x = w;
    const blk_q8_0 *y = a;
    float32x4_t acc0 = vdupq_n_f32(0), acc1 = vdupq_n_f32(0);
    int64_t i = 0, nb = n / 32;
    for (; i + 2 <= nb; i += 2) { /* two blocks per step: independent chains */
        int32x4_t p0 = neon_dot32(vld1q_s8(x[i].qs), vld1q_s8(x[i].qs + 16), y[i].qs);
        int32x4_t p1 = neon_dot32(vld1q_s8(x[i + 1].qs), vld1q_s8(x[i + 1].qs + 16), y[i + 1].qs);
        acc0 = vfmaq_n_f32(acc0, vcvtq_f32_s32(p0), neon_h2f(x[i].d) * neon_h2f(y[i].d));
        acc1 = vfmaq_n_f32(acc1, vcvtq_f32_s32(p1), neon_h2f(x[i + 1].d) * neon_h2f(y[i + 1].d));
    }
    for (; i < nb; i++) {
        int32x4_t p = neon_dot32(vld1q_s8(x[i].qs), vld1q_s8(x[i].qs + 16), y[i].qs);
        acc0 = vfmaq_n_f32(acc0, vcvtq_f32_s32(p), neon_h2f(x[i].d) * neon_h2f(y[i].d));
    }
    *s = vaddvq_f32(vaddq_f32(acc0, acc1));
}

/* Q4_0 / IQ4_NL: low nibbles pair with a[0..15], high nibbles with a[16..31];
 * book maps a nibble to its signed code. */
static inline void neon_dot_nibble_book(int64_t n, float *s, const blk_q4_0 *x, const blk_q8_0 *y, int8x16_t book)
{
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    float32x4_t acc0 = vdupq_n_f32(0), acc1 = vdupq_n_f32(0);
    int64_t i = 0, nb = n / 32;
    for (; i < nb; i++) {
        const uint8x16_t q = vld1q_u8(x[i].qs);
        const int8x16_t lo = vqtbl1q_s8(book, vandq_u8(q, m4)), hi = vqtbl1q_s8(book, vshrq_n_u8(q, 4));
        const float32x4_t p = vcvtq_f32_s32(neon_dot32(lo, hi, y[i].qs));
        if (i & 1) acc1 = vfmaq_n_f32(acc1, p, neon_h2f(x[i].d) * neon_h2f(y[i].d));
        else acc0 = vfmaq_n_f32(acc0, p, neon_h2f(x[i].d) * neon_h2f(y[i].d));
    }
    *s = vaddvq_f32(vaddq_f32(acc0, acc1));
}

static void neon_dot_q4_0(int64_t n, float *s, const void *w, const void *a)
{
    static const int8_t codes[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
    neon_dot_nibble_book(n, s, w, a, vld1q_s8(codes));
}

static void neon_dot_iq4_nl(int64_t n, float *s, const void *w, const void *a)
{
    _Static_assert(sizeof(blk_iq4_nl) == sizeof(blk_q4_0), "IQ4_NL and Q4_0 blocks share a layout");
    neon_dot_nibble_book(n, s, w, a, vld1q_s8(k_iq4nl_values));
}

static void neon_dot_q4_1(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q4_1 *x = w;
    const blk_q8_1 *y = a;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    float32x4_t acc = vdupq_n_f32(0);
    float msum = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        const uint8x16_t q = vld1q_u8(x[i].qs);
        const int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(q, m4)), hi = vreinterpretq_s8_u8(vshrq_n_u8(q, 4));
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(neon_dot32(lo, hi, y[i].qs)), neon_h2f(x[i].d) * neon_h2f(y[i].d));
        msum += neon_h2f(x[i].m) * neon_h2f(y[i].s);
    }
    *s = vaddvq_f32(acc) + msum;
}

/* Q5 codes 0..31: nibble | fifth bit (bit j of qh for low nibble j, bit j+16 for high nibble j). */
static inline void neon_q5_codes(const uint8_t *qs, const uint8_t *qh4, uint8x16_t *lo, uint8x16_t *hi)
{
    uint32_t qh;
    memcpy(&qh, qh4, 4);
    const uint8x16_t q = vld1q_u8(qs);
    *lo = vorrq_u8(vandq_u8(q, vdupq_n_u8(0x0F)), neon_bits16_to_0x10(qh & 0xFFFF));
    *hi = vorrq_u8(vshrq_n_u8(q, 4), neon_bits16_to_0x10(qh >> 16));
}

static void neon_dot_q5_0(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q5_0 *x = w;
    const blk_q8_0 *y = a;
    const int8x16_t k16 = vdupq_n_s8(16);
    float32x4_t acc = vdupq_n_f32(0);
    for (int64_t i = 0; i < n / 32; i++) {
        uint8x16_t lo, hi;
        neon_q5_codes(x[i].qs, x[i].qh, &lo, &hi);
        const int8x16_t l = vsubq_s8(vreinterpretq_s8_u8(lo), k16), h = vsubq_s8(vreinterpretq_s8_u8(hi), k16);
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(neon_dot32(l, h, y[i].qs)), neon_h2f(x[i].d) * neon_h2f(y[i].d));
    }
    *s = vaddvq_f32(acc);
}

static void neon_dot_q5_1(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q5_1 *x = w;
    const blk_q8_1 *y = a;
    float32x4_t acc = vdupq_n_f32(0);
    float msum = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        uint8x16_t lo, hi;
        neon_q5_codes(x[i].qs, x[i].qh, &lo, &hi);
        const int32x4_t p = neon_dot32(vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi), y[i].qs);
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(p), neon_h2f(x[i].d) * neon_h2f(y[i].d));
        msum += neon_h2f(x[i].m) * neon_h2f(y[i].s);
    }
    *s = vaddvq_f32(acc) + msum;
}

/* ---- K-quants: isum / imin exactly as dot_scalar.c, then its F32 expression per super-block */

/* Q4_K / Q5_K: the 8 six-bit scales and mins (k_scale_min) from the 12
 * bytes, four at a time in 32-bit words w0 = q[0..3], w1 = q[4..7],
 * w2 = q[8..11]: sub-blocks 0-3 keep the low 6 bits of w0 (scales) and w1
 * (mins); sub-blocks 4-7 take 4 bits from w2 and their top 2 bits from the
 * top bits of w0 (scales) or w1 (mins). */
static inline void neon_k_scales(const uint8_t *q, uint8_t sc[8], uint8_t mn[8])
{
    uint32_t w[3];
    memcpy(w, q, 12);
    const uint32_t lo6 = 0x3F3F3F3Fu, lo4 = 0x0F0F0F0Fu, lo2 = 0x03030303u;
    const uint32_t s03 = w[0] & lo6, m03 = w[1] & lo6;
    const uint32_t s47 = (w[2] & lo4) | (((w[0] >> 6) & lo2) << 4);
    const uint32_t m47 = ((w[2] >> 4) & lo4) | (((w[1] >> 6) & lo2) << 4);
    memcpy(sc, &s03, 4);
    memcpy(sc + 4, &s47, 4);
    memcpy(mn, &m03, 4);
    memcpy(mn + 4, &m47, 4);
}

/* Q3_K: the 16 signed scales (q3k_scale) in one vector: 4 low bits from
 * bytes 0..7 (low nibbles for sub-blocks 0-7, high for 8-15), 2 high bits
 * from byte 8 + (i & 3) shifted by 2·(i / 4). */
static inline int8x16_t neon_q3k_scales(const uint8_t *s)
{
    static const int8_t shr[16] = {0, 0, 0, 0, -2, -2, -2, -2, -4, -4, -4, -4, -6, -6, -6, -6};
    const uint8x8_t b = vld1_u8(s);
    const uint8x16_t lo = vcombine_u8(vand_u8(b, vdup_n_u8(0x0F)), vshr_n_u8(b, 4));
    uint32_t h;
    memcpy(&h, s + 8, 4);
    const uint8x16_t hb = vandq_u8(vshlq_u8(vreinterpretq_u8_u32(vdupq_n_u32(h)), vld1q_s8(shr)), vdupq_n_u8(3));
    return vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, vshlq_n_u8(hb, 4))), vdupq_n_s8(32));
}

/* Σ_j mn[j]·(bsums[2j] + bsums[2j+1]) for the 8 sub-blocks of Q4_K / Q5_K. */
static inline int neon_k_mins(const uint8_t mn[8], const int16_t *bsums)
{
    const int16x8_t b0 = vld1q_s16(bsums), b1 = vld1q_s16(bsums + 8);
    const int16x8_t pair = vpaddq_s16(b0, b1); /* bsums[2j] + bsums[2j+1], j = 0..7 */
    const int16x8_t m = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mn)));
    int32x4_t t = vmull_s16(vget_low_s16(m), vget_low_s16(pair));
    t = vmlal_high_s16(t, m, pair);
    return vaddvq_s32(t);
}

static void neon_dot_q4_K(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q4_K *x = w;
    const blk_q8_K *y = a;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    float sum = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        uint8_t sc[8], mn[8];
        neon_k_scales(x[i].scales, sc, mn);
        int32x4_t isv = vdupq_n_s32(0);
        for (int g = 0; g < 4; g++) {
            const uint8x16_t q0 = vld1q_u8(x[i].qs + 32 * g), q1 = vld1q_u8(x[i].qs + 32 * g + 16);
            const int8_t *ay = y[i].qs + 64 * g;
            const int32x4_t dlo = neon_dot32(vreinterpretq_s8_u8(vandq_u8(q0, m4)),
                                             vreinterpretq_s8_u8(vandq_u8(q1, m4)), ay);
            const int32x4_t dhi = neon_dot32(vreinterpretq_s8_u8(vshrq_n_u8(q0, 4)),
                                             vreinterpretq_s8_u8(vshrq_n_u8(q1, 4)), ay + 32);
            isv = vmlaq_n_s32(isv, dlo, sc[2 * g]);
            isv = vmlaq_n_s32(isv, dhi, sc[2 * g + 1]);
        }
        const int isum = vaddvq_s32(isv), imin = neon_k_mins(mn, y[i].bsums);
        sum += y[i].d * neon_h2f(x[i].d) * (float)isum - y[i].d * neon_h2f(x[i].dmin) * (float)imin;
    }
    *s = sum;
}

static void neon_dot_q5_K(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q5_K *x = w;
    const blk_q8_K *y = a;
    const uint8x16_t m4 = vdupq_n_u8(0x0F), b16 = vdupq_n_u8(0x10);
    float sum = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        uint8_t sc[8], mn[8];
        neon_k_scales(x[i].scales, sc, mn);
        const uint8x16_t h0 = vld1q_u8(x[i].qh), h1 = vld1q_u8(x[i].qh + 16);
        int32x4_t isv = vdupq_n_s32(0);
        for (int g = 0; g < 4; g++) {
            const uint8x16_t q0 = vld1q_u8(x[i].qs + 32 * g), q1 = vld1q_u8(x[i].qs + 32 * g + 16);
            /* bit 2g of qh → 0x10 in the low-nibble codes, bit 2g+1 → 0x10 in the high ones */
            const uint8x16_t bl = vdupq_n_u8((uint8_t)(1u << (2 * g))), bh = vdupq_n_u8((uint8_t)(2u << (2 * g)));
            const uint8x16_t l0 = vorrq_u8(vandq_u8(q0, m4), vandq_u8(vtstq_u8(h0, bl), b16));
            const uint8x16_t l1 = vorrq_u8(vandq_u8(q1, m4), vandq_u8(vtstq_u8(h1, bl), b16));
            const uint8x16_t u0 = vorrq_u8(vshrq_n_u8(q0, 4), vandq_u8(vtstq_u8(h0, bh), b16));
            const uint8x16_t u1 = vorrq_u8(vshrq_n_u8(q1, 4), vandq_u8(vtstq_u8(h1, bh), b16));
            const int8_t *ay = y[i].qs + 64 * g;
            isv = vmlaq_n_s32(isv, neon_dot32(vreinterpretq_s8_u8(l0), vreinterpretq_s8_u8(l1), ay), sc[2 * g]);
            isv = vmlaq_n_s32(isv, neon_dot32(vreinterpretq_s8_u8(u0), vreinterpretq_s8_u8(u1), ay + 32),
                              sc[2 * g + 1]);
        }
        const int isum = vaddvq_s32(isv), imin = neon_k_mins(mn, y[i].bsums);
        sum += y[i].d * neon_h2f(x[i].d) * (float)isum - y[i].d * neon_h2f(x[i].dmin) * (float)imin;
    }
    *s = sum;
}

/* Q6_K: per half of 128, codes u − 32 with u = 4 bits of ql | 2 bits of qh;
 * each 16 codes have their own int8 scale. */
static void neon_dot_q6_K(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q6_K *x = w;
    const blk_q8_K *y = a;
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m30 = vdupq_n_u8(0x30);
    const int8x16_t k32 = vdupq_n_s8(32);
    float sum = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        int32x4_t isv = vdupq_n_s32(0);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x[i].ql + 64 * h, *qh = x[i].qh + 32 * h;
            const int8_t *sc = x[i].scales + 8 * h, *ay = y[i].qs + 128 * h;
            for (int v = 0; v < 2; v++) { /* elements l = 16v .. 16v+15 of each quarter */
                const uint8x16_t l0 = vld1q_u8(ql + 16 * v), l1 = vld1q_u8(ql + 32 + 16 * v);
                const uint8x16_t hb = vld1q_u8(qh + 16 * v);
                uint8x16_t u[4];
                u[0] = vorrq_u8(vandq_u8(l0, m4), vandq_u8(vshlq_n_u8(hb, 4), m30));
                u[1] = vorrq_u8(vandq_u8(l1, m4), vandq_u8(vshlq_n_u8(hb, 2), m30));
                u[2] = vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(hb, m30));
                u[3] = vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(vshrq_n_u8(hb, 2), m30));
                for (int q = 0; q < 4; q++) {
                    const int8x16_t c = vsubq_s8(vreinterpretq_s8_u8(u[q]), k32);
                    const int32x4_t d = neon_dot_i8(vdupq_n_s32(0), c, vld1q_s8(ay + 32 * q + 16 * v));
                    isv = vmlaq_n_s32(isv, d, sc[2 * q + v]);
                }
            }
        }
        sum += y[i].d * neon_h2f(x[i].d) * (float)vaddvq_s32(isv);
    }
    *s = sum;
}

/* Q2_K: codes 0..3 with a 4-bit scale per 16 elements; mins via bsums. */
static void neon_dot_q2_K(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q2_K *x = w;
    const blk_q8_K *y = a;
    const uint8x16_t m3 = vdupq_n_u8(3);
    float sum = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        const uint8x16_t sc8 = vld1q_u8(x[i].scales);
        const int16x8_t mlo = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(vshrq_n_u8(sc8, 4))));
        const int16x8_t mhi = vreinterpretq_s16_u16(vmovl_high_u8(vshrq_n_u8(sc8, 4)));
        const int16x8_t b0 = vld1q_s16(y[i].bsums), b1 = vld1q_s16(y[i].bsums + 8);
        int32x4_t mv = vmull_s16(vget_low_s16(mlo), vget_low_s16(b0));
        mv = vmlal_high_s16(mv, mlo, b0);
        mv = vmlal_s16(mv, vget_low_s16(mhi), vget_low_s16(b1));
        mv = vmlal_high_s16(mv, mhi, b1);
        const int imin = vaddvq_s32(mv);
        int32x4_t isv = vdupq_n_s32(0);
        for (int h = 0; h < 2; h++) {
            const uint8x16_t q0 = vld1q_u8(x[i].qs + 32 * h), q1 = vld1q_u8(x[i].qs + 32 * h + 16);
            for (int p = 0; p < 4; p++) {
                const int sb = 8 * h + 2 * p;
                const int8_t *ay = y[i].qs + 128 * h + 32 * p;
                const int8x16_t c0 = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(q0, vdupq_n_s8((int8_t)(-2 * p))), m3));
                const int8x16_t c1 = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(q1, vdupq_n_s8((int8_t)(-2 * p))), m3));
                isv = vmlaq_n_s32(isv, neon_dot_i8(vdupq_n_s32(0), c0, vld1q_s8(ay)), x[i].scales[sb] & 0xF);
                isv = vmlaq_n_s32(isv, neon_dot_i8(vdupq_n_s32(0), c1, vld1q_s8(ay + 16)), x[i].scales[sb + 1] & 0xF);
            }
        }
        sum += y[i].d * neon_h2f(x[i].d) * (float)vaddvq_s32(isv) - y[i].d * neon_h2f(x[i].dmin) * (float)imin;
    }
    *s = sum;
}

/* Q3_K: signed codes (2 bits of qs) − 4·(hmask bit clear), 6-bit signed scales. */
static void neon_dot_q3_K(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q3_K *x = w;
    const blk_q8_K *y = a;
    const uint8x16_t m3 = vdupq_n_u8(3), k4 = vdupq_n_u8(4);
    float sum = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        int8_t scv[16];
        vst1q_s8(scv, neon_q3k_scales(x[i].scales));
        const uint8x16_t hm0 = vld1q_u8(x[i].hmask), hm1 = vld1q_u8(x[i].hmask + 16);
        int32x4_t isv = vdupq_n_s32(0);
        for (int h = 0; h < 2; h++) {
            const uint8x16_t q0 = vld1q_u8(x[i].qs + 32 * h), q1 = vld1q_u8(x[i].qs + 32 * h + 16);
            for (int p = 0; p < 4; p++) {
                const int sb = 8 * h + 2 * p;
                const int8_t *ay = y[i].qs + 128 * h + 32 * p;
                const int8x16_t sh = vdupq_n_s8((int8_t)(-2 * p));
                const uint8x16_t bit = vdupq_n_u8((uint8_t)(1u << (4 * h + p)));
                /* code = low 2 bits − (4 where the hmask bit is clear) */
                const uint8x16_t lo0 = vandq_u8(vshlq_u8(q0, sh), m3), lo1 = vandq_u8(vshlq_u8(q1, sh), m3);
                const int8x16_t c0 = vreinterpretq_s8_u8(vsubq_u8(lo0, vbicq_u8(k4, vtstq_u8(hm0, bit))));
                const int8x16_t c1 = vreinterpretq_s8_u8(vsubq_u8(lo1, vbicq_u8(k4, vtstq_u8(hm1, bit))));
                isv = vmlaq_n_s32(isv, neon_dot_i8(vdupq_n_s32(0), c0, vld1q_s8(ay)), scv[sb]);
                isv = vmlaq_n_s32(isv, neon_dot_i8(vdupq_n_s32(0), c1, vld1q_s8(ay + 16)), scv[sb + 1]);
            }
        }
        sum += y[i].d * neon_h2f(x[i].d) * (float)vaddvq_s32(isv);
    }
    *s = sum;
}

/* IQ4_XS: codebook values per 32-element sub-block with a 6-bit scale (− 32). */
static void neon_dot_iq4_xs(int64_t n, float *s, const void *w, const void *a)
{
    const blk_iq4_xs *x = w;
    const blk_q8_K *y = a;
    const int8x16_t book = vld1q_s8(k_iq4nl_values);
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    float sum = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        int32x4_t isv = vdupq_n_s32(0);
        for (int ib = 0; ib < 8; ib++) {
            const uint8x16_t q = vld1q_u8(x[i].qs + 16 * ib);
            const int8x16_t lo = vqtbl1q_s8(book, vandq_u8(q, m4)), hi = vqtbl1q_s8(book, vshrq_n_u8(q, 4));
            isv = vmlaq_n_s32(isv, neon_dot32(lo, hi, y[i].qs + 32 * ib), iq4xs_scale(ib, &x[i]) - 32);
        }
        sum += y[i].d * neon_h2f(x[i].d) * (float)vaddvq_s32(isv);
    }
    *s = sum;
}

/* The block-type kernels of this build, or NULL (float types: dot_neon.c). */
static qt_vec_dot_fn neon_block_kernel(enum qt_type type)
{
    switch (type) {
    case QT_Q4_0: return neon_dot_q4_0;
    case QT_Q4_1: return neon_dot_q4_1;
    case QT_Q5_0: return neon_dot_q5_0;
    case QT_Q5_1: return neon_dot_q5_1;
    case QT_Q8_0: return neon_dot_q8_0;
    case QT_IQ4_NL: return neon_dot_iq4_nl;
    case QT_Q2_K: return neon_dot_q2_K;
    case QT_Q3_K: return neon_dot_q3_K;
    case QT_Q4_K: return neon_dot_q4_K;
    case QT_Q5_K: return neon_dot_q5_K;
    case QT_Q6_K: return neon_dot_q6_K;
    case QT_IQ4_XS: return neon_dot_iq4_xs;
    default: return NULL;
    }
}

#endif
