/* Decode-regime tile kernels, AVX-512 VNNI level (the kernels are in
 * matmul_decode_x86.h). */
#define DP_U8I8(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), (u), (s))
/* Up to 8 activation rows one weight row at a time, each weight block decoded once for all
 * of them, as on the AVX2 level: on the AMD EPYC with AVX-512 measured (Zen 4 class), rows
 * streamed side by side read far slower from memory (bench/matmul_bench -t 2 -m 131072 -k
 * 1024 --as-one, ms, 4 rows side by side → one: Q4_0 N=1 6.5 → 3.0, Q5_K 9.4 → 3.5, IQ4_NL
 * 6.4 → 3.0; in cache, N=4, one thread: Q5_K 0.100 → 0.048). The Intel AMX machine was not
 * measured again; the types it decodes most (Q8_0, Q4_K, Q6_K) take the packed kernels. */
#define GEMM_ONE_ROW_MAX_NA 8
#define GEMM_DECODE_SELECT cpu_gemm_decode_avx512
#include "backend/cpu/matmul_decode_x86.h"
