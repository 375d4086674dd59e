/* Small vector kernels used inside the CPU ops (attention, DeltaNet, KV
 * store): a scalar version that is obviously right and AVX2 / AVX-512 (x86-64)
 * or NEON (AArch64) versions chosen once at backend creation. */
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
    /* y[i] = SiLU(g[i])·u[i] (y may alias g or u) */
    void (*swiglu)(float *y, const float *g, const float *u, int n);
    /* y[i] += a[i]·b[i] */
    void (*mul_add)(float *y, const float *a, const float *b, int n);
    /* y[i] = SiLU(x[i]) (y may alias x) */
    void (*silu)(float *y, const float *x, int n);
    /* One Gated DeltaNet step on nc columns of a state S [dk][ld] (row = key
     * dim): S ← decay·S + k·δᵀ with δ = β·(v − decay·Sᵀk), then o = Sᵀq (new S).
     * Columns are independent, so a caller may run all tokens on one column
     * block (cache-resident) before the next. */
    void (*gdn_step)(float *S, int dk, int ld, int nc, const float *q, const float *k, const float *v,
                     float decay, float beta, float *o);
    /* Σ x[i]² accumulated in double (RMSNorm, as ggml does) */
    double (*sumsq)(const float *x, int n);
    /* y[i] = (x[i]·s)·w[i] (w NULL: ones) */
    void (*scale_mul)(float *y, const float *x, float s, const float *w, int n);
    /* NEOX rotation of pairs (x[i], x[i+half]) by angles with cosines c[i], sines s[i] */
    void (*rope_neox)(float *x, const float *c, const float *s, int half);

    /* One query row over nk keys taken one at a time with llama.cpp's one-chunk
     * numerics: s = scale·q·k_t; on a new maximum the accumulator is rescaled,
     * and after every update acc is rounded to F16 precision. q is already
     * F16-rounded; kt [nk][d_k], vt [nk][d_v]; *m, *l, acc[d_v] carry over. */
    void (*attn_row_h)(const float *q, const float *kt, const float *vt, int nk, int d_k, int d_v, float scale,
                       float *m, float *l, float *acc);
    /* Attention tile with query rows in vector lanes (rp: rows padded to a
     * multiple of 16). Scores: st[t*rp + r] = scale · Σ_c k[t*d + c]·qt[c*rp + r]
     * for keys t < nk (k row-major, qt the transposed query block). */
    void (*attn_qk)(float *st, const float *k, int nk, int d, const float *qt, int rp, float scale);
    /* Online-softmax step over st [nk][rp] (-inf = masked), per lane r:
     * m' = max(m[r], max_t st), corr[r] = e^(m[r] − m') (1 when equal),
     * st ← e^(st − m') (0 where -inf), l[r] = l[r]·corr[r] + Σ_t st, m[r] = m'. */
    void (*attn_softmax)(float *st, int nk, int rp, float *m, float *l, float *corr);
    /* acc[r*d_v + c] = acc[r*d_v + c]·corr[r] + Σ_t p[t*rp + r]·v[t*d_v + c], r < n_rows. */
    void (*attn_pv)(float *acc, const float *p, int nk, int rp, int n_rows, const float *v, int d_v,
                    const float *corr);
} cpu_vec_fns;

/* Kernel levels: 0 scalar, 1 AVX2 or NEON, 2 AVX-512 (x86-64 only). Returns
 * the table for the highest level <= max_level this CPU supports (wk_cpu()). */
const cpu_vec_fns *cpu_vec_select(int max_level);

/* Scalar kernels also used by the AVX2 table. */
void cpu_silu_scalar(float *y, const float *x, int n);
void cpu_attn_row_h_scalar(const float *q, const float *kt, const float *vt, int nk, int d_k, int d_v, float scale,
                           float *m, float *l, float *acc);
void cpu_mul_add_scalar(float *y, const float *a, const float *b, int n);
void cpu_gdn_step_scalar(float *S, int dk, int ld, int nc, const float *q, const float *k, const float *v,
                         float decay, float beta, float *o);
void cpu_scale_mul_scalar(float *y, const float *x, float s, const float *w, int n);
void cpu_rope_neox_scalar(float *x, const float *c, const float *s, int half);
void cpu_attn_qk_scalar(float *st, const float *k, int nk, int d, const float *qt, int rp, float scale);
void cpu_attn_softmax_scalar(float *st, int nk, int rp, float *m, float *l, float *corr);
void cpu_attn_pv_scalar(float *acc, const float *p, int nk, int rp, int n_rows, const float *v, int d_v,
                        const float *corr);

/* The per-ISA tables (NULL-free; only call after the CPU check). A build has
 * the tables of its target architecture only. */
extern const cpu_vec_fns cpu_vec_scalar;
extern const cpu_vec_fns cpu_vec_avx2;
extern const cpu_vec_fns cpu_vec_avx512;
extern const cpu_vec_fns cpu_vec_neon;

#endif
