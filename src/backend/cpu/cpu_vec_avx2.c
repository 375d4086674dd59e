/* AVX2 + FMA + F16C vector kernels (compiled with those flags; called only
 * after cpu_vec_select checked the CPU). */
#include <immintrin.h>
#include <math.h>

#include "backend/cpu/cpu_vec.h"
#include "util/f16.h"

static inline float hsum256(__m256 v)
{
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

static float dot_avx2(const float *a, const float *b, int n)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum256(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static void axpy_avx2(float *y, float s, const float *x, int n)
{
    __m256 vs = _mm256_set1_ps(s);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(vs, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += s * x[i];
}

static void scale_avx2(float *y, float s, int n)
{
    __m256 vs = _mm256_set1_ps(s);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(vs, _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] *= s;
}

static void f16_to_f32_avx2(float *dst, const uint16_t *src, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = wk_f16_to_f32(src[i]);
}

static void f32_to_f16_avx2(uint16_t *dst, const float *src, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = wk_f32_to_f16(src[i]);
}

static inline __m256 rh8(__m256 v) { return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)); }
static inline float rh1(float x) { return wk_f16_to_f32(wk_f32_to_f16(x)); }

static void axpy_h_avx2(float *y, float s, const float *x, int n)
{
    __m256 vs = _mm256_set1_ps(s);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, rh8(_mm256_fmadd_ps(vs, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i))));
    for (; i < n; i++) y[i] = rh1(y[i] + s * x[i]);
}

static void scale_h_avx2(float *y, float s, int n)
{
    __m256 vs = _mm256_set1_ps(s);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, rh8(_mm256_mul_ps(vs, _mm256_loadu_ps(y + i))));
    for (; i < n; i++) y[i] = rh1(y[i] * s);
}

static void round_h_avx2(float *y, const float *x, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, rh8(_mm256_loadu_ps(x + i)));
    for (; i < n; i++) y[i] = rh1(x[i]);
}

/* e^x, ~1 ulp (Cephes expf: x = n·ln2 + r, degree-6 polynomial on r, scaled
 * by 2^n as two factors 2^(n/2)·2^(n−n/2), so that n = ±128 at the ends of
 * the clamp neither overflows the exponent field nor skips the subnormals). */
static inline __m256 exp256(__m256 x)
{
    x = _mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f));
    x = _mm256_max_ps(x, _mm256_set1_ps(-88.3762626647949f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i ni = _mm256_cvtps_epi32(n), n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 f1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256 f2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, f1), f2);
}

static void swiglu_avx2(float *y, const float *g, const float *u, int n)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(g + i);
        __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), x));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void mul_add_avx2(float *y, const float *a, const float *b, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a[i] * b[i];
}

static void silu_avx2(float *y, const float *x, int n)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        _mm256_storeu_ps(y + i, _mm256_div_ps(v, _mm256_add_ps(one, exp256(_mm256_sub_ps(_mm256_setzero_ps(), v)))));
    }
    for (; i < n; i++) y[i] = x[i] / (1.0f + expf(-x[i]));
}

/* A block of 32 state columns: Sᵀk, δ and o stay in registers over both
 * passes of the rows; even and odd rows use separate accumulators so eight
 * FMA chains hide the FMA latency (the AVX-512 kernel's order, in 8 lanes). */
static void gdn_step32(float *S, int dk, int ld, const float *q, const float *k, const float *v, __m256 vd,
                       __m256 vb, float *o)
{
    __m256 ka[4], kb[4], dl[4], oa[4], ob[4];
#pragma GCC unroll 4
    for (int x = 0; x < 4; x++) ka[x] = kb[x] = oa[x] = ob[x] = _mm256_setzero_ps();
    int i = 0;
    for (; i + 2 <= dk; i += 2) {
        const float *r0 = S + (size_t)i * ld, *r1 = r0 + ld;
        const __m256 k0 = _mm256_set1_ps(k[i]), k1 = _mm256_set1_ps(k[i + 1]);
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++) {
            ka[x] = _mm256_fmadd_ps(k0, _mm256_loadu_ps(r0 + 8 * x), ka[x]);
            kb[x] = _mm256_fmadd_ps(k1, _mm256_loadu_ps(r1 + 8 * x), kb[x]);
        }
    }
    for (; i < dk; i++) {
        const __m256 k0 = _mm256_set1_ps(k[i]);
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++) ka[x] = _mm256_fmadd_ps(k0, _mm256_loadu_ps(S + (size_t)i * ld + 8 * x), ka[x]);
    }
