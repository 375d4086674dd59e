/* Panel matmul for prefill (AVX-512): the weights are unpacked panel by
 * panel into one common form and multiplied by AMX int8 tiles or, without
 * AMX, by an AVX-512 VNNI register-blocked kernel.
 *
 * Every block-quantized weight type is "int8 codes × per-G scale − per-G min"
 * with G = 32 (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q4_K, Q5_K, IQ4_XS) or
 * G = 16 (Q2_K, Q3_K, Q6_K). A panel of 16 weight rows is unpacked into that
 * form once per call (codes in VNNI order: 16 weights × 4 consecutive K bytes
 * per 64-byte row, the AMX B operand) and reused for all activation rows. The
 * activations are quantized to the partner format (bit-exact, as everywhere)
 * and stored per 16 rows and G block row-major (the AMX A operand). Per G
 * block the kernels form the same integer block dot products as the scalar
 * kernels, convert them to F32 and accumulate them with scale_w·scale_a (and
 * min_w·sum_a), as llama.cpp's kernels do.
 *
 * Results per output do not depend on how rows are grouped into tiles or
 * threads (padding rows/columns are zero and never mix with real ones). */
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/matmul_impl.h"
#include "backend/cpu/matmul_packed.h"
#include "backend/cpu/matmul_panel.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "util/cpu.h"

#define TILE CPU_PANEL_ROWS

static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

int cpu_panel_group(enum qt_type type)
{
    switch (type) {
    case QT_Q4_0: case QT_Q4_1: case QT_Q5_0: case QT_Q5_1: case QT_Q8_0: case QT_IQ4_NL:
    case QT_Q4_K: case QT_Q5_K: case QT_IQ4_XS:
        return 32;
    case QT_Q2_K: case QT_Q3_K: case QT_Q6_K:
        return 16;
    default:
        return 0;
    }
}

static int has_min(enum qt_type type)
{
    return type == QT_Q4_1 || type == QT_Q5_1 || type == QT_Q4_K || type == QT_Q5_K || type == QT_Q2_K;
}

enum cpu_panel_kernel cpu_panel_kernel_for(enum qt_type type)
{
    const wk_cpu_features *f = wk_cpu();
    if (!cpu_panel_group(type) || !f->avx512f || !f->avx512bw || !f->avx512vl || !f->avx512vnni || !f->avx2 ||
        !f->f16c)
        return CPU_PANEL_NONE;
    if (f->amx_int8 && cpu_amx_request()) return CPU_PANEL_AMX;
    return CPU_PANEL_VNNI;
}

/* Scratch layout (all parts 64-byte aligned):
 *   acts:   groups × blocks × (16·G code bytes)      16 activation rows of G
 *   ascale: groups × blocks × 16 floats              activation scale
 *   asum:   groups × blocks × 16 floats              activation sum term (min types)
 *   acorr:  groups × blocks × 16 int32               128·Σ codes (VNNI kernel)
 *   panels: threads × panel_bytes                    unpacked weight panels
 *   qbufs:  threads × one quantized activation row */
typedef struct {
    int64_t groups, blocks;
    size_t acts, ascale, asum, acorr, panels, panel_bytes, qbufs, qbuf_bytes, total;
} panel_layout;

static size_t align64(size_t v) { return (v + 63) & ~(size_t)63; }

static panel_layout layout_of(enum qt_type type, int G, int64_t n, int64_t k, int threads)
{
    panel_layout L;
    L.groups = (n + TILE - 1) / TILE;
    L.blocks = k / G;
    size_t tiles = (size_t)(L.groups * L.blocks);
    L.acts = 0;
    L.ascale = align64(tiles * TILE * (size_t)G);
    L.asum = L.ascale + align64(tiles * TILE * sizeof(float));
    L.acorr = L.asum + align64(tiles * TILE * sizeof(float));
    L.panels = L.acorr + align64(tiles * TILE * sizeof(int32_t));
    /* VNNI codes + scales + mins, then the row-major staging codes */
    L.panel_bytes = align64((size_t)L.blocks * (2 * TILE * (size_t)G + 2 * TILE * sizeof(float)));
    L.qbufs = L.panels + L.panel_bytes * (size_t)threads;
    L.qbuf_bytes = align64(qt_act_row_bytes(type, k));
    L.total = L.qbufs + L.qbuf_bytes * (size_t)threads;
    return L;
}

