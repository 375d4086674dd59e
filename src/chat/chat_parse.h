/* Parsing model output: split <think>…</think> reasoning from content, pull
 * out tool calls, and detect stop strings — all incrementally, for
 * streaming. Text pieces go in as they are detokenized; deltas come out.
 * A possible prefix of a marker (`<thi`, `<tool_c`, a stop string's start) is
 * held back until it is decided, so a partial marker never leaks as content.
 *
 * Text that looks like a tool call but does not parse as one is returned as
 * ordinary content, never as an error.
 *
 * Order in a decode loop: detokenize → chat_stop_feed (stop strings are
 * matched on the raw text) → chat_parser_feed → deltas to the client; at the
 * end chat_stop_flush → chat_parser_feed → chat_parser_finish. */
#ifndef WICK_CHAT_CHAT_PARSE_H
#define WICK_CHAT_CHAT_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "chat/chat.h"
#include "util/err.h"

/* ---- growable text buffer used in deltas ---- */
typedef struct chat_str {
    char *data; /* NUL-terminated when non-NULL */
    size_t len;
    size_t cap;
} chat_str;

typedef struct chat_tool_call {
    char id[32];     /* "call_" + 24 alphanumerics, from the parser's seed */
    char *name;      /* malloc'd */
    char *arguments; /* malloc'd JSON text of an object, e.g. {"path": "a.txt"} */
} chat_tool_call;

/* What one feed/finish call produced. Start from a zeroed delta
 * (chat_delta d = {0}). Everything in it is owned by the delta:
 * reuse the same delta across calls with chat_delta_clear in between (or
 * let feed clear it: feed/finish start by clearing *out), and
 * chat_delta_free at the end. */
typedef struct chat_delta {
    chat_str content;
    chat_str reasoning;
    chat_tool_call *calls;
    size_t n_calls;
    size_t cap_calls;
} chat_delta;

void chat_delta_clear(chat_delta *d); /* empties, keeps buffers */
void chat_delta_free(chat_delta *d);

typedef struct chat_parse_options {
    /* Output starts inside reasoning (the prompt opened <think>, e.g.
     * chat_prompt.reasoning_open for Qwen3.5): text is reasoning until
     * </think>. */
    bool reasoning_open;
    /* Recognise <think>…</think> at all (false: everything is content). When
     * true a <think> is only honoured at the very start of the output
     * (leading whitespace allowed), as models emit it. */
    bool parse_reasoning;
    /* Tool-call syntax to extract (CHAT_TOOLS_NONE: none, text is content). */
    chat_tool_format tool_format;
    /* Optional tools array of the request (borrowed, may be NULL): used for
     * the XML format to keep string-typed parameters as strings. */
    const json_t *tools;
    /* Seed for tool-call ids (ids are "call_" + 24 chars derived from it and
     * the call's index): same seed, same ids. */
    uint64_t id_seed;
} chat_parse_options;

/* Fills opt from a rendered prompt: reasoning_open, parse_reasoning =
 * thinking_enabled, tool_format. tools/id_seed are left 0/NULL. */
void chat_parse_options_from_prompt(chat_parse_options *opt, const chat_prompt *prompt);

typedef struct chat_parser chat_parser;

/* Allocates a parser (caller frees with chat_parser_free). WK_ENOMEM only. */
int chat_parser_new(chat_parser **out, const chat_parse_options *opt, wk_error *err);
void chat_parser_free(chat_parser *p);

/* Feeds the next piece of generated text (any split, even inside a UTF-8
 * sequence or a marker). *out is cleared, then receives what is now decided:
 * content, reasoning, and any tool calls completed by this piece. Returns 0
 * or WK_ENOMEM. */
int chat_parser_feed(chat_parser *p, const char *text, size_t len, chat_delta *out, wk_error *err);

/* End of generation: flushes everything held back. An unfinished tool call
 * or an unfinished marker is returned as content (reasoning if inside an
 * unclosed <think>). Returns 0 or WK_ENOMEM. */
int chat_parser_finish(chat_parser *p, chat_delta *out, wk_error *err);

/* Whole-text convenience: feed all of text then finish; *out gets the total. */
int chat_parse_all(const chat_parse_options *opt, const char *text, size_t len, chat_delta *out,
                   wk_error *err);

/* OpenAI tool_calls array for n calls: [{"id", "type": "function",
 * "function": {"name", "arguments"}}], each with "index" = first_index + i
 * when with_index (stream deltas). New reference; NULL if out of memory or
 * a name/arguments is not valid UTF-8. */
json_t *chat_tool_calls_json(const chat_tool_call *calls, size_t n, size_t first_index, bool with_index);

/* ---- stop strings ---- */
typedef struct chat_stop chat_stop;

/* Copies the n stop strings (empty strings are ignored). Caller frees with
 * chat_stop_free. WK_EINVAL if n > 0 and stops is NULL, WK_ENOMEM. */
int chat_stop_new(chat_stop **out, const char *const *stops, size_t n, wk_error *err);
void chat_stop_free(chat_stop *s);

/* Feeds a generated piece. *emit and *emit_len point at text that is now safe to
 * pass on (valid until the next call on s). Text that could be the start of
 * a stop string is held back. Returns 1 when a stop string completed: *emit
 * is then the text before it, *which its index in the original list, and s
 * swallows everything afterwards. Returns 0 otherwise. */
int chat_stop_feed(chat_stop *s, const char *piece, size_t len, const char **emit,
                   size_t *emit_len, int *which);

/* End of generation without a stop: returns the held-back text. */
void chat_stop_flush(chat_stop *s, const char **emit, size_t *emit_len);

#endif
