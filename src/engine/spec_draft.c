/* A draft model: its own context and sequence, brought in line with the target's
 * accepted context before each proposal (the common prefix kept), then k decode steps. */
#include <stdlib.h>
#include <string.h>

#include "engine/spec_impl.h"

struct eng_drafter {
    eng_ctx *ctx;
    eng_seq *seq;
    eng_seq_mark mark; /* recurrent draft models: the state after the last context fed */
    bool recurrent;
    spec_picker pick;
};

int eng_drafter_new(eng_drafter **out, const model *draft, const eng_options *o, int32_t n_ctx, wk_error *err)
{
    *out = NULL;
    eng_drafter *d = calloc(1, sizeof *d);
    if (!d) return wk_fail(err, WK_ENOMEM, "draft model: out of memory");
    eng_options opt = *o;
    opt.n_ctx = n_ctx;
    memset(&opt.policy, 0, sizeof opt.policy); /* a draft attends densely: only its guesses depend on it */
    opt.split.n = 1; /* a small draft model is not split: it runs on the first GPU of the target's list */
    int rc = eng_ctx_new(&d->ctx, draft, &opt, err);
    if (!rc) rc = eng_seq_new(&d->seq, d->ctx, n_ctx, err);
    if (rc) {
        eng_drafter_free(d);
        return rc;
    }
    d->recurrent = eng_seq_mark_bytes(d->seq) > 0;
    *out = d;
    return 0;
}

void eng_drafter_free(eng_drafter *d)
{
    if (!d) return;
    eng_seq_mark_free(&d->mark);
    spec_picker_free(&d->pick);
    eng_seq_free(d->seq);
    eng_ctx_free(d->ctx);
    free(d);
}

eng_ctx *eng_drafter_ctx(eng_drafter *d) { return d->ctx; }

size_t eng_drafter_bytes(const eng_drafter *d)
{
    if (!d->seq) return 0;
    return (size_t)eng_kv_bytes_per_token(d->ctx) * (size_t)eng_seq_capacity(d->seq) + 2 * eng_seq_mark_bytes(d->seq);
}

int eng_drafter_reserve(eng_drafter *d, int32_t n_ctx, wk_error *err)
{
    if (eng_seq_capacity(d->seq) >= n_ctx) return 0;
    eng_seq_mark_free(&d->mark);
    eng_seq_free(d->seq);
    d->seq = NULL;
    return eng_seq_new(&d->seq, d->ctx, n_ctx, err);
}

/* Cuts the draft sequence back to at most `keep` tokens of ctx; returns what it holds. */
static int32_t draft_sync(eng_drafter *d, const int32_t *ctx, int32_t keep)
{
    eng_seq *s = d->seq;
    const int32_t *have = eng_seq_tokens(s);
    int32_t pos = eng_seq_pos(s), common = 0;
    int32_t lim = pos < keep ? pos : keep;
    while (common < lim && have[common] == ctx[common]) common++;
    if (common == pos) return pos;
    wk_error err = {0};
    int32_t reached = 0;
    if (!d->recurrent) {
        if (kv_truncate(s, common, &err) == 0) return common;
    } else if (d->mark.seq == s && d->mark.pos <= common &&
               eng_seq_rewind(s, &d->mark, common, &reached, &err) == 0) {
        return reached;
    }
    eng_seq_clear(s);
    return 0;
}

int eng_drafter_propose(eng_drafter *d, const int32_t *ctx, int32_t n, int32_t k, const eng_draft_sampling *ds,
                        eng_draft *out, wk_error *err)
{
    k = draft_begin(out, k);
    const int32_t n_vocab = eng_n_vocab(d->ctx);
    if (!d->seq || n < 1 || k < 1 || n + k > eng_seq_capacity(d->seq)) return 0;
    int rc = spec_picker_prepare(&d->pick, ds, n_vocab, err);
    if (rc) return rc;
    /* at least the last token is fed: its logits give the first draft */
    int32_t have = draft_sync(d, ctx, n - 1);
    rc = eng_prefill(d->ctx, d->seq, ctx + have, n - have, NULL, err);
    if (rc) {
        eng_seq_clear(d->seq);
        return rc;
    }
    if (d->recurrent && (rc = eng_seq_mark_save(d->seq, &d->mark, err))) return rc;
    const bool greedy = !ds || !ds->sample;
    int32_t next = spec_picker_pick(&d->pick, ds, eng_logits(d->ctx), 0, out);
    for (int32_t i = 0; i < k && next >= 0; i++) {
        out->tok[i] = next;
        out->n = i + 1;
        if (i + 1 == k) break;
        if (greedy) {
            rc = eng_decode_greedy(d->ctx, d->seq, next, &next, err);
            if (!rc) out->tok[i + 1] = next;
        } else {
            rc = eng_decode(d->ctx, d->seq, next, err);
            if (!rc) next = spec_picker_pick(&d->pick, ds, eng_logits(d->ctx), i + 1, out);
        }
        if (rc) {
            out->n = 0;
            eng_seq_clear(d->seq); /* its state is not to be trusted */
            return rc;
        }
    }
    return 0;
}
