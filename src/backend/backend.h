/* The ops interface between the forward passes (model/) and the machines
 * that run them (backend/cpu, later backend/cuda).
 *
 * Ops are coarse: a whole matmul over a batch of rows, a whole attention over a
 * key range, a whole Gated DeltaNet scan, a whole MoE FFN. A backend is free to
 * fuse and parallelize inside an op; the forward pass stays a readable sequence
 * of calls.
 *
 * Memory: weights are be_weight views (mmap'd on CPU). Activations are plain
 * float arrays obtained from be_alloc (host memory on CPU, device memory on a
 * GPU backend); model code only does pointer arithmetic on them. Results that
 * the host must read (logits) go through be_to_host.
 *
 * Dispatch: a be_backend carries a table of function pointers (be_ops) and
 * its private state; the inline wrappers below are what callers use.
 * All ops are synchronous on CPU. In-place use is allowed where stated. */
#ifndef WICK_BACKEND_BACKEND_H
#define WICK_BACKEND_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "util/argmax.h"
#include "util/err.h"

/* ---- weights --------------------------------------------------------------- */

/* A weight tensor in its stored (possibly quantized) type. Rows are ne[0]
 * elements; a 2-D weight {K, M} maps K inputs to M outputs (y[o] = Σ W[o][i] x[i]);
 * a 3-D expert pack {K, M, E} holds E such matrices, nb2 bytes apart. */
typedef struct be_weight {
    uint32_t type;      /* enum qt_type */
    int64_t ne[4];      /* missing dims are 1 */
    size_t nb1;         /* bytes per row */
    size_t nb2;         /* bytes per matrix (expert stride) */
    const void *data;   /* NULL: tensor absent */
    const char *name;   /* for error messages; borrowed */
    void *prep;         /* backend's prepared (e.g. repacked) form, owned by the backend;
                           NULL = use data as stored */
    bool file_mapped;   /* data lies in a read-only file mapping (wk_mapfile_drop allowed) */
} be_weight;

/* View of expert e of a 3-D pack as a 2-D weight. */
static inline be_weight be_weight_expert(const be_weight *w, int64_t e)
{
    be_weight r = *w;
    r.ne[2] = 1;
    r.prep = NULL;
    r.data = (const uint8_t *)w->data + (size_t)e * w->nb2;
    return r;
}

/* ---- op parameters ---------------------------------------------------------- */

enum be_rope_mode {
    BE_ROPE_NORM = 0,   /* pairs (x[2i], x[2i+1]) — llama */
    BE_ROPE_NEOX = 1,   /* pairs (x[i], x[i + n_rot/2]) — qwen2/3 */
    BE_ROPE_IMROPE = 2, /* NEOX pairing, per-pair position component by sections — qwen35 */
};

typedef struct be_rope_params {
    enum be_rope_mode mode;
    int32_t n_rot;              /* rotated dims per head (even, <= head dim); the rest is copied */
    float theta;                /* rope.freq_base */
    float freq_scale;           /* 1/linear scaling factor; 1 = none */
    const float *freq_factors;  /* optional [n_rot/2] divisors (rope_freqs.weight), NULL if absent */
    int32_t sections[4];        /* IMROPE: dimension_sections (t, h, w, e) */
} be_rope_params;

/* Attention policy: how attention over the cached keys is computed.
 * approx = false: exact dense causal attention (the other fields are ignored).
 * approx = true: block-sparse approximate attention. A query at position i
 * attends key j <= i only when
 *   j < global            (the first `global` keys: instructions, system prompt),
 *   or i - j < window     (the last `window` keys up to and including i),
 *   or i is in the dense tail;
 * key tiles outside that set are never read (the work falls with the window).
 * Request level (engine/, CLI, server): the dense tail is the last dense_tail
 * prompt tokens of a cold request, the last dense_tail_continue tokens when
 * the prompt continues cached state; decode steps are always dense.
 * Call level (be_attn_args.policy, resolved by the engine per forward chunk):
 * dense_tail counts the last queries of this call that attend densely and
 * dense_tail_continue is ignored. window < 1 acts as 1 (a query sees itself).
 * A prompt shorter than global + window is unaffected (bit-identical to dense).
 * Its fingerprint (engine/) is stored with KV ranges and checkpoints. */
typedef struct be_attn_policy {
    bool approx;
    int32_t global;
    int32_t window;
    int32_t dense_tail;
    int32_t dense_tail_continue;
} be_attn_policy;

/* KV cache element types. A cache row (one kv head, one position, d
 * elements) takes be_kv_row_units(type, d) uint16_t units: d F16 values, or
 * d/32 Q8_0 blocks (34 bytes: an F16 scale + 32 int8, ggml's block_q8_0).
 * Q8_0 needs d % 32 == 0. */
