/* Decode-regime (few activation rows) tile kernels for x86-64, included by
 * matmul_decode_avx512.c (VNNI) and matmul_decode_avx2.c, each compiled with
 * its ISA's flags. Up to ROWS_MAX weight rows are streamed side by side (where
 * that pays: more memory streams in flight, the activation block and its scale
 * loaded once for all of them, and one FMA chain per (weight row, activation
 * row), so a call is not bound by the latency of one chain). Every output is computed by the
 * same operations in the same order whatever the tile's shape: a row gets
 * the same bits alone or in a batch. The two ISA levels differ only in how
 * four byte products become one int32 lane (VPDPBUSD, or VPMADDUBSW +
 * VPMADDWD, exact under the bounds noted at each use), so their results are
 * equal too. Integer block sums equal the scalar kernels'; F32 accumulation
 * runs in 8 lanes.
 *
 * The includer defines DP_U8I8(u, s) (unsigned × signed bytes, four products
 * per int32 lane, no saturation for the codes used here),
 * GEMM_ONE_ROW_MAX_NA (up to this many activation rows, one weight row per
 * pass) and GEMM_DECODE_SELECT (the name of the type → kernel function). */
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/matmul_impl.h"
#include "quant/blocks.h"
#include "quant/q6k_x86.h"

#define ROWS_MAX 4 /* weight rows per pass, at most */

/* Weight rows per pass for na activation rows: one at a time up to
 * GEMM_ONE_ROW_MAX_NA (see the includer), else ROWS_MAX. Which one never
 * changes a result: every (weight row, activation row) pair has its own
 * accumulator, summed over the blocks in order. */
#define ROWS_FOR(na) ((na) <= GEMM_ONE_ROW_MAX_NA ? 1 : ROWS_MAX)
#define ONE_ROW_MAX_ACTS 8
_Static_assert(GEMM_ONE_ROW_MAX_NA <= ONE_ROW_MAX_ACTS, "the one-row kernels take at most 8 activation rows");

static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __m256i nibbles32(const uint8_t *qs)
{
    __m128i b = _mm_loadu_si128((const __m128i *)qs);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

/* signed × signed bytes via |x| and sign(y, x) */
static inline __m256i dp_i8(__m256i x, __m256i y) { return DP_U8I8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x)); }

/* ---- Q8_0 / Q4_0 / IQ4_NL / Q5_0 × Q8_0 ------------------------------------------ */

/* Block codes of weight type T as signed bytes. */
static inline __m256i codes_q8_0(const uint8_t *blk) { return _mm256_loadu_si256((const __m256i *)(blk + 2)); }

static inline __m256i codes_q4_0(const uint8_t *blk)
{
    return _mm256_sub_epi8(nibbles32(blk + 2), _mm256_set1_epi8(8));
}

static inline __m256i codes_iq4_nl(const uint8_t *blk)
{
    const __m256i book = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)k_iq4nl_values));
    return _mm256_shuffle_epi8(book, nibbles32(blk + 2));
}

/* The fifth bits of a Q5 block: byte l of the 32 takes bit l of the 4 qh
 * bytes at qhp, as 0x10 or 0. */
static inline __m256i q5_high_bits(const uint8_t *qhp)
{
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                            3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    uint32_t qh;
    memcpy(&qh, qhp, 4);
    __m256i hb = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), spread);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, bit), bit), _mm256_set1_epi8(0x10));
}

static inline __m256i codes_q5_0(const uint8_t *blk)
{
    return _mm256_sub_epi8(_mm256_or_si256(nibbles32(blk + 6), q5_high_bits(blk + 2)), _mm256_set1_epi8(16));
}

/* Weight rows of 32-element blocks against Q8_0 activations (signed codes,
 * dp_i8) or, with_min, Q8_1 activations (unsigned codes, VPDPBUSD, plus the
 * block's m·s). codes and with_min are constants at every call: inlined. */
typedef __m256i (*codes32_fn)(const uint8_t *blk);

