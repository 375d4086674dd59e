/* Flash attention (prefill + decode, dense + approximate policy, GQA, F16 and
 * Q8_0 KV caches) and the Gated DeltaNet scan against the CPU references. */
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "cuda_test.h"
#include "util/f16.h"

static int g_gated; /* queries interleaved with gates (qwen35): head h at 2·h·d, token stride 2·H·d */
static int g_kv_type;          /* BE_KV_F16 or BE_KV_Q8_0 */
static int g_shift;            /* decode: also replay the call shifted by this many positions (pos_dev) */
static be_backend *g_cpu;      /* Q8_0 caches are filled by the CPU backend's kv_store */

/* A Q8_0 cache of n_head_kv heads (hs units apart) holding n_kv random
 * positions, quantized by the CPU backend; the rest of the capacity is 0xFF
 * bytes (NaN scales), which the kernels must never let into a result. */
static uint16_t *q8_cache(int n_kv, int n_head_kv, int d, size_t hs, uint64_t *rng)
{
    uint16_t *c = malloc(2 * hs * n_head_kv);
    memset(c, 0xFF, 2 * hs * n_head_kv);
    float *x = malloc(sizeof(float) * (size_t)n_kv * n_head_kv * d);
    for (size_t i = 0; i < (size_t)n_kv * n_head_kv * d; i++) x[i] = ref_randn(rng);
    be_kv_store_typed(g_cpu, BE_KV_Q8_0, c, hs, 0, x, (size_t)n_head_kv * d, n_kv, n_head_kv, d);
    free(x);
    return c;
}

/* Runs one attention call (poisoned output first) and gathers the head outputs into o. */
static void run_attention_kernel(const cuda_attn *a, int path, float *dout, float *out, int n_q, size_t out_stride,
                                 int row, float *o)
{
    CK(cudaMemset(dout, 0xFF, sizeof(float) * n_q * out_stride));
    wk_error err = {0};
    if (cuda_attention_path(&g_ctx, a, path, &err)) {
        fprintf(stderr, "attention: %s\n", err.msg);
        exit(2);
    }
    dev_download(out, dout, sizeof(float) * n_q * out_stride);
    for (int i = 0; i < n_q; i++) memcpy(o + (size_t)i * row, out + i * out_stride, sizeof(float) * row);
}

