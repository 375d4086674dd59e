/* Matrix products on quantized weights.
 *
 * Decode (few rows): one warp per output row streams the row's blocks with
 * 16-byte loads and multiplies them with int8 activations (dp4a); the
 * activations are quantized first like llama.cpp's CPU backend does (Q8_K
 * rule for K-quants, Q8_0 rule otherwise). The kernel is bound by weight
 * bytes, so everything else (x, scales) is kept out of the way.
 *
 * Prefill (many rows): dequantize the weight to F16 in scratch and let cuBLAS
 * run the product on tensor cores with F32 accumulation. The dequant pass
 * costs one read of the weight and a write of 2 bytes/element, small against
 * the product once the batch has a few hundred rows. */
#include <cublas_v2.h>

#include "backend/cuda/actq.cuh"
#include "backend/cuda/qdev.cuh"

/* ---- activation quantization ------------------------------------------------ */

/* One warp per 256 elements, 8 consecutive per lane. F16OUT: instead of the
 * int8 codes and scales, write the rounded values q·d as F16 into xh (the
 * prefill GEMM then sees the activations llama.cpp's integer dot products see). */
template <int GROUP, bool F16OUT = false>
__global__ void quantize_act_kernel(const float *__restrict__ x, int64_t n_rows, int64_t K,
                                    int8_t *__restrict__ xq, float *__restrict__ xd, __half *__restrict__ xh = nullptr,
                                    float *__restrict__ xf = nullptr)
{
    pdl_enter(); /* a matvec launched next may start pulling its weights; x comes from earlier kernels */
    const int lane = threadIdx.x & 31;
    const int64_t chunk = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int64_t chunks_per_row = (K + 255) / 256;
    if (chunk >= chunks_per_row * n_rows) return;
    const int64_t r = chunk / chunks_per_row;
    const int64_t i0 = (chunk % chunks_per_row) * 256 + lane * 8;
    const bool live = i0 < K; /* K is a multiple of 32, so a lane is all in or all out */
    float v[8];
    if (live) {
        float4 a = *(const float4 *)(x + r * K + i0), b = *(const float4 *)(x + r * K + i0 + 4);
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else {
        for (int i = 0; i < 8; i++) v[i] = 0.0f;
    }
    int8_t q[8];
    float d;
    if (GROUP == 32) {
        d = q8_0_lanes(v, q);
    } else {
        d = q8k_warp(v, lane, q); /* Q8_K */
    }
    if (!live) return;
    if (xf) { /* rounded values in F32 (weights kept as F32 on the device) */
        float4 *o = (float4 *)(xf + r * K + i0);
        o[0] = make_float4(q[0] * d, q[1] * d, q[2] * d, q[3] * d);
        o[1] = make_float4(q[4] * d, q[5] * d, q[6] * d, q[7] * d);
        return;
    }
    if (F16OUT) {
        unsigned h[4];
        for (int i = 0; i < 4; i++) {
            __half2 v = __floats2half2_rn((float)q[2 * i] * d, (float)q[2 * i + 1] * d);
            memcpy(&h[i], &v, 4);
        }
        *(uint4 *)(xh + r * K + i0) = make_uint4(h[0], h[1], h[2], h[3]);
        return;
    }
    q8_store(xq, xd, r * K + i0, q, d, lane);
}

extern "C" int cuda_act_group(uint32_t type)
{
    switch (type) {
    case QT_Q4_K: case QT_Q5_K: case QT_Q6_K: return 256;
    default: return 32;
    }
}

extern "C" int cuda_quantize_act(cuda_ctx *c, const float *x, int64_t n_rows, int64_t K, int group,
                                 int8_t *xq, float *xd)
{
    if (K % 32 || (group == 256 && K % 256)) return WK_EINVAL;
    const int64_t chunks = n_rows * ((K + 255) / 256);
    const int warps = 8;
    if (group == 256)
        launch_k(c, quantize_act_kernel<256>, cdiv(chunks, warps), warps * 32, 0, x, n_rows, K, xq, xd,
                 (__half *)nullptr, (float *)nullptr);
    else
        launch_k(c, quantize_act_kernel<32>, cdiv(chunks, warps), warps * 32, 0, x, n_rows, K, xq, xd,
                 (__half *)nullptr, (float *)nullptr);
    return cu_launch_status();
}

/* Rounds n_rows rows of K floats to the int8 grid of `group` and writes the
 * rounded values as F32 (activations for weights stored dequantized). */
static int round_act_f32(cuda_ctx *c, const float *x, int64_t n_rows, int64_t K, int group, float *out)
{
    if (K % 32 || (group == 256 && K % 256)) return WK_EINVAL;
    const int64_t chunks = n_rows * ((K + 255) / 256);
    if (group == 256)
        quantize_act_kernel<256><<<cdiv(chunks, 8), 256, 0, c->stream>>>(x, n_rows, K, NULL, NULL, NULL, out);
    else
        quantize_act_kernel<32><<<cdiv(chunks, 8), 256, 0, c->stream>>>(x, n_rows, K, NULL, NULL, NULL, out);
    return cu_launch_status();
}

extern "C" int cuda_round_act_f32(cuda_ctx *c, const float *x, int64_t n_rows, int64_t K, int group, float *out)
{
    return round_act_f32(c, x, n_rows, K, group, out);
}

/* ---- matrix × vector ----------------------------------------------------------- */

#define MV_WARPS 8 /* rows per block: one warp each */

/* A matvec launch: with programmatic dependent launch on sm_90 (cuda_ctx.sw.hopper: the
 * kernel may start while the previous one in the stream finishes; it must call pdl_wait()
 * before touching anything earlier kernels write or read) and SMEM bytes of dynamic
 * shared memory (the kernel's limit raised for it when over the 48 KiB default: a
 * host-side attribute, allowed during graph capture). */
template <typename... P, typename... A>
static void launch_pdl_smem(cuda_ctx *c, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, A... args)
{
    if (smem > (48 << 10)) smem_allow(kernel, smem);
    launch_attr(c, true, kernel, grid, block, smem, args...);
}
template <typename... P, typename... A>
static void launch_pdl(cuda_ctx *c, void (*kernel)(P...), dim3 grid, dim3 block, A... args)
{
    launch_pdl_smem(c, kernel, grid, block, 0, args...);
}

/* The weights of one matvec launch: up to MV_MAX_SEGS matrices of the same type
 * and column count that multiply the same activations (q/k/v, gate/up, the
 * DeltaNet projections), their rows laid end to end in one row space
 * (segment i's rows start at start[i]); one launch instead of one per matrix
 * saves the launch gap and the half-empty last wave of each. */
#define MV_MAX_SEGS 4
struct mv_segs {
    const uint8_t *W[MV_MAX_SEGS];
    float *y[MV_MAX_SEGS];
    int64_t rows[MV_MAX_SEGS];
    int64_t start[MV_MAX_SEGS];
    int64_t total; /* rows of all segments */
    int n;
    /* with expert ids: slot s is pair (s / ids_ks, s % ids_ks) of cuda_moe_sort's numbering,
     * slot j < ids_k taking matrix ids[t·ids_k + j] of W[i], slot ids_k the extra matrix Wx[i] */
    const uint8_t *Wx[MV_MAX_SEGS];
    int ids_k, ids_ks;
};
/* Segment of row g of the launch's row space, and g's row within it. */
__device__ __forceinline__ int mv_seg_of(const mv_segs &sg, int64_t g, int64_t *row)
{
    int i = 0;
#pragma unroll
    for (int j = 1; j < MV_MAX_SEGS; j++)
        if (j < sg.n && g >= sg.start[j]) i = j;
    *row = g - sg.start[i];
    return i;
}

/* One warp per output row (the default launch: measured fastest on Q4_K/Q8_0). */
template <int T>
__global__ void __launch_bounds__(MV_WARPS * 32)
matvec_q1_kernel(const mv_segs sg, size_t row_bytes, size_t mat_bytes, int64_t K, const int8_t *__restrict__ xq,
                 const float *__restrict__ xd, int64_t slots_per_x, const int32_t *__restrict__ ids)
{
    typedef qdev<T> Q;
    const int lane = threadIdx.x & 31;
    const int64_t g = (int64_t)blockIdx.x * MV_WARPS + threadIdx.x / 32;
    const int64_t s = blockIdx.y;
    pdl_trigger();
    if (g >= sg.total) return;
    int64_t row;
    const int seg = mv_seg_of(sg, g, &row);
    if (!ids) /* the weights do not depend on earlier kernels: start pulling the row into L2 */
        for (size_t off = (size_t)lane * 128; off < row_bytes; off += 32 * 128)
            prefetch_l2(sg.W[seg] + row * row_bytes + off);
    pdl_wait(); /* launched with programmatic serialization: what earlier kernels wrote is visible after this */
    const uint8_t *wm = sg.W[seg];
    if (ids) {
        const int64_t tk = s / sg.ids_ks;
        const int j = (int)(s % sg.ids_ks);
        wm = j < sg.ids_k ? wm + ids[tk * sg.ids_k + j] * mat_bytes : sg.Wx[seg];
    }
    const uint8_t *wr = wm + row * row_bytes;
    const int64_t xr = s / slots_per_x;
    const int8_t *xqr = xq + xr * K;
    const float *xdr = xd + xr * (K / 32);
    const int64_t nb = K / Q::QK;
    constexpr int BPI = 32 / Q::TPB; /* blocks per warp iteration */
    const int t = lane % Q::TPB;
    float acc = 0.0f;
#pragma unroll 4
    for (int64_t ib = lane / Q::TPB; ib < nb; ib += BPI) acc += Q::dot(wr, nb, ib, t, xqr, xdr);
    acc = warp_sum(acc);
    if (lane == 0) sg.y[seg][s * sg.rows[seg] + row] = acc;
}

/* Q4_K, one warp per row, the row copied whole into shared memory by one bulk
 * copy (cp.async.bulk, the Hopper copy engine) issued before pdl_wait: the
 * whole row is in flight at once, independent of registers and occupancy; the
 * warp then reads headers and quants from shared memory. Same part split and
 * summation order as matvec_q1_kernel<QT_Q4_K> (bit-identical results).
 * Dynamic shared memory: MV_WARPS row buffers of row_bytes (16-byte multiple)
 * after MV_WARPS mbarriers. No expert ids (the weights must not depend on
 * earlier kernels). sm_90 only. H200, bench_cuda, vs the register-capped
 * one-warp-per-row kernel in the same run: 17408x5120 2776 vs 2401 GB/s, 5120x17408
 * 1907 vs 1635, 5120x6144 1616 vs 1328, 6144x5120 1809 vs 1561; wick bench tg128 on the
 * 27B q4_k shape 93.6 vs 90.1 tok/s. */
/* qdev<QT_Q4_K>::dot on a block in shared memory (qdev's ld_w is ld.global.nc,
 * invalid on a shared address): same arithmetic. */
__device__ __forceinline__ float q4k8_dot_smem(const uint8_t *blk, int64_t ib, int t, const int8_t *xq,
                                               const float *xd)
{
    const int g = t >> 1, h = t & 1;
    return q4k8_dot_words(*(const uint4 *)blk, *(const uint4 *)(blk + 16 + 32 * g + 16 * h), ib, t, xq, xd);
}

/* These use sm_90 instructions (the bulk copy engine, mbarrier transaction counts and
 * parity waits, the async-proxy fences): the kernels that call them run only where
 * cuda_ctx.sw.hopper is set; built for an older architecture they trap. */
/* Announces `bytes` of bulk copies to complete on mbarrier bar_a (and arrives): one thread. */
__device__ __forceinline__ void mbar_expect_tx(unsigned bar_a, size_t bytes)
{
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar_a), "r"((unsigned)bytes)
                 : "memory");
