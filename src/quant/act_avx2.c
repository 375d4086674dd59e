/* AVX2 activation quantizers (Q8_0, Q8_1, Q8_K), byte for byte those of
 * quantize.c (called only when wk_cpu() reports AVX2, FMA and F16C). A decode
 * step quantizes every matmul's input row; the scalar loop (roundf per
 * element) was a tenth of a small model's CPU decode step. */
#include <immintrin.h>
#include <string.h>

#include "quant/blocks.h"
#include "quant/quant_impl.h"
#include "util/f16.h"

static inline __m256 abs8(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

static inline float hmax8(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

static inline int hsum8i(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* round half away from zero, as roundf */
static inline __m256 round_away(__m256 v)
{
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 up = _mm256_cmp_ps(abs8(_mm256_sub_ps(v, t)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, _mm256_set1_ps(-0.0f)));
    return _mm256_add_ps(t, _mm256_and_ps(up, one));
}

/* 32 int32 (every value in int8 range) → 32 int8 in order. */
static inline void store_i8x32(int8_t *dst, __m256i q0, __m256i q1, __m256i q2, __m256i q3)
{
    /* the packs work per 128-bit lane: lane 0 holds q0..q3's first halves, lane 1 their second */
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)dst, p);
}

/* One Q8_0 block of 32: d = amax / 127, q = round-half-away(x / d); returns the F32 d, *sum = Σq. */
static inline float q8_0_block(const float *x, uint16_t *d_out, int8_t *qs, int *sum)
{
    const __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
    const __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
    const float amax = hmax8(_mm256_max_ps(_mm256_max_ps(abs8(v0), abs8(v1)), _mm256_max_ps(abs8(v2), abs8(v3))));
    const float d = amax / 127.0f;
    *d_out = wk_f32_to_f16(d);
    if (d == 0.0f) {
        memset(qs, 0, 32);
        *sum = 0;
        return d;
    }
    const __m256 dv = _mm256_set1_ps(d);
    const __m256i q0 = _mm256_cvtps_epi32(round_away(_mm256_div_ps(v0, dv)));
    const __m256i q1 = _mm256_cvtps_epi32(round_away(_mm256_div_ps(v1, dv)));
    const __m256i q2 = _mm256_cvtps_epi32(round_away(_mm256_div_ps(v2, dv)));
    const __m256i q3 = _mm256_cvtps_epi32(round_away(_mm256_div_ps(v3, dv)));
    store_i8x32(qs, q0, q1, q2, q3);
    *sum = hsum8i(_mm256_add_epi32(_mm256_add_epi32(q0, q1), _mm256_add_epi32(q2, q3)));
    return d;
}

/* Q8_K: iscale = −127 / (the first element of largest magnitude, with its sign),
 * q = min(nearest-even(iscale·x), 127), bsums per 16, d = 1 / iscale. */
static void act_q8_K(const float *x, blk_q8_K *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 256, b++) {
        __m256 am = _mm256_setzero_ps();
        for (int j = 0; j < 256; j += 8) am = _mm256_max_ps(am, abs8(_mm256_loadu_ps(x + j)));
        const float amax = hmax8(am);
        if (amax == 0.0f) {
            memset(b, 0, sizeof *b);
            continue;
        }
        float xmax = 0.0f;
        const __m256 av = _mm256_set1_ps(amax);
        for (int j = 0; j < 256; j += 8) {
            const int hit = _mm256_movemask_ps(_mm256_cmp_ps(abs8(_mm256_loadu_ps(x + j)), av, _CMP_EQ_OQ));
            if (hit) {
                xmax = x[j + __builtin_ctz((unsigned)hit)];
                break;
            }
        }
        const float iscale = -127.0f / xmax;
        const __m256 is = _mm256_set1_ps(iscale);
        const __m256i top = _mm256_set1_epi32(127);
        for (int j = 0; j < 256; j += 32) {
            __m256i q[4];
            for (int h = 0; h < 4; h++)
                q[h] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(x + j + 8 * h))), top);
            store_i8x32(b->qs + j, q[0], q[1], q[2], q[3]);
            b->bsums[j / 16] = (int16_t)hsum8i(_mm256_add_epi32(q[0], q[1]));
            b->bsums[j / 16 + 1] = (int16_t)hsum8i(_mm256_add_epi32(q[2], q[3]));
        }
        b->d = 1.0f / iscale;
    }
}

int qt_quantize_act_avx2(enum qt_type act_type, const float *src, void *dst, int64_t n)
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
            const float d = q8_0_block(src + 32 * i, &b[i].d, b[i].qs, &sum);
            b[i].s = wk_f32_to_f16(d * (float)sum);
        }
        return 0;
    }
    case QT_Q8_K: act_q8_K(src, dst, n / 256); return 0;
    default: return -1;
    }
}
