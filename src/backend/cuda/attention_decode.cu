/* Decode attention (a few queries over a long KV cache) on tensor cores.
 *
 * One block = (split of the keys, kv head, query). The G query heads of the
 * kv head are the rows of an m16n8k16 mma (padded to 16), so the cache is
 * read once per kv head. Keys come in tiles of 32, copied with cp.async into
 * a 3-stage shared-memory ring (two tiles in flight while one is used):
 *   S = Q·Kᵀ   warp w takes keys 8w..8w+7 of the tile (16 mmas at d = 256)
 *   softmax    online, in log2 units; the tile's row max is exchanged
 *              between the warps through shared memory
 *   O += P·V   P (F16) through shared memory, warp w owns output columns
 *              [w·d/4, (w+1)·d/4) (V fragments by ldmatrix.trans)
 * Q and P are rounded to F16 with F32 accumulation, as in prefill; Q8_0
 * tiles are copied raw and expanded to F16 (code × scale rounded once) in
 * shared memory. Each block leaves (max, sum, unnormalized O) per head; a
 * combine kernel merges the splits in a fixed order (deterministic).
 *
 * The split is a function of the 4096-position band (CUDA_ATTN_BAND) of the
 * last query, as in attention.cu's split-K kernel: graphs captured in a band
 * stay valid and eager and graph steps round alike. The number of splits
 * fills the machine once (blocks resident per multiprocessor × SMs).
 *
 * cuda_attn_decode_kernel(0) sends decode back to the split-K kernel on CUDA
 * cores (attention.cu), for tests and benchmarks. */
#include <math.h>
#include <stdlib.h>

#include "backend/cuda/attn_common.cuh"

#define FDT_ROWS 16  /* query heads per block: the m of m16n8k16 (G <= 16) */
#define FDT_BK 32    /* keys per tile: one n-tile of 8 keys per warp in S = Q·Kᵀ */
#define FDT_STAGES 3 /* shared-memory ring: two tiles in flight while one is used */
#define FDT_WARPS 4
#define FDT_THREADS (FDT_WARPS * 32)

/* Shared memory of one block, in bytes from the start:
 *   FDT_STAGES stages   F16: the K tile then the V tile (rows padded to D + 8
 *                       halves: conflict-free fragment reads); Q8_0: the raw
 *                       K rows then the raw V rows
 *   Q8_0 only           the expanded F16 K and V tiles
 *   Q [16][D + 8] F16, P [16][32 + 8] F16 and its remainder P - F16(P) the same,
 *   row max [4][16] F32, row sum [4][16] F32 */
template <int D, int KV> struct fdt_smem {
    static constexpr int LD = D + 8;
    static constexpr int PLD = FDT_BK + 8;
    static constexpr int TILE = FDT_BK * LD; /* halves of one F16 tile */
    static constexpr int RAW = FDT_BK * Q8_ROW_BYTES(D); /* bytes of one raw Q8_0 tile */
    static constexpr int STAGE = KV == CUDA_KV_F16 ? 2 * TILE * 2 : 2 * RAW;
    static constexpr int OFF_F16 = FDT_STAGES * STAGE;
    static constexpr int OFF_Q = OFF_F16 + (KV == CUDA_KV_F16 ? 0 : 2 * TILE * 2);
    static constexpr int OFF_P = OFF_Q + FDT_ROWS * LD * 2;
    static constexpr int OFF_RED = OFF_P + 2 * FDT_ROWS * PLD * 2;
    static constexpr int BYTES = OFF_RED + 2 * FDT_WARPS * FDT_ROWS * 4;
    static_assert(STAGE % 16 == 0 && OFF_Q % 16 == 0 && OFF_P % 16 == 0 && OFF_RED % 16 == 0,
                  "16-byte aligned shared-memory regions");
};

/* Expands a landed raw Q8_0 tile into an F16 tile (code × scale rounded once). */
template <int D>
__device__ __forceinline__ void fdt_expand_q8(__half *dst, const unsigned char *raw)
{
    constexpr int LD = D + 8, CHUNKS = D / 8, R = Q8_ROW_BYTES(D);
#pragma unroll
    for (int c = threadIdx.x; c < FDT_BK * CHUNKS; c += FDT_THREADS) {
        const int r = c / CHUNKS, col = (c % CHUNKS) * 8;
        *(uint4 *)(dst + r * LD + col) = q8_row_f16x8(raw + r * R, col);
    }
}

