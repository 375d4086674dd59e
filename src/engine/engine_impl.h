/* Internals shared by engine/context.c and engine/sequence.c. */
#ifndef WICK_ENGINE_ENGINE_IMPL_H
#define WICK_ENGINE_ENGINE_IMPL_H

#include <stddef.h>

#include "engine/context.h"
#include "engine/sequence.h"

/* One device of a context: the backend, activation buffers, and the layers it runs
 * (all of them without a split). */
typedef struct eng_part {
    be_backend *be;          /* owned */
    model_scratch *scratch;  /* owned, sized for n_ubatch tokens; linked to the next part's */
    uint32_t first, end;     /* layers [first, end) */
    int32_t gpu;             /* CUDA ordinal (CPU: 0) */
    uint64_t held_bytes;     /* counted against --gpu-mem: weights + scratch + live sequences' state */
} eng_part;

struct eng_ctx {
    const model *src;        /* borrowed: the loaded model */
    model prepared;          /* working copy with weights prepared for the parts' backends (model_prepare) */
    const model *m;          /* = &prepared */
    eng_options opt;
    eng_part parts[ENG_MAX_SPLIT];
    int32_t n_parts;         /* 1 without a split */
    be_backend *be;          /* = parts[0].be: the embedding's (and every layer's without a split) */
    model_scratch *scratch;  /* = parts[0].scratch: where a forward pass starts */
    float *logits;           /* host [n_vocab]: after the last token */
    float *logits_all;       /* host [logits_all_cap][n_vocab] */
    int32_t logits_all_rows, logits_all_cap;
    float *hidden;           /* host [hidden_cap][n_embd]: final-normed hidden rows (eng_hidden_all) */
    int32_t hidden_rows, hidden_cap;
    uint64_t policy_fp;
    int32_t fail_after;      /* eng_ctx_fail_after: forward calls left before an injected failure, 0 = off */
    struct eng_sched *sched; /* the step scheduler attached to it (sched.h), or NULL */
};

/* A sequence's state on one part of its context: the K and V of the part's attention
 * layers, then the conv and ssm state of its recurrent layers (in layer order, so the
 * parts' recurrent blocks laid end to end are the state of an unsplit context). */
typedef struct eng_seq_part {
    uint16_t *kv_mem;        /* backend memory */
    size_t kv_bytes;
    float *rec_mem;          /* backend memory */
    size_t rec_floats;
} eng_seq_part;

struct eng_seq {
    eng_ctx *ctx;            /* borrowed */
    model_state st;
    model_layer_state *layers; /* [n_layer], st.layers points here */
    eng_seq_part parts[ENG_MAX_SPLIT]; /* one per context part */
    size_t rec_floats;       /* over all parts */
    int32_t *tokens;         /* host [capacity] */
    int32_t high_water;      /* most positions ever held (pages of KV written so far) */
    size_t kv_bytes;         /* the KV allocations, all parts */
    uint64_t policy_fp;
    float *logits;           /* host [n_vocab]: eng_step's logits of this sequence, NULL until asked */
    bool sched_joined;       /* its forwards go through the scheduler (eng_sched_join) */
    uint64_t sched_ticket;   /* its join order */
};

/* "cuda:1" (or "cpu part 1") for messages about part p. */
const char *eng_part_name(const eng_ctx *c, int32_t p, char *buf, size_t cap);
/* Bytes the parts on GPU gpu hold (counted against --gpu-mem). */
uint64_t eng_gpu_held(const eng_ctx *c, int32_t gpu);
/* The backend of the output head (the last part): the host buffers its logits are copied
 * into come from it (be_host_alloc). */
static inline be_backend *eng_out_backend(const eng_ctx *c) { return c->parts[c->n_parts - 1].be; }
/* s->logits (a step's or eng_decode_own's next-token logits), allocated on first use from
 * the output backend. 0 or WK_ENOMEM. */
int eng_seq_logits_alloc(eng_ctx *c, eng_seq *s, wk_error *err);
/* The part that runs layer il (the last for il >= n_layer). */
int32_t eng_ctx_layer_part(const eng_ctx *c, uint32_t il);

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
