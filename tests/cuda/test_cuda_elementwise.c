/* Norms, RoPE, KV store, gates, conv and router against CPU references. */
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "cuda_test.h"
#include "util/f16.h"

static float *randn_host(int64_t n, uint64_t *rng)
{
    float *p = malloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++) p[i] = ref_randn(rng);
    return p;
}

static void test_rms_norm(void)
{
    uint64_t rng = 11;
    const int64_t rows = 7, n = 5120, xs = 5200, ys = 5150;
    float *x = randn_host(rows * xs, &rng), *w = randn_host(n, &rng);
    float *y = malloc(sizeof(float) * rows * ys), *yr = malloc(sizeof(float) * rows * n), *yg = malloc(sizeof(float) * rows * n);
    for (int64_t r = 0; r < rows; r++) {
        double ss = 0;
        for (int64_t i = 0; i < n; i++) ss += (double)x[r * xs + i] * x[r * xs + i];
        double sc = 1.0 / sqrt(ss / n + 1e-6);
        for (int64_t i = 0; i < n; i++) yr[r * n + i] = (float)(x[r * xs + i] * sc * w[i]);
    }
    float *dx = dev_upload(x, sizeof(float) * rows * xs), *dw = dev_upload(w, sizeof(float) * n);
    float *dy = dev_alloc(sizeof(float) * rows * ys);
    OK(cuda_rms_norm(&g_ctx, dy, ys, dx, xs, rows, n, dw, 1e-6f));
    dev_download(y, dy, sizeof(float) * rows * ys);
    for (int64_t r = 0; r < rows; r++) memcpy(yg + r * n, y + r * ys, sizeof(float) * n);
    check_err("rms_norm 7 rows x 5120, strided", ref_rel_err(yg, yr, rows * n), 1e-6);
    /* per-head in place: 2 tokens x 8 heads of 256 */
    float *h = randn_host(16 * 256, &rng), *hw = randn_host(256, &rng), *hr = malloc(sizeof(float) * 16 * 256);
    for (int r = 0; r < 16; r++) {
        double ss = 0;
        for (int i = 0; i < 256; i++) ss += (double)h[r * 256 + i] * h[r * 256 + i];
        double sc = 1.0 / sqrt(ss / 256 + 1e-6);
        for (int i = 0; i < 256; i++) hr[r * 256 + i] = (float)(h[r * 256 + i] * sc * hw[i]);
    }
    float *dh = dev_upload(h, sizeof(float) * 16 * 256), *dhw = dev_upload(hw, sizeof(float) * 256);
    OK(cuda_rms_norm(&g_ctx, dh, 256, dh, 256, 16, 256, dhw, 1e-6f));
    dev_download(h, dh, sizeof(float) * 16 * 256);
    check_err("rms_norm per head, in place", ref_rel_err(h, hr, 16 * 256), 1e-6);
    cudaFree(dx); cudaFree(dw); cudaFree(dy); cudaFree(dh); cudaFree(dhw);
    free(x); free(w); free(y); free(yr); free(yg); free(h); free(hw); free(hr);
}

static void test_rope(int mode, int n_rot, int d, const char *name)
{
    uint64_t rng = 21 + mode;
    const int n_t = 5, n_head = 3, t_stride = n_head * d + 17;
    int32_t pos[5] = {0, 1, 77, 4095, 131071};
    int32_t sec[4] = {11, 11, 10, 0};
    const float theta = mode == 2 ? 1e7f : 1e6f;
    float *x = randn_host(n_t * t_stride, &rng), *xr = malloc(sizeof(float) * n_t * t_stride);
    memcpy(xr, x, sizeof(float) * n_t * t_stride);
    const float ts = powf(theta, -2.0f / n_rot);
    for (int t = 0; t < n_t; t++) {
        float th[4] = {(float)pos[t], (float)pos[t], (float)pos[t], 0.0f};
        for (int i = 0; i < n_rot / 2; i++) {
            int comp = 0;
            if (mode == 2) {
                int total = 32, s = i % total;
                comp = (s % 3 == 1 && s < 3 * sec[1]) ? 1 : (s % 3 == 2 && s < 3 * sec[2]) ? 2 : (s % 3 == 0 && s < 3 * sec[0]) ? 0 : 3;
            }
            float ang = th[comp];
            for (int c = 0; c < 4; c++) th[c] *= ts;
            double co = cos(ang), si = sin(ang);
            for (int h = 0; h < n_head; h++) {
                float *p = xr + t * t_stride + h * d;
                int ia = mode == 0 ? 2 * i : i, ib = mode == 0 ? 2 * i + 1 : i + n_rot / 2;
                double a = p[ia], b = p[ib];
                p[ia] = (float)(a * co - b * si);
                p[ib] = (float)(a * si + b * co);
            }
        }
    }
    int32_t *dpos = dev_upload(pos, sizeof pos);
    float *dcs = dev_alloc(sizeof(float) * n_t * n_rot), *dx = dev_upload(x, sizeof(float) * n_t * t_stride);
    OK(cuda_rope_cache(&g_ctx, dcs, dpos, n_t, mode, n_rot, theta, 1.0f, NULL, sec));
    OK(cuda_rope(&g_ctx, dx, n_t, t_stride, n_head, d, dcs, mode, n_rot));
    dev_download(x, dx, sizeof(float) * n_t * t_stride);
    check_err(name, ref_rel_err(x, xr, n_t * t_stride), 2e-5);
    cudaFree(dpos); cudaFree(dcs); cudaFree(dx);
    free(x); free(xr);
}

