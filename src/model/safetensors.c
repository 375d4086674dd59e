/* safetensors reader (see safetensors.h). */
#include "model/safetensors.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "util/f16.h"
#include "util/mapfile.h"

/* A header is a few hundred bytes per tensor; 100 MB is far beyond any real
 * file (Hugging Face's own reader uses the same cap). */
#define ST_MAX_HEADER (100u * 1000 * 1000)
#define ST_MAX_TENSORS (1u << 20)

struct st_file {
    wk_mapfile map;
    char *path;
    st_tensor *tensors;
    size_t n;
};

static const struct {
    const char *name;
    enum st_dtype t;
    size_t size;
} k_dtypes[] = {
    {"F32", ST_F32, 4},  {"F16", ST_F16, 2}, {"BF16", ST_BF16, 2}, {"F64", ST_F64, 8},
    {"I64", ST_I64, 8},  {"I32", ST_I32, 4}, {"I16", ST_I16, 2},   {"I8", ST_I8, 1},
    {"U8", ST_U8, 1},    {"BOOL", ST_BOOL, 1}, {"F8_E4M3", ST_F8_E4M3, 1}, {"F8_E5M2", ST_F8_E5M2, 1},
};

const char *st_dtype_name(enum st_dtype t)
{
    for (size_t i = 0; i < sizeof k_dtypes / sizeof k_dtypes[0]; i++)
        if (k_dtypes[i].t == t) return k_dtypes[i].name;
    return "?";
}

size_t st_dtype_size(enum st_dtype t)
{
    for (size_t i = 0; i < sizeof k_dtypes / sizeof k_dtypes[0]; i++)
        if (k_dtypes[i].t == t) return k_dtypes[i].size;
    return 0;
}

static int dtype_from_name(const char *s, enum st_dtype *out)
{
    for (size_t i = 0; i < sizeof k_dtypes / sizeof k_dtypes[0]; i++)
        if (!strcmp(s, k_dtypes[i].name)) {
            *out = k_dtypes[i].t;
            return 0;
        }
    return -1;
}

void st_close(st_file *f)
{
    if (!f) return;
    for (size_t i = 0; i < f->n; i++) free(f->tensors[i].name);
    free(f->tensors);
    free(f->path);
    wk_mapfile_close(&f->map);
    free(f);
}

static int cmp_by_offset(const void *a, const void *b)
{
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    return (x->data > y->data) - (x->data < y->data);
}

/* Parses one header entry into t. data/data_size: the data section. */
static int parse_entry(const char *path, const char *name, json_t *v, const uint8_t *data, uint64_t data_size,
                       st_tensor *t, wk_error *err)
{
    if (!json_is_object(v)) return wk_fail(err, WK_EFORMAT, "%s: tensor %s: entry is not an object", path, name);
    const char *dt = json_string_value(json_object_get(v, "dtype"));
    if (!dt) return wk_fail(err, WK_EFORMAT, "%s: tensor %s: dtype missing", path, name);
    if (dtype_from_name(dt, &t->dtype))
        return wk_fail(err, WK_EFORMAT, "%s: tensor %s: unknown dtype '%.32s'", path, name, dt);
    json_t *shape = json_object_get(v, "shape");
    if (!json_is_array(shape) || json_array_size(shape) > ST_MAX_DIMS)
        return wk_fail(err, WK_EFORMAT, "%s: tensor %s: shape is not an array of at most %d integers", path, name,
                       ST_MAX_DIMS);
    t->n_dims = (int)json_array_size(shape);
    uint64_t n = 1;
    for (int d = 0; d < t->n_dims; d++) {
        json_t *e = json_array_get(shape, (size_t)d);
        if (!json_is_integer(e) || json_integer_value(e) < 0)
            return wk_fail(err, WK_EFORMAT, "%s: tensor %s: shape[%d] is not a non-negative integer", path, name, d);
        uint64_t s = (uint64_t)json_integer_value(e);
        if (s && n > UINT64_MAX / s)
            return wk_fail(err, WK_EFORMAT, "%s: tensor %s: element count overflows", path, name);
        n *= s;
        t->shape[d] = (int64_t)s;
    }
    t->n_elements = n;
    size_t es = st_dtype_size(t->dtype);
    if (n > UINT64_MAX / es) return wk_fail(err, WK_EFORMAT, "%s: tensor %s: byte count overflows", path, name);
    t->n_bytes = n * es;
    json_t *off = json_object_get(v, "data_offsets");
    if (!json_is_array(off) || json_array_size(off) != 2 || !json_is_integer(json_array_get(off, 0)) ||
        !json_is_integer(json_array_get(off, 1)))
        return wk_fail(err, WK_EFORMAT, "%s: tensor %s: data_offsets is not [begin, end]", path, name);
    json_int_t b = json_integer_value(json_array_get(off, 0)), e = json_integer_value(json_array_get(off, 1));
    if (b < 0 || e < b || (uint64_t)e > data_size)
        return wk_fail(err, WK_EFORMAT,
                       "%s: tensor %s: data_offsets [%lld, %lld] outside the data section (%" PRIu64 " bytes)", path,
                       name, (long long)b, (long long)e, data_size);
    if ((uint64_t)(e - b) != t->n_bytes)
        return wk_fail(err, WK_EFORMAT, "%s: tensor %s: %lld bytes for %" PRIu64 " %s elements (%" PRIu64 " bytes)",
                       path, name, (long long)(e - b), n, dt, t->n_bytes);
    t->data = data + b;
    t->name = strdup(name);
    if (!t->name) return wk_fail(err, WK_ENOMEM, "out of memory");
    return 0;
}

