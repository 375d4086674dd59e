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
 *  state (value head × column slice, chunks in order; the only sequential
 *        part): saves the state entering the chunk, forms V' = U − W S (over
 *        U) and S ← e^{G_last} S + Σ_m e^{G_last − G_m} k_m v'_mᵀ; each thread
 *        keeps 16 state values of one key row in registers.
 *  out   (chunk × value head × 64 columns, all in parallel):
 *        o_n = e^{G_n} Sᵀ q_n + Σ_{m ≤ n} P[n][m] v'_m.
 *
 * Every kernel stages its inputs with cp.async, all copies of a step in flight
 * at once (a loop of loads to registers and stores to shared memory exposed one
 * memory latency per iteration: 2.87 ms against 2.11 for the same kernels).
 *
 * All F32 on the CUDA cores (not tensor cores yet), with the operations of the
 * CPU's chunked form (cpu_gdn.c), so the result equals the token scan to float
 * rounding. Measured against the token scan on one H200 (bench_cuda gdn,
 * Qwen3.5-27B heads, 4096 tokens): 1.79 vs 2.80 ms; ncu per 2048 tokens: prep
 * 417 µs, state 498 µs (latency-bound: few warps, two dependent products per
 * chunk), out 212 µs. A chunk
 * that runs past the last token is padded with k = q = v = 0, β = 0 and g = 0:
 * its padded rows of T are unit rows, of W, U and V' zero, and G stays at
 * G_{L−1}, so the state leaves it as the unpadded chunk would. */
#include <math.h>

#include "backend/cuda/attn_common.cuh" /* cp.async */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/deltanet.cuh"

#define GC 64              /* chunk length, as llama.cpp's fallback graph and the CPU */
#define GDN_SEG_CHUNKS 16  /* chunks per run of the three kernels: bounds the scratch (113 MB for a 27B layer) */
#define GDN_OUT_COLS 64    /* value columns per block of the out kernel */
/* value columns per block of the state kernel: 384 blocks for a 27B layer, three per
 * multiprocessor (32 columns measured no faster before k moved to registers; with
 * it a 256-thread block no longer fits twice) */
#define GDN_STATE_COLS 16

typedef struct gdn_chunk_bufs {
    const float *qn, *kn; /* [n_t][n_hk][d_k], normalized (deltanet.cu's first pass) */
    float *G;             /* [n_hv][nc][GC] cumulative log-decay */
    float *W;             /* [n_hv][nc][GC][d_k] */
    float *U;             /* [n_hv][nc][GC][d_v]: U, then V' (state kernel) */
    float *P;             /* [n_hv][nc][GC][GC] */
    float *S;             /* [n_hv][nc][d_k][d_v]: the state entering each chunk */
    int t0, n_seg, nc;    /* the run: first token, tokens, chunks */
    int v16;              /* v rows 16-byte aligned: copied 16 bytes at a time */
} gdn_chunk_bufs;

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

