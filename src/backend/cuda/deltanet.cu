/* Gated DeltaNet scan (spec architectures.md 8.5) for decode and prefill.
 *
 * The value columns of a head's state are independent given the token's
 * k, q, β and decay: column c of S_j only needs k·S[:,c] and its own v_c.
 * So a block owns GDN_COLS columns of one value head, keeps that slice of the
 * state in registers for the whole scan (d_k/16 threads per column, 16 key
 * rows each) and walks the tokens in order; k and q of a run of tokens are staged
 * in shared memory once per block. A first pass normalizes q/k and forms the
 * gates for all tokens in parallel; a decode step (one token) skips it: each
 * block normalizes its own key head's q/k and forms its value head's gates
 * (one launch instead of two, same operations: bit-identical). Both kernels
 * are launched with launch_k (programmatic dependent launch).
 *
 * This is the token-by-token recurrence: decode, and prefill batches below
 * GDN_CHUNKED_MIN tokens; longer ones take the chunked WY form of 8.6
 * (deltanet_chunked.cu) after the same first pass. */
#include <math.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/deltanet.cuh"

#define GDN_COLS 16    /* value columns per block */
#define GDN_TC 32      /* tokens staged per round */
/* key rows per thread: d_k / 4; a thread's run is padded by 4 floats in shared memory so the
 * four runs of a column start in different banks */

/* The scale of one q or k row of d_k floats (L2 norm clamped by eps; q also
 * / sqrt(d_k)): one warp, lanes strided. Shared by both paths so they round alike. */
__device__ __forceinline__ float gdn_qk_scale(const float *src, const cuda_gdn &a, bool is_q)
{
    const int lane = threadIdx.x & 31;
    float ss = 0.0f;
    for (int c = lane; c < a.d_k; c += 32) ss += src[c] * src[c];
    ss = warp_sum(ss);
    float scale = 1.0f / fmaxf(sqrtf(ss), a.eps);
    if (is_q) scale *= 1.0f / sqrtf((float)a.d_k);
    return scale;
}

/* Decay and β of value head j at token t. */
__device__ __forceinline__ void gdn_gates(const cuda_gdn &a, int t, int j, float *decay, float *beta)
{
    const size_t ix = (size_t)t * a.n_hv + j;
    *decay = expf(gdn_log_decay(a.alpha, a.ssm_a, a.dt_bias, ix, j));
    *beta = gdn_sigmoid(a.beta[ix]);
}

/* q/k L2 norm (q also / sqrt(d_k)) per (token, key head); gates per (token, value head). */
__global__ void gdn_prep_kernel(const cuda_gdn a, float *qn, float *kn, float *gates)
{
    pdl_enter();
    const int t = blockIdx.x;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, nw = blockDim.x / 32;
    for (int hk = warp; hk < 2 * a.n_hk; hk += nw) {
        const bool is_q = hk < a.n_hk;
        const int i = is_q ? hk : hk - a.n_hk;
        const float *src = (is_q ? a.q : a.k) + (size_t)t * a.qk_stride + (size_t)i * a.d_k;
        const float scale = gdn_qk_scale(src, a, is_q);
        float *dst = (is_q ? qn : kn) + ((size_t)t * a.n_hk + i) * a.d_k;
        for (int c = lane; c < a.d_k; c += 32) dst[c] = src[c] * scale;
    }
    for (int j = threadIdx.x; j < a.n_hv; j += blockDim.x) {
        float *g = gates + ((size_t)t * a.n_hv + j) * 2;
        gdn_gates(a, t, j, &g[0], &g[1]);
    }
}

/* FUSED (decode, n_t == 1): the block normalizes its key head's q and k (warps 0
 * and 1) and forms its value head's gates (the last thread) itself, with the
 * operations of gdn_prep_kernel (bit-identical); qn, kn, gates are unused. With
 * a.seqs.n sequences of one token each, blockIdx.z is the sequence: its row of the
 * inputs and output and its own state, the same operations as a call of its own.
 * Otherwise they come from gdn_prep_kernel. */