static void run_attention_case(const char *label, int path, int n_q, int q_pos0, int n_kv, int n_head,
                               int n_head_kv, int d, int approx, int global, int window, int dense_tail,
                               uint64_t seed)
{
    uint64_t rng = seed;
    const int cap = n_kv + 37;              /* cache capacity > n_kv: strides differ from sizes */
    /* kv head stride. Q8_0 at d 64 and 128 with an odd capacity (even n_kv):
     * heads after the first are not 16-byte aligned (the prefill's 4-byte copies) */
    const size_t hs = (size_t)cap * be_kv_row_units(g_kv_type, (size_t)d);
    const size_t q_stride = (size_t)n_head * d + 8, out_stride = (size_t)n_head * d + 24;
    float *q = malloc(sizeof(float) * n_q * q_stride);
    for (size_t i = 0; i < n_q * q_stride; i++) q[i] = ref_randn(&rng);
    uint16_t *k, *v;
    if (g_kv_type == BE_KV_Q8_0) {
        k = q8_cache(n_kv, n_head_kv, d, hs, &rng);
        v = q8_cache(n_kv, n_head_kv, d, hs, &rng);
    } else {
        k = malloc(2 * hs * n_head_kv);
        v = malloc(2 * hs * n_head_kv);
        for (size_t i = 0; i < hs * n_head_kv; i++) {
            k[i] = wk_f32_to_f16(ref_randn(&rng));
            v[i] = wk_f32_to_f16(ref_randn(&rng));
        }
    }
    const int dense_from = q_pos0 + (n_q > dense_tail ? n_q - dense_tail : 0);
    float *ref = calloc((size_t)n_q * out_stride, sizeof(float)), *out = malloc(sizeof(float) * n_q * out_stride);
    const float scale = 1.0f / sqrtf((float)d);
    ref_attention_kv(q, q_stride, n_q, q_pos0, k, v, hs, g_kv_type, n_kv, n_head, n_head_kv, d, scale, approx, global,
                     window, dense_from, ref, out_stride);
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
                   {approx, global, window, dense_from}, dout, out_stride, NULL, 0, g_kv_type};
    float *o1 = malloc(sizeof(float) * n_q * n_head * d), *o2 = malloc(sizeof(float) * n_q * n_head * d);
    float *o3 = malloc(sizeof(float) * n_q * n_head * d);
    for (int i = 0; i < n_q; i++) /* compare only the head outputs (the padding between tokens is not written) */
        memcpy(o2 + (size_t)i * n_head * d, ref + i * out_stride, sizeof(float) * n_head * d);
    /* decode: the tensor-core kernel, then the split-K kernel (cuda_attn_decode_kernel(0)) */
    const int n_kernels = path == 1 && n_head / n_head_kv <= 8 ? 2 : 1;
    for (int kern = 0; kern < n_kernels; kern++) {
        const int tc = path == 1 && kern == 0;
        const int prev = path == 1 ? cuda_attn_decode_kernel(tc) : 0;
        run_attention_kernel(&a, path, dout, out, n_q, out_stride, n_head * d, o1);
        char name[200];
        snprintf(name, sizeof name, "attn %s %s q=%d@%d kv=%d h=%d/%d d=%d%s%s%s",
                 path == 1 ? (tc ? "decode-tc" : "decode-splitk") : "prefill", label, n_q, q_pos0, n_kv, n_head,
                 n_head_kv, d, approx ? " approx" : "", g_gated ? " gated-q" : "", g_kv_type == BE_KV_Q8_0 ? " q8_0" : "");
        /* prefill and the tensor-core decode round Q and P (and Q8_0 keys and
         * values) to F16; the split-K decode stays F32 (Q8_0: scale × code is
         * exact in F32) */
        check_err(name, ref_rel_err(o1, o2, (int64_t)n_q * n_head * d), path == 1 && !tc ? 2e-5 : 4e-3);
        if (path == 1 && g_shift) {
            /* a graph replay: the call describes the step g_shift positions
             * earlier (same band) and *pos_dev - pos_ref moves it to this one:
             * the same split, so the same bits */
            const int32_t pos_ref = 1000 + q_pos0 - g_shift, pos_now = 1000 + q_pos0;
            int32_t *dpos = dev_upload(&pos_now, sizeof pos_now);
            cuda_attn sa = a;
            sa.q_pos0 -= g_shift;
            sa.n_kv -= g_shift;
            sa.mask.dense_from -= g_shift;
            sa.pos_dev = dpos;
            sa.pos_ref = pos_ref;
            run_attention_kernel(&sa, path, dout, out, n_q, out_stride, n_head * d, o3);
            snprintf(name, sizeof name, "attn %s graph replay %d later = direct call (bits)",
                     tc ? "decode-tc" : "decode-splitk", g_shift);
            check_err(name, memcmp(o1, o3, sizeof(float) * n_q * n_head * d) != 0, 0);
            cudaFree(dpos);
        }
        if (path == 1) cuda_attn_decode_kernel(prev);
    }
    cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dout);
    free(q); free(k); free(v); free(ref); free(out); free(o1); free(o2); free(o3);
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
    /* decode at the Qwen3.5-27B shape (24/4 heads, d 256): short, both sides
     * of the first band edge, deep; 4 queries across the edge */
    run_attention_case("27B", 1, 1, 99, 100, 24, 4, 256, 0, 0, 0, 0, 13);
    run_attention_case("27B", 1, 1, 4094, 4095, 24, 4, 256, 0, 0, 0, 0, 14);
    run_attention_case("27B", 1, 1, 4096, 4097, 24, 4, 256, 0, 0, 0, 0, 15);
    run_attention_case("27B", 1, 1, 39999, 40000, 24, 4, 256, 0, 0, 0, 0, 16);
    run_attention_case("27B band edge", 1, 4, 4093, 4097, 24, 4, 256, 0, 0, 0, 0, 17);
    run_attention_case("27B policy", 1, 1, 9999, 10000, 24, 4, 256, 1, 1000, 2000, 0, 18);
    /* 12 and 16 query heads per kv head: tensor cores only (the split-K kernel takes 8) */
    run_attention_case("G 12", 1, 1, 2999, 3000, 12, 1, 128, 0, 0, 0, 0, 41);
    run_attention_case("G 16", 1, 2, 5000, 5002, 32, 2, 64, 0, 0, 0, 0, 42);
    /* graph replay: pos_dev moves a call made 3000 positions earlier in the band */
    g_shift = 3000;
    run_attention_case("27B replay", 1, 1, 7999, 8000, 24, 4, 256, 0, 0, 0, 0, 19);
    run_attention_case("replay policy", 1, 2, 7500, 7502, 8, 2, 128, 1, 64, 128, 1, 20);
    g_shift = 0;
    g_gated = 1;
    run_attention_case("qwen35", 2, 100, 20, 120, 6, 1, 256, 0, 0, 0, 0, 11);
    run_attention_case("qwen35", 1, 1, 119, 120, 6, 1, 256, 0, 0, 0, 0, 12);
    g_gated = 0;

    /* Q8_0 KV cache */
    wk_error err = {0};
    if (be_cpu_new(&g_cpu, 1, &err)) {
        fprintf(stderr, "cpu backend: %s\n", err.msg);
        exit(2);
    }
    g_kv_type = BE_KV_Q8_0;
    /* prefill, dense: GQA, d 128 / 256 / 64, queries continuing a cache */
    run_attention_case("qwen3", 2, 200, 0, 200, 8, 2, 128, 0, 0, 0, 0, 21);
    run_attention_case("qwen35", 2, 130, 70, 200, 6, 1, 256, 0, 0, 0, 0, 22);
    run_attention_case("small", 2, 77, 3, 80, 4, 4, 64, 0, 0, 0, 0, 23);
    run_attention_case("deep", 2, 100, 4500, 4600, 4, 2, 128, 0, 0, 0, 0, 24);
    /* prefill, approximate */
    run_attention_case("policy", 2, 700, 0, 700, 4, 2, 128, 1, 64, 128, 50, 25);
    run_attention_case("policy continued", 2, 300, 500, 800, 6, 1, 256, 1, 100, 70, 20, 26);
    /* decode, in the first, second and third 4096-position band */
    run_attention_case("qwen35", 1, 1, 999, 1000, 24, 4, 256, 0, 0, 0, 0, 27);
    run_attention_case("qwen3", 1, 3, 500, 503, 16, 8, 128, 0, 0, 0, 0, 28);
    run_attention_case("policy", 1, 4, 900, 904, 8, 2, 128, 1, 64, 128, 2, 29);
    run_attention_case("first token", 1, 1, 0, 1, 8, 1, 64, 0, 0, 0, 0, 30);
    run_attention_case("band 2", 1, 1, 5000, 5001, 24, 4, 256, 0, 0, 0, 0, 31);
    run_attention_case("band 3", 1, 1, 9000, 9001, 8, 1, 128, 0, 0, 0, 0, 32);
    run_attention_case("band edge policy", 1, 2, 8190, 8192, 4, 2, 64, 1, 64, 128, 1, 33);
    run_attention_case("27B", 1, 1, 4096, 4097, 24, 4, 256, 0, 0, 0, 0, 35);
    run_attention_case("27B policy", 1, 1, 9999, 10000, 24, 4, 256, 1, 1000, 2000, 0, 36);
    g_shift = 3000;
    run_attention_case("27B replay", 1, 1, 7999, 8000, 24, 4, 256, 0, 0, 0, 0, 37);
    g_shift = 0;
    /* both paths on one shape */
    run_attention_case("12 queries", 1, 12, 300, 312, 8, 2, 128, 0, 0, 0, 0, 34);
    run_attention_case("12 queries", 2, 12, 300, 312, 8, 2, 128, 0, 0, 0, 0, 34);
    g_kv_type = BE_KV_F16;
    be_free(g_cpu);
    g_cpu = NULL;
}

