/* Responses API output: the output items built from the engine's deltas as
 * they come (a reasoning item, a message with one output_text part, a
 * function_call per call), the same items whether streamed or not, the
 * response object, and the event stream around them. */
#include <stdio.h>
#include <string.h>

#include "server/responses.h"

/* Item ids: the response id's tail + the item's index, so the items of one
 * response have distinct, stable ids in every event and in the final object. */
static void item_id(const srv_exchange *x, const char *prefix, int index, char *out, size_t cap)
{
    const char *tail = strchr(x->meta.id, '_');
    snprintf(out, cap, "%s_%s_%d", prefix, tail ? tail + 1 : x->meta.id, index);
}

static void emit(srv_exchange *x, srv_buf *out, const char *type, json_t *ev)
{
    if (!ev) return;
    if (out) {
        json_object_set_new(ev, "type", json_string(type));
        json_object_set_new(ev, "sequence_number", json_integer(x->seq++));
        srv_sse_named(out, type, ev);
    }
    json_decref(ev);
}

static json_t *open_item(srv_exchange *x) { return json_array_get(x->items, (size_t)x->item_index); }

/* The text of the open item's one part (message / reasoning) or its arguments. */
static const char *item_text(json_t *item, const char **key_out)
{
    const char *type = json_string_value(json_object_get(item, "type"));
    if (type && !strcmp(type, "function_call")) {
        *key_out = "arguments";
        return json_string_value(json_object_get(item, "arguments"));
    }
    *key_out = "text";
    return json_string_value(json_object_get(json_array_get(json_object_get(item, "content"), 0), "text"));
}

static void append_text(json_t *item, const char *t)
{
    const char *key;
    const char *old = item_text(item, &key);
    size_t a = old ? strlen(old) : 0, b = strlen(t);
    srv_buf buf = {0};
    srv_buf_append(&buf, old ? old : "", a);
    srv_buf_append(&buf, t, b);
    json_t *holder = !strcmp(key, "arguments") ? item : json_array_get(json_object_get(item, "content"), 0);
    json_object_set_new(holder, key, srv_json_text(buf.data, buf.len));
    srv_buf_free(&buf);
}

static void close_item(srv_exchange *x, srv_buf *out)
{
    if (x->item_kind < 0) return;
    json_t *item = open_item(x);
    json_object_set_new(item, "status", json_string("completed"));
    const char *key;
    const char *text = item_text(item, &key);
    int idx = x->item_index;
    if (x->item_kind == ENG_DELTA_TOOL_CALL) {
        emit(x, out, "response.function_call_arguments.done",
             json_pack("{s:s, s:i, s:s, s:O}", "item_id", x->item_id, "output_index", idx, "arguments", text ? text : "{}",
                       "name", json_object_get(item, "name")));
    } else {
        bool reasoning = x->item_kind == ENG_DELTA_REASONING;
        emit(x, out, reasoning ? "response.reasoning_text.done" : "response.output_text.done",
             json_pack("{s:s, s:i, s:i, s:s}", "item_id", x->item_id, "output_index", idx, "content_index", 0, "text",
                       text ? text : ""));
        emit(x, out, "response.content_part.done",
             json_pack("{s:s, s:i, s:i, s:O}", "item_id", x->item_id, "output_index", idx, "content_index", 0, "part",
                       json_array_get(json_object_get(item, "content"), 0)));
    }
    emit(x, out, "response.output_item.done", json_pack("{s:i, s:O}", "output_index", idx, "item", item));
    x->item_kind = -1;
}

