/* Run-time CPU feature table (immutable after first use; allowed global). */
#ifndef WICK_UTIL_CPU_H
#define WICK_UTIL_CPU_H

typedef struct wk_cpu_features {
    int avx2, fma, f16c;
    int avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16;
    int avxvnni;
    int amx_int8, amx_bf16;
} wk_cpu_features;

/* Detected features, optionally capped by the environment variable
 * WICK_ISA=scalar|avx2|avx512 (for testing and benchmarking kernels). */
const wk_cpu_features *wk_cpu(void);

/* "avx512", "avx2" or "scalar": the best kernel level in effect. */
const char *wk_cpu_level_name(void);

#endif
