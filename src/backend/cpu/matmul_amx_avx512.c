/* AMX int8 tile kernel of the panel matmul (see matmul_panel_avx512.c for
 * the data layout): per G block one TDPBSSD forms the 16×16 integer block
 * dot products of 16 activation rows and 16 weight rows; the vector unit
 * scales and accumulates them while the tile unit works on the next blocks. */
#pragma GCC target("amx-tile,amx-int8")

#include <immintrin.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "backend/cpu/matmul_panel.h"

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#define TILE CPU_PANEL_ROWS

int cpu_amx_request(void)
{
    /* Linux hands out the 8 KiB tile state only on request (idempotent, cheap). */
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

/* tiles 0..3: C (16 activations × 16 weights, int32); 4,5: A = activation
 * codes (16 rows × G bytes); 6,7: B = weight codes (G/4 rows × 64 bytes) */
void cpu_amx_begin(int G)
{
    amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 4; t++) c.rows[t] = TILE, c.colsb[t] = 64;
    c.rows[4] = c.rows[5] = TILE, c.colsb[4] = c.colsb[5] = (uint16_t)G;
    c.rows[6] = c.rows[7] = (uint8_t)(G / 4), c.colsb[6] = c.colsb[7] = 64;
    /* GCC does not see ldtilecfg read the struct and drops the stores
     * (observed with GCC 12): force them to memory first. */
    __asm__ __volatile__("" : : "r"(&c) : "memory");
    _tile_loadconfig(&c);
}

void cpu_amx_end(void) { _tile_release(); }

/* acc[j] (lanes = 16 weight rows) += C[j] · (scale_a[j] · scale_w) − sum_a[j] · min_w */
static inline __attribute__((always_inline)) void post_block(__m512 *acc, const int32_t *cbuf, const float *ws,
                                                             const float *wm, const float *as, const float *am,
                                                             int with_min)
{
    const __m512 wv = _mm512_load_ps(ws);
    const __m512 mv = with_min ? _mm512_load_ps(wm) : _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int j = 0; j < TILE; j++) {
        __m512 c = _mm512_cvtepi32_ps(_mm512_load_si512(cbuf + 16 * j));
        __m512 s = _mm512_mul_ps(wv, _mm512_set1_ps(as[j]));
        acc[j] = _mm512_fmadd_ps(c, s, acc[j]);
        if (with_min) acc[j] = _mm512_fnmadd_ps(_mm512_set1_ps(am[j]), mv, acc[j]);
    }
}

/* Issues the tile work of blocks b .. b+cnt-1 (cnt ≤ 4) into C tiles 0..3;
 * A/B operands alternate between tiles 4/6 and 5/7. */
static inline __attribute__((always_inline)) void issue_quad(const int8_t *codes, const uint8_t *acts, size_t tb,
                                                             int G, int64_t b, int cnt)
{
    _tile_zero(0);
    _tile_loadd(4, acts + b * tb, G);
    _tile_loadd(6, codes + b * tb, 64);
    _tile_dpbssd(0, 4, 6);
    if (cnt > 1) {
        _tile_zero(1);
        _tile_loadd(5, acts + (b + 1) * tb, G);
        _tile_loadd(7, codes + (b + 1) * tb, 64);
        _tile_dpbssd(1, 5, 7);
    }
    if (cnt > 2) {
        _tile_zero(2);
        _tile_loadd(4, acts + (b + 2) * tb, G);
        _tile_loadd(6, codes + (b + 2) * tb, 64);
        _tile_dpbssd(2, 4, 6);
    }
    if (cnt > 3) {
        _tile_zero(3);
        _tile_loadd(5, acts + (b + 3) * tb, G);
        _tile_loadd(7, codes + (b + 3) * tb, 64);
        _tile_dpbssd(3, 5, 7);
    }
}

/* 16 activations × 16 weight rows over all blocks. Software pipelined: the
 * tile unit computes the next four blocks while the vector unit scales the
 * current four (tile stores and loads have long latencies). */
static inline __attribute__((always_inline)) void tile_gemm(const uint8_t *panel, const uint8_t *acts,
                                                            const float *ascale, const float *asum,
                                                            int64_t blocks, int G, float out[TILE][TILE],
                                                            int with_min)
{
    const int8_t *codes = (const int8_t *)panel;
    const float *wscale = (const float *)(panel + (size_t)blocks * TILE * (size_t)G);
    const float *wmin = wscale + blocks * TILE;
    const size_t tb = TILE * (size_t)G;
    int32_t cbuf[4][256] __attribute__((aligned(64)));
    __m512 acc[TILE];
#pragma GCC unroll 16
    for (int i = 0; i < TILE; i++) acc[i] = _mm512_setzero_ps();
    issue_quad(codes, acts, tb, G, 0, blocks < 4 ? (int)blocks : 4);
    for (int64_t b = 0; b < blocks; b += 4) {
        const int cnt = blocks - b < 4 ? (int)(blocks - b) : 4;
        _tile_stored(0, cbuf[0], 64);
        if (cnt > 1) _tile_stored(1, cbuf[1], 64);
        if (cnt > 2) _tile_stored(2, cbuf[2], 64);
        if (cnt > 3) _tile_stored(3, cbuf[3], 64);
        if (b + 4 < blocks) issue_quad(codes, acts, tb, G, b + 4, blocks - b - 4 < 4 ? (int)(blocks - b - 4) : 4);
        for (int q = 0; q < cnt; q++)
            post_block(acc, cbuf[q], wscale + (b + q) * TILE, wmin + (b + q) * TILE, ascale + (b + q) * TILE,
                       asum + (b + q) * TILE, with_min);
    }
#pragma GCC unroll 16
    for (int i = 0; i < TILE; i++) _mm512_store_ps(out[i], acc[i]);
}

void cpu_amx_tile(const uint8_t *panel, const uint8_t *acts, const float *ascale, const float *asum, int64_t blocks,
                  int G, float out[CPU_PANEL_ROWS][CPU_PANEL_ROWS], int with_min)
{
    if (with_min) tile_gemm(panel, acts, ascale, asum, blocks, G, out, 1);
    else tile_gemm(panel, acts, ascale, asum, blocks, G, out, 0);
}
