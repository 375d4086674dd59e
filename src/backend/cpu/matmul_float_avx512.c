/* AVX-512 tile kernels for F32, F16 and BF16 weights (activations already
 * rounded to the same format, see quant/quant.h). 4 weight rows × 4
 * activation rows per micro-tile, 16 lanes of F32 FMA; the products are
 * exact (F16·F16 and BF16·BF16 fit in F32), only the summation order differs
 * from the scalar kernels. */
#include <immintrin.h>

#include "backend/cpu/matmul_impl.h"

#define MR 4 /* weight rows per micro-tile */
#define NR 4 /* activation rows per micro-tile */

/* 16 elements (or the first `m` lanes) of a row as F32. */
static inline __m512 load16(enum qt_type t, const uint8_t *row, int64_t i, __mmask16 m)
{
    switch (t) {
    case QT_F16: return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * i));
    case QT_BF16:
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, row + 2 * i)), 16));
    default: return _mm512_maskz_loadu_ps(m, row + 4 * i);
    }
}

static inline __attribute__((always_inline)) void gemm_float(enum qt_type t, int64_t k, const void *w,
                                                             size_t w_stride, int nw, const void *a, size_t a_stride,
                                                             int na, float *y, int64_t y_stride)
{
    for (int r0 = 0; r0 < nw; r0 += MR) {
        const int nr = nw - r0 < MR ? nw - r0 : MR;
        const uint8_t *wr[MR];
        for (int r = 0; r < MR; r++) wr[r] = (const uint8_t *)w + (size_t)(r0 + (r < nr ? r : nr - 1)) * w_stride;
        for (int i0 = 0; i0 < na; i0 += NR) {
            const int ni = na - i0 < NR ? na - i0 : NR;
            const uint8_t *ar[NR];
            for (int i = 0; i < NR; i++) ar[i] = (const uint8_t *)a + (size_t)(i0 + (i < ni ? i : ni - 1)) * a_stride;
            /* all loops below are unrolled so the 16 accumulators stay in registers */
            __m512 acc[MR][NR];
#pragma GCC unroll 4
            for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
                for (int i = 0; i < NR; i++) acc[r][i] = _mm512_setzero_ps();
            for (int64_t e = 0; e < k; e += 16) {
                const __mmask16 m = k - e >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (k - e)) - 1);
                __m512 av[NR];
#pragma GCC unroll 4
                for (int i = 0; i < NR; i++) av[i] = load16(t, ar[i], e, m);
#pragma GCC unroll 4
                for (int r = 0; r < MR; r++) {
                    const __m512 wv = load16(t, wr[r], e, m);
#pragma GCC unroll 4
                    for (int i = 0; i < NR; i++) acc[r][i] = _mm512_fmadd_ps(wv, av[i], acc[r][i]);
                }
            }
            for (int i = 0; i < ni; i++)
                for (int r = 0; r < nr; r++) y[(i0 + i) * y_stride + r0 + r] = _mm512_reduce_add_ps(acc[r][i]);
        }
    }
}

static void gemm_f32(int64_t k, const void *w, size_t w_stride, int nw, const void *a, size_t a_stride, int na,
                     float *y, int64_t y_stride)
{
    gemm_float(QT_F32, k, w, w_stride, nw, a, a_stride, na, y, y_stride);
}

static void gemm_f16(int64_t k, const void *w, size_t w_stride, int nw, const void *a, size_t a_stride, int na,
                     float *y, int64_t y_stride)
{
    gemm_float(QT_F16, k, w, w_stride, nw, a, a_stride, na, y, y_stride);
}

static void gemm_bf16(int64_t k, const void *w, size_t w_stride, int nw, const void *a, size_t a_stride, int na,
                      float *y, int64_t y_stride)
{
    gemm_float(QT_BF16, k, w, w_stride, nw, a, a_stride, na, y, y_stride);
}

cpu_gemm_fn cpu_gemm_float_avx512(enum qt_type type)
{
    switch (type) {
    case QT_F32: return gemm_f32;
    case QT_F16: return gemm_f16;
    case QT_BF16: return gemm_bf16;
    default: return NULL;
    }
}
