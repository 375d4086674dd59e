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
    eng_split_opts split = {0};
    assert_int_equal(eng_device_parse("cpu", &dev, &gpu, &split, &err), 0);
    assert_int_equal(dev, ENG_DEVICE_CPU);
    assert_int_equal(gpu, 0);
    assert_int_equal(split.n, 1);
    const char *names[] = {"cuda", "cuda:0", "cuda:3", "cuda:1,0", "cuda:0,0", "cuda:0,1,2,3,4,5,6,7"};
    const int32_t first[] = {0, 0, 3, 1, 0, 0}, count[] = {1, 1, 1, 2, 2, 8}, second[] = {-1, -1, -1, 0, 0, 1};
    for (int i = 0; i < 6; i++) {
        dev = gpu = -1;
        split = (eng_split_opts){.gpu_mem = 7};
        int rc = eng_device_parse(names[i], &dev, &gpu, &split, &err);
        if (eng_have_cuda()) {
            assert_int_equal(rc, 0);
            assert_int_equal(dev, ENG_DEVICE_CUDA);
            assert_int_equal(gpu, first[i]);
            assert_int_equal(split.n, count[i]);
            assert_int_equal(split.gpus[0], first[i]);
            if (count[i] > 1) assert_int_equal(split.gpus[1], second[i]);
            assert_int_equal(split.gpu_mem, 7); /* the other fields are kept */
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
    const char *bad[] = {"gpu", "", "cudax", "cuda:", "cuda:-1", "cuda:1x", "CPU0", "cuda:0,", "cuda:,1",
                         "cuda:0,,1", "cuda:0,-1", "cuda:0,1,2,3,4,5,6,7,8", "cuda:+1", "cpu,cpu"};
    eng_split_opts split = {0};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        wk_error err = {0};
        int32_t dev = 0, gpu = 0;
        assert_int_equal(eng_device_parse(bad[i], &dev, &gpu, &split, &err), WK_EINVAL);
        assert_non_null(strstr(err.msg, "--device"));
    }
    wk_error err = {0};
    int32_t dev = 0, gpu = 0;
    assert_int_equal(eng_device_parse(NULL, &dev, &gpu, &split, &err), WK_EINVAL);
}

static void test_split_parse_and_tensor_refusal(void **state)
{
    (void)state;
    wk_error err = {0};
    eng_split_opts split = {0};
    assert_int_equal(eng_split_parse("tensor", &split, &err), 0);
    assert_int_equal(split.mode, ENG_SPLIT_TENSOR);
    assert_int_equal(eng_split_parse("layer", &split, &err), 0);
    assert_int_equal(split.mode, ENG_SPLIT_LAYER);
    assert_int_equal(eng_split_parse("rows", &split, &err), WK_EINVAL);
    assert_non_null(strstr(err.msg, "rows"));
    assert_int_equal(eng_split_check(ENG_DEVICE_CUDA, &split, &err), 0);
    split.mode = ENG_SPLIT_TENSOR;
    split.n = 2;
    assert_int_equal(eng_split_check(ENG_DEVICE_CUDA, &split, &err), WK_EUNSUPPORTED);
    /* the reason says what this build lacks, or that the code does not exist yet */
    assert_non_null(strstr(err.msg, eng_have_nccl() ? "not implemented" : "without NCCL"));
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
        cmocka_unit_test(test_split_parse_and_tensor_refusal),
        cmocka_unit_test(test_cuda_context_is_refused_or_made),
        cmocka_unit_test(test_staged_positions_give_the_logits_of_one_batch),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
