/* Device-side decoding of quantized blocks in the device layout
 * (cuda_kernels.h), for the matvec dot products and the BF16 dequantizer.
 *
 * Dot products: a block is split into TPB thread parts; part t reads its
 * quant bytes with 16-byte loads and multiplies them with int8 activations
 * (dp4a), one float activation scale per 32 elements (xd). */
#ifndef WICK_BACKEND_CUDA_QDEV_CUH
#define WICK_BACKEND_CUDA_QDEV_CUH

#include "backend/cuda/cuda_common.cuh"

__device__ __forceinline__ int dot16(const uint4 w, const int4 a, int acc)
{
    acc = __dp4a((int)w.x, a.x, acc);
    acc = __dp4a((int)w.y, a.y, acc);
    acc = __dp4a((int)w.z, a.z, acc);
    acc = __dp4a((int)w.w, a.w, acc);
    return acc;
}

__device__ __forceinline__ uint4 and4(uint4 v, unsigned m)
{
    return make_uint4(v.x & m, v.y & m, v.z & m, v.w & m);
}
__device__ __forceinline__ uint4 shr4(uint4 v, int s)
{
    return make_uint4(v.x >> s, v.y >> s, v.z >> s, v.w >> s);
}
__device__ __forceinline__ uint4 or4(uint4 a, uint4 b)
{
    return make_uint4(a.x | b.x, a.y | b.y, a.z | b.z, a.w | b.w);
}
__device__ __forceinline__ uint4 sub4(uint4 v, unsigned bytes)
{
    return make_uint4(__vsub4(v.x, bytes), __vsub4(v.y, bytes), __vsub4(v.z, bytes), __vsub4(v.w, bytes));
}
__device__ __forceinline__ int4 ld_act(const int8_t *p) { return __ldg((const int4 *)p); }
__device__ __forceinline__ uint4 ld_w(const uint8_t *p) { return __ldg((const uint4 *)p); }

/* Q4_K / Q5_K 6-bit scale and min of sub-block j (0..7) from the 12 scale
 * bytes held as three little-endian words (no byte indexing, so the words
 * stay in registers for a run-time j). */
__device__ __forceinline__ void kq_scale_min(int j, unsigned w0, unsigned w1, unsigned w2, int *sc,
                                             int *mn)
{
    if (j < 4) {
        *sc = (w0 >> (8 * j)) & 63;
        *mn = (w1 >> (8 * j)) & 63;
    } else {
        const int s = 8 * (j - 4);
        *sc = ((w2 >> s) & 0xF) | (((w0 >> (s + 6)) & 3) << 4);
        *mn = ((w2 >> (s + 4)) & 0xF) | (((w1 >> (s + 6)) & 3) << 4);
    }
}

/* IQ4_NL codebook lookup of 4 nibbles (one per byte, low 4 bits) → 4 int8. */
__device__ __forceinline__ unsigned iq4nl_lookup4(unsigned nib)
{
    /* kvalues_iq4nl as bytes: entries 0..7 in lo0/lo1, 8..15 in hi0/hi1 */
    const unsigned lo0 = 0xBFAD9881u, lo1 = 0xF6EADDCFu; /* -127 -104 -83 -65 | -49 -35 -22 -10 */
    const unsigned hi0 = 0x26190D01u, hi1 = 0x71594535u; /* 1 13 25 38 | 53 69 89 113 */
    unsigned sel = (nib & 0x7) | ((nib >> 4) & 0x70) | ((nib >> 8) & 0x700) | ((nib >> 12) & 0x7000);
    unsigned a = __byte_perm(lo0, lo1, sel);
    unsigned b = __byte_perm(hi0, hi1, sel);
    unsigned m = ((nib >> 3) & 0x01010101u) * 0xFFu; /* bytes whose code is >= 8 */
    return (a & ~m) | (b & m);
}
__device__ __forceinline__ uint4 iq4nl_lookup16(uint4 nib)
{
    return make_uint4(iq4nl_lookup4(nib.x), iq4nl_lookup4(nib.y), iq4nl_lookup4(nib.z),
                      iq4nl_lookup4(nib.w));
}

