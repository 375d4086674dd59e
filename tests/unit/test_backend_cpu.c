/* CPU backend ops against naive scalar references on random inputs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_vec.h"
#include "quant/qtypes.h"
#include "testutil.h"
#include "util/cpu.h"
#include "util/f16.h"

static uint64_t g_rng = 0x5eed;

static float *randv(size_t n, float scale)
{
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = test_rand_normal(&g_rng) * scale;
    return p;
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(d)) return INFINITY;
        if (d > m) m = d;
    }
    return m;
}

static be_backend *new_backend(int threads)
{
    be_backend *be = NULL;
    wk_error err = {0};
    assert_int_equal(be_cpu_new(&be, threads, &err), 0);
    return be;
}

static be_weight f32_weight(const float *w, int64_t k, int64_t m, int64_t e)
{
    be_weight r;
    memset(&r, 0, sizeof r);
    r.type = QT_F32;
    r.ne[0] = k;
    r.ne[1] = m;
    r.ne[2] = e;
    r.ne[3] = 1;
    r.nb1 = (size_t)k * 4;
    r.nb2 = r.nb1 * (size_t)m;
    r.data = w;
    r.name = "test";
    return r;
}

/* ---- vector kernels -------------------------------------------------------------- */

static void test_vector_kernels_match_scalar(void **state)
{
    (void)state;
    const cpu_vec_fns *levels[] = {cpu_vec_select(1), cpu_vec_select(2)};
    for (int L = 0; L < 2; L++) {
        const cpu_vec_fns *v = levels[L];
        for (int n = 1; n < 70; n += 7) {
            float *a = randv((size_t)n, 1), *b = randv((size_t)n, 1);
            float y1[80], y2[80], h1[80], h2[80];
            uint16_t f1[80], f2[80];
            assert_true(fabsf(v->dot(a, b, n) - cpu_vec_scalar.dot(a, b, n)) < 1e-4f);
            memcpy(y1, a, sizeof(float) * n);
            memcpy(y2, a, sizeof(float) * n);
            v->axpy(y1, 0.3f, b, n);
            cpu_vec_scalar.axpy(y2, 0.3f, b, n);
            assert_true(max_diff(y1, y2, (size_t)n) < 1e-6);
            v->f32_to_f16(f1, a, n);
            cpu_vec_scalar.f32_to_f16(f2, a, n);
            assert_memory_equal(f1, f2, sizeof(uint16_t) * n);
            v->f16_to_f32(y1, f1, n);
            cpu_vec_scalar.f16_to_f32(y2, f2, n);
            assert_memory_equal(y1, y2, sizeof(float) * n);
            v->round_h(h1, a, n);
            cpu_vec_scalar.round_h(h2, a, n);
            assert_memory_equal(h1, h2, sizeof(float) * n);
            v->scale_h(h1, 0.7f, n);
            cpu_vec_scalar.scale_h(h2, 0.7f, n);
            assert_memory_equal(h1, h2, sizeof(float) * n);
            v->swiglu(y1, a, b, n);
            cpu_vec_scalar.swiglu(y2, a, b, n);
            assert_true(max_diff(y1, y2, (size_t)n) < 1e-6);
            assert_true(fabs(v->sumsq(a, n) - cpu_vec_scalar.sumsq(a, n)) < 1e-9);
            v->scale_mul(y1, a, 0.7f, b, n);
            cpu_vec_scalar.scale_mul(y2, a, 0.7f, b, n);
            assert_memory_equal(y1, y2, sizeof(float) * n);
            if (n % 2 == 0) {
                memcpy(y1, a, sizeof(float) * n);
                memcpy(y2, a, sizeof(float) * n);
                v->rope_neox(y1, b, b + n / 2, n / 2);
                cpu_vec_scalar.rope_neox(y2, b, b + n / 2, n / 2);
                assert_true(max_diff(y1, y2, (size_t)n) < 1e-6);
            }
            free(a);
            free(b);
        }
    }
}

