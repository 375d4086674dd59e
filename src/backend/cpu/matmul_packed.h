/* Load-time repacked weights ("row-interleaved" layouts) for the CPU matmul.
 * Internal to backend/cpu.
 *
 * A plain GGUF row keeps each row's blocks together, so a kernel that makes
 * 16 outputs at once reads 16 separate streams and must turn 16 half-float
 * scales into floats one by one. The packed form groups 16 rows: per block,
 * the 16 rows' codes are stored in VNNI order (64-byte line q holds bytes
 * 4q..4q+3 of every row, row r at offset 4r) and their 16 scales side by side.
 * One cache line then feeds one VPDPBUSD whose 16 int32 lanes are the 16
 * rows, and the scales convert with one instruction. Decode streams the
 * group's bytes strictly in order; prefill panels are a copy of a group.
 *
 * Q8_0 (layout R16_Q8_0), per group of 16 rows (missing rows are zero):
 *   codes:  blocks × 512 bytes, each code stored XOR 0x80 (code + 128 as an
 *           unsigned byte, VPDPBUSD's unsigned operand);
 *   scales: blocks × 16 half floats.
 * The same bytes as the plain rows (544 per 16 rows per block), so decode
 * reads no more memory; the plain rows are no longer touched by matmuls.
 *
 * Results equal the plain kernels' up to F32 summation order: per block the
 * integer dot product is exact (Σ (w+128)·a − 128·Σa = Σ w·a).
 *
 * Q4_K (layout R16_Q4_K), per group and super-block of 256, 2368 bytes
 * (plain: 2304), all 64-byte aligned:
 *   codes:  2048 bytes: for the 4 pairs of sub-blocks p and quads q, line
 *           8p+q holds bytes 32p+4q..32p+4q+3 of each row's qs (low nibbles:
 *           codes of sub-block 2p, high nibbles: sub-block 2p+1);
 *   sc, mn: 8 sub-blocks × 16 rows of 6-bit scales and mins, one byte each;
 *   d, dmin: 16 half floats each.
 *
 * Q6_K (layout R16_Q6_K), per group and super-block, 3392 bytes (plain:
 * 3360): per half h (of 128 elements) 24 lines: 16 of ql (line j: bytes
 * 64h+4j..+3 of each row's ql) then 8 of qh (line j: bytes 32h+4j..+3);
 * then the 16 int8 scales × 16 rows ([sub-block][row]), 16 half-float d,
 * 32 bytes of padding. */
#ifndef WICK_BACKEND_CPU_MATMUL_PACKED_H
#define WICK_BACKEND_CPU_MATMUL_PACKED_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/matmul.h"

#define CPU_PACK_ROWS 16

enum cpu_pack_layout { CPU_PACK_NONE = 0, CPU_PACK_R16_Q8_0, CPU_PACK_R16_Q4_K, CPU_PACK_R16_Q6_K };

#define CPU_PACK_Q4K_BLOCK 2368
#define CPU_PACK_Q6K_BLOCK 3392

struct cpu_packed {
    enum cpu_pack_layout layout;
    int64_t rows, groups, blocks; /* blocks: of 32 (Q8_0) or 256 (K-quants) elements */
    size_t group_bytes;           /* multiple of 64 */
    uint8_t *data;      /* groups × group_bytes, 64-byte aligned */
};

/* Layout this CPU (capped by WICK_ISA) uses for the type, or NONE. Setting
 * WICK_NO_REPACK=1 turns repacking off (before/after comparisons). */
enum cpu_pack_layout cpu_pack_layout_for(enum qt_type type);

/* Builds the packed copy of w's rows, groups split over pool (may be NULL);
 * *out = NULL when the type has no layout here. Returns 0 or WK_ENOMEM. */
int cpu_pack_build(wk_pool *pool, const cpu_weight *w, struct cpu_packed **out, wk_error *err);

void cpu_pack_free(struct cpu_packed *p);

/* Rows [row0, row0 + n) of p as a packed weight of n rows, built in *view
 * (no copy): view when row0 starts a group, else NULL (use the plain rows).
 * Rows past n in the last group are computed by the kernels but never stored. */
struct cpu_packed *cpu_pack_rows(const struct cpu_packed *p, int64_t row0, int64_t n, struct cpu_packed *view);

/* Per activation row i and block b of a Q8_0-quantized activation: the
 * block's scale as float and 128·Σ codes (what the +128 weight codes add). */
void cpu_pack_act_terms(const void *act_row, int64_t blocks, float *scale, int32_t *corr);

/* Decode kernel (AVX-512 VNNI): groups [g0, g1) against na activation rows
 * in the partner format (Q8_0 or Q8_K blocks, act_stride bytes apart; for
 * Q8_0 ascale/acorr from cpu_pack_act_terms, `blocks` entries per row,
 * unused for the K-quants). y[i*y_stride + row] for rows < p->rows. */
void cpu_pack_gemv_avx512(const struct cpu_packed *p, int64_t g0, int64_t g1, const uint8_t *act,
                          size_t act_stride, const float *ascale, const int32_t *acorr, int na, float *y,
                          int64_t y_stride);

/* Writes group g as a prefill panel (matmul_panel_avx512.c's form: codes in
 * VNNI order, +128 when flip80 is set, else signed; then float scales; then
 * zero mins). */
void cpu_pack_panel_avx512(const struct cpu_packed *p, int64_t g, uint8_t *panel, int flip80);

#endif
