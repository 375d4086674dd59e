#include "server/openai_request.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/context.h"
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

/* ---- field helpers: absent/null → keep the default ---- */

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static int get_number(const json_t *root, const char *key, double lo, double hi, float *out,
                      srv_error *err)
{
    const json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v))
        return srv_fail(err, 400, key, "invalid_type", "'%s' must be a number, got %s", key, type_name(v));
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi)
        return srv_fail(err, 400, key, "invalid_value", "'%s' must be between %g and %g, got %g", key, lo, hi, d);
    *out = (float)d;
    return 0;
}

static int get_int(const json_t *root, const char *key, long long lo, long long hi, long long *out,
                   bool *present, srv_error *err)
{
    const json_t *v = json_object_get(root, key);
    if (present) *present = false;
    if (!v || json_is_null(v)) return 0;
    long long x;
    if (json_is_integer(v)) x = json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
             fabs(json_real_value(v)) < 9e15)
        x = (long long)json_real_value(v);
    else
        return srv_fail(err, 400, key, "invalid_type", "'%s' must be an integer, got %s", key, type_name(v));
    if (x < lo || x > hi)
        return srv_fail(err, 400, key, "invalid_value", "'%s' must be between %lld and %lld, got %lld", key, lo, hi, x);
    *out = x;
    if (present) *present = true;
    return 0;
}

static int get_bool(const json_t *root, const char *key, bool *out, srv_error *err)
{
    const json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v))
        return srv_fail(err, 400, key, "invalid_type", "'%s' must be a boolean, got %s", key, type_name(v));
    *out = json_is_true(v);
    return 0;
}

static int check_model(const json_t *root, const char *model_id, srv_error *err)
{
    const json_t *v = json_object_get(root, "model");
    if (!v || json_is_null(v)) return 0; /* a single-model server does not need it */
    if (!json_is_string(v))
        return srv_fail(err, 400, "model", "invalid_type", "'model' must be a string, got %s", type_name(v));
    const char *m = json_string_value(v);
    if (!model_id || !*model_id || strcmp(m, model_id) == 0 || strcmp(m, "default") == 0) return 0;
    return srv_fail(err, 404, "model", "model_not_found",
                    "The model '%s' does not exist; this server serves '%s'", m, model_id);
}

