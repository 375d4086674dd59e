/* Speculative decoding in the one decode loop (pipeline_internal.h): the drafts of a
 * step are verified in one forward pass of [pending tokens, d1 .. dk]; the loop chooses
 * every token from the verified rows exactly as plain decoding would from its own, so
 * stop strings, max_tokens, end of generation, the detokenizer and the tool-call parser
 * see the accepted tokens in order and nothing else.
 *
 * The sequence: after a batch it is cut back to the accepted tokens (attention KV
 * truncated; recurrent state back to the copy taken before the batch, the accepted
 * tokens then "pending" and fed again at the front of the next batch, so a rollback
 * costs no forward pass of its own). The cache hears of a generated token
 * (ckpt_cache_decoded) only once the sequence holds it for good, and a batch never
 * runs past the next interval checkpoint, so checkpoints land where plain decoding puts
 * them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/pipeline_internal.h"
#include "util/log.h"
#include "util/timeutil.h"

/* Cost of verifying one more token, relative to a decode step, until the request's own
 * batches have measured it (a line fitted to batch time against batch length): what
 * makes a longer draft worth it. On the 2-core CPU every extra row is mostly LM-head
 * arithmetic, 0.1-0.25 of a step for the 0.6B / 0.8B shapes (wick bench --verify). */
#define VERIFY_COST_PRIOR 0.15
/* Weight of the past in the running acceptance and timings (per step). */
#define ACCEPT_DECAY 0.9
/* When no draft length pays (a source that is rarely right), drafting stops and is
 * tried again with one draft after this many tokens, to see whether it has become so;
 * each probe that finds it still does not pay doubles the wait, up to PROBE_MAX (a
 * probe of a draft model costs its catch-up over the tokens since the last one). */
#define PROBE_EVERY 16
#define PROBE_MAX 256
/* Plain decode steps a request takes before it drafts, to time plain decoding itself:
 * the yardstick drafted steps are held to (see adapt). */
#define PLAIN_FIRST 2

struct pl_spec {
    pl_request *r;
    int mode;                 /* ENG_SPEC_NGRAM, DRAFT or MTP */
    eng_ctx *ctx;
    eng_seq *seq;
    int32_t n_vocab, ub;
    /* the context: prompt, then every token fed (what the sequence must end up holding) */
    int32_t *hist;
    int32_t n_hist, cap_hist, n_prompt;
    int32_t n_confirmed;      /* generated tokens reported to the cache */
    /* the batch in flight */
    bool active;
    int32_t start, m, len;    /* position before it, pending tokens at its front, its length */
    int32_t cur;              /* drafts accepted so far: the next row is cur */
    eng_draft d;
    int32_t *batch;           /* [ub] */
    eng_seq_mark mark;
    /* choosing */
    eng_sampler *smp;
    bool greedy;
    eng_draft_sampling ds;
    float *p;                 /* [n_vocab] the target's distribution (temperature > 0) */
    int32_t *ids;
    float *probs;
    /* adaptive draft length */
    double acc, rej;          /* decayed counts of accepted drafts and of misses */
    double draft_ms;          /* decayed time per draft token */
    double fit[5];            /* decayed sums for batch time t against extra rows x: n, x, t, xx, xt */
    int32_t k;                /* 0: not worth it now */
    int32_t idle;             /* tokens since the last proposal while k is 0 */
    int32_t probe_every;      /* the wait before the next probe (PROBE_EVERY .. PROBE_MAX) */
    bool probing;             /* the batch in flight is a probe */
    int32_t warm;             /* plain steps still to take first (PLAIN_FIRST) */
    double plain_ms;          /* decayed time of a one-token batch: a plain decode step */
    double spec_ms_tok;       /* decayed time per token given by drafted steps */
    double propose_ms, step_ms; /* the batch in flight: drafting, drafting + forward pass */
    /* MTP while it does not draft: the target's hidden rows of positions [held_pos0,
     * held_pos0 + n_held), handed to the block in one catch-up before the next probe (so
     * the probe drafts with the whole context, not from a block restarted after a gap) */
    float *held;              /* [cap_held][n_embd] */
    int32_t held_pos0, n_held, cap_held, n_embd;
};