#else
    __trap();
#endif
}
/* The copy itself, completing `bytes` of bar_a's expected transaction count. */
__device__ __forceinline__ void bulk_copy(unsigned bar_a, uint8_t *dst, const uint8_t *src, size_t bytes)
{
#if __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     (unsigned)__cvta_generic_to_shared(dst)),
                 "l"(src), "r"((unsigned)bytes), "r"(bar_a)
                 : "memory");
#else
    __trap();
#endif
}
/* One bulk copy (cp.async.bulk, the Hopper copy engine) of `bytes` (a 16-byte multiple)
 * from global src into shared dst, completing on mbarrier bar_a: issued by one thread. */
__device__ __forceinline__ void bulk_copy_row(unsigned bar_a, uint8_t *dst, const uint8_t *src, size_t bytes)
{
    mbar_expect_tx(bar_a, bytes);
    bulk_copy(bar_a, dst, src, bytes);
}
/* Barrier `id` (1..15; 0 is __syncthreads') for `threads` threads (a multiple of 32). */
__device__ __forceinline__ void named_barrier(int id, int threads)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
/* mbarrier with an arrival count of 1, made visible to the copy engine. */
__device__ __forceinline__ void mbar_init(unsigned bar_a)
{
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar_a) : "memory");
#else
    __trap();
