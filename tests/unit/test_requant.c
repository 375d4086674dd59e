/* Requantizing GGUF files (quant/requant.h) with the one mix rule
 * (quant/quant_mix.h), on the golden models:
 *  - F32 → Q4_K_M gives, tensor by tensor, the types llama-quantize chose
 *    for the golden Q4_K_M files, and values as close to the F32 weights as
 *    llama-quantize's (error ratio bounded);
 *  - tensors already of their type are copied byte for byte, norms stay F32;
 *  - --expert-type puts the expert stacks at their own type both ways;
 *  - a cancelled or failed run leaves nothing under the output name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "quant/quant.h"
#include "quant/quant_mix.h"
#include "quant/requant.h"
#include "testutil.h"

static char g_out[64];

static int setup(void **state)
{
    (void)state;
    snprintf(g_out, sizeof g_out, "/tmp/wick-requant-%ld.gguf", (long)getpid());
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(g_out);
    return 0;
}

static gguf_file *open_or_fail(const char *path)
{
    gguf_file *f = NULL;
    wk_error err = {0};
    if (gguf_open(&f, path, &err)) fail_msg("%s", err.msg);
    return f;
}

static void requant(const char *in, const char *type, int32_t expert_type, qt_requant_stats *st)
{
    qt_mix_spec spec;
    wk_error err = {0};
    assert_int_equal(qt_mix_parse_ftype(type, &spec, &err), 0);
    spec.expert_type = expert_type;
    int rc = qt_requantize_file(in, g_out, &spec, 2, NULL, NULL, st, &err);
    if (rc) fail_msg("%s", err.msg);
}

/* Sum of squared differences to the reference tensor, over all elements. */
static double sq_error(const gguf_tensor *t, const gguf_tensor *ref)
{
    const int64_t ne0 = t->ne[0], rows = (int64_t)(t->n_elements / (uint64_t)ne0);
    float *a = malloc((size_t)ne0 * sizeof(float)), *b = malloc((size_t)ne0 * sizeof(float));
    size_t ra = qt_row_bytes(qt_traits_of(t->type), ne0), rb = qt_row_bytes(qt_traits_of(ref->type), ne0);
    double e = 0;
    for (int64_t r = 0; r < rows; r++) {
        assert_int_equal(qt_dequantize_row(t->type, (const uint8_t *)t->data + r * ra, a, ne0), 0);
        assert_int_equal(qt_dequantize_row(ref->type, (const uint8_t *)ref->data + r * rb, b, ne0), 0);
        for (int64_t i = 0; i < ne0; i++) e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    }
    free(a);
    free(b);
    return e;
}

static void test_q4_k_m_matches_llama_quantize_types_and_error(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    const char *archs[] = {"llama", "qwen3", "qwen3moe", "qwen35", "qwen35moe"};
    for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
        char src[256], ref[256];
        snprintf(src, sizeof src, "%s/models/tiny-%s-F32.gguf", dir, archs[a]);
        snprintf(ref, sizeof ref, "%s/models/tiny-%s-Q4_K_M.gguf", dir, archs[a]);
        qt_requant_stats st;
        requant(src, "q4_k_m", -1, &st);
        gguf_file *ours = open_or_fail(g_out), *theirs = open_or_fail(ref), *f32 = open_or_fail(src);
        assert_int_equal(gguf_tensor_count(ours), gguf_tensor_count(theirs));
        double e_ours = 0, e_theirs = 0;
        for (size_t i = 0; i < gguf_tensor_count(ours); i++) {
            const gguf_tensor *t = gguf_tensor_at(ours, i);
            const gguf_tensor *r = gguf_find_tensor(theirs, t->name_z), *x = gguf_find_tensor(f32, t->name_z);
            assert_non_null(r);
            if (t->type != r->type)
                fail_msg("tiny-%s %s: ours %s, llama-quantize %s", archs[a], t->name_z, qt_type_name(t->type),
                         qt_type_name(r->type));
            if (t->type == 0) {
                assert_memory_equal(t->data, x->data, t->n_bytes); /* kept F32: copied */
                continue;
            }
            e_ours += sq_error(t, x);
            e_theirs += sq_error(r, x);
        }
        /* our quantizers fit without an importance matrix like llama-quantize's: same ballpark */
        double ratio = sqrt(e_ours / e_theirs);
        printf("tiny-%s Q4_K_M: RMS error vs F32, ours / llama-quantize = %.3f\n", archs[a], ratio);
        assert_true(ratio < 1.25);
        uint64_t v = 0;
        wk_error err = {0};
        assert_int_equal(gguf_get_u64(ours, "general.file_type", &v, &err), 0);
        assert_int_equal(v, 15);
        assert_int_equal(st.n_tensors, gguf_tensor_count(ours));
        gguf_close(ours);
        gguf_close(theirs);
        gguf_close(f32);
    }
}

static void test_same_type_tensors_are_copied_and_upcasts_counted(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    char src[256];
    snprintf(src, sizeof src, "%s/models/tiny-qwen3-Q8_0.gguf", dir);
    qt_requant_stats st;
    requant(src, "q8_0", -1, &st);
    assert_int_equal(st.n_quantized, 0);
    assert_int_equal(st.n_upcast, 0);
    assert_int_equal(st.in_bytes, st.out_bytes);
    gguf_file *a = open_or_fail(src), *b = open_or_fail(g_out);
    for (size_t i = 0; i < gguf_tensor_count(a); i++)
        assert_memory_equal(gguf_tensor_at(a, i)->data, gguf_tensor_at(b, i)->data, gguf_tensor_at(a, i)->n_bytes);
    /* the metadata came along (the vocabulary, the architecture) */
    assert_int_equal(gguf_kv_count(a), gguf_kv_count(b));
    gguf_close(a);
    gguf_close(b);
    /* Q4_0 → Q8_0: every quantized tensor gains bits it cannot fill */
    snprintf(src, sizeof src, "%s/models/tiny-qwen3-Q4_0.gguf", dir);
    requant(src, "q8_0", -1, &st);
    assert_int_equal(st.n_upcast, st.n_quantized);
    assert_true(st.n_upcast > 0);
}

