#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "util/argmax.h"
#include "util/checked.h"
#include "util/cpu.h"
#include "util/err.h"
#include "util/f16.h"
#include "util/sysmem.h"
#include "util/threadpool.h"

typedef struct {
    long n;
    atomic_long sum;
    atomic_int calls;
} sum_job;

static void sum_body(void *ctx, int worker, int n_workers)
{
    sum_job *job = ctx;
    long b, e, s = 0;
    wk_split(job->n, worker, n_workers, &b, &e);
    for (long i = b; i < e; i++) s += i;
    atomic_fetch_add(&job->sum, s);
    atomic_fetch_add(&job->calls, 1);
}

static void test_pool_runs_every_worker_and_covers_the_range(void **state)
{
    (void)state;
    for (int threads = 1; threads <= 4; threads++) {
        wk_pool *pool = wk_pool_new(threads);
        assert_non_null(pool);
        for (int rep = 0; rep < 200; rep++) {
            sum_job job = {.n = 1000 + rep};
            atomic_init(&job.sum, 0);
            atomic_init(&job.calls, 0);
            wk_pool_run(pool, sum_body, &job);
            assert_int_equal(atomic_load(&job.calls), threads);
            assert_int_equal(atomic_load(&job.sum), job.n * (job.n - 1) / 2);
        }
        wk_pool_free(pool);
    }
}

static void test_split_is_contiguous_and_balanced(void **state)
{
    (void)state;
    long prev_end = 0;
    for (int p = 0; p < 7; p++) {
        long b, e;
        wk_split(100, p, 7, &b, &e);
        assert_int_equal(b, prev_end);
        assert_true(e - b == 14 || e - b == 15);
        prev_end = e;
    }
    assert_int_equal(prev_end, 100);
}

static void test_f16_round_trip_matches_ieee(void **state)
{
    (void)state;
    /* every finite half converts to float and back unchanged */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00) continue;
        float f = wk_f16_to_f32((uint16_t)h);
        assert_int_equal(wk_f32_to_f16(f), h);
    }
    assert_int_equal(wk_f32_to_f16(65520.0f), 0x7c00);      /* rounds to inf */
    assert_int_equal(wk_f32_to_f16(1.0f + 1.0f / 4096), 0x3c00); /* tie to even */
    assert_float_equal(wk_f16_to_f32(0x0001), 5.9604644775390625e-8f, 0);
}

static void test_bf16_rounds_to_nearest_even(void **state)
{
    (void)state;
    assert_int_equal(wk_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(wk_f32_to_bf16(wk_f32_from_bits(0x3f808000u)), 0x3f80); /* tie, even */
    assert_int_equal(wk_f32_to_bf16(wk_f32_from_bits(0x3f818000u)), 0x3f82); /* tie, odd up */
    assert_true(isnan(wk_bf16_to_f32(wk_f32_to_bf16(NAN))));
}

static void test_error_prefix_keeps_code_and_message(void **state)
{
    (void)state;
    wk_error err;
    wk_error_clear(&err);
    assert_int_equal(wk_fail(&err, WK_EFORMAT, "bad %s", "thing"), WK_EFORMAT);
    wk_fail_prefix(&err, "loading %s", "x.gguf");
    assert_string_equal(err.msg, "loading x.gguf: bad thing");
    assert_int_equal(err.code, WK_EFORMAT);
}

/* The vector argmax against the reference loop: sizes around the vector widths and a
 * vocabulary's, ties (lowest index wins), NaNs (never win), -inf, ±0, all-NaN rows. */
static void test_argmax_matches_the_reference(void **state)
{
    (void)state;
    const int32_t sizes[] = {0, 1, 7, 8, 15, 16, 17, 31, 33, 100, 1000, 248320};
    const int32_t nmax = 248320;
    float *x = malloc(sizeof(float) * nmax);
    assert_non_null(x);
    uint32_t s = 12345;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const int32_t n = sizes[k];
        for (int pattern = 0; pattern < 6; pattern++) {
            for (int32_t i = 0; i < n; i++) {
                s = s * 1664525u + 1013904223u;
                const float r = (float)(s >> 8) / 16777216.0f;
                switch (pattern) {
                case 0: x[i] = r * 20.0f - 10.0f; break;                       /* random */
                case 1: x[i] = (float)((s >> 8) % 5); break;                   /* many ties */
                case 2: x[i] = (s >> 8) % 3 ? NAN : r; break;                  /* NaNs among values */
                case 3: x[i] = NAN; break;                                     /* all NaN: -1 */
                case 4: x[i] = (s >> 8) % 2 ? -INFINITY : NAN; break;          /* -inf is the max */
                default: x[i] = (s >> 8) % 2 ? 0.0f : -0.0f; break;            /* zeros of both signs */
                }
            }
            if (pattern == 1 && n > 0) x[n - 1] = 4.0f; /* a tie at the very end too */
            const int32_t want = wk_argmax_f32_scalar(x, n);
#if defined(__x86_64__)
            if (wk_cpu()->avx2) assert_int_equal(wk_argmax_f32_avx2(x, n), want);
#elif defined(__aarch64__)
            if (wk_cpu()->neon) assert_int_equal(wk_argmax_f32_neon(x, n), want);
#endif
            assert_int_equal(wk_argmax_f32(x, n), want);
            if (pattern == 3 || n == 0) assert_int_equal(want, -1);
        }
    }
    free(x);
}

