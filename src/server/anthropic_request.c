/* Anthropic Messages requests → the validated conversation + eng_request.
 * Blocks map onto the conversation as the Qwen templates expect them:
 * text blocks are joined, tool_result blocks of a user message become tool
 * messages (in order, before the text that follows them), tool_use blocks
 * become the assistant message's tool calls (input = arguments), thinking
 * blocks its reasoning, a "system" role inside messages a system turn. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/anthropic.h"
#include "server/api.h"

static int fail_conv(srv_error *err, const wk_error *werr) { return srv_fail_chat(err, werr); }

/* Text of a string or of an array of text blocks (tool_result content,
 * system): appended to the last message. */
static int add_text_blocks(chat_conv *c, const json_t *v, const char *path, srv_error *err)
{
    wk_error werr = {0};
    if (json_is_string(v)) {
        if (chat_conv_append(c, json_string_value(v), json_string_length(v), &werr)) return fail_conv(err, &werr);
        return 0;
    }
    if (!json_is_array(v))
        return srv_fail(err, 400, path, "invalid_type", "%s: must be a string or an array of text blocks, got %s", path,
                        chat_json_type_name(v));
    size_t k;
    const json_t *b;
    json_array_foreach(v, k, b) {
        const char *type = json_string_value(json_object_get(b, "type"));
        const json_t *text = json_object_get(b, "text");
        if (!json_is_object(b) || !type)
            return srv_fail(err, 400, path, "invalid_type", "%s[%zu]: must be a block with a string 'type'", path, k);
        if (strcmp(type, "text") != 0)
            return srv_fail(err, 400, path, !strcmp(type, "image") || !strcmp(type, "document") ? "unsupported" : "invalid_value",
                            "%s[%zu]: block type '%s' is not supported here (text only)", path, k, type);
        if (!json_is_string(text)) return srv_fail(err, 400, path, "invalid_type", "%s[%zu].text: must be a string", path, k);
        if (chat_conv_append(c, json_string_value(text), json_string_length(text), &werr)) return fail_conv(err, &werr);
    }
    return 0;
}

/* The conversation's last message is of role (from this Anthropic message), or a new one is started. */
static int ensure_message(chat_conv *c, chat_role role, bool *started, srv_error *err)
{
    if (*started && c->n > 0 && c->msgs[c->n - 1].role == role) return 0;
    wk_error werr = {0};
    if (chat_conv_add(c, role, "", 0, &werr)) return fail_conv(err, &werr);
    *started = true;
    return 0;
}

static int user_blocks(chat_conv *c, const json_t *blocks, const char *path, srv_error *err)
{
    bool started = false;
    size_t k;
    const json_t *b;
    json_array_foreach(blocks, k, b) {
        char at[96];
        snprintf(at, sizeof at, "%s[%zu]", path, k);
        const char *type = json_string_value(json_object_get(b, "type"));
        if (!json_is_object(b) || !type)
            return srv_fail(err, 400, at, "invalid_type", "%s: must be a content block with a string 'type'", at);
        wk_error werr = {0};
        if (!strcmp(type, "text")) {
            const json_t *text = json_object_get(b, "text");
            if (!json_is_string(text)) return srv_fail(err, 400, at, "invalid_type", "%s.text: must be a string", at);
            if (ensure_message(c, CHAT_ROLE_USER, &started, err)) return -1;
            if (chat_conv_append(c, json_string_value(text), json_string_length(text), &werr)) return fail_conv(err, &werr);
        } else if (!strcmp(type, "tool_result")) {
            const json_t *id = json_object_get(b, "tool_use_id");
            if (!json_is_string(id)) return srv_fail(err, 400, at, "invalid_type", "%s.tool_use_id: must be a string", at);
            if (chat_conv_add(c, CHAT_ROLE_TOOL, "", 0, &werr) || chat_conv_set_tool_call_id(c, json_string_value(id), &werr))
                return fail_conv(err, &werr);
            const json_t *content = json_object_get(b, "content");
            char cpath[128];
            snprintf(cpath, sizeof cpath, "%s.content", at);
            if (content && !json_is_null(content) && add_text_blocks(c, content, cpath, err)) return -1;
            started = false; /* text after a result starts a new user message */
        } else if (!strcmp(type, "image") || !strcmp(type, "document")) {
            return srv_fail(err, 400, at, "unsupported", "%s: %s blocks are not supported (text only)", at, type);
        } else {
            return srv_fail(err, 400, at, "invalid_value", "%s: block type '%s' is not supported in a user message", at, type);
        }
    }
    return 0;
}