__device__ __forceinline__ float dot4(float4 x, float4 y) { return x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w; }
__device__ __forceinline__ float comp(const float4 &v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

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
struct state_smem {
    static constexpr int KS = DK + 4, CB = GDN_STATE_COLS;
    static constexpr size_t BYTES = ((size_t)GC * KS + (size_t)DK * CB + (size_t)GC * CB) * sizeof(float);
};

/* The chunks of one run in order, for value head blockIdx.x and its CB value
 * columns from blockIdx.y · CB. DK · CB / 16 threads, each holding 16 columns of one
 * key row of the state. A chunk's W, k, G and U do not depend on the state: they are
 * all requested at the chunk's start, so one memory latency is exposed per chunk.
 * A thread's 64 k values (its state row of the chunk's keys) wait in registers, not
 * shared memory: that leaves 46 KiB of shared memory per block (16 columns), three
 * blocks per multiprocessor, so the 384 blocks of a 27B layer run in one wave. */
template <int DK>
__global__ void __launch_bounds__(DK * GDN_STATE_COLS / 16) gdn_chunk_state_kernel(const cuda_gdn a,
                                                                                   const gdn_chunk_bufs b)
{
    constexpr int KS = state_smem<DK>::KS, CB = GDN_STATE_COLS;
    constexpr int NT = DK * CB / 16;
    constexpr int TPR = CB / 16;    /* threads per state row */
    constexpr int VC = 1024 / DK;   /* V' columns per thread: GC · CB values over NT threads */
    constexpr int VTR = CB / VC;    /* threads per V' row */
    extern __shared__ __align__(16) float sm[];
    float *Ws = sm;                 /* [GC][KS] */
    float *Ss = Ws + GC * KS;       /* [DK][CB] the state slice entering the chunk */
    float *Vs = Ss + DK * CB;       /* [GC][CB] V' */
    __shared__ float Gs[GC], Es[GC];
    const int j = blockIdx.x, c0 = blockIdx.y * CB, hk = j % a.n_hk, tid = threadIdx.x;
    const int si = tid / TPR, sc = (tid % TPR) * 16; /* this thread's state row and first column */
    const int vn = tid / VTR, vc = (tid % VTR) * VC; /* its V' row and first column */
    float *Sg = a.state + (size_t)j * DK * a.d_v + (size_t)si * a.d_v + c0 + sc;
    pdl_enter();

    float s[16];
#pragma unroll
    for (int c = 0; c < 16; c += 4) {
        const float4 x = *(const float4 *)&Sg[c];
        s[c] = x.x, s[c + 1] = x.y, s[c + 2] = x.z, s[c + 3] = x.w;
    }
    for (int ci = 0; ci < b.nc; ci++) {
        const int tc = b.t0 + ci * GC, L = min(GC, b.t0 + b.n_seg - tc);
        const size_t hc = (size_t)j * b.nc + ci;
        float *Sc = b.S + hc * DK * a.d_v + (size_t)si * a.d_v + c0 + sc;
        float *Ug = b.U + hc * GC * a.d_v + (size_t)vn * a.d_v + c0 + vc;
        __syncthreads(); /* the previous chunk is done with Ws, Ss, Vs */
        const float *Wg = b.W + hc * GC * DK;
        for (int idx = tid; idx < GC * DK / 4; idx += NT) { /* all copies in flight at once */
            const int n = idx / (DK / 4), i = 4 * (idx % (DK / 4));
            cp_async16(&Ws[n * KS + i], Wg + n * DK + i, true);
        }
        cp_async_commit();
        float kr[GC]; /* k_m[si] (0 past the last token) */
        const float *kg = b.kn + ((size_t)tc * a.n_hk + hk) * DK + si;
#pragma unroll
        for (int m = 0; m < GC; m++) kr[m] = m < L ? kg[(size_t)m * a.n_hk * DK] : 0.0f;
        if (tid < GC) { /* G_{GC−1} = G_{L−1}: padding has g = 0 */
            const float g = b.G[hc * GC + tid], glast = b.G[hc * GC + GC - 1];
            Gs[tid] = g;
            Es[tid] = expf(glast - g);
        }
        float4 u[VC / 4];
#pragma unroll
        for (int c = 0; c < VC / 4; c++) u[c] = *(const float4 *)&Ug[4 * c];
#pragma unroll
        for (int c = 0; c < 16; c += 4) {
            const float4 x = make_float4(s[c], s[c + 1], s[c + 2], s[c + 3]);
            *(float4 *)&Sc[c] = x;
            *(float4 *)&Ss[si * CB + sc + c] = x;
        }
        cp_async_wait_all();
        __syncthreads();

        float acc[VC]; /* (W S)[vn][vc..] */
#pragma unroll
        for (int c = 0; c < VC; c++) acc[c] = 0.0f;
#pragma unroll 2
        for (int i = 0; i < DK; i += 4) {
            const float4 w = *(const float4 *)&Ws[vn * KS + i];
#pragma unroll
            for (int ii = 0; ii < 4; ii++) {
                const float wv = comp(w, ii);
#pragma unroll
                for (int c = 0; c < VC; c += 4) {
                    const float4 x = *(const float4 *)&Ss[(i + ii) * CB + vc + c];
                    acc[c] += wv * x.x;
                    acc[c + 1] += wv * x.y;
                    acc[c + 2] += wv * x.z;
                    acc[c + 3] += wv * x.w;
                }
            }
        }
#pragma unroll
        for (int c = 0; c < VC / 4; c++) {
            u[c].x -= acc[4 * c], u[c].y -= acc[4 * c + 1], u[c].z -= acc[4 * c + 2], u[c].w -= acc[4 * c + 3];
            *(float4 *)&Ug[4 * c] = u[c];
            *(float4 *)&Vs[vn * CB + vc + 4 * c] = u[c];
        }
        __syncthreads();

        const float dl = expf(Gs[GC - 1]);
#pragma unroll
        for (int c = 0; c < 16; c++) s[c] *= dl;
#pragma unroll
        for (int m = 0; m < GC; m++) { /* past the last token k and v' are 0 */
            const float km = kr[m] * Es[m];
#pragma unroll
            for (int c = 0; c < 16; c += 4) {
                const float4 v = *(const float4 *)&Vs[m * CB + sc + c];
                s[c] += km * v.x;
                s[c + 1] += km * v.y;
                s[c + 2] += km * v.z;
                s[c + 3] += km * v.w;
            }
        }
    }
#pragma unroll
    for (int c = 0; c < 16; c += 4) *(float4 *)&Sg[c] = make_float4(s[c], s[c + 1], s[c + 2], s[c + 3]);
}

/* ---- the state kernel on tensor cores ------------------------------------------------- */

__device__ __forceinline__ uint32_t tf32_bits(float x)
{
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
/* x = hi + lo, both TF32 (lo: hi's rounding error, rounded): ~21 of F32's 24 bits */
__device__ __forceinline__ void tf32_split(float x, uint32_t &hi, uint32_t &lo)
{
    hi = tf32_bits(x);
    lo = tf32_bits(x - __uint_as_float(hi));
}
/* c += a·b, m16n8k8, TF32 operands, F32 accumulators */
__device__ __forceinline__ void mma_tf32(float *c, const uint32_t *a, const uint32_t *b)
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
/* c += a·b to about F32 accuracy: lo·hi + hi·lo + hi·hi (the small terms first; lo·lo dropped) */
__device__ __forceinline__ void mma_3xtf32(float *c, const uint32_t *ah, const uint32_t *al, const uint32_t *bh,
                                           const uint32_t *bl)
{
    mma_tf32(c, al, bh);
    mma_tf32(c, ah, bl);
    mma_tf32(c, ah, bh);
}

template <int DK>
struct state_mma_smem {
    static constexpr int KS = DK + 4, SS = GDN_STATE_COLS + 8; /* 24: a B fragment's 32 reads hit 32 banks */
    static constexpr size_t BYTES = ((size_t)GC * KS + (size_t)DK * SS + (size_t)GC * SS) * sizeof(float);
};

/* The state kernel's two products per chunk on tensor cores (mma.sync m16n8k8, each
 * product as three TF32 products of hi/lo splits: about F32 accuracy). Same blocks as
 * gdn_chunk_state_kernel (value head × 16 columns), 4 warps. Fragment layouts
 * (g = lane / 4, t = lane % 4): A a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4);
 * B b0 (t, g), b1 (t+4, g); C c0 (g, 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1).
 *  V' = U − W S: warp w owns chunk rows 16w..16w+15 (A = W from shared memory, B = S).
 *  S ← e^{G_last} S + Kᵀ (diag(e^{G_last − G_m}) V'): warp w owns state rows
 *  (DK/4)·w on, the state itself the C fragments (registers for the whole run); the
 *  A fragments (k values) are loaded from global memory into registers at the
 *  chunk's start, the decay factors folded into V' as it goes to shared memory. */
template <int DK>
__global__ void __launch_bounds__(128) gdn_chunk_state_mma_kernel(const cuda_gdn a, const gdn_chunk_bufs b)
{
    constexpr int KS = state_mma_smem<DK>::KS, SS = state_mma_smem<DK>::SS, CB = GDN_STATE_COLS;
    constexpr int MT = DK / 64; /* state m-tiles per warp */
    static_assert(CB == 16, "two n-tiles of 8 columns");
    extern __shared__ __align__(16) float sm[];
    float *Ws = sm;            /* [GC][KS] */
    float *Ss = Ws + GC * KS;  /* [DK][SS] the state entering the chunk */
    float *Vs = Ss + DK * SS;  /* [GC][SS] e^{G_last − G_m} v'_m */
    __shared__ float Gs[GC], Es[GC];
    const int j = blockIdx.x, c0 = blockIdx.y * CB, hk = j % a.n_hk;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const int r1 = 16 * warp;      /* V' rows r1 + g, r1 + g + 8 */
    const int i0 = 16 * MT * warp; /* state rows i0 + 16 mt + g, + 8 */
    const size_t dv = a.d_v;
    float *Sg = a.state + (size_t)j * DK * dv + c0;
    pdl_enter();

    float s[MT][2][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            const size_t row = i0 + 16 * mt + g, col = 8 * nt + 2 * t;
            const float2 x = *(const float2 *)&Sg[row * dv + col], y = *(const float2 *)&Sg[(row + 8) * dv + col];
            s[mt][nt][0] = x.x, s[mt][nt][1] = x.y, s[mt][nt][2] = y.x, s[mt][nt][3] = y.y;
        }
    for (int ci = 0; ci < b.nc; ci++) {
        const int tc = b.t0 + ci * GC, L = min(GC, b.t0 + b.n_seg - tc);
        const size_t hc = (size_t)j * b.nc + ci;
        __syncthreads(); /* the previous chunk is done with Ws, Ss, Vs, Gs, Es */
        const float *Wg = b.W + hc * GC * DK;
        for (int idx = threadIdx.x; idx < GC * DK / 4; idx += 128) {
            const int n = idx / (DK / 4), i = 4 * (idx % (DK / 4));
            cp_async16(&Ws[n * KS + i], Wg + n * DK + i, true);
        }
        cp_async_commit();
        if (threadIdx.x < GC) { /* G_{GC−1} = G_{L−1}: padding has g = 0 */
            const float gv = b.G[hc * GC + threadIdx.x], glast = b.G[hc * GC + GC - 1];
            Gs[threadIdx.x] = gv;
            Es[threadIdx.x] = expf(glast - gv);
        }
        float kr[MT][GC / 8][4]; /* A fragments of Kᵀ (0 past the last token) */
        const float *kg = b.kn + ((size_t)tc * a.n_hk + hk) * DK;
        const size_t kstride = (size_t)a.n_hk * DK;
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int kk = 0; kk < GC / 8; kk++) {
                const int m0 = 8 * kk + t, m1 = m0 + 4, ia = i0 + 16 * mt + g, ib = ia + 8;
                kr[mt][kk][0] = m0 < L ? kg[m0 * kstride + ia] : 0.0f;
                kr[mt][kk][1] = m0 < L ? kg[m0 * kstride + ib] : 0.0f;
                kr[mt][kk][2] = m1 < L ? kg[m1 * kstride + ia] : 0.0f;
                kr[mt][kk][3] = m1 < L ? kg[m1 * kstride + ib] : 0.0f;
            }
        float *Ug = b.U + hc * GC * dv + c0;
        float u[2][4];
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            const size_t col = 8 * nt + 2 * t;
            const float2 x = *(const float2 *)&Ug[(r1 + g) * dv + col], y = *(const float2 *)&Ug[(r1 + g + 8) * dv + col];
            u[nt][0] = x.x, u[nt][1] = x.y, u[nt][2] = y.x, u[nt][3] = y.y;
        }
        float *Sc = b.S + hc * DK * dv + c0;
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int nt = 0; nt < 2; nt++) {
                const int row = i0 + 16 * mt + g, col = 8 * nt + 2 * t;
                const float2 x = make_float2(s[mt][nt][0], s[mt][nt][1]), y = make_float2(s[mt][nt][2], s[mt][nt][3]);
                *(float2 *)&Sc[row * dv + col] = x;
                *(float2 *)&Sc[(row + 8) * dv + col] = y;
                *(float2 *)&Ss[row * SS + col] = x;
                *(float2 *)&Ss[(row + 8) * SS + col] = y;
            }
        cp_async_wait_all();
        __syncthreads();

        float acc[2][2][4]; /* (W S) for even and odd k-steps: two shorter dependency chains */
#pragma unroll
        for (int p = 0; p < 2; p++)
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
#pragma unroll
                for (int q = 0; q < 4; q++) acc[p][nt][q] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < DK / 8; kk++) {
            const int k0 = 8 * kk;
            uint32_t ah[4], al[4];
            tf32_split(Ws[(r1 + g) * KS + k0 + t], ah[0], al[0]);
            tf32_split(Ws[(r1 + g + 8) * KS + k0 + t], ah[1], al[1]);
            tf32_split(Ws[(r1 + g) * KS + k0 + t + 4], ah[2], al[2]);
            tf32_split(Ws[(r1 + g + 8) * KS + k0 + t + 4], ah[3], al[3]);
#pragma unroll
            for (int nt = 0; nt < 2; nt++) {
                uint32_t bh[2], bl[2];
                tf32_split(Ss[(k0 + t) * SS + 8 * nt + g], bh[0], bl[0]);
                tf32_split(Ss[(k0 + t + 4) * SS + 8 * nt + g], bh[1], bl[1]);
                mma_3xtf32(acc[kk & 1][nt], ah, al, bh, bl);
            }
        }
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            float v[4];
#pragma unroll
            for (int q = 0; q < 4; q++) v[q] = u[nt][q] - (acc[0][nt][q] + acc[1][nt][q]);
            const int col = 8 * nt + 2 * t, ra = r1 + g, rb = ra + 8;
            *(float2 *)&Ug[ra * dv + col] = make_float2(v[0], v[1]);
            *(float2 *)&Ug[rb * dv + col] = make_float2(v[2], v[3]);
            *(float2 *)&Vs[ra * SS + col] = make_float2(Es[ra] * v[0], Es[ra] * v[1]);
            *(float2 *)&Vs[rb * SS + col] = make_float2(Es[rb] * v[2], Es[rb] * v[3]);
        }
        __syncthreads();

        const float dl = expf(Gs[GC - 1]);
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
#pragma unroll
                for (int q = 0; q < 4; q++) s[mt][nt][q] *= dl;
