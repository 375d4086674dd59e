/* CPU matrix multiply on quantized weights: Y[N][M] = X[N][K] · Wᵀ.
 *
 * W is M rows of K elements of one tensor type (quant/qtypes.h), rows
 * row_bytes apart (a GGUF 2-D tensor: M = ne[1], K = ne[0]). X and Y are F32.
 * Each activation row is first rounded to W's partner format (Q8_0 / Q8_1 /
 * Q8_K / F16 / BF16 / F32, see quant/quant.h) exactly like llama.cpp's CPU
 * backend, then multiplied block by block with integer dot products.
 *
 * Work runs on a wk_pool (NULL = the calling thread only). N < 8 (decode,
 * drafts): the output rows M are split over the threads and W is streamed
 * once, 16 rows side by side from the repacked copy where there is one
 * (cpu_weight_prepare), else 4 plain rows side by side. N >= 8 (prefill) on AVX-512 CPUs: W is
 * unpacked 16 rows at a time into int8 panels that are reused for all X rows
 * (AMX int8 tiles where available, else AVX-512 VNNI); other CPUs/types use
 * tiles of 32 W rows × 64 X rows. Results do not depend on the thread count
 * (each Y element is the same block-by-block sum whatever the split);
 * different N may take different kernels, equal up to F32 rounding.
 * Environment: WICK_ISA caps the ISA (util/cpu.h); WICK_NO_AMX=1 disables
 * the AMX int8 path (for comparisons). */
#ifndef WICK_BACKEND_CPU_MATMUL_H
#define WICK_BACKEND_CPU_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "quant/qtypes.h"
#include "util/err.h"
#include "util/threadpool.h"

/* From this many activation rows on, the panel kernels run (below it every type takes
 * kernels whose per-row results do not depend on N; the panels round differently).
 * Speculative verification batches stay below it to see plain decoding's numbers. */
#define CPU_MATMUL_PANEL_MIN_N 8

struct cpu_packed; /* opaque repacked layout, see cpu_weight_prepare */

/* A weight matrix. Borrowing view: `data` is not owned (usually the mmap'd
 * GGUF). `packed` is NULL for the plain layout, or owned by this struct after
 * cpu_weight_prepare (free it with cpu_weight_release). */
typedef struct cpu_weight {
    enum qt_type type;
    int64_t rows;     /* M: output features */
    int64_t cols;     /* K: input features, multiple of the type's block size */
    size_t row_bytes; /* distance between rows in bytes (>= qt_row_bytes) */
    const void *data; /* row 0 */
    struct cpu_packed *packed;
} cpu_weight;

/* A plain (not repacked) view of an M x K weight; nothing is allocated.
 * For MoE, data points at one expert's M x K slice of the 3-D tensor. */
static inline cpu_weight cpu_weight_view(enum qt_type type, const void *data, int64_t rows,
                                         int64_t cols, size_t row_bytes)
{
    cpu_weight w = {type, rows, cols, row_bytes, data, NULL};
    return w;
}

/* Prepares w for repeated use (call once at load time): validates the shape
 * and, for Q8_0, Q4_K and Q6_K on AVX-512 VNNI CPUs, builds a repacked copy
 * of the rows (matmul_packed.h: 16 rows interleaved in VNNI order, the same
 * bytes as the plain rows within 3 %) that both the decode kernels and the
 * prefill panels read, so after loading the plain rows are not read by
 * matmuls (they stay mapped: embeddings read rows of them). The copy is
 * anonymous memory of the weight's size. WICK_NO_REPACK=1 skips it (for
 * before/after comparisons). w->data must stay valid either way.
 * Returns 0, WK_EINVAL (bad shape/type) or WK_ENOMEM. */
int cpu_weight_prepare(cpu_weight *w, wk_error *err);

/* The same with the repacking split over pool's threads (NULL: the caller's). */
int cpu_weight_prepare_on(wk_pool *pool, cpu_weight *w, wk_error *err);

/* Frees what cpu_weight_prepare allocated; w becomes a plain view again. */
void cpu_weight_release(cpu_weight *w);

/* Caller-owned scratch for quantized activations; grows on demand and is
 * reused across calls (zero-initialise it; free with cpu_scratch_free). Not
 * shared between concurrent calls. Passing NULL to the matmuls makes them
 * allocate per call instead. */
typedef struct cpu_scratch {
    void *buf;
    size_t cap;
} cpu_scratch;

void cpu_scratch_free(cpu_scratch *s);

/* Y[i][j] = Σ_k X[i][k] · W[j][k] for i < n, j < w->rows.
 * x: n rows of w->cols floats, x_stride floats apart; y: n rows of w->rows
 * floats, y_stride floats apart (overwritten, must not alias x).
 * Returns 0, WK_EINVAL (unsupported type, bad shape) or WK_ENOMEM. */
int cpu_matmul(wk_pool *pool, const cpu_weight *w, const float *x, int64_t x_stride, int64_t n,
               float *y, int64_t y_stride, cpu_scratch *scratch, wk_error *err);

/* Flags of cpu_matmul_ex / cpu_matmul_gather_ex. CPU_MM_ROWS_AS_ONE: every row of Y
 * comes out bit for bit as in a call of one row, whatever n (no panel kernels: the
 * decode-regime kernels over all rows, the weight still streamed once); batched
 * decoding of several sequences. */
enum { CPU_MM_ROWS_AS_ONE = 1 };
int cpu_matmul_ex(wk_pool *pool, const cpu_weight *w, const float *x, int64_t x_stride, int64_t n, float *y,
                  int64_t y_stride, cpu_scratch *scratch, unsigned flags, wk_error *err);

/* Gathered matmul for MoE: for i < n, row y + y_rows[i]*y_stride =
 * W · (row x + x_rows[i]*x_stride). w is one expert's matrix (plain view of
 * the expert's slice, or prepared). Rows of Y not listed are untouched; the
 * listed y_rows must be distinct. Same errors as cpu_matmul. */
int cpu_matmul_gather(wk_pool *pool, const cpu_weight *w, const float *x, int64_t x_stride,
                      const int32_t *x_rows, float *y, int64_t y_stride, const int32_t *y_rows,
                      int64_t n, cpu_scratch *scratch, wk_error *err);
int cpu_matmul_gather_ex(wk_pool *pool, const cpu_weight *w, const float *x, int64_t x_stride,
                         const int32_t *x_rows, float *y, int64_t y_stride, const int32_t *y_rows,
                         int64_t n, cpu_scratch *scratch, unsigned flags, wk_error *err);

#endif
