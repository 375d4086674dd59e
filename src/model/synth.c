/* Synthetic model packs: presets, options, metadata, and the streaming
 * writer (tensor list and type rules: synth_plan.c; vocabulary:
 * synth_vocab.c). */
#include "model/synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gguf/gguf.h"
#include "model/synth_vocab.h"
#include "quant/quant.h"
#include "quant/qtypes.h"
#include "util/threadpool.h"

/* ---- presets ----------------------------------------------------------- */

#define QWEN3_CTX 40960u   /* Qwen3 max_position_embeddings */
#define QWEN35_CTX 262144u /* Qwen3.5 native context */

static const synth_preset k_presets[] = {
    {"tiny", "4-layer qwen3 for tests and the server demo (256 wide, vocab 1024)",
     {.arch = SYNTH_ARCH_QWEN3, .n_layer = 4, .n_embd = 256, .n_ff = 768, .n_head = 4, .n_head_kv = 2,
      .head_dim = 64, .n_vocab = 1024, .n_ctx_train = 8192, .rope_base = 1e6f, .rms_eps = 1e-6f,
      .tied_embeddings = true}},
    {"tiny-llama", "2-layer llama (Llama 3 style rope_freqs) for tests",
     {.arch = SYNTH_ARCH_LLAMA, .n_layer = 2, .n_embd = 256, .n_ff = 512, .n_head = 4, .n_head_kv = 1,
      .head_dim = 64, .n_vocab = 512, .n_ctx_train = 8192, .rope_base = 5e5f, .rms_eps = 1e-5f,
      .tied_embeddings = true, .llama3_rope = true}},
    {"tiny-qwen3moe", "2-layer qwen3moe (8 experts, 2 used) for tests",
     {.arch = SYNTH_ARCH_QWEN3MOE, .n_layer = 2, .n_embd = 256, .n_ff = 256, .n_head = 2, .n_head_kv = 1,
      .head_dim = 128, .n_vocab = 512, .n_ctx_train = 8192, .rope_base = 1e6f, .rms_eps = 1e-6f,
      .tied_embeddings = false, .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 256}},
    {"tiny-qwen35", "4-layer qwen35 hybrid (2 DeltaNet + 2 gated attention) for tests",
     {.arch = SYNTH_ARCH_QWEN35, .n_layer = 4, .n_embd = 256, .n_ff = 512, .n_head = 2, .n_head_kv = 1,
      .head_dim = 128, .n_rot = 32, .n_vocab = 512, .n_ctx_train = 8192, .rope_base = 1e7f, .rms_eps = 1e-6f,
      .tied_embeddings = true, .full_attn_interval = 2, .ssm_conv_kernel = 4, .ssm_head_dim = 64,
      .ssm_n_k_heads = 2, .ssm_n_v_heads = 4}},
    {"tiny-qwen35moe", "4-layer qwen35moe (8 experts, 2 used, shared expert) for tests",
     {.arch = SYNTH_ARCH_QWEN35MOE, .n_layer = 4, .n_embd = 256, .n_ff = 256, .n_head = 2, .n_head_kv = 1,
      .head_dim = 128, .n_rot = 32, .n_vocab = 512, .n_ctx_train = 8192, .rope_base = 1e7f, .rms_eps = 1e-6f,
      .tied_embeddings = true, .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 256, .n_ff_shexp = 256,
      .full_attn_interval = 2, .ssm_conv_kernel = 4, .ssm_head_dim = 64, .ssm_n_k_heads = 2,
      .ssm_n_v_heads = 4}},
    /* Qwen3: spec architectures.md 10.2. */
    {"qwen3-0.6b", "Qwen3-0.6B (spec architectures.md 10.2)",
     {.arch = SYNTH_ARCH_QWEN3, .n_layer = 28, .n_embd = 1024, .n_ff = 3072, .n_head = 16, .n_head_kv = 8,
      .head_dim = 128, .n_vocab = 151936, .n_ctx_train = QWEN3_CTX, .rope_base = 1e6f, .rms_eps = 1e-6f,
      .tied_embeddings = true}},
    /* Not in the spec: Hugging Face Qwen/Qwen3-1.7B config.json (hidden 2048, 28 layers, 16/8 heads,
     * head_dim 128, intermediate 6144, vocab 151936, tied), as reproduced in public model-config
     * tables (e.g. levanter's qwen3_1_7b). */
    {"qwen3-1.7b", "Qwen3-1.7B (HF config.json)",
     {.arch = SYNTH_ARCH_QWEN3, .n_layer = 28, .n_embd = 2048, .n_ff = 6144, .n_head = 16, .n_head_kv = 8,
      .head_dim = 128, .n_vocab = 151936, .n_ctx_train = QWEN3_CTX, .rope_base = 1e6f, .rms_eps = 1e-6f,
      .tied_embeddings = true}},
    {"qwen3-32b", "Qwen3-32B (spec architectures.md 10.2)",
     {.arch = SYNTH_ARCH_QWEN3, .n_layer = 64, .n_embd = 5120, .n_ff = 25600, .n_head = 64, .n_head_kv = 8,
      .head_dim = 128, .n_vocab = 151936, .n_ctx_train = QWEN3_CTX, .rope_base = 1e6f, .rms_eps = 1e-6f,
      .tied_embeddings = false}},
    /* Qwen3.5: spec architectures.md 10.1. */
    {"qwen3.5-0.8b", "Qwen3.5-0.8B (spec architectures.md 10.1)",
     {.arch = SYNTH_ARCH_QWEN35, .n_layer = 24, .n_embd = 1024, .n_ff = 3584, .n_head = 8, .n_head_kv = 2,
      .head_dim = 256, .n_rot = 64, .n_vocab = 248320, .n_ctx_train = QWEN35_CTX, .rope_base = 1e7f,
      .rms_eps = 1e-6f, .tied_embeddings = true, .full_attn_interval = 4, .ssm_conv_kernel = 4,
      .ssm_head_dim = 128, .ssm_n_k_heads = 16, .ssm_n_v_heads = 16}},
    /* Not in the spec: Hugging Face Qwen/Qwen3.5-2B config.json (hidden 2048, intermediate 6144,
     * head_dim 256, full_attention_interval 4, 24 layers, tied; 8/2 attention heads and 16/16
     * linear heads of dim 128 as in the 0.8B) -- hidden/intermediate/head_dim/interval checked
     * against a public copy of the config; the head counts are from the model card's family table. */
    {"qwen3.5-2b", "Qwen3.5-2B (HF config.json)",
     {.arch = SYNTH_ARCH_QWEN35, .n_layer = 24, .n_embd = 2048, .n_ff = 6144, .n_head = 8, .n_head_kv = 2,
      .head_dim = 256, .n_rot = 64, .n_vocab = 248320, .n_ctx_train = QWEN35_CTX, .rope_base = 1e7f,
      .rms_eps = 1e-6f, .tied_embeddings = true, .full_attn_interval = 4, .ssm_conv_kernel = 4,
      .ssm_head_dim = 128, .ssm_n_k_heads = 16, .ssm_n_v_heads = 16}},
    {"qwen3.5-27b", "Qwen3.5-27B (spec architectures.md 10.1)",
     {.arch = SYNTH_ARCH_QWEN35, .n_layer = 64, .n_embd = 5120, .n_ff = 17408, .n_head = 24, .n_head_kv = 4,
      .head_dim = 256, .n_rot = 64, .n_vocab = 248320, .n_ctx_train = QWEN35_CTX, .rope_base = 1e7f,
      .rms_eps = 1e-6f, .tied_embeddings = false, .full_attn_interval = 4, .ssm_conv_kernel = 4,
      .ssm_head_dim = 128, .ssm_n_k_heads = 16, .ssm_n_v_heads = 48}},
    /* feed_forward_length of the MoE (HF intermediate_size) only goes to metadata; we write the
     * shared-expert width there since no tensor uses it. */
    {"qwen3.5-35b-a3b", "Qwen3.5-35B-A3B (spec architectures.md 10.1)",
     {.arch = SYNTH_ARCH_QWEN35MOE, .n_layer = 40, .n_embd = 2048, .n_ff = 512, .n_head = 16, .n_head_kv = 2,
      .head_dim = 256, .n_rot = 64, .n_vocab = 248320, .n_ctx_train = QWEN35_CTX, .rope_base = 1e7f,
      .rms_eps = 1e-6f, .tied_embeddings = false, .n_expert = 256, .n_expert_used = 8, .n_ff_exp = 512,
      .n_ff_shexp = 512, .full_attn_interval = 4, .ssm_conv_kernel = 4, .ssm_head_dim = 128,
      .ssm_n_k_heads = 16, .ssm_n_v_heads = 32}},
    /* Not in the spec: Hugging Face meta-llama/Llama-3.2-1B config.json (hidden 2048, 16 layers,
     * 32/8 heads, head_dim 64, intermediate 8192, vocab 128256, rope_theta 500000, llama3 rope
     * scaling factor 32 / low 1 / high 4 / original 8192, tied, rms eps 1e-5, 131072 context). */
    {"llama-3.2-1b", "Llama-3.2-1B (HF config.json)",
     {.arch = SYNTH_ARCH_LLAMA, .n_layer = 16, .n_embd = 2048, .n_ff = 8192, .n_head = 32, .n_head_kv = 8,
      .head_dim = 64, .n_vocab = 128256, .n_ctx_train = 131072, .rope_base = 5e5f, .rms_eps = 1e-5f,
      .tied_embeddings = true, .llama3_rope = true}},
};
#define N_PRESETS (sizeof k_presets / sizeof k_presets[0])

