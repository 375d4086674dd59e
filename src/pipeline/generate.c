/* Step 4, generate: the one decode loop of wick. Per token: pick (the
 * sampler, or the backend's greedy pick where the logits are), the
 * caller's step hook, end of generation, incremental detokenization, stop
 * strings, the reasoning / tool-call parser, max_tokens; then feed the
 * token back. Model output never becomes an error: text that does not
 * parse as a tool call is plain content. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampler.h"
#include "pipeline/pipeline_internal.h"
#include "util/timeutil.h"

typedef struct decode_loop {
    eng_sampler *smp;
    pl_spec *spec;    /* NULL: plain decoding, one token per forward pass */
    tok_decoder *dec; /* NULL: the file has no tokenizer (token ids only) */
    chat_stop *stop;
    pl_constraint con; /* the grammar the answer must follow (con.on) */
    pl_output out;
    const char *finish;
    bool stopped;
    int stopped_by; /* 1 + index of the stop string that ended generation, 0: none */
    int32_t eog;    /* an end-of-generation token, -1 if the vocabulary has none */
} decode_loop;

static uint64_t seed_of(const eng_sampling *s) { return s->has_seed ? s->seed : pl_random_seed(); }

static int loop_setup(pl_request *r, decode_loop *L)
{
    const eng_request *req = r->req;
    const tok_vocab *v = r->pe->vocab;
    eng_sampler_params sp;
    eng_sampler_params_default(&sp);
    sp.temperature = req->sampling.temperature;
    sp.top_k = req->sampling.top_k;
    sp.top_p = req->sampling.top_p;
    sp.min_p = req->sampling.min_p;
    sp.repeat_penalty = req->sampling.repeat_penalty;
    sp.presence_penalty = req->sampling.presence_penalty;
    sp.frequency_penalty = req->sampling.frequency_penalty;
    sp.seed = seed_of(&req->sampling);
    wk_error err = {0};
    if (eng_sampler_new(&L->smp, &sp, eng_n_vocab(r->pe->ctx), &err))
        return pl_fail(r, 400, "invalid_request_error", NULL, "sampling parameters: %.440s", err.msg);
    if (v && !(L->dec = tok_decoder_new(v, req->emit_special ? TOK_DECODE_SPECIAL : 0)))
        return pl_fail(r, 500, "server_error", NULL, "out of memory");
    if (chat_stop_new(&L->stop, (const char *const *)req->stop, (size_t)req->n_stop, &err))
        return pl_fail(r, err.code == WK_ENOMEM ? 500 : 400, err.code == WK_ENOMEM ? "server_error" : "invalid_request_error",
                       NULL, "stop: %.440s", err.msg);
    if (r->chat && chat_parser_new(&L->out.parser, &r->popt, &err))
        return pl_fail(r, 500, "server_error", NULL, "out of memory");
    /* OpenAI: -100 bans a token, +100 all but forces it. */
    for (int i = 0; i < req->n_bias; i++)
        eng_sampler_set_bias(L->smp, req->bias_ids[i], req->bias_values[i] <= -100.0f ? -INFINITY : req->bias_values[i],
                             NULL);
    if (req->ignore_eos && v) { /* ban every end-of-generation token so exactly max_tokens come out */
        const int32_t *eog;
        size_t n_eog = tok_eog_ids(v, &eog);
        for (size_t i = 0; i < n_eog; i++) eng_sampler_set_bias(L->smp, eog[i], -INFINITY, NULL);
    }
    /* the prompt is part of the penalty window, as in llama.cpp */
    for (int32_t i = 0; i < r->n; i++) eng_sampler_accept(L->smp, r->ids[i]);
    L->out.sink = r->sink;
    L->finish = "stop";
    L->eog = -1;
    const int32_t *eog;
    if (v && tok_eog_ids(v, &eog) > 0) L->eog = eog[0];
    int status = pl_constraint_begin(r, &L->con);
    return status ? status : pl_spec_new(&L->spec, r, L->smp, &sp);
}

static void loop_free(decode_loop *L)
{
    pl_spec_free(L->spec);
    eng_sampler_free(L->smp);
    tok_decoder_free(L->dec);
    chat_stop_free(L->stop);
    chat_parser_free(L->out.parser);
    chat_delta_free(&L->out.delta);
    pl_constraint_free(&L->con);
}