static void test_kv_store(void)
{
    uint64_t rng = 31;
    const int n_t = 9, nkv = 4, d = 256, cap = 64, pos0 = 20;
    float *x = randn_host(n_t * nkv * d, &rng);
    uint16_t *cache = malloc(2 * (size_t)nkv * cap * d);
    uint16_t *dc = dev_alloc(2 * (size_t)nkv * cap * d);
    float *dx = dev_upload(x, sizeof(float) * n_t * nkv * d);
    OK(cuda_kv_store(&g_ctx, dc, (size_t)cap * d, pos0, dx, nkv * d, n_t, nkv, d));
    dev_download(cache, dc, 2 * (size_t)nkv * cap * d);
    int bad = 0;
    for (int t = 0; t < n_t; t++)
        for (int g = 0; g < nkv; g++)
            for (int i = 0; i < d; i++)
                bad += cache[(size_t)g * cap * d + (size_t)(pos0 + t) * d + i] != wk_f32_to_f16(x[(t * nkv + g) * d + i]);
    check_err("kv_store F16 bits exact", bad, 0);
    cudaFree(dc); cudaFree(dx); free(x); free(cache);
}

/* Q8_0 rows against the CPU backend's kv_store, byte for byte; shifted: the
 * position comes from a device int as in a replayed decode graph. */
static void test_kv_store_q8_0(int d, int shifted)
{
    uint64_t rng = 33 + d;
    const int n_t = 9, nkv = 4, cap = 63, pos0 = 20, at = shifted ? pos0 + 5 : pos0;
    const size_t row = be_kv_row_units(BE_KV_Q8_0, (size_t)d), hs = (size_t)cap * row, units = hs * nkv;
    const size_t xs = (size_t)nkv * d + 8; /* floats between tokens */
    float *x = randn_host((int64_t)n_t * xs, &rng);
    /* token 0, head 0: an all-zero block (scale 0), and a block with scale
     * exactly 1 and ties x.5 (roundf: away from zero) */
    for (int i = 0; i < 32; i++) x[i] = 0.0f;
    if (d >= 64) {
        const float ties[8] = {127.0f, 2.5f, -3.5f, 0.5f, -0.5f, 126.5f, -1.5f, 64.5f};
        for (int i = 0; i < 32; i++) x[32 + i] = i < 8 ? ties[i] : (float)(i - 16) * 0.25f;
    }
    wk_error err = {0};
    be_backend *cpu;
    if (be_cpu_new(&cpu, 1, &err)) {
        fprintf(stderr, "cpu backend: %s\n", err.msg);
        exit(2);
    }
    uint16_t *ref = malloc(2 * units), *got = malloc(2 * units);
    memset(ref, 0xFF, 2 * units); /* the poison dev_alloc puts on the device copy */
    be_kv_store_typed(cpu, BE_KV_Q8_0, ref, hs, at, x, xs, n_t, nkv, d);
    be_free(cpu);
    uint16_t *dc = dev_alloc(2 * units);
    float *dx = dev_upload(x, sizeof(float) * n_t * xs);
    int32_t *dpos = dev_upload(&at, sizeof at);
    OK(cuda_kv_store_q8_0_shifted(&g_ctx, dc, hs, pos0, shifted ? dpos : NULL, pos0, dx, xs, n_t, nkv, d));
    dev_download(got, dc, 2 * units);
    /* every byte, written rows and the rest (which must stay untouched) */
    int bad = 0;
    for (size_t i = 0; i < 2 * units; i++) bad += ((const uint8_t *)ref)[i] != ((const uint8_t *)got)[i];
    char name[96];
    snprintf(name, sizeof name, "kv_store Q8_0 d=%d%s bytes exact vs CPU", d, shifted ? " (device position)" : "");
    check_err(name, bad, 0);
    cudaFree(dc); cudaFree(dx); cudaFree(dpos); free(x); free(ref); free(got);
}

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

