/* The validated conversation: builder functions that keep its invariants
 * (chat_conv.h) and the reader of OpenAI chat-completions requests. */
#include "chat/chat_conv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_internal.h"

void chat_conv_init(chat_conv *c)
{
    memset(c, 0, sizeof *c);
    c->add_generation_prompt = true;
    c->enable_thinking = -1;
}

static void message_free(chat_message *m)
{
    free(m->content);
    free(m->reasoning);
    for (size_t k = 0; k < m->n_calls; k++) {
        free(m->calls[k].id);
        free(m->calls[k].name);
        free(m->calls[k].args_text);
        json_decref(m->calls[k].args);
    }
    free(m->calls);
    free(m->tool_call_id);
}

void chat_conv_free(chat_conv *c)
{
    if (!c) return;
    for (size_t i = 0; i < c->n; i++) message_free(&c->msgs[i]);
    free(c->msgs);
    json_decref(c->tools);
    chat_conv_init(c);
}

static int oom(wk_error *err) { return wk_fail(err, WK_ENOMEM, "chat: out of memory"); }

/* Appends text to a NUL-terminated owned string. */
static int str_append(char **s, size_t *len, const char *text, size_t n)
{
    char *p = realloc(*s, *len + n + 1);
    if (!p) return -1;
    if (n) memcpy(p + *len, text, n);
    *len += n;
    p[*len] = '\0';
    *s = p;
    return 0;
}

int chat_conv_add(chat_conv *c, chat_role role, const char *text, size_t len, wk_error *err)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 8;
        chat_message *m = realloc(c->msgs, cap * sizeof *m);
        if (!m) return oom(err);
        c->msgs = m;
        c->cap = cap;
    }
    chat_message *m = &c->msgs[c->n];
    memset(m, 0, sizeof *m);
    m->role = role;
    if (str_append(&m->content, &m->content_len, text ? text : "", text ? len : 0)) return oom(err);
    c->n++;
    return 0;
}

int chat_conv_append(chat_conv *c, const char *text, size_t len, wk_error *err)
{
    if (c->n == 0) return wk_fail(err, WK_EINVAL, "chat: no message to append to");
    chat_message *m = &c->msgs[c->n - 1];
    return str_append(&m->content, &m->content_len, text, len) ? oom(err) : 0;
}

int chat_conv_add_reasoning(chat_conv *c, const char *text, size_t len, const char *where, wk_error *err)
{
    if (c->n == 0 || c->msgs[c->n - 1].role != CHAT_ROLE_ASSISTANT)
        return wk_fail(err, WK_EINVAL, "%s: reasoning belongs to an assistant message", where);
    chat_message *m = &c->msgs[c->n - 1];
    if (!m->reasoning && str_append(&m->reasoning, &m->reasoning_len, "", 0)) return oom(err);
    return str_append(&m->reasoning, &m->reasoning_len, text, len) ? oom(err) : 0;
}

int chat_conv_set_tool_call_id(chat_conv *c, const char *id, wk_error *err)
{
    if (c->n == 0) return wk_fail(err, WK_EINVAL, "chat: no message for a tool_call_id");
    chat_message *m = &c->msgs[c->n - 1];
    free(m->tool_call_id);
    m->tool_call_id = id ? strdup(id) : NULL;
    return id && !m->tool_call_id ? oom(err) : 0;
}

static bool blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r') return false;
    return true;
}

int chat_conv_add_call(chat_conv *c, const char *id, const char *name, const json_t *arguments, const char *name_path,
                       const char *args_path, wk_error *err)
{
    if (c->n == 0 || c->msgs[c->n - 1].role != CHAT_ROLE_ASSISTANT)
        return wk_fail(err, WK_EINVAL, "%s: tool calls belong to an assistant message", name_path);
    if (!name || !*name) return wk_fail(err, WK_EINVAL, "%s: must be a non-empty string", name_path);
    json_t *args = NULL;
    const char *text = NULL;
    if (!arguments || json_is_null(arguments) ||
        (json_is_string(arguments) && blank(json_string_value(arguments), json_string_length(arguments)))) {
        args = json_object();
    } else if (json_is_string(arguments)) {
        text = json_string_value(arguments);
        wk_error perr = {0};
        args = chat_json_loads(text, json_string_length(arguments), &perr);
        if (!json_is_object(args)) {
            json_decref(args);
            if (perr.code == WK_ENOMEM) return oom(err);
            return wk_fail(err, WK_EINVAL, "%s: must be a JSON object (%s)", args_path,
                           perr.msg[0] ? perr.msg : "got another JSON value");
        }
    } else if (json_is_object(arguments)) {
        args = json_deep_copy(arguments);
    } else {
        return wk_fail(err, WK_EINVAL, "%s: must be a JSON object or a string holding one", args_path);
    }
    if (!args) return oom(err);
    chat_message *m = &c->msgs[c->n - 1];
    if (m->n_calls == m->cap_calls) {
        size_t cap = m->cap_calls ? m->cap_calls * 2 : 2;
        chat_call *calls = realloc(m->calls, cap * sizeof *calls);
        if (!calls) {
            json_decref(args);
            return oom(err);
        }
        m->calls = calls;
        m->cap_calls = cap;
    }
    chat_call *call = &m->calls[m->n_calls];
    memset(call, 0, sizeof *call);
    call->args = args;
    m->n_calls++;
    call->name = strdup(name);
    call->id = id ? strdup(id) : NULL;
    call->args_text = text ? strndup(text, json_string_length(arguments)) : NULL;
    if (!call->name || (id && !call->id) || (text && !call->args_text)) return oom(err);
    return 0;
}

