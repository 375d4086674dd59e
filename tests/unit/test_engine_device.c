/* Device selection (engine eng_options.device): --device values parse or are
 * refused with a message naming them; a CUDA context in a build without CUDA
 * is refused with a clear error; a CPU context still gives the same logits
 * through the host → backend staging of token ids and positions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/context.h"
#include "engine/sequence.h"
#include "model/model.h"
#include "testutil.h"

static void test_device_parse_accepts_cpu_and_cuda_names(void **state)
{
    (void)state;
    wk_error err = {0};
    int32_t dev = -1, gpu = -1;
    assert_int_equal(eng_device_parse("cpu", &dev, &gpu, &err), 0);
    assert_int_equal(dev, ENG_DEVICE_CPU);
    assert_int_equal(gpu, 0);
    const char *names[] = {"cuda", "cuda:0", "cuda:3"};
    const int32_t gpus[] = {0, 0, 3};
    for (int i = 0; i < 3; i++) {
        dev = gpu = -1;
        int rc = eng_device_parse(names[i], &dev, &gpu, &err);
        if (eng_have_cuda()) {
            assert_int_equal(rc, 0);
            assert_int_equal(dev, ENG_DEVICE_CUDA);
            assert_int_equal(gpu, gpus[i]);
        } else {
            assert_int_equal(rc, WK_EUNSUPPORTED);
            assert_non_null(strstr(err.msg, "built without CUDA"));
        }
    }
    assert_string_equal(eng_device_name(ENG_DEVICE_CPU), "cpu");
    assert_string_equal(eng_device_name(ENG_DEVICE_CUDA), "cuda");
}

static void test_device_parse_rejects_unknown_names(void **state)
{
    (void)state;
    const char *bad[] = {"gpu", "", "cudax", "cuda:", "cuda:-1", "cuda:1x", "CPU0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        wk_error err = {0};
        int32_t dev = 0, gpu = 0;
        assert_int_equal(eng_device_parse(bad[i], &dev, &gpu, &err), WK_EINVAL);
        assert_non_null(strstr(err.msg, "--device"));
    }
    wk_error err = {0};
    int32_t dev = 0, gpu = 0;
    assert_int_equal(eng_device_parse(NULL, &dev, &gpu, &err), WK_EINVAL);
}

static void test_cuda_context_is_refused_or_made(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    model *m = NULL;
    wk_error err = {0};
    assert_int_equal(model_load(&m, path_join(dir, "models/tiny-qwen3-F32.gguf"), &err), 0);
    eng_options o;
    eng_options_default(&o);
    o.device = ENG_DEVICE_CUDA;
    o.n_ctx = 64;
    eng_ctx *ctx = NULL;
    int rc = eng_ctx_new(&ctx, m, &o, &err);
    if (!eng_have_cuda()) {
        assert_int_equal(rc, WK_EUNSUPPORTED);
        assert_non_null(strstr(err.msg, "built without CUDA"));
        assert_null(ctx);
    } else if (rc) {
        assert_non_null(strstr(err.msg, "cuda")); /* no usable GPU here: says so */
        assert_null(ctx);
    }
    eng_ctx_free(ctx);
    o.device = 9;
    assert_int_equal(eng_ctx_new(&ctx, m, &o, &err), WK_EINVAL);
    model_free(m);
}

/* Prefill in chunks of 5 (positions staged per chunk) then decode steps give
 * the logits of one batch over the same tokens, on the CPU device. */
static void test_staged_positions_give_the_logits_of_one_batch(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    model *m = NULL;
    wk_error err = {0};
    assert_int_equal(model_load(&m, path_join(dir, "models/tiny-qwen35-F32.gguf"), &err), 0);
    const int32_t n = 24;
    int32_t tok[24];
    for (int32_t i = 0; i < n; i++) tok[i] = 3 + (i * 37) % 200;
    float *ref = NULL;
    const size_t V = m->hp.n_vocab;
    for (int pass = 0; pass < 2; pass++) {
        eng_options o;
        eng_options_default(&o);
        o.n_threads = 2;
        o.n_ctx = 64;
        o.n_ubatch = pass == 0 ? n : 5;
        eng_ctx *ctx = NULL;
        eng_seq *seq = NULL;
        assert_int_equal(eng_ctx_new(&ctx, m, &o, &err), 0);
        assert_int_equal(eng_seq_new(&seq, ctx, 0, &err), 0);
        if (pass == 0) {
            assert_int_equal(eng_prefill(ctx, seq, tok, n, NULL, &err), 0);
            ref = malloc(V * sizeof(float));
            assert_non_null(ref);
            memcpy(ref, eng_logits(ctx), V * sizeof(float));
        } else {
            assert_int_equal(eng_prefill(ctx, seq, tok, n - 3, NULL, &err), 0);
            for (int32_t i = n - 3; i < n; i++) assert_int_equal(eng_decode(ctx, seq, tok[i], &err), 0);
            assert_int_equal(eng_seq_pos(seq), n);
            const float *l = eng_logits(ctx);
            for (size_t v = 0; v < V; v++) assert_true(fabsf(l[v] - ref[v]) <= 1e-3f * (1.0f + fabsf(ref[v])));
        }
        eng_seq_free(seq);
        eng_ctx_free(ctx);
    }
    free(ref);
    model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_parse_accepts_cpu_and_cuda_names),
        cmocka_unit_test(test_device_parse_rejects_unknown_names),
        cmocka_unit_test(test_cuda_context_is_refused_or_made),
        cmocka_unit_test(test_staged_positions_give_the_logits_of_one_batch),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
