#include "server/request_fields.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_conv.h"
#include "engine/context.h"
#include "server/json_schema_check.h"

int srv_fail_oom(srv_error *err) { return srv_fail(err, 500, NULL, "out_of_memory", "out of memory while reading the request"); }

int srv_get_number(const json_t *obj, const char *key, double lo, double hi, float *out, srv_error *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v))
        return srv_fail(err, 400, key, "invalid_type", "'%s' must be a number, got %s", key, chat_json_type_name(v));
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi)
        return srv_fail(err, 400, key, "invalid_value", "'%s' must be between %g and %g, got %g", key, lo, hi, d);
    *out = (float)d;
    return 0;
}

int srv_get_int(const json_t *obj, const char *key, long long lo, long long hi, long long *out, bool *present,
                srv_error *err)
{
    const json_t *v = json_object_get(obj, key);
    if (present) *present = false;
    if (!v || json_is_null(v)) return 0;
    long long x;
    if (json_is_integer(v)) x = json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 9e15)
        x = (long long)json_real_value(v);
    else
        return srv_fail(err, 400, key, "invalid_type", "'%s' must be an integer, got %s", key, chat_json_type_name(v));
    if (x < lo || x > hi)
        return srv_fail(err, 400, key, "invalid_value", "'%s' must be between %lld and %lld, got %lld", key, lo, hi, x);
    *out = x;
    if (present) *present = true;
    return 0;
}

int srv_get_bool(const json_t *obj, const char *key, bool *out, srv_error *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v))
        return srv_fail(err, 400, key, "invalid_type", "'%s' must be a boolean, got %s", key, chat_json_type_name(v));
    *out = json_is_true(v);
    return 0;
}

int srv_get_string(const json_t *obj, const char *key, const char **out, srv_error *err)
{
    const json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v))
        return srv_fail(err, 400, key, "invalid_type", "'%s' must be a string, got %s", key, chat_json_type_name(v));
    *out = json_string_value(v);
    return 0;
}

int srv_check_model(const json_t *root, const srv_model_names *names, srv_error *err)
{
    const char *m;
    if (srv_get_string(root, "model", &m, err)) return -1;
    if (!m || !names || !names->strict || !names->id) return 0;
    if (!strcmp(m, names->id)) return 0;
    for (int i = 0; i < names->n_aliases; i++)
        if (names->aliases[i] && !strcmp(m, names->aliases[i])) return 0;
    return srv_fail(err, 404, "model", "model_not_found",
                    "The model '%s' does not exist; this server serves '%s' (--strict-model-id)", m, names->id);
}

static int add_stop(eng_request *req, const json_t *s, srv_error *err)
{
    if (json_string_length(s) == 0) return 0;
    char *copy = strdup(json_string_value(s));
    if (!copy) return srv_fail_oom(err);
    req->stop[req->n_stop++] = copy;
    return 0;
}

int srv_parse_stop(const json_t *v, const char *key, eng_request *req, srv_error *err)
{
    if (!v || json_is_null(v)) return 0;
    if (json_is_string(v)) return add_stop(req, v, err);
    if (!json_is_array(v))
        return srv_fail(err, 400, key, "invalid_type", "'%s' must be a string or an array of strings, got %s", key,
                        chat_json_type_name(v));
    if (json_array_size(v) > (size_t)(ENG_MAX_STOP - req->n_stop))
        return srv_fail(err, 400, key, "invalid_value", "at most %d stop sequences", ENG_MAX_STOP);
    size_t i;
    const json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_string(e))
            return srv_fail(err, 400, key, "invalid_type", "'%s[%zu]' must be a string, got %s", key, i, chat_json_type_name(e));
        if (add_stop(req, e, err)) return -1;
    }
    return 0;
}

