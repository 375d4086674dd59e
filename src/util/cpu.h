/* Run-time CPU feature table (immutable after first use; allowed global). */
#ifndef WICK_UTIL_CPU_H
#define WICK_UTIL_CPU_H

typedef struct wk_cpu_features {
    /* x86-64 (CPUID + XGETBV: the OS saves the registers) */
    int avx2, fma, f16c;
    int avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16;
    int avxvnni;
    int amx_int8, amx_bf16;
    /* AArch64 (Linux: getauxval; macOS: sysctl): Advanced SIMD, the Armv8.2
     * dot product (SDOT), the int8 matrix multiply (SMMLA) and half-precision
     * vector arithmetic. F16 <-> F32 conversion is part of plain NEON. */
    int neon, dotprod, i8mm, fp16;
} wk_cpu_features;

/* Detected features, optionally capped by the environment variable WICK_ISA
 * (for testing and benchmarking kernels): on x86-64 scalar|avx2|avx512, on
 * AArch64 scalar|neon|dotprod; each value keeps the features of that level
 * and below and turns the rest off. Unset or empty: no cap. A value that is
 * not a level of this architecture is ignored with a warning on the log. */
const wk_cpu_features *wk_cpu(void);

/* The best kernel level in effect: "avx512", "avx2", "dotprod", "neon" or
 * "scalar" (the names WICK_ISA takes). */
const char *wk_cpu_level_name(void);

#endif