static int assistant_blocks(chat_conv *c, const json_t *blocks, const char *path, srv_error *err)
{
    wk_error werr = {0};
    if (chat_conv_add(c, CHAT_ROLE_ASSISTANT, "", 0, &werr)) return fail_conv(err, &werr);
    size_t k;
    const json_t *b;
    json_array_foreach(blocks, k, b) {
        char at[96];
        snprintf(at, sizeof at, "%s[%zu]", path, k);
        const char *type = json_string_value(json_object_get(b, "type"));
        if (!json_is_object(b) || !type)
            return srv_fail(err, 400, at, "invalid_type", "%s: must be a content block with a string 'type'", at);
        if (!strcmp(type, "text")) {
            const json_t *text = json_object_get(b, "text");
            if (!json_is_string(text)) return srv_fail(err, 400, at, "invalid_type", "%s.text: must be a string", at);
            if (chat_conv_append(c, json_string_value(text), json_string_length(text), &werr)) return fail_conv(err, &werr);
        } else if (!strcmp(type, "thinking")) {
            const json_t *t = json_object_get(b, "thinking");
            if (!json_is_string(t)) return srv_fail(err, 400, at, "invalid_type", "%s.thinking: must be a string", at);
            if (chat_conv_add_reasoning(c, json_string_value(t), json_string_length(t), at, &werr))
                return fail_conv(err, &werr);
        } else if (!strcmp(type, "redacted_thinking")) {
            continue; /* encrypted by another server: nothing to render */
        } else if (!strcmp(type, "tool_use")) {
            const json_t *id = json_object_get(b, "id");
            const json_t *name = json_object_get(b, "name");
            const json_t *input = json_object_get(b, "input");
            char name_path[128], args_path[128];
            snprintf(name_path, sizeof name_path, "%s.name", at);
            snprintf(args_path, sizeof args_path, "%s.input", at);
            if (id && !json_is_string(id)) return srv_fail(err, 400, at, "invalid_type", "%s.id: must be a string", at);
            if (!json_is_string(name)) return srv_fail(err, 400, name_path, "invalid_type", "%s: must be a string", name_path);
            if (input && !json_is_object(input))
                return srv_fail(err, 400, args_path, "invalid_type", "%s: must be an object", args_path);
            if (chat_conv_add_call(c, json_string_value(id), json_string_value(name), input, name_path, args_path, &werr))
                return fail_conv(err, &werr);
        } else {
            return srv_fail(err, 400, at, "invalid_value", "%s: block type '%s' is not supported in an assistant message",
                            at, type);
        }
    }
    return 0;
}

static int add_message(chat_conv *c, const json_t *m, size_t i, srv_error *err)
{
    char path[48], cpath[64];
    snprintf(path, sizeof path, "messages[%zu]", i);
    snprintf(cpath, sizeof cpath, "%s.content", path);
    if (!json_is_object(m)) return srv_fail(err, 400, path, "invalid_type", "%s: must be an object", path);
    const char *role = json_string_value(json_object_get(m, "role"));
    const json_t *content = json_object_get(m, "content");
    if (!role) return srv_fail(err, 400, path, "invalid_type", "%s.role: must be a string", path);
    if (!content || json_is_null(content))
        return srv_fail(err, 400, cpath, "invalid_request_error", "%s: is required", cpath);
    bool user = !strcmp(role, "user"), assistant = !strcmp(role, "assistant"), system = !strcmp(role, "system");
    if (!user && !assistant && !system)
        return srv_fail(err, 400, path, "invalid_value", "%s.role: '%s' is not one of user, assistant (or system)", path,
                        role);
    wk_error werr = {0};
    if (json_is_string(content)) {
        chat_role r = user ? CHAT_ROLE_USER : assistant ? CHAT_ROLE_ASSISTANT : CHAT_ROLE_SYSTEM;
        if (chat_conv_add(c, r, json_string_value(content), json_string_length(content), &werr)) return fail_conv(err, &werr);
        return 0;
    }
    if (!json_is_array(content))
        return srv_fail(err, 400, cpath, "invalid_type", "%s: must be a string or an array of content blocks, got %s", cpath,
                        chat_json_type_name(content));
    if (system) {
        if (chat_conv_add(c, CHAT_ROLE_SYSTEM, "", 0, &werr)) return fail_conv(err, &werr);
        return add_text_blocks(c, content, cpath, err);
    }
    return user ? user_blocks(c, content, cpath, err) : assistant_blocks(c, content, cpath, err);
}

