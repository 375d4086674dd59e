/* libFuzzer harness for request parsing: any body, for any of the APIs
 * (first byte: 0 chat completions, 1 completions, 2 Anthropic messages,
 * 3 Responses; the rest is the body), is either refused with a one-line
 * 4xx/5xx error, or becomes an eng_request whose validated conversation
 * keeps its invariants and renders with every template (or is refused by a
 * template with a message). Never a crash, leak or sanitizer report. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "chat/chat_conv.h"
#include "server/anthropic.h"
#include "server/api.h"
#include "server/openai_request.h"
#include "server/responses.h"

static void one_line(const char *msg)
{
    if (msg[0] == '\0' || strchr(msg, '\n')) __builtin_trap();
}

static void check_conv(const chat_conv *c)
{
    if (c->n == 0) __builtin_trap();
    for (size_t i = 0; i < c->n; i++) {
        const chat_message *m = &c->msgs[i];
        if (!m->content || strlen(m->content) > m->content_len) __builtin_trap();
        if (m->role > CHAT_ROLE_TOOL) __builtin_trap();
        if ((m->n_calls || m->reasoning) && m->role != CHAT_ROLE_ASSISTANT) __builtin_trap();
        for (size_t k = 0; k < m->n_calls; k++)
            if (!m->calls[k].name[0] || !json_is_object(m->calls[k].args)) __builtin_trap();
    }
    if (c->tools && json_array_size(c->tools) == 0) __builtin_trap();
    static const char *const names[] = {"qwen3", "qwen35", "llama3", "chatml"};
    for (int t = 0; t < 4; t++) {
        chat_template tmpl;
        wk_error err = {0};
        if (chat_template_by_name(&tmpl, names[t], &err)) __builtin_trap();
        chat_prompt p;
        if (chat_render_conv(&tmpl, c, &p, &err) != 0) {
            one_line(err.msg);
            continue;
        }
        size_t at = 0;
        for (size_t s = 0; s < p.n_segs; s++) {
            if (p.segs[s].offset != at) __builtin_trap();
            at += p.segs[s].len;
        }
        if (at != p.len || p.text[p.len] != '\0') __builtin_trap();
        for (size_t b = 0; b < p.n_bounds; b++)
            if (p.bounds[b].byte_offset > p.len || (b && p.bounds[b].byte_offset < p.bounds[b - 1].byte_offset)) __builtin_trap();
        chat_prompt_free(&p);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int api = data[0] % 4;
    srv_limits lim;
    srv_limits_default(&lim);
    lim.max_body_bytes = 1 << 20;
    lim.n_ctx = 4096;
    json_t *root = NULL;
    srv_error err;
    memset(&err, 0, sizeof err);
    if (srv_parse_body((const char *)data + 1, size - 1, &lim, &root, &err)) {
        one_line(err.message);
        return 0;
    }
    static const char *const aliases[] = {"alias"};
    srv_model_names names = {.id = "tiny", .aliases = aliases, .n_aliases = 1, .strict = data[0] & 4};
    eng_request req;
    srv_exchange x;
    srv_exchange_init(&x);
    int rc;
    switch (api) {
    case 0: rc = srv_parse_chat(root, &lim, &names, &req, &x.ro, &err); break;
    case 1: rc = srv_parse_completion(root, &lim, &names, &req, &x.ro, &err); break;
    case 2: rc = srv_anthropic_parse(root, &lim, &names, &req, &x, &err); break;
    default: rc = srv_responses_parse(root, &lim, &names, &req, &x, &err); break;
    }
    json_decref(root);
    if (rc) {
        if (err.status < 400 || err.status > 599) __builtin_trap();
        one_line(err.message);
    } else {
        if (api != 1 && !req.chat) __builtin_trap();
        if (req.chat) check_conv(req.chat);
        if (req.tool_choice == ENG_TOOLS_FUNCTION && !req.tool_choice_name) __builtin_trap();
        if (req.response_format == ENG_FORMAT_JSON_SCHEMA && !json_is_object(req.json_schema)) __builtin_trap();
        eng_request_clear(&req);
    }
    srv_exchange_free(&x);
    return 0;
}
