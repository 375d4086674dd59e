/* Attention with a policy (backend/cpu/cpu_attention.c): the block-sparse
 * kernel against a naive masked reference on random inputs, dense and
 * approximate, many shapes (odd lengths, tile-crossing boundaries, GQA
 * ratios 1/2/4/8, head dims 64/128/256, continuation at q_pos0 > 0, the
 * split-KV decode path), bit-identity when the policy cannot bite, and the
 * number of key tiles visited falling with the window. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "testutil.h"
#include "backend/cpu/cpu_backend.h"
#include "engine/context.h"
#include "engine/sequence.h"
#include "model/model.h"
#include "quant/quant.h"
#include "util/cpu.h"
#include "util/f16.h"

/* Kernel tiles (cpu_attention.c): queries per work item, keys per tile. The
 * visited-tile count below is computed from these. */
#define BQ 64 /* ATTN_BQ of cpu_attention.c: the tiling the kernel visits */
#define BK 64

typedef struct attn_case {
    int32_t n_q, q_pos0, n_head, n_head_kv, d;
    bool approx;
    int32_t global, window, tail; /* call level: tail = last queries of this call that are dense */
    int kv_type;                  /* enum be_kv_type (0 = F16) */
} attn_case;

typedef struct attn_data {
    attn_case c;
    int32_t n_kv;
    size_t head_stride;
    float *q;        /* [n_q][n_head][d] */
    uint16_t *k, *v; /* [n_head_kv][n_kv] rows of be_kv_row_units(kv_type, d) units */
    float *kf, *vf;  /* the same, decoded: [n_head_kv][n_kv][d] (what the reference reads) */
    float *out;      /* [n_q][n_head][d] */
} attn_data;

/* The cache is filled through the backend's own kv_store (F16 or Q8_0). */
static be_backend *g_store_be;

static void data_new(attn_data *t, const attn_case *c, uint64_t seed)
{
    memset(t, 0, sizeof *t);
    t->c = *c;
    t->n_kv = c->q_pos0 + c->n_q;
    const size_t row = be_kv_row_units(c->kv_type, (size_t)c->d);
    t->head_stride = (size_t)t->n_kv * row + 34; /* padded: the kernel must use the stride */
    size_t nq = (size_t)c->n_q * c->n_head * c->d, nkv = (size_t)t->n_kv * c->n_head_kv * c->d;
    t->q = malloc(nq * sizeof(float));
    t->out = malloc(nq * sizeof(float));
    t->k = calloc(t->head_stride * c->n_head_kv, sizeof(uint16_t));
    t->v = calloc(t->head_stride * c->n_head_kv, sizeof(uint16_t));
    t->kf = malloc(nkv * sizeof(float));
    t->vf = malloc(nkv * sizeof(float));
    assert_non_null(t->q);
    assert_non_null(t->k);
    assert_non_null(t->kf);
    uint64_t s = seed;
    for (size_t i = 0; i < nq; i++) t->q[i] = test_rand_normal(&s);
    /* token-major source [n_kv][n_head_kv][d], as the forward pass hands it over */
    float *ks = malloc(nkv * sizeof(float)), *vs = malloc(nkv * sizeof(float));
    for (size_t i = 0; i < nkv; i++) {
        ks[i] = test_rand_normal(&s);
        /* Q8_0: uneven magnitudes so that blocks get different scales */
        vs[i] = test_rand_normal(&s) * (c->kv_type == BE_KV_Q8_0 ? 1.0f + (float)(i / 32 % 7) : 1.0f);
    }
    if (!g_store_be) {
        wk_error err = {0};
        assert_int_equal(be_cpu_new(&g_store_be, 1, &err), 0);
    }
    const size_t x_stride = (size_t)c->n_head_kv * c->d;
    be_kv_store_typed(g_store_be, c->kv_type, t->k, t->head_stride, 0, ks, x_stride, t->n_kv, c->n_head_kv, c->d);
    be_kv_store_typed(g_store_be, c->kv_type, t->v, t->head_stride, 0, vs, x_stride, t->n_kv, c->n_head_kv, c->d);
    for (int32_t g = 0; g < c->n_head_kv; g++)
        for (int32_t p = 0; p < t->n_kv; p++) {
            const uint16_t *kr = t->k + g * t->head_stride + (size_t)p * row;
            const uint16_t *vr = t->v + g * t->head_stride + (size_t)p * row;
            float *kd = t->kf + ((size_t)g * t->n_kv + p) * c->d, *vd = t->vf + ((size_t)g * t->n_kv + p) * c->d;
            if (c->kv_type == BE_KV_Q8_0) {
                /* decoded with the quant module (ggml's dequantize_row_q8_0), not the kernel's own code */
                assert_int_equal(qt_dequantize_row(QT_Q8_0, kr, kd, c->d), 0);
                assert_int_equal(qt_dequantize_row(QT_Q8_0, vr, vd, c->d), 0);
            } else {
                for (int32_t e = 0; e < c->d; e++) {
                    kd[e] = wk_f16_to_f32(kr[e]);
                    vd[e] = wk_f16_to_f32(vr[e]);
                }
            }
        }
    free(ks);
    free(vs);
}

