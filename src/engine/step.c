/* eng_step: several sequences advanced in one forward pass (continuous batching). */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_impl.h"

int32_t eng_step_max_tokens(const eng_ctx *c) { return model_scratch_max_tokens(c->scratch); }

const float *eng_seq_logits(const eng_seq *s) { return s->logits; }

int eng_seq_logits_alloc(eng_ctx *c, eng_seq *s, wk_error *err)
{
    if (!s->logits && !(s->logits = be_host_alloc(eng_out_backend(c), sizeof(float) * c->m->hp.n_vocab)))
        return wk_fail(err, WK_ENOMEM, "out of memory for a sequence's logits");
    return 0;
}

/* Checks what model_forward_batch does not know about: the sequences' context, the
 * logits buffers (allocated here, before anything runs). */
static int check_items(eng_ctx *c, const eng_step_item *items, int32_t n_items, wk_error *err)
{
    if (n_items < 1 || n_items > c->opt.n_seq)
        return wk_fail(err, WK_EINVAL, "step: %d sequences (the context takes 1..%d)", n_items, c->opt.n_seq);
    for (int32_t i = 0; i < n_items; i++) {
        eng_seq *s = items[i].seq;
        if (s->ctx != c) return wk_fail(err, WK_EINVAL, "step: sequence %d belongs to another context", i);
        if (items[i].logits) {
            int rc = eng_seq_logits_alloc(c, s, err);
            if (rc) return rc;
        }
    }
    return 0;
}

int eng_step(eng_ctx *c, const eng_step_item *items, int32_t n_items, wk_error *err)
{
    int rc = check_items(c, items, n_items, err);
    if (rc) return rc;
    model_batch_seq seqs[ENG_MAX_SEQ];
    be_attn_policy pols[ENG_MAX_SEQ];
    for (int32_t i = 0; i < n_items; i++) {
        const eng_step_item *it = &items[i];
        model_state *st = &it->seq->st;
        const be_attn_policy *pol = NULL;
        if (it->prefill) {
            const bool span = it->span_end > 0;
            pol = eng_chunk_policy(&c->opt.policy, span ? it->span_start : st->n_past,
                                   span ? it->span_end : st->n_past + it->n, st->n_past, it->n, &pols[i]);
        }
        seqs[i] = (model_batch_seq){
            .st = st,
            .tokens = it->tokens,
            .n_t = it->n,
            .mode = it->logits ? MODEL_LOGITS_LAST : MODEL_LOGITS_NONE,
            .logits = it->seq->logits,
            .policy = pol,
        };
    }
    int32_t pos[ENG_MAX_SEQ];
    for (int32_t i = 0; i < n_items; i++) pos[i] = seqs[i].st->n_past;
    /* a step of decode tokens only may be recorded and replayed by the backend (CUDA
     * graphs); not across the parts of a split (see forward_alone in context.c) */
    bool record = c->n_parts == 1;
    be_step_seq rec[ENG_MAX_SEQ];
    for (int32_t i = 0; i < n_items && record; i++) {
        record = !items[i].prefill;
        rec[i] = (be_step_seq){items[i].seq, pos[i], items[i].n};
    }
    if (record) be_step_begin(c->be, rec, n_items);
    rc = model_forward_batch(c->m, c->be, c->scratch, seqs, n_items, err);
    if (record && be_step_end(c->be, rc) > 0) { /* the recording could not run it: op by op */
        for (int32_t i = 0; i < n_items; i++) seqs[i].st->n_past = pos[i];
        rc = model_forward_batch(c->m, c->be, c->scratch, seqs, n_items, err);
    }
    if (c->fail_after > 0 && --c->fail_after == 0 && !rc)
        rc = wk_fail(err, WK_EIO, "injected failure (eng_ctx_fail_after) in a step of %d sequences", n_items);
    for (int32_t p = 0; p < c->n_parts && !rc; p++) rc = be_status(c->parts[p].be, err);
    if (rc) {
        /* as a failed chunk of eng_prefill: positions back, contents not to be trusted */
        for (int32_t i = 0; i < n_items; i++) seqs[i].st->n_past = pos[i];
        return rc;
    }
    for (int32_t i = 0; i < n_items; i++) {
        eng_seq *s = items[i].seq;
        if (pos[i] == 0) s->policy_fp = c->policy_fp;
        memcpy(s->tokens + pos[i], items[i].tokens, sizeof(int32_t) * (size_t)items[i].n);
    }
    return 0;
}
