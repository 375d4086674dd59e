/* NEON vector kernels (AArch64 builds; Advanced SIMD is part of the base
 * ISA, cpu_vec_select still checks wk_cpu()->neon so WICK_ISA=scalar turns
 * them off). Four F32 lanes per vector; the tile kernels keep their
 * accumulators in registers like the AVX-512 ones, in blocks a quarter as
 * wide. F16 conversions are FCVTN/FCVTL, which round to nearest even like
 * wk_f32_to_f16. */
#include <arm_neon.h>
#include <math.h>
#include <stddef.h>

#include "backend/cpu/cpu_vec.h"
#include "util/f16.h"

static float dot_neon(const float *a, const float *b, int n)
{
    float32x4_t s0 = vdupq_n_f32(0), s1 = s0, s2 = s0, s3 = s0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
        s1 = vfmaq_f32(s1, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
        s2 = vfmaq_f32(s2, vld1q_f32(a + i + 8), vld1q_f32(b + i + 8));
        s3 = vfmaq_f32(s3, vld1q_f32(a + i + 12), vld1q_f32(b + i + 12));
    }
    for (; i + 4 <= n; i += 4) s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
    float s = vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static void axpy_neon(float *y, float s, const float *x, int n)
{
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), vld1q_f32(x + i), s));
    for (; i < n; i++) y[i] += s * x[i];
}

static void scale_neon(float *y, float s, int n)
{
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vmulq_n_f32(vld1q_f32(y + i), s));
    for (; i < n; i++) y[i] *= s;
}

static void f16_to_f32_neon(float *dst, const uint16_t *src, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(src + i));
        vst1q_f32(dst + i, vcvt_f32_f16(vget_low_f16(h)));
        vst1q_f32(dst + i + 4, vcvt_high_f32_f16(h));
    }
    for (; i < n; i++) dst[i] = wk_f16_to_f32(src[i]);
}

static void f32_to_f16_neon(uint16_t *dst, const float *src, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const float16x8_t h = vcvt_high_f16_f32(vcvt_f16_f32(vld1q_f32(src + i)), vld1q_f32(src + i + 4));
        vst1q_u16(dst + i, vreinterpretq_u16_f16(h));
    }
    for (; i < n; i++) dst[i] = wk_f32_to_f16(src[i]);
}

static inline float32x4_t rh4(float32x4_t v) { return vcvt_f32_f16(vcvt_f16_f32(v)); }
static inline float rh1(float x) { return wk_f16_to_f32(wk_f32_to_f16(x)); }

static void axpy_h_neon(float *y, float s, const float *x, int n)
{
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, rh4(vfmaq_n_f32(vld1q_f32(y + i), vld1q_f32(x + i), s)));
    for (; i < n; i++) y[i] = rh1(y[i] + s * x[i]);
}

static void scale_h_neon(float *y, float s, int n)
{
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, rh4(vmulq_n_f32(vld1q_f32(y + i), s)));
    for (; i < n; i++) y[i] = rh1(y[i] * s);
}

static void round_h_neon(float *y, const float *x, int n)
{
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, rh4(vld1q_f32(x + i)));
    for (; i < n; i++) y[i] = rh1(x[i]);
}

/* e^x, ~1 ulp (Cephes expf: x = n·ln2 + r, degree-6 polynomial on r, times
 * 2^n built in the exponent field). x is capped at 88 so that n ≤ 127; below
 * ln(FLT_MIN) the result is 0 (expf would give a subnormal under 1.2e-38),
 * which also makes e^-inf = 0. */
static inline float32x4_t exp4(float32x4_t x)
{
    const uint32x4_t tiny = vcltq_f32(x, vdupq_n_f32(-87.3365478515625f));
    x = vminq_f32(x, vdupq_n_f32(88.0f));
    const float32x4_t n = vrndnq_f32(vmulq_n_f32(x, 1.44269504088896341f));
    float32x4_t r = vfmsq_n_f32(x, n, 0.693359375f);
    r = vfmsq_n_f32(r, n, -2.12194440e-4f);
    float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
    p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
    p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
    p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), p, vmulq_f32(r, r));
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    const float32x4_t res = vmulq_f32(p, vreinterpretq_f32_s32(e));
    return vbslq_f32(tiny, vdupq_n_f32(0.0f), res);
}

