#include "server/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "server/sse.h"

int srv_fail(srv_error *err, int status, const char *param, const char *code, const char *fmt, ...)
{
    if (!err) return -1;
    err->status = status;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    snprintf(err->code, sizeof err->code, "%s", code ? code : "");
    char raw[sizeof err->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    /* Messages quote client text (a role, a name): control characters are
     * written as escapes so an error stays one line in bodies and logs. */
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)raw; *p && o + 5 < sizeof err->message; p++) {
        if (*p >= 0x20 && *p != 0x7f) err->message[o++] = (char)*p;
        else if (*p == '\n') o += (size_t)snprintf(err->message + o, 3, "\\n");
        else o += (size_t)snprintf(err->message + o, 5, "\\x%02x", *p);
    }
    err->message[o] = '\0';
    return -1;
}

int srv_fail_context(srv_error *err, long long n_ctx, long long n_prompt)
{
    return srv_fail(err, 400, "messages", "context_length_exceeded", SRV_CONTEXT_MESSAGE_FMT, n_ctx, n_prompt);
}

const char *srv_error_type(int status)
{
    switch (status) {
    case 400: case 405: case 413: case 415: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 499: return "cancelled";
    case 501: return "not_supported_error";
    case 503: return "unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

json_t *srv_error_json(const srv_error *err, const char *type)
{
    json_t *e = json_object();
    json_object_set_new(e, "message", srv_json_text(err->message, (size_t)-1));
    json_object_set_new(e, "type", json_string(type && *type ? type : srv_error_type(err->status)));
    json_object_set_new(e, "param", err->param[0] ? json_string(err->param) : json_null());
    json_object_set_new(e, "code", err->code[0] ? json_string(err->code) : json_null());
    json_t *root = json_object();
    json_object_set_new(root, "error", e);
    return root;
}
