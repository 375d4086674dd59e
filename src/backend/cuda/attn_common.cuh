/* Device helpers shared by the attention kernels (attention.cu: prefill and
 * split-K decode; attention_decode.cu: tensor-core decode): the policy mask,
 * F16 tensor-core products, cp.async copies, Q8_0 cache rows. */
#ifndef WICK_BACKEND_CUDA_ATTN_COMMON_CUH
#define WICK_BACKEND_CUDA_ATTN_COMMON_CUH

#include "backend/cuda/cuda_common.cuh"

#define LOG2E 1.4426950408889634f

/* Q8_0 cache rows: bytes per row of D values (34-byte blocks: F16 scale, 32 codes) */
#define Q8_ROW_BYTES(D) ((D) / 32 * 34)

/* Whether key j is visible from query position p (causality checked by the caller). */
__device__ __forceinline__ bool mask_allows(const cuda_attn_mask m, int p, int j)
{
    return !m.approx || j < m.global || p - j < m.window || p >= m.dense_from;
}

/* Whether any query in [p0, p1] may see any key in [k0, k1] (k0 <= p1 assumed). */
__host__ __device__ __forceinline__ bool tile_needed(const cuda_attn_mask m, int p0, int p1, int k0, int k1)
{
    if (!m.approx || p1 >= m.dense_from || k0 < m.global) return true;
    int closest = p0 - k1; /* smallest p - j over the pairs; <= 0 when the tile touches the diagonal */
    return closest < m.window;
}

/* c += a·b, m16n8k16, F16 operands, F32 accumulators */
__device__ __forceinline__ void mma_16816(float *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi)
{
    __half2 h = __floats2half2_rn(lo, hi);
    return *(uint32_t *)&h;
}

/* 16-byte cp.async of n <= 16 source bytes, the rest zero-filled (n = 0: zeros) */
__device__ __forceinline__ void cp_async16_n(void *smem, const void *gmem, int n)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid)
{
    cp_async16_n(smem, gmem, valid ? 16 : 0);
}
__device__ __forceinline__ void cp_async4(void *smem, const void *gmem, bool valid)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    int n = valid ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t *r, const void *smem)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

/* Starts the copy of keys [k0, k0 + BK) of one head's F16 rows (D halves each) into
 * dst, rows padded to D + 8 halves (conflict-free fragment reads); rows from kend on
 * are zeros. THREADS threads share the work. */
template <int D, int BK, int THREADS>
__device__ __forceinline__ void load_f16_rows(__half *dst, const uint16_t *head, int k0, int kend)
{
    constexpr int LD = D + 8, CHUNKS = D / 8; /* 16-byte chunks per row */
#pragma unroll
    for (int c = threadIdx.x; c < BK * CHUNKS; c += THREADS) {
        const int r = c / CHUNKS, col = (c % CHUNKS) * 8;
        const bool valid = k0 + r < kend;
        cp_async16(dst + r * LD + col, head + (size_t)(valid ? k0 + r : 0) * D + col, valid);
    }
}

/* Starts the copy of the raw Q8_0 rows [k0, k0 + BK) of one head (contiguous) to raw
 * (16-byte aligned); rows from kend on come out as zeros (scale 0). BK rows are a
 * multiple of 16 bytes, so heads that start 16-byte aligned take 16-byte copies,
 * others (Q8_0 head strides need only be even) 4-byte copies (rows are multiples of 4
 * bytes). */
template <int D, int BK, int THREADS>
__device__ __forceinline__ void load_q8_rows(unsigned char *raw, const uint16_t *head, int k0, int kend)
{
    constexpr int R = Q8_ROW_BYTES(D), BYTES = BK * R;
    const unsigned char *src = (const unsigned char *)head + (size_t)k0 * R;
    const int valid = max(0, min(kend - k0, BK)) * R; /* bytes of rows < kend */
    if (((uintptr_t)src & 15) == 0) {
        for (int o = threadIdx.x * 16; o < BYTES; o += THREADS * 16)
            cp_async16_n(raw + o, src + (o < valid ? o : 0), max(0, min(16, valid - o)));
    } else {
        for (int o = threadIdx.x * 4; o < BYTES; o += THREADS * 4)
            cp_async4(raw + o, src + (o < valid ? o : 0), o < valid);
    }
}

/* Values col .. col+7 (col a multiple of 8) of a raw Q8_0 row as F16 (code × scale rounded
 * once), packed for one 16-byte store. The codes are 2-byte aligned only. */
__device__ __forceinline__ uint4 q8_row_f16x8(const unsigned char *row, int col)
{
    const unsigned char *blk = row + col / 32 * 34;
    const float sc = h2f(*(const uint16_t *)blk);
    const uint16_t *q = (const uint16_t *)(blk + 2 + col % 32);
    uint32_t w[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const uint16_t b = q[e];
        w[e] = pack_half2(sc * (float)(int8_t)(b & 0xff), sc * (float)(int8_t)(b >> 8));
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

#endif