static void check_attention_row_kernel_matches_scalar(const cpu_vec_fns *v)
{
    const int dims[3] = {64, 128, 256};
    for (int di = 0; di < 3; di++) {
        const int d = dims[di], nk = 45;
        float *q = randv(d, 1), *kt = randv((size_t)nk * d, 1), *vt = randv((size_t)nk * d, 1);
        float *a1 = calloc(d, 4), *a2 = calloc(d, 4);
        v->round_h(q, q, d);
        float m1 = -INFINITY, m2 = -INFINITY, l1 = 0, l2 = 0;
        /* two runs carry m, l and acc over like consecutive tiles */
        v->attn_row_h(q, kt, vt, 20, d, d, 0.1f, &m1, &l1, a1);
        v->attn_row_h(q, kt + 20 * d, vt + 20 * d, nk - 20, d, d, 0.1f, &m1, &l1, a1);
        cpu_vec_scalar.attn_row_h(q, kt, vt, nk, d, d, 0.1f, &m2, &l2, a2);
        assert_true(fabsf(m1 - m2) < 1e-5f && fabsf(l1 - l2) < 1e-3f * l2);
        assert_true(max_diff(a1, a2, d) < 2e-3); /* F16 rounding of slightly different sums */
        free(q);
        free(kt);
        free(vt);
        free(a1);
        free(a2);
    }
}

/* every vector level of this CPU (AVX2 and AVX-512 on x86-64) */
static void test_attention_row_kernel_matches_scalar(void **state)
{
    (void)state;
    check_attention_row_kernel_matches_scalar(cpu_vec_select(1));
    check_attention_row_kernel_matches_scalar(cpu_vec_select(2));
}

static void check_gdn_step_kernel_matches_scalar(const cpu_vec_fns *v)
{
    const int dk = 33, dv = 192; /* odd dk: the row-pair remainder */ /* a 128-column block and a 64-column one */
    float *S1 = randv((size_t)dk * dv, 0.2f), *S2 = malloc(sizeof(float) * dk * dv);
    float *q = randv(dk, 0.3f), *k = randv(dk, 0.3f), *vv = randv(dv, 1), o1[192], o2[192];
    memcpy(S2, S1, sizeof(float) * dk * dv);
    for (int step = 0; step < 5; step++) {
        v->gdn_step(S1, dk, dv, dv, q, k, vv, 0.9f, 0.6f, o1);
        cpu_vec_scalar.gdn_step(S2, dk, dv, dv, q, k, vv, 0.9f, 0.6f, o2);
    }
    assert_true(max_diff(S1, S2, (size_t)dk * dv) < 1e-5);
    assert_true(max_diff(o1, o2, dv) < 1e-5);
    float *x = randv(100, 3), y1[100], y2[100];
    v->silu(y1, x, 100);
    cpu_vec_scalar.silu(y2, x, 100);
    assert_true(max_diff(y1, y2, 100) < 1e-6);
    memcpy(y1, x, sizeof y1);
    memcpy(y2, x, sizeof y2);
    v->mul_add(y1, q, k, 32);
    cpu_vec_scalar.mul_add(y2, q, k, 32);
    assert_true(max_diff(y1, y2, 32) < 1e-6);
    free(S1);
    free(S2);
    free(q);
    free(k);
    free(vv);
    free(x);
}

/* every vector level of this CPU (AVX2 and AVX-512 on x86-64) */
static void test_gdn_step_kernel_matches_scalar(void **state)
{
    (void)state;
    check_gdn_step_kernel_matches_scalar(cpu_vec_select(1));
    check_gdn_step_kernel_matches_scalar(cpu_vec_select(2));
}

static void check_attention_tile_kernels_match_scalar(const cpu_vec_fns *v)
{
    const int nk = 37, d = 64, rp = 80, rows = 77, dv = 208; /* every block size and remainder */
    float *k = randv((size_t)nk * d, 1), *qt = randv((size_t)d * rp, 1), *vv = randv((size_t)nk * dv, 1);
    float *s1 = malloc(sizeof(float) * nk * rp), *s2 = malloc(sizeof(float) * nk * rp);
    v->attn_qk(s1, k, nk, d, qt, rp, 0.125f);
    cpu_vec_scalar.attn_qk(s2, k, nk, d, qt, rp, 0.125f);
    assert_true(max_diff(s1, s2, (size_t)nk * rp) < 1e-4);
    for (int t = 30; t < nk; t++) s1[t * rp + 3] = s2[t * rp + 3] = -INFINITY; /* a masked run */
    for (int t = 0; t < nk; t++) s1[t * rp + 5] = s2[t * rp + 5] = -INFINITY; /* a fully masked row */
    float m1[80], m2[80], l1[80], l2[80], c1[80], c2[80];
    for (int r = 0; r < rp; r++) {
        m1[r] = m2[r] = r % 3 ? -INFINITY : 0.5f;
        l1[r] = l2[r] = r % 3 ? 0.0f : 2.0f;
    }
    v->attn_softmax(s1, nk, rp, m1, l1, c1);
    cpu_vec_scalar.attn_softmax(s2, nk, rp, m2, l2, c2);
    assert_true(max_diff(s1, s2, (size_t)nk * rp) < 1e-6);
    assert_true(max_diff(l1, l2, rp) < 1e-5);
    assert_true(max_diff(c1, c2, rp) < 1e-6);
    for (int r = 0; r < rp; r++) /* -inf stays -inf in fully masked rows */
        assert_true(m1[r] == m2[r] || fabsf(m1[r] - m2[r]) < 1e-5f);
    assert_true(s1[5] == 0.0f && l1[5] == 0.0f && c1[5] == 1.0f);
    float *a1 = randv((size_t)rows * dv, 1), *a2 = malloc(sizeof(float) * rows * dv);
    memcpy(a2, a1, sizeof(float) * rows * dv);
    v->attn_pv(a1, s1, nk, rp, rows, vv, dv, c1);
    cpu_vec_scalar.attn_pv(a2, s2, nk, rp, rows, vv, dv, c2);
    assert_true(max_diff(a1, a2, (size_t)rows * dv) < 1e-4);
    free(k);
    free(qt);
    free(vv);
    free(s1);
    free(s2);
    free(a1);
    free(a2);
}

