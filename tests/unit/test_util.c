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
#include "util/progress.h"
#include "util/portinfo.h"
#include "util/sha256.h"
#include "util/sha256sums.h"
#include "util/sysinfo.h"
#include "util/threadpool.h"
#include "util/units.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

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

static void test_sizes_parse_with_binary_units(void **state)
{
    (void)state;
    uint64_t v = 0;
    wk_error err = {0};
    struct { const char *s; uint64_t want; } ok[] = {
        {"1", 1}, {"512M", 512ull << 20}, {"2G", 2ull << 30}, {"2GiB", 2ull << 30}, {"1.5g", 3ull << 29},
        {"4096K", 4ull << 20}, {"1T", 1ull << 40}, {"100B", 100}, {"8MB", 8ull << 20},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        assert_int_equal(wk_parse_size(ok[i].s, &v, &err), 0);
        assert_int_equal(v, ok[i].want);
    }
    const char *bad[] = {"", "0", "-1G", "G", "2X", "2Gi", "1e30", "nan", "inf", "0.1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(wk_parse_size(bad[i], &v, &err), WK_EINVAL);
        assert_non_null(strstr(err.msg, "size"));
    }
    char b[32];
    assert_string_equal(wk_format_bytes(b, sizeof b, 100), "100 B");
    assert_string_equal(wk_format_bytes(b, sizeof b, 1536), "1.50 KiB");
    assert_string_equal(wk_format_bytes(b, sizeof b, 2ull << 30), "2.00 GiB");
    assert_string_equal(wk_format_bytes(b, sizeof b, UINT64_MAX), "16.00 EiB");
}

static void test_progress_line_shows_bar_speed_and_eta(void **state)
{
    (void)state;
    char line[256];
    wk_progress_format(line, sizeof line, "model.gguf", 1ull << 29, 1ull << 30, 100.0 * (1 << 20), 5.12, 10);
    assert_string_equal(line, "model.gguf [#####-----]  50% 512.00 MiB / 1.00 GiB  100.00 MiB/s  ETA 0:05");
    wk_progress_format(line, sizeof line, "x", 3000, 0, 0, -1, 10); /* total unknown: bytes only */
    assert_string_equal(line, "x 2.93 KiB");
    wk_progress_format(line, sizeof line, "y", 10, 10, 1, 100000, 0); /* done: no ETA, no bar */
    assert_string_equal(line, "y 100% 10 B / 10 B  1 B/s");
    wk_progress_format(line, sizeof line, "z", 1, 2, 1, 3725, 0);
    assert_non_null(strstr(line, "ETA 1:02:05"));
    char tiny[8]; /* a short buffer is cut, never overrun */
    wk_progress_format(tiny, sizeof tiny, "a-long-label", 1, 2, 1, 1, 10);
    assert_int_equal(strlen(tiny), 7);
}

static void test_sha256_of_a_file_matches_the_buffer_hash(void **state)
{
    (void)state;
    char hex[65];
    wk_sha256_hex("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    /* 20 MiB + 3: crosses the 8 MiB reads, ends mid-block */
    size_t n = (20u << 20) + 3;
    unsigned char *buf = malloc(n);
    assert_non_null(buf);
    uint64_t st = 7;
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)test_rand_u32(&st);
    char path[] = "/tmp/wick-sha-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, buf, n), (ssize_t)n);
    char want[65], got[65];
    wk_sha256_hex(buf, n, want);
    wk_error err = {0};
    assert_int_equal(wk_sha256_file(path, got, &err), 0);
    assert_string_equal(got, want);
    /* incremental: a prefix from the file, the rest from memory */
    wk_sha256 *h = wk_sha256_new();
    assert_int_equal(wk_sha256_update_fd(h, fd, 12345, path, NULL, NULL, &err), 0);
    wk_sha256_update(h, buf + 12345, n - 12345);
    wk_sha256_final(h, got);
    assert_string_equal(got, want);
    /* asking for more bytes than the file holds is an error naming it */
    h = wk_sha256_new();
    assert_int_equal(wk_sha256_update_fd(h, fd, n + 1, path, NULL, NULL, &err), WK_EIO);
    assert_non_null(strstr(err.msg, "file ended"));
    wk_sha256_free(h);
    close(fd);
    unlink(path);
    assert_int_equal(wk_sha256_file(path, got, &err), WK_EIO);
    assert_non_null(strstr(err.msg, path));
    free(buf);
}

