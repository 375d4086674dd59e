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

/* tiles 0,1: C (16 activations × 16 weights, int32); 2,4: A = activation
 * codes (16 rows × G bytes); 3,5: B = weight codes (G/4 rows × 64 bytes) */
void cpu_amx_begin(int G)
{
    amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 2; t++) c.rows[t] = TILE, c.colsb[t] = 64;
    c.rows[2] = c.rows[4] = TILE, c.colsb[2] = c.colsb[4] = (uint16_t)G;
    c.rows[3] = c.rows[5] = (uint8_t)(G / 4), c.colsb[3] = c.colsb[5] = 64;
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

/* Tile pair for blocks b and b+1 into C tiles 0 and 1 (b+1 may be absent). */
static inline __attribute__((always_inline)) void issue_pair(const int8_t *codes, const uint8_t *acts, size_t tb,
                                                             int G, int64_t b, int two)
{
    _tile_zero(0);
    _tile_loadd(2, acts + b * tb, G);
    _tile_loadd(3, codes + b * tb, 64);
    _tile_dpbssd(0, 2, 3);
    if (two) {
        _tile_zero(1);
        _tile_loadd(4, acts + (b + 1) * tb, G);
        _tile_loadd(5, codes + (b + 1) * tb, 64);
        _tile_dpbssd(1, 4, 5);
    }
}

/* 16 activations × 16 weight rows over all blocks. Software pipelined: the
 * tile unit computes blocks b+2, b+3 while the vector unit scales b, b+1. */
static inline __attribute__((always_inline)) void tile_gemm(const uint8_t *panel, const uint8_t *acts,
                                                            const float *ascale, const float *asum,
                                                            int64_t blocks, int G, float out[TILE][TILE],
                                                            int with_min)
{
    const int8_t *codes = (const int8_t *)panel;
    const float *wscale = (const float *)(panel + (size_t)blocks * TILE * (size_t)G);
    const float *wmin = wscale + blocks * TILE;
    const size_t tb = TILE * (size_t)G;
    int32_t cbuf[2][256] __attribute__((aligned(64)));
    __m512 acc[TILE];
#pragma GCC unroll 16
    for (int i = 0; i < TILE; i++) acc[i] = _mm512_setzero_ps();
    issue_pair(codes, acts, tb, G, 0, blocks > 1);
    for (int64_t b = 0; b < blocks; b += 2) {
        const int two = b + 1 < blocks;
        _tile_stored(0, cbuf[0], 64);
        if (two) _tile_stored(1, cbuf[1], 64);
        if (b + 2 < blocks) issue_pair(codes, acts, tb, G, b + 2, b + 3 < blocks);
        post_block(acc, cbuf[0], wscale + b * TILE, wmin + b * TILE, ascale + b * TILE, asum + b * TILE, with_min);
        if (two)
            post_block(acc, cbuf[1], wscale + (b + 1) * TILE, wmin + (b + 1) * TILE, ascale + (b + 1) * TILE,
                       asum + (b + 1) * TILE, with_min);
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
