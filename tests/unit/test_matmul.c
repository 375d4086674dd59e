#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/matmul.h"
#include "backend/cpu/matmul_packed.h"
#include "quant/quant.h"
#include "testutil.h"
#include "util/err.h"
#include "util/threadpool.h"

static const enum qt_type k_types[] = {QT_F32,  QT_F16,  QT_BF16, QT_Q4_0, QT_Q4_1, QT_Q5_0,   QT_Q5_1, QT_Q8_0,
                                       QT_Q2_K, QT_Q3_K, QT_Q4_K, QT_Q5_K, QT_Q6_K, QT_IQ4_NL, QT_IQ4_XS};
#define N_TYPES (sizeof k_types / sizeof k_types[0])

typedef struct {
    enum qt_type type;
    int64_t m, k;
    size_t row_bytes;
    uint8_t *w;   /* m rows, row_bytes apart */
    double *wd;   /* dequantized weights [m][k] */
} test_weight;

static test_weight make_weight(enum qt_type type, int64_t m, int64_t k, size_t pad, uint64_t *seed)
{
    test_weight t = {type, m, k, 0, NULL, NULL};
    t.row_bytes = qt_row_bytes(qt_traits_of(type), k) + pad;
    t.w = calloc((size_t)m, t.row_bytes);
    t.wd = malloc((size_t)(m * k) * sizeof(double));
    float *row = malloc((size_t)k * sizeof(float));
    for (int64_t r = 0; r < m; r++) {
        float s = 0.02f + (float)(r % 7) * 0.3f;
        for (int64_t j = 0; j < k; j++) row[j] = test_rand_normal(seed) * s;
        assert_int_equal(qt_quantize_row(type, row, t.w + r * t.row_bytes, k), 0);
        assert_int_equal(qt_dequantize_row(type, t.w + r * t.row_bytes, row, k), 0);
        for (int64_t j = 0; j < k; j++) t.wd[r * k + j] = row[j];
    }
    free(row);
    return t;
}

static void free_weight(test_weight *t)
{
    free(t->w);
    free(t->wd);
}

/* Reference: activation rounded to the partner format, then a double dot
 * product with the dequantized weights; mag = Σ|terms| for the tolerance. */
static void reference_row(const test_weight *t, const float *x, double *y, double *mag)
{
    size_t ab = qt_act_row_bytes(t->type, t->k);
    void *a = malloc(ab);
    float *xa = malloc((size_t)t->k * sizeof(float));
    assert_int_equal(qt_quantize_act(t->type, x, a, t->k), 0);
    assert_int_equal(qt_dequantize_row(qt_traits_of(t->type)->vec_dot, a, xa, t->k), 0);
    for (int64_t r = 0; r < t->m; r++) {
        double s = 0, m = 0;
        for (int64_t j = 0; j < t->k; j++) {
            s += t->wd[r * t->k + j] * xa[j];
            m += fabs(t->wd[r * t->k + j] * xa[j]);
        }
        y[r] = s;
        mag[r] = m;
    }
    free(a);
    free(xa);
}

/* Q4_1/Q5_1 take their min term from Q8_1's F16 sum (as llama.cpp), which is
 * not the exact Σ of the rounded activations: a looser bound for them. */
static double tolerance(enum qt_type type, double mag)
{
    return (type == QT_Q4_1 || type == QT_Q5_1 ? 2e-3 : 1e-5) * mag + 1e-30;
}

static void check_against_reference(const test_weight *t, const float *x, int64_t x_stride, int64_t n,
                                    const float *y, int64_t y_stride, const char *what)
{
    double *ref = malloc((size_t)t->m * sizeof(double)), *mag = malloc((size_t)t->m * sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        reference_row(t, x + i * x_stride, ref, mag);
        for (int64_t r = 0; r < t->m; r++) {
            double got = y[i * y_stride + r];
            if (!(fabs(got - ref[r]) <= tolerance(t->type, mag[r])))
                fail_msg("%s %s m=%lld k=%lld n=%lld: y[%lld][%lld] = %.9g, reference %.9g (mag %.3g)", what,
                         qt_traits_of(t->type)->name, (long long)t->m, (long long)t->k, (long long)n, (long long)i,
                         (long long)r, got, ref[r], mag[r]);
        }
    }
    free(ref);
    free(mag);
}

