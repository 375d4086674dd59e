/* Flash attention (prefill + decode, dense + approximate policy, GQA) and the
 * Gated DeltaNet scan against the CPU references. */
#include <math.h>
#include <string.h>

#include "cuda_test.h"
#include "util/f16.h"

static int g_gated; /* queries interleaved with gates (qwen35): head h at 2·h·d, token stride 2·H·d */

static void run_attention_case(const char *label, int path, int n_q, int q_pos0, int n_kv, int n_head,
                               int n_head_kv, int d, int approx, int global, int window, int dense_tail,
                               uint64_t seed)
{
    uint64_t rng = seed;
    const int cap = n_kv + 37;              /* cache capacity > n_kv: strides differ from sizes */
    const size_t hs = (size_t)cap * d;      /* kv head stride */
    const size_t q_stride = (size_t)n_head * d + 8, out_stride = (size_t)n_head * d + 24;
    float *q = malloc(sizeof(float) * n_q * q_stride);
    for (size_t i = 0; i < n_q * q_stride; i++) q[i] = ref_randn(&rng);
    uint16_t *k = malloc(2 * hs * n_head_kv), *v = malloc(2 * hs * n_head_kv);
    for (size_t i = 0; i < hs * n_head_kv; i++) {
        k[i] = wk_f32_to_f16(ref_randn(&rng));
        v[i] = wk_f32_to_f16(ref_randn(&rng));
    }
    const int dense_from = q_pos0 + (n_q > dense_tail ? n_q - dense_tail : 0);
    float *ref = calloc((size_t)n_q * out_stride, sizeof(float)), *out = malloc(sizeof(float) * n_q * out_stride);
    const float scale = 1.0f / sqrtf((float)d);
    ref_attention(q, q_stride, n_q, q_pos0, k, v, hs, n_kv, n_head, n_head_kv, d, scale, approx, global, window,
                  dense_from, ref, out_stride);
    float *dq;
    size_t dev_q_stride = q_stride, dev_qhs = 0;
    if (g_gated) {
        dev_q_stride = (size_t)2 * n_head * d;
        dev_qhs = (size_t)2 * d;
        float *qg = malloc(sizeof(float) * n_q * dev_q_stride);
        for (size_t i = 0; i < n_q * dev_q_stride; i++) qg[i] = 1e30f; /* gate halves: must not be read */
        for (int i = 0; i < n_q; i++)
            for (int h = 0; h < n_head; h++)
                memcpy(qg + i * dev_q_stride + h * dev_qhs, q + i * q_stride + (size_t)h * d, sizeof(float) * d);
        dq = dev_upload(qg, sizeof(float) * n_q * dev_q_stride);
        free(qg);
    } else {
        dq = dev_upload(q, sizeof(float) * n_q * q_stride);
    }
    uint16_t *dk = dev_upload(k, 2 * hs * n_head_kv), *dv = dev_upload(v, 2 * hs * n_head_kv);
    float *dout = dev_alloc(sizeof(float) * n_q * out_stride);
    cuda_attn a = {dq, dev_q_stride, dev_qhs, n_q, q_pos0, dk, dv, hs, n_kv, n_head, n_head_kv, d, scale,
                   {approx, global, window, dense_from}, dout, out_stride, NULL, 0};
    wk_error err = {0};
    if (cuda_attention_path(&g_ctx, &a, path, &err)) {
        fprintf(stderr, "attention: %s\n", err.msg);
        exit(2);
    }
    dev_download(out, dout, sizeof(float) * n_q * out_stride);
    /* compare only the head outputs (the padding between tokens is not written) */
    float *o1 = malloc(sizeof(float) * n_q * n_head * d), *o2 = malloc(sizeof(float) * n_q * n_head * d);
    for (int i = 0; i < n_q; i++) {
        memcpy(o1 + (size_t)i * n_head * d, out + i * out_stride, sizeof(float) * n_head * d);
        memcpy(o2 + (size_t)i * n_head * d, ref + i * out_stride, sizeof(float) * n_head * d);
    }
    char name[160];
    snprintf(name, sizeof name, "attn %s %s q=%d@%d kv=%d h=%d/%d d=%d%s%s", path == 1 ? "decode" : "prefill",
             label, n_q, q_pos0, n_kv, n_head, n_head_kv, d, approx ? " approx" : "", g_gated ? " gated-q" : "");
    /* prefill rounds Q and P to F16 for the tensor cores; decode stays F32 */
    check_err(name, ref_rel_err(o1, o2, (int64_t)n_q * n_head * d), path == 1 ? 2e-5 : 4e-3);
    cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dout);
    free(q); free(k); free(v); free(ref); free(out); free(o1); free(o2);
}

void test_attention_all(void)
{
    /* prefill, dense */
    run_attention_case("qwen3", 2, 200, 0, 200, 8, 2, 128, 0, 0, 0, 0, 1);
    run_attention_case("qwen35", 2, 130, 70, 200, 6, 1, 256, 0, 0, 0, 0, 2);
    run_attention_case("small", 2, 77, 3, 80, 4, 4, 64, 0, 0, 0, 0, 3);
    /* prefill, approximate: global 64 + window 128, dense tail 50 */
    run_attention_case("policy", 2, 700, 0, 700, 4, 2, 128, 1, 64, 128, 50, 4);
    run_attention_case("policy continued", 2, 300, 500, 800, 6, 1, 256, 1, 100, 70, 20, 5);
    /* decode */
    run_attention_case("qwen35", 1, 1, 999, 1000, 24, 4, 256, 0, 0, 0, 0, 6);
    run_attention_case("qwen3", 1, 3, 500, 503, 16, 8, 128, 0, 0, 0, 0, 7);
    run_attention_case("policy", 1, 4, 900, 904, 8, 2, 128, 1, 64, 128, 2, 8);
    run_attention_case("first token", 1, 1, 0, 1, 8, 1, 64, 0, 0, 0, 0, 9);
    /* both paths on one shape */
    run_attention_case("12 queries", 1, 12, 300, 312, 8, 2, 128, 0, 0, 0, 0, 10);
    run_attention_case("12 queries", 2, 12, 300, 312, 8, 2, 128, 0, 0, 0, 0, 10);
    g_gated = 1;
    run_attention_case("qwen35", 2, 100, 20, 120, 6, 1, 256, 0, 0, 0, 0, 11);
    run_attention_case("qwen35", 1, 1, 119, 120, 6, 1, 256, 0, 0, 0, 0, 12);
    g_gated = 0;
}

