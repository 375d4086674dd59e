/* A batched decode step's layer in two batches of launches (cuda_kv_store_batch, then
 * cuda_attn_decode_batch) against the same calls one sequence at a time
 * (cuda_kv_store2_shifted + cuda_attention): caches and outputs bit for bit, F16 and Q8_0
 * caches, sequences at other depths and bands with 1-3 queries each, and as a graph
 * replay (device positions moving every call). */
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "cuda_test.h"
#include "util/f16.h"

enum { MAX_SEQ = 6 };

typedef struct bseq {
    int n_q, pos0, cap;
    size_t hs;                /* kv head stride (uint16 units) */
    uint16_t *dk, *dv;        /* device caches */
    float *dxk, *dxv;         /* device: the new K and V rows */
    float *dq, *dout;
} bseq;

/* Caches of random F16 bits or Q8_0 blocks (random codes, scales 1/64..1) up to pos0. */
static void fill_cache(uint16_t *h, size_t hs, int n_head_kv, int d, int kv_type, int n_pos, uint64_t *rng)
{
    memset(h, 0, hs * n_head_kv * 2);
    const size_t row = be_kv_row_units(kv_type, (size_t)d);
    for (int g = 0; g < n_head_kv; g++)
        for (int p = 0; p < n_pos; p++) {
            uint16_t *r = h + g * hs + (size_t)p * row;
            if (kv_type == BE_KV_F16) {
                for (int i = 0; i < d; i++) r[i] = wk_f32_to_f16(ref_randn(rng));
                continue;
            }
            unsigned char *b = (unsigned char *)r;
            for (int blk = 0; blk < d / 32; blk++, b += 34) {
                const uint16_t sc = wk_f32_to_f16(1.0f / (float)(1 + (ref_randn(rng) > 0 ? 1 : 63)));
                memcpy(b, &sc, 2);
                for (int i = 0; i < 32; i++) b[2 + i] = (unsigned char)(int8_t)(ref_randn(rng) * 40.0f);
            }
        }
}