enum be_kv_type { BE_KV_F16 = 0, BE_KV_Q8_0 = 1 };

static inline size_t be_kv_row_units(int kv_type, size_t d)
{
    return kv_type == BE_KV_Q8_0 ? d / 32 * 17 : d;
}

/* One sequence of a recorded decode step (be_step_begin): key is any pointer that stays
 * with the sequence (the engine's sequence), pos its first position in the step, n_t its rows. */
typedef struct be_step_seq {
    const void *key;
    int32_t pos, n_t;
} be_step_seq;

/* Causal attention of n_q query tokens over an F16 or Q8_0 KV range.
 * q: query i, head h at q + i*q_stride + h*q_head_stride (F32, after norm and
 *   RoPE; q_head_stride 0 means d_k).
 * K/V cache: kv head g, position p at k + g*kv_head_stride + p*be_kv_row_units(kv_type, d_k)
 *   (uint16_t units: F16 bits, or Q8_0 blocks read in place), likewise v with
 *   d_v. K is stored after RoPE/norm.
 * Query i sits at position q_pos0 + i and attends keys [0, q_pos0 + i];
 *   n_kv (>= q_pos0 + n_q) is the number of valid cache positions.
 * GQA: query head h reads kv head h / (n_head / n_head_kv).
 * out: query i, head h at out + i*out_stride + h*d_v (F32). */
typedef struct be_attn_args {
    const float *q;
    size_t q_stride, q_head_stride;
    int32_t n_q, q_pos0;
    const uint16_t *k, *v;
    size_t kv_head_stride;
    int32_t n_kv;
    int32_t n_head, n_head_kv, d_k, d_v;
    float scale;                  /* usually 1/sqrt(d_k) */
    const be_attn_policy *policy; /* NULL = dense; call level (see be_attn_policy) */
    float *out;
    size_t out_stride;
    int64_t *tiles_visited;       /* optional (tests, stats): += (query block, key tile) pairs computed */
    int kv_type;                  /* enum be_kv_type (0 = F16) */
} be_attn_args;

/* One segment's part of be_attend_seqs: its new K and V rows (F32, the n_q rows of its
 * be_attn_args) and the caches they go to (those its a.k and a.v read). */
typedef struct be_kv_rows {
    uint16_t *k_cache, *v_cache;
    const float *k, *v;
    size_t k_stride, v_stride;
} be_kv_rows;

/* Gated DeltaNet scan over n_t tokens of one sequence (spec architectures.md 8.5).
 * Inputs are the conv outputs after SiLU, before normalization:
 *   q, k: token t, key head i at q + t*qk_stride + i*d_k;  v: v + t*v_stride + j*d_v.
 *   alpha, beta: raw projections [n_t][n_hv] (a_t, b_t of the spec).
 * The op L2-normalizes q and k per head (eps), scales q by 1/sqrt(d_k),
 * forms β = σ(b), g = ssm_a · softplus(a + dt_bias), and runs the delta rule
 * with value head j reading key head j mod n_hk.
 * state: [n_hv][d_k][d_v] F32 (row = key dim), read and updated in place.
 * out: token t, value head j at out + t*out_stride + j*d_v.
 * chunked: use the chunked WY form (prefill) instead of the token-by-token
 * recurrence; both give the same result up to rounding. */
typedef struct be_gdn_args {
    const float *q, *k, *v;
    size_t qk_stride, v_stride;
    const float *alpha, *beta;
    const float *ssm_a, *dt_bias; /* [n_hv] */
    int32_t n_t, n_hk, n_hv, d_k, d_v;
    float eps;
    float *state;
    float *out;
    size_t out_stride;
    bool chunked;
} be_gdn_args;

/* Routed-expert SwiGLU FFN: for each token t,
 *   out[t] = Σ_{j<k} w[t][j] · down[e] · (SiLU(gate[e]·u_t) ⊙ up[e]·u_t),  e = ids[t][j].
 * gate/up/down are 3-D packs ({n_embd, n_ff, E}, {n_ff, n_embd, E}); when up.data is
 * NULL, gate is the fused gate_up pack {n_embd, 2·n_ff, E} (first half gate).
 * Each pack may have its own type. out is overwritten. */
typedef struct be_moe_shared be_moe_shared;
typedef struct be_moe_args {
    const be_weight *gate, *up, *down;
    const float *u;        /* [n_t][n_embd] */
    int32_t n_t, k;
    const int32_t *ids;    /* [n_t][k] */
    const float *weights;  /* [n_t][k] */
    float *out;            /* [n_t][n_embd] */
    const be_moe_shared *shared; /* NULL, or (backends whose be_ops.moe_shared is set) a
                                    shared expert that the op adds to out */
} be_moe_args;

