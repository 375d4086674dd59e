#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/gguf_stats.h"
#include "quant/qtypes.h"
#include "testutil.h"

/* ---- a tiny byte builder for hand-made (and hostile) GGUF images ---- */

typedef struct mb {
    uint8_t *p;
    size_t len, cap;
} mb;

static void mb_put(mb *b, const void *src, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}
static void mb_u8(mb *b, uint8_t v) { mb_put(b, &v, 1); }
static void mb_u32(mb *b, uint32_t v)
{
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    mb_put(b, x, 4);
}
static void mb_u64(mb *b, uint64_t v)
{
    mb_u32(b, (uint32_t)v);
    mb_u32(b, (uint32_t)(v >> 32));
}
static void mb_str(mb *b, const char *s)
{
    mb_u64(b, strlen(s));
    mb_put(b, s, strlen(s));
}
static void mb_header(mb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    mb_put(b, "GGUF", 4);
    mb_u32(b, version);
    mb_u64(b, n_tensors);
    mb_u64(b, n_kv);
}
static void mb_kv_u32(mb *b, const char *key, uint32_t v)
{
    mb_str(b, key);
    mb_u32(b, GGUF_T_UINT32);
    mb_u32(b, v);
}
static void mb_kv_str(mb *b, const char *key, const char *v)
{
    mb_str(b, key);
    mb_u32(b, GGUF_T_STRING);
    mb_str(b, v);
}
static void mb_tinfo(mb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off)
{
    mb_str(b, name);
    mb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) mb_u64(b, ne[d]);
    mb_u32(b, type);
    mb_u64(b, off);
}
static void mb_pad(mb *b, size_t align)
{
    while (b->len % align) mb_u8(b, 0);
}
static void mb_zeros(mb *b, size_t n)
{
    for (size_t i = 0; i < n; i++) mb_u8(b, 0);
}

/* Opens an exact-size heap copy so ASan flags any read past the end. */
static int open_bytes(const void *p, size_t n, gguf_file **f, wk_error *err)
{
    void *copy = malloc(n ? n : 1);
    assert_non_null(copy);
    if (n) memcpy(copy, p, n);
    int rc = gguf_open_buffer(f, copy, n, err);
    gguf_close(*f); /* callers only look at the result */
    *f = NULL;
    free(copy);
    return rc;
}

static void expect_error(mb *b, int code, const char *needle1, const char *needle2)
{
    gguf_file *f = NULL;
    wk_error err = {0};
    int rc = open_bytes(b->p, b->len, &f, &err);
    if (rc != code || !strstr(err.msg, needle1) || (needle2 && !strstr(err.msg, needle2)))
        fail_msg("want code %d with \"%s\"/\"%s\", got %d: %s", code, needle1, needle2 ? needle2 : "", rc,
                 err.msg);
    assert_null(strchr(err.msg, '\n'));
    if (getenv("WICK_TEST_VERBOSE")) fprintf(stderr, "  rejected (%d): %s\n", rc, err.msg);
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* A valid two-tensor file with a string array, ending exactly at the last tensor's data. */
static void build_small_valid(mb *b)
{
    mb_header(b, 3, 2, 3);
    mb_kv_str(b, "general.architecture", "llama");
    mb_kv_u32(b, "llama.block_count", 2);
    mb_str(b, "tokenizer.ggml.tokens");
    mb_u32(b, GGUF_T_ARRAY);
    mb_u32(b, GGUF_T_STRING);
    mb_u64(b, 3);
    mb_str(b, "a");
    mb_str(b, "");
    mb_str(b, "xyz");
    uint64_t ne_a[2] = {32, 2}, ne_b[1] = {8};
    mb_tinfo(b, "a.weight", 2, ne_a, QT_Q8_0, 0); /* 2 rows x 34 bytes = 68, padded to 96 */
    mb_tinfo(b, "b.weight", 1, ne_b, QT_F32, 96);
    mb_pad(b, 32);
    for (int i = 0; i < 68; i++) mb_u8(b, (uint8_t)i);
    mb_zeros(b, 28);
    for (int i = 0; i < 32; i++) mb_u8(b, (uint8_t)(0x80 + i));
}

/* ---- golden models ---- */

static void test_every_golden_model_loads_and_matches_the_manifest(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    json_error_t jerr;
    json_t *manifest = json_load_file(path_join(dir, "MANIFEST.json"), 0, &jerr);
    assert_non_null(manifest);
    json_t *models = json_object_get(manifest, "models");
    assert_true(json_is_array(models));
    size_t checked = 0, i;
    json_t *m;
    json_array_foreach(models, i, m) {
        const char *rel = json_string_value(json_object_get(m, "file"));
        char path[4096];
        snprintf(path, sizeof path, "%s", path_join(dir, rel));
        gguf_file *f = NULL;
        wk_error err = {0};
        if (gguf_open(&f, path, &err) != 0) fail_msg("%s", err.msg);
        assert_string_equal(gguf_path(f), path);
        gguf_str arch;
        assert_int_equal(gguf_get_str(f, "general.architecture", &arch, &err), 0);
        const char *want_arch = json_string_value(json_object_get(m, "arch"));
        assert_int_equal(arch.len, strlen(want_arch));
        assert_memory_equal(arch.ptr, want_arch, arch.len);
        json_t *tensors = json_object_get(m, "tensors");
        assert_int_equal(gguf_tensor_count(f), json_array_size(tensors));
        size_t j;
        json_t *t;
        json_array_foreach(tensors, j, t) {
            const char *name = json_string_value(json_object_get(t, "name"));
            const gguf_tensor *gt = gguf_find_tensor(f, name);
            if (!gt) fail_msg("%s: tensor %s missing", rel, name);
            assert_string_equal(qt_type_name(gt->type), json_string_value(json_object_get(t, "type")));
            json_t *ne = json_object_get(t, "ne");
            assert_int_equal(gt->n_dims, json_array_size(ne));
            for (size_t d = 0; d < json_array_size(ne); d++)
                assert_int_equal(gt->ne[d], json_integer_value(json_array_get(ne, d)));
            /* data lies inside the file and is aligned */
            assert_true(gguf_data_offset(f) + gt->offset + gt->n_bytes <= gguf_file_size(f));
            assert_non_null(gt->data);
            assert_int_equal(gt->offset % gguf_alignment(f), 0);
        }
        json_t *ft = json_object_get(m, "general.file_type");
        if (json_is_integer(ft)) {
            uint64_t v;
            assert_int_equal(gguf_get_u64(f, "general.file_type", &v, &err), 0);
            assert_int_equal(v, json_integer_value(ft));
        }
        const gguf_kv *tok = gguf_find_kv(f, "tokenizer.ggml.tokens");
        assert_non_null(tok);
        assert_int_equal(tok->arr_type, GGUF_T_STRING);
        gguf_str s0 = gguf_arr_str(tok, 0), s1 = gguf_arr_str(tok, 1);
        assert_int_equal(s0.len, 5);
        assert_memory_equal(s0.ptr, "<unk>", 5);
        assert_memory_equal(s1.ptr, "<s>", 3);
        gguf_close(f);
        checked++;
    }
    assert_true(checked >= 30);
    json_decref(manifest);
}

static void test_every_gguf_in_the_models_folder_opens(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    char mdir[4096];
    snprintf(mdir, sizeof mdir, "%s", path_join(dir, "models"));
    DIR *d = opendir(mdir);
    assert_non_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 5, ".gguf") != 0) continue;
        gguf_file *f = NULL;
        wk_error err = {0};
        if (gguf_open(&f, path_join(mdir, e->d_name), &err) != 0) fail_msg("%s", err.msg);
        assert_true(gguf_tensor_count(f) > 0);
        assert_int_equal(gguf_version(f), 3);
        gguf_close(f);
        n++;
    }
    closedir(d);
    assert_true(n > 0);
}

