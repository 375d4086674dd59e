/* CPU feature detection per architecture and the WICK_ISA cap. */
#include "util/cpu.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

#if defined(__x86_64__)
#include <cpuid.h>
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#elif defined(__aarch64__) && defined(__APPLE__)
#include <sys/sysctl.h>
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

static void detect_arch(wk_cpu_features *f)
{
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
        f->avx2 = (b >> 5) & 1;
        f->fma = fma;
        f->f16c = f16c;
    }
    if (zmm_ok) {
        f->avx512f = (b >> 16) & 1;
        f->avx512dq = (b >> 17) & 1;
        f->avx512bw = (b >> 30) & 1;
        f->avx512vl = (b >> 31) & 1;
        f->avx512vnni = (c >> 11) & 1;
    }
    f->amx_bf16 = (d >> 22) & 1;
    f->amx_int8 = (d >> 25) & 1;
    unsigned a1, b1, c1, d1;
    if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) {
        f->avxvnni = ymm_ok && ((a1 >> 4) & 1);
        f->avx512bf16 = zmm_ok && ((a1 >> 5) & 1);
    }
}

static int cap_to_level(wk_cpu_features *f, const char *cap)
{
    if (strcmp(cap, "avx512") == 0) return 0;
    if (strcmp(cap, "avx2") != 0 && strcmp(cap, "scalar") != 0) return -1;
    f->avx512f = f->avx512bw = f->avx512vl = f->avx512dq = 0;
    f->avx512vnni = f->avx512bf16 = 0;
    f->amx_int8 = f->amx_bf16 = 0;
    if (strcmp(cap, "scalar") == 0) f->avx2 = f->fma = f->f16c = f->avxvnni = 0;
    return 0;
}
#define ARCH_LEVELS "scalar, avx2, avx512"

#elif defined(__aarch64__)
#if defined(__linux__)
/* Bits of AT_HWCAP / AT_HWCAP2 (the kernel's arch/arm64 uapi hwcap.h), spelled
 * out so that older C library headers do not matter. */
#define HWCAP_BIT_ASIMD (1UL << 1)
#define HWCAP_BIT_ASIMDHP (1UL << 10)
#define HWCAP_BIT_ASIMDDP (1UL << 20)
#define HWCAP2_BIT_I8MM (1UL << 13)

static void detect_arch(wk_cpu_features *f)
{
    unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    f->neon = (hw & HWCAP_BIT_ASIMD) != 0;
    f->fp16 = f->neon && (hw & HWCAP_BIT_ASIMDHP) != 0;
    f->dotprod = f->neon && (hw & HWCAP_BIT_ASIMDDP) != 0;
    f->i8mm = f->neon && (hw2 & HWCAP2_BIT_I8MM) != 0;
}
#elif defined(__APPLE__)
static int sysctl_flag(const char *name)
{
    int v = 0;
    size_t len = sizeof v;
    return sysctlbyname(name, &v, &len, NULL, 0) == 0 && v != 0;
}

static void detect_arch(wk_cpu_features *f)
{
    f->neon = 1; /* Advanced SIMD is part of every arm64 Apple CPU */
    f->dotprod = sysctl_flag("hw.optional.arm.FEAT_DotProd");
    f->i8mm = sysctl_flag("hw.optional.arm.FEAT_I8MM");
    f->fp16 = sysctl_flag("hw.optional.arm.FEAT_FP16");
}
#else
static void detect_arch(wk_cpu_features *f) { f->neon = 1; /* base ISA; extensions not probed here */ }
#endif

static int cap_to_level(wk_cpu_features *f, const char *cap)
{
    if (strcmp(cap, "dotprod") == 0) {
        f->i8mm = f->fp16 = 0;
        return 0;
    }
    if (strcmp(cap, "neon") != 0 && strcmp(cap, "scalar") != 0) return -1;
    f->dotprod = f->i8mm = f->fp16 = 0;
    if (strcmp(cap, "scalar") == 0) f->neon = 0;
    return 0;
}
#define ARCH_LEVELS "scalar, neon, dotprod"

#else
static void detect_arch(wk_cpu_features *f) { (void)f; }

static int cap_to_level(wk_cpu_features *f, const char *cap)
{
    (void)f;
    return strcmp(cap, "scalar") == 0 ? 0 : -1;
}
#define ARCH_LEVELS "scalar"
#endif

static void detect(void)
{
    memset(&g_cpu, 0, sizeof g_cpu);
    detect_arch(&g_cpu);
    const char *cap = getenv("WICK_ISA");
    if (cap && cap[0] && cap_to_level(&g_cpu, cap) != 0)
        WK_WARN("WICK_ISA=%s is not a kernel level of this CPU (" ARCH_LEVELS "): ignored", cap);
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
    if (f->neon && f->dotprod) return "dotprod";
    if (f->neon) return "neon";
    return "scalar";
}
