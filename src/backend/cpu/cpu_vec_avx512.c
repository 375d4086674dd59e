/* AVX-512 vector kernels (compiled with AVX-512 flags; called only after
 * cpu_vec_select checked the CPU). */
#include <immintrin.h>

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

const cpu_vec_fns cpu_vec_avx512 = {"avx512", dot_avx512, axpy_avx512, scale_avx512,
                                    f16_to_f32_avx512, f32_to_f16_avx512, axpy_h_avx512, scale_h_avx512, round_h_avx512};