static inline __attribute__((always_inline)) void gemm_32(int64_t k, const void *w, size_t w_stride, int nw,
                                                         const void *a, size_t a_stride, int na, float *y,
                                                         int64_t y_stride, size_t block_bytes, codes32_fn codes,
                                                         int with_min, const int R)
{
    const int64_t nb = k / 32;
    const size_t ablk = with_min ? sizeof(blk_q8_1) : sizeof(blk_q8_0), aqs = with_min ? 4 : 2;
    for (int r0 = 0; r0 < nw; r0 += R) {
        const int nr = nw - r0 < R ? nw - r0 : R;
        const uint8_t *wr[ROWS_MAX];
        for (int r = 0; r < R; r++) wr[r] = (const uint8_t *)w + (size_t)(r0 + (r < nr ? r : 0)) * w_stride;
        for (int i = 0; i < na; i++) {
            const uint8_t *arow = (const uint8_t *)a + (size_t)i * a_stride;
            __m256 acc[ROWS_MAX];
            float msum[ROWS_MAX] = {0};
            #pragma GCC unroll 4
            for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *ab = arow + (size_t)b * ablk;
                uint16_t ad, as = 0;
                memcpy(&ad, ab, 2);
                if (with_min) memcpy(&as, ab + 2, 2);
                const __m256i qy = _mm256_loadu_si256((const __m256i *)(ab + aqs));
                const float dy = h2f(ad), sy = h2f(as);
                #pragma GCC unroll 4
                for (int r = 0; r < R; r++) {
                    const uint8_t *blk = wr[r] + (size_t)b * block_bytes;
                    uint16_t dw;
                    memcpy(&dw, blk, 2);
                    __m256i p = with_min ? DP_U8I8(codes(blk), qy)
                                         : dp_i8(codes(blk), qy);
                    acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(h2f(dw) * dy), _mm256_cvtepi32_ps(p), acc[r]);
                    if (with_min) {
                        uint16_t mw;
                        memcpy(&mw, blk + 2, 2);
                        msum[r] += h2f(mw) * sy;
                    }
                }
            }
            for (int r = 0; r < nr; r++) y[i * y_stride + r0 + r] = with_min ? hsum8(acc[r]) + msum[r] : hsum8(acc[r]);
        }
    }
}

/* One weight row at a time against NA (1..8) activation rows: each weight block is
 * loaded and decoded once for all of them, the rows stream in order. Per pair the
 * operations of gemm_32. */
static inline __attribute__((always_inline)) void gemm_32_acts(int64_t k, const void *w, size_t w_stride, int nw,
                                                              const void *a, size_t a_stride, float *y,
                                                              int64_t y_stride, size_t block_bytes, codes32_fn codes,
                                                              int with_min, const int NA)
{
    const int64_t nb = k / 32;
    const size_t ablk = with_min ? sizeof(blk_q8_1) : sizeof(blk_q8_0), aqs = with_min ? 4 : 2;
    for (int r = 0; r < nw; r++) {
        const uint8_t *wr = (const uint8_t *)w + (size_t)r * w_stride;
        __m256 acc[ONE_ROW_MAX_ACTS];
        float msum[ONE_ROW_MAX_ACTS] = {0};
#pragma GCC unroll 8
        for (int i = 0; i < NA; i++) acc[i] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = wr + (size_t)b * block_bytes;
            uint16_t dw, mw = 0;
            memcpy(&dw, blk, 2);
            if (with_min) memcpy(&mw, blk + 2, 2);
            const __m256i x = codes(blk);
            const __m256i ax = with_min ? x : _mm256_sign_epi8(x, x);
            const float fw = h2f(dw), fm = h2f(mw);
#pragma GCC unroll 8
            for (int i = 0; i < NA; i++) {
                const uint8_t *ab = (const uint8_t *)a + (size_t)i * a_stride + (size_t)b * ablk;
                uint16_t ad, as = 0;
                memcpy(&ad, ab, 2);
                if (with_min) memcpy(&as, ab + 2, 2);
                const __m256i qy = _mm256_loadu_si256((const __m256i *)(ab + aqs));
                const __m256i p = DP_U8I8(ax, with_min ? qy : _mm256_sign_epi8(qy, x));
                acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(fw * h2f(ad)), _mm256_cvtepi32_ps(p), acc[i]);
                if (with_min) msum[i] += fm * h2f(as);
            }
        }
#pragma GCC unroll 8
        for (int i = 0; i < NA; i++) y[i * y_stride + r] = with_min ? hsum8(acc[i]) + msum[i] : hsum8(acc[i]);
    }
}