/* The next token: the backend's greedy pick when it made one, else the
 * sampler (or the speculative verifier) over the logits of this position,
 * the grammar's forbidden tokens at -inf first. *row gets those logits.
 * -1: nothing can be said; -2 with *status set: the grammar failed. */
static int32_t pick_token(pl_request *r, decode_loop *L, int32_t picked, const float *own, const float **row,
                          int *status)
{
    const float *logits = L->spec ? pl_spec_logits(L->spec) : own ? own : eng_logits(r->pe->ctx);
    *row = logits;
    if (picked >= -1) return picked;
    if (L->con.on) {
        wk_error err = {0};
        logits = pl_constraint_mask(&L->con, logits, eng_n_vocab(r->pe->ctx), &err);
        if (!logits) {
            *status = pl_fail(r, 500, "server_error", NULL, "constrained output: %.440s", err.msg);
            return -2;
        }
        *row = logits;
    }
    return L->spec ? pl_spec_choose(L->spec, logits) : eng_sampler_sample(L->smp, logits, NULL);
}

/* Text of one token through the stop filter into the output. */
static void emit_token_text(decode_loop *L, int32_t tok)
{
    const char *piece, *emit;
    size_t plen, elen;
    int which;
    if (!L->dec || tok_decoder_feed(L->dec, tok, &piece, &plen) || !plen) return;
    if (chat_stop_feed(L->stop, piece, plen, &emit, &elen, &which) == 1) {
        L->stopped = true;
        L->stopped_by = which + 1;
    }
    pl_output_text(&L->out, emit, elen);
}

/* End of generation: bytes held back by the decoder, then by the stop filter, then by the parser. */
static void flush_text(decode_loop *L)
{
    const char *t, *emit;
    size_t tl, elen;
    int which;
    if (L->dec) tok_decoder_flush(L->dec, &t, &tl);
    else tl = 0;
    if (tl && chat_stop_feed(L->stop, t, tl, &emit, &elen, &which) == 1) {
        L->stopped = true;
        L->stopped_by = which + 1;
    }
    if (tl) pl_output_text(&L->out, emit, elen);
    if (!L->stopped) {
        chat_stop_flush(L->stop, &emit, &elen);
        pl_output_text(&L->out, emit, elen);
    }
    pl_output_finish(&L->out);
}

/* One generated token's host work: pick it (from own, the sequence's logits, when not NULL),
 * the step hook, the grammar, end of generation, its text and the client's events. true: the
 * loop ends here (L->finish, *status say why). */
static bool take_token(pl_request *r, decode_loop *L, int32_t i, int32_t max_new, int32_t picked, const float *own,
                       int32_t *taken, double *t_first, int *status)
{
    const eng_request *req = r->req;
    const pl_sink *sink = r->sink;
    const tok_vocab *v = r->pe->vocab;
    const int32_t n_vocab = eng_n_vocab(r->pe->ctx);
    wk_error err = {0};
    const float *logits;
    int32_t tok = pick_token(r, L, picked, own, &logits, status);
    if (tok == -2) return true;
    if (L->con.on) { /* the budget runs out: close the constrained answer instead of cutting it */
        int32_t forced = pl_constraint_force(&L->con, max_new - i, L->eog);
        if (forced >= 0) tok = forced;
    }
    if (sink->step_logits) {
        int32_t forced = sink->step_logits(sink->user, i, logits, n_vocab, tok);
        if (forced >= 0 && forced < n_vocab) tok = forced;
    }
    if (tok < 0) return true; /* every logit -inf/NaN (or forbidden): nothing sensible to say */
    if (L->con.on && pl_constraint_accept(&L->con, tok, &err)) {
        *status = pl_fail(r, 500, "server_error", NULL, "constrained output: %.440s", err.msg);
        return true;
    }
    eng_sampler_accept(L->smp, tok);
    if (i == 0) {
        *t_first = wk_now_ms();
        r->c.ttft_ms = *t_first - r->t0_ms;
    }
    if (sink->token) sink->token(sink->user, tok);
    if (v && tok_is_eog(v, tok)) {
        if (req->emit_special) emit_token_text(L, tok);
        return true;
    }
    r->c.completion_tokens++;
    L->out.any_reasoning_this_token = L->out.any_content_this_token = false;
    emit_token_text(L, tok);
    if (L->out.any_reasoning_this_token && !L->out.any_content_this_token) r->c.reasoning_tokens++;
    if (sink->live) sink->live(sink->user, PL_PHASE_DECODE, &r->c);
    if (L->stopped) return true;
    if (L->con.on && pl_constraint_done(&L->con)) return true; /* the grammar is complete: nothing may follow */
    if (i + 1 == max_new) {
        L->finish = "length";
        return true;
    }
    *taken = tok;
    return false;
}