/* ---- writer round trip ---- */

static char g_tmpdir[256];

static int make_tmpdir(void **state)
{
    (void)state;
    const char *base = getenv("TMPDIR");
    snprintf(g_tmpdir, sizeof g_tmpdir, "%s/wick-gguf-XXXXXX", base && *base ? base : "/tmp");
    return mkdtemp(g_tmpdir) ? 0 : -1;
}

static int remove_tmpdir(void **state)
{
    (void)state;
    DIR *d = opendir(g_tmpdir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            if (e->d_name[0] != '.') unlink(path_join(g_tmpdir, e->d_name));
        closedir(d);
    }
    rmdir(g_tmpdir);
    return 0;
}

static int file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* An image with one scalar of every type (the writer has no setter for some). */
static void build_all_scalars(mb *b)
{
    mb_header(b, 2, 0, 11);
    mb_str(b, "t.u8"); mb_u32(b, GGUF_T_UINT8); mb_u8(b, 200);
    mb_str(b, "t.i8"); mb_u32(b, GGUF_T_INT8); mb_u8(b, 0x80);
    mb_str(b, "t.u16"); mb_u32(b, GGUF_T_UINT16); mb_u8(b, 0x34); mb_u8(b, 0xf2);
    mb_str(b, "t.i16"); mb_u32(b, GGUF_T_INT16); mb_u8(b, 0xfe); mb_u8(b, 0xff);
    mb_str(b, "t.i64"); mb_u32(b, GGUF_T_INT64); mb_u64(b, (uint64_t)-5000000000ll);
    mb_str(b, "t.u64"); mb_u32(b, GGUF_T_UINT64); mb_u64(b, 0xfedcba9876543210ull);
    double d = -1.25e300;
    uint64_t db;
    memcpy(&db, &d, 8);
    mb_str(b, "t.f64"); mb_u32(b, GGUF_T_FLOAT64); mb_u64(b, db);
    mb_str(b, "t.bool"); mb_u32(b, GGUF_T_BOOL); mb_u8(b, 1);
    mb_str(b, "t.i32"); mb_u32(b, GGUF_T_INT32); mb_u32(b, (uint32_t)-7);
    mb_str(b, "t.arr_u16"); mb_u32(b, GGUF_T_ARRAY); mb_u32(b, GGUF_T_UINT16); mb_u64(b, 2); mb_u8(b, 1); mb_u8(b, 0); mb_u8(b, 0xff); mb_u8(b, 0xff);
    mb_str(b, "t.arr_bool"); mb_u32(b, GGUF_T_ARRAY); mb_u32(b, GGUF_T_BOOL); mb_u64(b, 3); mb_u8(b, 1); mb_u8(b, 0); mb_u8(b, 1);
}

static void check_all_scalars(gguf_file *f)
{
    wk_error err = {0};
    uint64_t u;
    int64_t i;
    double d;
    bool bo;
    assert_int_equal(gguf_get_u64(f, "t.u8", &u, &err), 0);
    assert_int_equal(u, 200);
    assert_int_equal(gguf_get_i64(f, "t.i8", &i, &err), 0);
    assert_int_equal(i, -128);
    assert_int_equal(gguf_get_u64(f, "t.u16", &u, &err), 0);
    assert_int_equal(u, 0xf234);
    assert_int_equal(gguf_get_i64(f, "t.i16", &i, &err), 0);
    assert_int_equal(i, -2);
    assert_int_equal(gguf_get_i64(f, "t.i64", &i, &err), 0);
    assert_true(i == -5000000000ll);
    assert_int_equal(gguf_get_u64(f, "t.u64", &u, &err), 0);
    assert_true(u == 0xfedcba9876543210ull);
    assert_int_equal(gguf_get_i64(f, "t.u64", &i, &err), WK_EFORMAT);
    assert_int_equal(gguf_get_f64(f, "t.f64", &d, &err), 0);
    assert_true(d == -1.25e300);
    assert_int_equal(gguf_get_bool(f, "t.bool", &bo, &err), 0);
    assert_true(bo);
    assert_int_equal(gguf_get_i64(f, "t.i32", &i, &err), 0);
    assert_int_equal(i, -7);
    const gguf_kv *a = gguf_find_kv(f, "t.arr_u16");
    assert_non_null(a);
    assert_int_equal(a->arr_count, 2);
    assert_int_equal(gguf_arr_i64(a, 0), 1);
    assert_int_equal(gguf_arr_i64(a, 1), 0xffff);
    a = gguf_find_kv(f, "t.arr_bool");
    assert_int_equal(gguf_arr_i64(a, 0) + gguf_arr_i64(a, 1) * 2 + gguf_arr_i64(a, 2) * 4, 5);
}

