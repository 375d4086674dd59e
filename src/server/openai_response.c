#include "server/openai_response.h"

#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/os.h"

#define SRV_FINGERPRINT "wick-0.1.0"

void srv_random_alnum(char *out, size_t n)
{
    static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char rnd[64];
    if (n > sizeof rnd) n = sizeof rnd;
    if (wk_random_bytes(rnd, n) != 0) {
        /* Ids only need to be unique, not secret: fall back to time + address. */
        unsigned long long x = (unsigned long long)time(NULL) ^ (unsigned long long)(uintptr_t)out;
        for (size_t i = 0; i < n; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            rnd[i] = (unsigned char)(x >> 33);
        }
    }
    for (size_t i = 0; i < n; i++) out[i] = alnum[rnd[i] % (sizeof alnum - 1)];
    out[n] = '\0';
}

void srv_resp_meta_init(srv_resp_meta *m, const char *id_prefix, bool chat, const char *model)
{
    char tail[25];
    srv_random_alnum(tail, 24);
    snprintf(m->id, sizeof m->id, "%s%s", id_prefix, tail);
    m->created = (long long)time(NULL);
    snprintf(m->model, sizeof m->model, "%s", model ? model : "");
    m->chat = chat;
}

void srv_accum_add(srv_accum *a, const eng_event *ev)
{
    if (ev->type != ENG_EV_DELTA) return;
    const char *t = ev->text ? ev->text : "";
    switch (ev->delta_kind) {
    case ENG_DELTA_CONTENT: srv_buf_append(&a->content, t, strlen(t)); break;
    case ENG_DELTA_REASONING: srv_buf_append(&a->reasoning, t, strlen(t)); break;
    case ENG_DELTA_TOOL_CALL: {
        if (!a->tool_calls) a->tool_calls = json_array();
        json_t *fn = json_object();
        json_object_set_new(fn, "name", srv_json_text(ev->tool_name, (size_t)-1));
        json_object_set_new(fn, "arguments", json_string(""));
        json_t *call = json_object();
        json_object_set_new(call, "id", json_string(ev->tool_id));
        json_object_set_new(call, "type", json_string("function"));
        json_object_set_new(call, "function", fn);
        json_array_append_new(a->tool_calls, call);
        break;
    }
    case ENG_DELTA_TOOL_ARGS: {
        json_t *call = a->tool_calls ? json_array_get(a->tool_calls, (size_t)ev->tool_index) : NULL;
        json_t *fn = call ? json_object_get(call, "function") : NULL;
        if (!fn) break;
        const char *old = json_string_value(json_object_get(fn, "arguments"));
        srv_buf b = {0};
        srv_buf_append(&b, old ? old : "", old ? strlen(old) : 0);
        srv_buf_append(&b, t, strlen(t));
        json_object_set_new(fn, "arguments", srv_json_text(b.data, b.len));
        srv_buf_free(&b);
        break;
    }
    }
}

void srv_accum_free(srv_accum *a)
{
    srv_buf_free(&a->content);
    srv_buf_free(&a->reasoning);
    json_decref(a->tool_calls);
    memset(a, 0, sizeof *a);
}

static json_t *envelope(const srv_resp_meta *m, const char *object)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(m->id));
    json_object_set_new(o, "object", json_string(object));
    json_object_set_new(o, "created", json_integer(m->created));
    json_object_set_new(o, "model", srv_json_text(m->model, (size_t)-1));
    json_object_set_new(o, "system_fingerprint", json_string(SRV_FINGERPRINT));
    return o;
}

json_t *srv_completion_json(const srv_resp_meta *m, const srv_accum *a, const char *finish,
                            const eng_counters *c)
{
    json_t *o = envelope(m, m->chat ? "chat.completion" : "text_completion");
    json_t *choice = json_object();
    json_object_set_new(choice, "index", json_integer(0));
    const char *content = a->content.data ? a->content.data : "";
    if (m->chat) {
        json_t *msg = json_object();
        json_object_set_new(msg, "role", json_string("assistant"));
        bool calls = a->tool_calls && json_array_size(a->tool_calls) > 0;
        json_object_set_new(msg, "content",
                            calls && !*content ? json_null() : srv_json_text(content, a->content.len));
        if (a->reasoning.len)
            json_object_set_new(msg, "reasoning_content", srv_json_text(a->reasoning.data, a->reasoning.len));
        if (calls) json_object_set(msg, "tool_calls", a->tool_calls);
        json_object_set_new(msg, "refusal", json_null());
        json_object_set_new(choice, "message", msg);
    } else {
        json_object_set_new(choice, "text", srv_json_text(content, a->content.len));
    }
    json_object_set_new(choice, "logprobs", json_null());
    json_object_set_new(choice, "finish_reason", json_string(finish ? finish : "stop"));
    json_t *choices = json_array();
    json_array_append_new(choices, choice);
    json_object_set_new(o, "choices", choices);
    json_object_set_new(o, "usage", eng_counters_usage_json(c));
    json_object_set_new(o, "timings", eng_counters_timings_json(c));
    return o;
}

