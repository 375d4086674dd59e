/* Model loading (hyper-parameters + tensor binding) and the forward pass entry.
 *
 * model_load opens a GGUF file (mmap, zero-copy), reads the hyper-parameters
 * of its architecture, binds every tensor the forward pass needs to a
 * be_weight view and checks its type and shape; a missing or misshapen
 * tensor is one error naming it. The forward passes live one file per
 * family: llama.c (llama, qwen2), qwen3.c (qwen3, qwen3moe), qwen35.c
 * (qwen35, qwen35moe); moe.c is the shared MoE FFN.
 *
 * Sequence state is owned by the caller (engine/) and handed to the forward
 * pass as a model_state: per attention layer an F16 KV range, per recurrent
 * layer the conv and SSM state (F32). */
#ifndef WICK_MODEL_MODEL_H
#define WICK_MODEL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "gguf/gguf.h"
#include "util/err.h"

enum model_arch {
    MODEL_ARCH_LLAMA = 0,
    MODEL_ARCH_QWEN2,
    MODEL_ARCH_QWEN3,
    MODEL_ARCH_QWEN3MOE,
    MODEL_ARCH_QWEN35,
    MODEL_ARCH_QWEN35MOE,
};

/* "llama", "qwen35moe", ... */
const char *model_arch_name(enum model_arch arch);

typedef struct model_hparams {
    uint32_t n_vocab;
    uint32_t n_embd;
    uint32_t n_layer;      /* main stack (block_count − nextn_predict_layers) */
    uint32_t n_layer_all;  /* block_count, MTP blocks included */
    uint32_t n_ctx_train;
    uint32_t n_head, n_head_kv;
    uint32_t d_k, d_v;     /* attention head dims */
    uint32_t n_ff;         /* dense FFN width (0 if none) */
    float eps;             /* RMSNorm / L2Norm eps */
    be_rope_params rope;   /* freq_factors points into the mapping when present */
    /* MoE */
    uint32_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    /* qwen35 hybrid */
    uint32_t full_attention_interval;
    uint32_t ssm_conv_k;   /* conv kernel K */
    uint32_t ssm_d_k;      /* state_size: key head dim */
    uint32_t ssm_d_v;      /* inner_size / H_v */
    uint32_t ssm_n_hk;     /* group_count: key heads H_k */
    uint32_t ssm_n_hv;     /* time_step_rank: value heads H_v */
    /* derived */
    uint32_t n_attn_layers;  /* layers with a KV cache (main stack) */
    uint32_t n_rec_layers;   /* Gated DeltaNet layers (main stack) */
    bool tied_output;        /* output.weight absent: LM head is token_embd */
} model_hparams;

/* Tensors of one block. Absent optional tensors have data == NULL.
 * Norm / bias / ssm vectors are F32 (checked at load). */
typedef struct model_layer {
    bool recurrent;          /* Gated DeltaNet layer (qwen35) */
    int32_t attn_slot;       /* index among attention layers, or -1 */
    int32_t rec_slot;        /* index among recurrent layers, or -1 */

    be_weight attn_norm;
    be_weight ffn_norm;      /* qwen35: post_attention_norm */

    /* attention */
    be_weight wq, wk, wv, wo;
    be_weight bq, bk, bv, bo;
    be_weight q_norm, k_norm;

    /* dense FFN */
    be_weight ffn_gate, ffn_up, ffn_down;

    /* MoE */
    be_weight ffn_gate_inp;                          /* router {n_embd, n_expert} */
    be_weight ffn_gate_exps, ffn_up_exps, ffn_down_exps; /* up absent if gate is fused gate_up */
    be_weight ffn_gate_inp_shexp;                    /* {n_embd} */
    be_weight ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp;

    /* Gated DeltaNet */
    be_weight ssm_qkv;       /* attn_qkv {n_embd, conv_dim} */
    be_weight ssm_z;         /* attn_gate {n_embd, value_dim} */
    be_weight ssm_beta, ssm_alpha; /* {n_embd, H_v} */
    be_weight ssm_dt;        /* ssm_dt.bias {H_v} */
    be_weight ssm_a;         /* {H_v} */
    be_weight ssm_conv1d;    /* {K, conv_dim} */
    be_weight ssm_norm;      /* {d_v} */
    be_weight ssm_out;       /* {value_dim, n_embd} */
} model_layer;

/* The MTP ("nextn", multi-token prediction) block of a qwen35 / qwen35moe file
 * (spec architectures.md 8.8): u = W_eh · [RMSNorm(embed(x_p); enorm) ‖ RMSNorm(h_{p-1}; hnorm)],
 * then one gated full-attention block with the main layers' FFN kind, then
 * hm = RMSNorm(u; head_norm) and logits = W_head · hm (the token after x_p). */
