/* AVX-512 VNNI kernels on the repacked layouts of matmul_packed.h. */
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/matmul_packed.h"
#include "quant/blocks.h"

/* How far ahead (in blocks of 512 code bytes) the decode loop prefetches:
 * the hardware prefetcher ramps up slowly on the short per-call streams. */
#define PREFETCH_BLOCKS 4

static inline __m512i bcast32(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* NA activation rows (1..4) against one group of 16 weight rows. */
static inline __attribute__((always_inline)) void gemv_group_q8_0(const uint8_t *codes, int64_t blocks,
                                                                  const uint8_t *act, size_t act_stride,
                                                                  const float *ascale, const int32_t *acorr, int NA,
                                                                  __m512 acc[4])
{
    const uint16_t *scales = (const uint16_t *)(codes + (size_t)blocks * 512);
    const int64_t ab_stride = blocks;
    #pragma GCC unroll 4
    for (int i = 0; i < NA; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; b++) {
        const uint8_t *cb = codes + (size_t)b * 512;
        const uint8_t *pf = cb + PREFETCH_BLOCKS * 512;
        for (int l = 0; l < 8; l++) _mm_prefetch((const char *)(pf + 64 * l), _MM_HINT_T0);
        __m512i w[8];
        #pragma GCC unroll 8
        for (int q = 0; q < 8; q++) w[q] = _mm512_load_si512(cb + 64 * q);
        const __m512 ws = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(scales + b * CPU_PACK_ROWS)));
        #pragma GCC unroll 4
        for (int i = 0; i < NA; i++) {
            const uint8_t *aq = act + (size_t)i * act_stride + (size_t)b * 34 + 2;
            __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[0], bcast32(aq));
            __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[1], bcast32(aq + 4));
            s0 = _mm512_dpbusd_epi32(s0, w[2], bcast32(aq + 8));
            s1 = _mm512_dpbusd_epi32(s1, w[3], bcast32(aq + 12));
            s0 = _mm512_dpbusd_epi32(s0, w[4], bcast32(aq + 16));
            s1 = _mm512_dpbusd_epi32(s1, w[5], bcast32(aq + 20));
            s0 = _mm512_dpbusd_epi32(s0, w[6], bcast32(aq + 24));
            s1 = _mm512_dpbusd_epi32(s1, w[7], bcast32(aq + 28));
            __m512i s = _mm512_sub_epi32(_mm512_add_epi32(s0, s1), _mm512_set1_epi32(acorr[i * ab_stride + b]));
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(ws, _mm512_set1_ps(ascale[i * ab_stride + b])),
                                     acc[i]);
        }
    }
}

/* NA Q8_K activation rows (1..4) against one Q4_K group: per sub-block the
 * integer dot products (high nibbles taken as 16·code, shifted back: exact),
 * times the 6-bit scale, summed per super-block; then d·da and, for the
 * mins, dmin·da·Σ mn·bsum, as the scalar kernel. */