/* x / (1 + e^-x) */
static inline float32x4_t silu4(float32x4_t x)
{
    return vdivq_f32(x, vaddq_f32(vdupq_n_f32(1.0f), exp4(vnegq_f32(x))));
}

static void swiglu_neon(float *y, const float *g, const float *u, int n)
{
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vmulq_f32(silu4(vld1q_f32(g + i)), vld1q_f32(u + i)));
    for (; i < n; i++) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void mul_add_neon(float *y, const float *a, const float *b, int n)
{
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_f32(vld1q_f32(y + i), vld1q_f32(a + i), vld1q_f32(b + i)));
    for (; i < n; i++) y[i] += a[i] * b[i];
}

static void silu_neon(float *y, const float *x, int n)
{
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, silu4(vld1q_f32(x + i)));
    for (; i < n; i++) y[i] = x[i] / (1.0f + expf(-x[i]));
}

/* A block of 16 state columns: Sᵀk, δ and o stay in registers over both
 * passes of the rows; even and odd rows use separate accumulators (eight
 * FMA chains). */
static void gdn_step16(float *S, int dk, int ld, const float *q, const float *k, const float *v, float decay,
                       float beta, float *o)
{
    float32x4_t ka[4], kb[4], dl[4], oa[4], ob[4];
#pragma GCC unroll 4
    for (int x = 0; x < 4; x++) ka[x] = kb[x] = oa[x] = ob[x] = vdupq_n_f32(0);
    int i = 0;
    for (; i + 2 <= dk; i += 2) {
        const float *r0 = S + (size_t)i * ld, *r1 = r0 + ld;
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++) {
            ka[x] = vfmaq_n_f32(ka[x], vld1q_f32(r0 + 4 * x), k[i]);
            kb[x] = vfmaq_n_f32(kb[x], vld1q_f32(r1 + 4 * x), k[i + 1]);
        }
    }
    for (; i < dk; i++)
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++) ka[x] = vfmaq_n_f32(ka[x], vld1q_f32(S + (size_t)i * ld + 4 * x), k[i]);
#pragma GCC unroll 4
    for (int x = 0; x < 4; x++)
        dl[x] = vmulq_n_f32(vfmsq_n_f32(vld1q_f32(v + 4 * x), vaddq_f32(ka[x], kb[x]), decay), beta);
    for (i = 0; i + 2 <= dk; i += 2) {
        float *r0 = S + (size_t)i * ld, *r1 = r0 + ld;
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++) {
            const float32x4_t e0 = vfmaq_n_f32(vmulq_n_f32(vld1q_f32(r0 + 4 * x), decay), dl[x], k[i]);
            const float32x4_t e1 = vfmaq_n_f32(vmulq_n_f32(vld1q_f32(r1 + 4 * x), decay), dl[x], k[i + 1]);
            vst1q_f32(r0 + 4 * x, e0);
            vst1q_f32(r1 + 4 * x, e1);
            oa[x] = vfmaq_n_f32(oa[x], e0, q[i]);
            ob[x] = vfmaq_n_f32(ob[x], e1, q[i + 1]);
        }
    }
    for (; i < dk; i++) {
        float *r0 = S + (size_t)i * ld;
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++) {
            const float32x4_t e0 = vfmaq_n_f32(vmulq_n_f32(vld1q_f32(r0 + 4 * x), decay), dl[x], k[i]);
            vst1q_f32(r0 + 4 * x, e0);
            oa[x] = vfmaq_n_f32(oa[x], e0, q[i]);
        }
    }
#pragma GCC unroll 4
    for (int x = 0; x < 4; x++) vst1q_f32(o + 4 * x, vaddq_f32(oa[x], ob[x]));
}