template <int DK, int TPC, bool FUSED>
__global__ void __launch_bounds__(GDN_COLS * TPC)
gdn_scan_kernel(const cuda_gdn a, const float *__restrict__ qn, const float *__restrict__ kn,
                const float *__restrict__ gates)
{
    constexpr int RPT = DK / TPC;       /* key rows per thread */
    constexpr int RSTRIDE = RPT + 4;    /* padded run */
    constexpr int TC = FUSED ? 1 : GDN_TC; /* tokens staged per round */
    __shared__ __align__(16) float ks[TC][TPC * RSTRIDE];
    __shared__ __align__(16) float qsh[TC][TPC * RSTRIDE];
    __shared__ float vs[TC][GDN_COLS];
    __shared__ float gs[TC][2];

    const int j = blockIdx.x;                 /* value head */
    const int c0 = blockIdx.y * GDN_COLS;     /* first column of this block */
    const int hk = j % a.n_hk;                /* GGUF order: value head j reads key head j mod n_hk */
    const int col = threadIdx.x / TPC, r = threadIdx.x % TPC;
    const int c = c0 + col;
    const int z = FUSED ? blockIdx.z : 0; /* the sequence (FUSED: its one token is row z) */
    float *S = (FUSED && a.seqs.n ? a.seqs.p[z] : a.state) + (size_t)j * DK * a.d_v;
    pdl_enter(); /* launch_k: the state, q/k/v and the gates come from earlier kernels */

    float s[RPT];
#pragma unroll
    for (int ii = 0; ii < RPT; ii++) s[ii] = S[(size_t)(r * RPT + ii) * a.d_v + c];

    const int n_t = FUSED ? 1 : a.n_t; /* FUSED: one token of each sequence */
    for (int t0 = 0; t0 < n_t; t0 += TC) {
        const int nt = min(TC, n_t - t0);
        __syncthreads();
        if (FUSED) { /* one token (t0 = 0): q/k of key head hk and the gates of value head j from the inputs */
            const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
            if (warp < 2) {
                const bool is_q = warp == 0;
                const float *src = (is_q ? a.q : a.k) + (size_t)z * a.qk_stride + (size_t)hk * a.d_k;
                const float scale = gdn_qk_scale(src, a, is_q);
                float *dst = is_q ? qsh[0] : ks[0];
                for (int i = lane; i < DK; i += 32) dst[(i / RPT) * RSTRIDE + i % RPT] = src[i] * scale;
            }
            if (threadIdx.x == blockDim.x - 1) gdn_gates(a, z, j, &gs[0][0], &gs[0][1]);
        } else {
            for (int idx = threadIdx.x; idx < nt * DK; idx += blockDim.x) {
                const int tt = idx / DK, i = idx % DK;
                const size_t off = ((size_t)(t0 + tt) * a.n_hk + hk) * DK + i;
                ks[tt][(i / RPT) * RSTRIDE + i % RPT] = kn[off];
                qsh[tt][(i / RPT) * RSTRIDE + i % RPT] = qn[off];
            }
        }
        for (int idx = threadIdx.x; idx < nt * GDN_COLS; idx += blockDim.x) {
            const int tt = idx / GDN_COLS, cc = idx % GDN_COLS;
            vs[tt][cc] = a.v[(size_t)(z + t0 + tt) * a.v_stride + (size_t)j * a.d_v + c0 + cc];
        }
        if (!FUSED)
            for (int idx = threadIdx.x; idx < nt * 2; idx += blockDim.x)
                gs[idx / 2][idx % 2] = gates[((size_t)(t0 + idx / 2) * a.n_hv + j) * 2 + idx % 2];
        __syncthreads();

        for (int tt = 0; tt < nt; tt++) {
            const float decay = gs[tt][0], beta = gs[tt][1];
            const float4 *kr = (const float4 *)&ks[tt][r * RSTRIDE];
            float kv = 0.0f;
#pragma unroll
            for (int q4 = 0; q4 < RPT / 4; q4++) {
                const float4 k4 = kr[q4];
                kv += s[4 * q4] * k4.x + s[4 * q4 + 1] * k4.y + s[4 * q4 + 2] * k4.z + s[4 * q4 + 3] * k4.w;
            }
#pragma unroll
            for (int o = 1; o < TPC; o <<= 1) kv += __shfl_xor_sync(0xffffffffu, kv, o);
            const float delta = beta * (vs[tt][col] - decay * kv);
            const float4 *qr = (const float4 *)&qsh[tt][r * RSTRIDE];
            float o = 0.0f;
#pragma unroll
            for (int q4 = 0; q4 < RPT / 4; q4++) {
                const float4 k4 = kr[q4], qq = qr[q4];
                s[4 * q4] = fmaf(s[4 * q4], decay, k4.x * delta);
                s[4 * q4 + 1] = fmaf(s[4 * q4 + 1], decay, k4.y * delta);
                s[4 * q4 + 2] = fmaf(s[4 * q4 + 2], decay, k4.z * delta);
                s[4 * q4 + 3] = fmaf(s[4 * q4 + 3], decay, k4.w * delta);
                o += s[4 * q4] * qq.x + s[4 * q4 + 1] * qq.y + s[4 * q4 + 2] * qq.z + s[4 * q4 + 3] * qq.w;
            }
#pragma unroll
            for (int m = 1; m < TPC; m <<= 1) o += __shfl_xor_sync(0xffffffffu, o, m);
            if (r == 0) a.out[(size_t)(z + t0 + tt) * a.out_stride + (size_t)j * a.d_v + c] = o;
        }
    }
#pragma unroll
    for (int ii = 0; ii < RPT; ii++) S[(size_t)(r * RPT + ii) * a.d_v + c] = s[ii];
}

