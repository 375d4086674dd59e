/* End-to-end throughput of the qwen35 forward pass (model_forward, the code
 * wick runs) on the CUDA backend with Qwen3.5-27B dimensions, every 2-D
 * weight Q4_K (like the llama.cpp anchor's synthetic file), built in memory:
 * random blocks, no GGUF file (synthesizing a 15 GB file costs more device
 * time than the runs). llama-bench style: pp<N> = one prefill of N tokens
 * (4096-token batches) from the given depth, tg<N> = N single-token decode
 * steps with a host argmax after each.
 * usage: e2e_cuda [DEPTH] [N_LAYER]   (defaults 32768 and 64) */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/cuda_backend.h"
#include "model/model.h"
#include "model/model_impl.h"
#include "quant/qtypes.h"
#include "ref.h"
#include "util/argmax.h"

#define CHUNK 4096 /* prefill batch (scratch rows) */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Random Q4_K blocks: one pattern of random blocks copied into every tensor
 * (distinct memory per tensor, so nothing is shared in the GPU's L2). */
static uint8_t *g_pattern;
static size_t g_pattern_bytes;
static double g_weight_bytes; /* 2-D weights read by one decode step */

static be_weight mk_q4k(int64_t cols, int64_t rows, const char *name, int counted)
{
    be_weight w;
    memset(&w, 0, sizeof w);
    w.type = QT_Q4_K;
    w.ne[0] = cols;
    w.ne[1] = rows;
    w.ne[2] = w.ne[3] = 1;
    w.nb1 = (size_t)(cols / 256) * 144;
    w.nb2 = w.nb1 * rows;
    uint8_t *p = malloc(w.nb2);
    for (size_t off = 0; off < w.nb2; off += g_pattern_bytes)
        memcpy(p + off, g_pattern, w.nb2 - off < g_pattern_bytes ? w.nb2 - off : g_pattern_bytes);
    w.data = p;
    w.name = name;
    if (counted) g_weight_bytes += (double)w.nb2;
    return w;
}

static be_weight mk_f32(int64_t n, float value, const char *name)
{
    be_weight w;
    memset(&w, 0, sizeof w);
    w.type = QT_F32;
    w.ne[0] = n;
    w.ne[1] = w.ne[2] = w.ne[3] = 1;
    w.nb1 = w.nb2 = (size_t)n * 4;
    float *p = malloc(w.nb1);
    for (int64_t i = 0; i < n; i++) p[i] = value;
    w.data = p;
    w.name = name;
    return w;
}

typedef struct run {
    model *m;
    be_backend *be;
    model_scratch *s;
    model_state st;
    void *rec, *rec_saved;
    size_t rec_bytes;
    float *logits;
    int32_t *tokens;
} run;

static uint32_t g_lcg = 12345;

static int prefill(run *r, int n, double *secs, wk_error *err)
{
    for (int i = 0; i < n; i++) {
        g_lcg = g_lcg * 1664525u + 1013904223u;
        r->tokens[i] = (int32_t)(3 + (g_lcg >> 8) % (r->m->hp.n_vocab - 3));
    }
    double t0 = now_s();
    for (int i = 0; i < n; i += CHUNK) {
        int c = n - i < CHUNK ? n - i : CHUNK;
        int rc = model_forward(r->m, r->be, r->s, &r->st, r->tokens + i, c,
                               i + c == n ? MODEL_LOGITS_LAST : MODEL_LOGITS_NONE, r->logits, NULL, err);
        if (!rc) rc = be_cuda_status(r->be, err);
        if (rc) return rc;
    }
    *secs = now_s() - t0;
    return 0;
}

static int32_t g_out_tokens[1024]; /* the last decode's greedy tokens */

static int decode(run *r, int n, double *secs, wk_error *err)
{
    const uint32_t V = r->m->hp.n_vocab;
    int32_t tok = 3;
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        const int32_t pos = r->st.n_past;
        be_cuda_step_begin(r->be, &(be_step_seq){r, pos, 1}, 1); /* as the engine's eng_decode does */
        int rc = model_forward(r->m, r->be, r->s, &r->st, &tok, 1, MODEL_LOGITS_LAST, r->logits, NULL, err);
        if (be_cuda_step_end(r->be, rc) > 0) {
            r->st.n_past = pos;
            rc = model_forward(r->m, r->be, r->s, &r->st, &tok, 1, MODEL_LOGITS_LAST, r->logits, NULL, err);
        }
        if (!rc) rc = be_cuda_status(r->be, err);
        if (rc) return rc;
        tok = wk_argmax_f32(r->logits, (int32_t)V); /* as wick's greedy sampler */
        if (i < 1024) g_out_tokens[i] = tok;
    }
    *secs = now_s() - t0;
    return 0;
}

