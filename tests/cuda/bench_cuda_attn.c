/* Attention and Gated DeltaNet benchmarks (Qwen3.5-27B layer shapes), called
 * from bench_cuda's main. */
#include <math.h>
#include <string.h>

#include "cuda_test.h"

typedef void (*bench_fn)(void *ctx, int i);
typedef void (*add_fn)(const char *, double, double, double);
typedef double (*time_fn)(bench_fn, void *, int, int);

typedef struct { cuda_attn a; } at_ctx;
static void at_fn(void *p, int i)
{
    (void)i;
    wk_error err;
    if (cuda_attention(&g_ctx, &((at_ctx *)p)->a, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(2);
    }
}

/* Visible (query, key) pairs, for the FLOP count. */
static double visible_pairs(const cuda_attn *a)
{
    double n = 0;
    for (int i = 0; i < a->n_q; i++) {
        int p = a->q_pos0 + i;
        if (!a->mask.approx || p >= a->mask.dense_from) {
            n += p + 1;
            continue;
        }
        int g = a->mask.global < p + 1 ? a->mask.global : p + 1;
        int w0 = p - a->mask.window + 1; /* window keys: [w0, p] */
        if (w0 < g) w0 = g;
        n += g + (p - w0 + 1);
    }
    return n;
}

static void bench_attn_case(add_fn add, time_fn tm, const char *label, int n_q, int q_pos0, int approx)
{
    const int H = 24, Hkv = 4, D = 256;
    const int n_kv = q_pos0 + n_q;
    const size_t hs = (size_t)n_kv * D;
    at_ctx c;
    memset(&c, 0, sizeof c);
    uint64_t rng = 5;
    size_t nq = (size_t)n_q * H * D;
    float *q = malloc(sizeof(float) * nq);
    for (size_t i = 0; i < nq; i++) q[i] = ref_randn(&rng);
    uint16_t *kv = malloc(2 * hs * Hkv);
    for (size_t i = 0; i < hs * Hkv; i++) kv[i] = (uint16_t)(0x3000 + (ref_randf(&rng) * 0x0C00)); /* |x| < 1 halves */
    c.a.q = dev_upload(q, sizeof(float) * nq);
    c.a.q_stride = (size_t)H * D;
    c.a.n_q = n_q;
    c.a.q_pos0 = q_pos0;
    c.a.k = dev_upload(kv, 2 * hs * Hkv);
    c.a.v = dev_upload(kv, 2 * hs * Hkv);
    c.a.kv_head_stride = hs;
    c.a.n_kv = n_kv;
    c.a.n_head = H;
    c.a.n_head_kv = Hkv;
    c.a.d = D;
    c.a.scale = 1.0f / 16.0f;
    c.a.mask.approx = approx;
    c.a.mask.global = 8192;
    c.a.mask.window = 8192;
    c.a.mask.dense_from = approx ? 1 << 30 : 0;
    c.a.out = dev_alloc(sizeof(float) * nq);
    c.a.out_stride = (size_t)H * D;
    double ms = tm(at_fn, &c, 7, n_q > 8 ? 2 : 50);
    double flops = 4.0 * D * H * visible_pairs(&c.a);
    double bytes = n_q <= 8 ? 2.0 * 2 * Hkv * (double)n_kv * D : 0; /* decode: K and V read once */
    add(label, ms, bytes, bytes > 0 ? 0 : flops);
    cudaFree((void *)c.a.q); cudaFree((void *)c.a.k); cudaFree((void *)c.a.v); cudaFree(c.a.out);
    free(q);
    free(kv);
}

void bench_attention_all(add_fn add, time_fn tm)
{
    bench_attn_case(add, tm, "attn prefill 27B layer 4096 tok dense", 4096, 0, 0);
    bench_attn_case(add, tm, "attn prefill 27B layer 512 tok @32768 dense", 512, 32768, 0);
    bench_attn_case(add, tm, "attn prefill 27B layer 4096 tok @126976 dense", 4096, 126976, 0);
    bench_attn_case(add, tm, "attn prefill 27B layer 4096 tok @126976 approx 8K+8K", 4096, 126976, 1);
    /* decode: tensor cores (default), then the split-K kernel (cuda_attn_decode_kernel(0)) in the same process */
    static const int depths[] = {32768, 4096, 1024, 100};
    for (int kern = 1; kern >= 0; kern--) {
        const int prev = cuda_attn_decode_kernel(kern);
        for (int i = 0; i < (int)(sizeof depths / sizeof depths[0]); i++) {
            char label[96];
            snprintf(label, sizeof label, "attn decode 27B layer @%d %s (K+V GB/s)", depths[i], kern ? "tc" : "splitk");
            bench_attn_case(add, tm, label, 1, depths[i] - 1, 0);
        }
        cuda_attn_decode_kernel(prev);
    }
}

typedef struct { cuda_gdn g; int path; } gd_ctx;
static void gd_fn(void *p, int i)
{
    (void)i;
    wk_error err;
    if (cuda_gdn_scan_path(&g_ctx, &((gd_ctx *)p)->g, ((gd_ctx *)p)->path, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(2);
    }
}

/* path: as cuda_gdn_scan_path (0 auto, 2 token scan, 3 chunked, 4 chunked with the F32 state kernel) */
static void bench_gdn_case(add_fn add, time_fn tm, const char *label, int n_t, int path)
{
    const int n_hk = 16, n_hv = 48, d = 128;
    const size_t stride = (size_t)2 * n_hk * d + (size_t)n_hv * d;
    gd_ctx c;
    memset(&c, 0, sizeof c);
    c.path = path;
    uint64_t rng = 3;
    float *conv = malloc(sizeof(float) * n_t * stride);
    for (size_t i = 0; i < n_t * stride; i++) conv[i] = ref_randn(&rng);
    float *ab = malloc(sizeof(float) * n_t * n_hv);
    for (int i = 0; i < n_t * n_hv; i++) ab[i] = ref_randn(&rng);
    float av[48], dt[48];
    for (int j = 0; j < 48; j++) {
        av[j] = -1.0f;
        dt[j] = 0.0f;
    }
    float *dconv = dev_upload(conv, sizeof(float) * n_t * stride);
    float *dab = dev_upload(ab, sizeof(float) * n_t * n_hv);
    size_t st_n = (size_t)n_hv * d * d;
    float *st = calloc(st_n, sizeof(float));
    c.g = (cuda_gdn){dconv, dconv + n_hk * d, dconv + 2 * n_hk * d, stride, stride, dab, dab,
                     dev_upload(av, sizeof av), dev_upload(dt, sizeof dt), n_t, n_hk, n_hv, d, d, 1e-6f,
                     dev_upload(st, sizeof(float) * st_n), dev_alloc(sizeof(float) * n_t * n_hv * d),
                     (size_t)n_hv * d, {0, {0}}};
    double ms = tm(gd_fn, &c, 7, n_t > 1 ? 2 : 50);
    /* decode: state read + written once; prefill: report per-token rate via FLOPs (6 per state element) */
    double bytes = n_t == 1 ? 2.0 * st_n * 4 : 0;
    add(label, ms, bytes, bytes > 0 ? 0 : 6.0 * st_n * n_t);
    cudaFree(dconv); cudaFree(dab); cudaFree((void *)c.g.ssm_a); cudaFree((void *)c.g.dt_bias);
    cudaFree(c.g.state); cudaFree(c.g.out);
    free(conv); free(ab); free(st);
}

void bench_gdn_all(add_fn add, time_fn tm)
{
    bench_gdn_case(add, tm, "gdn decode 27B layer (state GB/s)", 1, 0);
    bench_gdn_case(add, tm, "gdn prefill 27B layer 512 tok, token scan", 512, 2);
    bench_gdn_case(add, tm, "gdn prefill 27B layer 512 tok, chunked", 512, 3);
    bench_gdn_case(add, tm, "gdn prefill 27B layer 4096 tok, token scan", 4096, 2);
    bench_gdn_case(add, tm, "gdn prefill 27B layer 4096 tok, chunked", 4096, 3);
    bench_gdn_case(add, tm, "gdn prefill 27B layer 4096 tok, chunked, F32 state kernel", 4096, 4);
}