typedef struct model_mtp {
    model_layer layer;       /* blk.N attention + FFN tensors (attn_slot 0: its own KV) */
    be_weight eh_proj;       /* nextn.eh_proj {2·n_embd, n_embd} */
    be_weight enorm, hnorm;  /* {n_embd}, F32 (1+w baked in) */
    be_weight embd;          /* nextn.embed_tokens, else token_embd */
    be_weight head_norm;     /* nextn.shared_head_norm, else output_norm */
    be_weight head;          /* nextn.shared_head_head, else the LM head */
} model_mtp;

typedef struct model {
    enum model_arch arch;
    model_hparams hp;
    gguf_file *file;         /* owned */
    be_weight tok_embd, output_norm, output, output_bias;
    model_layer *layers;     /* [n_layer] */
    bool has_mtp;            /* the file carries an MTP block (bound in mtp) */
    model_mtp mtp;
    uint64_t model_id;       /* stable 64-bit identity of the file's contents (header hash) */
} model;

/* Opens path and binds the model. Every hyper-parameter is validated before
 * anything is sized from it (model_validate.c): against caps, against the
 * other keys and against the tensors present. On error *out = NULL and err
 * is one line naming the file and the key (with its value and what it
 * contradicts) or tensor at fault: WK_EFORMAT for a file that contradicts
 * itself, WK_EUNSUPPORTED for a valid file wick cannot run. Free with
 * model_free. */
int model_load(model **out, const char *path, wk_error *err);
/* Same over a caller's GGUF image in memory (fuzzers, tests); data must
 * outlive the model. */
int model_load_buffer(model **out, const void *data, size_t size, wk_error *err);
void model_free(model *m);

/* The checks model_load makes, on an open file, keeping nothing: what
 * `wick info` runs so that it refuses exactly the files `wick run` refuses.
 * f stays the caller's. */
int model_check_file(gguf_file *f, wk_error *err);

/* A context's working copy of a model: shares the file, hyper-parameters and
 * weight data with src but owns its layer table, whose matmul weights are
 * prepared (be_prepare_weight: repacked layouts, uploads) for the backend of
 * the part that runs them: part p's backend be[p] takes layers
 * [first[p], first[p + 1]) (first[0] = 0, first[n_parts] = n_layer), the
 * last part also the output head and the MTP block. One part: be[0] takes all.
 * Free with model_release_prepared with the same parts (never model_free);
 * src must outlive it. */
int model_prepare(model *dst, const model *src, be_backend *const *be, const uint32_t *first, int32_t n_parts,
                  wk_error *err);
void model_release_prepared(model *dst, be_backend *const *be, const uint32_t *first, int32_t n_parts);

/* ---- sequence state, as the forward pass sees it ---------------------------- */

/* One layer's state. Attention layers: K/V caches, kv head g position p at
 * k + g*kv_head_stride + p*d_k (F16 bits). Recurrent layers: conv
 * [(K−1)][conv_dim] and ssm [H_v][d_k][d_v] (F32). Unused pointers are NULL. */
typedef struct model_layer_state {
    uint16_t *k, *v;
    size_t kv_head_stride;     /* uint16_t units between kv heads */
    int kv_type;               /* enum be_kv_type: rows of be_kv_row_units(kv_type, d) units */
    float *conv, *ssm;
} model_layer_state;

typedef struct model_state {
    model_layer_state *layers; /* [n_layer] */
    int32_t n_ctx;             /* KV capacity in positions */
    int32_t n_past;            /* positions already in the state */
} model_state;

/* Per-layer element counts, for whoever allocates a model_state. */
size_t model_kv_elems_per_layer(const model *m, int32_t n_ctx); /* K plus V, F16 elements */
size_t model_conv_elems(const model *m);                        /* per recurrent layer, floats */
size_t model_ssm_elems(const model *m);                         /* per recurrent layer, floats */

/* ---- forward ----------------------------------------------------------------- */

enum model_logits_mode {
    MODEL_LOGITS_NONE = 0, /* no LM head (intermediate prefill chunk) */
    MODEL_LOGITS_LAST,     /* logits of the last token: 1 row */
    MODEL_LOGITS_ALL,      /* logits of every token: n_t rows */
    MODEL_LOGITS_ARGMAX,   /* the last token's greedy pick only (model_scratch_argmax); its logits
                              stay in backend memory, logits_host may receive them or not */
};

/* Activation buffers for batches of up to max_t tokens, allocated once from
 * the backend. Opaque; one per context. */
typedef struct model_scratch model_scratch;

int model_scratch_new(model_scratch **out, const model *m, be_backend *be, int32_t max_t,
                      wk_error *err);
void model_scratch_free(model_scratch *s);
/* Bytes model_scratch_new allocates for max_t tokens (backend memory plus
 * the host position buffer); 0 when max_t < 1. */
