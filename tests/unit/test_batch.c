/* Batched steps over several sequences (eng_step → model_forward_batch): on the CPU
 * every sequence's logits equal, bit for bit, those of its own forward passes alone,
 * for prompt chunks and decode tokens mixed in one step and sequences at different
 * positions; bad batches are refused with no sequence moved.
 * WICK_TEST_DEVICE=cuda (a CUDA build on a GPU) runs the same on the CUDA backend, where
 * all rows take one matmul: logits equal up to rounding (TOL_CUDA). */
#include <math.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/context.h"
#include "engine/sequence.h"
#include "model/model.h"
#include "testutil.h"

#define N_SEQ 12
#define N_CTX 256
#define TOL_CUDA 2e-2f

static bool on_cuda(void)
{
    const char *d = getenv("WICK_TEST_DEVICE");
    return d && !strcmp(d, "cuda");
}

typedef struct fixture {
    model *m;
    eng_ctx *c;
    eng_seq *ref[N_SEQ], *bat[N_SEQ];
    size_t V;
} fixture;

static void fixture_open(fixture *f, const char *golden, const char *file, int32_t ubatch)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/models/%s", golden, file);
    wk_error err = {0};
    if (model_load(&f->m, path, &err)) fail_msg("%s: %s", path, err.msg);
    eng_options o;
    eng_options_default(&o);
    o.n_threads = 2;
    o.n_ctx = N_CTX;
    o.n_ubatch = ubatch;
    o.n_seq = N_SEQ;
    if (on_cuda()) o.device = ENG_DEVICE_CUDA;
    if (eng_ctx_new(&f->c, f->m, &o, &err)) fail_msg("%s: %s", file, err.msg);
    for (int i = 0; i < N_SEQ; i++) {
        assert_int_equal(eng_seq_new(&f->ref[i], f->c, N_CTX, &err), 0);
        assert_int_equal(eng_seq_new(&f->bat[i], f->c, N_CTX, &err), 0);
    }
    f->V = (size_t)eng_n_vocab(f->c);
}

static void fixture_close(fixture *f)
{
    for (int i = 0; i < N_SEQ; i++) {
        eng_seq_free(f->ref[i]);
        eng_seq_free(f->bat[i]);
    }
    eng_ctx_free(f->c);
    model_free(f->m);
}

static int32_t tok_at(int seq, int i, uint32_t V) { return (int32_t)(3 + ((uint32_t)seq * 131u + (uint32_t)i * 37u) % (V - 3)); }

/* The batch's sequences' logits against those their reference sequences got alone. */
static void expect_same(const fixture *f, const char *file, const char *what, const int *who, int n,
                        const float *ref_logits)
{
    for (int j = 0; j < n; j++) {
        const float *got = eng_seq_logits(f->bat[who[j]]), *want = ref_logits + (size_t)j * f->V;
        assert_non_null(got);
        if (!on_cuda()) {
            if (memcmp(got, want, sizeof(float) * f->V))
                fail_msg("%s, %s: sequence %d (at %d) differs from its forward alone", file, what, who[j],
                         eng_seq_pos(f->bat[who[j]]));
            continue;
        }
        float worst = 0;
        for (size_t v = 0; v < f->V; v++) worst = fabsf(got[v] - want[v]) > worst ? fabsf(got[v] - want[v]) : worst;
        if (worst > TOL_CUDA)
            fail_msg("%s, %s: sequence %d (at %d): logits %g apart from its forward alone", file,
                     what, who[j], eng_seq_pos(f->bat[who[j]]), (double)worst);
    }
}

/* Sequence i's prompt is 1 + 5i tokens (1..56: decode-sized rows and chunks of more than
 * the exact rows), all prefilled in one step; then steps of one token each, in some steps
 * with a new chunk of a sequence beside the others' tokens. */
