#include "util/cpu.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

static wk_cpu_features g_cpu;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__)
static unsigned long long xgetbv0(void)
{
    unsigned eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}
#endif

static void detect(void)
{
    memset(&g_cpu, 0, sizeof g_cpu);
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    int osxsave = (c >> 27) & 1;
    int fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    if (!osxsave) return;
    unsigned long long xcr0 = xgetbv0();
    int ymm_ok = (xcr0 & 0x6) == 0x6;
    int zmm_ok = (xcr0 & 0xe6) == 0xe6;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    if (ymm_ok) {
        g_cpu.avx2 = (b >> 5) & 1;
        g_cpu.fma = fma;
        g_cpu.f16c = f16c;
    }
    if (zmm_ok) {
        g_cpu.avx512f = (b >> 16) & 1;
        g_cpu.avx512dq = (b >> 17) & 1;
        g_cpu.avx512bw = (b >> 30) & 1;
        g_cpu.avx512vl = (b >> 31) & 1;
        g_cpu.avx512vnni = (c >> 11) & 1;
    }
    g_cpu.amx_bf16 = (d >> 22) & 1;
    g_cpu.amx_int8 = (d >> 25) & 1;
    unsigned a1, b1, c1, d1;
    if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) {
        g_cpu.avxvnni = ymm_ok && ((a1 >> 4) & 1);
        g_cpu.avx512bf16 = zmm_ok && ((a1 >> 5) & 1);
    }
    const char *cap = getenv("WICK_ISA");
    if (cap && (strcmp(cap, "avx2") == 0 || strcmp(cap, "scalar") == 0)) {
        g_cpu.avx512f = g_cpu.avx512bw = g_cpu.avx512vl = g_cpu.avx512dq = 0;
        g_cpu.avx512vnni = g_cpu.avx512bf16 = 0;
        g_cpu.amx_int8 = g_cpu.amx_bf16 = 0;
        if (strcmp(cap, "scalar") == 0) g_cpu.avx2 = g_cpu.fma = g_cpu.f16c = g_cpu.avxvnni = 0;
    }
#endif
}

const wk_cpu_features *wk_cpu(void)
{
    pthread_once(&g_once, detect);
    return &g_cpu;
}

const char *wk_cpu_level_name(void)
{
    const wk_cpu_features *f = wk_cpu();
    if (f->avx512f && f->avx512bw && f->avx512vl) return "avx512";
    if (f->avx2 && f->fma) return "avx2";
    return "scalar";
}