/* A layer's q and k rotated by one cuda_rope2 launch equal two cuda_rope launches bit for
 * bit (qwen35 shapes: q heads interleaved with their gates, partial IMROPE). */
static void test_rope2(int n_t)
{
    uint64_t rng = 41 + n_t;
    const int H = 6, Hkv = 2, dk = 256, n_rot = 64;
    const int32_t sec[4] = {11, 11, 10, 0};
    const size_t q_stride = (size_t)2 * H * dk, k_stride = (size_t)Hkv * dk;
    float *q = randn_host((int64_t)n_t * q_stride, &rng), *k = randn_host((int64_t)n_t * k_stride, &rng);
    int32_t pos[8];
    for (int t = 0; t < 8; t++) pos[t] = 1000 + 7 * t;
    int32_t *dpos = dev_upload(pos, sizeof pos);
    float *dcs = dev_alloc(sizeof(float) * n_t * n_rot);
    OK(cuda_rope_cache(&g_ctx, dcs, dpos, n_t, 2, n_rot, 1e7f, 1.0f, NULL, sec));
    float *dq[2], *dk_[2], *hq[2], *hk[2];
    for (int p = 0; p < 2; p++) {
        dq[p] = dev_upload(q, sizeof(float) * n_t * q_stride);
        dk_[p] = dev_upload(k, sizeof(float) * n_t * k_stride);
    }
    OK(cuda_rope(&g_ctx, dq[0], n_t, q_stride, H, 2 * dk, dcs, 2, n_rot));
    OK(cuda_rope(&g_ctx, dk_[0], n_t, k_stride, Hkv, dk, dcs, 2, n_rot));
    OK(cuda_rope2(&g_ctx, dq[1], q_stride, H, 2 * dk, dk_[1], k_stride, Hkv, dk, n_t, dcs, 2, n_rot));
    for (int p = 0; p < 2; p++) {
        hq[p] = malloc(sizeof(float) * n_t * q_stride);
        hk[p] = malloc(sizeof(float) * n_t * k_stride);
        dev_download(hq[p], dq[p], sizeof(float) * n_t * q_stride);
        dev_download(hk[p], dk_[p], sizeof(float) * n_t * k_stride);
    }
    char name[96];
    snprintf(name, sizeof name, "rope2 (q and k, one launch) = two ropes, %d tokens (bits)", n_t);
    check_err(name, memcmp(hq[0], hq[1], sizeof(float) * n_t * q_stride) ||
                        memcmp(hk[0], hk[1], sizeof(float) * n_t * k_stride), 0);
    for (int p = 0; p < 2; p++) {
        cudaFree(dq[p]); cudaFree(dk_[p]); free(hq[p]); free(hk[p]);
    }
    cudaFree(dpos); cudaFree(dcs); free(q); free(k);
}

/* K and V stored by one cuda_kv_store2_shifted launch equal two single stores byte for byte
 * (every byte of both caches compared, untouched ones included), at a device position. */
