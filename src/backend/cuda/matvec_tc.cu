/* Products of 1 to 32 activation rows on int8 tensor cores: the decode steps of several
 * sequences at once and speculative verification, where the weight read is shared and
 * the dp4a kernels (matmul.cu) pay for every activation row in integer work. Two kernels
 * share the per-block arithmetic (tc_type): the tile kernel below, and for the largest Q4_K
 * products a stream-K split over all resident warps (matvec_tc_sk_kernel).
 *
 * Tile kernel: a block owns 16 weight rows and 8 activation rows (one m16n8 tile; the grid's x the
 * activation tiles, y the weight tiles); its NW warps split
 * the 256-element blocks of K between them (warp w takes w, w + NW, ...) and add their
 * partial sums in warp order at the end. Each warp reads its weight blocks straight from
 * global memory into the mma fragments (no shared-memory staging: a decode product reads
 * every weight once), the next block's loads issued before the current one is multiplied.
 *
 * Q4_K's k index inside a 32-element group is permuted alike on both sides (the fragment's
 * k = 4q + e and 16 + 4q + e hold elements 8q + e and 8q + 4 + e), so that each thread
 * loads 8 consecutive codes; Q6_K's k16 products keep the natural order. K-quant activations follow the Q8_K rule (one scale per 256),
 * so a block's products are summed in integers, isum = Σ sc·(qw·qx), msum = Σ m·Σqx, and
 * scaled once, y += d·dx·isum − dmin·dx·msum (Q6_K: y += d·dx·isum over its 16-element
 * scales), as cuda_mmq does.
 *
 * Every activation row's result is computed by the same operations whatever the other
 * rows are (an mma column does not mix with the others), so a row comes out bit for bit
 * the same in a product of 1 row or of 8. */
#include "backend/cuda/qdev.cuh"

/* Q4_K's and Q5_K's header: the four 6-bit scales (lo: sub-blocks 0..3, hi: 4..7) and
 * mins, a byte each. */
struct tc_kq_scales {
    unsigned sc_lo, sc_hi, mn_lo, mn_hi;
};
__device__ __forceinline__ tc_kq_scales tc_kq_unpack(uint4 h)
{
    tc_kq_scales s;
    s.sc_lo = h.y & 0x3F3F3F3Fu;
    s.mn_lo = h.z & 0x3F3F3F3Fu;
    s.sc_hi = (h.w & 0x0F0F0F0Fu) | ((h.y >> 2) & 0x30303030u);
    s.mn_hi = ((h.w >> 4) & 0x0F0F0F0Fu) | ((h.z >> 2) & 0x30303030u);
    return s;
}
__device__ __forceinline__ int tc_byte(unsigned lo, unsigned hi, int s)
{
    return (int)(((s < 4 ? lo : hi) >> (8 * (s & 3))) & 0xFF);
}
__device__ __forceinline__ unsigned ld32(const void *p) { return __ldg((const unsigned *)p); }

/* A type's part of the tile: W, a thread's weights of one 256-element block for rows a
 * (lane/4) and b (+ 8), loaded by load(row a, row b, nb, ib, q); block(W, activations of
 * column lane/4 at the block (NULL: zeros), the C columns' activation scales, acc) adds
 * the block's products to the thread's four C values. */
template <int T> struct tc_type;

/* Q4_K: headers (d, dmin, 12 scale bytes) and 8 code bytes of each 32-byte pair of
 * sub-blocks (low nibbles: sub-block 2p, high: 2p + 1) at 8q; activations alike. */
