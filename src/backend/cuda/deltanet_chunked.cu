/* Gated DeltaNet prefill in the chunked WY form (spec architectures.md 8.6).
 *
 * The token scan (deltanet.cu) walks a prompt one token at a time: its depth
 * is the prompt length. Here the tokens are cut into chunks of GC = 64 and only
 * the state is carried from chunk to chunk; three kernels per run of up to
 * GDN_SEG_CHUNKS chunks, after deltanet.cu's q/k L2 norm pass:
 *
 *  prep  (chunk × value head, all in parallel): cumulative log-decay G, the
 *        intra-chunk matrices A and P, T = (I + A)⁻¹ in 16 × 16 blocks (forward
 *        substitution in the diagonal ones, each column on four lanes of one
 *        warp; products below them), W = T diag(β e^G) K and U = T diag(β) V.
 *  state (deltanet_state.cu; value head × 16 value columns, chunks in order; the
 *        only sequential part): saves the state entering the chunk, forms V' = U − W S (over
 *        U) and S ← e^{G_last} S + Σ_m e^{G_last − G_m} k_m v'_mᵀ. By default on
 *        tensor cores, each product as three TF32 products of hi/lo splits
 *        (about F32); cuda_gdn_scan_path's path 4 runs it in F32 on the CUDA cores.
 *  out   (chunk × value head × 64 columns, all in parallel):
 *        o_n = e^{G_n} Sᵀ q_n + Σ_{m ≤ n} P[n][m] v'_m.
 *
 * Every kernel stages its inputs with cp.async, all copies of a step in flight
 * at once (a loop of loads to registers and stores to shared memory exposed one
 * memory latency per iteration: 2.87 ms against 2.11 for the same kernels).
 *
 * prep and out are F32 on the CUDA cores, with the operations of the CPU's
 * chunked form (cpu_gdn.c), so the result equals the token scan to float
 * rounding. Measured on one H200 (bench_cuda gdn, Qwen3.5-27B heads, 4096
 * tokens): 1.54 ms, the F32 state kernel 1.75, the token scan 2.80 (the
 * steps: src/backend/cuda/README.md, session 5). A chunk that runs past the
 * last token is padded with k = q = v = 0, β = 0 and g = 0: its padded rows of
 * T are unit rows, of W, U and V' zero, and G stays at G_{L−1}, so the state
 * leaves it as the unpadded chunk would. */
#include <math.h>

#include "backend/cuda/attn_common.cuh" /* cp.async */
#include "backend/cuda/deltanet.cuh"
#include "backend/cuda/deltanet_chunked.cuh"

#define GDN_SEG_CHUNKS 16  /* chunks per run of the three kernels: bounds the scratch (113 MB for a 27B layer) */
#define GDN_OUT_COLS 64    /* value columns per block of the out kernel */

/* Scratch floats for one run of at most GDN_SEG_CHUNKS chunks (each block a multiple of 64 floats). */
static size_t chunk_scratch_floats(const cuda_gdn *a, int nc)
{
    const size_t hc = (size_t)a->n_hv * nc;
    return hc * GC + hc * GC * a->d_k + hc * GC * a->d_v + hc * GC * GC + hc * a->d_k * a->d_v;
}

extern "C" size_t cuda_gdn_chunked_scratch_floats(const cuda_gdn *a)
{
    const int nc = (int)cdiv(a->n_t, GC);
    return chunk_scratch_floats(a, nc < GDN_SEG_CHUNKS ? nc : GDN_SEG_CHUNKS);
}


/* out[n][c] = Σ_{m ≤ n} T[n][m] X[m][c] for the GC rows and ncols columns (a multiple
 * of 16) of X (shared, row stride ldx), 256 threads: rows rg + 16r, columns cg·CPT on. */