static float *random_acts(int64_t n, int64_t stride, uint64_t *seed)
{
    float *x = malloc((size_t)(n * stride) * sizeof(float));
    for (int64_t i = 0; i < n * stride; i++) x[i] = test_rand_normal(seed) * 1.3f;
    return x;
}

static void check_all_types_shapes_and_threads(void)
{
    uint64_t seed = 99;
    static const int64_t ns[] = {1, 2, 7, 64};
    wk_pool *pools[3] = {wk_pool_new(1), wk_pool_new(2), wk_pool_new(3)};
    cpu_scratch scratch = {0};
    for (size_t t = 0; t < N_TYPES; t++) {
        /* float types take any K: an odd one exercises the masked tails */
        uint32_t be = qt_traits_of(k_types[t])->block_elems;
        int64_t k = be == 256 ? 512 : be == 32 ? 96 : 85;
        int64_t m = 67; /* odd: exercises the edges of every register block */
        test_weight w = make_weight(k_types[t], m, k, t % 2 ? 0 : 32, &seed);
        cpu_weight cw = cpu_weight_view(w.type, w.w, m, k, w.row_bytes);
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            int64_t n = ns[ni], xs = k + 5, ys = m + 3;
            float *x = random_acts(n, xs, &seed);
            float *y1 = NULL;
            for (int th = 0; th < 3; th++) {
                float *y = malloc((size_t)(n * ys) * sizeof(float));
                for (int64_t i = 0; i < n * ys; i++) y[i] = -12345.0f;
                wk_error err = {0};
                int rc = cpu_matmul(pools[th], &cw, x, xs, n, y, ys, th == 1 ? NULL : &scratch, &err);
                if (rc) fail_msg("cpu_matmul: %s", err.msg);
                check_against_reference(&w, x, xs, n, y, ys, "matmul");
                for (int64_t i = 0; i < n; i++) /* padding columns untouched */
                    for (int64_t r = m; r < ys; r++) assert_true(y[i * ys + r] == -12345.0f);
                if (!y1) y1 = y;
                else {
                    /* the thread count does not change any result bit */
                    assert_memory_equal(y1, y, (size_t)(n * ys) * sizeof(float));
                    free(y);
                }
            }
            free(y1);
            free(x);
        }
        free_weight(&w);
    }
    cpu_scratch_free(&scratch);
    for (int i = 0; i < 3; i++) wk_pool_free(pools[i]);
}

static void test_matmul_matches_dequantized_reference_for_all_types_shapes_and_threads(void **state)
{
    (void)state;
    check_all_types_shapes_and_threads();
}

/* The same with the AMX path switched off: the AVX-512 / generic tiles. */
static void test_matmul_without_amx_matches_dequantized_reference(void **state)
{
    (void)state;
    setenv("WICK_NO_AMX", "1", 1);
    check_all_types_shapes_and_threads();
    unsetenv("WICK_NO_AMX");
}

static void test_prepared_weight_gives_the_same_results_as_the_plain_view(void **state)
{
    (void)state;
    uint64_t seed = 5;
    wk_pool *pool = wk_pool_new(2);
    for (size_t t = 0; t < N_TYPES; t++) {
        int64_t k = qt_traits_of(k_types[t])->block_elems == 256 ? 768 : 160, m = 45;
        test_weight w = make_weight(k_types[t], m, k, 0, &seed);
        cpu_weight plain = cpu_weight_view(w.type, w.w, m, k, w.row_bytes);
        cpu_weight prep = plain;
        wk_error err = {0};
        assert_int_equal(cpu_weight_prepare(&prep, &err), 0);
        /* a repacked layout where the CPU has one (checked, so a silent
         * fallback to the plain rows would fail here) */
        if (cpu_pack_layout_for(w.type) != CPU_PACK_NONE) assert_non_null(prep.packed);
        static const int64_t ns[] = {1, 3, 4, 5, 7, 8, 33, 100};
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            for (int amx = 0; amx < 2; amx++) {
                int64_t n = ns[ni];
                if (!amx) setenv("WICK_NO_AMX", "1", 1);
                float *x = random_acts(n, k, &seed);
                float *y = malloc((size_t)(n * m) * sizeof(float));
                assert_int_equal(cpu_matmul(pool, &prep, x, k, n, y, m, NULL, &err), 0);
                check_against_reference(&w, x, k, n, y, m, "prepared");
                free(x);
                free(y);
                unsetenv("WICK_NO_AMX");
            }
        }
        cpu_weight_release(&prep);
        assert_null(prep.packed);
        free_weight(&w);
    }
    wk_pool_free(pool);
}

