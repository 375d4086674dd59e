/* Quantized matrix × several activation rows on int8 tensor cores ("MMQ").
 *
 * The activations are quantized first like the decode path and llama.cpp's
 * CPU backend do (Q8_K rule for K-quants, Q8_0 otherwise: int8 codes, one
 * scale per 32); the weights are decoded to their int8 codes in shared
 * memory, and mma.sync (m16n8k32 s8; m16n8k16 for Q6_K's 16-element scales)
 * gives the integer products of each 32-element group. They are scaled the
 * way the reference's integer dot products are (see the two families below),
 * so a prompt's products round like llama.cpp's CPU backend and wick's decode
 * path, unlike the F16 dequantize + cuBLAS path (every weight and activation
 * rounded to 11 bits).
 *
 * A block owns 64 weight rows × 32 or 64 activation rows and walks K in
 * chunks of 256: it decodes the weight chunk and copies the activation chunk
 * into shared memory, then each of its 4 warps multiplies 16 weight rows with
 * the activation rows (4 or 8 mma tiles per 32-element group).
 *
 * The same kernel runs the MoE's grouped products (cuda_mmq_grouped): the
 * (token, slot) pairs sorted by expert (cuda_moe_sort, moe.cu), each block one
 * tile of one expert's rows, every expert of a layer in one launch. */
#include "backend/cuda/qdev.cuh"

#define MMQ_BM 64          /* weight rows per block */
#define MMQ_KC 256         /* elements per K chunk: one K-quant super-block */
#define MMQ_S (MMQ_KC / 32) /* 32-element groups per chunk */
#define MMQ_LD (MMQ_KC + 16) /* bytes per code row in shared memory: rows 4 banks apart */

/* Two families, by how the scales combine with the integer products:
 * - K-quants (Q4_K, Q5_K, Q6_K; activations by the Q8_K rule, one scale per
 *   256): per row and chunk a float d (and dmin) times small integer scales
 *   (and mins) per 32 (Q6_K: per 16) elements, so the chunk's products are
 *   summed in integers, isum = Σ sc·(qw·qx), msum = Σ m·Σqx, as the reference
 *   does, and scaled once: y += d·dx·isum − dmin·dx·msum.
 * - 32-element types (Q8_0, Q4_0, IQ4_NL; activations by the Q8_0 rule): a
 *   float scale on each side per 32 elements: y += dw·dx·(qw·qx) per group. */
template <int BN> struct mmq_smem {
    int8_t wq[MMQ_BM][MMQ_LD];
    int8_t xq[BN][MMQ_LD];
    float wd[MMQ_BM][MMQ_S];   /* 32-types: scale per group; K-quants: [0] = d, [1] = dmin */
    int wsc[MMQ_BM][2 * MMQ_S]; /* K-quants: integer scale per 16 elements */
    int wmn[MMQ_BM][MMQ_S];    /* Q4_K/Q5_K: integer min per 32 elements */
    float xd[BN][MMQ_S];       /* activation scale per group (K-quants: [0] for the chunk) */
    int xs[BN][MMQ_S];         /* Q4_K/Q5_K: Σ activation codes per 32 elements */
};

/* Decodes 32-element group s (0..7) of chunk c (elements 256c + 32s ..) of a row
 * in the device layout (cuda_kernels.h) into int8 codes (two 16-byte runs at
 * 16-byte aligned offsets: one load each, bytewise arithmetic) and its scales. */
template <int T> struct mmq_dec;

__device__ __forceinline__ uint4 shl4(uint4 v, int s) { return make_uint4(v.x << s, v.y << s, v.z << s, v.w << s); }

/* Q4_K / Q5_K block header: d and dmin (by group 0) and sub-block j's 6-bit scale (for
 * both 16-element halves) and min */