int st_open(st_file **out, const char *path, wk_error *err)
{
    *out = NULL;
    st_file *f = calloc(1, sizeof *f);
    if (!f) return wk_fail(err, WK_ENOMEM, "out of memory");
    f->map.fd = -1;
    int rc = wk_mapfile_open(&f->map, path, err);
    if (rc) {
        free(f);
        return rc;
    }
    json_t *root = NULL;
    const st_tensor **order = NULL;
    f->path = strdup(path);
    if (!f->path) {
        rc = wk_fail(err, WK_ENOMEM, "out of memory");
        goto fail;
    }
    if (f->map.size < 8) {
        rc = wk_fail(err, WK_EFORMAT, "%s: %zu bytes, too short for a safetensors file", path, f->map.size);
        goto fail;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | f->map.data[i];
    if (hlen > ST_MAX_HEADER || hlen > f->map.size - 8) {
        rc = wk_fail(err, WK_EFORMAT, "%s: header length %" PRIu64 " exceeds the file (%zu bytes) or the cap", path,
                     hlen, f->map.size);
        goto fail;
    }
    json_error_t je;
    root = json_loadb((const char *)f->map.data + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(root)) {
        rc = wk_fail(err, WK_EFORMAT, "%s: header is not a JSON object (%s)", path, root ? "not an object" : je.text);
        goto fail;
    }
    const uint8_t *data = f->map.data + 8 + hlen;
    uint64_t data_size = f->map.size - 8 - hlen;
    size_t n = json_object_size(root);
    if (n > ST_MAX_TENSORS) {
        rc = wk_fail(err, WK_EFORMAT, "%s: %zu header entries (at most %u)", path, n, ST_MAX_TENSORS);
        goto fail;
    }
    f->tensors = calloc(n ? n : 1, sizeof *f->tensors);
    if (!f->tensors) {
        rc = wk_fail(err, WK_ENOMEM, "out of memory");
        goto fail;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "__metadata__")) {
            if (!json_is_object(v)) {
                rc = wk_fail(err, WK_EFORMAT, "%s: __metadata__ is not an object", path);
                goto fail;
            }
            continue;
        }
        if ((rc = parse_entry(path, key, v, data, data_size, &f->tensors[f->n], err))) goto fail;
        f->n++;
    }
    /* no two tensors may share bytes */
    order = malloc((f->n ? f->n : 1) * sizeof *order);
    if (!order) {
        rc = wk_fail(err, WK_ENOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < f->n; i++) order[i] = &f->tensors[i];
    qsort(order, f->n, sizeof *order, cmp_by_offset);
    for (size_t i = 1; i < f->n; i++)
        if (order[i - 1]->data + order[i - 1]->n_bytes > order[i]->data) {
            rc = wk_fail(err, WK_EFORMAT, "%s: tensors %s and %s overlap", path, order[i - 1]->name, order[i]->name);
            goto fail;
        }
    free(order);
    json_decref(root);
    *out = f;
    return 0;
fail:
    free(order);
    json_decref(root);
    st_close(f);
    return rc;
}

size_t st_tensor_count(const st_file *f) { return f->n; }

const st_tensor *st_tensor_at(const st_file *f, size_t i) { return i < f->n ? &f->tensors[i] : NULL; }

const st_tensor *st_find(const st_file *f, const char *name)
{
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

int st_read_f32(const st_tensor *t, uint64_t first, uint64_t n, float *dst, wk_error *err)
{
    if (first > t->n_elements || n > t->n_elements - first)
        return wk_fail(err, WK_EINVAL, "tensor %s: elements %" PRIu64 "..+%" PRIu64 " outside %" PRIu64, t->name,
                       first, n, t->n_elements);
    const uint8_t *p = t->data + first * st_dtype_size(t->dtype);
    switch (t->dtype) {
    case ST_F32:
        memcpy(dst, p, n * 4);
        return 0;
    case ST_F16:
        for (uint64_t i = 0; i < n; i++) dst[i] = wk_f16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return 0;
    case ST_BF16:
        for (uint64_t i = 0; i < n; i++) dst[i] = wk_bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return 0;
    default:
        return wk_fail(err, WK_EUNSUPPORTED, "tensor %s: dtype %s (wick converts F32, F16 and BF16)", t->name,
                       st_dtype_name(t->dtype));
    }
}