const synth_preset *synth_preset_find(const char *name)
{
    for (size_t i = 0; i < N_PRESETS; i++)
        if (strcasecmp(k_presets[i].name, name) == 0) return &k_presets[i];
    return NULL;
}

size_t synth_preset_count(void) { return N_PRESETS; }
const synth_preset *synth_preset_at(size_t i) { return i < N_PRESETS ? &k_presets[i] : NULL; }

int synth_options_init(synth_options *o, const char *preset, wk_error *err)
{
    memset(o, 0, sizeof *o);
    const synth_preset *p = synth_preset_find(preset);
    if (!p) {
        char names[512] = "";
        for (size_t i = 0; i < N_PRESETS; i++) {
            if (i) strncat(names, ", ", sizeof names - strlen(names) - 1);
            strncat(names, k_presets[i].name, sizeof names - strlen(names) - 1);
        }
        return wk_fail(err, WK_ENOTFOUND, "unknown preset '%s' (known: %s)", preset, names);
    }
    snprintf(o->name, sizeof o->name, "%s", p->name);
    o->dims = p->dims;
    o->quant.mix = QT_MIX_PURE;
    o->quant.expert_type = -1;
    o->quant.type = QT_Q8_0;
    o->seed = 1;
    return 0;
}

static const char *const k_arch_names[] = {"llama", "qwen3", "qwen3moe", "qwen35", "qwen35moe"};

