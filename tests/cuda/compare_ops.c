/* Backend-level checks: the same be_ops call on the CPU backend and on the
 * CUDA backend, random inputs, outputs compared. Covers the ops whose CUDA
 * glue does more than launch one kernel (MoE FFN with fused and separate
 * gate/up packs, mixed expert types, 1-row matmuls). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "quant/qtypes.h"
#include "ref.h"

static void *host_blocks(uint32_t type, int64_t elems, uint64_t *rng)
{
    size_t bytes = (size_t)(elems / ref_block_elems(type)) * ref_block_bytes(type);
    void *p = malloc(bytes);
    ref_random_blocks(type, p, elems, rng);
    return p;
}

static be_weight pack(uint32_t type, void *data, int64_t cols, int64_t rows, int64_t n_mat, const char *name)
{
    be_weight w;
    memset(&w, 0, sizeof w);
    w.type = type;
    w.ne[0] = cols;
    w.ne[1] = rows;
    w.ne[2] = n_mat;
    w.ne[3] = 1;
    w.nb1 = (size_t)(cols / ref_block_elems(type)) * ref_block_bytes(type);
    w.nb2 = w.nb1 * (size_t)rows;
    w.data = data;
    w.name = name;
    return w;
}

static void *to_dev(be_backend *be, const void *h, size_t bytes)
{
    void *d = be_alloc(be, bytes);
    be_from_host(be, d, h, bytes);
    return d;
}

static int check(const char *name, const float *a, const float *b, int64_t n, double tol)
{
    double e = ref_rel_err(a, b, n);
    int ok = e <= tol;
    printf("%-4s %-58s rel_err %.3e (tol %.0e)\n", ok ? "ok" : "FAIL", name, e, tol);
    return ok ? 0 : 1;
}

/* out = moe_ffn(u) (+ the shared expert sh, σ-gated by logit) on the CPU backend: its
 * moe_ffn, then the shared expert through its dense ops, as model_ffn_moe composes them. */
static int cpu_moe(be_backend *cpu, const be_moe_args *a, const be_moe_shared *sh, int64_t E, wk_error *err)
{
    if (be_moe_ffn(cpu, a, err)) return 1;
    if (!sh) return 0;
    const int64_t n = a->n_t, F = sh->gate->ne[1];
    float *g = malloc(sizeof(float) * n * F), *u = malloc(sizeof(float) * n * F), *y = malloc(sizeof(float) * n * E);
    int rc = be_matmul(cpu, sh->gate, a->u, n, g, err) || be_matmul(cpu, sh->up, a->u, n, u, err);
    if (!rc) be_swiglu(cpu, g, g, u, n * F);
    if (!rc) rc = be_matmul(cpu, sh->down, g, n, y, err);
    if (!rc) be_add_scaled_sigmoid(cpu, a->out, y, sh->logit, n, E);
    free(g); free(u); free(y);
    return rc;
}

/* be_moe_ffn on CUDA vs the CPU backend: X experts of types tg (gate/up; fused: one gate|up
 * pack) and td (down), n_embd E, n_ff F, k = 2 slots per token (or 8 for X >= 16),
 * the shared expert of the packs' types when shared; `setting` is a be_cuda_tune string. */