/* gemm_32_acts with NA = na as a constant (1 <= na <= ONE_ROW_MAX_ACTS). */
#define GEMM_32_ACTS_CASE(NA)                                                                                    \
    case NA:                                                                                                    \
        gemm_32_acts(k, w, w_stride, nw, a, a_stride, y, y_stride, block_bytes, codes, with_min, NA);          \
        return;

static inline __attribute__((always_inline)) void gemm_32_any(int64_t k, const void *w, size_t w_stride, int nw,
                                                             const void *a, size_t a_stride, int na, float *y,
                                                             int64_t y_stride, size_t block_bytes, codes32_fn codes,
                                                             int with_min)
{
    switch (ROWS_FOR(na) > 1 ? 0 : na) {
        GEMM_32_ACTS_CASE(1)
        GEMM_32_ACTS_CASE(2)
        GEMM_32_ACTS_CASE(3)
        GEMM_32_ACTS_CASE(4)
        GEMM_32_ACTS_CASE(5)
        GEMM_32_ACTS_CASE(6)
        GEMM_32_ACTS_CASE(7)
        GEMM_32_ACTS_CASE(8)
    default: gemm_32(k, w, w_stride, nw, a, a_stride, na, y, y_stride, block_bytes, codes, with_min, ROWS_MAX);
    }
}

#define DEFINE_GEMM_32(NAME, BLOCK_BYTES, CODES, WITH_MIN)                                                        \
    static void NAME(int64_t k, const void *w, size_t w_stride, int nw, const void *a, size_t a_stride, int na, \
                     float *y, int64_t y_stride)                                                                 \
    {                                                                                                           \
        gemm_32_any(k, w, w_stride, nw, a, a_stride, na, y, y_stride, BLOCK_BYTES, CODES, WITH_MIN);            \
    }

DEFINE_GEMM_32(gemm_q8_0, 34, codes_q8_0, 0)
DEFINE_GEMM_32(gemm_q4_0, 18, codes_q4_0, 0)
DEFINE_GEMM_32(gemm_iq4_nl, 18, codes_iq4_nl, 0)
DEFINE_GEMM_32(gemm_q5_0, 22, codes_q5_0, 0)

/* ---- Q4_1 / Q5_1 × Q8_1: unsigned codes, + m·s per block ------------------- */

static inline __m256i ucodes_q4_1(const uint8_t *blk) { return nibbles32(blk + 4); }

static inline __m256i ucodes_q5_1(const uint8_t *blk)
{
    return _mm256_or_si256(nibbles32(blk + 8), q5_high_bits(blk + 4));
}

DEFINE_GEMM_32(gemm_q4_1, 20, ucodes_q4_1, 1)
DEFINE_GEMM_32(gemm_q5_1, 24, ucodes_q5_1, 1)

/* ---- K-quants × Q8_K --------------------------------------------------------- */

/* Q4_K/Q5_K 12-byte scales → sc[8] and mn[8] as bytes (bit layout in
 * spec/gguf.md 6.4, done on 32-bit words). */
static inline void k_scales8(const uint8_t *q, uint8_t sc[8], uint8_t mn[8])
{
    uint32_t w0, w1, w2;
    memcpy(&w0, q, 4);
    memcpy(&w1, q + 4, 4);
    memcpy(&w2, q + 8, 4);
    uint32_t s_lo = w0 & 0x3f3f3f3fu, m_lo = w1 & 0x3f3f3f3fu;
    uint32_t s_hi = (w2 & 0x0f0f0f0fu) | (((w0 >> 6) & 0x03030303u) << 4);
    uint32_t m_hi = ((w2 >> 4) & 0x0f0f0f0fu) | (((w1 >> 6) & 0x03030303u) << 4);
    memcpy(sc, &s_lo, 4);
    memcpy(sc + 4, &s_hi, 4);
    memcpy(mn, &m_lo, 4);
    memcpy(mn + 4, &m_hi, 4);
}

