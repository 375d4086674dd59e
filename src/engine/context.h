/* Inference context: one model, one backend (thread pool), scratch buffers
 * sized once, and the prefill/decode driver over sequences (engine/sequence.h).
 *
 * Typical use:
 *   eng_options o; eng_options_default(&o); o.n_ctx = 4096;
 *   eng_ctx_new(&ctx, model, &o, &err);
 *   eng_seq_new(&seq, ctx, o.n_ctx, &err);
 *   eng_prefill(ctx, seq, prompt, n, NULL, &err);   // logits of the last token
 *   for (;;) { id = pick(eng_logits(ctx)); eng_decode(ctx, seq, id, &err); }
 *
 * Not thread-safe: one engine thread drives a context and its sequences. The
 * only thing another thread may touch is the cancel flag it passed in. */
#ifndef WICK_ENGINE_CONTEXT_H
#define WICK_ENGINE_CONTEXT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "model/model.h"
#include "util/err.h"

typedef struct eng_seq eng_seq;
typedef struct eng_ctx eng_ctx;

/* The most sequences one step may advance (eng_options.n_seq). */
#define ENG_MAX_SEQ 256

/* Where a context runs its forward passes. */
enum eng_device {
    ENG_DEVICE_CPU = 0,  /* the CPU backend (default) */
    ENG_DEVICE_CUDA = 1, /* the CUDA backend on GPU eng_options.gpu (builds with WICK_HAVE_CUDA) */
};

/* Devices of one context in a layer split: consecutive layers per device, the activations
 * handed from one to the next, each layer's KV and recurrent state on its device, the
 * embedding on the first and the output head on the last (engine/placement.h balances
 * the layers by bytes). */
#define ENG_MAX_SPLIT 8
enum eng_split { ENG_SPLIT_LAYER = 0, ENG_SPLIT_TENSOR = 1 };

typedef struct eng_split_opts {
    int32_t n;                    /* devices listed (0 or 1: no split) */
    int32_t gpus[ENG_MAX_SPLIT];  /* CUDA ordinals in layer order (gpus[0] == eng_options.gpu). An
                                     ordinal may repeat: two parts on one GPU run the hand-over
                                     path on one card (a test aid). On the CPU device each entry is
                                     one more CPU backend (the engine's own tests of the hand-over). */
    int32_t mode;                 /* enum eng_split (tensor: refused, eng_split_check) */
    uint64_t gpu_mem;             /* per-GPU cap in bytes on what wick allocates there (0: none) */
} eng_split_opts;

typedef struct eng_options {
    int32_t device;           /* enum eng_device (default CPU) */
    int32_t gpu;              /* CUDA device ordinal (default 0); the first of split.gpus */
    eng_split_opts split;     /* several devices (default none) and the --gpu-mem cap */
    int32_t n_threads;        /* <= 0: physical cores (CPU device) */
    int32_t n_ctx;            /* default capacity for new sequences (positions) */
    int32_t n_ubatch;         /* tokens per forward chunk in prefill (default 512) */
    be_attn_policy policy;    /* attention policy (default dense) */
    int32_t kv_type;          /* enum be_kv_type of new sequences' KV cache (default F16) */
    int32_t n_seq;            /* sequences one eng_step may advance (default 1): the activation
                                 buffers hold a chunk of n_ubatch tokens plus n_seq - 1 more */
} eng_options;

/* CPU, n_threads 0, n_ctx 4096 (capped to the model's training context), n_ubatch 512, n_seq 1,
 * dense. */
void eng_options_default(eng_options *o);

/* Parses a --device value: "cpu", "cuda", "cuda:N" (GPU N) or "cuda:N,M,..." (a split
 * over up to ENG_MAX_SPLIT GPUs, repeats allowed) into *device, *gpu (the first GPU)
 * and split->n / split->gpus (1 entry without a list; the other fields are kept).
 * WK_EINVAL naming the value for anything else; WK_EUNSUPPORTED ("this wick was built
 * without CUDA") for cuda in a build without it. */
int eng_device_parse(const char *s, int32_t *device, int32_t *gpu, eng_split_opts *split, wk_error *err);

/* Parses a --split value ("layer" or "tensor") into split->mode. WK_EINVAL naming it. */
int eng_split_parse(const char *s, eng_split_opts *split, wk_error *err);

/* Whether this build can run split->mode over split->n devices: 0, or WK_EUNSUPPORTED
 * with the reason (a tensor split needs NCCL and is not implemented yet; a split over
 * several devices needs the CUDA device, or the CPU in tests). */
int eng_split_check(int32_t device, const eng_split_opts *split, wk_error *err);