template <int T> struct qdev;

/* A Q4_K/Q5_K part's float sum from its integer dots with sub-blocks 2g and 2g+1 of block ib
 * (ilo/ihi: codes × activations, slo/shi: Σ activations); hd = the block's first 16 bytes
 * (d, dmin, the 12 scale bytes). */
__device__ __forceinline__ float kq45_part_sum(uint4 hd, int g, int64_t ib, int ilo, int ihi, int slo, int shi,
                                               const float *xd)
{
    int sc0, mn0, sc1, mn1;
    kq_scale_min(2 * g, hd.y, hd.z, hd.w, &sc0, &mn0);
    kq_scale_min(2 * g + 1, hd.y, hd.z, hd.w, &sc1, &mn1);
    float d = __half2float(__ushort_as_half((uint16_t)(hd.x & 0xFFFF)));
    float dmin = __half2float(__ushort_as_half((uint16_t)(hd.x >> 16)));
    float x0 = xd[ib * 8 + 2 * g], x1 = xd[ib * 8 + 2 * g + 1];
    return d * (x0 * (float)(sc0 * ilo) + x1 * (float)(sc1 * ihi)) -
           dmin * (x0 * (float)(mn0 * slo) + x1 * (float)(mn1 * shi));
}

/* Part t of a Q4_K/Q5_K block ib (8 parts: g = t/2 pairs of sub-blocks, half h = t%2): hd = d,
 * dmin and the 12 scale bytes (the block's first 16 bytes), clo/chi = the part's 16 codes of
 * sub-blocks 2g and 2g+1 (0..15 for Q4_K, 0..31 for Q5_K). */
__device__ __forceinline__ float kq45_dot_codes(uint4 hd, uint4 clo, uint4 chi, int64_t ib, int t, const int8_t *xq,
                                                const float *xd)
{
    const int g = t >> 1, h = t & 1;
    const int8_t *xa = xq + ib * 256 + 64 * g + 16 * h;
    int4 alo = ld_act(xa), ahi = ld_act(xa + 32);
    int ilo = dot16(clo, alo, 0), ihi = dot16(chi, ahi, 0);
    const uint4 ones = make_uint4(0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u);
    int slo = dot16(ones, alo, 0), shi = dot16(ones, ahi, 0);
    return kq45_part_sum(hd, g, ib, ilo, ihi, slo, shi, xd);
}

/* Q4_K part dot from its loaded words: q = the part's 16 code bytes (at 16 + 32g + 16h).
 * Shared by the global-memory loader below and the shared-memory one of matmul.cu. */
__device__ __forceinline__ float q4k8_dot_words(uint4 hd, uint4 q, int64_t ib, int t, const int8_t *xq,
                                                const float *xd)
{
    return kq45_dot_codes(hd, and4(q, 0x0F0F0F0Fu), and4(shr4(q, 4), 0x0F0F0F0Fu), ib, t, xq, xd);
}

/* Q4_K in 8 parts of 16 quant bytes (part t = group t/2, half t%2): faster than 4 parts
 * of 32 on the H200 (more warps' loads in flight for the same bytes; 2422 vs 2189 GB/s). */
template <> struct qdev<QT_Q4_K> {
    static constexpr int QK = 256, TPB = 8;
    __device__ static float dot(const uint8_t *row, int64_t nb, int64_t ib, int t, const int8_t *xq,
                                const float *xd)
    {
        (void)nb;
        const uint8_t *blk = row + ib * 144;
        const int g = t >> 1, h = t & 1;
        return q4k8_dot_words(ld_w(blk), ld_w(blk + 16 + 32 * g + 16 * h), ib, t, xq, xd);
    }
};

