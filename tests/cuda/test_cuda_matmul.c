/* Quantized matvec / matmul / get_rows against the CPU reference on random blocks. */
#include <math.h>
#include <string.h>

#include "cuda_test.h"
#include "quant/qtypes.h"

static const uint32_t k_types[] = {QT_Q4_K, QT_Q5_K, QT_Q6_K, QT_Q8_0, QT_Q4_0, QT_IQ4_NL,
                                   QT_F16, QT_BF16, QT_F32};

/* y[s] = W[e_s] · x[s / per_x] in double from float rows. */
static void ref_matvec(const float *wf, int64_t M, int64_t K, const float *x, int64_t n_slots, int64_t per_x,
                       const int32_t *ids, float *y)
{
    for (int64_t s = 0; s < n_slots; s++) {
        const float *W = wf + (ids ? ids[s] : 0) * M * K;
        const float *xs = x + (s / per_x) * K;
        for (int64_t r = 0; r < M; r++) {
            double acc = 0;
            for (int64_t i = 0; i < K; i++) acc += (double)W[r * K + i] * xs[i];
            y[s * M + r] = (float)acc;
        }
    }
}

static void test_matvec_type(uint32_t type, int64_t M, int64_t K, int n_mat, int n_slots, int per_x, uint64_t seed)
{
    uint64_t rng = seed;
    const int64_t be = ref_block_elems(type), bb = ref_block_bytes(type);
    const size_t row_bytes = (size_t)(K / be) * bb;
    uint8_t *w = malloc(row_bytes * M * n_mat);
    ref_random_blocks(type, w, K * M * n_mat, &rng);
    float *wf = malloc(sizeof(float) * M * K * n_mat);
    for (int64_t r = 0; r < M * n_mat; r++) ref_dequant_row(type, w + r * row_bytes, wf + r * K, K);
    const int64_t n_x = (n_slots + per_x - 1) / per_x;
    float *x = malloc(sizeof(float) * K * n_x), *xr = malloc(sizeof(float) * K * n_x);
    for (int64_t i = 0; i < K * n_x; i++) x[i] = ref_randn(&rng);
    int32_t ids[64];
    for (int s = 0; s < n_slots; s++) ids[s] = (int32_t)((s * 7 + 3) % n_mat);
    const int quant = type != QT_F32 && type != QT_F16 && type != QT_BF16;
    const int group = cuda_act_group(type);
    for (int64_t r = 0; r < n_x; r++) {
        if (quant) ref_round_act(x + r * K, xr + r * K, K, group);
        else memcpy(xr + r * K, x + r * K, sizeof(float) * K);
    }
    float *yref = malloc(sizeof(float) * M * n_slots), *yraw = malloc(sizeof(float) * M * n_slots);
    float *y = malloc(sizeof(float) * M * n_slots);
    ref_matvec(wf, M, K, xr, n_slots, per_x, n_mat > 1 ? ids : NULL, yref);
    ref_matvec(wf, M, K, x, n_slots, per_x, n_mat > 1 ? ids : NULL, yraw);

    wk_error err = {0};
    cuda_qweight qw;
    if (cuda_qw_upload(&g_ctx, &qw, type, w, K, M, row_bytes, n_mat, row_bytes * M, &err)) {
        fprintf(stderr, "upload: %s\n", err.msg);
        exit(2);
    }
    float *dx = dev_upload(x, sizeof(float) * K * n_x);
    int8_t *dxq = dev_alloc(K * n_x);
    float *dxd = dev_alloc(sizeof(float) * K / 32 * n_x);
    int32_t *dids = dev_upload(ids, sizeof ids);
    float *dy = dev_alloc(sizeof(float) * M * n_slots);
    if (quant) OK(cuda_quantize_act(&g_ctx, dx, n_x, K, group, dxq, dxd));
    if (cuda_matvec(&g_ctx, &qw, dxq, dxd, dx, n_slots, per_x, n_mat > 1 ? dids : NULL, dy, &err)) {
        fprintf(stderr, "matvec: %s\n", err.msg);
        exit(2);
    }
    dev_download(y, dy, sizeof(float) * M * n_slots);
    char name[128];
    snprintf(name, sizeof name, "matvec %s M=%lld K=%lld experts=%d slots=%d/%d%s", qt_type_name(type),
             (long long)M, (long long)K, n_mat, n_slots, per_x, g_ctx.sw.hopper ? "" : " (generic)");
    check_err(name, ref_rel_err(y, yref, M * n_slots), 2e-5);
    snprintf(name, sizeof name, "matvec %s vs unrounded activations", qt_type_name(type));
    check_err(name, ref_rel_err(y, yraw, M * n_slots), quant ? 2e-2 : 2e-5);

    /* prefill path: n = 67 rows through dequant + cuBLAS (single matrix) */
    if (n_mat == 1) {
        const int64_t n = 67;
        float *xb = malloc(sizeof(float) * K * n), *yb = malloc(sizeof(float) * M * n), *yb_ref = malloc(sizeof(float) * M * n);
        for (int64_t i = 0; i < K * n; i++) xb[i] = ref_randn(&rng);
        /* quantized weights: activations are rounded to the partner format first */
        float *xbr = malloc(sizeof(float) * K * n);
        for (int64_t r = 0; r < n; r++) {
            if (quant) ref_round_act(xb + r * K, xbr + r * K, K, group);
            else memcpy(xbr + r * K, xb + r * K, sizeof(float) * K);
        }
        ref_matvec(wf, M, K, xbr, n, 1, NULL, yb_ref);
        free(xbr);
        float *dxb = dev_upload(xb, sizeof(float) * K * n), *dyb = dev_alloc(sizeof(float) * M * n);
        cuda_ctx_act_invalidate(&g_ctx);
        if (cuda_matmul(&g_ctx, &qw, 0, dxb, n, dyb, &err)) {
            fprintf(stderr, "matmul: %s\n", err.msg);
            exit(2);
        }
        dev_download(yb, dyb, sizeof(float) * M * n);
        snprintf(name, sizeof name, "matmul (tensor cores) %s n=%lld M=%lld K=%lld", qt_type_name(type),
                 (long long)n, (long long)M, (long long)K);
        /* F16 operands: 2^-11 relative rounding per operand; BF16 weights+acts 2^-8 */
        check_err(name, ref_rel_err(yb, yb_ref, M * n), type == QT_BF16 ? 8e-3 : type == QT_F32 ? 1e-5 : 2e-3);

        /* get_rows: 5 rows gathered, dequantized to F32 */
        int32_t rows[5] = {(int32_t)(M - 1), 0, 3, (int32_t)(M / 2), 3};
        int32_t *drows = dev_upload(rows, sizeof rows);
        float *dg = dev_alloc(sizeof(float) * 5 * K), *g = malloc(sizeof(float) * 5 * K), *gref = malloc(sizeof(float) * 5 * K);
        for (int i = 0; i < 5; i++) memcpy(gref + i * K, wf + rows[i] * K, sizeof(float) * K);
        if (cuda_get_rows(&g_ctx, &qw, drows, 5, dg, &err)) {
            fprintf(stderr, "get_rows: %s\n", err.msg);
            exit(2);
        }
        dev_download(g, dg, sizeof(float) * 5 * K);
        snprintf(name, sizeof name, "get_rows %s", qt_type_name(type));
        check_err(name, ref_rel_err(g, gref, 5 * K), 1e-6);
        cudaFree(drows);
        cudaFree(dg);
        free(g);
        free(gref);
        cudaFree(dxb);
        cudaFree(dyb);
        free(xb);
        free(yb);
        free(yb_ref);
    }
    cuda_qw_free(&qw);
    cudaFree(dx);
    cudaFree(dxq);
    cudaFree(dxd);
    cudaFree(dids);
    cudaFree(dy);
    free(w);
    free(wf);
    free(x);
    free(xr);
    free(yref);
    free(yraw);
    free(y);
}

