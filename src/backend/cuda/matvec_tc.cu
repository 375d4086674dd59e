/* Products of 1 to 8 activation rows on int8 tensor cores: the decode steps of several
 * sequences at once and speculative verification, where the weight read is shared and
 * the dp4a kernels (matmul.cu) pay for every activation row in integer work.
 *
 * A block owns 16 weight rows and 8 activation rows (one m16n8 tile); its NW warps split
 * the 256-element blocks of K between them (warp w takes w, w + NW, ...) and add their
 * partial sums in warp order at the end. Each warp reads its weight blocks straight from
 * global memory into the mma fragments (no shared-memory staging: a decode product reads
 * every weight once), the next block's loads issued before the current one is multiplied.
 *
 * The k index inside a 32-element group is permuted alike on both sides (the fragment's
 * k = 4q + e and 16 + 4q + e hold elements 8q + e and 8q + 4 + e), so that each thread
 * loads 8 consecutive codes. K-quant activations follow the Q8_K rule (one scale per 256),
 * so a block's products are summed in integers, isum = Σ sc·(qw·qx), msum = Σ m·Σqx, and
 * scaled once, y += d·dx·isum − dmin·dx·msum, as cuda_mmq does.
 *
 * Every activation row's result is computed by the same operations whatever the other
 * rows are (an mma column does not mix with the others), so a row comes out bit for bit
 * the same in a product of 1 row or of 8. */
#include "backend/cuda/qdev.cuh"

/* Q4_K: a thread's part of a 256-element block for weight rows a (lane/4) and b (+ 8):
 * the block headers (d, dmin, 12 scale bytes) and 8 code bytes of each 32-byte pair of
 * sub-blocks (low nibbles: sub-block 2p, high: 2p + 1). */
struct tc_q4k_w {
    uint4 ha, hb;
    uint2 qa[4], qb[4];
};
__device__ __forceinline__ tc_q4k_w tc_q4k_load(const uint8_t *ba, const uint8_t *bb, int q)
{
    tc_q4k_w w;
    w.ha = ld_w(ba);
    w.hb = ld_w(bb);
#pragma unroll
    for (int p = 0; p < 4; p++) {
        w.qa[p] = __ldg((const uint2 *)(ba + 16 + 32 * p + 8 * q));
        w.qb[p] = __ldg((const uint2 *)(bb + 16 + 32 * p + 8 * q));
    }
    return w;
}

/* The four 6-bit scales (lo: sub-blocks 0..3, hi: 4..7) and mins of a header, a byte each. */
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

/* y[t][r] = W[r] · x[t] for the block's 16 rows and (up to) 8 activation rows; xq/xd as
 * cuda_quantize_act gives them for Q4_K (Q8_K rule: xd repeats the block's scale 8 times). */
