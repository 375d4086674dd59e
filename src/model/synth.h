/* Synthetic model packs: random-weight GGUF files with the true dimensions of
 * real models (presets) or of custom dimensions, in any weight type or a
 * llama.cpp-style mix. Speed does not depend on weight values, so these files
 * measure the same work as the real models; values are scaled so activations
 * stay finite through all layers.
 *
 * Files carry a byte-level BPE vocabulary (tokenizer.ggml.model "gpt2", pre
 * "qwen2": 256 byte tokens, merges learnt from a built-in text, Qwen special
 * tokens, [PAD] tokens up to n_vocab) and the Qwen3 chat template, so the
 * server can run them end to end and llama.cpp loads them.
 *
 * Writing streams: tensors are generated a slab of rows at a time (bounded
 * memory, independent of the file size), on a thread pool. Quantized weights
 * are assembled from pools of blocks quantized once per (type, scale) from
 * Gaussian values (the K-quant quantizers are far too slow for 20+ GB files);
 * F32/F16/BF16 tensors are generated value by value. The bytes depend only on
 * the options (seed included), not on the number of threads. */
#ifndef WICK_MODEL_SYNTH_H
#define WICK_MODEL_SYNTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quant/quant_mix.h"
#include "util/err.h"

enum synth_arch {
    SYNTH_ARCH_LLAMA = 0,
    SYNTH_ARCH_QWEN3,
    SYNTH_ARCH_QWEN3MOE,
    SYNTH_ARCH_QWEN35,
    SYNTH_ARCH_QWEN35MOE,
};

/* Model dimensions. Fields that do not apply to an architecture are ignored
 * (e.g. ssm_* for qwen3, n_expert for dense models). */
typedef struct synth_dims {
    enum synth_arch arch;
    uint32_t n_layer;       /* main layers */
    uint32_t n_embd;
    uint32_t n_ff;          /* dense FFN width (qwen35moe: written as feed_forward_length only) */
    uint32_t n_head;
    uint32_t n_head_kv;
    uint32_t head_dim;      /* attention head dim (key_length = value_length) */
    uint32_t n_rot;         /* rotated dims per head (0 = head_dim) */
    uint32_t n_vocab;
    uint32_t n_ctx_train;
    float rope_base;
    float rms_eps;
    bool tied_embeddings;   /* no output.weight */
    bool llama3_rope;       /* llama: write rope_freqs.weight (Llama 3.1+ scaling, factor 32, orig ctx 8192) */
    /* MoE */
    uint32_t n_expert;
    uint32_t n_expert_used;
    uint32_t n_ff_exp;
    uint32_t n_ff_shexp;    /* qwen35moe shared expert */
    /* Gated DeltaNet (qwen35*) */
    uint32_t full_attn_interval;
    uint32_t ssm_conv_kernel;
    uint32_t ssm_head_dim;  /* d_k = d_v */
    uint32_t ssm_n_k_heads; /* H_k (ssm.group_count) */
    uint32_t ssm_n_v_heads; /* H_v (ssm.time_step_rank) */
    uint32_t n_mtp;         /* qwen35*: MTP ("nextn") blocks after the main layers, 0 or 1 */
} synth_dims;

typedef struct synth_options {
    char name[64];      /* preset name or "custom"; goes to general.name */
    synth_dims dims;
    qt_mix_spec quant;  /* tensor types: the one mix rule of quant/quant_mix.h (qt_mix_parse) */
    uint64_t seed;
    int n_threads;      /* <= 0: physical cores */
} synth_options;

typedef struct synth_preset {
    const char *name;        /* "qwen3-0.6b" */
    const char *description; /* one line, with the source of the dimensions */
    synth_dims dims;
} synth_preset;

/* Preset table: lookup by exact name (NULL if absent), count and index. */
const synth_preset *synth_preset_find(const char *name);
size_t synth_preset_count(void);
const synth_preset *synth_preset_at(size_t i);

/* Fills *o with the preset's dimensions, type Q8_0 (pure), seed 1 and
 * automatic threads. WK_ENOTFOUND (message lists valid names) if unknown. */
int synth_options_init(synth_options *o, const char *preset, wk_error *err);


/* Checks dimensions for consistency (divisibility, non-zero sizes, limits);
 * WK_EINVAL naming the bad field. synth_plan_new and synth_write call it. */
int synth_validate(const synth_options *o, wk_error *err);

/* What a file will contain, without writing it. */
enum synth_init {
    SYNTH_INIT_NORMAL = 0, /* N(0, std^2) */
    SYNTH_INIT_NORM,       /* 1 + N(0, std^2) */
    SYNTH_INIT_UNIFORM,    /* U(-std, std) */
    SYNTH_INIT_SSM_A,      /* -exp(U(ln 0.02, ln 2)) */
    SYNTH_INIT_ROPE_FREQS, /* Llama 3 rope scaling factors (computed, not random) */
};

typedef struct synth_tensor {
    char name[64];
    uint32_t type; /* qt_type */
    uint32_t n_dims;
    int64_t ne[4];
    uint64_t n_elements;
    uint64_t n_bytes;
    enum synth_init init;
    float std;
} synth_tensor;

typedef struct synth_plan {
    synth_tensor *tensors; /* in file order */
    size_t n_tensors;
    uint64_t n_params;      /* all elements */
    uint64_t tensor_bytes;  /* sum of tensor sizes */
    uint64_t data_bytes;    /* sum of sizes rounded up to the alignment (the data section) */
    uint32_t alignment;
} synth_plan;

/* Builds the tensor list with types per the mix rules. Caller frees with
 * synth_plan_free. */
int synth_plan_new(const synth_options *o, synth_plan **out, wk_error *err);
void synth_plan_free(synth_plan *p);

/* Progress: called from the writing thread after each slab, with bytes of
 * tensor data written so far and the total. Returning non-zero cancels
 * (synth_write then fails with WK_ECANCELLED and removes the partial file). */
typedef int (*synth_progress_fn)(void *ctx, uint64_t done_bytes, uint64_t total_bytes);

/* Writes the model to path (replacing it). Memory use is bounded by a few
 * slabs of rows per thread (tens of MB), independent of the model size.
 * On failure the partial file is removed and err names what failed. */
int synth_write(const synth_options *o, const char *path, synth_progress_fn progress,
                void *progress_ctx, wk_error *err);

/* Architecture name as written to general.architecture ("qwen35moe"), and
 * its parser (-1 if unknown). */
const char *synth_arch_name(enum synth_arch a);
int synth_arch_from_name(const char *name);

/* True if layer il (< n_layer) of a qwen35* model is a full-attention layer. */
bool synth_is_full_attn_layer(const synth_dims *d, uint32_t il);

#endif
