/* Anthropic Messages responses: the message object, its event stream
 * (message_start, ping, content_block_start / delta / stop per thinking,
 * text and tool_use block, message_delta with stop reason and usage,
 * message_stop), and its error shape. */
#include <stdio.h>
#include <string.h>

#include "server/anthropic.h"
#include "server/api.h"

const char *srv_anthropic_error_type(int status)
{
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

static json_t *anthropic_error_json(const srv_error *e, const char *type)
{
    (void)type; /* Anthropic's types follow the status */
    json_t *inner = json_object();
    json_object_set_new(inner, "type", json_string(srv_anthropic_error_type(e->status)));
    json_object_set_new(inner, "message", srv_json_text(e->message, (size_t)-1));
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string("error"));
    json_object_set_new(o, "error", inner);
    return o;
}

static const char *stop_reason(const srv_exchange *x, const eng_event *done)
{
    if (!strcmp(done->finish_reason, "length")) return "max_tokens";
    if (!strcmp(done->finish_reason, "tool_calls")) return "tool_use";
    return srv_exchange_stop(x, done) ? "stop_sequence" : "end_turn";
}

static json_t *usage_json(const eng_counters *c)
{
    json_t *u = json_object();
    /* Anthropic counts cache reads apart: input + cache_read = the whole prompt */
    json_object_set_new(u, "input_tokens", json_integer(c->prompt_tokens - c->cached_tokens));
    json_object_set_new(u, "cache_creation_input_tokens", json_integer(0));
    json_object_set_new(u, "cache_read_input_tokens", json_integer(c->cached_tokens));
    json_object_set_new(u, "output_tokens", json_integer(c->completion_tokens));
    return u;
}

/* "call_XYZ" → "toolu_XYZ": Anthropic's spelling of a tool-use id. */
static json_t *tool_use_id(const char *call_id)
{
    char id[48];
    snprintf(id, sizeof id, "toolu_%s", strncmp(call_id, "call_", 5) ? call_id : call_id + 5);
    return json_string(id);
}

static json_t *message_envelope(const srv_exchange *x)
{
    json_t *m = json_object();
    json_object_set_new(m, "id", json_string(x->meta.id));
    json_object_set_new(m, "type", json_string("message"));
    json_object_set_new(m, "role", json_string("assistant"));
    json_object_set_new(m, "model", srv_json_text(x->meta.model, (size_t)-1));
    return m;
}

static json_t *anthropic_final(srv_exchange *x, const eng_event *done)
{
    json_t *m = message_envelope(x);
    json_t *content = json_array();
    if (x->acc.reasoning.len) {
        json_t *b = json_pack("{s:s, s:o, s:s}", "type", "thinking", "thinking",
                              srv_json_text(x->acc.reasoning.data, x->acc.reasoning.len), "signature", "");
        json_array_append_new(content, b);
    }
    size_t n_calls = json_array_size(x->acc.tool_calls);
    if (x->acc.content.len || (!n_calls && !x->acc.reasoning.len))
        json_array_append_new(content, json_pack("{s:s, s:o}", "type", "text", "text",
                                                 srv_json_text(x->acc.content.data, x->acc.content.len)));
    for (size_t i = 0; i < n_calls; i++) {
        const json_t *call = json_array_get(x->acc.tool_calls, i);
        const json_t *fn = json_object_get(call, "function");
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        wk_error werr = {0};
        json_t *input = args ? chat_json_loads(args, strlen(args), &werr) : NULL;
        if (!json_is_object(input)) {
            json_decref(input);
            input = json_object();
        }
        json_t *b = json_object();
        json_object_set_new(b, "type", json_string("tool_use"));
        json_object_set_new(b, "id", tool_use_id(json_string_value(json_object_get(call, "id"))));
        json_object_set(b, "name", json_object_get(fn, "name"));
        json_object_set_new(b, "input", input);
        json_array_append_new(content, b);
    }
    json_object_set_new(m, "content", content);
    json_object_set_new(m, "stop_reason", json_string(stop_reason(x, done)));
    const char *stop = srv_exchange_stop(x, done);
    json_object_set_new(m, "stop_sequence", stop ? json_string(stop) : json_null());
    json_object_set_new(m, "usage", usage_json(&done->counters));
    json_object_set_new(m, "timings", eng_counters_timings_json(&done->counters));
    return m;
}

static void event(srv_buf *out, const char *name, json_t *data)
{
    if (data) srv_sse_named(out, name, data);
    json_decref(data);
}

