/* Responses API requests → the validated conversation + eng_request. Items
 * map onto the conversation in order: a function_call joins the assistant
 * message just before it (or starts one), a function_call_output is a tool
 * message, a reasoning item's text becomes the reasoning of the assistant
 * message that follows it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/responses.h"

typedef struct items_state {
    chat_conv *c;
    bool assistant_open;  /* the last message is an assistant turn that calls may join */
    char *reasoning;      /* a reasoning item waiting for its assistant message (owned) */
    size_t reasoning_len;
    json_t *namespaces;   /* flat name -> namespace */
} items_state;

static int fail_conv(srv_error *err, const wk_error *werr) { return srv_fail_chat(err, werr); }

/* Appends the text of a content value: a string, or parts input_text /
 * output_text / text (refusal text too). */
static int add_parts(chat_conv *c, const json_t *content, const char *path, srv_error *err)
{
    wk_error werr = {0};
    if (json_is_string(content))
        return chat_conv_append(c, json_string_value(content), json_string_length(content), &werr) ? fail_conv(err, &werr) : 0;
    if (!json_is_array(content))
        return srv_fail(err, 400, path, "invalid_type", "%s: must be a string or an array of content parts, got %s", path,
                        chat_json_type_name(content));
    size_t k;
    const json_t *p;
    json_array_foreach(content, k, p) {
        const char *type = json_string_value(json_object_get(p, "type"));
        if (!json_is_object(p) || !type)
            return srv_fail(err, 400, path, "invalid_type", "%s[%zu]: must be a content part with a string 'type'", path, k);
        const char *key = !strcmp(type, "refusal") ? "refusal" : "text";
        if (strcmp(type, "input_text") && strcmp(type, "output_text") && strcmp(type, "text") && strcmp(type, "refusal"))
            return srv_fail(err, 400, path, !strncmp(type, "input_", 6) ? "unsupported" : "invalid_value",
                            "%s[%zu]: content part type '%s' is not supported (text only)", path, k, type);
        const json_t *text = json_object_get(p, key);
        if (!json_is_string(text)) return srv_fail(err, 400, path, "invalid_type", "%s[%zu].%s: must be a string", path, k, key);
        if (chat_conv_append(c, json_string_value(text), json_string_length(text), &werr)) return fail_conv(err, &werr);
    }
    return 0;
}

/* A new assistant message, taking the waiting reasoning. */
static int start_assistant(items_state *st, const char *path, srv_error *err)
{
    wk_error werr = {0};
    if (chat_conv_add(st->c, CHAT_ROLE_ASSISTANT, "", 0, &werr)) return fail_conv(err, &werr);
    if (st->reasoning) {
        int rc = chat_conv_add_reasoning(st->c, st->reasoning, st->reasoning_len, path, &werr);
        free(st->reasoning);
        st->reasoning = NULL;
        if (rc) return fail_conv(err, &werr);
    }
    st->assistant_open = true;
    return 0;
}

static int message_item(items_state *st, const json_t *it, const char *path, srv_error *err)
{
    const char *role = json_string_value(json_object_get(it, "role"));
    if (!role) return srv_fail(err, 400, path, "invalid_type", "%s.role: must be a string", path);
    char cpath[96];
    snprintf(cpath, sizeof cpath, "%s.content", path);
    const json_t *content = json_object_get(it, "content");
    if (!content || json_is_null(content)) return srv_fail(err, 400, cpath, "invalid_value", "%s: is required", cpath);
    wk_error werr = {0};
    if (!strcmp(role, "assistant")) {
        if (start_assistant(st, path, err)) return -1;
        return add_parts(st->c, content, cpath, err);
    }
    chat_role r;
    if (!strcmp(role, "user")) r = CHAT_ROLE_USER;
    else if (!strcmp(role, "system") || !strcmp(role, "developer")) r = CHAT_ROLE_SYSTEM;
    else return srv_fail(err, 400, path, "invalid_value", "%s.role: '%s' is not one of user, assistant, system, developer", path, role);
    if (chat_conv_add(st->c, r, "", 0, &werr)) return fail_conv(err, &werr);
    st->assistant_open = false;
    return add_parts(st->c, content, cpath, err);
}

/* The model-facing name of a tool in a namespace. */
static void flat_name(char *out, size_t cap, const char *ns, const char *name)
{
    snprintf(out, cap, "%s%s%s", ns, SRV_NAMESPACE_SEP, name);
}

