/* Gated DeltaNet gate formulas shared by the token scan (deltanet.cu) and the
 * chunked prefill (deltanet_chunked.cu), so both paths round alike. */
#ifndef WICK_CUDA_DELTANET_CUH
#define WICK_CUDA_DELTANET_CUH

#include <math.h>

/* ln(1 + e^x) as ggml writes it: x itself past 20 (expf would overflow) */
__device__ __forceinline__ float gdn_softplus(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

/* log-decay g = A · softplus(α + dt_bias) of value head j at input row ix = t · n_hv + j */
__device__ __forceinline__ float gdn_log_decay(const float *alpha, const float *ssm_a, const float *dt_bias,
                                               size_t ix, int j)
{
    return ssm_a[j] * gdn_softplus(alpha[ix] + dt_bias[j]);
}

__device__ __forceinline__ float gdn_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

#endif