/* ---- the engine's side --------------------------------------------------------------- */

/* The draft model must speak the model's vocabulary token for token. */
static int check_vocab(const pl_engine *pe, const model *dm, const tok_vocab *dv, wk_error *err)
{
    if (dm->hp.n_vocab != pe->m->hp.n_vocab)
        return wk_fail(err, WK_EINVAL, "draft model %s: %u vocabulary rows, the model has %u", pe->draft_path,
                       dm->hp.n_vocab, pe->m->hp.n_vocab);
    if (!pe->vocab || !dv) return 0; /* token ids only: the row count is all there is to compare */
    int32_t n = tok_n_vocab(pe->vocab);
    if (tok_n_vocab(dv) != n)
        return wk_fail(err, WK_EINVAL, "draft model %s: a tokenizer of %d tokens, the model's has %d", pe->draft_path,
                       tok_n_vocab(dv), n);
    for (int32_t i = 0; i < n; i++) {
        size_t la, lb;
        const char *a = tok_token_text(pe->vocab, i, &la), *b = tok_token_text(dv, i, &lb);
        if (la != lb || (la && memcmp(a, b, la)))
            return wk_fail(err, WK_EINVAL, "draft model %s: token %d is '%.*s', the model's is '%.*s'", pe->draft_path,
                           i, (int)(lb < 40 ? lb : 40), b, (int)(la < 40 ? la : 40), a);
    }
    return 0;
}

int pl_spec_open(pl_engine *pe, wk_error *err)
{
    int rc = eng_ngram_new(&pe->ngram, err);
    if (rc || !pe->cfg.draft_path || !pe->cfg.draft_path[0]) return rc;
    snprintf(pe->draft_path, sizeof pe->draft_path, "%s", pe->cfg.draft_path);
    pe->cfg.draft_path = pe->draft_path;
    rc = model_load(&pe->draft_m, pe->draft_path, err);
    if (rc) return rc;
    tok_vocab *dv = NULL;
    wk_error terr = {0};
    if (tok_load_from_gguf(&dv, pe->draft_m->file, &terr)) dv = NULL;
    rc = check_vocab(pe, pe->draft_m, dv, err);
    tok_free(dv);
    if (!rc) {
        eng_options o = *eng_ctx_options(pe->ctx);
        rc = eng_drafter_new(&pe->drafter, pe->draft_m, &o, ckpt_cache_n_ctx(pe->cache), err);
        if (rc) wk_fail_prefix(err, "draft model %s", pe->draft_path);
    }
    return rc;
}

void pl_spec_close(pl_engine *pe)
{
    eng_mtp_free(pe->mtp);
    eng_drafter_free(pe->drafter);
    model_free(pe->draft_m);
    eng_ngram_free(pe->ngram);
    pe->mtp = NULL;
    pe->drafter = NULL;
    pe->draft_m = NULL;
    pe->ngram = NULL;
}

bool pl_engine_has_draft(const pl_engine *pe) { return pe->drafter != NULL; }

size_t pl_engine_spec_bytes(const pl_engine *pe)
{
    const model *m = pe->m;
    size_t b = (model_conv_elems(m) + model_ssm_elems(m)) * sizeof(float) * m->hp.n_rec_layers;
    if (pe->mtp) b += eng_mtp_bytes(pe->mtp);
    else if (m->has_mtp && m->hp.n_attn_layers) /* made on first use: one attention layer's KV */
        b += eng_kv_bytes_per_token(pe->ctx) / m->hp.n_attn_layers * (size_t)(ckpt_cache_n_ctx(pe->cache) + ENG_SPEC_MAX_DRAFT);
    if (pe->drafter) b += eng_drafter_bytes(pe->drafter);
    return b;
}
bool pl_engine_has_mtp(const pl_engine *pe) { return pe->m->has_mtp; }

