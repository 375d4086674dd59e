/* The Q8_K activation rule (llama.cpp's quantize_row_q8_K) over 256 values
 * held by one warp, 8 consecutive values per lane: shared by the activation
 * quantizer (matmul.cu) and the element-wise ops that quantize their output
 * for the next decode matmul (elementwise.cu), so that both round alike. */
#ifndef WICK_BACKEND_CUDA_ACTQ_CUH
#define WICK_BACKEND_CUDA_ACTQ_CUH

#include "backend/cuda/cuda_common.cuh"

/* q[8]: this lane's int8 codes; returns the block's scale d (x ≈ q·d). The
 * element of largest magnitude (first one on ties) sets the scale. */
__device__ __forceinline__ float q8k_warp(const float *v, int lane, int8_t *q)
{
    float amax = 0.0f, mx = 0.0f;
    int idx = 1 << 30;
#pragma unroll
    for (int i = 0; i < 8; i++)
        if (fabsf(v[i]) > amax) {
            amax = fabsf(v[i]);
            mx = v[i];
            idx = lane * 8 + i;
        }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float oa = __shfl_xor_sync(0xffffffffu, amax, o);
        float om = __shfl_xor_sync(0xffffffffu, mx, o);
        int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (oa > amax || (oa == amax && oi < idx)) {
            amax = oa;
            mx = om;
            idx = oi;
        }
    }
    if (amax == 0.0f) {
#pragma unroll
        for (int i = 0; i < 8; i++) q[i] = 0;
        return 0.0f;
    }
    const float iscale = -127.0f / mx;
#pragma unroll
    for (int i = 0; i < 8; i++) q[i] = (int8_t)min(127, __float2int_rn(iscale * v[i]));
    return 1.0f / iscale;
}

/* Stores a lane's 8 codes at element i0 of the quantized rows (xq) and the
 * scale once per 32 elements (xd), the layout cuda_matvec reads. */
__device__ __forceinline__ void q8_store(int8_t *xq, float *xd, int64_t i0, const int8_t *q, float d, int lane)
{
    uint2 packed;
    memcpy(&packed, q, 8);
    *(uint2 *)(xq + i0) = packed;
    if ((lane & 3) == 0) xd[i0 / 32] = d;
}

#endif