__device__ __forceinline__ void kq_head(const uint8_t *blk, int j, float *wd, int *wsc, int *wmn)
{
    const uint4 hd = *(const uint4 *)blk;
    int sc, mn;
    kq_scale_min(j, hd.y, hd.z, hd.w, &sc, &mn);
    if (j == 0) {
        wd[0] = h2f((uint16_t)(hd.x & 0xFFFF));
        wd[1] = h2f((uint16_t)(hd.x >> 16));
    }
    wsc[2 * j] = wsc[2 * j + 1] = sc;
    wmn[j] = mn;
}

template <> struct mmq_dec<QT_Q4_K> {
    static constexpr bool KQ = true, MIN = true;
    __device__ static void group(const uint8_t *row, int64_t nb, int64_t c, int j, int8_t *dst, float *wd, int *wsc,
                                 int *wmn)
    {
        (void)nb;
        const uint8_t *blk = row + c * 144;
        kq_head(blk, j, wd, wsc, wmn);
        const uint8_t *qs = blk + 16 + 32 * (j >> 1);
        const int sh = 4 * (j & 1);
        *(uint4 *)dst = and4(shr4(*(const uint4 *)qs, sh), 0x0F0F0F0Fu);
        *(uint4 *)(dst + 16) = and4(shr4(*(const uint4 *)(qs + 16), sh), 0x0F0F0F0Fu);
    }
};

template <> struct mmq_dec<QT_Q5_K> {
    static constexpr bool KQ = true, MIN = true;
    __device__ static void group(const uint8_t *row, int64_t nb, int64_t c, int j, int8_t *dst, float *wd, int *wsc,
                                 int *wmn)
    {
        (void)nb;
        const uint8_t *blk = row + c * 176;
        kq_head(blk, j, wd, wsc, wmn);
        const uint8_t *qs = blk + 48 + 32 * (j >> 1);
        const int sh = 4 * (j & 1);
        for (int h = 0; h < 2; h++) {
            const uint4 qh = *(const uint4 *)(blk + 16 + 16 * h);
            const uint4 q = *(const uint4 *)(qs + 16 * h);
            *(uint4 *)(dst + 16 * h) = or4(and4(shr4(q, sh), 0x0F0F0F0Fu), shl4(and4(shr4(qh, j), 0x01010101u), 4));
        }
    }
};

template <> struct mmq_dec<QT_Q6_K> {
    static constexpr bool KQ = true, MIN = false;
    __device__ static void group(const uint8_t *row, int64_t nb, int64_t c, int j, int8_t *dst, float *wd, int *wsc,
                                 int *wmn)
    {
        (void)wmn;
        const uint8_t *blk = row + c * 208;
        const int h = j >> 2, k = j & 3;
        if (j == 0) {
            wd[0] = h2f(*(const uint16_t *)(row + nb * 208 + c * 2));
            wd[1] = 0.0f;
        }
        const int8_t *sc = (const int8_t *)(blk + 192) + 8 * h + 2 * k;
        wsc[2 * j] = sc[0];
        wsc[2 * j + 1] = sc[1];
        for (int half = 0; half < 2; half++) {
            const uint4 ql = *(const uint4 *)(blk + 64 * h + 32 * (k & 1) + 16 * half);
            const uint4 qh = *(const uint4 *)(blk + 128 + 32 * h + 16 * half);
            const uint4 code =
                or4(and4(shr4(ql, 4 * (k >> 1)), 0x0F0F0F0Fu), shl4(and4(shr4(qh, 2 * k), 0x03030303u), 4));
            *(uint4 *)(dst + 16 * half) = sub4(code, 0x20202020u); /* code − 32, bytewise */
        }
    }
};

template <> struct mmq_dec<QT_Q8_0> {
    static constexpr bool KQ = false, MIN = false;
    __device__ static void group(const uint8_t *row, int64_t nb, int64_t c, int j, int8_t *dst, float *wd, int *wsc,
                                 int *wmn)
    {
        (void)wsc;
        (void)wmn;
        const int64_t b = c * MMQ_S + j;
        *(uint4 *)dst = *(const uint4 *)(row + b * 32);
        *(uint4 *)(dst + 16) = *(const uint4 *)(row + b * 32 + 16);
        wd[j] = h2f(*(const uint16_t *)(row + nb * 32 + b * 2));
    }
};

