/* A model file driven directly for the evaluations (see eval_local.h). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_conv.h"
#include "eval/eval_local.h"
#include "pipeline/pipeline.h"

struct ev_local {
    pl_engine *pe;
    const tok_vocab *vocab;
    char desc[96];
};

int ev_local_open(ev_local **out, const char *path, const eng_options *o, const char *tmpl_name, wk_error *err)
{
    *out = NULL;
    ev_local *l = calloc(1, sizeof *l);
    if (!l) return wk_fail(err, WK_ENOMEM, "out of memory");
    pl_config cfg;
    pl_config_default(&cfg);
    cfg.model_path = path;
    cfg.chat_template = tmpl_name;
    cfg.eng = *o;
    int rc = pl_engine_open(&l->pe, &cfg, err);
    if (rc) {
        free(l);
        return rc;
    }
    l->vocab = pl_engine_vocab(l->pe);
    const chat_template *t = pl_engine_template(l->pe);
    snprintf(l->desc, sizeof l->desc, "%s%s", chat_template_name(t->kind),
             t->supports_thinking ? " (enable_thinking=false)" : "");
    *out = l;
    return 0;
}

void ev_local_close(ev_local *l)
{
    if (!l) return;
    pl_engine_close(l->pe);
    free(l);
}

const char *ev_local_template_desc(const ev_local *l) { return l->desc; }
int32_t ev_local_n_ctx_train(const ev_local *l) { return (int32_t)pl_engine_model(l->pe)->hp.n_ctx_train; }
eng_ctx *ev_local_ctx(ev_local *l) { return pl_engine_ctx(l->pe); }
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
    chat_conv conv;
    chat_conv_init(&conv);
    /* short, direct answers: thinking off where the template has it */
    if (pl_engine_template(l->pe)->supports_thinking) conv.enable_thinking = 0;
    int rc = chat_conv_add(&conv, CHAT_ROLE_USER, user_text, strlen(user_text), err);
    if (!rc) rc = chat_conv_finish(&conv, "messages", err);
    if (!rc) rc = pl_chat_tokens(l->pe, &conv, ids, n, err);
    chat_conv_free(&conv);
    return rc;
}

/* The answer as the pipeline produces it: token ids, the caller's step hook. */
typedef struct gen_out {
    int32_t *ids;
    int32_t n, cap;
    ev_step_fn step;
    void *step_user;
    const tok_vocab *vocab;
} gen_out;

static void on_token(void *user, int32_t id)
{
    gen_out *g = user;
    if (tok_is_eog(g->vocab, id) || g->n >= g->cap) return;
    g->ids[g->n++] = id;
}

static int32_t on_step(void *user, int32_t step, const float *logits, int32_t n_vocab, int32_t chosen)
{
    gen_out *g = user;
    return g->step ? g->step(g->step_user, step, logits, n_vocab, chosen) : -1;
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
    pl_engine_reserve(l->pe, (int32_t)need);
    eng_request req = {0};
    req.kind = ENG_REQ_COMPLETION;
    req.prompt_ids = malloc(sizeof(int32_t) * (size_t)n);
    gen_out g = {.ids = malloc(sizeof(int32_t) * (size_t)(max_tokens + 1)), .cap = max_tokens, .step = step_logits,
                 .step_user = step_user, .vocab = l->vocab};
    if (!req.prompt_ids || !g.ids) {
        free(req.prompt_ids);
        free(g.ids);
        return wk_fail(err, WK_ENOMEM, "out of memory");
    }
    memcpy(req.prompt_ids, ids, sizeof(int32_t) * (size_t)n);
    req.n_prompt_ids = n;
    req.max_tokens = max_tokens;
    req.sampling.temperature = 0; /* greedy */
    req.sampling.repeat_penalty = 1;
    req.sampling.top_p = 1;
    req.sampling.has_seed = true;
    req.has_policy = true; /* NULL: dense */
    if (policy) req.policy = *policy;
    req.fresh = true; /* every sample is a cold prefill: measurements must not depend on the order */
    snprintf(req.id, sizeof req.id, "eval");
    pl_sink sink = {.user = &g, .token = on_token, .step_logits = step_logits ? on_step : NULL};
    eng_event final = {0};
    int status = pl_run(l->pe, &req, &sink, &final);
    eng_request_clear(&req);
    int rc = 0;
    if (status) rc = wk_fail(err, status == 400 ? WK_EINVAL : WK_EIO, "generate: %s", final.message);
    if (prefill_ms) *prefill_ms = final.counters.prefill_ms;
    if (!rc && text) rc = tok_decode(l->vocab, g.ids, (size_t)g.n, 0, text, &(size_t){0}, err);
    if (rc || !out_ids) free(g.ids);
    else *out_ids = g.ids;
    if (!rc && n_out) *n_out = g.n;
    return rc;
}
