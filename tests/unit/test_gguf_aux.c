/* Auxiliary tables (gguf/gguf_aux.h): read in place — the tensor data is a
 * view into a file mapping of that very path (/proc/self/maps says so), its
 * bytes are the file's, opening does not make them resident — counted apart,
 * and a model file is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/gguf_aux.h"
#include "testutil.h"

#define TABLE_FLOATS (4u << 20) /* 16 MiB: far more than one would copy by accident unnoticed */

static void write_table(const char *path, const char *type, const char *arch)
{
    gguf_writer *w = NULL;
    wk_error err = {0};
    assert_int_equal(gguf_writer_new(&w, path, 0, &err), 0);
    if (type) gguf_writer_set_str(w, "general.type", type);
    if (arch) gguf_writer_set_str(w, "general.architecture", arch);
    gguf_writer_set_str(w, "aux.kind", "ngram");
    int64_t ne[4] = {1024, TABLE_FLOATS / 1024, 1, 1};
    gguf_writer_add_tensor(w, "ngram.scores", 0 /* F32 */, 2, ne);
    assert_int_equal(gguf_writer_begin_data(w, &err), 0);
    float *row = malloc(1024 * sizeof(float));
    for (uint32_t r = 0; r < TABLE_FLOATS / 1024; r++) {
        for (int i = 0; i < 1024; i++) row[i] = (float)(r * 1024 + (uint32_t)i);
        assert_int_equal(gguf_writer_write_data(w, row, 1024 * sizeof(float), &err), 0);
    }
    free(row);
    assert_int_equal(gguf_writer_finish(w, &err), 0);
}

/* Resident set of this process in bytes (-1 without /proc). */
static long rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = -1;
    if (!f) return -1;
    if (fscanf(f, "%ld %ld", &size, &res) != 2) res = -1;
    fclose(f);
    return res < 0 ? -1 : res * sysconf(_SC_PAGESIZE);
}

/* Whether [p, p+n) lies in a mapping of path, per /proc/self/maps. */
static int mapped_from(const void *p, size_t n, const char *path)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    char line[4096];
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char file[3000] = "";
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %2999s", &lo, &hi, file) < 2) continue;
        if ((unsigned long)p >= lo && (unsigned long)p + n <= hi && !strcmp(file, path)) found = 1;
    }
    fclose(f);
    return found;
}

static void test_table_is_read_in_place(void **state)
{
    (void)state;
    char path[] = "/tmp/wick-aux-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    write_table(path, "aux", NULL);
    gguf_aux a;
    wk_error err = {0};
    long rss0 = rss_bytes();
    assert_int_equal(gguf_aux_open(&a, path, &err), 0);
    long rss1 = rss_bytes();
    /* a copy would add the table's 16 MiB to the resident set; a mapping adds nothing until read */
    if (rss0 >= 0 && rss1 >= 0) assert_true(rss1 - rss0 < (4l << 20));
    assert_string_equal(a.kind, "ngram");
    assert_int_equal(a.tensor_bytes, (uint64_t)TABLE_FLOATS * 4);
    assert_true(a.file_bytes > a.tensor_bytes);
    const gguf_tensor *t = gguf_aux_tensor(&a, "ngram.scores");
    assert_non_null(t);
    assert_null(gguf_aux_tensor(&a, "missing"));
    if (mapped_from(t->data, t->n_bytes, path) < 0) {
        printf("no /proc/self/maps: cannot tell where the data lives\n");
        gguf_aux_close(&a);
        unlink(path);
        WK_SKIP();
    }
    assert_int_equal(mapped_from(t->data, t->n_bytes, path), 1);
    const float *v = t->data;
    assert_true(v[0] == 0.0f && v[TABLE_FLOATS - 1] == (float)(TABLE_FLOATS - 1));
    gguf_aux_close(&a);
    unlink(path);
}

static void test_model_files_are_not_tables(void **state)
{
    (void)state;
    char path[] = "/tmp/wick-aux-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    gguf_aux a;
    wk_error err = {0};
    write_table(path, NULL, "qwen3");
    assert_int_equal(gguf_aux_open(&a, path, &err), WK_EINVAL);
    assert_non_null(strstr(err.msg, "not an auxiliary table"));
    assert_non_null(strstr(err.msg, "qwen3"));
    write_table(path, "model", NULL);
    assert_int_equal(gguf_aux_open(&a, path, &err), WK_EINVAL);
    /* general.type "aux" wins over a stray architecture key */
    write_table(path, "aux", "qwen3");
    assert_int_equal(gguf_aux_open(&a, path, &err), 0);
    gguf_aux_close(&a);
    /* no type and no architecture: a bare table */
    write_table(path, NULL, NULL);
    assert_int_equal(gguf_aux_open(&a, path, &err), 0);
    gguf_aux_close(&a);
    unlink(path);
    assert_int_equal(gguf_aux_open(&a, path, &err), WK_EIO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_is_read_in_place),
        cmocka_unit_test(test_model_files_are_not_tables),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
