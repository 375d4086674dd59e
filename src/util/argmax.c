/* wk_argmax_f32: the reference loop and the dispatch to the AVX2 / NEON version. */
#include "util/argmax.h"

#include <math.h>

#include "util/cpu.h"

int32_t wk_argmax_f32_scalar(const float *x, int32_t n)
{
    int32_t best = -1;
    float bv = 0;
    for (int32_t i = 0; i < n; i++) {
        const float v = x[i];
        if (isnan(v)) continue;
        if (best < 0 || v > bv) { /* strict >: ties keep the lowest index */
            best = i;
            bv = v;
        }
    }
    return best;
}

int32_t wk_argmax_f32(const float *x, int32_t n)
{
#if defined(__x86_64__)
    if (wk_cpu()->avx2) return wk_argmax_f32_avx2(x, n);
#elif defined(__aarch64__)
    if (wk_cpu()->neon) return wk_argmax_f32_neon(x, n);
#endif
    return wk_argmax_f32_scalar(x, n);
}
