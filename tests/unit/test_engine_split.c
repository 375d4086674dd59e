/* A layer split (engine/context.h eng_split_opts) on CPU backends: two parts hand the
 * residual stream over between their layers, each part keeps its layers' KV and
 * recurrent state, and every number comes out as without the split, bit for bit:
 * logits of prefill chunks and decode steps, snapshots (one layout for both), restores
 * across the two kinds of context, speculative rewinds, batched steps of several
 * sequences (--parallel). --gpu-mem refusals name the part
 * and the sizes. The same code paths run on CUDA with --device cuda:0,0. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "engine/context.h"
#include "engine/sequence.h"
#include "engine/spec.h"
#include "model/model.h"
#include "testutil.h"

static eng_ctx *make(const model *m, int32_t parts, uint64_t gpu_mem)
{
    eng_options o;
    eng_options_default(&o);
    o.n_threads = 1;
    o.n_ctx = 64;
    o.n_ubatch = 5;
    o.n_seq = 3;
    o.split.n = parts;
    o.split.gpu_mem = gpu_mem;
    eng_ctx *c = NULL;
    wk_error err = {0};
    int rc = eng_ctx_new(&c, m, &o, &err);
    if (rc) fail_msg("context of %d parts: %s", parts, err.msg);
    return c;
}

/* Prefills tok[0..n-3) in chunks of 5 and decodes the last 3: the logits after each. */
static void run(eng_ctx *c, eng_seq *s, const int32_t *tok, int32_t n, float *out)
{
    wk_error err = {0};
    const size_t V = (size_t)eng_n_vocab(c);
    assert_int_equal(eng_prefill(c, s, tok, n - 3, NULL, &err), 0);
    memcpy(out, eng_logits(c), V * sizeof(float));
    for (int32_t i = n - 3; i < n; i++) {
        assert_int_equal(eng_decode(c, s, tok[i], &err), 0);
        memcpy(out + V * (size_t)(i - n + 4), eng_logits(c), V * sizeof(float));
    }
}