static int compare_moe(be_backend *cpu, uint32_t tg, uint32_t td, int fused, int n_t, int64_t E, int64_t F, int X,
                       int shared, const char *setting, uint64_t seed)
{
    uint64_t rng = seed;
    const int k = X >= 16 ? 8 : 2;
    void *g = host_blocks(tg, E * (fused ? 2 * F : F) * X, &rng);
    void *u = fused ? NULL : host_blocks(tg, E * F * X, &rng);
    void *d = host_blocks(td, F * E * X, &rng);
    void *sg = host_blocks(tg, E * F, &rng), *su = host_blocks(tg, E * F, &rng), *sd = host_blocks(td, F * E, &rng);
    be_weight wg = pack(tg, g, E, fused ? 2 * F : F, X, "gate");
    be_weight wu = fused ? pack(tg, NULL, E, F, X, "up") : pack(tg, u, E, F, X, "up");
    be_weight wd = pack(td, d, F, E, X, "down");
    be_weight wsg = pack(tg, sg, E, F, 1, "gate_shexp"), wsu = pack(tg, su, E, F, 1, "up_shexp");
    be_weight wsd = pack(td, sd, F, E, 1, "down_shexp");
    float *x = malloc(sizeof(float) * n_t * E), *out_c = malloc(sizeof(float) * n_t * E), *out_g = malloc(sizeof(float) * n_t * E);
    float *logit = malloc(sizeof(float) * n_t);
    int32_t *ids = malloc(sizeof(int32_t) * n_t * k);
    float *w = malloc(sizeof(float) * n_t * k);
    for (int64_t i = 0; i < n_t * E; i++) x[i] = ref_randn(&rng);
    for (int t = 0; t < n_t; t++) {
        logit[t] = ref_randn(&rng);
        /* k distinct experts, skewed towards the low ids (some experts get many tokens, some none) */
        for (int j = 0; j < k; j++) {
            int e, dup;
            do {
                const float r = 0.5f * (ref_randf(&rng) + 1.0f);
                e = (int)(r * r * X) % X;
                dup = 0;
                for (int q = 0; q < j; q++) dup |= ids[t * k + q] == e;
            } while (dup);
            ids[t * k + j] = e;
            w[t * k + j] = 0.5f * (ref_randf(&rng) + 1.2f);
        }
    }
    wk_error err = {0};
    const be_moe_shared shc = {&wsg, &wsu, &wsd, logit};
    be_moe_args a = {&wg, &wu, &wd, x, n_t, k, ids, w, out_c, NULL};
    if (cpu_moe(cpu, &a, shared ? &shc : NULL, E, &err)) {
        printf("FAIL cpu moe: %s\n", err.msg);
        return 1;
    }
    be_backend *cu = NULL;
    if (be_cuda_new(&cu, 0, &err)) return 1;
    if (setting) be_cuda_tune(cu, setting);
    float *dx = to_dev(cu, x, sizeof(float) * n_t * E), *dout = be_alloc(cu, sizeof(float) * n_t * E);
    int32_t *dids = to_dev(cu, ids, sizeof(int32_t) * n_t * k);
    float *dw = to_dev(cu, w, sizeof(float) * n_t * k), *dlogit = to_dev(cu, logit, sizeof(float) * n_t);
    const be_moe_shared shg = {&wsg, &wsu, &wsd, dlogit};
    be_moe_args b = {&wg, &wu, &wd, dx, n_t, k, dids, dw, dout, shared ? &shg : NULL};
    int rc = be_moe_ffn(cu, &b, &err);
    if (!rc) be_to_host(cu, out_g, dout, sizeof(float) * n_t * E);
    if (!rc) rc = be_cuda_status(cu, &err);
    char name[160];
    snprintf(name, sizeof name, "be moe_ffn %s%s/%s %lldx%lld X=%d n_t=%d%s%s%s vs cpu backend", qt_type_name(tg),
             fused ? " fused" : "", qt_type_name(td), (long long)E, (long long)F, X, n_t, shared ? " +shared" : "",
             setting ? " " : "", setting ? setting : "");
    int bad = rc ? (printf("FAIL %s: %s\n", name, err.msg), 1) : check(name, out_g, out_c, n_t * E, 2e-3);
    be_free(cu);
    free(g); free(u); free(d); free(sg); free(su); free(sd); free(x); free(out_c); free(out_g); free(logit);
    free(ids); free(w);
    return bad;
}

/* y = W·x for a 1-row F32 weight (the shared-expert gate) and a small Q8_0 matrix. */
static int compare_matmul(be_backend *cpu, uint32_t type, int64_t K, int64_t M, int n, uint64_t seed)
{
    uint64_t rng = seed;
    void *wd = host_blocks(type, K * M, &rng);
    be_weight w = pack(type, wd, K, M, 1, "w");
    float *x = malloc(sizeof(float) * n * K), *yc = malloc(sizeof(float) * n * M), *yg = malloc(sizeof(float) * n * M);
    for (int64_t i = 0; i < n * K; i++) x[i] = ref_randn(&rng);
    wk_error err = {0};
    if (be_matmul(cpu, &w, x, n, yc, &err)) {
        printf("FAIL cpu matmul: %s\n", err.msg);
        return 1;
    }
    be_backend *cu = NULL;
    if (be_cuda_new(&cu, 0, &err)) return 1;
    float *dx = to_dev(cu, x, sizeof(float) * n * K), *dy = be_alloc(cu, sizeof(float) * n * M);
    int rc = be_matmul(cu, &w, dx, n, dy, &err);
    if (!rc) be_to_host(cu, yg, dy, sizeof(float) * n * M);
    char name[128];
    snprintf(name, sizeof name, "be matmul %s %lldx%lld n=%d vs cpu backend", qt_type_name(type), (long long)M,
             (long long)K, n);
    int bad = rc ? (printf("FAIL %s: %s\n", name, err.msg), 1) : check(name, yg, yc, n * M, 3e-3);
    be_free(cu);
    free(wd); free(x); free(yc); free(yg);
    return bad;
}