static json_t *chunk_with(const srv_resp_meta *m, json_t *delta_or_text, const char *finish)
{
    json_t *o = envelope(m, m->chat ? "chat.completion.chunk" : "text_completion");
    json_t *choice = json_object();
    json_object_set_new(choice, "index", json_integer(0));
    if (m->chat) json_object_set_new(choice, "delta", delta_or_text);
    else json_object_set_new(choice, "text", delta_or_text);
    json_object_set_new(choice, "logprobs", json_null());
    json_object_set_new(choice, "finish_reason", finish ? json_string(finish) : json_null());
    json_t *choices = json_array();
    json_array_append_new(choices, choice);
    json_object_set_new(o, "choices", choices);
    return o;
}

json_t *srv_chunk_role(const srv_resp_meta *m)
{
    json_t *d = json_object();
    json_object_set_new(d, "role", json_string("assistant"));
    json_object_set_new(d, "content", json_string(""));
    return chunk_with(m, d, NULL);
}

json_t *srv_chunk_delta(const srv_resp_meta *m, const eng_event *ev)
{
    if (ev->type != ENG_EV_DELTA) return NULL;
    const char *t = ev->text ? ev->text : "";
    if (!m->chat) {
        if (ev->delta_kind != ENG_DELTA_CONTENT || !*t) return NULL;
        return chunk_with(m, srv_json_text(t, (size_t)-1), NULL);
    }
    json_t *d = json_object();
    switch (ev->delta_kind) {
    case ENG_DELTA_CONTENT:
    case ENG_DELTA_REASONING:
        if (!*t) {
            json_decref(d);
            return NULL;
        }
        json_object_set_new(d, ev->delta_kind == ENG_DELTA_CONTENT ? "content" : "reasoning_content",
                            srv_json_text(t, (size_t)-1));
        break;
    case ENG_DELTA_TOOL_CALL:
    case ENG_DELTA_TOOL_ARGS: {
        json_t *call = json_object();
        json_object_set_new(call, "index", json_integer(ev->tool_index));
        json_t *fn = json_object();
        if (ev->delta_kind == ENG_DELTA_TOOL_CALL) {
            json_object_set_new(call, "id", json_string(ev->tool_id));
            json_object_set_new(call, "type", json_string("function"));
            json_object_set_new(fn, "name", srv_json_text(ev->tool_name, (size_t)-1));
            json_object_set_new(fn, "arguments", json_string(""));
        } else {
            json_object_set_new(fn, "arguments", srv_json_text(t, (size_t)-1));
        }
        json_object_set_new(call, "function", fn);
        json_t *calls = json_array();
        json_array_append_new(calls, call);
        json_object_set_new(d, "tool_calls", calls);
        break;
    }
    default:
        json_decref(d);
        return NULL;
    }
    return chunk_with(m, d, NULL);
}

json_t *srv_chunk_finish(const srv_resp_meta *m, const char *finish, const eng_counters *c)
{
    json_t *o = chunk_with(m, m->chat ? json_object() : json_string(""), finish ? finish : "stop");
    json_object_set_new(o, "timings", eng_counters_timings_json(c));
    return o;
}

json_t *srv_chunk_usage(const srv_resp_meta *m, const eng_counters *c)
{
    json_t *o = envelope(m, m->chat ? "chat.completion.chunk" : "text_completion");
    json_object_set_new(o, "choices", json_array());
    json_object_set_new(o, "usage", eng_counters_usage_json(c));
    json_object_set_new(o, "timings", eng_counters_timings_json(c));
    return o;
}