static void data_free(attn_data *t)
{
    free(t->q);
    free(t->out);
    free(t->k);
    free(t->v);
    free(t->kf);
    free(t->vf);
}

static be_attn_policy policy_of(const attn_case *c)
{
    be_attn_policy p = {c->approx, c->global, c->window, c->tail, 0};
    return p;
}

static int run_kernel(be_backend *be, attn_data *t, int64_t *tiles)
{
    const attn_case *c = &t->c;
    be_attn_policy p = policy_of(c);
    be_attn_args a = {
        .q = t->q,
        .q_stride = (size_t)c->n_head * c->d,
        .q_head_stride = (size_t)c->d,
        .n_q = c->n_q,
        .q_pos0 = c->q_pos0,
        .k = t->k,
        .v = t->v,
        .kv_head_stride = t->head_stride,
        .n_kv = t->n_kv,
        .n_head = c->n_head,
        .n_head_kv = c->n_head_kv,
        .d_k = c->d,
        .d_v = c->d,
        .scale = 1.0f / sqrtf((float)c->d),
        .policy = &p,
        .out = t->out,
        .out_stride = (size_t)c->n_head * c->d,
        .tiles_visited = tiles,
        .kv_type = c->kv_type,
    };
    wk_error err = {0};
    return be_attention(be, &a, &err);
}

/* The rule as backend.h states it, written independently of the kernel. */
static bool ref_allowed(const attn_case *c, int32_t i, int32_t j)
{
    if (j > i) return false;
    if (!c->approx) return true;
    int32_t dense_from = c->q_pos0 + c->n_q - (c->tail < c->n_q ? c->tail : c->n_q);
    int32_t window = c->window < 1 ? 1 : c->window;
    return j < c->global || i - j < window || i >= dense_from;
}

/* Naive attention in double over the allowed keys of every query: one
 * softmax per row. f16_q: round the query to F16 first, as the kernel does
 * for batches below 64 queries. */
static double max_error_vs_reference(const attn_data *t, bool f16_q, double *max_ref_diff_dense)
{
    const attn_case *c = &t->c;
    const int32_t d = c->d, ratio = c->n_head / c->n_head_kv;
    double worst = 0.0, dense_gap = 0.0;
    double *sc = malloc(sizeof(double) * (size_t)t->n_kv);
    double *o = malloc(sizeof(double) * (size_t)d), *od = malloc(sizeof(double) * (size_t)d);
    for (int32_t qi = 0; qi < c->n_q; qi++) {
        int32_t i = c->q_pos0 + qi;
        for (int32_t h = 0; h < c->n_head; h++) {
            const float *q = t->q + ((size_t)qi * c->n_head + h) * d;
            const float *kh = t->kf + (size_t)(h / ratio) * t->n_kv * d;
            const float *vh = t->vf + (size_t)(h / ratio) * t->n_kv * d;
            for (int pass = 0; pass < 2; pass++) { /* 0: the policy, 1: dense (for the gap) */
                double mx = -INFINITY, sum = 0.0;
                for (int32_t j = 0; j <= i; j++) {
                    bool ok = pass == 1 || ref_allowed(c, i, j);
                    sc[j] = -INFINITY;
                    if (!ok) continue;
                    double s = 0.0;
                    for (int32_t e = 0; e < d; e++) {
                        double qv = f16_q ? wk_f16_to_f32(wk_f32_to_f16(q[e])) : q[e];
                        s += qv * kh[(size_t)j * d + e];
                    }
                    sc[j] = s / sqrt((double)d);
                    if (sc[j] > mx) mx = sc[j];
                }
                double *dst = pass == 0 ? o : od;
                memset(dst, 0, sizeof(double) * (size_t)d);
                for (int32_t j = 0; j <= i; j++) {
                    if (sc[j] == -INFINITY) continue;
                    double p = exp(sc[j] - mx);
                    sum += p;
                    for (int32_t e = 0; e < d; e++) dst[e] += p * vh[(size_t)j * d + e];
                }
                for (int32_t e = 0; e < d; e++) dst[e] /= sum;
            }
            const float *got = t->out + ((size_t)qi * c->n_head + h) * d;
            for (int32_t e = 0; e < d; e++) {
                double err = fabs(got[e] - o[e]);
                if (err > worst) worst = err;
                double gap = fabs(o[e] - od[e]);
                if (gap > dense_gap) dense_gap = gap;
            }
        }
    }
    free(sc);
    free(o);
    free(od);
    if (max_ref_diff_dense) *max_ref_diff_dense = dense_gap;
    return worst;
}