#endif
}
__device__ __forceinline__ void mbar_init_fence()
{
#if __CUDA_ARCH__ >= 900
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
/* Orders this thread's earlier reads of shared memory before a bulk copy's writes to it. */
__device__ __forceinline__ void fence_proxy_async()
{
#if __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
/* Spins until phase `parity` of the mbarrier has completed. */
__device__ __forceinline__ void mbar_wait(unsigned bar_a, unsigned parity)
{
#if __CUDA_ARCH__ >= 900
    unsigned done = 0;
    while (!done)
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(bar_a), "r"(parity)
                     : "memory");
#else
    (void)bar_a;
    (void)parity;
    __trap();
#endif
}

/* Dot of one Q4_K row in shared memory with activation row xq/xd, summed over the warp
 * (the 8-part split and order of matvec_q1_kernel<QT_Q4_K>). */
__device__ __forceinline__ float q4k8_row_smem(const uint8_t *buf, int64_t nb, int lane, const int8_t *xq,
                                               const float *xd)
{
    typedef qdev<QT_Q4_K> Q;
    constexpr int BPI = 32 / Q::TPB;
    const int t = lane % Q::TPB;
    float acc = 0.0f;
#pragma unroll 4
    for (int64_t ib = lane / Q::TPB; ib < nb; ib += BPI) acc += q4k8_dot_smem(buf + ib * 144, ib, t, xq, xd);
    return warp_sum(acc);
}

__global__ void __launch_bounds__(MV_WARPS * 32)
matvec_q4k_bulk_kernel(const mv_segs sg, size_t row_bytes, int64_t K, const int8_t *__restrict__ xq,
                       const float *__restrict__ xd, int64_t slots_per_x)
{
    extern __shared__ __align__(16) uint8_t mv_smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    const int64_t g = (int64_t)blockIdx.x * MV_WARPS + warp;
    const int64_t s = blockIdx.y;
    pdl_trigger();
    if (g >= sg.total) return;
    int64_t row;
    const int seg = mv_seg_of(sg, g, &row);
    uint64_t *bar = (uint64_t *)mv_smem + warp;
    uint8_t *buf = mv_smem + 16 * MV_WARPS + (size_t)warp * row_bytes;
    const unsigned bar_a = (unsigned)__cvta_generic_to_shared(bar);
    if (lane == 0) {
        mbar_init(bar_a);
        mbar_init_fence();
        bulk_copy_row(bar_a, buf, sg.W[seg] + row * row_bytes, row_bytes);
    }
    __syncwarp();
    pdl_wait();
    const int64_t xr = s / slots_per_x;
    mbar_wait(bar_a, 0);
    const float v = q4k8_row_smem(buf, K / 256, lane, xq + xr * K, xd + xr * (K / 32));
    if (lane == 0) sg.y[seg][s * sg.rows[seg] + row] = v;
}

/* The warp's sum over blocks [ib0, ib0 + nb) of a Q4_K row whose blocks from ib0 on are in
 * shared memory at buf (the lane split and order of q4k8_row_smem within the range). */
__device__ __forceinline__ float q4k8_part_smem(const uint8_t *buf, int64_t ib0, int64_t nb, int lane,
                                                const int8_t *xq, const float *xd)
{
    const int t = lane % 8;
    float acc = 0.0f;
#pragma unroll 4
    for (int64_t ib = lane / 8; ib < nb; ib += 4) acc += q4k8_dot_smem(buf + ib * 144, ib0 + ib, t, xq, xd);
    return warp_sum(acc);
}

/* Long Q4_K rows (ffn_down of a 27B: 68 blocks, 9792 bytes): two warps per row, each
 * bulk-copying and summing one half; the halves' sums added through shared memory (so not
 * bit-identical to the one-warp kernels). A warp's arithmetic over a whole long row, with
 * few such warps resident, was what held the one-row kernel back on these shapes. Needs an
 * even number of blocks per row (else the one-warp kernel takes the row). e2e_cuda tg128,
 * 27B q4_k: 129.1 vs 125.4 tok/s with one warp per row. */
__global__ void __launch_bounds__(MV_WARPS * 32)
matvec_q4k_bulk2_kernel(const mv_segs sg, size_t row_bytes, int64_t K, const int8_t *__restrict__ xq,
                        const float *__restrict__ xd, int64_t slots_per_x)
{
    extern __shared__ __align__(16) uint8_t mv_smem[];
    __shared__ float part[MV_WARPS / 2];
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, half = warp & 1;
    const int64_t g = (int64_t)blockIdx.x * (MV_WARPS / 2) + warp / 2;
    const int64_t s = blockIdx.y;
    pdl_trigger();
    const bool live = g < sg.total; /* no early return: every warp reaches the barrier */
    const size_t hb = row_bytes / 2;
    const int64_t nbh = K / 512;
    uint8_t *buf = mv_smem + 16 * MV_WARPS + (size_t)warp * hb;
    const unsigned bar_a = (unsigned)__cvta_generic_to_shared((uint64_t *)mv_smem + warp);
    int64_t row = 0;
    int seg = 0;
    if (live) {
        seg = mv_seg_of(sg, g, &row);
        if (lane == 0) {
            mbar_init(bar_a);
            mbar_init_fence();
            bulk_copy_row(bar_a, buf, sg.W[seg] + row * row_bytes + half * hb, hb);
        }
    }
    __syncwarp();
    pdl_wait();
    const int64_t xr = s / slots_per_x;
    float v = 0.0f;
    if (live) {
        mbar_wait(bar_a, 0);
        v = q4k8_part_smem(buf, half * nbh, nbh, lane, xq + xr * K, xd + xr * (K / 32));
    }
    if (half == 1 && lane == 0) part[warp / 2] = v;
    __syncthreads();
    if (live && half == 0 && lane == 0) sg.y[seg][s * sg.rows[seg] + row] = v + part[warp / 2];
}

/* Sums each of V values (a power of two up to 32) over the warp with the pairing of
 * warp_sum (lanes i and i^16 first, then i^8, ...), so each sum is bit-identical to
 * warp_sum of that value; instead of V butterflies, each step sends half of the values
 * still held (31 shuffles for 32 values rather than 160). Returns the sum of value
 * lane >> (5 - log2 V) (lane L holds value L for V = 32). */
template <int V, int O = 16> __device__ __forceinline__ float warp_sum_each(float *v, int lane)
{
    if constexpr (O == 0) {
        return v[0];
    } else if constexpr (V == 1) {
        v[0] += __shfl_xor_sync(0xffffffffu, v[0], O);
        return warp_sum_each<1, O / 2>(v, lane);
    } else {
        const bool upper = lane & O; /* keeps values V/2.., sends 0..V/2-1 */
#pragma unroll
        for (int k = 0; k < V / 2; k++) {
            const float keep = upper ? v[V / 2 + k] : v[k], send = upper ? v[k] : v[V / 2 + k];
            v[k] = keep + __shfl_xor_sync(0xffffffffu, send, O);
        }
        return warp_sum_each<V / 2, O / 2>(v, lane);
    }
}

/* Q4_K, persistent warps with a pipeline of NBUF buffers each: a work item is R
 * consecutive rows (the activation part loaded once for all R), each row split into P
 * pieces of K/P columns taken by P warps of the block (P = 2 for long rows: ffn_down's
 * 9792-byte rows would leave too few warps per multiprocessor whole); warp group w of the
 * grid takes items w, w + n_groups, ...; the bulk copies of its next NBUF-1 items are in
 * flight while it computes one, so the memory system never waits for a warp's arithmetic.
 * Grid: at most as many blocks as fit on the machine at once. Per row, the arithmetic of
 * matvec_q4k_bulk_kernel (P = 1) or matvec_q4k_bulk2_kernel (P = 2: piece sums added
 * through shared memory, piece 0 + piece 1), so the results are bit-identical to those.
 * Dynamic shared memory: MV_WARPS·NBUF mbarriers (8 bytes each, padded to 16) then
 * MV_WARPS·NBUF buffers of R row pieces. One activation row (decode); every segment's
 * row count a multiple of R. */
template <int NBUF, int R, int P>
__global__ void __launch_bounds__(MV_WARPS * 32)
matvec_q4k_pipe_kernel(const mv_segs sg, size_t row_bytes, int64_t K, const int8_t *__restrict__ xq,
                       const float *__restrict__ xd)
{
    static_assert(P == 1 || P == 2, "a row in one or two pieces");
    extern __shared__ __align__(16) uint8_t mv_smem[];
    __shared__ float part[MV_WARPS / P][NBUF][R]; /* piece 1's sums, per buffer (P = 2) */
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, piece = warp % P, pair = warp / P;
    const int64_t n_groups = (int64_t)gridDim.x * (MV_WARPS / P), n_items = sg.total / R;
    const int64_t first = (int64_t)blockIdx.x * (MV_WARPS / P) + pair;
    pdl_trigger();
    if (first >= n_items) return; /* the same for both warps of a pair */
    const size_t pb = row_bytes / P;
    const int64_t nbp = K / 256 / P;
    const unsigned bar0 = (unsigned)__cvta_generic_to_shared((uint64_t *)mv_smem + warp * NBUF);
    uint8_t *buf0 = mv_smem + ((8 * NBUF * MV_WARPS + 15) & ~15) + (size_t)warp * NBUF * R * pb;
    auto issue = [&](int b, int64_t item) { /* lane 0: item's pieces into buffer b */
        int64_t r;
        const uint8_t *src = sg.W[mv_seg_of(sg, item * R, &r)] + r * row_bytes + piece * pb;
        uint8_t *dst = buf0 + (size_t)b * R * pb;
        mbar_expect_tx(bar0 + 8 * b, R * pb);
        if (P == 1) {
            bulk_copy(bar0 + 8 * b, dst, src, R * pb); /* the R rows lie end to end */
        } else {
#pragma unroll
            for (int k = 0; k < R; k++) bulk_copy(bar0 + 8 * b, dst + k * pb, src + k * row_bytes, pb);
        }
    };
    if (lane == 0) {
        for (int b = 0; b < NBUF; b++) mbar_init(bar0 + 8 * b);
        mbar_init_fence();
        for (int b = 0; b < NBUF; b++)
            if (first + b * n_groups < n_items) issue(b, first + b * n_groups);
    }
    __syncwarp();
    pdl_wait();
    const int t = lane % 8, g = t >> 1, h = t & 1;
    const int r_lane = lane / (32 / R); /* the row whose sum this lane ends with */
    const bool writer = lane % (32 / R) == 0;
    int b = 0;
    unsigned parity = 0;
    for (int64_t it = first; it < n_items; it += n_groups) {
        mbar_wait(bar0 + 8 * b, parity);
        const uint8_t *buf = buf0 + (size_t)b * R * pb;
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] = 0.0f;
#pragma unroll 4
        for (int64_t ib = lane / 8; ib < nbp; ib += 4) {
            const kq45_a a = kq45_apart(xq, xd, piece * nbp + ib, t);
#pragma unroll
            for (int r = 0; r < R; r++) {
                const uint8_t *blk = buf + r * pb + ib * 144;
                acc[r] += kq45_mul(q4k8_wpart_words(*(const uint4 *)blk, *(const uint4 *)(blk + 16 + 32 * g + 16 * h), t), a);
            }
        }
        const float v = warp_sum_each<R>(acc, lane);
        int64_t row;
        const int seg = mv_seg_of(sg, it * R, &row);
        if (P == 2) {
            if (piece == 1 && writer) part[pair][b][r_lane] = v;
            named_barrier(1 + pair, 64); /* the pair's two warps */
            if (piece == 0 && writer) sg.y[seg][row + r_lane] = v + part[pair][b][r_lane];
        } else if (writer) {
            sg.y[seg][row + r_lane] = v;
        }
        __syncwarp(); /* every lane is done with buffer b */
        const int64_t next = it + (int64_t)NBUF * n_groups;
        if (lane == 0 && next < n_items) {
            fence_proxy_async(); /* our reads before the copy's writes */
            issue(b, next);
        }
        if (++b == NBUF) {
            b = 0;
            parity ^= 1;
        }
    }
}

/* A decoded weight part's code words held as computed: otherwise the compiler sinks the bit
 * extractions that unpack them into each activation row's (guarded) block and unpacks them
 * again there. No instruction of its own. */
