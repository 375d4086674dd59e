/* Flash attention over an F16 or Q8_0 KV cache, causal, GQA, with the
 * block-sparse approximate policy (cuda_attn_mask).
 *
 * Prefill: a block of 4 warps owns 64 queries of one head and walks 64-key
 * tiles; S = Q·Kᵀ and O += P·V run on tensor cores (mma.sync m16n8k16, F16
 * operands, F32 accumulation) with the online softmax in registers. Key tiles
 * the mask rules out for every query of the block are skipped before any
 * load, so work falls with the window.
 *
 * Decode (a few queries): split-K. Each block takes one (query, kv head,
 * chunk of keys), serves all query heads of the group from one read of the
 * chunk, and leaves (max, sum, unnormalized output); a second pass merges the
 * chunks. Both are launched with launch_k (programmatic dependent launch).
 *
 * Q8_0 caches (rows of 34-byte blocks: F16 scale, 32 int8 codes) go through
 * the same kernels, instantiated per KV type: prefill copies a tile's raw
 * blocks into the end of its F16 tile and expands them in place (code × scale
 * rounded once to F16); decode turns each lane's values into F32 code × scale,
 * exactly the CPU backend's dequantization. */
#include <math.h>

#include "backend/cuda/attn_common.cuh"

/* ---- prefill: tensor-core tiles ------------------------------------------------------- */

#define FA_BQ 64
#define FA_BK 64
#define FA_WARPS 4

/* Where a tile's raw Q8_0 rows sit in its F16 tile: at the end, so that F16
 * row r (ending at byte r·2·LD + 2·D) never reaches raw row r + 1 (starting
 * at RAW_OFF + (r+1)·R): expanding rows in increasing order overwrites
 * only raw rows already read. */
template <int D> struct q8_tile {
    static constexpr int R = Q8_ROW_BYTES(D);
    static constexpr int BYTES = FA_BK * R; /* one tile's rows: contiguous in the cache */
    static constexpr int RAW_OFF = FA_BK * (D + 8) * 2 - BYTES;
    static_assert(RAW_OFF % 16 == 0, "raw Q8_0 tile must be 16-byte aligned in shared memory");
};

/* Expands the raw Q8_0 rows (load_q8_rows to the tile's RAW_OFF, landed) into F16 rows in place.
 * Passes of ROWS rows: each thread reads and converts its 8-value chunks, the
 * block waits, then writes them; by q8_tile's layout a pass writes only over
 * raw rows of its own or earlier passes. Ends without a barrier. */
template <int D>
__device__ __forceinline__ void fa_expand_tile_q8(__half *tile)
{
    using T = q8_tile<D>;
    constexpr int LD = D + 8, CHUNKS = D / 8;
    constexpr int PER_THREAD = 4;                               /* chunks per thread and pass */
    constexpr int ROWS = FA_WARPS * 32 * PER_THREAD / CHUNKS; /* 64, 32, 16 rows at d = 64, 128, 256 */
    const unsigned char *raw = (const unsigned char *)tile + T::RAW_OFF;
#pragma unroll
    for (int r0 = 0; r0 < FA_BK; r0 += ROWS) {
        uint4 h[PER_THREAD];
#pragma unroll
        for (int i = 0; i < PER_THREAD; i++) {
            const int c = threadIdx.x + i * FA_WARPS * 32;
            const int r = r0 + c / CHUNKS, col = (c % CHUNKS) * 8;
            h[i] = q8_row_f16x8(raw + r * T::R, col);
        }
        __syncthreads(); /* every raw byte of these rows read before any is overwritten */
#pragma unroll
        for (int i = 0; i < PER_THREAD; i++) {
            const int c = threadIdx.x + i * FA_WARPS * 32;
            const int r = r0 + c / CHUNKS, col = (c % CHUNKS) * 8;
            *(uint4 *)(tile + r * LD + col) = h[i];
        }
    }
}

