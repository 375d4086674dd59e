/* Template selection, the prompt builder, and the render entry points:
 * requests are turned into a chat_conv (roles classified, content checked or
 * normalised) and handed to the renderer of the chosen template. */
#include <stdlib.h>
#include <string.h>

#include "chat/chat_internal.h"
#include "gguf/gguf.h"

/* ---------------------------------------------------------------- names */

const char *chat_template_name(chat_template_kind kind)
{
    switch (kind) {
    case CHAT_TMPL_QWEN3: return "qwen3";
    case CHAT_TMPL_QWEN35: return "qwen35";
    case CHAT_TMPL_LLAMA3: return "llama3";
    case CHAT_TMPL_CHATML: return "chatml";
    }
    return "?";
}

const char *chat_boundary_name(chat_boundary_kind kind)
{
    switch (kind) {
    case CHAT_B_SYSTEM_END: return "system_end";
    case CHAT_B_USER_START: return "user_start";
    case CHAT_B_TOOL_RESPONSE_START: return "tool_response_start";
    case CHAT_B_ASSISTANT_START: return "assistant_start";
    case CHAT_B_GENERATION_START: return "generation_start";
    case CHAT_B_SYSTEM_START: return "system_start";
    }
    return "?";
}

static void template_fill(chat_template *t, chat_template_kind kind)
{
    memset(t, 0, sizeof *t);
    t->kind = kind;
    switch (kind) {
    case CHAT_TMPL_QWEN3:
        t->tool_format = CHAT_TOOLS_HERMES;
        t->supports_thinking = true;
        break;
    case CHAT_TMPL_QWEN35:
        t->tool_format = CHAT_TOOLS_QWEN_XML;
        t->supports_thinking = true;
        break;
    case CHAT_TMPL_LLAMA3:
        strcpy(t->bos_token, "<|begin_of_text|>");
        break;
    case CHAT_TMPL_CHATML: break;
    }
}

int chat_template_by_name(chat_template *out, const char *name, wk_error *err)
{
    static const struct { const char *name; chat_template_kind kind; } names[] = {
        {"qwen3", CHAT_TMPL_QWEN3},   {"qwen35", CHAT_TMPL_QWEN35},     {"qwen3.5", CHAT_TMPL_QWEN35},
        {"llama3", CHAT_TMPL_LLAMA3}, {"llama3.1", CHAT_TMPL_LLAMA3},   {"llama31", CHAT_TMPL_LLAMA3},
        {"chatml", CHAT_TMPL_CHATML},
    };
    for (size_t i = 0; name && i < sizeof names / sizeof names[0]; i++) {
        if (!strcmp(name, names[i].name)) {
            template_fill(out, names[i].kind);
            return 0;
        }
    }
    return wk_fail(err, WK_ENOTFOUND, "unknown chat template name '%s' (known: %s)",
                   name ? name : "(null)", CHAT_TEMPLATE_NAMES);
}

int chat_template_select(chat_template *out, const char *jinja_src, const char *name_override,
                         wk_error *err)
{
    if (name_override && *name_override) return chat_template_by_name(out, name_override, err);
    if (!jinja_src || !*jinja_src)
        return wk_fail(err, WK_EUNSUPPORTED,
                       "model has no tokenizer.chat_template; pass --chat-template NAME (%s)",
                       CHAT_TEMPLATE_NAMES);
    const char *s = jinja_src;
    bool chatml = strstr(s, "<|im_start|>") && strstr(s, "<|im_end|>");
    bool think = strstr(s, "<think>") && strstr(s, "</think>");
    bool hermes = strstr(s, "<tool_call>") && strstr(s, "</tool_call>");
    bool xml_calls = strstr(s, "<function=") && strstr(s, "<parameter=");
    bool llama3 = strstr(s, "<|start_header_id|>") && strstr(s, "<|end_header_id|>") && strstr(s, "<|eot_id|>");

    /* Qwen3.5: XML calls and a thinking block that the generation prompt opens. */
    if (chatml && think && hermes && xml_calls) {
        template_fill(out, CHAT_TMPL_QWEN35);
        return 0;
    }
    /* Qwen3: JSON calls in <tool_call>, <think> handling, tool results as
     * <tool_response> inside user turns. */
    if (chatml && think && hermes && strstr(s, "<tool_response>")) {
        template_fill(out, CHAT_TMPL_QWEN3);
        return 0;
    }
    if (llama3) {
        template_fill(out, CHAT_TMPL_LLAMA3);
        return 0;
    }
    /* Plain ChatML only if the template has no tool or thinking syntax that
     * the generic renderer would silently drop. */
    if (chatml && !think && !hermes && !xml_calls) {
        template_fill(out, CHAT_TMPL_CHATML);
        return 0;
    }
    return wk_fail(err, WK_EUNSUPPORTED,
                   "chat template not recognised (%zu bytes of Jinja); pass --chat-template NAME (%s)",
                   strlen(s), CHAT_TEMPLATE_NAMES);
}