template <> struct tc_type<QT_Q4_K> {
    static constexpr int BYTES = 144; /* a block's bytes in a row */
    struct W {
        uint4 ha, hb;
        uint2 qa[4], qb[4];
    };
    __device__ static W load(const uint8_t *ra, const uint8_t *rb, int64_t nb, int64_t ib, int q)
    {
        (void)nb;
        const uint8_t *ba = ra + ib * 144, *bb = rb + ib * 144;
        W w;
        w.ha = ld_w(ba);
        w.hb = ld_w(bb);
#pragma unroll
        for (int p = 0; p < 4; p++) {
            w.qa[p] = __ldg((const uint2 *)(ba + 16 + 32 * p + 8 * q));
            w.qb[p] = __ldg((const uint2 *)(bb + 16 + 32 * p + 8 * q));
        }
        return w;
    }
    __device__ static void block(const W &w, const int8_t *xa, int q, float x0, float x1, float *acc)
    {
        uint2 xv[8];
#pragma unroll
        for (int s = 0; s < 8; s++) xv[s] = xa ? __ldg((const uint2 *)(xa + 32 * s + 8 * q)) : make_uint2(0, 0);
        const tc_kq_scales sa = tc_kq_unpack(w.ha), sb = tc_kq_unpack(w.hb);
        const int ones = 0x01010101;
        int isum[4] = {0, 0, 0, 0}, msum[4] = {0, 0, 0, 0};
#pragma unroll
        for (int s = 0; s < 8; s++) {
            const int p = s >> 1, sh = 4 * (s & 1);
            int c[4], x[4];
            mma_s8_16832(c, (int)((w.qa[p].x >> sh) & 0x0F0F0F0Fu), (int)((w.qb[p].x >> sh) & 0x0F0F0F0Fu),
                         (int)((w.qa[p].y >> sh) & 0x0F0F0F0Fu), (int)((w.qb[p].y >> sh) & 0x0F0F0F0Fu),
                         (int)xv[s].x, (int)xv[s].y);
            mma_s8_16832(x, ones, ones, ones, ones, (int)xv[s].x, (int)xv[s].y); /* Σ codes of C's columns */
            const int sca = tc_byte(sa.sc_lo, sa.sc_hi, s), scb = tc_byte(sb.sc_lo, sb.sc_hi, s);
            const int mna = tc_byte(sa.mn_lo, sa.mn_hi, s), mnb = tc_byte(sb.mn_lo, sb.mn_hi, s);
            isum[0] += sca * c[0];
            isum[1] += sca * c[1];
            isum[2] += scb * c[2];
            isum[3] += scb * c[3];
            msum[0] += mna * x[0];
            msum[1] += mna * x[1];
            msum[2] += mnb * x[0];
            msum[3] += mnb * x[1];
        }
        const float da = h2f((uint16_t)(w.ha.x & 0xFFFF)), ma = h2f((uint16_t)(w.ha.x >> 16));
        const float db = h2f((uint16_t)(w.hb.x & 0xFFFF)), mb = h2f((uint16_t)(w.hb.x >> 16));
        acc[0] += da * x0 * (float)isum[0] - ma * x0 * (float)msum[0];
        acc[1] += da * x1 * (float)isum[1] - ma * x1 * (float)msum[1];
        acc[2] += db * x0 * (float)isum[2] - mb * x0 * (float)msum[2];
        acc[3] += db * x1 * (float)isum[3] - mb * x1 * (float)msum[3];
    }
};

/* Q6_K (ql[128], qh[64], 16 int8 scales; d at the row's tail): a scale per 16 elements, so
 * two k16 products per 32-element sub-block S = 4h + k (elements 128h + 32k + l), thread q
 * holding l = 16j + 4q .. + 3 of half j: ql bytes 64h + 32·(k odd) + 16j + 4q (low nibbles
 * for k < 2, high for k ≥ 2) and qh bytes 32h + 16j + 4q (bits 2k, 2k + 1). */