/* ---- the kernel ------------------------------------------------------------------------ */

/* P·V also with P's F16 rounding error (P - F16(P), itself in F16) as a second product,
 * so that P weighs the values with ~22 significant bits instead of 11 (the CPU backend and
 * llama.cpp keep P in F32); the work is memory-bound, the second mma costs little (tg128
 * 136.4 vs 136.1 tok/s without it; without it tiny-qwen3moe-Q4_K_M's decode flips an
 * expert: 2.97 vs 0.18, tolerance 0.53). */
template <int D, int KV>
__device__ __forceinline__ void fdt_block(const cuda_attn &a, float qscale, int split, int g_kv, int qi, int n_split,
                                          int split_len, float *part_o, float *part_ml)
{
    using SM = fdt_smem<D, KV>;
    constexpr int LD = SM::LD, PLD = SM::PLD;
    constexpr int NT_W = D / 32; /* output n-tiles (8 columns) per warp: d/4 columns */
    extern __shared__ __align__(16) unsigned char smem[];
    __half *Qs = (__half *)(smem + SM::OFF_Q);
    __half *Ps = (__half *)(smem + SM::OFF_P), *Pl = Ps + FDT_ROWS * PLD;
    float *red_m = (float *)(smem + SM::OFF_RED); /* [warp][row] */
    float *red_l = red_m + FDT_WARPS * FDT_ROWS;
    const int G = a.n_head / a.n_head_kv;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int gr = lane >> 2, tq = lane & 3;
    cuda_attn_mask mask = a.mask;
    const int shift = a.pos_dev ? *a.pos_dev - a.pos_ref : 0; /* graph replay at another position */
    mask.dense_from += shift;
    const int p = a.q_pos0 + shift + qi;
    /* this block's keys: [b0, b1); tiles start at b0 + multiples of 32 */
    const int b0 = split * split_len;
    const int b1 = min(b0 + split_len, min(p + 1, a.n_kv + shift));
    const size_t base = ((size_t)qi * a.n_head + (size_t)g_kv * G) * n_split + split;
    if (b0 >= b1) { /* past the query: nothing to merge (the combine skips max -inf) */
        if (threadIdx.x < G) {
            part_ml[(base + (size_t)threadIdx.x * n_split) * 2] = -INFINITY;
            part_ml[(base + (size_t)threadIdx.x * n_split) * 2 + 1] = 0.0f;
        }
        return;
    }

    const uint16_t *kh = a.k + (size_t)g_kv * a.kv_head_stride;
    const uint16_t *vh = a.v + (size_t)g_kv * a.kv_head_stride;
    /* the next tile at or after k that the mask leaves any key of (b1: none) */
    auto next_tile = [&](int k) {
        while (k < b1 && !tile_needed(mask, p, p, k, k + FDT_BK - 1)) k += FDT_BK;
        return k;
    };
    /* one commit group per tile slot, empty past the end, so that the
     * wait_group count below holds on every iteration */
    auto issue = [&](int k, int stage) {
        if (k < b1) {
            unsigned char *st = smem + (size_t)stage * SM::STAGE;
            if constexpr (KV == CUDA_KV_F16) {
                load_f16_rows<D, FDT_BK, FDT_THREADS>((__half *)st, kh, k, b1);
                load_f16_rows<D, FDT_BK, FDT_THREADS>((__half *)st + SM::TILE, vh, k, b1);
            } else {
                load_q8_rows<D, FDT_BK, FDT_THREADS>(st, kh, k, b1);
                load_q8_rows<D, FDT_BK, FDT_THREADS>(st + SM::RAW, vh, k, b1);
            }
        }
        cp_async_commit();
    };
    int k_load = next_tile(b0);
#pragma unroll
    for (int s = 0; s < FDT_STAGES - 1; s++) {
        issue(k_load, s);
        if (k_load < b1) k_load = next_tile(k_load + FDT_BK);
    }

    /* Q rows (heads of this kv head, zero past G) → F16, pre-scaled to log2 units */
    const size_t qhs = a.q_head_stride ? a.q_head_stride : (size_t)D;
    for (int idx = threadIdx.x; idx < FDT_ROWS * D; idx += FDT_THREADS) {
        const int g = idx / D, c = idx % D;
        const float v = g < G ? a.q[(size_t)qi * a.q_stride + (size_t)(g_kv * G + g) * qhs + c] * qscale : 0.0f;
        Qs[g * LD + c] = __float2half_rn(v);
    }

    __syncthreads();
    uint32_t qf[D / 16][4]; /* Q's A fragments, held for every tile */
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        const __half *qa = Qs + gr * LD + kk * 16 + 2 * tq;
        qf[kk][0] = *(const uint32_t *)qa;
        qf[kk][1] = *(const uint32_t *)(qa + 8 * LD);
        qf[kk][2] = *(const uint32_t *)(qa + 8);
        qf[kk][3] = *(const uint32_t *)(qa + 8 * LD + 8);
    }

    float o[NT_W][4];