/* Prefill batches of this many tokens or more take the chunked form, its state kernel
 * on tensor cores (wick bench pp4096, 27B q4_k, H200: token scan 7,247 tok/s, chunked
 * 7,717; state kernel in F32 on the CUDA cores 7,676, on tensor cores 7,867; paths 2 and
 * 4 of cuda_gdn_scan_path keep the alternatives for tests and benchmarks). */
#define GDN_CHUNKED_MIN 64

extern "C" int cuda_gdn_scan_path(cuda_ctx *c, const cuda_gdn *a, int path, wk_error *err)
{
    if (a->n_t <= 0) return 0;
    if ((a->d_k != 64 && a->d_k != 128) || a->d_v % GDN_COLS || a->n_hk <= 0 || a->n_hv % a->n_hk)
        return wk_fail(err, WK_EUNSUPPORTED, "gdn: d_k %d, d_v %d, %d key / %d value heads (kernel: d_k 64 or 128, d_v a "
                       "multiple of 16, value heads a multiple of key heads)", a->d_k, a->d_v, a->n_hk, a->n_hv);
    const bool aligned = !((uintptr_t)a->state & 15); /* the chunked kernels move the state as float4 */
    /* several sequences of one token each: only the fused one-launch form has a z per sequence */
    const int n_seq = a->seqs.n;
    if (n_seq && (n_seq > CUDA_SEQS_MAX || a->n_t != n_seq || (path != 0 && path != 1)))
        return wk_fail(err, WK_EINVAL, "gdn: %d sequences of one token each, %d rows, path %d", n_seq, a->n_t, path);
    if (n_seq) path = 1;
    if (path == 0) path = a->n_t == 1 ? 1 : aligned && a->n_t >= GDN_CHUNKED_MIN ? 3 : 2;
    if (path >= 3 && !aligned) return wk_fail(err, WK_EINVAL, "gdn: the chunked form needs a 16-byte aligned state");
    if (path == 1 && a->n_t != 1 && !n_seq)
        return wk_fail(err, WK_EINVAL, "gdn: the fused kernel takes one token, not %d", a->n_t);
    if (path < 1 || path > 4) return wk_fail(err, WK_EINVAL, "gdn: no path %d", path);
    const dim3 grid(a->n_hv, a->d_v / GDN_COLS);
    if (path == 1) { /* one launch: each block prepares what it reads; z: the sequences */
        const dim3 g1(a->n_hv, a->d_v / GDN_COLS, n_seq ? n_seq : 1);
        if (a->d_k == 128) launch_k(c, gdn_scan_kernel<128, 8, true>, g1, GDN_COLS * 8, 0, *a, nullptr, nullptr, nullptr);
        else launch_k(c, gdn_scan_kernel<64, 4, true>, g1, GDN_COLS * 4, 0, *a, nullptr, nullptr, nullptr);
        CU_CHECK_LAUNCH(err, "gdn (fused scan)");
        return 0;
    }
    /* scratch: qn, kn, gates, then (chunked) the chunk buffers; every part a multiple of 64 floats */
    const size_t qk = (size_t)a->n_t * a->n_hk * a->d_k, ng = ((size_t)a->n_t * a->n_hv * 2 + 63) / 64 * 64;
    const size_t chunk = path >= 3 ? cuda_gdn_chunked_scratch_floats(a) : 0;
    void *scr;
    int rc = cuda_ctx_scratch(c, (2 * qk + ng + chunk) * sizeof(float), &scr, err);
    if (rc) return rc;
    float *qn = (float *)scr, *kn = qn + qk, *gates = kn + qk;
    launch_k(c, gdn_prep_kernel, a->n_t, 256, 0, *a, qn, kn, gates);
    CU_CHECK_LAUNCH(err, "gdn (prepare)");
    if (path >= 3) return cuda_gdn_chunked(c, a, qn, kn, gates + ng, path == 3, err);
    /* 16 key rows per thread: more threads in flight for the latency-bound token loop */
    if (a->d_k == 128) launch_k(c, gdn_scan_kernel<128, 8, false>, grid, GDN_COLS * 8, 0, *a, qn, kn, gates);
    else launch_k(c, gdn_scan_kernel<64, 4, false>, grid, GDN_COLS * 4, 0, *a, qn, kn, gates);
    CU_CHECK_LAUNCH(err, "gdn (scan)");
    return 0;
}

extern "C" int cuda_gdn_scan(cuda_ctx *c, const cuda_gdn *a, wk_error *err)
{
    return cuda_gdn_scan_path(c, a, 0, err);
}
