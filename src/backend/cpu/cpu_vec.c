/* Scalar vector kernels and the run-time choice between ISA levels. */
#include "backend/cpu/cpu_vec.h"

#include "util/cpu.h"
#include "util/f16.h"

static float dot_scalar(const float *a, const float *b, int n)
{
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void axpy_scalar(float *y, float s, const float *x, int n)
{
    for (int i = 0; i < n; i++) y[i] += s * x[i];
}

static void scale_scalar(float *y, float s, int n)
{
    for (int i = 0; i < n; i++) y[i] *= s;
}

static void f16_to_f32_scalar(float *dst, const uint16_t *src, int n)
{
    for (int i = 0; i < n; i++) dst[i] = wk_f16_to_f32(src[i]);
}

static void f32_to_f16_scalar(uint16_t *dst, const float *src, int n)
{
    for (int i = 0; i < n; i++) dst[i] = wk_f32_to_f16(src[i]);
}

static inline float rh(float x) { return wk_f16_to_f32(wk_f32_to_f16(x)); }

static void axpy_h_scalar(float *y, float s, const float *x, int n)
{
    for (int i = 0; i < n; i++) y[i] = rh(y[i] + s * x[i]);
}

static void scale_h_scalar(float *y, float s, int n)
{
    for (int i = 0; i < n; i++) y[i] = rh(y[i] * s);
}

static void round_h_scalar(float *y, const float *x, int n)
{
    for (int i = 0; i < n; i++) y[i] = rh(x[i]);
}

/* These tables are immutable constants, not mutable state. */
const cpu_vec_fns cpu_vec_scalar = {"scalar", dot_scalar, axpy_scalar, scale_scalar,
                                    f16_to_f32_scalar, f32_to_f16_scalar, axpy_h_scalar,
                                    scale_h_scalar, round_h_scalar};

const cpu_vec_fns *cpu_vec_select(int max_level)
{
    const wk_cpu_features *f = wk_cpu();
    if (max_level >= 2 && f->avx512f && f->avx512vl && f->avx2 && f->fma && f->f16c)
        return &cpu_vec_avx512;
    if (max_level >= 1 && f->avx2 && f->fma && f->f16c) return &cpu_vec_avx2;
    return &cpu_vec_scalar;
}