/* Options shared by chat and completions: sampling, limits, stop, stream, wick. */
static int parse_common(json_t *root, const srv_limits *lim, eng_request *req, srv_resp_opts *ro,
                        bool chat, srv_error *err)
{
    eng_sampling *s = &req->sampling;
    /* llama-server's defaults (what local clients expect), not OpenAI's 1.0/1.0. */
    s->temperature = 0.8f;
    s->top_p = 0.95f;
    s->top_k = 40;
    s->min_p = 0.05f;
    s->repeat_penalty = 1.0f;
    s->presence_penalty = 0.0f;
    s->frequency_penalty = 0.0f;
    if (get_number(root, "temperature", 0.0, 2.0, &s->temperature, err) ||
        get_number(root, "top_p", 0.0, 1.0, &s->top_p, err) ||
        get_number(root, "min_p", 0.0, 1.0, &s->min_p, err) ||
        get_number(root, "presence_penalty", -2.0, 2.0, &s->presence_penalty, err) ||
        get_number(root, "frequency_penalty", -2.0, 2.0, &s->frequency_penalty, err) ||
        get_number(root, "repeat_penalty", 0.01, 10.0, &s->repeat_penalty, err))
        return -1;
    long long x;
    bool has;
    if (get_int(root, "top_k", 0, 1 << 20, &x, &has, err)) return -1;
    if (has) s->top_k = (int)x;
    if (get_int(root, "seed", INT64_MIN, INT64_MAX, &x, &has, err)) return -1;
    if (has) {
        s->seed = (uint64_t)x;
        s->has_seed = true;
    }
    if (get_int(root, "n", 1, 1, &x, &has, err)) {
        snprintf(err->message, sizeof err->message, "only n = 1 is supported");
        return -1;
    }

    /* max_completion_tokens is the newer name; either may be sent. */
    req->max_tokens = -1;
    long long hi = lim->n_ctx > 0 ? lim->n_ctx : INT32_MAX;
    const char *names[2] = {"max_completion_tokens", "max_tokens"};
    for (int i = 0; i < 2; i++) {
        if (get_int(root, names[i], 1, INT32_MAX, &x, &has, err)) return -1;
        if (!has || req->max_tokens >= 0) continue;
        if (x > hi)
            return srv_fail(err, 400, names[i], "context_length_exceeded",
                            "'%s' = %lld exceeds the context size of %lld tokens", names[i], x, hi);
        req->max_tokens = (int)x;
    }
    if (!chat && req->max_tokens < 0 && json_object_get(root, "max_tokens") == NULL)
        req->max_tokens = -1; /* llama-server: until end of generation (OpenAI would say 16) */

    const json_t *stop = json_object_get(root, "stop");
    if (stop && !json_is_null(stop)) {
        if (json_is_string(stop)) {
            if (json_string_length(stop) > 0) req->stop[req->n_stop++] = strdup(json_string_value(stop));
        } else if (json_is_array(stop)) {
            if (json_array_size(stop) > ENG_MAX_STOP)
                return srv_fail(err, 400, "stop", "invalid_value", "at most %d stop sequences", ENG_MAX_STOP);
            size_t i;
            const json_t *e;
            json_array_foreach(stop, i, e) {
                if (!json_is_string(e))
                    return srv_fail(err, 400, "stop", "invalid_type", "'stop[%zu]' must be a string, got %s", i, type_name(e));
                if (json_string_length(e) == 0) continue;
                req->stop[req->n_stop++] = strdup(json_string_value(e));
            }
        } else {
            return srv_fail(err, 400, "stop", "invalid_type", "'stop' must be a string or an array of strings, got %s",
                            type_name(stop));
        }
    }

    const json_t *lb = json_object_get(root, "logit_bias");
    if (lb && !json_is_null(lb)) {
        if (!json_is_object(lb))
            return srv_fail(err, 400, "logit_bias", "invalid_type", "'logit_bias' must be an object, got %s", type_name(lb));
        size_t n = json_object_size(lb);
        if (n > 1024) return srv_fail(err, 400, "logit_bias", "invalid_value", "at most 1024 logit_bias entries");
        req->bias_ids = malloc((n ? n : 1) * sizeof *req->bias_ids);
        req->bias_values = malloc((n ? n : 1) * sizeof *req->bias_values);
        if (!req->bias_ids || !req->bias_values) return srv_fail(err, 500, NULL, NULL, "out of memory");
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
    if (get_bool(root, "stream", &ro->stream, err)) return -1;
    req->stream = ro->stream;
    const json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so))
            return srv_fail(err, 400, "stream_options", "invalid_type", "'stream_options' must be an object, got %s", type_name(so));
        if (!ro->stream)
            return srv_fail(err, 400, "stream_options", "invalid_value", "'stream_options' is only allowed with 'stream': true");
        if (get_bool(so, "include_usage", &ro->include_usage, err)) {
            snprintf(err->param, sizeof err->param, "stream_options.include_usage");
            return -1;
        }
    }

    bool logprobs = false;
    const json_t *lp = json_object_get(root, "logprobs");
    if (chat) {
        if (get_bool(root, "logprobs", &logprobs, err)) return -1;
    } else if (lp && !json_is_null(lp)) {
        logprobs = !(json_is_integer(lp) && json_integer_value(lp) == 0);
    }
    if (logprobs) return srv_fail(err, 400, "logprobs", "unsupported", "'logprobs' is not supported by this server");

    const json_t *rf = json_object_get(root, "response_format");
    if (rf && !json_is_null(rf)) {
        const json_t *t = json_is_object(rf) ? json_object_get(rf, "type") : NULL;
        if (!json_is_string(t))
            return srv_fail(err, 400, "response_format", "invalid_type", "'response_format' must be an object with a string 'type'");
        if (strcmp(json_string_value(t), "text") != 0)
            return srv_fail(err, 400, "response_format", "unsupported", "response_format type '%s' is not supported (only 'text')",
                            json_string_value(t));
    }

    /* Extension object for wick options: {"wick": {"fresh": true}}, and the
     * attention policy {"wick": {"attn_policy": "approx", "global": N,
     * "window": N, "dense_tail": N, "dense_tail_continue": N}} (the --attn-*
     * flags without the prefix; numbers not given take the design defaults,
     * numbers without attn_policy mean approx). */
    const json_t *wick = json_object_get(root, "wick");
    if (wick && !json_is_null(wick)) {
        if (!json_is_object(wick))
            return srv_fail(err, 400, "wick", "invalid_type", "'wick' must be an object, got %s", type_name(wick));
        const char *k;
        const json_t *v;
        static const char *const known[] = {"fresh", "attn_policy", "global", "window", "dense_tail",
                                            "dense_tail_continue", "spec"};
        json_object_foreach((json_t *)wick, k, v) {
            bool ok = false;
            for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) ok = ok || strcmp(k, known[i]) == 0;
            if (!ok)
                return srv_fail(err, 400, "wick", "invalid_value",
                                "unknown wick option '%s' (known: fresh, attn_policy, global, window, dense_tail, "
                                "dense_tail_continue, spec)",
                                k);
        }
        if (get_bool(wick, "fresh", &req->fresh, err)) {
            snprintf(err->param, sizeof err->param, "wick.fresh");
            return -1;
        }
        /* {"wick": {"spec": "ngram"}}: this request's speculative draft source */
        const json_t *spec = json_object_get(wick, "spec");
        wk_error serr = {0};
        if (spec && !json_is_null(spec) &&
            (!json_is_string(spec) || eng_spec_mode_parse(json_string_value(spec), &req->spec, &serr)))
            return srv_fail(err, 400, "wick.spec", "invalid_value", "'wick.spec' must be one of %s",
                            ENG_SPEC_MODE_NAMES);
        const json_t *ap = json_object_get(wick, "attn_policy");
        if (ap && !json_is_null(ap)) {
            if (!json_is_string(ap) || (strcmp(json_string_value(ap), "dense") && strcmp(json_string_value(ap), "approx")))
                return srv_fail(err, 400, "wick.attn_policy", "invalid_value", "'wick.attn_policy' must be \"dense\" or \"approx\"");
            req->has_policy = true;
        }
        eng_policy_approx_default(&req->policy);
        req->policy.approx = !ap || json_is_null(ap) || strcmp(json_string_value(ap), "approx") == 0;
        struct {
            const char *key;
            int32_t *dst;
            long long lo;
        } nums[] = {{"global", &req->policy.global, 0},
                    {"window", &req->policy.window, 1},
                    {"dense_tail", &req->policy.dense_tail, 0},
                    {"dense_tail_continue", &req->policy.dense_tail_continue, 0}};
        for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
            long long x;
            bool has;
            if (get_int(wick, nums[i].key, nums[i].lo, 1 << 30, &x, &has, err)) {
                snprintf(err->param, sizeof err->param, "wick.%s", nums[i].key);
                return -1;
            }
            if (has) {
                *nums[i].dst = (int32_t)x;
                req->has_policy = true;
            }
        }
        if (!req->has_policy) memset(&req->policy, 0, sizeof req->policy);
    }
    /* llama-server's ignore_eos: generate exactly max_tokens (benchmarks). */
    if (get_bool(root, "ignore_eos", &req->ignore_eos, err)) return -1;
    if (req->ignore_eos && req->max_tokens < 0)
        return srv_fail(err, 400, "ignore_eos", "invalid_value", "'ignore_eos' requires 'max_tokens'");
    /* llama-server's cache_prompt: false means the same as fresh. */
    bool cache_prompt = true;
    if (get_bool(root, "cache_prompt", &cache_prompt, err)) return -1;
    if (!cache_prompt) req->fresh = true;
    return 0;
}