template <int D, int KV>
__global__ void __launch_bounds__(FA_WARPS * 32)
fa_prefill_kernel(const cuda_attn a, float qscale)
{
    constexpr int LD = D + 8;
    constexpr int NT_O = D / 8;   /* output n-tiles per warp */
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __half *Qs = (__half *)smem_raw;
    __half *Ks = Qs + FA_BQ * LD;
    __half *Vs = Ks + FA_BK * LD;

    const int n_qt = (a.n_q + FA_BQ - 1) / FA_BQ;
    const int qt = n_qt - 1 - (int)blockIdx.x; /* heaviest (latest) query tiles first */
    const int h = blockIdx.y;
    const int g_kv = h / (a.n_head / a.n_head_kv);
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int gr = lane >> 2, tq = lane & 3;
    const int q_first = qt * FA_BQ;
    const int n_rows = min(FA_BQ, a.n_q - q_first);
    const int p0 = a.q_pos0 + q_first, p1 = p0 + n_rows - 1;
    const size_t qhs = a.q_head_stride ? a.q_head_stride : (size_t)D;

    /* Q tile → F16, pre-scaled so that scores come out in log2 units */
    for (int idx = threadIdx.x; idx < FA_BQ * D; idx += FA_WARPS * 32) {
        const int r = idx / D, col = idx % D;
        float v = r < n_rows ? a.q[(size_t)(q_first + r) * a.q_stride + (size_t)h * qhs + col] * qscale : 0.0f;
        Qs[r * LD + col] = __float2half_rn(v);
    }

    const uint16_t *kh = a.k + (size_t)g_kv * a.kv_head_stride;
    const uint16_t *vh = a.v + (size_t)g_kv * a.kv_head_stride;

    float o[NT_O][4];
#pragma unroll
    for (int i = 0; i < NT_O; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.0f, 0.0f};
    const int row0 = warp * 16 + gr; /* this thread's rows: row0, row0 + 8 */
    const int pr[2] = {p0 + row0, p0 + row0 + 8};
    const bool rv[2] = {row0 < n_rows, row0 + 8 < n_rows};

    const int k_end = min(p1 + 1, a.n_kv);
    for (int k0 = 0; k0 < k_end; k0 += FA_BK) {
        if (!tile_needed(a.mask, p0, p1, k0, k0 + FA_BK - 1)) continue;
        __syncthreads(); /* previous tile's V reads done before K/V are overwritten */
        if constexpr (KV == CUDA_KV_F16) {
            load_f16_rows<D, FA_BK, FA_WARPS * 32>(Ks, kh, k0, a.n_kv);
            cp_async_commit();
            load_f16_rows<D, FA_BK, FA_WARPS * 32>(Vs, vh, k0, a.n_kv);
            cp_async_commit();
        } else {
            load_q8_rows<D, FA_BK, FA_WARPS * 32>((unsigned char *)Ks + q8_tile<D>::RAW_OFF, kh, k0, a.n_kv);
            cp_async_commit();
            load_q8_rows<D, FA_BK, FA_WARPS * 32>((unsigned char *)Vs + q8_tile<D>::RAW_OFF, vh, k0, a.n_kv);
            cp_async_commit();
        }
        asm volatile("cp.async.wait_group 1;\n" ::); /* K landed; V still in flight */
        __syncthreads();
        if constexpr (KV == CUDA_KV_Q8_0) {
            fa_expand_tile_q8<D>(Ks);
            __syncthreads();
        }

        /* S = Q Kᵀ for this warp's 16 rows × 64 keys */
        float s[8][4];
#pragma unroll
        for (int nt = 0; nt < 8; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            uint32_t af[4];
            const __half *qa = Qs + (warp * 16 + gr) * LD + kk * 16 + 2 * tq;
            af[0] = *(const uint32_t *)qa;
            af[1] = *(const uint32_t *)(qa + 8 * LD);
            af[2] = *(const uint32_t *)(qa + 8);
            af[3] = *(const uint32_t *)(qa + 8 * LD + 8);
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                const __half *kb = Ks + (nt * 8 + gr) * LD + kk * 16 + 2 * tq;
                mma_16816(s[nt], af, *(const uint32_t *)kb, *(const uint32_t *)(kb + 8));
            }
        }

        /* mask + online softmax (rows r=0: row0, r=1: row0+8) */
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1;
                const int j = k0 + nt * 8 + 2 * tq + (e & 1);
                const bool ok = rv[r] && j <= pr[r] && j < a.n_kv && mask_allows(a.mask, pr[r], j);
                s[nt][e] = ok ? s[nt][e] : -INFINITY;
                mx[r] = fmaxf(mx[r], s[nt][e]);
            }
        float corr[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            const float m_new = fmaxf(m_r[r], mx[r]);
            corr[r] = m_new == -INFINITY ? 1.0f : exp2f(m_r[r] - m_new);
            m_r[r] = m_new;
        }
        float sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1;
                const float p = m_r[r] == -INFINITY ? 0.0f : exp2f(s[nt][e] - m_r[r]);
                s[nt][e] = p;
                sum[r] += p;
            }