__device__ __forceinline__ void keep(uint4 &v)
{
    asm volatile("" : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w));
}
template <int T> __device__ __forceinline__ void keep_codes(typename qdev<T>::W &w)
{
    if constexpr (T == QT_Q4_K || T == QT_Q5_K) {
        keep(w.clo);
        keep(w.chi);
    } else if constexpr (T == QT_Q6_K) {
#pragma unroll
        for (int k = 0; k < 4; k++) keep(w.c[k]);
    } else {
        keep(w.c[0]);
        if constexpr (T != QT_Q8_0) keep(w.c[1]); /* Q8_0's part has one word of codes */
    }
}

/* Few activation rows (prefill chunks of up to CUDA_MMV_MAX_ROWS tokens, batched decode,
 * speculative verification): each warp takes R weight rows and NT activation rows
 * (blockIdx.y picks the group of NT). The cost is arithmetic and L1 traffic, not weight
 * bytes, so each weight part is loaded and decoded once for the NT activation rows, and
 * each activation part loaded (with its sums) once for the R weight rows. Every (weight
 * row, activation row) pair takes qdev<T>::mul on the lane split and in the order of
 * matvec_q1_kernel, then warp_sum's pairing (warp_sum_each), so a prompt row gets
 * bit-identically what a one-token step would. Rows past M repeat the last (not stored). */
#define NT_WARPS 4 /* warps per block: small blocks spread M/R warps evenly over the SMs */
template <int T, int NT, int R>
__global__ void __launch_bounds__(NT_WARPS * 32, 4) /* 4 blocks (16 warps) per SM: at most 128 registers */
matvec_nt_kernel(const uint8_t *__restrict__ W, size_t row_bytes, int64_t M, int64_t K,
                 const int8_t *__restrict__ xq, const float *__restrict__ xd, int64_t n, float *__restrict__ y)
{
    typedef qdev<T> Q;
    constexpr int BPI = 32 / Q::TPB;
    const int lane = threadIdx.x & 31;
    const int64_t row0 = ((int64_t)blockIdx.x * NT_WARPS + threadIdx.x / 32) * R;
    const int64_t t0 = (int64_t)blockIdx.y * NT;
    if (row0 >= M) return;
    const int nt = (int)(n - t0 < NT ? n - t0 : NT);
    const int64_t nb = K / Q::QK;
    const int t = lane % Q::TPB;
    const uint8_t *wr[R];
#pragma unroll
    for (int r = 0; r < R; r++) wr[r] = W + (row0 + r < M ? row0 + r : M - 1) * row_bytes;
    const int8_t *xqt = xq + t0 * K;
    const float *xdt = xd + t0 * (K / 32);
    float acc[R * NT];
#pragma unroll
    for (int k = 0; k < R * NT; k++) acc[k] = 0.0f;
#pragma unroll 1
    for (int64_t ib = lane / Q::TPB; ib < nb; ib += BPI) {
        if (ib + 2 * BPI < nb) /* two iterations ahead into L2: few warps per SM at R rows each */
#pragma unroll
            for (int r = 0; r < R; r++) prefetch_l2(wr[r] + (ib + 2 * BPI) * Q::BYTES + t * (Q::BYTES / Q::TPB));
        typename Q::W w[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            w[r] = Q::wpart(wr[r], nb, ib, t);
            keep_codes<T>(w[r]);
        }
        const int8_t *xa = xqt + ib * Q::QK; /* activation row j's block ib */
        const float *xs = xdt + ib * (Q::QK / 32);
#pragma unroll
        for (int j = 0; j < NT; j++, xa += K, xs += K / 32)
            if (j < nt) {
                const typename Q::A a = Q::apart(xa, xs, 0, t);
#pragma unroll
                for (int r = 0; r < R; r++) acc[r * NT + j] += Q::mul(w[r], a);
            }
    }
    constexpr int V = R * NT, LPV = 32 / V; /* lanes per reduced value */
    const float v = warp_sum_each<V>(acc, lane);
    const int k = lane / LPV, r = k / NT, j = k % NT;
    if (lane % LPV == 0 && j < nt && row0 + r < M) y[(t0 + j) * M + row0 + r] = v;
}

/* The kernel matvec_nt_kernel replaced, for A/B timing (cuda_ctx.sw.nt off): one weight row
 * per warp, each part's weights loaded and decoded again for each of the NT activation
 * rows. Same results. */
template <int T, int NT>
__global__ void __launch_bounds__(MV_WARPS * 32)
matvec_nt_rowwise_kernel(const uint8_t *__restrict__ W, size_t row_bytes, int64_t M, int64_t K,
                         const int8_t *__restrict__ xq, const float *__restrict__ xd, int64_t n,
                         float *__restrict__ y)
{
    typedef qdev<T> Q;
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * MV_WARPS + threadIdx.x / 32;
    const int64_t t0 = (int64_t)blockIdx.y * NT;
    if (row >= M) return;
    const int64_t nt = n - t0 < NT ? n - t0 : NT;
    const uint8_t *wr = W + row * row_bytes;
    const int64_t nb = K / Q::QK;
    constexpr int BPI = 32 / Q::TPB;
    const int t = lane % Q::TPB;
    float acc[NT];
#pragma unroll
    for (int j = 0; j < NT; j++) acc[j] = 0.0f;
#pragma unroll 2
    for (int64_t ib = lane / Q::TPB; ib < nb; ib += BPI)
#pragma unroll
        for (int j = 0; j < NT; j++)
            if (j < nt) acc[j] += Q::dot(wr, nb, ib, t, xq + (t0 + j) * K, xd + (t0 + j) * (K / 32));
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const float v = warp_sum(acc[j]);
        if (lane == 0 && j < nt) y[(t0 + j) * M + row] = v;
    }
}
#define MV_BULK_MAX_SMEM (200 << 10)

/* Float weights (F32/F16/BF16) with F32 activations: 8 elements per lane step. */
template <int T> __device__ __forceinline__ void load8(const uint8_t *row, int64_t i, float *w)
{
    if (T == QT_F32) {
        float4 a = __ldg((const float4 *)row + i / 4), b = __ldg((const float4 *)row + i / 4 + 1);
        w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w; w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
    } else {
        uint4 u = __ldg((const uint4 *)(row + i * 2));
        const unsigned p[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            if (T == QT_F16) {
                w[2 * j] = h2f((uint16_t)(p[j] & 0xFFFF));
                w[2 * j + 1] = h2f((uint16_t)(p[j] >> 16));
            } else {
                w[2 * j] = __uint_as_float(p[j] << 16);
                w[2 * j + 1] = __uint_as_float(p[j] & 0xFFFF0000u);
            }
        }
    }
}

template <int T>
__global__ void __launch_bounds__(MV_WARPS * 32)
matvec_f_kernel(const uint8_t *__restrict__ W, size_t row_bytes, size_t mat_bytes, int64_t M, int64_t K,
                const float *__restrict__ xf, int64_t slots_per_x, const int32_t *__restrict__ ids,
                float *__restrict__ y)
{
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * MV_WARPS + threadIdx.x / 32;
    const int64_t s = blockIdx.y;
    if (row >= M) return;
    const int64_t e = ids ? ids[s] : 0;
    const uint8_t *wr = W + e * mat_bytes + row * row_bytes;
    const float *x = xf + (s / slots_per_x) * K;
    float acc = 0.0f;
    for (int64_t i = lane * 8; i < K; i += 256) {
        float w[8];
        load8<T>(wr, i, w);
        float4 a = *(const float4 *)(x + i), b = *(const float4 *)(x + i + 4);
        acc += w[0] * a.x + w[1] * a.y + w[2] * a.z + w[3] * a.w + w[4] * b.x + w[5] * b.y + w[6] * b.z +
               w[7] * b.w;
    }
    acc = warp_sum(acc);
    if (lane == 0) y[s * M + row] = acc;
}

/* Rows up to this many bytes go to the pipelined kernel whole; longer ones (ffn_down's 17408
 * columns: 9792 bytes) in two pieces (whole, they left too few warps per multiprocessor:
 * session 4 measured tg128 130.6 vs 134.6 tok/s for the two-warp bulk kernel). */
#define MV_PIPE_MAX_ROW 4096
#define MV_PIPE_BUFS 2

/* Launches matvec_q4k_pipe_kernel with items of R rows in P pieces and as many blocks as
 * fit on the machine at once: 1, else 0 (nothing launched: the shape does not split so, or
 * its buffers do not fit). */