static inline __attribute__((always_inline)) void gemv_group_q4_K(const uint8_t *grp, int64_t blocks, const uint8_t *act,
                                                                  size_t act_stride, int NA, __m512 acc[4])
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), mf0 = _mm512_set1_epi8((char)0xF0);
    #pragma GCC unroll 4
    for (int i = 0; i < NA; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; b++) {
        const uint8_t *blk = grp + (size_t)b * CPU_PACK_Q4K_BLOCK;
        const uint8_t *sc = blk + 2048, *mn = sc + 128;
        const uint16_t *dp = (const uint16_t *)(mn + 128);
        const uint8_t *pf = blk + 2 * CPU_PACK_Q4K_BLOCK;
        __m512i isum[4], msum[4];
        #pragma GCC unroll 4
        for (int i = 0; i < NA; i++) isum[i] = msum[i] = _mm512_setzero_si512();
        #pragma GCC unroll 4
        for (int pr = 0; pr < 4; pr++) {
            __m512i v[8];
            #pragma GCC unroll 8
            for (int q = 0; q < 8; q++) {
                _mm_prefetch((const char *)(pf + 64 * (8 * pr + q)), _MM_HINT_T0);
                v[q] = _mm512_load_si512(blk + 64 * (8 * pr + q));
            }
            const __m512i s_lo = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(sc + 32 * pr)));
            const __m512i s_hi = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(sc + 32 * pr + 16)));
            #pragma GCC unroll 4
            for (int i = 0; i < NA; i++) {
                const int8_t *aq = ((const blk_q8_K *)(act + (size_t)i * act_stride))[b].qs + 64 * pr;
                __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
                #pragma GCC unroll 8
                for (int q = 0; q < 8; q++) {
                    lo = _mm512_dpbusd_epi32(lo, _mm512_and_si512(v[q], m4), bcast32((const uint8_t *)aq + 4 * q));
                    hi = _mm512_dpbusd_epi32(hi, _mm512_and_si512(v[q], mf0),
                                             bcast32((const uint8_t *)aq + 32 + 4 * q));
                }
                hi = _mm512_srai_epi32(hi, 4);
                isum[i] = _mm512_add_epi32(isum[i], _mm512_add_epi32(_mm512_mullo_epi32(lo, s_lo),
                                                                     _mm512_mullo_epi32(hi, s_hi)));
            }
        }
        _mm_prefetch((const char *)(pf + 2048), _MM_HINT_T0);
        _mm_prefetch((const char *)(pf + 2048 + 64), _MM_HINT_T0);
        _mm_prefetch((const char *)(pf + 2048 + 128), _MM_HINT_T0);
        _mm_prefetch((const char *)(pf + 2048 + 192), _MM_HINT_T0);
        _mm_prefetch((const char *)(pf + 2048 + 256), _MM_HINT_T0);
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)dp));
        const __m512 dmin = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(dp + CPU_PACK_ROWS)));
        #pragma GCC unroll 4
        for (int i = 0; i < NA; i++) {
            const blk_q8_K *a = (const blk_q8_K *)(act + (size_t)i * act_stride) + b;
            #pragma GCC unroll 8
            for (int j = 0; j < 8; j++) {
                const __m512i m = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(mn + 16 * j)));
                msum[i] = _mm512_add_epi32(msum[i],
                                           _mm512_mullo_epi32(m, _mm512_set1_epi32(a->bsums[2 * j] + a->bsums[2 * j + 1])));
            }
            const __m512 da = _mm512_set1_ps(a->d);
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i]), _mm512_mul_ps(d, da), acc[i]);
            acc[i] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum[i]), _mm512_mul_ps(dmin, da), acc[i]);
        }
    }
}

/* The four 6-bit code vectors of quad j of a Q6_K half: from ql lines A
 * (j) and B (j+8) and qh line H (j): elements l, l+32, l+64, l+96. */
static inline __attribute__((always_inline)) void q6_codes(const uint8_t *half, int j, __m512i u[4])
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i A = _mm512_load_si512(half + 64 * j), B = _mm512_load_si512(half + 64 * (j + 8));
    const __m512i H = _mm512_load_si512(half + 64 * (16 + j));
    u[0] = _mm512_or_si512(_mm512_and_si512(A, m4), _mm512_and_si512(_mm512_slli_epi16(H, 4), m30));
    u[1] = _mm512_or_si512(_mm512_and_si512(B, m4), _mm512_and_si512(_mm512_slli_epi16(H, 2), m30));
    u[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(A, 4), m4), _mm512_and_si512(H, m30));
    u[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(B, 4), m4), _mm512_and_si512(_mm512_srli_epi16(H, 2), m30));
}

/* NA Q8_K activation rows (1..4) against one Q6_K group: per 16-element
 * sub-block s, Σ u·a − 32·bsum_s (exact), times the int8 scale, summed per
 * super-block, then d·da. */