size_t cpu_panel_scratch_bytes(enum qt_type type, int64_t n, int64_t k, int threads)
{
    int G = cpu_panel_group(type);
    return G ? layout_of(type, G, n, k, threads).total : 0;
}

/* ---- weight unpackers: one row → codes[b*16*G + j], scale[b*16], min[b*16] */

static void unpack_row(enum qt_type type, const void *src, int64_t k, int8_t *codes, float *scale, float *minv)
{
    const int G = cpu_panel_group(type);
    const size_t cs = TILE * (size_t)G; /* code stride between blocks */
    switch (type) {
    case QT_Q8_0: {
        const blk_q8_0 *b = src;
        for (int64_t i = 0; i < k / 32; i++) {
            memcpy(codes + i * cs, b[i].qs, 32);
            scale[i * TILE] = h2f(b[i].d);
            minv[i * TILE] = 0;
        }
        break;
    }
    case QT_Q4_0:
    case QT_IQ4_NL: {
        const blk_q4_0 *b = src; /* same layout as blk_iq4_nl */
        const __m128i m4 = _mm_set1_epi8(0x0F);
        const __m128i book = type == QT_Q4_0 ? _mm_setr_epi8(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7)
                                             : _mm_loadu_si128((const __m128i *)k_iq4nl_values);
        for (int64_t i = 0; i < k / 32; i++) {
            __m128i q = _mm_loadu_si128((const __m128i *)b[i].qs);
            _mm_storeu_si128((__m128i *)(codes + i * cs), _mm_shuffle_epi8(book, _mm_and_si128(q, m4)));
            _mm_storeu_si128((__m128i *)(codes + i * cs + 16),
                             _mm_shuffle_epi8(book, _mm_and_si128(_mm_srli_epi16(q, 4), m4)));
            scale[i * TILE] = h2f(b[i].d);
            minv[i * TILE] = 0;
        }
        break;
    }
    case QT_Q4_1: {
        const blk_q4_1 *b = src;
        const __m128i m4 = _mm_set1_epi8(0x0F);
        for (int64_t i = 0; i < k / 32; i++) {
            __m128i q = _mm_loadu_si128((const __m128i *)b[i].qs);
            _mm_storeu_si128((__m128i *)(codes + i * cs), _mm_and_si128(q, m4));
            _mm_storeu_si128((__m128i *)(codes + i * cs + 16), _mm_and_si128(_mm_srli_epi16(q, 4), m4));
            scale[i * TILE] = h2f(b[i].d);
            minv[i * TILE] = -h2f(b[i].m); /* + m·s enters as − min·sum */
        }
        break;
    }
    case QT_Q5_0:
    case QT_Q5_1: {
        const int is1 = type == QT_Q5_1;
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        /* byte l of the 32 takes qh byte l/8; then test bit l%8 */
        const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2,
                                                2, 3, 3, 3, 3, 3, 3, 3, 3);
        const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
        for (int64_t i = 0; i < k / 32; i++) {
            const uint8_t *qs, *qhp;
            uint16_t d, m = 0;
            if (is1) {
                const blk_q5_1 *b = (const blk_q5_1 *)src + i;
                qs = b->qs, qhp = b->qh, d = b->d, m = b->m;
            } else {
                const blk_q5_0 *b = (const blk_q5_0 *)src + i;
                qs = b->qs, qhp = b->qh, d = b->d;
            }
            uint32_t qh;
            memcpy(&qh, qhp, 4);
            __m128i q = _mm_loadu_si128((const __m128i *)qs);
            __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4);
            __m256i hb = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), spread);
            hb = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, bit), bit), _mm256_set1_epi8(0x10));
            __m256i c = _mm256_or_si256(nib, hb);
            if (!is1) c = _mm256_sub_epi8(c, _mm256_set1_epi8(16));
            _mm256_storeu_si256((__m256i *)(codes + i * cs), c);
            scale[i * TILE] = h2f(d);
            minv[i * TILE] = is1 ? -h2f(m) : 0.0f;
        }
        break;
    }
    case QT_Q4_K:
    case QT_Q5_K: {
        const int is5 = type == QT_Q5_K;
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        for (int64_t i = 0; i < k / 256; i++) {
            const uint8_t *qs, *sc12, *qh = NULL;
            float d, dmin;
            if (is5) {
                const blk_q5_K *b = (const blk_q5_K *)src + i;
                qs = b->qs, sc12 = b->scales, qh = b->qh, d = h2f(b->d), dmin = h2f(b->dmin);
            } else {
                const blk_q4_K *b = (const blk_q4_K *)src + i;
                qs = b->qs, sc12 = b->scales, d = h2f(b->d), dmin = h2f(b->dmin);
            }
            __m256i hv = is5 ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
            for (int g = 0; g < 4; g++) {
                __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * g));
                __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                if (is5) {
                    const __m256i b16 = _mm256_set1_epi8(0x10);
                    lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(hv, 2 * g), 4), b16));
                    hi = _mm256_or_si256(hi,
                                         _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(hv, 2 * g + 1), 4), b16));
                }
                int64_t s0 = i * 8 + 2 * g;
                _mm256_storeu_si256((__m256i *)(codes + s0 * cs), lo);
                _mm256_storeu_si256((__m256i *)(codes + (s0 + 1) * cs), hi);
                for (int h = 0; h < 2; h++) {
                    uint8_t sc, mn;
                    k_scale_min(2 * g + h, sc12, &sc, &mn);
                    scale[(s0 + h) * TILE] = d * (float)sc;
                    minv[(s0 + h) * TILE] = dmin * (float)mn;
                }
            }
        }
        break;
    }
    case QT_IQ4_XS: {
        const blk_iq4_xs *b = src;
        const __m128i m4 = _mm_set1_epi8(0x0F);
        const __m128i book = _mm_loadu_si128((const __m128i *)k_iq4nl_values);
        for (int64_t i = 0; i < k / 256; i++) {
            const float d = h2f(b[i].d);
            for (int ib = 0; ib < 8; ib++) {
                int64_t s = i * 8 + ib;
                __m128i q = _mm_loadu_si128((const __m128i *)(b[i].qs + 16 * ib));
                _mm_storeu_si128((__m128i *)(codes + s * cs), _mm_shuffle_epi8(book, _mm_and_si128(q, m4)));
                _mm_storeu_si128((__m128i *)(codes + s * cs + 16),
                                 _mm_shuffle_epi8(book, _mm_and_si128(_mm_srli_epi16(q, 4), m4)));
                scale[s * TILE] = d * (float)(iq4xs_scale(ib, &b[i]) - 32);
                minv[s * TILE] = 0;
            }
        }
        break;
    }
    case QT_Q6_K: {
        const blk_q6_K *b = src;
        const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32);
        for (int64_t i = 0; i < k / 256; i++) {
            const float d = h2f(b[i].d);
            for (int h = 0; h < 2; h++) {
                const uint8_t *ql = b[i].ql + 64 * h;
                __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
                __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
                __m256i qh = _mm256_loadu_si256((const __m256i *)(b[i].qh + 32 * h));
                __m256i u[4];
                u[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
                u[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
                u[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, m30));
                u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                       _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
                for (int q = 0; q < 4; q++) {
                    /* 32 codes = sub-blocks s (first 16) and s+1 */
                    int64_t s = i * 16 + 8 * h + 2 * q;
                    __m256i c = _mm256_sub_epi8(u[q], k32);
                    _mm_storeu_si128((__m128i *)(codes + s * cs), _mm256_castsi256_si128(c));
                    _mm_storeu_si128((__m128i *)(codes + (s + 1) * cs), _mm256_extracti128_si256(c, 1));
                    scale[s * TILE] = d * (float)b[i].scales[8 * h + 2 * q];
                    scale[(s + 1) * TILE] = d * (float)b[i].scales[8 * h + 2 * q + 1];
                    minv[s * TILE] = minv[(s + 1) * TILE] = 0;
                }
            }
        }
        break;
    }
    case QT_Q3_K:
    case QT_Q2_K: {
        /* both: half h, plane p → 32 codes (bytes l of qs[32h..], shift 2p) =
         * sub-blocks 8h+2p and 8h+2p+1; Q3_K adds the hmask bit (4h+p) */
        const int is3 = type == QT_Q3_K;
        const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1), four = _mm256_set1_epi8(4);
        for (int64_t i = 0; i < k / 256; i++) {
            const uint8_t *qs = is3 ? ((const blk_q3_K *)src)[i].qs : ((const blk_q2_K *)src)[i].qs;
            const __m256i hm = is3 ? _mm256_loadu_si256((const __m256i *)((const blk_q3_K *)src)[i].hmask)
                                   : _mm256_setzero_si256();
            for (int h = 0; h < 2; h++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * h));
                for (int p = 0; p < 4; p++) {
                    __m256i c = _mm256_and_si256(_mm256_srli_epi16(q, 2 * p), m3);
                    if (is3) { /* code − 4 unless the high bit is set */
                        __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + p), one);
                        c = _mm256_sub_epi8(c, _mm256_andnot_si256(_mm256_slli_epi16(hb, 2), four));
                    }
                    int64_t sb = i * 16 + 8 * h + 2 * p;
                    _mm_storeu_si128((__m128i *)(codes + sb * cs), _mm256_castsi256_si128(c));
                    _mm_storeu_si128((__m128i *)(codes + (sb + 1) * cs), _mm256_extracti128_si256(c, 1));
                }
            }
            if (is3) {
                const blk_q3_K *x = (const blk_q3_K *)src + i;
                const float d = h2f(x->d);
                for (int sb = 0; sb < 16; sb++) {
                    scale[(i * 16 + sb) * TILE] = d * (float)q3k_scale(sb, x->scales);
                    minv[(i * 16 + sb) * TILE] = 0;
                }
            } else {
                const blk_q2_K *x = (const blk_q2_K *)src + i;
                const float d = h2f(x->d), dmin = h2f(x->dmin);
                for (int sb = 0; sb < 16; sb++) {
                    scale[(i * 16 + sb) * TILE] = d * (float)(x->scales[sb] & 0xF);
                    minv[(i * 16 + sb) * TILE] = dmin * (float)(x->scales[sb] >> 4);
                }
            }
        }
        break;
    }
    default:
        break;
    }
}