static void test_machine_facts_are_there(void **state)
{
    (void)state;
    char name[128];
    wk_cpu_model_name(name, sizeof name);
    assert_true(name[0] != '\0');
    assert_true(wk_cpu_count() >= 1);
    uint64_t a = 0, t = 0;
    wk_error err = {0};
    assert_int_equal(wk_mem_info(&a, &t, &err), 0);
    assert_true(t > 0 && a <= t);
}

static void test_sha256sums_read_what_sha256sum_writes(void **state)
{
    (void)state;
    const char *text = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  model.gguf\n"
                       "\n"
                       "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD *sub/bin.dat\r\n"
                       "\\ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  a\\\\b\\nc";
    wk_sums s;
    wk_error err = {0};
    assert_int_equal(wk_sums_parse(text, strlen(text), "SUMS", &s, &err), 0);
    assert_int_equal(s.n, 3);
    assert_string_equal(s.e[0].name, "model.gguf");
    assert_string_equal(s.e[1].name, "sub/bin.dat");
    assert_string_equal(s.e[1].hex, s.e[0].hex); /* upper case read as lower */
    assert_string_equal(s.e[2].name, "a\\b\nc");
    assert_int_equal(s.e[2].line, 4);
    assert_non_null(wk_sums_find(&s, "sub/bin.dat"));
    assert_null(wk_sums_find(&s, "other"));
    /* writing an escaped name and reading it back */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    wk_sums_write_line(f, s.e[2].hex, s.e[2].name);
    fclose(f);
    assert_string_equal(buf, "\\ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  a\\\\b\\nc\n");
    wk_sums back;
    assert_int_equal(wk_sums_parse(buf, len, "x", &back, &err), 0);
    assert_string_equal(back.e[0].name, "a\\b\nc");
    wk_sums_free(&back);
    free(buf);
    wk_sums_free(&s);
    const char *bad[] = {"short  x\n", "zz7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  x\n",
                         "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad x\n",
                         "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  \n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(wk_sums_parse(bad[i], strlen(bad[i]), "SUMS", &s, &err), WK_EFORMAT);
        assert_non_null(strstr(err.msg, "SUMS:1:"));
    }
}

static void test_proc_net_tcp_listener_is_found_by_port(void **state)
{
    (void)state;
    const char *text =
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0100007F:1F48 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 11111 1\n"
        "   1: 0100007F:1F48 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 22222 1\n"
        "   2: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 33333 1\n";
    assert_int_equal(wk_proc_net_listen_inode(text, 8008), 22222); /* the LISTEN line, not the connection */
    assert_int_equal(wk_proc_net_listen_inode(text, 22), 33333);
    assert_int_equal(wk_proc_net_listen_inode(text, 8009), 0);
    const char *v6 = "   0: 00000000000000000000000001000000:1F49 00000000000000000000000000000000:0000 0A "
                     "00000000:00000000 00:00000000 00000000  1000        0 44444 1\n";
    assert_int_equal(wk_proc_net_listen_inode(v6, 8009), 44444);
    wk_error err = {0};
    assert_int_equal(wk_port_probe("no.such.host.invalid", 8008, &err), WK_EINVAL);
    assert_non_null(strstr(err.msg, "does not resolve"));
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
        cmocka_unit_test(test_sizes_parse_with_binary_units),
        cmocka_unit_test(test_progress_line_shows_bar_speed_and_eta),
        cmocka_unit_test(test_sha256_of_a_file_matches_the_buffer_hash),
        cmocka_unit_test(test_machine_facts_are_there),
        cmocka_unit_test(test_sha256sums_read_what_sha256sum_writes),
        cmocka_unit_test(test_proc_net_tcp_listener_is_found_by_port),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
