/* One request on the engine thread: render chat → tokenize segments →
 * decide prefix reuse → prefill (cancellable per chunk, progress to the
 * monitor) → decode loop (sampler, EOG, stop strings, max_tokens,
 * incremental detokenization, reasoning / tool-call parsing) → final
 * counters. Model output never becomes an error: text that does not parse
 * as a tool call is plain content. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "chat/chat_conv.h"
#include "chat/chat_parse.h"
#include "engine/sampler.h"
#include "engine/service_internal.h"
#include "util/log.h"
#include "util/timeutil.h"

int32_t svc_reuse_decision(const eng_seq *seq, bool has_recurrent, const int32_t *ids, int32_t n,
                           bool fresh)
{
    if (fresh || n <= 0) return 0;
    int32_t pos = eng_seq_pos(seq);
    const int32_t *old = eng_seq_tokens(seq);
    int32_t lcp = 0;
    while (lcp < pos && lcp < n && old[lcp] == ids[lcp]) lcp++;
    /* The last prompt token is always computed: its logits start decoding. */
    if (lcp >= n) lcp = n - 1;
    /* Recurrent state cannot be cut back: keep it only when the new prompt
     * extends the whole previous sequence (checkpoints will relax this). */
    if (has_recurrent && lcp != pos) return 0;
    return lcp;
}

/* ---- prompt ------------------------------------------------------------------ */

static uint64_t random_u64(void)
{
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x) x = (uint64_t)(wk_now_ms() * 1000.0);
    return x;
}

int svc_map_boundaries(const chat_prompt *p, const size_t *seg_tok, eng_mark **out, int *n_out)
{
    *out = NULL;
    *n_out = 0;
    if (!p->n_bounds) return 0;
    eng_mark *m = malloc(p->n_bounds * sizeof *m);
    if (!m) return -1;
    size_t seg = 0;
    for (size_t b = 0; b < p->n_bounds; b++) {
        size_t off = p->bounds[b].byte_offset;
        /* Bounds are sorted: advance to the last segment starting at or before off. */
        while (seg + 1 < p->n_segs && p->segs[seg + 1].offset <= off) seg++;
        size_t pos = off >= p->len ? seg_tok[p->n_segs] : seg_tok[seg];
        m[*n_out].pos = (int32_t)pos;
        m[*n_out].kind = (int)p->bounds[b].kind;
        m[*n_out].flags = p->bounds[b].flags;
        (*n_out)++;
    }
    *out = m;
    return 0;
}

/* Renders and tokenizes; fills ids, n and the parse options. Returns an
 * HTTP status (0 = fine) with msg filled. */