/* Q5_K: as Q4_K plus the fifth bits from qh[16h .. 16h+15]. */
template <> struct qdev<QT_Q5_K> {
    static constexpr int QK = 256, TPB = 8;
    __device__ static float dot(const uint8_t *row, int64_t nb, int64_t ib, int t, const int8_t *xq,
                                const float *xd)
    {
        (void)nb;
        const uint8_t *blk = row + ib * 176;
        const int g = t >> 1, h = t & 1;
        uint4 hd = ld_w(blk);
        uint4 qh = ld_w(blk + 16 + 16 * h);
        uint4 q = ld_w(blk + 48 + 32 * g + 16 * h);
        /* code = nibble | fifth bit · 16 */
        uint4 blo = and4(shr4(qh, 2 * g), 0x01010101u), bhi = and4(shr4(qh, 2 * g + 1), 0x01010101u);
        uint4 clo = or4(and4(q, 0x0F0F0F0Fu), make_uint4(blo.x << 4, blo.y << 4, blo.z << 4, blo.w << 4));
        uint4 chi = or4(and4(shr4(q, 4), 0x0F0F0F0Fu), make_uint4(bhi.x << 4, bhi.y << 4, bhi.z << 4, bhi.w << 4));
        return kq45_dot_codes(hd, clo, chi, ib, t, xq, xd);
    }
};

/* Q6_K (208-byte payload + tail d): 4 parts; part t = (half h = t/2, l0 = 16·(t%2))
 * covers outputs 128h + 32k + l0 + i for k = 0..3, i < 16. */
template <> struct qdev<QT_Q6_K> {
    static constexpr int QK = 256, TPB = 4;
    __device__ static float dot(const uint8_t *row, int64_t nb, int64_t ib, int t, const int8_t *xq,
                                const float *xd)
    {
        const uint8_t *blk = row + ib * 208;
        const int h = t >> 1, s = t & 1, l0 = 16 * s;
        uint4 A = ld_w(blk + 64 * h + l0);
        uint4 B = ld_w(blk + 64 * h + 32 + l0);
        uint4 H = ld_w(blk + 128 + 32 * h + l0);
        const int8_t *sc = (const int8_t *)(blk + 192) + 8 * h + s;
        const uint16_t dh = *(const uint16_t *)(row + nb * 208 + ib * 2);
        const int8_t *xa = xq + ib * 256 + 128 * h + l0;
        uint4 c0 = or4(and4(A, 0x0F0F0F0Fu), and4(make_uint4(H.x << 4, H.y << 4, H.z << 4, H.w << 4), 0x30303030u));
        uint4 c1 = or4(and4(B, 0x0F0F0F0Fu), and4(make_uint4(H.x << 2, H.y << 2, H.z << 2, H.w << 2), 0x30303030u));
        uint4 c2 = or4(and4(shr4(A, 4), 0x0F0F0F0Fu), and4(H, 0x30303030u));
        uint4 c3 = or4(and4(shr4(B, 4), 0x0F0F0F0Fu), and4(shr4(H, 2), 0x30303030u));
        int i0 = dot16(sub4(c0, 0x20202020u), ld_act(xa), 0);
        int i1 = dot16(sub4(c1, 0x20202020u), ld_act(xa + 32), 0);
        int i2 = dot16(sub4(c2, 0x20202020u), ld_act(xa + 64), 0);
        int i3 = dot16(sub4(c3, 0x20202020u), ld_act(xa + 96), 0);
        const float *x = xd + ib * 8 + 4 * h;
        float acc = x[0] * (float)(sc[0] * i0) + x[1] * (float)(sc[2] * i1) + x[2] * (float)(sc[4] * i2) +
                    x[3] * (float)(sc[6] * i3);
        return h2f(dh) * acc;
    }
};

/* Q8_0: 2 parts of 16 int8. */
template <> struct qdev<QT_Q8_0> {
    static constexpr int QK = 32, TPB = 2;
    __device__ static float dot(const uint8_t *row, int64_t nb, int64_t ib, int t, const int8_t *xq,
                                const float *xd)
    {
        uint4 q = ld_w(row + ib * 32 + 16 * t);
        const uint16_t dh = *(const uint16_t *)(row + nb * 32 + ib * 2);
        int i = dot16(q, ld_act(xq + ib * 32 + 16 * t), 0);
        return h2f(dh) * xd[ib] * (float)i;
    }
};