static void gdn_step_neon(float *S, int dk, int ld, int nc, const float *q, const float *k, const float *v,
                          float decay, float beta, float *o)
{
    if (nc % 16) {
        cpu_gdn_step_scalar(S, dk, ld, nc, q, k, v, decay, beta, o);
        return;
    }
    for (int c = 0; c < nc; c += 16) gdn_step16(S + c, dk, ld, q, k, v + c, decay, beta, o + c);
}

/* products rounded to float (as ggml's scalar loop does), summed in double */
static double sumsq_neon(const float *x, int n)
{
    float64x2_t s0 = vdupq_n_f64(0), s1 = s0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t v = vld1q_f32(x + i), sq = vmulq_f32(v, v);
        s0 = vaddq_f64(s0, vcvt_f64_f32(vget_low_f32(sq)));
        s1 = vaddq_f64(s1, vcvt_high_f64_f32(sq));
    }
    double s = vaddvq_f64(vaddq_f64(s0, s1));
    for (; i < n; i++) s += (double)(x[i] * x[i]);
    return s;
}

static void scale_mul_neon(float *y, const float *x, float s, const float *w, int n)
{
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        float32x4_t v = vmulq_n_f32(vld1q_f32(x + i), s);
        if (w) v = vmulq_f32(v, vld1q_f32(w + i));
        vst1q_f32(y + i, v);
    }
    for (; i < n; i++) y[i] = w ? (x[i] * s) * w[i] : x[i] * s;
}

static void rope_neox_neon(float *x, const float *c, const float *s, int half)
{
    int i = 0;
    for (; i + 4 <= half; i += 4) {
        const float32x4_t a = vld1q_f32(x + i), b = vld1q_f32(x + i + half);
        const float32x4_t vc = vld1q_f32(c + i), vsn = vld1q_f32(s + i);
        vst1q_f32(x + i, vfmsq_f32(vmulq_f32(a, vc), b, vsn));
        vst1q_f32(x + i + half, vfmaq_f32(vmulq_f32(b, vc), a, vsn));
    }
    for (; i < half; i++) {
        float a = x[i], b = x[i + half];
        x[i] = a * c[i] - b * s[i];
        x[i + half] = a * s[i] + b * c[i];
    }
}

/* The scalar kernel's key-by-key loop with vector dot / F16-rounded updates
 * (the accumulator row stays in L1). */
static void attn_row_h_neon(const float *q, const float *kt, const float *vt, int nk, int d_k, int d_v, float scale,
                            float *m, float *l, float *acc)
{
    for (int t = 0; t < nk; t++) {
        const float sc = dot_neon(q, kt + (size_t)t * d_k, d_k) * scale;
        if (sc > *m) {
            const float ms = expf(*m - sc);
            *m = sc;
            scale_h_neon(acc, ms, d_v);
            axpy_h_neon(acc, 1.0f, vt + (size_t)t * d_v, d_v);
            *l = *l * ms + 1.0f;
        } else {
            const float vs = expf(sc - *m);
            axpy_h_neon(acc, vs, vt + (size_t)t * d_v, d_v);
            *l += vs;
        }
    }
}

/* Register blocks of 4 keys × 16 rows (16 accumulators). Four dimensions at
 * a time: one load of each key's 4 values feeds its FMAs by lane. */