/* be_matmul_multi on the CUDA backend (one launch per run of weights of one type and width
 * for a 1-row input) against be_matmul weight by weight on the same backend, bit for bit, and
 * against the CPU backend. types[i] of each weight (a mixed list splits into several launches);
 * the last weight is 1 row wide like the DeltaNet beta/alpha projections' small ones. */
static int compare_matmul_multi(be_backend *cpu, const uint32_t *types, int n, int64_t K, uint64_t seed)
{
    uint64_t rng = seed;
    be_weight w[6];
    const be_weight *wp[6];
    void *data[6];
    int64_t M[6], total = 0;
    for (int i = 0; i < n; i++) {
        M[i] = i == n - 1 ? 1 : 40 + 57 * i;
        data[i] = host_blocks(types[i], K * M[i], &rng);
        w[i] = pack(types[i], data[i], K, M[i], 1, "w");
        wp[i] = &w[i];
        total += M[i];
    }
    float *x = malloc(sizeof(float) * K), *yc = malloc(sizeof(float) * total), *ym = malloc(sizeof(float) * total),
          *y1 = malloc(sizeof(float) * total);
    for (int64_t i = 0; i < K; i++) x[i] = ref_randn(&rng);
    float *yh[6];
    for (int i = 0, off = 0; i < n; off += (int)M[i], i++) yh[i] = yc + off;
    wk_error err = {0};
    int rc = be_matmul_multi(cpu, wp, n, x, 1, yh, &err);
    be_backend *cu = NULL;
    if (!rc) rc = be_cuda_new(&cu, 0, &err);
    if (rc) {
        printf("FAIL matmul_multi setup: %s\n", err.msg);
        return 1;
    }
    float *dx = to_dev(cu, x, sizeof(float) * K), *dy = be_alloc(cu, sizeof(float) * total);
    float *yd[6];
    for (int i = 0, off = 0; i < n; off += (int)M[i], i++) yd[i] = dy + off;
    rc = be_matmul_multi(cu, wp, n, dx, 1, yd, &err);
    if (!rc) be_to_host(cu, ym, dy, sizeof(float) * total);
    for (int i = 0; i < n && !rc; i++) rc = be_matmul(cu, wp[i], dx, 1, yd[i], &err);
    if (!rc) be_to_host(cu, y1, dy, sizeof(float) * total);
    if (!rc) rc = be_cuda_status(cu, &err);
    char name[128];
    int len = snprintf(name, sizeof name, "be matmul_multi");
    for (int i = 0; i < n; i++) len += snprintf(name + len, sizeof name - len, " %s", qt_type_name(types[i]));
    snprintf(name + len, sizeof name - len, " K=%lld", (long long)K);
    int bad = rc ? (printf("FAIL %s: %s\n", name, err.msg), 1) : check(name, ym, yc, total, 3e-3);
    if (!rc) {
        const int same = !memcmp(ym, y1, sizeof(float) * total);
        printf("%-4s %-58s\n", same ? "ok" : "FAIL", "  = be_matmul one weight at a time (bit for bit)");
        bad += !same;
    }
    be_free(cu);
    for (int i = 0; i < n; i++) free(data[i]);
    free(x); free(yc); free(ym); free(y1);
    return bad;
}

/* W · y on the CPU backend (M floats, malloc'd; NULL on failure): the reference for the
 * matmul that reads a fused op's quantized output on CUDA. */
static float *cpu_matvec(be_backend *cpu, const be_weight *W, const float *y, int64_t M)
{
    float *m = malloc(sizeof(float) * M);
    wk_error err = {0};
    if (m && be_matmul(cpu, W, y, 1, m, &err)) {
        printf("FAIL cpu matmul: %s\n", err.msg);
        free(m);
        return NULL;
    }
    return m;
}