#pragma unroll
        for (int kk = 0; kk < GC / 8; kk++) {
            const int k0 = 8 * kk;
            uint32_t bh[2][2], bl[2][2];
#pragma unroll
            for (int nt = 0; nt < 2; nt++) {
                tf32_split(Vs[(k0 + t) * SS + 8 * nt + g], bh[nt][0], bl[nt][0]);
                tf32_split(Vs[(k0 + t + 4) * SS + 8 * nt + g], bh[nt][1], bl[nt][1]);
            }
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                uint32_t ah[4], al[4];
#pragma unroll
                for (int q = 0; q < 4; q++) tf32_split(kr[mt][kk][q], ah[q], al[q]);
#pragma unroll
                for (int nt = 0; nt < 2; nt++) mma_3xtf32(s[mt][nt], ah, al, bh[nt], bl[nt]);
            }
        }
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            const size_t row = i0 + 16 * mt + g, col = 8 * nt + 2 * t;
            *(float2 *)&Sg[row * dv + col] = make_float2(s[mt][nt][0], s[mt][nt][1]);
            *(float2 *)&Sg[(row + 8) * dv + col] = make_float2(s[mt][nt][2], s[mt][nt][3]);
        }
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
    static int raised[16];
    const int dev = c->device < 16 && c->device >= 0 ? c->device : 15;
    if (!(raised[dev] & DK / 64)) {
        cudaError_t e = cudaFuncSetAttribute(gdn_chunk_prep_kernel<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)prep_smem<DK>::BYTES);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(gdn_chunk_state_kernel<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)state_smem<DK>::BYTES);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(gdn_chunk_state_mma_kernel<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)state_mma_smem<DK>::BYTES);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(gdn_chunk_out_kernel<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)out_smem<DK>::BYTES);
        if (e != cudaSuccess) return cu_fail(err, e, "gdn (chunked): shared memory limit");
        raised[dev] |= DK / 64;
    }
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
        if (mma)
            launch_k(c, gdn_chunk_state_mma_kernel<DK>, dim3(a->n_hv, a->d_v / GDN_STATE_COLS), 128,
                     state_mma_smem<DK>::BYTES, *a, b);
        else
            launch_k(c, gdn_chunk_state_kernel<DK>, dim3(a->n_hv, a->d_v / GDN_STATE_COLS), DK * GDN_STATE_COLS / 16,
                     state_smem<DK>::BYTES, *a, b);
        CU_CHECK_LAUNCH(err, "gdn (chunk state)");
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