static inline __attribute__((always_inline)) void gemv_group_q6_K(const uint8_t *grp, int64_t blocks, const uint8_t *act,
                                                                  size_t act_stride, int NA, __m512 acc[4])
{
    #pragma GCC unroll 4
    for (int i = 0; i < NA; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; b++) {
        const uint8_t *blk = grp + (size_t)b * CPU_PACK_Q6K_BLOCK;
        const int8_t *sc = (const int8_t *)(blk + 3072);
        const uint8_t *pf = blk + 2 * CPU_PACK_Q6K_BLOCK;
        __m512i isum[4];
        #pragma GCC unroll 4
        for (int i = 0; i < NA; i++) isum[i] = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            const uint8_t *half = blk + (size_t)h * 24 * 64;
            for (int l = 0; l < 24; l++) _mm_prefetch((const char *)(pf + (size_t)h * 24 * 64 + 64 * l), _MM_HINT_T0);
            for (int jj = 0; jj < 2; jj++) { /* quads 4jj..4jj+3: sub-blocks 8h+jj + {0,2,4,6} */
                __m512i dots[4][4]; /* [activation][code vector] */
                #pragma GCC unroll 4
                for (int i = 0; i < NA; i++)
                    #pragma GCC unroll 4
                    for (int c = 0; c < 4; c++) dots[i][c] = _mm512_setzero_si512();
                for (int j = 4 * jj; j < 4 * jj + 4; j++) {
                    __m512i u[4];
                    q6_codes(half, j, u);
                    #pragma GCC unroll 4
                    for (int i = 0; i < NA; i++) {
                        const uint8_t *aq =
                            (const uint8_t *)((const blk_q8_K *)(act + (size_t)i * act_stride))[b].qs + 128 * h + 4 * j;
                        #pragma GCC unroll 4
                        for (int c = 0; c < 4; c++) dots[i][c] = _mm512_dpbusd_epi32(dots[i][c], u[c], bcast32(aq + 32 * c));
                    }
                }
                #pragma GCC unroll 4
                for (int c = 0; c < 4; c++) {
                    const int s = 8 * h + 2 * c + jj;
                    const __m512i scv = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(sc + 16 * s)));
                    #pragma GCC unroll 4
                    for (int i = 0; i < NA; i++) {
                        const blk_q8_K *a = (const blk_q8_K *)(act + (size_t)i * act_stride) + b;
                        __m512i t = _mm512_sub_epi32(dots[i][c], _mm512_set1_epi32(32 * a->bsums[s]));
                        isum[i] = _mm512_add_epi32(isum[i], _mm512_mullo_epi32(t, scv));
                    }
                }
            }
        }
        for (int l = 0; l < 5; l++) _mm_prefetch((const char *)(pf + 3072 + 64 * l), _MM_HINT_T0);
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(blk + 3072 + 256)));
        #pragma GCC unroll 4
        for (int i = 0; i < NA; i++) {
            const float da = ((const blk_q8_K *)(act + (size_t)i * act_stride))[b].d;
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i]), _mm512_mul_ps(d, _mm512_set1_ps(da)), acc[i]);
        }
    }
}

/* One group against NA = 1..4 activation rows: each layout's kernel
 * instantiated per NA. The loops over rows, code vectors and sub-blocks carry
 * `#pragma GCC unroll`: without it GCC -O2 kept them as loops and the per-row
 * accumulators (dots[4][4], isum, msum) on the stack, a load and store around
 * every dpbusd (Q6_K, 4 rows in cache, one thread: 89.5 → 223.5 GFLOP/s). Q6_K's
 * loop over the 4 quads of a sub-block stays rolled: unrolled, its one-row decode
 * from memory ran 8 % slower. */
typedef void (*group_fn)(const uint8_t *grp, int64_t blocks, const uint8_t *act, size_t act_stride,
                         const float *ascale, const int32_t *acorr, __m512 acc[4]);

