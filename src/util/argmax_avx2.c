/* AVX2 argmax: a pass of 8-lane maxima (no branch, no reload of x[best]), then
 * the first index holding the maximum. Same result as wk_argmax_f32_scalar:
 * _mm256_max_ps(x, m) returns m when x is NaN, so NaNs never win. */
#include <immintrin.h>
#include <math.h>

#include "util/argmax.h"

int32_t wk_argmax_f32_avx2(const float *x, int32_t n)
{
    if (n < 16) return wk_argmax_f32_scalar(x, n);
    __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
    int32_t i = 0;
    for (; i + 16 <= n; i += 16) { /* two chains: the max latency is not the limit */
        m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
        m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, _mm256_max_ps(m0, m1));
    float mx = lanes[0];
    for (int j = 1; j < 8; j++)
        if (lanes[j] > mx) mx = lanes[j];
    for (int32_t j = i; j < n; j++)
        if (x[j] > mx) mx = x[j]; /* NaN compares false */
    const __m256 vm = _mm256_set1_ps(mx);
    for (i = 0; i + 8 <= n; i += 8) {
        const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vm, _CMP_EQ_OQ));
        if (hit) return i + __builtin_ctz((unsigned)hit);
    }
    for (; i < n; i++)
        if (x[i] == mx) return i;
    return -1; /* every value NaN (mx stayed -inf and no -inf present) */
}
