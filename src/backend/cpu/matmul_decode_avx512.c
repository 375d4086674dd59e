/* Decode-regime tile kernels, AVX-512 VNNI level (the kernels are in
 * matmul_decode_x86.h). */
#define DP_U8I8(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), (u), (s))
#define GEMM_ONE_ROW_MAX_NA 0 /* always ROWS_MAX rows side by side */
#define GEMM_DECODE_SELECT cpu_gemm_decode_avx512
#include "backend/cpu/matmul_decode_x86.h"