/* Q4_0 / IQ4_NL: 16 bytes of nibbles per 32 elements (low: 0..15, high: 16..31), the
 * F16 scales at the row tail; codes q − 8 or the IQ4_NL codebook's */
template <bool NL>
__device__ __forceinline__ void nib_group(const uint8_t *row, int64_t nb, int64_t c, int j, int8_t *dst, float *wd)
{
    const int64_t b = c * MMQ_S + j;
    const uint4 q = *(const uint4 *)(row + b * 16);
    const uint4 lo = and4(q, 0x0F0F0F0Fu), hi = and4(shr4(q, 4), 0x0F0F0F0Fu);
    *(uint4 *)dst = NL ? iq4nl_lookup16(lo) : sub4(lo, 0x08080808u);
    *(uint4 *)(dst + 16) = NL ? iq4nl_lookup16(hi) : sub4(hi, 0x08080808u);
    wd[j] = h2f(*(const uint16_t *)(row + nb * 16 + b * 2));
}

template <> struct mmq_dec<QT_Q4_0> {
    static constexpr bool KQ = false, MIN = false;
    __device__ static void group(const uint8_t *row, int64_t nb, int64_t c, int j, int8_t *dst, float *wd, int *,
                                 int *)
    {
        nib_group<false>(row, nb, c, j, dst, wd);
    }
};

template <> struct mmq_dec<QT_IQ4_NL> {
    static constexpr bool KQ = false, MIN = false;
    __device__ static void group(const uint8_t *row, int64_t nb, int64_t c, int j, int8_t *dst, float *wd, int *,
                                 int *)
    {
        nib_group<true>(row, nb, c, j, dst, wd);
    }
};

/* What a launch multiplies: weights W[z] into results y[z] for z = blockIdx.z (the MoE's
 * gate and up packs in one launch; otherwise z = 0), and where a block's activation rows
 * come from.
 * - Plain (tiles NULL): block row b covers activation rows BN·b .. of n; y rows M apart.
 * - Grouped (the MoE, cuda_moe_sort): block row b is tile b of the table, nothing past
 *   *n_tiles; the tile (expert e, first row p0, rows) multiplies matrix e of the pack
 *   (W[z] + e·mat_bytes; e == n_mat: the extra matrix w_extra[z], the shared expert) with
 *   activation rows x_rows[p] (NULL: p) and writes y rows p, for p0 <= p < p0 + rows. */
struct mmq_job {
    const uint8_t *W[2];
    float *y[2];
    const uint8_t *w_extra[2];
    const int4 *tiles;
    const int32_t *n_tiles;
    const int32_t *x_rows;
    size_t mat_bytes;
    int64_t n_mat;
};

/* y[t][r] for r < M, rows t of the job (above). W: matrix in device layout, row_bytes
 * apart, K columns; xq/xd: activation rows quantized (K bytes and K/32 scales per row).
 * A block: 64 weight rows × BN = 8·NT activation rows; warp w multiplies weight rows
 * 16w.. with all BN activation rows (NT mma tiles of 8). Thread (lane) holds C rows
 * lane/4 and lane/4 + 8, columns 2·(lane%4) + {0, 1} of each tile. */
