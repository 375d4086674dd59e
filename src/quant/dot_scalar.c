/* Scalar dot kernels: weight row · activation row in the partner format
 * (spec/gguf.md 6.5). Integer sums inside a block, F32 across blocks, the
 * same terms as llama.cpp's generic kernels. These define the numerics the
 * fast kernels are tested against. */
#include <string.h>

#include "quant/blocks.h"
#include "quant/quant_impl.h"
#include "util/f16.h"

#define H2F(h) wk_f16_to_f32(h)

static void dot_f32(int64_t n, float *s, const void *w, const void *a)
{
    const float *x = w, *y = a;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * y[i]);
    *s = (float)sum;
}

static void dot_f16(int64_t n, float *s, const void *w, const void *a)
{
    const uint8_t *x = w, *y = a;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        uint16_t hx, hy;
        memcpy(&hx, x + 2 * i, 2);
        memcpy(&hy, y + 2 * i, 2);
        sum += (double)(H2F(hx) * H2F(hy)); /* the product of two halves is exact in F32 */
    }
    *s = (float)sum;
}

static void dot_bf16(int64_t n, float *s, const void *w, const void *a)
{
    const uint8_t *x = w, *y = a;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        uint16_t hx, hy;
        memcpy(&hx, x + 2 * i, 2);
        memcpy(&hy, y + 2 * i, 2);
        sum += (double)(wk_bf16_to_f32(hx) * wk_bf16_to_f32(hy));
    }
    *s = (float)sum;
}

static void dot_q4_0(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q4_0 *x = w;
    const blk_q8_0 *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        int isum = 0;
        for (int j = 0; j < 16; j++)
            isum += ((x[i].qs[j] & 0xF) - 8) * y[i].qs[j] + ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
        sum += (float)isum * (H2F(x[i].d) * H2F(y[i].d));
    }
    *s = sum;
}

static void dot_q4_1(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q4_1 *x = w;
    const blk_q8_1 *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        int isum = 0;
        for (int j = 0; j < 16; j++)
            isum += (x[i].qs[j] & 0xF) * y[i].qs[j] + (x[i].qs[j] >> 4) * y[i].qs[j + 16];
        sum += (float)isum * (H2F(x[i].d) * H2F(y[i].d)) + H2F(x[i].m) * H2F(y[i].s);
    }
    *s = sum;
}

static void dot_q5_0(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q5_0 *x = w;
    const blk_q8_0 *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = (int)((x[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4)) - 16;
            int q1 = (int)((x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
            isum += q0 * y[i].qs[j] + q1 * y[i].qs[j + 16];
        }
        sum += (float)isum * (H2F(x[i].d) * H2F(y[i].d));
    }
    *s = sum;
}

static void dot_q5_1(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q5_1 *x = w;
    const blk_q8_1 *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = (int)((x[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4));
            int q1 = (int)((x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
            isum += q0 * y[i].qs[j] + q1 * y[i].qs[j + 16];
        }
        sum += (float)isum * (H2F(x[i].d) * H2F(y[i].d)) + H2F(x[i].m) * H2F(y[i].s);
    }
    *s = sum;
}

static void dot_q8_0(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q8_0 *x = w;
    const blk_q8_0 *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        int isum = 0;
        for (int j = 0; j < 32; j++) isum += x[i].qs[j] * y[i].qs[j];
        sum += (float)isum * (H2F(x[i].d) * H2F(y[i].d));
    }
    *s = sum;
}

static void dot_iq4_nl(int64_t n, float *s, const void *w, const void *a)
{
    const blk_iq4_nl *x = w;
    const blk_q8_0 *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        int isum = 0;
        for (int j = 0; j < 16; j++)
            isum += k_iq4nl_values[x[i].qs[j] & 0xF] * y[i].qs[j] +
                    k_iq4nl_values[x[i].qs[j] >> 4] * y[i].qs[j + 16];
        sum += (float)isum * (H2F(x[i].d) * H2F(y[i].d));
    }
    *s = sum;
}

/* K-quants: per block, isum = Σ_sub scale_sub · Σ code·a and, for the types
 * with mins, imin = Σ_sub min_sub · bsum_sub; the block adds
 * d·d_a·isum − dmin·d_a·imin. */
static void dot_q2_K(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q2_K *x = w;
    const blk_q8_K *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        int isum = 0, imin = 0;
        for (int sb = 0; sb < 16; sb++) imin += (x[i].scales[sb] >> 4) * y[i].bsums[sb];
        for (int h = 0; h < 2; h++)
            for (int p = 0; p < 4; p++)
                for (int half = 0; half < 2; half++) {
                    int sb = 8 * h + 2 * p + half, dot = 0;
                    const int8_t *ay = y[i].qs + 128 * h + 32 * p + 16 * half;
                    const uint8_t *q = x[i].qs + 32 * h + 16 * half;
                    for (int l = 0; l < 16; l++) dot += ((q[l] >> (2 * p)) & 3) * ay[l];
                    isum += (x[i].scales[sb] & 0xF) * dot;
                }
        sum += y[i].d * H2F(x[i].d) * (float)isum - y[i].d * H2F(x[i].dmin) * (float)imin;
    }
    *s = sum;
}