static void test_gather_computes_only_the_listed_rows(void **state)
{
    (void)state;
    uint64_t seed = 17;
    wk_pool *pool = wk_pool_new(3);
    static const enum qt_type types[] = {QT_Q8_0, QT_Q4_K, QT_Q6_K, QT_Q5_0, QT_F32};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        int64_t k = 256, m = 33, n_x = 20;
        test_weight w = make_weight(types[t], m, k, 0, &seed);
        /* an "expert" slice inside a bigger 3-D tensor: pass its base pointer */
        cpu_weight plain = cpu_weight_view(w.type, w.w, m, k, w.row_bytes);
        float *x = random_acts(n_x, k, &seed);
        for (int prepared = 0; prepared < 2; prepared++)
        for (int64_t cnt = 1; cnt <= 12; cnt += 11) {
            cpu_weight cw = plain;
            wk_error perr = {0};
            if (prepared) assert_int_equal(cpu_weight_prepare(&cw, &perr), 0);
            int32_t xr[12], yr[12];
            for (int i = 0; i < cnt; i++) {
                xr[i] = (int32_t)(test_rand_u32(&seed) % n_x); /* repeats allowed */
                yr[i] = (int32_t)(i * 2 + 1);                  /* distinct, sparse */
            }
            int64_t ny = 2 * cnt + 2;
            float *y = malloc((size_t)(ny * m) * sizeof(float));
            for (int64_t i = 0; i < ny * m; i++) y[i] = 7.0f;
            wk_error err = {0};
            assert_int_equal(cpu_matmul_gather(pool, &cw, x, k, xr, y, m, yr, cnt, NULL, &err), 0);
            for (int i = 0; i < cnt; i++) check_against_reference(&w, x + xr[i] * k, k, 1, y + yr[i] * m, m, "gather");
            for (int64_t row = 0; row < ny; row++) {
                int listed = 0;
                for (int i = 0; i < cnt; i++) listed |= yr[i] == row;
                if (!listed)
                    for (int64_t r = 0; r < m; r++) assert_true(y[row * m + r] == 7.0f);
            }
            free(y);
            cpu_weight_release(&cw);
        }
        free(x);
        free_weight(&w);
    }
    wk_pool_free(pool);
}

/* The AMX and AVX-512 VNNI panel kernels form the same exact integer block
 * sums and apply the same F32 operations in the same order: their results
 * must agree bit for bit (on CPUs without AMX both runs take VNNI). */
static void test_amx_and_vnni_panel_kernels_agree_bit_for_bit(void **state)
{
    (void)state;
    uint64_t seed = 31;
    wk_pool *pool = wk_pool_new(2);
    for (size_t t = 0; t < N_TYPES; t++) {
        if (qt_traits_of(k_types[t])->block_elems == 1) continue; /* no panel path */
        int64_t k = 512, m = 50, n = 40;
        test_weight w = make_weight(k_types[t], m, k, 0, &seed);
        cpu_weight cw = cpu_weight_view(w.type, w.w, m, k, w.row_bytes);
        float *x = random_acts(n, k, &seed);
        float *ya = malloc((size_t)(n * m) * sizeof(float)), *yv = malloc((size_t)(n * m) * sizeof(float));
        wk_error err = {0};
        assert_int_equal(cpu_matmul(pool, &cw, x, k, n, ya, m, NULL, &err), 0);
        setenv("WICK_NO_AMX", "1", 1);
        assert_int_equal(cpu_matmul(pool, &cw, x, k, n, yv, m, NULL, &err), 0);
        unsetenv("WICK_NO_AMX");
        if (memcmp(ya, yv, (size_t)(n * m) * sizeof(float)) != 0)
            fail_msg("%s: AMX and VNNI results differ", qt_traits_of(k_types[t])->name);
        free(ya);
        free(yv);
        free(x);
        free_weight(&w);
    }
    wk_pool_free(pool);
}