static int add_tools(chat_conv *c, const json_t *tools, srv_error *err)
{
    if (!tools || json_is_null(tools)) return 0;
    if (!json_is_array(tools))
        return srv_fail(err, 400, "tools", "invalid_type", "tools: must be an array, got %s", chat_json_type_name(tools));
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        char where[32];
        snprintf(where, sizeof where, "tools[%zu]", i);
        if (!json_is_object(t)) return srv_fail(err, 400, where, "invalid_type", "%s: must be an object", where);
        const char *type = json_string_value(json_object_get(t, "type"));
        /* server tools (web_search_..., bash_..., text_editor_...) run on
         * Anthropic's side: accepted, not offered to the model */
        if (type && strcmp(type, "custom") != 0) continue;
        const json_t *name = json_object_get(t, "name");
        const json_t *schema = json_object_get(t, "input_schema");
        if (!json_is_string(name)) return srv_fail(err, 400, where, "invalid_type", "%s.name: must be a string", where);
        if (!json_is_object(schema))
            return srv_fail(err, 400, where, "invalid_type", "%s.input_schema: must be a JSON Schema object", where);
        wk_error werr = {0};
        if (chat_conv_add_tool(c, json_string_value(name), json_object_get(t, "description"), schema, where, &werr))
            return fail_conv(err, &werr);
    }
    return 0;
}

/* thinking: {"type": "enabled" | "adaptive" | "disabled"}. */
static int read_thinking(chat_conv *c, const json_t *root, srv_error *err)
{
    const json_t *th = json_object_get(root, "thinking");
    if (!th || json_is_null(th)) return 0;
    const char *type = json_string_value(json_object_get(th, "type"));
    if (!json_is_object(th) || !type)
        return srv_fail(err, 400, "thinking", "invalid_type", "thinking: must be an object with a string 'type'");
    if (!strcmp(type, "disabled")) c->enable_thinking = 0;
    else if (!strcmp(type, "enabled")) c->enable_thinking = 1;
    else if (strcmp(type, "adaptive") != 0)
        return srv_fail(err, 400, "thinking", "invalid_value", "thinking.type: '%s' is not one of enabled, adaptive, disabled",
                        type);
    return 0;
}

int srv_anthropic_conv(const json_t *root, const srv_model_names *models, chat_conv *conv, srv_error *err)
{
    chat_conv_init(conv);
    if (srv_check_model(root, models, err)) return -1;
    wk_error werr = {0};
    const json_t *system = json_object_get(root, "system");
    int rc = 0;
    if (system && !json_is_null(system)) {
        if (chat_conv_add(conv, CHAT_ROLE_SYSTEM, "", 0, &werr)) rc = fail_conv(err, &werr);
        else rc = add_text_blocks(conv, system, "system", err);
    }
    const json_t *msgs = json_object_get(root, "messages");
    if (!rc && !json_is_array(msgs))
        rc = srv_fail(err, 400, "messages", "invalid_type", "messages: %s", msgs ? "must be an array" : "Field required");
    for (size_t i = 0; !rc && i < json_array_size(msgs); i++) rc = add_message(conv, json_array_get(msgs, i), i, err);
    if (!rc) rc = add_tools(conv, json_object_get(root, "tools"), err);
    const json_t *tc = json_object_get(root, "tool_choice");
    const char *tc_type = json_string_value(json_object_get(tc, "type"));
    if (!rc && tc_type && !strcmp(tc_type, "none")) {
        json_decref(conv->tools);
        conv->tools = NULL;
    }
    if (!rc) rc = read_thinking(conv, root, err);
    if (!rc && chat_conv_finish(conv, "messages", &werr)) rc = fail_conv(err, &werr);
    if (rc) chat_conv_free(conv);
    return rc;
}