/* Q4_0: 1 part: 16 bytes, low nibbles elements 0..15, high 16..31, code − 8. */
template <> struct qdev<QT_Q4_0> {
    static constexpr int QK = 32, TPB = 1;
    __device__ static float dot(const uint8_t *row, int64_t nb, int64_t ib, int t, const int8_t *xq,
                                const float *xd)
    {
        (void)t;
        uint4 q = ld_w(row + ib * 16);
        const uint16_t dh = *(const uint16_t *)(row + nb * 16 + ib * 2);
        const int8_t *xa = xq + ib * 32;
        int i = dot16(sub4(and4(q, 0x0F0F0F0Fu), 0x08080808u), ld_act(xa), 0);
        i = dot16(sub4(and4(shr4(q, 4), 0x0F0F0F0Fu), 0x08080808u), ld_act(xa + 16), i);
        return h2f(dh) * xd[ib] * (float)i;
    }
};

/* IQ4_NL: as Q4_0 with the non-linear codebook. */
template <> struct qdev<QT_IQ4_NL> {
    static constexpr int QK = 32, TPB = 1;
    __device__ static float dot(const uint8_t *row, int64_t nb, int64_t ib, int t, const int8_t *xq,
                                const float *xd)
    {
        (void)t;
        uint4 q = ld_w(row + ib * 16);
        const uint16_t dh = *(const uint16_t *)(row + nb * 16 + ib * 2);
        const int8_t *xa = xq + ib * 32;
        int i = dot16(iq4nl_lookup16(and4(q, 0x0F0F0F0Fu)), ld_act(xa), 0);
        i = dot16(iq4nl_lookup16(and4(shr4(q, 4), 0x0F0F0F0Fu)), ld_act(xa + 16), i);
        return h2f(dh) * xd[ib] * (float)i;
    }
};

/* ---- dequantization of one 32-element group (g = element index / 32) ---- */

template <int T> __device__ void dq_group(const uint8_t *row, int64_t nb, int64_t g, float *y);

template <> __device__ __forceinline__ void dq_group<QT_Q4_K>(const uint8_t *row, int64_t nb, int64_t g, float *y)
{
    (void)nb;
    const uint8_t *blk = row + (g >> 3) * 144;
    const int j = (int)(g & 7);
    int sc, mn;
    const unsigned *sw = (const unsigned *)(blk + 4);
    kq_scale_min(j, sw[0], sw[1], sw[2], &sc, &mn);
    const float d = h2f(*(const uint16_t *)blk) * (float)sc;
    const float m = h2f(*(const uint16_t *)(blk + 2)) * (float)mn;
    const uint8_t *qs = blk + 16 + 32 * (j >> 1);
    const int sh = 4 * (j & 1);
#pragma unroll
    for (int i = 0; i < 32; i++) y[i] = d * (float)((qs[i] >> sh) & 0xF) - m;
}

template <> __device__ __forceinline__ void dq_group<QT_Q5_K>(const uint8_t *row, int64_t nb, int64_t g, float *y)
{
    (void)nb;
    const uint8_t *blk = row + (g >> 3) * 176;
    const int j = (int)(g & 7);
    int sc, mn;
    const unsigned *sw = (const unsigned *)(blk + 4);
    kq_scale_min(j, sw[0], sw[1], sw[2], &sc, &mn);
    const float d = h2f(*(const uint16_t *)blk) * (float)sc;
    const float m = h2f(*(const uint16_t *)(blk + 2)) * (float)mn;
    const uint8_t *qh = blk + 16;
    const uint8_t *qs = blk + 48 + 32 * (j >> 1);
    const int sh = 4 * (j & 1);
#pragma unroll
    for (int i = 0; i < 32; i++)
        y[i] = d * (float)(((qs[i] >> sh) & 0xF) | (((qh[i] >> j) & 1) << 4)) - m;
}