static void start_item(srv_exchange *x, int kind, json_t *item, srv_buf *out)
{
    close_item(x, out);
    if (!x->items) x->items = json_array();
    x->item_index = (int)json_array_size(x->items);
    const char *prefix = kind == ENG_DELTA_TOOL_CALL ? "fc" : kind == ENG_DELTA_REASONING ? "rs" : "msg";
    item_id(x, prefix, x->item_index, x->item_id, sizeof x->item_id);
    json_object_set_new(item, "id", json_string(x->item_id));
    json_object_set_new(item, "status", json_string("in_progress"));
    json_array_append_new(x->items, item);
    x->item_kind = kind;
    /* the added event shows the item as it starts: empty */
    json_t *shown = json_deep_copy(item);
    emit(x, out, "response.output_item.added", json_pack("{s:i, s:o}", "output_index", x->item_index, "item", shown));
    if (kind != ENG_DELTA_TOOL_CALL)
        emit(x, out, "response.content_part.added",
             json_pack("{s:s, s:i, s:i, s:O}", "item_id", x->item_id, "output_index", x->item_index, "content_index", 0,
                       "part", json_array_get(json_object_get(item, "content"), 0)));
}

static json_t *text_part(bool reasoning)
{
    if (reasoning) return json_pack("{s:s, s:s}", "type", "reasoning_text", "text", "");
    return json_pack("{s:s, s:s, s:[], s:[]}", "type", "output_text", "text", "", "annotations", "logprobs");
}

/* A tool call's name as the client knows it: a flattened namespaced name
 * becomes name + namespace. */
static void set_call_name(const srv_exchange *x, json_t *item, const char *flat)
{
    const char *ns = json_string_value(json_object_get(x->namespaces, flat));
    if (ns && strlen(flat) > strlen(ns) + strlen(SRV_NAMESPACE_SEP)) {
        json_object_set_new(item, "name", srv_json_text(flat + strlen(ns) + strlen(SRV_NAMESPACE_SEP), (size_t)-1));
        json_object_set_new(item, "namespace", json_string(ns));
    } else {
        json_object_set_new(item, "name", srv_json_text(flat, (size_t)-1));
    }
}

static void items_update(srv_exchange *x, const eng_event *ev, srv_buf *out)
{
    const char *t = ev->text ? ev->text : "";
    switch (ev->delta_kind) {
    case ENG_DELTA_REASONING:
    case ENG_DELTA_CONTENT: {
        if (!*t) return;
        bool reasoning = ev->delta_kind == ENG_DELTA_REASONING;
        if (x->item_kind != ev->delta_kind) {
            json_t *item = reasoning ? json_pack("{s:s, s:[], s:[o]}", "type", "reasoning", "summary", "content", text_part(true))
                                     : json_pack("{s:s, s:s, s:[o]}", "type", "message", "role", "assistant", "content",
                                                 text_part(false));
            if (!item) return;
            start_item(x, ev->delta_kind, item, out);
        }
        append_text(open_item(x), t);
        json_t *d = json_pack("{s:s, s:i, s:i, s:o}", "item_id", x->item_id, "output_index", x->item_index, "content_index",
                              0, "delta", srv_json_text(t, (size_t)-1));
        if (d && !reasoning) json_object_set_new(d, "logprobs", json_array());
        emit(x, out, reasoning ? "response.reasoning_text.delta" : "response.output_text.delta", d);
        break;
    }
    case ENG_DELTA_TOOL_CALL: {
        json_t *item = json_pack("{s:s, s:s, s:s}", "type", "function_call", "call_id", ev->tool_id, "arguments", "");
        if (!item) return;
        set_call_name(x, item, ev->tool_name);
        start_item(x, ENG_DELTA_TOOL_CALL, item, out);
        break;
    }
    case ENG_DELTA_TOOL_ARGS:
        if (x->item_kind != ENG_DELTA_TOOL_CALL || !*t) return;
        append_text(open_item(x), t);
        emit(x, out, "response.function_call_arguments.delta",
             json_pack("{s:s, s:i, s:o}", "item_id", x->item_id, "output_index", x->item_index, "delta",
                       srv_json_text(t, (size_t)-1)));
        break;
    default: break;
    }
}

static void collect_delta(srv_exchange *x, const eng_event *ev) { items_update(x, ev, NULL); }
static void stream_delta(srv_exchange *x, const eng_event *ev, srv_buf *out) { items_update(x, ev, out); }

