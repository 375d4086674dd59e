#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/bench.h"
#include "engine/context.h"
#include "engine/sequence.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/synth.h"
#include "model/synth_vocab.h"
#include "quant/quant.h"
#include "quant/qtypes.h"
#include "util/os.h"
#include "testutil.h"

static char g_tmpdir[256];

static int setup_tmp(void **state)
{
    (void)state;
    snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/wick_test_synth_XXXXXX");
    return mkdtemp(g_tmpdir) ? 0 : -1;
}

static int teardown_tmp(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *tmp_path(const char *name)
{
    static char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", g_tmpdir, name);
    return buf;
}

static synth_options opts_for(const char *preset, const char *type)
{
    synth_options o;
    wk_error err = {0};
    assert_int_equal(synth_options_init(&o, preset, &err), 0);
    if (type) assert_int_equal(qt_mix_parse(type, &o.quant, &err), 0);
    o.n_threads = 2;
    return o;
}

static const synth_tensor *plan_find(const synth_plan *p, const char *name)
{
    for (size_t i = 0; i < p->n_tensors; i++)
        if (strcmp(p->tensors[i].name, name) == 0) return &p->tensors[i];
    return NULL;
}

/* ---- presets ---- */

static void test_presets_have_the_documented_dimensions(void **state)
{
    (void)state;
    const synth_preset *p = synth_preset_find("qwen3-0.6b");
    assert_non_null(p);
    assert_int_equal(p->dims.arch, SYNTH_ARCH_QWEN3);
    assert_int_equal(p->dims.n_layer, 28);
    assert_int_equal(p->dims.n_embd, 1024);
    assert_int_equal(p->dims.n_ff, 3072);
    assert_int_equal(p->dims.n_head, 16);
    assert_int_equal(p->dims.n_head_kv, 8);
    assert_int_equal(p->dims.head_dim, 128);
    assert_int_equal(p->dims.n_vocab, 151936);
    assert_true(p->dims.tied_embeddings);

    p = synth_preset_find("qwen3-32b");
    assert_non_null(p);
    assert_int_equal(p->dims.n_layer, 64);
    assert_int_equal(p->dims.n_embd, 5120);
    assert_int_equal(p->dims.n_ff, 25600);
    assert_int_equal(p->dims.n_head, 64);
    assert_false(p->dims.tied_embeddings);

    p = synth_preset_find("qwen3.5-27b");
    assert_non_null(p);
    assert_int_equal(p->dims.arch, SYNTH_ARCH_QWEN35);
    assert_int_equal(p->dims.n_layer, 64);
    assert_int_equal(p->dims.n_embd, 5120);
    assert_int_equal(p->dims.n_ff, 17408);
    assert_int_equal(p->dims.n_head, 24);
    assert_int_equal(p->dims.n_head_kv, 4);
    assert_int_equal(p->dims.head_dim, 256);
    assert_int_equal(p->dims.n_rot, 64);
    assert_int_equal(p->dims.ssm_n_k_heads, 16);
    assert_int_equal(p->dims.ssm_n_v_heads, 48);
    assert_int_equal(p->dims.ssm_head_dim, 128);
    assert_int_equal(p->dims.n_vocab, 248320);

    p = synth_preset_find("qwen3.5-35b-a3b");
    assert_non_null(p);
    assert_int_equal(p->dims.arch, SYNTH_ARCH_QWEN35MOE);
    assert_int_equal(p->dims.n_layer, 40);
    assert_int_equal(p->dims.n_embd, 2048);
    assert_int_equal(p->dims.n_expert, 256);
    assert_int_equal(p->dims.n_expert_used, 8);
    assert_int_equal(p->dims.n_ff_exp, 512);
    assert_int_equal(p->dims.n_ff_shexp, 512);
    assert_int_equal(p->dims.ssm_n_v_heads, 32);

    p = synth_preset_find("qwen3.5-0.8b");
    assert_non_null(p);
    assert_int_equal(p->dims.n_layer, 24);
    assert_int_equal(p->dims.n_ff, 3584);
    assert_int_equal(p->dims.n_head, 8);
    assert_int_equal(p->dims.n_head_kv, 2);
    assert_int_equal(p->dims.ssm_n_v_heads, 16);

    const char *must[] = {"tiny", "qwen3-1.7b", "qwen3.5-2b", "llama-3.2-1b"};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++) assert_non_null(synth_preset_find(must[i]));
    assert_null(synth_preset_find("qwen9-1t"));
    synth_options o;
    wk_error err = {0};
    assert_int_equal(synth_options_init(&o, "qwen9-1t", &err), WK_ENOTFOUND);
    assert_non_null(strstr(err.msg, "qwen3-0.6b"));
}

/* Parameter count of Qwen3-0.6B computed from its dimensions by hand:
 * embeddings (tied) + 28 × (q, k, v, o, gate, up, down, 2 norms, 2 head norms) + final norm. */