/* Σ_j mn[j] · (bsums[2j] + bsums[2j+1]) */
static inline int k_mins(const uint8_t mn[8], const int16_t *bsums)
{
    __m256i bs = _mm256_loadu_si256((const __m256i *)bsums);
    __m128i m8 = _mm_loadl_epi64((const __m128i *)mn);
    /* each min twice: lanes 2j, 2j+1 */
    __m256i m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
    __m256i p = _mm256_madd_epi16(bs, m16);
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* One Q4_K (q5 = 0) or Q5_K (q5 = 1) super-block against a Q8_K block:
 * returns the int32 lanes of Σ sc·code·a; *imin gets Σ mn·bsum. */
static inline __m256i kq45_block(const uint8_t *scales12, const uint8_t *qs, const uint8_t *qh, const int8_t *ay,
                                 const int16_t *bsums, int q5, int *imin)
{
    uint8_t sc[8], mn[8];
    k_scales8(scales12, sc, mn);
    *imin = k_mins(mn, bsums);
    const __m256i m4 = _mm256_set1_epi8(0x0F), b16 = _mm256_set1_epi8(0x10);
    __m256i hv = q5 ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    __m256i isum = _mm256_setzero_si256();
    for (int g = 0; g < 4; g++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * g));
        __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if (q5) {
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(hv, 2 * g), 4), b16));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(hv, 2 * g + 1), 4), b16));
        }
        __m256i ylo = _mm256_loadu_si256((const __m256i *)(ay + 64 * g));
        __m256i yhi = _mm256_loadu_si256((const __m256i *)(ay + 64 * g + 32));
        /* codes ≤ 31 and |a| ≤ 127: the int16 pair sums of maddubs cannot saturate */
        __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, ylo), _mm256_set1_epi16(sc[2 * g]));
        __m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, yhi), _mm256_set1_epi16(sc[2 * g + 1]));
        isum = _mm256_add_epi32(isum, _mm256_add_epi32(plo, phi));
    }
    return isum;
}

static inline __attribute__((always_inline)) void gemm_kq45(int64_t k, const void *w, size_t w_stride, int nw,
                                                           const void *a, size_t a_stride, int na, float *y,
                                                           int64_t y_stride, int q5, const int R)
{
    const int64_t nb = k / 256;
    for (int r0 = 0; r0 < nw; r0 += R) {
        const int nr = nw - r0 < R ? nw - r0 : R;
        const uint8_t *wr[ROWS_MAX];
        for (int r = 0; r < R; r++) wr[r] = (const uint8_t *)w + (size_t)(r0 + (r < nr ? r : 0)) * w_stride;
        for (int i = 0; i < na; i++) {
            const blk_q8_K *ab = (const blk_q8_K *)((const uint8_t *)a + (size_t)i * a_stride);
            __m256 acc[ROWS_MAX];
            float msum[ROWS_MAX] = {0};
            #pragma GCC unroll 4
            for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
            for (int64_t b = 0; b < nb; b++) {
                #pragma GCC unroll 4
                for (int r = 0; r < R; r++) {
                    int imin;
                    __m256i isum;
                    uint16_t d, dmin;
                    if (q5) {
                        const blk_q5_K *x = (const blk_q5_K *)wr[r] + b;
                        isum = kq45_block(x->scales, x->qs, x->qh, ab[b].qs, ab[b].bsums, 1, &imin);
                        d = x->d, dmin = x->dmin;
                    } else {
                        const blk_q4_K *x = (const blk_q4_K *)wr[r] + b;
                        isum = kq45_block(x->scales, x->qs, NULL, ab[b].qs, ab[b].bsums, 0, &imin);
                        d = x->d, dmin = x->dmin;
                    }
                    acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(ab[b].d * h2f(d)), _mm256_cvtepi32_ps(isum), acc[r]);
                    msum[r] += ab[b].d * h2f(dmin) * (float)imin;
                }
            }
            for (int r = 0; r < nr; r++) y[i * y_stride + r0 + r] = hsum8(acc[r]) - msum[r];
        }
    }
}

/* k_mins for the NA activation rows ab[0..NA) of one weight block, row i in lane i (0 past
 * NA): the mins spread once, and one transposing reduction instead of one sum per row
 * (exact: integers). */
static inline __m256i k_mins_rows(const uint8_t mn[8], const blk_q8_K *const *ab, const int NA)
{
    __m128i m8 = _mm_loadl_epi64((const __m128i *)mn);
    const __m256i m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
    __m256i p[ONE_ROW_MAX_ACTS];
#pragma GCC unroll 8
    for (int i = 0; i < ONE_ROW_MAX_ACTS; i++)
        p[i] = i < NA ? _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)ab[i]->bsums), m16)
                      : _mm256_setzero_si256();
    /* per 128-bit half, hadd pairs lanes: a = rows 0..3, b = rows 4..7, halves = elements 0..3, 4..7 */
    const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