/* The shared expert of a MoE layer (qwen35moe), gated per token:
 *   out[t] += σ(logit[t]) · down · (SiLU(gate·u_t) ⊙ up·u_t)
 * (2-D weights {n_embd, n_ff_sh}, {n_ff_sh, n_embd}; logit: [n_t]). */
struct be_moe_shared {
    const be_weight *gate, *up, *down;
    const float *logit;
};

/* ---- the backend ------------------------------------------------------------ */

typedef struct be_backend be_backend;

typedef struct be_ops {
    const char *name;
    void (*free)(be_backend *be);
    void *(*alloc)(be_backend *be, size_t bytes);
    void (*release)(be_backend *be, void *p);
    void (*to_host)(be_backend *be, void *dst, const void *src, size_t bytes);
    /* Optional (NULL: zeros copied from the host), see be_zero. */
    void (*zero)(be_backend *be, void *dst, size_t bytes);
    /* Optional (NULL: calloc / free), see be_host_alloc. */
    void *(*host_alloc)(be_backend *be, size_t bytes);
    void (*host_free)(be_backend *be, void *p);
    void (*from_host)(be_backend *be, void *dst, const void *src, size_t bytes);
    int (*prepare_weight)(be_backend *be, be_weight *w, wk_error *err);
    void (*release_weight)(be_backend *be, be_weight *w);
    int (*matmul)(be_backend *be, const be_weight *w, const float *x, int64_t n_rows, float *y,
                  wk_error *err);
    int (*get_rows)(be_backend *be, const be_weight *w, const int32_t *ids, int64_t n, float *y,
                    wk_error *err);
    void (*rms_norm)(be_backend *be, float *y, size_t y_stride, const float *x, size_t x_stride,
                     int64_t n_rows, int64_t n, const float *w, float eps);
    void (*rope_cache)(be_backend *be, float *cs, const int32_t *pos, int64_t n_t,
                       const be_rope_params *p);
    void (*rope)(be_backend *be, float *x, int64_t n_t, size_t t_stride, int32_t n_head,
                 int32_t head_stride, const float *cs, const be_rope_params *p);
    void (*kv_store)(be_backend *be, uint16_t *cache, size_t head_stride, int32_t pos0,
                     const float *x, size_t x_stride, int64_t n_t, int32_t n_head_kv, int32_t d);
    int (*attention)(be_backend *be, const be_attn_args *a, wk_error *err);
    /* Optional (NULL: be_attend_seqs stores and attends one segment at a time). */
    int (*attend_seqs)(be_backend *be, int32_t first, const be_attn_args *a, const be_kv_rows *kv, int32_t n,
                       wk_error *err);
    void (*ssm_conv)(be_backend *be, float *y, size_t y_stride, const float *x, size_t x_stride,
                     int64_t n_t, int64_t n_ch, const float *w, int32_t k, float *state);
    int (*gdn)(be_backend *be, const be_gdn_args *a, wk_error *err);
    /* Optional (NULL: be_ssm_conv_seqs / be_gdn_seqs call ssm_conv / gdn once per sequence). */
    void (*ssm_conv_seqs)(be_backend *be, float *y, size_t y_stride, const float *x, size_t x_stride,
                          int32_t n_seq, int64_t n_ch, const float *w, int32_t k, float *const *states);
    int (*gdn_seqs)(be_backend *be, const be_gdn_args *a, float *const *states, wk_error *err);
    void (*moe_route)(be_backend *be, const float *logits, int64_t n_t, int32_t n_expert, int32_t k,
                      int32_t *ids, float *weights);
    /* Optional (NULL: be_moe_gate runs matmul and moe_route). */
    int (*moe_gate)(be_backend *be, const be_weight *router, const be_weight *shgate, const float *u, int64_t n_t,
                    int32_t k, float *logits, float *sh_logit, int32_t *ids, float *weights, wk_error *err);
    int (*moe_ffn)(be_backend *be, const be_moe_args *a, wk_error *err);
    bool moe_shared; /* moe_ffn runs be_moe_args.shared (else the caller composes it) */
    void (*add)(be_backend *be, float *y, const float *a, const float *b, int64_t n);
    void (*add_bias)(be_backend *be, float *y, const float *bias, int64_t n_rows, int64_t n);
    void (*swiglu)(be_backend *be, float *y, const float *gate, const float *up, int64_t n);
    void (*mul_sigmoid)(be_backend *be, float *y, size_t y_stride, const float *g, size_t g_stride,
                        int64_t n_rows, int64_t n);
    void (*mul_silu)(be_backend *be, float *y, const float *z, int64_t n);
    void (*add_scaled_sigmoid)(be_backend *be, float *y, const float *x, const float *s,
                               int64_t n_rows, int64_t n);
    /* Q8_0 KV cache: kv_store into Q8_0 rows (NULL: the backend has no Q8_0
     * cache; attention then refuses kv_type Q8_0 through be_attention). */
    void (*kv_store_q8_0)(be_backend *be, uint16_t *cache, size_t head_stride, int32_t pos0,
                          const float *x, size_t x_stride, int64_t n_t, int32_t n_head_kv, int32_t d);
    /* Optional (NULL: nothing to do), see be_step_begin / be_step_end / be_status. */
    void (*step_begin)(be_backend *be, const be_step_seq *seqs, int32_t n_seq);
    int (*step_end)(be_backend *be, int rc);
    int (*status)(be_backend *be, wk_error *err);
    /* Optional (NULL: be_to_host_rows copies row by row). */
    void (*to_host_rows)(be_backend *be, void *const *dst, const void *src, size_t row_bytes, int32_t n);
    /* Optional (NULL: be_rms_norm_gated calls rms_norm then mul_silu). */
    void (*rms_norm_gated)(be_backend *be, float *y, const float *x, int64_t n_rows, int64_t n, const float *w,
                           float eps, const float *z);
    /* Optional (NULL: be_matmul_multi calls matmul for each weight). */
    int (*matmul_multi)(be_backend *be, const be_weight *const *w, int n, const float *x, int64_t n_rows,
                        float *const *y, wk_error *err);
    /* Optional (NULL: be_argmax copies the row to host and picks there). */
    int32_t (*argmax)(be_backend *be, const float *x, int32_t n, float *host, float *max);
    /* Optional (NULL: be_copy goes through a host buffer). */
    void (*copy)(be_backend *be, void *dst, const void *src, size_t bytes);
    /* Batches of up to this many tokens compute every row exactly as a batch of one
     * does (the batched matmul kernels start above it): speculative verification then
     * sees plain decoding's numbers. 0: no such promise (equal up to rounding). */
    int32_t exact_rows;
    /* Optional (NULL: no such mode), see be_rows_as_one. */
    void (*rows_as_one)(be_backend *be, bool on);
} be_ops;

