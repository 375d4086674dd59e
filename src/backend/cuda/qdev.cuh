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

/* (float)v for |v| < 2^22, given as v + I2F_BIAS (a dp4a chain can start from the bias):
 * those bits are the float 1.5·2^23 + v, exact, and taking 1.5·2^23 away again is exact.
 * Two full-rate operations instead of a conversion (16 per clock and multiprocessor on
 * sm_80). The integer dots below stay under 2^22: 16 or 32 codes of at most 31 (Q4_K,
 * Q5_K), 32 (Q6_K), 127 (Q8_0, IQ4_NL) or 8 (Q4_0) times activations of at most 127. */
#define I2F_BIAS 0x4B400000
__device__ __forceinline__ float i2f_biased(int vb) { return __fadd_rn(__int_as_float(vb), -12582912.0f); }
/* (float)(a · b) for an integer scale a and an integer dot b whose product stays under
 * 2^24 (every scale × dot below): both factors and the product are exact in F32. */
__device__ __forceinline__ float exact_mul(float a, float b) { return __fmul_rn(a, b); }

/* Each type's part t of block ib in three steps, for kernels that pair one part of a
 * weight row with several activation rows or the other way round: wpart loads and
 * decodes the weights (W), apart loads the activations and what depends on them only (A),
 * mul gives the part's float sum. qdev<T>::dot(row, nb, ib, t, xq, xd) is
 * mul(wpart(row, nb, ib, t), apart(xq, xd, ib, t)), so every kernel that goes through
 * these gets the same arithmetic for a (weight row, activation row) pair. */
template <int T> struct qdev;

/* Q4_K / Q5_K part t (g = t/2 pairs of sub-blocks 2g and 2g+1, half h = t%2): the 16 codes
 * of each sub-block (0..15 for Q4_K, 0..31 for Q5_K), their scales and mins, d and dmin. */
struct kq45_w {
    uint4 clo, chi;
    float sc0, sc1, mn0, mn1, d, dmin;
};
/* The part's activations of both sub-blocks, their sums, and their scales. */
struct kq45_a {
    int4 lo, hi;
    float slo, shi, x0, x1;
};
/* hd = the block's first 16 bytes (d, dmin, the 12 scale bytes). */
__device__ __forceinline__ kq45_w kq45_wpart(uint4 hd, uint4 clo, uint4 chi, int t)
{
    const int g = t >> 1;
    int sc0, mn0, sc1, mn1;
    kq_scale_min(2 * g, hd.y, hd.z, hd.w, &sc0, &mn0);
    kq_scale_min(2 * g + 1, hd.y, hd.z, hd.w, &sc1, &mn1);
    kq45_w w;
    w.clo = clo;
    w.chi = chi;
    w.sc0 = (float)sc0;
    w.sc1 = (float)sc1;
    w.mn0 = (float)mn0;
    w.mn1 = (float)mn1;
    w.d = __half2float(__ushort_as_half((uint16_t)(hd.x & 0xFFFF)));
    w.dmin = __half2float(__ushort_as_half((uint16_t)(hd.x >> 16)));
    return w;
}
__device__ __forceinline__ kq45_a kq45_apart(const int8_t *xq, const float *xd, int64_t ib, int t)
{
    const int g = t >> 1, h = t & 1;
    const int8_t *xa = xq + ib * 256 + 64 * g + 16 * h;
    const uint4 ones = make_uint4(0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u);
    kq45_a a;
    a.lo = ld_act(xa);
    a.hi = ld_act(xa + 32);
    a.slo = i2f_biased(dot16(ones, a.lo, I2F_BIAS));
    a.shi = i2f_biased(dot16(ones, a.hi, I2F_BIAS));
    a.x0 = xd[ib * 8 + 2 * g];
    a.x1 = xd[ib * 8 + 2 * g + 1];
    return a;
}
__device__ __forceinline__ float kq45_mul(const kq45_w &w, const kq45_a &a)
{
    const float ilo = i2f_biased(dot16(w.clo, a.lo, I2F_BIAS)), ihi = i2f_biased(dot16(w.chi, a.hi, I2F_BIAS));
    return w.d * (a.x0 * exact_mul(w.sc0, ilo) + a.x1 * exact_mul(w.sc1, ihi)) -
           w.dmin * (a.x0 * exact_mul(w.mn0, a.slo) + a.x1 * exact_mul(w.mn1, a.shi));
}

/* Q4_K part dot from its loaded words: q = the part's 16 code bytes (at 16 + 32g + 16h).
 * Shared by the global-memory loader below and the shared-memory one of matmul.cu. */