const char *synth_arch_name(enum synth_arch a)
{
    return (unsigned)a < sizeof k_arch_names / sizeof k_arch_names[0] ? k_arch_names[a] : "?";
}

int synth_arch_from_name(const char *name)
{
    for (size_t i = 0; i < sizeof k_arch_names / sizeof k_arch_names[0]; i++)
        if (strcasecmp(k_arch_names[i], name) == 0) return (int)i;
    return -1;
}

/* ---- validation ----------------------------------------------------------- */

#define DIM_MAX (1u << 20) /* no real model has a dimension near 1M; catches typos */

int synth_validate(const synth_options *o, wk_error *err)
{
    const synth_dims *d = &o->dims;
    const qt_traits *qt = qt_traits_of(o->quant.type);
    if (o->quant.mix == QT_MIX_PURE && (!qt || !qt->weight_ok))
        return wk_fail(err, WK_EINVAL, "type %s is not a weight type", qt_type_name(o->quant.type));
    if ((unsigned)d->arch > SYNTH_ARCH_QWEN35MOE) return wk_fail(err, WK_EINVAL, "unknown architecture id %d", d->arch);
    struct {
        const char *name;
        uint32_t v;
    } req[] = {{"layers", d->n_layer}, {"embd", d->n_embd}, {"heads", d->n_head}, {"kv-heads", d->n_head_kv},
               {"head-dim", d->head_dim}, {"vocab", d->n_vocab}, {"ctx", d->n_ctx_train}};
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++)
        if (req[i].v == 0 || req[i].v > DIM_MAX)
            return wk_fail(err, WK_EINVAL, "--%s %u: must be in 1..%u", req[i].name, req[i].v, DIM_MAX);
    if (d->n_layer > 1024) return wk_fail(err, WK_EINVAL, "--layers %u: at most 1024", d->n_layer);
    if (d->n_mtp > 1 || (d->n_mtp && d->arch != SYNTH_ARCH_QWEN35 && d->arch != SYNTH_ARCH_QWEN35MOE))
        return wk_fail(err, WK_EINVAL, "--mtp: one MTP block, on qwen35 / qwen35moe only");
    if (d->n_head % d->n_head_kv)
        return wk_fail(err, WK_EINVAL, "--heads %u is not a multiple of --kv-heads %u", d->n_head, d->n_head_kv);
    if (d->head_dim % 2) return wk_fail(err, WK_EINVAL, "--head-dim %u: must be even", d->head_dim);
    uint32_t n_rot = d->n_rot ? d->n_rot : d->head_dim;
    if (n_rot % 2 || n_rot > d->head_dim)
        return wk_fail(err, WK_EINVAL, "rotary dims %u: must be even and <= head dim %u", n_rot, d->head_dim);
    if (d->n_vocab < synth_vocab_min_size())
        return wk_fail(err, WK_EINVAL, "--vocab %u: at least %u (byte tokens + special tokens)", d->n_vocab,
                       synth_vocab_min_size());
    if (!(d->rope_base > 0) || !(d->rms_eps > 0)) return wk_fail(err, WK_EINVAL, "rope base and rms eps must be > 0");
    int moe = d->arch == SYNTH_ARCH_QWEN3MOE || d->arch == SYNTH_ARCH_QWEN35MOE;
    int hybrid = d->arch == SYNTH_ARCH_QWEN35 || d->arch == SYNTH_ARCH_QWEN35MOE;
    if (!moe && (d->n_ff == 0 || d->n_ff > DIM_MAX))
        return wk_fail(err, WK_EINVAL, "--ff %u: must be in 1..%u", d->n_ff, DIM_MAX);
    if (moe) {
        if (d->n_expert == 0 || d->n_expert > 4096)
            return wk_fail(err, WK_EINVAL, "--experts %u: must be in 1..4096", d->n_expert);
        if (d->n_expert_used == 0 || d->n_expert_used > d->n_expert)
            return wk_fail(err, WK_EINVAL, "--experts-used %u: must be in 1..%u", d->n_expert_used, d->n_expert);
        if (d->n_ff_exp == 0 || d->n_ff_exp > DIM_MAX)
            return wk_fail(err, WK_EINVAL, "--expert-ff %u: must be in 1..%u", d->n_ff_exp, DIM_MAX);
        if (d->arch == SYNTH_ARCH_QWEN35MOE && (d->n_ff_shexp == 0 || d->n_ff_shexp > DIM_MAX))
            return wk_fail(err, WK_EINVAL, "--shexp-ff %u: must be in 1..%u", d->n_ff_shexp, DIM_MAX);
    }
    if (hybrid) {
        if (d->ssm_head_dim == 0 || d->ssm_head_dim > 4096 || d->ssm_n_k_heads == 0 || d->ssm_n_v_heads == 0 ||
            d->ssm_n_k_heads > 4096 || d->ssm_n_v_heads > 4096)
            return wk_fail(err, WK_EINVAL, "ssm dims (--ssm-head-dim %u, --ssm-k-heads %u, --ssm-v-heads %u): must be > 0",
                           d->ssm_head_dim, d->ssm_n_k_heads, d->ssm_n_v_heads);
        if (d->ssm_n_v_heads % d->ssm_n_k_heads)
            return wk_fail(err, WK_EINVAL, "--ssm-v-heads %u is not a multiple of --ssm-k-heads %u", d->ssm_n_v_heads,
                           d->ssm_n_k_heads);
        if (d->ssm_conv_kernel == 0 || d->ssm_conv_kernel > 64)
            return wk_fail(err, WK_EINVAL, "ssm conv kernel %u: must be in 1..64", d->ssm_conv_kernel);
        if (d->full_attn_interval == 0)
            return wk_fail(err, WK_EINVAL, "--full-attn-interval must be >= 1");
        if (n_rot < 4) return wk_fail(err, WK_EINVAL, "rotary dims %u: qwen35 needs at least 4", n_rot);
    }
    return 0;
}