static int q4k_pipe_launch(cuda_ctx *c, size_t row_bytes, int64_t K, const mv_segs &sg, const int8_t *xq,
                           const float *xd, int R, int P)
{
    if ((K / 256) % P) return 0;
    for (int i = 0; i < sg.n; i++)
        if (sg.rows[i] % R) return 0;
    const size_t smem =
        ((8 * MV_PIPE_BUFS * MV_WARPS + 15) & ~(size_t)15) + (size_t)MV_WARPS * MV_PIPE_BUFS * R * (row_bytes / P);
    if (smem > c->smem_per_block) return 0;
    int per_sm = (int)(c->smem_per_sm / (smem + 1024 + 128)); /* 1 KiB reserved per block, the piece sums */
    if (per_sm > 2048 / (MV_WARPS * 32)) per_sm = 2048 / (MV_WARPS * 32);
    int64_t blocks = cdiv(sg.total / R, MV_WARPS / P);
    if (blocks > (int64_t)per_sm * c->sm_count) blocks = (int64_t)per_sm * c->sm_count;
    const dim3 grid((unsigned)blocks), block(MV_WARPS * 32);
    if (R == 1 && P == 1)
        launch_pdl_smem(c, matvec_q4k_pipe_kernel<MV_PIPE_BUFS, 1, 1>, grid, block, smem, sg, row_bytes, K, xq, xd);
    else if (R == 2 && P == 1)
        launch_pdl_smem(c, matvec_q4k_pipe_kernel<MV_PIPE_BUFS, 2, 1>, grid, block, smem, sg, row_bytes, K, xq, xd);
    else if (R == 1 && P == 2)
        launch_pdl_smem(c, matvec_q4k_pipe_kernel<MV_PIPE_BUFS, 1, 2>, grid, block, smem, sg, row_bytes, K, xq, xd);
    else if (R == 2 && P == 2)
        launch_pdl_smem(c, matvec_q4k_pipe_kernel<MV_PIPE_BUFS, 2, 2>, grid, block, smem, sg, row_bytes, K, xq, xd);
    else
        return 0;
    return 1;
}

/* The default pipelined launch for Q4_K decode: 1, else 0 (another kernel must take it). */
static int q4k_pipe(cuda_ctx *c, size_t row_bytes, int64_t K, const mv_segs &sg, const int8_t *xq, const float *xd)
{
    /* short rows: items of 2 rows (the activation part loaded once for both), else 1; long
     * rows: one row an item in two pieces (two items of 2 would leave one block per
     * multiprocessor). H200, wick bench tg128 on the 27B q4_k shape, one call: 134.5 tok/s
     * (1 row whole; long rows on the two-warp bulk kernel) -> 136.8 (long rows in pieces)
     * -> 145.7 (and 2-row items for short rows); 142.4 with 2-row items for long rows too. */
    const int P = row_bytes > MV_PIPE_MAX_ROW ? 2 : 1, R = P == 1 ? 2 : 1;
    return q4k_pipe_launch(c, row_bytes, K, sg, xq, xd, R, P) ||
           (R > 1 && q4k_pipe_launch(c, row_bytes, K, sg, xq, xd, 1, P));
}

static mv_segs one_seg(const void *W, int64_t rows, float *y);
extern "C" int cuda_matvec_q4k_pipe(cuda_ctx *c, const cuda_qweight *w, const int8_t *xq, const float *xd, float *y,
                                    int rows, int pieces, wk_error *err)
{
    if (w->type != QT_Q4_K || !c->sw.hopper || w->row_bytes % 16 || ((uintptr_t)w->data & 15))
        return wk_fail(err, WK_EINVAL, "cuda: the pipelined matvec takes aligned Q4_K weights on sm_90");
    const mv_segs sg = one_seg(w->data, w->rows, y);
    if (!q4k_pipe_launch(c, w->row_bytes, w->cols, sg, xq, xd, rows, pieces))
        return wk_fail(err, WK_EINVAL, "cuda: the pipelined matvec does not take %lld x %lld in %d-row items of %d pieces",
                       (long long)w->rows, (long long)w->cols, rows, pieces);
    CU_CHECK_LAUNCH(err, "pipelined matvec");
    return 0;
}

/* The matvec launch for the segments sg of weights shaped like w (type, row and matrix
 * strides, columns); float weights take one segment. Q4_K on sm_90 (cuda_ctx.sw.hopper): rows
 * bulk-copied to shared memory (pipelined for one activation row, else two warps per long row
 * or one warp per row);
 * otherwise, and for the other types, one warp per row from registers. */
static int launch_matvec(cuda_ctx *c, const cuda_qweight *w, const mv_segs &sg, const int8_t *xq, const float *xd,
                         const float *xf, int64_t n_slots, int64_t slots_per_x, const int32_t *ids, wk_error *err)
{
    if (n_slots <= 0 || sg.total <= 0) return 0;
    if (n_slots > 65535)
        return wk_fail(err, WK_EINVAL, "cuda matvec: %lld rows is too many for one launch", (long long)n_slots);
    dim3 grid(cdiv(sg.total, MV_WARPS), (unsigned)n_slots);
    dim3 block(MV_WARPS * 32);
    const uint8_t *W = sg.W[0];
    float *y = sg.y[0];
    const int64_t M = sg.rows[0];
    const size_t bulk_smem = 16 * MV_WARPS + MV_WARPS * w->row_bytes;
    bool aligned = w->row_bytes % 16 == 0;
    for (int i = 0; i < sg.n; i++) aligned = aligned && ((uintptr_t)sg.W[i] & 15) == 0;
    const bool bulk = c->sw.hopper && !ids && aligned;
    auto mvq = [&](auto tag) {
        constexpr int T = decltype(tag)::value;
        if (T == QT_Q4_K && bulk && n_slots == 1 && q4k_pipe(c, w->row_bytes, w->cols, sg, xq, xd))
            return; /* the pipelined kernel took it */
        if (T == QT_Q4_K && bulk && w->row_bytes > MV_PIPE_MAX_ROW && (w->cols / 256) % 2 == 0)
            launch_pdl_smem(c, matvec_q4k_bulk2_kernel, dim3(cdiv(sg.total, MV_WARPS / 2), (unsigned)n_slots),
                            block, 16 * MV_WARPS + MV_WARPS * (w->row_bytes / 2), sg, w->row_bytes, w->cols,
                            xq, xd, slots_per_x);
        else if (T == QT_Q4_K && bulk && bulk_smem <= MV_BULK_MAX_SMEM)
            launch_pdl_smem(c, matvec_q4k_bulk_kernel, grid, block, bulk_smem, sg, w->row_bytes, w->cols, xq, xd,
                            slots_per_x);
        else
            launch_pdl(c, matvec_q1_kernel<T>, grid, block, sg, w->row_bytes, w->mat_bytes, w->cols, xq, xd,
                       slots_per_x, ids);
    };
#define MVF(T)                                                                                      \
    matvec_f_kernel<T><<<grid, block, 0, c->stream>>>(W, w->row_bytes, w->mat_bytes, M, w->cols, xf, slots_per_x, \
                                                       ids, y)
    switch (w->type) {
    case QT_F32:
    case QT_F16:
    case QT_BF16:
        if (w->cols % 8) return wk_fail(err, WK_EINVAL, "cuda matvec: %lld columns not a multiple of 8",
                                        (long long)w->cols);
        if (sg.n != 1) return wk_fail(err, WK_EINVAL, "cuda matvec: float weights take one matrix per launch");
        if (w->type == QT_F32) MVF(QT_F32);
        else if (w->type == QT_F16) MVF(QT_F16);
        else MVF(QT_BF16);
        break;
    default:
        if (!with_qtype(w->type, mvq))
            return wk_fail(err, WK_EUNSUPPORTED, "cuda matvec: type %s", qt_type_name(w->type));
    }
#undef MVF
    CU_CHECK_LAUNCH(err, "matvec");
    return 0;
}

static mv_segs one_seg(const void *W, int64_t rows, float *y)
{
    mv_segs sg;
    memset(&sg, 0, sizeof sg);
    sg.W[0] = (const uint8_t *)W;
    sg.y[0] = y;
    sg.rows[0] = rows;
    sg.total = rows;
    sg.n = 1;
    sg.ids_k = sg.ids_ks = 1; /* ids[s] per slot */
    return sg;
}

