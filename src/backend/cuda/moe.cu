/* Mixture of experts: the router's top-k, the batch's (token, slot) pairs
 * sorted by expert for the grouped products (mmq.cu), the SwiGLU between the
 * products with its output quantized for the down product, and the weighted
 * sum back into token order.
 *
 * A pair i is (token i / ks, slot i % ks): slots j < k are the router's
 * picks ids[t·k + j] with weight weights[t·k + j]; with ks = k + 1 slot k is
 * the shared expert (the extra matrix, index n_mat of the packs) with weight
 * σ(sh_logit[t]). */
#include "backend/cuda/actq.cuh"

/* ---- router ------------------------------------------------------------------------------ */

/* One token's routing, by all threads of a block of ROUTE_THREADS: p = softmax(l) over the
 * n_expert logits (p: n_expert floats of shared memory), then the k largest p (ties to the
 * lower id) renormalized by their sum. The picks run in warp 0 alone, without block
 * barriers between them; each is an argmax, so the order of the scan does not matter.
 * l is read through L2 (__ldcg): moe_gate_kernel's other blocks wrote it. */
#define ROUTE_THREADS 256
__device__ void route_block(const float *l, int n_expert, int k, int32_t *ids, float *weights, float *p)
{
    __shared__ float red[32];
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < n_expert; i += ROUTE_THREADS) mx = fmaxf(mx, __ldcg(l + i));
    mx = warp_max(mx);
    const int w = threadIdx.x / 32, lane = threadIdx.x & 31, nw = ROUTE_THREADS / 32;
    if (lane == 0) red[w] = mx;
    __syncthreads();
    mx = lane < nw ? red[lane] : -INFINITY;
    mx = warp_max(mx);
    __syncthreads();
    float s = 0.0f;
    for (int i = threadIdx.x; i < n_expert; i += ROUTE_THREADS) {
        p[i] = expf(__ldcg(l + i) - mx);
        s += p[i];
    }
    s = warp_sum(s);
    if (lane == 0) red[w] = s;
    __syncthreads();
    s = lane < nw ? red[lane] : 0.0f;
    s = warp_sum(s);
    for (int i = threadIdx.x; i < n_expert; i += ROUTE_THREADS) p[i] /= s;
    __syncthreads();
    if (w != 0) return;
    float picked_sum = 0.0f;
    for (int j = 0; j < k; j++) {
        float bv = -1.0f;
        int bi = 1 << 30;
        for (int i = lane; i < n_expert; i += 32)
            if (p[i] > bv || (p[i] == bv && i < bi)) { bv = p[i]; bi = i; }
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
        }
        /* every lane holds the pick now */
        picked_sum += bv;
        if (lane == 0) {
            ids[j] = bi;
            weights[j] = bv;
            p[bi] = -2.0f; /* taken */
        }
        __syncwarp();
    }
    if (lane == 0) {
        const float norm = fmaxf(picked_sum, 6.1035e-5f);
        for (int j = 0; j < k; j++) weights[j] /= norm;
    }
}

__global__ void __launch_bounds__(ROUTE_THREADS)
moe_route_kernel(const float *logits, int n_expert, int k, int32_t *ids, float *weights)
{
    extern __shared__ float p[];
    pdl_enter();
    const int64_t t = blockIdx.x;
    route_block(logits + t * n_expert, n_expert, k, ids + t * k, weights + t * k, p);
}

extern "C" int cuda_moe_route(cuda_ctx *c, const float *logits, int64_t n_t, int32_t n_expert, int32_t k,
                              int32_t *ids, float *weights)
{
    if (n_t <= 0) return 0;
    if (k > n_expert || n_expert > 8192) return WK_EINVAL;
    launch_k(c, moe_route_kernel, (unsigned)n_t, ROUTE_THREADS, n_expert * sizeof(float), logits, n_expert, k, ids,
             weights);
    return cu_launch_status();
}

/* The router of a few tokens in one launch: warp r of the grid's x (8 a block) takes row r of
 * [W; wsh] (F32, K columns) for token blockIdx.y, with matvec_f_kernel's dot (the same
 * logits); the last of a token's blocks to finish routes it (route_block). The arrival
 * counter wraps back to 0 with that block's increment (atomicInc), ready for the next launch. */