template <> struct tc_type<QT_Q6_K> {
    static constexpr int BYTES = 208; /* ql, qh and scales; d at the row's tail */
    struct W {
        unsigned la[2][4], lb[2][4]; /* ql words of half h at 16o + 4q */
        unsigned ha[2][2], hb[2][2]; /* qh words of half h at 16j + 4q */
        uint4 sa, sb;
        float da, db;
    };
    __device__ static W load(const uint8_t *ra, const uint8_t *rb, int64_t nb, int64_t ib, int q)
    {
        const uint8_t *ba = ra + ib * 208, *bb = rb + ib * 208;
        W w;
#pragma unroll
        for (int h = 0; h < 2; h++) {
#pragma unroll
            for (int o = 0; o < 4; o++) {
                w.la[h][o] = ld32(ba + 64 * h + 16 * o + 4 * q);
                w.lb[h][o] = ld32(bb + 64 * h + 16 * o + 4 * q);
            }
#pragma unroll
            for (int j = 0; j < 2; j++) {
                w.ha[h][j] = ld32(ba + 128 + 32 * h + 16 * j + 4 * q);
                w.hb[h][j] = ld32(bb + 128 + 32 * h + 16 * j + 4 * q);
            }
        }
        w.sa = ld_w(ba + 192);
        w.sb = ld_w(bb + 192);
        w.da = h2f(__ldg((const unsigned short *)(ra + nb * 208) + ib));
        w.db = h2f(__ldg((const unsigned short *)(rb + nb * 208) + ib));
        return w;
    }
    /* codes − 32 of sub-block k (of a half) from its ql and qh words */
    __device__ static int code(unsigned ql, unsigned qh, int k)
    {
        const unsigned lo = (k < 2 ? ql : ql >> 4) & 0x0F0F0F0Fu;
        const unsigned hi = (k == 0 ? qh << 4 : k == 1 ? qh << 2 : k == 2 ? qh : qh >> 2) & 0x30303030u;
        return (int)__vsub4(lo | hi, 0x20202020u);
    }
    __device__ static int scale(uint4 s, int i)
    {
        const unsigned v = i < 4 ? s.x : i < 8 ? s.y : i < 12 ? s.z : s.w;
        return (int)(signed char)(v >> (8 * (i & 3)));
    }
    __device__ static void block(const W &w, const int8_t *xa, int q, float x0, float x1, float *acc)
    {
        int isum[4] = {0, 0, 0, 0};
#pragma unroll
        for (int S = 0; S < 8; S++) {
            const int h = S >> 2, k = S & 3;
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const unsigned b = xa ? ld32(xa + 32 * S + 16 * j + 4 * q) : 0u;
                int c[4];
                mma_s8_16816(c, code(w.la[h][2 * (k & 1) + j], w.ha[h][j], k),
                             code(w.lb[h][2 * (k & 1) + j], w.hb[h][j], k), (int)b);
                const int sca = scale(w.sa, 2 * S + j), scb = scale(w.sb, 2 * S + j);
                isum[0] += sca * c[0];
                isum[1] += sca * c[1];
                isum[2] += scb * c[2];
                isum[3] += scb * c[3];
            }
        }
        acc[0] += w.da * x0 * (float)isum[0];
        acc[1] += w.da * x1 * (float)isum[1];
        acc[2] += w.db * x0 * (float)isum[2];
        acc[3] += w.db * x1 * (float)isum[3];
    }
};

/* y[t][r] = W[r] · x[t] for the block's 16 rows and (up to) 8 activation rows; xq/xd as
 * cuda_quantize_act gives them for K-quants (Q8_K rule: xd repeats a block's scale 8 times). */
