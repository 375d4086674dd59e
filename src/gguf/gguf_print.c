/* Human-readable rendering of one metadata value (`wick info -v`). */
#include "gguf/gguf_internal.h"

#include <inttypes.h>

/* Strings longer than this are cut (chat templates run to several KB). */
#define PRINT_STR_MAX 160

static void print_str(FILE *out, gguf_str s)
{
    fputc('"', out);
    uint64_t n = s.len < PRINT_STR_MAX ? s.len : PRINT_STR_MAX;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c == '\n') fputs("\\n", out);
        else if (c == '\t') fputs("\\t", out);
        else if (c < 0x20 || c == 0x7f) fprintf(out, "\\x%02x", c);
        else fputc(c, out); /* UTF-8 bytes pass through */
    }
    fputc('"', out);
    if (n < s.len) fprintf(out, "... (%" PRIu64 " bytes)", s.len);
}

static void print_scalar(FILE *out, enum gguf_value_type t, const gguf_kv *kv, uint64_t i, int is_arr)
{
    if (t == GGUF_T_STRING) {
        print_str(out, is_arr ? gguf_arr_str(kv, i) : kv->v.str);
        return;
    }
    if (t == GGUF_T_BOOL) {
        fputs((is_arr ? gguf_arr_i64(kv, i) : (int64_t)kv->v.u64) ? "true" : "false", out);
        return;
    }
    if (t == GGUF_T_FLOAT32 || t == GGUF_T_FLOAT64) {
        fprintf(out, "%.9g", is_arr ? gguf_arr_f64(kv, i) : kv->v.f64);
        return;
    }
    if (t == GGUF_T_UINT8 || t == GGUF_T_UINT16 || t == GGUF_T_UINT32 || t == GGUF_T_UINT64) {
        fprintf(out, "%" PRIu64, is_arr ? (uint64_t)gguf_arr_i64(kv, i) : kv->v.u64);
        return;
    }
    fprintf(out, "%" PRId64, is_arr ? gguf_arr_i64(kv, i) : kv->v.i64);
}

void gguf_kv_print(FILE *out, const gguf_kv *kv, size_t max_array_items)
{
    char key[96];
    gguf_fmt_name(key, sizeof key, kv->key.ptr, kv->key.len);
    if (kv->type != GGUF_T_ARRAY) {
        fprintf(out, "%s: %s = ", key, gguf_value_type_name(kv->type));
        print_scalar(out, kv->type, kv, 0, 0);
        fputc('\n', out);
        return;
    }
    fprintf(out, "%s: array[%s x %" PRIu64 "] = [", key, gguf_value_type_name(kv->arr_type), kv->arr_count);
    uint64_t n = kv->arr_count < max_array_items ? kv->arr_count : max_array_items;
    for (uint64_t i = 0; i < n; i++) {
        if (i) fputs(", ", out);
        print_scalar(out, kv->arr_type, kv, i, 1);
    }
    if (n < kv->arr_count) fprintf(out, "%s... %" PRIu64 " more", n ? ", " : "", kv->arr_count - n);
    fputs("]\n", out);
}
