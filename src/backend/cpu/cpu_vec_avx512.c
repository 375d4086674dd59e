/* AVX-512 vector kernels (compiled with AVX-512 flags; called only after
 * cpu_vec_select checked the CPU). */
#include <immintrin.h>
#include <math.h>
#include <stddef.h>

#include "backend/cpu/cpu_vec.h"
#include "util/f16.h"

static float dot_avx512(const float *a, const float *b, int n)
{
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

static void axpy_avx512(float *y, float s, const float *x, int n)
{
    __m512 vs = _mm512_set1_ps(s);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(vs, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m,
                              _mm512_fmadd_ps(vs, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
    }
}

static void scale_avx512(float *y, float s, int n)
{
    __m512 vs = _mm512_set1_ps(s);
    int i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(vs, _mm512_loadu_ps(y + i)));
    for (; i < n; i++) y[i] *= s;
}

static void f16_to_f32_avx512(float *dst, const uint16_t *src, int n)
{
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    for (; i < n; i++) dst[i] = wk_f16_to_f32(src[i]);
}

static void f32_to_f16_avx512(uint16_t *dst, const float *src, int n)
{
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = wk_f32_to_f16(src[i]);
}

static inline __m512 rh16(__m512 v) { return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)); }
static inline float rh1(float x) { return wk_f16_to_f32(wk_f32_to_f16(x)); }

static void axpy_h_avx512(float *y, float s, const float *x, int n)
{
    __m512 vs = _mm512_set1_ps(s);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, rh16(_mm512_fmadd_ps(vs, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i))));
    for (; i < n; i++) y[i] = rh1(y[i] + s * x[i]);
}

static void scale_h_avx512(float *y, float s, int n)
{
    __m512 vs = _mm512_set1_ps(s);
    int i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, rh16(_mm512_mul_ps(vs, _mm512_loadu_ps(y + i))));
    for (; i < n; i++) y[i] = rh1(y[i] * s);
}

static void round_h_avx512(float *y, const float *x, int n)
{
    int i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, rh16(_mm512_loadu_ps(x + i)));
    for (; i < n; i++) y[i] = rh1(x[i]);
}

/* e^x, ~1 ulp (Cephes expf: x = n·ln2 + r, degree-6 polynomial on r, scaled by 2^n). */
static inline __m512 exp512(__m512 x)
{
    x = _mm512_min_ps(x, _mm512_set1_ps(88.3762626647949f));
    x = _mm512_max_ps(x, _mm512_set1_ps(-88.3762626647949f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

static void swiglu_avx512(float *y, const float *g, const float *u, int n)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_loadu_ps(g + i);
        __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), x));
        _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(one, e)), _mm512_loadu_ps(u + i)));
    }
    for (; i < n; i++) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void mul_add_avx512(float *y, const float *a, const float *b, int n)
{
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), _mm512_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a[i] * b[i];
}

static void silu_avx512(float *y, const float *x, int n)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        _mm512_storeu_ps(y + i, _mm512_div_ps(v, _mm512_add_ps(one, exp512(_mm512_sub_ps(_mm512_setzero_ps(), v)))));
    }
    for (; i < n; i++) y[i] = x[i] / (1.0f + expf(-x[i]));
}

/* A block of 64 state columns: Sᵀk, δ and o stay in registers over both
 * passes of the rows; even and odd rows use separate accumulators so eight
 * FMA chains hide the FMA latency. */
static void gdn_step64(float *S, int dk, int ld, const float *q, const float *k, const float *v, __m512 vd,
                       __m512 vb, float *o)
{
    __m512 ka[4], kb[4], dl[4], oa[4], ob[4];
#pragma GCC unroll 4
    for (int x = 0; x < 4; x++) ka[x] = kb[x] = oa[x] = ob[x] = _mm512_setzero_ps();
    int i = 0;
    for (; i + 2 <= dk; i += 2) {
        const float *r0 = S + (size_t)i * ld, *r1 = r0 + ld;
        const __m512 k0 = _mm512_set1_ps(k[i]), k1 = _mm512_set1_ps(k[i + 1]);
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++) {
            ka[x] = _mm512_fmadd_ps(k0, _mm512_loadu_ps(r0 + 16 * x), ka[x]);
            kb[x] = _mm512_fmadd_ps(k1, _mm512_loadu_ps(r1 + 16 * x), kb[x]);
        }
    }
    for (; i < dk; i++) {
        const __m512 k0 = _mm512_set1_ps(k[i]);
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++) ka[x] = _mm512_fmadd_ps(k0, _mm512_loadu_ps(S + (size_t)i * ld + 16 * x), ka[x]);
    }