#pragma unroll
    for (int i = 0; i < NT_W; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f}; /* rows gr, gr + 8 */
    const int c0 = warp * (D / 4);                                    /* this warp's output columns */

    int t = 0;
    for (int k0 = next_tile(b0); k0 < b1; k0 = next_tile(k0 + FDT_BK), t++) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(FDT_STAGES - 2)); /* tile t landed (this thread's part) */
        __syncthreads(); /* every thread's part landed; every warp is done with tile t - 1 */
        issue(k_load, (t + FDT_STAGES - 1) % FDT_STAGES); /* into the slot of tile t - 1 */
        if (k_load < b1) k_load = next_tile(k_load + FDT_BK);

        const int st = t % FDT_STAGES;
        const __half *Ks, *Vs;
        if constexpr (KV == CUDA_KV_F16) {
            Ks = (const __half *)(smem + (size_t)st * SM::STAGE);
            Vs = Ks + SM::TILE;
        } else {
            __half *Kf = (__half *)(smem + SM::OFF_F16);
            const unsigned char *raw = smem + (size_t)st * SM::STAGE;
            fdt_expand_q8<D>(Kf, raw);
            fdt_expand_q8<D>(Kf + SM::TILE, raw + SM::RAW);
            __syncthreads();
            Ks = Kf;
            Vs = Kf + SM::TILE;
        }

        /* S = Q Kᵀ for this warp's 8 keys (two accumulators: shorter mma chains) */
        float sa[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sb[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            const __half *kb = Ks + (warp * 8 + gr) * LD + kk * 16 + 2 * tq;
            mma_16816(kk & 1 ? sb : sa, qf[kk], *(const uint32_t *)kb, *(const uint32_t *)(kb + 8));
        }
        float s[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int j = k0 + warp * 8 + 2 * tq + (e & 1);
            s[e] = j < b1 && mask_allows(mask, p, j) ? sa[e] + sb[e] : -INFINITY;
        }

        /* the tile's row max: over this warp's 8 keys, then over the warps */
        float mx[2] = {fmaxf(s[0], s[1]), fmaxf(s[2], s[3])};
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            if (tq == 0) red_m[warp * FDT_ROWS + gr + 8 * r] = mx[r];
        }
        __syncthreads();
        float corr[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float m_tile = red_m[gr + 8 * r];
#pragma unroll
            for (int w = 1; w < FDT_WARPS; w++) m_tile = fmaxf(m_tile, red_m[w * FDT_ROWS + gr + 8 * r]);
            const float m_new = fmaxf(m_run[r], m_tile); /* the same in every warp */
            corr[r] = m_new == -INFINITY ? 1.0f : exp2f(m_run[r] - m_new);
            m_run[r] = m_new;
            const float p0 = m_new == -INFINITY ? 0.0f : exp2f(s[2 * r] - m_new);
            const float p1 = m_new == -INFINITY ? 0.0f : exp2f(s[2 * r + 1] - m_new);
            l_run[r] = l_run[r] * corr[r] + p0 + p1; /* this thread's keys; summed at the end */
            const __half2 ph = __floats2half2_rn(p0, p1);
            *(__half2 *)(Ps + (gr + 8 * r) * PLD + warp * 8 + 2 * tq) = ph;
            const float2 pf = __half22float2(ph);
            *(uint32_t *)(Pl + (gr + 8 * r) * PLD + warp * 8 + 2 * tq) = pack_half2(p0 - pf.x, p1 - pf.y);
        }
