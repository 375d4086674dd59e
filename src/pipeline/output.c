/* Generated text → DELTA events: content for completions; for chat, the
 * incremental parser splits reasoning, content and tool calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/pipeline_internal.h"

void pl_emit(const pl_sink *sink, eng_event *ev)
{
    if (sink->event) sink->event(sink->user, ev);
    else eng_event_clear(ev);
}

static void push_text(pl_output *o, int kind, const char *t, size_t n)
{
    if (!n) return;
    eng_event ev = {0};
    ev.type = ENG_EV_DELTA;
    ev.delta_kind = kind;
    ev.text = strndup(t, n);
    if (ev.text) pl_emit(o->sink, &ev); /* out of memory: this piece is lost, never a crash */
}

static void emit_delta(pl_output *o)
{
    chat_delta *d = &o->delta;
    if (d->reasoning.len) {
        o->any_reasoning_this_token = true;
        push_text(o, ENG_DELTA_REASONING, d->reasoning.data, d->reasoning.len);
    }
    if (d->content.len) {
        o->any_content_this_token = true;
        push_text(o, ENG_DELTA_CONTENT, d->content.data, d->content.len);
    }
    for (size_t i = 0; i < d->n_calls; i++) {
        eng_event ev = {0};
        ev.type = ENG_EV_DELTA;
        ev.delta_kind = ENG_DELTA_TOOL_CALL;
        ev.tool_index = o->n_calls;
        snprintf(ev.tool_id, sizeof ev.tool_id, "%s", d->calls[i].id);
        snprintf(ev.tool_name, sizeof ev.tool_name, "%s", d->calls[i].name ? d->calls[i].name : "");
        ev.text = strdup("");
        if (ev.text) pl_emit(o->sink, &ev);
        const char *args = d->calls[i].arguments ? d->calls[i].arguments : "{}";
        memset(&ev, 0, sizeof ev);
        ev.type = ENG_EV_DELTA;
        ev.delta_kind = ENG_DELTA_TOOL_ARGS;
        ev.tool_index = o->n_calls;
        ev.text = strdup(args);
        if (ev.text) pl_emit(o->sink, &ev);
        o->n_calls++;
    }
}

void pl_output_text(pl_output *o, const char *t, size_t n)
{
    if (!n) return;
    if (!o->parser) {
        o->any_content_this_token = true;
        push_text(o, ENG_DELTA_CONTENT, t, n);
        return;
    }
    wk_error err = {0};
    if (chat_parser_feed(o->parser, t, n, &o->delta, &err) == 0) emit_delta(o);
}

void pl_output_finish(pl_output *o)
{
    if (!o->parser) return;
    wk_error err = {0};
    if (chat_parser_finish(o->parser, &o->delta, &err) == 0) emit_delta(o);
}