int pl_generate(pl_request *r)
{
    const eng_request *req = r->req;
    const pl_sink *sink = r->sink;
    eng_ctx *ctx = r->pe->ctx;
    eng_seq *seq = r->plan.seq;
    decode_loop L = {0};
    int status = loop_setup(r, &L);
    if (status) {
        loop_free(&L);
        return status;
    }
    int32_t room = eng_seq_capacity(seq) - eng_seq_pos(seq);
    int32_t max_new = req->max_tokens < 0 || req->max_tokens > room ? room : req->max_tokens;
    if (sink->live) sink->live(sink->user, PL_PHASE_DECODE, &r->c);
    /* plain greedy without a step hook or a grammar: the backend picks each next token where the
     * logits are (a GPU sends one index, not the vocabulary's logits); -2: take it from eng_logits */
    const bool device_pick = eng_sampler_is_plain_greedy(L.smp) && !sink->step_logits && !L.con.on && !L.spec;
    /* --parallel: after this sequence's own decode steps its token's host work runs without the
     * engine lock, beside the other sequences' (it reads the sequence's own logits, which only the
     * next step, waiting for this thread, overwrites); speculation drives the context: locked */
    const bool apart = eng_ctx_options(ctx)->n_seq > 1 && !L.spec;
    int32_t picked = -2;
    double t_first = 0;
    wk_error err = {0};
    for (int32_t i = 0; i < max_new; i++) {
        if (sink->cancel && atomic_load(sink->cancel)) {
            status = pl_fail(r, 499, "cancelled", NULL, "request cancelled during generation");
            break;
        }
        /* the first token comes from the prefill's logits (or the cache's), in the context */
        const bool unlocked = apart && i > 0;
        if (unlocked) pl_engine_unlock(r->pe);
        int32_t tok = -1;
        const bool end = take_token(r, &L, i, max_new, picked, unlocked ? eng_seq_logits(seq) : NULL, &tok, &t_first,
                                    &status);
        if (unlocked) pl_engine_lock(r->pe);
        if (end) break;
        int rc = L.spec        ? pl_spec_feed(L.spec, tok, max_new - i - 1, &err)
                 : device_pick ? eng_decode_greedy(ctx, seq, tok, &picked, &err)
                 : apart       ? eng_decode_own(ctx, seq, tok, &err)
                               : eng_decode(ctx, seq, tok, &err);
        if (rc) {
            status = pl_fail(r, 500, "server_error", NULL, "decode failed: %.440s", err.msg);
            break;
        }
        if (!L.spec) ckpt_cache_decoded(r->pe->cache, &r->plan);
    }
    /* speculation leaves the sequence as plain decoding would (also after a cancel) */
    if (L.spec && (!status || status == 499) && pl_spec_finish(L.spec, &err))
        status = pl_fail(r, 500, "server_error", NULL, "decode failed: %.440s", err.msg);
    if (max_new <= 0) L.finish = "length";
    if (!status && !L.stopped) flush_text(&L);
    else if (!status) pl_output_finish(&L.out);
    if (L.stopped) L.finish = "stop";
    if (t_first > 0) {
        r->c.decode_ms = wk_now_ms() - t_first;
        if (r->c.completion_tokens > 1 && r->c.decode_ms > 0)
            r->c.decode_tok_per_s = (r->c.completion_tokens - 1) / (r->c.decode_ms / 1000.0);
    }
    if (!status) {
        if (L.out.n_calls > 0 && strcmp(L.finish, "stop") == 0) L.finish = "tool_calls";
        eng_event_clear(&r->final);
        r->final.type = ENG_EV_DONE;
        snprintf(r->final.finish_reason, sizeof r->final.finish_reason, "%s", L.finish);
        r->final.stopped_by = L.stopped_by;
    }
    loop_free(&L);
    return status;
}