int chat_template_from_gguf(chat_template *out, const gguf_file *f, const char *name_override, wk_error *err)
{
    if (name_override && *name_override) return chat_template_by_name(out, name_override, err);
    const gguf_kv *kv = gguf_find_kv(f, "tokenizer.chat_template");
    if (!kv || kv->type != GGUF_T_STRING)
        return wk_fail(err, WK_EUNSUPPORTED,
                       "model has no tokenizer.chat_template string; pass --chat-template NAME (%s)",
                       CHAT_TEMPLATE_NAMES);
    /* the mapping is not NUL-terminated: select on a copy */
    char *src = strndup(kv->v.str.ptr, (size_t)kv->v.str.len);
    if (!src) return wk_fail(err, WK_ENOMEM, "chat template: out of memory");
    int rc = chat_template_select(out, src, NULL, err);
    free(src);
    return rc;
}

void chat_options_default(chat_options *opt)
{
    opt->add_generation_prompt = true;
    opt->enable_thinking = -1;
    opt->normalize = true;
}

/* --------------------------------------------------------------- builder */

void cb_init(chat_builder *b, chat_prompt *p)
{
    memset(b, 0, sizeof *b);
    memset(p, 0, sizeof *p);
    b->p = p;
}

static void cb_text(chat_builder *b, const char *data, size_t len, bool special)
{
    chat_prompt *p = b->p;
    if (b->failed || len == 0) return;
    if (p->len + len + 1 > b->cap_text) {
        size_t cap = b->cap_text ? b->cap_text : 1024;
        while (cap < p->len + len + 1) cap *= 2;
        char *t = realloc(p->text, cap);
        if (!t) { b->failed = WK_ENOMEM; return; }
        p->text = t;
        b->cap_text = cap;
    }
    memcpy(p->text + p->len, data, len);
    /* adjacent text of the same kind extends the last segment */
    if (p->n_segs && p->segs[p->n_segs - 1].special == special) {
        p->segs[p->n_segs - 1].len += len;
    } else {
        if (p->n_segs == b->cap_segs) {
            size_t cap = b->cap_segs ? b->cap_segs * 2 : 32;
            chat_segment *s = realloc(p->segs, cap * sizeof *s);
            if (!s) { b->failed = WK_ENOMEM; return; }
            p->segs = s;
            b->cap_segs = cap;
        }
        p->segs[p->n_segs++] = (chat_segment){.offset = p->len, .len = len, .special = special};
    }
    p->len += len;
}

void cb_special(chat_builder *b, const char *z) { cb_text(b, z, strlen(z), true); }
void cb_content(chat_builder *b, const char *data, size_t len) { cb_text(b, data, len, false); }

void cb_mark(chat_builder *b, chat_boundary_kind kind, int msg_index, unsigned flags)
{
    chat_prompt *p = b->p;
    if (b->failed) return;
    if (p->n_bounds == b->cap_bounds) {
        size_t cap = b->cap_bounds ? b->cap_bounds * 2 : 16;
        chat_boundary *nb = realloc(p->bounds, cap * sizeof *nb);
        if (!nb) { b->failed = WK_ENOMEM; return; }
        p->bounds = nb;
        b->cap_bounds = cap;
    }
    p->bounds[p->n_bounds++] =
        (chat_boundary){.kind = kind, .byte_offset = p->len, .msg_index = msg_index, .flags = flags};
}

int cb_finish(chat_builder *b, wk_error *err)
{
    chat_prompt *p = b->p;
    if (!b->failed && !p->text) {
        p->text = malloc(1);
        if (!p->text) b->failed = WK_ENOMEM;
    }
    if (b->failed) {
        chat_prompt_free(p);
        return wk_fail(err, WK_ENOMEM, "chat render: out of memory");
    }
    p->text[p->len] = 0;
    return 0;
}

void chat_prompt_free(chat_prompt *p)
{
    if (!p) return;
    free(p->text);
    free(p->segs);
    free(p->bounds);
    memset(p, 0, sizeof *p);
}

/* ---------------------------------------------------------- conversation */