#pragma unroll
        for (int i = 0; i < NT_W; i++) {
            o[i][0] *= corr[0];
            o[i][1] *= corr[0];
            o[i][2] *= corr[1];
            o[i][3] *= corr[1];
        }
        __syncthreads(); /* P complete */

        /* O += P V over the tile's 32 keys, this warp's columns */
        const int mi = lane >> 3, rr = lane & 7;
#pragma unroll
        for (int kk = 0; kk < FDT_BK / 16; kk++) {
            uint32_t pa[4], pl[4];
            const int pofs = gr * PLD + kk * 16 + 2 * tq;
            const __half *pp = Ps + pofs, *ql = Pl + pofs;
            pa[0] = *(const uint32_t *)pp;
            pa[1] = *(const uint32_t *)(pp + 8 * PLD);
            pa[2] = *(const uint32_t *)(pp + 8);
            pa[3] = *(const uint32_t *)(pp + 8 * PLD + 8);
            pl[0] = *(const uint32_t *)ql;
            pl[1] = *(const uint32_t *)(ql + 8 * PLD);
            pl[2] = *(const uint32_t *)(ql + 8);
            pl[3] = *(const uint32_t *)(ql + 8 * PLD + 8);
#pragma unroll
            for (int np = 0; np < NT_W / 2; np++) {
                uint32_t b[4];
                ldmatrix_x4_trans(b, Vs + (kk * 16 + rr + 8 * (mi & 1)) * LD + c0 + np * 16 + 8 * (mi >> 1));
                mma_16816(o[2 * np], pa, b[0], b[1]);
                mma_16816(o[2 * np + 1], pa, b[2], b[3]);
                mma_16816(o[2 * np], pl, b[0], b[1]);
                mma_16816(o[2 * np + 1], pl, b[2], b[3]);
            }
        }
    }
    asm volatile("cp.async.wait_group 0;\n" ::); /* only empty groups can be left; drain anyway */

    /* row sums: this thread's keys → the row's 4 lanes → the 4 warps (fixed order) */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
        if (tq == 0) red_l[warp * FDT_ROWS + gr + 8 * r] = l_run[r];
    }
    __syncthreads();
    /* every warp holds the same running max; row g's sits in lane 4·(g % 8), slot g / 8 */
    if (warp == 0) {
        const int g = lane & 15;
        const float m0 = __shfl_sync(0xffffffffu, m_run[0], 4 * (g % 8));
        const float m1 = __shfl_sync(0xffffffffu, m_run[1], 4 * (g % 8));
        if (lane < G) {
            float l = 0.0f;
#pragma unroll
            for (int w = 0; w < FDT_WARPS; w++) l += red_l[w * FDT_ROWS + g];
            part_ml[(base + (size_t)g * n_split) * 2] = g < 8 ? m0 : m1;
            part_ml[(base + (size_t)g * n_split) * 2 + 1] = l;
        }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int g = gr + 8 * r;
        if (g >= G) continue;
        float *out = part_o + (base + (size_t)g * n_split) * D + c0;
#pragma unroll
        for (int i = 0; i < NT_W; i++) *(float2 *)(out + i * 8 + 2 * tq) = make_float2(o[i][2 * r], o[i][2 * r + 1]);
    }
}

/* One block = (split, kv head, query) of one call. */
template <int D, int KV>
__global__ void __launch_bounds__(FDT_THREADS)
fdt_kernel(const cuda_attn a, float qscale, int n_split, int split_len, float *part_o, float *part_ml)
{
    pdl_enter(); /* launch_k: q, the cache rows and the position come from earlier kernels */
    fdt_block<D, KV>(a, qscale, blockIdx.x, blockIdx.y, blockIdx.z, n_split, split_len, part_o, part_ml);
}

