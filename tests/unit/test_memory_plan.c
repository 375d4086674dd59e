/* The memory plan (engine/memory_plan.h) on the golden models, against
 * numbers worked out by hand from their shapes (golden/README.md):
 *   tiny-qwen3: 2 attention layers, 1 kv head, head dim 128
 *     KV F16 = 2 (K, V) x 2 bytes x 128 x 1 head x 2 layers = 1024 B/token
 *     KV Q8_0 = 2 x (128/32 blocks x 34 B) x 2 layers = 544 B/token
 *   tiny-qwen35: 1 attention layer (1 kv head, dim 128) + 1 Gated DeltaNet
 *     layer (conv 4, 2 key heads of 64, 4 value heads of 64):
 *     KV F16 = 2 x 2 x 128 = 512 B/token
 *     conv = (4 - 1) x (2 x 2 x 64 + 4 x 64) = 1536 floats,
 *     ssm = 4 x 64 x 64 = 16384 floats: state = 17920 x 4 = 71680 B
 * and the plan agrees with what the engine allocates (eng_kv_bytes_per_token
 * of a real context). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <string.h>

#include "engine/context.h"
#include "engine/memory_plan.h"
#include "model/model.h"
#include "testutil.h"
#include "util/sysinfo.h"

static model *load(const char *dir, const char *name)
{
    model *m = NULL;
    wk_error err = {0};
    int rc = model_load(&m, path_join(dir, name), &err);
    if (rc) fail_msg("%s: %s", name, err.msg);
    return m;
}

static void test_kv_and_state_bytes_match_the_hand_arithmetic(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    model *q3 = load(dir, "models/tiny-qwen3-Q8_0.gguf");
    assert_int_equal(eng_mem_kv_bytes_per_token(q3, BE_KV_F16), 1024);
    assert_int_equal(eng_mem_kv_bytes_per_token(q3, BE_KV_Q8_0), 544);
    assert_int_equal(eng_mem_state_bytes(q3), 0);
    model *q35 = load(dir, "models/tiny-qwen35-Q8_0.gguf");
    assert_int_equal(eng_mem_kv_bytes_per_token(q35, BE_KV_F16), 512);
    assert_int_equal(eng_mem_state_bytes(q35), 71680);
    /* the engine's own count for a live context says the same */
    eng_options o;
    eng_options_default(&o);
    o.n_threads = 1;
    o.n_ctx = 256;
    o.kv_type = BE_KV_Q8_0;
    eng_ctx *ctx = NULL;
    wk_error err = {0};
    assert_int_equal(eng_ctx_new(&ctx, q3, &o, &err), 0);
    assert_int_equal(eng_kv_bytes_per_token(ctx), 544);
    eng_ctx_free(ctx);
    model_free(q3);
    model_free(q35);
}

static void test_plan_adds_up_its_parts(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    model *m = load(dir, "models/tiny-qwen35-F32.gguf");
    eng_mem_options o;
    eng_mem_options_default(&o);
    o.n_ctx = 1000;
    o.ckpt_bytes = 12345;
    o.aux_bytes = 777;
    eng_mem_plan p;
    wk_error err = {0};
    assert_int_equal(eng_mem_plan_compute(m, &o, &p, &err), 0);
    /* an F32 file: weights are 4 bytes per element of every tensor */
    uint64_t elems = 0;
    for (size_t i = 0; i < gguf_tensor_count(m->file); i++) elems += gguf_tensor_at(m->file, i)->n_elements;
    assert_int_equal(p.weight_bytes, 4 * elems);
    assert_true(p.weight_bytes < gguf_file_size(m->file));
    assert_int_equal(p.kv_bytes, 512 * 1000);
    assert_int_equal(p.ids_bytes, 4 * 1000);
    assert_int_equal(p.state_bytes, 71680);
    assert_int_equal(p.ckpt_bytes, 12345);
    assert_int_equal(p.aux_bytes, 777);
    assert_int_equal(p.total_bytes,
                     p.weight_bytes + p.aux_bytes + p.kv_bytes + p.ids_bytes + p.state_bytes + p.ckpt_bytes +
                         p.scratch_bytes);
    /* two sequences: everything per sequence doubles, the activations hold one more row */
    o.n_parallel = 2;
    eng_mem_plan p2;
    assert_int_equal(eng_mem_plan_compute(m, &o, &p2, &err), 0);
    assert_int_equal(p2.kv_bytes, 2 * p.kv_bytes);
    assert_int_equal(p2.state_bytes, 2 * p.state_bytes);
    assert_int_equal(p2.weight_bytes, p.weight_bytes);
    assert_int_equal(p2.scratch_bytes - p.scratch_bytes,
                     model_scratch_bytes(m, 512 + 1) - model_scratch_bytes(m, 512));
    model_free(m);
}

