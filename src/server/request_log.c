#include "server/request_log.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

static bool polling_route(const char *route)
{
    return route && (!strcmp(route, "health") || !strcmp(route, "metrics") || !strcmp(route, "monitor"));
}

/* The fields as the inside of a JSON object (for the JSON log format). */
static char *fields_json(const srv_log_entry *e)
{
    json_t *o = json_object();
    json_object_set_new(o, "event", json_string("request"));
    json_object_set_new(o, "method", json_string(e->method ? e->method : "?"));
    json_object_set_new(o, "path", json_string(e->path ? e->path : "?"));
    json_object_set_new(o, "route", json_string(e->route ? e->route : "other"));
    json_object_set_new(o, "status", json_integer(e->status));
    if (e->reason) json_object_set_new(o, "reason", json_string(e->reason));
    if (e->id) json_object_set_new(o, "id", json_string(e->id));
    if (e->id) json_object_set_new(o, "stream", json_boolean(e->stream));
    const eng_counters *c = e->counters;
    if (c) {
        json_object_set_new(o, "prompt_tokens", json_integer(c->prompt_tokens));
        json_object_set_new(o, "cached_tokens", json_integer(c->cached_tokens));
        json_object_set_new(o, "recomputed_tokens", json_integer(c->recomputed_tokens));
        json_object_set_new(o, "completion_tokens", json_integer(c->completion_tokens));
        json_object_set_new(o, "ttft_ms", json_real(c->ttft_ms));
        json_object_set_new(o, "decode_tok_per_s", json_real(c->decode_tok_per_s));
    }
    if (e->finish) json_object_set_new(o, "finish_reason", json_string(e->finish));
    json_object_set_new(o, "ms", json_real(e->ms));
    char *text = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(o);
    if (!text) return NULL;
    /* strip the braces: wk_log_event adds time, level and msg in front */
    size_t n = strlen(text);
    if (n >= 2) {
        memmove(text, text + 1, n - 2);
        text[n - 2] = '\0';
    }
    return text;
}

void srv_log_request(const srv_log_entry *e)
{
    enum wk_log_level level = e->status >= 500 ? WK_LOG_WARN
                              : polling_route(e->route) && e->status < 400 ? WK_LOG_DEBUG
                                                                          : WK_LOG_INFO;
    if (level < wk_log_get_level()) return;
    char gen[512] = "";
    const eng_counters *c = e->counters;
    if (c)
        snprintf(gen, sizeof gen, ", prompt %d (cached %d, recomputed %d), ttft %.1f ms, %d tokens %.1f tok/s", c->prompt_tokens,
                 c->cached_tokens, c->recomputed_tokens, c->ttft_ms, c->completion_tokens, c->decode_tok_per_s);
    char finish[48] = "";
    if (e->finish) snprintf(finish, sizeof finish, ", finish %s", e->finish);
    char *fields = wk_log_get_format() == WK_LOG_JSON ? fields_json(e) : NULL;
    wk_log_event(level, fields, "%s %s %d%s%s%s%s%s%s%s, %.0f ms", e->method ? e->method : "?", e->path ? e->path : "?",
                 e->status, e->reason ? ": " : "", e->reason ? e->reason : "", e->id ? " " : "", e->id ? e->id : "",
                 e->id && e->stream ? " (stream)" : "", gen, finish, e->ms);
    free(fields);
}