/* Several sequences' calls (a batched decode step's layer) in one launch: z runs over
 * their queries, x over the most splits any has (blocks past a call's own splits leave at
 * once); each call's splits and partial rows are those it has alone. */
typedef struct fdt_batch {
    int32_t n;
    cuda_attn a[CUDA_ATTN_SEQS];
    float qscale[CUDA_ATTN_SEQS];
    int32_t n_split[CUDA_ATTN_SEQS], split_len[CUDA_ATTN_SEQS];
    int32_t z0[CUDA_ATTN_SEQS + 1]; /* the first query (grid z) of each call */
    size_t part[CUDA_ATTN_SEQS];    /* the first partial row of each call */
} fdt_batch;

__device__ __forceinline__ int fdt_batch_call(const fdt_batch &B, int z)
{
    int i = 0;
    while (i + 1 < B.n && z >= B.z0[i + 1]) i++;
    return i;
}

template <int D, int KV>
__global__ void __launch_bounds__(FDT_THREADS) fdt_batch_kernel(const __grid_constant__ fdt_batch B, float *part_o,
                                                                float *part_ml)
{
    pdl_enter();
    const int i = fdt_batch_call(B, blockIdx.z);
    if ((int)blockIdx.x >= B.n_split[i]) return;
    fdt_block<D, KV>(B.a[i], B.qscale[i], blockIdx.x, blockIdx.y, blockIdx.z - B.z0[i], B.n_split[i], B.split_len[i],
                     part_o + B.part[i] * D, part_ml + B.part[i] * 2);
}

/* One block per (head, query): merges the splits' partial results. Warp 0
 * finds the weights exp2(m_s - M) once; every thread then sums its columns
 * over the splits in order. Splits with max -inf (no visible key, or never
 * written) are skipped. */
__device__ __forceinline__ void fdt_combine_block(const cuda_attn &a, int h, int qi, int n_split, const float *part_o,
                                                  const float *part_ml)
{
    extern __shared__ float wgt[]; /* [n_split] */
    __shared__ float inv_l;
    const int D = a.d;
    const size_t base = ((size_t)qi * a.n_head + h) * n_split;
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        float M = -INFINITY;
        for (int s = lane; s < n_split; s += 32) M = fmaxf(M, part_ml[(base + s) * 2]);
        M = warp_max(M);
        float L = 0.0f;
        for (int s = lane; s < n_split; s += 32) {
            const float m = part_ml[(base + s) * 2];
            const float w = m == -INFINITY ? 0.0f : exp2f(m - M);
            wgt[s] = w;
            if (w != 0.0f) L += w * part_ml[(base + s) * 2 + 1];
        }
        L = warp_sum(L);
        if (lane == 0) inv_l = L > 0.0f ? 1.0f / L : 0.0f;
    }
    __syncthreads();
    constexpr int B = 8; /* splits loaded before they are summed: 8 reads in flight, not 1 */
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
        const float *po = part_o + base * D + c;
        float acc = 0.0f;
        for (int s0 = 0; s0 < n_split; s0 += B) {
            float v[B];
#pragma unroll
            for (int u = 0; u < B; u++) {
                const int s = s0 + u;
                v[u] = s < n_split && wgt[s] != 0.0f ? po[(size_t)s * D] : 0.0f; /* unwritten rows: skipped */
            }
#pragma unroll
            for (int u = 0; u < B; u++)
                if (s0 + u < n_split) acc += wgt[s0 + u] * v[u];
        }
        a.out[(size_t)qi * a.out_stride + (size_t)h * D + c] = acc * inv_l;
    }
}

__global__ void fdt_combine_kernel(const cuda_attn a, int n_split, const float *part_o, const float *part_ml)
{
    pdl_enter();
    fdt_combine_block(a, blockIdx.x, blockIdx.y, n_split, part_o, part_ml);
}

/* fdt_batch_kernel's calls merged: y runs over their queries. */
__global__ void fdt_combine_batch_kernel(const __grid_constant__ fdt_batch B, const float *part_o,
                                         const float *part_ml)
{
    pdl_enter();
    const int i = fdt_batch_call(B, blockIdx.y);
    const int D = B.a[i].d;
    fdt_combine_block(B.a[i], blockIdx.x, blockIdx.y - B.z0[i], B.n_split[i], part_o + B.part[i] * D,
                      part_ml + B.part[i] * 2);
}