static void test_kv_store2(int kv_type, int d)
{
    uint64_t rng = 51 + d + kv_type;
    const int n_t = 3, nkv = 4, cap = 40, pos0 = 17, at = pos0 + 6;
    const size_t row = be_kv_row_units(kv_type, (size_t)d), hs = (size_t)cap * row, units = hs * nkv;
    const size_t xs = (size_t)nkv * d + 8;
    float *x = randn_host((int64_t)2 * n_t * xs, &rng); /* K rows, then V rows */
    float *dx = dev_upload(x, sizeof(float) * 2 * n_t * xs);
    int32_t *dpos = dev_upload(&at, sizeof at);
    uint16_t *dc[2], *h[2];
    for (int p = 0; p < 2; p++) dc[p] = dev_alloc(2 * 2 * units); /* K cache, then V cache */
    if (kv_type == BE_KV_Q8_0) {
        OK(cuda_kv_store_q8_0_shifted(&g_ctx, dc[0], hs, pos0, dpos, pos0, dx, xs, n_t, nkv, d));
        OK(cuda_kv_store_q8_0_shifted(&g_ctx, dc[0] + units, hs, pos0, dpos, pos0, dx + n_t * xs, xs, n_t, nkv, d));
    } else {
        OK(cuda_kv_store_shifted(&g_ctx, dc[0], hs, pos0, dpos, pos0, dx, xs, n_t, nkv, d));
        OK(cuda_kv_store_shifted(&g_ctx, dc[0] + units, hs, pos0, dpos, pos0, dx + n_t * xs, xs, n_t, nkv, d));
    }
    OK(cuda_kv_store2_shifted(&g_ctx, kv_type, dc[1], dx, xs, dc[1] + units, dx + n_t * xs, xs, hs, pos0, dpos, pos0,
                              n_t, nkv, d));
    for (int p = 0; p < 2; p++) {
        h[p] = malloc(2 * 2 * units);
        dev_download(h[p], dc[p], 2 * 2 * units);
    }
    char name[96];
    snprintf(name, sizeof name, "kv_store2 (K and V, one launch) = two stores, %s d=%d (bytes)",
             kv_type == BE_KV_Q8_0 ? "Q8_0" : "F16", d);
    check_err(name, memcmp(h[0], h[1], 2 * 2 * units) != 0, 0);
    for (int p = 0; p < 2; p++) {
        cudaFree(dc[p]); free(h[p]);
    }
    cudaFree(dx); cudaFree(dpos); free(x);
}

static void test_gates(void)
{
    uint64_t rng = 41;
    const int64_t n = 10000;
    float *a = randn_host(n, &rng), *b = randn_host(n, &rng), *y = malloc(sizeof(float) * n), *r = malloc(sizeof(float) * n);
    float *da = dev_upload(a, sizeof(float) * n), *db = dev_upload(b, sizeof(float) * n), *dy = dev_alloc(sizeof(float) * n);
    OK(cuda_swiglu(&g_ctx, dy, da, db, n));
    dev_download(y, dy, sizeof(float) * n);
    for (int64_t i = 0; i < n; i++) r[i] = (float)(a[i] * sigm(a[i]) * b[i]);
    check_err("swiglu", ref_rel_err(y, r, n), 1e-6);
    OK(cuda_add(&g_ctx, dy, da, db, n));
    dev_download(y, dy, sizeof(float) * n);
    for (int64_t i = 0; i < n; i++) r[i] = a[i] + b[i];
    check_err("add", ref_rel_err(y, r, n), 0);
    /* mul_sigmoid on 10 rows of 1000 with strides 1000 (y) and 1000 (g) */
    CK(cudaMemcpy(dy, a, sizeof(float) * n, cudaMemcpyHostToDevice));
    OK(cuda_mul_sigmoid(&g_ctx, dy, 1000, db, 1000, 10, 1000));
    dev_download(y, dy, sizeof(float) * n);
    for (int64_t i = 0; i < n; i++) r[i] = (float)(a[i] * sigm(b[i]));
    check_err("mul_sigmoid", ref_rel_err(y, r, n), 1e-6);
    CK(cudaMemcpy(dy, a, sizeof(float) * n, cudaMemcpyHostToDevice));
    OK(cuda_mul_silu(&g_ctx, dy, db, n));
    dev_download(y, dy, sizeof(float) * n);
    for (int64_t i = 0; i < n; i++) r[i] = (float)(a[i] * b[i] * sigm(b[i]));
    check_err("mul_silu", ref_rel_err(y, r, n), 1e-6);
    CK(cudaMemcpy(dy, a, sizeof(float) * n, cudaMemcpyHostToDevice));
    OK(cuda_add_scaled_sigmoid(&g_ctx, dy, db, da, 10, 1000)); /* s = first 10 of a */
    dev_download(y, dy, sizeof(float) * n);
    for (int64_t i = 0; i < n; i++) r[i] = (float)(a[i] + sigm(a[i / 1000]) * b[i]);
    check_err("add_scaled_sigmoid", ref_rel_err(y, r, n), 1e-6);
    cudaFree(da); cudaFree(db); cudaFree(dy);
    free(a); free(b); free(y); free(r);
}

