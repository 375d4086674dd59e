/* AMX int8 prefill path of the CPU matmul (matmul_amx_avx512.c). Internal. */
#ifndef WICK_BACKEND_CPU_MATMUL_AMX_H
#define WICK_BACKEND_CPU_MATMUL_AMX_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/matmul.h"

/* Sub-block size G (32 or 16) the AMX path uses for a weight type, 0 if it
 * has no AMX path. Pure function, no CPU check. */
int cpu_amx_group(enum qt_type type);

/* 1 if this CPU and OS let us run the AMX path for the type (requests the
 * tile state permission from Linux on each call; cheap and idempotent). */
int cpu_amx_usable(enum qt_type type);

/* Scratch bytes cpu_matmul_amx needs for n activation rows of k and the
 * given number of threads (64-byte aligned buffer). */
size_t cpu_amx_scratch_bytes(enum qt_type type, int64_t n, int64_t k, int threads);

/* Y rows (i < n) = W · X row (x_rows ? x_rows[i] : i); y rows are compact,
 * y_stride floats apart. Caller checked cpu_amx_usable and the shapes.
 * Returns 0, or -1 if scratch is too small / misaligned (nothing done). */
int cpu_matmul_amx(wk_pool *pool, const cpu_weight *w, const float *x, int64_t x_stride, const int32_t *x_rows,
                   int64_t n, float *y, int64_t y_stride, void *scratch, size_t scratch_bytes);

#endif