/* Whether this build links NCCL (CMake found it beside the CUDA toolkit). */
bool eng_have_nccl(void);

/* "cpu" or "cuda" (for messages and reports). */
const char *eng_device_name(int32_t device);

/* Whether this build has the CUDA backend. */
bool eng_have_cuda(void);

/* Creates a context over a loaded model (borrowed: must outlive the context)
 * on the options' device (CUDA: weights are uploaded here, activations and
 * the sequences' KV/recurrent state live in GPU memory).
 * Errors: WK_ENOMEM, WK_EINVAL for nonsense options, WK_EUNSUPPORTED for
 * CUDA in a build without it, WK_EIO when no GPU can be used. */
int eng_ctx_new(eng_ctx **out, const model *m, const eng_options *o, wk_error *err);
void eng_ctx_free(eng_ctx *c);

const model *eng_ctx_model(const eng_ctx *c);
/* The backend of the first part (the embedding; the only one without a split). */
be_backend *eng_ctx_backend(eng_ctx *c);
/* Parts of the context (1 without a split) and the backend holding layer il's weights
 * and state (il >= n_layer: the last part, with the output head and the MTP block). */
int32_t eng_ctx_parts(const eng_ctx *c);
be_backend *eng_ctx_layer_backend(eng_ctx *c, uint32_t il);
/* Layers [*first, *end) of part p and the GPU it runs on (CPU: 0). */
void eng_ctx_part_layers(const eng_ctx *c, int32_t p, uint32_t *first, uint32_t *end, int32_t *gpu);
/* "cuda:0" or, split, "cuda:0 layers 0-31 + cuda:1 layers 32-63" into buf (CPU: "cpu"). */
const char *eng_ctx_where(const eng_ctx *c, char *buf, size_t cap);
const eng_options *eng_ctx_options(const eng_ctx *c);
int32_t eng_n_vocab(const eng_ctx *c);

/* Changes the attention policy used by later prefill/decode calls. Sequences
 * remember the fingerprint of the policy their KV was computed with. */
void eng_ctx_set_policy(eng_ctx *c, const be_attn_policy *p);

/* The approximate policy with the design's numbers: global 8192, window 8192,
 * dense_tail 2048, dense_tail_continue 128 (approx = true). */
void eng_policy_approx_default(be_attn_policy *p);

/* Fingerprint of what the context's KV is computed with: the policy's,
 * mixed with the KV type when it is not F16 (a Q8_0 cache holds other
 * numbers). Stored with sequences, checkpoints and archives. */
uint64_t eng_ctx_fingerprint(const eng_ctx *c);

/* KV cache bytes per token of a sequence of this context (all attention
 * layers, K and V). */
uint64_t eng_kv_bytes_per_token(const eng_ctx *c);

/* 64-bit fingerprint of a policy (dense policies all share one value; an
 * approximate one covers global, window, dense_tail, dense_tail_continue). */
uint64_t eng_policy_fingerprint(const be_attn_policy *p);

/* Return true to stop a prefill between chunks. */
typedef bool (*eng_cancel_fn)(void *user);
/* Called after each chunk: done of total tokens prefilled so far. */
typedef void (*eng_progress_fn)(void *user, int32_t done, int32_t total);

typedef struct eng_prefill_opts {
    eng_cancel_fn cancel;            /* optional */
    const atomic_bool *cancel_flag;  /* optional; checked between chunks */
    eng_progress_fn progress;        /* optional */
    void *user;
    bool all_logits;                 /* keep logits of every token (eng_logits_all) */
    /* The request's prompt when it is fed in several calls (cache boundaries):
     * it occupies positions [span_start, span_end). The approximate policy
     * counts its dense tail back from span_end (dense_tail when span_start is
     * 0, dense_tail_continue otherwise). span_end 0: this call is the whole
     * prompt ([position before the call, position after)). */
    int32_t span_start, span_end;
    /* optional: after each chunk, every row's final-normed hidden state (host [n][n_embd],
     * valid during the call) for the tokens at positions pos0.. (an MTP drafter catching up) */
    void (*hidden)(void *hidden_user, int32_t pos0, int32_t n, const float *rows);
    void *hidden_user;
} eng_prefill_opts;

/* Feeds n tokens at the sequence's current position, in chunks of n_ubatch
 * tokens, each chunk through the whole model as one batch. Afterwards
 * eng_logits() holds the logits after the last token (and eng_logits_all()
 * every row if asked). opts may be NULL.
 * Cancellation: checked before each chunk; returns WK_ECANCELLED with the
 * sequence consistent at the end of the last completed chunk
 * (eng_seq_pos tells where). Errors: WK_ERANGE when the sequence's capacity
 * would overflow (nothing is fed), WK_EINVAL for a bad token id. */
