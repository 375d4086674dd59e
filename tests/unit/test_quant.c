#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "testutil.h"
#include "util/err.h"

#define GROWS 8
#define GCOLS 1024

static const struct {
    const char *file; /* golden name */
    enum qt_type type;
} k_golden[] = {
    {"f16", QT_F16},   {"bf16", QT_BF16}, {"q8_0", QT_Q8_0}, {"q4_0", QT_Q4_0}, {"q4_1", QT_Q4_1},
    {"q5_0", QT_Q5_0}, {"q5_1", QT_Q5_1}, {"q2_K", QT_Q2_K}, {"q3_K", QT_Q3_K}, {"q4_K", QT_Q4_K},
    {"q5_K", QT_Q5_K}, {"q6_K", QT_Q6_K}, {"iq4_nl", QT_IQ4_NL},
};

static const enum qt_type k_weight_types[] = {QT_F32,  QT_F16,  QT_BF16, QT_Q4_0, QT_Q4_1,  QT_Q5_0,
                                              QT_Q5_1, QT_Q8_0, QT_Q2_K, QT_Q3_K, QT_Q4_K,  QT_Q5_K,
                                              QT_Q6_K, QT_IQ4_NL, QT_IQ4_XS};
#define N_WEIGHT_TYPES (sizeof k_weight_types / sizeof k_weight_types[0])

static void *load_golden(const char *dir, const char *name, size_t expect)
{
    char rel[128];
    snprintf(rel, sizeof rel, "quants/%s", name);
    size_t size = 0;
    void *p = read_whole_file(path_join(dir, rel), &size);
    if (!p) fail_msg("cannot read golden %s", rel);
    if (expect && size != expect) fail_msg("golden %s: %zu bytes, expected %zu", rel, size, expect);
    return p;
}

static float *golden_input(const char *dir)
{
    return load_golden(dir, "input.f32.bin", GROWS * GCOLS * sizeof(float));
}

static void test_dequantize_matches_golden_bit_for_bit(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    float *out = malloc(GCOLS * sizeof(float));
    for (size_t t = 0; t < sizeof k_golden / sizeof k_golden[0]; t++) {
        const qt_traits *tr = qt_traits_of(k_golden[t].type);
        size_t row = qt_row_bytes(tr, GCOLS);
        char name[64];
        snprintf(name, sizeof name, "%s.raw.bin", k_golden[t].file);
        uint8_t *raw = load_golden(dir, name, row * GROWS);
        snprintf(name, sizeof name, "%s.dequant.f32.bin", k_golden[t].file);
        float *ref = load_golden(dir, name, GROWS * GCOLS * sizeof(float));
        for (int r = 0; r < GROWS; r++) {
            assert_int_equal(qt_dequantize_row(k_golden[t].type, raw + r * row, out, GCOLS), 0);
            if (memcmp(out, ref + r * GCOLS, GCOLS * sizeof(float)) != 0) {
                for (int j = 0; j < GCOLS; j++)
                    if (memcmp(&out[j], &ref[r * GCOLS + j], 4) != 0)
                        fail_msg("%s row %d col %d: got %.9g want %.9g", tr->name, r, j, out[j], ref[r * GCOLS + j]);
            }
        }
        free(raw);
        free(ref);
    }
    free(out);
}

static void check_act_golden(const char *dir, const char *file, enum qt_type act, enum qt_type wtype)
{
    const qt_traits *tr = qt_traits_of(act);
    size_t row = qt_row_bytes(tr, GCOLS);
    float *in = golden_input(dir);
    uint8_t *ref = load_golden(dir, file, row * GROWS);
    uint8_t *out = malloc(row);
    for (int r = 0; r < GROWS; r++) {
        /* the plain scalar quantizer and the fast activation path */
        for (int path = 0; path < 2; path++) {
            memset(out, 0xAB, row);
            int rc = path == 0 ? qt_quantize_row(act, in + r * GCOLS, out, GCOLS)
                               : qt_quantize_act(wtype, in + r * GCOLS, out, GCOLS);
            assert_int_equal(rc, 0);
            for (size_t b = 0; b < row; b++)
                if (out[b] != ref[r * row + b])
                    fail_msg("%s path %d row %d byte %zu (block %zu): got %u want %u", tr->name, path, r, b,
                             b / tr->block_bytes, out[b], ref[r * row + b]);
        }
    }
    free(in);
    free(ref);
    free(out);
}