static void test_qwen3_0_6b_plan_counts_every_parameter(void **state)
{
    (void)state;
    synth_options o = opts_for("qwen3-0.6b", "q8_0");
    synth_plan *p = NULL;
    wk_error err = {0};
    assert_int_equal(synth_plan_new(&o, &p, &err), 0);
    uint64_t e = 1024, v = 151936, ff = 3072, q = 16 * 128, kv = 8 * 128;
    uint64_t layer = e * q + 2 * e * kv + q * e + 3 * e * ff + 2 * e + 2 * 128;
    assert_int_equal(p->n_params, e * v + 28 * layer + e);
    assert_int_equal(p->n_tensors, 1 + 28 * 11 + 1);
    assert_null(plan_find(p, "output.weight"));
    const synth_tensor *t = plan_find(p, "blk.27.ffn_down.weight");
    assert_non_null(t);
    assert_int_equal(t->ne[0], 3072);
    assert_int_equal(t->ne[1], 1024);
    assert_int_equal(t->type, QT_Q8_0);
    assert_int_equal(plan_find(p, "blk.3.attn_q_norm.weight")->type, QT_F32);
    synth_plan_free(p);
}

/* ---- type rules ---- */

/* Compares our Q4_K_M plan for the golden tiny models' dimensions with the
 * types llama-quantize chose for them (golden MANIFEST.json), tensor by
 * tensor (names and shapes too). Vocab-sized tensors are compared by type
 * only: our vocabulary cannot be as small as the golden 260 tokens. */
static void check_against_manifest(json_t *models, const char *file, synth_options *o)
{
    json_t *model = NULL;
    size_t i;
    json_t *m;
    json_array_foreach(models, i, m)
    {
        if (strcmp(json_string_value(json_object_get(m, "file")), file) == 0) model = m;
    }
    assert_non_null(model);
    synth_plan *p = NULL;
    wk_error err = {0};
    assert_int_equal(synth_plan_new(o, &p, &err), 0);
    json_t *tensors = json_object_get(model, "tensors");
    assert_int_equal(json_array_size(tensors), p->n_tensors);
    json_t *t;
    json_array_foreach(tensors, i, t)
    {
        const char *name = json_string_value(json_object_get(t, "name"));
        const char *type = json_string_value(json_object_get(t, "type"));
        const synth_tensor *st = plan_find(p, name);
        if (!st) fail_msg("%s: tensor %s missing from our plan", file, name);
        if (strcmp(qt_type_name(st->type), type) != 0)
            fail_msg("%s: %s is %s, llama-quantize chose %s", file, name, qt_type_name(st->type), type);
        int vocab_sized = strcmp(name, "token_embd.weight") == 0 || strcmp(name, "output.weight") == 0;
        json_t *ne = json_object_get(t, "ne");
        assert_int_equal(json_array_size(ne), st->n_dims);
        for (size_t k = 0; k < st->n_dims; k++)
            if (!(vocab_sized && k == 1)) assert_int_equal(json_integer_value(json_array_get(ne, k)), st->ne[k]);
    }
    synth_plan_free(p);
}

static void test_q4_k_m_mix_matches_llama_quantize_on_golden_models(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(dir);
    json_error_t jerr;
    json_t *manifest = json_load_file(path_join(dir, "MANIFEST.json"), 0, &jerr);
    assert_non_null(manifest);
    json_t *models = json_object_get(manifest, "models");

    /* Dimensions from shared/golden/README.md. */
    synth_options o = opts_for("tiny-llama", "q4_k_m");
    o.dims = (synth_dims){.arch = SYNTH_ARCH_LLAMA, .n_layer = 2, .n_embd = 256, .n_ff = 256, .n_head = 4,
                          .n_head_kv = 1, .head_dim = 64, .n_vocab = 512, .n_ctx_train = 4096, .rope_base = 1e4f,
                          .rms_eps = 1e-5f, .tied_embeddings = true};
    check_against_manifest(models, "models/tiny-llama-Q4_K_M.gguf", &o);

    o.dims = (synth_dims){.arch = SYNTH_ARCH_QWEN3, .n_layer = 2, .n_embd = 256, .n_ff = 256, .n_head = 2,
                          .n_head_kv = 1, .head_dim = 128, .n_vocab = 512, .n_ctx_train = 4096, .rope_base = 1e6f,
                          .rms_eps = 1e-6f, .tied_embeddings = true};
    check_against_manifest(models, "models/tiny-qwen3-Q4_K_M.gguf", &o);

    o.dims.arch = SYNTH_ARCH_QWEN3MOE;
    o.dims.tied_embeddings = false;
    o.dims.n_expert = 8;
    o.dims.n_expert_used = 2;
    o.dims.n_ff_exp = 32;
    check_against_manifest(models, "models/tiny-qwen3moe-Q4_K_M.gguf", &o);

    o.dims = (synth_dims){.arch = SYNTH_ARCH_QWEN35, .n_layer = 2, .n_embd = 256, .n_ff = 256, .n_head = 2,
                          .n_head_kv = 1, .head_dim = 128, .n_rot = 32, .n_vocab = 512, .n_ctx_train = 4096,
                          .rope_base = 1e7f, .rms_eps = 1e-6f, .tied_embeddings = true, .full_attn_interval = 2,
                          .ssm_conv_kernel = 4, .ssm_head_dim = 64, .ssm_n_k_heads = 2, .ssm_n_v_heads = 4};
    check_against_manifest(models, "models/tiny-qwen35-Q4_K_M.gguf", &o);

    o.dims.arch = SYNTH_ARCH_QWEN35MOE;
    o.dims.n_expert = 8;
    o.dims.n_expert_used = 2;
    o.dims.n_ff_exp = 32;
    o.dims.n_ff_shexp = 32;
    check_against_manifest(models, "models/tiny-qwen35moe-Q4_K_M.gguf", &o);

    /* --pure Q8_0 (the golden Q8_0 files of the MoE/hybrid archs) */
    assert_int_equal(qt_mix_parse("q8_0", &o.quant, NULL), 0);
    check_against_manifest(models, "models/tiny-qwen35moe-Q8_0.gguf", &o);
    json_decref(manifest);
}