int pl_spec_admit(pl_request *r)
{
    const pl_engine *pe = r->pe;
    int mode = r->req->spec ? r->req->spec : pe->cfg.spec;
    /* batched steps take one token per sequence: no drafts beside other requests */
    if (mode == ENG_SPEC_DEFAULT || pe->cfg.eng.n_seq > 1) mode = ENG_SPEC_OFF;
    if (mode == ENG_SPEC_AUTO)
        mode = pl_engine_has_mtp(pe) ? ENG_SPEC_MTP : pl_engine_has_draft(pe) ? ENG_SPEC_DRAFT : ENG_SPEC_NGRAM;
    if (mode == ENG_SPEC_DRAFT && !pl_engine_has_draft(pe))
        return pl_fail(r, 400, "invalid_request_error", NULL,
                       "speculative source 'draft' needs a draft model (start wick with --draft FILE.gguf)");
    if (mode == ENG_SPEC_MTP && !pl_engine_has_mtp(pe))
        return pl_fail(r, 400, "invalid_request_error", NULL,
                       "speculative source 'mtp': the model file has no MTP block (nextn tensors)");
    r->spec = mode;
    return 0;
}

static void on_prompt_hidden(void *user, int32_t pos0, int32_t n, const float *rows)
{
    pl_request *r = user;
    wk_error err = {0};
    if (eng_mtp_hidden(r->pe->mtp, r->ids, r->n, pos0, n, rows, &err))
        WK_WARN("MTP: catching up on the prompt failed (%s); drafting restarts after it", err.msg);
}

/* The MTP state, made (or remade for a larger context) on first use. */
static eng_mtp *mtp_for(pl_engine *pe, wk_error *err)
{
    int32_t n_ctx = ckpt_cache_n_ctx(pe->cache);
    if (pe->mtp && eng_mtp_capacity(pe->mtp) >= n_ctx) return pe->mtp;
    eng_mtp_free(pe->mtp);
    pe->mtp = NULL;
    if (eng_mtp_new(&pe->mtp, pe->ctx, n_ctx, err)) pe->mtp = NULL;
    return pe->mtp;
}

void pl_spec_prefill_opts(pl_request *r, eng_prefill_opts *po)
{
    if (r->spec != ENG_SPEC_MTP) return;
    wk_error err = {0};
    eng_mtp *t = mtp_for(r->pe, &err);
    if (!t) {
        WK_WARN("MTP drafting off for this request: %s", err.msg);
        return;
    }
    eng_mtp_begin(t, r->ids, r->n, r->plan.start);
    po->hidden = on_prompt_hidden;
    po->hidden_user = r;
}

/* ---- one request ----------------------------------------------------------------------- */