/* Runs one case on be and checks it against the reference. Batches below
 * 64 queries use F16 accumulation in the kernel (llama.cpp's numerics), so
 * their tolerance is the F16 rounding of the accumulator; F32 batches must
 * match to float precision. */
static void check_case(be_backend *be, const attn_case *c, uint64_t seed)
{
    attn_data t;
    data_new(&t, c, seed);
    assert_int_equal(run_kernel(be, &t, NULL), 0);
    bool f16_mode = c->n_q < 64;
    double gap = 0.0;
    double err = max_error_vs_reference(&t, f16_mode, &gap);
    double tol = (f16_mode ? 1e-2 : 5e-5) * (c->kv_type == BE_KV_Q8_0 ? 8.0 : 1.0); /* V up to 7x larger */
    if (err > tol)
        fail_msg("n_q %d pos0 %d heads %d/%d d %d %s g%d w%d t%d: max error %.3g > %.3g", c->n_q, c->q_pos0,
                 c->n_head, c->n_head_kv, c->d, c->approx ? "approx" : "dense", c->global, c->window, c->tail, err,
                 tol);
    data_free(&t);
}

static be_backend *new_backend(int threads)
{
    be_backend *be = NULL;
    wk_error err = {0};
    assert_int_equal(be_cpu_new(&be, threads, &err), 0);
    return be;
}

static void test_dense_matches_reference_on_many_shapes(void **state)
{
    (void)state;
    be_backend *be = new_backend(2);
    const int32_t ratios[] = {1, 2, 4, 8};
    const int32_t dims[] = {64, 128, 256};
    const int32_t lens[] = {1, 7, 63, 64, 65, 97, 130};
    uint64_t seed = 1;
    for (size_t r = 0; r < 4; r++)
        for (size_t di = 0; di < 3; di++)
            for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                int32_t pos0 = (int32_t)((li * 37) % 71); /* continuation over an existing cache */
                attn_case c = {lens[li], pos0, 2 * ratios[r], 2, dims[di], false, 0, 0, 0, 0};
                check_case(be, &c, seed++);
            }
    be_free(be);
}

static void test_approx_matches_masked_reference_on_many_shapes(void **state)
{
    (void)state;
    be_backend *be = new_backend(2);
    /* {n_q, q_pos0, heads, kv heads, d, approx, global, window, tail}: windows and
     * globals that fall inside tiles, on tile edges, zero tails, long tails,
     * continuations, tiny windows. */
    const attn_case cases[] = {
        {200, 0, 4, 4, 64, true, 5, 17, 0, 0},     {200, 0, 8, 4, 64, true, 64, 64, 0, 0},
        {257, 0, 8, 2, 128, true, 3, 100, 31, 0},  {131, 70, 8, 1, 64, true, 10, 33, 7, 0},
        {96, 300, 16, 2, 128, true, 0, 1, 0, 0},   {160, 0, 4, 1, 256, true, 70, 65, 40, 0},
        {300, 0, 8, 8, 64, true, 0, 128, 0, 0},    {129, 129, 8, 4, 128, true, 129, 63, 5, 0},
        {40, 200, 8, 2, 64, true, 16, 32, 3, 0},   {63, 500, 4, 4, 128, true, 1, 9, 0, 0},
        {65, 33, 4, 2, 256, true, 12, 20, 64, 0},  {100, 0, 8, 1, 64, true, 2, 1000, 0, 0},
    };
    uint64_t seed = 100;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(be, &cases[i], seed++);
    be_free(be);
}