/* every vector level of this CPU (AVX2 and AVX-512 on x86-64) */
static void test_attention_tile_kernels_match_scalar(void **state)
{
    (void)state;
    check_attention_tile_kernels_match_scalar(cpu_vec_select(1));
    check_attention_tile_kernels_match_scalar(cpu_vec_select(2));
}

/* ---- norms, rope, element-wise ---------------------------------------------------------- */

static void test_rms_norm_matches_naive(void **state)
{
    (void)state;
    be_backend *be = new_backend(2);
    const int rows = 70, n = 96, stride = 100;
    float *x = randv((size_t)rows * stride, 2), *w = randv(n, 1), *y = calloc((size_t)rows * stride, 4);
    be_rms_norm(be, y, stride, x, stride, rows, n, w, 1e-6f);
    for (int r = 0; r < rows; r++) {
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)x[r * stride + i] * x[r * stride + i];
        double sc = 1.0 / sqrt(ss / n + 1e-6);
        for (int i = 0; i < n; i++) assert_true(fabs(y[r * stride + i] - x[r * stride + i] * sc * w[i]) < 1e-5);
    }
    free(x);
    free(w);
    free(y);
    be_free(be);
}

static void naive_rope(float *x, int d, int pos, const be_rope_params *p)
{
    int half = p->n_rot / 2;
    float out[512];
    memcpy(out, x, sizeof(float) * d);
    for (int i = 0; i < half; i++) {
        int comp_pos = pos;
        if (p->mode == BE_ROPE_IMROPE) {
            int tot = p->sections[0] + p->sections[1] + p->sections[2] + p->sections[3], sec = i % tot;
            bool e = !((sec % 3 == 1 && sec < 3 * p->sections[1]) || (sec % 3 == 2 && sec < 3 * p->sections[2]) ||
                       (sec % 3 == 0 && sec < 3 * p->sections[0]));
            if (e) comp_pos = 0;
        }
        double ang = comp_pos * pow(p->theta, -2.0 * i / p->n_rot);
        if (p->freq_factors) ang /= p->freq_factors[i];
        double c = cos(ang), s = sin(ang);
        int a = p->mode == BE_ROPE_NORM ? 2 * i : i, b = p->mode == BE_ROPE_NORM ? 2 * i + 1 : i + half;
        out[a] = (float)(x[a] * c - x[b] * s);
        out[b] = (float)(x[a] * s + x[b] * c);
    }
    memcpy(x, out, sizeof(float) * d);
}

static void test_rope_variants_match_naive(void **state)
{
    (void)state;
    be_backend *be = new_backend(2);
    float ff[32];
    for (int i = 0; i < 32; i++) ff[i] = 1.0f + 0.25f * (i % 4);
    be_rope_params variants[] = {
        {BE_ROPE_NORM, 64, 10000.0f, 1.0f, NULL, {0}},
        {BE_ROPE_NEOX, 128, 1e6f, 1.0f, NULL, {0}},
        {BE_ROPE_NEOX, 64, 10000.0f, 1.0f, ff, {0}},
        {BE_ROPE_IMROPE, 32, 1e7f, 1.0f, NULL, {6, 5, 5, 0}},
        {BE_ROPE_IMROPE, 32, 1e7f, 1.0f, NULL, {4, 4, 4, 4}}, /* some pairs use the e component */
    };
    const int T = 40, H = 3, d = 128;
    int32_t pos[40];
    for (int t = 0; t < T; t++) pos[t] = 3 * t + 7;
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        float *x = randv((size_t)T * H * d, 1), *ref = malloc(sizeof(float) * T * H * d);
        float *cs = malloc(sizeof(float) * T * variants[v].n_rot);
        memcpy(ref, x, sizeof(float) * T * H * d);
        be_rope_cache(be, cs, pos, T, &variants[v]);
        be_rope(be, x, T, (size_t)H * d, H, d, cs, &variants[v]);
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) naive_rope(ref + ((size_t)t * H + h) * d, d, pos[t], &variants[v]);
        /* ggml-style float angle stepping: ~1e-5 relative at these positions */
        assert_true(max_diff(x, ref, (size_t)T * H * d) < 2e-4);
        free(x);
        free(ref);
        free(cs);
    }
    be_free(be);
}

