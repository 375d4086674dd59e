/* Template selection, the prompt builder, and the render entry points: a
 * validated chat_conv (or, in exact mode, JSON messages as the Jinja template
 * sees them) becomes a view that the renderer of the chosen template reads. */
#include <stdlib.h>
#include <string.h>

#include "chat/chat_conv.h"
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

static void view_free(chat_view *v)
{
    for (size_t i = 0; i < v->n; i++) cs_free(&v->msgs[i].joined);
    free(v->msgs);
    memset(v, 0, sizeof *v);
}

static int view_alloc(chat_view *v, size_t n, wk_error *err)
{
    memset(v, 0, sizeof *v);
    v->n = n;
    v->msgs = calloc(n ? n : 1, sizeof *v->msgs);
    return v->msgs ? 0 : wk_fail(err, WK_ENOMEM, "chat render: out of memory");
}

static const char *const ROLE_NAMES[] = {"system", "user", "assistant", "tool"};

/* A validated conversation: nothing to check. */
static int view_of_conv(chat_view *v, const chat_conv *c, wk_error *err)
{
    if (view_alloc(v, c->n, err)) return WK_ENOMEM;
    v->tools = c->tools;
    v->add_generation_prompt = c->add_generation_prompt;
    v->enable_thinking = c->enable_thinking;
    for (size_t i = 0; i < c->n; i++) {
        const chat_message *cm = &c->msgs[i];
        chat_msg *m = &v->msgs[i];
        m->role = ROLE_NAMES[cm->role];
        m->role_len = strlen(m->role);
        m->role_kind = (view_role)cm->role; /* same order */
        m->content_state = VAL_STRING;
        m->content = cm->content;
        m->content_len = cm->content_len;
        m->reasoning_state = cm->reasoning ? VAL_STRING : VAL_MISSING;
        m->reasoning = cm->reasoning;
        m->reasoning_len = cm->reasoning_len;
        m->calls = cm->n_calls ? cm->calls : NULL;
        m->n_calls = cm->n_calls;
    }
    return 0;
}

/* JSON messages exactly as the Jinja template sees them: roles classified,
 * values as given (the renderers reproduce the template's failures). */
static int view_of_json(chat_view *v, const json_t *messages, const json_t *tools, const chat_options *opt,
                        wk_error *err)
{
    if (!json_is_array(messages)) return wk_fail(err, WK_EINVAL, "messages: must be an array");
    if (tools && !json_is_null(tools) && !json_is_array(tools)) return wk_fail(err, WK_EINVAL, "tools: must be an array");
    if (view_alloc(v, json_array_size(messages), err)) return WK_ENOMEM;
    v->tools = json_array_size(tools) > 0 ? tools : NULL;
    v->add_generation_prompt = opt->add_generation_prompt;
    v->enable_thinking = opt->enable_thinking;
    v->exact = true;
    for (size_t i = 0; i < v->n; i++) {
        const json_t *jm = json_array_get(messages, i);
        chat_msg *m = &v->msgs[i];
        const json_t *role = json_object_get(jm, "role");
        if (!json_is_object(jm) || !json_is_string(role)) {
            view_free(v);
            return wk_fail(err, WK_EINVAL, "messages[%zu]: must be an object with a string role", i);
        }
        m->role = json_string_value(role);
        m->role_len = json_string_length(role);
        m->role_kind = !strcmp(m->role, "system")      ? ROLE_SYSTEM
                       : !strcmp(m->role, "user")      ? ROLE_USER
                       : !strcmp(m->role, "assistant") ? ROLE_ASSISTANT
                       : !strcmp(m->role, "tool")      ? ROLE_TOOL
                                                       : ROLE_OTHER;
        m->content_json = json_object_get(jm, "content");
        value_view(m->content_json, &m->content_state, &m->content, &m->content_len);
        value_view(json_object_get(jm, "reasoning_content"), &m->reasoning_state, &m->reasoning, &m->reasoning_len);
        const json_t *tc = json_object_get(jm, "tool_calls");
        if (tc && !json_is_null(tc) && !json_is_array(tc)) {
            view_free(v);
            return wk_fail(err, WK_EINVAL, "messages[%zu].tool_calls: must be an array", i);
        }
        m->tool_calls = json_array_size(tc) > 0 ? tc : NULL;
    }
    return 0;
}

static int render_view(const chat_template *tmpl, chat_view *view, chat_prompt *out, wk_error *err)
{
    chat_builder b;
    cb_init(&b, out);
    int rc;
    switch (tmpl->kind) {
    case CHAT_TMPL_QWEN3: rc = chat_render_qwen3(tmpl, view, &b, err); break;
    case CHAT_TMPL_QWEN35: rc = chat_render_qwen35(tmpl, view, &b, err); break;
    case CHAT_TMPL_LLAMA3: rc = chat_render_llama3(tmpl, view, &b, err); break;
    case CHAT_TMPL_CHATML: rc = chat_render_chatml(tmpl, view, &b, err); break;
    default: rc = wk_fail(err, WK_EINVAL, "chat render: bad template kind %d", (int)tmpl->kind);
    }
    bool tools = view->tools != NULL;
    view_free(view);
    if (rc) {
        chat_prompt_free(out);
        return rc;
    }
    rc = cb_finish(&b, err);
    if (rc) return rc;
    out->tool_format = tools ? tmpl->tool_format : CHAT_TOOLS_NONE;
    out->starts_with_bos = tmpl->bos_token[0] && out->len >= strlen(tmpl->bos_token) &&
                           !memcmp(out->text, tmpl->bos_token, strlen(tmpl->bos_token));
    return 0;
}

int chat_render_conv(const chat_template *tmpl, const chat_conv *c, chat_prompt *out, wk_error *err)
{
    memset(out, 0, sizeof *out);
    chat_view view;
    int rc = view_of_conv(&view, c, err);
    return rc ? rc : render_view(tmpl, &view, out, err);
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
    if (opt->normalize) {
        chat_conv c;
        int rc = chat_conv_from_openai_messages(&c, messages, tools, err);
        if (rc) return rc;
        c.add_generation_prompt = opt->add_generation_prompt;
        c.enable_thinking = opt->enable_thinking;
        rc = chat_render_conv(tmpl, &c, out, err);
        chat_conv_free(&c);
        return rc;
    }
    chat_view view;
    int rc = view_of_json(&view, messages, tools, opt, err);
    return rc ? rc : render_view(tmpl, &view, out, err);
}