/* be_rms_norm_gated (a Gated DeltaNet output: n_rows heads of n) on CUDA with the decode
 * fusions (one kernel that also quantizes for the next matmul) against the same calls with
 * them off (rms_norm then mul_silu, the matmul quantizing): y and a following Q4_K matmul
 * bit for bit; and y against the CPU backend. */
static int compare_norm_gated(be_backend *cpu, int64_t n_rows, int64_t n, uint64_t seed)
{
    uint64_t rng = seed;
    const int64_t N = n_rows * n, M = 96;
    float *x = malloc(sizeof(float) * N), *z = malloc(sizeof(float) * N), *w = malloc(sizeof(float) * n);
    float *yc = malloc(sizeof(float) * N), *y1 = malloc(sizeof(float) * N), *y0 = malloc(sizeof(float) * N);
    float *m1 = malloc(sizeof(float) * M), *m0 = malloc(sizeof(float) * M);
    for (int64_t i = 0; i < N; i++) x[i] = ref_randn(&rng), z[i] = ref_randn(&rng);
    for (int64_t i = 0; i < n; i++) w[i] = 1.0f + 0.1f * ref_randn(&rng);
    void *wq = host_blocks(QT_Q4_K, N * M, &rng);
    be_weight W = pack(QT_Q4_K, wq, N, M, 1, "out");
    memcpy(yc, x, sizeof(float) * N);
    be_rms_norm_gated(cpu, yc, yc, n_rows, n, w, 1e-6f, z);
    float *mc = cpu_matvec(cpu, &W, yc, M);
    if (!mc) return 1;
    be_backend *cu = NULL;
    wk_error err = {0};
    if (be_cuda_new(&cu, 0, &err)) return 1;
    float *dz = to_dev(cu, z, sizeof(float) * N);
    float *dy = be_alloc(cu, sizeof(float) * N), *dm = be_alloc(cu, sizeof(float) * M);
    int rc = 0;
    for (int fuse = 1; fuse >= 0 && !rc; fuse--) {
        be_cuda_tune(cu, fuse ? "fuse=1" : "fuse=0");
        be_from_host(cu, dy, x, sizeof(float) * N); /* in place, as the model does */
        be_rms_norm_gated(cu, dy, dy, n_rows, n, w, 1e-6f, dz);
        rc = be_matmul(cu, &W, dy, 1, dm, &err);
        if (!rc) be_to_host(cu, fuse ? y1 : y0, dy, sizeof(float) * N);
        if (!rc) be_to_host(cu, fuse ? m1 : m0, dm, sizeof(float) * M);
        if (!rc) rc = be_cuda_status(cu, &err);
    }
    char name[128];
    snprintf(name, sizeof name, "be rms_norm_gated %lldx%lld vs cpu backend", (long long)n_rows, (long long)n);
    int bad = rc ? (printf("FAIL %s: %s\n", name, err.msg), 1) : check(name, y1, yc, N, 1e-5);
    if (!rc) bad += check("  and the next Q4_K matmul", m1, mc, M, 2e-3);
    if (!rc) {
        const int same = !memcmp(y1, y0, sizeof(float) * N) && !memcmp(m1, m0, sizeof(float) * M);
        printf("%-4s %-58s\n", same ? "ok" : "FAIL", "  = rms_norm + mul_silu, and the next matmul (bit for bit)");
        bad += !same;
    }
    be_free(cu);
    free(x); free(z); free(w); free(yc); free(y1); free(y0); free(m1); free(m0); free(wq); free(mc);
    return bad;
}

/* A decode step's residual add and RMSNorm (add then norm: one kernel that also quantizes for
 * the next matmul; or the norm alone) on CUDA with the decode fusions against the same calls
 * with them off (add_kernel, rms_norm_kernel, the matmul quantizing): the sum, the norm and a
 * following Q4_K matmul bit for bit; and the norm against the CPU backend. */