template <int NCOL>
__device__ void tri_mm(const float *Ts, const float *X, int ldx, float *out, size_t ldo, int ncols)
{
    constexpr int CPT = NCOL / 16;
    const int rg = threadIdx.x / 16, cg = threadIdx.x % 16;
    float acc[4][CPT];
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < CPT; c++) acc[r][c] = 0.0f;
    /* row rg + 16r takes m ≤ rg + 16r (T is zero above its diagonal): the m range in four
     * steps, step q feeding rows r ≥ q */
#pragma unroll
    for (int q = 0; q < 4; q++)
        for (int m = q ? rg + 16 * q - 15 : 0; m <= rg + 16 * q; m++) {
            float t[4];
#pragma unroll
            for (int r = q; r < 4; r++) t[r] = Ts[(rg + 16 * r) * (GC + 1) + m];
#pragma unroll
            for (int c4 = 0; c4 < CPT / 4; c4++) {
                const float4 x = *(const float4 *)&X[m * ldx + cg * CPT + 4 * c4];
#pragma unroll
                for (int r = q; r < 4; r++) {
                    acc[r][4 * c4] += t[r] * x.x;
                    acc[r][4 * c4 + 1] += t[r] * x.y;
                    acc[r][4 * c4 + 2] += t[r] * x.z;
                    acc[r][4 * c4 + 3] += t[r] * x.w;
                }
            }
        }
    if (cg * CPT >= ncols) return;
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c4 = 0; c4 < CPT / 4; c4++)
            *(float4 *)&out[(size_t)(rg + 16 * r) * ldo + cg * CPT + 4 * c4] =
                make_float4(acc[r][4 * c4], acc[r][4 * c4 + 1], acc[r][4 * c4 + 2], acc[r][4 * c4 + 3]);
}

/* The value slice [c0, c0 + DK) of a chunk's rows into Xs (zeros past the last token and
 * column), as cp.async copies; the caller commits and waits. */
template <int DK>
__device__ __forceinline__ void copy_v_slice(const cuda_gdn &a, const gdn_chunk_bufs &b, float *Xs, int j, int tc,
                                             int L, int c0)
{
    constexpr int KS = DK + 4;
    const int ncols = min(DK, a.d_v - c0);
    const float *vg = a.v + (size_t)j * a.d_v + c0;
    if (b.v16)
        for (int idx = threadIdx.x; idx < GC * DK / 4; idx += blockDim.x) {
            const int n = idx / (DK / 4), c = 4 * (idx % (DK / 4));
            const bool ok = n < L && c < ncols;
            cp_async16(&Xs[n * KS + c], vg + (ok ? (size_t)(tc + n) * a.v_stride + c : 0), ok);
        }
    else
        for (int idx = threadIdx.x; idx < GC * DK; idx += blockDim.x) {
            const int n = idx / DK, c = idx % DK;
            const bool ok = n < L && c < ncols;
            cp_async4(&Xs[n * KS + c], vg + (ok ? (size_t)(tc + n) * a.v_stride + c : 0), ok);
        }
}

template <int DK>
struct prep_smem {
    static constexpr int KS = DK + 4; /* padded row: rows 1 apart start 4 banks apart */
    static constexpr size_t FLOATS = 2 * (size_t)GC * KS + 2 * (size_t)GC * (GC + 1);
    static constexpr size_t BYTES = FLOATS * sizeof(float);
};