/* Sections come from the file: sums of huge ones must not overflow (the UBSan
 * test build traps on signed overflow). With every section at INT32_MAX each
 * pair's sector is its own index, so pair i takes the t, h or w component
 * (i % 3) and all three are the position: the result is plain NEOX. */
static void test_imrope_with_huge_sections_does_not_overflow(void **state)
{
    (void)state;
    be_backend *be = new_backend(1);
    const int T = 4, d = 32;
    const be_rope_params huge = {BE_ROPE_IMROPE, d, 1e7f, 1.0f, NULL, {INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX}};
    const be_rope_params neox = {BE_ROPE_NEOX, d, 1e7f, 1.0f, NULL, {0}};
    int32_t pos[4] = {0, 1, 1000, 70000};
    float cs_huge[4 * 32], cs_neox[4 * 32];
    be_rope_cache(be, cs_huge, pos, T, &huge);
    be_rope_cache(be, cs_neox, pos, T, &neox);
    assert_true(max_diff(cs_huge, cs_neox, (size_t)T * d) == 0.0);
    be_free(be);
}

static void test_elementwise_ops_match_naive(void **state)
{
    (void)state;
    be_backend *be = new_backend(2);
    const int n = 100000;
    float *a = randv(n, 1), *b = randv(n, 1), *y = malloc(sizeof(float) * n);
    be_add(be, y, a, b, n);
    for (int i = 0; i < n; i++) assert_true(y[i] == a[i] + b[i]);
    be_swiglu(be, y, a, b, n);
    for (int i = 0; i < n; i++) assert_true(fabsf(y[i] - a[i] / (1 + expf(-a[i])) * b[i]) < 1e-5f);
    memcpy(y, a, sizeof(float) * n);
    be_mul_silu(be, y, b, n);
    for (int i = 0; i < n; i++) assert_true(fabsf(y[i] - a[i] * (b[i] / (1 + expf(-b[i])))) < 1e-5f);
    memcpy(y, a, sizeof(float) * n);
    be_mul_sigmoid(be, y, 10, b, 20, 100, 10);
    for (int r = 0; r < 100; r++)
        for (int i = 0; i < 10; i++)
            assert_true(fabsf(y[r * 10 + i] - a[r * 10 + i] / (1 + expf(-b[r * 20 + i]))) < 1e-5f);
    memcpy(y, a, sizeof(float) * n);
    be_add_scaled_sigmoid(be, y, b, a, 100, 10);
    for (int r = 0; r < 100; r++)
        for (int i = 0; i < 10; i++)
            assert_true(fabsf(y[r * 10 + i] - (a[r * 10 + i] + b[r * 10 + i] / (1 + expf(-a[r])))) < 1e-5f);
    free(a);
    free(b);
    free(y);
    be_free(be);
}

/* ---- attention ------------------------------------------------------------------------ */

/* Naive causal softmax attention in double over the F16 cache. */
static void naive_attention(const be_attn_args *a, float *out)
{
    int ratio = a->n_head / a->n_head_kv;
    double *s = malloc(sizeof(double) * (size_t)a->n_kv);
    for (int i = 0; i < a->n_q; i++)
        for (int h = 0; h < a->n_head; h++) {
            int g = h / ratio, nk = a->q_pos0 + i + 1;
            const float *q = a->q + (size_t)i * a->q_stride + (size_t)h * a->q_head_stride;
            double mx = -INFINITY, sum = 0;
            for (int t = 0; t < nk; t++) {
                double d = 0;
                for (int c = 0; c < a->d_k; c++)
                    d += q[c] * wk_f16_to_f32(a->k[g * a->kv_head_stride + (size_t)t * a->d_k + c]);
                s[t] = d * a->scale;
                if (s[t] > mx) mx = s[t];
            }
            for (int t = 0; t < nk; t++) sum += (s[t] = exp(s[t] - mx));
            for (int c = 0; c < a->d_v; c++) {
                double o = 0;
                for (int t = 0; t < nk; t++) o += s[t] * wk_f16_to_f32(a->v[g * a->kv_head_stride + (size_t)t * a->d_v + c]);
                out[(size_t)i * a->out_stride + (size_t)h * a->d_v + c] = (float)(o / sum);
            }
        }
    free(s);
}

