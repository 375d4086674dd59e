/* Decode-regime tile kernels, AVX2 level (the kernels are in
 * matmul_decode_x86.h). Byte products: VPMADDUBSW sums pairs into int16
 * (u ≤ 128, |s| ≤ 127 at every use: at most 32,512, no saturation), then
 * VPMADDWD by ones sums the pairs into int32 lanes: the lanes VPDPBUSD gives. */
#define DP_U8I8(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1))
/* Up to 8 activation rows (decode steps of up to 8 sequences, speculative verification)
 * one weight row at a time, each weight block decoded once for all of them: on the AMD EPYC (Zen, AVX2 only) this was measured on, rows streamed side by side
 * read slower than one sequential stream (bench/matmul_bench -t 1 -m 32768 -k 1024, ms per
 * call, rows side by side 1 / 2 / 4: Q8_0 N=1 2.8 / 5.1 / 4.6, N=4 6.6 / 8.1 / 10.2; Q6_K
 * N=1 2.6 / 4.3 / 5.4). Prefill tiles (weights in cache) take 4 side by side: pp256 of the
 * qwen3-0.6b Q8_0 shape 42 tok/s against 34 with one. */
#define GEMM_ONE_ROW_MAX_NA 8
#define GEMM_DECODE_SELECT cpu_gemm_decode_avx2
#include "backend/cpu/matmul_decode_x86.h"