/* One weight row at a time against NA (1..8) activation rows: a super-block's scales and
 * codes are decoded once for all of them. Integer sums are exact in any order; the float
 * steps per pair are gemm_kq45's (the min term's three steps lane by lane, rounding as the
 * scalar ones). */
static inline __attribute__((always_inline)) void gemm_kq45_acts(int64_t k, const void *w, size_t w_stride,
                                                                int nw, const void *a, size_t a_stride, float *y,
                                                                int64_t y_stride, int q5, const int NA)
{
    const int64_t nb = k / 256;
    const __m256i m4 = _mm256_set1_epi8(0x0F), b16 = _mm256_set1_epi8(0x10);
    for (int r = 0; r < nw; r++) {
        const uint8_t *wr = (const uint8_t *)w + (size_t)r * w_stride;
        __m256 acc[ONE_ROW_MAX_ACTS];
        float msum[ONE_ROW_MAX_ACTS] = {0};
        __m256 msum_v = _mm256_setzero_ps(); /* from 4 rows on: lane i = activation row i */
#pragma GCC unroll 8
        for (int i = 0; i < NA; i++) acc[i] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *scales, *qs, *qh = NULL;
            uint16_t d, dmin;
            if (q5) {
                const blk_q5_K *x = (const blk_q5_K *)wr + b;
                scales = x->scales, qs = x->qs, qh = x->qh, d = x->d, dmin = x->dmin;
            } else {
                const blk_q4_K *x = (const blk_q4_K *)wr + b;
                scales = x->scales, qs = x->qs, d = x->d, dmin = x->dmin;
            }
            uint8_t sc[8], mn[8];
            k_scales8(scales, sc, mn);
            const blk_q8_K *ab[ONE_ROW_MAX_ACTS];
            __m256i isum[ONE_ROW_MAX_ACTS];
#pragma GCC unroll 8
            for (int i = 0; i < NA; i++) {
                ab[i] = (const blk_q8_K *)((const uint8_t *)a + (size_t)i * a_stride) + b;
                isum[i] = _mm256_setzero_si256();
            }
            const __m256i hv = q5 ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
            for (int g = 0; g < 4; g++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * g));
                __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                if (q5) {
                    lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(hv, 2 * g), 4), b16));
                    hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(hv, 2 * g + 1), 4), b16));
                }
                const __m256i slo = _mm256_set1_epi16(sc[2 * g]), shi = _mm256_set1_epi16(sc[2 * g + 1]);
#pragma GCC unroll 8
                for (int i = 0; i < NA; i++) {
                    const int8_t *ay = ab[i]->qs + 64 * g;
                    /* as kq45_block: no saturation of the int16 pair sums */
                    const __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)ay)), slo);
                    const __m256i phi =
                        _mm256_madd_epi16(_mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(ay + 32))), shi);
                    isum[i] = _mm256_add_epi32(isum[i], _mm256_add_epi32(plo, phi));
                }
            }
            const float fd = h2f(d), fdmin = h2f(dmin);
            /* msum_i += d_i · dmin · imin_i; from 4 rows on the same steps in lanes (below, the
             * transposing reduction costs more than the per-row sums) */
            if (NA >= 4) {
                float ad[ONE_ROW_MAX_ACTS];
#pragma GCC unroll 8
                for (int i = 0; i < ONE_ROW_MAX_ACTS; i++) ad[i] = i < NA ? ab[i]->d : 0.0f;
#pragma GCC unroll 8
                for (int i = 0; i < NA; i++)
                    acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(ad[i] * fd), _mm256_cvtepi32_ps(isum[i]), acc[i]);
                const __m256 dm = _mm256_mul_ps(_mm256_loadu_ps(ad), _mm256_set1_ps(fdmin));
                msum_v = _mm256_add_ps(msum_v, _mm256_mul_ps(dm, _mm256_cvtepi32_ps(k_mins_rows(mn, ab, NA))));
            } else {
#pragma GCC unroll 4
                for (int i = 0; i < NA; i++) {
                    const int imin = k_mins(mn, ab[i]->bsums);
                    acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(ab[i]->d * fd), _mm256_cvtepi32_ps(isum[i]), acc[i]);
                    msum[i] += ab[i]->d * fdmin * (float)imin;
                }
            }
        }
        if (NA >= 4) _mm256_storeu_ps(msum, msum_v);