static void check_attention(int threads, int n_q, int q_pos0, int n_head, int n_head_kv, int d, double tol)
{
    be_backend *be = new_backend(threads);
    const int n_kv = q_pos0 + n_q, cap = n_kv + 5;
    const size_t head_stride = (size_t)cap * d;
    uint16_t *k = calloc(head_stride * n_head_kv, 2), *v = calloc(head_stride * n_head_kv, 2);
    float *kv_src = randv((size_t)n_kv * n_head_kv * d, 1);
    be_kv_store(be, k, head_stride, 0, kv_src, (size_t)n_head_kv * d, n_kv, n_head_kv, d);
    float *vv = randv((size_t)n_kv * n_head_kv * d, 1);
    be_kv_store(be, v, head_stride, 0, vv, (size_t)n_head_kv * d, n_kv, n_head_kv, d);
    /* the store converts exactly */
    assert_int_equal(k[3], wk_f32_to_f16(kv_src[3]));
    size_t q_stride = (size_t)n_head * d * 2; /* interleaved with junk, like qwen35's query|gate */
    float *q = randv((size_t)n_q * q_stride, 1.5f);
    float *out = calloc((size_t)n_q * n_head * d, 4), *ref = calloc((size_t)n_q * n_head * d, 4);
    be_attn_args a = {.q = q, .q_stride = q_stride, .q_head_stride = (size_t)2 * d, .n_q = n_q, .q_pos0 = q_pos0,
                      .k = k, .v = v, .kv_head_stride = head_stride, .n_kv = n_kv, .n_head = n_head,
                      .n_head_kv = n_head_kv, .d_k = d, .d_v = d, .scale = 1.0f / sqrtf((float)d),
                      .out = out, .out_stride = (size_t)n_head * d};
    wk_error err = {0};
    assert_int_equal(be_attention(be, &a, &err), 0);
    naive_attention(&a, ref);
    double md = max_diff(out, ref, (size_t)n_q * n_head * d);
    if (md > tol) printf("attention n_q %d pos0 %d threads %d: max diff %g > %g\n", n_q, q_pos0, threads, md, tol);
    assert_true(md <= tol);
    free(k);
    free(v);
    free(kv_src);
    free(vv);
    free(q);
    free(out);
    free(ref);
    be_free(be);
}

static void test_attention_matches_naive(void **state)
{
    (void)state;
    /* batches of >= 64 queries accumulate in F32 */
    check_attention(2, 100, 0, 4, 1, 64, 1e-5);
    check_attention(2, 70, 45, 8, 2, 128, 1e-5);
    check_attention(1, 64, 130, 2, 2, 32, 1e-5);
    /* small batches and decode accumulate in F16 like llama.cpp: ~1e-3 */
    check_attention(2, 5, 20, 4, 2, 64, 5e-3);
    check_attention(2, 1, 0, 4, 2, 64, 5e-3);
    check_attention(1, 1, 300, 8, 1, 128, 5e-3);
    /* decode over >= 512 keys splits the keys across threads */
    check_attention(2, 1, 700, 4, 2, 64, 5e-3);
    check_attention(3, 1, 1500, 2, 1, 128, 5e-3);
}

static void test_attention_rejects_queries_beyond_the_cache(void **state)
{
    (void)state;
    be_backend *be = new_backend(1);
    uint16_t k[64] = {0};
    float q[16] = {0}, out[16];
    be_attn_args a = {.q = q, .q_stride = 16, .n_q = 1, .q_pos0 = 4, .k = k, .v = k, .kv_head_stride = 16,
                      .n_kv = 4, .n_head = 1, .n_head_kv = 1, .d_k = 16, .d_v = 16, .scale = 0.25f,
                      .out = out, .out_stride = 16};
    wk_error err = {0};
    assert_int_equal(be_attention(be, &a, &err), WK_EINVAL);
    be_free(be);
}

/* ---- Gated DeltaNet ----------------------------------------------------------------------- */

static void naive_conv(float *y, const float *x, int T, int C, const float *w, int K, float *state)
{
    float *win = malloc(sizeof(float) * (size_t)(T + K - 1) * C);
    memcpy(win, state, sizeof(float) * (size_t)(K - 1) * C);
    memcpy(win + (size_t)(K - 1) * C, x, sizeof(float) * (size_t)T * C);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            double acc = 0;
            for (int k = 0; k < K; k++) acc += w[c * K + k] * win[(size_t)(t + k) * C + c];
            y[(size_t)t * C + c] = (float)(acc / (1 + exp(-acc)));
        }
    memcpy(state, win + (size_t)T * C, sizeof(float) * (size_t)(K - 1) * C);
    free(win);
}