template <int T, int NT>
__global__ void __launch_bounds__(128)
mmq_kernel(const mmq_job job, size_t row_bytes, int64_t M, int64_t K, const int8_t *__restrict__ xq,
           const float *__restrict__ xd, int64_t n)
{
    typedef mmq_dec<T> D;
    constexpr int BN = 8 * NT;
    constexpr bool PER16 = T == QT_Q6_K; /* Q6_K: a scale per 16 elements, two k16 products per group */
    extern __shared__ __align__(16) uint8_t mmq_raw[];
    mmq_smem<BN> &s = *(mmq_smem<BN> *)mmq_raw;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid & 31;
    const int z = blockIdx.z;
    const uint8_t *W = job.W[z];
    float *y = job.y[z];
    int64_t t0, t_end;
    if (job.tiles) {
        if ((int)blockIdx.y >= *job.n_tiles) return; /* the whole block: no barrier reached */
        const int4 tl = job.tiles[blockIdx.y];
        W = tl.x < job.n_mat ? W + (size_t)tl.x * job.mat_bytes : job.w_extra[z];
        t0 = tl.y;
        t_end = (int64_t)tl.y + tl.z;
    } else {
        t0 = (int64_t)blockIdx.y * BN;
        t_end = n;
    }
    const int64_t r0 = (int64_t)blockIdx.x * MMQ_BM;
    const int64_t nb = K / (D::KQ ? 256 : 32), n_groups = K / 32;
    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[j][e] = 0.0f;
    const int gr = lane >> 2, gc = (lane & 3) * 4; /* fragment row (A) / column (B) and k offset */
    const int wr = warp * 16 + gr;                  /* this thread's first weight row in the tile */

    for (int64_t k0 = 0; k0 < K; k0 += MMQ_KC) {
        const int64_t c = k0 / MMQ_KC;
        __syncthreads(); /* the previous chunk's products are done with shared memory */
        /* weights: 64 rows × 8 groups; rows past M and groups past K decode to zeros */
        for (int i = tid; i < MMQ_BM * MMQ_S; i += 128) {
            const int r = i / MMQ_S, j = i % MMQ_S;
            if (r0 + r < M && c * MMQ_S + j < n_groups) {
                D::group(W + (r0 + r) * row_bytes, nb, c, j, &s.wq[r][32 * j], s.wd[r], s.wsc[r], s.wmn[r]);
            } else {
                *(uint4 *)&s.wq[r][32 * j] = make_uint4(0, 0, 0, 0);
                *(uint4 *)&s.wq[r][32 * j + 16] = make_uint4(0, 0, 0, 0);
                s.wd[r][j] = 0.0f; /* K-quants: rows past M only (K is whole chunks), d = dmin = 0 */
                s.wsc[r][2 * j] = s.wsc[r][2 * j + 1] = 0;
                s.wmn[r][j] = 0;
            }
        }
        /* activations: BN rows × 8 groups of 32 codes, the scale of each group and (mins) their sums */
        for (int i = tid; i < BN * MMQ_S; i += 128) {
            const int t = i / MMQ_S, j = i % MMQ_S;
            const int64_t k = k0 + 32 * j;
            const bool live = t0 + t < t_end && k < K;
            const int64_t xr = !live ? 0 : job.x_rows ? job.x_rows[t0 + t] : t0 + t;
            const uint4 q0 = live ? *(const uint4 *)(xq + xr * K + k) : make_uint4(0, 0, 0, 0);
            const uint4 q1 = live ? *(const uint4 *)(xq + xr * K + k + 16) : make_uint4(0, 0, 0, 0);
            *(uint4 *)&s.xq[t][32 * j] = q0;
            *(uint4 *)&s.xq[t][32 * j + 16] = q1;
            s.xd[t][j] = live ? xd[xr * (K / 32) + k / 32] : 0.0f;
            if (D::MIN) {
                const uint4 ones = make_uint4(0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u);
                s.xs[t][j] = dot16(ones, make_int4((int)q0.x, (int)q0.y, (int)q0.z, (int)q0.w),
                                   dot16(ones, make_int4((int)q1.x, (int)q1.y, (int)q1.z, (int)q1.w), 0));
            }
        }
        __syncthreads();
        int isum[NT][4];
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) isum[j][e] = 0;
#pragma unroll 2
        for (int g = 0; g < MMQ_S; g++) {
            const int kb = 32 * g + gc;
            const int a0 = *(const int *)&s.wq[wr][kb], a1 = *(const int *)&s.wq[wr + 8][kb];
            const int a2 = *(const int *)&s.wq[wr][kb + 16], a3 = *(const int *)&s.wq[wr + 8][kb + 16];
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const int b0 = *(const int *)&s.xq[8 * j + gr][kb], b1 = *(const int *)&s.xq[8 * j + gr][kb + 16];
                const int ta = 8 * j + (lane & 3) * 2; /* C columns (activation rows) ta, ta + 1 */
                if (D::KQ) {
                    if (PER16) {
                        int lo[4], hi[4];
                        mma_s8_16816(lo, a0, a1, b0);
                        mma_s8_16816(hi, a2, a3, b1);
                        const int s0l = s.wsc[wr][2 * g], s0h = s.wsc[wr][2 * g + 1];
                        const int s1l = s.wsc[wr + 8][2 * g], s1h = s.wsc[wr + 8][2 * g + 1];
                        isum[j][0] += s0l * lo[0] + s0h * hi[0];
                        isum[j][1] += s0l * lo[1] + s0h * hi[1];
                        isum[j][2] += s1l * lo[2] + s1h * hi[2];
                        isum[j][3] += s1l * lo[3] + s1h * hi[3];
                    } else {
                        int cc[4];
                        mma_s8_16832(cc, a0, a1, a2, a3, b0, b1);
                        const int s0 = s.wsc[wr][2 * g], s1 = s.wsc[wr + 8][2 * g];
                        isum[j][0] += s0 * cc[0];
                        isum[j][1] += s0 * cc[1];
                        isum[j][2] += s1 * cc[2];
                        isum[j][3] += s1 * cc[3];
                    }
                } else {
                    int cc[4];
                    mma_s8_16832(cc, a0, a1, a2, a3, b0, b1);
                    const float w0 = s.wd[wr][g], w1 = s.wd[wr + 8][g];
                    const float da = s.xd[ta][g], db = s.xd[ta + 1][g];
                    acc[j][0] += (w0 * da) * (float)cc[0];
                    acc[j][1] += (w0 * db) * (float)cc[1];
                    acc[j][2] += (w1 * da) * (float)cc[2];
                    acc[j][3] += (w1 * db) * (float)cc[3];
                }
            }
        }
        if (D::KQ) { /* the chunk's integer sums, scaled once */
            const float d0 = s.wd[wr][0], d1 = s.wd[wr + 8][0], m0 = s.wd[wr][1], m1 = s.wd[wr + 8][1];
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const int ta = 8 * j + (lane & 3) * 2;
                const float da = s.xd[ta][0], db = s.xd[ta + 1][0];
                int ms[4] = {0, 0, 0, 0};
                if (D::MIN) {
#pragma unroll
                    for (int g = 0; g < MMQ_S; g++) {
                        const int u0 = s.wmn[wr][g], u1 = s.wmn[wr + 8][g], xa = s.xs[ta][g], xb = s.xs[ta + 1][g];
                        ms[0] += u0 * xa;
                        ms[1] += u0 * xb;
                        ms[2] += u1 * xa;
                        ms[3] += u1 * xb;
                    }
                }
                acc[j][0] += d0 * da * (float)isum[j][0] - m0 * da * (float)ms[0];
                acc[j][1] += d0 * db * (float)isum[j][1] - m0 * db * (float)ms[1];
                acc[j][2] += d1 * da * (float)isum[j][2] - m1 * da * (float)ms[2];
                acc[j][3] += d1 * db * (float)isum[j][3] - m1 * db * (float)ms[3];
            }
        }
    }
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const int64_t ta = t0 + 8 * j + (lane & 3) * 2;
        const int64_t ra = r0 + wr, rb = ra + 8;
        if (ta < t_end && ra < M) y[ta * M + ra] = acc[j][0];
        if (ta + 1 < t_end && ra < M) y[(ta + 1) * M + ra] = acc[j][1];
        if (ta < t_end && rb < M) y[ta * M + rb] = acc[j][2];
        if (ta + 1 < t_end && rb < M) y[(ta + 1) * M + rb] = acc[j][3];
    }
}