static void test_scratch_is_the_activation_list(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    /* tiny-llama: n_embd 256, 4 heads of 64, 1 kv head, FFN 256, 64 rotary
     * dims, vocab 260; 64 tokens. x/cur/tmp/moe_out 4 x 64x256x4, q and att
     * 2 x 64x256x4, k and v 2 x 64x64x4, ffn gate/up 2 x 64x256x4, rope
     * 64x64x4, 12 one-float-per-token buffers (the unused ssm/router/expert
     * ones at width 1, tokens, pos, shared gate) 12 x 256, logits 32 rows x
     * 260 x 4, host arrays 64 x 52 (positions and tokens 4 bytes each, a batch's
     * sequence 32 and matmul group 12 bytes on LP64). */
    model *m = load(dir, "models/tiny-llama-F32.gguf");
    size_t expect = 4 * 65536 + 2 * 65536 + 2 * 16384 + 2 * 65536 + 16384 + 12 * 256 + 32 * 260 * 4 + 64 * 52;
    assert_int_equal(model_scratch_bytes(m, 64), expect);
    assert_int_equal(model_scratch_bytes(m, 0), 0);
    eng_mem_options o;
    eng_mem_options_default(&o);
    o.n_ctx = 64; /* n_ubatch 512 is clamped to the context, as eng_ctx_new does */
    eng_mem_plan p;
    wk_error err = {0};
    assert_int_equal(eng_mem_plan_compute(m, &o, &p, &err), 0);
    assert_int_equal(p.scratch_bytes, expect + 260 * 4);
    model_free(m);
}

static void test_fit_finds_the_largest_context_under_the_budget(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    model *m = load(dir, "models/tiny-qwen3-Q8_0.gguf");
    eng_mem_options o;
    eng_mem_options_default(&o);
    o.ckpt_bytes = 1 << 20;
    eng_mem_plan at, fit;
    wk_error err = {0};
    /* the budget holds exactly 3000 positions: the fit rounds down to 2816 (11 x 256) */
    o.n_ctx = 3000;
    assert_int_equal(eng_mem_plan_compute(m, &o, &at, &err), 0);
    assert_int_equal(eng_mem_fit_context(m, &o, at.total_bytes, 40960, &fit, &err), 0);
    assert_int_equal(fit.n_ctx, 2816);
    assert_true(fit.total_bytes <= at.total_bytes);
    /* from 8192 on, whole thousands: 10000 positions of budget give 9216 */
    o.n_ctx = 10000;
    assert_int_equal(eng_mem_plan_compute(m, &o, &at, &err), 0);
    assert_int_equal(eng_mem_fit_context(m, &o, at.total_bytes, 40960, &fit, &err), 0);
    assert_int_equal(fit.n_ctx, 9216);
    /* a budget above the trained context's needs gives the trained context, unrounded */
    assert_int_equal(eng_mem_fit_context(m, &o, UINT64_MAX / 2, 40000, &fit, &err), 0);
    assert_int_equal(fit.n_ctx, 40000);
    /* one byte short of 256 positions: refused, with the arithmetic */
    o.n_ctx = 256;
    assert_int_equal(eng_mem_plan_compute(m, &o, &at, &err), 0);
    assert_int_equal(eng_mem_fit_context(m, &o, at.total_bytes - 1, 40960, &fit, &err), WK_ERANGE);
    assert_non_null(strstr(err.msg, "not even 256 tokens"));
    assert_non_null(strstr(err.msg, "weights"));
    model_free(m);
}