int eng_prefill(eng_ctx *c, eng_seq *s, const int32_t *tokens, int32_t n,
                const eng_prefill_opts *opts, wk_error *err);

/* Feeds one token; eng_logits() then holds the next-token logits. Decode
 * steps attend densely whatever the policy. */
int eng_decode(eng_ctx *c, eng_seq *s, int32_t token, wk_error *err);

/* eng_decode with the next-token logits in eng_seq_logits(s) instead of eng_logits() (which
 * is not updated): what a thread driving one of several sequences reads without the
 * context's lock; a batched step's logits stay where the step put them (no copy). */
int eng_decode_own(eng_ctx *c, eng_seq *s, int32_t token, wk_error *err);

/* eng_decode, then the greedy pick of the next token (the lowest index of the largest logit,
 * NaNs skipped; -1 when every logit is NaN or -inf: eng_sampler_sample's greedy rule) into
 * *next, made where the logits are: a GPU backend brings one index to the host, not the
 * vocabulary's logits. eng_logits() is undefined afterwards. */
int eng_decode_greedy(eng_ctx *c, eng_seq *s, int32_t token, int32_t *next, wk_error *err);

/* A decode step of n tokens as one batch (n <= n_ubatch; dense attention, as decode):
 * speculative verification. Afterwards eng_logits_all() holds the logits of rows
 * [first, n) (n - first rows; row i of the batch at index i - first), eng_logits() the
 * last row's, and with hidden eng_hidden_all() every row's final-normed hidden state.
 * Errors as eng_prefill; WK_EINVAL for first outside [0, n) or n > n_ubatch. */
int eng_decode_rows(eng_ctx *c, eng_seq *s, const int32_t *tokens, int32_t n, int32_t first, bool hidden,
                    wk_error *err);

/* One sequence's part of a batched step (eng_step). */
typedef struct eng_step_item {
    eng_seq *seq;
    const int32_t *tokens;
    int32_t n;                    /* >= 1 */
    bool prefill;                 /* a prompt chunk: the context's attention policy over the span
                                     (eng_prefill_opts); else decode tokens: dense */
    int32_t span_start, span_end; /* prefill: the prompt's span; span_end 0: this chunk */
    bool logits;                  /* the last row's logits into eng_seq_logits */
} eng_step_item;

/* Advances n_items sequences (each at most once) in one forward pass over all their
 * tokens (model_forward_batch: each weight read once for the rows of all; on the CPU
 * every sequence's numbers are bit for bit those of eng_prefill / eng_decode alone).
 * The rows in all may not exceed n_ubatch + n_seq - 1 (eng_options). On success every
 * sequence holds its tokens and, where asked, eng_seq_logits() the next-token logits.
 * Errors as eng_prefill, for the whole step: no sequence moves. */
int eng_step(eng_ctx *c, const eng_step_item *items, int32_t n_items, wk_error *err);

/* The rows one eng_step may hold (n_ubatch + n_seq - 1). */
int32_t eng_step_max_tokens(const eng_ctx *c);

/* The most tokens a batch may hold for each of its rows to come out exactly as in a
 * batch of one (be_ops.exact_rows); 0: the backend promises nothing. */
int32_t eng_exact_batch(const eng_ctx *c);

/* For tests of error paths: the n-th forward call from now (prefill chunk
 * or decode step, counting from 1) fails with WK_EIO as a backend error
 * would, leaving the sequence as a failed step does. 0 turns it off. */
void eng_ctx_fail_after(eng_ctx *c, int32_t n);

/* Logits (n_vocab floats) after the last token of the latest prefill/decode.
 * Valid until the next call on this context. */
const float *eng_logits(const eng_ctx *c);

/* All rows of the latest prefill made with all_logits: [n_rows][n_vocab]. */
const float *eng_logits_all(const eng_ctx *c, int32_t *n_rows);

/* The hidden rows of the latest eng_decode_rows made with hidden: [n_rows][n_embd]. */
const float *eng_hidden_all(const eng_ctx *c, int32_t *n_rows);

/* The context's prepared model and activation buffers, for forward passes beside the
 * main one (engine/spec_mtp.c: the MTP block shares them between steps): the buffers and
 * backend of the last part, which holds the output head. */
model_scratch *eng_ctx_head_scratch(eng_ctx *c);
be_backend *eng_ctx_head_backend(eng_ctx *c);
const model *eng_ctx_prepared(const eng_ctx *c);

#endif