/* The reference must tell the policies apart, or the test above proves nothing. */
static void test_approx_policy_changes_the_output_beyond_its_reach(void **state)
{
    (void)state;
    be_backend *be = new_backend(1);
    attn_case c = {200, 0, 4, 2, 64, true, 4, 16, 0, 0};
    attn_data t;
    data_new(&t, &c, 7);
    assert_int_equal(run_kernel(be, &t, NULL), 0);
    double gap = 0.0;
    double err = max_error_vs_reference(&t, false, &gap);
    assert_true(err < 5e-5);
    assert_true(gap > 100 * 5e-5);
    data_free(&t);
    be_free(be);
}

/* Prompts shorter than global + window: every tile is fully visible, so the
 * approximate kernel takes the dense path and gives the same bits. */
static void test_approx_is_bit_identical_to_dense_below_global_plus_window(void **state)
{
    (void)state;
    be_backend *be = new_backend(2);
    const attn_case shapes[] = {
        {300, 0, 8, 2, 64, true, 100, 201, 0, 0},
        {33, 150, 4, 4, 128, true, 64, 120, 0, 0},
        {1, 900, 8, 2, 64, true, 500, 401, 0, 0}, /* split-KV decode path */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        attn_case c = shapes[i];
        attn_data a, b;
        data_new(&a, &c, 40 + i);
        data_new(&b, &c, 40 + i);
        b.c.approx = false;
        assert_int_equal(run_kernel(be, &a, NULL), 0);
        assert_int_equal(run_kernel(be, &b, NULL), 0);
        size_t n = (size_t)c.n_q * c.n_head * c.d;
        assert_memory_equal(a.out, b.out, n * sizeof(float));
        data_free(&a);
        data_free(&b);
    }
    be_free(be);
}

/* Decode (one query) over a long cache goes through the split-KV path with
 * several workers; the policy must hold there too. */
static void test_split_kv_decode_respects_the_policy(void **state)
{
    (void)state;
    be_backend *be = new_backend(4);
    const attn_case cases[] = {
        {1, 1500, 8, 2, 64, false, 0, 0, 0, 0},
        {1, 1500, 8, 2, 64, true, 100, 300, 0, 0},
        {1, 2047, 4, 4, 128, true, 0, 64, 0, 0},
        {1, 1000, 8, 1, 128, true, 10, 20, 1, 0}, /* the one query in the dense tail */
    };
    uint64_t seed = 900;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(be, &cases[i], seed++);
    be_free(be);
}

/* Tiles that hold at least one allowed causal pair, per kv head, with the
 * kernel's tiling: what an exact block-sparse kernel must visit, no more. */
static int64_t needed_tiles(const attn_case *c)
{
    int64_t n = 0;
    for (int32_t i0 = 0; i0 < c->n_q; i0 += BQ) {
        int32_t i1 = i0 + BQ < c->n_q ? i0 + BQ : c->n_q;
        int32_t key_end = c->q_pos0 + i1;
        for (int32_t k0 = 0; k0 < key_end; k0 += BK) {
            int32_t k1 = k0 + BK < key_end ? k0 + BK : key_end;
            bool any = false;
            for (int32_t i = c->q_pos0 + i0; i < c->q_pos0 + i1 && !any; i++)
                for (int32_t jj = k0; jj < k1 && !any; jj++) any = ref_allowed(c, i, jj);
            n += any;
        }
    }
    return n * c->n_head_kv;
}