static void test_writer_round_trips_every_value_type_and_tensor_data(void **state)
{
    (void)state;
    mb src = {0};
    build_all_scalars(&src);
    gguf_file *in = NULL;
    wk_error err = {0};
    if (gguf_open_buffer(&in, src.p, src.len, &err)) fail_msg("%s", err.msg);
    check_all_scalars(in);

    char path[512];
    snprintf(path, sizeof path, "%s/rt.gguf", g_tmpdir);
    gguf_writer *w = NULL;
    assert_int_equal(gguf_writer_new(&w, path, 0, &err), 0);
    for (size_t k = 0; k < gguf_kv_count(in); k++) assert_int_equal(gguf_writer_copy_kv(w, gguf_kv_at(in, k)), 0);
    assert_int_equal(gguf_writer_set_u32(w, "w.u32", 4000000000u), 0);
    assert_int_equal(gguf_writer_set_i32(w, "w.i32", -123456), 0);
    assert_int_equal(gguf_writer_set_u64(w, "w.u64", 1ull << 40), 0);
    assert_int_equal(gguf_writer_set_f32(w, "w.f32", 0.1f), 0);
    assert_int_equal(gguf_writer_set_bool(w, "w.bool", false), 0);
    assert_int_equal(gguf_writer_set_str(w, "w.str", "h\xc3\xa9llo"), 0);
    assert_int_equal(gguf_writer_set_str(w, "w.empty", ""), 0);
    int32_t i32s[4] = {1, -2, 3, -4};
    float f32s[3] = {0.5f, -1.5f, 1e-3f};
    int8_t i8s[2] = {-1, 127};
    double f64s[2] = {3.5, -0.25};
    int64_t i64s[2] = {-1, INT64_MAX};
    assert_int_equal(gguf_writer_set_arr(w, "w.arr_i32", GGUF_T_INT32, i32s, 4), 0);
    assert_int_equal(gguf_writer_set_arr(w, "w.arr_f32", GGUF_T_FLOAT32, f32s, 3), 0);
    assert_int_equal(gguf_writer_set_arr(w, "w.arr_i8", GGUF_T_INT8, i8s, 2), 0);
    assert_int_equal(gguf_writer_set_arr(w, "w.arr_f64", GGUF_T_FLOAT64, f64s, 2), 0);
    assert_int_equal(gguf_writer_set_arr(w, "w.arr_i64", GGUF_T_INT64, i64s, 2), 0);
    assert_int_equal(gguf_writer_set_arr(w, "w.arr_empty", GGUF_T_UINT32, NULL, 0), 0);
    const char *strs[1000];
    char bufs[1000][24];
    for (int k = 0; k < 1000; k++) {
        snprintf(bufs[k], sizeof bufs[k], "%.*s%d", k % 7, "abcdefg", k);
        strs[k] = bufs[k];
    }
    assert_int_equal(gguf_writer_set_arr_str(w, "w.arr_str", strs, 1000), 0);
    /* tensors: sizes chosen so padding is exercised; data written in odd chunks */
    int64_t ne_a[2] = {32, 3};  /* Q8_0: 3 x 34 = 102 bytes */
    int64_t ne_b[1] = {5};      /* F32: 20 bytes */
    int64_t ne_c[3] = {256, 1, 2}; /* Q4_K: 2 x 144 = 288 */
    int64_t ne_z[2] = {0, 4};   /* empty */
    assert_int_equal(gguf_writer_add_tensor(w, "a", QT_Q8_0, 2, ne_a), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "z", QT_F16, 2, ne_z), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "b", QT_F32, 1, ne_b), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "c", QT_Q4_K, 3, ne_c), 0);
    uint8_t data[102 + 20 + 288];
    for (size_t k = 0; k < sizeof data; k++) data[k] = (uint8_t)(k * 7 + 1);
    assert_int_equal(gguf_writer_begin_data(w, &err), 0);
    assert_int_equal(gguf_writer_write_data(w, data, 50, &err), 0);
    assert_int_equal(gguf_writer_write_data(w, data + 50, 100, &err), 0); /* crosses a, z, b */
    assert_int_equal(gguf_writer_write_data(w, data + 150, sizeof data - 150, &err), 0);
    assert_int_equal(gguf_writer_write_data(w, data, 1, &err), WK_EINVAL); /* beyond the end */
    if (gguf_writer_finish(w, &err)) fail_msg("%s", err.msg);
    assert_true(file_exists(path));
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_false(file_exists(tmp));

    gguf_file *f = NULL;
    if (gguf_open(&f, path, &err)) fail_msg("%s", err.msg);
    assert_int_equal(gguf_version(f), 3);
    check_all_scalars(f);
    uint64_t u;
    int64_t i;
    double d;
    bool bo;
    gguf_str s;
    assert_int_equal(gguf_get_u64(f, "w.u32", &u, &err), 0);
    assert_int_equal(u, 4000000000u);
    assert_int_equal(gguf_get_i64(f, "w.i32", &i, &err), 0);
    assert_int_equal(i, -123456);
    assert_int_equal(gguf_get_u64(f, "w.u32", &u, &err), 0);
    assert_int_equal(gguf_get_u64(f, "w.i32", &u, &err), WK_EFORMAT);
    assert_non_null(strstr(err.msg, "w.i32"));
    assert_int_equal(gguf_get_u64(f, "w.u64", &u, &err), 0);
    assert_true(u == 1ull << 40);
    assert_int_equal(gguf_get_f64(f, "w.f32", &d, &err), 0);
    assert_true(d == (double)0.1f);
    assert_int_equal(gguf_get_bool(f, "w.bool", &bo, &err), 0);
    assert_false(bo);
    assert_int_equal(gguf_get_str(f, "w.str", &s, &err), 0);
    assert_int_equal(s.len, 6);
    assert_memory_equal(s.ptr, "h\xc3\xa9llo", 6);
    assert_int_equal(gguf_get_str(f, "w.empty", &s, &err), 0);
    assert_int_equal(s.len, 0);
    const gguf_kv *kv = gguf_find_kv(f, "w.arr_i32");
    for (int k = 0; k < 4; k++) assert_int_equal(gguf_arr_i64(kv, k), i32s[k]);
    kv = gguf_find_kv(f, "w.arr_f32");
    for (int k = 0; k < 3; k++) assert_true(gguf_arr_f64(kv, k) == (double)f32s[k]);
    kv = gguf_find_kv(f, "w.arr_i8");
    assert_int_equal(gguf_arr_i64(kv, 0), -1);
    assert_int_equal(gguf_arr_i64(kv, 1), 127);
    kv = gguf_find_kv(f, "w.arr_f64");
    assert_true(gguf_arr_f64(kv, 0) == 3.5 && gguf_arr_f64(kv, 1) == -0.25);
    kv = gguf_find_kv(f, "w.arr_i64");
    assert_true(gguf_arr_i64(kv, 1) == INT64_MAX);
    kv = gguf_find_kv(f, "w.arr_empty");
    assert_int_equal(kv->arr_count, 0);
    assert_int_equal(kv->arr_type, GGUF_T_UINT32);
    kv = gguf_find_kv(f, "w.arr_str");
    assert_int_equal(kv->arr_count, 1000);
    for (int k = 999; k >= 0; k--) {
        gguf_str e = gguf_arr_str(kv, k);
        assert_int_equal(e.len, strlen(strs[k]));
        assert_memory_equal(e.ptr, strs[k], e.len);
    }
    /* llama.cpp layout: offsets are running sums of sizes rounded up to 32 */
    const char *order[4] = {"a", "z", "b", "c"};
    uint64_t want_off[4] = {0, 128, 128, 160};
    uint64_t data_pos[4] = {0, 102, 102, 122};
    for (int k = 0; k < 4; k++) {
        const gguf_tensor *t = gguf_tensor_at(f, k);
        assert_string_equal(t->name_z, order[k]);
        assert_int_equal(t->offset, want_off[k]);
        assert_ptr_equal(gguf_find_tensor(f, order[k]), t);
        assert_memory_equal(t->data, data + data_pos[k], t->n_bytes);
    }
    assert_int_equal(gguf_tensor_at(f, 3)->n_bytes, 288);
    assert_int_equal(gguf_tensor_at(f, 3)->n_elements, 512);
    assert_int_equal(gguf_data_offset(f) % 32, 0);
    assert_int_equal(gguf_file_size(f), gguf_data_offset(f) + 160 + 288);
    assert_null(gguf_find_tensor(f, "missing"));
    assert_null(gguf_find_kv(f, "missing"));
    gguf_close(f);
    gguf_close(in);
    free(src.p);
}

/* The golden models were written by llama.cpp; copying every kv and tensor
 * through our writer must reproduce them byte for byte (same layout rules). */