static void set_depth(run *r, int depth, int restore)
{
    r->st.n_past = depth;
    if (!r->rec) return;
    if (restore) cudaMemcpy(r->rec, r->rec_saved, r->rec_bytes, cudaMemcpyDeviceToDevice);
    else cudaMemset(r->rec, 0, r->rec_bytes);
}

int main(int argc, char **argv)
{
    const int depth = argc > 1 ? atoi(argv[1]) : 32768;
    const uint32_t n_layer = argc > 2 ? (uint32_t)atoi(argv[2]) : 64;
    uint64_t rng = 1;
    g_pattern_bytes = (size_t)4096 * 144 * 16; /* 9 MB of random blocks */
    g_pattern = malloc(g_pattern_bytes);
    ref_random_blocks(QT_Q4_K, g_pattern, (int64_t)g_pattern_bytes / 144 * 256, &rng);

    /* Qwen3.5-27B (spec architectures.md 10.1) */
    model *m = calloc(1, sizeof *m);
    m->arch = MODEL_ARCH_QWEN35;
    model_hparams *hp = &m->hp;
    hp->n_vocab = 248320;
    hp->n_embd = 5120;
    hp->n_layer = hp->n_layer_all = n_layer;
    hp->n_ctx_train = 262144;
    hp->n_head = 24;
    hp->n_head_kv = 4;
    hp->d_k = hp->d_v = 256;
    hp->n_ff = 17408;
    hp->eps = 1e-6f;
    hp->rope.mode = BE_ROPE_IMROPE;
    hp->rope.n_rot = 64;
    hp->rope.theta = 1e7f;
    hp->rope.freq_scale = 1.0f;
    hp->rope.sections[0] = 11;
    hp->rope.sections[1] = 11;
    hp->rope.sections[2] = 10;
    hp->full_attention_interval = 4;
    hp->ssm_conv_k = 4;
    hp->ssm_d_k = hp->ssm_d_v = 128;
    hp->ssm_n_hk = 16;
    hp->ssm_n_hv = 48;
    const int64_t E = 5120, key_dim = 16 * 128, value_dim = 48 * 128, conv_dim = 2 * key_dim + value_dim;
    double t0 = now_s();
    m->tok_embd = mk_q4k(E, hp->n_vocab, "token_embd.weight", 0);
    m->output = mk_q4k(E, hp->n_vocab, "output.weight", 1);
    m->output_norm = mk_f32(E, 1.0f, "output_norm.weight");
    m->layers = calloc(n_layer, sizeof *m->layers);
    int n_attn = 0, n_rec = 0;
    for (uint32_t il = 0; il < n_layer; il++) {
        model_layer *ly = &m->layers[il];
        ly->recurrent = (il + 1) % hp->full_attention_interval != 0;
        ly->attn_slot = ly->recurrent ? -1 : n_attn++;
        ly->rec_slot = ly->recurrent ? n_rec++ : -1;
        ly->attn_norm = mk_f32(E, 1.0f, "attn_norm");
        ly->ffn_norm = mk_f32(E, 1.0f, "post_attention_norm");
        ly->ffn_gate = mk_q4k(E, 17408, "ffn_gate", 1);
        ly->ffn_up = mk_q4k(E, 17408, "ffn_up", 1);
        ly->ffn_down = mk_q4k(17408, E, "ffn_down", 1);
        if (ly->recurrent) {
            ly->ssm_qkv = mk_q4k(E, conv_dim, "attn_qkv", 1);
            ly->ssm_z = mk_q4k(E, value_dim, "attn_gate", 1);
            ly->ssm_beta = mk_q4k(E, 48, "ssm_beta", 1);
            ly->ssm_alpha = mk_q4k(E, 48, "ssm_alpha", 1);
            ly->ssm_dt = mk_f32(48, 0.5f, "ssm_dt.bias");
            ly->ssm_a = mk_f32(48, -0.5f, "ssm_a");
            ly->ssm_conv1d = mk_f32(4 * conv_dim, 0.25f, "ssm_conv1d");
            ly->ssm_norm = mk_f32(128, 1.0f, "ssm_norm");
            ly->ssm_out = mk_q4k(value_dim, E, "ssm_out", 1);
        } else {
            ly->wq = mk_q4k(E, 2 * 24 * 256, "attn_q", 1);
            ly->wk = mk_q4k(E, 4 * 256, "attn_k", 1);
            ly->wv = mk_q4k(E, 4 * 256, "attn_v", 1);
            ly->wo = mk_q4k(24 * 256, E, "attn_output", 1);
            ly->q_norm = mk_f32(256, 1.0f, "attn_q_norm");
            ly->k_norm = mk_f32(256, 1.0f, "attn_k_norm");
        }
    }
    hp->n_attn_layers = (uint32_t)n_attn;
    hp->n_rec_layers = (uint32_t)n_rec;
    printf("model: Qwen3.5-27B dims, %u layers (%d attention, %d DeltaNet), pure Q4_K random blocks; "
           "built in %.1f s; weights read per decode token %.2f GB\n",
           n_layer, n_attn, n_rec, now_s() - t0, g_weight_bytes / 1e9);

    wk_error err = {0};
    run r;
    memset(&r, 0, sizeof r);
    r.m = m;
    if (be_cuda_new(&r.be, 0, &err) || model_scratch_new(&r.s, m, r.be, CHUNK, &err)) goto fail;
    const int32_t n_ctx = depth + CHUNK + 256;
    model_layer_state *ls = calloc(n_layer, sizeof *ls);
    const size_t hs = (size_t)n_ctx * 256, per_cache = hs * hp->n_head_kv;
    uint16_t *kv = be_alloc(r.be, 2 * per_cache * (size_t)n_attn * 2);
    const size_t conv = model_conv_elems(m), ssm = model_ssm_elems(m);
    r.rec_bytes = (conv + ssm) * (size_t)n_rec * 4;
    r.rec = be_alloc(r.be, r.rec_bytes);
    cudaMalloc(&r.rec_saved, r.rec_bytes);
    if (!kv || !r.rec) {
        wk_fail(&err, WK_ENOMEM, "state");
        goto fail;
    }
    for (uint32_t il = 0; il < n_layer; il++) {
        const model_layer *ly = &m->layers[il];
        if (ly->attn_slot >= 0) {
            ls[il].k = kv + (size_t)2 * ly->attn_slot * per_cache;
            ls[il].v = ls[il].k + per_cache;
            ls[il].kv_head_stride = hs;
        } else {
            ls[il].conv = (float *)r.rec + (size_t)ly->rec_slot * (conv + ssm);
            ls[il].ssm = ls[il].conv + conv;
        }
    }
    r.st.layers = ls;
    r.st.n_ctx = n_ctx;
    r.logits = malloc(sizeof(float) * hp->n_vocab);
    r.tokens = malloc(sizeof(int32_t) * (depth > CHUNK ? depth : CHUNK));

    double secs;
    t0 = now_s();
    set_depth(&r, 0, 0);
    if (prefill(&r, 16, &secs, &err)) goto fail;
    printf("weights uploaded + first batch: %.1f s\n", now_s() - t0);
    set_depth(&r, 0, 0);
    if (prefill(&r, 512, &secs, &err) || decode(&r, 4, &secs, &err)) goto fail; /* warm-up */

    const int pp[] = {512, 4096};
    for (int i = 0; i < 2; i++) {
        double best = 1e30;
        for (int rep = 0; rep < 2; rep++) {
            set_depth(&r, 0, 0);
            if (prefill(&r, pp[i], &secs, &err)) goto fail;
            if (secs < best) best = secs;
        }
        printf("pp%-5d @0      %8.1f tok/s  (%.1f ms)\n", pp[i], pp[i] / best, best * 1e3);
        fflush(stdout);
    }
    /* decode with graphs off, then on: the "before" and "after" of CUDA graphs, and
     * the same greedy tokens and bit-identical last logits */
    {
        const uint32_t V = hp->n_vocab;
        float *ref = malloc(sizeof(float) * V);
        int32_t ref_tok[128];
        be_cuda_set_graphs(r.be, 0);
        set_depth(&r, 0, 0);
        if (decode(&r, 128, &secs, &err)) goto fail;
        printf("tg128   @0      %8.1f tok/s  (%.2f ms/token) without CUDA graphs\n", 128 / secs, secs * 1e3 / 128);
        memcpy(ref, r.logits, sizeof(float) * V);
        memcpy(ref_tok, g_out_tokens, sizeof ref_tok);
        be_cuda_set_graphs(r.be, 1);
        set_depth(&r, 0, 0);
        if (decode(&r, 128, &secs, &err)) goto fail;
        long cap, rep, redo;
        be_cuda_graph_stats(r.be, &cap, &rep, &redo);
        double walk_ms, launch_ms;
        be_cuda_graph_host_ms(r.be, &walk_ms, &launch_ms);
        uint64_t h = 1469598103934665603ull; /* FNV-1a of the last logits: compare runs (WICK_CUDA_FUSE=0) */
        for (size_t i = 0; i < sizeof(float) * V; i++) h = (h ^ ((const uint8_t *)r.logits)[i]) * 1099511628211ull;
        printf("graphs: %ld captured, %ld replayed, %ld steps redone; greedy tokens %s, last logits %s "
               "(hash %016llx)\n", cap, rep, redo, memcmp(ref_tok, g_out_tokens, sizeof ref_tok) ? "DIFFER" : "identical",
               memcmp(ref, r.logits, sizeof(float) * V) ? "DIFFER" : "bit-identical", (unsigned long long)h);
        printf("graphs: host per replayed step %.3f ms walking the forward pass (GPU idle) + %.3f ms in "
               "cudaGraphLaunch\n", rep ? walk_ms / rep : 0.0, rep ? launch_ms / rep : 0.0);
        free(ref);
    }
    printf("tg128   @0      %8.1f tok/s  (%.2f ms/token; weights %.0f GB/s = %.0f%% of 4245 GB/s copy)\n", 128 / secs,
           secs * 1e3 / 128, g_weight_bytes / (secs / 128) / 1e9, 100 * g_weight_bytes / (secs / 128) / 4245e9);
    fflush(stdout);
    /* WICK_E2E_STUDY="SETTINGS;SETTINGS;...": tg128 at depth 0 (graphs on) for each set of
     * be_cuda_tune settings (e.g. "fuse=0;generic=1"; unnamed ones at their defaults):
     * variants side by side */
    const char *study = getenv("WICK_E2E_STUDY");
    for (const char *p = study; p && *p;) {
        char item[256];
        const size_t n = strcspn(p, ";");
        snprintf(item, sizeof item, "%.*s", (int)(n < 255 ? n : 255), p);
        p += n + (p[n] == ';');
        be_cuda_tune(r.be, NULL);
        if (be_cuda_tune(r.be, item)) printf("study: some of '%s' not understood\n", item);
        set_depth(&r, 0, 0);
        if (decode(&r, 16, &secs, &err)) goto fail; /* capture */
        long cap, rep0, rep1, redo;
        double walk0, walk1, launch_ms;
        be_cuda_graph_stats(r.be, &cap, &rep0, &redo);
        be_cuda_graph_host_ms(r.be, &walk0, &launch_ms);
        set_depth(&r, 0, 0);
        if (decode(&r, 128, &secs, &err)) goto fail;
        be_cuda_graph_stats(r.be, &cap, &rep1, &redo);
        be_cuda_graph_host_ms(r.be, &walk1, &launch_ms);
        printf("study [%s]: tg128 %8.1f tok/s  (%.3f ms/token; host walk %.3f ms)\n", item, 128 / secs,
               secs * 1e3 / 128, rep1 > rep0 ? (walk1 - walk0) / (rep1 - rep0) : 0.0);
        fflush(stdout);
    }
    if (study) be_cuda_tune(r.be, NULL);
    if (depth > 0) {
        set_depth(&r, 0, 0);
        if (prefill(&r, depth, &secs, &err)) goto fail;
        printf("pp%d from 0 (4096-token batches) %8.1f tok/s\n", depth, depth / secs);
        cudaMemcpy(r.rec_saved, r.rec, r.rec_bytes, cudaMemcpyDeviceToDevice);
        double best = 1e30;
        for (int rep = 0; rep < 2; rep++) {
            set_depth(&r, depth, 1);
            if (prefill(&r, 512, &secs, &err)) goto fail;
            if (secs < best) best = secs;
        }
        printf("pp512   @%-6d %8.1f tok/s  (%.1f ms)\n", depth, 512 / best, best * 1e3);
        be_cuda_set_graphs(r.be, 0);
        set_depth(&r, depth, 1);
        if (decode(&r, 128, &secs, &err)) goto fail;
        printf("tg128   @%-6d %8.1f tok/s  (%.2f ms/token) without CUDA graphs\n", depth, 128 / secs, secs * 1e3 / 128);
        be_cuda_set_graphs(r.be, 1);
        set_depth(&r, depth, 1);
        if (decode(&r, 128, &secs, &err)) goto fail;
        printf("tg128   @%-6d %8.1f tok/s  (%.2f ms/token)\n", depth, 128 / secs, secs * 1e3 / 128);
    }
    return 0;
fail:
    fprintf(stderr, "e2e_cuda: %s\n", err.msg);
    return 1;
}
