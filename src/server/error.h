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

/* OpenAI error type for a status ("invalid_request_error", ...). */
const char *srv_error_type(int status);

/* The error body; new reference. type NULL: derived from the status. */
json_t *srv_error_json(const srv_error *err, const char *type);

#endif