static void test_writer_reproduces_llama_cpp_files_byte_for_byte(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    static const char *const models[] = {"tiny-llama-Q4_K_M.gguf", "tiny-qwen3-Q8_0.gguf",
                                         "tiny-qwen3moe-Q4_K_M.gguf", "tiny-qwen35-Q4_K_M.gguf",
                                         "tiny-qwen35moe-Q4_K_M.gguf"};
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        char src[4096], dst[512];
        snprintf(src, sizeof src, "%s/models/%s", dir, models[m]);
        snprintf(dst, sizeof dst, "%s/copy.gguf", g_tmpdir);
        gguf_file *f = NULL;
        wk_error err = {0};
        if (gguf_open(&f, src, &err)) fail_msg("%s", err.msg);
        gguf_writer *w = NULL;
        assert_int_equal(gguf_writer_new(&w, dst, gguf_alignment(f), &err), 0);
        for (size_t i = 0; i < gguf_kv_count(f); i++) assert_int_equal(gguf_writer_copy_kv(w, gguf_kv_at(f, i)), 0);
        for (size_t i = 0; i < gguf_tensor_count(f); i++) {
            const gguf_tensor *t = gguf_tensor_at(f, i);
            assert_int_equal(gguf_writer_add_tensor(w, t->name_z, t->type, t->n_dims, t->ne), 0);
        }
        assert_int_equal(gguf_writer_begin_data(w, &err), 0);
        for (size_t i = 0; i < gguf_tensor_count(f); i++) {
            const gguf_tensor *t = gguf_tensor_at(f, i);
            assert_int_equal(gguf_writer_write_data(w, t->data, t->n_bytes, &err), 0);
        }
        if (gguf_writer_finish(w, &err)) fail_msg("%s", err.msg);
        size_t na = 0, nb = 0;
        char *a = read_whole_file(src, &na), *b = read_whole_file(dst, &nb);
        assert_non_null(a);
        assert_non_null(b);
        if (na != nb || memcmp(a, b, na) != 0) fail_msg("%s: rewritten file differs (%zu vs %zu bytes)", models[m], nb, na);
        free(a);
        free(b);
        gguf_close(f);
    }
}

static void test_writer_records_nondefault_alignment_and_replaces_keys(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/al.gguf", g_tmpdir);
    gguf_writer *w = NULL;
    wk_error err = {0};
    assert_int_equal(gguf_writer_new(&w, path, 64, &err), 0);
    assert_int_equal(gguf_writer_set_str(w, "general.architecture", "first"), 0);
    assert_int_equal(gguf_writer_set_u32(w, "x", 1), 0);
    assert_int_equal(gguf_writer_set_str(w, "general.architecture", "llama"), 0);
    int64_t ne[1] = {8};
    assert_int_equal(gguf_writer_add_tensor(w, "t0", QT_F32, 1, ne), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "t1", QT_F32, 1, ne), 0);
    assert_int_equal(gguf_writer_begin_data(w, &err), 0);
    float v[16] = {0};
    assert_int_equal(gguf_writer_write_data(w, v, sizeof v, &err), 0);
    assert_int_equal(gguf_writer_finish(w, &err), 0);
    gguf_file *f = NULL;
    if (gguf_open(&f, path, &err)) fail_msg("%s", err.msg);
    assert_int_equal(gguf_alignment(f), 64);
    assert_int_equal(gguf_kv_count(f), 3);
    const gguf_kv *k0 = gguf_kv_at(f, 0), *k2 = gguf_kv_at(f, 2);
    assert_memory_equal(k0->key.ptr, "general.architecture", k0->key.len);
    assert_memory_equal(k2->key.ptr, "general.alignment", k2->key.len);
    gguf_str s;
    assert_int_equal(gguf_get_str(f, "general.architecture", &s, &err), 0);
    assert_memory_equal(s.ptr, "llama", 5);
    assert_int_equal(gguf_tensor_at(f, 1)->offset, 64);
    assert_int_equal(gguf_data_offset(f) % 64, 0);
    gguf_close(f);
}

static void test_writer_abort_and_short_data_leave_no_file(void **state)
{
    (void)state;
    char path[512], tmp[600];
    snprintf(path, sizeof path, "%s/ab.gguf", g_tmpdir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    gguf_writer *w = NULL;
    wk_error err = {0};
    int64_t ne[1] = {8};
    assert_int_equal(gguf_writer_new(&w, path, 0, &err), 0);
    assert_true(file_exists(tmp));
    assert_int_equal(gguf_writer_add_tensor(w, "t", QT_F32, 1, ne), 0);
    assert_int_equal(gguf_writer_begin_data(w, &err), 0);
    gguf_writer_abort(w);
    assert_false(file_exists(tmp));
    assert_false(file_exists(path));

    assert_int_equal(gguf_writer_new(&w, path, 0, &err), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "t", QT_F32, 1, ne), 0);
    assert_int_equal(gguf_writer_begin_data(w, &err), 0);
    float v[3] = {0};
    assert_int_equal(gguf_writer_write_data(w, v, sizeof v, &err), 0);
    assert_int_equal(gguf_writer_finish(w, &err), WK_EINVAL);
    assert_non_null(strstr(err.msg, "tensor t got 12 of 32 bytes"));
    assert_false(file_exists(tmp));
    assert_false(file_exists(path));
}

static void test_writer_rejects_bad_tensors_and_reports_at_begin(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/bad.gguf", g_tmpdir);
    gguf_writer *w = NULL;
    wk_error err = {0};
    int64_t ne[2] = {48, 2};
    assert_int_equal(gguf_writer_new(&w, path, 0, &err), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "q", QT_Q4_0, 2, ne), WK_EINVAL);
    assert_int_equal(gguf_writer_begin_data(w, &err), WK_EINVAL);
    assert_non_null(strstr(err.msg, "tensor q"));
    gguf_writer_abort(w);
    assert_int_equal(gguf_writer_new(&w, path, 0, &err), 0);
    ne[0] = 32;
    assert_int_equal(gguf_writer_add_tensor(w, "dup", QT_Q4_0, 2, ne), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "dup", QT_Q4_0, 2, ne), WK_EINVAL);
    gguf_writer_abort(w);
    assert_int_equal(gguf_writer_new(&w, path, 0, &err), 0);
    assert_int_equal(gguf_writer_set_u32(w, "general.alignment", 64), WK_EINVAL);
    gguf_writer_abort(w);
    assert_int_equal(gguf_writer_new(&w, "/nonexistent-dir/x.gguf", 0, &err), WK_EIO);
    assert_non_null(strstr(err.msg, "/nonexistent-dir/x.gguf.tmp"));
    assert_int_equal(gguf_writer_new(&w, path, 3, &err), WK_EINVAL);
}

static void test_lookup_scales_to_many_tensors(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/many.gguf", g_tmpdir);
    gguf_writer *w = NULL;
    wk_error err = {0};
    assert_int_equal(gguf_writer_new(&w, path, 0, &err), 0);
    int64_t ne[1] = {1};
    char name[64];
    for (int k = 0; k < 3000; k++) {
        snprintf(name, sizeof name, "blk.%d.attn_q.weight", k);
        assert_int_equal(gguf_writer_add_tensor(w, name, QT_F32, 1, ne), 0);
        snprintf(name, sizeof name, "key.%d", k);
        assert_int_equal(gguf_writer_set_u32(w, name, (uint32_t)k), 0);
    }
    assert_int_equal(gguf_writer_begin_data(w, &err), 0);
    for (int k = 0; k < 3000; k++) {
        float v = (float)k;
        assert_int_equal(gguf_writer_write_data(w, &v, 4, &err), 0);
    }
    assert_int_equal(gguf_writer_finish(w, &err), 0);
    gguf_file *f = NULL;
    if (gguf_open(&f, path, &err)) fail_msg("%s", err.msg);
    for (int k = 0; k < 3000; k++) {
        snprintf(name, sizeof name, "blk.%d.attn_q.weight", k);
        const gguf_tensor *t = gguf_find_tensor(f, name);
        assert_non_null(t);
        float v;
        memcpy(&v, t->data, 4);
        assert_true(v == (float)k);
        snprintf(name, sizeof name, "key.%d", k);
        uint64_t u;
        assert_int_equal(gguf_get_u64(f, name, &u, &err), 0);
        assert_int_equal(u, k);
    }
    gguf_close(f);
}

/* ---- getters ---- */

