/* Plain data of a request (engine/request.h): clearing, the sampling
 * defaults, the default approximate attention policy a request may ask for,
 * the counters' JSON. Kept apart from the engine so the server's parsing
 * code links without a model. */
#include <stdlib.h>
#include <string.h>

#include "chat/chat_conv.h"
#include "engine/context.h"
#include "engine/request.h"

void eng_request_clear(eng_request *req)
{
    if (req->chat) {
        chat_conv_free(req->chat);
        free(req->chat);
    }
    free(req->tool_choice_name);
    json_decref(req->json_schema);
    free(req->json_schema_name);
    free(req->prompt);
    free(req->prompt_ids);
    free(req->bias_ids);
    free(req->bias_values);
    for (int i = 0; i < req->n_stop; i++) free(req->stop[i]);
    memset(req, 0, sizeof *req);
}

void eng_sampling_default(eng_sampling *s)
{
    /* llama-server's defaults (what local clients expect), not OpenAI's 1.0/1.0 */
    memset(s, 0, sizeof *s);
    s->temperature = 0.8f;
    s->top_p = 0.95f;
    s->top_k = 40;
    s->min_p = 0.05f;
    s->repeat_penalty = 1.0f;
}

void eng_policy_approx_default(be_attn_policy *p)
{
    /* A system prompt + instructions fit in 8K; an 8K window keeps the
     * recent code/document exact; the last 2K prompt tokens (the question)
     * see everything; a continuation's short new turn (128) does too. */
    p->approx = true;
    p->global = 8192;
    p->window = 8192;
    p->dense_tail = 2048;
    p->dense_tail_continue = 128;
}

void eng_event_clear(eng_event *ev)
{
    free(ev->text);
    memset(ev, 0, sizeof *ev);
}

static const char *const k_spec_names[] = {
    [ENG_SPEC_DEFAULT] = "default", [ENG_SPEC_OFF] = "off", [ENG_SPEC_NGRAM] = "ngram",
    [ENG_SPEC_DRAFT] = "draft",     [ENG_SPEC_MTP] = "mtp", [ENG_SPEC_AUTO] = "auto",
};

const char *eng_spec_mode_name(int mode)
{
    return mode >= 0 && (size_t)mode < sizeof k_spec_names / sizeof k_spec_names[0] ? k_spec_names[mode] : "?";
}

int eng_spec_mode_parse(const char *s, int *mode, wk_error *err)
{
    for (int i = ENG_SPEC_OFF; s && (size_t)i < sizeof k_spec_names / sizeof k_spec_names[0]; i++)
        if (!strcmp(s, k_spec_names[i])) {
            *mode = i;
            return 0;
        }
    return wk_fail(err, WK_EINVAL, "unknown speculative source '%s' (%s)", s ? s : "", ENG_SPEC_MODE_NAMES);
}

json_t *eng_counters_usage_json(const eng_counters *c)
{
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(c->prompt_tokens));
    json_object_set_new(u, "completion_tokens", json_integer(c->completion_tokens));
    json_object_set_new(u, "total_tokens", json_integer(c->prompt_tokens + c->completion_tokens));
    json_t *pd = json_object();
    json_object_set_new(pd, "cached_tokens", json_integer(c->cached_tokens));
    json_object_set_new(u, "prompt_tokens_details", pd);
    json_t *cd = json_object();
    json_object_set_new(cd, "reasoning_tokens", json_integer(c->reasoning_tokens));
    json_object_set_new(u, "completion_tokens_details", cd);
    return u;
}

/* Rounded to microseconds / 0.01 tok/s so the same numbers print the same
 * everywhere (API, monitor, /metrics). */
static double r3(double x) { return (double)(long long)(x * 1000.0 + (x >= 0 ? 0.5 : -0.5)) / 1000.0; }

json_t *eng_counters_timings_json(const eng_counters *c)
{
    json_t *t = json_object();
    /* Ours (prompt_n/cached_n/recomputed_n/decode_n…), the long names, and
     * llama-server's (cache_n, prompt_ms, predicted_n…). Note prompt_n is the
     * whole prompt here; llama-server's prompt_n (tokens processed) is our
     * recomputed_n. */
    json_object_set_new(t, "prompt_n", json_integer(c->prompt_tokens));
    json_object_set_new(t, "cached_n", json_integer(c->cached_tokens));
    json_object_set_new(t, "recomputed_n", json_integer(c->recomputed_tokens));
    json_object_set_new(t, "prompt_tokens", json_integer(c->prompt_tokens));
    json_object_set_new(t, "cached_tokens", json_integer(c->cached_tokens));
    json_object_set_new(t, "recomputed_tokens", json_integer(c->recomputed_tokens));
    json_object_set_new(t, "replayed_tokens", json_integer(c->replayed_tokens));
    if (c->ckpt_kind[0]) {
        json_t *ck = json_object();
        json_object_set_new(ck, "pos", json_integer(c->ckpt_pos));
        json_object_set_new(ck, "kind", json_string(c->ckpt_kind));
        json_object_set_new(ck, "from_disk", json_boolean(c->ckpt_from_disk));
        json_object_set_new(t, "checkpoint", ck);
    }
    json_object_set_new(t, "prefill_ms", json_real(r3(c->prefill_ms)));
    json_object_set_new(t, "prefill_tok_per_s", json_real(r3(c->prefill_tok_per_s)));
    json_object_set_new(t, "ttft_ms", json_real(r3(c->ttft_ms)));
    json_object_set_new(t, "queue_ms", json_real(r3(c->queue_ms)));
    json_object_set_new(t, "completion_tokens", json_integer(c->completion_tokens));
    json_object_set_new(t, "decode_n", json_integer(c->completion_tokens));
    json_object_set_new(t, "decode_ms", json_real(r3(c->decode_ms)));
    json_object_set_new(t, "decode_tok_per_s", json_real(r3(c->decode_tok_per_s)));
    json_object_set_new(t, "cache_n", json_integer(c->cached_tokens));
    json_object_set_new(t, "prompt_ms", json_real(r3(c->prefill_ms)));
    json_object_set_new(t, "prompt_per_second", json_real(r3(c->prefill_tok_per_s)));
    json_object_set_new(t, "predicted_n", json_integer(c->completion_tokens));
    json_object_set_new(t, "predicted_ms", json_real(r3(c->decode_ms)));
    json_object_set_new(t, "predicted_per_second", json_real(r3(c->decode_tok_per_s)));
    if (c->spec[0]) {
        /* llama-server's draft_n / draft_n_accepted, and the derived rates */
        json_object_set_new(t, "draft_source", json_string(c->spec));
        json_object_set_new(t, "draft_n", json_integer(c->draft_proposed));
        json_object_set_new(t, "draft_n_accepted", json_integer(c->draft_accepted));
        json_object_set_new(t, "draft_steps", json_integer(c->spec_steps));
        json_object_set_new(t, "draft_acceptance",
                            json_real(r3(c->draft_proposed ? (double)c->draft_accepted / c->draft_proposed : 0)));
        json_object_set_new(t, "draft_accepted_per_step",
                            json_real(r3(c->spec_steps ? (double)c->draft_accepted / c->spec_steps : 0)));
    }
    return t;
}