static void test_ssm_conv_matches_naive_across_calls(void **state)
{
    (void)state;
    be_backend *be = new_backend(2);
    const int C = 300, K = 4, T1 = 7, T2 = 2;
    float *w = randv((size_t)C * K, 0.5f), *x = randv((size_t)(T1 + T2) * C, 1);
    float *st = calloc((size_t)(K - 1) * C, 4), *st_ref = calloc((size_t)(K - 1) * C, 4);
    float *y = calloc((size_t)(T1 + T2) * C, 4), *ref = calloc((size_t)(T1 + T2) * C, 4);
    be_ssm_conv(be, y, C, x, C, T1, C, w, K, st);
    be_ssm_conv(be, y + (size_t)T1 * C, C, x + (size_t)T1 * C, C, T2, C, w, K, st); /* T2 < K-1 */
    naive_conv(ref, x, T1 + T2, C, w, K, st_ref);
    assert_true(max_diff(y, ref, (size_t)(T1 + T2) * C) < 1e-5);
    assert_true(max_diff(st, st_ref, (size_t)(K - 1) * C) == 0);
    free(w);
    free(x);
    free(st);
    free(st_ref);
    free(y);
    free(ref);
    be_free(be);
}

/* Spec 8.5 in double: normalize, gates, delta rule with value head j → key head j mod H_k. */
static void naive_gdn(const be_gdn_args *a, double *S, float *out)
{
    int dk = a->d_k, dv = a->d_v;
    double *q = malloc(sizeof(double) * dk), *k = malloc(sizeof(double) * dk), *kS = malloc(sizeof(double) * dv);
    for (int t = 0; t < a->n_t; t++)
        for (int j = 0; j < a->n_hv; j++) {
            int i = j % a->n_hk;
            const float *qs = a->q + (size_t)t * a->qk_stride + (size_t)i * dk;
            const float *ks = a->k + (size_t)t * a->qk_stride + (size_t)i * dk;
            const float *v = a->v + (size_t)t * a->v_stride + (size_t)j * dv;
            double nq = 0, nk = 0;
            for (int c = 0; c < dk; c++) {
                nq += (double)qs[c] * qs[c];
                nk += (double)ks[c] * ks[c];
            }
            nq = fmax(sqrt(nq), a->eps);
            nk = fmax(sqrt(nk), a->eps);
            for (int c = 0; c < dk; c++) {
                q[c] = qs[c] / nq / sqrt((double)dk);
                k[c] = ks[c] / nk;
            }
            double beta = 1 / (1 + exp(-a->beta[t * a->n_hv + j]));
            double x = a->alpha[t * a->n_hv + j] + a->dt_bias[j];
            double g = a->ssm_a[j] * (x > 20 ? x : log1p(exp(x)));
            double *Sj = S + (size_t)j * dk * dv;
            for (int r = 0; r < dk * dv; r++) Sj[r] *= exp(g);
            for (int c = 0; c < dv; c++) {
                kS[c] = 0;
                for (int r = 0; r < dk; r++) kS[c] += Sj[r * dv + c] * k[r];
            }
            for (int r = 0; r < dk; r++)
                for (int c = 0; c < dv; c++) Sj[r * dv + c] += k[r] * beta * (v[c] - kS[c]);
            for (int c = 0; c < dv; c++) {
                double o = 0;
                for (int r = 0; r < dk; r++) o += Sj[r * dv + c] * q[r];
                out[(size_t)t * a->out_stride + (size_t)j * dv + c] = (float)o;
            }
        }
    free(q);
    free(k);
    free(kS);
}