static void test_activation_quantizers_match_golden_bytes(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    check_act_golden(dir, "act_q8_0.raw.bin", QT_Q8_0, QT_Q4_0);
    check_act_golden(dir, "act_q8_1.raw.bin", QT_Q8_1, QT_Q4_1);
    check_act_golden(dir, "act_q8_K.raw.bin", QT_Q8_K, QT_Q4_K);
}

static double rms_err(enum qt_type type, const float *x, int64_t n)
{
    const qt_traits *tr = qt_traits_of(type);
    void *q = malloc(qt_row_bytes(tr, n));
    float *back = malloc((size_t)n * sizeof(float));
    assert_int_equal(qt_quantize_row(type, x, q, n), 0);
    assert_int_equal(qt_dequantize_row(type, q, back, n), 0);
    double e = 0;
    for (int64_t i = 0; i < n; i++) {
        assert_true(isfinite(back[i]));
        e += ((double)back[i] - x[i]) * ((double)back[i] - x[i]);
    }
    free(q);
    free(back);
    return sqrt(e / (double)n);
}

/* Our weight quantizers need not produce llama.cpp's bytes, but their error
 * on the golden input must be close to (or below) llama.cpp's. */
static void test_quantizers_error_is_close_to_llama_cpp_on_golden_input(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    float *in = golden_input(dir);
    float *ref = malloc(GCOLS * sizeof(float));
    for (size_t t = 0; t < sizeof k_golden / sizeof k_golden[0]; t++) {
        enum qt_type type = k_golden[t].type;
        char name[64];
        snprintf(name, sizeof name, "%s.dequant.f32.bin", k_golden[t].file);
        float *gd = load_golden(dir, name, GROWS * GCOLS * sizeof(float));
        double ours = 0, theirs = 0;
        for (int r = 0; r < GROWS; r++) {
            double e = rms_err(type, in + r * GCOLS, GCOLS);
            ours += e * e;
            for (int j = 0; j < GCOLS; j++) {
                double d = (double)gd[r * GCOLS + j] - in[r * GCOLS + j];
                theirs += d * d / GCOLS;
            }
        }
        ours = sqrt(ours / GROWS);
        theirs = sqrt(theirs / GROWS);
        if (ours > theirs * 1.10 + 1e-9)
            fail_msg("%s: rms error %.5g vs llama.cpp %.5g", qt_traits_of(type)->name, ours, theirs);
        free(gd);
    }
    free(in);
    free(ref);
}

static void test_quantize_round_trip_error_is_bounded_for_every_weight_type(void **state)
{
    (void)state;
    /* relative rms error bounds on N(0,1) data, about 1.5x what the formats
     * achieve (bits per weight decide the order) */
    static const struct {
        enum qt_type type;
        double bound;
    } k_bounds[] = {
        {QT_F32, 0.0},    {QT_F16, 4e-4},    {QT_BF16, 3e-3},    {QT_Q8_0, 0.012}, {QT_Q6_K, 0.03},
        {QT_Q5_1, 0.06},  {QT_Q5_0, 0.07},   {QT_Q5_K, 0.05},    {QT_Q4_1, 0.12},  {QT_Q4_0, 0.14},
        {QT_Q4_K, 0.10},  {QT_IQ4_NL, 0.12}, {QT_IQ4_XS, 0.12},  {QT_Q3_K, 0.22},  {QT_Q2_K, 0.40},
        {QT_Q8_1, 0.012}, {QT_Q8_K, 0.012},
    };
    uint64_t seed = 42;
    const int64_t n = 4096;
    float *x = malloc(n * sizeof(float));
    for (size_t t = 0; t < sizeof k_bounds / sizeof k_bounds[0]; t++) {
        for (int rep = 0; rep < 3; rep++) {
            double scale = rep == 0 ? 1.0 : rep == 1 ? 1e-3 : 40.0;
            double ss = 0;
            for (int64_t i = 0; i < n; i++) {
                x[i] = (float)(test_rand_normal(&seed) * scale);
                ss += (double)x[i] * x[i];
            }
            double rel = rms_err(k_bounds[t].type, x, n) / sqrt(ss / n);
            if (rel > k_bounds[t].bound)
                fail_msg("%s scale %g: relative rms error %.4g > %.4g", qt_traits_of(k_bounds[t].type)->name,
                         scale, rel, k_bounds[t].bound);
        }
    }
    /* an all-zero row stays zero */
    memset(x, 0, n * sizeof(float));
    for (size_t t = 0; t < sizeof k_bounds / sizeof k_bounds[0]; t++)
        assert_true(rms_err(k_bounds[t].type, x, n) == 0.0);
    free(x);
}