/* One chunk of one value head: G, A, P, T, W, U (see the top). 256 threads. */
template <int DK>
__global__ void __launch_bounds__(256) gdn_chunk_prep_kernel(const cuda_gdn a, const gdn_chunk_bufs b)
{
    constexpr int KS = prep_smem<DK>::KS;
    extern __shared__ __align__(16) float sm[];
    float *Ks = sm;                 /* [GC][KS] k, then β e^G k */
    float *Xs = Ks + GC * KS;       /* [GC][KS] q, then a slice of β v */
    float *As = Xs + GC * KS;       /* [GC][GC + 1] */
    float *Ts = As + GC * (GC + 1); /* [GC][GC + 1] */
    __shared__ float Gs[GC], Bs[GC];
    __shared__ float Xt[3 * 256]; /* the blocked solve's products (up to three 16 × 16 blocks) */
    const int ci = blockIdx.x, j = blockIdx.y, hk = j % a.n_hk, tid = threadIdx.x;
    const int tc = b.t0 + ci * GC;                 /* first token of the chunk */
    const int L = min(GC, b.t0 + b.n_seg - tc);    /* its tokens */
    const size_t hc = (size_t)j * b.nc + ci;       /* (head, chunk) index of the scratch */
    pdl_enter();

    for (int idx = tid; idx < GC * DK / 4; idx += blockDim.x) { /* all copies in flight at once */
        const int n = idx / (DK / 4), i = 4 * (idx % (DK / 4));
        const size_t off = ((size_t)(tc + (n < L ? n : 0)) * a.n_hk + hk) * DK + i;
        cp_async16(&Ks[n * KS + i], b.kn + off, n < L);
        cp_async16(&Xs[n * KS + i], b.qn + off, n < L);
    }
    cp_async_commit();
    if (tid < 32) { /* gates of tokens 2·lane and 2·lane + 1; G by a warp scan of the pairs */
        float g[2], bt[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int n = 2 * tid + h;
            const size_t ix = (size_t)(tc + n) * a.n_hv + j;
            g[h] = n < L ? gdn_log_decay(a.alpha, a.ssm_a, a.dt_bias, ix, j) : 0.0f;
            bt[h] = n < L ? gdn_sigmoid(a.beta[ix]) : 0.0f;
        }
        float run = g[0] + g[1];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float y = __shfl_up_sync(0xffffffffu, run, o);
            if (tid >= o) run += y;
        }
        float before = __shfl_up_sync(0xffffffffu, run, 1);
        if (tid == 0) before = 0.0f;
        const float G0 = before + g[0], G1 = G0 + g[1];
        Gs[2 * tid] = G0;
        Gs[2 * tid + 1] = G1;
        Bs[2 * tid] = bt[0];
        Bs[2 * tid + 1] = bt[1];
        b.G[hc * GC + 2 * tid] = G0;
        b.G[hc * GC + 2 * tid + 1] = G1;
    }
    cp_async_wait_all();
    __syncthreads();

    { /* A[n][m] = β_n (k_n·k_m) e^{G_n − G_m} (m < n), P[n][m] = (q_n·k_m) e^{G_n − G_m} (m ≤ n):
       * rows n = tn + 16r, columns m = tm + 16s (strided: conflict-free shared loads) */
        const int tn = tid / 16, tm = tid % 16;
        float kk[4][4], qk[4][4];
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int s = 0; s < 4; s++) kk[r][s] = qk[r][s] = 0.0f;
        for (int i = 0; i < DK; i += 4) {
            float4 kr[4], qr[4], km[4];
#pragma unroll
            for (int r = 0; r < 4; r++) {
                kr[r] = *(const float4 *)&Ks[(tn + 16 * r) * KS + i];
                qr[r] = *(const float4 *)&Xs[(tn + 16 * r) * KS + i];
                km[r] = *(const float4 *)&Ks[(tm + 16 * r) * KS + i];
            }
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int s = 0; s <= r; s++) { /* s > r: m = tm + 16s > n = tn + 16r, above the diagonal */
                    kk[r][s] += dot4(kr[r], km[s]);
                    qk[r][s] += dot4(qr[r], km[s]);
                }
        }
        __syncthreads(); /* q is read: the first value slice lands in Xs while T is solved */
        copy_v_slice<DK>(a, b, Xs, j, tc, L, 0);
        cp_async_commit();
        float *Pg = b.P + hc * GC * GC;
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int s = 0; s < 4; s++) {
                const int n = tn + 16 * r, m = tm + 16 * s;
                const float gam = m <= n ? expf(Gs[n] - Gs[m]) : 0.0f; /* G falls: no overflow */
                As[n * (GC + 1) + m] = m < n ? Bs[n] * kk[r][s] * gam : 0.0f;
                Pg[n * GC + m] = qk[r][s] * gam;
            }
    }
    __syncthreads();

    { /* T = (I + A)⁻¹ in 16 × 16 blocks. The diagonal blocks D_b = (I + A_bb)⁻¹ first, column m
       * on lanes 4m..4m+3 (a warp's 8 columns share a block): T[n][m] = −Σ_{m ≤ p < n} A[n][p] T[p][m]
       * for n in the block, a chain of 15 steps where the whole matrix would take 63 */
        const int m = tid / 4, part = tid % 4, b0 = m & ~15;
        if (part == 0)
            for (int n = 0; n < GC; n++) Ts[n * (GC + 1) + m] = n == m ? 1.0f : 0.0f;
        __syncwarp();
        for (int n = b0 + 1; n < b0 + 16; n++) { /* every lane runs every n: the shuffles need the whole warp */
            float acc = 0.0f;
            for (int p = m + part; p < n; p += 4) acc += As[n * (GC + 1) + p] * Ts[p * (GC + 1) + m];
            acc += __shfl_xor_sync(0xffffffffu, acc, 1);
            acc += __shfl_xor_sync(0xffffffffu, acc, 2);
            if (part == 0 && n > m) Ts[n * (GC + 1) + m] = -acc;
            __syncwarp();
        }
    }
    /* then the blocks below the diagonal by their distance d from it:
     * T_ij = −D_i Σ_{j ≤ k < i} A_ik T_kj, i = j + d (T_kj for k − j < d is known by then) */
    for (int d = 1; d < 4; d++) {
        __syncthreads();
        for (int e = tid; e < (4 - d) * 256; e += blockDim.x) { /* X_ij = Σ_k A_ik T_kj */
            const int jb = e / 256, r = (e / 16) % 16, c = e % 16, ib = jb + d;
            float acc = 0.0f;
            for (int p = 16 * jb; p < 16 * ib; p++) acc += As[(16 * ib + r) * (GC + 1) + p] * Ts[p * (GC + 1) + 16 * jb + c];
            Xt[e] = acc;
        }
        __syncthreads();
        for (int e = tid; e < (4 - d) * 256; e += blockDim.x) { /* T_ij = −D_i X_ij */
            const int jb = e / 256, r = (e / 16) % 16, c = e % 16, ib = jb + d;
            float acc = 0.0f;
            for (int q = 0; q <= r; q++) acc += Ts[(16 * ib + r) * (GC + 1) + 16 * ib + q] * Xt[jb * 256 + q * 16 + c];
            Ts[(16 * ib + r) * (GC + 1) + 16 * jb + c] = -acc;
        }
    }
    __syncthreads();
    /* as the CPU: T[n][m] β_m times v_m, then that times e^{G_m} times k_m */
    for (int idx = tid; idx < GC * GC; idx += blockDim.x) Ts[(idx / GC) * (GC + 1) + idx % GC] *= Bs[idx % GC];
    for (int c0 = 0; c0 < a.d_v; c0 += DK) { /* U = T diag(β) V, DK value columns at a time */
        if (c0) { /* the first slice was requested before the solve */
            __syncthreads(); /* the previous slice is read */
            copy_v_slice<DK>(a, b, Xs, j, tc, L, c0);
            cp_async_commit();
        }
        cp_async_wait_all();
        __syncthreads(); /* the slice landed; T scaled */
        tri_mm<DK>(Ts, Xs, KS, b.U + hc * GC * a.d_v + c0, a.d_v, min(DK, a.d_v - c0));
    }
    __syncthreads();
    for (int idx = tid; idx < GC * GC; idx += blockDim.x) Ts[(idx / GC) * (GC + 1) + idx % GC] *= expf(Gs[idx % GC]);
    __syncthreads();
    tri_mm<DK>(Ts, Ks, KS, b.W + hc * GC * DK, DK, DK); /* W = T diag(β e^G) K */
}