#define GROUP_FNS(NAME, CALL)                                                                                   \
    static void NAME##_1(const uint8_t *g, int64_t b, const uint8_t *a, size_t s, const float *as,           \
                         const int32_t *ac, __m512 acc[4]) { CALL(1); }                                         \
    static void NAME##_2(const uint8_t *g, int64_t b, const uint8_t *a, size_t s, const float *as,           \
                         const int32_t *ac, __m512 acc[4]) { CALL(2); }                                         \
    static void NAME##_3(const uint8_t *g, int64_t b, const uint8_t *a, size_t s, const float *as,           \
                         const int32_t *ac, __m512 acc[4]) { CALL(3); }                                         \
    static void NAME##_4(const uint8_t *g, int64_t b, const uint8_t *a, size_t s, const float *as,           \
                         const int32_t *ac, __m512 acc[4]) { CALL(4); }                                         \
    static const group_fn NAME[4] = {NAME##_1, NAME##_2, NAME##_3, NAME##_4};

#define CALL_Q8_0(NA) gemv_group_q8_0(g, b, a, s, as, ac, NA, acc)
#define CALL_Q4_K(NA) ((void)as, (void)ac, gemv_group_q4_K(g, b, a, s, NA, acc))
#define CALL_Q6_K(NA) ((void)as, (void)ac, gemv_group_q6_K(g, b, a, s, NA, acc))
GROUP_FNS(k_group_q8_0, CALL_Q8_0)
GROUP_FNS(k_group_q4_K, CALL_Q4_K)
GROUP_FNS(k_group_q6_K, CALL_Q6_K)

void cpu_pack_gemv_avx512(const struct cpu_packed *p, int64_t g0, int64_t g1, const uint8_t *act,
                          size_t act_stride, const float *ascale, const int32_t *acorr, int na, float *y,
                          int64_t y_stride)
{
    const int64_t blocks = p->blocks;
    const group_fn *fns = p->layout == CPU_PACK_R16_Q4_K   ? k_group_q4_K
                          : p->layout == CPU_PACK_R16_Q6_K ? k_group_q6_K
                                                           : k_group_q8_0;
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *grp = p->data + (size_t)g * p->group_bytes;
        const int64_t r0 = g * CPU_PACK_ROWS;
        const int nv = (int)(p->rows - r0 < CPU_PACK_ROWS ? p->rows - r0 : CPU_PACK_ROWS);
        const __mmask16 keep = (__mmask16)((1u << nv) - 1);
        for (int i0 = 0; i0 < na; i0 += 4) {
            const int ni = na - i0 < 4 ? na - i0 : 4;
            __m512 acc[4];
            /* ascale/acorr exist for Q8_0 only (blocks entries per activation row) */
            const float *as = ascale ? ascale + i0 * blocks : NULL;
            const int32_t *ac = acorr ? acorr + i0 * blocks : NULL;
            fns[ni - 1](grp, blocks, act + (size_t)i0 * act_stride, act_stride, as, ac, acc);
            for (int i = 0; i < ni; i++) _mm512_mask_storeu_ps(y + (i0 + i) * y_stride + r0, keep, acc[i]);
        }
    }
}

/* Q4_K group → panel: sub-blocks of 32 (2p: low nibbles, 2p+1: high), scale
 * d·sc and min dmin·mn per sub-block, as unpack_row makes them. */
static void panel_q4_K(const struct cpu_packed *p, const uint8_t *grp, uint8_t *panel, int flip80)
{
    const int64_t sub = p->blocks * 8; /* sub-blocks of 32 */
    const __m512i m4 = _mm512_set1_epi8(0x0F), flip = _mm512_set1_epi32(flip80 ? (int)0x80808080u : 0);
    float *scale = (float *)(panel + (size_t)sub * 512);
    float *minv = scale + sub * CPU_PACK_ROWS;
    for (int64_t b = 0; b < p->blocks; b++) {
        const uint8_t *blk = grp + (size_t)b * CPU_PACK_Q4K_BLOCK;
        const uint8_t *sc = blk + 2048, *mn = sc + 128;
        const uint16_t *dp = (const uint16_t *)(mn + 128);
        for (int pr = 0; pr < 4; pr++) {
            uint8_t *lo = panel + (size_t)(b * 8 + 2 * pr) * 512, *hi = lo + 512;
            for (int q = 0; q < 8; q++) {
                __m512i v = _mm512_load_si512(blk + 64 * (8 * pr + q));
                _mm512_store_si512(lo + 64 * q, _mm512_xor_si512(_mm512_and_si512(v, m4), flip));
                _mm512_store_si512(hi + 64 * q, _mm512_xor_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), flip));
            }
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)dp));
        const __m512 dmin = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(dp + CPU_PACK_ROWS)));
        for (int j = 0; j < 8; j++) {
            __m512 s = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(sc + 16 * j))));
            __m512 m = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(mn + 16 * j))));
            _mm512_store_ps(scale + (b * 8 + j) * CPU_PACK_ROWS, _mm512_mul_ps(d, s));
            _mm512_store_ps(minv + (b * 8 + j) * CPU_PACK_ROWS, _mm512_mul_ps(dmin, m));
        }
    }
}