static int compare_add_norm(be_backend *cpu, int with_add, int64_t n, uint64_t seed)
{
    uint64_t rng = seed;
    const int64_t M = 64;
    float *x = malloc(sizeof(float) * n), *d = malloc(sizeof(float) * n), *w = malloc(sizeof(float) * n);
    float *xc = malloc(sizeof(float) * n), *yc = malloc(sizeof(float) * n);
    float *x1 = malloc(sizeof(float) * n), *x0 = malloc(sizeof(float) * n), *y1 = malloc(sizeof(float) * n);
    float *y0 = malloc(sizeof(float) * n), *m1 = malloc(sizeof(float) * M), *m0 = malloc(sizeof(float) * M);
    for (int64_t i = 0; i < n; i++) x[i] = 3.0f * ref_randn(&rng), d[i] = ref_randn(&rng);
    for (int64_t i = 0; i < n; i++) w[i] = 1.0f + 0.1f * ref_randn(&rng);
    void *wq = host_blocks(QT_Q4_K, n * M, &rng);
    be_weight W = pack(QT_Q4_K, wq, n, M, 1, "w");
    memcpy(xc, x, sizeof(float) * n);
    if (with_add) be_add(cpu, xc, xc, d, n);
    be_rms_norm(cpu, yc, n, xc, n, 1, n, w, 1e-6f);
    float *mc = cpu_matvec(cpu, &W, yc, M);
    if (!mc) return 1;
    be_backend *cu = NULL;
    wk_error err = {0};
    if (be_cuda_new(&cu, 0, &err)) return 1;
    float *dx = be_alloc(cu, sizeof(float) * n), *dd = to_dev(cu, d, sizeof(float) * n);
    float *dy = be_alloc(cu, sizeof(float) * n), *dm = be_alloc(cu, sizeof(float) * M);
    int rc = 0;
    for (int fuse = 1; fuse >= 0 && !rc; fuse--) {
        be_cuda_tune(cu, fuse ? "fuse=1" : "fuse=0");
        be_from_host(cu, dx, x, sizeof(float) * n);
        if (with_add) be_add(cu, dx, dx, dd, n);
        be_rms_norm(cu, dy, n, dx, n, 1, n, w, 1e-6f);
        rc = be_matmul(cu, &W, dy, 1, dm, &err);
        if (!rc) be_to_host(cu, fuse ? x1 : x0, dx, sizeof(float) * n);
        if (!rc) be_to_host(cu, fuse ? y1 : y0, dy, sizeof(float) * n);
        if (!rc) be_to_host(cu, fuse ? m1 : m0, dm, sizeof(float) * M);
        if (!rc) rc = be_cuda_status(cu, &err);
    }
    char name[128];
    snprintf(name, sizeof name, "be %srms_norm n=%lld vs cpu backend", with_add ? "add + " : "", (long long)n);
    int bad = rc ? (printf("FAIL %s: %s\n", name, err.msg), 1) : check(name, y1, yc, n, 1e-5);
    if (!rc) bad += check("  and the next Q4_K matmul", m1, mc, M, 2e-3);
    if (!rc) {
        const int same = !memcmp(x1, x0, sizeof(float) * n) && !memcmp(y1, y0, sizeof(float) * n) &&
                         !memcmp(m1, m0, sizeof(float) * M);
        printf("%-4s %-58s\n", same ? "ok" : "FAIL", "  = unfused ops, and the next matmul (bit for bit)");
        bad += !same;
    }
    be_free(cu);
    free(x); free(d); free(w); free(xc); free(yc); free(x1); free(x0); free(y1); free(y0); free(m1); free(m0);
    free(wq); free(mc);
    return bad;
}

/* be_argmax on CUDA (the greedy pick on the device) against wk_argmax_f32 on the host: rows
 * with ties, NaNs, -0 beside +0, all NaN, all -inf, an LM head's width. */