static void run_batch_case(const char *label, int kv_type, int n_seq, const int *n_q, const int *pos0, int n_head,
                           int n_head_kv, int d, int shift, uint64_t seed)
{
    uint64_t rng = seed;
    const size_t qs = (size_t)n_head * d, kvw = (size_t)n_head_kv * d;
    bseq S[MAX_SEQ];
    cuda_attn one[MAX_SEQ], many[MAX_SEQ];
    cuda_kv_batch kb;
    memset(&kb, 0, sizeof kb);
    kb.n = n_seq;
    uint16_t *saved_k[MAX_SEQ], *saved_v[MAX_SEQ];
    int32_t *dpos = NULL;
    int32_t pos_now[MAX_SEQ];
    for (int i = 0; i < n_seq; i++) pos_now[i] = pos0[i];
    if (shift) dpos = dev_upload(pos_now, sizeof pos_now);
    for (int i = 0; i < n_seq; i++) {
        bseq *s = &S[i];
        s->n_q = n_q[i];
        s->pos0 = pos0[i];
        s->cap = pos0[i] + n_q[i] + 17 + 2 * i; /* capacities and head strides differ */
        s->hs = (size_t)s->cap * be_kv_row_units(kv_type, (size_t)d);
        uint16_t *h = malloc(s->hs * n_head_kv * 2);
        fill_cache(h, s->hs, n_head_kv, d, kv_type, s->pos0, &rng);
        s->dk = dev_upload(h, s->hs * n_head_kv * 2);
        saved_k[i] = dev_upload(h, s->hs * n_head_kv * 2);
        fill_cache(h, s->hs, n_head_kv, d, kv_type, s->pos0, &rng);
        s->dv = dev_upload(h, s->hs * n_head_kv * 2);
        saved_v[i] = dev_upload(h, s->hs * n_head_kv * 2);
        free(h);
        float *x = malloc(sizeof(float) * s->n_q * (qs + 2 * kvw));
        for (size_t j = 0; j < s->n_q * (qs + 2 * kvw); j++) x[j] = ref_randn(&rng);
        s->dq = dev_upload(x, sizeof(float) * s->n_q * qs);
        s->dxk = dev_upload(x + s->n_q * qs, sizeof(float) * s->n_q * kvw);
        s->dxv = dev_upload(x + s->n_q * (qs + kvw), sizeof(float) * s->n_q * kvw);
        free(x);
        s->dout = dev_alloc(sizeof(float) * s->n_q * qs);
        const cuda_attn a = {s->dq, qs, 0, s->n_q, s->pos0, s->dk, s->dv, s->hs, s->pos0 + s->n_q, n_head, n_head_kv,
                             d, 1.0f / sqrtf((float)d), {0, 0, 0, 0}, s->dout, qs, NULL, 0, kv_type};
        one[i] = many[i] = a;
        /* a replay: the call describes the step `shift` positions earlier and the device position moves it */
        const int32_t ref = s->pos0 - shift;
        if (shift) {
            many[i].q_pos0 -= shift;
            many[i].n_kv -= shift;
            many[i].pos_dev = dpos + i;
            many[i].pos_ref = ref;
        }
        kb.k[i] = s->dk;
        kb.v[i] = s->dv;
        kb.xk[i] = s->dxk;
        kb.xv[i] = s->dxv;
        kb.xk_stride[i] = kb.xv_stride[i] = kvw;
        kb.head_stride[i] = s->hs;
        kb.pos0[i] = shift ? ref : s->pos0;
        kb.pos_ref[i] = ref;
        kb.n_t[i] = s->n_q;
        kb.pos_dev[i] = shift ? dpos + i : NULL;
    }
    /* one at a time */
    wk_error err = {0};
    float *o1[MAX_SEQ];
    uint16_t *k1[MAX_SEQ], *v1[MAX_SEQ];
    for (int i = 0; i < n_seq; i++) {
        bseq *s = &S[i];
        OK(cuda_kv_store2_shifted(&g_ctx, kv_type, s->dk, s->dxk, kvw, s->dv, s->dxv, kvw, s->hs, s->pos0, NULL, 0,
                                  s->n_q, n_head_kv, d));
        if (cuda_attention(&g_ctx, &one[i], &err)) {
            fprintf(stderr, "attention: %s\n", err.msg);
            exit(2);
        }
        o1[i] = malloc(sizeof(float) * s->n_q * qs);
        k1[i] = malloc(s->hs * n_head_kv * 2);
        v1[i] = malloc(s->hs * n_head_kv * 2);
        dev_download(o1[i], s->dout, sizeof(float) * s->n_q * qs);
        dev_download(k1[i], s->dk, s->hs * n_head_kv * 2);
        dev_download(v1[i], s->dv, s->hs * n_head_kv * 2);
        /* back to the caches before the step, the output poisoned */
        CK(cudaMemcpy(s->dk, saved_k[i], s->hs * n_head_kv * 2, cudaMemcpyDeviceToDevice));
        CK(cudaMemcpy(s->dv, saved_v[i], s->hs * n_head_kv * 2, cudaMemcpyDeviceToDevice));
        CK(cudaMemset(s->dout, 0xFF, sizeof(float) * s->n_q * qs));
    }
    /* batched */
    OK(cuda_kv_store_batch(&g_ctx, kv_type, &kb, n_head_kv, d));
    const int rc = cuda_attn_decode_batch(&g_ctx, many, n_seq, &err);
    if (rc) {
        fprintf(stderr, "attention batch: %s\n", rc == 1 ? "not taken" : err.msg);
        exit(2);
    }
    int same = 1;
    for (int i = 0; i < n_seq; i++) {
        bseq *s = &S[i];
        float *o = malloc(sizeof(float) * s->n_q * qs);
        uint16_t *k = malloc(s->hs * n_head_kv * 2), *v = malloc(s->hs * n_head_kv * 2);
        dev_download(o, s->dout, sizeof(float) * s->n_q * qs);
        dev_download(k, s->dk, s->hs * n_head_kv * 2);
        dev_download(v, s->dv, s->hs * n_head_kv * 2);
        same &= memcmp(o, o1[i], sizeof(float) * s->n_q * qs) == 0 && memcmp(k, k1[i], s->hs * n_head_kv * 2) == 0 &&
                memcmp(v, v1[i], s->hs * n_head_kv * 2) == 0;
        free(o); free(k); free(v); free(o1[i]); free(k1[i]); free(v1[i]);
        cudaFree(s->dk); cudaFree(s->dv); cudaFree(saved_k[i]); cudaFree(saved_v[i]);
        cudaFree(s->dxk); cudaFree(s->dxv); cudaFree(s->dq); cudaFree(s->dout);
    }
    if (dpos) cudaFree(dpos);
    char name[200];
    snprintf(name, sizeof name, "attn batch %s %d seqs h=%d/%d d=%d%s%s = one by one (bits)", label, n_seq, n_head,
             n_head_kv, d, kv_type == BE_KV_Q8_0 ? " q8_0" : "", shift ? " replayed" : "");
    check_err(name, same ? 0 : 1, 0);
}

void test_attn_batch_all(void)
{
    const int q1[] = {1, 1, 1, 1, 1, 1}, qmix[] = {1, 3, 2, 1, 3};
    const int p27[] = {99, 4100, 37, 8000, 511, 2}, pmix[] = {1, 700, 4093, 129, 40};
    for (int kv = BE_KV_F16; kv <= BE_KV_Q8_0; kv++) {
        run_batch_case("27B", kv, 6, q1, p27, 24, 4, 256, 0, 100 + kv);
        run_batch_case("27B", kv, 6, q1, p27, 24, 4, 256, 2, 110 + kv);
        run_batch_case("mixed queries", kv, 5, qmix, pmix, 8, 2, 128, 0, 120 + kv);
        run_batch_case("mixed queries", kv, 5, qmix, pmix, 8, 2, 128, 1, 130 + kv);
        run_batch_case("d64", kv, 3, qmix, pmix, 16, 1, 64, 0, 140 + kv);
    }
}