#pragma unroll
        for (int r = 0; r < 2; r++) l_r[r] = l_r[r] * corr[r] + sum[r]; /* partial per thread; reduced at the end */
#pragma unroll
        for (int i = 0; i < NT_O; i++) {
            o[i][0] *= corr[0];
            o[i][1] *= corr[0];
            o[i][2] *= corr[1];
            o[i][3] *= corr[1];
        }

        cp_async_wait_all();
        __syncthreads();
        if constexpr (KV == CUDA_KV_Q8_0) {
            fa_expand_tile_q8<D>(Vs);
            __syncthreads();
        }

        /* O += P V: P from registers (C layout → A layout), V via ldmatrix.trans */
#pragma unroll
        for (int kk = 0; kk < FA_BK / 16; kk++) {
            uint32_t pa[4];
            pa[0] = pack_half2(s[2 * kk][0], s[2 * kk][1]);
            pa[1] = pack_half2(s[2 * kk][2], s[2 * kk][3]);
            pa[2] = pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            pa[3] = pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
            const int mi = lane >> 3, rr = lane & 7;
#pragma unroll
            for (int np = 0; np < D / 16; np++) {
                uint32_t b[4];
                const __half *vp = Vs + (kk * 16 + rr + 8 * (mi & 1)) * LD + np * 16 + 8 * (mi >> 1);
                ldmatrix_x4_trans(b, vp);
                mma_16816(o[2 * np], pa, b[0], b[1]);
                mma_16816(o[2 * np + 1], pa, b[2], b[3]);
            }
        }
    }

    /* finish: full row sums across the 4 threads of a row, normalize, store */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l_r[r] += __shfl_xor_sync(0xffffffffu, l_r[r], 1);
        l_r[r] += __shfl_xor_sync(0xffffffffu, l_r[r], 2);
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (!rv[r]) continue;
        const float inv = l_r[r] > 0.0f ? 1.0f / l_r[r] : 0.0f;
        float *out = a.out + (size_t)(q_first + row0 + 8 * r) * a.out_stride + (size_t)h * D;
#pragma unroll
        for (int i = 0; i < NT_O; i++)
            *(float2 *)(out + i * 8 + 2 * tq) = make_float2(o[i][2 * r] * inv, o[i][2 * r + 1] * inv);
    }
}

/* ---- decode: split-K ---------------------------------------------------------------- */

#define FD_WARPS 4
#define FD_CHUNK 128 /* keys per sub-chunk of a block: keeps static shared memory under 48 KB at d = 256 */
#define FD_MAXG 8    /* query heads per kv head */

/* Values lane·E .. lane·E + E-1 of cache row j of a head, as F32. Q8_0: code ×
 * scale in F32 (exact: 8 × 11 significant bits), as the CPU backend expands rows. */