__device__ __forceinline__ kq45_w q4k8_wpart_words(uint4 hd, uint4 q, int t)
{
    return kq45_wpart(hd, and4(q, 0x0F0F0F0Fu), and4(shr4(q, 4), 0x0F0F0F0Fu), t);
}
__device__ __forceinline__ float q4k8_dot_words(uint4 hd, uint4 q, int64_t ib, int t, const int8_t *xq,
                                                const float *xd)
{
    return kq45_mul(q4k8_wpart_words(hd, q, t), kq45_apart(xq, xd, ib, t));
}

/* The dot of a type from its three steps. */
#define QDEV_DOT                                                                                         \
    __device__ static float dot(const uint8_t *row, int64_t nb, int64_t ib, int t, const int8_t *xq,    \
                                const float *xd)                                                         \
    {                                                                                                    \
        return mul(wpart(row, nb, ib, t), apart(xq, xd, ib, t));                                         \
    }

/* Q4_K in 8 parts of 16 quant bytes (part t = group t/2, half t%2): faster than 4 parts
 * of 32 on the H200 (more warps' loads in flight for the same bytes; 2422 vs 2189 GB/s). */
template <> struct qdev<QT_Q4_K> {
    static constexpr int QK = 256, TPB = 8, BYTES = 144;
    typedef kq45_w W;
    typedef kq45_a A;
    __device__ static W wpart(const uint8_t *row, int64_t nb, int64_t ib, int t)
    {
        (void)nb;
        const uint8_t *blk = row + ib * 144;
        const int g = t >> 1, h = t & 1;
        return q4k8_wpart_words(ld_w(blk), ld_w(blk + 16 + 32 * g + 16 * h), t);
    }
    __device__ static A apart(const int8_t *xq, const float *xd, int64_t ib, int t)
    {
        return kq45_apart(xq, xd, ib, t);
    }
    __device__ static float mul(const W &w, const A &a) { return kq45_mul(w, a); }
    QDEV_DOT
};

/* Q5_K: as Q4_K plus the fifth bits from qh[16h .. 16h+15]. */
template <> struct qdev<QT_Q5_K> {
    static constexpr int QK = 256, TPB = 8, BYTES = 176;
    typedef kq45_w W;
    typedef kq45_a A;
    __device__ static W wpart(const uint8_t *row, int64_t nb, int64_t ib, int t)
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
        return kq45_wpart(hd, clo, chi, t);
    }
    __device__ static A apart(const int8_t *xq, const float *xd, int64_t ib, int t)
    {
        return kq45_apart(xq, xd, ib, t);
    }
    __device__ static float mul(const W &w, const A &a) { return kq45_mul(w, a); }
    QDEV_DOT
};

/* Q6_K (208-byte payload + tail d): 4 parts; part t = (half h = t/2, l0 = 16·(t%2))
 * covers outputs 128h + 32k + l0 + i for k = 0..3, i < 16. */
template <> struct qdev<QT_Q6_K> {
    static constexpr int QK = 256, TPB = 4, BYTES = 208;
    struct W {
        uint4 c[4]; /* codes − 32 of the 4 sub-blocks */
        float sc[4], d;
    };
    struct A {
        int4 a[4];
        float x[4];
    };
    __device__ static W wpart(const uint8_t *row, int64_t nb, int64_t ib, int t)
    {
        const uint8_t *blk = row + ib * 208;
        const int h = t >> 1, s = t & 1, l0 = 16 * s;
        uint4 A = ld_w(blk + 64 * h + l0);
        uint4 B = ld_w(blk + 64 * h + 32 + l0);
        uint4 H = ld_w(blk + 128 + 32 * h + l0);
        const int8_t *sc = (const int8_t *)(blk + 192) + 8 * h + s;
        W w;
        w.c[0] = sub4(or4(and4(A, 0x0F0F0F0Fu), and4(make_uint4(H.x << 4, H.y << 4, H.z << 4, H.w << 4), 0x30303030u)),
                      0x20202020u);
        w.c[1] = sub4(or4(and4(B, 0x0F0F0F0Fu), and4(make_uint4(H.x << 2, H.y << 2, H.z << 2, H.w << 2), 0x30303030u)),
                      0x20202020u);
        w.c[2] = sub4(or4(and4(shr4(A, 4), 0x0F0F0F0Fu), and4(H, 0x30303030u)), 0x20202020u);
        w.c[3] = sub4(or4(and4(shr4(B, 4), 0x0F0F0F0Fu), and4(shr4(H, 2), 0x30303030u)), 0x20202020u);
#pragma unroll
        for (int k = 0; k < 4; k++) w.sc[k] = (float)sc[2 * k];
        w.d = h2f(*(const uint16_t *)(row + nb * 208 + ib * 2));
        return w;
    }
    __device__ static A apart(const int8_t *xq, const float *xd, int64_t ib, int t)
    {
        const int h = t >> 1, l0 = 16 * (t & 1);
        const int8_t *xa = xq + ib * 256 + 128 * h + l0;
        A a;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            a.a[k] = ld_act(xa + 32 * k);
            a.x[k] = xd[ib * 8 + 4 * h + k];
        }
        return a;
    }
    __device__ static float mul(const W &w, const A &a)
    {
        float p[4];
#pragma unroll
        for (int k = 0; k < 4; k++) p[k] = exact_mul(w.sc[k], i2f_biased(dot16(w.c[k], a.a[k], I2F_BIAS)));
        return w.d * (a.x[0] * p[0] + a.x[1] * p[1] + a.x[2] * p[2] + a.x[3] * p[3]);
    }
    QDEV_DOT
};

