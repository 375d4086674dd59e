/* Scalar vector kernels and the run-time choice between ISA levels. */
#include "backend/cpu/cpu_vec.h"

#include "util/cpu.h"
#include "util/f16.h"

#include <math.h>
#include <stddef.h>

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

static void swiglu_scalar(float *y, const float *g, const float *u, int n)
{
    for (int i = 0; i < n; i++) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void cpu_mul_add_scalar(float *y, const float *a, const float *b, int n)
{
    for (int i = 0; i < n; i++) y[i] += a[i] * b[i];
}

void cpu_silu_scalar(float *y, const float *x, int n)
{
    for (int i = 0; i < n; i++) y[i] = x[i] / (1.0f + expf(-x[i]));
}

void cpu_gdn_step_scalar(float *S, int dk, int ld, int nc, const float *q, const float *k, const float *v,
                         float decay, float beta, float *o)
{
    for (int c = 0; c < nc; c++) {
        float ks = 0.0f;
        for (int i = 0; i < dk; i++) ks += S[(size_t)i * ld + c] * k[i];
        float delta = beta * (v[c] - decay * ks);
        float oc = 0.0f;
        for (int i = 0; i < dk; i++) {
            float *e = S + (size_t)i * ld + c;
            *e = *e * decay + k[i] * delta;
            oc += *e * q[i];
        }
        o[c] = oc;
    }
}

static double sumsq_scalar(const float *x, int n)
{
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (double)(x[i] * x[i]);
    return s;
}

void cpu_scale_mul_scalar(float *y, const float *x, float s, const float *w, int n)
{
    if (w)
        for (int i = 0; i < n; i++) y[i] = (x[i] * s) * w[i];
    else
        for (int i = 0; i < n; i++) y[i] = x[i] * s;
}

void cpu_rope_neox_scalar(float *x, const float *c, const float *s, int half)
{
    for (int i = 0; i < half; i++) {
        float a = x[i], b = x[i + half];
        x[i] = a * c[i] - b * s[i];
        x[i + half] = a * s[i] + b * c[i];
    }
}

void cpu_attn_row_h_scalar(const float *q, const float *kt, const float *vt, int nk, int d_k, int d_v, float scale,
                           float *m, float *l, float *acc)
{
    for (int t = 0; t < nk; t++) {
        float sc = dot_scalar(q, kt + (size_t)t * d_k, d_k) * scale;
        if (sc > *m) {
            float ms = expf(*m - sc);
            *m = sc;
            scale_h_scalar(acc, ms, d_v);
            axpy_h_scalar(acc, 1.0f, vt + (size_t)t * d_v, d_v);
            *l = *l * ms + 1.0f;
        } else {
            float vs = expf(sc - *m);
            axpy_h_scalar(acc, vs, vt + (size_t)t * d_v, d_v);
            *l += vs;
        }
    }
}

void cpu_attn_qk_scalar(float *st, const float *k, int nk, int d, const float *qt, int rp, float scale)
{
    for (int t = 0; t < nk; t++)
        for (int r = 0; r < rp; r++) {
            float acc = 0.0f;
            for (int c = 0; c < d; c++) acc += k[t * d + c] * qt[c * rp + r];
            st[t * rp + r] = acc * scale;
        }
}

void cpu_attn_softmax_scalar(float *st, int nk, int rp, float *m, float *l, float *corr)
{
    for (int r = 0; r < rp; r++) {
        float mx = m[r];
        for (int t = 0; t < nk; t++) mx = st[t * rp + r] > mx ? st[t * rp + r] : mx;
        corr[r] = mx == m[r] ? 1.0f : expf(m[r] - mx);
        float sum = 0.0f;
        for (int t = 0; t < nk; t++) {
            float x = st[t * rp + r];
            float p = x == -INFINITY ? 0.0f : expf(x - mx);
            st[t * rp + r] = p;
            sum += p;
        }
        l[r] = l[r] * corr[r] + sum;
        m[r] = mx;
    }
}

void cpu_attn_pv_scalar(float *acc, const float *p, int nk, int rp, int n_rows, const float *v, int d_v,
                        const float *corr)
{
    for (int r = 0; r < n_rows; r++) {
        float *a = acc + (size_t)r * d_v;
        for (int c = 0; c < d_v; c++) a[c] *= corr[r];
        for (int t = 0; t < nk; t++) {
            float pt = p[t * rp + r];
            if (pt == 0.0f) continue;
            for (int c = 0; c < d_v; c++) a[c] += pt * v[(size_t)t * d_v + c];
        }
    }
}

/* These tables are immutable constants, not mutable state. */
const cpu_vec_fns cpu_vec_scalar = {
    .level = "scalar",
    .dot = dot_scalar,
    .axpy = axpy_scalar,
    .scale = scale_scalar,
    .f16_to_f32 = f16_to_f32_scalar,
    .f32_to_f16 = f32_to_f16_scalar,
    .axpy_h = axpy_h_scalar,
    .scale_h = scale_h_scalar,
    .round_h = round_h_scalar,
    .swiglu = swiglu_scalar,
    .mul_add = cpu_mul_add_scalar,
    .silu = cpu_silu_scalar,
    .gdn_step = cpu_gdn_step_scalar,
    .sumsq = sumsq_scalar,
    .scale_mul = cpu_scale_mul_scalar,
    .rope_neox = cpu_rope_neox_scalar,
    .attn_row_h = cpu_attn_row_h_scalar,
    .attn_qk = cpu_attn_qk_scalar,
    .attn_softmax = cpu_attn_softmax_scalar,
    .attn_pv = cpu_attn_pv_scalar,
};

const cpu_vec_fns *cpu_vec_select(int max_level)
{
    const wk_cpu_features *f = wk_cpu();
#if defined(__x86_64__)
    if (max_level >= 2 && f->avx512f && f->avx512vl && f->avx2 && f->fma && f->f16c)
        return &cpu_vec_avx512;
    if (max_level >= 1 && f->avx2 && f->fma && f->f16c) return &cpu_vec_avx2;
#elif defined(__aarch64__)
    if (max_level >= 1 && f->neon) return &cpu_vec_neon;
#else
    (void)f, (void)max_level;
#endif
    return &cpu_vec_scalar;
}