extern "C" int cuda_mmq_supported(uint32_t type)
{
    switch (type) {
    case QT_Q4_K: case QT_Q5_K: case QT_Q6_K: case QT_Q8_0: case QT_Q4_0: case QT_IQ4_NL: return 1;
    default: return 0;
    }
}

/* Launches the job on a grid of (M / 64, blocks, n_z) for weights of w's type and shape. */
static int mmq_run(cuda_ctx *c, const cuda_qweight *w, const mmq_job &job, int64_t blocks, unsigned n_z, int nt,
                   const int8_t *xq, const float *xd, int64_t n, wk_error *err)
{
    const int64_t M = w->rows, K = w->cols;
    const bool kq = w->type == QT_Q4_K || w->type == QT_Q5_K || w->type == QT_Q6_K;
    if (K % (kq ? 256 : 32) || blocks > 65535)
        return wk_fail(err, WK_EINVAL, "cuda mmq: %lld x %lld by %lld row blocks", (long long)M, (long long)K,
                       (long long)blocks);
    if (blocks == 0) return 0;
    const dim3 grid(cdiv(M, MMQ_BM), (unsigned)blocks, n_z);
    const bool known = with_qtype(w->type, [&](auto tag) {
        constexpr int T = decltype(tag)::value;
        if (nt == 4) {
            smem_allow(mmq_kernel<T, 4>, sizeof(mmq_smem<32>));
            mmq_kernel<T, 4><<<grid, 128, sizeof(mmq_smem<32>), c->stream>>>(job, w->row_bytes, M, K, xq, xd, n);
        } else {
            smem_allow(mmq_kernel<T, 8>, sizeof(mmq_smem<64>));
            mmq_kernel<T, 8><<<grid, 128, sizeof(mmq_smem<64>), c->stream>>>(job, w->row_bytes, M, K, xq, xd, n);
        }
    });
    if (!known) return wk_fail(err, WK_EUNSUPPORTED, "cuda mmq: type %s", qt_type_name(w->type));
    CU_CHECK_LAUNCH(err, "mmq");
    return 0;
}

