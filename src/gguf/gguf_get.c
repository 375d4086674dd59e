/* Typed metadata getters and array element access over a parsed GGUF file. */
#include "gguf/gguf_internal.h"

#include <inttypes.h>
#include <math.h>

static int is_unsigned(enum gguf_value_type t)
{
    return t == GGUF_T_UINT8 || t == GGUF_T_UINT16 || t == GGUF_T_UINT32 || t == GGUF_T_UINT64;
}

static int is_signed(enum gguf_value_type t)
{
    return t == GGUF_T_INT8 || t == GGUF_T_INT16 || t == GGUF_T_INT32 || t == GGUF_T_INT64;
}

static int is_float(enum gguf_value_type t) { return t == GGUF_T_FLOAT32 || t == GGUF_T_FLOAT64; }

bool gguf_type_is_integer(enum gguf_value_type t) { return is_unsigned(t) || is_signed(t) || t == GGUF_T_BOOL; }

static const gguf_kv *find_or_fail(const gguf_file *f, const char *key, wk_error *err)
{
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) wk_fail(err, WK_ENOTFOUND, "key %s: not found", key);
    return kv;
}

static int wrong_type(const char *key, const gguf_kv *kv, const char *want, wk_error *err)
{
    if (kv->type == GGUF_T_ARRAY)
        return wk_fail(err, WK_EFORMAT, "key %s: is an array of %s, expected %s", key,
                       gguf_value_type_name(kv->arr_type), want);
    return wk_fail(err, WK_EFORMAT, "key %s: has type %s, expected %s", key, gguf_value_type_name(kv->type),
                   want);
}

int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, wk_error *err)
{
    const gguf_kv *kv = find_or_fail(f, key, err);
    if (!kv) return WK_ENOTFOUND;
    if (is_unsigned(kv->type)) {
        *out = kv->v.u64;
        return 0;
    }
    if (is_signed(kv->type)) {
        if (kv->v.i64 < 0)
            return wk_fail(err, WK_EFORMAT, "key %s: value %" PRId64 " is negative, expected an unsigned integer",
                           key, kv->v.i64);
        *out = (uint64_t)kv->v.i64;
        return 0;
    }
    return wrong_type(key, kv, "an integer", err);
}

int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, wk_error *err)
{
    const gguf_kv *kv = find_or_fail(f, key, err);
    if (!kv) return WK_ENOTFOUND;
    if (is_signed(kv->type)) {
        *out = kv->v.i64;
        return 0;
    }
    if (is_unsigned(kv->type)) {
        if (kv->v.u64 > (uint64_t)INT64_MAX)
            return wk_fail(err, WK_EFORMAT, "key %s: value %" PRIu64 " does not fit a signed 64-bit integer", key,
                           kv->v.u64);
        *out = (int64_t)kv->v.u64;
        return 0;
    }
    return wrong_type(key, kv, "an integer", err);
}

int gguf_get_f64(const gguf_file *f, const char *key, double *out, wk_error *err)
{
    const gguf_kv *kv = find_or_fail(f, key, err);
    if (!kv) return WK_ENOTFOUND;
    if (is_float(kv->type)) *out = kv->v.f64;
    else if (is_unsigned(kv->type)) *out = (double)kv->v.u64;
    else if (is_signed(kv->type)) *out = (double)kv->v.i64;
    else return wrong_type(key, kv, "a number", err);
    return 0;
}

int gguf_get_bool(const gguf_file *f, const char *key, bool *out, wk_error *err)
{
    const gguf_kv *kv = find_or_fail(f, key, err);
    if (!kv) return WK_ENOTFOUND;
    if (kv->type != GGUF_T_BOOL) return wrong_type(key, kv, "bool", err);
    *out = kv->v.u64 != 0;
    return 0;
}

int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, wk_error *err)
{
    const gguf_kv *kv = find_or_fail(f, key, err);
    if (!kv) return WK_ENOTFOUND;
    if (kv->type != GGUF_T_STRING) return wrong_type(key, kv, "string", err);
    *out = kv->v.str;
    return 0;
}

int gguf_get_u64_or(const gguf_file *f, const char *key, uint64_t def, uint64_t *out, wk_error *err)
{
    if (!gguf_find_kv(f, key)) {
        *out = def;
        return 0;
    }
    return gguf_get_u64(f, key, out, err);
}

