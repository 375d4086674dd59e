/* NEON dot kernels of the block types with the Armv8.2 dot product (SDOT;
 * compiled with +dotprod, called only when wk_cpu() reports it). The float
 * types have no SDOT form: qt_vec_dot falls back to dot_neon.c for them. */
#include <arm_neon.h>

/* Σ a·b of 16 signed bytes into 4 lanes (lane i: bytes 4i..4i+3). */
static inline int32x4_t neon_dot_i8(int32x4_t acc, int8x16_t a, int8x16_t b) { return vdotq_s32(acc, a, b); }

#include "quant/dot_neon_int.h"

qt_vec_dot_fn qt_dot_neon_dotprod(enum qt_type type) { return neon_block_kernel(type); }