static int build_prompt(eng_service *svc, eng_job *job, int32_t **ids, size_t *n, chat_parse_options *popt,
                        eng_mark **marks, int *n_marks, char *msg, size_t msg_cap)
{
    *marks = NULL;
    *n_marks = 0;
    eng_request *req = &job->req;
    wk_error err = {0};
    size_t cap = 0;
    *ids = NULL;
    *n = 0;
    memset(popt, 0, sizeof *popt);
    int32_t bos = tok_bos(svc->vocab);
    if (req->kind == ENG_REQ_COMPLETION) {
        if (req->prompt_ids) {
            int32_t nv = tok_n_vocab(svc->vocab);
            for (int i = 0; i < req->n_prompt_ids; i++)
                if (req->prompt_ids[i] >= nv) {
                    snprintf(msg, msg_cap, "prompt token %d at index %d is outside the vocabulary (%d tokens)",
                             req->prompt_ids[i], i, nv);
                    return 400;
                }
            *ids = malloc(((size_t)req->n_prompt_ids + 1) * sizeof **ids);
            if (!*ids) goto oom;
            memcpy(*ids, req->prompt_ids, (size_t)req->n_prompt_ids * sizeof **ids);
            *n = (size_t)req->n_prompt_ids;
            return 0;
        }
        /* Raw completions take template markers literally (parse_special),
         * as llama-server does: the client is writing the prompt format. */
        if (tok_encode(svc->vocab, req->prompt, strlen(req->prompt), true, TOK_SPECIAL_ALL, ids, n, &err)) goto tok_fail;
        return 0;
    }
    if (!svc->has_tmpl) {
        snprintf(msg, msg_cap, "this model has no usable chat template; restart wick serve with --chat-template NAME (%s) "
                 "or use /v1/completions", CHAT_TEMPLATE_NAMES);
        return 400;
    }
    chat_prompt prompt = {0};
    if (chat_render_conv(&svc->tmpl, req->chat, &prompt, &err)) {
        snprintf(msg, msg_cap, "%s", err.msg);
        return err.code == WK_ENOMEM ? 500 : 400;
    }
    /* Template text with special-token parsing, request text as plain text:
     * a pasted "<|im_start|>" in a message stays text. */
    if (!prompt.starts_with_bos && tok_add_bos(svc->vocab) && bos != TOK_NULL) {
        *ids = malloc(16 * sizeof **ids);
        if (!*ids) {
            chat_prompt_free(&prompt);
            goto oom;
        }
        cap = 16;
        (*ids)[(*n)++] = bos;
    }
    size_t *seg_tok = malloc((prompt.n_segs + 1) * sizeof *seg_tok);
    if (!seg_tok) {
        chat_prompt_free(&prompt);
        goto oom;
    }
    for (size_t i = 0; i < prompt.n_segs; i++) {
        const chat_segment *sg = &prompt.segs[i];
        seg_tok[i] = *n;
        if (tok_encode_append(svc->vocab, prompt.text + sg->offset, sg->len, false,
                              sg->special ? TOK_SPECIAL_ALL : TOK_SPECIAL_NONE, ids, n, &cap, &err)) {
            free(seg_tok);
            chat_prompt_free(&prompt);
            goto tok_fail;
        }
    }
    seg_tok[prompt.n_segs] = *n;
    if (svc_map_boundaries(&prompt, seg_tok, marks, n_marks)) {
        free(seg_tok);
        chat_prompt_free(&prompt);
        goto oom;
    }
    free(seg_tok);
    chat_parse_options_from_prompt(popt, &prompt);
    if (!req->tools || req->tool_choice == ENG_TOOLS_NONE) popt->tool_format = CHAT_TOOLS_NONE;
    popt->tools = req->tools;
    popt->id_seed = req->sampling.has_seed ? req->sampling.seed : random_u64();
    chat_prompt_free(&prompt);
    return 0;
tok_fail:
    snprintf(msg, msg_cap, "tokenizing the prompt: %.440s", err.msg);
    return err.code == WK_ENOMEM ? 500 : 400;
oom:
    snprintf(msg, msg_cap, "out of memory");
    return 500;
}

/* ---- the job ----------------------------------------------------------------- */

typedef struct progress_ctx {
    eng_service *svc;
    eng_job *job;
    int32_t base; /* tokens reused before this prefill */
} progress_ctx;

static void on_progress(void *user, int32_t done, int32_t total)
{
    (void)total;
    progress_ctx *p = user;
    pthread_mutex_lock(&p->svc->lock);
    p->job->prefill_done = done;
    pthread_mutex_unlock(&p->svc->lock);
}

/* The prefix store's side of one request. */
typedef struct eng_store_run {
    eng_service *svc;
    eng_reuse reuse;
    bool begun;
} eng_store_run;

/* Ends the store's part of the request (once) and notes the sequence length. */
static void store_end(eng_store_run *st, eng_seq *seq, bool ok)
{
    st->svc->last_pos = seq ? eng_seq_pos(seq) : 0;
    if (!st->begun) return;
    st->svc->store.end(st->svc->store.self, &st->reuse, ok);
    st->begun = false;
}

static void set_phase(eng_service *svc, eng_job *job, int phase)
{
    pthread_mutex_lock(&svc->lock);
    job->phase = phase;
    pthread_mutex_unlock(&svc->lock);
}

static void fail_and_record(eng_service *svc, eng_job *job, int status, const char *type, const char *msg,
                            const eng_counters *c)
{
    job_fail(job, status, type, "%s", msg);
    svc_record_done(svc, job, status == 499 ? "cancelled" : "error", NULL, c);
}

/* The prompt does not fit: code context_length_exceeded, which clients
 * recognise (with OpenAI's wording) to compact their history. */
static void fail_context(eng_service *svc, eng_job *job, const char *msg, const eng_counters *c)
{
    eng_event ev = {0};
    ev.type = ENG_EV_ERROR;
    ev.http_status = 400;
    snprintf(ev.error_type, sizeof ev.error_type, "invalid_request_error");
    snprintf(ev.error_code, sizeof ev.error_code, "context_length_exceeded");
    snprintf(ev.message, sizeof ev.message, "%s", msg);
    job_push(job, &ev);
    svc_record_done(svc, job, "error", NULL, c);
}

