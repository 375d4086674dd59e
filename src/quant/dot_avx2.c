/* AVX2 + FMA + F16C dot kernels (called only when wk_cpu() reports them).
 * Integer math per block is identical to dot_scalar.c; the F32 accumulation
 * runs in 8 lanes, so results differ from scalar only by summation order. */
#include <immintrin.h>
#include <string.h>

#include "quant/blocks.h"
#include "quant/q6k_x86.h"
#include "quant/quant_impl.h"
#include "util/f16.h"

#define H2F(h) _cvtsh_ss(h) /* F16C: exact, like wk_f16_to_f32 */

static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Σ pairs of signed bytes → 8 int32 (|x| ≤ 127 keeps maddubs from saturating). */
static inline __m256i dot_i8(__m256i x, __m256i y)
{
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* unsigned bytes (≤ 63) × signed bytes → 8 int32 */
static inline __m256i dot_u8i8(__m256i u, __m256i y)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), _mm256_set1_epi16(1));
}

/* 16 packed bytes → 32 nibbles: low nibbles in bytes 0..15, high in 16..31. */
static inline __m256i nibbles32(const uint8_t *qs)
{
    __m128i b = _mm_loadu_si128((const __m128i *)qs);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

/* 32 bits → 32 bytes of 0x10 where the bit is set (Q5 fifth bits). */
static inline __m256i bits32_to_0x10(uint32_t bits)
{
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                          3, 3, 3, 3, 3, 3, 3);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
    const __m256i sel = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, sel), sel);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

static void dot_f32(int64_t n, float *s, const void *w, const void *a)
{
    const float *x = w, *y = a;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), acc1);
    }
    float sum = hsum8(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) sum += x[i] * y[i];
    *s = sum;
}

static void dot_f16(int64_t n, float *s, const void *w, const void *a)
{
    const uint16_t *x = w, *y = a;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 x0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
        __m256 x1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i + 8)));
        __m256 y0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(y + i)));
        __m256 y1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(y + i + 8)));
        acc0 = _mm256_fmadd_ps(x0, y0, acc0);
        acc1 = _mm256_fmadd_ps(x1, y1, acc1);
    }
    float sum = hsum8(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) {
        uint16_t hx, hy;
        memcpy(&hx, x + i, 2);
        memcpy(&hy, y + i, 2);
        sum += H2F(hx) * H2F(hy);
    }
    *s = sum;
}

static void dot_q8_0(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q8_0 *x = w;
    const blk_q8_0 *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        __m256i qx = _mm256_loadu_si256((const __m256i *)x[i].qs);
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256 p = _mm256_cvtepi32_ps(dot_i8(qx, qy));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(H2F(x[i].d) * H2F(y[i].d)), p, acc);
    }
    *s = hsum8(acc);
}

static void dot_q4_0(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q4_0 *x = w;
    const blk_q8_0 *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        __m256i qx = _mm256_sub_epi8(nibbles32(x[i].qs), _mm256_set1_epi8(8));
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256 p = _mm256_cvtepi32_ps(dot_i8(qx, qy));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(H2F(x[i].d) * H2F(y[i].d)), p, acc);
    }
    *s = hsum8(acc);
}

static void dot_iq4_nl(int64_t n, float *s, const void *w, const void *a)
{
    const blk_iq4_nl *x = w;
    const blk_q8_0 *y = a;
    const __m256i book = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)k_iq4nl_values));
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        __m256i qx = _mm256_shuffle_epi8(book, nibbles32(x[i].qs));
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256 p = _mm256_cvtepi32_ps(dot_i8(qx, qy));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(H2F(x[i].d) * H2F(y[i].d)), p, acc);
    }
    *s = hsum8(acc);
}

static void dot_q4_1(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q4_1 *x = w;
    const blk_q8_1 *y = a;
    __m256 acc = _mm256_setzero_ps();
    float msum = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256 p = _mm256_cvtepi32_ps(dot_u8i8(nibbles32(x[i].qs), qy));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(H2F(x[i].d) * H2F(y[i].d)), p, acc);
        msum += H2F(x[i].m) * H2F(y[i].s);
    }
    *s = hsum8(acc) + msum;
}

static void dot_q5_0(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q5_0 *x = w;
    const blk_q8_0 *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        __m256i qx = _mm256_or_si256(nibbles32(x[i].qs), bits32_to_0x10(qh));
        qx = _mm256_sub_epi8(qx, _mm256_set1_epi8(16));
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256 p = _mm256_cvtepi32_ps(dot_i8(qx, qy));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(H2F(x[i].d) * H2F(y[i].d)), p, acc);
    }
    *s = hsum8(acc);
}

