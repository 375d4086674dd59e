/* MoE kernels (moe.cu, the grouped products of mmq.cu) against plain references on
 * random routings: the sort by expert, the grouped int8 products and the decode
 * matvec over the same pairs, the SwiGLU + quantize step, the weighted combine. */
#include <math.h>
#include <string.h>

#include "cuda_test.h"
#include "quant/qtypes.h"

/* A routing of n_t tokens × k slots over n_mat experts, skewed towards low ids so that
 * some experts get many rows and some none; one id out of range (dropped by the sort). */
static void random_ids(int32_t *ids, int n_t, int k, int n_mat, uint64_t *rng)
{
    for (int t = 0; t < n_t; t++)
        for (int j = 0; j < k; j++) {
            const float r = 0.5f * (ref_randf(rng) + 1.0f);
            ids[t * k + j] = (int32_t)(r * r * n_mat) % n_mat;
        }
    if (n_t * k > 3) ids[n_t * k / 2] = n_mat + 7;
}

/* Pair i's expert as cuda_moe_sort sees it (-1: dropped). */
static int pair_expert(const int32_t *ids, int64_t i, int k, int ks, int n_e)
{
    const int64_t t = i / ks;
    const int j = (int)(i % ks);
    const int e = j < k ? ids[t * k + j] : n_e - 1;
    return e >= 0 && e < n_e ? e : -1;
}

/* The plan's invariants: valid pairs on distinct rows 0..n_valid-1 grouped by expert in
 * expert order, tok the pair's token, tiles covering each expert's rows exactly once. */
static int check_plan(const cuda_moe_plan *pl, const int32_t *ids, int n_t, int k, int ks, int n_e)
{
    const int64_t P = (int64_t)n_t * ks;
    int32_t *pos = malloc(sizeof(int32_t) * P), *tok = malloc(sizeof(int32_t) * P);
    int32_t *tiles = malloc(sizeof(int32_t) * 4 * pl->max_tiles), n_tiles = 0;
    dev_download(pos, pl->pos, sizeof(int32_t) * P);
    dev_download(tok, pl->tok, sizeof(int32_t) * P);
    dev_download(&n_tiles, pl->n_tiles, sizeof n_tiles);
    dev_download(tiles, pl->tiles, sizeof(int32_t) * 4 * pl->max_tiles);
    int bad = 0, n_valid = 0;
    int *row_e = malloc(sizeof(int) * P), *covered = calloc((size_t)P, sizeof(int));
    for (int64_t p = 0; p < P; p++) row_e[p] = -2;
    for (int64_t i = 0; i < P; i++) {
        const int e = pair_expert(ids, i, k, ks, n_e);
        if (e < 0) {
            bad += pos[i] != -1;
            continue;
        }
        n_valid++;
        if (pos[i] < 0 || pos[i] >= P || row_e[pos[i]] != -2) {
            bad++;
            continue;
        }
        row_e[pos[i]] = e;
        bad += tok[pos[i]] != i / ks;
    }
    for (int p = 0; p < n_valid; p++) bad += row_e[p] < 0 || (p > 0 && row_e[p] < row_e[p - 1]);
    bad += n_tiles < 0 || n_tiles > pl->max_tiles;
    for (int q = 0; q < n_tiles && q < pl->max_tiles; q++) {
        const int e = tiles[4 * q], p0 = tiles[4 * q + 1], n = tiles[4 * q + 2];
        bad += n < 1 || n > pl->bn || p0 < 0 || p0 + n > n_valid;
        for (int p = p0; p < p0 + n && p >= 0 && p < n_valid; p++) {
            bad += row_e[p] != e;
            covered[p]++;
        }
    }
    for (int p = 0; p < n_valid; p++) bad += covered[p] != 1;
    free(pos); free(tok); free(tiles); free(row_e); free(covered);
    return bad;
}