#pragma GCC unroll 4
    for (int x = 0; x < 4; x++)
        dl[x] = _mm256_mul_ps(vb, _mm256_fnmadd_ps(vd, _mm256_add_ps(ka[x], kb[x]), _mm256_loadu_ps(v + 8 * x)));
    for (i = 0; i + 2 <= dk; i += 2) {
        float *r0 = S + (size_t)i * ld, *r1 = r0 + ld;
        const __m256 k0 = _mm256_set1_ps(k[i]), k1 = _mm256_set1_ps(k[i + 1]);
        const __m256 q0 = _mm256_set1_ps(q[i]), q1 = _mm256_set1_ps(q[i + 1]);
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++) {
            __m256 e0 = _mm256_fmadd_ps(k0, dl[x], _mm256_mul_ps(_mm256_loadu_ps(r0 + 8 * x), vd));
            __m256 e1 = _mm256_fmadd_ps(k1, dl[x], _mm256_mul_ps(_mm256_loadu_ps(r1 + 8 * x), vd));
            _mm256_storeu_ps(r0 + 8 * x, e0);
            _mm256_storeu_ps(r1 + 8 * x, e1);
            oa[x] = _mm256_fmadd_ps(q0, e0, oa[x]);
            ob[x] = _mm256_fmadd_ps(q1, e1, ob[x]);
        }
    }
    for (; i < dk; i++) {
        float *r0 = S + (size_t)i * ld;
        const __m256 k0 = _mm256_set1_ps(k[i]), q0 = _mm256_set1_ps(q[i]);
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++) {
            __m256 e0 = _mm256_fmadd_ps(k0, dl[x], _mm256_mul_ps(_mm256_loadu_ps(r0 + 8 * x), vd));
            _mm256_storeu_ps(r0 + 8 * x, e0);
            oa[x] = _mm256_fmadd_ps(q0, e0, oa[x]);
        }
    }
#pragma GCC unroll 4
    for (int x = 0; x < 4; x++) _mm256_storeu_ps(o + 8 * x, _mm256_add_ps(oa[x], ob[x]));
}

static void gdn_step_avx2(float *S, int dk, int ld, int nc, const float *q, const float *k, const float *v,
                          float decay, float beta, float *o)
{
    if (nc % 32) {
        cpu_gdn_step_scalar(S, dk, ld, nc, q, k, v, decay, beta, o);
        return;
    }
    const __m256 vd = _mm256_set1_ps(decay), vb = _mm256_set1_ps(beta);
    for (int c = 0; c < nc; c += 32) gdn_step32(S + c, dk, ld, q, k, v + c, vd, vb, o + c);
}

static double sumsq_avx2(const float *x, int n)
{
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (double)(x[i] * x[i]);
    return s;
}

static void scale_mul_avx2(float *y, const float *x, float s, const float *w, int n)
{
    const __m256 vs = _mm256_set1_ps(s);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
        if (w) v = _mm256_mul_ps(v, _mm256_loadu_ps(w + i));
        _mm256_storeu_ps(y + i, v);
    }
    for (; i < n; i++) y[i] = w ? (x[i] * s) * w[i] : x[i] * s;
}

static void rope_neox_avx2(float *x, const float *c, const float *s, int half)
{
    int i = 0;
    for (; i + 8 <= half; i += 8) {
        __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + half);
        __m256 vc = _mm256_loadu_ps(c + i), vsn = _mm256_loadu_ps(s + i);
        _mm256_storeu_ps(x + i, _mm256_fmsub_ps(a, vc, _mm256_mul_ps(b, vsn)));
        _mm256_storeu_ps(x + i + half, _mm256_fmadd_ps(a, vsn, _mm256_mul_ps(b, vc)));
    }
    for (; i < half; i++) {
        float a = x[i], b = x[i + half];
        x[i] = a * c[i] - b * s[i];
        x[i + half] = a * s[i] + b * c[i];
    }
}

static inline float dot_k_avx2(const float *q, const float *kr, int d_k)
{
    __m256 d0 = _mm256_setzero_ps(), d1 = _mm256_setzero_ps();
    int c = 0;
    for (; c + 16 <= d_k; c += 16) {
        d0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + c), _mm256_loadu_ps(kr + c), d0);
        d1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + c + 8), _mm256_loadu_ps(kr + c + 8), d1);
    }
    if (c < d_k) d0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + c), _mm256_loadu_ps(kr + c), d0);
    return hsum256(_mm256_add_ps(d0, d1));
}

