/* End-to-end throughput of a model on the CUDA backend through model_forward,
 * llama-bench style: pp<N> = one prefill of N tokens from an empty context
 * (or from a saved depth), tg<N> = N single-token decode steps with a host
 * argmax after each. Synthesizes the model first when the file is missing.
 * usage: e2e_cuda FILE [PRESET TYPE] [DEPTH]
 *   e.g. e2e_cuda /tmp/q35-27b-q4k.gguf qwen3.5-27b q4_k 32768
 * Prints one line per test and the weight bytes per token. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "backend/cuda/cuda_backend.h"
#include "model/model.h"
#include "model/model_impl.h"
#include "model/synth.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define CHUNK 4096 /* prefill batch (scratch rows) */

typedef struct run {
    const model *m;
    be_backend *be;
    model_scratch *s;
    model_state st;
    model_layer_state *layers;
    void *kv, *rec, *rec_saved;
    size_t rec_bytes;
    float *logits;
    int32_t *tokens;
    int32_t n_tok;
} run;

static uint32_t g_lcg = 12345;
static void make_tokens(int32_t *t, int n, uint32_t n_vocab)
{
    for (int i = 0; i < n; i++) {
        g_lcg = g_lcg * 1664525u + 1013904223u;
        t[i] = (int32_t)(3 + (g_lcg >> 8) % (n_vocab - 3));
    }
}

static int prefill(run *r, int n, double *secs, wk_error *err)
{
    make_tokens(r->tokens, n, r->m->hp.n_vocab);
    double t0 = now_s();
    for (int i = 0; i < n; i += CHUNK) {
        int c = n - i < CHUNK ? n - i : CHUNK;
        int rc = model_forward(r->m, r->be, r->s, &r->st, r->tokens + i, c,
                               i + c == n ? MODEL_LOGITS_LAST : MODEL_LOGITS_NONE, r->logits, NULL, err);
        if (!rc) rc = be_cuda_status(r->be, err);
        if (rc) return rc;
    }
    cudaDeviceSynchronize();
    *secs = now_s() - t0;
    return 0;
}

static int decode(run *r, int n, double *secs, wk_error *err)
{
    const uint32_t V = r->m->hp.n_vocab;
    int32_t tok = 3;
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        int rc = model_forward(r->m, r->be, r->s, &r->st, &tok, 1, MODEL_LOGITS_LAST, r->logits, NULL, err);
        if (!rc) rc = be_cuda_status(r->be, err);
        if (rc) return rc;
        int best = 0;
        for (uint32_t v = 1; v < V; v++)
            if (r->logits[v] > r->logits[best]) best = (int)v;
        tok = best;
    }
    *secs = now_s() - t0;
    return 0;
}

