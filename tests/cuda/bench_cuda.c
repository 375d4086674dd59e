/* CUDA kernel benchmarks: the two ceilings (device copy bandwidth, cuBLAS
 * BF16 rate) and each kernel against them. Times are medians of CUDA-event
 * timings over rotating buffers larger than the L2 (weights never hit in L2).
 * usage: bench_cuda [quick | gdn | moe | nt | mv]  — prints a table last (gdn, moe, nt, mv: those rows only). */
#include <cublas_v2.h>
#include <math.h>
#include <string.h>

#include "cuda_test.h"
#include "quant/qtypes.h"

int g_failures = 0;
cuda_ctx g_ctx;

typedef struct row { char name[96]; double ms, gbs, tflops, frac; } row;
#define MAX_ROWS 512
static row g_rows[MAX_ROWS];
static int g_nrows;
static double g_copy_gbs = 0, g_bf16_tflops = 0;

static void add_row(const char *name, double ms, double bytes, double flops)
{
    if (g_nrows == MAX_ROWS) {
        fprintf(stderr, "bench_cuda: more than %d rows (raise MAX_ROWS)\n", MAX_ROWS);
        exit(2);
    }
    row *r = &g_rows[g_nrows++];
    snprintf(r->name, sizeof r->name, "%s", name);
    r->ms = ms;
    r->gbs = bytes > 0 ? bytes / ms / 1e6 : 0;
    r->tflops = flops > 0 ? flops / ms / 1e9 : 0;
    r->frac = bytes > 0 && g_copy_gbs > 0 ? r->gbs / g_copy_gbs : (flops > 0 && g_bf16_tflops > 0 ? r->tflops / g_bf16_tflops : 0);
    printf("%-56s %9.4f ms %8.1f GB/s %7.1f TFLOP/s %5.1f%%\n", r->name, r->ms, r->gbs, r->tflops, 100 * r->frac);
    fflush(stdout);
}

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Median over reps of the mean time of `inner` back-to-back calls of fn(i). */
typedef void (*bench_fn)(void *ctx, int i);
static double time_ms(bench_fn fn, void *ctx, int reps, int inner)
{
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < inner; i++) fn(ctx, i); /* warm-up */
    float t[64];
    if (reps > 64) reps = 64;
    int k = 0;
    for (int r = 0; r < reps; r++) {
        CK(cudaEventRecord(a, g_ctx.stream));
        for (int i = 0; i < inner; i++) fn(ctx, k++);
        CK(cudaEventRecord(b, g_ctx.stream));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&t[r], a, b));
        t[r] /= inner;
    }
    CK(cudaGetLastError());
    qsort(t, reps, sizeof t[0], cmp_f);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return t[reps / 2];
}

/* ---- ceilings ---- */
typedef struct { void *a, *b; size_t bytes; } copy_ctx;
static void copy_fn(void *p, int i)
{
    copy_ctx *c = p;
    (void)i;
    CK(cudaMemcpyAsync(c->b, c->a, c->bytes, cudaMemcpyDeviceToDevice, g_ctx.stream));
}