template <int NW>
__global__ void __launch_bounds__(NW * 32)
matvec_tc_q4k_kernel(const uint8_t *__restrict__ W, size_t row_bytes, int64_t M, int64_t K,
                     const int8_t *__restrict__ xq, const float *__restrict__ xd, int64_t n, float *__restrict__ y)
{
    __shared__ __align__(16) float part[NW > 1 ? NW - 1 : 1][32][4];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int g = lane >> 2, q = lane & 3;
    const int64_t r0 = (int64_t)blockIdx.x * 16, t0 = (int64_t)blockIdx.y * 8;
    const int nt = (int)(n - t0 < 8 ? n - t0 : 8);
    const int64_t nb = K / 256;
    const uint8_t *wa = W + (r0 + g < M ? r0 + g : M - 1) * row_bytes;
    const uint8_t *wb = W + (r0 + g + 8 < M ? r0 + g + 8 : M - 1) * row_bytes;
    const bool xlive = g < nt; /* B column g: activation row t0 + g, zeros past n */
    const int8_t *xa = xq + (t0 + (xlive ? g : 0)) * K + 8 * q;
    const int c0 = 2 * q < nt ? 2 * q : 0, c1 = 2 * q + 1 < nt ? 2 * q + 1 : 0; /* C columns' scales */
    const float *xd0 = xd + (t0 + c0) * (K / 32), *xd1 = xd + (t0 + c1) * (K / 32);
    const int ones = 0x01010101;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int64_t ib = warp;
    tc_q4k_w cur = tc_q4k_load(wa + (ib < nb ? ib : 0) * 144, wb + (ib < nb ? ib : 0) * 144, q);
    for (; ib < nb; ib += NW) {
        const int64_t in = ib + NW < nb ? ib + NW : ib; /* the last block loads itself again: no branch */
        const tc_q4k_w nxt = tc_q4k_load(wa + in * 144, wb + in * 144, q);
        uint2 xv[8];
#pragma unroll
        for (int s = 0; s < 8; s++)
            xv[s] = xlive ? __ldg((const uint2 *)(xa + ib * 256 + 32 * s)) : make_uint2(0, 0);
        const tc_kq_scales sa = tc_kq_unpack(cur.ha), sb = tc_kq_unpack(cur.hb);
        int isum[4] = {0, 0, 0, 0}, msum[4] = {0, 0, 0, 0};
#pragma unroll
        for (int s = 0; s < 8; s++) {
            const int p = s >> 1, sh = 4 * (s & 1);
            int c[4], x[4];
            mma_s8_16832(c, (int)((cur.qa[p].x >> sh) & 0x0F0F0F0Fu), (int)((cur.qb[p].x >> sh) & 0x0F0F0F0Fu),
                         (int)((cur.qa[p].y >> sh) & 0x0F0F0F0Fu), (int)((cur.qb[p].y >> sh) & 0x0F0F0F0Fu),
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
        const float da = h2f((uint16_t)(cur.ha.x & 0xFFFF)), ma = h2f((uint16_t)(cur.ha.x >> 16));
        const float db = h2f((uint16_t)(cur.hb.x & 0xFFFF)), mb = h2f((uint16_t)(cur.hb.x >> 16));
        const float x0 = __ldg(xd0 + ib * 8), x1 = __ldg(xd1 + ib * 8);
        acc[0] += da * x0 * (float)isum[0] - ma * x0 * (float)msum[0];
        acc[1] += da * x1 * (float)isum[1] - ma * x1 * (float)msum[1];
        acc[2] += db * x0 * (float)isum[2] - mb * x0 * (float)msum[2];
        acc[3] += db * x1 * (float)isum[3] - mb * x1 * (float)msum[3];
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

extern "C" int cuda_matvec_tc_supported(uint32_t type, int64_t K) { return type == QT_Q4_K && K % 256 == 0; }

extern "C" int cuda_matvec_tc(cuda_ctx *c, const cuda_qweight *w, const int8_t *xq, const float *xd, int64_t n,
                              float *y, int warps, wk_error *err)
{
    if (n <= 0) return 0;
    if (!cuda_matvec_tc_supported(w->type, w->cols))
        return wk_fail(err, WK_EUNSUPPORTED, "cuda tensor-core matvec: %s x %lld", qt_type_name(w->type),
                       (long long)w->cols);
    if (cdiv(n, 8) > 65535) return wk_fail(err, WK_EINVAL, "cuda matvec: %lld rows is too many", (long long)n);
    const dim3 grid(cdiv(w->rows, 16), cdiv(n, 8));
    const uint8_t *W = (const uint8_t *)w->data;
    if (!warps) warps = w->cols >= 16 * 256 ? 8 : 4; /* each warp at least two blocks of a row */
    if (warps == 8)
        matvec_tc_q4k_kernel<8><<<grid, 256, 0, c->stream>>>(W, w->row_bytes, w->rows, w->cols, xq, xd, n, y);
    else if (warps == 4)
        matvec_tc_q4k_kernel<4><<<grid, 128, 0, c->stream>>>(W, w->row_bytes, w->rows, w->cols, xq, xd, n, y);
    else
        matvec_tc_q4k_kernel<2><<<grid, 64, 0, c->stream>>>(W, w->row_bytes, w->rows, w->cols, xq, xd, n, y);
    CU_CHECK_LAUNCH(err, "matvec (tensor cores)");
    return 0;
}