static int compare_argmax(uint64_t seed)
{
    be_backend *cu = NULL;
    wk_error err = {0};
    if (be_cuda_new(&cu, 0, &err)) return 1;
    uint64_t rng = seed;
    const int32_t n_max = 248320;
    float *x = malloc(sizeof(float) * n_max), *tmp = malloc(sizeof(float) * n_max);
    float *dx = be_alloc(cu, sizeof(float) * n_max);
    int bad = 0;
    for (int c = 0; c < 8; c++) {
        const int32_t n = c == 0 ? n_max : c == 1 ? 1 : c == 2 ? 1000 : 77777;
        for (int32_t i = 0; i < n; i++) x[i] = ref_randn(&rng);
        if (c == 2) x[10] = x[500] = 9.0f;                           /* a tie: the lower index */
        if (c == 3) x[123] = NAN, x[9000] = 50.0f, x[9001] = NAN;     /* NaNs skipped */
        if (c == 4) for (int32_t i = 0; i < n; i++) x[i] = i % 3 ? -0.0f : 0.0f; /* -0 = +0: index 0 */
        if (c == 4) x[0] = -0.0f;
        if (c == 5) for (int32_t i = 0; i < n; i++) x[i] = NAN;      /* none: -1 */
        if (c == 6) for (int32_t i = 0; i < n; i++) x[i] = -INFINITY; /* index 0, value -inf */
        if (c == 7) x[n - 1] = INFINITY;
        be_from_host(cu, dx, x, sizeof(float) * n);
        float got_v = 0.0f;
        const int32_t got = be_argmax(cu, dx, n, tmp, &got_v), want = wk_argmax_f32(x, n);
        const int ok = got == want && (want < 0 || got_v == x[want] || (x[want] == 0.0f && got_v == 0.0f)) &&
                       !be_cuda_status(cu, &err);
        if (!ok) printf("FAIL be_argmax case %d (n=%d): %d (%g), want %d\n", c, n, got, got_v, want);
        bad += !ok;
    }
    printf("%-4s %-58s\n", bad ? "FAIL" : "ok", "be argmax on cuda = wk_argmax_f32 (8 rows)");
    be_free(cu);
    free(x);
    free(tmp);
    return bad;
}

/* be_zero on cuda: a range of a device buffer cleared in stream order, its neighbours untouched,
 * and the pinned host buffers of be_host_alloc written by be_to_host_rows. */
static int compare_zero_and_rows(uint64_t seed)
{
    be_backend *cu = NULL;
    wk_error err = {0};
    if (be_cuda_new(&cu, 0, &err)) return 1;
    uint64_t rng = seed;
    enum { N = 300007, ROWS = 3, ROW = 70001 };
    float *x = malloc(sizeof(float) * N), *back = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) x[i] = ref_randn(&rng) + 10.0f; /* never 0 */
    float *dx = be_alloc(cu, sizeof(float) * N);
    be_from_host(cu, dx, x, sizeof(float) * N);
    be_zero(cu, dx + 1001, sizeof(float) * 200000);
    be_to_host(cu, back, dx, sizeof(float) * N);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += back[i] != (i >= 1001 && i < 201001 ? 0.0f : x[i]);
    /* the rows, into pinned buffers and into pageable ones */
    be_from_host(cu, dx, x, sizeof(float) * ROWS * ROW);
    void *pinned[ROWS], *plain[ROWS];
    for (int r = 0; r < ROWS; r++) {
        pinned[r] = be_host_alloc(cu, sizeof(float) * ROW);
        plain[r] = malloc(sizeof(float) * ROW);
    }
    be_to_host_rows(cu, pinned, dx, sizeof(float) * ROW, ROWS);
    be_to_host_rows(cu, plain, dx, sizeof(float) * ROW, ROWS);
    for (int r = 0; r < ROWS; r++) {
        bad += !pinned[r] || memcmp(pinned[r], x + (size_t)r * ROW, sizeof(float) * ROW) != 0;
        bad += memcmp(plain[r], x + (size_t)r * ROW, sizeof(float) * ROW) != 0;
        be_host_free(cu, pinned[r]);
        free(plain[r]);
    }
    bad += be_cuda_status(cu, &err) != 0;
    printf("%-4s %-58s\n", bad ? "FAIL" : "ok", "be_zero on cuda, be_to_host_rows into pinned and pageable rows");
    be_release(cu, dx);
    be_free(cu);
    free(x);
    free(back);
    return bad ? 1 : 0;
}