/* Text of a content value: a string, or an array of text parts. */
static int check_content(const json_t *c, size_t mi, bool allow_null, srv_error *err)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].content", mi);
    if (!c || json_is_null(c)) {
        if (allow_null) return 0;
        return srv_fail(err, 400, param, "missing_content", "'%s' is required", param);
    }
    if (json_is_string(c)) return 0;
    if (!json_is_array(c))
        return srv_fail(err, 400, param, "invalid_type", "'%s' must be a string or an array of parts, got %s", param,
                        type_name(c));
    size_t i;
    const json_t *p;
    json_array_foreach(c, i, p) {
        const json_t *t = json_is_object(p) ? json_object_get(p, "type") : NULL;
        if (!json_is_string(t))
            return srv_fail(err, 400, param, "invalid_type", "'%s[%zu]' must be an object with a string 'type'", param, i);
        if (strcmp(json_string_value(t), "text") != 0)
            return srv_fail(err, 400, param, "unsupported", "content part type '%s' is not supported (text only)",
                            json_string_value(t));
        if (!json_is_string(json_object_get(p, "text")))
            return srv_fail(err, 400, param, "invalid_type", "'%s[%zu].text' must be a string", param, i);
    }
    return 0;
}

static int check_tool_calls(const json_t *tc, size_t mi, srv_error *err)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].tool_calls", mi);
    if (!json_is_array(tc))
        return srv_fail(err, 400, param, "invalid_type", "'%s' must be an array, got %s", param, type_name(tc));
    size_t i;
    const json_t *c;
    json_array_foreach(tc, i, c) {
        const json_t *fn = json_is_object(c) ? json_object_get(c, "function") : NULL;
        if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name")))
            return srv_fail(err, 400, param, "invalid_type", "'%s[%zu]' must have a function with a string name", param, i);
        const json_t *args = json_object_get(fn, "arguments");
        if (args && !json_is_string(args) && !json_is_object(args))
            return srv_fail(err, 400, param, "invalid_type", "'%s[%zu].function.arguments' must be a JSON string", param, i);
    }
    return 0;
}