/* Joins the text parts of an OpenAI content array; non-text parts are
 * refused (this is a text-only engine). */
static int join_parts(chat_msg *m, size_t idx, const json_t *parts, wk_error *err)
{
    for (size_t k = 0; k < json_array_size(parts); k++) {
        const json_t *part = json_array_get(parts, k);
        const json_t *type = json_object_get(part, "type");
        const json_t *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(text) ||
            (type && !(json_is_string(type) && !strcmp(json_string_value(type), "text")))) {
            const char *tn = json_is_string(type) ? json_string_value(type) : "?";
            return wk_fail(err, json_is_string(type) && strcmp(tn, "text") ? WK_EUNSUPPORTED : WK_EINVAL,
                           "messages[%zu].content[%zu]: only text parts are supported (got type '%s')",
                           idx, k, tn);
        }
        if (cs_append(&m->joined, json_string_value(text), json_string_length(text)))
            return wk_fail(err, WK_ENOMEM, "chat render: out of memory");
    }
    if (cs_append(&m->joined, "", 0)) return wk_fail(err, WK_ENOMEM, "chat render: out of memory");
    return 0;
}

static void value_view(const json_t *v, chat_value_state *state, const char **s, size_t *len)
{
    *s = NULL;
    *len = 0;
    if (!v) *state = VAL_MISSING;
    else if (json_is_null(v)) *state = VAL_NULL;
    else if (json_is_string(v)) {
        *state = VAL_STRING;
        *s = json_string_value(v);
        *len = json_string_length(v);
    } else *state = VAL_OTHER;
}

static void conv_free(chat_conv *c)
{
    for (size_t i = 0; i < c->n; i++) cs_free(&c->msgs[i].joined);
    free(c->msgs);
    c->msgs = NULL;
    c->n = 0;
}

static int conv_build(chat_conv *c, const json_t *messages, const json_t *tools, const chat_options *opt,
                      wk_error *err)
{
    memset(c, 0, sizeof *c);
    if (!json_is_array(messages)) return wk_fail(err, WK_EINVAL, "messages: must be an array");
    if (tools && !json_is_null(tools) && !json_is_array(tools))
        return wk_fail(err, WK_EINVAL, "tools: must be an array");
    c->tools = json_array_size(tools) > 0 ? tools : NULL;
    c->add_generation_prompt = opt->add_generation_prompt;
    c->enable_thinking = opt->enable_thinking;
    c->normalize = opt->normalize;
    c->n = json_array_size(messages);
    c->msgs = calloc(c->n ? c->n : 1, sizeof *c->msgs);
    if (!c->msgs) return wk_fail(err, WK_ENOMEM, "chat render: out of memory");

    for (size_t i = 0; i < c->n; i++) {
        const json_t *jm = json_array_get(messages, i);
        chat_msg *m = &c->msgs[i];
        if (!json_is_object(jm)) { conv_free(c); return wk_fail(err, WK_EINVAL, "messages[%zu]: must be an object", i); }
        const json_t *role = json_object_get(jm, "role");
        if (!json_is_string(role)) {
            conv_free(c);
            return wk_fail(err, WK_EINVAL, "messages[%zu].role: missing or not a string", i);
        }
        m->role = json_string_value(role);
        m->role_len = json_string_length(role);
        if (opt->normalize && !strcmp(m->role, "developer")) {
            m->role = "system"; /* OpenAI's newer name for system instructions */
            m->role_len = 6;
        }
        m->role_kind = !strcmp(m->role, "system")      ? ROLE_SYSTEM
                       : !strcmp(m->role, "user")      ? ROLE_USER
                       : !strcmp(m->role, "assistant") ? ROLE_ASSISTANT
                       : !strcmp(m->role, "tool")      ? ROLE_TOOL
                                                       : ROLE_OTHER;
        m->content_json = json_object_get(jm, "content");
        value_view(m->content_json, &m->content_state, &m->content, &m->content_len);
        value_view(json_object_get(jm, "reasoning_content"), &m->reasoning_state, &m->reasoning,
                   &m->reasoning_len);
        const json_t *tc = json_object_get(jm, "tool_calls");
        if (tc && !json_is_null(tc) && !json_is_array(tc)) {
            conv_free(c);
            return wk_fail(err, WK_EINVAL, "messages[%zu].tool_calls: must be an array", i);
        }
        m->tool_calls = json_array_size(tc) > 0 ? tc : NULL;

        if (opt->normalize) {
            if (m->content_state == VAL_OTHER && json_is_array(m->content_json)) {
                int rc = join_parts(m, i, m->content_json, err);
                if (rc) { conv_free(c); return rc; }
                m->content_state = VAL_STRING;
                m->content = m->joined.data;
                m->content_len = m->joined.len;
            } else if (m->content_state == VAL_NULL || m->content_state == VAL_MISSING) {
                m->content_state = VAL_STRING;
                m->content = "";
                m->content_len = 0;
            } else if (m->content_state == VAL_OTHER) {
                conv_free(c);
                return wk_fail(err, WK_EINVAL, "messages[%zu].content: must be a string or an array of text parts", i);
            }
            if (m->reasoning_state == VAL_OTHER) {
                conv_free(c);
                return wk_fail(err, WK_EINVAL, "messages[%zu].reasoning_content: must be a string", i);
            }
        }
    }
    return 0;
}

