/* The Anthropic Messages API (POST /v1/messages, /v1/messages/count_tokens):
 * its requests become the same validated conversation and eng_request as
 * OpenAI's (system prompt, multi-turn, text / tool_use / tool_result /
 * thinking blocks, tools and tool_choice auto / any / tool / none,
 * stop_sequences, thinking on or off), and the engine's events become its
 * message object or its event stream (message_start, content_block_start /
 * delta / stop, message_delta with usage, message_stop, ping). Errors have
 * its shape: {"type": "error", "error": {"type", "message"}}. Fields wick
 * does not use (metadata, cache_control, output_config effort,
 * context_management, service_tier ...) are accepted and ignored: the
 * prefix cache caches whatever repeats. The srv_api table is srv_api_messages
 * (api.h). */
#ifndef WICK_SERVER_ANTHROPIC_H
#define WICK_SERVER_ANTHROPIC_H

#include <jansson.h>

#include "chat/chat_conv.h"
#include "server/error.h"
#include "server/openai_request.h"
#include "server/request_fields.h"

/* The conversation of a Messages request (also what count_tokens counts):
 * system, messages, tools (dropped for tool_choice none), thinking.
 * *conv is initialised here (freed on failure). */
int srv_anthropic_conv(const json_t *root, const srv_model_names *models, chat_conv *conv, srv_error *err);

struct srv_exchange;
/* The whole Messages request → *req (the srv_api parse step). */
int srv_anthropic_parse(json_t *root, const srv_limits *lim, const srv_model_names *models, eng_request *req,
                        struct srv_exchange *x, srv_error *err);

/* Anthropic error type for an HTTP status ("invalid_request_error",
 * "authentication_error", "not_found_error", "request_too_large",
 * "rate_limit_error", "api_error", "overloaded_error"). */
const char *srv_anthropic_error_type(int status);

#endif
