/* Derived facts about a GGUF model file, computed from its metadata and
 * tensor-info records only (no tensor data is read): bits per weight from
 * actual bytes (overall, per tensor class, per type), the model's shape, the
 * KV-cache bytes per token and the recurrent state per sequence. Used by
 * `wick info`, the server's /props-style reports and bench. */
#ifndef WICK_GGUF_GGUF_STATS_H
#define WICK_GGUF_GGUF_STATS_H

#include <stdint.h>

#include "gguf/gguf.h"

/* Tensor classes for the per-class precision report. */
enum gguf_tensor_class {
    GGUF_CLASS_EMBED,  /* token_embd.* */
    GGUF_CLASS_OUTPUT, /* output.weight (the LM head when not tied) */
    GGUF_CLASS_ATTN,   /* attn_* (q, k, v, output, gate, qkv), ssm_* and other linear-attention tensors */
    GGUF_CLASS_FFN,    /* ffn_*: dense FFN, routers, routed and shared experts */
    GGUF_CLASS_OTHER,  /* norms and anything else */
    GGUF_CLASS_COUNT
};

/* Class of a tensor by name; "blk.3.attn_norm.weight" is OTHER (a norm). */
enum gguf_tensor_class gguf_tensor_class_of(const char *name);
/* "embeddings", "output", "attention", "ffn", "norms/other". */
const char *gguf_tensor_class_name(enum gguf_tensor_class c);

typedef struct gguf_bytes_stat {
    uint64_t n_tensors;
    uint64_t n_elements;
    uint64_t n_bytes;
} gguf_bytes_stat;

typedef struct gguf_weight_stats {
    gguf_bytes_stat total;
    gguf_bytes_stat by_class[GGUF_CLASS_COUNT];
    gguf_bytes_stat by_type[64]; /* indexed by ggml type id (all < QT_COUNT) */
} gguf_weight_stats;

/* Sums tensor counts, elements and bytes over all tensors of f. */
void gguf_weight_stats_compute(const gguf_file *f, gguf_weight_stats *out);

/* 8 * bytes / elements, or 0 when there are no elements. */
double gguf_bits_per_weight(const gguf_bytes_stat *s);

/* Name of a general.file_type (llama_ftype) value, e.g. "MOSTLY_Q4_K_M";
 * NULL for values that have no name. */
const char *gguf_file_type_name(uint32_t ftype);

/* The model's shape as far as the metadata describes it. Fields are 0 (or ""
 * for strings) when the file does not say. */
typedef struct gguf_model_summary {
    char arch[32];
    uint64_t n_ctx_train;
    uint64_t n_embd;
    uint64_t n_vocab;           /* {arch}.vocab_size, else tokenizer token count */
    uint32_t n_layer_all;       /* {arch}.block_count (includes MTP blocks) */
    uint32_t n_nextn;           /* {arch}.nextn_predict_layers (MTP blocks) */
    uint32_t n_layer;           /* main stack: n_layer_all - n_nextn */
    uint32_t n_full_attn;       /* main layers with a KV cache */
    uint32_t n_recurrent;       /* main layers with recurrent (conv + SSM) state */
    uint32_t full_attn_interval; /* hybrid models; 0 otherwise */
    uint32_t n_head, n_head_kv; /* of the first full-attention layer */
    uint32_t head_dim_k, head_dim_v;
    uint64_t n_ff;              /* feed_forward_length of layer 0 */
    uint32_t n_expert, n_expert_used;
    uint64_t n_ff_exp, n_ff_shexp;
    /* K+V elements per token summed over the main full-attention layers */
    uint64_t kv_elems_per_token;
    /* recurrent state per linear-attention layer (F32 bytes) and in total */
    uint64_t conv_state_bytes_per_layer;
    uint64_t ssm_state_bytes_per_layer;
    uint64_t recurrent_bytes_per_seq;
    /* tokenizer */
    char tok_model[32];
    char tok_pre[64];
    uint64_t tok_vocab;         /* entries of tokenizer.ggml.tokens */
    int has_chat_template;
    uint64_t chat_template_len;
} gguf_model_summary;

/* Fills out from f's metadata. Absent keys leave fields 0; keys that are
 * present with a wrong type or inconsistent values (per-layer array of the
 * wrong length, nextn > block_count, ...) are errors naming the key. A file
 * without general.architecture (e.g. a vocab-only GGUF) is not an error. */
int gguf_model_summary_compute(const gguf_file *f, gguf_model_summary *out, wk_error *err);

/* KV-cache bytes per token over the main full-attention layers for a cache
 * element type (QT_F16, QT_Q8_0, QT_F32, ...): per layer one K row of
 * n_head_kv*d_k and one V row of n_head_kv*d_v elements, each rounded up to
 * whole blocks of the type. 0 if the type is unknown. */
uint64_t gguf_kv_bytes_per_token(const gguf_file *f, const gguf_model_summary *s, uint32_t cache_type);

#endif