/* Unpacks weight rows [r0, r0+nv) into a panel of 16 (missing rows zero):
 * codes in VNNI order (G/4 rows of 16 weights × 4 bytes; with flip80 each
 * code is stored XOR 0x80, i.e. as code+128 unsigned, for VPDPBUSD), then
 * the per-block scales and mins of the 16 rows. */
static void unpack_panel(const cpu_weight *w, int64_t r0, int nv, int G, int64_t blocks, uint8_t *panel, int flip80)
{
    const size_t tb = TILE * (size_t)G;
    int8_t *codes = (int8_t *)panel;
    float *scale = (float *)(panel + (size_t)blocks * tb);
    float *minv = scale + blocks * TILE;
    int8_t *stage = (int8_t *)(minv + blocks * TILE); /* [block][row][G] */
    const uint8_t *base = w->data;
    if (w->packed) { /* already in panel order (matmul_packed.h) */
        cpu_pack_panel_avx512(w->packed, r0 / TILE, panel, flip80);
        return;
    }
    for (int i = 0; i < TILE; i++) {
        if (i < nv) {
            unpack_row(w->type, base + (size_t)(r0 + i) * w->row_bytes, w->cols, stage + i * G, scale + i, minv + i);
        } else {
            for (int64_t b = 0; b < blocks; b++) {
                memset(stage + b * tb + i * G, 0, (size_t)G);
                scale[b * TILE + i] = 0;
                minv[b * TILE + i] = 0;
            }
        }
    }
    /* [row][4r..4r+3] → [r][row·4 ..]: a 16 × G/4 transpose of 32-bit words,
     * one gather per output row */
    const __m512i flip = _mm512_set1_epi32(flip80 ? (int)0x80808080u : 0);
    const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32(G / 4));
    for (int64_t b = 0; b < blocks; b++) {
        const int8_t *src = stage + b * tb;
        int8_t *dst = codes + b * tb;
        for (int r = 0; r < G / 4; r++) {
            __m512i v = _mm512_i32gather_epi32(_mm512_add_epi32(rows, _mm512_set1_epi32(r)), src, 4);
            _mm512_store_si512(dst + 64 * r, _mm512_xor_si512(v, flip));
        }
    }
}