/* path: 0 auto, 2 token scan, 3 chunked, 4 chunked with the F32 state kernel (cuda_gdn_scan_path); a_scale scales the log-decay
 * (1: g ≈ −1 per token, the state forgets within a few tokens; 0.02: close to real models,
 * which keep most of it across a 64-token chunk) */
static int g_gdn_pad; /* floats added to the row stride: 1 leaves v rows off 16-byte alignment */
static void run_gdn_case(int n_t, int n_hk, int n_hv, int d_k, int d_v, uint64_t seed, int path, float a_scale,
                         double tol)
{
    uint64_t rng = seed;
    const size_t qk_stride = (size_t)2 * n_hk * d_k + (size_t)n_hv * d_v + g_gdn_pad; /* as in the conv output */
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
        ssm_a[j] = -a_scale * expf(ref_randf(&rng));
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
                  n_t, n_hk, n_hv, d_k, d_v, 1e-6f, dst, dout, out_stride, {0, {0}}};
    wk_error err = {0};
    if (cuda_gdn_scan_path(&g_ctx, &g, path, &err)) {
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
    const char *pn = path == 4 ? "chunked/simt" : path == 3 ? "chunked" : path == 2 ? "scan" : "auto";
    snprintf(name, sizeof name, "gdn %s outputs n_t=%d heads %d/%d d_k=%d d_v=%d a×%g", pn, n_t, n_hk, n_hv, d_k, d_v,
             a_scale);
    check_err(name, ref_rel_err(o1, o2, (int64_t)n_t * n_hv * d_v), tol);
    snprintf(name, sizeof name, "gdn %s state n_t=%d", pn, n_t);
    check_err(name, ref_rel_err(st_gpu, st_ref, st_n), tol);
    cudaFree(dconv); cudaFree(dal); cudaFree(dbe); cudaFree(da); cudaFree(ddt); cudaFree(dst); cudaFree(dout);
    free(conv); free(alpha); free(beta); free(st); free(st_ref); free(st_gpu); free(ref); free(out); free(o1); free(o2);
}