/* A quantized weight (M × K, random blocks) and n random activation rows on the device, the
 * reference products on rounded activations (yref), room for two results (y, y1). */
typedef struct {
    int64_t M, K, n;
    int group;
    cuda_qweight qw;
    float *dx, *dy, *dxd;
    int8_t *dxq;
    float *yref, *y, *y1;
} rows_case;

static rows_case rows_case_make(uint32_t type, int64_t M, int64_t K, int64_t n, uint64_t seed)
{
    rows_case c = {.M = M, .K = K, .n = n, .group = cuda_act_group(type)};
    uint64_t rng = seed;
    const size_t row_bytes = (size_t)(K / ref_block_elems(type)) * ref_block_bytes(type);
    uint8_t *w = malloc(row_bytes * M);
    ref_random_blocks(type, w, K * M, &rng);
    float *wf = malloc(sizeof(float) * M * K);
    for (int64_t r = 0; r < M; r++) ref_dequant_row(type, w + r * row_bytes, wf + r * K, K);
    float *x = malloc(sizeof(float) * K * n), *xr = malloc(sizeof(float) * K * n);
    for (int64_t i = 0; i < K * n; i++) x[i] = ref_randn(&rng);
    for (int64_t r = 0; r < n; r++) ref_round_act(x + r * K, xr + r * K, K, c.group);
    c.yref = malloc(sizeof(float) * M * n);
    c.y = malloc(sizeof(float) * M * n);
    c.y1 = malloc(sizeof(float) * M * n);
    ref_matvec(wf, M, K, xr, n, 1, NULL, c.yref);
    wk_error err = {0};
    if (cuda_qw_upload(&g_ctx, &c.qw, type, w, K, M, row_bytes, 1, row_bytes * M, &err)) {
        fprintf(stderr, "upload: %s\n", err.msg);
        exit(2);
    }
    c.dx = dev_upload(x, sizeof(float) * K * n);
    c.dy = dev_alloc(sizeof(float) * M * n);
    c.dxq = dev_alloc(K * n);
    c.dxd = dev_alloc(sizeof(float) * K / 32 * n);
    free(w);
    free(wf);
    free(x);
    free(xr);
    return c;
}

