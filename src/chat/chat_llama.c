/* Llama 3 / 3.1 and generic ChatML templates, written out as rules.
 *
 * Llama 3 (golden/templates/llama3_1.jinja): BOS before the first message,
 * then <|start_header_id|>ROLE<|end_header_id|>\n\n + trimmed content +
 * <|eot_id|> per message; tools, tool calls, reasoning and kwargs are not
 * part of this template. Generic ChatML: <|im_start|>ROLE\nCONTENT<|im_end|>\n. */
#include <string.h>

#include "chat/chat_internal.h"

/* Where a message starts, as a boundary kind (first_system: message 0 is a
 * system turn and is followed by system_end instead). */
static void mark_message_start(chat_builder *b, const chat_view *c, size_t i)
{
    const chat_msg *m = &c->msgs[i];
    switch (m->role_kind) {
    case ROLE_USER: cb_mark(b, CHAT_B_USER_START, (int)i, 0); break;
    case ROLE_ASSISTANT: cb_mark(b, CHAT_B_ASSISTANT_START, (int)i, 0); break;
    case ROLE_SYSTEM:
        if (i > 0) cb_mark(b, CHAT_B_SYSTEM_START, (int)i, 0);
        break;
    case ROLE_TOOL:
        if (i == 0 || c->msgs[i - 1].role_kind != ROLE_TOOL) cb_mark(b, CHAT_B_TOOL_RESPONSE_START, (int)i, 0);
        break;
    default: break;
    }
}

/* Flags the user_start of the last user message. */
static void flag_last_user(chat_builder *b)
{
    chat_prompt *p = b->p;
    for (size_t k = p->n_bounds; k-- > 0;) {
        if (p->bounds[k].kind == CHAT_B_USER_START) {
            p->bounds[k].flags |= CHAT_BFLAG_LAST_USER;
            return;
        }
    }
}

/* Role names the template itself would write are template text; anything
 * else came from the request. */
static void emit_role(chat_builder *b, const chat_msg *m)
{
    if (m->role_kind != ROLE_OTHER) cb_special(b, m->role);
    else cb_content(b, m->role, m->role_len);
}

int chat_render_llama3(const chat_template *t, const chat_view *c, chat_builder *b, wk_error *err)
{
    for (size_t i = 0; i < c->n; i++) {
        const chat_msg *m = &c->msgs[i];
        if (i == 0) cb_special(b, t->bos_token);
        mark_message_start(b, c, i);
        cb_special(b, "<|start_header_id|>");
        emit_role(b, m);
        cb_special(b, "<|end_header_id|>\n\n");
        /* content | trim: Python str() of the value, then str.strip() */
        chat_str tmp = {0};
        int rc = 0;
        if (m->content_state == VAL_STRING) rc = cs_append(&tmp, m->content, m->content_len);
        else if (m->content_state != VAL_MISSING) rc = chat_pystr(&tmp, m->content_json);
        if (rc) {
            cs_free(&tmp);
            return wk_fail(err, WK_ENOMEM, "chat render: out of memory");
        }
        size_t lo = 0, hi = tmp.len;
        if (tmp.data) chat_strip_space(tmp.data, &lo, &hi, true, true);
        if (hi > lo) cb_content(b, tmp.data + lo, hi - lo);
        cs_free(&tmp);
        cb_special(b, "<|eot_id|>");
        if (i == 0 && m->role_kind == ROLE_SYSTEM) cb_mark(b, CHAT_B_SYSTEM_END, -1, 0);
    }
    flag_last_user(b);
    b->p->thinking_enabled = false;
    b->p->reasoning_open = false;
    if (c->add_generation_prompt) {
        cb_mark(b, CHAT_B_GENERATION_START, -1, 0);
        cb_special(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    }
    return 0;
}

int chat_render_chatml(const chat_template *t, const chat_view *c, chat_builder *b, wk_error *err)
{
    (void)t;
    for (size_t i = 0; i < c->n; i++) {
        const chat_msg *m = &c->msgs[i];
        if (m->content_state != VAL_STRING)
            return wk_fail(err, WK_EINVAL, "messages[%zu] (%s): content must be a string", i, m->role);
        mark_message_start(b, c, i);
        cb_special(b, "<|im_start|>");
        emit_role(b, m);
        cb_special(b, "\n");
        cb_content(b, m->content, m->content_len);
        cb_special(b, "<|im_end|>\n");
        if (i == 0 && m->role_kind == ROLE_SYSTEM) cb_mark(b, CHAT_B_SYSTEM_END, -1, 0);
    }
    flag_last_user(b);
    b->p->thinking_enabled = false;
    b->p->reasoning_open = false;
    if (c->add_generation_prompt) {
        cb_mark(b, CHAT_B_GENERATION_START, -1, 0);
        cb_special(b, "<|im_start|>assistant\n");
    }
    return 0;
}