static void test_ssm_conv(int n_t)
{
    uint64_t rng = 51 + n_t;
    const int n_ch = 300, k = 4, xs = 320;
    float *x = randn_host(n_t * xs, &rng), *w = randn_host(n_ch * k, &rng), *st = randn_host((k - 1) * n_ch, &rng);
    float *yr = malloc(sizeof(float) * n_t * n_ch), *y = malloc(sizeof(float) * n_t * xs), *yg = malloc(sizeof(float) * n_t * n_ch);
    float *str = malloc(sizeof(float) * (k - 1) * n_ch), *stg = malloc(sizeof(float) * (k - 1) * n_ch);
    for (int t = 0; t < n_t; t++)
        for (int c = 0; c < n_ch; c++) {
            double acc = 0;
            for (int j = 0; j < k; j++) {
                int src = t - (k - 1) + j;
                acc += (double)w[c * k + j] * (src >= 0 ? x[src * xs + c] : st[(k - 1 + src) * n_ch + c]);
            }
            yr[t * n_ch + c] = (float)(acc * sigm(acc));
        }
    for (int j = 0; j < k - 1; j++)
        for (int c = 0; c < n_ch; c++) {
            int src = n_t - (k - 1) + j;
            str[j * n_ch + c] = src >= 0 ? x[src * xs + c] : st[(k - 1 + src) * n_ch + c];
        }
    float *dx = dev_upload(x, sizeof(float) * n_t * xs), *dw = dev_upload(w, sizeof(float) * n_ch * k);
    float *dst = dev_upload(st, sizeof(float) * (k - 1) * n_ch), *dy = dev_alloc(sizeof(float) * n_t * xs);
    OK(cuda_ssm_conv(&g_ctx, dy, xs, dx, xs, n_t, n_ch, dw, k, dst));
    dev_download(y, dy, sizeof(float) * n_t * xs);
    dev_download(stg, dst, sizeof(float) * (k - 1) * n_ch);
    for (int t = 0; t < n_t; t++) memcpy(yg + t * n_ch, y + t * xs, sizeof(float) * n_ch);
    char name[64];
    snprintf(name, sizeof name, "ssm_conv n_t=%d outputs", n_t);
    check_err(name, ref_rel_err(yg, yr, n_t * n_ch), 1e-6);
    snprintf(name, sizeof name, "ssm_conv n_t=%d state", n_t);
    check_err(name, ref_rel_err(stg, str, (k - 1) * n_ch), 0);
    cudaFree(dx); cudaFree(dw); cudaFree(dst); cudaFree(dy);
    free(x); free(w); free(st); free(yr); free(y); free(yg); free(str); free(stg);
}