static void test_q4_k_m_uses_more_bits_on_the_documented_layers(void **state)
{
    (void)state;
    synth_options o = opts_for("qwen3-0.6b", "q4_k_m");
    synth_plan *p = NULL;
    assert_int_equal(synth_plan_new(&o, &p, NULL), 0);
    /* use_more_bits(i, 28): i < 3, i >= 24, or (i - 3) % 3 == 2 */
    for (uint32_t il = 0; il < 28; il++) {
        int more = il < 3 || il >= 24 || ((int)il - 3) % 3 == 2;
        char n[64];
        snprintf(n, sizeof n, "blk.%u.ffn_down.weight", il);
        assert_int_equal(plan_find(p, n)->type, more ? QT_Q6_K : QT_Q4_K);
        snprintf(n, sizeof n, "blk.%u.attn_v.weight", il);
        assert_int_equal(plan_find(p, n)->type, more ? QT_Q6_K : QT_Q4_K);
        snprintf(n, sizeof n, "blk.%u.attn_q.weight", il);
        assert_int_equal(plan_find(p, n)->type, QT_Q4_K);
    }
    assert_int_equal(plan_find(p, "token_embd.weight")->type, QT_Q6_K); /* tied: the output rule */
    synth_plan_free(p);

    /* untied: output Q6_K, token_embd base */
    o = opts_for("qwen3-32b", "q4_k_m");
    assert_int_equal(synth_plan_new(&o, &p, NULL), 0);
    assert_int_equal(plan_find(p, "output.weight")->type, QT_Q6_K);
    assert_int_equal(plan_find(p, "token_embd.weight")->type, QT_Q4_K);
    synth_plan_free(p);

    /* expert mix: gate/up experts Q4_K, down experts Q8_0; dense parts as Q4_K_M */
    o = opts_for("qwen3.5-35b-a3b", "q4_k_e8");
    assert_int_equal(synth_plan_new(&o, &p, NULL), 0);
    assert_int_equal(plan_find(p, "blk.5.ffn_gate_exps.weight")->type, QT_Q4_K);
    assert_int_equal(plan_find(p, "blk.5.ffn_up_exps.weight")->type, QT_Q4_K);
    assert_int_equal(plan_find(p, "blk.5.ffn_down_exps.weight")->type, QT_Q8_0);
    assert_int_equal(plan_find(p, "blk.5.ffn_gate_inp.weight")->type, QT_F32);
    assert_int_equal(plan_find(p, "blk.5.ssm_conv1d.weight")->type, QT_F32);
    assert_int_equal(plan_find(p, "blk.5.ssm_a")->type, QT_F32);
    assert_int_equal(plan_find(p, "output.weight")->type, QT_Q6_K);
    assert_int_equal(plan_find(p, "blk.3.attn_q.weight")->ne[1], 2 * 16 * 256); /* query + gate */
    assert_null(plan_find(p, "blk.3.attn_qkv.weight"));                     /* layer 3: full attention */
    assert_non_null(plan_find(p, "blk.4.attn_qkv.weight"));
    assert_int_equal(plan_find(p, "blk.4.attn_qkv.weight")->ne[1], 2 * 16 * 128 + 32 * 128);
    synth_plan_free(p);
}