static void rows_case_free(rows_case *c)
{
    cuda_qw_free(&c->qw);
    cudaFree(c->dx);
    cudaFree(c->dy);
    cudaFree(c->dxq);
    cudaFree(c->dxd);
    free(c->yref);
    free(c->y);
    free(c->y1);
}

static void check_rc(int rc, const char *what, const wk_error *err)
{
    if (rc) {
        fprintf(stderr, "%s: %s\n", what, err->msg);
        exit(2);
    }
}

/* cuda_matmul on n rows with int8 activations (cuda_matvec_nt or _tc up to
 * cuda_ctx.mmv_max_rows, cuda_matvec_tc up to CUDA_MMV_TC_MAX_ROWS where it has the type, then
 * cuda_mmq on tensor cores): against the reference on rounded activations, and for
 * the matvec path bit for bit against one-row matvecs of the same rows (a prompt row
 * gets what a decode step would). */
static void test_matvec_rows(uint32_t type, int64_t M, int64_t K, int64_t n, uint64_t seed)
{
    rows_case c = rows_case_make(type, M, K, n, seed);
    wk_error err = {0};
    /* dx may reuse the address of a freed input of the same shape: drop the cached
     * quantized rows (the backend does this after every op that writes memory) */
    cuda_ctx_act_invalidate(&g_ctx);
    check_rc(cuda_matmul(&g_ctx, &c.qw, 0, c.dx, n, c.dy, &err), "matmul", &err);
    dev_download(c.y, c.dy, sizeof(float) * M * n);
    OK(cuda_quantize_act(&g_ctx, c.dx, n, K, c.group, c.dxq, c.dxd));
    for (int64_t t = 0; t < n; t++)
        check_rc(cuda_matvec(&g_ctx, &c.qw, c.dxq + t * K, c.dxd + t * (K / 32), NULL, 1, 1, NULL, c.dy + t * M, &err),
                 "matvec", &err);
    dev_download(c.y1, c.dy, sizeof(float) * M * n);
    char name[128];
    snprintf(name, sizeof name, "matmul int8 rows %s n=%lld M=%lld K=%lld", qt_type_name(type), (long long)n,
             (long long)M, (long long)K);
    check_err(name, ref_rel_err(c.y, c.yref, M * n), 2e-5);
    const int tc = g_ctx.sw.tc && cuda_matvec_tc_supported(type, K); /* equal up to rounding there */
    if (n <= g_ctx.mmv_max_rows && !tc) {
        snprintf(name, sizeof name, "matmul int8 rows %s n=%lld = one-row matvecs (bit for bit)", qt_type_name(type),
                 (long long)n);
        check_err(name, memcmp(c.y, c.y1, sizeof(float) * M * n) ? 1.0 : 0.0, 0.0);
    } else {
        snprintf(name, sizeof name, "matmul int8 rows %s n=%lld vs one-row matvecs", qt_type_name(type), (long long)n);
        check_err(name, ref_rel_err(c.y, c.y1, M * n), 2e-5);
    }
    rows_case_free(&c);
}

