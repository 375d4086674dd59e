/* The sequential part of the chunked Gated DeltaNet prefill (deltanet_chunked.cu
 * for the rest): per chunk, in order, V' = U − W S and
 * S ← e^{G_last} S + Σ_m e^{G_last − G_m} k_m v'_mᵀ, for one value head and
 * GDN_STATE_COLS of its value columns per block. Two kernels: on tensor cores (the
 * default) and in F32 on the CUDA cores (cuda_gdn_scan_path's path 4). */
#include <math.h>

#include "backend/cuda/attn_common.cuh" /* cp.async */
#include "backend/cuda/deltanet_chunked.cuh"

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
static int launch_state(cuda_ctx *c, const cuda_gdn *a, const gdn_chunk_bufs &b, bool mma, wk_error *err)
{
    const dim3 grid(a->n_hv, a->d_v / GDN_STATE_COLS);
    const size_t smem = mma ? state_mma_smem<DK>::BYTES : state_smem<DK>::BYTES;
    const cudaError_t e =
        mma ? smem_allow(gdn_chunk_state_mma_kernel<DK>, smem) : smem_allow(gdn_chunk_state_kernel<DK>, smem);
    if (e != cudaSuccess) return cu_fail(err, e, "gdn (chunk state): shared memory limit");
    if (mma) launch_k(c, gdn_chunk_state_mma_kernel<DK>, grid, 128, smem, *a, b);
    else launch_k(c, gdn_chunk_state_kernel<DK>, grid, DK * GDN_STATE_COLS / 16, smem, *a, b);
    CU_CHECK_LAUNCH(err, "gdn (chunk state)");
    return 0;
}

int gdn_chunk_state(cuda_ctx *c, const cuda_gdn *a, const gdn_chunk_bufs &b, bool mma, wk_error *err)
{
    return a->d_k == 128 ? launch_state<128>(c, a, b, mma, err) : launch_state<64>(c, a, b, mma, err);
}