#pragma GCC unroll 8
        for (int i = 0; i < NA; i++) y[i * y_stride + r] = hsum8(acc[i]) - msum[i];
    }
}

/* Q4_K / Q5_K: where ROWS_FOR asks for one weight row at a time, up to 8 activation rows
 * share each block's decode, else ROWS_MAX rows side by side. */
static void gemm_kq45_any(int64_t k, const void *w, size_t w_stride, int nw, const void *a, size_t a_stride, int na,
                          float *y, int64_t y_stride, int q5)
{
#define KQ45_ACTS(NA) gemm_kq45_acts(k, w, w_stride, nw, a, a_stride, y, y_stride, q5, NA)
    switch (ROWS_FOR(na) > 1 ? 0 : na) {
    case 1: KQ45_ACTS(1); return;
    case 2: KQ45_ACTS(2); return;
    case 3: KQ45_ACTS(3); return;
    case 4: KQ45_ACTS(4); return;
    case 5: KQ45_ACTS(5); return;
    case 6: KQ45_ACTS(6); return;
    case 7: KQ45_ACTS(7); return;
    case 8: KQ45_ACTS(8); return;
    default: gemm_kq45(k, w, w_stride, nw, a, a_stride, na, y, y_stride, q5, ROWS_MAX); return;
    }
#undef KQ45_ACTS
}

static void gemm_q4_K(int64_t k, const void *w, size_t w_stride, int nw, const void *a, size_t a_stride, int na,
                      float *y, int64_t y_stride)
{
    gemm_kq45_any(k, w, w_stride, nw, a, a_stride, na, y, y_stride, 0);
}

static void gemm_q5_K(int64_t k, const void *w, size_t w_stride, int nw, const void *a, size_t a_stride, int na,
                      float *y, int64_t y_stride)
{
    gemm_kq45_any(k, w, w_stride, nw, a, a_stride, na, y, y_stride, 1);
}

/* Q6_K: codes u = 0..63 stand for u−32: Σ sc·(u−32)·a = Σ sc·u·a − 32·Σ sc·bsum. */
static inline __m256i q6k_block(const blk_q6_K *x, const blk_q8_K *ab)
{
    __m256i isum = _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = x->ql + 64 * h;
        const int8_t *sc = x->scales + 8 * h, *ay = ab->qs + 128 * h;
        __m256i u[4];
        q6k_codes_256(ql, x->qh + 32 * h, u);
        for (int q = 0; q < 4; q++) {
            __m256i yv = _mm256_loadu_si256((const __m256i *)(ay + 32 * q));
            /* u ≤ 63, |a| ≤ 127: maddubs pair sums ≤ 16002, no saturation */
            __m256i s16 = _mm256_set_m128i(_mm_set1_epi16(sc[2 * q + 1]), _mm_set1_epi16(sc[2 * q]));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(u[q], yv), s16));
        }
    }
    /* − 32 · Σ scale · bsum over the 16 sub-blocks */
    __m256i bs = _mm256_loadu_si256((const __m256i *)ab->bsums);
    __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
    __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(bs, s16), 5);
    return _mm256_sub_epi32(isum, corr);
}

static inline __attribute__((always_inline)) void gemm_q6_K_rows(int64_t k, const void *w, size_t w_stride,
                                                                int nw, const void *a, size_t a_stride, int na,
                                                                float *y, int64_t y_stride, const int R)
{
    const int64_t nb = k / 256;
    for (int r0 = 0; r0 < nw; r0 += R) {
        const int nr = nw - r0 < R ? nw - r0 : R;
        const blk_q6_K *wr[ROWS_MAX];
        for (int r = 0; r < R; r++)
            wr[r] = (const blk_q6_K *)((const uint8_t *)w + (size_t)(r0 + (r < nr ? r : 0)) * w_stride);
        for (int i = 0; i < na; i++) {
            const blk_q8_K *ab = (const blk_q8_K *)((const uint8_t *)a + (size_t)i * a_stride);
            __m256 acc[ROWS_MAX];
            #pragma GCC unroll 4
            for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
            for (int64_t b = 0; b < nb; b++)
                #pragma GCC unroll 4
                for (int r = 0; r < R; r++)
                    acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(ab[b].d * h2f(wr[r][b].d)),
                                             _mm256_cvtepi32_ps(q6k_block(&wr[r][b], &ab[b])), acc[r]);
            for (int r = 0; r < nr; r++) y[i * y_stride + r0 + r] = hsum8(acc[r]);
        }
    }
}