/* cuda_matvec_tc with `warps` warps per 16 weight rows on n activation rows: against the
 * reference on rounded activations, and each row bit for bit what a product of that row
 * alone gives (an mma column does not depend on the others). */
static void test_matvec_tc(uint32_t type, int64_t M, int64_t K, int64_t n, int warps, uint64_t seed)
{
    rows_case c = rows_case_make(type, M, K, n, seed);
    wk_error err = {0};
    OK(cuda_quantize_act(&g_ctx, c.dx, n, K, c.group, c.dxq, c.dxd));
    check_rc(cuda_matvec_tc(&g_ctx, &c.qw, c.dxq, c.dxd, n, c.dy, warps, &err), "matvec_tc", &err);
    dev_download(c.y, c.dy, sizeof(float) * M * n);
    for (int64_t t = 0; t < n; t++)
        check_rc(cuda_matvec_tc(&g_ctx, &c.qw, c.dxq + t * K, c.dxd + t * (K / 32), 1, c.dy + t * M, warps, &err),
                 "matvec_tc", &err);
    dev_download(c.y1, c.dy, sizeof(float) * M * n);
    char name[128];
    snprintf(name, sizeof name, "matvec tensor cores %s n=%lld M=%lld K=%lld warps=%d", qt_type_name(type),
             (long long)n, (long long)M, (long long)K, warps);
    check_err(name, ref_rel_err(c.y, c.yref, M * n), 2e-5);
    snprintf(name, sizeof name, "matvec tensor cores %s n=%lld warps=%d = each row alone (bit for bit)",
             qt_type_name(type), (long long)n, warps);
    check_err(name, memcmp(c.y, c.y1, sizeof(float) * M * n) ? 1.0 : 0.0, 0.0);
    rows_case_free(&c);
}

/* cuda_matmul_rows_multi on five Q4_K weights and n activation rows: the first four make one
 * stream-K product (the 48-row ones inside it), the fifth (33 rows) takes the tile kernel.
 * Each output against the reference on rounded activations, and each activation row bit for
 * bit what cuda_matvec_tc_multi gives for that row alone. */