static void test_getters_convert_integers_and_reject_mismatches(void **state)
{
    (void)state;
    mb b = {0};
    mb_header(&b, 3, 0, 6);
    mb_kv_u32(&b, "n", 7);
    mb_str(&b, "neg"); mb_u32(&b, GGUF_T_INT32); mb_u32(&b, (uint32_t)-3);
    mb_kv_str(&b, "s", "text");
    mb_str(&b, "heads"); mb_u32(&b, GGUF_T_ARRAY); mb_u32(&b, GGUF_T_INT32); mb_u64(&b, 3);
    mb_u32(&b, 8); mb_u32(&b, 0); mb_u32(&b, 16);
    mb_str(&b, "negarr"); mb_u32(&b, GGUF_T_ARRAY); mb_u32(&b, GGUF_T_INT32); mb_u64(&b, 3);
    mb_u32(&b, 8); mb_u32(&b, (uint32_t)-1); mb_u32(&b, 16);
    mb_str(&b, "f"); mb_u32(&b, GGUF_T_FLOAT32); mb_u32(&b, 0x3fc00000u); /* 1.5 */
    gguf_file *f = NULL;
    wk_error err = {0};
    if (gguf_open_buffer(&f, b.p, b.len, &err)) fail_msg("%s", err.msg);
    uint64_t u;
    int64_t i;
    double d;
    bool bo;
    gguf_str s;
    assert_int_equal(gguf_get_u64(f, "n", &u, &err), 0);
    assert_int_equal(u, 7);
    assert_int_equal(gguf_get_f64(f, "n", &d, &err), 0);
    assert_true(d == 7.0);
    assert_int_equal(gguf_get_f64(f, "f", &d, &err), 0);
    assert_true(d == 1.5);
    assert_int_equal(gguf_get_u64(f, "neg", &u, &err), WK_EFORMAT);
    assert_non_null(strstr(err.msg, "neg"));
    assert_int_equal(gguf_get_i64(f, "neg", &i, &err), 0);
    assert_int_equal(i, -3);
    assert_int_equal(gguf_get_u64(f, "s", &u, &err), WK_EFORMAT);
    assert_int_equal(gguf_get_u64(f, "f", &u, &err), WK_EFORMAT);
    assert_int_equal(gguf_get_bool(f, "n", &bo, &err), WK_EFORMAT);
    assert_int_equal(gguf_get_str(f, "n", &s, &err), WK_EFORMAT);
    assert_int_equal(gguf_get_str(f, "absent", &s, &err), WK_ENOTFOUND);
    assert_non_null(strstr(err.msg, "absent"));
    assert_int_equal(gguf_get_u64_or(f, "absent", 42, &u, &err), 0);
    assert_int_equal(u, 42);
    assert_int_equal(gguf_get_u64_or(f, "s", 42, &u, &err), WK_EFORMAT);
    assert_int_equal(gguf_get_f64_or(f, "absent", 0.5, &d, &err), 0);
    assert_true(d == 0.5);
    uint32_t per[3];
    assert_int_equal(gguf_get_u32_per_layer(f, "n", 3, per, &err), 0);
    assert_true(per[0] == 7 && per[1] == 7 && per[2] == 7);
    assert_int_equal(gguf_get_u32_per_layer(f, "heads", 3, per, &err), 0);
    assert_true(per[0] == 8 && per[1] == 0 && per[2] == 16);
    assert_int_equal(gguf_get_u32_per_layer(f, "heads", 4, per, &err), WK_EFORMAT);
    assert_non_null(strstr(err.msg, "heads"));
    assert_int_equal(gguf_get_u32_per_layer(f, "negarr", 3, per, &err), WK_EFORMAT);
    assert_int_equal(gguf_get_u32_per_layer(f, "s", 3, per, &err), WK_EFORMAT);
    assert_int_equal(gguf_get_u32_per_layer(f, "absent", 3, per, &err), WK_ENOTFOUND);
    /* out-of-range array access is harmless */
    const gguf_kv *kv = gguf_find_kv(f, "heads");
    assert_int_equal(gguf_arr_i64(kv, 3), 0);
    assert_int_equal(gguf_arr_str(kv, 0).len, 0);
    char *text = NULL;
    size_t tlen = 0;
    FILE *mem = open_memstream(&text, &tlen);
    gguf_kv_print(mem, kv, 2);
    gguf_kv_print(mem, gguf_find_kv(f, "s"), 2);
    fclose(mem);
    assert_string_equal(text, "heads: array[i32 x 3] = [8, 0, ... 1 more]\ns: string = \"text\"\n");
    free(text);
    gguf_close(f);
    free(b.p);
}

/* ---- hostile inputs ---- */

static void test_small_valid_image_opens(void **state)
{
    (void)state;
    mb b = {0};
    build_small_valid(&b);
    gguf_file *f = NULL;
    wk_error err = {0};
    if (gguf_open_buffer(&f, b.p, b.len, &err)) fail_msg("%s", err.msg);
    assert_int_equal(gguf_tensor_count(f), 2);
    const gguf_tensor *t = gguf_find_tensor(f, "b.weight");
    assert_int_equal(((const uint8_t *)t->data)[0], 0x80);
    assert_ptr_equal((const uint8_t *)t->data + 32, b.p + b.len);
    gguf_close(f);
    free(b.p);
}

static void test_truncation_at_every_offset_is_rejected(void **state)
{
    (void)state;
    mb b = {0};
    build_small_valid(&b);
    for (size_t n = 0; n < b.len; n++) {
        gguf_file *f = NULL;
        wk_error err = {0};
        int rc = open_bytes(b.p, n, &f, &err);
        if (rc != WK_EFORMAT) fail_msg("truncated to %zu of %zu bytes: got %d (%s)", n, b.len, rc, err.msg);
        assert_true(strlen(err.msg) > 10);
    }
    free(b.p);
}

static void test_corrupting_every_byte_never_crashes(void **state)
{
    (void)state;
    mb b = {0};
    build_small_valid(&b);
    static const uint8_t vals[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0x40};
    for (size_t pos = 0; pos < b.len; pos++) {
        for (size_t v = 0; v < sizeof vals; v++) {
            uint8_t saved = b.p[pos];
            b.p[pos] = vals[v];
            gguf_file *f = NULL;
            wk_error err = {0};
            int rc = open_bytes(b.p, b.len, &f, &err);
            if (rc) assert_true(strlen(err.msg) > 0);
            b.p[pos] = saved;
        }
    }
    free(b.p);
}

static void test_bad_magic_and_versions_are_rejected(void **state)
{
    (void)state;
    mb b = {0};
    expect_error(&b, WK_EFORMAT, "empty", NULL);
    mb_put(&b, "GGU", 3);
    expect_error(&b, WK_EFORMAT, "too small", NULL);
    mb_put(&b, "GGML", 4); mb_u32(&b, 3); mb_u64(&b, 0); mb_u64(&b, 0);
    expect_error(&b, WK_EFORMAT, "bad magic \"GGML\"", NULL);
    mb_header(&b, 1, 0, 0);
    expect_error(&b, WK_EUNSUPPORTED, "version 1", NULL);
    mb_header(&b, 4, 0, 0);
    expect_error(&b, WK_EUNSUPPORTED, "version 4", NULL);
    mb_header(&b, 0, 0, 0);
    expect_error(&b, WK_EFORMAT, "version 0", NULL);
    mb_header(&b, 0x03000000u, 0, 0);
    expect_error(&b, WK_EFORMAT, "big-endian", NULL);
    mb_header(&b, 2, 0, 0);
    gguf_file *f = NULL;
    wk_error err = {0};
    assert_int_equal(gguf_open_buffer(&f, b.p, b.len, &err), 0);
    assert_int_equal(gguf_version(f), 2);
    gguf_close(f);
    free(b.p);
}