/* tool_choice: {"type": "auto" | "any" | "tool" (+ "name") | "none", "disable_parallel_tool_use"}. */
static int read_tool_choice(const json_t *root, eng_request *req, srv_error *err)
{
    req->tool_choice = ENG_TOOLS_AUTO;
    req->parallel_tool_calls = true;
    const json_t *tc = json_object_get(root, "tool_choice");
    if (!tc || json_is_null(tc)) return 0;
    const char *type = json_string_value(json_object_get(tc, "type"));
    if (!json_is_object(tc) || !type)
        return srv_fail(err, 400, "tool_choice", "invalid_type", "tool_choice: must be an object with a string 'type'");
    bool no_parallel = false;
    if (srv_get_bool(tc, "disable_parallel_tool_use", &no_parallel, err)) return -1;
    req->parallel_tool_calls = !no_parallel;
    if (!strcmp(type, "auto")) return 0;
    if (!strcmp(type, "none")) {
        req->tool_choice = ENG_TOOLS_NONE;
        return 0;
    }
    if (!req->tools) return srv_fail(err, 400, "tool_choice", "invalid_value", "tool_choice '%s' needs tools", type);
    if (!strcmp(type, "any")) {
        req->tool_choice = ENG_TOOLS_REQUIRED;
    } else if (!strcmp(type, "tool")) {
        const char *name = json_string_value(json_object_get(tc, "name"));
        if (!name) return srv_fail(err, 400, "tool_choice", "invalid_type", "tool_choice.name: must be a string");
        if (srv_set_forced_tool(req, name, "tool_choice.name", err)) return -1;
    } else {
        return srv_fail(err, 400, "tool_choice", "invalid_value", "tool_choice.type: '%s' is not one of auto, any, tool, none",
                        type);
    }
    return srv_check_forced_tool_schemas(req, err);
}

/* Structured output: output_format / output_config.format {"type": "json_schema", "schema"}. */
static int read_output_format(const json_t *root, eng_request *req, srv_error *err)
{
    const char *where = "output_format";
    const json_t *f = json_object_get(root, "output_format");
    if (!f || json_is_null(f)) {
        f = json_object_get(json_object_get(root, "output_config"), "format");
        where = "output_config.format";
    }
    if (!f || json_is_null(f)) return 0;
    const char *type = json_string_value(json_object_get(f, "type"));
    if (!type || strcmp(type, "json_schema") != 0)
        return srv_fail(err, 400, where, "invalid_value", "%s.type: must be \"json_schema\"", where);
    return srv_parse_json_schema_format(f, where, req, err);
}

int srv_anthropic_parse(json_t *root, const srv_limits *lim, const srv_model_names *models, eng_request *req,
                          srv_exchange *x, srv_error *err)
{
    memset(req, 0, sizeof *req);
    req->kind = ENG_REQ_CHAT;
    const json_t *msgs = json_object_get(root, "messages");
    if (lim->max_messages > 0 && json_array_size(msgs) > (size_t)lim->max_messages)
        return srv_fail(err, 400, "messages", "too_many_messages", "%zu messages exceed the limit of %d",
                        json_array_size(msgs), lim->max_messages);
    chat_conv conv;
    if (srv_anthropic_conv(root, models, &conv, err)) return -1;
    eng_sampling *s = &req->sampling;
    eng_sampling_default(s);
    long long v;
    bool has;
    if (srv_take_conv(req, &conv, err) || read_tool_choice(root, req, err) || read_output_format(root, req, err) ||
        srv_get_number(root, "temperature", 0.0, 1.0, &s->temperature, err) ||
        srv_get_number(root, "top_p", 0.0, 1.0, &s->top_p, err) || srv_get_int(root, "top_k", 0, 1 << 20, &v, &has, err))
        goto fail;
    if (has) s->top_k = (int)v;
    /* a limit beyond the room left is clamped by the engine (stop_reason max_tokens) */
    req->max_tokens = -1;
    if (srv_get_int(root, "max_tokens", 1, INT32_MAX, &v, &has, err)) goto fail;
    if (has) req->max_tokens = (int)v;
    if (srv_parse_stop(json_object_get(root, "stop_sequences"), "stop_sequences", req, err)) goto fail;
    x->ro.stream = false;
    if (srv_get_bool(root, "stream", &x->ro.stream, err) || srv_parse_wick(root, req, err)) goto fail;
    req->stream = x->ro.stream;
    return 0;
fail:
    eng_request_clear(req);
    return -1;
}

