/* Small vector kernels used inside the CPU ops (attention, DeltaNet, KV
 * store): a scalar version that is obviously right and AVX2 / AVX-512
 * versions chosen once at backend creation. */
#ifndef WICK_BACKEND_CPU_CPU_VEC_H
#define WICK_BACKEND_CPU_CPU_VEC_H

#include <stdint.h>

typedef struct cpu_vec_fns {
    const char *level;
    /* Σ a[i]·b[i] */
    float (*dot)(const float *a, const float *b, int n);
    /* y[i] += s·x[i] */
    void (*axpy)(float *y, float s, const float *x, int n);
    /* y[i] *= s */
    void (*scale)(float *y, float s, int n);
    void (*f16_to_f32)(float *dst, const uint16_t *src, int n);
    void (*f32_to_f16)(uint16_t *dst, const float *src, int n);
    /* y[i] = f16(y[i] + s·x[i]) and y[i] = f16(y[i]·s): an F32 buffer that
     * holds F16-rounded values, like llama.cpp's F16 attention accumulator */
    void (*axpy_h)(float *y, float s, const float *x, int n);
    void (*scale_h)(float *y, float s, int n);
    /* y[i] = f16(x[i]) */
    void (*round_h)(float *y, const float *x, int n);
} cpu_vec_fns;

/* Kernel levels: 0 scalar, 1 AVX2, 2 AVX-512. Returns the table for the
 * highest level <= max_level this CPU supports (wk_cpu()). */
const cpu_vec_fns *cpu_vec_select(int max_level);

/* The per-ISA tables (NULL-free; only call after the CPU check). */
extern const cpu_vec_fns cpu_vec_scalar;
extern const cpu_vec_fns cpu_vec_avx2;
extern const cpu_vec_fns cpu_vec_avx512;

#endif