int pl_spec_new(pl_spec **out, pl_request *r, eng_sampler *smp, const eng_sampler_params *sp)
{
    *out = NULL;
    if (r->spec == ENG_SPEC_OFF || r->spec == ENG_SPEC_DEFAULT) return 0;
    if (r->spec == ENG_SPEC_MTP && !r->pe->mtp) return 0; /* could not be made: warned at prefill */
    pl_spec *s = calloc(1, sizeof *s);
    if (!s) return pl_fail(r, 500, "server_error", NULL, "out of memory");
    s->r = r;
    s->mode = r->spec;
    s->ctx = r->pe->ctx;
    s->seq = r->plan.seq;
    s->n_vocab = eng_n_vocab(s->ctx);
    /* a batch no longer than the backend computes exactly as single rows: at temperature
     * 0 the output is then plain decoding's token for token */
    s->ub = eng_ctx_options(s->ctx)->n_ubatch;
    if (eng_exact_batch(s->ctx) > 0 && eng_exact_batch(s->ctx) < s->ub) s->ub = eng_exact_batch(s->ctx);
    s->cap_hist = eng_seq_capacity(s->seq) + 1;
    s->smp = smp;
    s->greedy = sp->temperature <= 0.0f || sp->top_k == 1;
    s->ds.sample = !s->greedy;
    s->ds.params = *sp;
    s->k = 4; /* a middle start; the running acceptance and timings take it from there */
    s->warm = PLAIN_FIRST;
    s->probe_every = PROBE_EVERY;
    s->hist = malloc(sizeof(int32_t) * (size_t)s->cap_hist);
    s->batch = malloc(sizeof(int32_t) * (size_t)s->ub);
    if (!s->greedy) {
        s->p = malloc(sizeof(float) * (size_t)s->n_vocab);
        s->ids = malloc(sizeof(int32_t) * (size_t)s->n_vocab);
        s->probs = malloc(sizeof(float) * (size_t)s->n_vocab);
    }
    if (s->mode == ENG_SPEC_MTP) {
        s->n_embd = (int32_t)r->pe->m->hp.n_embd;
        s->cap_held = PROBE_MAX + s->ub;
        s->held = malloc(sizeof(float) * (size_t)s->n_embd * (size_t)s->cap_held);
    }
    if (!s->hist || !s->batch || (!s->greedy && (!s->p || !s->ids || !s->probs)) ||
        (s->mode == ENG_SPEC_MTP && !s->held)) {
        pl_spec_free(s);
        return pl_fail(r, 500, "server_error", NULL, "out of memory");
    }
    memcpy(s->hist, r->ids, sizeof(int32_t) * (size_t)r->n);
    s->n_hist = s->n_prompt = r->n;
    if (s->mode == ENG_SPEC_NGRAM) eng_ngram_reset(r->pe->ngram);
    snprintf(r->c.spec, sizeof r->c.spec, "%s", eng_spec_mode_name(s->mode));
    *out = s;
    return 0;
}

void pl_spec_free(pl_spec *sp)
{
    if (!sp) return;
    eng_seq_mark_free(&sp->mark);
    free(sp->hist);
    free(sp->batch);
    free(sp->p);
    free(sp->ids);
    free(sp->probs);
    free(sp->held);
    free(sp);
}

const float *pl_spec_logits(const pl_spec *sp)
{
    if (!sp->active) return eng_logits(sp->ctx);
    return eng_logits_all(sp->ctx, NULL) + (size_t)sp->cur * (size_t)sp->n_vocab;
}

int32_t pl_spec_choose(pl_spec *sp, const float *row)
{
    const bool drafted = sp->active && sp->cur < sp->d.n;
    if (sp->greedy || !drafted) return eng_sampler_sample(sp->smp, row, NULL);
    int32_t n = eng_sampler_dist(sp->smp, row, sp->ids, sp->probs);
    if (n <= 0) return -1;
    memset(sp->p, 0, sizeof(float) * (size_t)sp->n_vocab);
    for (int32_t i = 0; i < n; i++) sp->p[sp->ids[i]] = sp->probs[i];
    const float *q = sp->d.has_q ? sp->d.q[sp->cur] : NULL;
    double u_accept = eng_sampler_uniform(sp->smp), u_resample = eng_sampler_uniform(sp->smp);
    return eng_spec_accept(sp->p, q, sp->n_vocab, sp->d.tok[sp->cur], u_accept, u_resample);
}

/* Reports the generated tokens the sequence now holds for good to the cache. */
static void confirm(pl_spec *sp)
{
    int32_t held = eng_seq_pos(sp->seq) - sp->n_prompt;
    for (; sp->n_confirmed < held; sp->n_confirmed++) ckpt_cache_decoded(sp->r->pe->cache, &sp->r->plan);
}

/* The draft length that maximizes expected tokens per unit of time for a per-draft
 * acceptance alpha (each draft accepted with alpha until the first miss):
 * E[tokens] = (1 - alpha^(k+1)) / (1 - alpha), against a cost of 1 + (verify + draft) * k
 * decode steps. 0 when no length beats plain decoding. */
static int32_t best_k(double alpha, double per_draft)
{
    int32_t best = 0;
    double best_v = 1.0;
    for (int32_t k = 1; k <= ENG_SPEC_MAX_DRAFT; k++) {
        double v = (1.0 - pow(alpha, k + 1)) / (1.0 - alpha) / (1.0 + per_draft * k);
        if (v > best_v * 1.02) { /* a longer draft must win clearly */
            best_v = v;
            best = k;
        }
    }
    return best;
}

