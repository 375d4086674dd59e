/* Step 1, admit: the prompt as token ids (chat rendered with the model's
 * template, template text with special tokens and request text as plain
 * text; or the completion prompt), its chat boundaries as token positions,
 * and the checks that make it fit: not empty, inside the vocabulary and the
 * context. Reports ACCEPTED. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_conv.h"
#include "pipeline/pipeline_internal.h"
#include "util/os.h"
#include "util/timeutil.h"

int pl_fail(pl_request *r, int status, const char *type, const char *code, const char *fmt, ...)
{
    eng_event *ev = &r->final;
    eng_event_clear(ev);
    ev->type = ENG_EV_ERROR;
    ev->http_status = status;
    snprintf(ev->error_type, sizeof ev->error_type, "%s", type ? type : "");
    snprintf(ev->error_code, sizeof ev->error_code, "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ev->message, sizeof ev->message, fmt, ap);
    va_end(ap);
    return status;
}

uint64_t pl_random_seed(void)
{
    uint64_t x = 0;
    if (wk_random_bytes(&x, sizeof x) != 0) x = (uint64_t)(wk_now_ms() * 1000.0);
    return x;
}

int pl_map_boundaries(const chat_prompt *p, const size_t *seg_tok, ckpt_mark **out, int *n_out)
{
    *out = NULL;
    *n_out = 0;
    if (!p->n_bounds) return 0;
    ckpt_mark *m = malloc(p->n_bounds * sizeof *m);
    if (!m) return WK_ENOMEM;
    size_t seg = 0;
    for (size_t b = 0; b < p->n_bounds; b++) {
        size_t off = p->bounds[b].byte_offset;
        /* bounds are sorted: advance to the last segment starting at or before off */
        while (seg + 1 < p->n_segs && p->segs[seg + 1].offset <= off) seg++;
        size_t pos = off >= p->len ? seg_tok[p->n_segs] : seg_tok[seg];
        m[*n_out].pos = (int32_t)pos;
        m[*n_out].kind = pl_ckpt_kind_of_boundary((int)p->bounds[b].kind, p->bounds[b].flags);
        (*n_out)++;
    }
    *out = m;
    return 0;
}

static int oom(pl_request *r) { return pl_fail(r, 500, "server_error", NULL, "out of memory"); }

/* A rendered chat prompt as token ids: template text with special tokens,
 * request text as plain text (a pasted "<|im_start|>" stays text), the
 * boundaries as token positions. WK_ENOMEM, or WK_EINVAL with the reason. */
typedef struct chat_tokens {
    int32_t *ids;
    int32_t n;
    ckpt_mark *marks;
    int n_marks;
} chat_tokens;

static int tokenize_chat(const pl_engine *pe, const chat_prompt *prompt, chat_tokens *out, wk_error *err)
{
    memset(out, 0, sizeof *out);
    const tok_vocab *v = pe->vocab;
    size_t n = 0, cap = 0;
    size_t *seg_tok = malloc((prompt->n_segs + 1) * sizeof *seg_tok);
    int rc = seg_tok ? 0 : WK_ENOMEM;
    int32_t bos = tok_bos(v);
    if (!rc && !prompt->starts_with_bos && tok_add_bos(v) && bos != TOK_NULL) {
        out->ids = malloc(16 * sizeof *out->ids);
        if (!out->ids) rc = WK_ENOMEM;
        else {
            cap = 16;
            out->ids[n++] = bos;
        }
    }
    for (size_t i = 0; !rc && i < prompt->n_segs; i++) {
        const chat_segment *sg = &prompt->segs[i];
        seg_tok[i] = n;
        rc = tok_encode_append(v, prompt->text + sg->offset, sg->len, false, sg->special ? TOK_SPECIAL_ALL : TOK_SPECIAL_NONE,
                               &out->ids, &n, &cap, err);
        if (rc) wk_fail_prefix(err, "tokenizing the prompt");
    }
    if (!rc) {
        seg_tok[prompt->n_segs] = n;
        out->n = (int32_t)n;
        rc = pl_map_boundaries(prompt, seg_tok, &out->marks, &out->n_marks);
    }
    free(seg_tok);
    if (rc == WK_ENOMEM) wk_fail(err, rc, "out of memory");
    if (rc) {
        free(out->ids);
        free(out->marks);
        memset(out, 0, sizeof *out);
    }
    return rc;
}

int pl_chat_tokens(const pl_engine *pe, const chat_conv *conv, int32_t **ids, int32_t *n, wk_error *err)
{
    *ids = NULL;
    *n = 0;
    if (!pe->has_tmpl) return wk_fail(err, WK_EUNSUPPORTED, "this model has no usable chat template");
    chat_prompt prompt = {0};
    int rc = chat_render_conv(&pe->tmpl, conv, &prompt, err);
    chat_tokens t;
    if (!rc) rc = tokenize_chat(pe, &prompt, &t, err);
    chat_prompt_free(&prompt);
    if (rc) return rc;
    free(t.marks);
    *ids = t.ids;
    *n = t.n;
    return 0;
}