/* Stores a validated OpenAI function tool (borrowed; deep-copied so the key
 * order the client used is what the template prints). */
static int add_tool_object(chat_conv *c, const json_t *tool, const char *where, wk_error *err)
{
    const json_t *fn = json_object_get(tool, "function");
    const char *name = json_string_value(json_object_get(fn, "name"));
    for (size_t k = 0; k < json_array_size(c->tools); k++) {
        const json_t *o = json_object_get(json_array_get(c->tools, k), "function");
        if (!strcmp(json_string_value(json_object_get(o, "name")), name))
            return wk_fail(err, WK_EINVAL, "%s: a tool named '%s' is already defined", where, name);
    }
    if (!c->tools && !(c->tools = json_array())) return oom(err);
    json_t *copy = json_deep_copy(tool);
    if (!copy || json_array_append_new(c->tools, copy)) return oom(err);
    return 0;
}

static int check_tool_fields(const char *name, const json_t *description, const json_t *parameters,
                             const char *where, wk_error *err)
{
    if (!name || !*name) return wk_fail(err, WK_EINVAL, "%s.name: must be a non-empty string", where);
    if (description && !json_is_null(description) && !json_is_string(description))
        return wk_fail(err, WK_EINVAL, "%s.description: must be a string", where);
    if (parameters && !json_is_null(parameters) && !json_is_object(parameters))
        return wk_fail(err, WK_EINVAL, "%s.parameters: must be a JSON Schema object", where);
    return 0;
}

int chat_conv_add_tool(chat_conv *c, const char *name, const json_t *description, const json_t *parameters,
                       const char *where, wk_error *err)
{
    int rc = check_tool_fields(name, description, parameters, where, err);
    if (rc) return rc;
    json_t *jname = json_string(name);
    if (!jname) return wk_fail(err, WK_EINVAL, "%s.name: not valid UTF-8", where);
    json_t *fn = json_object();
    json_t *tool = json_object();
    if (!fn || !tool) {
        json_decref(jname);
        json_decref(fn);
        json_decref(tool);
        return oom(err);
    }
    /* json_object_set_new takes the value even when it fails */
    bool bad = json_object_set_new(fn, "name", jname) ||
               (json_is_string(description) && json_object_set(fn, "description", (json_t *)description)) ||
               (json_is_object(parameters) && json_object_set(fn, "parameters", (json_t *)parameters)) ||
               json_object_set_new(tool, "type", json_string("function"));
    if (bad) json_decref(fn);
    if (bad || json_object_set_new(tool, "function", fn)) {
        json_decref(tool);
        return oom(err);
    }
    rc = add_tool_object(c, tool, where, err);
    json_decref(tool);
    return rc;
}

int chat_conv_finish(chat_conv *c, const char *where, wk_error *err)
{
    if (c->n == 0) return wk_fail(err, WK_EINVAL, "%s: must contain at least one message", where);
    return 0;
}

/* ------------------------------------------------------- OpenAI requests */

/* Content of message i: a string, or an array of text parts (joined). */
static int openai_content(chat_conv *c, const json_t *content, const char *path, wk_error *err)
{
    if (json_is_string(content)) return chat_conv_append(c, json_string_value(content), json_string_length(content), err);
    if (!json_is_array(content))
        return wk_fail(err, WK_EINVAL, "%s: must be a string or an array of text parts, got %s", path,
                       chat_json_type_name(content));
    size_t k;
    const json_t *part;
    json_array_foreach(content, k, part) {
        const json_t *type = json_object_get(part, "type");
        const json_t *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type))
            return wk_fail(err, WK_EINVAL, "%s[%zu]: must be an object with a string 'type'", path, k);
        if (strcmp(json_string_value(type), "text") != 0)
            return wk_fail(err, WK_EUNSUPPORTED, "%s[%zu]: content part type '%s' is not supported (text only)", path,
                           k, json_string_value(type));
        if (!json_is_string(text)) return wk_fail(err, WK_EINVAL, "%s[%zu].text: must be a string", path, k);
        int rc = chat_conv_append(c, json_string_value(text), json_string_length(text), err);
        if (rc) return rc;
    }
    return 0;
}