/* A decode step's one kernel (q/k norm and gates inside the scan) against prepare + scan,
 * the path of longer batches: outputs and state must agree bit for bit. */
static void run_gdn_fused_case(int n_hk, int n_hv, int d_k, int d_v, uint64_t seed)
{
    uint64_t rng = seed;
    const size_t qk_stride = (size_t)2 * n_hk * d_k + (size_t)n_hv * d_v;
    const size_t out_n = (size_t)n_hv * d_v, st_n = (size_t)n_hv * d_k * d_v;
    float *conv = malloc(sizeof(float) * qk_stride), *ab = malloc(sizeof(float) * 2 * n_hv);
    for (size_t i = 0; i < qk_stride; i++) conv[i] = ref_randn(&rng);
    for (int i = 0; i < 2 * n_hv; i++) ab[i] = 3.0f * ref_randn(&rng); /* some softplus inputs past 20 */
    ab[0] = 25.0f;
    float ssm_a[64], dt[64];
    for (int j = 0; j < n_hv; j++) {
        ssm_a[j] = -expf(ref_randf(&rng));
        dt[j] = ref_randf(&rng);
    }
    float *st = malloc(sizeof(float) * st_n);
    for (size_t i = 0; i < st_n; i++) st[i] = 0.1f * ref_randn(&rng);
    float *dconv = dev_upload(conv, sizeof(float) * qk_stride), *dab = dev_upload(ab, sizeof(float) * 2 * n_hv);
    float *da = dev_upload(ssm_a, sizeof ssm_a), *ddt = dev_upload(dt, sizeof dt);
    float *dst[2], *dout[2];
    float *st_h[2], *out_h[2];
    for (int p = 0; p < 2; p++) {
        dst[p] = dev_upload(st, sizeof(float) * st_n);
        dout[p] = dev_alloc(sizeof(float) * out_n);
        cuda_gdn g = {dconv, dconv + n_hk * d_k, dconv + 2 * n_hk * d_k, qk_stride, qk_stride, dab, dab + n_hv, da,
                      ddt, 1, n_hk, n_hv, d_k, d_v, 1e-6f, dst[p], dout[p], out_n, {0, {0}}};
        wk_error err = {0};
        if (cuda_gdn_scan_path(&g_ctx, &g, p == 0 ? 2 : 1, &err)) { /* two kernels, then the fused one */
            fprintf(stderr, "gdn: %s\n", err.msg);
            exit(2);
        }
        st_h[p] = malloc(sizeof(float) * st_n);
        out_h[p] = malloc(sizeof(float) * out_n);
        dev_download(st_h[p], dst[p], sizeof(float) * st_n);
        dev_download(out_h[p], dout[p], sizeof(float) * out_n);
    }
    char name[128];
    snprintf(name, sizeof name, "gdn one-token kernel = prepare + scan, heads %d/%d d_k=%d (bits)", n_hk, n_hv, d_k);
    check_err(name, memcmp(out_h[0], out_h[1], sizeof(float) * out_n) || memcmp(st_h[0], st_h[1], sizeof(float) * st_n),
              0);
    for (int p = 0; p < 2; p++) {
        cudaFree(dst[p]); cudaFree(dout[p]); free(st_h[p]); free(out_h[p]);
    }
    cudaFree(dconv); cudaFree(dab); cudaFree(da); cudaFree(ddt);
    free(conv); free(ab); free(st);
}