int chat_render(const chat_template *tmpl, const json_t *messages, const json_t *tools,
                const chat_options *opt, chat_prompt *out, wk_error *err)
{
    chat_options defaults;
    if (!opt) {
        chat_options_default(&defaults);
        opt = &defaults;
    }
    memset(out, 0, sizeof *out);
    chat_conv conv;
    int rc = conv_build(&conv, messages, tools, opt, err);
    if (rc) return rc;

    chat_builder b;
    cb_init(&b, out);
    switch (tmpl->kind) {
    case CHAT_TMPL_QWEN3: rc = chat_render_qwen3(tmpl, &conv, &b, err); break;
    case CHAT_TMPL_QWEN35: rc = chat_render_qwen35(tmpl, &conv, &b, err); break;
    case CHAT_TMPL_LLAMA3: rc = chat_render_llama3(tmpl, &conv, &b, err); break;
    case CHAT_TMPL_CHATML: rc = chat_render_chatml(tmpl, &conv, &b, err); break;
    default: rc = wk_fail(err, WK_EINVAL, "chat render: bad template kind %d", (int)tmpl->kind);
    }
    conv_free(&conv);
    if (rc) {
        chat_prompt_free(out);
        return rc;
    }
    rc = cb_finish(&b, err);
    if (rc) return rc;
    out->tool_format = conv.tools ? tmpl->tool_format : CHAT_TOOLS_NONE;
    out->starts_with_bos = tmpl->bos_token[0] && out->len >= strlen(tmpl->bos_token) &&
                           !memcmp(out->text, tmpl->bos_token, strlen(tmpl->bos_token));
    return 0;
}

int chat_render_request(const chat_template *tmpl, const json_t *request, const json_t *default_kwargs,
                        chat_prompt *out, wk_error *err)
{
    memset(out, 0, sizeof *out);
    if (!json_is_object(request)) return wk_fail(err, WK_EINVAL, "request: must be a JSON object");
    chat_options opt;
    chat_options_default(&opt);

    const json_t *agp = json_object_get(request, "add_generation_prompt");
    if (agp && !json_is_null(agp)) {
        if (!json_is_boolean(agp)) return wk_fail(err, WK_EINVAL, "add_generation_prompt: must be a boolean");
        opt.add_generation_prompt = json_is_true(agp);
    }
    const json_t *effort = json_object_get(request, "reasoning_effort");
    if (json_is_string(effort) && !strcmp(json_string_value(effort), "none")) opt.enable_thinking = 0;

    const json_t *kw_sources[2] = {default_kwargs, json_object_get(request, "chat_template_kwargs")};
    for (int k = 0; k < 2; k++) {
        const json_t *kw = kw_sources[k];
        if (!kw || json_is_null(kw)) continue;
        if (!json_is_object(kw)) return wk_fail(err, WK_EINVAL, "chat_template_kwargs: must be an object");
        const json_t *et = json_object_get(kw, "enable_thinking");
        if (et && !json_is_null(et)) {
            if (!json_is_boolean(et))
                return wk_fail(err, WK_EINVAL, "chat_template_kwargs.enable_thinking: must be a boolean");
            opt.enable_thinking = json_is_true(et) ? 1 : 0;
        }
    }

    const json_t *tools = json_object_get(request, "tools");
    const json_t *choice = json_object_get(request, "tool_choice");
    if (json_is_string(choice) && !strcmp(json_string_value(choice), "none")) tools = NULL;

    const json_t *messages = json_object_get(request, "messages");
    if (!messages) return wk_fail(err, WK_EINVAL, "messages: required");
    return chat_render(tmpl, messages, tools, &opt, out, err);
}
