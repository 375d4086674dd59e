/* Which type each tensor of a model gets: pure types and llama-quantize's
 * mixes (shared/spec/gguf.md section 7), one rule for everything that picks
 * tensor types — `wick synth` (random weights) and `wick quantize` (real
 * ones).
 *
 * Tensors are told apart by name like llama-quantize's tensor_get_category;
 * 1-D tensors, norms, routers, ssm_conv1d and anything not named *weight
 * are never quantized (QT_MIX_KEEP: they keep the source type). MoE expert
 * stacks (*_exps) may get a type of their own (expert_type), with the mix's
 * rules for the rest: 8-bit experts with 4-bit attention, or the reverse. */
#ifndef WICK_QUANT_QUANT_MIX_H
#define WICK_QUANT_QUANT_MIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

enum qt_mix {
    QT_MIX_PURE = 0, /* every quantizable weight gets `type` (llama-quantize --pure) */
    QT_MIX_Q4_K_M,   /* llama.cpp's Q4_K_M rules */
    QT_MIX_Q5_K_M,   /* Q5_K_M */
    QT_MIX_Q6_K,     /* the Q6_K file type: Q6_K, attn_v/attn_k Q8_0 in 8-expert models */
    QT_MIX_Q4_K_E8,  /* Q4_K_M with routed expert down projections at Q8_0 */
};

typedef struct qt_mix_spec {
    enum qt_mix mix;
    uint32_t type;       /* qt_type for QT_MIX_PURE */
    int32_t expert_type; /* qt_type for every *_exps tensor, or -1: the mix decides */
} qt_mix_spec;

/* "Keep the source type" (never-quantized tensors). */
#define QT_MIX_KEEP UINT32_MAX

/* Parses a weight type ("q8_0", "f16", ...: pure) or a mix ("q4_k_m",
 * "q5_k_m", "q4_k_e8"), case-insensitive; expert_type -1. WK_EINVAL
 * listing the valid names. What `wick synth --type` takes. */
int qt_mix_parse(const char *spec, qt_mix_spec *out, wk_error *err);

/* llama-quantize's reading of a type: a file type, so "q6_k" is the Q6_K
 * mix (8-expert bumps included); everything else as qt_mix_parse (Q8_0's
 * file type is pure Q8_0). What `wick quantize` takes without --pure. */
int qt_mix_parse_ftype(const char *spec, qt_mix_spec *out, wk_error *err);

/* "Q4_K_M", "Q8_0", "Q4_K_M+experts Q8_0". */
void qt_mix_name(const qt_mix_spec *s, char *buf, size_t cap);

/* general.file_type (llama_ftype) describing the mix. */
uint32_t qt_mix_file_type(const qt_mix_spec *s);

/* What the rules need to know about the model. */
typedef struct qt_mix_model {
    uint32_t n_layer;        /* main layers (use_more_bits counts over them) */
    uint32_t n_attention_wv; /* attn_v-like tensors (attn_v, attn_qkv, attn_kv_b) in the file */
    uint32_t n_expert;       /* experts per MoE layer, 0 for dense models */
    bool tied_output;        /* no output.weight: token_embd is the LM head */
} qt_mix_model;

/* Running state over the tensors in file order (llama-quantize's i_attention_wv). */
typedef struct qt_mix_state {
    uint32_t i_attention_wv;
} qt_mix_state;

/* Whether a tensor may be quantized at all (the never-quantized rules). */
bool qt_mix_quantizable(const char *name, uint32_t n_dims);

/* Whether name is an attn_v-like tensor (counted into n_attention_wv). */
bool qt_mix_is_attn_v_like(const char *name);

/* The type of tensor `name` (n_dims dims, rows of ne0) in layer `layer`
 * (from "blk.N."; 0 otherwise), or QT_MIX_KEEP. Call in file order: the
 * attn_v-like counter advances in st. */
uint32_t qt_mix_choose(const qt_mix_spec *s, const qt_mix_model *m, qt_mix_state *st, const char *name,
                       uint32_t n_dims, int64_t ne0);

/* llama-quantize's tensor_type_fallback: type, or a type whose block divides
 * a row of ne0 elements (Q4_K -> Q5_0, Q6_K -> Q8_0, ..., else F16). */
uint32_t qt_mix_fallback(uint32_t type, int64_t ne0);

/* Layer index of "blk.N.…" names, or -1. */
int32_t qt_mix_layer_of(const char *name);

#endif