static void test_hostile_counts_and_lengths_are_rejected_before_allocation(void **state)
{
    (void)state;
    mb b = {0};
    mb_header(&b, 3, 0, 1ull << 60);
    expect_error(&b, WK_EFORMAT, "metadata count 1152921504606846976", NULL);
    mb_header(&b, 3, 1ull << 62, 0);
    expect_error(&b, WK_EFORMAT, "tensor count 4611686018427387904", NULL);
    mb_header(&b, 3, 0, 1);
    mb_str(&b, "big.string"); mb_u32(&b, GGUF_T_STRING); mb_u64(&b, 1ull << 40);
    expect_error(&b, WK_EFORMAT, "big.string", "2^30");
    mb_header(&b, 3, 0, 1);
    mb_str(&b, "short.string"); mb_u32(&b, GGUF_T_STRING); mb_u64(&b, 1000); mb_put(&b, "abc", 3);
    expect_error(&b, WK_EFORMAT, "short.string", "runs past end of file");
    mb_header(&b, 3, 0, 1);
    mb_u64(&b, 1ull << 50); mb_put(&b, "k", 1); mb_zeros(&b, 20);
    expect_error(&b, WK_EFORMAT, "key length", NULL);
    mb_header(&b, 3, 0, 1);
    mb_str(&b, "huge.array"); mb_u32(&b, GGUF_T_ARRAY); mb_u32(&b, GGUF_T_UINT8); mb_u64(&b, 1ull << 31);
    expect_error(&b, WK_EFORMAT, "huge.array", "array count 2147483648");
    mb_header(&b, 3, 0, 1);
    mb_str(&b, "long.array"); mb_u32(&b, GGUF_T_ARRAY); mb_u32(&b, GGUF_T_UINT32); mb_u64(&b, 1000000);
    mb_u32(&b, 1);
    expect_error(&b, WK_EFORMAT, "long.array", "needs at least 4000000 bytes");
    mb_header(&b, 3, 0, 1);
    mb_str(&b, "strs"); mb_u32(&b, GGUF_T_ARRAY); mb_u32(&b, GGUF_T_STRING); mb_u64(&b, 2);
    mb_str(&b, "ok"); mb_u64(&b, 1ull << 33);
    expect_error(&b, WK_EFORMAT, "strs: element 1", NULL);
}

static void test_malformed_metadata_is_rejected(void **state)
{
    (void)state;
    mb b = {0};
    mb_header(&b, 3, 0, 1);
    mb_str(&b, "nested"); mb_u32(&b, GGUF_T_ARRAY); mb_u32(&b, GGUF_T_ARRAY); mb_u64(&b, 1);
    mb_u32(&b, GGUF_T_UINT8); mb_u64(&b, 0);
    expect_error(&b, WK_EFORMAT, "key nested", "nested arrays");
    mb_header(&b, 3, 0, 2);
    mb_kv_u32(&b, "dup.key", 1); mb_kv_u32(&b, "dup.key", 2);
    expect_error(&b, WK_EFORMAT, "key dup.key", "duplicate");
    mb_header(&b, 3, 0, 1);
    mb_str(&b, ""); mb_u32(&b, GGUF_T_UINT32); mb_u32(&b, 1);
    expect_error(&b, WK_EFORMAT, "empty key", NULL);
    mb_header(&b, 3, 0, 1);
    mb_str(&b, "weird.type"); mb_u32(&b, 13); mb_u32(&b, 1);
    expect_error(&b, WK_EFORMAT, "weird.type", "invalid value type 13");
    mb_header(&b, 3, 0, 1);
    mb_str(&b, "arr.type"); mb_u32(&b, GGUF_T_ARRAY); mb_u32(&b, 77); mb_u64(&b, 0);
    expect_error(&b, WK_EFORMAT, "arr.type", "element type 77");
    mb_header(&b, 3, 0, 1);
    mb_str(&b, "flag"); mb_u32(&b, GGUF_T_BOOL); mb_u8(&b, 2);
    expect_error(&b, WK_EFORMAT, "key flag", "bool value 2");
    mb_header(&b, 3, 0, 1);
    mb_kv_u32(&b, "general.alignment", 48);
    expect_error(&b, WK_EFORMAT, "general.alignment", "48 is not a power of two");
    mb_header(&b, 3, 0, 1);
    mb_kv_str(&b, "general.alignment", "32");
    expect_error(&b, WK_EFORMAT, "general.alignment", "string");
    mb_header(&b, 3, 0, 1);
    mb_str(&b, "k\x01y"); mb_u32(&b, GGUF_T_UINT64); mb_u32(&b, 1);
    expect_error(&b, WK_EFORMAT, "key k\\x01y", "truncated");
}

/* One tensor "t.w" with the given shape/type/offset and `data_bytes` of data. */
static void build_one_tensor(mb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                             uint64_t off, size_t data_bytes)
{
    mb_header(b, 3, 1, 1);
    mb_kv_str(b, "general.architecture", "llama");
    mb_tinfo(b, name, n_dims, ne, type, off);
    mb_pad(b, 32);
    mb_zeros(b, data_bytes);
}

