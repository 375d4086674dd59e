/* Hyper-parameter validation (model/model_validate.c): golden models patched
 * in memory the way a hostile file would be (one integer changed in place)
 * are refused with one line naming the key, its value and what it
 * contradicts, by model_load and model_check_file alike; keys that describe
 * no tensor size nothing; the activation and sequence-state plans are checked
 * against the machine's RAM before anything is allocated. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/context.h"
#include "engine/sequence.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "testutil.h"

typedef struct image {
    uint8_t *data;
    size_t size;
} image;

static image golden_image(const char *dir, const char *name)
{
    char rel[128];
    snprintf(rel, sizeof rel, "models/%s.gguf", name);
    image im = {0};
    im.data = read_whole_file(path_join(dir, rel), &im.size);
    if (!im.data) fail_msg("cannot read %s", rel);
    return im;
}

/* The record of key in the image (views into im->data); *f to close after use. */
static const gguf_kv *find_key(image *im, const char *key, gguf_file **f)
{
    wk_error err = {0};
    if (gguf_open_buffer(f, im->data, im->size, &err)) fail_msg("%s", err.msg);
    const gguf_kv *kv = gguf_find_kv(*f, key);
    if (!kv) fail_msg("key %s: not in the golden file", key);
    return kv;
}

/* Sets integer key `key` (entry idx of an array, or the scalar when idx < 0)
 * to v in place, in the stored type's width (two's complement: 2^32-1 in an
 * int32 slot reads as -1), as a hostile file would hold it. */
static void patch_int(image *im, const char *key, int idx, uint64_t v)
{
    gguf_file *f = NULL;
    const gguf_kv *kv = find_key(im, key, &f);
    enum gguf_value_type t = idx < 0 ? kv->type : kv->arr_type;
    assert_true(gguf_type_is_integer(t));
    size_t w = gguf_scalar_size(t);
    /* the reader's views point into the buffer: a scalar's value follows its key and type */
    uint8_t *p = idx < 0 ? (uint8_t *)kv->key.ptr + kv->key.len + 4 : (uint8_t *)kv->arr_data + (size_t)idx * w;
    for (size_t i = 0; i < w; i++) p[i] = (uint8_t)(v >> (8 * i));
    gguf_close(f);
}

/* Renames key so that the file no longer has it (same length, still valid GGUF). */
static void drop_key(image *im, const char *key)
{
    gguf_file *f = NULL;
    const gguf_kv *kv = find_key(im, key, &f);
    ((char *)kv->key.ptr)[kv->key.len - 1] = '~';
    gguf_close(f);
}

typedef struct lie {
    const char *model, *key;
    int idx;
    uint64_t value;
    const char *expect; /* substring of the one-line error */
} lie;