/* ---- activations --------------------------------------------------------- */

typedef struct {
    const cpu_weight *w;
    const float *x;
    int64_t x_stride, n;
    const int32_t *x_rows;
    uint8_t *scratch;
    panel_layout L;
    int G;
    enum cpu_panel_kernel kernel;
    float *y;
    int64_t y_stride;
    long n_panels, n_chunks, chunk_groups;
    cpu_queue pack_queue; /* activation rows (incl. padding) */
    cpu_queue queue;      /* (panel, group chunk) items, panel-major */
} panel_job;

/* Quantizes activation row `row` (bit-exact partner format) and copies its
 * codes, scales and sums into the tiles of its group of 16. */
static void pack_act_row(const panel_job *job, int64_t row, uint8_t *qbuf)
{
    const int G = job->G;
    const int64_t k = job->w->cols, blocks = job->L.blocks;
    const int64_t g = row / TILE, j = row % TILE;
    uint8_t *acts = job->scratch + job->L.acts;
    float *ascale = (float *)(job->scratch + job->L.ascale), *asum = (float *)(job->scratch + job->L.asum);
    int32_t *acorr = (int32_t *)(job->scratch + job->L.acorr);
    const size_t tile_bytes = TILE * (size_t)G;
    if (row >= job->n) { /* padding row: zero codes and scales */
        for (int64_t b = 0; b < blocks; b++) {
            size_t t = (size_t)(g * blocks + b);
            memset(acts + t * tile_bytes + j * G, 0, (size_t)G);
            ascale[t * TILE + j] = 0;
            asum[t * TILE + j] = 0;
            acorr[t * TILE + j] = 0;
        }
        return;
    }
    int64_t src = job->x_rows ? job->x_rows[row] : row;
    qt_quantize_act(job->w->type, job->x + src * job->x_stride, qbuf, k);
    enum qt_type at = qt_traits_of(job->w->type)->vec_dot;
    for (int64_t b = 0; b < blocks; b++) {
        const int8_t *q;
        float sc, sum;
        if (at == QT_Q8_0) {
            const blk_q8_0 *a = (const blk_q8_0 *)qbuf + b;
            q = a->qs, sc = h2f(a->d), sum = 0;
        } else if (at == QT_Q8_1) {
            const blk_q8_1 *a = (const blk_q8_1 *)qbuf + b;
            q = a->qs, sc = h2f(a->d), sum = h2f(a->s);
        } else { /* Q8_K: G-element slice of a 256 block */
            const blk_q8_K *a = (const blk_q8_K *)qbuf + (b * G) / 256;
            int off = (int)((b * G) % 256);
            q = a->qs + off;
            sc = a->d;
            int bs = G == 32 ? a->bsums[off / 16] + a->bsums[off / 16 + 1] : a->bsums[off / 16];
            sum = a->d * (float)bs;
        }
        size_t t = (size_t)(g * blocks + b);
        memcpy(acts + t * tile_bytes + j * G, q, (size_t)G);
        ascale[t * TILE + j] = sc;
        asum[t * TILE + j] = sum;
        if (job->kernel == CPU_PANEL_VNNI) {
            int s = 0;
            for (int e = 0; e < G; e++) s += q[e];
            acorr[t * TILE + j] = 128 * s;
        }
    }
}