static void test_malformed_tensor_infos_are_rejected(void **state)
{
    (void)state;
    mb b = {0};
    uint64_t ne[5] = {32, 4, 1, 1, 1};
    build_one_tensor(&b, "blk.0.attn_q.weight", 2, ne, QT_F32, 0, 512);
    gguf_file *f = NULL;
    wk_error err = {0};
    assert_int_equal(open_bytes(b.p, b.len, &f, &err), 0);
    free(b.p);
    memset(&b, 0, sizeof b);

    mb_header(&b, 3, 2, 0);
    mb_tinfo(&b, "same", 1, ne, QT_F32, 0);
    mb_tinfo(&b, "same", 1, ne, QT_F32, 128);
    mb_pad(&b, 32);
    mb_zeros(&b, 256);
    expect_error(&b, WK_EFORMAT, "tensor same", "duplicate tensor name");

    build_one_tensor(&b, "", 1, ne, QT_F32, 0, 128);
    expect_error(&b, WK_EFORMAT, "empty name", NULL);
    build_one_tensor(&b, "a.name.that.is.exactly.sixty.four.bytes.long.0123456789abcdefghi", 1, ne, QT_F32, 0,
                     128);
    expect_error(&b, WK_EFORMAT, "name is 64 bytes", NULL);
    build_one_tensor(&b, "five.dims", 5, ne, QT_F32, 0, 128);
    expect_error(&b, WK_EFORMAT, "tensor five.dims", "n_dims 5");
    build_one_tensor(&b, "zero.dims", 0, ne, QT_F32, 0, 128);
    expect_error(&b, WK_EFORMAT, "tensor zero.dims", "n_dims 0");
    uint64_t big[3] = {1ull << 32, 1ull << 32, 4};
    build_one_tensor(&b, "overflow", 3, big, QT_F32, 0, 0);
    expect_error(&b, WK_EFORMAT, "tensor overflow", "overflows");
    uint64_t bytes_over[2] = {1ull << 40, 1ull << 22}; /* 2^62 elements fit, 2^64 bytes do not */
    build_one_tensor(&b, "byte.overflow", 2, bytes_over, QT_F32, 0, 0);
    expect_error(&b, WK_EFORMAT, "tensor byte.overflow", "overflows");
    uint64_t neg[2] = {32, (uint64_t)-1};
    build_one_tensor(&b, "negative", 2, neg, QT_F32, 0, 0);
    expect_error(&b, WK_EFORMAT, "tensor negative", "negative");
    build_one_tensor(&b, "blk.1.ffn_up.weight", 2, ne, 16, 0, 512);
    expect_error(&b, WK_EUNSUPPORTED, "tensor blk.1.ffn_up.weight", "IQ2_XXS");
    build_one_tensor(&b, "mx", 2, ne, 39, 0, 512);
    expect_error(&b, WK_EUNSUPPORTED, "tensor mx", "MXFP4");
    build_one_tensor(&b, "act", 2, ne, QT_Q8_K, 0, 512);
    expect_error(&b, WK_EUNSUPPORTED, "tensor act", "activation-only");
    build_one_tensor(&b, "retired", 2, ne, 4, 0, 512);
    expect_error(&b, WK_EFORMAT, "tensor retired", "retired");
    build_one_tensor(&b, "bad.id", 2, ne, 99, 0, 512);
    expect_error(&b, WK_EFORMAT, "tensor bad.id", "type id 99");
    uint64_t odd[2] = {48, 2};
    build_one_tensor(&b, "odd.rows", 2, odd, QT_Q4_0, 0, 512);
    expect_error(&b, WK_EFORMAT, "tensor odd.rows", "ne[0] = 48 is not a multiple of the Q4_0 block size 32");
    build_one_tensor(&b, "misaligned", 2, ne, QT_F32, 8, 1024);
    expect_error(&b, WK_EFORMAT, "tensor misaligned", "offset 0x8 is not a multiple of the alignment 32");
    build_one_tensor(&b, "blk.3.attn_q.weight", 2, ne, QT_F32, 0, 511);
    expect_error(&b, WK_EFORMAT, "tensor blk.3.attn_q.weight: data [offset 0x0, 512 bytes] runs past end of file",
                 NULL);
    build_one_tensor(&b, "far", 2, ne, QT_F32, 0xffffffffffffffe0ull, 512);
    expect_error(&b, WK_EFORMAT, "tensor far", "runs past end of file");
}



static void test_open_names_the_path_in_every_error(void **state)
{
    (void)state;
    gguf_file *f = NULL;
    wk_error err = {0};
    char path[512];
    snprintf(path, sizeof path, "%s/missing.gguf", g_tmpdir);
    assert_int_equal(gguf_open(&f, path, &err), WK_EIO);
    assert_null(f);
    assert_non_null(strstr(err.msg, path));
    snprintf(path, sizeof path, "%s/empty.gguf", g_tmpdir);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    fclose(fp);
    assert_int_equal(gguf_open(&f, path, &err), WK_EFORMAT);
    assert_null(f);
    assert_true(strncmp(err.msg, path, strlen(path)) == 0);
    assert_non_null(strstr(err.msg, "empty"));
    assert_int_equal(gguf_open(&f, g_tmpdir, &err), WK_EINVAL); /* a directory */
    assert_non_null(strstr(err.msg, g_tmpdir));
}

/* ---- stats: bits per weight, shape, cache sizes ---- */

static void test_tensor_classes_follow_names(void **state)
{
    (void)state;
    assert_int_equal(gguf_tensor_class_of("token_embd.weight"), GGUF_CLASS_EMBED);
    assert_int_equal(gguf_tensor_class_of("output.weight"), GGUF_CLASS_OUTPUT);
    assert_int_equal(gguf_tensor_class_of("output_norm.weight"), GGUF_CLASS_OTHER);
    assert_int_equal(gguf_tensor_class_of("blk.0.attn_q.weight"), GGUF_CLASS_ATTN);
    assert_int_equal(gguf_tensor_class_of("blk.0.attn_qkv.weight"), GGUF_CLASS_ATTN);
    assert_int_equal(gguf_tensor_class_of("blk.0.ssm_a"), GGUF_CLASS_ATTN);
    assert_int_equal(gguf_tensor_class_of("blk.0.ssm_conv1d.weight"), GGUF_CLASS_ATTN);
    assert_int_equal(gguf_tensor_class_of("blk.0.attn_norm.weight"), GGUF_CLASS_OTHER);
    assert_int_equal(gguf_tensor_class_of("blk.0.attn_q_norm.weight"), GGUF_CLASS_OTHER);
    assert_int_equal(gguf_tensor_class_of("blk.0.ssm_norm.weight"), GGUF_CLASS_OTHER);
    assert_int_equal(gguf_tensor_class_of("blk.0.ffn_down_exps.weight"), GGUF_CLASS_FFN);
    assert_int_equal(gguf_tensor_class_of("blk.0.ffn_up_shexp.weight"), GGUF_CLASS_FFN);
    assert_int_equal(gguf_tensor_class_of("blk.0.ffn_gate_inp.weight"), GGUF_CLASS_FFN);
    assert_int_equal(gguf_tensor_class_of("rope_freqs.weight"), GGUF_CLASS_OTHER);
}

static gguf_file *open_golden(const char *dir, const char *name)
{
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s", name);
    gguf_file *f = NULL;
    wk_error err = {0};
    if (gguf_open(&f, path_join(dir, rel), &err)) fail_msg("%s", err.msg);
    return f;
}

static void test_bits_per_weight_come_from_actual_bytes(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    gguf_file *f = open_golden(dir, "tiny-llama-F32.gguf");
    gguf_weight_stats ws;
    gguf_weight_stats_compute(f, &ws);
    assert_int_equal(ws.total.n_tensors, 20);
    assert_true(gguf_bits_per_weight(&ws.total) == 32.0);
    assert_int_equal(ws.by_type[QT_F32].n_tensors, 20);
    gguf_close(f);

    f = open_golden(dir, "tiny-qwen3-Q8_0.gguf");
    gguf_weight_stats_compute(f, &ws);
    uint64_t bytes = 0, elems = 0;
    for (size_t i = 0; i < gguf_tensor_count(f); i++) {
        bytes += gguf_tensor_at(f, i)->n_bytes;
        elems += gguf_tensor_at(f, i)->n_elements;
    }
    assert_int_equal(ws.total.n_bytes, bytes);
    assert_int_equal(ws.total.n_elements, elems);
    /* pure Q8_0: every 2-D weight is 8.5 bpw; norms are F32 */
    assert_true(fabs(gguf_bits_per_weight(&ws.by_class[GGUF_CLASS_EMBED]) - 8.5) < 1e-9);
    assert_true(fabs(gguf_bits_per_weight(&ws.by_class[GGUF_CLASS_FFN]) - 8.5) < 1e-9);
    assert_true(gguf_bits_per_weight(&ws.by_class[GGUF_CLASS_OTHER]) == 32.0);
    assert_int_equal(ws.by_class[GGUF_CLASS_OUTPUT].n_tensors, 0); /* tied */
    double overall = gguf_bits_per_weight(&ws.total);
    assert_true(overall > 8.5 && overall < 9.0);
    gguf_close(f);
}