#pragma GCC unroll 4
    for (int x = 0; x < 4; x++)
        dl[x] = _mm512_mul_ps(vb, _mm512_fnmadd_ps(vd, _mm512_add_ps(ka[x], kb[x]), _mm512_loadu_ps(v + 16 * x)));
    for (i = 0; i + 2 <= dk; i += 2) {
        float *r0 = S + (size_t)i * ld, *r1 = r0 + ld;
        const __m512 k0 = _mm512_set1_ps(k[i]), k1 = _mm512_set1_ps(k[i + 1]);
        const __m512 q0 = _mm512_set1_ps(q[i]), q1 = _mm512_set1_ps(q[i + 1]);
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++) {
            __m512 e0 = _mm512_fmadd_ps(k0, dl[x], _mm512_mul_ps(_mm512_loadu_ps(r0 + 16 * x), vd));
            __m512 e1 = _mm512_fmadd_ps(k1, dl[x], _mm512_mul_ps(_mm512_loadu_ps(r1 + 16 * x), vd));
            _mm512_storeu_ps(r0 + 16 * x, e0);
            _mm512_storeu_ps(r1 + 16 * x, e1);
            oa[x] = _mm512_fmadd_ps(q0, e0, oa[x]);
            ob[x] = _mm512_fmadd_ps(q1, e1, ob[x]);
        }
    }
    for (; i < dk; i++) {
        float *r0 = S + (size_t)i * ld;
        const __m512 k0 = _mm512_set1_ps(k[i]), q0 = _mm512_set1_ps(q[i]);
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++) {
            __m512 e0 = _mm512_fmadd_ps(k0, dl[x], _mm512_mul_ps(_mm512_loadu_ps(r0 + 16 * x), vd));
            _mm512_storeu_ps(r0 + 16 * x, e0);
            oa[x] = _mm512_fmadd_ps(q0, e0, oa[x]);
        }
    }
#pragma GCC unroll 4
    for (int x = 0; x < 4; x++) _mm512_storeu_ps(o + 16 * x, _mm512_add_ps(oa[x], ob[x]));
}

static void gdn_step_avx512(float *S, int dk, int ld, int nc, const float *q, const float *k, const float *v,
                            float decay, float beta, float *o)
{
    if (nc % 64) {
        cpu_gdn_step_scalar(S, dk, ld, nc, q, k, v, decay, beta, o);
        return;
    }
    const __m512 vd = _mm512_set1_ps(decay), vb = _mm512_set1_ps(beta);
    for (int c = 0; c < nc; c += 64) gdn_step64(S + c, dk, ld, q, k, v + c, vd, vb, o + c);
}

/* products rounded to float (as ggml's scalar loop does), summed in double */
static double sumsq_avx512(const float *x, int n)
{
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        __m512 sq = _mm512_mul_ps(v, v);
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(sq)));
        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(sq, 1)));
    }
    double s = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    for (; i < n; i++) s += (double)(x[i] * x[i]);
    return s;
}

static void scale_mul_avx512(float *y, const float *x, float s, const float *w, int n)
{
    const __m512 vs = _mm512_set1_ps(s);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), vs);
        if (w) v = _mm512_mul_ps(v, _mm512_loadu_ps(w + i));
        _mm512_storeu_ps(y + i, v);
    }
    for (; i < n; i++) y[i] = w ? (x[i] * s) * w[i] : x[i] * s;
}

static void rope_neox_avx512(float *x, const float *c, const float *s, int half)
{
    int i = 0;
    for (; i + 16 <= half; i += 16) {
        __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + half);
        __m512 vc = _mm512_loadu_ps(c + i), vsn = _mm512_loadu_ps(s + i);
        _mm512_storeu_ps(x + i, _mm512_fmsub_ps(a, vc, _mm512_mul_ps(b, vsn)));
        _mm512_storeu_ps(x + i + half, _mm512_fmadd_ps(a, vsn, _mm512_mul_ps(b, vc)));
    }
    for (; i < half; i++) {
        float a = x[i], b = x[i + half];
        x[i] = a * c[i] - b * s[i];
        x[i + half] = a * s[i] + b * c[i];
    }
}