template <int D, int KV>
__device__ __forceinline__ void fd_load_row(float *f, const uint16_t *head, int j, int lane)
{
    constexpr int E = D / 32;
    if constexpr (KV == CUDA_KV_F16) {
        const uint16_t *r = head + (size_t)j * D + lane * E;
#pragma unroll
        for (int e = 0; e < E; e += 2) {
            float2 v = __half22float2(*(const __half2 *)(r + e));
            f[e] = v.x;
            f[e + 1] = v.y;
        }
    } else {
        const int c = lane * E; /* E <= 8 values: all in one 32-value block */
        const unsigned char *blk = (const unsigned char *)head + (size_t)j * Q8_ROW_BYTES(D) + c / 32 * 34;
        const float sc = h2f(*(const uint16_t *)blk);
        const unsigned char *codes = blk + 2 + c % 32; /* 2-byte aligned only */
        if constexpr (E == 2) {
            const uint16_t b = *(const uint16_t *)codes;
            f[0] = sc * (float)(int8_t)(b & 0xff);
            f[1] = sc * (float)(int8_t)(b >> 8);
        } else {
            /* E/4 + 1 aligned words starting 4 bytes (odd blocks: codes 4-byte
             * aligned) or 2 bytes (even blocks) before the codes. Rows start and
             * end 4-byte aligned and block b starts at byte 34·b, so the words
             * stay in the row: an odd block has a block before it, and an even
             * block never ends the row. */
            const uintptr_t a0 = (uintptr_t)codes;
            const uint32_t *w = (const uint32_t *)((a0 - 2) & ~(uintptr_t)3);
            const unsigned sh = (unsigned)(a0 - (uintptr_t)w) * 8; /* 16 or 32 */
            uint32_t u[E / 4 + 1];
#pragma unroll
            for (int i = 0; i <= E / 4; i++) u[i] = w[i];
#pragma unroll
            for (int e = 0; e < E; e++) {
                const uint32_t x = __funnelshift_rc(u[e / 4], u[e / 4 + 1], sh);
                f[e] = sc * (float)(int8_t)((x >> (8 * (e % 4))) & 0xff);
            }
        }
    }
}