/* n_seq sequences of one token in one launch against a call per sequence: bit for bit. */
static void test_ssm_conv_seqs(int n_seq)
{
    uint64_t rng = 71 + n_seq;
    const int n_ch = 300, k = 4, xs = 320;
    float *x = randn_host(n_seq * xs, &rng), *w = randn_host(n_ch * k, &rng);
    float *dx = dev_upload(x, sizeof(float) * n_seq * xs), *dw = dev_upload(w, sizeof(float) * n_ch * k);
    float *dy[2], *y[2], *st[2][CUDA_SEQS_MAX], *stg[2];
    cuda_seq_states s = {n_seq, {0}};
    for (int p = 0; p < 2; p++) {
        dy[p] = dev_alloc(sizeof(float) * n_seq * xs);
        y[p] = malloc(sizeof(float) * n_seq * xs);
        stg[p] = malloc(sizeof(float) * n_seq * (k - 1) * n_ch);
    }
    for (int i = 0; i < n_seq; i++) {
        float *h = randn_host((k - 1) * n_ch, &rng);
        for (int p = 0; p < 2; p++) st[p][i] = dev_upload(h, sizeof(float) * (k - 1) * n_ch);
        free(h);
        OK(cuda_ssm_conv(&g_ctx, dy[0] + (size_t)i * xs, xs, dx + (size_t)i * xs, xs, 1, n_ch, dw, k, st[0][i]));
        s.p[i] = st[1][i];
    }
    OK(cuda_ssm_conv_seqs(&g_ctx, dy[1], xs, dx, xs, n_ch, dw, k, &s));
    for (int p = 0; p < 2; p++) {
        for (int i = 0; i < n_seq; i++) {
            float *row = malloc(sizeof(float) * xs);
            dev_download(row, dy[p] + (size_t)i * xs, sizeof(float) * xs);
            memcpy(y[p] + (size_t)i * xs, row, sizeof(float) * n_ch); /* the written channels only */
            free(row);
            dev_download(stg[p] + (size_t)i * (k - 1) * n_ch, st[p][i], sizeof(float) * (k - 1) * n_ch);
            cudaFree(st[p][i]);
        }
    }
    int same = 1;
    for (int i = 0; i < n_seq; i++)
        same &= !memcmp(y[0] + (size_t)i * xs, y[1] + (size_t)i * xs, sizeof(float) * n_ch);
    same &= !memcmp(stg[0], stg[1], sizeof(float) * n_seq * (k - 1) * n_ch);
    char name[96];
    snprintf(name, sizeof name, "ssm_conv of %d sequences in one launch = a call each (bits)", n_seq);
    check_err(name, !same, 0);
    for (int p = 0; p < 2; p++) {
        cudaFree(dy[p]); free(y[p]); free(stg[p]);
    }
    cudaFree(dx); cudaFree(dw); free(x); free(w);
}

static void test_moe_route(void)
{
    uint64_t rng = 61;
    const int n_t = 5, ne = 256, k = 8;
    float *l = randn_host(n_t * ne, &rng);
    l[3] = l[7]; /* a tie */
    int32_t ids[40], idr[40];
    float w[40], wr[40];
    for (int t = 0; t < n_t; t++) {
        double mx = -1e30, p[256], s = 0;
        for (int e = 0; e < ne; e++) mx = fmax(mx, l[t * ne + e]);
        for (int e = 0; e < ne; e++) s += p[e] = exp(l[t * ne + e] - mx);
        for (int e = 0; e < ne; e++) p[e] /= s;
        double sum = 0;
        int used[256] = {0};
        for (int j = 0; j < k; j++) {
            int b = -1;
            for (int e = 0; e < ne; e++)
                if (!used[e] && (b < 0 || p[e] > p[b])) b = e;
            used[b] = 1;
            idr[t * k + j] = b;
            wr[t * k + j] = (float)p[b];
            sum += p[b];
        }
        for (int j = 0; j < k; j++) wr[t * k + j] = (float)(wr[t * k + j] / fmax(sum, 6.1035e-5));
    }
    float *dl = dev_upload(l, sizeof(float) * n_t * ne), *dw = dev_alloc(sizeof w);
    int32_t *di = dev_alloc(sizeof ids);
    OK(cuda_moe_route(&g_ctx, dl, n_t, ne, k, di, dw));
    dev_download(ids, di, sizeof ids);
    dev_download(w, dw, sizeof w);
    int bad = 0;
    for (int i = 0; i < n_t * k; i++) bad += ids[i] != idr[i];
    check_err("moe_route ids", bad, 0);
    check_err("moe_route weights", ref_rel_err(w, wr, n_t * k), 1e-5);
    cudaFree(dl); cudaFree(dw); cudaFree(di); free(l);
}

void test_elementwise_all(void)
{
    test_rms_norm();
    test_rope(1, 128, 128, "rope NEOX full (qwen3)");
    test_rope(2, 64, 256, "rope IMROPE partial 64/256 (qwen35)");
    test_rope(0, 128, 128, "rope NORM (llama)");
    test_kv_store();
    test_kv_store_q8_0(256, 0);
    test_kv_store_q8_0(128, 1);
    test_kv_store_q8_0(64, 0);
    test_rope2(1);
    test_rope2(5);
    test_kv_store2(BE_KV_F16, 256);
    test_kv_store2(BE_KV_Q8_0, 256);
    test_kv_store2(BE_KV_Q8_0, 64);
    test_gates();
    test_ssm_conv(1);
    test_ssm_conv(2);
    test_ssm_conv(37);
    test_ssm_conv_seqs(5);
    test_ssm_conv_seqs(CUDA_SEQS_MAX);
    test_moe_route();
}
