/* NEON dot kernels for Armv8.0 (Advanced SIMD, part of every AArch64 CPU):
 * the float types here, the block types from dot_neon_int.h with 8-bit
 * widening multiplies. The F32 sums run in vector lanes, so float results
 * differ from dot_scalar.c's (which sums in double) by rounding only. */
#include <arm_neon.h>

/* Σ a·b of 16 signed bytes into 4 lanes: 8 × 16-bit products per half
 * (|a·b| ≤ 128·128 fits int16), pairwise added into int32. */
static inline int32x4_t neon_dot_i8(int32x4_t acc, int8x16_t a, int8x16_t b)
{
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    return vpadalq_s16(acc, vmull_high_s8(a, b));
}

#include "quant/dot_neon_int.h"

static void dot_f32(int64_t n, float *s, const void *w, const void *a)
{
    const float *x = w, *y = a;
    float32x4_t acc0 = vdupq_n_f32(0), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = vfmaq_f32(acc0, vld1q_f32(x + i), vld1q_f32(y + i));
        acc1 = vfmaq_f32(acc1, vld1q_f32(x + i + 4), vld1q_f32(y + i + 4));
        acc2 = vfmaq_f32(acc2, vld1q_f32(x + i + 8), vld1q_f32(y + i + 8));
        acc3 = vfmaq_f32(acc3, vld1q_f32(x + i + 12), vld1q_f32(y + i + 12));
    }
    for (; i + 4 <= n; i += 4) acc0 = vfmaq_f32(acc0, vld1q_f32(x + i), vld1q_f32(y + i));
    float sum = vaddvq_f32(vaddq_f32(vaddq_f32(acc0, acc1), vaddq_f32(acc2, acc3)));
    for (; i < n; i++) sum += x[i] * y[i];
    *s = sum;
}

/* 8 halves → two F32 vectors (FCVTL: exact). */
static inline void load_f16x8(const uint16_t *p, float32x4_t *lo, float32x4_t *hi)
{
    const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(p));
    *lo = vcvt_f32_f16(vget_low_f16(h));
    *hi = vcvt_high_f32_f16(h);
}

static void dot_f16(int64_t n, float *s, const void *w, const void *a)
{
    const uint16_t *x = w, *y = a;
    float32x4_t acc0 = vdupq_n_f32(0), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        float32x4_t x0, x1, x2, x3, y0, y1, y2, y3;
        load_f16x8(x + i, &x0, &x1);
        load_f16x8(x + i + 8, &x2, &x3);
        load_f16x8(y + i, &y0, &y1);
        load_f16x8(y + i + 8, &y2, &y3);
        acc0 = vfmaq_f32(acc0, x0, y0);
        acc1 = vfmaq_f32(acc1, x1, y1);
        acc2 = vfmaq_f32(acc2, x2, y2);
        acc3 = vfmaq_f32(acc3, x3, y3);
    }
    float sum = vaddvq_f32(vaddq_f32(vaddq_f32(acc0, acc1), vaddq_f32(acc2, acc3)));
    for (; i < n; i++) sum += neon_h2f(x[i]) * neon_h2f(y[i]);
    *s = sum;
}

/* BF16 → F32 is a 16-bit shift into the high half. */
static void dot_bf16(int64_t n, float *s, const void *w, const void *a)
{
    const uint16_t *x = w, *y = a;
    float32x4_t acc0 = vdupq_n_f32(0), acc1 = acc0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const uint16x8_t hx = vld1q_u16(x + i), hy = vld1q_u16(y + i);
        const float32x4_t x0 = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(hx), 16));
        const float32x4_t x1 = vreinterpretq_f32_u32(vshll_high_n_u16(hx, 16));
        const float32x4_t y0 = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(hy), 16));
        const float32x4_t y1 = vreinterpretq_f32_u32(vshll_high_n_u16(hy, 16));
        acc0 = vfmaq_f32(acc0, x0, y0);
        acc1 = vfmaq_f32(acc1, x1, y1);
    }
    float sum = vaddvq_f32(vaddq_f32(acc0, acc1));
    for (; i < n; i++) {
        uint32_t bx = (uint32_t)x[i] << 16, by = (uint32_t)y[i] << 16;
        float fx, fy;
        memcpy(&fx, &bx, 4);
        memcpy(&fy, &by, 4);
        sum += fx * fy;
    }
    *s = sum;
}

qt_vec_dot_fn qt_dot_neon(enum qt_type type)
{
    switch (type) {
    case QT_F32: return dot_f32;
    case QT_F16: return dot_f16;
    case QT_BF16: return dot_bf16;
    default: return neon_block_kernel(type);
    }
}
