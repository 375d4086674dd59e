/* Instruction counts of the CPU kernels, scalar against the vector levels of
 * this build (scripts/kernel-insns.sh runs it under qemu and counts the
 * instructions executed between kernel_insns_begin and kernel_insns_end for
 * each line this program prints). Emulated time is not a speed; executed
 * instructions are a proxy that ignores latency, memory and issue width.
 * Prints "BEGIN_AT <addr> END_AT <addr>", then one "KERNEL <name> <level>
 * <elements>" line per measured call, in call order. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_vec.h"
#include "quant/quant.h"
#include "util/argmax.h"
#include "util/cpu.h"

/* The markers: never inlined, so their first instruction is one address. */
__attribute__((noinline)) void kernel_insns_begin(void) { __asm__ volatile("" ::: "memory"); }
__attribute__((noinline)) void kernel_insns_end(void) { __asm__ volatile("" ::: "memory"); }

static uint64_t g_rng = 7;

static float rnd(void)
{
    g_rng = g_rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((g_rng >> 40) & 0xFFFFFF) / 16777216.0f * 2.0f - 1.0f;
}

static float *randv(size_t n)
{
    float *p = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) p[i] = rnd();
    return p;
}

static volatile float g_sink;

static void measure_dot(enum qt_type type, const char *name, int64_t n)
{
    float *x = randv((size_t)n);
    void *w = malloc(qt_row_bytes(qt_traits_of(type), n));
    void *a = malloc(qt_act_row_bytes(type, n));
    qt_quantize_row(type, x, w, n);
    for (int64_t i = 0; i < n; i++) x[i] = rnd();
    qt_quantize_act(type, x, a, n);
    static const struct {
        enum qt_isa isa;
        const char *name;
    } levels[] = {{QT_ISA_SCALAR, "scalar"}, {QT_ISA_AVX2, "avx2"},  {QT_ISA_AVX512, "avx512"},
                  {QT_ISA_NEON, "neon"},     {QT_ISA_DOTPROD, "dotprod"}};
    for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++) {
        qt_vec_dot_fn fn = qt_vec_dot_isa(type, levels[l].isa);
        if (!fn) continue;
        float s;
        fn(n, &s, w, a); /* warm: first-touch page faults stay outside */
        printf("KERNEL dot_%s %s %lld\n", name, levels[l].name, (long long)n);
        kernel_insns_begin();
        fn(n, &s, w, a);
        kernel_insns_end();
        g_sink = s;
    }
    free(x);
    free(w);
    free(a);
}

/* One call of each vector-table op on shapes of the golden and real models. */
static void measure_vec(const cpu_vec_fns *v)
{
    enum { N = 4096, D = 128, NK = 32, RP = 16 };
    float *a = randv(N), *b = randv(N), *y = randv(N);
    uint16_t *h = malloc(sizeof(uint16_t) * N);
    float *S = randv((size_t)D * D), *q = randv(D), *k = randv(D), *vv = randv(D), *o = randv(D);
    float *kt = randv((size_t)NK * D), *vt = randv((size_t)NK * D), *qt = randv((size_t)D * RP);
    float *st = randv((size_t)NK * RP), *acc = randv((size_t)RP * D);
    float m[RP], l[RP], corr[RP];
    for (int r = 0; r < RP; r++) m[r] = 0.5f, l[r] = 1.0f, corr[r] = 1.0f;
    for (int i = 0; i < D * D; i++) S[i] *= 0.1f;

#define MEASURE(name, elems, call)                                                                         \
    do {                                                                                                   \
        printf("KERNEL %s %s %d\n", name, v->level, (int)(elems));                                        \
        kernel_insns_begin();                                                                              \
        call;                                                                                              \
        kernel_insns_end();                                                                                \
    } while (0)

    MEASURE("vec_dot", N, g_sink = v->dot(a, b, N));
    MEASURE("axpy", N, v->axpy(y, 0.5f, a, N));
    MEASURE("f32_to_f16", N, v->f32_to_f16(h, a, N));
    MEASURE("f16_to_f32", N, v->f16_to_f32(y, h, N));
    MEASURE("axpy_h", N, v->axpy_h(y, 0.5f, a, N));
    MEASURE("swiglu", N, v->swiglu(y, a, b, N));
    MEASURE("silu", N, v->silu(y, a, N));
    MEASURE("sumsq", N, g_sink = (float)v->sumsq(a, N));
    MEASURE("rope_neox", N, v->rope_neox(y, a, b, N / 2));
    MEASURE("gdn_step_128x128", D * D, v->gdn_step(S, D, D, D, q, k, vv, 0.9f, 0.5f, o));
    v->round_h(q, q, D);
    float m1 = -INFINITY, l1 = 0;
    MEASURE("attn_row_h_32keys_d128", NK * D, v->attn_row_h(q, kt, vt, NK, D, D, 0.088f, &m1, &l1, acc));
    MEASURE("attn_qk_32keys_16rows_d128", NK * RP * D, v->attn_qk(st, kt, NK, D, qt, RP, 0.088f));
    MEASURE("attn_softmax_32keys_16rows", NK * RP, v->attn_softmax(st, NK, RP, m, l, corr));
    MEASURE("attn_pv_32keys_16rows_d128", NK * RP * D, v->attn_pv(acc, st, NK, RP, RP, vt, D, corr));
#undef MEASURE
    free(a), free(b), free(y), free(h), free(S), free(q), free(k), free(vv), free(o);
    free(kt), free(vt), free(qt), free(st), free(acc);
}

int main(void)
{
    printf("BEGIN_AT %p END_AT %p\n", (void *)(uintptr_t)kernel_insns_begin, (void *)(uintptr_t)kernel_insns_end);
    static const struct {
        enum qt_type type;
        const char *name;
    } types[] = {{QT_F32, "f32"},   {QT_F16, "f16"},   {QT_BF16, "bf16"}, {QT_Q4_0, "q4_0"}, {QT_Q8_0, "q8_0"},
                 {QT_Q2_K, "q2_K"}, {QT_Q3_K, "q3_K"}, {QT_Q4_K, "q4_K"}, {QT_Q5_K, "q5_K"}, {QT_Q6_K, "q6_K"}};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) measure_dot(types[t].type, types[t].name, 4096);
    measure_vec(&cpu_vec_scalar);
    const cpu_vec_fns *best = cpu_vec_select(2);
    if (best != &cpu_vec_scalar) measure_vec(best);
    float *x = randv(32768);
    printf("KERNEL argmax scalar 32768\n");
    kernel_insns_begin();
    g_sink = (float)wk_argmax_f32_scalar(x, 32768);
    kernel_insns_end();
    printf("KERNEL argmax %s 32768\n", best->level);
    kernel_insns_begin();
    g_sink = (float)wk_argmax_f32(x, 32768);
    kernel_insns_end();
    free(x);
    fflush(stdout);
    return 0;
}