static void test_visited_tiles_fall_with_the_window(void **state)
{
    (void)state;
    be_backend *be = new_backend(2);
    const int32_t windows[] = {1 << 20, 1024, 512, 256, 64};
    int64_t prev = INT64_MAX, dense = 0;
    for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++) {
        attn_case c = {2048, 0, 4, 2, 64, w > 0, 64, windows[w], 32, 0};
        attn_data t;
        data_new(&t, &c, 5);
        int64_t tiles = 0;
        assert_int_equal(run_kernel(be, &t, &tiles), 0);
        assert_int_equal(tiles, needed_tiles(&c));
        if (w == 0) dense = tiles;
        assert_true(tiles < prev);
        prev = tiles;
        data_free(&t);
    }
    /* 2048 queries, window 64: a global tile and two window tiles per query
     * block (plus the dense tail block) instead of a triangle of 32 tiles on
     * average: under a quarter of the dense work. */
    assert_true(prev * 4 < dense);
    be_free(be);
}

/* A Q8_0 cache is read in place, block by block: against the reference on
 * the Q8_0-rounded K/V, dense and approximate, GQA, the decode split. */
static void test_q8_0_cache_matches_reference_on_rounded_kv(void **state)
{
    (void)state;
    be_backend *be = new_backend(2);
    const attn_case cases[] = {
        {97, 0, 8, 2, 64, false, 0, 0, 0, BE_KV_Q8_0},    {130, 33, 4, 4, 128, false, 0, 0, 0, BE_KV_Q8_0},
        {65, 0, 8, 1, 256, false, 0, 0, 0, BE_KV_Q8_0},   {200, 0, 8, 4, 64, true, 5, 17, 0, BE_KV_Q8_0},
        {257, 0, 8, 2, 128, true, 3, 100, 31, BE_KV_Q8_0}, {40, 200, 8, 2, 64, true, 16, 32, 3, BE_KV_Q8_0},
        {1, 1500, 8, 2, 128, false, 0, 0, 0, BE_KV_Q8_0}, {1, 1500, 8, 2, 64, true, 100, 300, 0, BE_KV_Q8_0},
    };
    uint64_t seed = 3000;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(be, &cases[i], seed++);
    be_free(be);
}

/* Q8_0 rows are ggml's block_q8_0: the kernel's stored bytes decode with the
 * quant module to within a half step of the input. */
static void test_q8_0_store_writes_ggml_blocks(void **state)
{
    (void)state;
    be_backend *be = new_backend(1);
    const int32_t d = 64, n_t = 3, n_head_kv = 2;
    float x[3 * 2 * 64], back[64];
    uint64_t s = 77;
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) x[i] = test_rand_normal(&s) * 3.0f;
    const size_t row = be_kv_row_units(BE_KV_Q8_0, d), head_stride = 4 * row;
    assert_int_equal(row * 2, 2 * 34); /* two blocks of 34 bytes */
    uint16_t *cache = calloc(head_stride * n_head_kv, sizeof(uint16_t));
    be_kv_store_typed(be, BE_KV_Q8_0, cache, head_stride, 1, x, (size_t)n_head_kv * d, n_t, n_head_kv, d);
    for (int32_t t = 0; t < n_t; t++)
        for (int32_t g = 0; g < n_head_kv; g++) {
            const float *src = x + ((size_t)t * n_head_kv + g) * d;
            assert_int_equal(qt_dequantize_row(QT_Q8_0, cache + g * head_stride + (size_t)(1 + t) * row, back, d), 0);
            for (int32_t b = 0; b < d; b += 32) {
                float amax = 0.0f;
                for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(src[b + j]));
                for (int j = 0; j < 32; j++) assert_true(fabsf(back[b + j] - src[b + j]) <= amax / 127.0f * 0.51f + 1e-3f);
            }
        }
    /* position 0 untouched */
    for (size_t i = 0; i < row; i++) assert_int_equal(cache[i], 0);
    free(cache);
    be_free(be);
}