static void test_matmul_rows_multi(int64_t K, int64_t n, uint64_t seed)
{
    const uint32_t type = QT_Q4_K;
    enum { NW = 5 };
    static const int64_t k_m[NW] = {9000, 48, 4100, 48, 33};
    uint64_t rng = seed;
    const size_t row_bytes = (size_t)(K / ref_block_elems(type)) * ref_block_bytes(type);
    float *x = malloc(sizeof(float) * K * n), *xr = malloc(sizeof(float) * K * n);
    for (int64_t i = 0; i < K * n; i++) x[i] = ref_randn(&rng);
    for (int64_t r = 0; r < n; r++) ref_round_act(x + r * K, xr + r * K, K, cuda_act_group(type));
    float *dx = dev_upload(x, sizeof(float) * K * n);
    int8_t *dxq = dev_alloc(K * n);
    float *dxd = dev_alloc(sizeof(float) * K / 32 * n);
    cuda_qweight qw[NW];
    const cuda_qweight *qp[NW];
    float *dy[NW], *dy1[NW], *yref[NW];
    wk_error err = {0};
    for (int i = 0; i < NW; i++) {
        uint8_t *w = malloc(row_bytes * k_m[i]);
        ref_random_blocks(type, w, K * k_m[i], &rng);
        float *wf = malloc(sizeof(float) * k_m[i] * K);
        for (int64_t r = 0; r < k_m[i]; r++) ref_dequant_row(type, w + r * row_bytes, wf + r * K, K);
        yref[i] = malloc(sizeof(float) * k_m[i] * n);
        ref_matvec(wf, k_m[i], K, xr, n, 1, NULL, yref[i]);
        if (cuda_qw_upload(&g_ctx, &qw[i], type, w, K, k_m[i], row_bytes, 1, row_bytes * k_m[i], &err)) {
            fprintf(stderr, "upload: %s\n", err.msg);
            exit(2);
        }
        free(w);
        free(wf);
        qp[i] = &qw[i];
        dy[i] = dev_alloc(sizeof(float) * k_m[i] * n);
        dy1[i] = dev_alloc(sizeof(float) * k_m[i] * n);
    }
    cuda_ctx_act_invalidate(&g_ctx);
    check_rc(cuda_matmul_rows_multi(&g_ctx, qp, dy, NW, dx, n, &err), "matmul rows multi", &err);
    OK(cuda_quantize_act(&g_ctx, dx, n, K, cuda_act_group(type), dxq, dxd));
    for (int64_t t = 0; t < n; t++) {
        float *yt[NW];
        for (int i = 0; i < NW; i++) yt[i] = dy1[i] + t * k_m[i];
        check_rc(cuda_matvec_tc_multi(&g_ctx, qp, yt, NW, dxq + t * K, dxd + t * (K / 32), 1, &err), "matvec_tc_multi",
                 &err);
    }
    double worst = 0.0;
    int same = 1;
    for (int i = 0; i < NW; i++) {
        float *a = malloc(sizeof(float) * k_m[i] * n), *b = malloc(sizeof(float) * k_m[i] * n);
        dev_download(a, dy[i], sizeof(float) * k_m[i] * n);
        dev_download(b, dy1[i], sizeof(float) * k_m[i] * n);
        const double e = ref_rel_err(a, yref[i], k_m[i] * n);
        if (e > worst) worst = e;
        same &= !memcmp(a, b, sizeof(float) * k_m[i] * n);
        free(a);
        free(b);
        cuda_qw_free(&qw[i]);
        cudaFree(dy[i]);
        cudaFree(dy1[i]);
        free(yref[i]);
    }
    char name[128];
    snprintf(name, sizeof name, "matmul rows multi Q4_K x5 n=%lld K=%lld%s", (long long)n, (long long)K,
             g_ctx.sw.hopper ? "" : " (generic)");
    check_err(name, worst, 2e-5);
    snprintf(name, sizeof name, "matmul rows multi Q4_K x5 n=%lld = each row alone (bit for bit)", (long long)n);
    check_err(name, same ? 0.0 : 1.0, 0.0);
    cudaFree(dx);
    cudaFree(dxq);
    cudaFree(dxd);
    free(x);
    free(xr);
}

/* cuda_matvec_multi on n weights (rows 1, 300, 77, 4100, ...) = cuda_matmul of each, bit for bit. */
/* The pipelined Q4_K matvec (sm_90) with each split, bit for bit against the kernel whose
 * arithmetic it keeps: whole rows (1 piece) = the one-row kernel every architecture runs,
 * two pieces = the two-warp kernel cuda_matvec gives long rows of several slots (here two
 * slots of the same activations); items of 1 and 2 rows
 * (odd M refused for 2); M past the machine's warps wraps each warp around its buffers. */