static void test_fast_activation_quantizer_equals_scalar_on_random_rows(void **state)
{
    (void)state;
    uint64_t seed = 7;
    const int64_t n = 2048;
    float *x = malloc(n * sizeof(float));
    uint8_t *a = malloc(n * 2), *b = malloc(n * 2);
    static const enum qt_type wt[] = {QT_Q4_0, QT_Q4_1, QT_Q4_K, QT_F16, QT_BF16};
    for (int rep = 0; rep < 40; rep++) {
        for (int64_t i = 0; i < n; i++) x[i] = test_rand_normal(&seed) * (rep % 5 == 0 ? 1e-4f : 3.0f);
        if (rep % 7 == 3) /* ties in magnitude, exact halves and zeros */
            for (int64_t i = 0; i < n; i++) x[i] = (float)((int)(test_rand_u32(&seed) % 9) - 4) * 0.5f;
        for (size_t t = 0; t < sizeof wt / sizeof wt[0]; t++) {
            enum qt_type at = qt_traits_of(wt[t])->vec_dot;
            size_t bytes = qt_act_row_bytes(wt[t], n);
            assert_int_equal(qt_quantize_act(wt[t], x, a, n), 0);
            assert_int_equal(qt_quantize_row(at, x, b, n), 0);
            assert_memory_equal(a, b, bytes);
        }
    }
    free(x);
    free(a);
    free(b);
}

/* Random weight row of `type` (quantized from N(0, s) with varying s). */
static void *random_row(enum qt_type type, int64_t n, uint64_t *seed, float *tmp)
{
    float s = 0.01f + (float)(test_rand_u32(seed) % 1000) / 100.0f;
    for (int64_t i = 0; i < n; i++) tmp[i] = test_rand_normal(seed) * s;
    void *w = malloc(qt_row_bytes(qt_traits_of(type), n));
    assert_int_equal(qt_quantize_row(type, tmp, w, n), 0);
    return w;
}

/* Σ w_i·a_i in double over the dequantized rows, and Σ |w_i·a_i|. */
static double exact_dot(enum qt_type wt, const void *w, const void *a, int64_t n, double *mag)
{
    enum qt_type at = qt_traits_of(wt)->vec_dot;
    float *dw = malloc(n * sizeof(float)), *da = malloc(n * sizeof(float));
    assert_int_equal(qt_dequantize_row(wt, w, dw, n), 0);
    assert_int_equal(qt_dequantize_row(at, a, da, n), 0);
    double s = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        s += (double)dw[i] * da[i];
        m += fabs((double)dw[i] * da[i]);
    }
    free(dw);
    free(da);
    *mag = m;
    return s;
}

/* The scalar kernels compute Σ dequant(w)·dequant(a) (with Q8_1's stored sum
 * for the Q4_1/Q5_1 min term); every fast kernel equals them up to F32
 * summation order: |fast − scalar| ≤ 2e-6·Σ|w·a| (a few ulps of the terms). */
