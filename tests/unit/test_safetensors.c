/* safetensors reader: valid files open with the right shapes and values;
 * every malformed header is rejected with a message naming the problem;
 * truncating a valid file at any length never crashes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "model/safetensors.h"
#include "testutil.h"

static char g_path[256];

/* Writes an 8-byte length + header + data file at g_path. */
static void write_file(const char *header, const void *data, size_t n)
{
    FILE *f = fopen(g_path, "wb");
    assert_non_null(f);
    uint64_t len = strlen(header);
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)(len >> (8 * i));
    fwrite(le, 1, 8, f);
    fwrite(header, 1, len, f);
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_path, sizeof g_path, "/tmp/wick-test-st-%d.safetensors", (int)getpid());
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(g_path);
    return 0;
}

/* bf16 1.0, 2.0, -0.5, 3.0 | f32 1.5 | f16 -2.0 */
static const uint8_t k_data[] = {0x80, 0x3f, 0x00, 0x40, 0x00, 0xbf, 0x40, 0x40,
                                 0x00, 0x00, 0xc0, 0x3f, 0x00, 0xc0};

static void test_valid_file_opens_with_shapes_and_values(void **state)
{
    (void)state;
    write_file("{\"__metadata__\":{\"format\":\"pt\"},"
               "\"a\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},"
               "\"c\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[12,14]}}",
               k_data, sizeof k_data);
    st_file *f;
    wk_error err = {0};
    assert_int_equal(st_open(&f, g_path, &err), 0);
    assert_int_equal(st_tensor_count(f), 3);
    const st_tensor *a = st_find(f, "a"), *b = st_find(f, "b"), *c = st_find(f, "c");
    assert_non_null(a);
    assert_int_equal(a->n_dims, 2);
    assert_int_equal(a->shape[0], 2);
    assert_int_equal(a->n_elements, 4);
    assert_int_equal(a->dtype, ST_BF16);
    float v[4];
    assert_int_equal(st_read_f32(a, 0, 4, v, &err), 0);
    assert_true(v[0] == 1.0f && v[1] == 2.0f && v[2] == -0.5f && v[3] == 3.0f);
    assert_int_equal(st_read_f32(a, 2, 2, v, &err), 0);
    assert_true(v[0] == -0.5f && v[1] == 3.0f);
    assert_int_equal(st_read_f32(b, 0, 1, v, &err), 0);
    assert_true(v[0] == 1.5f);
    assert_int_equal(c->n_dims, 0);
    assert_int_equal(c->n_elements, 1);
    assert_int_equal(st_read_f32(c, 0, 1, v, &err), 0);
    assert_true(v[0] == -2.0f);
    assert_int_equal(st_read_f32(a, 3, 2, v, &err), WK_EINVAL);
    assert_null(st_find(f, "d"));
    st_close(f);
}

static void expect_rejected(const char *header, size_t data_len, const char *words)
{
    write_file(header, k_data, data_len);
    st_file *f = NULL;
    wk_error err = {0};
    int rc = st_open(&f, g_path, &err);
    assert_int_not_equal(rc, 0);
    assert_null(f);
    if (!strstr(err.msg, words)) fail_msg("header %s: message '%s' lacks '%s'", header, err.msg, words);
    assert_non_null(strstr(err.msg, g_path));
}

static void test_malformed_headers_are_rejected_with_the_reason(void **state)
{
    (void)state;
    expect_rejected("[1,2]", 0, "not a JSON object");
    expect_rejected("{\"a\":", 0, "not a JSON object");
    expect_rejected("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "not a JSON object");
    expect_rejected("{\"a\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,1]}}", 4, "unknown dtype");
    expect_rejected("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "dtype missing");
    expect_rejected("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "shape[0]");
    expect_rejected("{\"a\":{\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]}}", 4, "shape is not");
    expect_rejected("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 8, "4 bytes for 2");
    expect_rejected("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 2, "outside the data section");
    expect_rejected("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 8, "data_offsets");
    expect_rejected("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 8, "data_offsets is not");
    expect_rejected("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                    "\"b\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[2,6]}}", 8, "overlap");
    expect_rejected("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
                    "\"data_offsets\":[0,4]}}", 8, "overflows");
    expect_rejected("{\"__metadata__\":3}", 0, "__metadata__");
    expect_rejected("{\"a\":7}", 0, "entry is not an object");
}

static void test_header_length_past_the_file_is_rejected(void **state)
{
    (void)state;
    FILE *f = fopen(g_path, "wb");
    uint8_t le[8] = {0xff, 0xff, 0, 0, 0, 0, 0, 0}; /* 65535-byte header in a 10-byte file */
    fwrite(le, 1, 8, f);
    fwrite("{}", 1, 2, f);
    fclose(f);
    st_file *sf = NULL;
    wk_error err = {0};
    assert_int_equal(st_open(&sf, g_path, &err), WK_EFORMAT);
    assert_non_null(strstr(err.msg, "header length"));
    write_file("{}", NULL, 0);
    f = fopen(g_path, "r+b");
    fwrite("\x01\x02\x03", 1, 3, f); /* a 5-byte file: shorter than the length field */
    fclose(f);
    assert_int_equal(truncate(g_path, 5), 0);
    assert_int_equal(st_open(&sf, g_path, &err), WK_EFORMAT);
}

static void test_unconvertible_dtypes_are_named(void **state)
{
    (void)state;
    write_file("{\"i\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}", k_data, 4);
    st_file *f;
    wk_error err = {0};
    assert_int_equal(st_open(&f, g_path, &err), 0);
    float v;
    assert_int_equal(st_read_f32(st_find(f, "i"), 0, 1, &v, &err), WK_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "I32"));
    st_close(f);
}

static void test_truncation_at_every_length_never_crashes(void **state)
{
    (void)state;
    const char *h = "{\"a\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,8]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}";
    write_file(h, k_data, 12);
    size_t size;
    uint8_t *full = read_whole_file(g_path, &size);
    assert_non_null(full);
    for (size_t n = 0; n < size; n++) {
        FILE *f = fopen(g_path, "wb");
        fwrite(full, 1, n, f);
        fclose(f);
        st_file *sf = NULL;
        wk_error err = {0};
        assert_int_not_equal(st_open(&sf, g_path, &err), 0);
        assert_null(sf);
    }
    free(full);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_file_opens_with_shapes_and_values),
        cmocka_unit_test(test_malformed_headers_are_rejected_with_the_reason),
        cmocka_unit_test(test_header_length_past_the_file_is_rejected),
        cmocka_unit_test(test_unconvertible_dtypes_are_named),
        cmocka_unit_test(test_truncation_at_every_length_never_crashes),
    };
    return WK_RUN_GROUP_TESTS(tests, setup, teardown);
}