static double decayed(double old, double x) { return old > 0 ? old * ACCEPT_DECAY + x * (1 - ACCEPT_DECAY) : x; }

/* One batch of 1 + x tokens took t ms. */
static void fit_add(pl_spec *sp, double x, double t)
{
    double *f = sp->fit, add[5] = {1, x, t, x * x, x * t};
    for (int i = 0; i < 5; i++) f[i] = f[i] * ACCEPT_DECAY + add[i];
}

/* The fitted decode step (ms) and cost per extra row relative to it; the prior cost
 * while the batches seen have not varied in length. */
static void fit_get(const pl_spec *sp, double *step_ms, double *per_row)
{
    const double *f = sp->fit;
    double den = f[0] * f[3] - f[1] * f[1];
    *per_row = VERIFY_COST_PRIOR;
    if (f[0] > 0 && den > 1e-6 * f[0] * f[0]) {
        double b = (f[0] * f[4] - f[1] * f[2]) / den, a = (f[2] - b * f[1]) / f[0];
        if (a > 0) *per_row = b / a < 0.01 ? 0.01 : b / a > 1.0 ? 1.0 : b / a;
    }
    *step_ms = f[0] > 0 ? f[2] / f[0] / (1.0 + *per_row * f[1] / f[0]) : 0;
}

static void adapt(pl_spec *sp, int32_t accepted, bool all)
{
    sp->acc = sp->acc * ACCEPT_DECAY + accepted;
    sp->rej = sp->rej * ACCEPT_DECAY + (all ? 0 : 1);
    sp->spec_ms_tok = decayed(sp->spec_ms_tok, sp->step_ms / (accepted + 1)); /* + the token chosen after them */
    double alpha = (sp->acc + 1.0) / (sp->acc + sp->rej + 2.0); /* Laplace: one of each to start */
    double step_ms, per_row;
    fit_get(sp, &step_ms, &per_row);
    if (sp->plain_ms > 0) step_ms = sp->plain_ms; /* measured, not extrapolated from the fit */
    sp->k = best_k(alpha, per_row + (step_ms > 0 ? sp->draft_ms / step_ms : 0));
    /* The model above leaves out what a draft source costs besides its proposals (a
     * draft model's catch-up, the state copies); what was measured decides: a draft
     * model or MTP head whose drafted steps give tokens more slowly than plain decoding
     * stops drafting until a probe says otherwise. Prompt lookup costs next to nothing
     * when it has no match, so its good stretches are not held back by its bad ones. */
    if (sp->mode != ENG_SPEC_NGRAM && sp->plain_ms > 0 && sp->spec_ms_tok > sp->plain_ms) sp->k = 0;
    if (sp->probing) {
        sp->probe_every = sp->k > 0 ? PROBE_EVERY : sp->probe_every * 2 < PROBE_MAX ? sp->probe_every * 2 : PROBE_MAX;
        sp->probing = false;
    }
}

/* Holds the hidden rows of the kept tokens of the batch in flight (positions start ..,
 * kept <= ub < cap_held), after those held before when they join, else instead of them;
 * when full, the oldest go (the block then restarts after them, with the newest cap_held
 * positions of context). */
static void hold_rows(pl_spec *sp, int32_t kept)
{
    const size_t E = (size_t)sp->n_embd;
    const float *rows = eng_hidden_all(sp->ctx, NULL);
    if (sp->n_held == 0 || sp->held_pos0 + sp->n_held != sp->start) {
        sp->held_pos0 = sp->start;
        sp->n_held = 0;
    }
    const int32_t drop = sp->n_held + kept > sp->cap_held ? sp->n_held + kept - sp->cap_held : 0;
    if (drop) {
        memmove(sp->held, sp->held + (size_t)drop * E, sizeof(float) * E * (size_t)(sp->n_held - drop));
        sp->held_pos0 += drop;
        sp->n_held -= drop;
    }
    memcpy(sp->held + (size_t)sp->n_held * E, rows, sizeof(float) * E * (size_t)kept);
    sp->n_held += kept;
}