struct be_backend {
    const be_ops *ops;
    void *impl;
};

/* Allocation: device-visible activation memory (zeroed). NULL on failure. */
static inline void *be_alloc(be_backend *be, size_t bytes) { return be->ops->alloc(be, bytes); }
static inline void be_release(be_backend *be, void *p) { be->ops->release(be, p); }
/* Copies bytes from backend memory src to host memory dst. */
static inline void be_to_host(be_backend *be, void *dst, const void *src, size_t bytes)
{
    be->ops->to_host(be, dst, src, bytes);
}
/* Sets bytes of backend memory dst to zero (a fresh sequence's recurrent state), in the
 * backend's own order like its other ops. */
static inline void be_zero(be_backend *be, void *dst, size_t bytes)
{
    if (be->ops->zero) {
        be->ops->zero(be, dst, bytes);
        return;
    }
    static const unsigned char zeros[4096] = {0};
    for (size_t i = 0; i < bytes; i += sizeof zeros)
        be->ops->from_host(be, (char *)dst + i, zeros, bytes - i < sizeof zeros ? bytes - i : sizeof zeros);
}
/* Host memory that be_to_host fills fastest (pinned on a GPU: copied into directly, not
 * through a staging buffer), for results the host reads every step (logits); zeroed. NULL
 * when out of memory. Freed with be_host_free on the same backend, before be_free. */
static inline void *be_host_alloc(be_backend *be, size_t bytes)
{
    return be->ops->host_alloc ? be->ops->host_alloc(be, bytes) : calloc(1, bytes ? bytes : 1);
}
static inline void be_host_free(be_backend *be, void *p)
{
    if (p && be->ops->host_free) be->ops->host_free(be, p);
    else free(p);
}
/* Copies n consecutive rows of row_bytes at backend memory src to host memory dst[0..n)
 * (a batched step's logits, one buffer per sequence): one transfer where the backend can. */