size_t model_scratch_bytes(const model *m, int32_t max_t);
int32_t model_scratch_max_tokens(const model_scratch *s);
/* Layer split: from layer first_layer on, a forward pass that starts in s continues in
 * next (another part's buffers on its own backend), the residual stream handed over
 * through the host. Both stay their owners' (free each with model_scratch_free); next
 * must hold as many tokens as s. WK_ENOMEM, WK_EINVAL for a second link or other sizes. */
int model_scratch_link(const model *m, model_scratch *s, model_scratch *next, uint32_t first_layer, wk_error *err);
/* After a MODEL_LOGITS_ARGMAX pass: the index of the last token's largest logit (NaNs skipped,
 * lowest index on ties; -1 if none) and that logit. */
int32_t model_scratch_argmax(const model_scratch *s, float *logit);

/* Runs n_t tokens (1 <= n_t <= scratch max) at positions st->n_past.. through
 * the whole model as one batch, appending to the state; on success
 * st->n_past += n_t and, unless mode is NONE, logits_host receives
 * n_vocab floats per requested row (host memory, row-major).
 * policy: NULL = dense attention. Errors: WK_ERANGE if the KV capacity would
 * overflow, WK_EINVAL for a token id outside the vocabulary (state untouched). */
int model_forward(const model *m, be_backend *be, model_scratch *s, model_state *st,
                  const int32_t *tokens, int32_t n_t, enum model_logits_mode mode,
                  float *logits_host, const be_attn_policy *policy, wk_error *err);

/* What a forward pass hands back, for callers that want more than model_forward's rows
 * (speculative verification, MTP). */
typedef struct model_rows {
    enum model_logits_mode mode;
    int32_t first;   /* MODEL_LOGITS_ALL: only rows [first, n_t) get logits (0: every row) */
    float *logits;   /* host: n_vocab floats per row with logits */
    float *hidden;   /* optional host [n_t][n_embd]: every row's final-normed hidden state
                        (RMSNorm(x; output_norm), what an MTP block reads), NULL: none */
} model_rows;

/* model_forward with the rows described by out. */
int model_forward_rows(const model *m, be_backend *be, model_scratch *s, model_state *st,
                       const int32_t *tokens, int32_t n_t, const model_rows *out,
                       const be_attn_policy *policy, wk_error *err);

/* One sequence's part of a batched forward pass (model_forward_batch). */
typedef struct model_batch_seq {
    model_state *st;              /* its state: tokens go to positions st->n_past.. */
    const int32_t *tokens;        /* [n_t] */
    int32_t n_t;                  /* >= 1: a decode token, a prefill chunk */
    enum model_logits_mode mode;  /* NONE, LAST or ALL (ARGMAX is for model_forward alone) */
    float *logits;                /* host: n_vocab floats per row with logits (LAST: 1, ALL: n_t) */
    const be_attn_policy *policy; /* NULL: dense */
} model_batch_seq;

/* Runs the tokens of n_seq sequences (each its own state, none twice) through the
 * model as one batch of Σ n_t rows (<= the scratch's max): the matmuls read each weight
 * once for all rows, attention and the recurrent layers run per sequence over its own
 * state. On success every st->n_past grows by its n_t and each sequence's logits are
 * what model_forward of that sequence alone gives; on the CPU bit for bit (rows are
 * grouped so that each takes the matmul kernel it takes alone: be_ops.exact_rows,
 * be_rows_as_one), elsewhere up to rounding. Checked before anything runs (states untouched): WK_EINVAL
 * for an empty or oversized batch, a shared state, a bad token or mode; WK_ERANGE when
 * a sequence's capacity would overflow. After a failure inside the pass the states'
 * positions are unchanged and their contents not to be trusted. */
int model_forward_batch(const model *m, be_backend *be, model_scratch *s, const model_batch_seq *seqs,
                        int32_t n_seq, wk_error *err);

/* The MTP block over n_t consecutive positions pos0.. (m->has_mtp): tokens[t] is x_p and
 * hidden (host [n_t][n_embd]) holds h_{p-1}, the main model's final-normed hidden state
 * one position back (or the MTP's own output when drafting further ahead). kv is the
 * block's one attention layer state, whose cache row i holds position kv_base + i; it
 * must hold positions [kv_base, pos0) and gets pos0.. appended (capacity n_ctx rows from
 * kv_base). out->hidden receives hm per row (the next step's h), logits as asked.
 * WK_EINVAL for a model without MTP, a bad token id or a batch the scratch cannot hold;
 * WK_ERANGE past the capacity. */
int model_mtp_forward(const model *m, be_backend *be, model_scratch *s, model_layer_state *kv,
                      int32_t kv_base, int32_t n_ctx, int32_t pos0, const int32_t *tokens,
                      const float *hidden, int32_t n_t, const model_rows *out, wk_error *err);

#endif