static void test_expert_stacks_take_their_own_type(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    char src[256];
    snprintf(src, sizeof src, "%s/models/tiny-qwen35moe-F32.gguf", dir);
    /* 8-bit experts with a 4-bit mix elsewhere, then the reverse */
    struct { const char *type; int32_t expert; uint32_t attn_q; } cases[] = {
        {"q4_k_m", 8 /* Q8_0 */, 12 /* Q4_K */}, {"q8_0", 12 /* Q4_K */, 8 /* Q8_0 */}};
    for (int c = 0; c < 2; c++) {
        qt_requant_stats st;
        requant(src, cases[c].type, cases[c].expert, &st);
        gguf_file *f = open_or_fail(g_out);
        int experts = 0;
        for (size_t i = 0; i < gguf_tensor_count(f); i++) {
            const gguf_tensor *t = gguf_tensor_at(f, i);
            if (strstr(t->name_z, "_exps.")) {
                /* expert down projections have 32-wide rows: Q4_K falls back like llama-quantize */
                uint32_t want = (uint32_t)cases[c].expert;
                if (t->ne[0] % 256 && want == 12) want = 6; /* Q5_0 */
                assert_int_equal(t->type, want);
                experts++;
            }
            if (strstr(t->name_z, "attn_q.weight")) assert_int_equal(t->type, cases[c].attn_q);
            if (strstr(t->name_z, "ffn_gate_inp")) assert_int_equal(t->type, 0); /* routers stay F32 */
        }
        assert_int_equal(experts, 6); /* 2 layers x gate, up, down */
        gguf_close(f);
    }
}

static int cancel_at_half(void *user, uint64_t done, uint64_t total)
{
    (void)user;
    return done * 2 >= total;
}

static void test_failures_leave_nothing_behind(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    char src[256];
    snprintf(src, sizeof src, "%s/models/tiny-llama-F32.gguf", dir);
    unlink(g_out);
    qt_mix_spec spec;
    wk_error err = {0};
    assert_int_equal(qt_mix_parse("q4_k", &spec, &err), 0);
    assert_int_equal(qt_requantize_file(src, g_out, &spec, 2, cancel_at_half, NULL, NULL, &err), WK_ECANCELLED);
    assert_int_equal(access(g_out, F_OK), -1);
    char tmp[80];
    snprintf(tmp, sizeof tmp, "%s.tmp", g_out);
    assert_int_equal(access(tmp, F_OK), -1);
    /* the output may not be the input */
    assert_int_equal(qt_requantize_file(src, src, &spec, 2, NULL, NULL, NULL, &err), WK_EINVAL);
    assert_non_null(strstr(err.msg, "replace the input"));
    /* not a GGUF */
    assert_int_equal(qt_requantize_file("/etc/hostname", g_out, &spec, 2, NULL, NULL, NULL, &err), WK_EFORMAT);
    assert_int_equal(access(g_out, F_OK), -1);
    /* a type that cannot be a weight, and an unknown name */
    assert_int_equal(qt_mix_parse("q8_k", &spec, &err), WK_EINVAL);
    assert_int_equal(qt_mix_parse_ftype("q7_k_m", &spec, &err), WK_EINVAL);
    assert_non_null(strstr(err.msg, "q4_k_m"));
}

static void test_mix_names_and_file_types(void **state)
{
    (void)state;
    qt_mix_spec s;
    char name[64];
    assert_int_equal(qt_mix_parse_ftype("Q6_K", &s, NULL), 0);
    assert_int_equal(s.mix, QT_MIX_Q6_K);
    assert_int_equal(qt_mix_file_type(&s), 18);
    assert_int_equal(qt_mix_parse("q6_k", &s, NULL), 0); /* synth reading: pure */
    assert_int_equal(s.mix, QT_MIX_PURE);
    assert_int_equal(qt_mix_parse("q4_k_m", &s, NULL), 0);
    s.expert_type = 8;
    qt_mix_name(&s, name, sizeof name);
    assert_string_equal(name, "Q4_K_M+experts Q8_0");
    assert_int_equal(qt_mix_layer_of("blk.17.attn_q.weight"), 17);
    assert_int_equal(qt_mix_layer_of("token_embd.weight"), -1);
    assert_int_equal(qt_mix_layer_of("blk.x.attn"), -1);
    assert_false(qt_mix_quantizable("blk.0.attn_norm.weight", 1));
    assert_false(qt_mix_quantizable("blk.0.ffn_gate_inp.weight", 2));
    assert_false(qt_mix_quantizable("blk.0.ssm_conv1d.weight", 2));
    assert_false(qt_mix_quantizable("blk.0.ssm_a", 2));
    assert_true(qt_mix_quantizable("blk.0.ssm_out.weight", 2));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q4_k_m_matches_llama_quantize_types_and_error),
        cmocka_unit_test(test_same_type_tensors_are_copied_and_upcasts_counted),
        cmocka_unit_test(test_expert_stacks_take_their_own_type),
        cmocka_unit_test(test_failures_leave_nothing_behind),
        cmocka_unit_test(test_mix_names_and_file_types),
    };
    return WK_RUN_GROUP_TESTS(tests, setup, teardown);
}