/* ---- metadata ------------------------------------------------------------- */

static int write_metadata(gguf_writer *w, const synth_options *o, const synth_vocab *v)
{
    const synth_dims *d = &o->dims;
    const char *arch = synth_arch_name(d->arch);
    char key[128], name[128], qname[48];
    int rc = 0;
#define KEY(suffix) (snprintf(key, sizeof key, "%s." suffix, arch), key)
    qt_mix_name(&o->quant, qname, sizeof qname);
    snprintf(name, sizeof name, "synthetic %s %s", o->name[0] ? o->name : "custom", qname);
    rc |= gguf_writer_set_str(w, "general.architecture", arch);
    rc |= gguf_writer_set_str(w, "general.type", "model");
    rc |= gguf_writer_set_str(w, "general.name", name);
    rc |= gguf_writer_set_str(w, "general.description", "random weights with real dimensions, written by wick synth");
    rc |= gguf_writer_set_u32(w, "general.file_type", qt_mix_file_type(&o->quant));
    rc |= gguf_writer_set_u32(w, "general.quantization_version", 2);
    rc |= gguf_writer_set_u64(w, "general.seed", o->seed); /* wick's own key: reproduces the file */

    rc |= gguf_writer_set_u32(w, KEY("context_length"), d->n_ctx_train);
    rc |= gguf_writer_set_u32(w, KEY("embedding_length"), d->n_embd);
    rc |= gguf_writer_set_u32(w, KEY("block_count"), d->n_layer + d->n_mtp);
    if (d->n_mtp) rc |= gguf_writer_set_u32(w, KEY("nextn_predict_layers"), d->n_mtp);
    rc |= gguf_writer_set_u32(w, KEY("feed_forward_length"), d->n_ff);
    rc |= gguf_writer_set_u32(w, KEY("attention.head_count"), d->n_head);
    rc |= gguf_writer_set_u32(w, KEY("attention.head_count_kv"), d->n_head_kv);
    rc |= gguf_writer_set_u32(w, KEY("attention.key_length"), d->head_dim);
    rc |= gguf_writer_set_u32(w, KEY("attention.value_length"), d->head_dim);
    rc |= gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), d->rms_eps);
    rc |= gguf_writer_set_f32(w, KEY("rope.freq_base"), d->rope_base);
    uint32_t n_rot = d->n_rot ? d->n_rot : d->head_dim;
    rc |= gguf_writer_set_u32(w, KEY("rope.dimension_count"), n_rot);
    rc |= gguf_writer_set_u32(w, KEY("vocab_size"), d->n_vocab);
    if (d->arch == SYNTH_ARCH_QWEN3MOE || d->arch == SYNTH_ARCH_QWEN35MOE) {
        rc |= gguf_writer_set_u32(w, KEY("expert_count"), d->n_expert);
        rc |= gguf_writer_set_u32(w, KEY("expert_used_count"), d->n_expert_used);
        rc |= gguf_writer_set_u32(w, KEY("expert_feed_forward_length"), d->n_ff_exp);
        if (d->arch == SYNTH_ARCH_QWEN35MOE)
            rc |= gguf_writer_set_u32(w, KEY("expert_shared_feed_forward_length"), d->n_ff_shexp);
    }
    if (d->arch == SYNTH_ARCH_QWEN35 || d->arch == SYNTH_ARCH_QWEN35MOE) {
        /* M-RoPE sections in Qwen3.5's 11:11:10 proportion; sum = n_rot/2 (text-only: all t/h/w). */
        uint32_t half = n_rot / 2, s1 = half * 11 / 32, s2 = half * 10 / 32;
        int32_t sections[4] = {(int32_t)(half - s1 - s2), (int32_t)s1, (int32_t)s2, 0};
        rc |= gguf_writer_set_arr(w, KEY("rope.dimension_sections"), GGUF_T_INT32, sections, 4);
        rc |= gguf_writer_set_u32(w, KEY("full_attention_interval"), d->full_attn_interval);
        rc |= gguf_writer_set_u32(w, KEY("ssm.conv_kernel"), d->ssm_conv_kernel);
        rc |= gguf_writer_set_u32(w, KEY("ssm.state_size"), d->ssm_head_dim);
        rc |= gguf_writer_set_u32(w, KEY("ssm.group_count"), d->ssm_n_k_heads);
        rc |= gguf_writer_set_u32(w, KEY("ssm.time_step_rank"), d->ssm_n_v_heads);
        rc |= gguf_writer_set_u32(w, KEY("ssm.inner_size"), d->ssm_n_v_heads * d->ssm_head_dim);
    }