static void test_shape_fallbacks_follow_llama_quantize(void **state)
{
    (void)state;
    synth_options o = opts_for("tiny", "q4_k");
    o.dims.n_ff = 96; /* ffn_down rows of 96: not a multiple of 256 (Q4_K → Q5_0), a multiple of 32 */
    synth_plan *p = NULL;
    assert_int_equal(synth_plan_new(&o, &p, NULL), 0);
    assert_int_equal(plan_find(p, "blk.0.ffn_down.weight")->type, QT_Q5_0);
    assert_int_equal(plan_find(p, "blk.0.ffn_up.weight")->type, QT_Q4_K);
    synth_plan_free(p);
    o.dims.n_ff = 40; /* not even a multiple of 32 → F16 */
    assert_int_equal(synth_plan_new(&o, &p, NULL), 0);
    assert_int_equal(plan_find(p, "blk.0.ffn_down.weight")->type, QT_F16);
    synth_plan_free(p);
}

static void test_validate_rejects_inconsistent_dimensions(void **state)
{
    (void)state;
    wk_error err = {0};
    synth_options o = opts_for("tiny", NULL);
    o.dims.n_head_kv = 3;
    assert_int_equal(synth_validate(&o, &err), WK_EINVAL);
    assert_non_null(strstr(err.msg, "--kv-heads"));
    o = opts_for("tiny", NULL);
    o.dims.n_vocab = 100;
    assert_int_equal(synth_validate(&o, &err), WK_EINVAL);
    assert_non_null(strstr(err.msg, "--vocab"));
    o = opts_for("tiny-qwen35", NULL);
    o.dims.ssm_n_v_heads = 3;
    assert_int_equal(synth_validate(&o, &err), WK_EINVAL);
    o = opts_for("tiny-qwen3moe", NULL);
    o.dims.n_expert_used = 9;
    assert_int_equal(synth_validate(&o, &err), WK_EINVAL);
    o = opts_for("tiny", NULL);
    o.dims.n_layer = 0;
    assert_int_equal(synth_validate(&o, &err), WK_EINVAL);
    qt_mix_spec q;
    assert_int_equal(qt_mix_parse("q8_k", &q, &err), WK_EINVAL); /* activation-only type */
    assert_int_equal(qt_mix_parse("q9_x", &q, &err), WK_EINVAL);
    assert_int_equal(qt_mix_parse("Q4_K_M", &q, &err), 0);
    assert_int_equal(q.mix, QT_MIX_Q4_K_M);
}

/* ---- vocabulary ---- */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void test_vocab_is_a_consistent_byte_level_bpe(void **state)
{
    (void)state;
    synth_vocab v;
    wk_error err = {0};
    assert_int_equal(synth_vocab_build(&v, 151936, &err), 0);
    assert_int_equal(v.n_tokens, 151936);
    assert_string_equal(v.tokens[151643], "<|endoftext|>");
    assert_string_equal(v.tokens[151644], "<|im_start|>");
    assert_string_equal(v.tokens[151645], "<|im_end|>");
    assert_string_equal(v.tokens[151667], "<think>");
    assert_string_equal(v.tokens[151668], "</think>");
    assert_int_equal(v.types[151644], SYNTH_TOK_CONTROL);
    assert_int_equal(v.types[151667], SYNTH_TOK_USER_DEFINED);
    assert_int_equal(v.im_end_id, 151645);
    assert_string_equal(v.tokens[' '], "\xc4\xa0"); /* space → U+0120 'Ġ' */
    assert_string_equal(v.tokens['\n'], "\xc4\x8a"); /* newline → U+010A 'Ċ' */
    assert_string_equal(v.tokens['A'], "A");
    assert_true(v.n_merges > 300);

    /* unique texts (llama.cpp requires it) */
    char **sorted = malloc(v.n_tokens * sizeof *sorted);
    memcpy(sorted, v.tokens, v.n_tokens * sizeof *sorted);
    qsort(sorted, v.n_tokens, sizeof *sorted, cmp_str);
    for (uint32_t i = 1; i < v.n_tokens; i++)
        if (strcmp(sorted[i - 1], sorted[i]) == 0) fail_msg("duplicate token text %s", sorted[i]);
    /* every merge joins two tokens into a token */
    for (uint32_t m = 0; m < v.n_merges; m++) {
        char left[256], right[256], joined[512];
        const char *sp = strchr(v.merges[m] + 1, ' ');
        assert_non_null(sp);
        snprintf(left, sizeof left, "%.*s", (int)(sp - v.merges[m]), v.merges[m]);
        snprintf(right, sizeof right, "%s", sp + 1);
        snprintf(joined, sizeof joined, "%s%s", left, right);
        const char *keys[3] = {left, right, joined};
        for (int k = 0; k < 3; k++) {
            const char *key = keys[k];
            if (!bsearch(&key, sorted, v.n_tokens, sizeof *sorted, cmp_str))
                fail_msg("merge '%s': '%s' is not a token", v.merges[m], key);
        }
    }
    free(sorted);
    synth_vocab_free(&v);

    assert_int_equal(synth_vocab_build(&v, 400, &err), 0); /* small: specials right after the merges */
    assert_int_equal(v.n_tokens, 400);
    assert_string_equal(v.tokens[v.im_start_id], "<|im_start|>");
    assert_true(v.im_start_id < 400 - 24);
    synth_vocab_free(&v);
    assert_int_equal(synth_vocab_build(&v, 200, &err), WK_EINVAL);
}