/* The accumulator (NV vectors) lives in registers for the whole key run. */
#define ATTN_ROW_H(NV)                                                                                     \
    do {                                                                                                   \
        __m512 a[NV];                                                                                      \
        _Pragma("GCC unroll 16") for (int x = 0; x < NV; x++) a[x] = _mm512_loadu_ps(acc + 16 * x);        \
        float M = *m, L = *l;                                                                              \
        for (int t = 0; t < nk; t++) {                                                                     \
            const float *kr = kt + (size_t)t * d_k, *vr = vt + (size_t)t * d_v;                            \
            __m512 d0 = _mm512_setzero_ps(), d1 = _mm512_setzero_ps();                                     \
            int c = 0;                                                                                     \
            for (; c + 32 <= d_k; c += 32) {                                                               \
                d0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + c), _mm512_loadu_ps(kr + c), d0);                 \
                d1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + c + 16), _mm512_loadu_ps(kr + c + 16), d1);       \
            }                                                                                              \
            if (c < d_k) d0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + c), _mm512_loadu_ps(kr + c), d0);        \
            float sc = _mm512_reduce_add_ps(_mm512_add_ps(d0, d1)) * scale;                                \
            float ws;                                                                                      \
            if (sc > M) {                                                                                  \
                const __m512 ms = _mm512_set1_ps(expf(M - sc));                                            \
                L = L * expf(M - sc) + 1.0f;                                                               \
                M = sc;                                                                                    \
                _Pragma("GCC unroll 16") for (int x = 0; x < NV; x++) a[x] = rh16(_mm512_mul_ps(a[x], ms)); \
                ws = 1.0f;                                                                                 \
            } else {                                                                                       \
                ws = expf(sc - M);                                                                         \
                L += ws;                                                                                   \
            }                                                                                              \
            const __m512 vw = _mm512_set1_ps(ws);                                                          \
            _Pragma("GCC unroll 16") for (int x = 0; x < NV; x++) a[x] =                                  \
                rh16(_mm512_fmadd_ps(vw, _mm512_loadu_ps(vr + 16 * x), a[x]));                             \
        }                                                                                                  \
        _Pragma("GCC unroll 16") for (int x = 0; x < NV; x++) _mm512_storeu_ps(acc + 16 * x, a[x]);       \
        *m = M;                                                                                            \
        *l = L;                                                                                            \
    } while (0)

static void attn_row_h_avx512(const float *q, const float *kt, const float *vt, int nk, int d_k, int d_v,
                              float scale, float *m, float *l, float *acc)
{
    if (d_k % 16 == 0 && d_v == 128)
        ATTN_ROW_H(8);
    else if (d_k % 16 == 0 && d_v == 64)
        ATTN_ROW_H(4);
    else if (d_k % 16 == 0 && d_v == 256)
        ATTN_ROW_H(16);
    else
        cpu_attn_row_h_scalar(q, kt, vt, nk, d_k, d_v, scale, m, l, acc);
}

/* Register blocks of 4 keys × 64 rows (16 accumulators): each query-vector
 * load feeds 4 FMAs and each key broadcast 4. */