static int openai_tool_calls(chat_conv *c, const json_t *calls, const char *path, wk_error *err)
{
    if (!json_is_array(calls)) return wk_fail(err, WK_EINVAL, "%s: must be an array, got %s", path, chat_json_type_name(calls));
    size_t k;
    const json_t *call;
    json_array_foreach(calls, k, call) {
        char at[128], name_path[160], args_path[160];
        snprintf(at, sizeof at, "%s[%zu]", path, k);
        snprintf(name_path, sizeof name_path, "%s.function.name", at);
        snprintf(args_path, sizeof args_path, "%s.function.arguments", at);
        const json_t *fn = json_object_get(call, "function");
        const json_t *type = json_object_get(call, "type");
        const json_t *id = json_object_get(call, "id");
        if (!json_is_object(call) || !json_is_object(fn))
            return wk_fail(err, WK_EINVAL, "%s: must be {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}", at);
        if (type && !json_is_null(type) && !(json_is_string(type) && !strcmp(json_string_value(type), "function")))
            return wk_fail(err, WK_EINVAL, "%s.type: must be \"function\"", at);
        if (id && !json_is_null(id) && !json_is_string(id)) return wk_fail(err, WK_EINVAL, "%s.id: must be a string", at);
        const json_t *name = json_object_get(fn, "name");
        if (!json_is_string(name)) return wk_fail(err, WK_EINVAL, "%s: must be a non-empty string", name_path);
        int rc = chat_conv_add_call(c, json_string_value(id), json_string_value(name), json_object_get(fn, "arguments"),
                                    name_path, args_path, err);
        if (rc) return rc;
    }
    return 0;
}

static int openai_message(chat_conv *c, const json_t *m, size_t i, wk_error *err)
{
    char path[64], field[96];
    snprintf(path, sizeof path, "messages[%zu]", i);
    if (!json_is_object(m)) return wk_fail(err, WK_EINVAL, "%s: must be an object, got %s", path, chat_json_type_name(m));
    const json_t *r = json_object_get(m, "role");
    if (!json_is_string(r)) return wk_fail(err, WK_EINVAL, "%s.role: must be a string", path);
    const char *role = json_string_value(r);
    chat_role kind;
    if (!strcmp(role, "system") || !strcmp(role, "developer")) kind = CHAT_ROLE_SYSTEM;
    else if (!strcmp(role, "user")) kind = CHAT_ROLE_USER;
    else if (!strcmp(role, "assistant")) kind = CHAT_ROLE_ASSISTANT;
    else if (!strcmp(role, "tool")) kind = CHAT_ROLE_TOOL;
    else
        return wk_fail(err, WK_EINVAL, "%s.role: '%.64s' is not one of system, developer, user, assistant, tool", path,
                       role);
    int rc = chat_conv_add(c, kind, "", 0, err);
    if (rc) return rc;

    const json_t *calls = json_object_get(m, "tool_calls");
    bool has_calls = json_array_size(calls) > 0;
    if (calls && !json_is_null(calls)) {
        snprintf(field, sizeof field, "%s.tool_calls", path);
        if (kind != CHAT_ROLE_ASSISTANT) return wk_fail(err, WK_EINVAL, "%s: only assistant messages have tool calls", field);
        if ((rc = openai_tool_calls(c, calls, field, err))) return rc;
    }
    const json_t *content = json_object_get(m, "content");
    snprintf(field, sizeof field, "%s.content", path);
    if (!content || json_is_null(content)) {
        /* OpenAI: an assistant message has content or tool calls */
        if (!(kind == CHAT_ROLE_ASSISTANT && has_calls))
            return wk_fail(err, WK_EINVAL, "%s: is required%s", field,
                           kind == CHAT_ROLE_ASSISTANT ? " (or tool_calls)" : "");
    } else if ((rc = openai_content(c, content, field, err))) {
        return rc;
    }
    const json_t *reasoning = json_object_get(m, "reasoning_content");
    if (reasoning && !json_is_null(reasoning) && kind == CHAT_ROLE_ASSISTANT) {
        snprintf(field, sizeof field, "%s.reasoning_content", path);
        if (!json_is_string(reasoning)) return wk_fail(err, WK_EINVAL, "%s: must be a string", field);
        if ((rc = chat_conv_add_reasoning(c, json_string_value(reasoning), json_string_length(reasoning), field, err)))
            return rc;
    }
    const json_t *tcid = json_object_get(m, "tool_call_id");
    if (kind == CHAT_ROLE_TOOL && tcid && !json_is_null(tcid)) {
        if (!json_is_string(tcid)) return wk_fail(err, WK_EINVAL, "%s.tool_call_id: must be a string", path);
        if ((rc = chat_conv_set_tool_call_id(c, json_string_value(tcid), err))) return rc;
    }
    return 0;
}