static void test_saturating_size_arithmetic_never_wraps(void **state)
{
    (void)state;
    assert_true(wk_sat_add(1, 2) == 3);
    assert_true(wk_sat_add(UINT64_MAX - 2, 1) == UINT64_MAX - 1);
    assert_true(wk_sat_add(UINT64_MAX, 1) == UINT64_MAX);
    assert_true(wk_sat_add(1ull << 63, 1ull << 63) == UINT64_MAX);
    assert_true(wk_sat_mul(1ull << 32, (1ull << 32) - 1) == (1ull << 32) * ((1ull << 32) - 1));
    assert_true(wk_sat_mul(1ull << 32, 1ull << 32) == UINT64_MAX);
    assert_true(wk_sat_mul(0, UINT64_MAX) == 0);
    /* a product that wraps to a small number in plain arithmetic: 2^31 x 2^31 x 4 = 2^64 */
    assert_true(wk_sat_mul3(1ull << 31, 1ull << 31, 4) == UINT64_MAX);
    assert_true(wk_sat_mul3(1ull << 20, 1ull << 20, 1ull << 20) == 1ull << 60);
}

static void test_ram_check_names_the_bytes_of_a_plan_larger_than_the_machine(void **state)
{
    (void)state;
    const uint64_t ram = wk_ram_bytes();
    assert_true(ram > (64ull << 20)); /* sysconf answers on Linux */
    wk_error err = {0};
    assert_int_equal(wk_ram_check(ram / 2, "half", &err), 0);
    assert_int_equal(wk_ram_check(ram + 1, "the plan", &err), WK_ENOMEM);
    char want[64];
    snprintf(want, sizeof want, "the plan needs %llu bytes", (unsigned long long)(ram + 1));
    assert_non_null(strstr(err.msg, want));
    assert_non_null(strstr(err.msg, "GiB of RAM"));
    assert_int_equal(wk_ram_check(UINT64_MAX, "an overflowed plan", &err), WK_ENOMEM);
    assert_non_null(strstr(err.msg, "an overflowed plan needs more than 2^64 bytes"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_runs_every_worker_and_covers_the_range),
        cmocka_unit_test(test_split_is_contiguous_and_balanced),
        cmocka_unit_test(test_f16_round_trip_matches_ieee),
        cmocka_unit_test(test_bf16_rounds_to_nearest_even),
        cmocka_unit_test(test_error_prefix_keeps_code_and_message),
        cmocka_unit_test(test_argmax_matches_the_reference),
        cmocka_unit_test(test_saturating_size_arithmetic_never_wraps),
        cmocka_unit_test(test_ram_check_names_the_bytes_of_a_plan_larger_than_the_machine),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