/* ---- writing ---- */

static void test_written_file_reopens_with_planned_tensors_and_metadata(void **state)
{
    (void)state;
    const char *presets[] = {"tiny", "tiny-qwen35moe", "tiny-llama"};
    const char *types[] = {"q4_k_m", "q4_k_e8", "f16"};
    for (int k = 0; k < 3; k++) {
        synth_options o = opts_for(presets[k], types[k]);
        const char *path = tmp_path("w.gguf");
        wk_error err = {0};
        int rc = synth_write(&o, path, NULL, NULL, &err);
        if (rc) fail_msg("synth_write: %s", err.msg);
        synth_plan *p = NULL;
        assert_int_equal(synth_plan_new(&o, &p, &err), 0);
        gguf_file *f = NULL;
        rc = gguf_open(&f, path, &err);
        if (rc) fail_msg("gguf_open: %s", err.msg);
        assert_int_equal(gguf_tensor_count(f), p->n_tensors);
        uint64_t expect_off = 0;
        for (size_t i = 0; i < p->n_tensors; i++) {
            const synth_tensor *st = &p->tensors[i];
            const gguf_tensor *t = gguf_find_tensor(f, st->name);
            if (!t) fail_msg("%s: tensor %s missing", presets[k], st->name);
            assert_int_equal(t->type, st->type);
            assert_int_equal(t->n_dims, st->n_dims);
            for (uint32_t d = 0; d < st->n_dims; d++) assert_int_equal(t->ne[d], st->ne[d]);
            assert_int_equal(t->n_bytes, st->n_bytes);
            /* streamed in plan order, densely packed up to the alignment */
            assert_int_equal(t->offset, expect_off);
            expect_off += (st->n_bytes + p->alignment - 1) / p->alignment * p->alignment;
        }
        assert_int_equal(expect_off, p->data_bytes);
        struct stat sb;
        assert_int_equal(stat(path, &sb), 0);
        uint64_t header = (uint64_t)sb.st_size - p->data_bytes;
        assert_true((uint64_t)sb.st_size > p->data_bytes);
        assert_int_equal(header % p->alignment, 0);
        assert_int_equal(gguf_file_size(f), (size_t)sb.st_size);

        gguf_str s;
        assert_int_equal(gguf_get_str(f, "general.architecture", &s, &err), 0);
        assert_int_equal(s.len, strlen(synth_arch_name(o.dims.arch)));
        assert_memory_equal(s.ptr, synth_arch_name(o.dims.arch), s.len);
        char key[96];
        snprintf(key, sizeof key, "%s.block_count", synth_arch_name(o.dims.arch));
        uint64_t u;
        assert_int_equal(gguf_get_u64(f, key, &u, &err), 0);
        assert_int_equal(u, o.dims.n_layer);
        const gguf_kv *toks = gguf_find_kv(f, "tokenizer.ggml.tokens");
        assert_non_null(toks);
        assert_int_equal(toks->arr_count, o.dims.n_vocab);
        assert_int_equal(gguf_find_kv(f, "tokenizer.ggml.token_type")->arr_count, o.dims.n_vocab);
        assert_int_equal(gguf_get_str(f, "tokenizer.ggml.pre", &s, &err), 0);
        assert_memory_equal(s.ptr, "qwen2", 5);
        assert_int_equal(gguf_get_str(f, "tokenizer.chat_template", &s, &err), 0);
        char *tmpl = strndup(s.ptr, s.len);
        assert_non_null(strstr(tmpl, "<|im_start|>"));
        assert_non_null(strstr(tmpl, "enable_thinking"));
        free(tmpl);
        assert_int_equal(gguf_get_u64(f, "tokenizer.ggml.eos_token_id", &u, &err), 0);
        gguf_str eos = gguf_arr_str(toks, u);
        assert_int_equal(eos.len, strlen("<|im_end|>"));
        assert_memory_equal(eos.ptr, "<|im_end|>", eos.len);
        gguf_close(f);
        synth_plan_free(p);
    }
}

static int hash_file(const char *path, uint64_t *h)
{
    size_t n;
    unsigned char *b = read_whole_file(path, &n);
    if (!b) return -1;
    uint64_t x = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) x = (x ^ b[i]) * 1099511628211ull;
    free(b);
    *h = x;
    return 0;
}

