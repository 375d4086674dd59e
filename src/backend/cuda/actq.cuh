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

/* The Q8_0 rule (quantize_row_q8_0) for a lane's 8 values, 4 lanes per 32-element
 * group: q[8] the codes; returns the group's scale as stored (rounded to F16). */
__device__ __forceinline__ float q8_0_lanes(const float *v, int8_t *q)
{
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) amax = fmaxf(amax, fabsf(v[i]));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) q[i] = (int8_t)roundf(v[i] * id);
    return __half2float(__float2half_rn(d)); /* the dot product uses the stored F16 scale */
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