/* ---- host side ------------------------------------------------------------------------- */

static int g_fdt_choice = 1; /* 0: split-K kernel (attention.cu); 1: this file */

extern "C" int cuda_attn_decode_kernel(int which)
{
    const int prev = g_fdt_choice;
    if (which >= 0) g_fdt_choice = which ? 1 : 0;
    return prev;
}

/* Blocks of fdt_kernel<D, KV> resident per multiprocessor on the current device; raises
 * the kernel's shared-memory limit first (host-side calls, a few microseconds; replayed
 * graph steps do not come here). */
template <int D, int KV> static int fdt_blocks_per_sm(wk_error *err, int *out)
{
    const int smem = fdt_smem<D, KV>::BYTES;
    cudaError_t e = smem_allow(fdt_kernel<D, KV>, smem);
    if (e != cudaSuccess) return cu_fail(err, e, "attention (decode): shared memory limit");
    int n = 0;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fdt_kernel<D, KV>, FDT_THREADS, smem);
    if (e != cudaSuccess) return cu_fail(err, e, "attention (decode): occupancy");
    *out = max(n, 1);
    return 0;
}

/* A call's split of the keys: sized for the end of the last query's band (keys < last
 * can be visible), one wave of resident blocks there, each a whole number of tiles. */
static void fdt_split(const cuda_ctx *c, const cuda_attn *a, int bpsm, int *n_split, int *split_len)
{
    const int last = min(a->q_pos0 + a->n_q, a->n_kv);
    const int band_last = (last + CUDA_ATTN_BAND - 1) / CUDA_ATTN_BAND * CUDA_ATTN_BAND;
    const int want = max(1, bpsm * c->sm_count / (a->n_head_kv * a->n_q));
    const int n_tiles = (band_last + FDT_BK - 1) / FDT_BK;
    *split_len = (n_tiles + want - 1) / want * FDT_BK;
    *n_split = (band_last + *split_len - 1) / *split_len; /* splits past last find no keys */
}

template <int D, int KV> static int fdt_decode(cuda_ctx *c, const cuda_attn *a, wk_error *err)
{
    int bpsm = 1;
    int rc = fdt_blocks_per_sm<D, KV>(err, &bpsm);
    if (rc) return rc;
    int n_split, split_len;
    fdt_split(c, a, bpsm, &n_split, &split_len);
    const size_t rows = (size_t)a->n_q * a->n_head * n_split;
    void *scr;
    rc = cuda_ctx_scratch(c, rows * (D + 2) * sizeof(float), &scr, err);
    if (rc) return rc;
    float *part_o = (float *)scr, *part_ml = part_o + rows * D;
    launch_k(c, fdt_kernel<D, KV>, dim3(n_split, a->n_head_kv, a->n_q), FDT_THREADS,
             (size_t)fdt_smem<D, KV>::BYTES, *a, a->scale * LOG2E, n_split, split_len, part_o, part_ml);
    CU_CHECK_LAUNCH(err, "attention (decode, tensor cores)");
    launch_k(c, fdt_combine_kernel, dim3(a->n_head, a->n_q), min(D, 256), (size_t)n_split * sizeof(float), *a,
             n_split, (const float *)part_o, (const float *)part_ml);
    CU_CHECK_LAUNCH(err, "attention (combine)");
    return 0;
}

/* Up to CUDA_ATTN_SEQS calls of one head layout in two launches, each call's results
 * those fdt_decode gives it alone (same split, same partial rows, same merge). */