extern "C" int cuda_matvec_moe(cuda_ctx *c, const cuda_qweight *w0, const cuda_qweight *w1, const void *extra0,
                               const void *extra1, const int8_t *xq, const float *xd, int64_t n_t, int32_t k,
                               int32_t ks, int64_t slots_per_x, const int32_t *ids, float *y0, float *y1,
                               wk_error *err)
{
    if (!cuda_mmq_supported(w0->type) || ks < k || ks > k + 1 || (ks > k && (!extra0 || (w1 && !extra1))) ||
        (w1 && (w1->type != w0->type || w1->cols != w0->cols || w1->row_bytes != w0->row_bytes ||
                w1->mat_bytes != w0->mat_bytes)))
        return wk_fail(err, WK_EINVAL, "cuda matvec: bad MoE launch (%s)", qt_type_name(w0->type));
    mv_segs sg = one_seg(w0->data, w0->rows, y0);
    sg.Wx[0] = (const uint8_t *)extra0;
    if (w1) {
        sg.W[1] = (const uint8_t *)w1->data;
        sg.y[1] = y1;
        sg.rows[1] = w1->rows;
        sg.start[1] = w0->rows;
        sg.total += w1->rows;
        sg.Wx[1] = (const uint8_t *)extra1;
        sg.n = 2;
    }
    sg.ids_k = k;
    sg.ids_ks = ks;
    return launch_matvec(c, w0, sg, xq, xd, NULL, n_t * ks, slots_per_x, ids, err);
}

/* The decode form of a MoE down product and the weighted sum after it in one launch:
 * block (rows row0 .. row0 + R - 1, token t), warp j slot j's matrix (the extra one for
 * slot k), each row's dot as matvec_q1_kernel takes it; then per row the slots' results
 * summed in slot order as moe_combine_kernel does. Bit for bit cuda_matvec_moe per slot
 * and cuda_moe_combine, without the slots' rows going through memory. Rows shorter than a
 * warp's step (ffn_down's 512 columns: 2 blocks of Q4_K fill half a warp, of Q6_K a
 * quarter) take R = BPI / nb rows a warp, a group of 32 / R lanes each: the lanes the
 * one-row kernel left idle add zeros first in its warp_sum, so the sums are the same. */
template <int T, int R>
__global__ void __launch_bounds__(CUDA_MOE_DOWN_MAX_SLOTS * 32)
moe_down_combine_kernel(const uint8_t *__restrict__ W, const uint8_t *__restrict__ Wx, size_t row_bytes,
                        size_t mat_bytes, int64_t M, int64_t K, const int8_t *__restrict__ xq,
                        const float *__restrict__ xd, const int32_t *__restrict__ ids, const float *__restrict__ w,
                        const float *__restrict__ sh_logit, int k, int ks, float *__restrict__ out)
{
    typedef qdev<T> Q;
    constexpr int SG = 32 / R;                    /* lanes per row */
    __shared__ float v[CUDA_MOE_DOWN_MAX_SLOTS][R];
    const int lane = threadIdx.x & 31, j = threadIdx.x / 32, r = lane / SG, ll = lane % SG;
    const int64_t row = (int64_t)blockIdx.x * R + r, t = blockIdx.y;
    pdl_enter();
    const uint8_t *wm = j < k ? W + (int64_t)ids[t * k + j] * mat_bytes : Wx;
    const int64_t s = t * ks + j;
    const int8_t *xqr = xq + s * K;
    const float *xdr = xd + s * (K / 32);
    const int64_t nb = K / Q::QK;
    float acc = 0.0f;
    if (row < M) {
        const uint8_t *wr = wm + row * row_bytes;
#pragma unroll 4
        for (int64_t ib = ll / Q::TPB; ib < nb; ib += SG / Q::TPB) acc += Q::dot(wr, nb, ib, ll % Q::TPB, xqr, xdr);
    }
#pragma unroll
    for (int o = SG / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (ll == 0) v[j][r] = acc;
    __syncthreads();
    if (threadIdx.x < R && (int64_t)blockIdx.x * R + threadIdx.x < M) {
        float o = 0.0f;
        for (int q = 0; q < ks; q++) {
            const float wq = q < k ? w[t * k + q] : 1.0f / (1.0f + expf(-sh_logit[t]));
            o += wq * v[q][threadIdx.x];
        }
        out[t * M + (int64_t)blockIdx.x * R + threadIdx.x] = o;
    }
}

extern "C" int cuda_moe_down_combine(cuda_ctx *c, const cuda_qweight *w, const void *extra, const int8_t *xq,
                                     const float *xd, int64_t n_t, int32_t k, int32_t ks, const int32_t *ids,
                                     const float *weights, const float *sh_logit, float *out, wk_error *err)
{
    if (!cuda_mmq_supported(w->type) || ks < k || ks > k + 1 || ks > CUDA_MOE_DOWN_MAX_SLOTS || (ks > k && (!extra || !sh_logit)))
        return wk_fail(err, WK_EINVAL, "cuda moe: bad down + combine launch (%s, %d slots)", qt_type_name(w->type),
                       (int)ks);
    if (n_t <= 0) return 0;
    if (n_t > 65535) return wk_fail(err, WK_EINVAL, "cuda moe: %lld tokens is too many", (long long)n_t);
    const bool known = with_qtype(w->type, [&](auto tag) {
        constexpr int T = decltype(tag)::value;
        constexpr int BPI = 32 / qdev<T>::TPB;
        const int64_t nb = w->cols / qdev<T>::QK;
        auto go = [&](auto kernel, int R) {
            launch_k(c, kernel, dim3(cdiv(w->rows, R), (unsigned)n_t), ks * 32, 0, (const uint8_t *)w->data,
                     (const uint8_t *)extra, w->row_bytes, w->mat_bytes, w->rows, w->cols, xq, xd, ids, weights,
                     sh_logit, (int)k, (int)ks, out);
        };
        /* the most rows a warp (a power of 2, at most 4) while every lane still takes one block at most */
        if (BPI >= 4 && nb * 4 <= BPI) go(moe_down_combine_kernel<T, 4>, 4);
        else if (BPI >= 2 && nb * 2 <= BPI) go(moe_down_combine_kernel<T, 2>, 2);
        else go(moe_down_combine_kernel<T, 1>, 1);
    });
    if (!known) return wk_fail(err, WK_EUNSUPPORTED, "cuda moe: type %s", qt_type_name(w->type));
    CU_CHECK_LAUNCH(err, "moe down + combine");
    return 0;
}

extern "C" int cuda_matvec(cuda_ctx *c, const cuda_qweight *w, const int8_t *xq, const float *xd,
                           const float *xf, int64_t n_slots, int64_t slots_per_x, const int32_t *ids,
                           float *y, wk_error *err)
{
    return launch_matvec(c, w, one_seg(w->data, w->rows, y), xq, xd, xf, n_slots, slots_per_x, ids, err);
}

/* Weight rows per warp of matvec_nt_kernel for M rows: 4 (each activation load serves 4
 * rows) while M/4 warps still make one wave of 16 warps per SM, else 2, else 1. Q5_K's and
 * Q6_K's decoded parts take 2 at most within the 128 registers (4 spill). */
static int nt_rows_per_warp(const cuda_ctx *c, uint32_t type, int64_t M)
{
    const int64_t wave = 16 * (int64_t)c->sm_count;
    if (type != QT_Q5_K && type != QT_Q6_K && M >= 4 * wave) return 4;
    return M >= 2 * wave ? 2 : 1;
}

extern "C" int cuda_matvec_nt(cuda_ctx *c, const cuda_qweight *w, const int8_t *xq, const float *xd, int64_t n,
                              float *y, wk_error *err)
{
    if (n <= 0) return 0;
    constexpr int NT = 8;
    if (cdiv(n, NT) > 65535) return wk_fail(err, WK_EINVAL, "cuda matvec: %lld rows is too many", (long long)n);
    const uint8_t *W = (const uint8_t *)w->data;
    const int R = nt_rows_per_warp(c, w->type, w->rows);
    const bool known = with_qtype(w->type, [&](auto tag) {
        constexpr int T = decltype(tag)::value;
        if (!c->sw.nt) {
            matvec_nt_rowwise_kernel<T, NT><<<dim3(cdiv(w->rows, MV_WARPS), cdiv(n, NT)), MV_WARPS * 32, 0,
                                              c->stream>>>(W, w->row_bytes, w->rows, w->cols, xq, xd, n, y);
            return;
        }
        auto go = [&](auto kernel, int rows_per_warp) {
            kernel<<<dim3(cdiv(w->rows, NT_WARPS * rows_per_warp), cdiv(n, NT)), NT_WARPS * 32, 0, c->stream>>>(
                W, w->row_bytes, w->rows, w->cols, xq, xd, n, y);
        };
        if constexpr (T != QT_Q5_K && T != QT_Q6_K)
            if (R == 4) return go(matvec_nt_kernel<T, NT, 4>, 4);
        if (R == 2) go(matvec_nt_kernel<T, NT, 2>, 2);
        else go(matvec_nt_kernel<T, NT, 1>, 1);
    });
    if (!known) return wk_fail(err, WK_EUNSUPPORTED, "cuda matvec: type %s", qt_type_name(w->type));
    CU_CHECK_LAUNCH(err, "matvec (several rows)");
    return 0;
}

/* ---- dequantization ------------------------------------------------------------- */

/* One thread per 32-element group; OUT = 0: F16, 1: BF16, 2: F32. Rows of the
 * output come from rows[i] (gather) or are consecutive. */
template <int T, int OUT>
__global__ void dequant_kernel(const uint8_t *__restrict__ W, size_t row_bytes, int64_t n_rows, int64_t K,
                               const int32_t *__restrict__ rows, void *__restrict__ dst)
{
    const int64_t gpr = K / 32;
    const int64_t gi = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (gi >= n_rows * gpr) return;
    const int64_t r = gi / gpr, g = gi % gpr;
    const int64_t src_row = rows ? rows[r] : r;
    const uint8_t *row = W + src_row * row_bytes;
    int QK = (T == QT_Q4_K || T == QT_Q5_K || T == QT_Q6_K) ? 256 : (T == QT_F32 || T == QT_F16 || T == QT_BF16) ? 1 : 32;
    float y[32];
    dq_group<T>(row, K / QK, g, y);
    if (OUT == 2) {
        float4 *o = (float4 *)((float *)dst + r * K + g * 32);
#pragma unroll
        for (int i = 0; i < 8; i++) o[i] = make_float4(y[4 * i], y[4 * i + 1], y[4 * i + 2], y[4 * i + 3]);
    } else {
        uint4 *o = (uint4 *)((uint16_t *)dst + r * K + g * 32);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            unsigned p[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                if (OUT == 0) {
                    __half2 h = __floats2half2_rn(y[8 * i + 2 * j], y[8 * i + 2 * j + 1]);
                    memcpy(&p[j], &h, 4);
                } else {
                    __nv_bfloat162 h = __floats2bfloat162_rn(y[8 * i + 2 * j], y[8 * i + 2 * j + 1]);
                    memcpy(&p[j], &h, 4);
                }
            }
            o[i] = make_uint4(p[0], p[1], p[2], p[3]);
        }
    }
}

