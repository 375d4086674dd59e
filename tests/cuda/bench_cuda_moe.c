/* MoE prefill on the Qwen3.5-35B-A3B layer shape (n_embd 2048, 256 experts of n_ff 512
 * plus the shared one, 8 slots per token): the int8 grouped path (moe.cu + mmq.cu, what
 * the backend runs) against the floor of any dequantize-to-BF16 path: cuBLAS BF16 products
 * per expert on weights dequantized beforehand (the dequantization and the SwiGLU between
 * the products not timed), over the same routing. `bench_cuda moe` prints these rows alone. */
#include <cublas_v2.h>
#include <string.h>

#include "cuda_test.h"
#include "quant/qtypes.h"

typedef void (*add_fn)(const char *, double, double, double);
typedef void (*bench_fn)(void *ctx, int i);
typedef double (*time_fn)(bench_fn, void *, int, int);

#define E 2048
#define F 512
#define X 256 /* routed experts; matrix X of a pack is the shared expert */
#define K_SLOTS 8

typedef struct {
    cuda_qweight g, u, d; /* packs of X + 1 matrices */
    int64_t n_t, P;
    int32_t *ids;      /* device [n_t][K_SLOTS] */
    float *w, *logit;  /* device */
    float *x, *out;    /* device [n_t][E] */
    int8_t *xq, *hq;
    float *xd, *hd, *G, *U, *Y;
    void *plan_buf;
    /* cuBLAS: BF16 copies of every matrix, activations sorted by expert, rows per expert */
    uint16_t *wgu, *wd, *xs, *hs;
    float *cy;
    int cnt[X + 1];
} moe_bench;

static void int8_fn(void *p, int i)
{
    (void)i;
    moe_bench *m = p;
    wk_error err = {0};
    cuda_moe_plan pl;
    OK(cuda_quantize_act(&g_ctx, m->x, m->n_t, E, 256, m->xq, m->xd));
    OK(cuda_moe_sort(&g_ctx, m->ids, m->n_t, K_SLOTS, K_SLOTS + 1, X + 1, m->P < 48 * (X + 1) ? 32 : 64, m->plan_buf,
                     &pl));
    const uint8_t *sg = (const uint8_t *)m->g.data + X * m->g.mat_bytes;
    const uint8_t *su = (const uint8_t *)m->u.data + X * m->u.mat_bytes;
    const uint8_t *sd = (const uint8_t *)m->d.data + X * m->d.mat_bytes;
    cuda_qweight g = m->g, u = m->u, d = m->d;
    g.n_mat = u.n_mat = d.n_mat = X; /* matrix X rides along as the extra one */
    OK(cuda_mmq_grouped(&g_ctx, &g, &u, sg, su, &pl, 1, m->xq, m->xd, m->G, m->U, &err));
    OK(cuda_moe_glu_quant(&g_ctx, m->G, m->U, F, m->P, F, 256, m->hq, m->hd));
    OK(cuda_mmq_grouped(&g_ctx, &d, NULL, sd, NULL, &pl, 0, m->hq, m->hd, m->Y, NULL, &err));
    OK(cuda_moe_combine(&g_ctx, m->out, m->Y, pl.pos, m->w, m->logit, m->n_t, K_SLOTS, K_SLOTS + 1, E));
}

static void cublas_fn(void *p, int i)
{
    (void)i;
    moe_bench *m = p;
    cublasHandle_t h = (cublasHandle_t)g_ctx.cublas;
    const float one = 1.0f, zero = 0.0f;
    int64_t row = 0;
    for (int e = 0; e <= X; e++) {
        const int n = m->cnt[e];
        if (!n) continue;
        /* gate|up: [n × 2F] = x_e [n × E] · W_guᵀ; down: [n × E] = h_e [n × F] · W_dᵀ */
        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 2 * F, n, E, &one, m->wgu + (size_t)e * 2 * F * E, CUDA_R_16BF, E,
                     m->xs + (size_t)row * E, CUDA_R_16BF, E, &zero, m->cy, CUDA_R_32F, 2 * F, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT);
        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, E, n, F, &one, m->wd + (size_t)e * E * F, CUDA_R_16BF, F,
                     m->hs + (size_t)row * F, CUDA_R_16BF, F, &zero, m->cy, CUDA_R_32F, E, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT);
        row += n;
    }
}

