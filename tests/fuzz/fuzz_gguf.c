/* libFuzzer harness for the GGUF reader: any byte string must either open
 * cleanly (and then every record must be walkable) or fail with a message;
 * never crash, hang, leak or read out of bounds. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "gguf/gguf.h"
#include "gguf/gguf_stats.h"
#include "quant/qtypes.h"

static FILE *g_null;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_null) g_null = fopen("/dev/null", "w");
    gguf_file *f = NULL;
    wk_error err = {0};
    if (gguf_open_buffer(&f, data, size, &err) != 0) {
        /* a failure always says why, in one line */
        if (err.msg[0] == '\0' || strchr(err.msg, '\n')) __builtin_trap();
        return 0;
    }
    volatile uint64_t sink = 0;
    for (size_t i = 0; i < gguf_kv_count(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        if (gguf_find_kv(f, "") == kv) __builtin_trap(); /* keys are never empty */
        if (g_null) gguf_kv_print(g_null, kv, 8);
        if (kv->type == GGUF_T_ARRAY) {
            for (uint64_t j = 0; j < kv->arr_count; j++) {
                if (kv->arr_type == GGUF_T_STRING) {
                    gguf_str s = gguf_arr_str(kv, j);
                    if (s.len) sink += (uint8_t)s.ptr[s.len - 1];
                } else {
                    double d = gguf_arr_f64(kv, j);
                    uint64_t bits;
                    memcpy(&bits, &d, sizeof bits); /* any double, NaN included */
                    sink += (uint64_t)gguf_arr_i64(kv, j) + bits;
                }
            }
        }
    }
    for (size_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (gguf_find_tensor(f, t->name_z) != t) __builtin_trap();
        if (t->n_bytes) {
            const uint8_t *p = t->data;
            sink += p[0] + p[t->n_bytes - 1]; /* first and last byte must be readable */
        }
    }
    /* the stats layer reads the same metadata with its own rules */
    gguf_model_summary s;
    if (gguf_model_summary_compute(f, &s, &err) == 0) {
        sink += gguf_kv_bytes_per_token(f, &s, QT_F16);
        sink += gguf_kv_bytes_per_token(f, &s, QT_Q8_0);
    }
    gguf_weight_stats ws;
    gguf_weight_stats_compute(f, &ws);
    sink += ws.total.n_bytes;
    (void)sink;
    gguf_close(f);
    return 0;
}
