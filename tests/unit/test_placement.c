/* Placement of layers over the devices of a layer split (engine/placement.h): the
 * balancing on synthetic layer sizes worked out by hand, the refusals, and the
 * per-device parts of a golden model adding up to the memory plan's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <string.h>

#include "engine/placement.h"
#include "model/model.h"
#include "testutil.h"

static void test_equal_layers_split_evenly(void **state)
{
    (void)state;
    uint64_t layers[8] = {5, 5, 5, 5, 5, 5, 5, 5};
    uint32_t first[ENG_MAX_SPLIT + 1];
    wk_error err = {0};
    assert_int_equal(eng_place_layers(layers, 8, NULL, NULL, 2, first, &err), 0);
    assert_int_equal(first[0], 0);
    assert_int_equal(first[1], 4);
    assert_int_equal(first[2], 8);
    assert_int_equal(eng_place_layers(layers, 8, NULL, NULL, 4, first, &err), 0);
    for (int d = 0; d <= 4; d++) assert_int_equal(first[d], 2 * d);
    assert_int_equal(eng_place_layers(layers, 8, NULL, NULL, 1, first, &err), 0);
    assert_int_equal(first[1], 8);
}

static void test_fixed_bytes_move_layers_to_the_other_device(void **state)
{
    (void)state;
    /* device 0 carries an embedding worth 3 layers: 3 + a vs 8 - a is 6 at a = 2 and at
     * a = 3; the tie goes to the earlier device holding more */
    uint64_t layers[8] = {1, 1, 1, 1, 1, 1, 1, 1}, fixed[2] = {3, 0};
    uint32_t first[ENG_MAX_SPLIT + 1];
    wk_error err = {0};
    assert_int_equal(eng_place_layers(layers, 8, fixed, NULL, 2, first, &err), 0);
    assert_int_equal(first[1], 3);
    /* a huge fixed part still leaves every device a layer */
    uint64_t huge[2] = {100, 0};
    assert_int_equal(eng_place_layers(layers, 8, huge, NULL, 2, first, &err), 0);
    assert_int_equal(first[1], 1);
}