static void dot_q5_1(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q5_1 *x = w;
    const blk_q8_1 *y = a;
    __m256 acc = _mm256_setzero_ps();
    float msum = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        __m256i qx = _mm256_or_si256(nibbles32(x[i].qs), bits32_to_0x10(qh));
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256 p = _mm256_cvtepi32_ps(dot_u8i8(qx, qy));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(H2F(x[i].d) * H2F(y[i].d)), p, acc);
        msum += H2F(x[i].m) * H2F(y[i].s);
    }
    *s = hsum8(acc) + msum;
}

/* Q4_K / Q5_K: 6-bit scales and mins of the 8 sub-blocks. */
static inline void unpack_k_scales(const uint8_t *q, uint8_t sc[8], uint8_t mn[8])
{
    for (int j = 0; j < 8; j++) k_scale_min(j, q, &sc[j], &mn[j]);
}

static inline int k_mins_dot(const uint8_t mn[8], const int16_t *bsums)
{
    int imin = 0;
    for (int j = 0; j < 8; j++) imin += mn[j] * (bsums[2 * j] + bsums[2 * j + 1]);
    return imin;
}

static void dot_q4_K(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q4_K *x = w;
    const blk_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    float msum = 0;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t i = 0; i < n / 256; i++) {
        uint8_t sc[8], mn[8];
        unpack_k_scales(x[i].scales, sc, mn);
        __m256i isum = _mm256_setzero_si256();
        for (int g = 0; g < 4; g++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * g));
            __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            __m256i ylo = _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * g));
            __m256i yhi = _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * g + 32));
            __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, ylo), _mm256_set1_epi16(sc[2 * g]));
            __m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, yhi), _mm256_set1_epi16(sc[2 * g + 1]));
            isum = _mm256_add_epi32(isum, _mm256_add_epi32(plo, phi));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * H2F(x[i].d)), _mm256_cvtepi32_ps(isum), acc);
        msum += y[i].d * H2F(x[i].dmin) * (float)k_mins_dot(mn, y[i].bsums);
    }
    *s = hsum8(acc) - msum;
}

static void dot_q5_K(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q5_K *x = w;
    const blk_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    float msum = 0;
    const __m256i m4 = _mm256_set1_epi8(0x0F), b16 = _mm256_set1_epi8(0x10);
    for (int64_t i = 0; i < n / 256; i++) {
        uint8_t sc[8], mn[8];
        unpack_k_scales(x[i].scales, sc, mn);
        __m256i qh = _mm256_loadu_si256((const __m256i *)x[i].qh);
        __m256i isum = _mm256_setzero_si256();
        for (int g = 0; g < 4; g++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * g));
            /* bit 2g of qh → 0x10 in lo, bit 2g+1 → 0x10 in hi */
            __m256i hlo = _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * g), 4), b16);
            __m256i hhi = _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * g + 1), 4), b16);
            __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4), hlo);
            __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), hhi);
            __m256i ylo = _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * g));
            __m256i yhi = _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * g + 32));
            __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, ylo), _mm256_set1_epi16(sc[2 * g]));
            __m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, yhi), _mm256_set1_epi16(sc[2 * g + 1]));
            isum = _mm256_add_epi32(isum, _mm256_add_epi32(plo, phi));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * H2F(x[i].d)), _mm256_cvtepi32_ps(isum), acc);
        msum += y[i].d * H2F(x[i].dmin) * (float)k_mins_dot(mn, y[i].bsums);
    }
    *s = hsum8(acc) - msum;
}

/* Two int8 scales, each repeated over 8 int16 lanes (one per 16-element half). */
static inline __m256i scale_pair(int8_t a, int8_t b)
{
    return _mm256_set_m128i(_mm_set1_epi16(b), _mm_set1_epi16(a));
}

static void dot_q6_K(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q6_K *x = w;
    const blk_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    const __m256i k32 = _mm256_set1_epi8(32);
    for (int64_t i = 0; i < n / 256; i++) {
        __m256i isum = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x[i].ql + 64 * h;
            const int8_t *sc = x[i].scales + 8 * h, *ay = y[i].qs + 128 * h;
            __m256i u[4];
            q6k_codes_256(ql, x[i].qh + 32 * h, u);
            for (int k = 0; k < 4; k++) {
                __m256i yv = _mm256_loadu_si256((const __m256i *)(ay + 32 * k));
                __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(u[k], yv), _mm256_maddubs_epi16(k32, yv));
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, scale_pair(sc[2 * k], sc[2 * k + 1])));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * H2F(x[i].d)), _mm256_cvtepi32_ps(isum), acc);
    }
    *s = hsum8(acc);
}

