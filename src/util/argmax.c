/* wk_argmax_f32: the reference loop and the dispatch to the AVX2 version. */
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
    return wk_cpu()->avx2 ? wk_argmax_f32_avx2(x, n) : wk_argmax_f32_scalar(x, n);
}