static void pack_body(void *ctx, int worker, int n_workers)
{
    panel_job *job = ctx;
    (void)n_workers;
    long b, e;
    uint8_t *qbuf = job->scratch + job->L.qbufs + job->L.qbuf_bytes * (size_t)worker;
    while (cpu_queue_take(&job->pack_queue, &b, &e))
        for (long r = b; r < e; r++) pack_act_row(job, r, qbuf);
}

/* ---- AVX-512 VNNI kernel -------------------------------------------------- */

/* 16 activations × 16 weight rows over all blocks: for activation j the
 * 4-byte groups of its codes are broadcast against the 16 weights' codes
 * (stored +128 unsigned), so Σ (w+128)·a − 128·Σa = Σ w·a per block, exact. */
static inline __attribute__((always_inline)) void vnni_tile(const uint8_t *panel, const uint8_t *acts,
                                                            const float *ascale, const float *asum,
                                                            const int32_t *acorr, int64_t blocks, int G,
                                                            float out[TILE][TILE], int with_min)
{
    const size_t tb = TILE * (size_t)G;
    const float *wscale = (const float *)(panel + (size_t)blocks * tb);
    const float *wmin = wscale + blocks * TILE;
    const int quads = G / 4;
    for (int j0 = 0; j0 < TILE; j0 += 8) {
        __m512 acc[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) acc[j] = _mm512_setzero_ps();
        for (int64_t b = 0; b < blocks; b++) {
            const uint8_t *wb = panel + b * tb;
            const int32_t *ab = (const int32_t *)(acts + b * tb + j0 * G);
            __m512i isum[8];
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) isum[j] = _mm512_setzero_si512();
            for (int r = 0; r < quads; r++) {
                const __m512i wv = _mm512_load_si512(wb + 64 * r);
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++)
                    isum[j] = _mm512_dpbusd_epi32(isum[j], wv, _mm512_set1_epi32(ab[j * quads + r]));
            }
            const __m512 wv = _mm512_load_ps(wscale + b * TILE);
            const __m512 mv = with_min ? _mm512_load_ps(wmin + b * TILE) : _mm512_setzero_ps();
            const float *as = ascale + b * TILE + j0, *am = asum + b * TILE + j0;
            const int32_t *ac = acorr + b * TILE + j0;
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) {
                __m512i exact = _mm512_sub_epi32(isum[j], _mm512_set1_epi32(ac[j]));
                __m512 s = _mm512_mul_ps(wv, _mm512_set1_ps(as[j]));
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(exact), s, acc[j]);
                if (with_min) acc[j] = _mm512_fnmadd_ps(_mm512_set1_ps(am[j]), mv, acc[j]);
            }
        }
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) _mm512_store_ps(out[j0 + j], acc[j]);
    }
}