static int admit_chat(pl_request *r)
{
    pl_engine *pe = r->pe;
    const eng_request *req = r->req;
    if (!pe->has_tmpl)
        return pl_fail(r, 400, "invalid_request_error", NULL,
                       "this model has no usable chat template; restart wick serve with --chat-template NAME (%s) "
                       "or use /v1/completions",
                       CHAT_TEMPLATE_NAMES);
    wk_error err = {0};
    chat_prompt prompt = {0};
    chat_tokens t;
    int rc = 0;
    chat_conv conv;
    if (req->chat) {
        conv = *req->chat; /* a shallow copy: only how it is rendered changes */
        /* A forced tool call or JSON answer with the template's default thinking: thinking off, so
         * the constrained answer starts at once instead of after reasoning of unbounded length.
         * A client that asks for thinking explicitly keeps it (the grammar lets it come first). */
        bool constrained = (req->tools && (req->tool_choice == ENG_TOOLS_REQUIRED || req->tool_choice == ENG_TOOLS_FUNCTION)) ||
                           req->response_format == ENG_FORMAT_JSON_OBJECT || req->response_format == ENG_FORMAT_JSON_SCHEMA;
        if (constrained && conv.enable_thinking < 0 && pe->tmpl.supports_thinking) conv.enable_thinking = 0;
        rc = chat_render_conv(&pe->tmpl, &conv, &prompt, &err);
    } else {
        rc = wk_fail(&err, WK_EINVAL, "a chat request without a conversation");
    }
    if (!rc) rc = tokenize_chat(pe, &prompt, &t, &err);
    if (!rc) {
        r->ids = t.ids;
        r->n = t.n;
        r->marks = t.marks;
        r->n_marks = t.n_marks;
        chat_parse_options_from_prompt(&r->popt, &prompt);
        if (!req->tools || req->tool_choice == ENG_TOOLS_NONE) r->popt.tool_format = CHAT_TOOLS_NONE;
        r->popt.tools = req->tools;
        r->popt.id_seed = req->sampling.has_seed ? req->sampling.seed : pl_random_seed();
        r->chat = true;
    }
    chat_prompt_free(&prompt);
    if (rc == WK_ENOMEM) return oom(r);
    if (rc) return pl_fail(r, 400, "invalid_request_error", NULL, "%.480s", err.msg);
    return 0;
}

static int admit_completion(pl_request *r)
{
    const eng_request *req = r->req;
    const tok_vocab *v = r->pe->vocab;
    int32_t n_vocab = (int32_t)r->pe->m->hp.n_vocab;
    if (req->prompt_ids) {
        for (int i = 0; i < req->n_prompt_ids; i++)
            if (req->prompt_ids[i] < 0 || req->prompt_ids[i] >= n_vocab)
                return pl_fail(r, 400, "invalid_request_error", NULL,
                               "prompt token %d at index %d is outside the vocabulary (%d tokens)", req->prompt_ids[i], i,
                               n_vocab);
        r->ids = malloc(((size_t)req->n_prompt_ids + 1) * sizeof *r->ids);
        if (!r->ids) return oom(r);
        if (req->n_prompt_ids) memcpy(r->ids, req->prompt_ids, (size_t)req->n_prompt_ids * sizeof *r->ids);
        r->n = req->n_prompt_ids;
        return 0;
    }
    if (!v) return pl_fail(r, 400, "invalid_request_error", NULL, "this model file has no tokenizer: send token ids");
    /* Raw completions take template markers literally (parse_special), as
     * llama-server does: the client is writing the prompt format. */
    wk_error err = {0};
    size_t n = 0;
    const char *text = req->prompt ? req->prompt : "";
    if (tok_encode(v, text, strlen(text), !req->no_bos, TOK_SPECIAL_ALL, &r->ids, &n, &err))
        return err.code == WK_ENOMEM ? oom(r)
                                     : pl_fail(r, 400, "invalid_request_error", NULL, "tokenizing the prompt: %.440s",
                                               err.msg);
    r->n = (int32_t)n;
    return 0;
}

int pl_admit(pl_request *r)
{
    const eng_request *req = r->req;
    int status = req->kind == ENG_REQ_CHAT ? admit_chat(r) : admit_completion(r);
    if (status) return status;
    r->c.prompt_tokens = r->n;
    if (r->n == 0) return pl_fail(r, 400, "invalid_request_error", NULL, "the prompt is empty");
    int32_t n_ctx = pl_engine_n_ctx(r->pe);
    /* at least one position must stay free for the first generated token's step */
    if (r->n >= n_ctx)
        return pl_fail(r, 400, "invalid_request_error", "context_length_exceeded",
                       "This model's maximum context length is %d tokens. However, your messages resulted in %d "
                       "tokens. Please reduce the length of the messages.",
                       n_ctx, r->n);
    int32_t n_vocab = (int32_t)r->pe->m->hp.n_vocab;
    for (int i = 0; i < req->n_bias; i++)
        if (req->bias_ids[i] < 0 || req->bias_ids[i] >= n_vocab)
            return pl_fail(r, 400, "invalid_request_error", NULL, "logit_bias token %d is outside the vocabulary (%d tokens)",
                           req->bias_ids[i], n_vocab);
    if ((status = pl_spec_admit(r))) return status;
    eng_event acc = {0};
    acc.type = ENG_EV_ACCEPTED;
    acc.counters = r->c;
    pl_emit(r->sink, &acc);
    return 0;
}