static int check_messages(const json_t *msgs, const srv_limits *lim, srv_error *err)
{
    if (!msgs) return srv_fail(err, 400, "messages", "missing_messages", "'messages' is required");
    if (!json_is_array(msgs))
        return srv_fail(err, 400, "messages", "invalid_type", "'messages' must be an array, got %s", type_name(msgs));
    size_t n = json_array_size(msgs);
    if (n == 0) return srv_fail(err, 400, "messages", "invalid_value", "'messages' must not be empty");
    if (lim->max_messages > 0 && n > (size_t)lim->max_messages)
        return srv_fail(err, 400, "messages", "too_many_messages", "%zu messages exceed the limit of %d", n,
                        lim->max_messages);
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m) {
        char param[48];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m))
            return srv_fail(err, 400, param, "invalid_type", "'%s' must be an object, got %s", param, type_name(m));
        const json_t *r = json_object_get(m, "role");
        if (!json_is_string(r))
            return srv_fail(err, 400, param, "invalid_type", "'%s.role' must be a string", param);
        const char *role = json_string_value(r);
        const json_t *content = json_object_get(m, "content");
        if (strcmp(role, "assistant") == 0) {
            const json_t *tc = json_object_get(m, "tool_calls");
            bool has_calls = tc && !json_is_null(tc);
            if (has_calls && check_tool_calls(tc, i, err)) return -1;
            if (check_content(content, i, has_calls, err)) return -1;
            const json_t *rc = json_object_get(m, "reasoning_content");
            if (rc && !json_is_null(rc) && !json_is_string(rc))
                return srv_fail(err, 400, param, "invalid_type", "'%s.reasoning_content' must be a string", param);
        } else if (strcmp(role, "system") == 0 || strcmp(role, "developer") == 0 ||
                   strcmp(role, "user") == 0 || strcmp(role, "tool") == 0) {
            if (check_content(content, i, false, err)) return -1;
        } else {
            return srv_fail(err, 400, param, "invalid_value", "'%s.role' '%s' is not one of system, developer, user, assistant, tool",
                            param, role);
        }
    }
    return 0;
}

