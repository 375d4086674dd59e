/* Speculative decoding, the engine's part: the acceptance rule, state rollback of a
 * sequence after a rejected draft, and the three draft sources (prompt lookup over
 * n-grams, a smaller draft model, the model's own MTP block). The decode loop that
 * uses them is pipeline/speculate.c.
 *
 * One step: the target model is fed [t, d1 .. dk] as one batch (eng_decode_rows): t is
 * the token just chosen, d1..dk the drafts. Row i of its logits is what plain decoding
 * would have seen after d_i (t for i = 0), so the loop chooses each next token from row
 * i exactly as it would have, and keeps going while the choice equals the next draft.
 * At temperature 0 that is greedy acceptance and the output is token for token plain
 * decoding; at temperature > 0 eng_spec_accept is the rejection-sampling rule that keeps
 * the output distributed as plain sampling. Rows after the first mismatch are thrown
 * away and the sequence is cut back (eng_seq_mark / eng_seq_rewind). */
#ifndef WICK_ENGINE_SPEC_H
#define WICK_ENGINE_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/context.h"
#include "engine/sampler.h"
#include "engine/sequence.h"
#include "util/err.h"

/* Longest draft the engine proposes per step; the adaptive length stays in [1, this]. */
#define ENG_SPEC_MAX_DRAFT 8

/* ---- the acceptance rule ----------------------------------------------------------- */

/* Speculative sampling for one draft token d: p is the target's distribution at this
 * position and q the one d was drawn from (dense probabilities over n_vocab tokens; q
 * NULL: a point mass on d, as for prompt lookup). Accepts d with probability
 * min(1, p(d) / q(d)) (u_accept < p(d)/q(d)); otherwise returns a token drawn with
 * u_resample from max(0, p − q) renormalized (which gives d no mass). u_* are uniform in
 * [0, 1). When rounding leaves that residual empty (p == q), draws from p. */
int32_t eng_spec_accept(const float *p, const float *q, int32_t n_vocab, int32_t d, double u_accept,
                        double u_resample);

/* ---- rollback ------------------------------------------------------------------------ */

/* What a sequence looked like before a speculative batch: its position and, for models
 * with recurrent layers, a copy of the conv + SSM state in backend memory (be_copy: no
 * host round trip). Zero-initialize; one mark is reused step after step. */
typedef struct eng_seq_mark {
    const eng_seq *seq;  /* the sequence it was taken of */
    int32_t pos;
    uint64_t tail_hash;  /* hash of the last tokens before pos: a stale mark is refused */
    /* per part of the context (a layer split: each part's state stays on its device) */
    be_backend *be[ENG_MAX_SPLIT];
    void *state[ENG_MAX_SPLIT];  /* backend memory, state_bytes[p] (NULL: no recurrent layers there) */
    size_t state_bytes[ENG_MAX_SPLIT];
} eng_seq_mark;

/* Records the sequence's position and copies its recurrent state into the mark
 * (allocated on first use). WK_ENOMEM. */
int eng_seq_mark_save(eng_seq *s, eng_seq_mark *mk, wk_error *err);

/* Cuts the sequence back to `to` tokens (mark position <= to <= position), undoing a
 * speculative batch fed after the mark. Attention layers are truncated to `to`; the
 * recurrent state cannot be cut, so a model with recurrent layers goes back to the
 * mark's position with the saved state and *reached = mark position: the caller feeds
 * tokens [*reached, to) again (they come back identical). WK_EINVAL for a mark of
 * another sequence or one the sequence has moved away from (fewer tokens, or others). */
int eng_seq_rewind(eng_seq *s, const eng_seq_mark *mk, int32_t to, int32_t *reached, wk_error *err);

void eng_seq_mark_free(eng_seq_mark *mk);

/* Bytes of one mark of this sequence (the recurrent state; 0 for pure attention). */
size_t eng_seq_mark_bytes(const eng_seq *s);

/* ---- a proposal -------------------------------------------------------------------- */

/* Drafts of one step and, for sampled drafts, the distribution each was drawn from. */
typedef struct eng_draft {
    int32_t n;                        /* drafts proposed */
    int32_t tok[ENG_SPEC_MAX_DRAFT];
    bool has_q;                       /* false: point masses (greedy drafts, lookup) */
    float *q[ENG_SPEC_MAX_DRAFT];     /* has_q: dense [n_vocab] distributions, owned by the source */
} eng_draft;

/* How draft models pick: greedy (point masses), or sampled at the request's temperature,
 * top-k, top-p and min-p with the distribution recorded (eng_draft.q). */
typedef struct eng_draft_sampling {
    bool sample;
    eng_sampler_params params;
} eng_draft_sampling;

/* ---- source 1: prompt lookup (n-grams of the context) -------------------------------- */

typedef struct eng_ngram eng_ngram;

/* An index from the hash of every n-gram (n in [1, ENG_NGRAM_MAX]) of the context to
 * the position it last ended at. WK_ENOMEM. */