__global__ void __launch_bounds__(ROUTE_THREADS)
moe_gate_kernel(const float *__restrict__ W, const float *__restrict__ wsh, int n_expert, int64_t K,
                const float *__restrict__ x, float *logits, float *sh_logit, int k, int32_t *ids, float *weights,
                unsigned *arrivals)
{
    extern __shared__ float p[];
    __shared__ bool last;
    pdl_enter();
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * (ROUTE_THREADS / 32) + threadIdx.x / 32, t = blockIdx.y;
    if (row < n_expert + (wsh ? 1 : 0)) {
        const float *wr = row < n_expert ? W + row * K : wsh;
        const float *xr = x + t * K;
        float acc = 0.0f;
        for (int64_t i = lane * 8; i < K; i += 256) {
            const float4 u = *(const float4 *)(wr + i), v = *(const float4 *)(wr + i + 4);
            const float4 a = *(const float4 *)(xr + i), b = *(const float4 *)(xr + i + 4);
            acc += u.x * a.x + u.y * a.y + u.z * a.z + u.w * a.w + v.x * b.x + v.y * b.y + v.z * b.z + v.w * b.w;
        }
        acc = warp_sum(acc);
        if (lane == 0) {
            if (row < n_expert) logits[t * n_expert + row] = acc;
            else sh_logit[t] = acc;
        }
    }
    __threadfence(); /* this block's logits are visible before its arrival is counted */
    __syncthreads();
    if (threadIdx.x == 0) last = atomicInc(arrivals + t, gridDim.x - 1) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    route_block(logits + t * n_expert, n_expert, k, ids + t * k, weights + t * k, p);
}

extern "C" int cuda_moe_gate(cuda_ctx *c, const float *W, const float *wsh, int32_t n_expert, int64_t K,
                             const float *x, int64_t n_t, int32_t k, float *logits, float *sh_logit, int32_t *ids,
                             float *weights, unsigned *arrivals)
{
    if (n_t <= 0) return 0;
    if (k > n_expert || n_expert > 8192 || K % 8 || n_t > 65535) return WK_EINVAL;
    const int64_t rows = n_expert + (wsh ? 1 : 0);
    launch_k(c, moe_gate_kernel, dim3(cdiv(rows, ROUTE_THREADS / 32), (unsigned)n_t), ROUTE_THREADS,
             n_expert * sizeof(float), W, wsh, n_expert, K, x, logits, sh_logit, k, ids, weights, arrivals);
    return cu_launch_status();
}

/* ---- pairs sorted by expert ------------------------------------------------------------------ */

#define SORT_THREADS 1024

/* Expert of pair i (-1: an id out of range, the pair is dropped). */
__device__ __forceinline__ int pair_expert(const int32_t *ids, int64_t i, int k, int ks, int n_e)
{
    const int64_t t = i / ks;
    const int j = (int)(i % ks);
    const int e = j < k ? ids[t * k + j] : n_e - 1;
    return e >= 0 && e < n_e ? e : -1;
}

/* Inclusive scans of a and of b over the lanes of a warp. */
__device__ __forceinline__ void warp_scan2(int &a, int &b, int lane)
{
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int na = __shfl_up_sync(0xffffffffu, a, o), nb = __shfl_up_sync(0xffffffffu, b, o);
        if (lane >= o) {
            a += na;
            b += nb;
        }
    }
}

/* One block. Counts the pairs of each of the n_e experts (shared-memory atomics), takes the
 * exclusive prefix sums of the counts and of their tiles of bn rows (each thread a run of
 * experts, then a scan over the block), scatters the pairs to their sorted rows and writes
 * the tile table. Within an expert the rows' order is the atomics' order: it does not
 * matter, each row's products are independent of its neighbours. */