int srv_parse_wick(const json_t *root, eng_request *req, srv_error *err)
{
    /* {"wick": {"fresh": true}}, and the attention policy {"wick":
     * {"attn_policy": "approx", "global": N, "window": N, "dense_tail": N,
     * "dense_tail_continue": N}} (the --attn-* flags without the prefix;
     * numbers not given take the design defaults, numbers without
     * attn_policy mean approx). */
    const json_t *wick = json_object_get(root, "wick");
    if (wick && !json_is_null(wick)) {
        if (!json_is_object(wick))
            return srv_fail(err, 400, "wick", "invalid_type", "'wick' must be an object, got %s", chat_json_type_name(wick));
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
        if (srv_get_bool(wick, "fresh", &req->fresh, err)) {
            snprintf(err->param, sizeof err->param, "wick.fresh");
            return -1;
        }
        /* {"wick": {"spec": "ngram"}}: this request's speculative draft source */
        const json_t *spec = json_object_get(wick, "spec");
        wk_error serr = {0};
        if (spec && !json_is_null(spec) &&
            (!json_is_string(spec) || eng_spec_mode_parse(json_string_value(spec), &req->spec, &serr)))
            return srv_fail(err, 400, "wick.spec", "invalid_value", "'wick.spec' must be one of %s", ENG_SPEC_MODE_NAMES);
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
            if (srv_get_int(wick, nums[i].key, nums[i].lo, 1 << 30, &x, &has, err)) {
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
    /* llama-server's cache_prompt: false means the same as fresh. */
    bool cache_prompt = true;
    if (srv_get_bool(root, "cache_prompt", &cache_prompt, err)) return -1;
    if (!cache_prompt) req->fresh = true;
    return 0;
}

int srv_fail_chat(srv_error *err, const wk_error *werr)
{
    if (werr->code == WK_ENOMEM) return srv_fail_oom(err);
    /* The conversation's messages start with the field: "messages[3].content: ..." */
    char param[64] = "";
    const char *colon = strstr(werr->msg, ": ");
    size_t n = colon ? (size_t)(colon - werr->msg) : 0;
    if (n > 0 && n < sizeof param && !memchr(werr->msg, ' ', n)) {
        memcpy(param, werr->msg, n);
        param[n] = '\0';
    }
    return srv_fail(err, 400, param[0] ? param : NULL, werr->code == WK_EUNSUPPORTED ? "unsupported" : "invalid_value",
                    "%s", werr->msg);
}

int srv_set_forced_tool(eng_request *req, const char *name, const char *param, srv_error *err)
{
    size_t i;
    const json_t *t;
    bool offered = false;
    json_array_foreach(req->tools, i, t) {
        const char *n = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        offered = offered || (n && !strcmp(n, name));
    }
    if (!offered)
        return srv_fail(err, 400, param, "invalid_value", "'%s' names the tool '%s', which is not among the tools given",
                        param, name);
    free(req->tool_choice_name);
    req->tool_choice_name = strdup(name);
    if (!req->tool_choice_name) return srv_fail_oom(err);
    req->tool_choice = ENG_TOOLS_FUNCTION;
    return 0;
}

int srv_parse_json_schema_format(const json_t *js, const char *where, eng_request *req, srv_error *err)
{
    char field[96];
    snprintf(field, sizeof field, "%s.schema", where);
    const json_t *schema = json_object_get(js, "schema");
    const json_t *name = json_object_get(js, "name");
    if (!json_is_object(js)) return srv_fail(err, 400, where, "invalid_type", "'%s' must be an object", where);
    if (name && !json_is_null(name) && !json_is_string(name))
        return srv_fail(err, 400, where, "invalid_type", "'%s.name' must be a string", where);
    if (!json_is_object(schema))
        return srv_fail(err, 400, field, "invalid_schema", "'%s' must be a JSON Schema object", field);
    if (srv_check_json_schema(schema, field, err)) return -1;
    bool strict = false;
    if (srv_get_bool(js, "strict", &strict, err)) {
        snprintf(err->param, sizeof err->param, "%s.strict", where);
        return -1;
    }
    req->response_format = ENG_FORMAT_JSON_SCHEMA;
    req->json_schema = json_deep_copy(schema);
    req->json_schema_strict = strict;
    if (json_is_string(name) && !(req->json_schema_name = strdup(json_string_value(name)))) return srv_fail_oom(err);
    return req->json_schema ? 0 : srv_fail_oom(err);
}

int srv_check_forced_tool_schemas(const eng_request *req, srv_error *err)
{
    if (req->tool_choice != ENG_TOOLS_REQUIRED && req->tool_choice != ENG_TOOLS_FUNCTION) return 0;
    size_t i;
    const json_t *t;
    json_array_foreach(req->tools, i, t) {
        const json_t *fn = json_object_get(t, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (req->tool_choice == ENG_TOOLS_FUNCTION && strcmp(name, req->tool_choice_name)) continue;
        const json_t *params = json_object_get(fn, "parameters");
        if (!params) continue;
        char where[64];
        snprintf(where, sizeof where, "tools[%zu].parameters", i);
        if (srv_check_json_schema(params, where, err)) return -1;
    }
    return 0;
}

int srv_take_conv(eng_request *req, chat_conv *conv, srv_error *err)
{
    req->chat = malloc(sizeof *req->chat);
    if (!req->chat) {
        chat_conv_free(conv);
        return srv_fail_oom(err);
    }
    *req->chat = *conv;
    req->tools = req->chat->tools;
    return 0;
}


int srv_parse_tool_choice(const json_t *root, eng_request *req, srv_error *err)
{
    req->tool_choice = ENG_TOOLS_AUTO;
    req->parallel_tool_calls = true;
    if (srv_get_bool(root, "parallel_tool_calls", &req->parallel_tool_calls, err)) return -1;
    const json_t *tc = json_object_get(root, "tool_choice");
    if (!tc || json_is_null(tc)) return 0;
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (!strcmp(s, "auto")) req->tool_choice = ENG_TOOLS_AUTO;
        else if (!strcmp(s, "none")) req->tool_choice = ENG_TOOLS_NONE;
        else if (!strcmp(s, "required")) req->tool_choice = ENG_TOOLS_REQUIRED;
        else
            return srv_fail(err, 400, "tool_choice", "invalid_value",
                            "'tool_choice' must be none, auto, required or {\"type\": \"function\", ...}");
        if (req->tool_choice == ENG_TOOLS_REQUIRED && !req->tools)
            return srv_fail(err, 400, "tool_choice", "invalid_value", "'tool_choice' \"required\" needs function tools");
        return srv_check_forced_tool_schemas(req, err);
    }
    if (!json_is_object(tc))
        return srv_fail(err, 400, "tool_choice", "invalid_type", "'tool_choice' must be a string or an object, got %s",
                        chat_json_type_name(tc));
    /* chat: {"type": "function", "function": {"name"}}; Responses: {"type": "function", "name"} */
    const json_t *fn = json_object_get(tc, "function");
    const json_t *name = json_is_object(fn) ? json_object_get(fn, "name") : json_object_get(tc, "name");
    const char *param = json_is_object(fn) ? "tool_choice.function.name" : "tool_choice.name";
    const json_t *type = json_object_get(tc, "type");
    if ((type && !(json_is_string(type) && !strcmp(json_string_value(type), "function"))) || !json_is_string(name))
        return srv_fail(err, 400, param, "invalid_value", "'tool_choice' must name a function: '%s' must be a string", param);
    if (!req->tools)
        return srv_fail(err, 400, "tool_choice", "invalid_value", "'tool_choice' names a function but no function tools are given");
    if (srv_set_forced_tool(req, json_string_value(name), param, err)) return -1;
    return srv_check_forced_tool_schemas(req, err);
}