int gguf_get_f64_or(const gguf_file *f, const char *key, double def, double *out, wk_error *err)
{
    if (!gguf_find_kv(f, key)) {
        *out = def;
        return 0;
    }
    return gguf_get_f64(f, key, out, err);
}

/* ---- arrays ---- */

int64_t gguf_arr_i64(const gguf_kv *kv, uint64_t i)
{
    if (kv->type != GGUF_T_ARRAY || i >= kv->arr_count) return 0;
    size_t sz = gguf_scalar_size(kv->arr_type);
    const uint8_t *p = kv->arr_data + i * sz;
    switch (kv->arr_type) {
    case GGUF_T_UINT8: case GGUF_T_BOOL: return p[0];
    case GGUF_T_INT8: return (int8_t)p[0];
    case GGUF_T_UINT16: return gguf_rd16(p);
    case GGUF_T_INT16: return (int16_t)gguf_rd16(p);
    case GGUF_T_UINT32: return gguf_rd32(p);
    case GGUF_T_INT32: return (int32_t)gguf_rd32(p);
    case GGUF_T_UINT64: case GGUF_T_INT64: return (int64_t)gguf_rd64(p);
    default: return 0;
    }
}

double gguf_arr_f64(const gguf_kv *kv, uint64_t i)
{
    if (kv->type != GGUF_T_ARRAY || i >= kv->arr_count) return 0.0;
    const uint8_t *p = kv->arr_data + i * gguf_scalar_size(kv->arr_type);
    switch (kv->arr_type) {
    case GGUF_T_FLOAT32: {
        uint32_t b = gguf_rd32(p);
        float x;
        memcpy(&x, &b, 4);
        return x;
    }
    case GGUF_T_FLOAT64: {
        uint64_t b = gguf_rd64(p);
        double x;
        memcpy(&x, &b, 8);
        return x;
    }
    case GGUF_T_UINT64: return (double)gguf_rd64(p);
    case GGUF_T_STRING: case GGUF_T_ARRAY: return 0.0;
    default: return (double)gguf_arr_i64(kv, i);
    }
}

gguf_str gguf_arr_str(const gguf_kv *kv, uint64_t i)
{
    gguf_str s = {"", 0};
    if (kv->type != GGUF_T_ARRAY || kv->arr_type != GGUF_T_STRING || i >= kv->arr_count ||
        !kv->arr_str_offsets)
        return s;
    const uint8_t *p = kv->arr_data + kv->arr_str_offsets[i];
    s.len = gguf_rd64(p);
    s.ptr = (const char *)(p + 8);
    return s;
}

int gguf_get_u32_per_layer(const gguf_file *f, const char *key, uint32_t n_layer, uint32_t *out,
                           wk_error *err)
{
    const gguf_kv *kv = find_or_fail(f, key, err);
    if (!kv) return WK_ENOTFOUND;
    if (kv->type != GGUF_T_ARRAY) {
        uint64_t v;
        int rc = gguf_get_u64(f, key, &v, err);
        if (rc) return rc;
        if (v > UINT32_MAX)
            return wk_fail(err, WK_EFORMAT, "key %s: value %" PRIu64 " does not fit 32 bits", key, v);
        for (uint32_t i = 0; i < n_layer; i++) out[i] = (uint32_t)v;
        return 0;
    }
    if (!is_unsigned(kv->arr_type) && !is_signed(kv->arr_type))
        return wk_fail(err, WK_EFORMAT, "key %s: is an array of %s, expected integers", key,
                       gguf_value_type_name(kv->arr_type));
    if (kv->arr_count != n_layer)
        return wk_fail(err, WK_EFORMAT, "key %s: array has %" PRIu64 " entries, expected one per layer (%u)",
                       key, kv->arr_count, n_layer);
    for (uint32_t i = 0; i < n_layer; i++) {
        int64_t v = gguf_arr_i64(kv, i);
        if (kv->arr_type == GGUF_T_UINT64 ? (uint64_t)v > UINT32_MAX : (v < 0 || v > (int64_t)UINT32_MAX))
            return wk_fail(err, WK_EFORMAT, "key %s: entry %u = %" PRId64 " is out of range for a count", key, i,
                           v);
        out[i] = (uint32_t)v;
    }
    return 0;
}