static void split_equals_unsplit(const char *dir, const char *name)
{
    model *m = NULL;
    wk_error err = {0};
    assert_int_equal(model_load(&m, path_join(dir, name), &err), 0);
    int32_t tok[24];
    for (int32_t i = 0; i < 24; i++) tok[i] = 3 + (i * 37) % 200;
    const size_t V = m->hp.n_vocab;
    float *ref = malloc(4 * V * sizeof(float)), *got = malloc(4 * V * sizeof(float));
    assert_non_null(ref);
    assert_non_null(got);
    eng_ctx *one = make(m, 1, 0), *two = make(m, 2, 0);
    assert_int_equal(eng_ctx_parts(one), 1);
    assert_int_equal(eng_ctx_parts(two), 2);
    uint32_t f, e;
    int32_t gpu;
    eng_ctx_part_layers(two, 1, &f, &e, &gpu);
    assert_int_equal(f, 1);
    assert_int_equal(e, 2);
    assert_ptr_not_equal(eng_ctx_layer_backend(two, 0), eng_ctx_layer_backend(two, 1));
    assert_ptr_equal(eng_ctx_head_backend(two), eng_ctx_layer_backend(two, 1));
    eng_seq *s1 = NULL, *s2 = NULL;
    assert_int_equal(eng_seq_new(&s1, one, 0, &err), 0);
    assert_int_equal(eng_seq_new(&s2, two, 0, &err), 0);
    run(one, s1, tok, 24, ref);
    run(two, s2, tok, 24, got);
    assert_memory_equal(ref, got, 4 * V * sizeof(float));

    /* snapshots hold the same bytes, and one taken of either restores into the other */
    eng_snapshot a = {0}, b = {0};
    assert_int_equal(seq_snapshot(s1, &a, &err), 0);
    assert_int_equal(seq_snapshot(s2, &b, &err), 0);
    assert_int_equal(a.state_bytes, b.state_bytes);
    if (a.state_bytes) assert_memory_equal(a.state, b.state, a.state_bytes);
    assert_int_equal(eng_decode(one, s1, 11, &err), 0);
    memcpy(ref, eng_logits(one), V * sizeof(float));
    if (m->hp.n_rec_layers) {
        assert_int_equal(eng_decode(two, s2, 99, &err), 0); /* something else, then back */
        assert_int_equal(seq_restore(s2, &a, &err), 0);
    }
    assert_int_equal(eng_decode(two, s2, 11, &err), 0);
    assert_memory_equal(ref, eng_logits(two), V * sizeof(float));

    /* a speculative batch undone on the split context: the state of every part goes back */
    eng_seq_mark mk = {0};
    assert_int_equal(eng_seq_mark_save(s2, &mk, &err), 0);
    const int32_t before = eng_seq_pos(s2);
    const int32_t draft[3] = {7, 8, 9};
    assert_int_equal(eng_decode_rows(two, s2, draft, 3, 0, false, &err), 0);
    int32_t reached = 0;
    assert_int_equal(eng_seq_rewind(s2, &mk, before, &reached, &err), 0);
    assert_int_equal(reached, before);
    assert_int_equal(eng_decode(two, s2, 12, &err), 0);
    assert_int_equal(eng_decode(one, s1, 12, &err), 0);
    assert_memory_equal(eng_logits(one), eng_logits(two), V * sizeof(float));
    eng_seq_mark_free(&mk);

    /* a prefix copied between sequences of the split context reads every part's KV */
    if (!m->hp.n_rec_layers) {
        eng_seq *s3 = NULL;
        assert_int_equal(eng_seq_new(&s3, two, 0, &err), 0);
        assert_int_equal(eng_seq_copy_prefix(s3, s2, eng_seq_pos(s2), &err), 0);
        assert_int_equal(eng_decode(two, s3, 13, &err), 0);
        memcpy(got, eng_logits(two), V * sizeof(float));
        assert_int_equal(eng_decode(one, s1, 13, &err), 0);
        assert_memory_equal(eng_logits(one), got, V * sizeof(float));
        eng_seq_free(s3);
    }
    eng_snapshot_free(&a);
    eng_snapshot_free(&b);
    eng_seq_free(s1);
    eng_seq_free(s2);
    eng_ctx_free(one);
    eng_ctx_free(two);
    free(ref);
    free(got);
    model_free(m);
}

/* One eng_step of three sequences (a prompt chunk beside two decode tokens) on the split
 * context gives each sequence the logits it gets alone on the unsplit one. */
static void split_step_equals_unsplit(const char *dir, const char *name)
{
    model *m = NULL;
    wk_error err = {0};
    assert_int_equal(model_load(&m, path_join(dir, name), &err), 0);
    const size_t V = m->hp.n_vocab;
    eng_ctx *one = make(m, 1, 0), *two = make(m, 2, 0);
    eng_seq *a[3], *b[3];
    int32_t tok[3][8];
    for (int i = 0; i < 3; i++) {
        for (int32_t t = 0; t < 8; t++) tok[i][t] = 5 + (int32_t)((i * 53 + t * 29) % 190);
        assert_int_equal(eng_seq_new(&a[i], one, 0, &err), 0);
        assert_int_equal(eng_seq_new(&b[i], two, 0, &err), 0);
    }
    /* sequences 1 and 2 stand at different positions; sequence 0 is a new prompt */
    for (int i = 1; i < 3; i++) {
        assert_int_equal(eng_prefill(one, a[i], tok[i], 2 + i, NULL, &err), 0);
        assert_int_equal(eng_prefill(two, b[i], tok[i], 2 + i, NULL, &err), 0);
    }
    eng_step_item items[3] = {
        {.seq = b[0], .tokens = tok[0], .n = 4, .prefill = true, .logits = true},
        {.seq = b[1], .tokens = tok[1] + 3, .n = 1, .logits = true},
        {.seq = b[2], .tokens = tok[2] + 4, .n = 1, .logits = true},
    };
    assert_int_equal(eng_step(two, items, 3, &err), 0);
    assert_int_equal(eng_prefill(one, a[0], tok[0], 4, NULL, &err), 0);
    assert_memory_equal(eng_logits(one), eng_seq_logits(b[0]), V * sizeof(float));
    for (int i = 1; i < 3; i++) {
        assert_int_equal(eng_decode(one, a[i], tok[i][2 + i], &err), 0);
        assert_memory_equal(eng_logits(one), eng_seq_logits(b[i]), V * sizeof(float));
    }
    for (int i = 0; i < 3; i++) {
        eng_seq_free(a[i]);
        eng_seq_free(b[i]);
    }
    eng_ctx_free(one);
    eng_ctx_free(two);
    model_free(m);
}