static int call_item(items_state *st, const json_t *it, const char *path, srv_error *err)
{
    const char *name = json_string_value(json_object_get(it, "name"));
    const char *call_id = json_string_value(json_object_get(it, "call_id"));
    const char *ns = json_string_value(json_object_get(it, "namespace"));
    char name_path[96], args_path[96];
    snprintf(name_path, sizeof name_path, "%s.name", path);
    snprintf(args_path, sizeof args_path, "%s.arguments", path);
    if (!name) return srv_fail(err, 400, name_path, "invalid_type", "%s: must be a string", name_path);
    if (!st->assistant_open && start_assistant(st, path, err)) return -1;
    char flat[320];
    if (ns) flat_name(flat, sizeof flat, ns, name);
    wk_error werr = {0};
    if (chat_conv_add_call(st->c, call_id, ns ? flat : name, json_object_get(it, "arguments"), name_path, args_path, &werr))
        return fail_conv(err, &werr);
    return 0;
}

static int output_item(items_state *st, const json_t *it, const char *path, srv_error *err)
{
    const char *call_id = json_string_value(json_object_get(it, "call_id"));
    if (!call_id) return srv_fail(err, 400, path, "invalid_type", "%s.call_id: must be a string", path);
    wk_error werr = {0};
    if (chat_conv_add(st->c, CHAT_ROLE_TOOL, "", 0, &werr) || chat_conv_set_tool_call_id(st->c, call_id, &werr))
        return fail_conv(err, &werr);
    st->assistant_open = false;
    char opath[96];
    snprintf(opath, sizeof opath, "%s.output", path);
    const json_t *out = json_object_get(it, "output");
    if (!out) return srv_fail(err, 400, opath, "invalid_value", "%s: is required", opath);
    return add_parts(st->c, out, opath, err);
}

/* reasoning: its text (content reasoning_text, else the summary) waits for the next assistant message. */
static int reasoning_item(items_state *st, const json_t *it, srv_error *err)
{
    const json_t *parts = json_object_get(it, "content");
    if (!json_array_size(parts)) parts = json_object_get(it, "summary");
    size_t k;
    const json_t *p;
    json_array_foreach(parts, k, p) {
        const json_t *text = json_object_get(p, "text");
        if (!json_is_string(text)) continue;
        size_t n = json_string_length(text);
        const char *sep = st->reasoning_len ? "\n\n" : "";
        char *r = realloc(st->reasoning, st->reasoning_len + strlen(sep) + n + 1);
        if (!r) return srv_fail_oom(err);
        memcpy(r + st->reasoning_len, sep, strlen(sep));
        memcpy(r + st->reasoning_len + strlen(sep), json_string_value(text), n);
        st->reasoning_len += strlen(sep) + n;
        r[st->reasoning_len] = '\0';
        st->reasoning = r;
    }
    return 0;
}

static int add_items(items_state *st, const json_t *input, srv_error *err)
{
    wk_error werr = {0};
    if (json_is_string(input)) {
        if (chat_conv_add(st->c, CHAT_ROLE_USER, json_string_value(input), json_string_length(input), &werr))
            return fail_conv(err, &werr);
        return 0;
    }
    if (!json_is_array(input))
        return srv_fail(err, 400, "input", "invalid_type", "input: must be a string or an array of items, got %s",
                        chat_json_type_name(input));
    size_t i;
    const json_t *it;
    json_array_foreach(input, i, it) {
        char path[48];
        snprintf(path, sizeof path, "input[%zu]", i);
        if (!json_is_object(it)) return srv_fail(err, 400, path, "invalid_type", "%s: must be an object", path);
        const char *type = json_string_value(json_object_get(it, "type"));
        int rc;
        if (!type || !strcmp(type, "message")) rc = message_item(st, it, path, err);
        else if (!strcmp(type, "function_call")) rc = call_item(st, it, path, err);
        else if (!strcmp(type, "function_call_output")) rc = output_item(st, it, path, err);
        else if (!strcmp(type, "reasoning")) rc = reasoning_item(st, it, err);
        else if (!strcmp(type, "web_search_call")) rc = 0; /* a server tool's trace: nothing for the model */
        else if (!strcmp(type, "item_reference"))
            rc = srv_fail(err, 400, path, "unsupported", "%s: item_reference needs stored responses; wick stores none, "
                          "send the items themselves", path);
        else rc = srv_fail(err, 400, path, "invalid_value", "%s.type: item type '%s' is not supported", path, type);
        if (rc) return rc;
    }
    return 0;
}