static const lie k_lies[] = {
    /* issue 24's three cases: a hang, a 24 GiB allocation, a signed overflow */
    {"tiny-qwen3-F32", "qwen3.block_count", -1, 2147483647,
     "key qwen3.block_count = 2147483647: the file has tensors for 2 blocks (blk.0 .. blk.1)"},
    {"tiny-qwen35moe-Q8_0", "qwen35moe.feed_forward_length", -1, 4294967295u,
     "key qwen35moe.feed_forward_length = 4294967295: larger than any model has"},
    {"tiny-qwen35-Q4_K_M", "qwen35.rope.dimension_sections", 0, 2147483647,
     "key qwen35.rope.dimension_sections: entry 0 = 2147483647 is outside 0..16"},
    /* against each other */
    {"tiny-qwen3-F32", "qwen3.attention.head_count_kv", -1, 3, "head_count_kv = 3: does not divide head_count 2"},
    {"tiny-qwen35moe-Q8_0", "qwen35moe.expert_used_count", -1, 9, "expert_used_count = 9: more than expert_count 8"},
    {"tiny-qwen35-Q4_K_M", "qwen35.rope.dimension_sections", 3, 2, "sections sum to 18, expected 1..16"},
    {"tiny-qwen3-F32", "qwen3.rope.dimension_count", -1, 130, "dimension_count = 130: more than key_length 128"},
    {"tiny-qwen35-Q4_K_M", "qwen35.ssm.group_count", -1, 3, "group_count = 3: does not divide ssm.time_step_rank 4"},
    {"tiny-qwen35-Q4_K_M", "qwen35.attention.value_length", -1, 64, "key_length = 128 and value_length = 64 differ"},
    {"tiny-qwen3-F32", "qwen3.block_count", -1, 0, "block_count = 0: must be at least 1"},
    /* against the tensors */
    {"tiny-qwen3-F32", "qwen3.block_count", -1, 3, "block_count = 3: the file has tensors for 2 blocks"},
    {"tiny-qwen3-F32", "qwen3.embedding_length", -1, 512, "embedding_length = 512: tensor token_embd.weight has rows of 256"},
    {"tiny-llama-Q4_K_M", "llama.attention.head_count", -1, 8,
     "more than key_length 32 (embedding_length 256 / head_count 8: the file has no key_length)"},
    {"tiny-llama-Q4_K_M", "llama.attention.head_count_kv", -1, 2,
     "2 kv heads x key_length 64 (embedding_length 256 / head_count 4: the file has no key_length) = 128 key rows, "
     "but tensor blk.0.attn_k.weight has 64"},
    {"tiny-qwen3-F32", "qwen3.attention.key_length", -1, 256, "tensor blk.0.attn_q_norm.weight has 128 entries"},
    {"tiny-qwen3-F32", "qwen3.feed_forward_length", -1, 1024, "tensor blk.0.ffn_gate.weight has 256 rows"},
    {"tiny-qwen3moe-Q8_0", "qwen3moe.expert_count", -1, 16, "expert_count = 16: tensor blk.0.ffn_gate_inp.weight routes to 8"},
    {"tiny-qwen3moe-Q8_0", "qwen3moe.expert_feed_forward_length", -1, 64, "tensor blk.0.ffn_gate_exps.weight has 32 rows"},
    {"tiny-qwen35moe-Q8_0", "qwen35moe.expert_shared_feed_forward_length", -1, 16,
     "tensor blk.0.ffn_gate_shexp.weight has 32 rows"},
    {"tiny-qwen35-Q4_K_M", "qwen35.ssm.inner_size", -1, 512, "tensor blk.0.ssm_norm.weight has 64"},
    {"tiny-qwen35-Q4_K_M", "qwen35.ssm.conv_kernel", -1, 3, "tensor blk.0.ssm_conv1d.weight has 4 taps"},
    {"tiny-qwen35-Q4_K_M", "qwen35.ssm.time_step_rank", -1, 8, "tensor blk.0.ssm_a has 4 value heads"},
    {"tiny-qwen35-Q4_K_M", "qwen35.full_attention_interval", -1, 1,
     "full_attention_interval = 1: makes blk.0 an attention layer, but the block has no attn_q.weight"},
};

static void test_every_lie_is_one_line_naming_the_key(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    for (size_t i = 0; i < sizeof k_lies / sizeof k_lies[0]; i++) {
        const lie *c = &k_lies[i];
        image im = golden_image(dir, c->model);
        patch_int(&im, c->key, c->idx, c->value);
        model *m = NULL;
        wk_error err = {0};
        int rc = model_load_buffer(&m, im.data, im.size, &err);
        printf("%s %s[%d]=%llu: %s\n", c->model, c->key, c->idx, (unsigned long long)c->value, err.msg);
        assert_int_equal(rc, WK_EFORMAT);
        assert_null(m);
        assert_null(strchr(err.msg, '\n'));
        if (!strstr(err.msg, c->expect)) fail_msg("expected \"%s\" in \"%s\"", c->expect, err.msg);
        /* wick info's check is the same one */
        gguf_file *f = NULL;
        wk_error err2 = {0};
        assert_int_equal(gguf_open_buffer(&f, im.data, im.size, &err2), 0);
        assert_int_equal(model_check_file(f, &err2), WK_EFORMAT);
        assert_non_null(strstr(err.msg, err2.msg));
        gguf_close(f);
        free(im.data);
    }
}

static void test_golden_models_pass_the_checks(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    const char *names[] = {"tiny-llama-Q4_K_M", "tiny-qwen3-F32",        "tiny-qwen3moe-Q8_0",
                           "tiny-qwen35-Q4_K_M", "tiny-qwen35moe-Q8_0", "tiny-qwen35moe-F32"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        image im = golden_image(dir, names[i]);
        gguf_file *f = NULL;
        wk_error err = {0};
        assert_int_equal(gguf_open_buffer(&f, im.data, im.size, &err), 0);
        if (model_check_file(f, &err)) fail_msg("%s: %s", names[i], err.msg);
        gguf_close(f);
        free(im.data);
    }
}