/* Q6_K group → panel: sub-blocks of 16 (4 lines each: codes u − 32, signed,
 * or +128 with flip80), scale d·sc, no min, as unpack_row makes them. */
static void panel_q6_K(const struct cpu_packed *p, const uint8_t *grp, uint8_t *panel, int flip80)
{
    const int64_t sub = p->blocks * 16; /* sub-blocks of 16 */
    const __m512i bias = _mm512_set1_epi8(flip80 ? (char)96 : (char)-32); /* u − 32 (+ 128) */
    float *scale = (float *)(panel + (size_t)sub * 256);
    float *minv = scale + sub * CPU_PACK_ROWS;
    for (int64_t b = 0; b < p->blocks; b++) {
        const uint8_t *blk = grp + (size_t)b * CPU_PACK_Q6K_BLOCK;
        const int8_t *sc = (const int8_t *)(blk + 3072);
        for (int h = 0; h < 2; h++) {
            const uint8_t *half = blk + (size_t)h * 24 * 64;
            for (int j = 0; j < 8; j++) {
                __m512i u[4];
                q6_codes(half, j, u);
                for (int c = 0; c < 4; c++) { /* element 128h + 32c + 4j: sub-block 8h + 2c + j/4, line j%4 */
                    int64_t s = b * 16 + 8 * h + 2 * c + j / 4;
                    _mm512_store_si512(panel + (size_t)s * 256 + 64 * (j % 4), _mm512_add_epi8(u[c], bias));
                }
            }
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(blk + 3072 + 256)));
        for (int s = 0; s < 16; s++) {
            __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(sc + 16 * s))));
            _mm512_store_ps(scale + (b * 16 + s) * CPU_PACK_ROWS, _mm512_mul_ps(d, f));
            _mm512_store_ps(minv + (b * 16 + s) * CPU_PACK_ROWS, _mm512_setzero_ps());
        }
    }
}

void cpu_pack_panel_avx512(const struct cpu_packed *p, int64_t g, uint8_t *panel, int flip80)
{
    if (p->layout == CPU_PACK_R16_Q6_K) {
        panel_q6_K(p, p->data + (size_t)g * p->group_bytes, panel, flip80);
        return;
    }
    if (p->layout == CPU_PACK_R16_Q4_K) {
        panel_q4_K(p, p->data + (size_t)g * p->group_bytes, panel, flip80);
        return;
    }
    const int64_t blocks = p->blocks;
    const uint8_t *codes = p->data + (size_t)g * p->group_bytes;
    const uint16_t *scales = (const uint16_t *)(codes + (size_t)blocks * 512);
    const __m512i flip = _mm512_set1_epi32(flip80 ? 0 : (int)0x80808080u); /* stored +128 already */
    for (size_t o = 0; o < (size_t)blocks * 512; o += 64)
        _mm512_store_si512(panel + o, _mm512_xor_si512(_mm512_load_si512(codes + o), flip));
    float *scale = (float *)(panel + (size_t)blocks * 512);
    float *minv = scale + blocks * CPU_PACK_ROWS;
    for (int64_t b = 0; b < blocks; b++) {
        _mm512_store_ps(scale + b * CPU_PACK_ROWS,
                        _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(scales + b * CPU_PACK_ROWS))));
        _mm512_store_ps(minv + b * CPU_PACK_ROWS, _mm512_setzero_ps());
    }
}
