/* NEON argmax: a pass of 4-lane maxima, then the first index holding the
 * maximum. Same result as wk_argmax_f32_scalar: the maximum is kept with a
 * compare-and-select (x > m is false for a NaN x), because vmaxq_f32 would
 * return the NaN. */
#include <arm_neon.h>
#include <math.h>

#include "util/argmax.h"

int32_t wk_argmax_f32_neon(const float *x, int32_t n)
{
    if (n < 16) return wk_argmax_f32_scalar(x, n);
    float32x4_t m0 = vdupq_n_f32(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
    int32_t i = 0;
    for (; i + 16 <= n; i += 16) { /* four chains: the compare-select latency is not the limit */
        const float32x4_t a = vld1q_f32(x + i), b = vld1q_f32(x + i + 4);
        const float32x4_t c = vld1q_f32(x + i + 8), d = vld1q_f32(x + i + 12);
        m0 = vbslq_f32(vcgtq_f32(a, m0), a, m0);
        m1 = vbslq_f32(vcgtq_f32(b, m1), b, m1);
        m2 = vbslq_f32(vcgtq_f32(c, m2), c, m2);
        m3 = vbslq_f32(vcgtq_f32(d, m3), d, m3);
    }
    m0 = vbslq_f32(vcgtq_f32(m1, m0), m1, m0); /* no NaN left in the maxima */
    m2 = vbslq_f32(vcgtq_f32(m3, m2), m3, m2);
    float mx = vmaxvq_f32(vbslq_f32(vcgtq_f32(m2, m0), m2, m0));
    for (int32_t j = i; j < n; j++)
        if (x[j] > mx) mx = x[j]; /* NaN compares false */
    const float32x4_t vm = vdupq_n_f32(mx);
    for (i = 0; i + 4 <= n; i += 4) {
        const uint32x4_t hit = vceqq_f32(vld1q_f32(x + i), vm);
        if (vmaxvq_u32(hit)) {
            for (int j = 0;; j++)
                if (x[i + j] == mx) return i + j;
        }
    }
    for (; i < n; i++)
        if (x[i] == mx) return i;
    return -1; /* every value NaN (mx stayed -inf and no -inf present) */
}