/* n_seq sequences of one token in one launch (cuda_gdn.seqs) against a fused call per
 * sequence: outputs and states bit for bit. */
static void run_gdn_seqs_case(int n_seq, int n_hk, int n_hv, int d_k, int d_v, uint64_t seed)
{
    uint64_t rng = seed;
    const size_t qk_stride = (size_t)2 * n_hk * d_k + (size_t)n_hv * d_v;
    const size_t out_n = (size_t)n_hv * d_v, st_n = (size_t)n_hv * d_k * d_v;
    float *conv = malloc(sizeof(float) * n_seq * qk_stride), *al = malloc(sizeof(float) * n_seq * n_hv);
    float *be = malloc(sizeof(float) * n_seq * n_hv);
    for (size_t i = 0; i < n_seq * qk_stride; i++) conv[i] = ref_randn(&rng);
    for (int i = 0; i < n_seq * n_hv; i++) {
        al[i] = 3.0f * ref_randn(&rng);
        be[i] = ref_randn(&rng);
    }
    float ssm_a[64], dt[64];
    for (int j = 0; j < n_hv; j++) {
        ssm_a[j] = -expf(ref_randf(&rng));
        dt[j] = ref_randf(&rng);
    }
    float *dconv = dev_upload(conv, sizeof(float) * n_seq * qk_stride);
    float *dal = dev_upload(al, sizeof(float) * n_seq * n_hv), *dbe = dev_upload(be, sizeof(float) * n_seq * n_hv);
    float *da = dev_upload(ssm_a, sizeof ssm_a), *ddt = dev_upload(dt, sizeof dt);
    float *dst[2][CUDA_SEQS_MAX], *dout[2], *out_h[2], *st_h[2];
    float *st = malloc(sizeof(float) * st_n);
    for (int i = 0; i < n_seq; i++) {
        for (size_t e = 0; e < st_n; e++) st[e] = 0.1f * ref_randn(&rng);
        for (int p = 0; p < 2; p++) dst[p][i] = dev_upload(st, sizeof(float) * st_n);
    }
    wk_error err = {0};
    for (int p = 0; p < 2; p++) {
        dout[p] = dev_alloc(sizeof(float) * n_seq * out_n);
        cuda_gdn g = {dconv, dconv + n_hk * d_k, dconv + 2 * n_hk * d_k, qk_stride, qk_stride, dal, dbe, da,
                      ddt, 1, n_hk, n_hv, d_k, d_v, 1e-6f, NULL, dout[p], out_n, {0, {0}}};
        for (int i = 0; i < n_seq && p == 0; i++) { /* one call per sequence */
            cuda_gdn gi = g;
            gi.q += i * qk_stride;
            gi.k += i * qk_stride;
            gi.v += i * qk_stride;
            gi.alpha += i * n_hv;
            gi.beta += i * n_hv;
            gi.out += i * out_n;
            gi.state = dst[0][i];
            if (cuda_gdn_scan(&g_ctx, &gi, &err)) break;
        }
        if (p == 1) {
            g.n_t = n_seq;
            g.seqs.n = n_seq;
            for (int i = 0; i < n_seq; i++) g.seqs.p[i] = dst[1][i];
            cuda_gdn_scan(&g_ctx, &g, &err);
        }
        if (err.code) {
            fprintf(stderr, "gdn: %s\n", err.msg);
            exit(2);
        }
        out_h[p] = malloc(sizeof(float) * n_seq * out_n);
        st_h[p] = malloc(sizeof(float) * n_seq * st_n);
        dev_download(out_h[p], dout[p], sizeof(float) * n_seq * out_n);
        for (int i = 0; i < n_seq; i++) dev_download(st_h[p] + i * st_n, dst[p][i], sizeof(float) * st_n);
    }
    char name[128];
    snprintf(name, sizeof name, "gdn %d sequences in one launch = a call each, heads %d/%d d_k=%d (bits)", n_seq,
             n_hk, n_hv, d_k);
    check_err(name, memcmp(out_h[0], out_h[1], sizeof(float) * n_seq * out_n) ||
                        memcmp(st_h[0], st_h[1], sizeof(float) * n_seq * st_n), 0);
    for (int p = 0; p < 2; p++) {
        for (int i = 0; i < n_seq; i++) cudaFree(dst[p][i]);
        cudaFree(dout[p]); free(out_h[p]); free(st_h[p]);
    }
    cudaFree(dconv); cudaFree(dal); cudaFree(dbe); cudaFree(da); cudaFree(ddt);
    free(conv); free(al); free(be); free(st);
}

