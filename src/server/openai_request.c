#include "server/openai_request.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_conv.h"
#include "server/json_schema_check.h"
#include "server/request_fields.h"
#include "server/sse.h"

void srv_limits_default(srv_limits *l)
{
    l->max_body_bytes = (size_t)32 << 20; /* room for a long document pasted as a prompt */
    l->max_json_depth = 64;  /* OpenAI bodies nest < 10 deep; tool schemas a bit more */
    l->max_messages = 2048;
    l->n_ctx = 0;
}

int srv_json_depth(const char *text, size_t n, int limit)
{
    int depth = 0, max = 0;
    bool in_str = false, esc = false;
    for (size_t i = 0; i < n; i++) {
        char c = text[i];
        if (in_str) {
            if (esc) esc = false;
            else if (c == '\\') esc = true;
            else if (c == '"') in_str = false;
            continue;
        }
        if (c == '"') in_str = true;
        else if (c == '[' || c == '{') {
            if (++depth > max) max = depth;
            if (max > limit) return max;
        } else if (c == ']' || c == '}') depth--;
    }
    return max;
}

int srv_parse_body(const char *body, size_t n, const srv_limits *lim, json_t **out,
                   srv_error *err)
{
    *out = NULL;
    if (n == 0) return srv_fail(err, 400, NULL, "invalid_json", "request body is empty");
    if (lim->max_body_bytes && n > lim->max_body_bytes)
        return srv_fail(err, 413, NULL, "body_too_large", "request body of %zu bytes exceeds the limit of %zu bytes",
                        n, lim->max_body_bytes);
    if (!srv_utf8_valid(body, n))
        return srv_fail(err, 400, NULL, "invalid_utf8", "request body is not valid UTF-8");
    int depth = srv_json_depth(body, n, lim->max_json_depth);
    if (depth > lim->max_json_depth)
        return srv_fail(err, 400, NULL, "json_too_deep", "JSON nesting deeper than %d levels",
                        lim->max_json_depth);
    json_error_t je;
    /* REJECT_DUPLICATES: a key given twice is ambiguous; no NUL inside strings. */
    json_t *root = json_loadb(body, n, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return srv_fail(err, 400, NULL, "invalid_json", "invalid JSON at line %d column %d: %s",
                        je.line, je.column, je.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return srv_fail(err, 400, NULL, "invalid_json", "request body must be a JSON object");
    }
    *out = root;
    return 0;
}

/* Options shared by chat and completions: sampling, limits, stop, stream, wick. */
static int parse_common(json_t *root, eng_request *req, srv_resp_opts *ro, bool chat, srv_error *err)
{
    eng_sampling *s = &req->sampling;
    eng_sampling_default(s);
    if (srv_get_number(root, "temperature", 0.0, 2.0, &s->temperature, err) ||
        srv_get_number(root, "top_p", 0.0, 1.0, &s->top_p, err) ||
        srv_get_number(root, "min_p", 0.0, 1.0, &s->min_p, err) ||
        srv_get_number(root, "presence_penalty", -2.0, 2.0, &s->presence_penalty, err) ||
        srv_get_number(root, "frequency_penalty", -2.0, 2.0, &s->frequency_penalty, err) ||
        srv_get_number(root, "repeat_penalty", 0.01, 10.0, &s->repeat_penalty, err))
        return -1;
    long long x;
    bool has;
    if (srv_get_int(root, "top_k", 0, 1 << 20, &x, &has, err)) return -1;
    if (has) s->top_k = (int)x;
    if (srv_get_int(root, "seed", INT64_MIN, INT64_MAX, &x, &has, err)) return -1;
    if (has) {
        s->seed = (uint64_t)x;
        s->has_seed = true;
    }
    if (srv_get_int(root, "n", 1, 1, &x, &has, err)) {
        snprintf(err->message, sizeof err->message, "only n = 1 is supported");
        return -1;
    }

    /* max_completion_tokens is the newer name; either may be sent. A limit
     * beyond the room the prompt leaves is clamped by the engine (finish
     * reason "length"), as OpenAI and llama-server do. */
    req->max_tokens = -1;
    const char *names[2] = {"max_completion_tokens", "max_tokens"};
    for (int i = 0; i < 2; i++) {
        if (srv_get_int(root, names[i], 1, INT32_MAX, &x, &has, err)) return -1;
        if (has && req->max_tokens < 0) req->max_tokens = (int)x;
    }

    if (srv_parse_stop(json_object_get(root, "stop"), "stop", req, err)) return -1;

    const json_t *lb = json_object_get(root, "logit_bias");
    if (lb && !json_is_null(lb)) {
        if (!json_is_object(lb))
            return srv_fail(err, 400, "logit_bias", "invalid_type", "'logit_bias' must be an object, got %s", chat_json_type_name(lb));
        size_t n = json_object_size(lb);
        if (n > 1024) return srv_fail(err, 400, "logit_bias", "invalid_value", "at most 1024 logit_bias entries");
        req->bias_ids = malloc((n ? n : 1) * sizeof *req->bias_ids);
        req->bias_values = malloc((n ? n : 1) * sizeof *req->bias_values);
        if (!req->bias_ids || !req->bias_values) return srv_fail_oom(err);
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)lb, k, v) {
            char *end;
            long id = strtol(k, &end, 10);
            if (!*k || *end || id < 0 || id > INT32_MAX)
                return srv_fail(err, 400, "logit_bias", "invalid_value", "logit_bias key '%s' is not a token id", k);
            double b = json_is_number(v) ? json_number_value(v) : NAN;
            if (!(b >= -100.0 && b <= 100.0))
                return srv_fail(err, 400, "logit_bias", "invalid_value", "logit_bias[%s] must be a number in [-100, 100]", k);
            req->bias_ids[req->n_bias] = (int32_t)id;
            req->bias_values[req->n_bias++] = (float)b;
        }
    }

    ro->stream = false;
    if (srv_get_bool(root, "stream", &ro->stream, err)) return -1;
    req->stream = ro->stream;
    const json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so))
            return srv_fail(err, 400, "stream_options", "invalid_type", "'stream_options' must be an object, got %s",
                            chat_json_type_name(so));
        if (!ro->stream)
            return srv_fail(err, 400, "stream_options", "invalid_value", "'stream_options' is only allowed with 'stream': true");
        if (srv_get_bool(so, "include_usage", &ro->include_usage, err)) {
            snprintf(err->param, sizeof err->param, "stream_options.include_usage");
            return -1;
        }
    }

    bool logprobs = false;
    const json_t *lp = json_object_get(root, "logprobs");
    if (chat) {
        if (srv_get_bool(root, "logprobs", &logprobs, err)) return -1;
    } else if (lp && !json_is_null(lp)) {
        logprobs = !(json_is_integer(lp) && json_integer_value(lp) == 0);
    }
    if (logprobs) return srv_fail(err, 400, "logprobs", "unsupported", "'logprobs' is not supported by this server");

    if (srv_parse_wick(root, req, err)) return -1;
    /* llama-server's ignore_eos: generate exactly max_tokens (benchmarks). */
    if (srv_get_bool(root, "ignore_eos", &req->ignore_eos, err)) return -1;
    if (req->ignore_eos && req->max_tokens < 0)
        return srv_fail(err, 400, "ignore_eos", "invalid_value", "'ignore_eos' requires 'max_tokens'");
    return 0;
}