/* The MTP block and the target's hidden rows of the batch in flight: followed at once while
 * the block drafts or a probe is next (with the rows held since it stopped, in one pass),
 * held otherwise: a block pass per token would cost what drafting does not repay. */
static void mtp_follow(pl_spec *sp, int32_t kept, bool now)
{
    pl_request *r = sp->r;
    wk_error err = {0};
    int rc = 0;
    if (!now) {
        hold_rows(sp, kept);
        return;
    }
    if (sp->n_held > 0 && sp->held_pos0 + sp->n_held == sp->start) {
        hold_rows(sp, kept);
        rc = eng_mtp_hidden(r->pe->mtp, sp->hist, sp->start + kept, sp->held_pos0, sp->n_held, sp->held, &err);
    } else {
        rc = eng_mtp_hidden(r->pe->mtp, sp->hist, sp->start + kept, sp->start, kept, eng_hidden_all(sp->ctx, NULL),
                            &err);
    }
    sp->n_held = 0;
    if (rc) WK_WARN("MTP: catching up failed (%s)", err.msg);
}

/* The batch in flight is done with: counters, the MTP's hidden rows, the sequence cut
 * back to the accepted tokens. */
static int settle(pl_spec *sp, wk_error *err)
{
    pl_request *r = sp->r;
    const int32_t kept = sp->m + sp->cur;
    sp->active = false;
    if (sp->d.n > 0) {
        r->c.spec_steps++;
        r->c.draft_proposed += sp->d.n;
        r->c.draft_accepted += sp->cur;
        adapt(sp, sp->cur, sp->cur == sp->d.n);
    }
    /* the MTP block follows the target's hidden rows only while drafting or before a
     * probe: while drafting does not pay, it would cost a block pass per token for
     * nothing (after a gap it restarts from the rows it is given) */
    const bool mtp_next = sp->k > 0 || sp->idle + 1 >= sp->probe_every;
    if (sp->mode == ENG_SPEC_MTP) mtp_follow(sp, kept, mtp_next);
    if (kept < sp->len) {
        int32_t reached;
        int rc = eng_seq_rewind(sp->seq, &sp->mark, sp->start + kept, &reached, err);
        if (rc) return rc;
    }
    confirm(sp);
    return 0;
}

static int32_t min32(int32_t a, int32_t b) { return a < b ? a : b; }

/* Drafts for the context (the caller's bounds applied), timed. */
static void propose(pl_spec *sp, int32_t k)
{
    pl_engine *pe = sp->r->pe;
    wk_error err = {0};
    int rc = 0;
    int32_t match;
    sp->d.n = 0;
    sp->d.has_q = false;
    sp->propose_ms = 0;
    if (k <= 0) return;
    const double t0 = wk_now_ms();
    switch (sp->mode) {
    case ENG_SPEC_NGRAM:
        rc = eng_ngram_add(pe->ngram, sp->hist, sp->n_hist, &err);
        if (!rc) sp->d.n = eng_ngram_propose(pe->ngram, sp->hist, sp->n_hist, k, sp->d.tok, &match);
        break;
    case ENG_SPEC_DRAFT: rc = eng_drafter_propose(pe->drafter, sp->hist, sp->n_hist, k, &sp->ds, &sp->d, &err); break;
    case ENG_SPEC_MTP: rc = eng_mtp_propose(pe->mtp, sp->hist, sp->n_hist, k, &sp->ds, &sp->d, &err); break;
    default: break;
    }
    if (rc) { /* a draft source that fails proposes nothing: the output does not depend on it */
        WK_WARN("speculation (%s): no drafts this step: %s", eng_spec_mode_name(sp->mode), err.msg);
        sp->d.n = 0;
    }
    sp->propose_ms = wk_now_ms() - t0;
    if (sp->d.n > 0) sp->draft_ms = decayed(sp->draft_ms, sp->propose_ms / sp->d.n);
}

