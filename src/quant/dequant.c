/* Scalar dequantizers, bit-exact with ggml's dequantize_row_* (the float
 * operations are written in ggml's order: e.g. Q2_K is (d*sc)*q - dmin*mn). */
#include "quant/quant_impl.h"

#include <string.h>

#include "quant/blocks.h"
#include "util/f16.h"

#define H2F(h) wk_f16_to_f32(h)

static void dq_q4_0(const blk_q4_0 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b++, y += 32) {
        const float d = H2F(b->d);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((b->qs[j] & 0xF) - 8) * d;
            y[j + 16] = (float)((b->qs[j] >> 4) - 8) * d;
        }
    }
}

static void dq_q4_1(const blk_q4_1 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b++, y += 32) {
        const float d = H2F(b->d), m = H2F(b->m);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(b->qs[j] & 0xF) * d + m;
            y[j + 16] = (float)(b->qs[j] >> 4) * d + m;
        }
    }
}

static void dq_q5_0(const blk_q5_0 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b++, y += 32) {
        const float d = H2F(b->d);
        uint32_t qh;
        memcpy(&qh, b->qh, 4);
        for (int j = 0; j < 16; j++) {
            int x0 = (int)((b->qs[j] & 0xF) | (((qh >> j) & 1) << 4)) - 16;
            int x1 = (int)((b->qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
            y[j] = (float)x0 * d;
            y[j + 16] = (float)x1 * d;
        }
    }
}

static void dq_q5_1(const blk_q5_1 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b++, y += 32) {
        const float d = H2F(b->d), m = H2F(b->m);
        uint32_t qh;
        memcpy(&qh, b->qh, 4);
        for (int j = 0; j < 16; j++) {
            int x0 = (int)((b->qs[j] & 0xF) | (((qh >> j) & 1) << 4));
            int x1 = (int)((b->qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
            y[j] = (float)x0 * d + m;
            y[j + 16] = (float)x1 * d + m;
        }
    }
}

static void dq_q8_0(const blk_q8_0 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b++, y += 32) {
        const float d = H2F(b->d);
        for (int j = 0; j < 32; j++) y[j] = (float)b->qs[j] * d;
    }
}

static void dq_q8_1(const blk_q8_1 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b++, y += 32) {
        const float d = H2F(b->d);
        for (int j = 0; j < 32; j++) y[j] = (float)b->qs[j] * d;
    }
}

static void dq_q2_K(const blk_q2_K *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b++) {
        const float d = H2F(b->d), dmin = H2F(b->dmin);
        const uint8_t *q = b->qs;
        int is = 0;
        for (int h = 0; h < 2; h++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int half = 0; half < 2; half++) {
                    uint8_t sc = b->scales[is++];
                    const float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
                    for (int l = 0; l < 16; l++)
                        *y++ = dl * (float)((q[16 * half + l] >> shift) & 3) - ml;
                }
            }
        }
    }
}

static void dq_q3_K(const blk_q3_K *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b++) {
        const float d = H2F(b->d);
        const uint8_t *q = b->qs;
        uint8_t m = 1;
        int is = 0;
        for (int h = 0; h < 2; h++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
                for (int half = 0; half < 2; half++) {
                    const float dl = d * (float)q3k_scale(is++, b->scales);
                    for (int l = 16 * half; l < 16 * half + 16; l++) {
                        int code = ((q[l] >> shift) & 3) - ((b->hmask[l] & m) ? 0 : 4);
                        *y++ = dl * (float)code;
                    }
                }
            }
        }
    }
}