int compare_ops_all(void)
{
    wk_error err = {0};
    be_backend *cpu = NULL;
    if (be_cpu_new(&cpu, 4, &err)) return 1;
    int bad = 0;
    const int64_t norm_n[] = {5120, 2560, 1024, 8192, 12288}; /* 27B; T < n/8; T > n/8; 1024 threads; too wide */
    for (int i = 0; i < 5; i++) {
        bad += compare_add_norm(cpu, 1, norm_n[i], 70 + i);
        bad += compare_add_norm(cpu, 0, norm_n[i], 80 + i);
    }
    bad += compare_argmax(90);
    bad += compare_zero_and_rows(91);
    bad += compare_norm_gated(cpu, 48, 128, 60); /* Qwen3.5-27B's DeltaNet output */
    bad += compare_norm_gated(cpu, 8, 64, 61);
    bad += compare_norm_gated(cpu, 4, 256, 62);
    bad += compare_matmul(cpu, QT_F32, 256, 1, 1, 1);
    bad += compare_matmul(cpu, QT_F32, 256, 1, 64, 2);
    bad += compare_matmul(cpu, QT_Q8_0, 32, 256, 1, 3);
    bad += compare_matmul(cpu, QT_Q8_0, 32, 256, 64, 4);
    bad += compare_matmul(cpu, QT_Q4_K, 256, 48, 64, 5);
    bad += compare_matmul(cpu, QT_Q5_0, 256, 64, 64, 6);
    static const uint32_t q4k4[] = {QT_Q4_K, QT_Q4_K, QT_Q4_K, QT_Q4_K};
    static const uint32_t mixed[] = {QT_Q4_K, QT_Q6_K, QT_Q6_K, QT_Q8_0, QT_Q8_0};
    static const uint32_t many[] = {QT_Q8_0, QT_Q8_0, QT_Q8_0, QT_Q8_0, QT_Q8_0, QT_Q8_0};
    bad += compare_matmul_multi(cpu, q4k4, 4, 2048, 7);
    bad += compare_matmul_multi(cpu, q4k4, 2, 5120, 8);
    bad += compare_matmul_multi(cpu, mixed, 5, 1024, 9);
    bad += compare_matmul_multi(cpu, many, 6, 512, 10); /* more than one launch's 4 segments */
    static const int n_ts[] = {1, 3, 64, 300};
    for (int i = 0; i < 4; i++) {
        const int n_t = n_ts[i];
        bad += compare_moe(cpu, QT_Q8_0, QT_Q8_0, 0, n_t, 256, 32, 8, 0, NULL, 10 + n_t);
        bad += compare_moe(cpu, QT_Q8_0, QT_Q8_0, 1, n_t, 256, 32, 8, 0, NULL, 20 + n_t);
        bad += compare_moe(cpu, QT_Q4_K, QT_Q8_0, 1, n_t, 256, 32, 8, 0, NULL, 30 + n_t);
        bad += compare_moe(cpu, QT_Q4_K, QT_Q5_0, 0, n_t, 256, 32, 8, 1, NULL, 40 + n_t);  /* per-slot path */
        bad += compare_moe(cpu, QT_F32, QT_F32, 1, n_t, 256, 32, 8, 0, NULL, 50 + n_t);
        /* the int8 path with the shared expert inside: the Q4_K_M and 4/8-bit mixes, Q5_K, IQ4_NL */
        bad += compare_moe(cpu, QT_Q4_K, QT_Q6_K, 0, n_t, 512, 256, 8, 1, NULL, 60 + n_t);
        bad += compare_moe(cpu, QT_Q4_K, QT_Q8_0, 0, n_t, 512, 256, 8, 1, NULL, 70 + n_t);
        bad += compare_moe(cpu, QT_Q5_K, QT_Q4_K, 0, n_t, 256, 256, 8, 1, NULL, 80 + n_t);
        bad += compare_moe(cpu, QT_IQ4_NL, QT_Q4_0, 0, n_t, 256, 64, 8, 1, NULL, 90 + n_t);
        bad += compare_moe(cpu, QT_Q4_K, QT_Q6_K, 1, n_t, 256, 256, 8, 1, NULL, 100 + n_t); /* shared apart */
        bad += compare_moe(cpu, QT_Q6_K, QT_Q8_0, 0, n_t, 256, 256, 8, 1, "generic=1", 110 + n_t);
    }
    /* many experts, few tokens each (32-row tiles), a pass over more than one chunk */
    bad += compare_moe(cpu, QT_Q4_K, QT_Q6_K, 0, 40, 512, 256, 64, 1, NULL, 120);
    bad += compare_moe(cpu, QT_Q8_0, QT_Q8_0, 0, 2100, 256, 64, 16, 1, NULL, 121);
    be_free(cpu);
    return bad;
}