static void test_matvec_pipe(int64_t M, int64_t K, uint64_t seed)
{
    uint64_t rng = seed;
    const size_t row_bytes = (size_t)(K / 256) * 144;
    uint8_t *w = malloc(row_bytes * M);
    ref_random_blocks(QT_Q4_K, w, K * M, &rng);
    wk_error err = {0};
    cuda_qweight qw;
    if (cuda_qw_upload(&g_ctx, &qw, QT_Q4_K, w, K, M, row_bytes, 1, row_bytes * M, &err)) {
        fprintf(stderr, "upload: %s\n", err.msg);
        exit(2);
    }
    free(w);
    float *x = malloc(sizeof(float) * K);
    for (int64_t i = 0; i < K; i++) x[i] = ref_randn(&rng);
    float *dx = dev_upload(x, sizeof(float) * K), *dy = dev_alloc(sizeof(float) * M * 2);
    int8_t *dxq = dev_alloc(K);
    float *dxd = dev_alloc(sizeof(float) * K / 32);
    OK(cuda_quantize_act(&g_ctx, dx, 1, K, 256, dxq, dxd));
    float *ref1 = malloc(sizeof(float) * M), *ref2 = malloc(sizeof(float) * M), *y = malloc(sizeof(float) * M);
    const int hopper = g_ctx.sw.hopper;
    g_ctx.sw.hopper = 0;
    OK(cuda_matvec(&g_ctx, &qw, dxq, dxd, NULL, 1, 1, NULL, dy, &err));
    dev_download(ref1, dy, sizeof(float) * M);
    g_ctx.sw.hopper = hopper;
    const int long_rows = row_bytes > 4096 && (K / 256) % 2 == 0; /* two slots: two warps a row */
    if (long_rows) {
        OK(cuda_matvec(&g_ctx, &qw, dxq, dxd, NULL, 2, 2, NULL, dy, &err));
        dev_download(ref2, dy, sizeof(float) * M);
    }
    for (int rows = 1; rows <= 2; rows++)
        for (int pieces = 1; pieces <= 2; pieces++) {
            if (pieces == 2 && !long_rows) continue;
            char name[128];
            snprintf(name, sizeof name, "pipelined matvec Q4_K %lldx%lld, %d-row items, %d piece(s) = %s (bit for bit)",
                     (long long)M, (long long)K, rows, pieces, pieces == 1 ? "one-row kernel" : "two-warp kernel");
            cudaMemset(dy, 0xFF, sizeof(float) * M);
            const int rc = cuda_matvec_q4k_pipe(&g_ctx, &qw, dxq, dxd, dy, rows, pieces, &err);
            if (M % rows) {
                snprintf(name, sizeof name, "pipelined matvec Q4_K refuses %lld rows in %d-row items", (long long)M, rows);
                check_err(name, rc == 0 ? 1.0 : 0.0, 0.0);
                continue;
            }
            OK(rc);
            dev_download(y, dy, sizeof(float) * M);
            check_err(name, memcmp(y, pieces == 1 ? ref1 : ref2, sizeof(float) * M) ? 1.0 : 0.0, 0.0);
        }
    cuda_qw_free(&qw);
    cudaFree(dx); cudaFree(dy); cudaFree(dxq); cudaFree(dxd);
    free(x); free(ref1); free(ref2); free(y);
}

static void test_matvec_multi(uint32_t type, int64_t K, int n, uint64_t seed)
{
    uint64_t rng = seed;
    const size_t row_bytes = (size_t)(K / ref_block_elems(type)) * ref_block_bytes(type);
    static const int64_t k_m[] = {1, 300, 77, 4100, 33, 8};
    cuda_qweight qw[6];
    const cuda_qweight *qp[6];
    float *dy[6], *dy1[6];
    int64_t total = 0;
    wk_error err = {0};
    for (int i = 0; i < n; i++) {
        uint8_t *w = malloc(row_bytes * k_m[i]);
        ref_random_blocks(type, w, K * k_m[i], &rng);
        if (cuda_qw_upload(&g_ctx, &qw[i], type, w, K, k_m[i], row_bytes, 1, row_bytes * k_m[i], &err)) {
            fprintf(stderr, "upload: %s\n", err.msg);
            exit(2);
        }
        free(w);
        qp[i] = &qw[i];
        dy[i] = dev_alloc(sizeof(float) * k_m[i]);
        dy1[i] = dev_alloc(sizeof(float) * k_m[i]);
        total += k_m[i];
    }
    float *x = malloc(sizeof(float) * K);
    for (int64_t i = 0; i < K; i++) x[i] = ref_randn(&rng);
    float *dx = dev_upload(x, sizeof(float) * K);
    cuda_ctx_act_invalidate(&g_ctx);
    OK(cuda_matvec_multi(&g_ctx, qp, dy, n, dx, &err));
    for (int i = 0; i < n; i++) OK(cuda_matmul(&g_ctx, qp[i], 0, dx, 1, dy1[i], &err));
    float *a = malloc(sizeof(float) * total), *b = malloc(sizeof(float) * total);
    for (int i = 0, off = 0; i < n; off += (int)k_m[i], i++) {
        dev_download(a + off, dy[i], sizeof(float) * k_m[i]);
        dev_download(b + off, dy1[i], sizeof(float) * k_m[i]);
    }
    char name[128];
    snprintf(name, sizeof name, "matvec %d weights in one launch %s K=%lld%s = one by one", n, qt_type_name(type),
             (long long)K, g_ctx.sw.hopper ? "" : " (generic)");
    check_err(name, memcmp(a, b, sizeof(float) * total) ? 1.0 : 0.0, 0.0);
    for (int i = 0; i < n; i++) {
        cuda_qw_free(&qw[i]);
        cudaFree(dy[i]);
        cudaFree(dy1[i]);
    }
    cudaFree(dx);
    free(x); free(a); free(b);
}

