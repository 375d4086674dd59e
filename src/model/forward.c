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
    /* the host arrays: pos_host, tok_host, segs, grps */
    uint64_t total = (uint64_t)max_t * (2 * sizeof(int32_t) + sizeof(model_seg) + sizeof(model_grp));
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
    s->tok_host = malloc((size_t)max_t * sizeof(int32_t));
    s->segs = malloc((size_t)max_t * sizeof(model_seg));
    s->grps = malloc((size_t)max_t * sizeof(model_grp));
    if (!s->pos_host || !s->tok_host || !s->segs || !s->grps) {
        free(s->pos_host);
        free(s->tok_host);
        free(s->segs);
        free(s->grps);
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

model_scratch *model_last_part(model_scratch *s)
{
    while (s->next) s = s->next;
    return s;
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
    free(s->tok_host);
    free(s->segs);
    free(s->grps);
    free(s);
}

int32_t model_scratch_max_tokens(const model_scratch *s) { return s->max_t; }

int32_t model_scratch_argmax(const model_scratch *s, float *logit)
{
    while (s->next) s = s->next; /* the pick is made where the output head is */
    if (logit) *logit = s->argmax_logit;
    return s->argmax;
}

/* ---- batches ------------------------------------------------------------------- */

void model_batch_groups(model_batch *b, const be_backend *be)
{
    const int32_t exact_rows = be->ops->exact_rows;
    const bool as_one = exact_rows > 0 && be_has_rows_as_one(be);
    b->n_grp = 0;
    if (exact_rows <= 0) {
        b->grp[b->n_grp++] = (model_grp){0, b->n_t, false};
        return;
    }
    const int32_t cap = as_one ? b->n_t : exact_rows;
    model_grp open = {0, 0, as_one}; /* small sequences' rows being packed */
    for (int32_t i = 0; i < b->n_seg; i++) {
        const model_seg *g = &b->seg[i];
        if (g->n_t > exact_rows) {
            if (open.n) b->grp[b->n_grp++] = open;
            b->grp[b->n_grp++] = (model_grp){g->row0, g->n_t, false};
            open = (model_grp){g->row0 + g->n_t, 0, as_one};
            continue;
        }
        for (int32_t r = 0; r < g->n_t; r++) {
            if (open.n == cap) {
                b->grp[b->n_grp++] = open;
                open = (model_grp){open.row0 + open.n, 0, as_one};
            }
            open.n++;
        }
    }
    if (open.n) b->grp[b->n_grp++] = open;
}

int model_mm(be_backend *be, const model_batch *b, const be_weight *w, const float *x, float *y, wk_error *err)
{
    const size_t K = (size_t)w->ne[0], M = (size_t)w->ne[1];
    for (int32_t i = 0; i < b->n_grp; i++) {
        const model_grp g = b->grp[i];
        be_rows_as_one(be, g.as_one);
        int rc = be_matmul(be, w, x + (size_t)g.row0 * K, g.n, y + (size_t)g.row0 * M, err);
        be_rows_as_one(be, false);
        if (rc) return rc;
    }
    return 0;
}

int model_mm_multi(be_backend *be, const model_batch *b, const be_weight *const *w, int n, const float *x,
                   float *const *y, wk_error *err)
{
    enum { MAX_W = 4 };
    if (n > MAX_W) return wk_fail(err, WK_EINVAL, "matmul of %d weights at once (at most %d)", n, MAX_W);
    const size_t K = (size_t)w[0]->ne[0];
    for (int32_t i = 0; i < b->n_grp; i++) {
        const model_grp g = b->grp[i];
        float *yg[MAX_W];
        for (int j = 0; j < n; j++) yg[j] = y[j] + (size_t)g.row0 * (size_t)w[j]->ne[1];
        be_rows_as_one(be, g.as_one);
        int rc = be_matmul_multi(be, w, n, x + (size_t)g.row0 * K, g.n, yg, err);
        be_rows_as_one(be, false);
        if (rc) return rc;
    }
    return 0;
}

/* ---- shared steps --------------------------------------------------------------- */

int model_embed_with(const model *m, be_backend *be, model_scratch *s, const be_weight *embd, const model_batch *b,
                     wk_error *err)
{
    /* s->pos is backend memory (a GPU's): fill the host mirror, then copy */
    for (int32_t i = 0; i < b->n_seg; i++)
        for (int32_t t = 0; t < b->seg[i].n_t; t++) s->pos_host[b->seg[i].row0 + t] = b->seg[i].pos0 + t;
    be_from_host(be, s->pos, s->pos_host, sizeof(int32_t) * (size_t)b->n_t);
    be_rope_cache(be, s->rope_cs, s->pos, b->n_t, &m->hp.rope);
    return be_get_rows(be, embd, s->tokens, b->n_t, s->x, err);
}

int model_embed(const model *m, be_backend *be, model_scratch *s, const model_batch *b, wk_error *err)
{
    return model_embed_with(m, be, s, &m->tok_embd, b, err);
}

int model_linear(be_backend *be, const model_batch *b, const be_weight *w, const be_weight *bias, const float *x,
                 float *y, wk_error *err)
{
    TRY(model_mm(be, b, w, x, y, err));
    if (bias && bias->data) be_add_bias(be, y, wf32(bias), b->n_t, w->ne[1]);
    return 0;
}

int model_qkv(be_backend *be, model_scratch *s, const model_layer *ly, const model_batch *b, wk_error *err)
{
    const be_weight *w[3] = {&ly->wq, &ly->wk, &ly->wv};
    float *const y[3] = {s->q, s->k, s->v};
    TRY(model_mm_multi(be, b, w, 3, s->cur, y, err));
    const be_weight *bias[3] = {&ly->bq, &ly->bk, &ly->bv};
    for (int i = 0; i < 3; i++)
        if (bias[i]->data) be_add_bias(be, y[i], wf32(bias[i]), b->n_t, w[i]->ne[1]);
    return 0;
}

/* Segments whose KV stores and attention go to the backend in one be_attend_seqs call. */
#define ATTEND_SEQS 32

int model_attend(const model *m, be_backend *be, model_scratch *s, const model_batch *b, uint32_t il,
                 const float *q, size_t q_stride, size_t q_head_stride, wk_error *err)
{
    const model_hparams *hp = &m->hp;
    const int32_t Hkv = (int32_t)hp->n_head_kv;
    const size_t k_w = (size_t)Hkv * hp->d_k, v_w = (size_t)Hkv * hp->d_v, out_w = (size_t)hp->n_head * hp->d_v;
    be_attn_args a[ATTEND_SEQS];
    be_kv_rows kv[ATTEND_SEQS];
    for (int32_t i0 = 0; i0 < b->n_seg; i0 += ATTEND_SEQS) {
        const int32_t n = b->n_seg - i0 < ATTEND_SEQS ? b->n_seg - i0 : ATTEND_SEQS;
        for (int32_t j = 0; j < n; j++) {
            const model_seg *g = &b->seg[i0 + j];
            model_layer_state *ls = &g->layers[il];
            const size_t r = (size_t)g->row0;
            kv[j] = (be_kv_rows){ls->k, ls->v, s->k + r * k_w, s->v + r * v_w, k_w, v_w};
            a[j] = (be_attn_args){
                .q = q + r * q_stride,
                .q_stride = q_stride,
                .q_head_stride = q_head_stride,
                .n_q = g->n_t,
                .q_pos0 = g->kv_pos0,
                .k = ls->k,
                .v = ls->v,
                .kv_head_stride = ls->kv_head_stride,
                .n_kv = g->kv_pos0 + g->n_t,
                .n_head = (int32_t)hp->n_head,
                .n_head_kv = Hkv,
                .d_k = (int32_t)hp->d_k,
                .d_v = (int32_t)hp->d_v,
                .scale = 1.0f / sqrtf((float)hp->d_k),
                .policy = g->policy,
                .kv_type = ls->kv_type,
                .out = s->att + r * out_w,
                .out_stride = out_w,
            };
        }
        TRY(be_attend_seqs(be, i0, a, kv, n, err));
    }
    return 0;
}

int model_ffn_dense(be_backend *be, model_scratch *s, const model_batch *b, const be_weight *gate,
                    const be_weight *up, const be_weight *down, const float *in, float *out, wk_error *err)
{
    const int64_t n_ff = gate->ne[1];
    const be_weight *w[2] = {gate, up};
    float *const y[2] = {s->ff_g, s->ff_u};
    TRY(model_mm_multi(be, b, w, 2, in, y, err));
    be_swiglu(be, s->ff_g, s->ff_g, s->ff_u, (int64_t)b->n_t * n_ff);
    return model_mm(be, b, down, s->ff_g, out, err);
}

/* Final norm + LM head of rows [x_row0, x_row0 + n_t) of s->x as out asks (one sequence). */
static int output_seq(be_backend *be, model_scratch *s, const model_hparams *hp, const be_weight *norm,
                      const be_weight *head, const be_weight *bias, int32_t x_row0, int32_t n_t,
                      const model_rows *out, wk_error *err)
{
    const size_t E = hp->n_embd, V = hp->n_vocab;
    const enum model_logits_mode mode = out->mode;
    const float *x = s->x + (size_t)x_row0 * E;
    /* rows [first, n_t) get logits; every row gets its normed hidden state when asked */
    int32_t first = mode == MODEL_LOGITS_NONE  ? n_t
                    : mode == MODEL_LOGITS_ALL ? (out->first > 0 && out->first < n_t ? out->first : 0)
                                               : n_t - 1;
    for (int32_t r0 = out->hidden ? 0 : first; r0 < n_t;) {
        int32_t nr = n_t - r0 < s->logit_rows ? n_t - r0 : s->logit_rows;
        if (r0 < first && r0 + nr > first) nr = first - r0; /* a block is all-logits or none */
        be_rms_norm(be, s->cur, E, x + (size_t)r0 * E, E, nr, (int64_t)E, wf32(norm), hp->eps);
        if (out->hidden) be_to_host(be, out->hidden + (size_t)r0 * E, s->cur, (size_t)nr * E * sizeof(float));
        if (r0 >= first) {
            TRY(be_matmul(be, head, s->cur, nr, s->logits, err));
            if (bias && bias->data) be_add_bias(be, s->logits, wf32(bias), nr, head->ne[1]);
            if (mode == MODEL_LOGITS_ARGMAX)
                s->argmax = be_argmax(be, s->logits, (int32_t)V, out->logits, &s->argmax_logit);
            else
                be_to_host(be, out->logits + (size_t)(r0 - first) * V, s->logits, (size_t)nr * V * sizeof(float));
        }
        r0 += nr;
    }
    return 0;
}

int model_output_with(be_backend *be, model_scratch *s, const model_hparams *hp, const be_weight *norm,
                      const be_weight *head, const be_weight *bias, int32_t n_t, const model_rows *out,
                      wk_error *err)
{
    return output_seq(be, s, hp, norm, head, bias, 0, n_t, out, err);
}

int model_output(const model *m, be_backend *be, model_scratch *s, int32_t n_t, const model_rows *out,
                 wk_error *err)
{
    return model_output_with(be, s, &m->hp, &m->output_norm, &m->output, &m->output_bias, n_t, out, err);
}

/* The final norm of n rows of s->x from x_row on into s->cur from cur_row on. */
static void norm_last_rows(const model *m, be_backend *be, model_scratch *s, int32_t cur_row, int32_t x_row,
                              int32_t n)
{
    const size_t E = m->hp.n_embd;
    be_rms_norm(be, s->cur + (size_t)cur_row * E, E, s->x + (size_t)x_row * E, E, n, (int64_t)E,
                wf32(&m->output_norm), m->hp.eps);
}

/* The output step of a batch of several sequences: ALL as each alone; the last rows of
 * the LAST ones share the LM head's read, in blocks whose rows come out as alone
 * (be_rows_as_one, else at most exact_rows of them when the backend promises that). */
static int output_batch(const model *m, be_backend *be, model_scratch *s, const model_batch_seq *seqs,
                        const model_batch *b, wk_error *err)
{
    const model_hparams *hp = &m->hp;
    const size_t V = hp->n_vocab;
    const int32_t exact = be->ops->exact_rows;
    const bool as_one = exact > 0 && be_has_rows_as_one(be);
    const int32_t block = exact > 0 && !as_one && exact < s->logit_rows ? exact : s->logit_rows;
    for (int32_t i = 0; i < b->n_seg; i++)
        if (seqs[i].mode == MODEL_LOGITS_ALL) {
            const model_rows out = {.mode = MODEL_LOGITS_ALL, .logits = seqs[i].logits};
            TRY(output_seq(be, s, hp, &m->output_norm, &m->output, &m->output_bias, b->seg[i].row0,
                           b->seg[i].n_t, &out, err));
        }
    void *dst[LOGIT_ROWS]; /* the logits buffers of the block being gathered */
    int32_t nr = 0;
    /* last rows that follow each other in s->x (decode tokens) are normed by one call:
     * rows [norm_row, norm_row + norm_n) into the block's last norm_n rows */
    int32_t norm_row = 0, norm_n = 0;
    for (int32_t i = 0; i <= b->n_seg; i++) {
        if (i < b->n_seg && seqs[i].mode != MODEL_LOGITS_LAST) continue;
        const int32_t row = i < b->n_seg ? b->seg[i].row0 + b->seg[i].n_t - 1 : -1;
        if (norm_n > 0 && row != norm_row + norm_n) { /* not next to the rows before: norm those */
            norm_last_rows(m, be, s, nr - norm_n, norm_row, norm_n);
            norm_n = 0;
        }
        if (i < b->n_seg) {
            if (norm_n == 0) norm_row = row;
            norm_n++;
            dst[nr++] = seqs[i].logits;
        }
        if (nr == 0 || (nr < block && i < b->n_seg)) continue;
        if (norm_n > 0) {
            norm_last_rows(m, be, s, nr - norm_n, norm_row, norm_n);
            norm_n = 0;
        }
        be_rows_as_one(be, as_one);
        int rc = be_matmul(be, &m->output, s->cur, nr, s->logits, err);
        be_rows_as_one(be, false);
        if (rc) return rc;
        if (m->output_bias.data) be_add_bias(be, s->logits, wf32(&m->output_bias), nr, m->output.ne[1]);
        be_to_host_rows(be, dst, s->logits, V * sizeof(float), nr);
        nr = 0;
    }
    return 0;
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

/* The layers of the architecture over the rows of b (s->tokens filled). */
static int forward_layers(const model *m, be_backend *be, model_scratch *s, const model_batch *b, wk_error *err)
{
    switch (m->arch) {
    case MODEL_ARCH_LLAMA:
    case MODEL_ARCH_QWEN2: return llama_forward(m, be, s, b, err);
    case MODEL_ARCH_QWEN3:
    case MODEL_ARCH_QWEN3MOE: return qwen3_forward(m, be, s, b, err);
    case MODEL_ARCH_QWEN35:
    case MODEL_ARCH_QWEN35MOE: return qwen35_forward(m, be, s, b, err);
    default: return wk_fail(err, WK_EUNSUPPORTED, "no forward pass for %s", model_arch_name(m->arch));
    }
}

static int check_room(const model_state *st, int32_t n_t, wk_error *err)
{
    if (st->n_past < 0 || (int64_t)st->n_past + n_t > st->n_ctx)
        return wk_fail(err, WK_ERANGE, "context full: %d + %d tokens exceed the capacity of %d", st->n_past, n_t,
                       st->n_ctx);
    return 0;
}

int model_forward_rows(const model *m, be_backend *be, model_scratch *s, model_state *st, const int32_t *tokens,
                       int32_t n_t, const model_rows *out, const be_attn_policy *policy, wk_error *err)
{
    if (n_t < 1 || n_t > s->max_t)
        return wk_fail(err, WK_EINVAL, "batch of %d tokens (scratch holds 1..%d)", n_t, s->max_t);
    TRY(check_room(st, n_t, err));
    TRY(check_tokens(m, tokens, n_t, err));
    be_from_host(be, s->tokens, tokens, sizeof(int32_t) * (size_t)n_t); /* s->tokens is backend memory */
    const model_seg seg = {st->layers, 0, n_t, st->n_past, st->n_past, policy};
    model_grp grp = {0, n_t, false};
    const model_batch b = {n_t, 1, &seg, 1, &grp};
    TRY(forward_layers(m, be, s, &b, err));
    model_scratch *head = model_last_part(s);
    TRY(model_output(m, head->be, head, n_t, out, err));
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

/* The batch's arguments, checked before anything runs; its rows' count into *n_t. */
static int check_batch(const model *m, const model_scratch *s, const model_batch_seq *seqs, int32_t n_seq,
                       int32_t *n_t, wk_error *err)
{
    if (n_seq < 1) return wk_fail(err, WK_EINVAL, "batch of %d sequences", n_seq);
    int64_t rows = 0;
    for (int32_t i = 0; i < n_seq; i++) {
        const model_batch_seq *q = &seqs[i];
        if (q->n_t < 1) return wk_fail(err, WK_EINVAL, "batch sequence %d has %d tokens", i, q->n_t);
        if (q->mode == MODEL_LOGITS_ARGMAX)
            return wk_fail(err, WK_EINVAL, "batch sequence %d: greedy picks are for single-sequence passes", i);
        if (q->mode != MODEL_LOGITS_NONE && !q->logits)
            return wk_fail(err, WK_EINVAL, "batch sequence %d asks for logits without a buffer", i);
        for (int32_t j = 0; j < i; j++)
            if (seqs[j].st == q->st) return wk_fail(err, WK_EINVAL, "batch sequences %d and %d share a state", j, i);
        rows += q->n_t;
        TRY(check_room(q->st, q->n_t, err));
        TRY(check_tokens(m, q->tokens, q->n_t, err));
    }
    if (rows > s->max_t)
        return wk_fail(err, WK_EINVAL, "batch of %lld tokens (scratch holds 1..%d)", (long long)rows, s->max_t);
    *n_t = (int32_t)rows;
    return 0;
}

int model_forward_batch(const model *m, be_backend *be, model_scratch *s, const model_batch_seq *seqs,
                        int32_t n_seq, wk_error *err)
{
    int32_t n_t = 0;
    TRY(check_batch(m, s, seqs, n_seq, &n_t, err));
    for (int32_t i = 0, row = 0; i < n_seq; row += seqs[i].n_t, i++) {
        const model_batch_seq *q = &seqs[i];
        s->segs[i] = (model_seg){q->st->layers, row, q->n_t, q->st->n_past, q->st->n_past, q->policy};
        memcpy(s->tok_host + row, q->tokens, sizeof(int32_t) * (size_t)q->n_t);
    }
    be_from_host(be, s->tokens, s->tok_host, sizeof(int32_t) * (size_t)n_t);
    model_batch b = {n_t, n_seq, s->segs, 0, s->grps};
    model_batch_groups(&b, be);
    TRY(forward_layers(m, be, s, &b, err));
    model_scratch *head = model_last_part(s);
    TRY(output_batch(m, head->be, head, seqs, &b, err));
    for (int32_t i = 0; i < n_seq; i++) seqs[i].st->n_past += seqs[i].n_t;
    return 0;
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
