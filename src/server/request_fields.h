/* Field readers shared by the request parsers of every API (OpenAI chat and
 * completions, Anthropic Messages, Responses): typed getters whose errors
 * name the field, the model-name rule, sampling defaults, stop strings, the
 * `wick` extension object, constraints, and the translation of a chat_conv
 * failure into an API error. Absent or null fields keep the default. */
#ifndef WICK_SERVER_REQUEST_FIELDS_H
#define WICK_SERVER_REQUEST_FIELDS_H

#include <jansson.h>
#include <stdbool.h>

#include "chat/chat_conv.h"
#include "engine/request.h"
#include "server/error.h"
#include "util/err.h"

/* Number in [lo, hi] → *out. 400 invalid_type / invalid_value naming key. */
int srv_get_number(const json_t *obj, const char *key, double lo, double hi, float *out, srv_error *err);
/* Integer in [lo, hi] (an integral real is accepted) → *out; *present says
 * whether it was given (may be NULL). */
int srv_get_int(const json_t *obj, const char *key, long long lo, long long hi, long long *out, bool *present,
                srv_error *err);
int srv_get_bool(const json_t *obj, const char *key, bool *out, srv_error *err);
/* A string (borrowed) or NULL when absent/null; 400 if another type. */
int srv_get_string(const json_t *obj, const char *key, const char **out, srv_error *err);

/* The names this server answers to. */
typedef struct srv_model_names {
    const char *id;              /* the loaded model's id: every response carries it */
    const char *const *aliases;  /* other accepted names */
    int n_aliases;
    bool strict;                 /* refuse names that are neither (404 model_not_found) */
} srv_model_names;

/* Checks the request's `model` (absent is fine). Serving one model, any name
 * is answered by it unless names->strict. names NULL accepts anything. */
int srv_check_model(const json_t *root, const srv_model_names *names, srv_error *err);

/* A stop-string field: a string or an array of strings (empty ones are
 * ignored) into req->stop. key names the field in errors. */
int srv_parse_stop(const json_t *v, const char *key, eng_request *req, srv_error *err);

/* The wick extension object ({"wick": {"fresh", "attn_policy", "global",
 * "window", "dense_tail", "dense_tail_continue"}}), plus llama-server's
 * cache_prompt: false (= fresh). */
int srv_parse_wick(const json_t *root, eng_request *req, srv_error *err);

/* A chat_conv failure as an API error: 400 (500 when out of memory), param
 * = the field the message starts with, code "unsupported" for inputs a
 * text-only engine cannot take, else "invalid_value". */
int srv_fail_chat(srv_error *err, const wk_error *werr);

/* Sets req->tool_choice_name after checking it names one of req->tools
 * (param: the field, for the error). */
int srv_set_forced_tool(eng_request *req, const char *name, const char *param, srv_error *err);

/* A json_schema format object {"name"?, "schema", "strict"?, "description"?}
 * (OpenAI's response_format.json_schema, the Responses API's text.format):
 * the schema is checked and stored as req's JSON_SCHEMA constraint. where
 * names the object in errors. */
int srv_parse_json_schema_format(const json_t *js, const char *where, eng_request *req, srv_error *err);

/* For tool_choice REQUIRED / FUNCTION: the parameters schema of each tool
 * the answer may call is checked (the grammar is built from them). */
int srv_check_forced_tool_schemas(const eng_request *req, srv_error *err);

/* Moves the validated conversation into req (req->chat, req->tools); on
 * failure conv is freed. */
int srv_take_conv(eng_request *req, chat_conv *conv, srv_error *err);

/* tool_choice ("auto", "none", "required", or a function: chat's
 * {"type": "function", "function": {"name"}} or the Responses API's
 * {"type": "function", "name"}) and parallel_tool_calls, for the tools
 * already in req; a forced tool's schema is checked. */
int srv_parse_tool_choice(const json_t *root, eng_request *req, srv_error *err);

/* Out of memory while building a request: a 500 JSON error, never a crash. */
int srv_fail_oom(srv_error *err);

#endif