template <int T, int NW>
__global__ void __launch_bounds__(NW * 32)
matvec_tc_kernel(const uint8_t *__restrict__ W, size_t row_bytes, int64_t M, int64_t K,
                 const int8_t *__restrict__ xq, const float *__restrict__ xd, int64_t n, float *__restrict__ y)
{
    typedef tc_type<T> Q;
    __shared__ __align__(16) float part[NW > 1 ? NW - 1 : 1][32][4];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int g = lane >> 2, q = lane & 3;
    const int64_t r0 = (int64_t)blockIdx.y * 16, t0 = (int64_t)blockIdx.x * 8;
    const int nt = (int)(n - t0 < 8 ? n - t0 : 8);
    const int64_t nb = K / 256;
    const uint8_t *wa = W + (r0 + g < M ? r0 + g : M - 1) * row_bytes;
    const uint8_t *wb = W + (r0 + g + 8 < M ? r0 + g + 8 : M - 1) * row_bytes;
    const int8_t *xa = g < nt ? xq + (t0 + g) * K : NULL; /* B column g: activation row t0 + g, zeros past n */
    const int c0 = 2 * q < nt ? 2 * q : 0, c1 = 2 * q + 1 < nt ? 2 * q + 1 : 0; /* C columns' scales */
    const float *xd0 = xd + (t0 + c0) * (K / 32), *xd1 = xd + (t0 + c1) * (K / 32);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int64_t ib = warp;
    typename Q::W cur = Q::load(wa, wb, nb, ib < nb ? ib : 0, q);
    for (; ib < nb; ib += NW) {
        /* the next block's weights in flight while this one is multiplied (the last block
         * loads itself again: no branch) */
        const typename Q::W nxt = Q::load(wa, wb, nb, ib + NW < nb ? ib + NW : ib, q);
        Q::block(cur, xa ? xa + ib * 256 : NULL, q, __ldg(xd0 + ib * 8), __ldg(xd1 + ib * 8), acc);
        cur = nxt;
    }
    if (NW > 1) {
        if (warp > 0) *(float4 *)part[warp - 1][lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
        __syncthreads();
        if (warp > 0) return;
#pragma unroll
        for (int w = 0; w < NW - 1; w++) {
            const float4 v = *(const float4 *)part[w][lane];
            acc[0] += v.x;
            acc[1] += v.y;
            acc[2] += v.z;
            acc[3] += v.w;
        }
    }
    const int64_t ra = r0 + g, rb = ra + 8, ta = t0 + 2 * q;
    if (2 * q < nt && ra < M) y[ta * M + ra] = acc[0];
    if (2 * q + 1 < nt && ra < M) y[(ta + 1) * M + ra] = acc[1];
    if (2 * q < nt && rb < M) y[ta * M + rb] = acc[2];
    if (2 * q + 1 < nt && rb < M) y[(ta + 1) * M + rb] = acc[3];
}

/* Stream-K split of one product over a fixed number of warps, all resident at once: the
 * work is the items (16-row weight tile, 256-element block of K), tile-major, and warp w
 * of wt takes the contiguous items [w·U/wt, (w+1)·U/wt), so every warp streams the same
 * number of weight bytes and no grid ends on a half-empty wave (the tile kernel above
 * loses its last wave's tail on the largest matrices). A warp covers a tile whole (and
 * writes its outputs), or part of it: then its partial sums go to part[] and the last of
 * the tile's warps to arrive (cnt[tile]) adds them in warp order and writes the outputs.
 * Up to SK_SEGS weights of one type and width that multiply the same activations (gate and
 * up, a DeltaNet layer's projections) are one product, their tiles end to end, so a
 * 48-row weight costs no launch of its own. Past 8 activation rows, each group of 8 is a
 * slice of the grid with the same split (blockIdx.x = range · slices + slice: the slices of
 * a range run side by side and share its weights in L2), so the split depends on the
 * weights' shapes and wt only, never on n: a row comes out bit for bit the same in a
 * product of any number of rows. */
#define SK_WARPS CUDA_TC_SK_WARPS
#define SK_SEGS 4

struct sk_segs {
    const uint8_t *W[SK_SEGS];
    float *y[SK_SEGS];
    int rows[SK_SEGS];
    int tile0[SK_SEGS]; /* the segment's first tile in the product's tile space */
    int n, tiles;
};
/* The segment of tile t. */
__device__ __forceinline__ int sk_seg(const sk_segs &sg, int t)
{
    int i = 0;
#pragma unroll
    for (int j = 1; j < SK_SEGS; j++)
        if (j < sg.n && t >= sg.tile0[j]) i = j;
    return i;
}

/* a[i] by selects (a dynamic index into the kernel's parameters would copy them to the stack) */
template <typename V> __device__ __forceinline__ V sk_pick(const V (&a)[SK_SEGS], int i)
{
    V v = a[0];
#pragma unroll
    for (int j = 1; j < SK_SEGS; j++)
        if (i == j) v = a[j];
    return v;
}

/* The first item of warp w of wt over u items, and the warp whose range holds item i. */
__device__ __forceinline__ int sk_first(int w, int u, int wt) { return (int)((int64_t)w * u / wt); }
__device__ __forceinline__ int sk_owner(int i, int u, int wt) { return (int)(((int64_t)(i + 1) * wt + u - 1) / u - 1); }

template <int T>
__global__ void __launch_bounds__(SK_WARPS * 32, CUDA_TC_SK_BLOCKS_PER_SM)
matvec_tc_sk_kernel(const sk_segs sg, size_t row_bytes, int K, const int8_t *__restrict__ xq,
                    const float *__restrict__ xd, int n, float *__restrict__ part, unsigned *__restrict__ cnt)
{
    typedef tc_type<T> Q;
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int slices = (n + 7) / 8, slice = (int)(blockIdx.x % slices);
    const int nb = K / 256, U = sg.tiles * nb, wt = (int)(gridDim.x / slices) * SK_WARPS;
    const int gw = (int)(blockIdx.x / slices) * SK_WARPS + threadIdx.x / 32;
    const int u0 = sk_first(gw, U, wt), u1 = sk_first(gw + 1, U, wt);
    pdl_trigger();
    if (u0 >= u1) return;
    /* this slice's activation rows, partial sums and tile counters */
    const int nt = n - 8 * slice < 8 ? n - 8 * slice : 8;
    xq += (size_t)slice * 8 * K;
    xd += (size_t)slice * 8 * (K / 32);
    part += (size_t)slice * wt * 2 * 128;
    cnt += (size_t)slice * CUDA_TC_MAX_TILES;
    const int8_t *xa = g < nt ? xq + (size_t)g * K : NULL; /* B column g: zeros past n */
    const float *xd0 = xd + (2 * q < nt ? 2 * q : 0) * (K / 32), *xd1 = xd + (2 * q + 1 < nt ? 2 * q + 1 : 0) * (K / 32);
    int tile = u0 / nb, kb = u0 % nb, seg = u0; /* seg: the first item of this tile's part */
    auto row = [&](int t, int r) {
        const int i = sk_seg(sg, t), m = sk_pick(sg.rows, i), rr = 16 * (t - sk_pick(sg.tile0, i)) + r;
        return sk_pick(sg.W, i) + (size_t)(rr < m ? rr : m - 1) * row_bytes;
    };
    typename Q::W cur = Q::load(row(tile, g), row(tile, g + 8), nb, kb, q);
    pdl_wait(); /* the weights do not depend on earlier kernels; the activations do */
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int u = u0; u < u1; u++) {
        int tn = tile, kn = kb + 1;
        if (kn == nb) tn++, kn = 0;
        const bool more = u + 1 < u1;
        /* the next item's weights in flight while this one is multiplied */
        const typename Q::W nxt = Q::load(row(more ? tn : tile, g), row(more ? tn : tile, g + 8), nb, more ? kn : kb, q);
        Q::block(cur, xa ? xa + kb * 256 : NULL, q, __ldg(xd0 + kb * 8), __ldg(xd1 + kb * 8), acc);
        if (kn == 0 || !more) { /* the end of this warp's part of the tile */
            const int first = tile * nb;
            bool done = seg == first && kb == nb - 1; /* the whole tile */
            if (!done) {
                /* partial: slot 0 where the range starts in this tile, else 1 (where it ends) */
                __stcg((float4 *)(part + (size_t)(gw * 2 + (seg == u0 ? 0 : 1)) * 128 + lane * 4),
                       make_float4(acc[0], acc[1], acc[2], acc[3]));
                __threadfence();
                __syncwarp();
                const int w0 = sk_owner(first, U, wt), w1 = sk_owner(first + nb - 1, U, wt);
                unsigned old = 0;
                if (lane == 0) old = atomicAdd(cnt + tile, 1u);
                old = __shfl_sync(0xffffffffu, old, 0);
                if (old == (unsigned)(w1 - w0)) { /* the last to arrive: add the parts in warp order */
                    __threadfence();
                    if (lane == 0) cnt[tile] = 0; /* ready for the next product */
                    acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
                    for (int w = w0; w <= w1; w++) {
                        const int slot = sk_first(w, U, wt) >= first ? 0 : 1;
                        const float4 v = __ldcg((const float4 *)(part + (size_t)(w * 2 + slot) * 128 + lane * 4));
                        acc[0] += v.x;
                        acc[1] += v.y;
                        acc[2] += v.z;
                        acc[3] += v.w;
                    }
                    done = true;
                }
            }
            if (done) {
                const int i = sk_seg(sg, tile), m = sk_pick(sg.rows, i);
                const int ra = 16 * (tile - sk_pick(sg.tile0, i)) + g, rb = ra + 8, ta = 2 * q;
                float *y = sk_pick(sg.y, i) + (size_t)slice * 8 * m;
                if (ta < nt && ra < m) y[(size_t)ta * m + ra] = acc[0];
                if (ta + 1 < nt && ra < m) y[(size_t)(ta + 1) * m + ra] = acc[1];
                if (ta < nt && rb < m) y[(size_t)ta * m + rb] = acc[2];
                if (ta + 1 < nt && rb < m) y[(size_t)(ta + 1) * m + rb] = acc[3];
            }
            acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
            seg = u + 1;
        }
        cur = nxt;
        tile = tn;
        kb = kn;
    }
}

