/* Qwen3 and Qwen3.5 ChatML templates, written out as rules
 * (spec tokenizer-and-templates.md §7; golden/templates/qwen3.json).
 *
 * Both: <|im_start|>ROLE\nCONTENT<|im_end|>\n turns, tool results packed into
 * user turns as <tool_response> blocks, reasoning kept only for assistant
 * messages after the last real user query. They differ in the tools block,
 * trimming, the tool-call syntax and the generation prompt (Qwen3.5 opens
 * <think>). */
#include <string.h>

#include "chat/chat_internal.h"

static const char QWEN3_TOOLS_HEAD[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char QWEN3_TOOLS_TAIL[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

/* Qwen3.5's fixed tools text, reproduced from the template's string literals. */
static const char QWEN35_TOOLS_HEAD[] =
    "# Tools\n\nYou have access to the following functions:\n\n<tools>";
static const char QWEN35_TOOLS_TAIL[] =
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
    "</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\n"
    "that can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n"
    "- Function calls MUST follow the specified format: an inner <function=...></function> block "
    "must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural language BEFORE the "
    "function call, but NOT after\n"
    "- If there is no function call available, answer the question like normal with your current "
    "knowledge and do not tell the user about function calls\n</IMPORTANT>";

static const char THINK_OPEN[] = "<think>";
static const char THINK_CLOSE[] = "</think>";

/* Like memmem, but the last occurrence. */
static const char *find_last(const char *s, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    if (k > n) return NULL;
    for (size_t i = n - k + 1; i-- > 0;)
        if (!memcmp(s + i, needle, k)) return s + i;
    return NULL;
}

static bool starts_with(const char *s, size_t n, const char *p)
{
    size_t k = strlen(p);
    return n >= k && !memcmp(s, p, k);
}

static bool ends_with(const char *s, size_t n, const char *p)
{
    size_t k = strlen(p);
    return n >= k && !memcmp(s + n - k, p, k);
}

/* Splits assistant content that carries its reasoning inline:
 * content = text after the last </think>, leading '\n' removed;
 * reasoning = text before the first </think>, after the last <think> in it,
 * '\n' removed at both ends. Returns false if there is no </think>. */
static bool split_think(const char *s, size_t n, size_t *cb, size_t *ce, size_t *rb, size_t *re)
{
    const char *first = memmem(s, n, THINK_CLOSE, strlen(THINK_CLOSE));
    if (!first) return false;
    const char *last = find_last(s, n, THINK_CLOSE);
    *cb = (size_t)(last - s) + strlen(THINK_CLOSE);
    *ce = n;
    chat_strip_char(s, cb, ce, '\n', true, false);
    *rb = 0;
    *re = (size_t)(first - s);
    chat_strip_char(s, rb, re, '\n', false, true);
    const char *open = find_last(s, *re, THINK_OPEN);
    if (open) *rb = (size_t)(open - s) + strlen(THINK_OPEN);
    chat_strip_char(s, rb, re, '\n', true, false);
    return true;
}

static int need_string(const chat_msg *m, size_t i, wk_error *err)
{
    if (m->content_state == VAL_STRING) return 0;
    const char *what = m->content_state == VAL_NULL      ? "null"
                       : m->content_state == VAL_MISSING ? "missing"
                       : json_is_array(m->content_json)  ? "an array of parts"
                                                         : "not a string";
    return wk_fail(err, WK_EINVAL,
                   "messages[%zu] (%s): content is %s; this template needs a string", i, m->role, what);
}

static void content_str(chat_builder *b, const chat_str *s) { cb_content(b, s->data ? s->data : "", s->len); }

/* ================================================================= Qwen3 */

/* Name and argument text of call k as Qwen3 prints them: arguments given
 * as text verbatim, as an object through tojson. In exact mode the name is
 * str() of whatever was given and missing arguments fail as in Jinja. */
static int qwen3_call_text(const chat_msg *m, size_t i, size_t k, chat_str *name, chat_str *args, wk_error *err)
{
    int rc;
    if (m->calls) {
        const chat_call *cl = &m->calls[k];
        rc = cs_puts(name, cl->name);
        rc |= cl->args_text ? cs_puts(args, cl->args_text) : chat_tojson(args, cl->args);
        return rc ? wk_fail(err, WK_ENOMEM, "chat render: out of memory") : 0;
    }
    const json_t *call = json_array_get(m->tool_calls, k);
    if (!json_is_object(call))
        return wk_fail(err, WK_EINVAL, "messages[%zu].tool_calls[%zu]: must be an object", i, k);
    const json_t *fn = json_object_get(call, "function");
    if (json_is_object(fn) && json_object_size(fn) > 0) call = fn;
    const json_t *nm = json_object_get(call, "name");
    const json_t *a = json_object_get(call, "arguments");
    if (!a) return wk_fail(err, WK_EINVAL, "messages[%zu].tool_calls[%zu]: arguments missing", i, k);
    rc = nm ? chat_pystr(name, nm) : 0;
    rc |= json_is_string(a) ? cs_append(args, json_string_value(a), json_string_length(a)) : chat_tojson(args, a);
    return rc ? wk_fail(err, WK_ENOMEM, "chat render: out of memory") : 0;
}

static int qwen3_tool_calls(const chat_msg *m, size_t i, bool content_nonempty, chat_builder *b, wk_error *err)
{
    size_t n = chat_msg_n_calls(m);
    for (size_t k = 0; k < n; k++) {
        chat_str name = {0}, args = {0};
        int rc = qwen3_call_text(m, i, k, &name, &args, err);
        if (rc) {
            cs_free(&name);
            cs_free(&args);
            return rc;
        }
        if ((k == 0 && content_nonempty) || k > 0) cb_special(b, "\n");
        cb_special(b, "<tool_call>\n{\"name\": \"");
        content_str(b, &name);
        cb_special(b, "\", \"arguments\": ");
        content_str(b, &args);
        cb_special(b, "}\n</tool_call>");
        cs_free(&name);
        cs_free(&args);
    }
    return 0;
}

int chat_render_qwen3(const chat_template *t, const chat_view *c, chat_builder *b, wk_error *err)
{
    (void)t;
    const chat_msg *ms = c->msgs;
    size_t n = c->n;
    if (n == 0) return wk_fail(err, WK_EINVAL, "messages: empty; the template reads messages[0]");
    int rc;

    /* leading system turn: tools block and/or the first system message */
    bool first_is_system = ms[0].role_kind == ROLE_SYSTEM;
    if (c->tools) {
        cb_special(b, "<|im_start|>system\n");
        if (first_is_system) {
            if ((rc = need_string(&ms[0], 0, err))) return rc;
            cb_content(b, ms[0].content, ms[0].content_len);
            cb_special(b, "\n\n");
        }
        cb_special(b, QWEN3_TOOLS_HEAD);
        for (size_t k = 0; k < json_array_size(c->tools); k++) {
            chat_str js = {0};
            if (chat_tojson(&js, json_array_get(c->tools, k))) {
                cs_free(&js);
                return wk_fail(err, WK_ENOMEM, "chat render: out of memory");
            }
            cb_special(b, "\n");
            content_str(b, &js);
            cs_free(&js);
        }
        cb_special(b, QWEN3_TOOLS_TAIL);
        cb_mark(b, CHAT_B_SYSTEM_END, -1, 0);
    } else if (first_is_system) {
        if ((rc = need_string(&ms[0], 0, err))) return rc;
        cb_special(b, "<|im_start|>system\n");
        cb_content(b, ms[0].content, ms[0].content_len);
        cb_special(b, "<|im_end|>\n");
        cb_mark(b, CHAT_B_SYSTEM_END, -1, 0);
    }

    /* last query index: the last user message that is not a pasted tool
     * response; if none, the last message */
    size_t last_query = n - 1;
    bool have_query = false;
    for (size_t k = n; k-- > 0;) {
        if (ms[k].role_kind != ROLE_USER) continue;
        if ((rc = need_string(&ms[k], k, err))) return rc;
        if (!(starts_with(ms[k].content, ms[k].content_len, "<tool_response>") &&
              ends_with(ms[k].content, ms[k].content_len, "</tool_response>"))) {
            last_query = k;
            have_query = true;
            break;
        }
    }

    for (size_t i = 0; i < n; i++) {
        const chat_msg *m = &ms[i];
        if (m->role_kind == ROLE_USER || (m->role_kind == ROLE_SYSTEM && i > 0)) {
            if ((rc = need_string(m, i, err))) return rc;
            if (m->role_kind == ROLE_USER)
                cb_mark(b, CHAT_B_USER_START, (int)i, have_query && i == last_query ? CHAT_BFLAG_LAST_USER : 0);
            else
                cb_mark(b, CHAT_B_SYSTEM_START, (int)i, 0);
            cb_special(b, "<|im_start|>");
            cb_special(b, m->role_kind == ROLE_USER ? "user\n" : "system\n");
            cb_content(b, m->content, m->content_len);
            cb_special(b, "<|im_end|>\n");
        } else if (m->role_kind == ROLE_ASSISTANT) {
            if ((rc = need_string(m, i, err))) return rc;
            const char *s = m->content;
            size_t cb_ = 0, ce = m->content_len;
            const char *r = "";
            size_t rb = 0, re = 0;
            if (m->reasoning_state == VAL_STRING) {
                r = m->reasoning;
                re = m->reasoning_len;
            } else if (m->reasoning_state == VAL_OTHER) {
                return wk_fail(err, WK_EINVAL, "messages[%zu].reasoning_content: must be a string", i);
            } else if (split_think(s, m->content_len, &cb_, &ce, &rb, &re)) {
                r = s;
            }
            bool reasoning_nonempty = re > rb;
            cb_mark(b, CHAT_B_ASSISTANT_START, (int)i, 0);
            if (i > last_query && (i == n - 1 || reasoning_nonempty)) {
                chat_strip_char(r, &rb, &re, '\n', true, true);
                size_t lb = cb_, le = ce;
                chat_strip_char(s, &lb, &le, '\n', true, false);
                cb_special(b, "<|im_start|>assistant\n<think>\n");
                cb_content(b, r + rb, re - rb);
                cb_special(b, "\n</think>\n\n");
                cb_content(b, s + lb, le - lb);
            } else {
                cb_special(b, "<|im_start|>assistant\n");
                cb_content(b, s + cb_, ce - cb_);
            }
            if (chat_msg_n_calls(m) && (rc = qwen3_tool_calls(m, i, ce > cb_, b, err))) return rc;
            cb_special(b, "<|im_end|>\n");
        } else if (m->role_kind == ROLE_TOOL) {
            bool run_start = i == 0 || ms[i - 1].role_kind != ROLE_TOOL;
            bool run_end = i == n - 1 || ms[i + 1].role_kind != ROLE_TOOL;
            if (run_start) {
                cb_mark(b, CHAT_B_TOOL_RESPONSE_START, (int)i, 0);
                cb_special(b, "<|im_start|>user");
            }
            cb_special(b, "\n<tool_response>\n");
            if (m->content_state == VAL_STRING) {
                cb_content(b, m->content, m->content_len);
            } else if (m->content_state != VAL_MISSING) {
                chat_str tmp = {0};
                if (chat_pystr(&tmp, m->content_json)) {
                    cs_free(&tmp);
                    return wk_fail(err, WK_ENOMEM, "chat render: out of memory");
                }
                content_str(b, &tmp);
                cs_free(&tmp);
            }
            cb_special(b, "\n</tool_response>");
            if (run_end) cb_special(b, "<|im_end|>\n");
        }
        /* other roles (e.g. developer when not normalised): no text */
    }

    b->p->thinking_enabled = c->enable_thinking != 0;
    b->p->reasoning_open = false;
    if (c->add_generation_prompt) {
        cb_mark(b, CHAT_B_GENERATION_START, -1, 0);
        cb_special(b, "<|im_start|>assistant\n");
        if (c->enable_thinking == 0) cb_special(b, "<think>\n\n</think>\n\n");
    }
    return 0;
}

/* =============================================================== Qwen3.5 */

/* The template's render_content + |trim: string as is, text parts joined,
 * null/missing → "", images/videos refused (text-only engine). Result in
 * *s and *len (borrowing from m, or m->joined). */
static int qwen35_content(chat_msg *m, size_t i, const char **s, size_t *len, wk_error *err)
{
    const char *p = "";
    size_t n = 0;
    if (m->content_state == VAL_STRING) {
        p = m->content;
        n = m->content_len;
    } else if (m->content_state == VAL_OTHER) {
        if (!json_is_array(m->content_json))
            return wk_fail(err, WK_EINVAL, "messages[%zu] (%s): unexpected content type", i, m->role);
        m->joined.len = 0;
        for (size_t k = 0; k < json_array_size(m->content_json); k++) {
            const json_t *item = json_array_get(m->content_json, k);
            const json_t *type = json_object_get(item, "type");
            const char *tn = json_is_string(type) ? json_string_value(type) : "";
            if (json_object_get(item, "image") || json_object_get(item, "image_url") || !strcmp(tn, "image") ||
                json_object_get(item, "video") || !strcmp(tn, "video"))
                return wk_fail(err, WK_EUNSUPPORTED,
                               "messages[%zu].content[%zu]: images and videos are not supported", i, k);
            const json_t *text = json_object_get(item, "text");
            if (!json_is_string(text))
                return wk_fail(err, WK_EINVAL, "messages[%zu].content[%zu]: unexpected item type", i, k);
            if (cs_append(&m->joined, json_string_value(text), json_string_length(text)))
                return wk_fail(err, WK_ENOMEM, "chat render: out of memory");
        }
        p = m->joined.data ? m->joined.data : "";
        n = m->joined.len;
    }
    size_t b = 0, e = n;
    chat_strip_space(p, &b, &e, true, true);
    *s = p + b;
    *len = e - b;
    return 0;
}

/* Name and arguments object of call k; exact mode takes them from the JSON
 * as the template does (a string of arguments fails there, as in Jinja). */
static int qwen35_call(const chat_msg *m, size_t i, size_t k, const char **name, size_t *name_len,
                       const json_t **args, wk_error *err)
{
    if (m->calls) {
        *name = m->calls[k].name;
        *name_len = strlen(*name);
        *args = m->calls[k].args;
        return 0;
    }
    const json_t *call = json_array_get(m->tool_calls, k);
    if (!json_is_object(call)) return wk_fail(err, WK_EINVAL, "messages[%zu].tool_calls[%zu]: must be an object", i, k);
    const json_t *fn = json_object_get(call, "function");
    if (fn) {
        if (!json_is_object(fn))
            return wk_fail(err, WK_EINVAL, "messages[%zu].tool_calls[%zu].function: must be an object", i, k);
        call = fn;
    }
    const json_t *nm = json_object_get(call, "name");
    if (!json_is_string(nm)) return wk_fail(err, WK_EINVAL, "messages[%zu].tool_calls[%zu]: name must be a string", i, k);
    *name = json_string_value(nm);
    *name_len = json_string_length(nm);
    *args = json_object_get(call, "arguments");
    if (*args && !json_is_object(*args))
        return wk_fail(err, WK_EINVAL, "messages[%zu].tool_calls[%zu].arguments: must be an object", i, k);
    return 0;
}

static int qwen35_tool_calls(const chat_msg *m, size_t i, bool content_nonempty, chat_builder *b, wk_error *err)
{
    size_t n = chat_msg_n_calls(m);
    for (size_t k = 0; k < n; k++) {
        const char *name = NULL; /* set by qwen35_call when it returns 0 (gcc -O2 cannot tell) */
        size_t name_len = 0;
        const json_t *args = NULL;
        int rc = qwen35_call(m, i, k, &name, &name_len, &args, err);
        if (rc) return rc;
        if (k > 0) cb_special(b, "\n");
        else if (content_nonempty) cb_special(b, "\n\n");
        cb_special(b, "<tool_call>\n<function=");
        cb_content(b, name, name_len);
        cb_special(b, ">\n");
        const char *key;
        json_t *val;
        if (args) {
            json_object_foreach((json_t *)args, key, val) {
                chat_str tmp = {0};
                cb_special(b, "<parameter=");
                cb_content(b, key, strlen(key));
                cb_special(b, ">\n");
                if (json_is_object(val) || json_is_array(val)) rc |= chat_tojson(&tmp, val);
                else rc |= chat_pystr(&tmp, val);
                content_str(b, &tmp);
                cs_free(&tmp);
                cb_special(b, "\n</parameter>\n");
            }
        }
        if (rc) return wk_fail(err, WK_ENOMEM, "chat render: out of memory");
        cb_special(b, "</function>\n</tool_call>");
    }
    return 0;
}

int chat_render_qwen35(const chat_template *t, const chat_view *c, chat_builder *b, wk_error *err)
{
    (void)t;
    chat_msg *ms = c->msgs;
    size_t n = c->n;
    if (n == 0) return wk_fail(err, WK_EINVAL, "messages: empty (no messages provided)");
    int rc;
    const char *s;
    size_t len;

    bool first_is_system = ms[0].role_kind == ROLE_SYSTEM;
    if (c->tools) {
        cb_special(b, "<|im_start|>system\n");
        cb_special(b, QWEN35_TOOLS_HEAD);
        for (size_t k = 0; k < json_array_size(c->tools); k++) {
            chat_str js = {0};
            if (chat_tojson(&js, json_array_get(c->tools, k))) {
                cs_free(&js);
                return wk_fail(err, WK_ENOMEM, "chat render: out of memory");
            }
            cb_special(b, "\n");
            content_str(b, &js);
            cs_free(&js);
        }
        cb_special(b, QWEN35_TOOLS_TAIL);
        if (first_is_system) {
            if ((rc = qwen35_content(&ms[0], 0, &s, &len, err))) return rc;
            if (len) {
                cb_special(b, "\n\n");
                cb_content(b, s, len);
            }
        }
        cb_special(b, "<|im_end|>\n");
        cb_mark(b, CHAT_B_SYSTEM_END, -1, 0);
    } else if (first_is_system) {
        if ((rc = qwen35_content(&ms[0], 0, &s, &len, err))) return rc;
        cb_special(b, "<|im_start|>system\n");
        cb_content(b, s, len);
        cb_special(b, "<|im_end|>\n");
        cb_mark(b, CHAT_B_SYSTEM_END, -1, 0);
    }

    size_t last_query = 0;
    bool have_query = false;
    for (size_t k = n; k-- > 0;) {
        if (ms[k].role_kind != ROLE_USER) continue;
        if ((rc = qwen35_content(&ms[k], k, &s, &len, err))) return rc;
        if (!(starts_with(s, len, "<tool_response>") && ends_with(s, len, "</tool_response>"))) {
            last_query = k;
            have_query = true;
            break;
        }
    }
    if (!have_query)
        return wk_fail(err, WK_EINVAL, "messages: no user query found (every user message is a tool response)");

    for (size_t i = 0; i < n; i++) {
        chat_msg *m = &ms[i];
        if ((rc = qwen35_content(m, i, &s, &len, err))) return rc;
        switch (m->role_kind) {
        case ROLE_SYSTEM:
            if (i == 0) break;
            /* The template refuses a later system message; a validated
             * conversation (an agent's mid-conversation instructions) gets
             * a system turn in place, as Qwen3's template renders it. */
            if (c->exact) return wk_fail(err, WK_EINVAL, "messages[%zu]: system message must be at the beginning", i);
            cb_mark(b, CHAT_B_SYSTEM_START, (int)i, 0);
            cb_special(b, "<|im_start|>system\n");
            cb_content(b, s, len);
            cb_special(b, "<|im_end|>\n");
            break;
        case ROLE_USER:
            cb_mark(b, CHAT_B_USER_START, (int)i, i == last_query ? CHAT_BFLAG_LAST_USER : 0);
            cb_special(b, "<|im_start|>user\n");
            cb_content(b, s, len);
            cb_special(b, "<|im_end|>\n");
            break;
        case ROLE_ASSISTANT: {
            const char *r = "";
            size_t rb = 0, re = 0, cb_ = 0, ce = len;
            if (m->reasoning_state == VAL_STRING) {
                r = m->reasoning;
                re = m->reasoning_len;
            } else if (split_think(s, len, &cb_, &ce, &rb, &re)) {
                r = s;
            }
            chat_strip_space(r, &rb, &re, true, true);
            cb_mark(b, CHAT_B_ASSISTANT_START, (int)i, 0);
            if (i > last_query && re > rb) {
                cb_special(b, "<|im_start|>assistant\n<think>\n");
                cb_content(b, r + rb, re - rb);
                cb_special(b, "\n</think>\n\n");
            } else {
                cb_special(b, "<|im_start|>assistant\n");
            }
            cb_content(b, s + cb_, ce - cb_);
            size_t tb = cb_, te = ce;
            chat_strip_space(s, &tb, &te, true, true);
            if (chat_msg_n_calls(m) && (rc = qwen35_tool_calls(m, i, te > tb, b, err))) return rc;
            cb_special(b, "<|im_end|>\n");
            break;
        }
        case ROLE_TOOL: {
            /* the template opens the user turn only after a non-tool message */
            bool run_start = i == 0 || ms[i - 1].role_kind != ROLE_TOOL;
            if (run_start) cb_mark(b, CHAT_B_TOOL_RESPONSE_START, (int)i, 0);
            if (i > 0 && ms[i - 1].role_kind != ROLE_TOOL) cb_special(b, "<|im_start|>user");
            cb_special(b, "\n<tool_response>\n");
            cb_content(b, s, len);
            cb_special(b, "\n</tool_response>");
            if (i == n - 1 || ms[i + 1].role_kind != ROLE_TOOL) cb_special(b, "<|im_end|>\n");
            break;
        }
        default:
            return wk_fail(err, WK_EINVAL, "messages[%zu]: unexpected role '%s'", i, m->role);
        }
    }

    b->p->thinking_enabled = c->enable_thinking != 0;
    b->p->reasoning_open = false;
    if (c->add_generation_prompt) {
        cb_mark(b, CHAT_B_GENERATION_START, -1, 0);
        cb_special(b, "<|im_start|>assistant\n");
        if (c->enable_thinking == 0) {
            cb_special(b, "<think>\n\n</think>\n\n");
        } else {
            cb_special(b, "<think>\n");
            b->p->reasoning_open = true;
        }
    }
    return 0;
}
