/* AVX-512 (F, BW, VL, DQ, VNNI, BF16) dot kernels and activation quantizers.
 * Called only after wk_cpu() reports the ISA. Integer math per block equals
 * dot_scalar.c; F32 accumulation order differs (lanes). The activation
 * quantizers are bit-identical to the scalar ones in quantize.c. */
#include <immintrin.h>
#include <math.h>
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

/* signed × signed bytes accumulated into int32 lanes with VNNI */
static inline __m256i dp_i8(__m256i acc, __m256i x, __m256i y)
{
    return _mm256_dpbusd_epi32(acc, _mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

static inline __m256i nibbles32(const uint8_t *qs)
{
    __m128i b = _mm_loadu_si128((const __m128i *)qs);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

static void dot_f32(int64_t n, float *s, const void *w, const void *a)
{
    const float *x = w, *y = a;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16), acc1);
    }
    for (; i + 16 <= n; i += 16) acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), acc0);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        acc1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i), acc1);
    }
    *s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

static void dot_f16(int64_t n, float *s, const void *w, const void *a)
{
    const uint16_t *x = w, *y = a;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 xv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i)));
        __m512 yv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(y + i)));
        acc0 = _mm512_fmadd_ps(xv, yv, acc0);
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512 xv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i));
        __m512 yv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, y + i));
        acc1 = _mm512_fmadd_ps(xv, yv, acc1);
    }
    *s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

/* BF16 × BF16 with vdpbf16ps: pairwise products summed in F32 (each product
 * of two bf16 is exact in F32; the pair sum is rounded once). */
static void dot_bf16(int64_t n, float *s, const void *w, const void *a)
{
    const uint16_t *x = w, *y = a;
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512bh xv = (__m512bh)_mm512_loadu_si512(x + i);
        __m512bh yv = (__m512bh)_mm512_loadu_si512(y + i);
        acc = _mm512_dpbf16_ps(acc, xv, yv);
    }
    if (i < n) {
        __mmask32 m = (__mmask32)((1ull << (n - i)) - 1);
        __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(m, x + i);
        __m512bh yv = (__m512bh)_mm512_maskz_loadu_epi16(m, y + i);
        acc = _mm512_dpbf16_ps(acc, xv, yv);
    }
    *s = _mm512_reduce_add_ps(acc);
}

static void dot_q8_0(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q8_0 *x = w;
    const blk_q8_0 *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        __m256i qx = _mm256_loadu_si256((const __m256i *)x[i].qs);
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256 p = _mm256_cvtepi32_ps(dp_i8(_mm256_setzero_si256(), qx, qy));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(H2F(x[i].d) * H2F(y[i].d)), p, acc);
    }
    *s = hsum8(acc);
}

static void dot_q4_0(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q4_0 *x = w;
    const blk_q8_0 *y = a;
    __m256 acc = _mm256_setzero_ps();
    const __m256i k8 = _mm256_set1_epi8(8);
    for (int64_t i = 0; i < n / 32; i++) {
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        /* Σ (u-8)·y = Σ u·y − 8·Σ y */
        __m256i d = _mm256_dpbusd_epi32(_mm256_setzero_si256(), nibbles32(x[i].qs), qy);
        d = _mm256_sub_epi32(d, _mm256_dpbusd_epi32(_mm256_setzero_si256(), k8, qy));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(H2F(x[i].d) * H2F(y[i].d)), _mm256_cvtepi32_ps(d), acc);
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
        __m256 p = _mm256_cvtepi32_ps(dp_i8(_mm256_setzero_si256(), qx, qy));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(H2F(x[i].d) * H2F(y[i].d)), p, acc);
    }
    *s = hsum8(acc);
}

static inline int k_mins_dot(const uint8_t mn[8], const int16_t *bsums)
{
    int imin = 0;
    for (int j = 0; j < 8; j++) imin += mn[j] * (bsums[2 * j] + bsums[2 * j + 1]);
    return imin;
}