/* Q2_K: codes 0..3; Σ sc·code·a per 16-element sub-block, mins via bsums. */
static void dot_q2_K(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q2_K *x = w;
    const blk_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    float msum = 0;
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int64_t i = 0; i < n / 256; i++) {
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)x[i].scales);
        const __m256i sc16 = _mm256_cvtepu8_epi16(sc8);
        const __m256i scl = _mm256_and_si256(sc16, _mm256_set1_epi16(0x0F));
        const __m256i mn = _mm256_srli_epi16(sc16, 4);
        __m256i pm = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[i].bsums), mn);
        __m128i t = _mm_add_epi32(_mm256_castsi256_si128(pm), _mm256_extracti128_si256(pm, 1));
        t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
        t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
        const int imin = _mm_cvtsi128_si32(t);
        int16_t scv[16];
        _mm256_storeu_si256((__m256i *)scv, scl);
        __m256i isum = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            for (int p = 0; p < 4; p++) {
                __m256i c = _mm256_and_si256(_mm256_srli_epi16(q, 2 * p), m3);
                __m256i yv = _mm256_loadu_si256((const __m256i *)(y[i].qs + 128 * h + 32 * p));
                int sb = 8 * h + 2 * p;
                __m256i s16 = _mm256_set_m128i(_mm_set1_epi16(scv[sb + 1]), _mm_set1_epi16(scv[sb]));
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(c, yv), s16));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * H2F(x[i].d)), _mm256_cvtepi32_ps(isum), acc);
        msum += y[i].d * H2F(x[i].dmin) * (float)imin;
    }
    *s = hsum8(acc) - msum;
}

/* Q3_K: u = code + 4 in 0..7 (low 2 bits from qs, bit 2 from hmask);
 * Σ s·code·a = Σ s·u·a − 4·Σ s·bsum. */
static void dot_q3_K(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q3_K *x = w;
    const blk_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    for (int64_t i = 0; i < n / 256; i++) {
        int16_t scv[16];
        for (int sb = 0; sb < 16; sb++) scv[sb] = (int16_t)q3k_scale(sb, x[i].scales);
        const __m256i s16all = _mm256_loadu_si256((const __m256i *)scv);
        __m256i corr = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[i].bsums), s16all);
        const __m256i hm = _mm256_loadu_si256((const __m256i *)x[i].hmask);
        __m256i isum = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            for (int p = 0; p < 4; p++) {
                __m256i lo = _mm256_and_si256(_mm256_srli_epi16(q, 2 * p), m3);
                __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + p), one);
                __m256i u = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 2));
                __m256i yv = _mm256_loadu_si256((const __m256i *)(y[i].qs + 128 * h + 32 * p));
                int sb = 8 * h + 2 * p;
                __m256i s16 = _mm256_set_m128i(_mm_set1_epi16(scv[sb + 1]), _mm_set1_epi16(scv[sb]));
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(u, yv), s16));
            }
        }
        isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(corr, 2));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * H2F(x[i].d)), _mm256_cvtepi32_ps(isum), acc);
    }
    *s = hsum8(acc);
}

/* IQ4_XS: codebook values (signed) per 32-element sub-block with a 6-bit scale. */
static void dot_iq4_xs(int64_t n, float *s, const void *w, const void *a)
{
    const blk_iq4_xs *x = w;
    const blk_q8_K *y = a;
    const __m256i book = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)k_iq4nl_values));
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 256; i++) {
        __m256i isum = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ib++) {
            __m256i v = _mm256_shuffle_epi8(book, nibbles32(x[i].qs + 16 * ib));
            __m256i yv = _mm256_loadu_si256((const __m256i *)(y[i].qs + 32 * ib));
            __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(yv, v));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, _mm256_set1_epi16((short)(iq4xs_scale(ib, &x[i]) - 32))));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * H2F(x[i].d)), _mm256_cvtepi32_ps(isum), acc);
    }
    *s = hsum8(acc);
}

qt_vec_dot_fn qt_dot_avx2(enum qt_type type)
{
    switch (type) {
    case QT_F32: return dot_f32;
    case QT_F16: return dot_f16;
    case QT_Q4_0: return dot_q4_0;
    case QT_Q4_1: return dot_q4_1;
    case QT_Q5_0: return dot_q5_0;
    case QT_Q5_1: return dot_q5_1;
    case QT_Q8_0: return dot_q8_0;
    case QT_Q4_K: return dot_q4_K;
    case QT_Q5_K: return dot_q5_K;
    case QT_Q6_K: return dot_q6_K;
    case QT_IQ4_NL: return dot_iq4_nl;
    case QT_Q2_K: return dot_q2_K;
    case QT_Q3_K: return dot_q3_K;
    case QT_IQ4_XS: return dot_iq4_xs;
    default: return NULL; /* BF16: scalar (AVX-512 BF16 has its own) */
    }
}