/* ---- driver ---------------------------------------------------------------- */

/* One (panel, group chunk) item: unpack the panel unless this worker has it
 * already, then 16 activations × 16 weight rows per group. */
static void gemm_item(const panel_job *job, long it, uint8_t *panel, long *have_panel)
{
    const panel_layout *L = &job->L;
    const int G = job->G;
    const int with_min = has_min(job->w->type);
    const int amx = job->kernel == CPU_PANEL_AMX;
    const size_t tile_bytes = TILE * (size_t)G;
    float out[TILE][TILE] __attribute__((aligned(64)));
    long p = it / job->n_chunks, c = it % job->n_chunks;
    int64_t r0 = p * TILE;
    int nv = (int)(job->w->rows - r0 < TILE ? job->w->rows - r0 : TILE);
    if (*have_panel != p) {
        unpack_panel(job->w, r0, nv, G, L->blocks, panel, !amx);
        *have_panel = p;
    }
    int64_t g0 = c * job->chunk_groups, g1 = g0 + job->chunk_groups < L->groups ? g0 + job->chunk_groups : L->groups;
    for (int64_t g = g0; g < g1; g++) {
        const size_t t0 = (size_t)(g * L->blocks);
        const uint8_t *acts = job->scratch + L->acts + t0 * tile_bytes;
        const float *as = (const float *)(job->scratch + L->ascale) + t0 * TILE;
        const float *am = (const float *)(job->scratch + L->asum) + t0 * TILE;
        const int32_t *ac = (const int32_t *)(job->scratch + L->acorr) + t0 * TILE;
        if (amx) cpu_amx_tile(panel, acts, as, am, L->blocks, G, out, with_min);
        else if (with_min) vnni_tile(panel, acts, as, am, ac, L->blocks, G, out, 1);
        else vnni_tile(panel, acts, as, am, ac, L->blocks, G, out, 0);
        int64_t nj = job->n - g * TILE < TILE ? job->n - g * TILE : TILE;
        const __mmask16 keep = (__mmask16)((1u << nv) - 1);
        for (int64_t j = 0; j < nj; j++)
            _mm512_mask_storeu_ps(job->y + (g * TILE + j) * job->y_stride + r0, keep, _mm512_load_ps(out[j]));
    }
}