static json_t *usage_json(const eng_counters *c)
{
    return json_pack("{s:i, s:{s:i}, s:i, s:{s:i}, s:i}", "input_tokens", c->prompt_tokens, "input_tokens_details",
                     "cached_tokens", c->cached_tokens, "output_tokens", c->completion_tokens, "output_tokens_details",
                     "reasoning_tokens", c->reasoning_tokens, "total_tokens", c->prompt_tokens + c->completion_tokens);
}

/* The response object; done NULL: still in progress. */
static json_t *response_object(const srv_exchange *x, const eng_event *done)
{
    json_t *r = json_object();
    if (!r) return NULL;
    json_object_set_new(r, "id", json_string(x->meta.id));
    json_object_set_new(r, "object", json_string("response"));
    json_object_set_new(r, "created_at", json_integer(x->meta.created));
    bool incomplete = done && !strcmp(done->finish_reason, "length");
    json_object_set_new(r, "status", json_string(!done ? "in_progress" : incomplete ? "incomplete" : "completed"));
    json_object_set_new(r, "incomplete_details",
                        incomplete ? json_pack("{s:s}", "reason", "max_output_tokens") : json_null());
    json_object_set_new(r, "error", json_null());
    json_object_set_new(r, "model", srv_json_text(x->meta.model, (size_t)-1));
    json_object_set_new(r, "output", done && x->items ? json_deep_copy(x->items) : json_array());
    json_object_set_new(r, "previous_response_id", json_null());
    if (x->echo) json_object_update(r, x->echo);
    json_object_set_new(r, "usage", done ? usage_json(&done->counters) : json_null());
    if (done) json_object_set_new(r, "timings", eng_counters_timings_json(&done->counters));
    return r;
}

static void stream_start(srv_exchange *x, srv_buf *out)
{
    emit(x, out, "response.created", json_pack("{s:o}", "response", response_object(x, NULL)));
    emit(x, out, "response.in_progress", json_pack("{s:o}", "response", response_object(x, NULL)));
}

/* An answer with nothing in it is still one (empty) message, as clients
 * expect an output item to end a turn with. */
static void ensure_message(srv_exchange *x, srv_buf *out)
{
    if (json_array_size(x->items) > 0) return;
    json_t *item = json_pack("{s:s, s:s, s:[o]}", "type", "message", "role", "assistant", "content", text_part(false));
    if (item) start_item(x, ENG_DELTA_CONTENT, item, out);
}

static void stream_done(srv_exchange *x, const eng_event *done, srv_buf *out)
{
    ensure_message(x, out);
    close_item(x, out);
    bool incomplete = !strcmp(done->finish_reason, "length");
    emit(x, out, incomplete ? "response.incomplete" : "response.completed",
         json_pack("{s:o}", "response", response_object(x, done)));
}

static void stream_error(srv_exchange *x, const srv_error *e, const char *type, srv_buf *out)
{
    json_t *r = response_object(x, NULL);
    if (r) {
        json_object_set_new(r, "status", json_string("failed"));
        json_object_set_new(r, "error", json_pack("{s:s, s:o}", "code", e->code[0] ? e->code : type ? type : "server_error",
                                                  "message", srv_json_text(e->message, (size_t)-1)));
    }
    emit(x, out, "response.failed", json_pack("{s:o}", "response", r));
}

static void keepalive(srv_exchange *x, srv_buf *out)
{
    (void)x;
    srv_sse_comment(out, "keep-alive");
}

static json_t *final_json(srv_exchange *x, const eng_event *done)
{
    ensure_message(x, NULL);
    close_item(x, NULL);
    return response_object(x, done);
}

const srv_api srv_api_responses = {
    .route = "responses",
    .chat = true,
    .parse = srv_responses_parse,
    .error_json = srv_error_json,
    .stream_start = stream_start,
    .stream_delta = stream_delta,
    .collect_delta = collect_delta,
    .stream_done = stream_done,
    .stream_error = stream_error,
    .keepalive = keepalive,
    .final_json = final_json,
};
