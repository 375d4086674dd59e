/* Internal interface of the CPU matmul: per-ISA GEMM tile kernels. */
#ifndef WICK_BACKEND_CPU_MATMUL_IMPL_H
#define WICK_BACKEND_CPU_MATMUL_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/matmul.h"

/* Tile kernel: y[i*y_stride + j] = W_j · A_i for j < nw, i < na, where W_j is
 * the weight row at w + j*w_stride and A_i the activation row (already in the
 * partner format) at a + i*a_stride; k elements per row. Results must match
 * the type's vec_dot of the same ISA level up to float summation order. */
typedef void (*cpu_gemm_fn)(int64_t k, const void *w, size_t w_stride, int nw, const void *a,
                            size_t a_stride, int na, float *y, int64_t y_stride);

/* AVX-512 VNNI kernels for the decode regime (matmul_decode_avx512.c), for
 * the types that have one, else NULL. */
cpu_gemm_fn cpu_gemm_decode_avx512(enum qt_type type);

/* AVX-512 kernels for F32 / F16 / BF16 weights, any N (matmul_float_avx512.c). */
cpu_gemm_fn cpu_gemm_float_avx512(enum qt_type type);

#endif