#define QK_LANE(j)                                                                                         \
    do {                                                                                                   \
        const float *qc = qt + (size_t)(c + (j)) * rp + r;                                                 \
        const float32x4_t q0 = vld1q_f32(qc), q1 = vld1q_f32(qc + 4), q2 = vld1q_f32(qc + 8),              \
                          q3 = vld1q_f32(qc + 12);                                                         \
        a[0][0] = vfmaq_laneq_f32(a[0][0], q0, K0, j);                                                     \
        a[0][1] = vfmaq_laneq_f32(a[0][1], q1, K0, j);                                                     \
        a[0][2] = vfmaq_laneq_f32(a[0][2], q2, K0, j);                                                     \
        a[0][3] = vfmaq_laneq_f32(a[0][3], q3, K0, j);                                                     \
        a[1][0] = vfmaq_laneq_f32(a[1][0], q0, K1, j);                                                     \
        a[1][1] = vfmaq_laneq_f32(a[1][1], q1, K1, j);                                                     \
        a[1][2] = vfmaq_laneq_f32(a[1][2], q2, K1, j);                                                     \
        a[1][3] = vfmaq_laneq_f32(a[1][3], q3, K1, j);                                                     \
        a[2][0] = vfmaq_laneq_f32(a[2][0], q0, K2, j);                                                     \
        a[2][1] = vfmaq_laneq_f32(a[2][1], q1, K2, j);                                                     \
        a[2][2] = vfmaq_laneq_f32(a[2][2], q2, K2, j);                                                     \
        a[2][3] = vfmaq_laneq_f32(a[2][3], q3, K2, j);                                                     \
        a[3][0] = vfmaq_laneq_f32(a[3][0], q0, K3, j);                                                     \
        a[3][1] = vfmaq_laneq_f32(a[3][1], q1, K3, j);                                                     \
        a[3][2] = vfmaq_laneq_f32(a[3][2], q2, K3, j);                                                     \
        a[3][3] = vfmaq_laneq_f32(a[3][3], q3, K3, j);                                                     \
    } while (0)

static void qk_keys4_rows16(float *st, const float *k, int d, const float *qt, int rp, int r, float scale)
{
    const float *k0 = k, *k1 = k0 + d, *k2 = k1 + d, *k3 = k2 + d;
    float32x4_t a[4][4];
#pragma GCC unroll 4
    for (int x = 0; x < 4; x++)
#pragma GCC unroll 4
        for (int y = 0; y < 4; y++) a[x][y] = vdupq_n_f32(0);
    int c = 0;
    for (; c + 4 <= d; c += 4) {
        const float32x4_t K0 = vld1q_f32(k0 + c), K1 = vld1q_f32(k1 + c), K2 = vld1q_f32(k2 + c),
                          K3 = vld1q_f32(k3 + c);
        QK_LANE(0);
        QK_LANE(1);
        QK_LANE(2);
        QK_LANE(3);
    }
    for (; c < d; c++) {
        const float *qc = qt + (size_t)c * rp + r;
        const float kc[4] = {k0[c], k1[c], k2[c], k3[c]};
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++)
#pragma GCC unroll 4
            for (int y = 0; y < 4; y++) a[x][y] = vfmaq_n_f32(a[x][y], vld1q_f32(qc + 4 * y), kc[x]);
    }
#pragma GCC unroll 4
    for (int x = 0; x < 4; x++)
#pragma GCC unroll 4
        for (int y = 0; y < 4; y++) vst1q_f32(st + (size_t)x * rp + r + 4 * y, vmulq_n_f32(a[x][y], scale));
}

static void attn_qk_neon(float *st, const float *k, int nk, int d, const float *qt, int rp, float scale)
{
    int t = 0;
    for (; t + 4 <= nk; t += 4)
        for (int r = 0; r < rp; r += 16) qk_keys4_rows16(st + (size_t)t * rp, k + (size_t)t * d, d, qt, rp, r, scale);
    for (; t < nk; t++) {
        const float *k0 = k + (size_t)t * d;
        for (int r = 0; r < rp; r += 4) {
            float32x4_t a0 = vdupq_n_f32(0);
            for (int c = 0; c < d; c++) a0 = vfmaq_n_f32(a0, vld1q_f32(qt + (size_t)c * rp + r), k0[c]);
            vst1q_f32(st + (size_t)t * rp + r, vmulq_n_f32(a0, scale));
        }
    }
}

static void attn_softmax_neon(float *st, int nk, int rp, float *m, float *l, float *corr)
{
    const float32x4_t ninf = vdupq_n_f32(-INFINITY);
    for (int r = 0; r < rp; r += 4) {
        const float32x4_t mo = vld1q_f32(m + r);
        float32x4_t mx = mo;
        for (int t = 0; t < nk; t++) mx = vmaxq_f32(mx, vld1q_f32(st + (size_t)t * rp + r));
        const float32x4_t c = vbslq_f32(vceqq_f32(mo, mx), vdupq_n_f32(1.0f), exp4(vsubq_f32(mo, mx)));
        float32x4_t sum = vdupq_n_f32(0);
        for (int t = 0; t < nk; t++) {
            const float32x4_t x = vld1q_f32(st + (size_t)t * rp + r);
            const uint32x4_t dead = vceqq_f32(x, ninf);
            const float32x4_t p = vbslq_f32(dead, vdupq_n_f32(0.0f), exp4(vsubq_f32(x, mx)));
            vst1q_f32(st + (size_t)t * rp + r, p);
            sum = vaddq_f32(sum, p);
        }
        vst1q_f32(l + r, vfmaq_f32(sum, vld1q_f32(l + r), c));
        vst1q_f32(m + r, mx);
        vst1q_f32(corr + r, c);
    }
}