/* Greedy logits of a few tokens through the engine (CPU, one thread). */
static float *last_logits(const model *m)
{
    eng_options o;
    eng_options_default(&o);
    o.n_threads = 1;
    o.n_ctx = 16;
    o.n_ubatch = 8;
    eng_ctx *ctx = NULL;
    eng_seq *seq = NULL;
    wk_error err = {0};
    if (eng_ctx_new(&ctx, m, &o, &err) || eng_seq_new(&seq, ctx, 16, &err)) fail_msg("%s", err.msg);
    const int32_t tokens[5] = {1, 70, 3, 200, 9};
    eng_prefill_opts po = {0};
    if (eng_prefill(ctx, seq, tokens, 5, &po, &err)) fail_msg("%s", err.msg);
    float *out = malloc(sizeof(float) * m->hp.n_vocab);
    memcpy(out, eng_logits(ctx), sizeof(float) * m->hp.n_vocab);
    eng_seq_free(seq);
    eng_ctx_free(ctx);
    return out;
}

static void assert_same_logits(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) fail_msg("logit %zu: %g vs %g", i, a[i], b[i]);
}

/* A MoE file's feed_forward_length describes no tensor: within the cap any
 * value loads and changes nothing; without the optional shared-expert width
 * key the tensor gives it (the scratch is sized from it, not from the key). */
static void test_keys_that_describe_no_tensor_size_nothing(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    const char *name = "tiny-qwen35moe-Q8_0";
    image ref = golden_image(dir, name), ff = golden_image(dir, name), shexp = golden_image(dir, name);
    patch_int(&ff, "qwen35moe.feed_forward_length", -1, 1);
    drop_key(&shexp, "qwen35moe.expert_shared_feed_forward_length");
    drop_key(&shexp, "qwen35moe.feed_forward_length"); /* so that no key holds the width 32 */
    model *m0 = NULL, *m1 = NULL, *m2 = NULL;
    wk_error err = {0};
    if (model_load_buffer(&m0, ref.data, ref.size, &err) || model_load_buffer(&m1, ff.data, ff.size, &err) ||
        model_load_buffer(&m2, shexp.data, shexp.size, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(m1->hp.n_ff, 0);
    assert_int_equal(m2->hp.n_ff_shexp, 32);
    float *a = last_logits(m0), *b = last_logits(m1), *c = last_logits(m2);
    assert_same_logits(a, b, m0->hp.n_vocab);
    assert_same_logits(a, c, m0->hp.n_vocab);
    free(a);
    free(b);
    free(c);
    model_free(m0);
    model_free(m1);
    model_free(m2);
    free(ref.data);
    free(ff.data);
    free(shexp.data);
}

/* Plans larger than the machine are errors naming the bytes, not attempted
 * allocations (which the ASan build would abort on). */
static void test_plans_larger_than_ram_are_refused_before_allocating(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    model *m = NULL;
    wk_error err = {0};
    assert_int_equal(model_load(&m, path_join(dir, "models/tiny-qwen3-F32.gguf"), &err), 0);
    be_backend *be = NULL;
    assert_int_equal(be_cpu_new(&be, 1, &err), 0);
    model_scratch *s = NULL;
    assert_int_equal(model_scratch_new(&s, m, be, INT32_MAX, &err), WK_ENOMEM);
    assert_null(s);
    assert_non_null(strstr(err.msg, "the activation buffers for batches of 2147483647 tokens needs "));
    assert_non_null(strstr(err.msg, "bytes"));
    assert_non_null(strstr(err.msg, "GiB of RAM"));
    be_free(be);

    eng_options o;
    eng_options_default(&o);
    o.n_threads = 1;
    o.n_ctx = 64;
    o.n_ubatch = 8;
    eng_ctx *ctx = NULL;
    assert_int_equal(eng_ctx_new(&ctx, m, &o, &err), 0);
    eng_seq *seq = NULL;
    /* 2 layers x 1 kv head x (K + V) x 128 x 2 bytes = 1 KiB per position: 2 TiB */
    assert_int_equal(eng_seq_new(&seq, ctx, INT32_MAX, &err), WK_ENOMEM);
    assert_null(seq);
    assert_non_null(strstr(err.msg, "the sequence state for 2147483647 positions needs 2199023254528 bytes"));
    eng_ctx_free(ctx);
    model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_lie_is_one_line_naming_the_key),
        cmocka_unit_test(test_golden_models_pass_the_checks),
        cmocka_unit_test(test_keys_that_describe_no_tensor_size_nothing),
        cmocka_unit_test(test_plans_larger_than_ram_are_refused_before_allocating),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