/* Q4_K: per 32-element sub-block, VNNI gives Σ code·a in 8 lanes; the lanes
 * are multiplied by the sub-block scale and summed into isum. */
static void dot_q4_K(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q4_K *x = w;
    const blk_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    float msum = 0;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t i = 0; i < n / 256; i++) {
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; j++) k_scale_min(j, x[i].scales, &sc[j], &mn[j]);
        __m256i isum = _mm256_setzero_si256();
        for (int g = 0; g < 4; g++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * g));
            __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            __m256i ylo = _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * g));
            __m256i yhi = _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * g + 32));
            __m256i plo = _mm256_dpbusd_epi32(_mm256_setzero_si256(), lo, ylo);
            __m256i phi = _mm256_dpbusd_epi32(_mm256_setzero_si256(), hi, yhi);
            isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(plo, _mm256_set1_epi32(sc[2 * g])));
            isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(phi, _mm256_set1_epi32(sc[2 * g + 1])));
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
        for (int j = 0; j < 8; j++) k_scale_min(j, x[i].scales, &sc[j], &mn[j]);
        __m256i qh = _mm256_loadu_si256((const __m256i *)x[i].qh);
        __m256i isum = _mm256_setzero_si256();
        for (int g = 0; g < 4; g++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * g));
            __m256i hlo = _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * g), 4), b16);
            __m256i hhi = _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * g + 1), 4), b16);
            __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4), hlo);
            __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), hhi);
            __m256i ylo = _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * g));
            __m256i yhi = _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * g + 32));
            __m256i plo = _mm256_dpbusd_epi32(_mm256_setzero_si256(), lo, ylo);
            __m256i phi = _mm256_dpbusd_epi32(_mm256_setzero_si256(), hi, yhi);
            isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(plo, _mm256_set1_epi32(sc[2 * g])));
            isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(phi, _mm256_set1_epi32(sc[2 * g + 1])));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * H2F(x[i].d)), _mm256_cvtepi32_ps(isum), acc);
        msum += y[i].d * H2F(x[i].dmin) * (float)k_mins_dot(mn, y[i].bsums);
    }
    *s = hsum8(acc) - msum;
}

/* Q6_K: codes u in 0..63 stand for u−32; Σ(u−32)·a = Σu·a − 32·Σa, and
 * 32·Σa per 16 elements comes from Q8_K's bsums. */
static void dot_q6_K(int64_t n, float *s, const void *w, const void *a)
{
    const blk_q6_K *x = w;
    const blk_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    /* int32 lanes 0..3 hold elements 0..15 of a 32-byte row, 4..7 elements 16..31 */
    for (int64_t i = 0; i < n / 256; i++) {
        __m256i isum = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x[i].ql + 64 * h;
            const int8_t *sc = x[i].scales + 8 * h, *ay = y[i].qs + 128 * h;
            __m256i u[4];
            q6k_codes_256(ql, x[i].qh + 32 * h, u);
            for (int k = 0; k < 4; k++) {
                __m256i yv = _mm256_loadu_si256((const __m256i *)(ay + 32 * k));
                __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), u[k], yv);
                __m256i scv = _mm256_set_m128i(_mm_set1_epi32(sc[2 * k + 1]), _mm_set1_epi32(sc[2 * k]));
                isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(p, scv));
            }
        }
        int bs = 0;
        for (int j = 0; j < 16; j++) bs += x[i].scales[j] * y[i].bsums[j];
        isum = _mm256_sub_epi32(isum, _mm256_setr_epi32(32 * bs, 0, 0, 0, 0, 0, 0, 0));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * H2F(x[i].d)), _mm256_cvtepi32_ps(isum), acc);
    }
    *s = hsum8(acc);
}

