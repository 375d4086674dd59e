/* OpenAI-shaped API errors: {"error": {"message", "type", "param", "code"}}
 * with the HTTP status that goes with them. */
#ifndef WICK_SERVER_ERROR_H
#define WICK_SERVER_ERROR_H

#include <jansson.h>

typedef struct srv_error {
    int status;       /* HTTP status: 400, 401, 404, 405, 413, 429, 500, 503 ... */
    char param[64];   /* offending request field, "" if none */
    char code[48];    /* machine-readable code, "" if none */
    char message[512];
} srv_error;

/* Fills err and returns -1 so parsers can `return srv_fail(...)`. param and
 * code may be NULL. */
int srv_fail(srv_error *err, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* The prompt does not fit the context: 400 invalid_request_error with code
 * context_length_exceeded and OpenAI's wording ("This model's maximum
 * context length is N tokens. However, your messages resulted in M
 * tokens..."), which clients recognise to compact their history. */
int srv_fail_context(srv_error *err, long long n_ctx, long long n_prompt);
#define SRV_CONTEXT_MESSAGE_FMT                                                                          \
    "This model's maximum context length is %lld tokens. However, your messages resulted in %lld tokens. " \
    "Please reduce the length of the messages."

/* OpenAI error type for a status ("invalid_request_error", ...). */
const char *srv_error_type(int status);

/* The error body; new reference. type NULL: derived from the status. */
json_t *srv_error_json(const srv_error *err, const char *type);

#endif
