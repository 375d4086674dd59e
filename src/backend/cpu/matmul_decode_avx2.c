/* Decode-regime tile kernels, AVX2 level (the kernels are in
 * matmul_decode_x86.h). Byte products: VPMADDUBSW sums pairs into int16
 * (u ≤ 128, |s| ≤ 127 at every use: at most 32,512, no saturation), then
 * VPMADDWD by ones sums the pairs into int32 lanes: the lanes VPDPBUSD gives. */
#define DP_U8I8(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1))
#define GEMM_DECODE_SELECT cpu_gemm_decode_avx2
#include "backend/cpu/matmul_decode_x86.h"