template <int D, int KV>
__global__ void __launch_bounds__(FD_WARPS * 32)
fa_decode_kernel(const cuda_attn a, float qscale, int n_split, int split_len, float *part_o, float *part_ml)
{
    constexpr int E = D / 32; /* dims per lane */
    __shared__ float qs[FD_MAXG][D];
    __shared__ float sc[FD_MAXG][FD_CHUNK];
    __shared__ float red[FD_WARPS][FD_MAXG][D];
    __shared__ float m_run[FD_MAXG], l_run[FD_MAXG], corr_s[FD_MAXG];
    pdl_enter(); /* launch_k: q, the cache rows and the position come from earlier kernels */

    const int split = blockIdx.x, g_kv = blockIdx.y, qi = blockIdx.z;
    const int G = a.n_head / a.n_head_kv;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    cuda_attn_mask mask = a.mask;
    const int shift = a.pos_dev ? *a.pos_dev - a.pos_ref : 0; /* graph replay at another position */
    mask.dense_from += shift;
    const int p = a.q_pos0 + shift + qi;
    const size_t qhs = a.q_head_stride ? a.q_head_stride : (size_t)D;
    /* this block's keys: [b0, b1) */
    const int b0 = split * split_len;
    const int b1 = min(b0 + split_len, min(p + 1, a.n_kv + shift));

    for (int idx = threadIdx.x; idx < G * D; idx += FD_WARPS * 32) {
        const int g = idx / D, c = idx % D;
        qs[g][c] = a.q[(size_t)qi * a.q_stride + (size_t)(g_kv * G + g) * qhs + c] * qscale;
    }
    if (threadIdx.x < FD_MAXG) {
        m_run[threadIdx.x] = -INFINITY;
        l_run[threadIdx.x] = 0.0f;
    }
    __syncthreads();
    float qr[FD_MAXG][E];
#pragma unroll
    for (int g = 0; g < FD_MAXG; g++)
#pragma unroll
        for (int e = 0; e < E; e++) qr[g][e] = g < G ? qs[g][lane * E + e] : 0.0f;
    float acc[FD_MAXG][E];
#pragma unroll
    for (int g = 0; g < FD_MAXG; g++)
#pragma unroll
        for (int e = 0; e < E; e++) acc[g][e] = 0.0f;

    const uint16_t *kh = a.k + (size_t)g_kv * a.kv_head_stride;
    const uint16_t *vh = a.v + (size_t)g_kv * a.kv_head_stride;
    for (int j0 = b0; j0 < b1; j0 += FD_CHUNK) {
        const int j1 = min(j0 + FD_CHUNK, b1);
        if (!tile_needed(mask, p, p, j0, j1 - 1)) continue; /* uniform over the block */
        /* scores: one key per warp step, lanes split the head dim */
#pragma unroll 2
        for (int j = j0 + warp; j < j1; j += FD_WARPS) {
            float kf[E];
            fd_load_row<D, KV>(kf, kh, j, lane);
            const bool ok = mask_allows(mask, p, j);
#pragma unroll
            for (int g = 0; g < FD_MAXG; g++) {
                if (g >= G) break;
                float t = 0.0f;
#pragma unroll
                for (int e = 0; e < E; e++) t += qr[g][e] * kf[e];
                t = warp_sum(t);
                if (lane == 0) sc[g][j - j0] = ok ? t : -INFINITY;
            }
        }
        __syncthreads();
        /* online softmax per head: warp w takes heads w, w+4 */
        for (int g = warp; g < G; g += FD_WARPS) {
            float mx = -INFINITY;
            for (int j = lane; j < j1 - j0; j += 32) mx = fmaxf(mx, sc[g][j]);
            mx = warp_max(mx);
            const float m_new = fmaxf(m_run[g], mx);
            float sum = 0.0f;
            for (int j = lane; j < j1 - j0; j += 32) {
                const float e = m_new == -INFINITY ? 0.0f : exp2f(sc[g][j] - m_new);
                sc[g][j] = e;
                sum += e;
            }
            sum = warp_sum(sum);
            if (lane == 0) {
                const float corr = m_new == -INFINITY ? 1.0f : exp2f(m_run[g] - m_new);
                corr_s[g] = corr;
                l_run[g] = l_run[g] * corr + sum;
                m_run[g] = m_new;
            }
        }
        __syncthreads();
#pragma unroll
        for (int g = 0; g < FD_MAXG; g++) {
            if (g >= G) break;
            const float corr = corr_s[g];
#pragma unroll
            for (int e = 0; e < E; e++) acc[g][e] *= corr;
        }
#pragma unroll 2
        for (int j = j0 + warp; j < j1; j += FD_WARPS) {
            float vf[E];
            fd_load_row<D, KV>(vf, vh, j, lane);
#pragma unroll
            for (int g = 0; g < FD_MAXG; g++) {
                if (g >= G) break;
                const float pj = sc[g][j - j0];
#pragma unroll
                for (int e = 0; e < E; e++) acc[g][e] += pj * vf[e];
            }
        }
        __syncthreads(); /* sc is rewritten by the next sub-chunk */
    }
#pragma unroll
    for (int g = 0; g < FD_MAXG; g++) {
        if (g >= G) break;
#pragma unroll
        for (int e = 0; e < E; e++) red[warp][g][lane * E + e] = acc[g][e];
    }
    __syncthreads();
    const size_t base = ((size_t)qi * a.n_head + (size_t)g_kv * G) * n_split + split;
    for (int idx = threadIdx.x; idx < G * D; idx += FD_WARPS * 32) {
        const int g = idx / D, c = idx % D;
        float t = 0.0f;
#pragma unroll
        for (int w = 0; w < FD_WARPS; w++) t += red[w][g][c];
        part_o[(base + (size_t)g * n_split) * D + c] = t;
    }
    if (threadIdx.x < G) {
        part_ml[(base + (size_t)threadIdx.x * n_split) * 2] = m_run[threadIdx.x];
        part_ml[(base + (size_t)threadIdx.x * n_split) * 2 + 1] = l_run[threadIdx.x];
    }
}