void test_gdn_all(void)
{
    run_gdn_seqs_case(8, 16, 48, 128, 128, 13); /* Qwen3.5-27B heads, eight streams */
    run_gdn_seqs_case(CUDA_SEQS_MAX, 2, 4, 64, 64, 14);
    run_gdn_fused_case(16, 48, 128, 128, 11); /* Qwen3.5-27B heads */
    run_gdn_fused_case(2, 4, 64, 64, 12);     /* the golden tiny qwen35 shape */
    run_gdn_case(1, 16, 48, 128, 128, 1, 0, 1.0f, 2e-5); /* decode, Qwen3.5-27B heads */
    run_gdn_case(2, 2, 6, 128, 128, 2, 0, 1.0f, 2e-5);
    for (int path = 2; path <= 4; path++) { /* the token scan, the chunked form with its state kernel on
                                              * tensor cores (3) and on the CUDA cores (4), same inputs */
        const double tol = path >= 3 ? 5e-5 : 2e-5;
        run_gdn_case(77, 4, 8, 128, 128, 3, path, 1.0f, tol);  /* across staging rounds; a partial chunk */
        run_gdn_case(300, 2, 2, 128, 64, 4, path, 1.0f, tol);  /* d_v < d_k */
        run_gdn_case(45, 2, 4, 64, 64, 5, path, 1.0f, tol);    /* the golden tiny qwen35 shape */
        run_gdn_case(64, 2, 4, 64, 192, 6, path, 0.02f, tol);  /* one full chunk; d_v > d_k, not a multiple of 64 */
        run_gdn_case(200, 16, 48, 128, 128, 7, path, 0.02f, tol); /* Qwen3.5-27B heads, slow decay */
        run_gdn_case(2100, 2, 4, 64, 64, 8, path, 0.02f, tol); /* more than one run of 32 chunks */
        run_gdn_case(130, 1, 2, 128, 32, 9, path, 0.002f, tol); /* nearly no decay */
        g_gdn_pad = 1; /* v rows not 16-byte aligned: copied 4 bytes at a time */
        run_gdn_case(100, 2, 4, 64, 64, 10, path, 0.02f, tol);
        g_gdn_pad = 0;
    }
}