void svc_run_job(eng_service *svc, eng_job *job)
{
    eng_request *req = &job->req;
    eng_counters c = {0};
    double t0 = wk_now_ms();
    c.queue_ms = t0 - job->t_submit_ms;
    if (atomic_load(&job->cancel)) {
        fail_and_record(svc, job, 499, "cancelled", "request cancelled before it started", &c);
        return;
    }

    int32_t *ids = NULL;
    size_t n = 0;
    chat_parse_options popt;
    char msg[WK_ERROR_MSG_CAP];
    eng_mark *marks = NULL;
    int n_marks = 0;
    int status = build_prompt(svc, job, &ids, &n, &popt, &marks, &n_marks, msg, sizeof msg);
    if (status) {
        fail_and_record(svc, job, status, status == 400 ? "invalid_request_error" : "server_error", msg, &c);
        free(ids);
        free(marks);
        return;
    }
    c.prompt_tokens = (int)n;
    if (n == 0) {
        fail_and_record(svc, job, 400, "invalid_request_error", "the prompt is empty", &c);
        free(ids);
        free(marks);
        return;
    }
    if ((int)n >= svc->n_ctx) {
        /* OpenAI's wording and code: clients recognise them and compact their history. */
        snprintf(msg, sizeof msg, "This model's maximum context length is %d tokens. However, your messages resulted in "
                 "%zu tokens. Please reduce the length of the messages.", svc->n_ctx, n);
        fail_context(svc, job, msg, &c);
        free(ids);
        free(marks);
        return;
    }
    for (int i = 0; i < req->n_bias; i++)
        if (req->bias_ids[i] >= tok_n_vocab(svc->vocab)) {
            snprintf(msg, sizeof msg, "logit_bias token %d is outside the vocabulary (%d tokens)", req->bias_ids[i],
                     tok_n_vocab(svc->vocab));
            fail_and_record(svc, job, 400, "invalid_request_error", msg, &c);
            free(ids);
            free(marks);
            return;
        }
    eng_event acc = {0};
    acc.type = ENG_EV_ACCEPTED;
    acc.counters = c;
    job_push(job, &acc);

    /* The request's attention policy (wick extension) or the server's; set
     * before reuse so that state computed under another policy is not reused
     * (the prefix store compares fingerprints with the context's policy). */
    const be_attn_policy *policy = req->has_policy ? &req->policy : &svc->cfg.policy;
    eng_ctx_set_policy(svc->ctx, policy);

    /* Prefix reuse: the plugged-in prefix cache, or one sequence cut at the
     * longest common prefix. */
    wk_error err = {0};
    eng_store_run st = {.svc = svc};
    eng_seq *seq = NULL;
    int32_t keep = 0;
    int rc = 0;
    if (svc->store.self) {
        rc = svc->store.begin(svc->store.self, ids, (int32_t)n, marks, n_marks, req->fresh, &st.reuse, &err);
        if (rc) {
            free(ids);
            free(marks);
            fail_and_record(svc, job, 500, "server_error", err.msg, &c);
            return;
        }
        st.begun = true;
        seq = st.reuse.seq;
        keep = st.reuse.start;
        c.replayed_tokens = st.reuse.replayed;
        c.ckpt_pos = st.reuse.ckpt_pos;
        if (st.reuse.ckpt_kind >= 0 && st.reuse.ckpt_name)
            snprintf(c.ckpt_kind, sizeof c.ckpt_kind, "%s", st.reuse.ckpt_name);
        c.ckpt_from_disk = st.reuse.from_disk;
    } else {
        seq = svc->seq;
        bool recurrent = svc->model->hp.n_rec_layers > 0;
        bool other_policy = eng_seq_pos(seq) > 0 && eng_seq_policy_fp(seq) != eng_ctx_fingerprint(svc->ctx);
        keep = svc_reuse_decision(seq, recurrent, ids, (int32_t)n, req->fresh || other_policy);
        if (keep < eng_seq_pos(seq)) {
            if (keep == 0) eng_seq_clear(seq);
            else if (kv_truncate(seq, keep, &err)) {
                WK_WARN("cache: truncate to %d failed (%s); starting fresh", keep, err.msg);
                eng_seq_clear(seq);
                keep = 0;
            }
        }
        c.ckpt_pos = keep > 0 ? keep : -1;
        if (keep > 0) snprintf(c.ckpt_kind, sizeof c.ckpt_kind, "%s", keep == eng_seq_pos(seq) ? "live" : "kv_prefix");
    }
    free(marks);
    c.cached_tokens = keep;
    c.recomputed_tokens = (int)n - keep;
    pthread_mutex_lock(&svc->lock);
    if (keep > 0) svc->cache_hits++;
    else svc->cache_misses++;
    job->prefill_total = c.recomputed_tokens;
    job->prefill_done = 0;
    job->live = c;
    pthread_mutex_unlock(&svc->lock);

    progress_ctx pc = {svc, job, keep};
    eng_prefill_opts po = {0};
    po.cancel_flag = &job->cancel;
    po.progress = on_progress;
    po.user = &pc;
    double tp = wk_now_ms();
    if (st.begun) rc = svc->store.prefill(svc->store.self, &st.reuse, ids, (int32_t)n, &po, &err);
    else rc = eng_prefill(svc->ctx, seq, ids + keep, (int32_t)n - keep, &po, &err);
    c.prefill_ms = wk_now_ms() - tp;
    free(ids);
    if (rc == WK_ECANCELLED) {
        c.recomputed_tokens = eng_seq_pos(seq) - keep;
        store_end(&st, seq, false);
        fail_and_record(svc, job, 499, "cancelled", "request cancelled during prefill", &c);
        return;
    }
    if (rc) {
        /* The sequence may be half-written: start the next request fresh. */
        if (st.begun) store_end(&st, seq, false);
        else eng_seq_clear(seq);
        svc->last_pos = 0;
        if (rc == WK_ERANGE) fail_context(svc, job, err.msg, &c);
        else fail_and_record(svc, job, 500, "server_error", err.msg, &c);
        return;
    }
    if (c.prefill_ms > 0) c.prefill_tok_per_s = c.recomputed_tokens / (c.prefill_ms / 1000.0);

    /* Decode. */
    eng_sampler_params sp;
    eng_sampler_params_default(&sp);
    sp.temperature = req->sampling.temperature;
    sp.top_k = req->sampling.top_k;
    sp.top_p = req->sampling.top_p;
    sp.min_p = req->sampling.min_p;
    sp.repeat_penalty = req->sampling.repeat_penalty;
    sp.presence_penalty = req->sampling.presence_penalty;
    sp.frequency_penalty = req->sampling.frequency_penalty;
    sp.seed = req->sampling.has_seed ? req->sampling.seed : random_u64();
    eng_sampler *smp = NULL;
    tok_decoder *dec = tok_decoder_new(svc->vocab, 0);
    chat_stop *stop = NULL;
    svc_output out = {.job = job};
    const char *finish = "stop";
    int stopped_by = 0; /* 1 + index of the stop string that ended generation */
    int fail_status = 0;
    const char *fail_type = "server_error";
    if (eng_sampler_new(&smp, &sp, eng_n_vocab(svc->ctx), &err) || !dec ||
        chat_stop_new(&stop, (const char *const *)req->stop, (size_t)req->n_stop, &err) ||
        (req->kind == ENG_REQ_CHAT && chat_parser_new(&out.parser, &popt, &err))) {
        snprintf(msg, sizeof msg, "setting up generation: %.440s", dec ? err.msg : "out of memory");
        fail_status = smp ? 500 : 400;
        fail_type = smp ? "server_error" : "invalid_request_error";
        goto done;
    }

    /* OpenAI: -100 bans a token, +100 all but forces it. */
    for (int i = 0; i < req->n_bias; i++)
        eng_sampler_set_bias(smp, req->bias_ids[i], req->bias_values[i] <= -100.0f ? -INFINITY : req->bias_values[i], NULL);
    if (req->ignore_eos) {
        /* Ban every end-of-generation token so exactly max_tokens come out. */
        const int32_t *eog;
        size_t n_eog = tok_eog_ids(svc->vocab, &eog);
        for (size_t i = 0; i < n_eog; i++) eng_sampler_set_bias(smp, eog[i], -INFINITY, NULL);
    }
    int room = svc->n_ctx - eng_seq_pos(seq);
    int max_new = req->max_tokens < 0 || req->max_tokens > room ? room : req->max_tokens;
    bool stopped = false;
    set_phase(svc, job, JOB_DECODE);
    double t_first = 0;
    /* plain greedy: the backend picks each next token where the logits are (a GPU sends one index,
     * not the vocabulary's logits); -2: sample from eng_logits */
    const bool device_pick = eng_sampler_is_plain_greedy(smp);
    int32_t picked = -2;
    for (int i = 0; i < max_new; i++) {
        if (atomic_load(&job->cancel)) {
            fail_status = 499;
            fail_type = "cancelled";
            snprintf(msg, sizeof msg, "request cancelled during generation");
            break;
        }
        int32_t tok = picked >= -1 ? picked : eng_sampler_sample(smp, eng_logits(svc->ctx), NULL);
        if (tok < 0) break; /* every logit -inf/NaN: nothing sensible to say */
        eng_sampler_accept(smp, tok);
        double now = wk_now_ms();
        if (i == 0) {
            t_first = now;
            c.ttft_ms = now - t0;
        }
        if (tok_is_eog(svc->vocab, tok)) break;
        c.completion_tokens++;
        out.any_reasoning_this_token = out.any_content_this_token = false;
        const char *piece;
        size_t plen;
        if (tok_decoder_feed(dec, tok, &piece, &plen) == 0 && plen) {
            const char *emit;
            size_t elen;
            int which;
            if (chat_stop_feed(stop, piece, plen, &emit, &elen, &which) == 1) {
                stopped = true;
                stopped_by = which + 1;
            }
            svc_output_text(&out, emit, elen);
        }
        if (out.any_reasoning_this_token && !out.any_content_this_token) c.reasoning_tokens++;
        pthread_mutex_lock(&svc->lock);
        job->live = c;
        job->t_first_ms = t_first;
        pthread_mutex_unlock(&svc->lock);
        if (stopped) break;
        if (i + 1 == max_new) {
            finish = "length";
            break;
        }
        if (device_pick ? eng_decode_greedy(svc->ctx, seq, tok, &picked, &err) : eng_decode(svc->ctx, seq, tok, &err)) {
            fail_status = 500;
            snprintf(msg, sizeof msg, "decode failed: %.440s", err.msg);
            if (!st.begun) eng_seq_clear(seq);
            break;
        }
        if (st.begun) svc->store.decoded(svc->store.self, &st.reuse);
    }
    if (max_new <= 0) finish = "length";
    if (!stopped && !fail_status) {
        /* End of generation: bytes held back by the decoder, then by the stop filter. */
        const char *t, *emit;
        size_t tl, elen;
        int which;
        tok_decoder_flush(dec, &t, &tl);
        if (tl) {
            if (chat_stop_feed(stop, t, tl, &emit, &elen, &which) == 1) {
                stopped = true;
                stopped_by = which + 1;
            }
            svc_output_text(&out, emit, elen);
        }
        if (!stopped) {
            chat_stop_flush(stop, &emit, &elen);
            svc_output_text(&out, emit, elen);
        }
    }
    if (stopped) finish = "stop";
    if (!fail_status) svc_output_finish(&out);
    double t_end = wk_now_ms();
    if (t_first > 0) {
        c.decode_ms = t_end - t_first;
        if (c.completion_tokens > 1 && c.decode_ms > 0)
            c.decode_tok_per_s = (c.completion_tokens - 1) / (c.decode_ms / 1000.0);
    }
    if (out.n_calls > 0 && strcmp(finish, "stop") == 0) finish = "tool_calls";

done:
    /* The prefill completed: whatever happened in generation, the state is
     * consistent at a token boundary. */
    store_end(&st, seq, true);
    if (fail_status) {
        fail_and_record(svc, job, fail_status, fail_type, msg, &c);
    } else {
        eng_event ev = {0};
        ev.type = ENG_EV_DONE;
        ev.counters = c;
        snprintf(ev.finish_reason, sizeof ev.finish_reason, "%s", finish);
        ev.stopped_by = stopped_by;
        svc_record_done(svc, job, "ok", finish, &c);
        job_push(job, &ev);
    }
    set_phase(svc, job, JOB_DONE);
    if (smp) eng_sampler_free(smp);
    if (dec) tok_decoder_free(dec);
    if (stop) chat_stop_free(stop);
    if (out.parser) chat_parser_free(out.parser);
    chat_delta_free(&out.delta);
}