#undef KEY
    rc |= gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    rc |= gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen2");
    rc |= gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens, v->n_tokens);
    rc |= gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_T_INT32, v->types, v->n_tokens);
    rc |= gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges, v->n_merges);
    rc |= gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", v->endoftext_id);
    rc |= gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", v->im_end_id);
    rc |= gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", v->endoftext_id);
    rc |= gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false);
    rc |= gguf_writer_set_str(w, "tokenizer.chat_template", synth_qwen3_chat_template);
    return rc;
}

/* ---- weight generation -------------------------------------------------- */

/* splitmix64 finalizer: a good 64-bit mix, used as a counter-based generator
 * so every row can be generated independently (any thread, any order). */
static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#define GOLDEN64 0x9e3779b97f4a7c15ull

/* Llama 3 rope scaling factors (HF rope_type "llama3": factor 32, low 1,
 * high 4, original context 8192, as in Llama 3.2), as llama.cpp's converter
 * writes them into rope_freqs.weight: frequency divisors per rotary pair. */
static float llama3_rope_factor(uint32_t i, uint32_t n_rot, float base)
{
    const double factor = 32.0, low = 1.0, high = 4.0, orig_ctx = 8192.0;
    double freq = 1.0 / pow(base, (2.0 * i) / n_rot);
    double wavelen = 2.0 * M_PI / freq;
    double low_wavelen = orig_ctx / low, high_wavelen = orig_ctx / high;
    if (wavelen < high_wavelen) return 1.0f;
    if (wavelen > low_wavelen) return (float)factor;
    double smooth = (orig_ctx / wavelen - low) / (high - low);
    return (float)(1.0 / ((1.0 - smooth) / factor + smooth));
}