typedef struct { cublasHandle_t h; void *a, *b, *c; int n; } gemm_ctx;
static void gemm_fn(void *p, int i)
{
    gemm_ctx *g = p;
    (void)i;
    const float one = 1, zero = 0;
    cublasGemmEx(g->h, CUBLAS_OP_T, CUBLAS_OP_N, g->n, g->n, g->n, &one, g->a, CUDA_R_16BF, g->n, g->b,
                 CUDA_R_16BF, g->n, &zero, g->c, CUDA_R_16BF, g->n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}


static void fill_random_bf16(uint16_t *d, size_t n, uint64_t seed)
{
    uint16_t *h = malloc(n * 2);
    uint64_t rng = seed;
    for (size_t i = 0; i < n; i++) {
        float f = ref_randf(&rng);
        uint32_t u;
        memcpy(&u, &f, 4);
        h[i] = (uint16_t)(u >> 16);
    }
    CK(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
    free(h);
}

static void bench_ceilings(void)
{
    copy_ctx c = {0};
    c.bytes = (size_t)2 << 30;
    CK(cudaMalloc(&c.a, c.bytes));
    CK(cudaMalloc(&c.b, c.bytes));
    CK(cudaMemset(c.a, 1, c.bytes));
    double ms = time_ms(copy_fn, &c, 10, 2);
    g_copy_gbs = 2.0 * c.bytes / ms / 1e6;
    add_row("device copy 2 GiB (read+write)", ms, 2.0 * c.bytes, 0);
    cudaFree(c.a);
    cudaFree(c.b);

    gemm_ctx g = {0};
    g.n = 8192;
    g.h = (cublasHandle_t)g_ctx.cublas;
    size_t e = (size_t)g.n * g.n;
    CK(cudaMalloc(&g.a, e * 2));
    CK(cudaMalloc(&g.b, e * 2));
    CK(cudaMalloc(&g.c, e * 2));
    fill_random_bf16(g.a, e, 1);
    fill_random_bf16(g.b, e, 2);
    ms = time_ms(gemm_fn, &g, 10, 3);
    g_bf16_tflops = 2.0 * g.n * g.n * g.n / ms / 1e9;
    add_row("cuBLAS bf16 8192^3 (random data)", ms, 0, 2.0 * g.n * g.n * g.n);
    cudaFree(g.a);
    cudaFree(g.b);
    cudaFree(g.c);
}

/* ---- matvec ---- */
typedef struct {
    cuda_qweight w[16];
    int nw;
    int8_t *xq;
    float *xd, *xf, *y;
} mv_ctx;
static void mv_fn(void *p, int i)
{
    mv_ctx *m = p;
    wk_error err;
    if (cuda_matvec(&g_ctx, &m->w[i % m->nw], m->xq, m->xd, m->xf, 1, 1, NULL, m->y, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(2);
    }
}

/* Uploads copies of one random M×K weight into w[] until they hold at least min_bytes
 * (several times the 60 MB L2, so rotating over them never hits it), 2 to max copies.
 * Returns the count; *rb = the row bytes. */
static int upload_copies(uint32_t type, int64_t M, int64_t K, uint64_t *rng, size_t min_bytes, cuda_qweight *w,
                         int max, size_t *rb)
{
    *rb = (size_t)(K / ref_block_elems(type)) * ref_block_bytes(type);
    uint8_t *host = malloc(*rb * M);
    ref_random_blocks(type, host, K * M, rng);
    wk_error err;
    size_t total = 0;
    int n = 0;
    while ((total < min_bytes || n < 2) && n < max) {
        if (cuda_qw_upload(&g_ctx, &w[n], type, host, K, M, *rb, 1, *rb * M, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            exit(2);
        }
        total += w[n++].mat_bytes;
    }
    free(host);
    return n;
}

static void bench_matvec(uint32_t type, int64_t M, int64_t K, const char *label)
{
    mv_ctx m = {0};
    uint64_t rng = 7;
    size_t rb;
    m.nw = upload_copies(type, M, K, &rng, (size_t)600 << 20, m.w, 16, &rb);
    float *x = malloc(sizeof(float) * K);
    for (int64_t i = 0; i < K; i++) x[i] = ref_randn(&rng);
    m.xf = dev_upload(x, sizeof(float) * K);
    m.xq = dev_alloc(K);
    m.xd = dev_alloc(sizeof(float) * K / 32);
    m.y = dev_alloc(sizeof(float) * M);
    if (type != QT_F32 && type != QT_F16 && type != QT_BF16)
        OK(cuda_quantize_act(&g_ctx, m.xf, 1, K, cuda_act_group(type), m.xq, m.xd));
    double ms = time_ms(mv_fn, &m, 15, 40);
    char name[96];
    snprintf(name, sizeof name, "matvec %-6s %s %lldx%lld", qt_type_name(type), label, (long long)M, (long long)K);
    add_row(name, ms, (double)rb * M, 2.0 * M * K);
    for (int i = 0; i < m.nw; i++) cuda_qw_free(&m.w[i]);
    cudaFree(m.xf); cudaFree(m.xq); cudaFree(m.xd); cudaFree(m.y);
    free(x);
}

/* ---- prefill matmul ---- */
typedef struct { cuda_qweight w; float *x, *y; int64_t n; uint16_t *scratch; int what; } mm_ctx;
static void mm_fn(void *p, int i)
{
    mm_ctx *m = p;
    (void)i;
    wk_error err;
    int rc = m->what == 0 ? cuda_matmul(&g_ctx, &m->w, 0, m->x, m->n, m->y, &err)
                          : cuda_dequant_bf16(&g_ctx, &m->w, 0, m->scratch, &err);
    if (rc) {
        fprintf(stderr, "%s\n", err.msg);
        exit(2);
    }
}

static void bench_matmul(uint32_t type, int64_t M, int64_t K, int64_t n)
{
    mm_ctx m = {0};
    const size_t rb = (size_t)(K / ref_block_elems(type)) * ref_block_bytes(type);
    uint8_t *host = malloc(rb * M);
    uint64_t rng = 9;
    ref_random_blocks(type, host, K * M, &rng);
    wk_error err;
    if (cuda_qw_upload(&g_ctx, &m.w, type, host, K, M, rb, 1, rb * M, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(2);
    }
    float *x = malloc(sizeof(float) * K * n);
    for (int64_t i = 0; i < K * n; i++) x[i] = ref_randn(&rng);
    m.x = dev_upload(x, sizeof(float) * K * n);
    m.y = dev_alloc(sizeof(float) * M * n);
    m.n = n;
    m.scratch = dev_alloc((size_t)M * K * 2);
    char name[96];
    m.what = 1;
    double ms = time_ms(mm_fn, &m, 10, 5);
    snprintf(name, sizeof name, "dequant->16-bit %-6s %lldx%lld", qt_type_name(type), (long long)M, (long long)K);
    add_row(name, ms, (double)rb * M + 2.0 * M * K, 0);
    m.what = 0;
    ms = time_ms(mm_fn, &m, 10, 3);
    snprintf(name, sizeof name, "matmul %-6s n=%lld %lldx%lld (dequant+cuBLAS)", qt_type_name(type), (long long)n,
             (long long)M, (long long)K);
    add_row(name, ms, 0, 2.0 * n * M * K);
    cuda_qw_free(&m.w);
    cudaFree(m.x); cudaFree(m.y); cudaFree(m.scratch);
    free(host);
    free(x);
}

/* cuda_matmul on n rows (n small), weights rotated over copies larger than the L2 */
typedef struct { cuda_qweight w[8]; int nw; float *x, *y; int64_t n; } few_ctx;
static void few_fn(void *p, int i)
{
    few_ctx *m = p;
    wk_error err;
    cuda_ctx_act_invalidate(&g_ctx); /* quantize the rows each time, as a prompt chunk does */
    if (cuda_matmul(&g_ctx, &m->w[i % m->nw], 0, m->x, m->n, m->y, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(2);
    }
}

static void bench_matmul_few(uint32_t type, int64_t M, int64_t K, int64_t n, const char *label)
{
    few_ctx m = {0};
    uint64_t rng = 11;
    size_t rb;
    m.nw = upload_copies(type, M, K, &rng, (size_t)400 << 20, m.w, 8, &rb);
    float *x = malloc(sizeof(float) * K * n);
    for (int64_t i = 0; i < K * n; i++) x[i] = ref_randn(&rng);
    m.x = dev_upload(x, sizeof(float) * K * n);
    m.y = dev_alloc(sizeof(float) * M * n);
    m.n = n;
    double ms = time_ms(few_fn, &m, 10, 8);
    char name[96];
    snprintf(name, sizeof name, "matmul %-6s n=%lld %lldx%lld (%s)", qt_type_name(type), (long long)n, (long long)M,
             (long long)K, label);
    add_row(name, ms, (double)rb * M, 2.0 * n * M * K);
    for (int i = 0; i < m.nw; i++) cuda_qw_free(&m.w[i]);
    cudaFree(m.x);
    cudaFree(m.y);
    free(x);
}

__attribute__((weak)) void bench_attention_all(void (*add)(const char *, double, double, double),
                                               double (*tm)(bench_fn, void *, int, int));
__attribute__((weak)) void bench_gdn_all(void (*add)(const char *, double, double, double),
                                         double (*tm)(bench_fn, void *, int, int));
__attribute__((weak)) void bench_moe_all(void (*add)(const char *, double, double, double),
                                         double (*tm)(bench_fn, void *, int, int));

/* matvec variants, several-row products and prefill matmuls */
static void bench_matmuls(int quick)
{
    /* Qwen3.5-27B shapes: ffn up/gate 5120->17408, ffn down 17408->5120, vocab 5120->248320 */
    static const uint32_t types[] = {QT_Q4_K, QT_Q5_K, QT_Q6_K, QT_Q8_0, QT_Q4_0, QT_IQ4_NL, QT_F16};
    /* Q4_K: the sm_90 kernels (rows bulk-copied to shared memory) and the one every
     * architecture runs (WICK_CUDA_GENERIC=1) */
    const int hopper = g_ctx.sw.hopper;
    for (int v = hopper; v >= 0; v--) {
        g_ctx.sw.hopper = v;
        const char *lb = v ? "sm_90" : "generic";
        bench_matvec(QT_Q4_K, 17408, 5120, lb);
        bench_matvec(QT_Q4_K, 5120, 17408, lb);
        bench_matvec(QT_Q4_K, 5120, 6144, lb);
        bench_matvec(QT_Q4_K, 6144, 5120, lb);
        bench_matvec(QT_Q4_K, 10240, 5120, lb);
    }
    g_ctx.sw.hopper = hopper;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        bench_matvec(types[i], 17408, 5120, "ffn_up ");
        if (!quick) bench_matvec(types[i], 5120, 17408, "ffn_down");
    }
    if (!quick) bench_matvec(QT_Q6_K, 248320, 5120, "output");
    /* several rows: int8 matvec (dp4a), int8 tensor cores (mmq), dequant + cuBLAS */
    const int64_t mmv = g_ctx.mmv_max_rows, mmq = g_ctx.mmq_max_rows;
    static const int64_t few[] = {2, 8, 16, 64, 128, 512, 2048};
    for (size_t i = 0; i < sizeof few / sizeof few[0]; i++) {
        const int64_t n = few[i];
        if (n <= 8) {
            g_ctx.mmv_max_rows = 8;
            bench_matmul_few(QT_Q4_K, 17408, 5120, n, "int8 matvec");
        }
        g_ctx.mmv_max_rows = 1;
        g_ctx.mmq_max_rows = 1 << 20;
        bench_matmul_few(QT_Q4_K, 17408, 5120, n, "int8 mmq");
        bench_matmul_few(QT_Q6_K, 5120, 17408, n, "int8 mmq");
        if (n >= 64) bench_matmul_few(QT_Q8_0, 17408, 5120, n, "int8 mmq");
        g_ctx.mmq_max_rows = 0;
        g_ctx.mmv_max_rows = 0;
        bench_matmul_few(QT_Q4_K, 17408, 5120, n, n <= CUDA_MATVEC_MAX_ROWS ? "one row at a time" : "cuBLAS");
        bench_matmul_few(QT_Q6_K, 5120, 17408, n, n <= CUDA_MATVEC_MAX_ROWS ? "one row at a time" : "cuBLAS");
        if (n >= 64) bench_matmul_few(QT_Q8_0, 17408, 5120, n, "cuBLAS");
    }
    g_ctx.mmv_max_rows = mmv;
    g_ctx.mmq_max_rows = mmq;
    bench_matmul(QT_Q4_K, 17408, 5120, 512);
    bench_matmul(QT_Q4_K, 17408, 5120, 4096);
    if (!quick) bench_matmul(QT_Q6_K, 5120, 17408, 4096);
}

/* The few-row kernels alone on activations quantized once: kind 0 the one-row matvec
 * (n = 1), 1 the dp4a kernel (cuda_matvec_nt), 2 + w the tensor-core
 * kernel with w warps per 16 rows (0: its own pick). */
typedef struct { cuda_qweight w[8]; int nw; int8_t *xq; float *xd; float *y; int64_t n; int kind; } tc_ctx;
static void tc_fn(void *p, int i)
{
    tc_ctx *m = p;
    wk_error err;
    const cuda_qweight *w = &m->w[i % m->nw];
    int rc = m->kind == 0   ? cuda_matvec(&g_ctx, w, m->xq, m->xd, NULL, 1, 1, NULL, m->y, &err)
             : m->kind == 1 ? cuda_matvec_nt(&g_ctx, w, m->xq, m->xd, m->n, m->y, &err)
                            : cuda_matvec_tc(&g_ctx, w, m->xq, m->xd, m->n, m->y, m->kind - 2, &err);
    if (rc) {
        fprintf(stderr, "%s\n", err.msg);
        exit(2);
    }
}
/* Every few-row kernel on one weight shape (its copies uploaded once): the one-row matvec
 * (n = 1), the dp4a kernel (n ≤ 8), the tensor-core pick (stream-K where it takes the
 * shape, else the tile kernel) and the tile kernel with 4 and 8 warps per 16 rows. */
static void bench_tc(uint32_t type, int64_t M, int64_t K)
{
    static const int64_t rows[] = {1, 2, 5, 8, 16, 32};
    static const struct { int kind; const char *name; } kinds[] = {
        {0, "one row"}, {1, "dp4a"}, {2, "tensor cores, pick"}, {6, "tiles, 4 warps"}, {10, "tiles, 8 warps"}};
    tc_ctx m = {0};
    uint64_t rng = 11;
    size_t rb;
    const int64_t nmax = 32;
    m.nw = upload_copies(type, M, K, &rng, (size_t)400 << 20, m.w, 8, &rb);
    float *x = malloc(sizeof(float) * K * nmax);
    for (int64_t i = 0; i < K * nmax; i++) x[i] = ref_randn(&rng);
    float *dx = dev_upload(x, sizeof(float) * K * nmax);
    m.xq = dev_alloc(K * nmax);
    m.xd = dev_alloc(sizeof(float) * K / 32 * nmax);
    if (cuda_quantize_act(&g_ctx, dx, nmax, K, cuda_act_group(type), m.xq, m.xd)) exit(2);
    m.y = dev_alloc(sizeof(float) * M * nmax);
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            const int kind = kinds[k].kind;
            if ((kind == 0 && rows[r] != 1) || (kind == 1 && (rows[r] == 1 || rows[r] > 8))) continue;
            m.n = rows[r];
            m.kind = kind;
            double ms = time_ms(tc_fn, &m, 10, 8);
            char name[96];
            snprintf(name, sizeof name, "kernel %-6s n=%lld %lldx%lld (%s)", qt_type_name(type), (long long)rows[r],
                     (long long)M, (long long)K, kinds[k].name);
            add_row(name, ms, (double)rb * M, 2.0 * rows[r] * M * K);
        }
    for (int i = 0; i < m.nw; i++) cuda_qw_free(&m.w[i]);
    cudaFree(dx);
    cudaFree(m.xq);
    cudaFree(m.xd);
    cudaFree(m.y);
    free(x);
}

/* bench_cuda nt: products of 1, 2, 4 and 8 rows on the 27B's shapes through cuda_matmul
 * (the default kernels: tensor cores for Q4_K, cuda_matvec_nt's dp4a for the others)
 * against the one-row-per-warp kernel (WICK_CUDA_NT=0 WICK_CUDA_TC=0); a row's time
 * includes quantizing the activations. n = 1 is the one-row matvec. Then the Q4_K
 * kernels alone (bench_tc). */
static void bench_nt(void)
{
    static const struct { uint32_t type; int64_t M, K; } shapes[] = {
        {QT_Q4_K, 17408, 5120}, {QT_Q4_K, 5120, 17408}, {QT_Q6_K, 17408, 5120},
        {QT_Q6_K, 5120, 17408}, {QT_Q8_0, 17408, 5120}, {QT_Q4_K, 6144, 5120}};
    static const int64_t rows[] = {1, 2, 4, 8};
    const int nt = g_ctx.sw.nt, tc = g_ctx.sw.tc;
    const int64_t mmv = g_ctx.mmv_max_rows;
    g_ctx.mmv_max_rows = 8;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (size_t j = 0; j < sizeof rows / sizeof rows[0]; j++) {
            g_ctx.sw.nt = 1;
            bench_matmul_few(shapes[i].type, shapes[i].M, shapes[i].K, rows[j], rows[j] == 1 ? "one row" : "default kernels");
            if (rows[j] == 1) continue;
            g_ctx.sw.nt = 0;
            g_ctx.sw.tc = 0;
            bench_matmul_few(shapes[i].type, shapes[i].M, shapes[i].K, rows[j], "WICK_CUDA_NT=0 WICK_CUDA_TC=0");
            g_ctx.sw.tc = tc;
        }
    g_ctx.sw.nt = nt;
    g_ctx.mmv_max_rows = mmv;
    /* the kernels alone (bench_tc) */
    static const struct { uint32_t type; int64_t M, K; } tcs[] = {
        {QT_Q4_K, 17408, 5120}, {QT_Q4_K, 5120, 17408}, {QT_Q4_K, 6144, 5120}, {QT_Q4_K, 5120, 6144},
        {QT_Q4_K, 10240, 5120}, {QT_Q4_K, 48, 5120},    {QT_Q6_K, 17408, 5120}, {QT_Q6_K, 5120, 17408},
        {QT_Q6_K, 6144, 5120},  {QT_Q6_K, 248320, 5120}};
    for (size_t i = 0; i < sizeof tcs / sizeof tcs[0]; i++) bench_tc(tcs[i].type, tcs[i].M, tcs[i].K);
}

/* bench_cuda mv: one-row Q4_K products on the 27B's shapes, the default kernels
 * (cuda_matvec), the pipelined kernel with each split (items of 1 or 2 rows, rows whole or in
 * two pieces) and the tensor-core kernel at one row; activations quantized once. */
typedef struct { cuda_qweight w[8]; int nw; int8_t *xq; float *xd; float *y; int rows, pieces; } pipe_ctx;
static void pipe_fn(void *p, int i)
{
    pipe_ctx *m = p;
    wk_error err;
    const cuda_qweight *w = &m->w[i % m->nw];
    const int rc = m->rows == 0   ? cuda_matvec(&g_ctx, w, m->xq, m->xd, NULL, 1, 1, NULL, m->y, &err)
                   : m->rows < 0 ? cuda_matvec_tc(&g_ctx, w, m->xq, m->xd, 1, m->y, 0, &err)
                                 : cuda_matvec_q4k_pipe(&g_ctx, w, m->xq, m->xd, m->y, m->rows, m->pieces, &err);
    if (rc) {
        fprintf(stderr, "%s\n", err.msg);
        exit(2);
    }
}
static void bench_mv(void)
{
    static const int64_t shapes[][2] = {{17408, 5120}, {5120, 17408}, {10240, 5120}, {6144, 5120}, {5120, 6144}};
    static const struct { int rows, pieces; const char *name; } kinds[] = {
        {0, 0, "default"}, {1, 1, "pipe 1 row, whole"}, {2, 1, "pipe 2 rows, whole"},
        {1, 2, "pipe 1 row, 2 pieces"}, {2, 2, "pipe 2 rows, 2 pieces"}, {-1, 0, "tensor cores"}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t M = shapes[s][0], K = shapes[s][1];
        pipe_ctx m = {0};
        uint64_t rng = 13;
        size_t rb;
        m.nw = upload_copies(QT_Q4_K, M, K, &rng, (size_t)400 << 20, m.w, 8, &rb);
        float *x = malloc(sizeof(float) * K);
        for (int64_t i = 0; i < K; i++) x[i] = ref_randn(&rng);
        float *dx = dev_upload(x, sizeof(float) * K);
        m.xq = dev_alloc(K);
        m.xd = dev_alloc(sizeof(float) * K / 32);
        if (cuda_quantize_act(&g_ctx, dx, 1, K, 256, m.xq, m.xd)) exit(2);
        m.y = dev_alloc(sizeof(float) * M);
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            m.rows = kinds[k].rows;
            m.pieces = kinds[k].pieces;
            if (m.rows > 0 && !g_ctx.sw.hopper) continue;
            wk_error err;
            if (m.rows > 0 && cuda_matvec_q4k_pipe(&g_ctx, &m.w[0], m.xq, m.xd, m.y, m.rows, m.pieces, &err)) {
                printf("mv Q4_K %lldx%lld (%s): not taken (%s)\n", (long long)M, (long long)K, kinds[k].name, err.msg);
                continue;
            }
            double ms = time_ms(pipe_fn, &m, 15, 20);
            char name[96];
            snprintf(name, sizeof name, "mv Q4_K %lldx%lld (%s)", (long long)M, (long long)K, kinds[k].name);
            add_row(name, ms, (double)rb * M, 2.0 * M * K);
        }
        for (int i = 0; i < m.nw; i++) cuda_qw_free(&m.w[i]);
        cudaFree(dx); cudaFree(m.xq); cudaFree(m.xd); cudaFree(m.y);
        free(x);
    }
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    int only_gdn = argc > 1 && strcmp(argv[1], "gdn") == 0; /* bench_cuda gdn: the Gated DeltaNet rows only */
    int only_moe = argc > 1 && strcmp(argv[1], "moe") == 0; /* bench_cuda moe: the MoE rows only */
    int only_nt = argc > 1 && strcmp(argv[1], "nt") == 0; /* bench_cuda nt: the 1-8 row products only */
    int only_mv = argc > 1 && strcmp(argv[1], "mv") == 0; /* bench_cuda mv: the one-row Q4_K splits only */
    wk_error err = {0};
    if (cuda_ctx_init(&g_ctx, 0, &err)) {
        fprintf(stderr, "bench_cuda: %s\n", err.msg);
        return 2;
    }
    bench_ceilings();
    if (only_mv) {
        bench_mv();
    } else if (only_nt) {
        bench_nt();
    } else if (!only_gdn && !only_moe) {
        bench_matmuls(quick);
        if (bench_attention_all) bench_attention_all(add_row, time_ms);
    }
    if (bench_gdn_all && !only_moe && !only_nt && !only_mv) bench_gdn_all(add_row, time_ms);
    if (bench_moe_all && !only_gdn && !only_nt && !only_mv) bench_moe_all(add_row, time_ms);

    printf("\n%-56s %9s %10s %9s %6s\n", "kernel", "ms", "GB/s", "TFLOP/s", "%ceil");
    for (int i = 0; i < g_nrows; i++)
        printf("%-56s %9.4f %10.1f %9.1f %5.1f%%\n", g_rows[i].name, g_rows[i].ms, g_rows[i].gbs, g_rows[i].tflops,
               100 * g_rows[i].frac);
    printf("ceilings: copy %.0f GB/s (read+write), cuBLAS bf16 %.0f TFLOP/s; %%ceil = GB/s / copy or TFLOP/s / bf16\n",
           g_copy_gbs, g_bf16_tflops);
    cuda_ctx_free(&g_ctx);
    return 0;
}