static void bench_shape(int64_t n_t, add_fn add, time_fn tm)
{
    moe_bench m;
    memset(&m, 0, sizeof m);
    uint64_t rng = 17 + (uint64_t)n_t;
    m.n_t = n_t;
    m.P = n_t * (K_SLOTS + 1);
    wk_error err = {0};
    /* one random matrix repeated over the packs (nb2 = 0): the bytes moved are a real pack's */
    const size_t rgu = (size_t)(E / 256) * 144, rd = (size_t)(F / 256) * 144;
    uint8_t *hg = malloc(rgu * F), *hd = malloc(rd * E);
    ref_random_blocks(QT_Q4_K, hg, (int64_t)E * F, &rng);
    ref_random_blocks(QT_Q4_K, hd, (int64_t)F * E, &rng);
    OK(cuda_qw_upload(&g_ctx, &m.g, QT_Q4_K, hg, E, F, rgu, X + 1, 0, &err));
    OK(cuda_qw_upload(&g_ctx, &m.u, QT_Q4_K, hg, E, F, rgu, X + 1, 0, &err));
    OK(cuda_qw_upload(&g_ctx, &m.d, QT_Q4_K, hd, F, E, rd, X + 1, 0, &err));
    /* routing: 8 distinct experts per token, uniform */
    int32_t *ids = malloc(sizeof(int32_t) * n_t * K_SLOTS);
    float *w = malloc(sizeof(float) * n_t * K_SLOTS), *x = malloc(sizeof(float) * n_t * E);
    for (int64_t t = 0; t < n_t; t++) {
        for (int j = 0; j < K_SLOTS; j++) {
            int e, dup;
            do {
                e = (int)((ref_randf(&rng) + 1.0f) * 0.5f * X) % X;
                dup = 0;
                for (int q = 0; q < j; q++) dup |= ids[t * K_SLOTS + q] == e;
            } while (dup);
            ids[t * K_SLOTS + j] = e;
            w[t * K_SLOTS + j] = 0.125f;
            m.cnt[e]++;
        }
        m.cnt[X]++;
    }
    for (int64_t i = 0; i < n_t * E; i++) x[i] = ref_randn(&rng);
    m.ids = dev_upload(ids, sizeof(int32_t) * n_t * K_SLOTS);
    m.w = dev_upload(w, sizeof(float) * n_t * K_SLOTS);
    m.logit = dev_alloc(sizeof(float) * n_t);
    CK(cudaMemset(m.logit, 0, sizeof(float) * n_t));
    m.x = dev_upload(x, sizeof(float) * n_t * E);
    m.out = dev_alloc(sizeof(float) * n_t * E);
    m.xq = dev_alloc((size_t)n_t * E);
    m.xd = dev_alloc(sizeof(float) * n_t * E / 32);
    m.hq = dev_alloc((size_t)m.P * F);
    m.hd = dev_alloc(sizeof(float) * m.P * F / 32);
    m.G = dev_alloc(sizeof(float) * m.P * F);
    m.U = dev_alloc(sizeof(float) * m.P * F);
    m.Y = dev_alloc(sizeof(float) * m.P * E);
    m.plan_buf = dev_alloc(cuda_moe_plan_bytes(m.P, X + 1, 64));
    const double flops = 2.0 * m.P * (2.0 * F * E + (double)F * E);
    const double wbytes = (double)(X + 1) * (2 * m.g.mat_bytes + m.d.mat_bytes);
    char name[96];
    snprintf(name, sizeof name, "moe 35B-A3B layer, %lld tokens: int8 grouped", (long long)n_t);
    add(name, tm(int8_fn, &m, 10, 3), wbytes, flops);

    /* the BF16 floor: every matrix dequantized (untimed), the products per expert */
    m.wgu = dev_alloc((size_t)(X + 1) * 2 * F * E * 2);
    m.wd = dev_alloc((size_t)(X + 1) * E * F * 2);
    for (int e = 0; e <= X; e++) {
        OK(cuda_dequant_bf16(&g_ctx, &m.g, e, m.wgu + (size_t)e * 2 * F * E, &err));
        OK(cuda_dequant_bf16(&g_ctx, &m.u, e, m.wgu + (size_t)e * 2 * F * E + (size_t)F * E, &err));
        OK(cuda_dequant_bf16(&g_ctx, &m.d, e, m.wd + (size_t)e * E * F, &err));
    }
    m.xs = dev_alloc((size_t)m.P * E * 2);
    m.hs = dev_alloc((size_t)m.P * F * 2);
    CK(cudaMemset(m.xs, 0x3C, (size_t)m.P * E * 2)); /* BF16 ≈ 0.011: finite, nonzero */
    CK(cudaMemset(m.hs, 0x3C, (size_t)m.P * F * 2));
    m.cy = dev_alloc(sizeof(float) * E * (size_t)n_t); /* one expert's products at a time (E >= 2F) */
    snprintf(name, sizeof name, "moe 35B-A3B layer, %lld tokens: cuBLAS BF16 per expert", (long long)n_t);
    add(name, tm(cublas_fn, &m, 10, 3), (double)(X + 1) * 3 * F * E * 2, flops);

    cuda_qw_free(&m.g); cuda_qw_free(&m.u); cuda_qw_free(&m.d);
    cudaFree(m.ids); cudaFree(m.w); cudaFree(m.logit); cudaFree(m.x); cudaFree(m.out); cudaFree(m.xq);
    cudaFree(m.xd); cudaFree(m.hq); cudaFree(m.hd); cudaFree(m.G); cudaFree(m.U); cudaFree(m.Y);
    cudaFree(m.plan_buf); cudaFree(m.wgu); cudaFree(m.wd); cudaFree(m.xs); cudaFree(m.hs); cudaFree(m.cy);
    free(hg); free(hd); free(ids); free(w); free(x);
}

void bench_moe_all(add_fn add, time_fn tm)
{
    bench_shape(512, add, tm);
    bench_shape(4096, add, tm);
}
