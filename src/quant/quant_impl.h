/* Internal interface between the quant/ files (not for other modules). */
#ifndef WICK_QUANT_QUANT_IMPL_H
#define WICK_QUANT_QUANT_IMPL_H

#include <stdint.h>

#include "quant/quant.h"

/* Unchecked workers behind qt_dequantize_row / qt_quantize_row: n is a valid
 * multiple of the block size; return -1 for types they do not handle. */
int qt_dequantize_blocks(enum qt_type type, const void *src, float *dst, int64_t n);
int qt_quantize_blocks(enum qt_type type, const float *src, void *dst, int64_t n);

/* Per-ISA kernel tables: entry [type] or NULL. */
qt_vec_dot_fn qt_dot_scalar(enum qt_type type);
qt_vec_dot_fn qt_dot_avx2(enum qt_type type);
qt_vec_dot_fn qt_dot_avx512(enum qt_type type);
qt_vec_dot_fn qt_dot_neon(enum qt_type type);
qt_vec_dot_fn qt_dot_neon_dotprod(enum qt_type type);

/* Activation quantizers of the fast files (bit-identical to scalar ones);
 * return -1 when the type has no fast version. */
int qt_quantize_act_avx512(enum qt_type act_type, const float *src, void *dst, int64_t n);
int qt_quantize_act_avx2(enum qt_type act_type, const float *src, void *dst, int64_t n); /* act_avx2.c */

#endif