static void gemm_body(void *ctx, int worker, int n_workers)
{
    panel_job *job = ctx;
    (void)n_workers;
    uint8_t *panel = job->scratch + job->L.panels + job->L.panel_bytes * (size_t)worker;
    long b, e, have_panel = -1;
    if (!cpu_queue_take(&job->queue, &b, &e)) return;
    if (job->kernel == CPU_PANEL_AMX) cpu_amx_begin(job->G);
    do {
        for (long it = b; it < e; it++) gemm_item(job, it, panel, &have_panel);
    } while (cpu_queue_take(&job->queue, &b, &e));
    if (job->kernel == CPU_PANEL_AMX) cpu_amx_end();
}

int cpu_matmul_panel(wk_pool *pool, enum cpu_panel_kernel kernel, const cpu_weight *w, const float *x,
                     int64_t x_stride, const int32_t *x_rows, int64_t n, float *y, int64_t y_stride, void *scratch,
                     size_t scratch_bytes)
{
    const int G = cpu_panel_group(w->type);
    int threads = pool ? wk_pool_size(pool) : 1;
    panel_job job;
    memset(&job, 0, sizeof job);
    job.w = w;
    job.x = x;
    job.x_stride = x_stride;
    job.n = n;
    job.x_rows = x_rows;
    job.scratch = scratch;
    job.G = G;
    job.kernel = kernel;
    job.y = y;
    job.y_stride = y_stride;
    if (!G || kernel == CPU_PANEL_NONE) return -1;
    job.L = layout_of(w->type, G, n, w->cols, threads);
    if (scratch_bytes < job.L.total || ((uintptr_t)scratch & 63)) return -1;
    cpu_queue_init(&job.pack_queue, (long)(job.L.groups * TILE), 4);
    if (pool && threads > 1 && n >= 8) wk_pool_run(pool, pack_body, &job);
    else pack_body(&job, 0, 1);
    job.n_panels = (long)((w->rows + TILE - 1) / TILE);
    job.chunk_groups = job.L.groups;
    job.n_chunks = 1;
    /* few panels: split the activation groups too so every thread has work */
    while (job.n_panels * job.n_chunks < 4L * threads && job.chunk_groups > 1) {
        job.chunk_groups = (job.chunk_groups + 1) / 2;
        job.n_chunks = (long)((job.L.groups + job.chunk_groups - 1) / job.chunk_groups);
    }
    cpu_queue_init(&job.queue, job.n_panels * job.n_chunks, 1);
    if (pool && threads > 1) wk_pool_run(pool, gemm_body, &job);
    else gemm_body(&job, 0, 1);
    return 0;
}