static void attn_qk_avx512(float *st, const float *k, int nk, int d, const float *qt, int rp, float scale)
{
    const __m512 vs = _mm512_set1_ps(scale);
    int t = 0;
    for (; t + 4 <= nk; t += 4) {
        const float *k0 = k + (size_t)t * d, *k1 = k0 + d, *k2 = k1 + d, *k3 = k2 + d;
        int r = 0;
        for (; r + 64 <= rp; r += 64) {
            __m512 a[4][4];
#pragma GCC unroll 4
            for (int x = 0; x < 4; x++)
#pragma GCC unroll 4
                for (int y = 0; y < 4; y++) a[x][y] = _mm512_setzero_ps();
            for (int c = 0; c < d; c++) {
                const float *qc = qt + (size_t)c * rp + r;
                __m512 q0 = _mm512_loadu_ps(qc), q1 = _mm512_loadu_ps(qc + 16);
                __m512 q2 = _mm512_loadu_ps(qc + 32), q3 = _mm512_loadu_ps(qc + 48);
                __m512 b0 = _mm512_set1_ps(k0[c]), b1 = _mm512_set1_ps(k1[c]);
                __m512 b2 = _mm512_set1_ps(k2[c]), b3 = _mm512_set1_ps(k3[c]);
                a[0][0] = _mm512_fmadd_ps(b0, q0, a[0][0]);
                a[0][1] = _mm512_fmadd_ps(b0, q1, a[0][1]);
                a[0][2] = _mm512_fmadd_ps(b0, q2, a[0][2]);
                a[0][3] = _mm512_fmadd_ps(b0, q3, a[0][3]);
                a[1][0] = _mm512_fmadd_ps(b1, q0, a[1][0]);
                a[1][1] = _mm512_fmadd_ps(b1, q1, a[1][1]);
                a[1][2] = _mm512_fmadd_ps(b1, q2, a[1][2]);
                a[1][3] = _mm512_fmadd_ps(b1, q3, a[1][3]);
                a[2][0] = _mm512_fmadd_ps(b2, q0, a[2][0]);
                a[2][1] = _mm512_fmadd_ps(b2, q1, a[2][1]);
                a[2][2] = _mm512_fmadd_ps(b2, q2, a[2][2]);
                a[2][3] = _mm512_fmadd_ps(b2, q3, a[2][3]);
                a[3][0] = _mm512_fmadd_ps(b3, q0, a[3][0]);
                a[3][1] = _mm512_fmadd_ps(b3, q1, a[3][1]);
                a[3][2] = _mm512_fmadd_ps(b3, q2, a[3][2]);
                a[3][3] = _mm512_fmadd_ps(b3, q3, a[3][3]);
            }
#pragma GCC unroll 4
            for (int x = 0; x < 4; x++)
#pragma GCC unroll 4
                for (int y = 0; y < 4; y++)
                    _mm512_storeu_ps(st + (size_t)(t + x) * rp + r + 16 * y, _mm512_mul_ps(a[x][y], vs));
        }
        for (; r < rp; r += 16) {
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int c = 0; c < d; c++) {
                __m512 q = _mm512_loadu_ps(qt + (size_t)c * rp + r);
                a0 = _mm512_fmadd_ps(_mm512_set1_ps(k0[c]), q, a0);
                a1 = _mm512_fmadd_ps(_mm512_set1_ps(k1[c]), q, a1);
                a2 = _mm512_fmadd_ps(_mm512_set1_ps(k2[c]), q, a2);
                a3 = _mm512_fmadd_ps(_mm512_set1_ps(k3[c]), q, a3);
            }
            _mm512_storeu_ps(st + (size_t)t * rp + r, _mm512_mul_ps(a0, vs));
            _mm512_storeu_ps(st + (size_t)(t + 1) * rp + r, _mm512_mul_ps(a1, vs));
            _mm512_storeu_ps(st + (size_t)(t + 2) * rp + r, _mm512_mul_ps(a2, vs));
            _mm512_storeu_ps(st + (size_t)(t + 3) * rp + r, _mm512_mul_ps(a3, vs));
        }
    }
    for (; t < nk; t++) {
        const float *k0 = k + (size_t)t * d;
        for (int r = 0; r < rp; r += 16) {
            __m512 a0 = _mm512_setzero_ps();
            for (int c = 0; c < d; c++)
                a0 = _mm512_fmadd_ps(_mm512_set1_ps(k0[c]), _mm512_loadu_ps(qt + (size_t)c * rp + r), a0);
            _mm512_storeu_ps(st + (size_t)t * rp + r, _mm512_mul_ps(a0, vs));
        }
    }
}

static void attn_softmax_avx512(float *st, int nk, int rp, float *m, float *l, float *corr)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int r = 0; r < rp; r += 16) {
        __m512 mo = _mm512_loadu_ps(m + r), mx = mo;
        for (int t = 0; t < nk; t++) mx = _mm512_max_ps(mx, _mm512_loadu_ps(st + (size_t)t * rp + r));
        __mmask16 same = _mm512_cmp_ps_mask(mo, mx, _CMP_EQ_OQ);
        __m512 c = _mm512_mask_blend_ps(same, exp512(_mm512_sub_ps(mo, mx)), _mm512_set1_ps(1.0f));
        __m512 sum = _mm512_setzero_ps();
        for (int t = 0; t < nk; t++) {
            __m512 x = _mm512_loadu_ps(st + (size_t)t * rp + r);
            __mmask16 live = _mm512_cmp_ps_mask(x, ninf, _CMP_NEQ_OQ);
            __m512 p = _mm512_maskz_mov_ps(live, exp512(_mm512_sub_ps(x, mx)));
            _mm512_storeu_ps(st + (size_t)t * rp + r, p);
            sum = _mm512_add_ps(sum, p);
        }
        _mm512_storeu_ps(l + r, _mm512_fmadd_ps(_mm512_loadu_ps(l + r), c, sum));
        _mm512_storeu_ps(m + r, mx);
        _mm512_storeu_ps(corr + r, c);
    }
}