/* Fills one row of n values of tensor t. Normal deviates are Irwin-Hall sums
 * of four 16-bit uniforms (variance matched; bounded at ±3.5 sigma, which
 * keeps quantization scales tame). */
static void gen_row(const synth_tensor *t, const synth_dims *d, uint64_t key, int64_t row, float *out)
{
    int64_t n = t->ne[0];
    uint64_t s = mix64(key ^ ((uint64_t)row * GOLDEN64));
    const float k_irwin = 1.7320508f / 65536.0f; /* sqrt(3) / 2^16: unit variance */
    switch (t->init) {
    case SYNTH_INIT_NORMAL:
    case SYNTH_INIT_NORM: {
        float add = t->init == SYNTH_INIT_NORM ? 1.0f : 0.0f, scale = t->std * k_irwin;
        for (int64_t j = 0; j < n; j++) {
            uint64_t r = mix64(s += GOLDEN64);
            int32_t sum = (int32_t)(r & 0xffff) + (int32_t)((r >> 16) & 0xffff) + (int32_t)((r >> 32) & 0xffff) +
                          (int32_t)(r >> 48) - 2 * 65536;
            out[j] = add + scale * (float)sum;
        }
        break;
    }
    case SYNTH_INIT_UNIFORM:
        for (int64_t j = 0; j < n; j++) {
            uint64_t r = mix64(s += GOLDEN64);
            out[j] = t->std * (float)((double)(r >> 11) * (2.0 / 9007199254740992.0) - 1.0);
        }
        break;
    case SYNTH_INIT_SSM_A: {
        /* -exp(U(ln 0.02, ln 2)): decay rates from slow to fast, as A_log in trained models. */
        const double lo = log(0.02), hi = log(2.0);
        for (int64_t j = 0; j < n; j++) {
            uint64_t r = mix64(s += GOLDEN64);
            double u = (double)(r >> 11) / 9007199254740992.0;
            out[j] = (float)-exp(lo + u * (hi - lo));
        }
        break;
    }
    case SYNTH_INIT_ROPE_FREQS: {
        uint32_t n_rot = d->n_rot ? d->n_rot : d->head_dim;
        for (int64_t j = 0; j < n; j++) out[j] = llama3_rope_factor((uint32_t)j, n_rot, d->rope_base);
        break;
    }
    }
}

/* Quantized weights are assembled from a pool of pre-quantized blocks.
 *
 * Why: speed does not depend on the values, but the K-quant quantizers search
 * for good scales and run at a few MB/s, which would make a 27B file take
 * hours. So each (type, std) pair gets a pool of blocks quantized once from
 * N(0, std^2) values, and every block of every row is a pseudo-random pick
 * from that pool: each block is a genuine quantization of Gaussian weights
 * with the intended scale, rows are independent random mixtures, and writing
 * is bounded by the disk. */
#define POOL_ELEMS (1u << 20) /* 1M weights per pool: 4096 K-quant blocks, ~0.2 s to build */

typedef struct block_pool {
    uint32_t type;
    float std;
    size_t block_bytes, n_blocks;
    uint8_t *blocks;
} block_pool;

typedef struct pool_job {
    block_pool *bp;
    uint64_t key;
    uint32_t block_elems;
    float *scratch; /* per worker: block_elems floats */
    int failed;
} pool_job;