static void test_gdn_sequential_and_chunked_match_naive(void **state)
{
    (void)state;
    be_backend *be = new_backend(2);
    const int T = 150, Hk = 2, Hv = 4, dk = 32, dv = 64; /* 150: two full chunks of 64 and a partial one */
    const size_t qk_stride = (size_t)2 * Hk * dk + (size_t)Hv * dv;
    float *conv = randv((size_t)T * qk_stride, 1);
    float *alpha = randv((size_t)T * Hv, 1), *beta = randv((size_t)T * Hv, 1);
    float ssm_a[4] = {-0.05f, -0.5f, -1.5f, -0.02f}, dt[4] = {0.3f, -0.7f, 0.1f, 0.9f};
    size_t S_n = (size_t)Hv * dk * dv;
    float *S0 = randv(S_n, 0.1f);
    double *Sref = malloc(sizeof(double) * S_n);
    for (size_t i = 0; i < S_n; i++) Sref[i] = S0[i];
    float *ref = calloc((size_t)T * Hv * dv, 4);
    be_gdn_args a = {conv, conv + Hk * dk, conv + 2 * Hk * dk, qk_stride, qk_stride, alpha, beta, ssm_a, dt,
                     T, Hk, Hv, dk, dv, 1e-6f, NULL, NULL, (size_t)Hv * dv, false};
    naive_gdn(&a, Sref, ref);
    for (int chunked = 0; chunked < 2; chunked++) {
        float *S = malloc(sizeof(float) * S_n), *out = calloc((size_t)T * Hv * dv, 4);
        memcpy(S, S0, sizeof(float) * S_n);
        a.state = S;
        a.out = out;
        a.chunked = chunked;
        wk_error err = {0};
        /* two calls (the state carries over) must equal one pass */
        be_gdn_args first = a;
        first.n_t = 70;
        assert_int_equal(be_gdn(be, &first, &err), 0);
        be_gdn_args second = a;
        second.n_t = T - 70;
        second.q += 70 * qk_stride;
        second.k += 70 * qk_stride;
        second.v += 70 * qk_stride;
        second.alpha += 70 * Hv;
        second.beta += 70 * Hv;
        second.out += 70 * (size_t)Hv * dv;
        assert_int_equal(be_gdn(be, &second, &err), 0);
        double d_out = max_diff(out, ref, (size_t)T * Hv * dv), d_state = 0;
        for (size_t i = 0; i < S_n; i++) { /* a NaN is kept, so it fails below */
            double d = fabs(S[i] - Sref[i]);
            if (isnan(d) || d > d_state) d_state = d;
        }
        printf("  gdn %s: output max diff %.2e, state max diff %.2e\n", chunked ? "chunked" : "sequential", d_out,
               d_state);
        assert_true(d_out < 1e-4);
        assert_true(d_state < 1e-4);
        free(S);
        free(out);
    }
    free(conv);
    free(alpha);
    free(beta);
    free(S0);
    free(Sref);
    free(ref);
    be_free(be);
}

/* ---- MoE and matmul ------------------------------------------------------------------------- */

static void test_moe_route_picks_top_k_and_renormalizes(void **state)
{
    (void)state;
    be_backend *be = new_backend(1);
    float logits[2 * 6] = {0.1f, 2.0f, -1.0f, 2.0f, 0.5f, 1.0f, /* tie between 1 and 3 → 1 first */
                           -3.0f, -3.0f, -3.0f, 5.0f, -3.0f, 4.0f};
    int32_t ids[2 * 3];
    float w[2 * 3];
    be_moe_route(be, logits, 2, 6, 3, ids, w);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 3);
    assert_int_equal(ids[2], 5);
    assert_int_equal(ids[3], 3);
    assert_int_equal(ids[4], 5);
    assert_int_equal(ids[5], 0);
    for (int t = 0; t < 2; t++) {
        double z = 0;
        for (int j = 0; j < 3; j++) z += exp(logits[t * 6 + ids[t * 3 + j]]);
        for (int j = 0; j < 3; j++) assert_true(fabs(w[t * 3 + j] - exp(logits[t * 6 + ids[t * 3 + j]]) / z) < 1e-6);
    }
    be_free(be);
}