static void test_caps_weigh_the_balance(void **state)
{
    (void)state;
    /* device 1 may hold twice as much: a / 1 vs (9 - a) / 2 meet at a = 3 */
    uint64_t layers[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, caps[2] = {10, 20};
    uint32_t first[ENG_MAX_SPLIT + 1];
    wk_error err = {0};
    assert_int_equal(eng_place_layers(layers, 9, NULL, caps, 2, first, &err), 0);
    assert_int_equal(first[1], 3);
    assert_int_equal(first[2], 9);
}

static void test_a_heavy_layer_sits_alone(void **state)
{
    (void)state;
    /* the largest load cannot be below 10: the only split reaching it puts layer 3 alone
     * on device 1, the three before it on device 0 */
    uint64_t layers[6] = {1, 1, 1, 10, 1, 1};
    uint32_t first[ENG_MAX_SPLIT + 1];
    wk_error err = {0};
    assert_int_equal(eng_place_layers(layers, 6, NULL, NULL, 3, first, &err), 0);
    assert_int_equal(first[1], 3);
    assert_int_equal(first[2], 4);
    assert_int_equal(first[3], 6);
}

static void test_impossible_splits_are_refused(void **state)
{
    (void)state;
    uint64_t layers[2] = {1, 1};
    uint32_t first[ENG_MAX_SPLIT + 2];
    wk_error err = {0};
    assert_int_equal(eng_place_layers(layers, 2, NULL, NULL, 3, first, &err), WK_EINVAL);
    assert_non_null(strstr(err.msg, "each device needs a layer"));
    assert_int_equal(eng_place_layers(layers, 2, NULL, NULL, 0, first, &err), WK_EINVAL);
    uint64_t many[16] = {0};
    assert_int_equal(eng_place_layers(many, 16, NULL, NULL, ENG_MAX_SPLIT + 1, first, &err), WK_EINVAL);
}

/* tiny-qwen35: layer 0 Gated DeltaNet, layer 1 attention (golden/README.md) */
static void test_parts_add_up_to_the_memory_plan(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    const char *names[] = {"models/tiny-qwen35-Q8_0.gguf", "models/tiny-qwen3-Q8_0.gguf"};
    for (int k = 0; k < 2; k++) {
        model *m = NULL;
        wk_error err = {0};
        assert_int_equal(model_load(&m, path_join(dir, names[k]), &err), 0);
        eng_mem_options o;
        eng_mem_options_default(&o);
        o.device = ENG_DEVICE_CUDA;
        o.n_ctx = 1024;
        o.n_parallel = 2;
        o.ckpt_bytes = 1000003; /* odd: the shares must still add up */
        eng_mem_plan plan;
        assert_int_equal(eng_mem_plan_compute(m, &o, &plan, &err), 0);
        /* one device holds the whole plan but what stays in host memory */
        eng_placement one;
        assert_int_equal(eng_placement_compute(m, &o, NULL, &one, &err), 0);
        assert_int_equal(one.n_dev, 1);
        assert_int_equal(one.dev[0].layer_first, 0);
        assert_int_equal(one.dev[0].layer_end, m->hp.n_layer);
        assert_int_equal(one.dev[0].total_bytes, plan.total_bytes - plan.ids_bytes - plan.aux_bytes);
        o.split.n = 2;
        o.split.gpus[0] = 3;
        o.split.gpus[1] = 5;
        eng_placement two;
        assert_int_equal(eng_placement_compute(m, &o, NULL, &two, &err), 0);
        assert_int_equal(two.n_dev, 2);
        assert_int_equal(two.dev[0].gpu, 3);
        assert_int_equal(two.dev[1].gpu, 5);
        assert_int_equal(two.dev[0].layer_end, 1);
        assert_int_equal(two.dev[1].layer_first, 1);
        uint64_t w = 0, kv = 0, st = 0, ck = 0;
        uint32_t na = 0, nr = 0;
        for (int d = 0; d < 2; d++) {
            w += two.dev[d].weight_bytes, kv += two.dev[d].kv_bytes, st += two.dev[d].state_bytes;
            ck += two.dev[d].ckpt_bytes, na += two.dev[d].n_attn, nr += two.dev[d].n_rec;
            assert_int_equal(two.dev[d].scratch_bytes, plan.scratch_bytes);
        }
        const gguf_tensor *embd = NULL;
        for (size_t i = 0; i < gguf_tensor_count(m->file); i++)
            if (!strcmp(gguf_tensor_at(m->file, i)->name_z, "token_embd.weight")) embd = gguf_tensor_at(m->file, i);
        assert_non_null(embd);
        assert_int_equal(w, plan.weight_bytes + (m->hp.tied_output ? embd->n_bytes : 0));
        assert_int_equal(kv, plan.kv_bytes);
        assert_int_equal(st, plan.state_bytes);
        assert_int_equal(ck, plan.ckpt_bytes);
        assert_int_equal(na, m->hp.n_attn_layers);
        assert_int_equal(nr, m->hp.n_rec_layers);
        if (k == 0) { /* the recurrent layer's state on device 0, the attention layer's KV on 1 */
            assert_int_equal(two.dev[0].n_rec, 1);
            assert_int_equal(two.dev[0].kv_bytes, 0);
            assert_int_equal(two.dev[1].state_bytes, 0);
            assert_int_equal(two.dev[1].kv_bytes, plan.kv_bytes);
        }
        char line[400];
        eng_place_dev_describe(&two.dev[1], line, sizeof line);
        assert_non_null(strstr(line, "cuda:5 layers 1-1"));
        model_free(m);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equal_layers_split_evenly),
        cmocka_unit_test(test_fixed_bytes_move_layers_to_the_other_device),
        cmocka_unit_test(test_caps_weigh_the_balance),
        cmocka_unit_test(test_a_heavy_layer_sits_alone),
        cmocka_unit_test(test_impossible_splits_are_refused),
        cmocka_unit_test(test_parts_add_up_to_the_memory_plan),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
