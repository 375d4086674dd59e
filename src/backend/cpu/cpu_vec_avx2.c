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

static void swiglu_avx2(float *y, const float *g, const float *u, int n)
{
    for (int i = 0; i < n; i++) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static double sumsq_avx2(const float *x, int n)
{
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (double)(x[i] * x[i]);
    return s;
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
    .mul_add = cpu_mul_add_scalar,
    .silu = cpu_silu_scalar,
    .gdn_step = cpu_gdn_step_scalar,
    .sumsq = sumsq_avx2,
    .scale_mul = cpu_scale_mul_scalar,
    .rope_neox = cpu_rope_neox_scalar,
    .attn_row_h = cpu_attn_row_h_scalar,
    .attn_qk = cpu_attn_qk_scalar,
    .attn_softmax = cpu_attn_softmax_scalar,
    .attn_pv = cpu_attn_pv_scalar,
};