extern "C" int cuda_mmq(cuda_ctx *c, const cuda_qweight *w, int64_t mat, const int8_t *xq, const float *xd, int64_t n,
                        float *y, wk_error *err)
{
    if (n <= 0) return 0;
    mmq_job job;
    memset(&job, 0, sizeof job);
    job.W[0] = (const uint8_t *)w->data + mat * w->mat_bytes;
    job.y[0] = y;
    return mmq_run(c, w, job, (n + 63) / 64, 1, 8, xq, xd, n, err);
}

extern "C" int cuda_mmq_grouped(cuda_ctx *c, const cuda_qweight *w0, const cuda_qweight *w1, const void *extra0,
                                const void *extra1, const cuda_moe_plan *plan, int gather, const int8_t *xq,
                                const float *xd, float *y0, float *y1, wk_error *err)
{
    if (w1 && (w1->type != w0->type || w1->rows != w0->rows || w1->cols != w0->cols || w1->row_bytes != w0->row_bytes))
        return wk_fail(err, WK_EINVAL, "cuda mmq: two packs of one launch differ in type or shape");
    mmq_job job;
    memset(&job, 0, sizeof job);
    job.W[0] = (const uint8_t *)w0->data;
    job.y[0] = y0;
    job.w_extra[0] = (const uint8_t *)extra0;
    if (w1) {
        job.W[1] = (const uint8_t *)w1->data;
        job.y[1] = y1;
        job.w_extra[1] = (const uint8_t *)extra1;
    }
    job.tiles = (const int4 *)plan->tiles;
    job.n_tiles = plan->n_tiles;
    job.x_rows = gather ? plan->tok : NULL;
    job.mat_bytes = w0->mat_bytes;
    job.n_mat = w0->n_mat;
    return mmq_run(c, w0, job, plan->max_tiles, w1 ? 2 : 1, plan->bn / 8, xq, xd, plan->n_rows, err);
}