__global__ void __launch_bounds__(SORT_THREADS)
moe_sort_kernel(const int32_t *__restrict__ ids, int64_t n_pairs, int k, int ks, int n_e, int bn,
                int32_t *__restrict__ pos, int32_t *__restrict__ tok, int4 *__restrict__ tiles,
                int32_t *__restrict__ n_tiles)
{
    extern __shared__ int sort_sh[];
    int *cnt = sort_sh, *cur = sort_sh + n_e, *tstart = sort_sh + 2 * n_e;
    __shared__ int wsum[2][32];
    pdl_enter();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid / 32;
    for (int e = tid; e < n_e; e += SORT_THREADS) cnt[e] = 0;
    __syncthreads();
    for (int64_t i = tid; i < n_pairs; i += SORT_THREADS) {
        const int e = pair_expert(ids, i, k, ks, n_e);
        if (e >= 0) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    /* exclusive scans: rows (a) and tiles (b) over the experts */
    const int per = (n_e + SORT_THREADS - 1) / SORT_THREADS, e0 = tid * per;
    int a = 0, b = 0;
    for (int e = e0; e < e0 + per && e < n_e; e++) {
        a += cnt[e];
        b += (cnt[e] + bn - 1) / bn;
    }
    int ia = a, ib = b;
    warp_scan2(ia, ib, lane); /* inclusive within the warp */
    if (lane == 31) {
        wsum[0][warp] = ia;
        wsum[1][warp] = ib;
    }
    __syncthreads();
    if (warp == 0) {
        int va = wsum[0][lane], vb = wsum[1][lane];
        warp_scan2(va, vb, lane);
        wsum[0][lane] = va; /* inclusive over warps */
        wsum[1][lane] = vb;
    }
    __syncthreads();
    int ra = ia - a + (warp ? wsum[0][warp - 1] : 0), rb = ib - b + (warp ? wsum[1][warp - 1] : 0);
    for (int e = e0; e < e0 + per && e < n_e; e++) {
        cur[e] = ra;
        tstart[e] = rb;
        ra += cnt[e];
        rb += (cnt[e] + bn - 1) / bn;
    }
    if (tid == 0) *n_tiles = wsum[1][31];
    __syncthreads();
    for (int64_t i = tid; i < n_pairs; i += SORT_THREADS) {
        const int e = pair_expert(ids, i, k, ks, n_e);
        if (e < 0) {
            pos[i] = -1;
            continue;
        }
        const int p = atomicAdd(&cur[e], 1);
        pos[i] = p;
        tok[p] = (int32_t)(i / ks);
    }
    __syncthreads();
    for (int e = tid; e < n_e; e += SORT_THREADS) {
        const int n = cnt[e], p0 = cur[e] - n; /* cur ended at the expert's end */
        for (int q = 0; q * bn < n; q++) tiles[tstart[e] + q] = make_int4(e, p0 + q * bn, min(bn, n - q * bn), 0);
    }
}

/* Carves the plan's arrays out of buf (cuda_moe_plan_bytes bytes, 16-byte aligned). */
extern "C" size_t cuda_moe_plan_bytes(int64_t n_pairs, int32_t n_e, int bn)
{
    const int64_t max_tiles = (n_pairs + bn - 1) / bn + (n_e < n_pairs ? n_e : n_pairs);
    return 16 * (size_t)max_tiles + 16 + 2 * (((size_t)n_pairs * 4 + 15) & ~(size_t)15);
}

extern "C" int cuda_moe_sort(cuda_ctx *c, const int32_t *ids, int64_t n_t, int32_t k, int32_t ks, int32_t n_e, int bn,
                             void *buf, cuda_moe_plan *plan)
{
    const int64_t n_pairs = n_t * ks;
    if (n_pairs <= 0 || n_pairs > INT32_MAX / 2 || k < 1 || ks < k || ks > k + 1 || n_e < 1 || n_e > 8192 ||
        (bn != 32 && bn != 64))
        return WK_EINVAL;
    const size_t row_bytes = ((size_t)n_pairs * 4 + 15) & ~(size_t)15;
    plan->max_tiles = (n_pairs + bn - 1) / bn + (n_e < n_pairs ? n_e : n_pairs);
    plan->tiles = (int32_t *)buf;
    plan->n_tiles = (int32_t *)((uint8_t *)buf + 16 * (size_t)plan->max_tiles);
    plan->pos = (int32_t *)((uint8_t *)plan->n_tiles + 16);
    plan->tok = (int32_t *)((uint8_t *)plan->pos + row_bytes);
    plan->n_rows = n_pairs;
    plan->bn = bn;
    const size_t smem = 3 * (size_t)n_e * sizeof(int);
    smem_allow(moe_sort_kernel, smem);
    launch_k(c, moe_sort_kernel, 1, SORT_THREADS, smem, ids, n_pairs, (int)k, (int)ks, (int)n_e, bn, plan->pos,
             plan->tok, (int4 *)plan->tiles, plan->n_tiles);
    return cu_launch_status();
}

/* ---- SwiGLU, quantized for the down product ----------------------------------------------- */

/* One warp per 256 values of a row, 8 consecutive per lane: h = SiLU(g) · u (the CPU's
 * formula), then the activation rule of the down product (GROUP 256: Q8_K, 32: Q8_0),
 * bit for bit cuda_swiglu followed by cuda_quantize_act. */
template <int GROUP>
__global__ void moe_glu_quant_kernel(const float *__restrict__ g, const float *__restrict__ u, size_t stride,
                                     int64_t n_rows, int64_t F, int8_t *__restrict__ xq, float *__restrict__ xd)
{
    pdl_enter();
    const int lane = threadIdx.x & 31;
    const int64_t chunk = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int64_t per_row = (F + 255) / 256;
    if (chunk >= per_row * n_rows) return;
    const int64_t r = chunk / per_row, i0 = (chunk % per_row) * 256 + lane * 8;
    const bool live = i0 < F; /* F is a multiple of 32: a lane is all in or all out */
    float v[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const float a = live ? g[r * stride + i0 + i] : 0.0f, b = live ? u[r * stride + i0 + i] : 0.0f;
        v[i] = a / (1.0f + expf(-a)) * b;
    }
    int8_t q[8];
    const float d = GROUP == 32 ? q8_0_lanes(v, q) : q8k_warp(v, lane, q);
    if (live) q8_store(xq, xd, r * F + i0, q, d, lane);
}

extern "C" int cuda_moe_glu_quant(cuda_ctx *c, const float *g, const float *u, size_t stride, int64_t n_rows,
                                  int64_t F, int group, int8_t *xq, float *xd)
{
    if (F % 32 || (group == 256 && F % 256) || (group != 32 && group != 256)) return WK_EINVAL;
    if (n_rows <= 0) return 0;
    const int64_t chunks = n_rows * ((F + 255) / 256);
    if (group == 256)
        launch_k(c, moe_glu_quant_kernel<256>, cdiv(chunks, 8), 256, 0, g, u, stride, n_rows, F, xq, xd);
    else
        launch_k(c, moe_glu_quant_kernel<32>, cdiv(chunks, 8), 256, 0, g, u, stride, n_rows, F, xq, xd);
    return cu_launch_status();
}

/* ---- weighted sum in token order -------------------------------------------------------------- */

/* Thread per V values of an output row (4 when n allows): the slots in order (the CPU's
 * order), the shared expert's σ-weighted row last. */
template <int V>
__global__ void moe_combine_kernel(float *__restrict__ out, const float *__restrict__ ys,
                                   const int32_t *__restrict__ pos, const float *__restrict__ w,
                                   const float *__restrict__ sh_logit, int64_t n_t, int k, int ks, int64_t n)
{
    pdl_enter();
    const int64_t nv = n / V, gi = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (gi >= n_t * nv) return;
    const int64_t t = gi / nv, i = (gi % nv) * V;
    float acc[V];
#pragma unroll
    for (int q = 0; q < V; q++) acc[q] = 0.0f;
    for (int j = 0; j < ks; j++) {
        const int64_t slot = t * ks + j, row = pos ? pos[slot] : slot;
        if (row < 0) continue;
        const float wj = j < k ? w[t * k + j] : 1.0f / (1.0f + expf(-sh_logit[t]));
        float v[V];
        if constexpr (V == 4) {
            const float4 f = *(const float4 *)(ys + row * n + i);
            v[0] = f.x;
            v[1] = f.y;
            v[2] = f.z;
            v[3] = f.w;
        } else {
            v[0] = ys[row * n + i];
        }
#pragma unroll
        for (int q = 0; q < V; q++) acc[q] += wj * v[q];
    }
#pragma unroll
    for (int q = 0; q < V; q++) out[t * n + i + q] = acc[q];
}

extern "C" int cuda_moe_combine(cuda_ctx *c, float *out, const float *ys, const int32_t *pos, const float *weights,
                                const float *sh_logit, int64_t n_t, int32_t k, int32_t ks, int64_t n)
{
    if (ks < k || ks > k + 1 || (ks > k && !sh_logit)) return WK_EINVAL;
    if (n_t * n <= 0) return 0;
    if (n % 4 == 0)
        launch_k(c, moe_combine_kernel<4>, cdiv(n_t * (n / 4), 256), 256, 0, out, ys, pos, weights, sh_logit, n_t,
                 (int)k, (int)ks, n);
    else
        launch_k(c, moe_combine_kernel<1>, cdiv(n_t * n, 256), 256, 0, out, ys, pos, weights, sh_logit, n_t, (int)k,
                 (int)ks, n);
    return cu_launch_status();
}