static int openai_tools(chat_conv *c, const json_t *tools, wk_error *err)
{
    if (!json_is_array(tools)) return wk_fail(err, WK_EINVAL, "tools: must be an array, got %s", chat_json_type_name(tools));
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        char where[48];
        snprintf(where, sizeof where, "tools[%zu]", i);
        const json_t *type = json_object_get(t, "type");
        const json_t *fn = json_object_get(t, "function");
        if (!json_is_object(t) || !json_is_string(type) || strcmp(json_string_value(type), "function") || !json_is_object(fn))
            return wk_fail(err, WK_EINVAL, "%s: must be {\"type\": \"function\", \"function\": {\"name\": ...}}", where);
        char fwhere[64];
        snprintf(fwhere, sizeof fwhere, "%s.function", where);
        int rc = check_tool_fields(json_string_value(json_object_get(fn, "name")), json_object_get(fn, "description"),
                                   json_object_get(fn, "parameters"), fwhere, err);
        if (!rc) rc = add_tool_object(c, t, fwhere, err);
        if (rc) return rc;
    }
    return 0;
}

/* add_generation_prompt, chat_template_kwargs.enable_thinking, reasoning_effort. */
static int openai_options(chat_conv *c, const json_t *request, wk_error *err)
{
    const json_t *agp = json_object_get(request, "add_generation_prompt");
    if (agp && !json_is_null(agp)) {
        if (!json_is_boolean(agp)) return wk_fail(err, WK_EINVAL, "add_generation_prompt: must be a boolean");
        c->add_generation_prompt = json_is_true(agp);
    }
    const json_t *effort = json_object_get(request, "reasoning_effort");
    if (effort && !json_is_null(effort)) {
        if (!json_is_string(effort)) return wk_fail(err, WK_EINVAL, "reasoning_effort: must be a string");
        if (!strcmp(json_string_value(effort), "none")) c->enable_thinking = 0;
    }
    const json_t *kw = json_object_get(request, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw))
            return wk_fail(err, WK_EINVAL, "chat_template_kwargs: must be an object, got %s", chat_json_type_name(kw));
        const json_t *et = json_object_get(kw, "enable_thinking");
        if (et && !json_is_null(et)) {
            if (!json_is_boolean(et))
                return wk_fail(err, WK_EINVAL, "chat_template_kwargs.enable_thinking: must be a boolean, got %s",
                               chat_json_type_name(et));
            c->enable_thinking = json_is_true(et) ? 1 : 0;
        }
    }
    return 0;
}

int chat_conv_from_openai_messages(chat_conv *c, const json_t *messages, const json_t *tools, wk_error *err)
{
    chat_conv_init(c);
    int rc = 0;
    if (!messages) rc = wk_fail(err, WK_EINVAL, "messages: is required");
    else if (!json_is_array(messages))
        rc = wk_fail(err, WK_EINVAL, "messages: must be an array, got %s", chat_json_type_name(messages));
    for (size_t i = 0; !rc && i < json_array_size(messages); i++)
        rc = openai_message(c, json_array_get(messages, i), i, err);
    if (!rc && tools && !json_is_null(tools)) rc = openai_tools(c, tools, err);
    if (!rc) rc = chat_conv_finish(c, "messages", err);
    if (rc) chat_conv_free(c);
    return rc;
}

int chat_conv_from_openai(chat_conv *c, const json_t *request, wk_error *err)
{
    chat_conv_init(c);
    if (!json_is_object(request)) return wk_fail(err, WK_EINVAL, "request: must be a JSON object");
    int rc = chat_conv_from_openai_messages(c, json_object_get(request, "messages"), json_object_get(request, "tools"), err);
    if (rc) return rc;
    const json_t *choice = json_object_get(request, "tool_choice");
    if (json_is_string(choice) && !strcmp(json_string_value(choice), "none")) {
        json_decref(c->tools); /* offered tools are not shown to the model */
        c->tools = NULL;
    }
    rc = openai_options(c, request, err);
    if (rc) chat_conv_free(c);
    return rc;
}