static void dq_q4_K(const blk_q4_K *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b++) {
        const float d = H2F(b->d), dmin = H2F(b->dmin);
        const uint8_t *q = b->qs;
        for (int g = 0; g < 4; g++, q += 32) {
            uint8_t sc, mn;
            k_scale_min(2 * g, b->scales, &sc, &mn);
            const float d1 = d * (float)sc, m1 = dmin * (float)mn;
            k_scale_min(2 * g + 1, b->scales, &sc, &mn);
            const float d2 = d * (float)sc, m2 = dmin * (float)mn;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

static void dq_q5_K(const blk_q5_K *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b++) {
        const float d = H2F(b->d), dmin = H2F(b->dmin);
        const uint8_t *q = b->qs;
        for (int g = 0; g < 4; g++, q += 32) {
            uint8_t sc, mn;
            k_scale_min(2 * g, b->scales, &sc, &mn);
            const float d1 = d * (float)sc, m1 = dmin * (float)mn;
            k_scale_min(2 * g + 1, b->scales, &sc, &mn);
            const float d2 = d * (float)sc, m2 = dmin * (float)mn;
            const uint8_t u1 = (uint8_t)(1u << (2 * g)), u2 = (uint8_t)(2u << (2 * g));
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)((q[l] & 0xF) + (b->qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)((q[l] >> 4) + (b->qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

static void dq_q6_K(const blk_q6_K *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b++) {
        const float d = H2F(b->d);
        const uint8_t *ql = b->ql, *qh = b->qh;
        const int8_t *sc = b->scales;
        for (int h = 0; h < 2; h++, ql += 64, qh += 32, sc += 8, y += 128) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = (int)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = (int)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * (float)sc[is + 0] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

static void dq_q8_K(const blk_q8_K *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b++, y += 256)
        for (int j = 0; j < 256; j++) y[j] = b->d * (float)b->qs[j];
}

static void dq_iq4_nl(const blk_iq4_nl *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b++, y += 32) {
        const float d = H2F(b->d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)k_iq4nl_values[b->qs[j] & 0xF];
            y[j + 16] = d * (float)k_iq4nl_values[b->qs[j] >> 4];
        }
    }
}

static void dq_iq4_xs(const blk_iq4_xs *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b++) {
        const float d = H2F(b->d);
        for (int ib = 0; ib < 8; ib++, y += 32) {
            const float dl = d * (float)(iq4xs_scale(ib, b) - 32);
            const uint8_t *qs = b->qs + 16 * ib;
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)k_iq4nl_values[qs[j] & 0xF];
                y[j + 16] = dl * (float)k_iq4nl_values[qs[j] >> 4];
            }
        }
    }
}

int qt_dequantize_blocks(enum qt_type type, const void *src, float *dst, int64_t n)
{
    switch (type) {
    case QT_F32: memcpy(dst, src, (size_t)n * 4); return 0;
    case QT_F16: {
        const uint8_t *p = src;
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = wk_f16_to_f32(h);
        }
        return 0;
    }
    case QT_BF16: {
        const uint8_t *p = src;
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = wk_bf16_to_f32(h);
        }
        return 0;
    }
    case QT_Q4_0: dq_q4_0(src, dst, n / 32); return 0;
    case QT_Q4_1: dq_q4_1(src, dst, n / 32); return 0;
    case QT_Q5_0: dq_q5_0(src, dst, n / 32); return 0;
    case QT_Q5_1: dq_q5_1(src, dst, n / 32); return 0;
    case QT_Q8_0: dq_q8_0(src, dst, n / 32); return 0;
    case QT_Q8_1: dq_q8_1(src, dst, n / 32); return 0;
    case QT_Q2_K: dq_q2_K(src, dst, n / 256); return 0;
    case QT_Q3_K: dq_q3_K(src, dst, n / 256); return 0;
    case QT_Q4_K: dq_q4_K(src, dst, n / 256); return 0;
    case QT_Q5_K: dq_q5_K(src, dst, n / 256); return 0;
    case QT_Q6_K: dq_q6_K(src, dst, n / 256); return 0;
    case QT_Q8_K: dq_q8_K(src, dst, n / 256); return 0;
    case QT_IQ4_NL: dq_iq4_nl(src, dst, n / 32); return 0;
    case QT_IQ4_XS: dq_iq4_xs(src, dst, n / 256); return 0;
    default: return -1;
    }
}
