/* A model file driven directly for the evaluations (see eval_local.h). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "engine/sequence.h"
#include "eval/eval_local.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/argmax.h"
#include "util/timeutil.h"

struct ev_local {
    model *m;
    tok_vocab *vocab;
    chat_template tmpl;
    eng_ctx *ctx;
    eng_seq *seq;
    char desc[96];
};

int ev_local_open(ev_local **out, const char *path, const eng_options *o, const char *tmpl_name, wk_error *err)
{
    *out = NULL;
    ev_local *l = calloc(1, sizeof *l);
    if (!l) return wk_fail(err, WK_ENOMEM, "out of memory");
    int rc = model_load(&l->m, path, err);
    if (!rc) rc = tok_load_from_gguf(&l->vocab, l->m->file, err);
    if (!rc) rc = chat_template_from_gguf(&l->tmpl, l->m->file, tmpl_name, err);
    if (!rc) rc = eng_ctx_new(&l->ctx, l->m, o, err);
    if (!rc) rc = eng_seq_new(&l->seq, l->ctx, 0, err);
    if (rc) {
        ev_local_close(l);
        return rc;
    }
    snprintf(l->desc, sizeof l->desc, "%s%s", chat_template_name(l->tmpl.kind),
             l->tmpl.supports_thinking ? " (enable_thinking=false)" : "");
    *out = l;
    return 0;
}

void ev_local_close(ev_local *l)
{
    if (!l) return;
    eng_seq_free(l->seq);
    eng_ctx_free(l->ctx);
    tok_free(l->vocab);
    model_free(l->m);
    free(l);
}

const char *ev_local_template_desc(const ev_local *l) { return l->desc; }
int32_t ev_local_n_ctx_train(const ev_local *l) { return (int32_t)l->m->hp.n_ctx_train; }
eng_ctx *ev_local_ctx(ev_local *l) { return l->ctx; }
bool ev_local_is_eog(const ev_local *l, int32_t id) { return tok_is_eog(l->vocab, id); }

int ev_local_count(void *user, const char *text, size_t len, int32_t *n_tokens, wk_error *err)
{
    ev_local *l = user;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = tok_encode(l->vocab, text, len, false, TOK_SPECIAL_NONE, &ids, &n, err);
    free(ids);
    *n_tokens = rc ? 0 : (int32_t)n;
    return rc;
}

int ev_local_tokenize(ev_local *l, const char *text, int32_t **ids, int32_t *n, wk_error *err)
{
    size_t nn = 0;
    int rc = tok_encode(l->vocab, text, strlen(text), false, TOK_SPECIAL_NONE, ids, &nn, err);
    *n = (int32_t)nn;
    return rc;
}

int ev_local_detokenize(ev_local *l, const int32_t *ids, int32_t n, char **text, wk_error *err)
{
    size_t len = 0;
    return tok_decode(l->vocab, ids, (size_t)n, 0, text, &len, err);
}

int ev_local_chat_ids(ev_local *l, const char *user_text, int32_t **ids, int32_t *n, wk_error *err)
{
    *ids = NULL;
    *n = 0;
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", user_text);
    if (!msgs) return wk_fail(err, WK_ENOMEM, "out of memory (prompt is not valid UTF-8?)");
    chat_options co;
    chat_options_default(&co);
    co.enable_thinking = l->tmpl.supports_thinking ? 0 : -1; /* short, direct answers */
    chat_prompt p = {0};
    int rc = chat_render(&l->tmpl, msgs, NULL, &co, &p, err);
    json_decref(msgs);
    if (rc) return rc;
    size_t nn = 0, cap = 0;
    int32_t bos = tok_bos(l->vocab);
    if (!p.starts_with_bos && tok_add_bos(l->vocab) && bos != TOK_NULL) {
        *ids = malloc(16 * sizeof **ids);
        if (!*ids) {
            chat_prompt_free(&p);
            return wk_fail(err, WK_ENOMEM, "out of memory");
        }
        cap = 16;
        (*ids)[nn++] = bos;
    }
    for (size_t i = 0; i < p.n_segs && !rc; i++)
        rc = tok_encode_append(l->vocab, p.text + p.segs[i].offset, p.segs[i].len, false,
                               p.segs[i].special ? TOK_SPECIAL_ALL : TOK_SPECIAL_NONE, ids, &nn, &cap, err);
    chat_prompt_free(&p);
    if (rc) {
        free(*ids);
        *ids = NULL;
        return rc;
    }
    *n = (int32_t)nn;
    return 0;
}

int ev_local_generate(ev_local *l, const int32_t *ids, int32_t n, int32_t max_tokens, const be_attn_policy *policy,
                      ev_step_fn step_logits, void *step_user, int32_t **out_ids, int32_t *n_out, char **text,
                      double *prefill_ms, wk_error *err)
{
    if (out_ids) *out_ids = NULL;
    if (n_out) *n_out = 0;
    if (text) *text = NULL;
    if (n <= 0) return wk_fail(err, WK_EINVAL, "generate: empty prompt");
    if (max_tokens < 0) max_tokens = 0;
    int64_t need = (int64_t)n + max_tokens + 1;
    if (need > INT32_MAX) return wk_fail(err, WK_ERANGE, "generate: %d prompt tokens is too many", n);
    if (eng_seq_capacity(l->seq) < need) { /* grow the sequence to fit */
        eng_seq_free(l->seq);
        l->seq = NULL;
        int rc = eng_seq_new(&l->seq, l->ctx, (int32_t)need, err);
        if (rc) return wk_fail_prefix(err, "sequence for %lld positions", (long long)need);
    }
    eng_ctx_set_policy(l->ctx, policy);
    eng_seq_clear(l->seq);
    int32_t *ans = malloc(sizeof(int32_t) * (size_t)(max_tokens + 1));
    if (!ans) return wk_fail(err, WK_ENOMEM, "out of memory");
    double t0 = wk_now_ms();
    int rc = eng_prefill(l->ctx, l->seq, ids, n, NULL, err);
    if (prefill_ms) *prefill_ms = wk_now_ms() - t0;
    int32_t got = 0;
    const int32_t V = eng_n_vocab(l->ctx);
    for (int32_t step = 0; !rc && step < max_tokens; step++) {
        const float *lg = eng_logits(l->ctx);
        int32_t next = wk_argmax_f32(lg, V);
        if (step_logits) {
            int32_t forced = step_logits(step_user, step, lg, V, next);
            if (forced >= 0) next = forced;
        }
        if (tok_is_eog(l->vocab, next)) break;
        ans[got++] = next;
        if (step + 1 < max_tokens) rc = eng_decode(l->ctx, l->seq, next, err);
    }
    if (!rc && text) rc = tok_decode(l->vocab, ans, (size_t)got, 0, text, &(size_t){0}, err);
    if (rc || !out_ids) free(ans);
    else *out_ids = ans;
    if (!rc && n_out) *n_out = got;
    return rc;
}