/* The AVX2 / NEON row decoder against the scalar one (kernels come in pairs). */
static void test_q8_0_row_decoders_agree(void **state)
{
    (void)state;
    const wk_cpu_features *f = wk_cpu();
#if defined(__x86_64__)
    if (!f->avx2 || !f->f16c) WK_SKIP();
#define FAST_ROW_DECODER cpu_kv_row_q8_0_to_f32_avx2
#elif defined(__aarch64__)
    if (!f->neon) WK_SKIP();
#define FAST_ROW_DECODER cpu_kv_row_q8_0_to_f32_neon
#else
    (void)f;
    print_message("no vector row decoder in this build\n");
    WK_SKIP();
#define FAST_ROW_DECODER cpu_kv_row_q8_0_to_f32_scalar
#endif
    be_backend *be = new_backend(1);
    const int32_t d = 256;
    float x[256], a[256], b[256];
    uint16_t row[136];
    uint64_t s = 5;
    for (int rep = 0; rep < 50; rep++) {
        for (int i = 0; i < d; i++) x[i] = test_rand_normal(&s) * (float)(1 + rep % 9) * (i < 32 ? 0.0f : 1.0f);
        be_kv_store_typed(be, BE_KV_Q8_0, row, 136, 0, x, (size_t)d, 1, 1, d);
        cpu_kv_row_q8_0_to_f32_scalar(a, row, d);
        FAST_ROW_DECODER(b, row, d);
        assert_memory_equal(a, b, sizeof a);
    }
    be_free(be);
}

/* ---- engine level: where the dense tail is, decode dense -------------------------- */

#define E_N 200
#define E_V_MAX 512

typedef struct eng_fixture {
    model *m;
    eng_ctx *ctx;
    eng_seq *seq;
    int32_t tokens[E_N + 1];
} eng_fixture;

static void fixture_open(eng_fixture *f, const char *dir)
{
    wk_error err = {0};
    assert_int_equal(model_load(&f->m, path_join(dir, "models/tiny-qwen3-F32.gguf"), &err), 0);
    eng_options o;
    eng_options_default(&o);
    o.n_threads = 2;
    o.n_ctx = 256;
    o.n_ubatch = 32;
    assert_int_equal(eng_ctx_new(&f->ctx, f->m, &o, &err), 0);
    assert_int_equal(eng_seq_new(&f->seq, f->ctx, 0, &err), 0);
    uint64_t s = 99;
    for (int i = 0; i <= E_N; i++) f->tokens[i] = 3 + (int32_t)(test_rand_u32(&s) % 250);
}

static void fixture_close(eng_fixture *f)
{
    eng_seq_free(f->seq);
    eng_ctx_free(f->ctx);
    model_free(f->m);
}

/* Last-token logits of tokens[0..E_N) fed in pieces cut at `cut` (0: one call);
 * span: tell the engine the pieces are one prompt. */
static void prefill_logits(eng_fixture *f, const be_attn_policy *p, int32_t cut, bool span, float *out)
{
    wk_error err = {0};
    eng_ctx_set_policy(f->ctx, p);
    eng_seq_clear(f->seq);
    eng_prefill_opts po = {0};
    if (span) {
        po.span_start = 0;
        po.span_end = E_N;
    }
    if (cut > 0) assert_int_equal(eng_prefill(f->ctx, f->seq, f->tokens, cut, &po, &err), 0);
    assert_int_equal(eng_prefill(f->ctx, f->seq, f->tokens + cut, E_N - cut, &po, &err), 0);
    memcpy(out, eng_logits(f->ctx), sizeof(float) * (size_t)eng_n_vocab(f->ctx));
}

static void test_engine_counts_the_dense_tail_from_the_end_of_the_whole_prompt(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    eng_fixture f;
    fixture_open(&f, dir);
    const size_t V = (size_t)eng_n_vocab(f.ctx);
    assert_true(V <= E_V_MAX);
    static float whole[E_V_MAX], pieces[E_V_MAX], unspanned[E_V_MAX], dense[E_V_MAX], tail_all[E_V_MAX];
    be_attn_policy ap = {true, 8, 16, 8, 4};
    prefill_logits(&f, &ap, 0, false, whole);
    prefill_logits(&f, &ap, 128, true, pieces); /* cut on a chunk edge: same batches */
    assert_memory_equal(whole, pieces, V * sizeof(float));
    /* without the span the first piece gets its own tail and the second
     * counts as a continuation: other numbers */
    prefill_logits(&f, &ap, 128, false, unspanned);
    assert_memory_not_equal(whole, unspanned, V * sizeof(float));
    /* a tail covering the prompt, or global + window beyond it: dense, bit for bit */
    prefill_logits(&f, NULL, 0, false, dense);
    assert_memory_not_equal(whole, dense, V * sizeof(float));
    be_attn_policy wide_tail = {true, 8, 16, E_N, 0}, wide_window = {true, 100, 101, 0, 0};
    prefill_logits(&f, &wide_tail, 0, false, tail_all);
    assert_memory_equal(dense, tail_all, V * sizeof(float));
    prefill_logits(&f, &wide_window, 0, false, tail_all);
    assert_memory_equal(dense, tail_all, V * sizeof(float));
    fixture_close(&f);
}