/* f(qtag<T>{}) for the types with a tc_type (cuda_matvec_tc_supported). */
template <typename F> static void with_tc_type(uint32_t type, F f)
{
    if (type == QT_Q4_K) f(qtag<QT_Q4_K>{});
    else f(qtag<QT_Q6_K>{});
}

extern "C" int cuda_matvec_tc_supported(uint32_t type, int64_t K)
{
    return (type == QT_Q4_K || type == QT_Q6_K) && K % 256 == 0;
}

/* Items (tile, block of K) of one stream-K product of these weights, or 0 when it does not
 * take one: only Q4_K (Q6_K's tile kernel was as fast or faster on every shape measured)
 * and products of at least CUDA_TC_SK_MIN_ITEMS items (H200, 8 rows, ms, stream-K vs the
 * better tile kernel: 17408×5120 0.0269 vs 0.0287, 5120×17408 0.0273 vs 0.0338; below,
 * 10240×5120 0.0190 vs 0.0175, 6144×5120 0.0141 vs 0.0127). */
static int64_t sk_items(const cuda_ctx *c, const cuda_qweight *const *w, int nw)
{
    if (!c->tc_cnt || w[0]->type != QT_Q4_K || w[0]->cols % 256) return 0;
    int64_t tiles = 0;
    for (int i = 0; i < nw; i++) {
        if (w[i]->type != w[0]->type || w[i]->cols != w[0]->cols || w[i]->row_bytes != w[0]->row_bytes ||
            w[i]->rows > INT32_MAX)
            return 0;
        tiles += cdiv(w[i]->rows, 16);
    }
    const int64_t items = tiles * (w[0]->cols / 256);
    return tiles <= CUDA_TC_MAX_TILES && items >= CUDA_TC_SK_MIN_ITEMS && items <= INT32_MAX ? items : 0;
}

