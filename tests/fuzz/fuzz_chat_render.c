/* libFuzzer harness for chat rendering: a validated conversation, built
 * from the input with the chat_conv builder (so every message, call, tool
 * and option the builder accepts can occur, with any bytes in the text), is
 * rendered with every template; and when the input is JSON, its messages
 * are rendered in exact (Jinja) mode too. Every render either succeeds with
 * a well-formed prompt (segments tile the text, boundaries sorted inside
 * it) or fails with a one-line message. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "chat/chat_conv.h"

typedef struct reader {
    const uint8_t *p;
    size_t n;
} reader;

static unsigned take_byte(reader *r)
{
    if (!r->n) return 0;
    r->n--;
    return *r->p++;
}

/* A string of up to 63 bytes: a length byte, then the bytes. */
static size_t take_text(reader *r, char *out)
{
    size_t len = take_byte(r) & 63;
    if (len > r->n) len = r->n;
    memcpy(out, r->p, len);
    out[len] = '\0';
    r->p += len;
    r->n -= len;
    return len;
}

static void check_prompt(const chat_prompt *p)
{
    size_t at = 0;
    for (size_t s = 0; s < p->n_segs; s++) {
        if (p->segs[s].offset != at || p->segs[s].len == 0) __builtin_trap();
        at += p->segs[s].len;
    }
    if (at != p->len || p->text[p->len] != '\0') __builtin_trap();
    for (size_t b = 0; b < p->n_bounds; b++)
        if (p->bounds[b].byte_offset > p->len || (b && p->bounds[b].byte_offset < p->bounds[b - 1].byte_offset))
            __builtin_trap();
}

static void render_all(const chat_conv *c, const json_t *messages, const json_t *tools)
{
    static const char *const names[] = {"qwen3", "qwen35", "llama3", "chatml"};
    for (int t = 0; t < 4; t++) {
        chat_template tmpl;
        wk_error err = {0};
        if (chat_template_by_name(&tmpl, names[t], &err)) __builtin_trap();
        chat_prompt p;
        int rc = c ? chat_render_conv(&tmpl, c, &p, &err) : 0;
        if (c && rc == 0) {
            check_prompt(&p);
            chat_prompt_free(&p);
        } else if (c && (!err.msg[0] || strchr(err.msg, '\n'))) {
            __builtin_trap();
        }
        if (!messages) continue;
        chat_options opt;
        chat_options_default(&opt);
        opt.normalize = false;
        if (chat_render(&tmpl, messages, tools, &opt, &p, &err) == 0) {
            check_prompt(&p);
            chat_prompt_free(&p);
        } else if (!err.msg[0]) {
            __builtin_trap();
        }
    }
}

/* Builds a conversation from the bytes: each step is an opcode and its
 * operands. Builder refusals are fine (they are the rules); the
 * conversation as it stands is rendered at the end. */
static void from_ops(reader *r)
{
    chat_conv c;
    chat_conv_init(&c);
    wk_error err = {0};
    char a[64], b[64];
    for (int step = 0; step < 64 && r->n; step++) {
        unsigned op = take_byte(r);
        switch (op % 8) {
        case 0: case 1: {
            size_t n = take_text(r, a);
            chat_conv_add(&c, (chat_role)((op >> 3) % 4), a, n, &err);
            break;
        }
        case 2: {
            size_t n = take_text(r, a);
            chat_conv_append(&c, a, n, &err);
            break;
        }
        case 3: {
            size_t n = take_text(r, a);
            chat_conv_add_reasoning(&c, a, n, "x", &err);
            break;
        }
        case 4: {
            take_text(r, a);
            size_t n = take_text(r, b);
            json_t *args = (op >> 3) & 1 ? json_stringn(b, n) : json_pack("{s:s}", "k", "v");
            chat_conv_add_call(&c, (op >> 4) & 1 ? "id" : NULL, a, args, "n", "a", &err);
            json_decref(args);
            break;
        }
        case 5:
            take_text(r, a);
            chat_conv_set_tool_call_id(&c, a, &err);
            break;
        case 6: {
            take_text(r, a);
            json_t *params = json_pack("{s:s, s:{s:{s:s}}}", "type", "object", "properties", "p", "type",
                                       (op >> 3) & 1 ? "string" : "integer");
            chat_conv_add_tool(&c, a, NULL, params, "tools[0]", &err);
            json_decref(params);
            break;
        }
        default:
            c.add_generation_prompt = (op >> 3) & 1;
            c.enable_thinking = (int)((op >> 4) % 3) - 1;
        }
    }
    if (chat_conv_finish(&c, "messages", &err) == 0) render_all(&c, NULL, NULL);
    chat_conv_free(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size && (data[0] == '{' || data[0] == '[')) {
        wk_error err = {0};
        json_t *root = chat_json_loads((const char *)data, size, &err);
        if (!root) return 0;
        const json_t *messages = json_is_array(root) ? root : json_object_get(root, "messages");
        const json_t *tools = json_object_get(root, "tools");
        chat_conv c;
        bool ok = json_is_object(root) && chat_conv_from_openai(&c, root, &err) == 0;
        render_all(ok ? &c : NULL, messages, json_is_array(tools) ? tools : NULL);
        if (ok) chat_conv_free(&c);
        json_decref(root);
        return 0;
    }
    reader r = {data, size};
    from_ops(&r);
    return 0;
}