static void test_dot_kernels_match_dequantized_reference_and_each_other(void **state)
{
    (void)state;
    uint64_t seed = 1234;
    static const int64_t lens[] = {256, 512, 1024, 1280, 2816, 4096, 32 * 3, 32 * 37};
    float *tmp = malloc(8192 * sizeof(float));
    int checked_fast = 0;
    for (size_t t = 0; t < N_WEIGHT_TYPES; t++) {
        enum qt_type wt = k_weight_types[t];
        const qt_traits *tr = qt_traits_of(wt);
        qt_vec_dot_fn scalar = qt_vec_dot_isa(wt, QT_ISA_SCALAR);
        assert_non_null(scalar);
        for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
            int64_t n = lens[l];
            if (n % tr->block_elems) continue;
            for (int rep = 0; rep < 6; rep++) {
                void *w = random_row(wt, n, &seed, tmp);
                for (int64_t i = 0; i < n; i++) tmp[i] = test_rand_normal(&seed) * (rep == 3 ? 1e-3f : 1.5f);
                void *a = malloc(qt_act_row_bytes(wt, n));
                assert_int_equal(qt_quantize_act(wt, tmp, a, n), 0);
                double mag, ref = exact_dot(wt, w, a, n, &mag);
                float s_scalar = NAN;
                scalar(n, &s_scalar, w, a);
                double tol_ref = (wt == QT_Q4_1 || wt == QT_Q5_1) ? 2e-3 * mag : 1e-5 * mag + 1e-30;
                if (fabs(s_scalar - ref) > tol_ref)
                    fail_msg("%s n=%lld scalar %.9g vs reference %.9g (mag %.3g)", tr->name, (long long)n,
                             s_scalar, ref, mag);
                for (int isa = QT_ISA_SCALAR + 1; isa < QT_ISA_COUNT; isa++) {
                    qt_vec_dot_fn fast = qt_vec_dot_isa(wt, (enum qt_isa)isa);
                    if (!fast) continue;
                    float s_fast = NAN;
                    fast(n, &s_fast, w, a);
                    checked_fast++;
                    if (fabs((double)s_fast - s_scalar) > 2e-6 * mag + 1e-30)
                        fail_msg("%s n=%lld isa %d: fast %.9g vs scalar %.9g (mag %.3g)", tr->name, (long long)n,
                                 isa, s_fast, s_scalar, mag);
                }
                free(w);
                free(a);
            }
        }
    }
    if (getenv("WICK_ISA") == NULL) assert_true(checked_fast > 0);
    free(tmp);
}

static void test_rows_of_wrong_length_or_type_are_rejected(void **state)
{
    (void)state;
    float x[64] = {0}, y[64];
    uint8_t buf[512];
    assert_int_equal(qt_quantize_row(QT_Q4_0, x, buf, 48), WK_EINVAL);
    assert_int_equal(qt_dequantize_row(QT_Q4_K, buf, y, 64), WK_EINVAL);
    assert_int_equal(qt_dequantize_row((enum qt_type)16 /* IQ2_XXS */, buf, y, 256), WK_EINVAL);
    assert_int_equal(qt_quantize_act(QT_Q8_K, x, buf, 256), WK_EINVAL); /* activation-only type */
    assert_null(qt_vec_dot(QT_Q8_1));
    assert_non_null(qt_vec_dot(QT_Q6_K));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dequantize_matches_golden_bit_for_bit),
        cmocka_unit_test(test_activation_quantizers_match_golden_bytes),
        cmocka_unit_test(test_quantizers_error_is_close_to_llama_cpp_on_golden_input),
        cmocka_unit_test(test_quantize_round_trip_error_is_bounded_for_every_weight_type),
        cmocka_unit_test(test_fast_activation_quantizer_equals_scalar_on_random_rows),
        cmocka_unit_test(test_dot_kernels_match_dequantized_reference_and_each_other),
        cmocka_unit_test(test_rows_of_wrong_length_or_type_are_rejected),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
