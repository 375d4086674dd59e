/* Forward-pass plumbing shared by all architectures: scratch buffers, the
 * embedding and output steps, the attention tail, the dense FFN, and the
 * dispatch to the per-family passes. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/model_impl.h"
#include "util/checked.h"
#include "util/sysmem.h"

/* LM head rows computed per matmul when every row's logits are wanted: bounds
 * the logits buffer (n_vocab can be 250k) while keeping the matmul batched. */
#define LOGIT_ROWS 32

static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

typedef struct scratch_buf {
    void **p;
    uint64_t bytes;
} scratch_buf;

#define SCRATCH_N_BUFS 25

/* The activation buffers of a scratch for max_t tokens: where each one's
 * pointer lives in s and its bytes. One list for allocating and for
 * model_scratch_bytes, so the memory plan counts what is allocated. Widths
 * come from validated hyper-parameters (each <= MODEL_MAX_DIM); a buffer no
 * layer uses is one float wide. Products saturate, so a plan too large is
 * refused as a whole instead of wrapping around. */
static void scratch_layout(const model *m, int32_t max_t, model_scratch *s, scratch_buf bufs[SCRATCH_N_BUFS])
{
    const model_hparams *hp = &m->hp;
    const uint64_t T = (uint64_t)max_t, E = hp->n_embd;
    const bool attn = hp->n_attn_layers > 0, rec = hp->n_rec_layers > 0;
    const uint64_t q_w = attn ? (uint64_t)hp->n_head * hp->d_k * (model_arch_is_hybrid(m->arch) ? 2 : 1) : 1;
    const uint64_t k_w = attn ? (uint64_t)hp->n_head_kv * hp->d_k : 1, v_w = attn ? (uint64_t)hp->n_head_kv * hp->d_v : 1;
    const uint64_t att_w = attn ? (uint64_t)hp->n_head * hp->d_v : 1;
    const uint64_t ff_w = max_u64(max_u64(hp->n_ff, hp->n_ff_shexp), 1);
    const uint64_t key_dim = (uint64_t)hp->ssm_n_hk * hp->ssm_d_k, value_dim = (uint64_t)hp->ssm_n_hv * hp->ssm_d_v;
    const uint64_t conv_dim = rec ? 2 * key_dim + value_dim : 1, val_w = rec ? value_dim : 1;
    const uint64_t hv_w = rec ? hp->ssm_n_hv : 1;
    const uint64_t k_used = max_u64(hp->n_expert_used, 1);
    const uint64_t logit_rows = max_t < LOGIT_ROWS ? (uint64_t)max_t : LOGIT_ROWS;
    const struct {
        void **p;
        uint64_t floats_per_token; /* 4-byte elements (floats or int32) per token */
    } list[SCRATCH_N_BUFS - 2] = {
        {(void **)&s->x, E},          {(void **)&s->cur, E},       {(void **)&s->tmp, E},
        {(void **)&s->q, q_w},        {(void **)&s->k, k_w},       {(void **)&s->v, v_w},
        {(void **)&s->att, att_w},    {(void **)&s->ff_g, ff_w},   {(void **)&s->ff_u, ff_w},
        {(void **)&s->qkv, conv_dim}, {(void **)&s->conv, conv_dim}, {(void **)&s->z, val_w},
        {(void **)&s->gdn_o, val_w},  {(void **)&s->alpha, hv_w},  {(void **)&s->beta, hv_w},
        {(void **)&s->router, max_u64(hp->n_expert, 1)},           {(void **)&s->expert_ids, k_used},
        {(void **)&s->expert_w, k_used}, {(void **)&s->moe_out, E}, {(void **)&s->sh_gate, 1},
        {(void **)&s->rope_cs, (uint64_t)hp->rope.n_rot},          {(void **)&s->tokens, 1},
        {(void **)&s->pos, 1},
    };
    for (size_t i = 0; i < SCRATCH_N_BUFS - 2; i++)
        bufs[i] = (scratch_buf){list[i].p, wk_sat_mul3(T, list[i].floats_per_token, 4)};
    bufs[SCRATCH_N_BUFS - 2] = (scratch_buf){(void **)&s->logits, wk_sat_mul3(logit_rows, hp->n_vocab, 4)};
    /* the MTP head's input: [embedding ; hidden] per token; absent without a head */
    bufs[SCRATCH_N_BUFS - 1] = (scratch_buf){(void **)&s->mtp_in, m->has_mtp ? wk_sat_mul3(T, 2 * E, 4) : 0};
}