/* Feeds the first n pending tokens as a batch without drafts (an interval checkpoint
 * comes first, or the request ends) and confirms them. */
static int feed_pending(pl_spec *sp, int32_t n, wk_error *err)
{
    const int32_t pos = eng_seq_pos(sp->seq);
    int rc = eng_decode_rows(sp->ctx, sp->seq, sp->hist + pos, n, n - 1, sp->mode == ENG_SPEC_MTP, err);
    if (rc) return rc;
    sp->start = pos;
    sp->m = sp->len = n;
    sp->cur = 0;
    sp->d.n = 0;
    return settle(sp, err);
}

/* Feeds the pending tokens (and new drafts) as the next batch. */
static int next_batch(pl_spec *sp, int32_t remaining, wk_error *err)
{
    pl_request *r = sp->r;
    for (;;) {
        const int32_t pos = eng_seq_pos(sp->seq), np = sp->n_hist - pos;
        const int32_t room = min32(ckpt_cache_decode_room(r->pe->cache, &r->plan), sp->ub);
        if (np > room) { /* an interval checkpoint comes first: feed up to it */
            int rc = feed_pending(sp, room, err);
            if (rc) return rc;
            continue;
        }
        int32_t k = sp->k;
        if (sp->warm > 0) {
            sp->warm--;
            k = 0;
        } else if (k == 0 && ++sp->idle >= sp->probe_every) {
            k = 1; /* see whether drafting pays again */
            sp->probing = true;
        }
        if (k > 0) sp->idle = 0;
        k = min32(k, remaining - 1);
        k = min32(k, room - np);
        k = min32(k, eng_seq_capacity(sp->seq) - pos - np);
        propose(sp, k);
        const int32_t nd = sp->d.n;
        if (nd > 0) { /* a few bytes for attention-only models, the recurrent state otherwise */
            int rc = eng_seq_mark_save(sp->seq, &sp->mark, err);
            if (rc) return rc;
        }
        memcpy(sp->batch, sp->hist + pos, sizeof(int32_t) * (size_t)np);
        memcpy(sp->batch + np, sp->d.tok, sizeof(int32_t) * (size_t)nd);
        const double t0 = wk_now_ms();
        int rc = eng_decode_rows(sp->ctx, sp->seq, sp->batch, np + nd, np - 1, sp->mode == ENG_SPEC_MTP, err);
        if (rc) return rc;
        const double dt = wk_now_ms() - t0;
        fit_add(sp, np + nd - 1, dt);
        if (np + nd == 1) sp->plain_ms = decayed(sp->plain_ms, dt);
        sp->step_ms = sp->propose_ms + dt;
        sp->active = true;
        sp->start = pos;
        sp->m = np;
        sp->len = np + nd;
        sp->cur = 0;
        return 0;
    }
}

int pl_spec_feed(pl_spec *sp, int32_t tok, int32_t remaining, wk_error *err)
{
    if (sp->n_hist >= sp->cap_hist)
        return wk_fail(err, WK_ERANGE, "speculation: context of %d tokens is full", sp->cap_hist - 1);
    sp->hist[sp->n_hist++] = tok;
    if (sp->active && sp->cur < sp->d.n && tok == sp->d.tok[sp->cur]) {
        sp->cur++; /* verified already: its row is next */
        return 0;
    }
    if (sp->active) {
        int rc = settle(sp, err);
        if (rc) return rc;
    }
    return next_batch(sp, remaining, err);
}

int pl_spec_finish(pl_spec *sp, wk_error *err)
{
    if (sp->active) {
        int rc = settle(sp, err);
        if (rc) return rc;
    }
    /* tokens fed but not (or no longer) in the sequence: the replay plain decoding never needed */
    while (eng_seq_pos(sp->seq) < sp->n_hist) {
        const int32_t left = sp->n_hist - eng_seq_pos(sp->seq);
        int rc = feed_pending(sp, min32(min32(left, ckpt_cache_decode_room(sp->r->pe->cache, &sp->r->plan)), sp->ub), err);
        if (rc) return rc;
    }
    return 0;
}