static void anthropic_start(srv_exchange *x, srv_buf *out)
{
    json_t *m = message_envelope(x);
    json_object_set_new(m, "content", json_array());
    json_object_set_new(m, "stop_reason", json_null());
    json_object_set_new(m, "stop_sequence", json_null());
    /* the cached part is known only at the end: message_delta has the split */
    json_object_set_new(m, "usage", json_pack("{s:i, s:i, s:i, s:i}", "input_tokens", x->prompt_tokens,
                                              "cache_creation_input_tokens", 0, "cache_read_input_tokens", 0,
                                              "output_tokens", 0));
    event(out, "message_start", json_pack("{s:s, s:o}", "type", "message_start", "message", m));
    event(out, "ping", json_pack("{s:s}", "type", "ping"));
}

static void close_block(srv_exchange *x, srv_buf *out)
{
    if (x->block_kind < 0) return;
    event(out, "content_block_stop", json_pack("{s:s, s:i}", "type", "content_block_stop", "index", x->block_index - 1));
    x->block_kind = -1;
}

static void open_block(srv_exchange *x, int kind, json_t *block, srv_buf *out)
{
    close_block(x, out);
    event(out, "content_block_start",
          json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index", x->block_index, "content_block", block));
    x->block_kind = kind;
    x->block_index++;
}

static void delta(srv_exchange *x, json_t *d, srv_buf *out)
{
    event(out, "content_block_delta",
          json_pack("{s:s, s:i, s:o}", "type", "content_block_delta", "index", x->block_index - 1, "delta", d));
}

static void anthropic_delta(srv_exchange *x, const eng_event *ev, srv_buf *out)
{
    const char *t = ev->text ? ev->text : "";
    switch (ev->delta_kind) {
    case ENG_DELTA_REASONING:
        if (!*t) return;
        if (x->block_kind != ENG_DELTA_REASONING)
            open_block(x, ENG_DELTA_REASONING, json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", ""),
                       out);
        delta(x, json_pack("{s:s, s:o}", "type", "thinking_delta", "thinking", srv_json_text(t, (size_t)-1)), out);
        break;
    case ENG_DELTA_CONTENT:
        if (!*t) return;
        if (x->block_kind != ENG_DELTA_CONTENT)
            open_block(x, ENG_DELTA_CONTENT, json_pack("{s:s, s:s}", "type", "text", "text", ""), out);
        delta(x, json_pack("{s:s, s:o}", "type", "text_delta", "text", srv_json_text(t, (size_t)-1)), out);
        break;
    case ENG_DELTA_TOOL_CALL: {
        json_t *b = json_object();
        json_object_set_new(b, "type", json_string("tool_use"));
        json_object_set_new(b, "id", tool_use_id(ev->tool_id));
        json_object_set_new(b, "name", srv_json_text(ev->tool_name, (size_t)-1));
        json_object_set_new(b, "input", json_object());
        open_block(x, ENG_DELTA_TOOL_CALL, b, out);
        break;
    }
    case ENG_DELTA_TOOL_ARGS:
        if (x->block_kind != ENG_DELTA_TOOL_CALL || !*t) return;
        delta(x, json_pack("{s:s, s:o}", "type", "input_json_delta", "partial_json", srv_json_text(t, (size_t)-1)), out);
        break;
    default: break;
    }
}

static void anthropic_done(srv_exchange *x, const eng_event *done, srv_buf *out)
{
    close_block(x, out);
    const char *stop = srv_exchange_stop(x, done);
    json_t *d = json_pack("{s:s, s:o}", "stop_reason", stop_reason(x, done), "stop_sequence",
                          stop ? json_string(stop) : json_null());
    json_t *md = json_pack("{s:s, s:o, s:o}", "type", "message_delta", "delta", d, "usage", usage_json(&done->counters));
    if (md) json_object_set_new(md, "timings", eng_counters_timings_json(&done->counters));
    event(out, "message_delta", md);
    event(out, "message_stop", json_pack("{s:s}", "type", "message_stop"));
}

static void anthropic_stream_error(srv_exchange *x, const srv_error *e, const char *type, srv_buf *out)
{
    (void)x;
    event(out, "error", anthropic_error_json(e, type));
}

static void anthropic_keepalive(srv_exchange *x, srv_buf *out)
{
    (void)x;
    event(out, "ping", json_pack("{s:s}", "type", "ping"));
}

const srv_api srv_api_messages = {
    .route = "messages",
    .chat = true,
    .parse = srv_anthropic_parse,
    .error_json = anthropic_error_json,
    .stream_start = anthropic_start,
    .stream_delta = anthropic_delta,
    .stream_done = anthropic_done,
    .stream_error = anthropic_stream_error,
    .keepalive = anthropic_keepalive,
    .final_json = anthropic_final,
};