static void reset(run *r)
{
    r->st.n_past = 0;
    if (r->rec) cudaMemset(r->rec, 0, r->rec_bytes);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: e2e_cuda FILE [PRESET TYPE] [DEPTH]\n");
        return 2;
    }
    const char *path = argv[1];
    const int depth = argc > 4 ? atoi(argv[4]) : (argc == 3 ? atoi(argv[2]) : 0);
    wk_error err = {0};
    struct stat stt;
    if (stat(path, &stt) != 0) {
        if (argc < 4) {
            fprintf(stderr, "e2e_cuda: %s missing and no preset given\n", path);
            return 2;
        }
        synth_options o;
        if (synth_options_init(&o, argv[2], &err) || synth_parse_quant(argv[3], &o.quant, &err)) {
            fprintf(stderr, "e2e_cuda: %s\n", err.msg);
            return 2;
        }
        o.n_threads = 0;
        double t0 = now_s();
        if (synth_write(&o, path, NULL, NULL, &err)) {
            fprintf(stderr, "e2e_cuda: synth: %s\n", err.msg);
            return 2;
        }
        printf("synthesized %s %s in %.1f s\n", argv[2], argv[3], now_s() - t0);
    }
    model *m = NULL;
    if (model_load(&m, path, &err)) {
        fprintf(stderr, "e2e_cuda: %s\n", err.msg);
        return 2;
    }
    const model_hparams *hp = &m->hp;
    run r;
    memset(&r, 0, sizeof r);
    r.m = m;
    if (be_cuda_new(&r.be, 0, &err)) {
        fprintf(stderr, "e2e_cuda: %s\n", err.msg);
        return 2;
    }
    if (model_scratch_new(&r.s, m, r.be, CHUNK, &err)) {
        fprintf(stderr, "e2e_cuda: %s\n", err.msg);
        return 2;
    }
    /* forward.c writes tokens/pos from the host: host memory for those two */
    be_release(r.be, r.s->tokens);
    be_release(r.be, r.s->pos);
    cudaMallocHost((void **)&r.s->tokens, CHUNK * 4);
    cudaMallocHost((void **)&r.s->pos, CHUNK * 4);
    const int32_t n_ctx = depth + CHUNK + 256;
    r.layers = calloc(hp->n_layer, sizeof *r.layers);
    const size_t d = hp->d_k > hp->d_v ? hp->d_k : hp->d_v;
    const size_t hs = (size_t)n_ctx * d, per_cache = hs * hp->n_head_kv;
    if (hp->n_attn_layers) r.kv = be_alloc(r.be, 2 * per_cache * hp->n_attn_layers * 2);
    const size_t conv = model_conv_elems(m), ssm = model_ssm_elems(m);
    r.rec_bytes = (conv + ssm) * hp->n_rec_layers * 4;
    if (r.rec_bytes) {
        r.rec = be_alloc(r.be, r.rec_bytes);
        cudaMalloc(&r.rec_saved, r.rec_bytes);
    }
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const model_layer *ly = &m->layers[il];
        if (ly->attn_slot >= 0) {
            r.layers[il].k = (uint16_t *)r.kv + (size_t)2 * ly->attn_slot * per_cache;
            r.layers[il].v = r.layers[il].k + per_cache;
            r.layers[il].kv_head_stride = hs;
        }
        if (ly->rec_slot >= 0) {
            r.layers[il].conv = (float *)r.rec + (size_t)ly->rec_slot * (conv + ssm);
            r.layers[il].ssm = r.layers[il].conv + conv;
        }
    }
    r.st.layers = r.layers;
    r.st.n_ctx = n_ctx;
    r.logits = malloc(sizeof(float) * hp->n_vocab);
    r.tokens = malloc(sizeof(int32_t) * (depth > CHUNK ? depth : CHUNK));

    double secs;
    double t0 = now_s();
    reset(&r);
    if (prefill(&r, 16, &secs, &err)) goto fail;
    printf("weights uploaded + first batch: %.2f s\n", now_s() - t0);
    if (prefill(&r, 512, &secs, &err)) goto fail; /* warm-up of the large-batch path */

    const int pp[] = {512, 4096};
    for (int i = 0; i < 2; i++) {
        double best = 1e30;
        for (int rep = 0; rep < 2; rep++) {
            reset(&r);
            if (prefill(&r, pp[i], &secs, &err)) goto fail;
            if (secs < best) best = secs;
        }
        printf("pp%-6d @0      %9.1f tok/s  (%.1f ms)\n", pp[i], pp[i] / best, best * 1e3);
    }
    reset(&r);
    if (decode(&r, 128, &secs, &err)) goto fail;
    printf("tg128   @0      %9.1f tok/s  (%.2f ms/token)\n", 128 / secs, secs * 1e3 / 128);
    fflush(stdout);

    if (depth > 0) {
        reset(&r);
        if (prefill(&r, depth, &secs, &err)) goto fail;
        printf("pp%d (in %d-token batches) %9.1f tok/s\n", depth, CHUNK, depth / secs);
        if (r.rec) cudaMemcpy(r.rec_saved, r.rec, r.rec_bytes, cudaMemcpyDeviceToDevice);
        double best = 1e30;
        for (int rep = 0; rep < 2; rep++) {
            r.st.n_past = depth;
            if (r.rec) cudaMemcpy(r.rec, r.rec_saved, r.rec_bytes, cudaMemcpyDeviceToDevice);
            if (prefill(&r, 512, &secs, &err)) goto fail;
            if (secs < best) best = secs;
        }
        printf("pp512   @%-6d %9.1f tok/s  (%.1f ms)\n", depth, 512 / best, best * 1e3);
        r.st.n_past = depth;
        if (r.rec) cudaMemcpy(r.rec, r.rec_saved, r.rec_bytes, cudaMemcpyDeviceToDevice);
        if (decode(&r, 128, &secs, &err)) goto fail;
        printf("tg128   @%-6d %9.1f tok/s  (%.2f ms/token)\n", depth, 128 / secs, secs * 1e3 / 128);
    }
    be_free(r.be);
    model_free(m);
    return 0;
fail:
    fprintf(stderr, "e2e_cuda: %s\n", err.msg);
    return 1;
}