static int launch_dequant(cuda_ctx *c, const cuda_qweight *w, const uint8_t *W, int64_t n_rows,
                          const int32_t *rows, void *dst, int out, wk_error *err)
{
    if (w->cols % 32) return wk_fail(err, WK_EINVAL, "cuda dequant: %lld columns", (long long)w->cols);
    const int64_t n = n_rows * (w->cols / 32);
    if (n == 0) return 0;
    const unsigned grid = cdiv(n, 256);
#define DQ(T)                                                                                       \
    do {                                                                                            \
        if (out == 0) dequant_kernel<T, 0><<<grid, 256, 0, c->stream>>>(W, w->row_bytes, n_rows, w->cols, rows, dst); \
        else if (out == 1) dequant_kernel<T, 1><<<grid, 256, 0, c->stream>>>(W, w->row_bytes, n_rows, w->cols, rows, dst); \
        else dequant_kernel<T, 2><<<grid, 256, 0, c->stream>>>(W, w->row_bytes, n_rows, w->cols, rows, dst); \
    } while (0)
    switch (w->type) {
    case QT_Q4_K: DQ(QT_Q4_K); break;
    case QT_Q5_K: DQ(QT_Q5_K); break;
    case QT_Q6_K: DQ(QT_Q6_K); break;
    case QT_Q8_0: DQ(QT_Q8_0); break;
    case QT_Q4_0: DQ(QT_Q4_0); break;
    case QT_IQ4_NL: DQ(QT_IQ4_NL); break;
    case QT_F32: DQ(QT_F32); break;
    case QT_F16: DQ(QT_F16); break;
    case QT_BF16: DQ(QT_BF16); break;
    default: return wk_fail(err, WK_EUNSUPPORTED, "cuda dequant: type %s", qt_type_name(w->type));
    }
#undef DQ
    CU_CHECK_LAUNCH(err, "dequantize");
    return 0;
}

extern "C" int cuda_dequant_bf16(cuda_ctx *c, const cuda_qweight *w, int64_t mat, uint16_t *dst, wk_error *err)
{
    return launch_dequant(c, w, (const uint8_t *)w->data + mat * w->mat_bytes, w->rows, NULL, dst, 1, err);
}

extern "C" int cuda_get_rows(cuda_ctx *c, const cuda_qweight *w, const int32_t *ids, int64_t n, float *y,
                             wk_error *err)
{
    return launch_dequant(c, w, (const uint8_t *)w->data, n, ids, y, 2, err);
}

template <int OUT>
__global__ void f32_to_16_kernel(const float *__restrict__ x, int64_t n, uint16_t *__restrict__ y)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (OUT == 0) y[i] = __half_as_ushort(__float2half_rn(x[i]));
    else y[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
}


/* ---- cached quantized activations ------------------------------------------------------ */

/* Layout of the cache buffer for n rows of K: xd floats, then (256-aligned) xq bytes. */
static size_t act_xd_bytes(int64_t n, int64_t K) { return ((size_t)n * (K / 32) * 4 + 255) & ~(size_t)255; }

extern "C" int cuda_act_slots(cuda_ctx *c, int64_t n, int64_t K, int8_t **xq, float **xd)
{
    const size_t xd_bytes = act_xd_bytes(n, K);
    if (!c->actq || xd_bytes + (size_t)n * K > c->actq_bytes) return 0;
    *xd = (float *)c->actq;
    *xq = (int8_t *)c->actq + xd_bytes;
    return 1;
}

extern "C" void cuda_act_mark(cuda_ctx *c, const float *x, int64_t n, int64_t K, int group)
{
    c->actq_x = x;
    c->actq_n = n;
    c->actq_K = K;
    c->actq_group = group;
}

/* ---- the matmul entry point --------------------------------------------------------- */

/* x's n rows of K quantized with `group` in the cached slots: reused when x was the
 * last input quantized (consecutive matmuls on one input), else quantized now. */
static int act_quantized(cuda_ctx *c, const float *x, int64_t n, int64_t K, int group, int8_t **xq, float **xd,
                         wk_error *err)
{
    const size_t xd_bytes = act_xd_bytes(n, K); /* keeps xq 16-byte aligned */
    const bool hit = c->actq_x == x && c->actq_n == n && c->actq_K == K && c->actq_group == group;
    if (!hit && xd_bytes + (size_t)n * K > c->actq_bytes) {
        if (c->actq) cudaFree(c->actq); /* waits for kernels still reading it */
        c->epoch++;
        c->actq = NULL;
        c->actq_bytes = 0;
        c->actq_x = NULL;
        const size_t want = 2 * (xd_bytes + (size_t)n * K);
        cudaError_t e = cudaMalloc(&c->actq, want);
        if (e != cudaSuccess) return wk_fail(err, WK_ENOMEM, "cuda: %zu bytes for activations", want);
        c->actq_bytes = want;
    }
    *xd = (float *)c->actq;
    *xq = (int8_t *)c->actq + xd_bytes;
    if (!hit) {
        int rc = cuda_quantize_act(c, x, n, K, group, *xq, *xd);
        if (rc) return wk_fail(err, rc, "cuda: quantizing activations for a %lld-column matmul", (long long)K);
        c->actq_x = x;
        c->actq_n = n;
        c->actq_K = K;
        c->actq_group = group;
    }
    return 0;
}

extern "C" int cuda_act_quantized(cuda_ctx *c, const float *x, int64_t n, int64_t K, int group, int8_t **xq,
                                  float **xd, wk_error *err)
{
    return act_quantized(c, x, n, K, group, xq, xd, err);
}

/* Whether cuda_matmul multiplies n rows with w on the tensor-core matvec (cuda_matvec_tc). */
static bool takes_tc(const cuda_ctx *c, const cuda_qweight *w, int64_t n)
{
    return n > 1 && c->mmv_max_rows > 1 && (n <= c->mmv_max_rows || n <= CUDA_MMV_TC_MAX_ROWS) && c->sw.tc &&
           cuda_matvec_tc_supported(w->type, w->cols);
}

