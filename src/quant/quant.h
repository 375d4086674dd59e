/* Dequantization, quantization and dot-product kernels for the tensor types
 * of qtypes.h (layouts: shared/spec/gguf.md section 6).
 *
 * Row lengths n are element counts and must be multiples of the type's
 * block_elems (1 for F32/F16/BF16, 32 or 256 for block types). Rows are the
 * raw ggml block layout, as stored in GGUF.
 *
 * Dot products follow llama.cpp's CPU backend: a weight row of type T is
 * multiplied with an activation row already quantized to T's partner format
 * (qt_traits_of(T)->vec_dot: Q8_0, Q8_1, Q8_K, F16, BF16 or F32) with integer
 * arithmetic inside each block and F32 accumulation across blocks. */
#ifndef WICK_QUANT_QUANT_H
#define WICK_QUANT_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "quant/qtypes.h"

/* Decodes n elements of type `type` at src into dst (F32). Bit-exact with
 * ggml's dequantize_row_* for F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * Q8_1, Q2_K..Q8_K, IQ4_NL, IQ4_XS. Returns 0, or WK_EINVAL when the type is
 * not supported or n is not a multiple of the block size (dst untouched). */
int qt_dequantize_row(enum qt_type type, const void *src, float *dst, int64_t n);

/* Encodes n floats into type `type` (writes qt_row_bytes(traits, n) bytes).
 * Every weight type and the activation types are supported. Q8_0, Q8_1 and
 * Q8_K are bit-exact with llama.cpp's reference (activation) quantizers;
 * F16/BF16 narrow with round-to-nearest-even (util/f16.h); the other types
 * produce valid blocks with error close to llama.cpp's quantizers (not
 * necessarily the same bytes). Returns 0 or WK_EINVAL (bad type or n). */
int qt_quantize_row(enum qt_type type, const float *src, void *dst, int64_t n);

/* Dot product kernel: *s = weight row w (n elements of the weight type) ·
 * activation row a (n elements in the partner format). n is a multiple of the
 * weight type's block size. No alignment required. */
typedef void (*qt_vec_dot_fn)(int64_t n, float *s, const void *w, const void *a);

/* Kernel levels, for tests and benchmarks. A build has the levels of its
 * target architecture only (x86-64: AVX2, AVX-512; AArch64: NEON, NEON with
 * the dot-product extension); asking for another one gives NULL. */
enum qt_isa {
    QT_ISA_SCALAR = 0,
    QT_ISA_AVX2 = 1,
    QT_ISA_AVX512 = 2,
    QT_ISA_NEON = 3,
    QT_ISA_DOTPROD = 4,
    QT_ISA_COUNT
};

/* Best dot kernel for the running CPU (honours WICK_ISA via wk_cpu()), or
 * NULL if the type is not a weight type. */
qt_vec_dot_fn qt_vec_dot(enum qt_type type);

/* The kernel of one ISA level, or NULL if that level has no kernel for the
 * type (callers then fall back to a lower level) or the CPU lacks the ISA. */
qt_vec_dot_fn qt_vec_dot_isa(enum qt_type type, enum qt_isa isa);

/* Quantizes an F32 activation row to the partner format of weight type
 * wtype (same as qt_quantize_row(qt_traits_of(wtype)->vec_dot, ...)); uses
 * the fastest available code, output bit-identical to the scalar version.
 * Returns 0 or WK_EINVAL. */
int qt_quantize_act(enum qt_type wtype, const float *src, void *dst, int64_t n);

/* Bytes of one activation row of n elements in wtype's partner format. */
size_t qt_act_row_bytes(enum qt_type wtype, int64_t n);

#endif
