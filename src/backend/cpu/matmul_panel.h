/* Panel matmul (prefill path of the CPU matmul on AVX-512 CPUs). Internal
 * to backend/cpu: matmul_panel_avx512.c (layout, unpacking, VNNI kernel,
 * driver) and matmul_amx_avx512.c (AMX tile kernel). */
#ifndef WICK_BACKEND_CPU_MATMUL_PANEL_H
#define WICK_BACKEND_CPU_MATMUL_PANEL_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/matmul.h"

#define CPU_PANEL_ROWS 16 /* weight rows per panel = activation rows per group */

enum cpu_panel_kernel { CPU_PANEL_NONE = 0, CPU_PANEL_VNNI, CPU_PANEL_AMX };

/* Sub-block size G (32 or 16) the panel path uses for a weight type, 0 if
 * the type has no panel path. */
int cpu_panel_group(enum qt_type type);

/* Best panel kernel this CPU (capped by WICK_ISA) and OS allow for the type. */
enum cpu_panel_kernel cpu_panel_kernel_for(enum qt_type type);

/* Bytes of 64-byte aligned scratch cpu_matmul_panel needs. */
size_t cpu_panel_scratch_bytes(enum qt_type type, int64_t n, int64_t k, int threads);

/* Y rows (i < n) = W · X row (x_rows ? x_rows[i] : i); y rows compact,
 * y_stride floats apart. Shapes are checked by the caller. Returns 0, or -1
 * (nothing done) if the kernel is NONE or the scratch too small/misaligned. */
int cpu_matmul_panel(wk_pool *pool, enum cpu_panel_kernel kernel, const cpu_weight *w, const float *x,
                     int64_t x_stride, const int32_t *x_rows, int64_t n, float *y, int64_t y_stride, void *scratch,
                     size_t scratch_bytes);

/* AMX pieces (matmul_amx_avx512.c). cpu_amx_request asks Linux for the tile
 * state (1 = granted). A thread brackets its tile work with begin/end;
 * cpu_amx_tile computes out[j][i] = Σ_blocks for 16 activations × 16 weights. */
int cpu_amx_request(void);
void cpu_amx_begin(int G);
void cpu_amx_end(void);
void cpu_amx_tile(const uint8_t *panel, const uint8_t *acts, const float *ascale, const float *asum, int64_t blocks,
                  int G, float out[CPU_PANEL_ROWS][CPU_PANEL_ROWS], int with_min);

#endif