/* Accumulators of four rows × 16 columns stay in registers across the tile;
 * each V load feeds four rows, and the four rows' probabilities of a key are
 * one load (rows are lanes of p). */
static void pv_rows4_16(float *a, int d_v, const float *p, int nk, int rp, const float *v, const float *corr)
{
    float32x4_t x[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) x[i][q] = vmulq_n_f32(vld1q_f32(a + (size_t)i * d_v + 4 * q), corr[i]);
    for (int t = 0; t < nk; t++) {
        const float32x4_t pt = vld1q_f32(p + (size_t)t * rp);
        const float *vr = v + (size_t)t * d_v;
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            const float32x4_t vv = vld1q_f32(vr + 4 * q);
            x[0][q] = vfmaq_laneq_f32(x[0][q], vv, pt, 0);
            x[1][q] = vfmaq_laneq_f32(x[1][q], vv, pt, 1);
            x[2][q] = vfmaq_laneq_f32(x[2][q], vv, pt, 2);
            x[3][q] = vfmaq_laneq_f32(x[3][q], vv, pt, 3);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) vst1q_f32(a + (size_t)i * d_v + 4 * q, x[i][q]);
}

static void pv_row_4(float *a, const float *p, int nk, int rp, const float *v, int d_v, float cr)
{
    float32x4_t x = vmulq_n_f32(vld1q_f32(a), cr);
    for (int t = 0; t < nk; t++) x = vfmaq_n_f32(x, vld1q_f32(v + (size_t)t * d_v), p[(size_t)t * rp]);
    vst1q_f32(a, x);
}

static void attn_pv_neon(float *acc, const float *p, int nk, int rp, int n_rows, const float *v, int d_v,
                         const float *corr)
{
    if (d_v % 4) {
        cpu_attn_pv_scalar(acc, p, nk, rp, n_rows, v, d_v, corr);
        return;
    }
    int r = 0;
    for (; r + 4 <= n_rows; r += 4) {
        float *a0 = acc + (size_t)r * d_v;
        int c = 0;
        for (; c + 16 <= d_v; c += 16) pv_rows4_16(a0 + c, d_v, p + r, nk, rp, v + c, corr + r);
        for (; c < d_v; c += 4)
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) pv_row_4(a0 + (size_t)i * d_v + c, p + r + i, nk, rp, v + c, d_v, corr[r + i]);
    }
    for (; r < n_rows; r++)
        for (int c = 0; c < d_v; c += 4) pv_row_4(acc + (size_t)r * d_v + c, p + r, nk, rp, v + c, d_v, corr[r]);
}

const cpu_vec_fns cpu_vec_neon = {
    .level = "neon",
    .dot = dot_neon,
    .axpy = axpy_neon,
    .scale = scale_neon,
    .f16_to_f32 = f16_to_f32_neon,
    .f32_to_f16 = f32_to_f16_neon,
    .axpy_h = axpy_h_neon,
    .scale_h = scale_h_neon,
    .round_h = round_h_neon,
    .swiglu = swiglu_neon,
    .mul_add = mul_add_neon,
    .silu = silu_neon,
    .gdn_step = gdn_step_neon,
    .sumsq = sumsq_neon,
    .scale_mul = scale_mul_neon,
    .rope_neox = rope_neox_neon,
    .attn_row_h = attn_row_h_neon,
    .attn_qk = attn_qk_neon,
    .attn_softmax = attn_softmax_neon,
    .attn_pv = attn_pv_neon,
};