qt_vec_dot_fn qt_dot_avx512(enum qt_type type)
{
    switch (type) {
    case QT_F32: return dot_f32;
    case QT_F16: return dot_f16;
    case QT_BF16: return dot_bf16;
    case QT_Q4_0: return dot_q4_0;
    case QT_Q8_0: return dot_q8_0;
    case QT_Q4_K: return dot_q4_K;
    case QT_Q5_K: return dot_q5_K;
    case QT_Q6_K: return dot_q6_K;
    case QT_IQ4_NL: return dot_iq4_nl;
    default: return NULL; /* the AVX2 kernels serve the rest */
    }
}

/* ---- activation quantizers (bit-identical to quantize.c) ----------------- */

/* round half away from zero, as roundf */
static inline __m512 round_away(__m512 v)
{
    __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m512 frac = _mm512_abs_ps(_mm512_sub_ps(v, t));
    __mmask16 up = _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    __m512 one = _mm512_or_ps(_mm512_set1_ps(1.0f), _mm512_and_ps(v, _mm512_set1_ps(-0.0f)));
    return _mm512_mask_add_ps(t, up, t, one);
}

/* One Q8_0 block of 32; returns the F32 d and Σq. */
static inline float q8_0_block(const float *x, uint16_t *d_out, int8_t *qs, int *sum)
{
    __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float d = amax / 127.0f;
    *d_out = wk_f32_to_f16(d);
    if (d == 0.0f) {
        memset(qs, 0, 32);
        *sum = 0;
        return d;
    }
    __m512 dv = _mm512_set1_ps(d);
    __m512i q0 = _mm512_cvtps_epi32(round_away(_mm512_div_ps(v0, dv)));
    __m512i q1 = _mm512_cvtps_epi32(round_away(_mm512_div_ps(v1, dv)));
    _mm_storeu_si128((__m128i *)qs, _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128((__m128i *)(qs + 16), _mm512_cvtepi32_epi8(q1));
    *sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    return d;
}

static void act_q8_K(const float *x, blk_q8_K *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 256, b++) {
        __m512 am = _mm512_setzero_ps();
        for (int j = 0; j < 256; j += 16) am = _mm512_max_ps(am, _mm512_abs_ps(_mm512_loadu_ps(x + j)));
        const float amax = _mm512_reduce_max_ps(am);
        if (amax == 0.0f) {
            memset(b, 0, sizeof *b);
            continue;
        }
        float xmax = 0.0f; /* first element of largest magnitude, with its sign */
        for (int j = 0; j < 256; j += 16) {
            __mmask16 hit = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + j)), _mm512_set1_ps(amax), _CMP_EQ_OQ);
            if (hit) {
                xmax = x[j + __builtin_ctz(hit)];
                break;
            }
        }
        const float iscale = -127.0f / xmax;
        const __m512 is = _mm512_set1_ps(iscale);
        for (int j = 0; j < 256; j += 16) {
            __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(is, _mm512_loadu_ps(x + j)));
            q = _mm512_min_epi32(q, _mm512_set1_epi32(127));
            _mm_storeu_si128((__m128i *)(b->qs + j), _mm512_cvtepi32_epi8(q));
            b->bsums[j / 16] = (int16_t)_mm512_reduce_add_epi32(q);
        }
        b->d = 1.0f / iscale;
    }
}

int qt_quantize_act_avx512(enum qt_type act_type, const float *src, void *dst, int64_t n)
{
    switch (act_type) {
    case QT_Q8_0: {
        blk_q8_0 *b = dst;
        int sum;
        for (int64_t i = 0; i < n / 32; i++) q8_0_block(src + 32 * i, &b[i].d, b[i].qs, &sum);
        return 0;
    }
    case QT_Q8_1: {
        blk_q8_1 *b = dst;
        int sum;
        for (int64_t i = 0; i < n / 32; i++) {
            float d = q8_0_block(src + 32 * i, &b[i].d, b[i].qs, &sum);
            b[i].s = wk_f32_to_f16(d * (float)sum);
        }
        return 0;
    }
    case QT_Q8_K: act_q8_K(src, dst, n / 256); return 0;
    default: return -1;
    }
}