static void test_summary_and_cache_sizes_of_hybrid_golden_model(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    gguf_file *f = open_golden(dir, "tiny-qwen35moe-Q4_K_M.gguf");
    gguf_model_summary s;
    wk_error err = {0};
    if (gguf_model_summary_compute(f, &s, &err)) fail_msg("%s", err.msg);
    assert_string_equal(s.arch, "qwen35moe");
    assert_int_equal(s.n_layer, 2);
    assert_int_equal(s.n_full_attn, 1);
    assert_int_equal(s.n_recurrent, 1);
    assert_int_equal(s.n_head, 2);
    assert_int_equal(s.n_head_kv, 1);
    assert_int_equal(s.head_dim_k, 128);
    assert_int_equal(s.n_expert, 8);
    assert_int_equal(s.n_expert_used, 2);
    assert_int_equal(s.n_ff_shexp, 32);
    assert_int_equal(s.tok_vocab, 260);
    assert_string_equal(s.tok_model, "llama");
    assert_false(s.has_chat_template);
    /* one full-attention layer, 1 kv head, k+v dims 256 */
    assert_int_equal(gguf_kv_bytes_per_token(f, &s, QT_F16), 512);
    assert_int_equal(gguf_kv_bytes_per_token(f, &s, QT_Q8_0), 2 * 4 * 34);
    /* conv: 3 x (2*2*64 + 256) floats; ssm: 64 x 256 floats */
    assert_int_equal(s.conv_state_bytes_per_layer, 3 * 512 * 4);
    assert_int_equal(s.ssm_state_bytes_per_layer, 64 * 256 * 4);
    assert_int_equal(s.recurrent_bytes_per_seq, 3 * 512 * 4 + 64 * 256 * 4);
    gguf_close(f);

    f = open_golden(dir, "tiny-qwen3-F32.gguf");
    if (gguf_model_summary_compute(f, &s, &err)) fail_msg("%s", err.msg);
    assert_int_equal(s.n_full_attn, 2);
    assert_int_equal(s.n_recurrent, 0);
    assert_int_equal(gguf_kv_bytes_per_token(f, &s, QT_F16), 2 * 1 * 256 * 2);
    assert_int_equal(s.recurrent_bytes_per_seq, 0);
    gguf_close(f);
}

/* Qwen3.5-27B's published numbers (architectures.md 10.3): 64 KiB KV per token
 * at F16 and 149.625 MiB of recurrent state; the MTP block is not counted. */
static void test_cache_sizes_match_published_qwen35_27b_numbers(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/q27.gguf", g_tmpdir);
    gguf_writer *w = NULL;
    wk_error err = {0};
    assert_int_equal(gguf_writer_new(&w, path, 0, &err), 0);
    gguf_writer_set_str(w, "general.architecture", "qwen35");
    gguf_writer_set_u32(w, "qwen35.block_count", 65);
    gguf_writer_set_u32(w, "qwen35.nextn_predict_layers", 1);
    gguf_writer_set_u32(w, "qwen35.embedding_length", 5120);
    gguf_writer_set_u32(w, "qwen35.attention.head_count", 24);
    gguf_writer_set_u32(w, "qwen35.attention.head_count_kv", 4);
    gguf_writer_set_u32(w, "qwen35.attention.key_length", 256);
    gguf_writer_set_u32(w, "qwen35.attention.value_length", 256);
    gguf_writer_set_u32(w, "qwen35.full_attention_interval", 4);
    gguf_writer_set_u32(w, "qwen35.ssm.conv_kernel", 4);
    gguf_writer_set_u32(w, "qwen35.ssm.state_size", 128);
    gguf_writer_set_u32(w, "qwen35.ssm.group_count", 16);
    gguf_writer_set_u32(w, "qwen35.ssm.time_step_rank", 48);
    assert_int_equal(gguf_writer_set_u32(w, "qwen35.ssm.inner_size", 6144), 0);
    assert_int_equal(gguf_writer_finish(w, &err), 0);
    gguf_file *f = NULL;
    if (gguf_open(&f, path, &err)) fail_msg("%s", err.msg);
    gguf_model_summary s;
    if (gguf_model_summary_compute(f, &s, &err)) fail_msg("%s", err.msg);
    assert_int_equal(s.n_layer, 64);
    assert_int_equal(s.n_full_attn, 16);
    assert_int_equal(s.n_recurrent, 48);
    assert_int_equal(gguf_kv_bytes_per_token(f, &s, QT_F16), 64 * 1024);
    assert_int_equal(s.conv_state_bytes_per_layer, 120 * 1024);
    assert_int_equal(s.ssm_state_bytes_per_layer, 3 * 1024 * 1024);
    assert_true(fabs((double)s.recurrent_bytes_per_seq / (1024.0 * 1024.0) - 149.625) < 1e-9);
    gguf_close(f);
}

static void test_summary_rejects_inconsistent_layer_keys(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/badlayers.gguf", g_tmpdir);
    gguf_writer *w = NULL;
    wk_error err = {0};
    assert_int_equal(gguf_writer_new(&w, path, 0, &err), 0);
    gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_writer_set_u32(w, "llama.block_count", 3);
    int32_t heads[2] = {8, 8};
    gguf_writer_set_arr(w, "llama.attention.head_count", GGUF_T_INT32, heads, 2);
    assert_int_equal(gguf_writer_finish(w, &err), 0);
    gguf_file *f = NULL;
    if (gguf_open(&f, path, &err)) fail_msg("%s", err.msg);
    gguf_model_summary s;
    assert_int_equal(gguf_model_summary_compute(f, &s, &err), WK_EFORMAT);
    assert_non_null(strstr(err.msg, "llama.attention.head_count"));
    gguf_close(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_golden_model_loads_and_matches_the_manifest),
        cmocka_unit_test(test_every_gguf_in_the_models_folder_opens),
        cmocka_unit_test(test_writer_round_trips_every_value_type_and_tensor_data),
        cmocka_unit_test(test_writer_reproduces_llama_cpp_files_byte_for_byte),
        cmocka_unit_test(test_writer_records_nondefault_alignment_and_replaces_keys),
        cmocka_unit_test(test_writer_abort_and_short_data_leave_no_file),
        cmocka_unit_test(test_writer_rejects_bad_tensors_and_reports_at_begin),
        cmocka_unit_test(test_lookup_scales_to_many_tensors),
        cmocka_unit_test(test_getters_convert_integers_and_reject_mismatches),
        cmocka_unit_test(test_small_valid_image_opens),
        cmocka_unit_test(test_truncation_at_every_offset_is_rejected),
        cmocka_unit_test(test_corrupting_every_byte_never_crashes),
        cmocka_unit_test(test_bad_magic_and_versions_are_rejected),
        cmocka_unit_test(test_hostile_counts_and_lengths_are_rejected_before_allocation),
        cmocka_unit_test(test_malformed_metadata_is_rejected),
        cmocka_unit_test(test_malformed_tensor_infos_are_rejected),
        cmocka_unit_test(test_open_names_the_path_in_every_error),
        cmocka_unit_test(test_tensor_classes_follow_names),
        cmocka_unit_test(test_bits_per_weight_come_from_actual_bytes),
        cmocka_unit_test(test_summary_and_cache_sizes_of_hybrid_golden_model),
        cmocka_unit_test(test_cache_sizes_match_published_qwen35_27b_numbers),
        cmocka_unit_test(test_summary_rejects_inconsistent_layer_keys),
    };
    return WK_RUN_GROUP_TESTS(tests, make_tmpdir, remove_tmpdir);
}