static int check_tools(json_t *root, eng_request *req, srv_error *err)
{
    const json_t *tools = json_object_get(root, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools))
            return srv_fail(err, 400, "tools", "invalid_type", "'tools' must be an array, got %s", type_name(tools));
        size_t i;
        const json_t *t;
        json_array_foreach(tools, i, t) {
            const json_t *ty = json_is_object(t) ? json_object_get(t, "type") : NULL;
            const json_t *fn = json_is_object(t) ? json_object_get(t, "function") : NULL;
            if (!json_is_string(ty) || strcmp(json_string_value(ty), "function") != 0 || !json_is_object(fn) ||
                !json_is_string(json_object_get(fn, "name")))
                return srv_fail(err, 400, "tools", "invalid_value",
                                "'tools[%zu]' must be {\"type\": \"function\", \"function\": {\"name\": ...}}", i);
            const json_t *params = json_object_get(fn, "parameters");
            if (params && !json_is_null(params) && !json_is_object(params))
                return srv_fail(err, 400, "tools", "invalid_type", "'tools[%zu].function.parameters' must be an object", i);
        }
        if (json_array_size(tools) > 0) req->tools = tools;
    }
    req->tool_choice = ENG_TOOLS_AUTO;
    const json_t *tc = json_object_get(root, "tool_choice");
    if (tc && !json_is_null(tc)) {
        if (json_is_string(tc)) {
            const char *s = json_string_value(tc);
            if (strcmp(s, "auto") == 0) req->tool_choice = ENG_TOOLS_AUTO;
            else if (strcmp(s, "none") == 0) req->tool_choice = ENG_TOOLS_NONE;
            else if (strcmp(s, "required") == 0) req->tool_choice = ENG_TOOLS_REQUIRED;
            else
                return srv_fail(err, 400, "tool_choice", "invalid_value", "'tool_choice' must be none, auto, required or a function object");
        } else if (json_is_object(tc)) {
            const json_t *fn = json_object_get(tc, "function");
            const json_t *name = json_is_object(fn) ? json_object_get(fn, "name") : NULL;
            if (!json_is_string(name))
                return srv_fail(err, 400, "tool_choice", "invalid_value", "'tool_choice.function.name' must be a string");
            req->tool_choice = ENG_TOOLS_FUNCTION;
            req->tool_choice_name = strdup(json_string_value(name));
        } else {
            return srv_fail(err, 400, "tool_choice", "invalid_type", "'tool_choice' must be a string or an object, got %s",
                            type_name(tc));
        }
        if (req->tool_choice != ENG_TOOLS_AUTO && req->tool_choice != ENG_TOOLS_NONE && !req->tools)
            return srv_fail(err, 400, "tool_choice", "invalid_value", "'tool_choice' requires 'tools'");
    }
    req->parallel_tool_calls = true;
    if (get_bool(root, "parallel_tool_calls", &req->parallel_tool_calls, err)) return -1;
    return 0;
}

static int check_template_kwargs(json_t *root, srv_error *err)
{
    const json_t *kw = json_object_get(root, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw))
            return srv_fail(err, 400, "chat_template_kwargs", "invalid_type", "'chat_template_kwargs' must be an object, got %s",
                            type_name(kw));
        const json_t *et = json_object_get(kw, "enable_thinking");
        if (et && !json_is_boolean(et))
            return srv_fail(err, 400, "chat_template_kwargs.enable_thinking", "invalid_type",
                            "'chat_template_kwargs.enable_thinking' must be a boolean, got %s", type_name(et));
    }
    const json_t *re = json_object_get(root, "reasoning_effort");
    if (re && !json_is_null(re) && !json_is_string(re))
        return srv_fail(err, 400, "reasoning_effort", "invalid_type", "'reasoning_effort' must be a string");
    return 0;
}

int srv_parse_chat(json_t *root, const srv_limits *lim, const char *model_id, eng_request *req,
                   srv_resp_opts *ro, srv_error *err)
{
    memset(req, 0, sizeof *req);
    memset(ro, 0, sizeof *ro);
    req->kind = ENG_REQ_CHAT;
    if (check_model(root, model_id, err) || check_messages(json_object_get(root, "messages"), lim, err) ||
        check_tools(root, req, err) || check_template_kwargs(root, err) ||
        parse_common(root, lim, req, ro, true, err)) {
        eng_request_clear(req);
        return -1;
    }
    req->chat_body = json_incref(root);
    return 0;
}

int srv_parse_completion(json_t *root, const srv_limits *lim, const char *model_id,
                         eng_request *req, srv_resp_opts *ro, srv_error *err)
{
    memset(req, 0, sizeof *req);
    memset(ro, 0, sizeof *ro);
    req->kind = ENG_REQ_COMPLETION;
    if (check_model(root, model_id, err)) goto fail;
    const json_t *p = json_object_get(root, "prompt");
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
        p = json_array_get(p, 0);
    if (json_is_string(p)) {
        req->prompt = strdup(json_string_value(p));
    } else if (json_is_array(p) && json_array_size(p) > 0 && json_is_integer(json_array_get(p, 0))) {
        size_t n = json_array_size(p);
        if (lim->n_ctx > 0 && n > (size_t)lim->n_ctx) {
            srv_fail(err, 400, "prompt", "context_length_exceeded", "prompt of %zu tokens exceeds the context size of %d tokens",
                     n, lim->n_ctx);
            goto fail;
        }
        req->prompt_ids = malloc(n * sizeof *req->prompt_ids);
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
    if (parse_common(root, lim, req, ro, false, err)) goto fail;
    if (get_bool(root, "echo", &ro->echo, err)) goto fail;
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