static void run_gdn_case(int n_t, int n_hk, int n_hv, int d_k, int d_v, uint64_t seed)
{
    uint64_t rng = seed;
    const size_t qk_stride = (size_t)2 * n_hk * d_k + (size_t)n_hv * d_v; /* as in the conv output */
    const size_t v_stride = qk_stride, out_stride = (size_t)n_hv * d_v + 4;
    float *conv = malloc(sizeof(float) * n_t * qk_stride);
    for (size_t i = 0; i < n_t * qk_stride; i++) conv[i] = ref_randn(&rng);
    float *alpha = malloc(sizeof(float) * n_t * n_hv), *beta = malloc(sizeof(float) * n_t * n_hv);
    for (int i = 0; i < n_t * n_hv; i++) {
        alpha[i] = ref_randn(&rng);
        beta[i] = ref_randn(&rng);
    }
    float ssm_a[64], dt[64];
    for (int j = 0; j < n_hv; j++) {
        ssm_a[j] = -expf(ref_randf(&rng));
        dt[j] = ref_randf(&rng);
    }
    const size_t st_n = (size_t)n_hv * d_k * d_v;
    float *st = malloc(sizeof(float) * st_n), *st_ref = malloc(sizeof(float) * st_n), *st_gpu = malloc(sizeof(float) * st_n);
    for (size_t i = 0; i < st_n; i++) st[i] = 0.1f * ref_randn(&rng);
    memcpy(st_ref, st, sizeof(float) * st_n);
    float *ref = calloc((size_t)n_t * out_stride, sizeof(float)), *out = malloc(sizeof(float) * n_t * out_stride);
    const float *q = conv, *k = conv + n_hk * d_k, *v = conv + 2 * n_hk * d_k;
    ref_gdn(q, k, v, qk_stride, v_stride, alpha, beta, ssm_a, dt, n_t, n_hk, n_hv, d_k, d_v, 1e-6f, st_ref, ref,
            out_stride);
    float *dconv = dev_upload(conv, sizeof(float) * n_t * qk_stride);
    float *dal = dev_upload(alpha, sizeof(float) * n_t * n_hv), *dbe = dev_upload(beta, sizeof(float) * n_t * n_hv);
    float *da = dev_upload(ssm_a, sizeof ssm_a), *ddt = dev_upload(dt, sizeof dt);
    float *dst = dev_upload(st, sizeof(float) * st_n), *dout = dev_alloc(sizeof(float) * n_t * out_stride);
    cuda_gdn g = {dconv, dconv + n_hk * d_k, dconv + 2 * n_hk * d_k, qk_stride, v_stride, dal, dbe, da, ddt,
                  n_t, n_hk, n_hv, d_k, d_v, 1e-6f, dst, dout, out_stride};
    wk_error err = {0};
    if (cuda_gdn_scan(&g_ctx, &g, &err)) {
        fprintf(stderr, "gdn: %s\n", err.msg);
        exit(2);
    }
    dev_download(out, dout, sizeof(float) * n_t * out_stride);
    dev_download(st_gpu, dst, sizeof(float) * st_n);
    float *o1 = malloc(sizeof(float) * n_t * n_hv * d_v), *o2 = malloc(sizeof(float) * n_t * n_hv * d_v);
    for (int t = 0; t < n_t; t++) {
        memcpy(o1 + (size_t)t * n_hv * d_v, out + t * out_stride, sizeof(float) * n_hv * d_v);
        memcpy(o2 + (size_t)t * n_hv * d_v, ref + t * out_stride, sizeof(float) * n_hv * d_v);
    }
    char name[128];
    snprintf(name, sizeof name, "gdn scan outputs n_t=%d heads %d/%d d_k=%d d_v=%d", n_t, n_hk, n_hv, d_k, d_v);
    check_err(name, ref_rel_err(o1, o2, (int64_t)n_t * n_hv * d_v), 2e-5);
    snprintf(name, sizeof name, "gdn scan state n_t=%d", n_t);
    check_err(name, ref_rel_err(st_gpu, st_ref, st_n), 2e-5);
    cudaFree(dconv); cudaFree(dal); cudaFree(dbe); cudaFree(da); cudaFree(ddt); cudaFree(dst); cudaFree(dout);
    free(conv); free(alpha); free(beta); free(st); free(st_ref); free(st_gpu); free(ref); free(out); free(o1); free(o2);
}

void test_gdn_all(void)
{
    run_gdn_case(1, 16, 48, 128, 128, 1); /* decode, Qwen3.5-27B heads */
    run_gdn_case(2, 2, 6, 128, 128, 2);
    run_gdn_case(77, 4, 8, 128, 128, 3);  /* prefill across staging rounds */
    run_gdn_case(300, 2, 2, 128, 64, 4);
    run_gdn_case(45, 2, 4, 64, 64, 5);    /* the golden tiny qwen35 shape */
}
