/* MTP drafting (spec architectures.md 8.8). The block's KV row i holds position base + i,
 * each computed from an exact pair (token p, the target's hidden state of p - 1); the
 * rows a proposal writes beyond that (pairs with the block's own outputs) are dropped
 * after it. The target's hidden rows arrive as the prompt is prefilled and after every
 * verification batch; the last one waits in `carry` until the next token is known. */
#include <stdlib.h>
#include <string.h>

#include "engine/spec_impl.h"

struct eng_mtp {
    eng_ctx *c;
    const model *m;     /* the context's prepared model */
    be_backend *be;
    model_layer_state kv;
    uint16_t *kv_mem;
    int32_t cap;        /* KV rows */
    int32_t base, pos;  /* rows hold positions [base, pos) */
    int32_t *tokens;    /* [n_tokens_cap] the context's tokens at positions [0, n_known): what the rows assume */
    int32_t n_tokens_cap, n_known;
    float *carry;       /* [n_embd] the target's hidden state of position pos - 1 */
    bool has_carry;
    float *in;          /* [ubatch][n_embd] hidden inputs of one batch */
    float *out_hidden;  /* [ubatch][n_embd] the block's outputs */
    float *logits;      /* [n_vocab] */
    int32_t ub;
    spec_picker pick;
};

int eng_mtp_new(eng_mtp **out, eng_ctx *c, int32_t n_ctx, wk_error *err)
{
    *out = NULL;
    const model *m = eng_ctx_prepared(c);
    if (!m->has_mtp) return wk_fail(err, WK_EINVAL, "the model file has no MTP block (nextn tensors)");
    eng_mtp *t = calloc(1, sizeof *t);
    if (!t) return wk_fail(err, WK_ENOMEM, "MTP: out of memory");
    const model_hparams *hp = &m->hp;
    t->c = c;
    t->m = m;
    t->be = eng_ctx_head_backend(c); /* the block reads the output head: it runs where the head is */
    t->cap = n_ctx + ENG_SPEC_MAX_DRAFT; /* a proposal runs up to k positions past the context */
    t->ub = model_scratch_max_tokens(eng_ctx_head_scratch(c));
    const int kv_type = eng_ctx_options(c)->kv_type;
    const size_t d = hp->d_k > hp->d_v ? hp->d_k : hp->d_v;
    const size_t head_stride = (size_t)t->cap * be_kv_row_units(kv_type, d);
    const size_t per_cache = head_stride * hp->n_head_kv;
    t->kv_mem = be_alloc(t->be, 2 * per_cache * sizeof(uint16_t));
    t->n_tokens_cap = n_ctx + 2 * ENG_SPEC_MAX_DRAFT;
    t->tokens = malloc(sizeof(int32_t) * (size_t)t->n_tokens_cap);
    t->carry = malloc(sizeof(float) * hp->n_embd);
    t->in = malloc(sizeof(float) * hp->n_embd * (size_t)t->ub);
    t->out_hidden = malloc(sizeof(float) * hp->n_embd * (size_t)t->ub);
    t->logits = malloc(sizeof(float) * hp->n_vocab);
    if (!t->kv_mem || !t->tokens || !t->carry || !t->in || !t->out_hidden || !t->logits) {
        eng_mtp_free(t);
        return wk_fail(err, WK_ENOMEM, "MTP: out of memory for %d positions", t->cap);
    }
    t->kv.k = t->kv_mem;
    t->kv.v = t->kv_mem + per_cache;
    t->kv.kv_head_stride = head_stride;
    t->kv.kv_type = kv_type;
    t->base = t->pos = 1;
    *out = t;
    return 0;
}

void eng_mtp_free(eng_mtp *t)
{
    if (!t) return;
    if (t->kv_mem) be_release(t->be, t->kv_mem);
    spec_picker_free(&t->pick);
    free(t->tokens);
    free(t->carry);
    free(t->in);
    free(t->out_hidden);
    free(t->logits);
    free(t);
}

size_t eng_mtp_bytes(const eng_mtp *t)
{
    const model_hparams *hp = &t->m->hp;
    const size_t d = hp->d_k > hp->d_v ? hp->d_k : hp->d_v;
    return 2 * sizeof(uint16_t) * (size_t)t->cap * be_kv_row_units(t->kv.kv_type, d) * hp->n_head_kv;
}

int32_t eng_mtp_capacity(const eng_mtp *t) { return t->cap - ENG_SPEC_MAX_DRAFT; }

/* Empty KV whose first row will be position first (>= 1: position 0 has no hidden state
 * before it); the context's tokens before it are remembered for the next request. */
static void restart(eng_mtp *t, const int32_t *ctx, int32_t n_ctx, int32_t first)
{
    t->base = t->pos = first > 1 ? first : 1;
    t->has_carry = false;
    t->n_known = t->base < n_ctx ? t->base : n_ctx;
    memcpy(t->tokens, ctx, sizeof(int32_t) * (size_t)t->n_known);
}