template <int DK>
struct out_smem {
    static constexpr int KS = DK + 4, OS = GDN_OUT_COLS + 4, PS = GC + 4;
    static constexpr size_t BYTES = ((size_t)GC * KS + (size_t)DK * OS + (size_t)GC * PS + (size_t)GC * OS) * sizeof(float);
};

/* Outputs of one chunk, one value head, GDN_OUT_COLS columns. 256 threads: rows rg + 16r, columns cg..cg+3. */
template <int DK>
__global__ void __launch_bounds__(256) gdn_chunk_out_kernel(const cuda_gdn a, const gdn_chunk_bufs b)
{
    constexpr int KS = out_smem<DK>::KS, OS = out_smem<DK>::OS, PS = out_smem<DK>::PS, CO = GDN_OUT_COLS;
    extern __shared__ __align__(16) float sm[];
    float *Qs = sm;             /* [GC][KS] */
    float *Ss = Qs + GC * KS;   /* [DK][OS] */
    float *Ps = Ss + DK * OS;   /* [GC][PS] */
    float *Vs = Ps + GC * PS;   /* [GC][OS] */
    __shared__ float Gs[GC];
    const int ci = blockIdx.x, j = blockIdx.y, c0 = blockIdx.z * CO, hk = j % a.n_hk, tid = threadIdx.x;
    const int tc = b.t0 + ci * GC, L = min(GC, b.t0 + b.n_seg - tc);
    const int ncol = min(CO, a.d_v - c0);
    const size_t hc = (size_t)j * b.nc + ci;
    pdl_enter();

    /* all copies in flight at once (cp.async), zeros past the last token and column */
    for (int idx = tid; idx < GC * DK / 4; idx += blockDim.x) {
        const int n = idx / (DK / 4), i = 4 * (idx % (DK / 4));
        cp_async16(&Qs[n * KS + i], b.qn + ((size_t)(tc + (n < L ? n : 0)) * a.n_hk + hk) * DK + i, n < L);
    }
    const float *Sg = b.S + hc * DK * a.d_v + c0, *Pg = b.P + hc * GC * GC, *Vg = b.U + hc * GC * a.d_v + c0;
    for (int idx = tid; idx < DK * CO / 4; idx += blockDim.x) {
        const int i = idx / (CO / 4), c = 4 * (idx % (CO / 4));
        cp_async16(&Ss[i * OS + c], Sg + (c < ncol ? (size_t)i * a.d_v + c : 0), c < ncol);
    }
    for (int idx = tid; idx < GC * GC / 4; idx += blockDim.x) {
        const int n = idx / (GC / 4), m = 4 * (idx % (GC / 4));
        cp_async16(&Ps[n * PS + m], Pg + n * GC + m, true);
    }
    for (int idx = tid; idx < GC * CO / 4; idx += blockDim.x) {
        const int n = idx / (CO / 4), c = 4 * (idx % (CO / 4));
        cp_async16(&Vs[n * OS + c], Vg + (c < ncol ? (size_t)n * a.d_v + c : 0), c < ncol);
    }
    cp_async_commit();
    if (tid < GC) Gs[tid] = b.G[hc * GC + tid];
    cp_async_wait_all();
    __syncthreads();

    const int rg = tid / 16, cg = 4 * (tid % 16);
    float acc[4][4];
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < 4; c++) acc[r][c] = 0.0f;
    for (int i = 0; i < DK; i += 4) { /* Sᵀ q_n */
        float4 q[4];
#pragma unroll
        for (int r = 0; r < 4; r++) q[r] = *(const float4 *)&Qs[(rg + 16 * r) * KS + i];
#pragma unroll
        for (int ii = 0; ii < 4; ii++) {
            const float4 x = *(const float4 *)&Ss[(i + ii) * OS + cg];
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const float qv = comp(q[r], ii);
                acc[r][0] += qv * x.x;
                acc[r][1] += qv * x.y;
                acc[r][2] += qv * x.z;
                acc[r][3] += qv * x.w;
            }
        }
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const float e = expf(Gs[rg + 16 * r]);
#pragma unroll
        for (int c = 0; c < 4; c++) acc[r][c] *= e;
    }
