/* A validated conversation: what every API (chat completions, Anthropic
 * Messages, Responses) turns its request into, under one set of rules, and
 * what the templates render without checking it again.
 *
 * Invariants, kept by the builder functions below:
 * - roles are system, user, assistant, tool (OpenAI's "developer" is a system
 *   message);
 * - every content is a string (possibly empty), text parts already joined;
 * - reasoning (assistant messages only) is NULL when none was given;
 * - tool calls (assistant messages only) have a non-empty name and arguments
 *   that are a JSON object;
 * - tools is NULL or a non-empty array of OpenAI function tools
 *   {"type": "function", "function": {"name", "description"?, "parameters"?}}
 *   with distinct names and object parameters;
 * - chat_conv_finish: at least one message.
 * Every failure is WK_EINVAL (WK_EUNSUPPORTED for inputs a text-only engine
 * cannot take, WK_ENOMEM) with a one-line message that starts with the field
 * as the caller's API spells it ("messages[3].content: ..."): the builder
 * functions take that path from the caller.
 *
 * Ownership: a chat_conv owns everything it points to (strings are copied,
 * JSON values are deep copies); release it with chat_conv_free. */
#ifndef WICK_CHAT_CHAT_CONV_H
#define WICK_CHAT_CHAT_CONV_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "chat/chat.h"
#include "util/err.h"

typedef enum chat_role { CHAT_ROLE_SYSTEM = 0, CHAT_ROLE_USER, CHAT_ROLE_ASSISTANT, CHAT_ROLE_TOOL } chat_role;

/* A tool call in the history. */
typedef struct chat_call {
    char *id;        /* as the client sent it; NULL if it sent none */
    char *name;      /* non-empty */
    char *args_text; /* the arguments exactly as sent when sent as JSON text (so
                        a template that prints them verbatim re-renders the
                        bytes the model wrote); NULL when sent as an object */
    json_t *args;    /* the arguments object */
} chat_call;

typedef struct chat_message {
    chat_role role;
    char *content; /* never NULL */
    size_t content_len;
    char *reasoning; /* NULL: none given */
    size_t reasoning_len;
    chat_call *calls;
    size_t n_calls, cap_calls;
    char *tool_call_id; /* tool results: the call they answer, NULL if not given */
} chat_message;

typedef struct chat_conv {
    chat_message *msgs;
    size_t n, cap;
    json_t *tools;              /* see above; NULL: none offered */
    bool add_generation_prompt; /* default true */
    int enable_thinking;        /* -1: template default, 0: off, 1: on */
} chat_conv;

/* Empty conversation with the defaults. */
void chat_conv_init(chat_conv *c);
void chat_conv_free(chat_conv *c);

/* Appends a message whose content is text[0..len) (copied). */
int chat_conv_add(chat_conv *c, chat_role role, const char *text, size_t len, wk_error *err);
/* Appends text to the content of the last message (text parts, blocks). */
int chat_conv_append(chat_conv *c, const char *text, size_t len, wk_error *err);
/* Appends to the reasoning of the last message, which must be an assistant
 * message (where: its path, for the error). */
int chat_conv_add_reasoning(chat_conv *c, const char *text, size_t len, const char *where, wk_error *err);
/* Sets the tool_call_id of the last message (a tool result). */
int chat_conv_set_tool_call_id(chat_conv *c, const char *id, wk_error *err);
/* Adds a tool call to the last message, which must be an assistant message.
 * arguments: a JSON string holding an object (blank text counts as {}), or
 * an object. id may be NULL. name_path / args_path: the fields as the API
 * spells them, for errors ("messages[2].tool_calls[0].function.name"). */
int chat_conv_add_call(chat_conv *c, const char *id, const char *name, const json_t *arguments, const char *name_path,
                       const char *args_path, wk_error *err);
/* Offers a function tool. description: string or NULL; parameters: a JSON
 * Schema object or NULL. where: the tool's path ("tools[3]"). */
int chat_conv_add_tool(chat_conv *c, const char *name, const json_t *description, const json_t *parameters,
                       const char *where, wk_error *err);
/* Conversation-level rules once everything is added (where: the messages
 * field, e.g. "messages" or "input"). */
int chat_conv_finish(chat_conv *c, const char *where, wk_error *err);

/* The OpenAI chat-completions request object: messages (spec openai-api.md
 * §3.1: string or text-part content, tool_calls with JSON-text or object
 * arguments, reasoning_content, tool_call_id), tools (dropped when
 * tool_choice is "none"), add_generation_prompt, chat_template_kwargs
 * (enable_thinking must be a boolean) and reasoning_effort ("none" turns
 * thinking off). Fills *c (initialised here; freed on failure). */
int chat_conv_from_openai(chat_conv *c, const json_t *request, wk_error *err);

/* Renders a validated conversation with tmpl (see chat.h for the result). */
int chat_render_conv(const chat_template *tmpl, const chat_conv *c, chat_prompt *out, wk_error *err);

#endif