static void pool_body(void *ctx, int worker, int n_workers)
{
    pool_job *j = ctx;
    long b, e;
    wk_split((long)j->bp->n_blocks, worker, n_workers, &b, &e);
    float *buf = j->scratch + (size_t)worker * j->block_elems;
    synth_tensor t = {.init = SYNTH_INIT_NORMAL, .std = j->bp->std};
    t.ne[0] = j->block_elems;
    for (long i = b; i < e; i++) {
        gen_row(&t, NULL, j->key, i, buf);
        if (qt_quantize_row((enum qt_type)j->bp->type, buf, j->bp->blocks + (size_t)i * j->bp->block_bytes,
                            j->block_elems) != 0)
            j->failed = 1;
    }
}

static int pool_build(block_pool *bp, uint32_t type, float std, uint64_t seed, wk_pool *pool, float *scratch)
{
    const qt_traits *tr = qt_traits_of(type);
    bp->type = type;
    bp->std = std;
    bp->block_bytes = tr->block_bytes;
    bp->n_blocks = POOL_ELEMS / tr->block_elems;
    bp->blocks = malloc(bp->n_blocks * bp->block_bytes);
    if (!bp->blocks) return WK_ENOMEM;
    uint32_t std_bits;
    memcpy(&std_bits, &std, sizeof std_bits);
    pool_job j = {.bp = bp, .key = mix64(seed ^ ((uint64_t)type << 40) ^ std_bits), .block_elems = tr->block_elems,
                  .scratch = scratch};
    wk_pool_run(pool, pool_body, &j);
    if (j.failed) {
        free(bp->blocks);
        bp->blocks = NULL;
        return WK_EINVAL;
    }
    return 0;
}

typedef struct slab_job {
    const synth_tensor *t;
    const synth_dims *d;
    const block_pool *bp; /* quantized weights: assemble from this pool */
    uint64_t key;      /* per-tensor generator key */
    int64_t row0, n_rows;
    size_t row_bytes;
    uint8_t *out;
    float *scratch;    /* n_workers rows of max_ne0 floats */
    int64_t max_ne0;
    int failed;        /* set by any worker (benign race: only ever set to 1) */
} slab_job;

static void slab_body(void *ctx, int worker, int n_workers)
{
    slab_job *j = ctx;
    long b, e;
    wk_split((long)j->n_rows, worker, n_workers, &b, &e);
    float *buf = j->scratch + (size_t)worker * (size_t)j->max_ne0;
    for (long r = b; r < e; r++) {
        uint8_t *dst = j->out + (size_t)r * j->row_bytes;
        if (j->bp) {
            size_t nb = j->row_bytes / j->bp->block_bytes;
            uint64_t s = mix64(j->key ^ ((uint64_t)(j->row0 + r) * GOLDEN64));
            for (size_t k = 0; k < nb; k++) {
                uint64_t pick = mix64(s += GOLDEN64) % j->bp->n_blocks;
                memcpy(dst + k * j->bp->block_bytes, j->bp->blocks + pick * j->bp->block_bytes, j->bp->block_bytes);
            }
            continue;
        }
        if (j->t->type == QT_F32) {
            gen_row(j->t, j->d, j->key, j->row0 + r, (float *)(void *)dst);
            continue;
        }
        gen_row(j->t, j->d, j->key, j->row0 + r, buf);
        if (qt_quantize_row((enum qt_type)j->t->type, buf, dst, j->t->ne[0]) != 0) j->failed = 1;
    }
}

/* Target bytes per slab: large enough to amortize the pool hand-off and the
 * write call, small enough to keep memory flat (16 MiB). */
#define SLAB_BYTES (16u << 20)

