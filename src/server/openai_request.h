/* Parsing and validating OpenAI-style request bodies into eng_request.
 * Everything a client can get wrong is caught here with a 4xx srv_error that
 * names the field; nothing here touches the model. */
#ifndef WICK_SERVER_OPENAI_REQUEST_H
#define WICK_SERVER_OPENAI_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "engine/request.h"
#include "server/error.h"
#include "server/request_fields.h"

typedef struct srv_limits {
    size_t max_body_bytes; /* 413 above this */
    int max_json_depth;    /* nesting of arrays/objects */
    int max_messages;      /* messages per chat request */
    int n_ctx;             /* context length: a token-id prompt that does not fit is refused */
} srv_limits;

/* 32 MiB body, depth 64, 2048 messages, n_ctx 0 (unchecked). */
void srv_limits_default(srv_limits *l);

/* Maximum nesting depth of a JSON text ([ and { outside strings), counting
 * from 1 for the top level; stops counting past limit. */
int srv_json_depth(const char *text, size_t n, int limit);

/* Raw body → JSON object: checks UTF-8 (400 "invalid UTF-8"), depth, syntax
 * (400 with jansson's line/column) and that the top level is an object.
 * *out is a new reference on success. */
int srv_parse_body(const char *body, size_t n, const srv_limits *lim, json_t **out,
                   srv_error *err);

/* Options of the request that shape the HTTP response, not the engine work. */
typedef struct srv_resp_opts {
    bool stream;
    bool include_usage; /* stream_options.include_usage */
    bool echo;          /* completions: echo the prompt (unsupported → 400) */
} srv_resp_opts;

/* /v1/chat/completions: the messages become a validated chat_conv
 * (chat_conv_from_openai: the one set of message rules), the rest the
 * engine's options. models: see srv_check_model. Fills *req (caller clears
 * with eng_request_clear) and *ro; root is only read. */
int srv_parse_chat(json_t *root, const srv_limits *lim, const srv_model_names *models, eng_request *req,
                   srv_resp_opts *ro, srv_error *err);

/* /v1/completions: prompt as a string, a one-element array of strings, or
 * an array of token ids. */
int srv_parse_completion(json_t *root, const srv_limits *lim, const srv_model_names *models,
                         eng_request *req, srv_resp_opts *ro, srv_error *err);

#endif