void eng_mtp_begin(eng_mtp *t, const int32_t *ctx, int32_t n, int32_t start)
{
    int32_t keep = 0, lim = t->pos < n ? t->pos : n;
    if (lim > t->n_known) lim = t->n_known;
    while (keep < lim && t->tokens[keep] == ctx[keep]) keep++;
    /* the hidden rows to come start at `start`; position p needs the one of p - 1, which
     * the carry still holds when the whole state is kept (it depends on tokens < p only) */
    const bool whole = keep == t->pos && t->has_carry;
    if (keep >= t->base && (whole ? start <= keep : start <= keep - 1)) {
        t->pos = keep;
        t->n_known = keep;
        t->has_carry = whole;
    } else {
        restart(t, ctx, n, start + 1);
    }
}

/* Runs the block over positions [pos0, pos0 + n) with hidden inputs in t->in; mode as
 * asked (the last row's logits, its output hidden into t->out_hidden). */
static int run_block(eng_mtp *t, const int32_t *tokens, int32_t pos0, int32_t n, enum model_logits_mode mode,
                     wk_error *err)
{
    model_rows out = {.mode = mode, .logits = t->logits, .hidden = mode == MODEL_LOGITS_NONE ? NULL : t->out_hidden};
    int rc = model_mtp_forward(t->m, t->be, eng_ctx_head_scratch(t->c), &t->kv, t->base, t->cap, pos0, tokens, t->in, n,
                               &out, err);
    if (!rc) rc = be_status(t->be, err);
    return rc;
}

int eng_mtp_hidden(eng_mtp *t, const int32_t *ctx, int32_t n_ctx, int32_t pos0, int32_t n_rows, const float *rows,
                   wk_error *err)
{
    const size_t E = t->m->hp.n_embd;
    const int32_t hend = pos0 + n_rows - 1; /* last hidden position given */
    if (n_rows <= 0 || hend < t->pos - 1) return 0; /* nothing new */
    /* h[pos - 1] must be among the rows or waiting in carry; else start after the gap */
    if (!(pos0 <= t->pos - 1 || (t->has_carry && pos0 == t->pos))) restart(t, ctx, n_ctx, pos0 + 1);
    /* positions [pos, last] are computable: p needs ctx[p] (p < n_ctx) and h[p - 1] */
    int32_t last = hend + 1 < n_ctx - 1 ? hend + 1 : n_ctx - 1;
    if (last >= t->base + t->cap) last = t->base + t->cap - 1;
    if (last >= t->n_tokens_cap) last = t->n_tokens_cap - 1;
    while (t->pos <= last) {
        int32_t n = last - t->pos + 1 < t->ub ? last - t->pos + 1 : t->ub;
        for (int32_t i = 0; i < n; i++) {
            int32_t hp = t->pos + i - 1; /* the hidden position this row reads */
            const float *h = hp >= pos0 ? rows + (size_t)(hp - pos0) * E : t->carry;
            memcpy(t->in + (size_t)i * E, h, sizeof(float) * E);
        }
        memcpy(t->tokens + t->pos, ctx + t->pos, sizeof(int32_t) * (size_t)n);
        int rc = run_block(t, ctx + t->pos, t->pos, n, MODEL_LOGITS_NONE, err);
        if (rc) {
            restart(t, ctx, n_ctx, hend + 1);
            return rc;
        }
        t->pos += n;
        t->n_known = t->pos;
        t->has_carry = false;
    }
    /* the newest row waits for its token */
    if (hend == t->pos - 1) {
        memcpy(t->carry, rows + (size_t)(hend - pos0) * E, sizeof(float) * E);
        t->has_carry = true;
    }
    return 0;
}

int eng_mtp_propose(eng_mtp *t, const int32_t *ctx, int32_t n, int32_t k, const eng_draft_sampling *ds,
                    eng_draft *out, wk_error *err)
{
    k = draft_begin(out, k);
    const size_t E = t->m->hp.n_embd;
    /* position n - 1 is next, with the target's hidden state of n - 2 waiting */
    if (k < 1 || t->pos != n - 1 || !t->has_carry || n - 1 + k - t->base > t->cap || n + k > t->n_tokens_cap)
        return 0;
    int rc = spec_picker_prepare(&t->pick, ds, (int32_t)t->m->hp.n_vocab, err);
    if (rc) return rc;
    const bool greedy = !ds || !ds->sample;
    const enum model_logits_mode mode = greedy ? MODEL_LOGITS_ARGMAX : MODEL_LOGITS_LAST;
    memcpy(t->in, t->carry, sizeof(float) * E);
    t->tokens[n - 1] = ctx[n - 1];
    t->n_known = n;
    int32_t tok = ctx[n - 1];
    for (int32_t i = 0; i < k; i++) {
        rc = run_block(t, &tok, n - 1 + i, 1, mode, err);
        if (rc) break;
        if (i == 0) { /* an exact pair: the row stays, the later ones are dropped */
            t->pos = n;
            t->has_carry = false;
        }
        tok = greedy ? (out->tok[i] = model_scratch_argmax(eng_ctx_head_scratch(t->c), NULL))
                     : spec_picker_pick(&t->pick, ds, t->logits, i, out);
        if (tok < 0) break;
        out->n = i + 1;
        memcpy(t->in, t->out_hidden, sizeof(float) * E); /* hm feeds the next step */
    }
    if (rc) {
        out->n = 0;
        restart(t, ctx, n, n);
    }
    return rc;
}