static void test_bytes_depend_on_seed_not_on_thread_count(void **state)
{
    (void)state;
    synth_options o = opts_for("tiny-qwen35", "q4_k_m");
    wk_error err = {0};
    uint64_t h1, h3, hs;
    o.n_threads = 1;
    assert_int_equal(synth_write(&o, tmp_path("t1.gguf"), NULL, NULL, &err), 0);
    o.n_threads = 3;
    assert_int_equal(synth_write(&o, tmp_path("t3.gguf"), NULL, NULL, &err), 0);
    o.seed = 2;
    assert_int_equal(synth_write(&o, tmp_path("s2.gguf"), NULL, NULL, &err), 0);
    assert_int_equal(hash_file(tmp_path("t1.gguf"), &h1), 0);
    assert_int_equal(hash_file(tmp_path("t3.gguf"), &h3), 0);
    assert_int_equal(hash_file(tmp_path("s2.gguf"), &hs), 0);
    assert_true(h1 == h3);
    assert_true(h1 != hs);
}

static double tensor_stat(const gguf_tensor *t, double *mean, double *min, double *max)
{
    int64_t n = (int64_t)t->n_elements;
    float *v = malloc((size_t)n * sizeof *v);
    assert_int_equal(qt_dequantize_row((enum qt_type)t->type, t->data, v, n), 0);
    double s = 0, s2 = 0;
    *min = INFINITY;
    *max = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        s += v[i];
        s2 += (double)v[i] * v[i];
        if (v[i] < *min) *min = v[i];
        if (v[i] > *max) *max = v[i];
    }
    free(v);
    *mean = s / (double)n;
    return sqrt(s2 / (double)n - *mean * *mean);
}

static void test_weights_have_the_intended_scales(void **state)
{
    (void)state;
    synth_options o = opts_for("tiny-qwen35", "f32");
    o.dims.tied_embeddings = false;
    wk_error err = {0};
    const char *path = tmp_path("scale.gguf");
    assert_int_equal(synth_write(&o, path, NULL, NULL, &err), 0);
    gguf_file *f = NULL;
    assert_int_equal(gguf_open(&f, path, &err), 0);
    double mean, mn, mx, sd;
    sd = tensor_stat(gguf_find_tensor(f, "blk.1.ffn_down.weight"), &mean, &mn, &mx); /* fan_in 512 */
    assert_true(fabs(sd * sqrt(512.0) - 1.0) < 0.02);
    assert_true(fabs(mean) < 0.01);
    sd = tensor_stat(gguf_find_tensor(f, "token_embd.weight"), &mean, &mn, &mx);
    assert_true(fabs(sd - 2.0 / 16.0) < 0.005);
    sd = tensor_stat(gguf_find_tensor(f, "blk.0.attn_norm.weight"), &mean, &mn, &mx);
    assert_true(fabs(mean - 1.0) < 0.03);
    assert_true(sd > 0.07 && sd < 0.13);
    tensor_stat(gguf_find_tensor(f, "blk.0.ssm_a"), &mean, &mn, &mx);
    assert_true(mx < 0 && mn >= -2.0001 && mx <= -0.0199);
    tensor_stat(gguf_find_tensor(f, "blk.0.ssm_dt.bias"), &mean, &mn, &mx);
    assert_true(mn >= -1.0 && mx <= 1.0);
    gguf_close(f);

    /* quantized tensors (assembled from block pools) keep the scale */
    o = opts_for("tiny-qwen35", "q4_k_m");
    assert_int_equal(synth_write(&o, path, NULL, NULL, &err), 0);
    assert_int_equal(gguf_open(&f, path, &err), 0);
    const gguf_tensor *dn = gguf_find_tensor(f, "blk.3.ffn_down.weight"); /* last layer: more bits */
    assert_int_equal(dn->type, QT_Q6_K);
    sd = tensor_stat(dn, &mean, &mn, &mx);
    assert_true(fabs(sd * sqrt(512.0) - 1.0) < 0.05);
    assert_true(fabs(mean) < 0.01);
    sd = tensor_stat(gguf_find_tensor(f, "blk.0.ffn_up.weight"), &mean, &mn, &mx); /* Q4_K, fan_in 256 */
    assert_true(fabs(sd * 16.0 - 1.0) < 0.05);
    gguf_close(f);

    /* Llama 3 rope factors: 1 for high frequencies, 32 for the lowest */
    o = opts_for("tiny-llama", "q8_0");
    assert_int_equal(synth_write(&o, path, NULL, NULL, &err), 0);
    assert_int_equal(gguf_open(&f, path, &err), 0);
    const gguf_tensor *rf = gguf_find_tensor(f, "rope_freqs.weight");
    assert_non_null(rf);
    assert_int_equal(rf->ne[0], 32);
    const float *fac = rf->data;
    assert_true(fac[0] == 1.0f);
    assert_true(fac[31] == 32.0f);
    for (int i = 1; i < 32; i++) assert_true(fac[i] >= fac[i - 1]);
    gguf_close(f);
}

static int cancel_after_first(void *ctx, uint64_t done, uint64_t total)
{
    (void)total;
    int *calls = ctx;
    (*calls)++;
    return done > 0;
}