static inline void be_to_host_rows(be_backend *be, void *const *dst, const void *src, size_t row_bytes, int32_t n)
{
    if (be->ops->to_host_rows) {
        be->ops->to_host_rows(be, dst, src, row_bytes, n);
        return;
    }
    for (int32_t i = 0; i < n; i++) be->ops->to_host(be, dst[i], (const char *)src + (size_t)i * row_bytes, row_bytes);
}
/* Copies bytes from host memory src to backend memory dst. */
static inline void be_from_host(be_backend *be, void *dst, const void *src, size_t bytes)
{
    be->ops->from_host(be, dst, src, bytes);
}
/* Copies bytes between two blocks of backend memory (they must not overlap), in order
 * with the ops around it: a snapshot of recurrent state for speculative decoding stays on
 * the device. Without the op, through a host buffer (a failed allocation copies nothing
 * and returns WK_ENOMEM). */
static inline int be_copy(be_backend *be, void *dst, const void *src, size_t bytes)
{
    if (be->ops->copy) {
        be->ops->copy(be, dst, src, bytes);
        return 0;
    }
    void *h = malloc(bytes ? bytes : 1);
    if (!h) return WK_ENOMEM;
    be->ops->to_host(be, h, src, bytes);
    be->ops->from_host(be, dst, h, bytes);
    free(h);
    return 0;
}
/* Frees the backend (and its thread pool). NULL is fine. */
static inline void be_free(be_backend *be)
{
    if (be) be->ops->free(be);
}

/* A decode step (one forward pass of a few rows per sequence: one token, a batch of
 * drafts to verify, or one token of each of several sequences) may be bracketed by
 * be_step_begin(be, its sequences in the order of the pass's segments) / be_step_end(be,
 * rc of the forward pass), so that a backend can record the step once and replay it
 * (CUDA graphs); the pass's KV stores and attention come through be_attend_seqs, which
 * says whose positions they take. be_step_end returns rc, or 1 when the step did not
 * run: the caller then resets the sequences' positions and runs the pass again without
 * the brackets. A backend may decline any step (it then runs as called);
 * backends without the ops run every step as called. */
static inline void be_step_begin(be_backend *be, const be_step_seq *seqs, int32_t n_seq)
{
    if (be->ops->step_begin) be->ops->step_begin(be, seqs, n_seq);
}
static inline int be_step_end(be_backend *be, int rc)
{
    return be->ops->step_end ? be->ops->step_end(be, rc) : rc;
}
/* The first error kept from an asynchronous op that returns void (0 if none;
 * its message into err). Backends whose ops fail synchronously return 0. */
static inline int be_status(be_backend *be, wk_error *err)
{
    return be->ops->status ? be->ops->status(be, err) : 0;
}

/* The lowest index of the largest of the n floats at backend memory x, NaNs skipped, -1 if
 * none (wk_argmax_f32's rule; -0 and +0 count as equal), its value into *max: a greedy pick
 * without bringing a vocabulary of logits to the host where the backend can. host: n floats
 * of host memory the row may be copied to (be_argmax_on_host: always, the pick made there). */
static inline int32_t be_argmax_on_host(be_backend *be, const float *x, int32_t n, float *host, float *max)
{
    be_to_host(be, host, x, sizeof(float) * (size_t)n);
    const int32_t i = wk_argmax_f32(host, n);
    *max = i >= 0 ? host[i] : 0.0f;
    return i;
}
static inline int32_t be_argmax(be_backend *be, const float *x, int32_t n, float *host, float *max)
{
    return be->ops->argmax ? be->ops->argmax(be, x, n, host, max) : be_argmax_on_host(be, x, n, host, max);
}

/* While on, every row of be_matmul, be_matmul_multi and be_moe_ffn comes out bit for
 * bit as in a call of one row, whatever the number of rows (the weight still read once
 * for all): decode tokens of several sequences in one pass, each as its own forward
 * computes it. Off (the default) the backend picks its kernels by the row count
 * (be_ops.exact_rows). Backends without the mode ignore it (be_has_rows_as_one). */
static inline bool be_has_rows_as_one(const be_backend *be) { return be->ops->rows_as_one != NULL; }
static inline void be_rows_as_one(be_backend *be, bool on)
{
    if (be->ops->rows_as_one) be->ops->rows_as_one(be, on);
}

/* Prepares a 2-D weight for repeated matmuls (e.g. a repacked copy for the
 * fastest kernels; an upload on a GPU), kept in w->prep. Call once at load;
 * undo with be_release_weight before the backend is freed. A backend without
 * a better layout leaves w->prep NULL and returns 0. */
static inline int be_prepare_weight(be_backend *be, be_weight *w, wk_error *err)
{
    return be->ops->prepare_weight(be, w, err);
}
static inline void be_release_weight(be_backend *be, be_weight *w)
{
    be->ops->release_weight(be, w);
}

/* y[n_rows][M] = x[n_rows][K] · Wᵀ for W {K, M} of any weight type (activations
 * converted to the weight type's partner format as llama.cpp does). x and y
 * are contiguous and must not overlap. Fails only on an unsupported type. */