/* y[s] = W[e] · x[r] in double for rows of a routing: e = row_e[s] (-1: row unchecked). */
static void ref_rows(const float *wf, const float *wx, int64_t M, int64_t K, int n_mat, const int *row_e,
                     const int64_t *row_x, const float *x, int64_t n, float *y)
{
    for (int64_t s = 0; s < n; s++) {
        if (row_e[s] < 0) continue;
        const float *W = row_e[s] < n_mat ? wf + (size_t)row_e[s] * M * K : wx;
        for (int64_t r = 0; r < M; r++) {
            double acc = 0;
            for (int64_t i = 0; i < K; i++) acc += (double)W[r * K + i] * x[row_x[s] * K + i];
            y[s * M + r] = (float)acc;
        }
    }
}

/* Rel. error of y vs yref over the rows with row_e >= 0. */
static double rows_err(const float *y, const float *yref, const int *row_e, int64_t M, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t s = 0; s < n; s++) {
        if (row_e[s] < 0) continue;
        for (int64_t r = 0; r < M; r++) {
            const double d = (double)y[s * M + r] - yref[s * M + r];
            num += d * d;
            den += (double)yref[s * M + r] * yref[s * M + r];
            if (y[s * M + r] != y[s * M + r]) return INFINITY; /* NaN: unwritten */
        }
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Sort + grouped products (per token: gather; per row: the down product's form) and the
 * decode matvec over the same pairs, for one type: n_mat experts of M × K, the extra
 * matrix as slot k when extra. */
static void test_grouped(uint32_t type, int64_t M, int64_t K, int n_mat, int n_t, int k, int extra, int bn,
                         uint64_t seed)
{
    uint64_t rng = seed;
    const int ks = k + extra, n_e = n_mat + extra;
    const int64_t P = (int64_t)n_t * ks;
    const size_t row_bytes = (size_t)(K / ref_block_elems(type)) * ref_block_bytes(type);
    uint8_t *w = malloc(row_bytes * M * (n_mat + 1));
    ref_random_blocks(type, w, K * M * (n_mat + 1), &rng);
    float *wf = malloc(sizeof(float) * M * K * (n_mat + 1));
    for (int64_t r = 0; r < M * (n_mat + 1); r++) ref_dequant_row(type, w + r * row_bytes, wf + r * K, K);
    const float *wxf = wf + (size_t)n_mat * M * K;
    int32_t *ids = malloc(sizeof(int32_t) * n_t * k);
    random_ids(ids, n_t, k, n_mat, &rng);
    const int group = cuda_act_group(type);
    /* per-token activations (gate/up) and per-pair ones (down) */
    float *xt = malloc(sizeof(float) * K * n_t), *xtr = malloc(sizeof(float) * K * n_t);
    float *xp = malloc(sizeof(float) * K * P), *xpr = malloc(sizeof(float) * K * P);
    for (int64_t i = 0; i < K * n_t; i++) xt[i] = ref_randn(&rng);
    for (int64_t i = 0; i < K * P; i++) xp[i] = ref_randn(&rng);
    for (int64_t r = 0; r < n_t; r++) ref_round_act(xt + r * K, xtr + r * K, K, group);
    for (int64_t r = 0; r < P; r++) ref_round_act(xp + r * K, xpr + r * K, K, group);

    wk_error err = {0};
    cuda_qweight qw, qx;
    if (cuda_qw_upload(&g_ctx, &qw, type, w, K, M, row_bytes, n_mat, row_bytes * M, &err) ||
        cuda_qw_upload(&g_ctx, &qx, type, w + row_bytes * M * n_mat, K, M, row_bytes, 1, row_bytes * M, &err)) {
        fprintf(stderr, "upload: %s\n", err.msg);
        exit(2);
    }
    int32_t *dids = dev_upload(ids, sizeof(int32_t) * n_t * k);
    float *dxt = dev_upload(xt, sizeof(float) * K * n_t), *dxp = dev_upload(xp, sizeof(float) * K * P);
    int8_t *dxtq = dev_alloc(K * n_t), *dxpq = dev_alloc(K * P);
    float *dxtd = dev_alloc(sizeof(float) * K / 32 * n_t), *dxpd = dev_alloc(sizeof(float) * K / 32 * P);
    OK(cuda_quantize_act(&g_ctx, dxt, n_t, K, group, dxtq, dxtd));
    OK(cuda_quantize_act(&g_ctx, dxp, P, K, group, dxpq, dxpd));
    void *dplan = dev_alloc(cuda_moe_plan_bytes(P, n_e, bn));
    cuda_moe_plan pl;
    OK(cuda_moe_sort(&g_ctx, dids, n_t, k, ks, n_e, bn, dplan, &pl));
    char name[160];
    snprintf(name, sizeof name, "moe sort %d tokens x %d slots, %d experts, %d-row tiles", n_t, ks, n_e, bn);
    check_err(name, check_plan(&pl, ids, n_t, k, ks, n_e), 0);

    /* expected rows: sorted row p of pair i, its expert and its activation row */
    int32_t *pos = malloc(sizeof(int32_t) * P);
    dev_download(pos, pl.pos, sizeof(int32_t) * P);
    int *row_e = malloc(sizeof(int) * P), *slot_e = malloc(sizeof(int) * P);
    int64_t *row_tok = malloc(sizeof(int64_t) * P), *row_self = malloc(sizeof(int64_t) * P);
    int64_t *slot_tok = malloc(sizeof(int64_t) * P);
    for (int64_t p = 0; p < P; p++) {
        row_e[p] = -1;
        row_tok[p] = 0;
        row_self[p] = p;
        slot_tok[p] = p / ks;
    }
    for (int64_t i = 0; i < P; i++) {
        slot_e[i] = pair_expert(ids, i, k, ks, n_e);
        if (pos[i] >= 0 && pos[i] < P) {
            row_e[pos[i]] = slot_e[i];
            row_tok[pos[i]] = i / ks;
        }
    }
    float *y = malloc(sizeof(float) * M * P), *yref = malloc(sizeof(float) * M * P);
    float *dy = dev_alloc(sizeof(float) * M * P), *dy2 = dev_alloc(sizeof(float) * M * P);
    for (int gather = 1; gather >= 0; gather--) {
        /* two packs in one launch: the same pack twice, both outputs checked */
        OK(cuda_mmq_grouped(&g_ctx, &qw, gather ? &qw : NULL, qx.data, qx.data, &pl, gather, gather ? dxtq : dxpq,
                            gather ? dxtd : dxpd, dy, gather ? dy2 : NULL, &err));
        ref_rows(wf, wxf, M, K, n_mat, row_e, gather ? row_tok : row_self, gather ? xtr : xpr, P, yref);
        dev_download(y, dy, sizeof(float) * M * P);
        snprintf(name, sizeof name, "mmq grouped %s M=%lld K=%lld %s, %d-row tiles", qt_type_name(type),
                 (long long)M, (long long)K, gather ? "per token (gate, up)" : "per row (down)", bn);
        double e = rows_err(y, yref, row_e, M, P);
        if (gather) {
            float *y2 = malloc(sizeof(float) * M * P);
            dev_download(y2, dy2, sizeof(float) * M * P);
            const double e2 = rows_err(y2, yref, row_e, M, P);
            e = e2 > e ? e2 : e;
            free(y2);
        }
        check_err(name, e, 2e-5);
    }
    /* decode form: the pairs in slot order through the matvec (its ids must be in range:
     * the router's always are) */
    if (P <= 65535) {
        for (int64_t i = 0; i < (int64_t)n_t * k; i++) ids[i] = ids[i] < n_mat ? ids[i] : 0;
        CK(cudaMemcpy(dids, ids, sizeof(int32_t) * n_t * k, cudaMemcpyHostToDevice));
        for (int64_t i = 0; i < P; i++) slot_e[i] = pair_expert(ids, i, k, ks, n_e);
        for (int gather = 1; gather >= 0; gather--) {
            OK(cuda_matvec_moe(&g_ctx, &qw, NULL, qx.data, NULL, gather ? dxtq : dxpq, gather ? dxtd : dxpd, n_t, k,
                               ks, gather ? ks : 1, dids, dy, NULL, &err));
            ref_rows(wf, wxf, M, K, n_mat, slot_e, gather ? slot_tok : row_self, gather ? xtr : xpr, P, yref);
            dev_download(y, dy, sizeof(float) * M * P);
            snprintf(name, sizeof name, "matvec moe %s M=%lld K=%lld %d tokens x %d slots %s", qt_type_name(type),
                     (long long)M, (long long)K, n_t, ks, gather ? "per token" : "per slot");
            check_err(name, rows_err(y, yref, slot_e, M, P), 2e-5);
        }
    }
    cuda_qw_free(&qw);
    cuda_qw_free(&qx);
    cudaFree(dids); cudaFree(dxt); cudaFree(dxp); cudaFree(dxtq); cudaFree(dxpq); cudaFree(dxtd); cudaFree(dxpd);
    cudaFree(dplan); cudaFree(dy); cudaFree(dy2);
    free(w); free(wf); free(ids); free(xt); free(xtr); free(xp); free(xpr); free(pos); free(row_e); free(slot_e);
    free(row_tok); free(row_self); free(slot_tok); free(y); free(yref);
}

/* cuda_moe_glu_quant = cuda_swiglu then cuda_quantize_act, bit for bit (separate and fused
 * gate|up rows). */
static void test_glu_quant(int group, int64_t F, int64_t n, int fused, uint64_t seed)
{
    uint64_t rng = seed;
    const int64_t G = fused ? 2 * F : F;
    float *g = malloc(sizeof(float) * n * G), *u = malloc(sizeof(float) * n * F);
    for (int64_t i = 0; i < n * G; i++) g[i] = 3.0f * ref_randn(&rng);
    for (int64_t i = 0; i < n * F; i++) u[i] = ref_randn(&rng);
    float *dg = dev_upload(g, sizeof(float) * n * G), *du = dev_upload(u, sizeof(float) * n * F);
    float *dh = dev_alloc(sizeof(float) * n * F), *dd = dev_alloc(sizeof(float) * n * F / 32);
    float *dd2 = dev_alloc(sizeof(float) * n * F / 32);
    int8_t *dq = dev_alloc(n * F), *dq2 = dev_alloc(n * F);
    if (fused) OK(cuda_swiglu_fused(&g_ctx, dh, dg, n, F));
    else OK(cuda_swiglu(&g_ctx, dh, dg, du, n * F));
    OK(cuda_quantize_act(&g_ctx, dh, n, F, group, dq, dd));
    OK(cuda_moe_glu_quant(&g_ctx, dg, fused ? dg + F : du, (size_t)G, n, F, group, dq2, dd2));
    int8_t *q = malloc(n * F), *q2 = malloc(n * F);
    float *d = malloc(sizeof(float) * n * F / 32), *d2 = malloc(sizeof(float) * n * F / 32);
    dev_download(q, dq, n * F);
    dev_download(q2, dq2, n * F);
    dev_download(d, dd, sizeof(float) * n * F / 32);
    dev_download(d2, dd2, sizeof(float) * n * F / 32);
    char name[128];
    snprintf(name, sizeof name, "moe swiglu + quantize (group %d, %s) = swiglu, quantize", group,
             fused ? "gate|up rows" : "gate, up");
    check_err(name, memcmp(q, q2, n * F) || memcmp(d, d2, sizeof(float) * n * F / 32) ? 1.0 : 0.0, 0.0);
    cudaFree(dg); cudaFree(du); cudaFree(dh); cudaFree(dd); cudaFree(dd2); cudaFree(dq); cudaFree(dq2);
    free(g); free(u); free(q); free(q2); free(d); free(d2);
}

/* cuda_moe_combine against the sum in slot order, rows through pos (one dropped), the
 * shared expert's row σ-weighted last. */
static void test_combine(int64_t n_t, int k, int64_t n, uint64_t seed)
{
    uint64_t rng = seed;
    const int ks = k + 1;
    const int64_t P = n_t * ks;
    float *ys = malloc(sizeof(float) * P * n), *w = malloc(sizeof(float) * n_t * k), *lg = malloc(sizeof(float) * n_t);
    int32_t *pos = malloc(sizeof(int32_t) * P);
    for (int64_t i = 0; i < P * n; i++) ys[i] = ref_randn(&rng);
    for (int64_t i = 0; i < n_t * k; i++) w[i] = ref_randf(&rng);
    for (int64_t i = 0; i < n_t; i++) lg[i] = 2.0f * ref_randn(&rng);
    for (int64_t i = 0; i < P; i++) pos[i] = (int32_t)((i * 7919) % P); /* a permutation: P is not a multiple of 7919 */
    pos[P / 2] = -1;
    float *ref = malloc(sizeof(float) * n_t * n), *out = malloc(sizeof(float) * n_t * n);
    for (int64_t t = 0; t < n_t; t++)
        for (int64_t i = 0; i < n; i++) {
            double acc = 0;
            for (int j = 0; j < ks; j++) {
                const int32_t r = pos[t * ks + j];
                if (r < 0) continue;
                const double wj = j < k ? w[t * k + j] : 1.0 / (1.0 + exp(-(double)lg[t]));
                acc += wj * ys[r * n + i];
            }
            ref[t * n + i] = (float)acc;
        }
    float *dys = dev_upload(ys, sizeof(float) * P * n), *dw = dev_upload(w, sizeof(float) * n_t * k);
    float *dlg = dev_upload(lg, sizeof(float) * n_t), *dout = dev_alloc(sizeof(float) * n_t * n);
    int32_t *dpos = dev_upload(pos, sizeof(int32_t) * P);
    OK(cuda_moe_combine(&g_ctx, dout, dys, dpos, dw, dlg, n_t, k, ks, n));
    dev_download(out, dout, sizeof(float) * n_t * n);
    check_err("moe combine (sorted rows, shared expert, a dropped pair)", ref_rel_err(out, ref, n_t * n), 1e-6);
    cudaFree(dys); cudaFree(dw); cudaFree(dlg); cudaFree(dout); cudaFree(dpos);
    free(ys); free(w); free(lg); free(pos); free(ref); free(out);
}

/* cuda_moe_gate = the F32 matvec, cuda_moe_route and the shared gate's matvec, bit for bit,
 * twice in a row (its arrival counters must be back at zero after a launch). */
static void test_gate(int32_t n_expert, int64_t K, int64_t n_t, int k, int shared, uint64_t seed)
{
    uint64_t rng = seed;
    const int64_t rows = n_expert + 1;
    float *w = malloc(sizeof(float) * rows * K), *x = malloc(sizeof(float) * n_t * K);
    for (int64_t i = 0; i < rows * K; i++) w[i] = 0.05f * ref_randn(&rng);
    wk_error err = {0};
    cuda_qweight qw, qs;
    if (cuda_qw_upload(&g_ctx, &qw, QT_F32, w, K, n_expert, K * 4, 1, K * 4 * n_expert, &err) ||
        cuda_qw_upload(&g_ctx, &qs, QT_F32, w + n_expert * K, K, 1, K * 4, 1, K * 4, &err)) {
        fprintf(stderr, "upload: %s\n", err.msg);
        exit(2);
    }
    float *dx = dev_alloc(sizeof(float) * n_t * K);
    float *dl = dev_alloc(sizeof(float) * n_t * n_expert), *dl2 = dev_alloc(sizeof(float) * n_t * n_expert);
    float *dsh = dev_alloc(sizeof(float) * n_t), *dsh2 = dev_alloc(sizeof(float) * n_t);
    int32_t *di = dev_alloc(sizeof(int32_t) * n_t * k), *di2 = dev_alloc(sizeof(int32_t) * n_t * k);
    float *dw = dev_alloc(sizeof(float) * n_t * k), *dw2 = dev_alloc(sizeof(float) * n_t * k);
    unsigned *arr = dev_alloc(sizeof(unsigned) * n_t);
    CK(cudaMemset(arr, 0, sizeof(unsigned) * n_t));
    const size_t nl = sizeof(float) * n_t * n_expert, ni = sizeof(int32_t) * n_t * k, nw = sizeof(float) * n_t * k;
    float *l = malloc(nl), *l2 = malloc(nl), *wt = malloc(nw), *wt2 = malloc(nw), sh[8], sh2[8];
    int32_t *id = malloc(ni), *id2 = malloc(ni);
    double bad = 0;
    for (int rep = 0; rep < 2; rep++) {
        for (int64_t i = 0; i < n_t * K; i++) x[i] = ref_randn(&rng);
        CK(cudaMemcpy(dx, x, sizeof(float) * n_t * K, cudaMemcpyHostToDevice));
        OK(cuda_matvec(&g_ctx, &qw, NULL, NULL, dx, n_t, 1, NULL, dl, &err));
        OK(cuda_moe_route(&g_ctx, dl, n_t, n_expert, k, di, dw));
        if (shared) OK(cuda_matvec(&g_ctx, &qs, NULL, NULL, dx, n_t, 1, NULL, dsh, &err));
        OK(cuda_moe_gate(&g_ctx, qw.data, shared ? qs.data : NULL, n_expert, K, dx, n_t, k, dl2, dsh2, di2, dw2, arr));
        dev_download(l, dl, nl);
        dev_download(l2, dl2, nl);
        dev_download(id, di, ni);
        dev_download(id2, di2, ni);
        dev_download(wt, dw, nw);
        dev_download(wt2, dw2, nw);
        bad += memcmp(l, l2, nl) != 0;
        bad += memcmp(id, id2, ni) != 0;
        bad += memcmp(wt, wt2, nw) != 0;
        if (shared) {
            dev_download(sh, dsh, sizeof(float) * n_t);
            dev_download(sh2, dsh2, sizeof(float) * n_t);
            bad += memcmp(sh, sh2, sizeof(float) * n_t) != 0;
        }
    }
    char name[160];
    snprintf(name, sizeof name, "moe gate %d experts x %lld, %lld tokens, top %d%s = matvec + route, bit for bit",
             (int)n_expert, (long long)K, (long long)n_t, k, shared ? ", shared gate" : "");
    check_err(name, bad, 0);
    cuda_qw_free(&qw);
    cuda_qw_free(&qs);
    cudaFree(dx); cudaFree(dl); cudaFree(dl2); cudaFree(dsh); cudaFree(dsh2); cudaFree(di); cudaFree(di2);
    cudaFree(dw); cudaFree(dw2); cudaFree(arr);
    free(w); free(x); free(l); free(l2); free(wt); free(wt2); free(id); free(id2);
}

/* cuda_moe_down_combine = cuda_matvec_moe per slot then cuda_moe_combine, bit for bit. */
static void test_down_combine(uint32_t type, int64_t M, int64_t K, int n_mat, int n_t, int k, int extra,
                              uint64_t seed)
{
    uint64_t rng = seed;
    const int ks = k + extra;
    const int64_t P = (int64_t)n_t * ks;
    const size_t row_bytes = (size_t)(K / ref_block_elems(type)) * ref_block_bytes(type);
    uint8_t *w = malloc(row_bytes * M * (n_mat + 1));
    ref_random_blocks(type, w, K * M * (n_mat + 1), &rng);
    int32_t *ids = malloc(sizeof(int32_t) * n_t * k);
    random_ids(ids, n_t, k, n_mat, &rng);
    for (int i = 0; i < n_t * k; i++) ids[i] = ids[i] < n_mat ? ids[i] : 0; /* the router's are in range */
    float *x = malloc(sizeof(float) * K * P), *wt = malloc(sizeof(float) * n_t * k), lg[8];
    for (int64_t i = 0; i < K * P; i++) x[i] = ref_randn(&rng);
    for (int i = 0; i < n_t * k; i++) wt[i] = ref_randf(&rng);
    for (int i = 0; i < n_t; i++) lg[i] = 2.0f * ref_randn(&rng);
    wk_error err = {0};
    cuda_qweight qw, qx;
    if (cuda_qw_upload(&g_ctx, &qw, type, w, K, M, row_bytes, n_mat, row_bytes * M, &err) ||
        cuda_qw_upload(&g_ctx, &qx, type, w + row_bytes * M * n_mat, K, M, row_bytes, 1, row_bytes * M, &err)) {
        fprintf(stderr, "upload: %s\n", err.msg);
        exit(2);
    }
    int32_t *dids = dev_upload(ids, sizeof(int32_t) * n_t * k);
    float *dx = dev_upload(x, sizeof(float) * K * P), *dwt = dev_upload(wt, sizeof(float) * n_t * k);
    float *dlg = dev_upload(lg, sizeof(float) * n_t);
    int8_t *dxq = dev_alloc(K * P);
    float *dxd = dev_alloc(sizeof(float) * K / 32 * P);
    OK(cuda_quantize_act(&g_ctx, dx, P, K, cuda_act_group(type), dxq, dxd));
    float *dy = dev_alloc(sizeof(float) * M * P), *dref = dev_alloc(sizeof(float) * M * n_t);
    float *dout = dev_alloc(sizeof(float) * M * n_t);
    OK(cuda_matvec_moe(&g_ctx, &qw, NULL, qx.data, NULL, dxq, dxd, n_t, k, ks, 1, dids, dy, NULL, &err));
    OK(cuda_moe_combine(&g_ctx, dref, dy, NULL, dwt, extra ? dlg : NULL, n_t, k, ks, M));
    OK(cuda_moe_down_combine(&g_ctx, &qw, qx.data, dxq, dxd, n_t, k, ks, dids, dwt, extra ? dlg : NULL, dout, &err));
    float *ref = malloc(sizeof(float) * M * n_t), *out = malloc(sizeof(float) * M * n_t);
    dev_download(ref, dref, sizeof(float) * M * n_t);
    dev_download(out, dout, sizeof(float) * M * n_t);
    char name[160];
    snprintf(name, sizeof name, "moe down + combine %s M=%lld K=%lld, %d tokens x %d slots = matvec + combine",
             qt_type_name(type), (long long)M, (long long)K, n_t, ks);
    check_err(name, memcmp(ref, out, sizeof(float) * M * n_t) ? ref_rel_err(out, ref, M * n_t) + 1.0 : 0.0, 0.0);
    cuda_qw_free(&qw);
    cuda_qw_free(&qx);
    cudaFree(dids); cudaFree(dx); cudaFree(dwt); cudaFree(dlg); cudaFree(dxq); cudaFree(dxd); cudaFree(dy);
    cudaFree(dref); cudaFree(dout);
    free(w); free(ids); free(x); free(wt); free(ref); free(out);
}

void test_moe_all(void)
{
    static const uint32_t k_qtypes[] = {QT_Q4_K, QT_Q5_K, QT_Q6_K, QT_Q8_0, QT_Q4_0, QT_IQ4_NL};
    for (size_t i = 0; i < sizeof k_qtypes / sizeof k_qtypes[0]; i++) {
        const uint32_t t = k_qtypes[i];
        const int64_t K = cuda_act_group(t) == 256 ? 512 : 256 + 96;
        test_grouped(t, 96, K, 8, 3, 2, 1, 32, 1000 + i);     /* decode-sized */
        test_grouped(t, 130, K, 8, 150, 2, 1, 64, 1010 + i);  /* several tiles per expert, M past a 64-row block */
        test_grouped(t, 64, K, 40, 37, 8, 0, 32, 1020 + i);   /* many experts, few rows each, some empty */
    }
    test_grouped(QT_Q4_K, 64, 256, 256, 600, 8, 1, 64, 1030); /* the 35B-A3B routing shape */
    test_glu_quant(256, 512, 37, 0, 1040);
    test_glu_quant(256, 512, 37, 1, 1041);
    test_glu_quant(32, 96, 21, 0, 1042);
    test_glu_quant(32, 96, 21, 1, 1043);
    test_combine(53, 8, 2048, 1050);
    for (int n_t = 1; n_t <= 4; n_t++) test_gate(256, 2048, n_t, 8, 1, 1060 + n_t); /* 35B-A3B */
    test_gate(128, 768, 3, 8, 0, 1065);                                              /* no shared gate */
    test_gate(60, 520, 2, 4, 1, 1066);                                               /* a partial block */
    for (size_t i = 0; i < sizeof k_qtypes / sizeof k_qtypes[0]; i++) {
        const uint32_t t = k_qtypes[i];
        const int big = cuda_act_group(t) == 256;
        /* the 35B-A3B down shape (512 columns: 2 or 4 rows a warp), one block (4), a long row (1) */
        test_down_combine(t, 2048, 512, 16, 1, 8, 1, 1070 + i);
        test_down_combine(t, 130, big ? 256 : 96, 8, 3, 2, 1, 1080 + i);
        test_down_combine(t, 66, 2048, 8, 4, 8, 0, 1090 + i);
    }
}
