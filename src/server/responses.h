/* The OpenAI Responses API (POST /v1/responses), as the Codex CLI speaks it.
 * Input items (messages with developer / system / user / assistant roles and
 * input_text / output_text parts, function_call, function_call_output,
 * reasoning) and `instructions` become the same validated conversation as a
 * chat request; function tools are offered, namespaced ones flattened to
 * "NAMESPACE.NAME" (calls come back with their namespace), tool types wick
 * cannot run (web_search, file_search, ...) are accepted and not offered.
 * Output: a response object, or the event stream response.created,
 * response.in_progress, response.output_item.added, response.content_part.added,
 * response.output_text.delta / .done (reasoning: response.reasoning_text.*),
 * response.function_call_arguments.delta / .done, response.output_item.done,
 * response.completed (response.incomplete when max_output_tokens ran out)
 * with usage. wick stores nothing: store is honoured as false, and
 * previous_response_id is a 400. The srv_api table is srv_api_responses. */
#ifndef WICK_SERVER_RESPONSES_H
#define WICK_SERVER_RESPONSES_H

#include <jansson.h>

#include "server/api.h"

/* The request → *req and x (namespace map, fields echoed in the response). */
int srv_responses_parse(json_t *root, const srv_limits *lim, const srv_model_names *models, eng_request *req,
                        srv_exchange *x, srv_error *err);

/* Separator of flattened namespaced tool names. */
#define SRV_NAMESPACE_SEP "."

#endif