static void test_moe_ffn_matches_naive(void **state)
{
    (void)state;
    be_backend *be = new_backend(2);
    const int E = 64, F = 32, X = 6, T = 9, K = 2;
    for (int fused = 0; fused < 2; fused++) {
        float *wg = randv((size_t)X * F * E * (fused ? 2 : 1), 0.1f), *wu = randv((size_t)X * F * E, 0.1f);
        float *wd = randv((size_t)X * E * F, 0.1f), *u = randv((size_t)T * E, 1);
        be_weight g = f32_weight(wg, E, fused ? 2 * F : F, X), up = f32_weight(wu, E, F, X), d = f32_weight(wd, F, E, X);
        if (fused) up.data = NULL;
        int32_t ids[T * K];
        float w[T * K];
        for (int i = 0; i < T * K; i++) {
            ids[i] = (i * 7 + i / K) % X;
            w[i] = 0.25f + 0.1f * (i % 3);
        }
        for (int t = 0; t < T; t++)
            if (ids[t * K] == ids[t * K + 1]) ids[t * K + 1] = (ids[t * K] + 1) % X;
        float *out = calloc((size_t)T * E, 4), *ref = calloc((size_t)T * E, 4);
        be_moe_args a = {&g, &up, &d, u, T, K, ids, w, out, NULL};
        wk_error err = {0};
        assert_int_equal(be_moe_ffn(be, &a, &err), 0);
        for (int t = 0; t < T; t++)
            for (int j = 0; j < K; j++) {
                int e = ids[t * K + j];
                const float *G = wg + (size_t)e * (fused ? 2 * F : F) * E;
                const float *U = fused ? G + (size_t)F * E : wu + (size_t)e * F * E;
                double h[32];
                for (int f = 0; f < F; f++) {
                    double gs = 0, us = 0;
                    for (int i = 0; i < E; i++) {
                        gs += (double)G[f * E + i] * u[t * E + i];
                        us += (double)U[f * E + i] * u[t * E + i];
                    }
                    h[f] = gs / (1 + exp(-gs)) * us;
                }
                for (int o = 0; o < E; o++) {
                    double s = 0;
                    for (int f = 0; f < F; f++) s += wd[((size_t)e * E + o) * F + f] * h[f];
                    ref[t * E + o] += (float)(w[t * K + j] * s);
                }
            }
        assert_true(max_diff(out, ref, (size_t)T * E) < 1e-5);
        free(wg);
        free(wu);
        free(wd);
        free(u);
        free(out);
        free(ref);
    }
    be_free(be);
}

static void test_matmul_and_bias_match_naive(void **state)
{
    (void)state;
    be_backend *be = new_backend(2);
    const int K = 96, M = 70, N = 9;
    float *w = randv((size_t)K * M, 0.2f), *x = randv((size_t)N * K, 1), *b = randv(M, 1);
    float *y = calloc((size_t)N * M, 4);
    be_weight wt = f32_weight(w, K, M, 1);
    wk_error err = {0};
    assert_int_equal(be_prepare_weight(be, &wt, &err), 0);
    assert_int_equal(be_matmul(be, &wt, x, N, y, &err), 0);
    be_add_bias(be, y, b, N, M);
    for (int i = 0; i < N; i++)
        for (int o = 0; o < M; o++) {
            double s = b[o];
            for (int k = 0; k < K; k++) s += (double)w[o * K + k] * x[i * K + k];
            assert_true(fabs(y[i * M + o] - s) < 1e-4);
        }
    be_release_weight(be, &wt);
    assert_null(wt.prep);
    free(w);
    free(x);
    free(b);
    free(y);
    be_free(be);
}

static void test_get_rows_dequantizes_embedding_rows(void **state)
{
    (void)state;
    be_backend *be = new_backend(1);
    uint16_t emb[3 * 4];
    for (int i = 0; i < 12; i++) emb[i] = wk_f32_to_f16((float)i * 0.5f);
    be_weight w;
    memset(&w, 0, sizeof w);
    w.type = QT_F16;
    w.ne[0] = 4;
    w.ne[1] = 3;
    w.ne[2] = w.ne[3] = 1;
    w.nb1 = 8;
    w.data = emb;
    w.name = "emb";
    int32_t ids[2] = {2, 0};
    float y[8];
    wk_error err = {0};
    assert_int_equal(be_get_rows(be, &w, ids, 2, y, &err), 0);
    assert_true(y[0] == 4.0f && y[3] == 5.5f && y[4] == 0.0f && y[7] == 1.5f);
    ids[0] = 3;
    assert_int_equal(be_get_rows(be, &w, ids, 1, y, &err), WK_EINVAL);
    be_free(be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vector_kernels_match_scalar),
        cmocka_unit_test(test_attention_tile_kernels_match_scalar),
        cmocka_unit_test(test_gdn_step_kernel_matches_scalar),
        cmocka_unit_test(test_attention_row_kernel_matches_scalar),
        cmocka_unit_test(test_rms_norm_matches_naive),
        cmocka_unit_test(test_rope_variants_match_naive),
        cmocka_unit_test(test_imrope_with_huge_sections_does_not_overflow),
        cmocka_unit_test(test_elementwise_ops_match_naive),
        cmocka_unit_test(test_attention_matches_naive),
        cmocka_unit_test(test_attention_rejects_queries_beyond_the_cache),
        cmocka_unit_test(test_ssm_conv_matches_naive_across_calls),
        cmocka_unit_test(test_gdn_sequential_and_chunked_match_naive),
        cmocka_unit_test(test_moe_route_picks_top_k_and_renormalizes),
        cmocka_unit_test(test_moe_ffn_matches_naive),
        cmocka_unit_test(test_matmul_and_bias_match_naive),
        cmocka_unit_test(test_get_rows_dequantizes_embedding_rows),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