static void test_overflowing_shapes_are_an_error(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    model *m = load(dir, "models/tiny-qwen3-Q8_0.gguf");
    m->hp.n_head_kv = 1u << 31;
    m->hp.n_attn_layers = 1u << 31;
    assert_int_equal(eng_mem_kv_bytes_per_token(m, BE_KV_F16), UINT64_MAX);
    eng_mem_options o;
    eng_mem_options_default(&o);
    eng_mem_plan p;
    wk_error err = {0};
    assert_int_equal(eng_mem_plan_compute(m, &o, &p, &err), WK_ERANGE);
    assert_non_null(strstr(err.msg, "overflow"));
    m->hp.n_head_kv = 1;
    m->hp.n_attn_layers = 2;
    o.n_ctx = 0;
    assert_int_equal(eng_mem_plan_compute(m, &o, &p, &err), WK_EINVAL);
    o.n_ctx = 16;
    o.kv_type = 7;
    assert_int_equal(eng_mem_plan_compute(m, &o, &p, &err), WK_EINVAL);
    model_free(m);
}

static void test_default_budget_keeps_a_margin(void **state)
{
    (void)state;
    const uint64_t G = 1ull << 30, M = 1ull << 20;
    assert_int_equal(eng_mem_default_budget(20 * G), 18 * G);
    assert_int_equal(eng_mem_default_budget(2 * G), 2 * G - 512 * M);
    assert_int_equal(eng_mem_default_budget(100 * M), 0);
    uint64_t avail = 0, total = 0;
    wk_error err = {0};
    assert_int_equal(eng_mem_free(ENG_DEVICE_CPU, 0, &avail, &total, &err), 0);
    assert_true(avail > 0 && avail <= total);
}

static void test_meminfo_parse_reads_available_and_total(void **state)
{
    (void)state;
    const char *text = "MemTotal:       24576000 kB\nMemFree:         1000 kB\nMemAvailable:   20480000 kB\n";
    uint64_t a = 0, t = 0;
    assert_int_equal(wk_meminfo_parse(text, &a, &t), 0);
    assert_int_equal(a, 20480000ull * 1024);
    assert_int_equal(t, 24576000ull * 1024);
    /* an old kernel without MemAvailable: not found, so the caller falls back */
    assert_int_equal(wk_meminfo_parse("MemTotal: 1 kB\nMemFree: 1 kB\n", &a, &t), WK_ENOTFOUND);
    /* a key that merely starts the same is not the key */
    assert_int_equal(wk_meminfo_parse("MemAvailableX: 5 kB\nMemTotal: 9 kB\n", &a, &t), WK_ENOTFOUND);
}

static void test_default_context_says_why(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    model *m = load(dir, "models/tiny-qwen3-Q8_0.gguf");
    eng_mem_options o;
    eng_mem_options_default(&o);
    o.kv_type = BE_KV_Q8_0;
    eng_mem_plan p;
    char why[512];
    wk_error err = {0};
    /* --mem 8M: weights ~0.9 MB + 544 B/token: 12288 of the trained 40960 */
    assert_int_equal(eng_mem_default_context(m, &o, 8u << 20, 40960, &p, why, sizeof why, &err), 0);
    assert_true(p.n_ctx < 40960 && p.total_bytes <= (8u << 20));
    assert_non_null(strstr(why, "trained 40960"));
    assert_non_null(strstr(why, "reduced to fit --mem 8.00 MiB"));
    assert_non_null(strstr(why, "at q8_0"));
    /* a roomy budget: the trained context */
    assert_int_equal(eng_mem_default_context(m, &o, 1u << 30, 40960, &p, why, sizeof why, &err), 0);
    assert_int_equal(p.n_ctx, 40960);
    assert_non_null(strstr(why, "context 40960 tokens: trained 40960, fits --mem"));
    model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_and_state_bytes_match_the_hand_arithmetic),
        cmocka_unit_test(test_plan_adds_up_its_parts),
        cmocka_unit_test(test_scratch_is_the_activation_list),
        cmocka_unit_test(test_fit_finds_the_largest_context_under_the_budget),
        cmocka_unit_test(test_overflowing_shapes_are_an_error),
        cmocka_unit_test(test_default_budget_keeps_a_margin),
        cmocka_unit_test(test_meminfo_parse_reads_available_and_total),
        cmocka_unit_test(test_default_context_says_why),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