int synth_write(const synth_options *o, const char *path, synth_progress_fn progress, void *progress_ctx,
                wk_error *err)
{
    synth_plan *plan = NULL;
    synth_vocab vocab = {0};
    gguf_writer *w = NULL;
    wk_pool *pool = NULL;
    uint8_t *slab = NULL;
    float *scratch = NULL;
    enum { MAX_POOLS = 64 }; /* distinct (type, std) pairs; a model has about ten */
    block_pool pools[MAX_POOLS];
    size_t n_pools = 0;
    int rc = synth_plan_new(o, &plan, err);
    if (rc) return rc;
    rc = synth_vocab_build(&vocab, o->dims.n_vocab, err);
    if (rc) goto done;
    rc = gguf_writer_new(&w, path, plan->alignment, err);
    if (rc) goto done;
    /* A failing set/add call leaves a sticky error in the writer that
     * gguf_writer_begin_data reports with its message. */
    (void)write_metadata(w, o, &vocab);
    int64_t max_ne0 = 1;
    size_t max_row_bytes = 1;
    for (size_t i = 0; i < plan->n_tensors; i++) {
        const synth_tensor *t = &plan->tensors[i];
        (void)gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne);
        if (t->ne[0] > max_ne0) max_ne0 = t->ne[0];
        size_t rb = qt_row_bytes(qt_traits_of(t->type), t->ne[0]);
        if (rb > max_row_bytes) max_row_bytes = rb;
    }
    rc = gguf_writer_begin_data(w, err);
    if (rc) goto done;

    pool = wk_pool_new(o->n_threads);
    if (!pool) {
        rc = wk_fail(err, WK_ENOMEM, "synth: cannot start %d threads", o->n_threads);
        goto done;
    }
    int n_workers = wk_pool_size(pool);
    size_t slab_cap = max_row_bytes > SLAB_BYTES ? max_row_bytes : SLAB_BYTES;
    slab = malloc(slab_cap);
    scratch = malloc((size_t)n_workers * (size_t)max_ne0 * sizeof *scratch);
    if (!slab || !scratch) {
        rc = wk_fail(err, WK_ENOMEM, "synth: out of memory for a %zu-byte slab", slab_cap);
        goto done;
    }
    if (max_ne0 < 256) {
        /* pool blocks need up to 256 floats of scratch per worker */
        float *s2 = realloc(scratch, (size_t)n_workers * 256 * sizeof *scratch);
        if (!s2) {
            rc = wk_fail(err, WK_ENOMEM, "synth: out of memory");
            goto done;
        }
        scratch = s2;
        max_ne0 = 256;
    }
    uint64_t done_bytes = 0;
    for (size_t i = 0; i < plan->n_tensors; i++) {
        const synth_tensor *t = &plan->tensors[i];
        size_t row_bytes = qt_row_bytes(qt_traits_of(t->type), t->ne[0]);
        int64_t n_rows = t->ne[1] * t->ne[2] * t->ne[3];
        int64_t rows_per_slab = (int64_t)(slab_cap / row_bytes);
        const block_pool *bp = NULL;
        if (qt_traits_of(t->type)->is_quantized && t->init == SYNTH_INIT_NORMAL) {
            size_t k;
            for (k = 0; k < n_pools; k++)
                if (pools[k].type == t->type && pools[k].std == t->std) break;
            if (k == n_pools) {
                if (n_pools == MAX_POOLS || pool_build(&pools[n_pools], t->type, t->std, o->seed, pool, scratch)) {
                    rc = wk_fail(err, WK_ENOMEM, "tensor %s: cannot build a %s block pool", t->name,
                                 qt_type_name(t->type));
                    goto done;
                }
                n_pools++;
            }
            bp = &pools[k];
        }
        slab_job job = {.t = t, .d = &o->dims, .bp = bp, .key = mix64(o->seed * GOLDEN64 + i + 1),
                        .row_bytes = row_bytes, .out = slab, .scratch = scratch, .max_ne0 = max_ne0};
        for (int64_t r0 = 0; r0 < n_rows; r0 += rows_per_slab) {
            job.row0 = r0;
            job.n_rows = n_rows - r0 < rows_per_slab ? n_rows - r0 : rows_per_slab;
            wk_pool_run(pool, slab_body, &job);
            if (job.failed) {
                rc = wk_fail(err, WK_EINVAL, "tensor %s: quantizing to %s failed", t->name, qt_type_name(t->type));
                goto done;
            }
            size_t n = (size_t)job.n_rows * row_bytes;
            rc = gguf_writer_write_data(w, slab, n, err);
            if (rc) goto done;
            done_bytes += n;
            if (progress && progress(progress_ctx, done_bytes, plan->tensor_bytes)) {
                rc = wk_fail(err, WK_ECANCELLED, "%s: cancelled", path);
                goto done;
            }
        }
    }
    rc = gguf_writer_finish(w, err);
    w = NULL;
done:
    if (w) gguf_writer_abort(w);
    wk_pool_free(pool);
    for (size_t k = 0; k < n_pools; k++) free(pools[k].blocks);
    free(slab);
    free(scratch);
    synth_vocab_free(&vocab);
    synth_plan_free(plan);
    return rc;
}