static void test_cancel_removes_the_partial_file(void **state)
{
    (void)state;
    synth_options o = opts_for("tiny", "q8_0");
    wk_error err = {0};
    int calls = 0;
    const char *path = tmp_path("cancel.gguf");
    assert_int_equal(synth_write(&o, path, cancel_after_first, &calls, &err), WK_ECANCELLED);
    assert_int_equal(calls, 1);
    assert_int_equal(access(path, F_OK), -1);
}

/* A file much larger than the slab must not need memory in proportion:
 * peak RSS grows by far less than the file size. */
static void test_writing_streams_with_bounded_memory(void **state)
{
    (void)state;
    synth_options o = opts_for("tiny", "f32");
    o.dims.n_embd = 1024;
    o.dims.n_ff = 4096;
    o.dims.n_head = 8;
    o.dims.n_head_kv = 8;
    o.dims.head_dim = 128;
    o.dims.n_layer = 4; /* 4 × 16.8M params × 4 bytes ≈ 270 MB of F32 */
    wk_error err = {0};
    synth_plan *p = NULL;
    assert_int_equal(synth_plan_new(&o, &p, &err), 0);
    uint64_t bytes = p->data_bytes;
    synth_plan_free(p);
    assert_true(bytes > (250ull << 20));
    const uint64_t rss0 = wk_peak_rss_bytes();
    const char *path = tmp_path("big.gguf");
    assert_int_equal(synth_write(&o, path, NULL, NULL, &err), 0);
    uint64_t grew = wk_peak_rss_bytes() - rss0;
    if (grew > bytes / 4) fail_msg("peak RSS grew by %llu bytes writing a %llu-byte file", (unsigned long long)grew,
                                   (unsigned long long)bytes);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_true((uint64_t)sb.st_size > bytes);
    unlink(path);
}

/* ---- running the models ---- */

/* Writes the model, runs a prompt and a few decode steps through the engine
 * and checks every logit is finite and the logits are not degenerate. */
static void run_and_check_logits(const synth_options *o, const char *what)
{
    wk_error err = {0};
    const char *path = tmp_path("run.gguf");
    if (synth_write(o, path, NULL, NULL, &err)) fail_msg("%s: synth_write: %s", what, err.msg);
    model *m = NULL;
    if (model_load(&m, path, &err)) fail_msg("%s: model_load: %s", what, err.msg);
    eng_options eo;
    eng_options_default(&eo);
    eo.n_threads = 1; /* spinning workers crawl on a loaded CI machine */
    eo.n_ctx = 64;
    eng_ctx *ctx = NULL;
    if (eng_ctx_new(&ctx, m, &eo, &err)) fail_msg("%s: eng_ctx_new: %s", what, err.msg);
    eng_seq *seq = NULL;
    assert_int_equal(eng_seq_new(&seq, ctx, 64, &err), 0);
    int32_t n_vocab = eng_n_vocab(ctx), tokens[12];
    for (int i = 0; i < 12; i++) tokens[i] = 3 + (i * 7919) % (n_vocab - 3);
    if (eng_prefill(ctx, seq, tokens, 12, NULL, &err)) fail_msg("%s: prefill: %s", what, err.msg);
    for (int step = 0; step < 3; step++) {
        const float *l = eng_logits(ctx);
        double s = 0, s2 = 0;
        int32_t best = 0;
        for (int32_t i = 0; i < n_vocab; i++) {
            if (!isfinite(l[i])) fail_msg("%s: step %d: logit %d is %f", what, step, i, (double)l[i]);
            s += l[i];
            s2 += (double)l[i] * l[i];
            if (l[i] > l[best]) best = i;
        }
        double sd = sqrt(s2 / n_vocab - (s / n_vocab) * (s / n_vocab));
        if (!(sd > 0.1 && sd < 100.0)) fail_msg("%s: step %d: logit std %f out of range", what, step, sd);
        if (step < 2 && eng_decode(ctx, seq, best, &err)) fail_msg("%s: decode: %s", what, err.msg);
    }
    eng_seq_free(seq);
    eng_ctx_free(ctx);
    model_free(m);
    unlink(path);
}

static void test_synthetic_models_give_finite_logits(void **state)
{
    (void)state;
    const char *presets[] = {"tiny", "tiny-llama", "tiny-qwen3moe", "tiny-qwen35", "tiny-qwen35moe"};
    const char *types[] = {"q8_0", "q4_k_m"};
    for (size_t p = 0; p < sizeof presets / sizeof presets[0]; p++)
        for (size_t t = 0; t < 2; t++) {
            synth_options o = opts_for(presets[p], types[t]);
            char what[64];
            snprintf(what, sizeof what, "%s %s", presets[p], types[t]);
            run_and_check_logits(&o, what);
        }
}

/* Deep stacks: activations must stay finite through as many layers as the
 * largest presets have (64), for each layer type. */