template <> __device__ __forceinline__ void dq_group<QT_Q6_K>(const uint8_t *row, int64_t nb, int64_t g, float *y)
{
    const int64_t ib = g >> 3;
    const uint8_t *blk = row + ib * 208;
    const int j = (int)(g & 7), h = j >> 2, k = j & 3;
    const float d = h2f(*(const uint16_t *)(row + nb * 208 + ib * 2));
    const uint8_t *ql = blk + 64 * h + 32 * (k & 1);
    const uint8_t *qh = blk + 128 + 32 * h;
    const int8_t *sc = (const int8_t *)(blk + 192) + 8 * h + 2 * k;
    const int sh = 4 * (k >> 1);
#pragma unroll
    for (int i = 0; i < 32; i++) {
        int code = ((ql[i] >> sh) & 0xF) | (((qh[i] >> (2 * k)) & 3) << 4);
        y[i] = d * (float)sc[i / 16] * (float)(code - 32);
    }
}

template <> __device__ __forceinline__ void dq_group<QT_Q8_0>(const uint8_t *row, int64_t nb, int64_t g, float *y)
{
    const int8_t *qs = (const int8_t *)(row + g * 32);
    const float d = h2f(*(const uint16_t *)(row + nb * 32 + g * 2));
#pragma unroll
    for (int i = 0; i < 32; i++) y[i] = (float)qs[i] * d;
}

template <> __device__ __forceinline__ void dq_group<QT_Q4_0>(const uint8_t *row, int64_t nb, int64_t g, float *y)
{
    const uint8_t *qs = row + g * 16;
    const float d = h2f(*(const uint16_t *)(row + nb * 16 + g * 2));
#pragma unroll
    for (int i = 0; i < 16; i++) {
        y[i] = (float)((qs[i] & 0xF) - 8) * d;
        y[i + 16] = (float)((qs[i] >> 4) - 8) * d;
    }
}

__constant__ int8_t c_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};

template <> __device__ __forceinline__ void dq_group<QT_IQ4_NL>(const uint8_t *row, int64_t nb, int64_t g, float *y)
{
    const uint8_t *qs = row + g * 16;
    const float d = h2f(*(const uint16_t *)(row + nb * 16 + g * 2));
#pragma unroll
    for (int i = 0; i < 16; i++) {
        y[i] = d * (float)c_iq4nl[qs[i] & 0xF];
        y[i + 16] = d * (float)c_iq4nl[qs[i] >> 4];
    }
}

template <> __device__ __forceinline__ void dq_group<QT_F32>(const uint8_t *row, int64_t nb, int64_t g, float *y)
{
    (void)nb;
    const float *p = (const float *)row + g * 32;
#pragma unroll
    for (int i = 0; i < 32; i++) y[i] = p[i];
}

template <> __device__ __forceinline__ void dq_group<QT_F16>(const uint8_t *row, int64_t nb, int64_t g, float *y)
{
    (void)nb;
    const uint16_t *p = (const uint16_t *)row + g * 32;
#pragma unroll
    for (int i = 0; i < 32; i++) y[i] = h2f(p[i]);
}

template <> __device__ __forceinline__ void dq_group<QT_BF16>(const uint8_t *row, int64_t nb, int64_t g, float *y)
{
    (void)nb;
    const uint16_t *p = (const uint16_t *)row + g * 32;
#pragma unroll
    for (int i = 0; i < 32; i++) y[i] = __uint_as_float((uint32_t)p[i] << 16);
}

/* The quantized types with dot-product kernels, as a compile-time tag for the launchers:
 * calls f(qtag<T>{}) for `type` and returns true; false for any other type. One switch
 * for the matvec, several-row and MMQ launches. */
template <int T> struct qtag {
    static constexpr int value = T;
};
template <typename F> static inline bool with_qtype(uint32_t type, F &&f)
{
    switch (type) {
    case QT_Q4_K: f(qtag<QT_Q4_K>{}); return true;
    case QT_Q5_K: f(qtag<QT_Q5_K>{}); return true;
    case QT_Q6_K: f(qtag<QT_Q6_K>{}); return true;
    case QT_Q8_0: f(qtag<QT_Q8_0>{}); return true;
    case QT_Q4_0: f(qtag<QT_Q4_0>{}); return true;
    case QT_IQ4_NL: f(qtag<QT_IQ4_NL>{}); return true;
    default: return false;
    }
}

#endif