/* response_format: text (default), json_object, json_schema. */
static int parse_response_format(const json_t *root, eng_request *req, srv_error *err)
{
    const json_t *rf = json_object_get(root, "response_format");
    if (!rf || json_is_null(rf)) return 0;
    const json_t *t = json_is_object(rf) ? json_object_get(rf, "type") : NULL;
    if (!json_is_string(t))
        return srv_fail(err, 400, "response_format", "invalid_type", "'response_format' must be an object with a string 'type'");
    const char *type = json_string_value(t);
    if (!strcmp(type, "text")) return 0;
    if (!strcmp(type, "json_object")) {
        req->response_format = ENG_FORMAT_JSON_OBJECT;
        return 0;
    }
    if (!strcmp(type, "json_schema"))
        return srv_parse_json_schema_format(json_object_get(rf, "json_schema"), "response_format.json_schema", req, err);
    return srv_fail(err, 400, "response_format", "invalid_value",
                    "response_format type '%s' is not one of text, json_object, json_schema", type);
}

int srv_parse_chat(json_t *root, const srv_limits *lim, const srv_model_names *models, eng_request *req,
                   srv_resp_opts *ro, srv_error *err)
{
    memset(req, 0, sizeof *req);
    memset(ro, 0, sizeof *ro);
    req->kind = ENG_REQ_CHAT;
    if (srv_check_model(root, models, err)) goto fail;
    const json_t *msgs = json_object_get(root, "messages");
    if (lim->max_messages > 0 && json_array_size(msgs) > (size_t)lim->max_messages) {
        srv_fail(err, 400, "messages", "too_many_messages", "%zu messages exceed the limit of %d", json_array_size(msgs),
                 lim->max_messages);
        goto fail;
    }
    chat_conv conv;
    wk_error werr = {0};
    if (chat_conv_from_openai(&conv, root, &werr)) {
        srv_fail_chat(err, &werr);
        goto fail;
    }
    if (srv_take_conv(req, &conv, err) || srv_parse_tool_choice(root, req, err) || parse_response_format(root, req, err) ||
        parse_common(root, req, ro, true, err))
        goto fail;
    return 0;
fail:
    eng_request_clear(req);
    return -1;
}