static void test_deep_synthetic_stacks_stay_finite(void **state)
{
    (void)state;
    synth_options o = opts_for("tiny", "q8_0");
    o.dims.n_layer = 64;
    run_and_check_logits(&o, "qwen3 x64");
    o = opts_for("tiny-qwen35", "q4_k_m");
    o.dims.n_layer = 64;
    o.dims.full_attn_interval = 4;
    run_and_check_logits(&o, "qwen35 x64");
    o = opts_for("tiny-qwen35moe", "q4_k_e8");
    o.dims.n_layer = 40;
    o.dims.full_attn_interval = 4;
    run_and_check_logits(&o, "qwen35moe x40");
}

/* The real presets at full size (slow under sanitizers): only with
 * WICK_SYNTH_FULL=1, as the ctest entry test_synth_full_presets, which is
 * disabled by default (ctest lists it as "Disabled", never as passed). */
static void test_full_size_presets_give_finite_logits(void **state)
{
    (void)state;
    const char *presets[] = {"qwen3-0.6b", "qwen3.5-0.8b", "llama-3.2-1b"};
    for (size_t p = 0; p < sizeof presets / sizeof presets[0]; p++) {
        synth_options o = opts_for(presets[p], "q4_k_m");
        run_and_check_logits(&o, presets[p]);
    }
}

/* The benchmark's per-token costs follow from the synthetic model's shape. */
static void test_bench_costs_follow_the_model_shape(void **state)
{
    (void)state;
    synth_options o = opts_for("tiny", "q8_0");
    wk_error err = {0};
    const char *path = tmp_path("costs.gguf");
    assert_int_equal(synth_write(&o, path, NULL, NULL, &err), 0);
    model *m = NULL;
    if (model_load(&m, path, &err)) fail_msg("model_load: %s", err.msg);
    eng_bench_costs c;
    eng_bench_model_costs(m, &c);
    synth_plan *p = NULL;
    assert_int_equal(synth_plan_new(&o, &p, &err), 0);
    assert_int_equal(c.n_params, p->n_params);
    assert_int_equal(c.tensor_bytes, p->tensor_bytes);
    /* 4 layers x (q 256x256, k 256x128, v 256x128, o 256x256, 3 x 256x768) */
    double per_layer = 256.0 * 256 * 2 + 256.0 * 128 * 2 + 3 * 256.0 * 768;
    assert_true(fabs(c.matmul_params_per_token - 4 * per_layer) < 1.0);
    assert_true(fabs(c.lm_head_params - 256.0 * 1024) < 1.0);
    assert_true(fabs(c.kv_bytes_per_pos - 4 * 2 * (64 + 64) * 2.0) < 1e-9); /* F16 K+V */
    assert_true(fabs(c.attn_flops_per_pair - 2.0 * 4 * (64 + 64) * 4) < 1e-9);
    /* tied embeddings: the whole table is read per token as the LM head */
    assert_true(c.weight_bytes_per_token > (double)p->tensor_bytes * 0.99);
    synth_plan_free(p);
    model_free(m);

    int32_t a[8], b[8];
    eng_bench_tokens(a, 8, 1024, 12345);
    eng_bench_tokens(b, 8, 1024, 12345);
    assert_memory_equal(a, b, sizeof a);
    for (int i = 0; i < 8; i++) assert_true(a[i] >= 3 && a[i] < 1024);
    /* first id of the golden token sequence: s = 12345*1664525 + 1013904223 */
    uint32_t s0 = 12345u * 1664525u + 1013904223u;
    assert_int_equal(a[0], 3 + (int32_t)((s0 >> 8) % 1021u));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_presets_have_the_documented_dimensions),
        cmocka_unit_test(test_qwen3_0_6b_plan_counts_every_parameter),
        cmocka_unit_test(test_q4_k_m_mix_matches_llama_quantize_on_golden_models),
        cmocka_unit_test(test_q4_k_m_uses_more_bits_on_the_documented_layers),
        cmocka_unit_test(test_shape_fallbacks_follow_llama_quantize),
        cmocka_unit_test(test_validate_rejects_inconsistent_dimensions),
        cmocka_unit_test(test_vocab_is_a_consistent_byte_level_bpe),
        cmocka_unit_test(test_written_file_reopens_with_planned_tensors_and_metadata),
        cmocka_unit_test(test_bytes_depend_on_seed_not_on_thread_count),
        cmocka_unit_test(test_weights_have_the_intended_scales),
        cmocka_unit_test(test_cancel_removes_the_partial_file),
        cmocka_unit_test(test_writing_streams_with_bounded_memory),
        cmocka_unit_test(test_bench_costs_follow_the_model_shape),
        cmocka_unit_test(test_synthetic_models_give_finite_logits),
        cmocka_unit_test(test_deep_synthetic_stacks_stay_finite),
    };
    const struct CMUnitTest full[] = {
        cmocka_unit_test(test_full_size_presets_give_finite_logits),
    };
    if (getenv("WICK_SYNTH_FULL")) return WK_RUN_GROUP_TESTS(full, setup_tmp, teardown_tmp);
    return WK_RUN_GROUP_TESTS(tests, setup_tmp, teardown_tmp);
}
