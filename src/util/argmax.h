/* Index of the largest float of a row (greedy sampling over a vocabulary of
 * ~250K logits, every decode step: a plain loop that reloads x[best] costs
 * ~1 ms there, the vector version a few µs). */
#ifndef WICK_UTIL_ARGMAX_H
#define WICK_UTIL_ARGMAX_H

#include <stdint.h>

/* The lowest index of the largest value among x[0..n), NaNs skipped; -1 when
 * n <= 0 or every value is NaN. */
int32_t wk_argmax_f32(const float *x, int32_t n);

/* The same without vector instructions (the reference), and the fast ones
 * (argmax_avx2.c in x86-64 builds, argmax_neon.c in AArch64 builds; call
 * only when wk_cpu() reports the ISA). */
int32_t wk_argmax_f32_scalar(const float *x, int32_t n);
int32_t wk_argmax_f32_avx2(const float *x, int32_t n);
int32_t wk_argmax_f32_neon(const float *x, int32_t n);

#endif