int srv_parse_completion(json_t *root, const srv_limits *lim, const srv_model_names *models,
                         eng_request *req, srv_resp_opts *ro, srv_error *err)
{
    memset(req, 0, sizeof *req);
    memset(ro, 0, sizeof *ro);
    req->kind = ENG_REQ_COMPLETION;
    if (srv_check_model(root, models, err)) goto fail;
    const json_t *p = json_object_get(root, "prompt");
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
        p = json_array_get(p, 0);
    if (json_is_string(p)) {
        req->prompt = strdup(json_string_value(p));
        if (!req->prompt) {
            srv_fail_oom(err);
            goto fail;
        }
    } else if (json_is_array(p) && json_array_size(p) > 0 && json_is_integer(json_array_get(p, 0))) {
        size_t n = json_array_size(p);
        if (lim->n_ctx > 0 && n >= (size_t)lim->n_ctx) {
            srv_fail_context(err, lim->n_ctx, (long long)n);
            goto fail;
        }
        req->prompt_ids = malloc(n * sizeof *req->prompt_ids);
        if (!req->prompt_ids) {
            srv_fail_oom(err);
            goto fail;
        }
        req->n_prompt_ids = (int)n;
        for (size_t i = 0; i < n; i++) {
            const json_t *e = json_array_get(p, i);
            if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > INT32_MAX) {
                srv_fail(err, 400, "prompt", "invalid_type", "'prompt[%zu]' must be a token id", i);
                goto fail;
            }
            req->prompt_ids[i] = (int32_t)json_integer_value(e);
        }
    } else if (!p) {
        srv_fail(err, 400, "prompt", "missing_prompt", "'prompt' is required");
        goto fail;
    } else {
        srv_fail(err, 400, "prompt", "invalid_type",
                 "'prompt' must be a string, an array of one string or an array of token ids");
        goto fail;
    }
    if (parse_common(root, req, ro, false, err)) goto fail;
    if (srv_get_bool(root, "echo", &ro->echo, err)) goto fail;
    if (ro->echo) {
        srv_fail(err, 400, "echo", "unsupported", "'echo' is not supported by this server");
        goto fail;
    }
    const json_t *suffix = json_object_get(root, "suffix");
    if (suffix && !json_is_null(suffix)) {
        srv_fail(err, 400, "suffix", "unsupported", "'suffix' is not supported by this server");
        goto fail;
    }
    return 0;
fail:
    eng_request_clear(req);
    return -1;
}