extern "C" int cuda_matmul_rows_multi(cuda_ctx *c, const cuda_qweight *const *w, float *const *y, int nw,
                                      const float *x, int64_t n, wk_error *err)
{
    bool tc = true;
    for (int i = 0; i < nw && tc; i++)
        tc = takes_tc(c, w[i], n) && w[i]->type == w[0]->type && w[i]->cols == w[0]->cols &&
             w[i]->row_bytes == w[0]->row_bytes && w[i]->n_mat == 1;
    if (!tc) {
        for (int i = 0; i < nw; i++) {
            int rc = cuda_matmul(c, w[i], 0, x, n, y[i], err);
            if (rc) return rc;
        }
        return 0;
    }
    int8_t *xq;
    float *xd;
    int rc = act_quantized(c, x, n, w[0]->cols, cuda_act_group(w[0]->type), &xq, &xd, err);
    return rc ? rc : cuda_matvec_tc_multi(c, w, y, nw, xq, xd, n, err);
}

extern "C" int cuda_matvec_multi(cuda_ctx *c, const cuda_qweight *const *w, float *const *y, int n, const float *x,
                                 wk_error *err)
{
    if (n <= 0) return 0;
    for (int i = 1; i < n; i++)
        if (w[i]->type != w[0]->type || w[i]->cols != w[0]->cols || w[i]->row_bytes != w[0]->row_bytes)
            return wk_fail(err, WK_EINVAL, "cuda matvec: one launch needs weights of one type and width");
    if (!cuda_qw_supported(w[0]->type) || w[0]->type == QT_F32 || w[0]->type == QT_F16 || w[0]->type == QT_BF16)
        return wk_fail(err, WK_EINVAL, "cuda matvec: one launch for several weights needs a quantized type");
    int8_t *xq;
    float *xd;
    int rc = act_quantized(c, x, 1, w[0]->cols, cuda_act_group(w[0]->type), &xq, &xd, err);
    for (int i0 = 0; i0 < n && !rc; i0 += MV_MAX_SEGS) {
        mv_segs sg;
        memset(&sg, 0, sizeof sg);
        for (int i = i0; i < n && i < i0 + MV_MAX_SEGS; i++, sg.n++) {
            sg.W[sg.n] = (const uint8_t *)w[i]->data;
            sg.y[sg.n] = y[i];
            sg.rows[sg.n] = w[i]->rows;
            sg.start[sg.n] = sg.total;
            sg.total += w[i]->rows;
        }
        rc = launch_matvec(c, w[i0], sg, xq, xd, NULL, 1, 1, NULL, err);
    }
    return rc;
}

extern "C" int cuda_matmul_int8(cuda_ctx *c, const cuda_qweight *w, const float *x, int64_t n, float *y,
                                wk_error *err)
{
    const int64_t K = w->cols;
    if (!cuda_mmq_supported(w->type) || K % cuda_act_group(w->type))
        return wk_fail(err, WK_EINVAL, "cuda: no int8 product for %s x %lld", qt_type_name(w->type), (long long)K);
    if (n <= CUDA_MATVEC_MAX_ROWS || n <= c->mmv_max_rows) return cuda_matmul(c, w, 0, x, n, y, err);
    int8_t *xq;
    float *xd;
    int rc = act_quantized(c, x, n, K, cuda_act_group(w->type), &xq, &xd, err);
    return rc ? rc : cuda_mmq(c, w, 0, xq, xd, n, y, err);
}

extern "C" int cuda_matmul(cuda_ctx *c, const cuda_qweight *w, int64_t mat, const float *x, int64_t n,
                           float *y, wk_error *err)
{
    const int64_t M = w->rows, K = w->cols;
    if (n <= 0) return 0;
    const bool quant = w->type != QT_F32 && w->type != QT_F16 && w->type != QT_BF16;
    if (w->type == QT_F32 && w->act_group) {
        /* dequantized on upload: round x as the original type's partner format */
        void *scr;
        int rc = cuda_ctx_scratch(c, (size_t)n * K * 4, &scr, err);
        if (rc) return rc;
        rc = round_act_f32(c, x, n, K, w->act_group, (float *)scr);
        if (rc) return wk_fail(err, rc, "cuda: rounding activations of a %lld-column matmul", (long long)K);
        x = (const float *)scr; /* the products below take no other scratch for F32 weights */
    }
    /* a few more rows than one matvec tile (continuous batching's decode steps): the tensor-core
     * matvec's tiles of 8 rows, each row as it would come out alone */
    const bool tc_tiles = n > c->mmv_max_rows && takes_tc(c, w, n);
    if (quant && !tc_tiles && n > c->mmv_max_rows && n > 1 && n <= c->mmq_max_rows && cuda_mmq_supported(w->type) &&
        K % 32 == 0 && (cuda_act_group(w->type) == 32 || K % 256 == 0)) {
        int8_t *xq;
        float *xd;
        int rc = act_quantized(c, x, n, K, cuda_act_group(w->type), &xq, &xd, err);
        return rc ? rc : cuda_mmq(c, w, mat, xq, xd, n, y, err);
    }
    if (n <= CUDA_MATVEC_MAX_ROWS || (quant && n <= c->mmv_max_rows) || tc_tiles) {
        if (!quant) {
            cuda_qweight one = *w;
            one.data = (uint8_t *)w->data + mat * w->mat_bytes;
            return cuda_matvec(c, &one, NULL, NULL, x, n, 1, NULL, y, err);
        }
        int8_t *xq;
        float *xd;
        int rc = act_quantized(c, x, n, K, cuda_act_group(w->type), &xq, &xd, err);
        if (rc) return rc;
        cuda_qweight one = *w;
        one.data = (uint8_t *)w->data + mat * w->mat_bytes;
        if (n > 1 && c->mmv_max_rows > 1)
            return takes_tc(c, w, n) ? cuda_matvec_tc(c, &one, xq, xd, n, y, 0, err)
                                                                    : cuda_matvec_nt(c, &one, xq, xd, n, y, err);
        return cuda_matvec(c, &one, xq, xd, NULL, n, 1, NULL, y, err);
    }
    cublasHandle_t h = (cublasHandle_t)c->cublas;
    const float alpha = 1.0f, beta = 0.0f;
    const uint8_t *W = (const uint8_t *)w->data + mat * w->mat_bytes;
    cublasStatus_t st;
    if (w->type == QT_F32) {
        st = cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)M, (int)n, (int)K, &alpha, (const float *)W,
                         (int)(w->row_bytes / 4), x, (int)K, &beta, y, (int)M);
    } else {
        /* F16 operands keep 11 mantissa bits of the dequantized weights and of
         * the activations (BF16 weights stay BF16) */
        const int bf = w->type == QT_BF16;
        size_t wbytes = quant ? (size_t)M * K * 2 : 0;
        void *scr;
        int rc = cuda_ctx_scratch(c, wbytes + (size_t)n * K * 2 + 256, &scr, err);
        if (rc) return rc;
        uint16_t *wb = (uint16_t *)scr;
        uint16_t *xb = (uint16_t *)((uint8_t *)scr + ((wbytes + 255) & ~(size_t)255));
        const void *A = W;
        int lda = (int)(w->row_bytes / 2);
        if (quant) {
            cuda_qweight one = *w;
            one.data = (void *)W;
            rc = launch_dequant(c, &one, W, M, NULL, wb, 0, err);
            if (rc) return rc;
            A = wb;
            lda = (int)K;
        }
        if (bf) {
            f32_to_16_kernel<1><<<cdiv(n * K, 256), 256, 0, c->stream>>>(x, n * K, xb);
        } else if (quant && K % 32 == 0) {
            /* round to the partner format first (Q8_K / Q8_0), as the matvec path does */
            const int64_t chunks = n * ((K + 255) / 256);
            if (cuda_act_group(w->type) == 256 && K % 256 == 0)
                quantize_act_kernel<256, true><<<cdiv(chunks, 8), 256, 0, c->stream>>>(x, n, K, NULL, NULL, (__half *)xb);
            else
                quantize_act_kernel<32, true><<<cdiv(chunks, 8), 256, 0, c->stream>>>(x, n, K, NULL, NULL, (__half *)xb);
        } else {
            f32_to_16_kernel<0><<<cdiv(n * K, 256), 256, 0, c->stream>>>(x, n * K, xb);
        }
        CU_CHECK_LAUNCH(err, "activation conversion");
        const cudaDataType_t dt = bf ? CUDA_R_16BF : CUDA_R_16F;
        st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)M, (int)n, (int)K, &alpha, A, dt, lda, xb, dt,
                          (int)K, &beta, y, CUDA_R_32F, (int)M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    }
    if (st != CUBLAS_STATUS_SUCCESS)
        return wk_fail(err, WK_EIO, "cuda: cuBLAS product %lldx%lldx%lld failed (status %d)", (long long)n,
                       (long long)M, (long long)K, (int)st);
    return 0;
}