#pragma unroll
    for (int q = 0; q < 4; q++) /* + Σ_{m ≤ n} P[n][m] v'_m; the m range in steps as tri_mm's */
        for (int m = q ? rg + 16 * q - 15 : 0; m <= rg + 16 * q; m++) {
            const float4 x = *(const float4 *)&Vs[m * OS + cg];
#pragma unroll
            for (int r = q; r < 4; r++) {
                const float p = Ps[(rg + 16 * r) * PS + m];
                acc[r][0] += p * x.x;
                acc[r][1] += p * x.y;
                acc[r][2] += p * x.z;
                acc[r][3] += p * x.w;
            }
        }
    if (cg >= ncol) return;
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int n = rg + 16 * r;
        if (n >= L) continue;
        float *o = a.out + (size_t)(tc + n) * a.out_stride + (size_t)j * a.d_v + c0 + cg;
#pragma unroll
        for (int c = 0; c < 4; c++) o[c] = acc[r][c];
    }
}

template <int DK>
static int launch_runs(cuda_ctx *c, const cuda_gdn *a, gdn_chunk_bufs b, bool mma, wk_error *err)
{
    cudaError_t e = smem_allow(gdn_chunk_prep_kernel<DK>, prep_smem<DK>::BYTES);
    if (e == cudaSuccess) e = smem_allow(gdn_chunk_out_kernel<DK>, out_smem<DK>::BYTES);
    if (e != cudaSuccess) return cu_fail(err, e, "gdn (chunked): shared memory limit");
    float *base = b.G;
    for (int t0 = 0; t0 < a->n_t; t0 += GDN_SEG_CHUNKS * GC) {
        b.t0 = t0;
        b.n_seg = min(GDN_SEG_CHUNKS * GC, a->n_t - t0);
        b.nc = (int)cdiv(b.n_seg, GC);
        const size_t hc = (size_t)a->n_hv * b.nc;
        b.G = base;
        b.W = b.G + hc * GC;
        b.U = b.W + hc * GC * DK;
        b.P = b.U + hc * GC * a->d_v;
        b.S = b.P + hc * GC * GC;
        launch_k(c, gdn_chunk_prep_kernel<DK>, dim3(b.nc, a->n_hv), 256, prep_smem<DK>::BYTES, *a, b);
        CU_CHECK_LAUNCH(err, "gdn (chunk prepare)");
        const int rc = gdn_chunk_state(c, a, b, mma, err);
        if (rc) return rc;
        launch_k(c, gdn_chunk_out_kernel<DK>, dim3(b.nc, a->n_hv, cdiv(a->d_v, GDN_OUT_COLS)), 256,
                 out_smem<DK>::BYTES, *a, b);
        CU_CHECK_LAUNCH(err, "gdn (chunk out)");
    }
    return 0;
}

/* qn, kn: deltanet.cu's normalized q and k of all n_t tokens; scratch:
 * cuda_gdn_chunked_scratch_floats(a) floats, 16-byte aligned; mma: the state kernel
 * on tensor cores (3×TF32), else on the CUDA cores in F32. */
extern "C" int cuda_gdn_chunked(cuda_ctx *c, const cuda_gdn *a, const float *qn, const float *kn, float *scratch,
                                int mma, wk_error *err)
{
    gdn_chunk_bufs b;
    memset(&b, 0, sizeof b);
    b.qn = qn;
    b.kn = kn;
    b.G = scratch;
    b.v16 = !((uintptr_t)a->v & 15) && a->v_stride % 4 == 0 && a->d_v % 4 == 0;
    return a->d_k == 128 ? launch_runs<128>(c, a, b, mma, err) : launch_runs<64>(c, a, b, mma, err);
}