static inline int be_matmul(be_backend *be, const be_weight *w, const float *x, int64_t n_rows,
                            float *y, wk_error *err)
{
    return be->ops->matmul(be, w, x, n_rows, y, err);
}

/* be_matmul of n weights that share their input x (q/k/v, gate/up, a DeltaNet
 * layer's projections): y[i][n_rows][M_i] = x · w[i]ᵀ, the same results, but a
 * backend may run them together (one GPU launch for a decode step's rows). */
static inline int be_matmul_multi(be_backend *be, const be_weight *const *w, int n, const float *x, int64_t n_rows,
                                  float *const *y, wk_error *err)
{
    if (be->ops->matmul_multi) return be->ops->matmul_multi(be, w, n, x, n_rows, y, err);
    for (int i = 0; i < n; i++) {
        int rc = be->ops->matmul(be, w[i], x, n_rows, y[i], err);
        if (rc) return rc;
    }
    return 0;
}

/* Embedding lookup: y[i] = row ids[i] of w (dequantized to F32, ne[0] floats). */
static inline int be_get_rows(be_backend *be, const be_weight *w, const int32_t *ids, int64_t n,
                              float *y, wk_error *err)
{
    return be->ops->get_rows(be, w, ids, n, y, err);
}

/* RMSNorm of n_rows rows of n floats: y = x / sqrt(mean(x²) + eps) ⊙ w (w may be
 * NULL = ones). In place (y == x, same stride) allowed. */
static inline void be_rms_norm(be_backend *be, float *y, size_t y_stride, const float *x,
                               size_t x_stride, int64_t n_rows, int64_t n, const float *w, float eps)
{
    be->ops->rms_norm(be, y, y_stride, x, x_stride, n_rows, n, w, eps);
}

/* Fills cs [n_t][n_rot] with, per token, the cosines then the sines of every rotated pair's angle
 * for token positions pos[t] — computed once per batch, shared by all layers
 * and by q and k. */
static inline void be_rope_cache(be_backend *be, float *cs, const int32_t *pos, int64_t n_t,
                                 const be_rope_params *p)
{
    be->ops->rope_cache(be, cs, pos, n_t, p);
}

/* In-place RoPE on n_t tokens × n_head heads: head h of token t at
 * x + t*t_stride + h*head_stride, with angles from be_rope_cache. */
static inline void be_rope(be_backend *be, float *x, int64_t n_t, size_t t_stride, int32_t n_head,
                           int32_t head_stride, const float *cs, const be_rope_params *p)
{
    be->ops->rope(be, x, n_t, t_stride, n_head, head_stride, cs, p);
}

/* Converts n_t tokens of K or V (token t, head g at x + t*x_stride + g*d) to F16
 * and writes them to cache positions pos0.. (head g, position p at
 * cache + g*head_stride + p*d). */
static inline void be_kv_store(be_backend *be, uint16_t *cache, size_t head_stride, int32_t pos0,
                               const float *x, size_t x_stride, int64_t n_t, int32_t n_head_kv,
                               int32_t d)
{
    be->ops->kv_store(be, cache, head_stride, pos0, x, x_stride, n_t, n_head_kv, d);
}

/* Whether the backend keeps a KV cache of this type. */
static inline bool be_kv_type_supported(const be_backend *be, int kv_type)
{
    return kv_type == BE_KV_F16 || (kv_type == BE_KV_Q8_0 && be->ops->kv_store_q8_0);
}

/* be_kv_store for a cache of kv_type (rows of be_kv_row_units(kv_type, d)
 * units). Callers check be_kv_type_supported first (at sequence creation). */
static inline void be_kv_store_typed(be_backend *be, int kv_type, uint16_t *cache, size_t head_stride,
                                     int32_t pos0, const float *x, size_t x_stride, int64_t n_t,
                                     int32_t n_head_kv, int32_t d)
{
    if (kv_type == BE_KV_Q8_0)
        be->ops->kv_store_q8_0(be, cache, head_stride, pos0, x, x_stride, n_t, n_head_kv, d);
    else
        be->ops->kv_store(be, cache, head_stride, pos0, x, x_stride, n_t, n_head_kv, d);
}

/* See be_attn_args. Fails on inconsistent arguments or a KV type the
 * backend does not keep. */
static inline int be_attention(be_backend *be, const be_attn_args *a, wk_error *err)
{
    if (!be_kv_type_supported(be, a->kv_type))
        return wk_fail(err, WK_EUNSUPPORTED, "%s backend: no attention over a Q8_0 KV cache", be->ops->name);
    return be->ops->attention(be, a, err);
}