static int add_function_tool(items_state *st, const json_t *t, const char *ns, const char *where, srv_error *err)
{
    const char *name = json_string_value(json_object_get(t, "name"));
    if (!name) return srv_fail(err, 400, where, "invalid_type", "%s.name: must be a string", where);
    char flat[320];
    if (ns) {
        flat_name(flat, sizeof flat, ns, name);
        if (!st->namespaces && !(st->namespaces = json_object())) return srv_fail_oom(err);
        if (json_object_set_new(st->namespaces, flat, json_string(ns))) return srv_fail_oom(err);
    }
    wk_error werr = {0};
    if (chat_conv_add_tool(st->c, ns ? flat : name, json_object_get(t, "description"), json_object_get(t, "parameters"),
                           where, &werr))
        return fail_conv(err, &werr);
    return 0;
}

static int add_tools(items_state *st, const json_t *tools, srv_error *err)
{
    if (!tools || json_is_null(tools)) return 0;
    if (!json_is_array(tools))
        return srv_fail(err, 400, "tools", "invalid_type", "tools: must be an array, got %s", chat_json_type_name(tools));
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        char where[48];
        snprintf(where, sizeof where, "tools[%zu]", i);
        const char *type = json_string_value(json_object_get(t, "type"));
        if (!json_is_object(t) || !type)
            return srv_fail(err, 400, where, "invalid_type", "%s: must be an object with a string 'type'", where);
        if (!strcmp(type, "function")) {
            if (add_function_tool(st, t, NULL, where, err)) return -1;
        } else if (!strcmp(type, "namespace")) {
            const char *ns = json_string_value(json_object_get(t, "name"));
            const json_t *inner = json_object_get(t, "tools");
            if (!ns || !json_is_array(inner))
                return srv_fail(err, 400, where, "invalid_type", "%s: a namespace needs a string 'name' and a 'tools' array", where);
            size_t k;
            const json_t *f;
            json_array_foreach(inner, k, f) {
                char w2[80];
                snprintf(w2, sizeof w2, "%s.tools[%zu]", where, k);
                const char *ft = json_string_value(json_object_get(f, "type"));
                if (ft && strcmp(ft, "function")) continue; /* custom tools: not offered */
                if (add_function_tool(st, f, ns, w2, err)) return -1;
            }
        }
        /* web_search, file_search, computer_use, code_interpreter, custom ...:
         * tools wick cannot run or constrain are accepted and not offered */
    }
    return 0;
}

/* text.format: text, json_object, json_schema {name, schema, strict}. */
static int read_text_format(const json_t *root, eng_request *req, srv_error *err)
{
    const json_t *fmt = json_object_get(json_object_get(root, "text"), "format");
    if (!fmt || json_is_null(fmt)) return 0;
    const char *type = json_string_value(json_object_get(fmt, "type"));
    if (!type) return srv_fail(err, 400, "text.format", "invalid_type", "text.format: must be an object with a string 'type'");
    if (!strcmp(type, "text")) return 0;
    if (!strcmp(type, "json_object")) {
        req->response_format = ENG_FORMAT_JSON_OBJECT;
        return 0;
    }
    if (!strcmp(type, "json_schema")) return srv_parse_json_schema_format(fmt, "text.format", req, err);
    return srv_fail(err, 400, "text.format", "invalid_value", "text.format.type: '%s' is not one of text, json_object, json_schema", type);
}

/* What the response object repeats of the request. */
static json_t *echo_fields(const json_t *root, const eng_request *req)
{
    json_t *e = json_object();
    if (!e) return NULL;
    const json_t *instr = json_object_get(root, "instructions");
    json_object_set_new(e, "instructions", json_is_string(instr) ? json_deep_copy(instr) : json_null());
    json_object_set_new(e, "max_output_tokens", req->max_tokens > 0 ? json_integer(req->max_tokens) : json_null());
    json_object_set_new(e, "parallel_tool_calls", json_boolean(req->parallel_tool_calls));
    json_object_set_new(e, "store", json_false());
    /* the float setting printed as the decimal it came from */
    json_object_set_new(e, "temperature", json_real((double)llroundf(req->sampling.temperature * 1000.0f) / 1000.0));
    json_object_set_new(e, "top_p", json_real((double)llroundf(req->sampling.top_p * 1000.0f) / 1000.0));
    const json_t *tc = json_object_get(root, "tool_choice");
    json_object_set_new(e, "tool_choice", tc ? json_deep_copy(tc) : json_string("auto"));
    const json_t *tools = json_object_get(root, "tools");
    json_object_set_new(e, "tools", json_is_array(tools) ? json_deep_copy(tools) : json_array());
    const json_t *text = json_object_get(root, "text");
    json_object_set_new(e, "text", json_is_object(text) ? json_deep_copy(text) : json_pack("{s:{s:s}}", "format", "type", "text"));
    return e;
}