/* The 32-element types: one float scale d per block (at the row's tail), codes as int8. */
struct q32_w {
    uint4 c[2];
    float d;
};
struct q32_a {
    int4 a[2];
    float x;
};
/* One part of 16 codes (Q8_0) or the block's 32 (Q4_0, IQ4_NL: N = 2). */
template <int N> __device__ __forceinline__ float q32_mul(const q32_w &w, const q32_a &a)
{
    int i = dot16(w.c[0], a.a[0], I2F_BIAS);
    if (N == 2) i = dot16(w.c[1], a.a[1], i);
    return w.d * a.x * i2f_biased(i);
}
template <int N> __device__ __forceinline__ q32_a q32_apart(const int8_t *xa, float x)
{
    q32_a a;
    a.a[0] = ld_act(xa);
    if (N == 2) a.a[1] = ld_act(xa + 16);
    a.x = x;
    return a;
}

/* Q8_0: 2 parts of 16 int8. */
template <> struct qdev<QT_Q8_0> {
    static constexpr int QK = 32, TPB = 2, BYTES = 32;
    typedef q32_w W;
    typedef q32_a A;
    __device__ static W wpart(const uint8_t *row, int64_t nb, int64_t ib, int t)
    {
        W w;
        w.c[0] = ld_w(row + ib * 32 + 16 * t);
        w.d = h2f(*(const uint16_t *)(row + nb * 32 + ib * 2));
        return w;
    }
    __device__ static A apart(const int8_t *xq, const float *xd, int64_t ib, int t)
    {
        return q32_apart<1>(xq + ib * 32 + 16 * t, xd[ib]);
    }
    __device__ static float mul(const W &w, const A &a) { return q32_mul<1>(w, a); }
    QDEV_DOT
};

/* The 4-bit 32-element types (Q4_0, IQ4_NL): 1 part of 16 bytes, low nibbles elements 0..15,
 * high 16..31; the block's scale at the row's tail. They differ in the nibble → code map. */
struct q32_nib {
    static constexpr int QK = 32, TPB = 1, BYTES = 16;
    typedef q32_w W;
    typedef q32_a A;
    template <typename Map>
    __device__ static W wpart_map(const uint8_t *row, int64_t nb, int64_t ib, Map map)
    {
        uint4 q = ld_w(row + ib * 16);
        W w;
        w.c[0] = map(and4(q, 0x0F0F0F0Fu));
        w.c[1] = map(and4(shr4(q, 4), 0x0F0F0F0Fu));
        w.d = h2f(*(const uint16_t *)(row + nb * 16 + ib * 2));
        return w;
    }
    __device__ static A apart(const int8_t *xq, const float *xd, int64_t ib, int t)
    {
        (void)t;
        return q32_apart<2>(xq + ib * 32, xd[ib]);
    }
    __device__ static float mul(const W &w, const A &a) { return q32_mul<2>(w, a); }
};

/* Q4_0: code − 8. */
template <> struct qdev<QT_Q4_0> : q32_nib {
    __device__ static W wpart(const uint8_t *row, int64_t nb, int64_t ib, int t)
    {
        (void)t;
        return wpart_map(row, nb, ib, [](uint4 n) { return sub4(n, 0x08080808u); });
    }
    QDEV_DOT
};

/* IQ4_NL: the non-linear codebook. */
template <> struct qdev<QT_IQ4_NL> : q32_nib {
    __device__ static W wpart(const uint8_t *row, int64_t nb, int64_t ib, int t)
    {
        (void)t;
        return wpart_map(row, nb, ib, [](uint4 n) { return iq4nl_lookup16(n); });
    }
    QDEV_DOT
};
#undef QDEV_DOT

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