size_t model_scratch_bytes(const model *m, int32_t max_t)
{
    if (max_t < 1) return 0;
    model_scratch s;
    scratch_buf bufs[SCRATCH_N_BUFS];
    scratch_layout(m, max_t, &s, bufs);
    uint64_t total = (uint64_t)max_t * sizeof(int32_t); /* pos_host */
    for (size_t i = 0; i < SCRATCH_N_BUFS; i++) total = wk_sat_add(total, bufs[i].bytes);
    return total > SIZE_MAX ? SIZE_MAX : (size_t)total;
}

int model_scratch_new(model_scratch **out, const model *m, be_backend *be, int32_t max_t, wk_error *err)
{
    *out = NULL;
    if (max_t < 1) return wk_fail(err, WK_EINVAL, "scratch: max tokens %d < 1", max_t);
    model_scratch *s = calloc(1, sizeof *s);
    if (!s) return wk_fail(err, WK_ENOMEM, "out of memory");
    s->be = be;
    s->max_t = max_t;
    s->logit_rows = max_t < LOGIT_ROWS ? max_t : LOGIT_ROWS;
    scratch_buf bufs[SCRATCH_N_BUFS];
    scratch_layout(m, max_t, s, bufs);
    uint64_t total = model_scratch_bytes(m, max_t);
    char what[96];
    snprintf(what, sizeof what, "the activation buffers for batches of %d tokens", max_t);
    int rc = be_is_cpu(be) ? wk_ram_check(total, what, err) : 0;
    if (rc) {
        free(s);
        return rc;
    }
    s->pos_host = malloc((size_t)max_t * sizeof(int32_t));
    if (!s->pos_host) {
        free(s);
        return wk_fail(err, WK_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < SCRATCH_N_BUFS; i++) {
        if (!bufs[i].bytes) continue;
        *bufs[i].p = be_alloc(be, (size_t)bufs[i].bytes);
        if (!*bufs[i].p) {
            model_scratch_free(s);
            return wk_fail(err, WK_ENOMEM, "out of memory for %s (%" PRIu64 " bytes)", what, total);
        }
    }
    *out = s;
    return 0;
}

int model_scratch_link(const model *m, model_scratch *s, model_scratch *next, uint32_t first_layer, wk_error *err)
{
    if (s->next || next->max_t != s->max_t)
        return wk_fail(err, WK_EINVAL, "scratch link: already linked, or %d tokens next to %d", next->max_t, s->max_t);
    s->handover = malloc(sizeof(float) * m->hp.n_embd * (size_t)s->max_t);
    if (!s->handover) return wk_fail(err, WK_ENOMEM, "scratch link: out of memory");
    s->next = next;
    s->next_layer = first_layer;
    return 0;
}

int model_part_enter(const model *m, be_backend **be, model_scratch **s, uint32_t il, int32_t n_t, wk_error *err)
{
    model_scratch *c = *s;
    if (!c->next || il != c->next_layer) return 0;
    model_scratch *n = c->next;
    const size_t bytes = sizeof(float) * (size_t)n_t * m->hp.n_embd;
    be_to_host(c->be, c->handover, c->x, bytes);
    /* an asynchronous backend's failed op shows here, before the next part builds on it */
    TRY(be_status(c->be, err));
    be_from_host(n->be, n->x, c->handover, bytes);
    memcpy(n->pos_host, c->pos_host, sizeof(int32_t) * (size_t)n_t);
    be_from_host(n->be, n->pos, n->pos_host, sizeof(int32_t) * (size_t)n_t);
    be_rope_cache(n->be, n->rope_cs, n->pos, n_t, &m->hp.rope);
    *be = n->be;
    *s = n;
    return 0;
}

void model_scratch_free(model_scratch *s)
{
    if (!s) return;
    free(s->handover);
    void *ptrs[] = {s->x,      s->cur,     s->tmp,    s->q,          s->k,        s->v,
                    s->att,    s->ff_g,    s->ff_u,   s->qkv,        s->conv,     s->z,
                    s->gdn_o,  s->alpha,   s->beta,   s->router,     s->expert_ids, s->expert_w,
                    s->moe_out, s->sh_gate, s->rope_cs, s->tokens,   s->pos,      s->logits,
                    s->mtp_in};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
        if (ptrs[i]) be_release(s->be, ptrs[i]);
    free(s->pos_host);
    free(s);
}

int32_t model_scratch_max_tokens(const model_scratch *s) { return s->max_t; }

int32_t model_scratch_argmax(const model_scratch *s, float *logit)
{
    while (s->next) s = s->next; /* the pick is made where the output head is */
    if (logit) *logit = s->argmax_logit;
    return s->argmax;
}

/* ---- shared steps --------------------------------------------------------------- */

int model_embed_with(const model *m, be_backend *be, model_scratch *s, const be_weight *embd, int32_t n_t,
                     int32_t pos0, wk_error *err)
{
    /* s->pos is backend memory (a GPU's): fill the host mirror, then copy */
    for (int32_t t = 0; t < n_t; t++) s->pos_host[t] = pos0 + t;
    be_from_host(be, s->pos, s->pos_host, sizeof(int32_t) * (size_t)n_t);
    be_rope_cache(be, s->rope_cs, s->pos, n_t, &m->hp.rope);
    return be_get_rows(be, embd, s->tokens, n_t, s->x, err);
}

int model_embed(const model *m, be_backend *be, model_scratch *s, int32_t n_t, int32_t pos0, wk_error *err)
{
    return model_embed_with(m, be, s, &m->tok_embd, n_t, pos0, err);
}

int model_linear(be_backend *be, const be_weight *w, const be_weight *bias, const float *x, int32_t n_t,
                 float *y, wk_error *err)
{
    TRY(be_matmul(be, w, x, n_t, y, err));
    if (bias && bias->data) be_add_bias(be, y, wf32(bias), n_t, w->ne[1]);
    return 0;
}

int model_qkv(be_backend *be, model_scratch *s, const model_layer *ly, int32_t n_t, wk_error *err)
{
    const be_weight *w[3] = {&ly->wq, &ly->wk, &ly->wv};
    float *const y[3] = {s->q, s->k, s->v};
    TRY(be_matmul_multi(be, w, 3, s->cur, n_t, y, err));
    const be_weight *bias[3] = {&ly->bq, &ly->bk, &ly->bv};
    for (int i = 0; i < 3; i++)
        if (bias[i]->data) be_add_bias(be, y[i], wf32(bias[i]), n_t, w[i]->ne[1]);
    return 0;
}

int model_attend(const model *m, be_backend *be, model_scratch *s, model_layer_state *ls, int32_t n_t,
                 int32_t pos0, const float *q, size_t q_stride, size_t q_head_stride,
                 const be_attn_policy *policy, wk_error *err)
{
    const model_hparams *hp = &m->hp;
    const int32_t Hkv = (int32_t)hp->n_head_kv;
    be_kv_store_typed(be, ls->kv_type, ls->k, ls->kv_head_stride, pos0, s->k, (size_t)Hkv * hp->d_k, n_t, Hkv,
                      (int32_t)hp->d_k);
    be_kv_store_typed(be, ls->kv_type, ls->v, ls->kv_head_stride, pos0, s->v, (size_t)Hkv * hp->d_v, n_t, Hkv,
                      (int32_t)hp->d_v);
    be_attn_args a = {
        .q = q,
        .q_stride = q_stride,
        .q_head_stride = q_head_stride,
        .n_q = n_t,
        .q_pos0 = pos0,
        .k = ls->k,
        .v = ls->v,
        .kv_head_stride = ls->kv_head_stride,
        .n_kv = pos0 + n_t,
        .n_head = (int32_t)hp->n_head,
        .n_head_kv = Hkv,
        .d_k = (int32_t)hp->d_k,
        .d_v = (int32_t)hp->d_v,
        .scale = 1.0f / sqrtf((float)hp->d_k),
        .policy = policy,
        .kv_type = ls->kv_type,
        .out = s->att,
        .out_stride = (size_t)hp->n_head * hp->d_v,
    };
    return be_attention(be, &a, err);
}

int model_ffn_dense(be_backend *be, model_scratch *s, const be_weight *gate, const be_weight *up,
                    const be_weight *down, const float *in, int32_t n_t, float *out, wk_error *err)
{
    const int64_t n_ff = gate->ne[1];
    const be_weight *w[2] = {gate, up};
    float *const y[2] = {s->ff_g, s->ff_u};
    TRY(be_matmul_multi(be, w, 2, in, n_t, y, err));
    be_swiglu(be, s->ff_g, s->ff_g, s->ff_u, (int64_t)n_t * n_ff);
    return be_matmul(be, down, s->ff_g, n_t, out, err);
}

int model_output_with(be_backend *be, model_scratch *s, const model_hparams *hp, const be_weight *norm,
                      const be_weight *head, const be_weight *bias, int32_t n_t, const model_rows *out,
                      wk_error *err)
{
    const size_t E = hp->n_embd, V = hp->n_vocab;
    const enum model_logits_mode mode = out->mode;
    /* rows [first, n_t) get logits; every row gets its normed hidden state when asked */
    int32_t first = mode == MODEL_LOGITS_NONE  ? n_t
                    : mode == MODEL_LOGITS_ALL ? (out->first > 0 && out->first < n_t ? out->first : 0)
                                               : n_t - 1;
    for (int32_t r0 = out->hidden ? 0 : first; r0 < n_t;) {
        int32_t nr = n_t - r0 < s->logit_rows ? n_t - r0 : s->logit_rows;
        if (r0 < first && r0 + nr > first) nr = first - r0; /* a block is all-logits or none */
        be_rms_norm(be, s->cur, E, s->x + (size_t)r0 * E, E, nr, (int64_t)E, wf32(norm), hp->eps);
        if (out->hidden) be_to_host(be, out->hidden + (size_t)r0 * E, s->cur, (size_t)nr * E * sizeof(float));
        if (r0 >= first) {
            TRY(model_linear(be, head, bias, s->cur, nr, s->logits, err));
            if (mode == MODEL_LOGITS_ARGMAX)
                s->argmax = be_argmax(be, s->logits, (int32_t)V, out->logits, &s->argmax_logit);
            else
                be_to_host(be, out->logits + (size_t)(r0 - first) * V, s->logits, (size_t)nr * V * sizeof(float));
        }
        r0 += nr;
    }
    return 0;
}

int model_output(const model *m, be_backend *be, model_scratch *s, int32_t n_t, const model_rows *out,
                 wk_error *err)
{
    return model_output_with(be, s, &m->hp, &m->output_norm, &m->output, &m->output_bias, n_t, out, err);
}

/* ---- entry ------------------------------------------------------------------------- */

static int check_tokens(const model *m, const int32_t *tokens, int32_t n_t, wk_error *err)
{
    for (int32_t t = 0; t < n_t; t++)
        if (tokens[t] < 0 || (uint32_t)tokens[t] >= m->hp.n_vocab)
            return wk_fail(err, WK_EINVAL, "token id %d at index %d outside the vocabulary (%u)", tokens[t], t,
                           m->hp.n_vocab);
    return 0;
}

int model_forward_rows(const model *m, be_backend *be, model_scratch *s, model_state *st, const int32_t *tokens,
                       int32_t n_t, const model_rows *out, const be_attn_policy *policy, wk_error *err)
{
    if (n_t < 1 || n_t > s->max_t)
        return wk_fail(err, WK_EINVAL, "batch of %d tokens (scratch holds 1..%d)", n_t, s->max_t);
    if (st->n_past < 0 || (int64_t)st->n_past + n_t > st->n_ctx)
        return wk_fail(err, WK_ERANGE, "context full: %d + %d tokens exceed the capacity of %d", st->n_past, n_t,
                       st->n_ctx);
    TRY(check_tokens(m, tokens, n_t, err));
    be_from_host(be, s->tokens, tokens, sizeof(int32_t) * (size_t)n_t); /* s->tokens is backend memory */
    int rc;
    switch (m->arch) {
    case MODEL_ARCH_LLAMA:
    case MODEL_ARCH_QWEN2: rc = llama_forward(m, be, s, st, n_t, out, policy, err); break;
    case MODEL_ARCH_QWEN3:
    case MODEL_ARCH_QWEN3MOE: rc = qwen3_forward(m, be, s, st, n_t, out, policy, err); break;
    case MODEL_ARCH_QWEN35:
    case MODEL_ARCH_QWEN35MOE: rc = qwen35_forward(m, be, s, st, n_t, out, policy, err); break;
    default: return wk_fail(err, WK_EUNSUPPORTED, "no forward pass for %s", model_arch_name(m->arch));
    }
    if (rc) return rc;
    st->n_past += n_t;
    return 0;
}

int model_forward(const model *m, be_backend *be, model_scratch *s, model_state *st, const int32_t *tokens,
                  int32_t n_t, enum model_logits_mode mode, float *logits_host, const be_attn_policy *policy,
                  wk_error *err)
{
    const model_rows out = {.mode = mode, .logits = logits_host};
    return model_forward_rows(m, be, s, st, tokens, n_t, &out, policy, err);
}

int model_mtp_forward(const model *m, be_backend *be, model_scratch *s, model_layer_state *kv, int32_t kv_base,
                      int32_t n_ctx, int32_t pos0, const int32_t *tokens, const float *hidden, int32_t n_t,
                      const model_rows *out, wk_error *err)
{
    if (!m->has_mtp) return wk_fail(err, WK_EINVAL, "the model has no MTP block");
    if (n_t < 1 || n_t > s->max_t)
        return wk_fail(err, WK_EINVAL, "MTP batch of %d tokens (scratch holds 1..%d)", n_t, s->max_t);
    if (pos0 < kv_base || (int64_t)pos0 - kv_base + n_t > n_ctx)
        return wk_fail(err, WK_ERANGE, "MTP: positions %d..%d outside its cache [%d, %d)", pos0, pos0 + n_t,
                       kv_base, kv_base + n_ctx);
    TRY(check_tokens(m, tokens, n_t, err));
    be_from_host(be, s->tokens, tokens, sizeof(int32_t) * (size_t)n_t);
    return qwen35_mtp_forward(m, be, s, kv, pos0 - kv_base, pos0, hidden, n_t, out, err);
}
