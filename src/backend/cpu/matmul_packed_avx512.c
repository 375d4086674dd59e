/* AVX-512 VNNI kernels on the repacked layouts of matmul_packed.h. */
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/matmul_packed.h"

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
static inline __attribute__((always_inline)) void gemv_group(const uint8_t *codes, const uint16_t *scales,
                                                             int64_t blocks, const uint8_t *act, size_t act_stride,
                                                             const float *ascale, const int32_t *acorr,
                                                             int64_t ab_stride, int NA, __m512 acc[4])
{
    for (int i = 0; i < NA; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; b++) {
        const uint8_t *cb = codes + (size_t)b * 512;
        const uint8_t *pf = cb + PREFETCH_BLOCKS * 512;
        for (int l = 0; l < 8; l++) _mm_prefetch((const char *)(pf + 64 * l), _MM_HINT_T0);
        __m512i w[8];
        for (int q = 0; q < 8; q++) w[q] = _mm512_load_si512(cb + 64 * q);
        const __m512 ws = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(scales + b * CPU_PACK_ROWS)));
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

void cpu_pack_gemv_avx512(const struct cpu_packed *p, int64_t g0, int64_t g1, const uint8_t *act,
                          size_t act_stride, const float *ascale, const int32_t *acorr, int na, float *y,
                          int64_t y_stride)
{
    const int64_t blocks = p->blocks;
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *codes = p->data + (size_t)g * p->group_bytes;
        const uint16_t *scales = (const uint16_t *)(codes + (size_t)blocks * 512);
        const int64_t r0 = g * CPU_PACK_ROWS;
        const int nv = (int)(p->rows - r0 < CPU_PACK_ROWS ? p->rows - r0 : CPU_PACK_ROWS);
        const __mmask16 keep = (__mmask16)((1u << nv) - 1);
        for (int i0 = 0; i0 < na; i0 += 4) {
            const int ni = na - i0 < 4 ? na - i0 : 4;
            const uint8_t *a = act + (size_t)i0 * act_stride;
            const float *as = ascale + i0 * blocks;
            const int32_t *ac = acorr + i0 * blocks;
            __m512 acc[4];
            switch (ni) {
            case 1: gemv_group(codes, scales, blocks, a, act_stride, as, ac, blocks, 1, acc); break;
            case 2: gemv_group(codes, scales, blocks, a, act_stride, as, ac, blocks, 2, acc); break;
            case 3: gemv_group(codes, scales, blocks, a, act_stride, as, ac, blocks, 3, acc); break;
            default: gemv_group(codes, scales, blocks, a, act_stride, as, ac, blocks, 4, acc); break;
            }
            for (int i = 0; i < ni; i++) _mm512_mask_storeu_ps(y + (i0 + i) * y_stride + r0, keep, acc[i]);
        }
    }
}

void cpu_pack_panel_avx512(const struct cpu_packed *p, int64_t g, uint8_t *panel, int flip80)
{
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