/* The stream-K kernel on nw ≤ SK_SEGS weights that sk_items accepted. */
static int matvec_tc_sk(cuda_ctx *c, const cuda_qweight *const *w, float *const *y, int nw, int64_t items,
                        const int8_t *xq, const float *xd, int64_t n, wk_error *err)
{
    const int64_t K = w[0]->cols;
    sk_segs sg;
    memset(&sg, 0, sizeof sg);
    for (int i = 0; i < nw; i++, sg.n++) {
        sg.W[i] = (const uint8_t *)w[i]->data;
        sg.rows[i] = (int)w[i]->rows;
        sg.tile0[i] = sg.tiles;
        sg.tiles += (int)cdiv(w[i]->rows, 16);
    }
    int64_t ranges = (int64_t)c->sm_count * CUDA_TC_SK_BLOCKS_PER_SM;
    if (ranges * SK_WARPS > items) ranges = items / SK_WARPS; /* no warp without an item */
    const int64_t per_launch = 8 * CUDA_TC_SK_SLICES; /* rows: the buffers hold this many slices */
    for (int64_t t0 = 0; t0 < n; t0 += per_launch) {
        const int rows = (int)(n - t0 < per_launch ? n - t0 : per_launch);
        for (int i = 0; i < nw; i++) sg.y[i] = y[i] + t0 * w[i]->rows;
        launch_attr(c, true, matvec_tc_sk_kernel<QT_Q4_K>, dim3((unsigned)(ranges * cdiv(rows, 8))), dim3(SK_WARPS * 32),
                    0, sg, w[0]->row_bytes, (int)K, xq + t0 * K, xd + t0 * (K / 32), rows, c->tc_part, c->tc_cnt);
        CU_CHECK_LAUNCH(err, "matvec (tensor cores, stream-K)");
    }
    return 0;
}