/* Q6_K, one weight row at a time against NA (1..8) activation rows: a block's codes are
 * decoded once for all of them (q6k_block's integer sums, the float steps of gemm_q6_K). */
static inline __attribute__((always_inline)) void gemm_q6_K_acts(int64_t k, const void *w, size_t w_stride,
                                                                int nw, const void *a, size_t a_stride, float *y,
                                                                int64_t y_stride, const int NA)
{
    const int64_t nb = k / 256;
    for (int r = 0; r < nw; r++) {
        const blk_q6_K *wr = (const blk_q6_K *)((const uint8_t *)w + (size_t)r * w_stride);
        __m256 acc[ONE_ROW_MAX_ACTS];
#pragma GCC unroll 8
        for (int i = 0; i < NA; i++) acc[i] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            const blk_q6_K *x = &wr[b];
            const blk_q8_K *ab[ONE_ROW_MAX_ACTS];
            __m256i isum[ONE_ROW_MAX_ACTS];
#pragma GCC unroll 8
            for (int i = 0; i < NA; i++) {
                ab[i] = (const blk_q8_K *)((const uint8_t *)a + (size_t)i * a_stride) + b;
                isum[i] = _mm256_setzero_si256();
            }
            for (int h = 0; h < 2; h++) {
                const uint8_t *ql = x->ql + 64 * h;
                const int8_t *sc = x->scales + 8 * h;
                __m256i u[4];
                q6k_codes_256(ql, x->qh + 32 * h, u);
                for (int q = 0; q < 4; q++) {
                    const __m256i s16 = _mm256_set_m128i(_mm_set1_epi16(sc[2 * q + 1]), _mm_set1_epi16(sc[2 * q]));
#pragma GCC unroll 8
                    for (int i = 0; i < NA; i++) {
                        const __m256i yv = _mm256_loadu_si256((const __m256i *)(ab[i]->qs + 128 * h + 32 * q));
                        isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(_mm256_maddubs_epi16(u[q], yv), s16));
                    }
                }
            }
            const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
            const float fd = h2f(x->d);
#pragma GCC unroll 8
            for (int i = 0; i < NA; i++) {
                const __m256i bs = _mm256_loadu_si256((const __m256i *)ab[i]->bsums);
                const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(bs, s16), 5);
                acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(ab[i]->d * fd), _mm256_cvtepi32_ps(_mm256_sub_epi32(isum[i], corr)),
                                         acc[i]);
            }
        }
#pragma GCC unroll 8
        for (int i = 0; i < NA; i++) y[i * y_stride + r] = hsum8(acc[i]);
    }
}

static void gemm_q6_K(int64_t k, const void *w, size_t w_stride, int nw, const void *a, size_t a_stride, int na,
                      float *y, int64_t y_stride)
{
#define Q6K_ACTS(NA) gemm_q6_K_acts(k, w, w_stride, nw, a, a_stride, y, y_stride, NA)
    switch (ROWS_FOR(na) > 1 ? 0 : na) {
    case 1: Q6K_ACTS(1); return;
    case 2: Q6K_ACTS(2); return;
    case 3: Q6K_ACTS(3); return;
    case 4: Q6K_ACTS(4); return;
    case 5: Q6K_ACTS(5); return;
    case 6: Q6K_ACTS(6); return;
    case 7: Q6K_ACTS(7); return;
    case 8: Q6K_ACTS(8); return;
    default: gemm_q6_K_rows(k, w, w_stride, nw, a, a_stride, na, y, y_stride, ROWS_MAX); return;
    }
#undef Q6K_ACTS
}

cpu_gemm_fn GEMM_DECODE_SELECT(enum qt_type type)
{
    switch (type) {
    case QT_Q8_0: return gemm_q8_0;
    case QT_Q4_0: return gemm_q4_0;
    case QT_IQ4_NL: return gemm_iq4_nl;
    case QT_Q5_0: return gemm_q5_0;
    case QT_Q4_1: return gemm_q4_1;
    case QT_Q5_1: return gemm_q5_1;
    case QT_Q4_K: return gemm_q4_K;
    case QT_Q5_K: return gemm_q5_K;
    case QT_Q6_K: return gemm_q6_K;
    default: return NULL;
    }
}