/* One layer's KV stores and attention for n segments of a forward pass, segments
 * first.. in the pass's order (a recorded step's sequences, be_step_begin): for each i,
 * kv[i]'s K and V rows stored at a[i].q_pos0 (a[i].n_q rows in a[i]'s cache layout),
 * then a[i] attended. What be_kv_store_typed twice and be_attention give segment by
 * segment, which is what backends without the op run. */
static inline int be_attend_seqs(be_backend *be, int32_t first, const be_attn_args *a, const be_kv_rows *kv,
                                 int32_t n, wk_error *err)
{
    if (be->ops->attend_seqs) return be->ops->attend_seqs(be, first, a, kv, n, err);
    for (int32_t i = 0; i < n; i++) {
        be_kv_store_typed(be, a[i].kv_type, kv[i].k_cache, a[i].kv_head_stride, a[i].q_pos0, kv[i].k, kv[i].k_stride,
                          a[i].n_q, a[i].n_head_kv, a[i].d_k);
        be_kv_store_typed(be, a[i].kv_type, kv[i].v_cache, a[i].kv_head_stride, a[i].q_pos0, kv[i].v, kv[i].v_stride,
                          a[i].n_q, a[i].n_head_kv, a[i].d_v);
        int rc = be_attention(be, &a[i], err);
        if (rc) return rc;
    }
    return 0;
}

/* Causal depthwise conv + SiLU over n_t tokens of n_ch channels, kernel w
 * [n_ch][k] (tap k-1 multiplies the newest input); state [(k-1)][n_ch] holds
 * the previous k-1 inputs (oldest first) and is updated to the last k-1. */
static inline void be_ssm_conv(be_backend *be, float *y, size_t y_stride, const float *x,
                               size_t x_stride, int64_t n_t, int64_t n_ch, const float *w, int32_t k,
                               float *state)
{
    be->ops->ssm_conv(be, y, y_stride, x, x_stride, n_t, n_ch, w, k, state);
}

/* See be_gdn_args. */
static inline int be_gdn(be_backend *be, const be_gdn_args *a, wk_error *err)
{
    return be->ops->gdn(be, a, err);
}

/* Decode of several sequences at once, one token each: row i of x and y belongs to
 * sequence i, whose conv state is states[i]; the same result as a be_ssm_conv per row. */
static inline void be_ssm_conv_seqs(be_backend *be, float *y, size_t y_stride, const float *x, size_t x_stride,
                                    int32_t n_seq, int64_t n_ch, const float *w, int32_t k, float *const *states)
{
    if (be->ops->ssm_conv_seqs) {
        be->ops->ssm_conv_seqs(be, y, y_stride, x, x_stride, n_seq, n_ch, w, k, states);
        return;
    }
    for (int32_t i = 0; i < n_seq; i++)
        be->ops->ssm_conv(be, y + (size_t)i * y_stride, y_stride, x + (size_t)i * x_stride, x_stride, 1, n_ch, w, k,
                          states[i]);
}

/* The arguments of rows i0 .. i0 + n - 1 of a (inputs and outputs advanced, n_t = n). */
static inline be_gdn_args be_gdn_rows(const be_gdn_args *a, int32_t i0, int32_t n)
{
    be_gdn_args g = *a;
    g.q += (size_t)i0 * a->qk_stride;
    g.k += (size_t)i0 * a->qk_stride;
    g.v += (size_t)i0 * a->v_stride;
    g.alpha += (size_t)i0 * (size_t)a->n_hv;
    g.beta += (size_t)i0 * (size_t)a->n_hv;
    g.out += (size_t)i0 * a->out_stride;
    g.n_t = n;
    return g;
}

/* be_gdn of a->n_t sequences of one token each: row i of the inputs and of out belongs to
 * sequence i, whose state is states[i] (a->state is not used); the same result as a
 * be_gdn per row. */
static inline int be_gdn_seqs(be_backend *be, const be_gdn_args *a, float *const *states, wk_error *err)
{
    if (be->ops->gdn_seqs) return be->ops->gdn_seqs(be, a, states, err);
    for (int32_t i = 0; i < a->n_t; i++) {
        be_gdn_args g = be_gdn_rows(a, i, 1);
        g.state = states[i];
        int rc = be->ops->gdn(be, &g, err);
        if (rc) return rc;
    }
    return 0;
}

/* Softmax router: for each token, p = softmax(logits[t]) over n_expert; picks the
 * top k (ties → lower id) and writes ids[t][k] and the renormalized weights
 * p / max(Σ selected p, 6.1035e-5). */
static inline void be_moe_route(be_backend *be, const float *logits, int64_t n_t, int32_t n_expert,
                                int32_t k, int32_t *ids, float *weights)
{
    be->ops->moe_route(be, logits, n_t, n_expert, k, ids, weights);
}