static void test_batched_step_over_a_split_equals_the_unsplit_one(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    split_step_equals_unsplit(dir, "models/tiny-qwen3-Q8_0.gguf");
    split_step_equals_unsplit(dir, "models/tiny-qwen35-Q8_0.gguf");
}

static void test_split_logits_and_state_equal_the_unsplit_ones(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    split_equals_unsplit(dir, "models/tiny-qwen3-Q8_0.gguf");   /* attention only */
    split_equals_unsplit(dir, "models/tiny-qwen35-Q8_0.gguf");  /* a recurrent part, an attention part */
}

static model *load_tiny_qwen3(const char *dir)
{
    model *m = NULL;
    wk_error err = {0};
    if (model_load(&m, path_join(dir, "models/tiny-qwen3-Q8_0.gguf"), &err)) fail_msg("%s", err.msg);
    return m;
}

static void test_more_parts_than_layers_is_refused(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    model *m = load_tiny_qwen3(dir);
    wk_error err = {0};
    eng_options o;
    eng_options_default(&o);
    o.n_threads = 1;
    o.split.n = 3;
    eng_ctx *c = NULL;
    assert_int_equal(eng_ctx_new(&c, m, &o, &err), WK_EINVAL);
    assert_non_null(strstr(err.msg, "each device needs a layer"));
    assert_null(c);
    o.split.n = ENG_MAX_SPLIT + 1;
    assert_int_equal(eng_ctx_new(&c, m, &o, &err), WK_EINVAL);
    model_free(m);
}

static void test_gpu_mem_refuses_what_does_not_fit(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    model *m = load_tiny_qwen3(dir);
    wk_error err = {0};
    eng_options o;
    eng_options_default(&o);
    o.n_threads = 1;
    o.n_ctx = 64;
    o.split.gpu_mem = 1024; /* not even the weights */
    eng_ctx *c = NULL;
    assert_int_equal(eng_ctx_new(&c, m, &o, &err), WK_ENOMEM);
    assert_non_null(strstr(err.msg, "weights"));
    assert_non_null(strstr(err.msg, "do not fit --gpu-mem 1.00 KiB"));
    assert_null(c);
    /* room for the weights and scratch of both parts (they share GPU 0) but not a long sequence:
     * 2 layers x 1024 B of KV per position (test_memory_plan) */
    eng_seq *s = NULL;
    o.split.n = 2;
    o.split.gpu_mem = 64u << 20;
    assert_int_equal(eng_ctx_new(&c, m, &o, &err), 0);
    assert_int_equal(eng_seq_new(&s, c, 1 << 20, &err), WK_ENOMEM);
    assert_non_null(strstr(err.msg, "sequence of 1048576 positions: cpu part 0"));
    assert_non_null(strstr(err.msg, "over --gpu-mem 64.00 MiB"));
    assert_null(s);
    /* a sequence that fits, freed, gives its bytes back: the same fits again */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(eng_seq_new(&s, c, 8192, &err), 0);
        eng_seq_free(s);
    }
    eng_ctx_free(c);
    model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_logits_and_state_equal_the_unsplit_ones),
        cmocka_unit_test(test_batched_step_over_a_split_equals_the_unsplit_one),
        cmocka_unit_test(test_more_parts_than_layers_is_refused),
        cmocka_unit_test(test_gpu_mem_refuses_what_does_not_fit),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