/* Decode attention over one query row with F16-rounded accumulation (see
 * cpu_attn_row_h_scalar): the accumulator (NV vectors of 8) stays in
 * registers for the whole key run, the F16 rounding by F16C. */
#define ATTN_ROW_H(NV)                                                                                     \
    do {                                                                                                   \
        __m256 a[NV];                                                                                      \
        _Pragma("GCC unroll 16") for (int x = 0; x < NV; x++) a[x] = _mm256_loadu_ps(acc + 8 * x);         \
        float M = *m, L = *l;                                                                              \
        for (int t = 0; t < nk; t++) {                                                                     \
            const float *kr = kt + (size_t)t * d_k, *vr = vt + (size_t)t * d_v;                            \
            float sc = dot_k_avx2(q, kr, d_k) * scale;                                                     \
            float ws;                                                                                      \
            if (sc > M) {                                                                                  \
                const __m256 ms = _mm256_set1_ps(expf(M - sc));                                            \
                L = L * expf(M - sc) + 1.0f;                                                               \
                M = sc;                                                                                    \
                _Pragma("GCC unroll 16") for (int x = 0; x < NV; x++) a[x] = rh8(_mm256_mul_ps(a[x], ms));  \
                ws = 1.0f;                                                                                 \
            } else {                                                                                       \
                ws = expf(sc - M);                                                                         \
                L += ws;                                                                                   \
            }                                                                                              \
            const __m256 vw = _mm256_set1_ps(ws);                                                          \
            _Pragma("GCC unroll 16") for (int x = 0; x < NV; x++) a[x] =                                  \
                rh8(_mm256_fmadd_ps(vw, _mm256_loadu_ps(vr + 8 * x), a[x]));                               \
        }                                                                                                  \
        _Pragma("GCC unroll 16") for (int x = 0; x < NV; x++) _mm256_storeu_ps(acc + 8 * x, a[x]);        \
        *m = M;                                                                                            \
        *l = L;                                                                                            \
    } while (0)

/* d_v = 64 keeps the accumulator in 8 registers; other multiples of 8 (16
 * registers would be all AVX2 has) update it in memory, the same operations. */
static void attn_row_h_avx2(const float *q, const float *kt, const float *vt, int nk, int d_k, int d_v,
                            float scale, float *m, float *l, float *acc)
{
    if (d_k % 8 || d_v % 8) {
        cpu_attn_row_h_scalar(q, kt, vt, nk, d_k, d_v, scale, m, l, acc);
        return;
    }
    if (d_v == 64) {
        ATTN_ROW_H(8);
        return;
    }
    float M = *m, L = *l;
    for (int t = 0; t < nk; t++) {
        const float *vr = vt + (size_t)t * d_v;
        const float sc = dot_k_avx2(q, kt + (size_t)t * d_k, d_k) * scale;
        float ws;
        if (sc > M) {
            const __m256 ms = _mm256_set1_ps(expf(M - sc));
            L = L * expf(M - sc) + 1.0f;
            M = sc;
            for (int x = 0; x < d_v; x += 8) _mm256_storeu_ps(acc + x, rh8(_mm256_mul_ps(_mm256_loadu_ps(acc + x), ms)));
            ws = 1.0f;
        } else {
            ws = expf(sc - M);
            L += ws;
        }
        const __m256 vw = _mm256_set1_ps(ws);
        for (int x = 0; x < d_v; x += 8)
            _mm256_storeu_ps(acc + x, rh8(_mm256_fmadd_ps(vw, _mm256_loadu_ps(vr + x), _mm256_loadu_ps(acc + x))));
    }
    *m = M;
    *l = L;
}

const cpu_vec_fns cpu_vec_avx2 = {
    .level = "avx2",
    .dot = dot_avx2,
    .axpy = axpy_avx2,
    .scale = scale_avx2,
    .f16_to_f32 = f16_to_f32_avx2,
    .f32_to_f16 = f32_to_f16_avx2,
    .axpy_h = axpy_h_avx2,
    .scale_h = scale_h_avx2,
    .round_h = round_h_avx2,
    .swiglu = swiglu_avx2,
    .mul_add = mul_add_avx2,
    .silu = silu_avx2,
    .gdn_step = gdn_step_avx2,
    .sumsq = sumsq_avx2,
    .scale_mul = scale_mul_avx2,
    .rope_neox = rope_neox_avx2,
    .attn_row_h = attn_row_h_avx2,
    .attn_qk = cpu_attn_qk_scalar,
    .attn_softmax = cpu_attn_softmax_scalar,
    .attn_pv = cpu_attn_pv_scalar,
};