/* An MoE layer's router on n_t rows of u: logits = router · u (n_t × n_expert, n_expert =
 * router->ne[1]), be_moe_route's picks into ids/weights, and when shgate (a 1-row weight)
 * sh_logit[t] = shgate · u[t]. A backend may run it as one op (a decode step's: CUDA). */
static inline int be_moe_gate(be_backend *be, const be_weight *router, const be_weight *shgate, const float *u,
                              int64_t n_t, int32_t k, float *logits, float *sh_logit, int32_t *ids, float *weights,
                              wk_error *err)
{
    if (be->ops->moe_gate) return be->ops->moe_gate(be, router, shgate, u, n_t, k, logits, sh_logit, ids, weights, err);
    int rc = be->ops->matmul(be, router, u, n_t, logits, err);
    if (rc) return rc;
    be->ops->moe_route(be, logits, n_t, (int32_t)router->ne[1], k, ids, weights);
    return shgate ? be->ops->matmul(be, shgate, u, n_t, sh_logit, err) : 0;
}

/* Whether be_moe_ffn takes a shared expert (be_moe_args.shared). */
static inline bool be_moe_takes_shared(const be_backend *be) { return be->ops->moe_shared; }

/* See be_moe_args. */
static inline int be_moe_ffn(be_backend *be, const be_moe_args *a, wk_error *err)
{
    return be->ops->moe_ffn(be, a, err);
}

/* y = a + b (n floats; y may alias a or b). */
static inline void be_add(be_backend *be, float *y, const float *a, const float *b, int64_t n)
{
    be->ops->add(be, y, a, b, n);
}
/* y[r][i] += bias[i] for n_rows rows of n floats. */
static inline void be_add_bias(be_backend *be, float *y, const float *bias, int64_t n_rows, int64_t n)
{
    be->ops->add_bias(be, y, bias, n_rows, n);
}
/* y = SiLU(gate) ⊙ up (n floats; y may alias gate or up). */
static inline void be_swiglu(be_backend *be, float *y, const float *gate, const float *up, int64_t n)
{
    be->ops->swiglu(be, y, gate, up, n);
}
/* y[r][i] *= σ(g[r][i]) for n_rows rows of n floats (strided). */
static inline void be_mul_sigmoid(be_backend *be, float *y, size_t y_stride, const float *g,
                                  size_t g_stride, int64_t n_rows, int64_t n)
{
    be->ops->mul_sigmoid(be, y, y_stride, g, g_stride, n_rows, n);
}
/* y *= SiLU(z) (n floats). */
/* y = RMSNorm(x; w) ⊙ SiLU(z) on n_rows contiguous rows of n (z laid out as y): the
 * gated norm of a Gated DeltaNet layer's output. The same results as be_rms_norm
 * followed by be_mul_silu; a backend may do both in one pass. */
static inline void be_rms_norm_gated(be_backend *be, float *y, const float *x, int64_t n_rows, int64_t n,
                                     const float *w, float eps, const float *z);
static inline void be_mul_silu(be_backend *be, float *y, const float *z, int64_t n)
{
    be->ops->mul_silu(be, y, z, n);
}
static inline void be_rms_norm_gated(be_backend *be, float *y, const float *x, int64_t n_rows, int64_t n,
                                     const float *w, float eps, const float *z)
{
    if (be->ops->rms_norm_gated) {
        be->ops->rms_norm_gated(be, y, x, n_rows, n, w, eps, z);
        return;
    }
    be->ops->rms_norm(be, y, (size_t)n, x, (size_t)n, n_rows, n, w, eps);
    be->ops->mul_silu(be, y, z, n_rows * n);
}
/* y[r][i] += σ(s[r]) · x[r][i] — a per-row sigmoid gate (shared expert). */
static inline void be_add_scaled_sigmoid(be_backend *be, float *y, const float *x, const float *s,
                                         int64_t n_rows, int64_t n)
{
    be->ops->add_scaled_sigmoid(be, y, x, s, n_rows, n);
}

/* ---- constructors ------------------------------------------------------------ */

/* CPU backend on a persistent pool of n_threads (<= 0: physical cores).
 * Returns WK_ENOMEM on failure. Free with be_free. */
int be_cpu_new(be_backend **out, int n_threads, wk_error *err);

/* Threads of a CPU backend (1 for others). */
int be_cpu_threads(const be_backend *be);
/* True for the CPU backend: its activation memory is host RAM (what callers
 * check a planned allocation against, util/sysmem.h). */
bool be_is_cpu(const be_backend *be);

#endif