int srv_responses_parse(json_t *root, const srv_limits *lim, const srv_model_names *models, eng_request *req,
                        srv_exchange *x, srv_error *err)
{
    memset(req, 0, sizeof *req);
    req->kind = ENG_REQ_CHAT;
    chat_conv conv;
    chat_conv_init(&conv);
    items_state st = {.c = &conv};
    wk_error werr = {0};
    const json_t *input = json_object_get(root, "input");
    const json_t *prev = json_object_get(root, "previous_response_id");
    const char *instr = NULL;
    if (srv_check_model(root, models, err)) goto fail;
    if (prev && !json_is_null(prev)) {
        srv_fail(err, 400, "previous_response_id", "unsupported",
                 "previous_response_id: wick stores no responses (store is always false); send the whole conversation in "
                 "'input'");
        goto fail;
    }
    const json_t *bg = json_object_get(root, "background");
    if (json_is_true(bg)) {
        srv_fail(err, 400, "background", "unsupported", "background: responses run in the foreground only");
        goto fail;
    }
    if (lim->max_messages > 0 && json_array_size(input) > (size_t)lim->max_messages) {
        srv_fail(err, 400, "input", "too_many_messages", "%zu input items exceed the limit of %d", json_array_size(input),
                 lim->max_messages);
        goto fail;
    }
    if (srv_get_string(root, "instructions", &instr, err)) goto fail;
    if (instr && chat_conv_add(&conv, CHAT_ROLE_SYSTEM, instr, strlen(instr), &werr)) {
        fail_conv(err, &werr);
        goto fail;
    }
    if (!input) {
        srv_fail(err, 400, "input", "invalid_value", "input: is required");
        goto fail;
    }
    if (add_items(&st, input, err) || add_tools(&st, json_object_get(root, "tools"), err)) goto fail;
    const json_t *tc = json_object_get(root, "tool_choice");
    if (json_is_string(tc) && !strcmp(json_string_value(tc), "none")) {
        json_decref(conv.tools);
        conv.tools = NULL;
    }
    const char *effort = json_string_value(json_object_get(json_object_get(root, "reasoning"), "effort"));
    if (effort && !strcmp(effort, "none")) conv.enable_thinking = 0;
    if (chat_conv_finish(&conv, "input", &werr)) {
        fail_conv(err, &werr);
        goto fail;
    }
    free(st.reasoning);
    st.reasoning = NULL;
    if (srv_take_conv(req, &conv, err)) goto fail_req;
    chat_conv_init(&conv);
    eng_sampling *s = &req->sampling;
    eng_sampling_default(s);
    long long v;
    bool has;
    if (srv_parse_tool_choice(root, req, err) || read_text_format(root, req, err) ||
        srv_get_number(root, "temperature", 0.0, 2.0, &s->temperature, err) ||
        srv_get_number(root, "top_p", 0.0, 1.0, &s->top_p, err) ||
        srv_get_int(root, "max_output_tokens", 1, INT32_MAX, &v, &has, err))
        goto fail_req;
    /* clamped by the engine to the room left (status "incomplete") */
    req->max_tokens = has ? (int)v : -1;
    x->ro.stream = false;
    if (srv_get_bool(root, "stream", &x->ro.stream, err) || srv_parse_wick(root, req, err)) goto fail_req;
    req->stream = x->ro.stream;
    x->namespaces = st.namespaces;
    x->echo = echo_fields(root, req);
    if (!x->echo) {
        srv_fail_oom(err);
        goto fail_req;
    }
    return 0;
fail:
    chat_conv_free(&conv);
fail_req:
    free(st.reasoning);
    if (st.namespaces != x->namespaces) json_decref(st.namespaces);
    eng_request_clear(req);
    return -1;
}