/* Accumulators of four rows × 64 columns stay in registers across the tile;
 * each V load feeds four rows. */
static void pv_rows4_64(float *a, int d_v, const float *p, int nk, int rp, const float *v, const float *corr)
{
    __m512 x[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        const __m512 cr = _mm512_set1_ps(corr[i]);
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) x[i][q] = _mm512_mul_ps(cr, _mm512_loadu_ps(a + (size_t)i * d_v + 16 * q));
    }
    for (int t = 0; t < nk; t++) {
        const float *pt = p + (size_t)t * rp;
        const __m512 p0 = _mm512_set1_ps(pt[0]), p1 = _mm512_set1_ps(pt[1]);
        const __m512 p2 = _mm512_set1_ps(pt[2]), p3 = _mm512_set1_ps(pt[3]);
        const float *vr = v + (size_t)t * d_v;
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            __m512 vv = _mm512_loadu_ps(vr + 16 * q);
            x[0][q] = _mm512_fmadd_ps(p0, vv, x[0][q]);
            x[1][q] = _mm512_fmadd_ps(p1, vv, x[1][q]);
            x[2][q] = _mm512_fmadd_ps(p2, vv, x[2][q]);
            x[3][q] = _mm512_fmadd_ps(p3, vv, x[3][q]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) _mm512_storeu_ps(a + (size_t)i * d_v + 16 * q, x[i][q]);
}

static void pv_row_16(float *a, const float *p, int nk, int rp, const float *v, int d_v, float cr)
{
    __m512 x = _mm512_mul_ps(_mm512_set1_ps(cr), _mm512_loadu_ps(a));
    for (int t = 0; t < nk; t++)
        x = _mm512_fmadd_ps(_mm512_set1_ps(p[(size_t)t * rp]), _mm512_loadu_ps(v + (size_t)t * d_v), x);
    _mm512_storeu_ps(a, x);
}

static void attn_pv_avx512(float *acc, const float *p, int nk, int rp, int n_rows, const float *v, int d_v,
                           const float *corr)
{
    if (d_v % 16) {
        cpu_attn_pv_scalar(acc, p, nk, rp, n_rows, v, d_v, corr);
        return;
    }
    int r = 0;
    for (; r + 4 <= n_rows; r += 4) {
        float *a0 = acc + (size_t)r * d_v;
        int c = 0;
        for (; c + 64 <= d_v; c += 64) pv_rows4_64(a0 + c, d_v, p + r, nk, rp, v + c, corr + r);
        for (; c < d_v; c += 16)
            for (int i = 0; i < 4; i++) pv_row_16(a0 + (size_t)i * d_v + c, p + r + i, nk, rp, v + c, d_v, corr[r + i]);
    }
    for (; r < n_rows; r++)
        for (int c = 0; c < d_v; c += 16) pv_row_16(acc + (size_t)r * d_v + c, p + r, nk, rp, v + c, d_v, corr[r]);
}

const cpu_vec_fns cpu_vec_avx512 = {
    .level = "avx512",
    .dot = dot_avx512,
    .axpy = axpy_avx512,
    .scale = scale_avx512,
    .f16_to_f32 = f16_to_f32_avx512,
    .f32_to_f16 = f32_to_f16_avx512,
    .axpy_h = axpy_h_avx512,
    .scale_h = scale_h_avx512,
    .round_h = round_h_avx512,
    .swiglu = swiglu_avx512,
    .mul_add = mul_add_avx512,
    .silu = silu_avx512,
    .gdn_step = gdn_step_avx512,
    .sumsq = sumsq_avx512,
    .scale_mul = scale_mul_avx512,
    .rope_neox = rope_neox_avx512,
    .attn_row_h = attn_row_h_avx512,
    .attn_qk = attn_qk_avx512,
    .attn_softmax = attn_softmax_avx512,
    .attn_pv = attn_pv_avx512,
};