static void dot_q3_K(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q3_K *x = w;
    const blk_q8_K *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        int isum = 0;
        for (int h = 0; h < 2; h++)
            for (int p = 0; p < 4; p++) {
                const uint8_t m = (uint8_t)(1u << (4 * h + p));
                for (int half = 0; half < 2; half++) {
                    int sb = 8 * h + 2 * p + half, dot = 0;
                    const int8_t *ay = y[i].qs + 128 * h + 32 * p + 16 * half;
                    for (int l = 16 * half; l < 16 * half + 16; l++) {
                        int code = ((x[i].qs[32 * h + l] >> (2 * p)) & 3) - ((x[i].hmask[l] & m) ? 0 : 4);
                        dot += code * ay[l - 16 * half];
                    }
                    isum += q3k_scale(sb, x[i].scales) * dot;
                }
            }
        sum += y[i].d * H2F(x[i].d) * (float)isum;
    }
    *s = sum;
}

static void dot_q4_K(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q4_K *x = w;
    const blk_q8_K *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        int isum = 0, imin = 0;
        for (int g = 0; g < 4; g++) {
            const uint8_t *q = x[i].qs + 32 * g;
            const int8_t *ay = y[i].qs + 64 * g;
            int dlo = 0, dhi = 0;
            for (int l = 0; l < 32; l++) {
                dlo += (q[l] & 0xF) * ay[l];
                dhi += (q[l] >> 4) * ay[l + 32];
            }
            uint8_t sc, mn;
            k_scale_min(2 * g, x[i].scales, &sc, &mn);
            isum += sc * dlo;
            imin += mn * (y[i].bsums[4 * g] + y[i].bsums[4 * g + 1]);
            k_scale_min(2 * g + 1, x[i].scales, &sc, &mn);
            isum += sc * dhi;
            imin += mn * (y[i].bsums[4 * g + 2] + y[i].bsums[4 * g + 3]);
        }
        sum += y[i].d * H2F(x[i].d) * (float)isum - y[i].d * H2F(x[i].dmin) * (float)imin;
    }
    *s = sum;
}

static void dot_q5_K(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q5_K *x = w;
    const blk_q8_K *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        int isum = 0, imin = 0;
        for (int g = 0; g < 4; g++) {
            const uint8_t *q = x[i].qs + 32 * g;
            const int8_t *ay = y[i].qs + 64 * g;
            int dlo = 0, dhi = 0;
            for (int l = 0; l < 32; l++) {
                dlo += ((q[l] & 0xF) | (((x[i].qh[l] >> (2 * g)) & 1) << 4)) * ay[l];
                dhi += ((q[l] >> 4) | (((x[i].qh[l] >> (2 * g + 1)) & 1) << 4)) * ay[l + 32];
            }
            uint8_t sc, mn;
            k_scale_min(2 * g, x[i].scales, &sc, &mn);
            isum += sc * dlo;
            imin += mn * (y[i].bsums[4 * g] + y[i].bsums[4 * g + 1]);
            k_scale_min(2 * g + 1, x[i].scales, &sc, &mn);
            isum += sc * dhi;
            imin += mn * (y[i].bsums[4 * g + 2] + y[i].bsums[4 * g + 3]);
        }
        sum += y[i].d * H2F(x[i].d) * (float)isum - y[i].d * H2F(x[i].dmin) * (float)imin;
    }
    *s = sum;
}

static void dot_q6_K(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q6_K *x = w;
    const blk_q8_K *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        int isum = 0;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x[i].ql + 64 * h, *qh = x[i].qh + 32 * h;
            const int8_t *ay = y[i].qs + 128 * h;
            int dots[8] = {0};
            for (int l = 0; l < 32; l++) {
                int hs = l / 16;
                dots[hs + 0] += ((int)((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32) * ay[l];
                dots[hs + 2] += ((int)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32) * ay[l + 32];
                dots[hs + 4] += ((int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32) * ay[l + 64];
                dots[hs + 6] += ((int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32) * ay[l + 96];
            }
            for (int k = 0; k < 8; k++) isum += x[i].scales[8 * h + k] * dots[k];
        }
        sum += y[i].d * H2F(x[i].d) * (float)isum;
    }
    *s = sum;
}

static void dot_iq4_xs(int64_t n, float *s, const void *w, const void *a)
{
    const blk_iq4_xs *x = w;
    const blk_q8_K *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        int isum = 0;
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t *q = x[i].qs + 16 * ib;
            const int8_t *ay = y[i].qs + 32 * ib;
            int dot = 0;
            for (int j = 0; j < 16; j++)
                dot += k_iq4nl_values[q[j] & 0xF] * ay[j] + k_iq4nl_values[q[j] >> 4] * ay[j + 16];
            isum += (iq4xs_scale(ib, &x[i]) - 32) * dot;
        }
        sum += y[i].d * H2F(x[i].d) * (float)isum;
    }
    *s = sum;
}

qt_vec_dot_fn qt_dot_scalar(enum qt_type type)
{
    switch (type) {
    case QT_F32: return dot_f32;
    case QT_F16: return dot_f16;
    case QT_BF16: return dot_bf16;
    case QT_Q4_0: return dot_q4_0;
    case QT_Q4_1: return dot_q4_1;
    case QT_Q5_0: return dot_q5_0;
    case QT_Q5_1: return dot_q5_1;
    case QT_Q8_0: return dot_q8_0;
    case QT_Q2_K: return dot_q2_K;
    case QT_Q3_K: return dot_q3_K;
    case QT_Q4_K: return dot_q4_K;
    case QT_Q5_K: return dot_q5_K;
    case QT_Q6_K: return dot_q6_K;
    case QT_IQ4_NL: return dot_iq4_nl;
    case QT_IQ4_XS: return dot_iq4_xs;
    default: return NULL;
    }
}