/* CPU_MM_ROWS_AS_ONE: every row of a call of n rows (past the panel threshold too) is
 * bit for bit the row of a call of one, plain and prepared weights, gathered too; n
 * covers the decode kernels' row counts (2..8: one weight row against all of them) and a tile. */
static void test_rows_as_one_equal_single_rows(void **state)
{
    (void)state;
    uint64_t seed = 77;
    wk_pool *pool = wk_pool_new(2);
    static const int64_t ns[] = {2, 3, 4, 5, 6, 7, 8, 9, 19};
    for (size_t c = 0; c < N_TYPES * (sizeof ns / sizeof ns[0]); c++) {
        const size_t t = c / (sizeof ns / sizeof ns[0]);
        int64_t k = qt_traits_of(k_types[t])->block_elems == 256 ? 512 : 160, m = 40, n = ns[c % (sizeof ns / sizeof ns[0])];
        test_weight w = make_weight(k_types[t], m, k, 0, &seed);
        cpu_weight plain = cpu_weight_view(w.type, w.w, m, k, w.row_bytes), prep = plain;
        wk_error err = {0};
        assert_int_equal(cpu_weight_prepare(&prep, &err), 0);
        float *x = random_acts(n, k, &seed);
        float *y = malloc((size_t)(n * m) * sizeof(float)), *one = malloc((size_t)m * sizeof(float));
        int32_t rows[19];
        for (int i = 0; i < n; i++) rows[i] = (int32_t)(n - 1 - i);
        const cpu_weight *ws[2] = {&plain, &prep};
        for (int v = 0; v < 3; v++) {
            const cpu_weight *cw = ws[v == 1];
            if (v < 2)
                assert_int_equal(cpu_matmul_ex(pool, cw, x, k, n, y, m, NULL, CPU_MM_ROWS_AS_ONE, &err), 0);
            else /* gathered: row i of x into row rows[i] of y */
                assert_int_equal(cpu_matmul_gather_ex(pool, cw, x, k, rows, y, m, rows, n, NULL, CPU_MM_ROWS_AS_ONE,
                                                      &err), 0);
            for (int64_t i = 0; i < n; i++) {
                const int64_t src = v < 2 ? i : rows[i];
                assert_int_equal(cpu_matmul(pool, cw, x + src * k, k, 1, one, m, NULL, &err), 0);
                if (memcmp(one, y + src * m, (size_t)m * sizeof(float)))
                    fail_msg("%s (%s): row %lld of %lld differs from a call of one row", qt_traits_of(k_types[t])->name,
                             v == 0 ? "plain" : v == 1 ? "prepared" : "gathered", (long long)i, (long long)n);
            }
        }
        free(x);
        free(y);
        free(one);
        cpu_weight_release(&prep);
        free_weight(&w);
    }
    wk_pool_free(pool);
}

static void test_matmul_rejects_bad_weights(void **state)
{
    (void)state;
    uint8_t buf[4096] = {0};
    float x[512] = {0}, y[64];
    wk_error err = {0};
    cpu_weight q8k = cpu_weight_view(QT_Q8_K, buf, 2, 256, 292);
    assert_int_equal(cpu_matmul(NULL, &q8k, x, 256, 1, y, 2, NULL, &err), WK_EINVAL);
    assert_non_null(strstr(err.msg, "Q8_K"));
    cpu_weight odd = cpu_weight_view(QT_Q4_K, buf, 2, 300, 200);
    assert_int_equal(cpu_matmul(NULL, &odd, x, 300, 1, y, 2, NULL, &err), WK_EINVAL);
    cpu_weight tight = cpu_weight_view(QT_Q8_0, buf, 2, 64, 60);
    assert_int_equal(cpu_matmul(NULL, &tight, x, 64, 1, y, 2, NULL, &err), WK_EINVAL);
    assert_non_null(strstr(err.msg, "stride"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_matches_dequantized_reference_for_all_types_shapes_and_threads),
        cmocka_unit_test(test_matmul_without_amx_matches_dequantized_reference),
        cmocka_unit_test(test_prepared_weight_gives_the_same_results_as_the_plain_view),
        cmocka_unit_test(test_gather_computes_only_the_listed_rows),
        cmocka_unit_test(test_amx_and_vnni_panel_kernels_agree_bit_for_bit),
        cmocka_unit_test(test_rows_as_one_equal_single_rows),
        cmocka_unit_test(test_matmul_rejects_bad_weights),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