#define ENG_NGRAM_MAX 8
int eng_ngram_new(eng_ngram **out, wk_error *err);
void eng_ngram_free(eng_ngram *g);
/* Forgets everything (a new request). */
void eng_ngram_reset(eng_ngram *g);

/* Indexes ctx[0 .. n-1) (everything but the last token, whose continuation is what a
 * lookup asks for). ctx only ever grows between resets: a call indexes what is new.
 * WK_ENOMEM (the index keeps what it had). */
int eng_ngram_add(eng_ngram *g, const int32_t *ctx, int32_t n, wk_error *err);

/* Proposes up to k tokens to follow ctx[0..n): the continuation after the latest
 * earlier occurrence of the longest suffix of ctx (up to ENG_NGRAM_MAX tokens) found in
 * the index. Returns how many (0: no match); *match_len the suffix length matched. */
int32_t eng_ngram_propose(eng_ngram *g, const int32_t *ctx, int32_t n, int32_t k, int32_t *out,
                          int32_t *match_len);

/* ---- source 2: a draft model -------------------------------------------------------- */

typedef struct eng_drafter eng_drafter;

/* A draft model (same vocabulary as the target: checked against target_vocab tokens by
 * the caller, see pl_engine) with its own context and sequence of n_ctx positions on the
 * options' device. The model is borrowed. Errors as eng_ctx_new / eng_seq_new. */
int eng_drafter_new(eng_drafter **out, const model *draft, const eng_options *o, int32_t n_ctx, wk_error *err);
void eng_drafter_free(eng_drafter *d);
eng_ctx *eng_drafter_ctx(eng_drafter *d);
/* Memory its sequence holds (KV of every position, recurrent state and its copy). */
size_t eng_drafter_bytes(const eng_drafter *d);
/* A new, empty sequence of at least n_ctx positions when it has fewer. WK_ENOMEM. */
int eng_drafter_reserve(eng_drafter *d, int32_t n_ctx, wk_error *err);

/* Proposes up to k tokens to follow ctx[0..n): the draft sequence is brought to ctx
 * (the common prefix kept: truncated, or back to its mark for a recurrent draft model;
 * the rest fed as one prefill), then k tokens are decoded with the draft model. The
 * draft's own state stays whatever it was (the next call brings it back in line).
 * Errors from the draft model's forward passes (the caller proposes nothing then). */
int eng_drafter_propose(eng_drafter *d, const int32_t *ctx, int32_t n, int32_t k, const eng_draft_sampling *ds,
                        eng_draft *out, wk_error *err);

/* ---- source 3: the model's MTP block ------------------------------------------------ */

typedef struct eng_mtp eng_mtp;

/* MTP drafting for a context whose model has an MTP block (model.has_mtp): its one
 * attention layer's KV (n_ctx positions) on the context's backend; forward passes share
 * the context's activation buffers between the target's steps. WK_EINVAL without an MTP
 * block, WK_ENOMEM. */
int eng_mtp_new(eng_mtp **out, eng_ctx *c, int32_t n_ctx, wk_error *err);
void eng_mtp_free(eng_mtp *t);

/* A request begins: ctx[0..n) is its prompt and the target computes positions
 * [start, n) (the rest comes from the prefix cache). The MTP keeps the part of its KV
 * that the prompt shares and that the hidden states to come can continue, else starts
 * afresh at start + 1 (position 0 has no hidden state before it). Feed the target's
 * hidden rows with eng_mtp_hidden from then on. */
void eng_mtp_begin(eng_mtp *t, const int32_t *ctx, int32_t n, int32_t start);

/* The target's final-normed hidden rows of positions [pos0, pos0 + n_rows) (host
 * [n_rows][n_embd]); ctx[0..n_ctx) are the tokens the target has been fed. The MTP block
 * catches up over every position it can now compute (pairs (ctx[p], h[p-1]), p < n_ctx);
 * the newest row waits for the next token. Rows before what it has are ignored; a gap
 * (rows it cannot join) makes it start afresh after the gap. Errors from its forward
 * passes (it starts afresh at the next rows). */
int eng_mtp_hidden(eng_mtp *t, const int32_t *ctx, int32_t n_ctx, int32_t pos0, int32_t n_rows, const float *rows,
                   wk_error *err);

/* Proposes up to k tokens to follow ctx[0..n), where ctx[n-1] is the token chosen after
 * the target's last fed position n - 2: the block runs at position n - 1 on (ctx[n-1],
 * the target's hidden state of n - 2), then on its own drafts and outputs. Proposes
 * nothing (0, no error) when it has not caught up to exactly that point. */
int eng_mtp_propose(eng_mtp *t, const int32_t *ctx, int32_t n, int32_t k, const eng_draft_sampling *ds,
                    eng_draft *out, wk_error *err);

/* Bytes of its KV (for reports), and the context it was made for. */
size_t eng_mtp_bytes(const eng_mtp *t);
int32_t eng_mtp_capacity(const eng_mtp *t);

#endif