static void check_model(const char *file)
{
    GOLDEN_OR_SKIP(golden);
    fixture f;
    fixture_open(&f, golden, file, 64);
    wk_error err = {0};
    const uint32_t V = (uint32_t)f.V;
    float *ref_logits = malloc(sizeof(float) * f.V * N_SEQ);
    assert_non_null(ref_logits);
    int32_t toks[N_SEQ][64];
    eng_step_item items[N_SEQ];
    int who[N_SEQ];

    /* every prompt (sequence 11 waits: it joins later) */
    int n_items = 0;
    for (int i = 0; i < N_SEQ - 1; i++) {
        int32_t n = 1 + 5 * i;
        for (int t = 0; t < n; t++) toks[i][t] = tok_at(i, t, V);
        assert_int_equal(eng_prefill(f.c, f.ref[i], toks[i], n, NULL, &err), 0);
        memcpy(ref_logits + (size_t)n_items * f.V, eng_logits(f.c), sizeof(float) * f.V);
        items[n_items] = (eng_step_item){.seq = f.bat[i], .tokens = toks[i], .n = n, .prefill = true, .logits = true};
        who[n_items++] = i;
    }
    /* 1 + 6 + ... + 51 = 286 rows: as many steps as it takes, each as full as it goes */
    int32_t rows = 0, first = 0;
    for (int k = 0; k <= n_items; k++) {
        if (k < n_items && rows + items[k].n <= eng_step_max_tokens(f.c)) {
            rows += items[k].n;
            continue;
        }
        assert_int_equal(eng_step(f.c, items + first, k - first, &err), 0);
        first = k;
        rows = k < n_items ? items[k].n : 0;
    }
    expect_same(&f, file, "prompts", who, n_items, ref_logits);

    /* decode steps; at step 2 sequence 11's prompt (40 tokens) comes in beside them, at
     * step 4 sequence 3 sends a chunk of 9 instead of one token */
    for (int step = 0; step < 6; step++) {
        n_items = 0;
        for (int i = 0; i < N_SEQ; i++) {
            if (i == N_SEQ - 1 && step < 2) continue;
            int32_t n = 1;
            if (i == N_SEQ - 1 && step == 2) n = 40;
            if (i == 3 && step == 4) n = 9;
            for (int t = 0; t < n; t++) toks[i][t] = tok_at(i, 100 + step * 50 + t, V);
            int rc = n > 1 ? eng_prefill(f.c, f.ref[i], toks[i], n, NULL, &err) : eng_decode(f.c, f.ref[i], toks[i][0], &err);
            assert_int_equal(rc, 0);
            memcpy(ref_logits + (size_t)n_items * f.V, eng_logits(f.c), sizeof(float) * f.V);
            items[n_items] = (eng_step_item){.seq = f.bat[i], .tokens = toks[i], .n = n, .prefill = n > 1, .logits = true};
            who[n_items++] = i;
        }
        assert_int_equal(eng_step(f.c, items, n_items, &err), 0);
        char what[32];
        snprintf(what, sizeof what, "step %d", step);
        expect_same(&f, file, what, who, n_items, ref_logits);
    }
    for (int i = 0; i < N_SEQ; i++) {
        assert_int_equal(eng_seq_pos(f.bat[i]), eng_seq_pos(f.ref[i]));
        assert_memory_equal(eng_seq_tokens(f.bat[i]), eng_seq_tokens(f.ref[i]),
                            sizeof(int32_t) * (size_t)eng_seq_pos(f.ref[i]));
    }
    free(ref_logits);
    fixture_close(&f);
}

static void test_batch_equals_alone(void **state)
{
    (void)state;
    const char *files[] = {"tiny-llama-Q4_K_M.gguf", "tiny-qwen3-F32.gguf",    "tiny-qwen3-Q8_0.gguf",
                           "tiny-qwen3moe-Q8_0.gguf", "tiny-qwen35-F32.gguf",  "tiny-qwen35-Q4_K_M.gguf",
                           "tiny-qwen35moe-Q8_0.gguf"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) check_model(files[i]);
}

/* Refused batches leave every sequence where it was. */
static void test_batch_refusals(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    fixture f;
    fixture_open(&f, golden, "tiny-qwen35-F32.gguf", 16);
    wk_error err = {0};
    int32_t toks[32];
    for (int t = 0; t < 32; t++) toks[t] = 5 + t;
    eng_step_item two[2] = {{.seq = f.bat[0], .tokens = toks, .n = 1, .logits = true},
                            {.seq = f.bat[0], .tokens = toks, .n = 1, .logits = true}};
    assert_int_equal(eng_step(f.c, two, 2, &err), WK_EINVAL); /* one state twice */
    assert_int_equal(eng_seq_pos(f.bat[0]), 0);
    /* more rows than a step holds (16 + 12 - 1 = 27) */
    assert_int_equal(eng_step_max_tokens(f.c), 16 + N_SEQ - 1);
    two[1] = (eng_step_item){.seq = f.bat[1], .tokens = toks, .n = 27, .prefill = true};
    assert_int_equal(eng_step(f.c, two, 2, &err), WK_EINVAL);
    /* a bad token id, a sequence past its capacity */
    int32_t bad = (int32_t)f.V;
    two[1] = (eng_step_item){.seq = f.bat[1], .tokens = &bad, .n = 1};
    assert_int_equal(eng_step(f.c, two, 2, &err), WK_EINVAL);
    for (int i = 0; i < N_CTX / 16; i++) {
        eng_step_item one = {.seq = f.bat[1], .tokens = toks, .n = 16, .prefill = true};
        assert_int_equal(eng_step(f.c, &one, 1, &err), 0);
    }
    two[1] = (eng_step_item){.seq = f.bat[1], .tokens = toks, .n = 1};
    assert_int_equal(eng_step(f.c, two, 2, &err), WK_ERANGE);
    assert_int_equal(eng_seq_pos(f.bat[0]), 0);
    assert_int_equal(eng_seq_pos(f.bat[1]), N_CTX);
    /* too many sequences for the context */
    eng_step_item many[N_SEQ + 1];
    for (int i = 0; i <= N_SEQ; i++) many[i] = (eng_step_item){.seq = f.bat[i % N_SEQ], .tokens = toks, .n = 1};
    assert_int_equal(eng_step(f.c, many, N_SEQ + 1, &err), WK_EINVAL);
    /* an injected backend failure: nobody moves */
    eng_ctx_fail_after(f.c, 1);
    two[1] = (eng_step_item){.seq = f.bat[2], .tokens = toks, .n = 3, .prefill = true};
    assert_int_equal(eng_step(f.c, two, 2, &err), WK_EIO);
    assert_int_equal(eng_seq_pos(f.bat[0]), 0);
    assert_int_equal(eng_seq_pos(f.bat[2]), 0);
    fixture_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_equals_alone),
        cmocka_unit_test(test_batch_refusals),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