static void test_engine_decodes_densely_under_the_approximate_policy(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    eng_fixture f;
    fixture_open(&f, dir);
    const size_t V = (size_t)eng_n_vocab(f.ctx);
    static float dec[E_V_MAX], pre_dense[E_V_MAX], pre_approx[E_V_MAX], scratch[E_V_MAX];
    wk_error err = {0};
    be_attn_policy ap = {true, 8, 16, 0, 0}; /* no tails: a 1-token prefill would be approximate */
    prefill_logits(&f, &ap, 0, false, scratch);
    assert_int_equal(eng_decode(f.ctx, f.seq, f.tokens[E_N], &err), 0);
    memcpy(dec, eng_logits(f.ctx), V * sizeof(float));
    assert_int_equal(kv_truncate(f.seq, E_N, &err), 0);
    eng_ctx_set_policy(f.ctx, NULL);
    assert_int_equal(eng_prefill(f.ctx, f.seq, &f.tokens[E_N], 1, NULL, &err), 0);
    memcpy(pre_dense, eng_logits(f.ctx), V * sizeof(float));
    assert_int_equal(kv_truncate(f.seq, E_N, &err), 0);
    eng_ctx_set_policy(f.ctx, &ap);
    assert_int_equal(eng_prefill(f.ctx, f.seq, &f.tokens[E_N], 1, NULL, &err), 0);
    memcpy(pre_approx, eng_logits(f.ctx), V * sizeof(float));
    assert_memory_equal(dec, pre_dense, V * sizeof(float));
    assert_memory_not_equal(dec, pre_approx, V * sizeof(float));
    fixture_close(&f);
}

static void test_fingerprint_covers_every_policy_field(void **state)
{
    (void)state;
    be_attn_policy base = {true, 8192, 8192, 2048, 128}, d1 = {false, 1, 2, 3, 4}, d2 = {false, 5, 6, 7, 8};
    uint64_t fp = eng_policy_fingerprint(&base);
    assert_true(eng_policy_fingerprint(&d1) == eng_policy_fingerprint(&d2)); /* dense is dense */
    assert_true(eng_policy_fingerprint(&d1) == eng_policy_fingerprint(NULL));
    assert_true(fp != eng_policy_fingerprint(&d1));
    for (int field = 0; field < 4; field++) {
        be_attn_policy p = base;
        int32_t *v[4] = {&p.global, &p.window, &p.dense_tail, &p.dense_tail_continue};
        *v[field] += 1;
        assert_true(eng_policy_fingerprint(&p) != fp);
    }
}

static int teardown_store(void **state)
{
    (void)state;
    be_free(g_store_be);
    g_store_be = NULL;
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_matches_reference_on_many_shapes),
        cmocka_unit_test(test_approx_matches_masked_reference_on_many_shapes),
        cmocka_unit_test(test_approx_policy_changes_the_output_beyond_its_reach),
        cmocka_unit_test(test_approx_is_bit_identical_to_dense_below_global_plus_window),
        cmocka_unit_test(test_split_kv_decode_respects_the_policy),
        cmocka_unit_test(test_visited_tiles_fall_with_the_window),
        cmocka_unit_test(test_q8_0_cache_matches_reference_on_rounded_kv),
        cmocka_unit_test(test_q8_0_store_writes_ggml_blocks),
        cmocka_unit_test(test_q8_0_row_decoders_agree),
        cmocka_unit_test(test_engine_counts_the_dense_tail_from_the_end_of_the_whole_prompt),
        cmocka_unit_test(test_engine_decodes_densely_under_the_approximate_policy),
        cmocka_unit_test(test_fingerprint_covers_every_policy_field),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, teardown_store);
}