/* One block per (query, head): merges the chunks' partial results. */
__global__ void fa_combine_kernel(const cuda_attn a, int n_split, int D, const float *part_o,
                                  const float *part_ml)
{
    pdl_enter();
    const int h = blockIdx.x, qi = blockIdx.y;
    const size_t base = ((size_t)qi * a.n_head + h) * n_split;
    float M = -INFINITY;
    for (int s = 0; s < n_split; s++) M = fmaxf(M, part_ml[(base + s) * 2]);
    float L = 0.0f;
    for (int s = 0; s < n_split; s++) {
        const float m = part_ml[(base + s) * 2];
        if (m != -INFINITY) L += exp2f(m - M) * part_ml[(base + s) * 2 + 1];
    }
    const float inv = L > 0.0f ? 1.0f / L : 0.0f;
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < n_split; s++) {
            const float m = part_ml[(base + s) * 2];
            if (m != -INFINITY) acc += exp2f(m - M) * part_o[(base + s) * D + c];
        }
        a.out[(size_t)qi * a.out_stride + (size_t)h * D + c] = acc * inv;
    }
}

/* ---- entry points --------------------------------------------------------------------- */

template <int D, int KV> static int fa_prefill(cuda_ctx *c, const cuda_attn *a, wk_error *err)
{
    const size_t smem = (size_t)(FA_BQ + 2 * FA_BK) * (D + 8) * sizeof(__half); /* Q8_0 stages in the F16 tiles */
    cudaError_t e =
        cudaFuncSetAttribute(fa_prefill_kernel<D, KV>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return cu_fail(err, e, "attention: shared memory limit");
    dim3 grid((a->n_q + FA_BQ - 1) / FA_BQ, a->n_head);
    fa_prefill_kernel<D, KV><<<grid, FA_WARPS * 32, smem, c->stream>>>(*a, a->scale * LOG2E);
    CU_CHECK_LAUNCH(err, "attention (prefill)");
    return 0;
}

template <int D, int KV> static int fa_decode(cuda_ctx *c, const cuda_attn *a, wk_error *err)
{
    /* tensor cores (attention_decode.cu) unless switched off or G > 16 */
    const int tc = cuda_attn_decode_tc(c, a, err);
    if (tc <= 0) return tc;
    const int G = a->n_head / a->n_head_kv;
    if (G > FD_MAXG)
        return wk_fail(err, WK_EUNSUPPORTED, "attention: %d query heads per kv head (decode kernel takes %d)", G,
                       FD_MAXG);
    /* keys < last can be visible; the split is sized for the end of last's band
     * (CUDA_ATTN_BAND) so that it stays the same across the band's steps */
    const int last = min(a->q_pos0 + a->n_q, a->n_kv);
    const int band_last = (last + CUDA_ATTN_BAND - 1) / CUDA_ATTN_BAND * CUDA_ATTN_BAND;
    /* enough blocks for ~3 per multiprocessor, each a whole number of sub-chunks */
    const int want = max(1, 3 * c->sm_count / (a->n_head_kv * a->n_q));
    const int n_sub = (band_last + FD_CHUNK - 1) / FD_CHUNK;
    const int sub_per_split = (n_sub + want - 1) / want;
    const int split_len = sub_per_split * FD_CHUNK;
    const int n_split = (band_last + split_len - 1) / split_len; /* splits past last find no keys */
    const size_t rows = (size_t)a->n_q * a->n_head * n_split;
    void *scr;
    int rc = cuda_ctx_scratch(c, rows * (D + 2) * sizeof(float), &scr, err);
    if (rc) return rc;
    float *part_o = (float *)scr, *part_ml = part_o + rows * D;
    dim3 grid(n_split, a->n_head_kv, a->n_q);
    launch_k(c, fa_decode_kernel<D, KV>, grid, FD_WARPS * 32, 0, *a, a->scale * LOG2E, n_split, split_len, part_o,
             part_ml);
    CU_CHECK_LAUNCH(err, "attention (decode)");
    launch_k(c, fa_combine_kernel, dim3(a->n_head, a->n_q), D, 0, *a, n_split, D, (const float *)part_o,
             (const float *)part_ml);
    CU_CHECK_LAUNCH(err, "attention (combine)");
    return 0;
}

template <int KV> static int fa_run(cuda_ctx *c, const cuda_attn *a, int path, wk_error *err)
{
    switch (a->d) {
    case 64: return path == 1 ? fa_decode<64, KV>(c, a, err) : fa_prefill<64, KV>(c, a, err);
    case 128: return path == 1 ? fa_decode<128, KV>(c, a, err) : fa_prefill<128, KV>(c, a, err);
    case 256: return path == 1 ? fa_decode<256, KV>(c, a, err) : fa_prefill<256, KV>(c, a, err);
    default: return wk_fail(err, WK_EUNSUPPORTED, "attention: head dim %d (kernels take 64, 128, 256)", a->d);
    }
}

extern "C" int cuda_attn_check(const cuda_attn *a, wk_error *err)
{
    if (a->n_head_kv <= 0 || a->n_head % a->n_head_kv)
        return wk_fail(err, WK_EINVAL, "attention: %d query heads not a multiple of %d kv heads", a->n_head,
                       a->n_head_kv);
    if (a->q_pos0 < 0 || a->q_pos0 + a->n_q > a->n_kv)
        return wk_fail(err, WK_EINVAL, "attention: queries at %d..%d beyond %d cached keys", a->q_pos0,
                       a->q_pos0 + a->n_q - 1, a->n_kv);
    if (a->kv_type != CUDA_KV_F16 && a->kv_type != CUDA_KV_Q8_0)
        return wk_fail(err, WK_EUNSUPPORTED, "attention: KV cache type %d", a->kv_type);
    if (a->kv_type == CUDA_KV_F16 && a->kv_head_stride % 8)
        return wk_fail(err, WK_EINVAL, "attention: kv head stride %zu not a multiple of 8", a->kv_head_stride);
    /* Q8_0 rows are multiples of 4 bytes; prefill copies and decode loads take 4-byte words */
    if (a->kv_type == CUDA_KV_Q8_0 && (a->kv_head_stride % 2 || ((uintptr_t)a->k | (uintptr_t)a->v) % 4))
        return wk_fail(err, WK_EINVAL, "attention: Q8_0 cache heads not 4-byte aligned (head stride %zu)",
                       a->kv_head_stride);
    return 0;
}

extern "C" int cuda_attention_path(cuda_ctx *c, const cuda_attn *a, int path, wk_error *err)
{
    if (a->n_q <= 0) return 0;
    int rc = cuda_attn_check(a, err);
    if (rc) return rc;
    if (path == 0) path = a->n_q <= CUDA_ATTN_DECODE_MAX_Q ? 1 : 2;
    if (a->pos_dev && path != 1)
        return wk_fail(err, WK_EINVAL, "attention: device positions are for the decode kernel (%d queries)", a->n_q);
    return a->kv_type == CUDA_KV_Q8_0 ? fa_run<CUDA_KV_Q8_0>(c, a, path, err) : fa_run<CUDA_KV_F16>(c, a, path, err);
}

extern "C" int cuda_attention(cuda_ctx *c, const cuda_attn *a, wk_error *err)
{
    return cuda_attention_path(c, a, 0, err);
}