template <int D, int KV> static int fdt_decode_batch(cuda_ctx *c, const cuda_attn *a, int n, wk_error *err)
{
    int bpsm = 1;
    int rc = fdt_blocks_per_sm<D, KV>(err, &bpsm);
    if (rc) return rc;
    cudaError_t e = smem_allow(fdt_batch_kernel<D, KV>, fdt_smem<D, KV>::BYTES);
    if (e != cudaSuccess) return cu_fail(err, e, "attention (decode, several sequences): shared memory limit");
    fdt_batch B;
    memset(&B, 0, sizeof B);
    B.n = n;
    size_t rows = 0;
    int max_split = 1;
    B.z0[0] = 0;
    for (int i = 0; i < n; i++) {
        B.a[i] = a[i];
        B.qscale[i] = a[i].scale * LOG2E;
        fdt_split(c, &a[i], bpsm, &B.n_split[i], &B.split_len[i]);
        max_split = max(max_split, B.n_split[i]);
        B.part[i] = rows;
        rows += (size_t)a[i].n_q * a[i].n_head * B.n_split[i];
        B.z0[i + 1] = B.z0[i] + a[i].n_q;
    }
    void *scr;
    rc = cuda_ctx_scratch(c, rows * (D + 2) * sizeof(float), &scr, err);
    if (rc) return rc;
    float *part_o = (float *)scr, *part_ml = part_o + rows * D;
    launch_k(c, fdt_batch_kernel<D, KV>, dim3(max_split, a[0].n_head_kv, B.z0[n]), FDT_THREADS,
             (size_t)fdt_smem<D, KV>::BYTES, B, part_o, part_ml);
    CU_CHECK_LAUNCH(err, "attention (decode, tensor cores, several sequences)");
    launch_k(c, fdt_combine_batch_kernel, dim3(a[0].n_head, B.z0[n]), min(D, 256), (size_t)max_split * sizeof(float),
             B, (const float *)part_o, (const float *)part_ml);
    CU_CHECK_LAUNCH(err, "attention (combine, several sequences)");
    return 0;
}

extern "C" int cuda_attn_decode_tc(cuda_ctx *c, const cuda_attn *a, wk_error *err)
{
    if (!g_fdt_choice || a->n_head / a->n_head_kv > FDT_ROWS) return 1;
    const bool q8 = a->kv_type == CUDA_KV_Q8_0;
    switch (a->d) {
    case 64: return q8 ? fdt_decode<64, CUDA_KV_Q8_0>(c, a, err) : fdt_decode<64, CUDA_KV_F16>(c, a, err);
    case 128: return q8 ? fdt_decode<128, CUDA_KV_Q8_0>(c, a, err) : fdt_decode<128, CUDA_KV_F16>(c, a, err);
    case 256: return q8 ? fdt_decode<256, CUDA_KV_Q8_0>(c, a, err) : fdt_decode<256, CUDA_KV_F16>(c, a, err);
    default: return 1;
    }
}

extern "C" int cuda_attn_decode_batch(cuda_ctx *c, const cuda_attn *a, int n, wk_error *err)
{
    if (!g_fdt_choice || n < 1 || n > CUDA_ATTN_SEQS) return 1;
    for (int i = 0; i < n; i++) /* one head layout, the decode kernel's few queries each */
        if (a[i].d != a[0].d || a[i].kv_type != a[0].kv_type || a[i].n_head != a[0].n_head ||
            a[i].n_head_kv != a[0].n_head_kv || a[i].n_q < 1 || a[i].n_q > CUDA_ATTN_DECODE_MAX_Q)
            return 1;
    if (a[0].n_head_kv <= 0 || a[0].n_head % a[0].n_head_kv || a[0].n_head / a[0].n_head_kv > FDT_ROWS) return 1;
    for (int i = 0; i < n; i++) {
        int rc = cuda_attn_check(&a[i], err);
        if (rc) return rc;
    }
    const bool q8 = a[0].kv_type == CUDA_KV_Q8_0;
    switch (a[0].d) {
    case 64: return q8 ? fdt_decode_batch<64, CUDA_KV_Q8_0>(c, a, n, err) : fdt_decode_batch<64, CUDA_KV_F16>(c, a, n, err);
    case 128:
        return q8 ? fdt_decode_batch<128, CUDA_KV_Q8_0>(c, a, n, err) : fdt_decode_batch<128, CUDA_KV_F16>(c, a, n, err);
    case 256:
        return q8 ? fdt_decode_batch<256, CUDA_KV_Q8_0>(c, a, n, err) : fdt_decode_batch<256, CUDA_KV_F16>(c, a, n, err);
    default: return 1;
    }
}