extern "C" int cuda_matvec_tc_multi(cuda_ctx *c, const cuda_qweight *const *w, float *const *y, int nw,
                                    const int8_t *xq, const float *xd, int64_t n, wk_error *err)
{
    for (int i = 0; i < nw;) {
        int j = i + 1;
        int64_t items = sk_items(c, w + i, 1), more;
        for (; j < nw && j - i < SK_SEGS && (more = sk_items(c, w + i, j - i + 1)); j++) items = more;
        int rc = items ? matvec_tc_sk(c, w + i, y + i, j - i, items, xq, xd, n, err)
                       : cuda_matvec_tc(c, w[i], xq, xd, n, y[i], 0, err);
        if (rc) return rc;
        i = j;
    }
    return 0;
}

extern "C" int cuda_matvec_tc(cuda_ctx *c, const cuda_qweight *w, const int8_t *xq, const float *xd, int64_t n,
                              float *y, int warps, wk_error *err)
{
    if (n <= 0) return 0;
    if (!cuda_matvec_tc_supported(w->type, w->cols))
        return wk_fail(err, WK_EUNSUPPORTED, "cuda tensor-core matvec: %s x %lld", qt_type_name(w->type),
                       (long long)w->cols);
    const int64_t items = warps == 0 ? sk_items(c, &w, 1) : 0;
    if (items) return matvec_tc_sk(c, &w, &y, 1, items, xq, xd, n, err);
    const int64_t tiles = cdiv(w->rows, 16);
    if (tiles > 65535)
        return wk_fail(err, WK_EINVAL, "cuda matvec: %lld weight rows is too many", (long long)w->rows);
    /* the activation tiles of one weight tile next to each other in launch order: past 8 rows
     * the weight tile is read from DRAM once and found in L2 by the others */
    const dim3 grid(cdiv(n, 8), cdiv(w->rows, 16));
    const uint8_t *W = (const uint8_t *)w->data;
    const int64_t blocks = grid.y; /* of one activation tile: the pick must not depend on n */
    /* blocks resident at once, asked of the driver once per context (not on every launch) */
    auto resident = [&](auto kernel, int nw) {
        int &per_sm = c->tc_per_sm[w->type == QT_Q6_K][nw == 8];
        if (!per_sm && cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * nw, 0) != cudaSuccess)
            per_sm = 1;
        return (int64_t)per_sm * c->sm_count;
    };
    with_tc_type(w->type, [&](auto tag) {
        constexpr int T = decltype(tag)::value;
        /* warps per 16 rows: 8, unless their blocks make a second wave that is mostly tail
         * and 4 fit in one (H200, Q4_K n = 8: 10240x5120 0.0166 ms with 4, 0.0207 with 8 (1.6
         * waves); 17408x5120 0.0286 with 8 (2.75 waves), 0.0332 with 4; 2 warps and prefetching
         * blocks ahead into L2 lost everywhere) */
        const int64_t r8 = resident(matvec_tc_kernel<T, 8>, 8);
        int nw = warps;
        if (!nw) nw = blocks <= r8 || blocks * 2 >= 5 * r8 || blocks > resident(matvec_tc_kernel<T, 4>, 4) ? 8 : 4;
        if (nw == 8) matvec_tc_kernel<T, 8><<<grid, 256, 0, c->stream>>>(W, w->row_bytes, w->rows, w->cols, xq, xd, n, y);
        else matvec_tc_kernel<T, 4><<<grid, 128, 0, c->stream>>>(W, w->row_bytes, w->rows, w->cols, xq, xd, n, y);
    });
    CU_CHECK_LAUNCH(err, "matvec (tensor cores)");
    return 0;
}
