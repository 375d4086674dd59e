/* Internals shared by engine/context.c and engine/sequence.c. */
#ifndef WICK_ENGINE_ENGINE_IMPL_H
#define WICK_ENGINE_ENGINE_IMPL_H

#include "engine/context.h"
#include "engine/sequence.h"

struct eng_ctx {
    const model *src;        /* borrowed: the loaded model */
    model prepared;          /* working copy with weights prepared for be (model_prepare) */
    const model *m;          /* = &prepared */
    eng_options opt;
    be_backend *be;          /* owned */
    model_scratch *scratch;  /* owned, sized for n_ubatch tokens */
    float *logits;           /* host [n_vocab]: after the last token */
    float *logits_all;       /* host [logits_all_cap][n_vocab] */
    int32_t logits_all_rows, logits_all_cap;
    float *hidden;           /* host [hidden_cap][n_embd]: final-normed hidden rows (eng_hidden_all) */
    int32_t hidden_rows, hidden_cap;
    uint64_t policy_fp;
    int32_t fail_after;      /* eng_ctx_fail_after: forward calls left before an injected failure, 0 = off */
    struct eng_sched *sched; /* the step scheduler attached to it (sched.h), or NULL */
};

struct eng_seq {
    eng_ctx *ctx;            /* borrowed */
    model_state st;
    model_layer_state *layers; /* [n_layer], st.layers points here */
    uint16_t *kv_mem;        /* backend memory: K and V of every attention layer */
    float *rec_mem;          /* backend memory: conv then ssm of every recurrent layer */
    size_t rec_floats;
    int32_t *tokens;         /* host [capacity] */
    int32_t high_water;      /* most positions ever held (pages of KV written so far) */
    size_t kv_bytes;         /* the KV allocation */
    uint64_t policy_fp;
    float *logits;           /* host [n_vocab]: eng_step's logits of this sequence, NULL until asked */
    bool sched_joined;       /* its forwards go through the scheduler (eng_sched_join) */
    uint64_t sched_ticket;   /* its join order */
};

/* sched.c: a joined sequence's forward (one eng_step item), run in the next step that
 * takes it; called with the scheduler's lock held, which it lets go while it waits.
 * WK_ECANCELLED (nothing run) when *cancel turns true before a step took it. */
int eng_sched_forward(struct eng_sched *s, const eng_step_item *item, const atomic_bool *cancel, wk_error *err);

/* The request-level policy p resolved for the forward chunk at [pos, pos + nt) of a
 * prompt spanning [span0, span1): NULL (dense) when every query of the chunk is in the
 * dense tail, else *out, the call-level policy (backend.h). */
const be_attn_policy *eng_chunk_policy(const be_attn_policy *p, int32_t span0, int32_t span1, int32_t pos,
                                       int32_t nt, be_attn_policy *out);

/* Before the position goes down (clear, truncate, restore): remember how far it got. */
static inline void seq_note_high_water(eng_seq *s)
{
    if (s->st.n_past > s->high_water) s->high_water = s->st.n_past;
}

#endif