void test_matmul_all(void)
{
    static const uint32_t k_qtypes[] = {QT_Q4_K, QT_Q5_K, QT_Q6_K, QT_Q8_0, QT_Q4_0, QT_IQ4_NL};
    static const int64_t k_rows[] = {2, 5, 8, 13, 64, CUDA_MMV_TC_MAX_ROWS};
    for (size_t i = 0; i < sizeof k_qtypes / sizeof k_qtypes[0]; i++)
        for (size_t j = 0; j < sizeof k_rows / sizeof k_rows[0]; j++)
            test_matvec_rows(k_qtypes[i], j % 2 ? 77 : 160, 2048 + 256 * (int64_t)j, k_rows[j], 700 + 10 * i + j);
    /* the several-row kernel's warps of 4 and 2 weight rows (cuda_matvec_nt picks them by
     * M: 4 while M/4 warps fill a wave of 16 per SM), M not a multiple of a block's rows, K
     * not a multiple of a warp's blocks; and the kernel it replaced (WICK_CUDA_NT=0) */
    const int64_t wave = 16 * (int64_t)g_ctx.sm_count;
    for (size_t i = 0; i < 4; i++) { /* Q4_K, Q5_K, Q6_K, Q8_0 */
        test_matvec_rows(k_qtypes[i], 4 * wave + 37, 2048, 8, 780 + i);
        test_matvec_rows(k_qtypes[i], 2 * wave + 5, 2304, 3, 790 + i);
    }
    const int nt = g_ctx.sw.nt, tc = g_ctx.sw.tc;
    g_ctx.sw.tc = 0; /* the dp4a kernels for every type, bit for bit against one-row products */
    test_matvec_rows(QT_Q4_K, 160, 2048, 8, 798);
    test_matvec_rows(QT_Q4_K, 4 * wave + 37, 2048, 8, 797);
    test_matvec_rows(QT_Q6_K, 2 * wave + 5, 2304, 3, 796);
    g_ctx.sw.nt = 0;
    test_matvec_rows(QT_Q4_K, 160, 2048, 5, 799);
    g_ctx.sw.nt = nt;
    g_ctx.sw.tc = tc;
    /* tensor cores: the pick and the tile kernel with 4 and 8 warps per 16 rows; M not a
     * multiple of 16, K of 1 to 20 blocks (fewer blocks than warps), 1 to 8 rows and more than
     * 8 (two column tiles); then Q4_K shapes the pick gives to stream-K: ranges over several
     * whole tiles, tiles split over two or three warps, 8 and 32 rows (slices of 8) */
    static const int k_warps[] = {0, 4, 8};
    static const uint32_t k_tc[] = {QT_Q4_K, QT_Q6_K};
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < 3; i++) {
            const uint64_t seed = 810 + 100 * t + 10 * i;
            test_matvec_tc(k_tc[t], 77, 2048, 8, k_warps[i], seed);
            test_matvec_tc(k_tc[t], 300, 256, 3, k_warps[i], seed + 1);
            test_matvec_tc(k_tc[t], 16, 5120, 1, k_warps[i], seed + 2);
            test_matvec_tc(k_tc[t], 1000, 256 * 13, 5, k_warps[i], seed + 3);
            test_matvec_tc(k_tc[t], 40, 1024, 19, k_warps[i], seed + 4);
            test_matvec_tc(k_tc[t], 2000 + 3, 2560, 32, k_warps[i], seed + 5);
        }
    test_matvec_tc(QT_Q4_K, 40000 + 5, 2048, 8, 0, 870);
    test_matvec_tc(QT_Q4_K, 14000 + 3, 5120, 32, 0, 871);
    /* tensor-core int8 products past one 64-row tile, rows past a 64-row block, and (32-element
     * types) K not a multiple of the 256-element chunk */
    const int64_t mmq = g_ctx.mmq_max_rows;
    g_ctx.mmq_max_rows = 1 << 20;
    for (size_t i = 0; i < sizeof k_qtypes / sizeof k_qtypes[0]; i++) {
        const int64_t K = cuda_act_group(k_qtypes[i]) == 256 ? 1536 : 1024 + 96;
        test_matvec_rows(k_qtypes[i], 200, K, 150, 760 + i);
    }
    g_ctx.mmq_max_rows = mmq;

    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++) {
        uint32_t t = k_types[i];
        test_matvec_type(t, 333, 2048, 1, 1, 1, 100 + i);
        test_matvec_type(t, 64, 5120 + 256 * 3, 1, 1, 1, 200 + i);
        test_matvec_type(t, 40, 1024, 5, 6, 3, 300 + i); /* MoE: 2 tokens x 3 experts, shared x */
        test_matvec_type(t, 40, 1024, 5, 4, 1, 400 + i); /* MoE down: own x per slot */
    }
    /* Q4_K on sm_90 (rows bulk-copied to shared memory: pipelined warps for rows up to 4 KiB,
     * two warps per longer row, one warp per odd-length long row or several slots) and the
     * kernel every architecture runs (WICK_CUDA_GENERIC=1); expert ids always take the latter */
    const int hopper = g_ctx.sw.hopper;
    for (int v = 0; v <= hopper; v++) {
        g_ctx.sw.hopper = v;
        test_matvec_type(QT_Q4_K, 333, 2048, 1, 1, 1, 600 + v);
        test_matvec_type(QT_Q4_K, 64, 5120 + 256 * 3, 1, 1, 1, 610 + v);
        test_matvec_type(QT_Q4_K, 37, 17408, 1, 3, 1, 620 + v); /* 3 slots, own x each */
        test_matvec_type(QT_Q4_K, 40, 1024, 5, 6, 3, 630 + v);
        /* M larger than the machine's warps: each pipelined warp wraps around its buffers
         * several times (mbarrier phases) */
        test_matvec_type(QT_Q4_K, 40000, 256, 1, 1, 1, 640 + v);
        test_matvec_type(QT_Q4_K, 9001, 2048, 1, 1, 1, 650 + v);
        test_matvec_type(QT_Q4_K, 1001, 17408, 1, 1, 1, 660 + v); /* two warps per row */
        test_matvec_type(QT_Q4_K, 50, 256 * 67, 1, 1, 1, 670 + v); /* 67 blocks: one warp per row */
        /* one launch for several weights on one input (segments) */
        test_matvec_multi(QT_Q4_K, 5120, 2, 900 + v);
        test_matvec_multi(QT_Q4_K, 2048, 4, 910 + v);
        test_matvec_multi(QT_Q4_K, 17408, 2, 930 + v);
    }
    g_ctx.sw.hopper = hopper;
    if (hopper) {
        test_matvec_pipe(334, 2048, 940);
        test_matvec_pipe(40000, 2048, 941);
        test_matvec_pipe(1002, 8704, 942);
        test_matvec_pipe(9000, 8704, 943);
        test_matvec_pipe(333, 17408, 944);
    }
    test_matvec_multi(QT_Q6_K, 2048, 3, 920);
    test_matvec_multi(QT_Q8_0, 1024, 4, 921);
    test_matvec_multi(QT_IQ4_NL, 1024, 6, 922); /* two launches */
    test_matmul_rows_multi(5120, 8, 930);
    test_matmul_rows_multi(5120, 19, 931);
}
