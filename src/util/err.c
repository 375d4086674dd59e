#include "util/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int wk_fail(wk_error *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

int wk_fail_prefix(wk_error *err, const char *fmt, ...)
{
    if (!err) return WK_EINVAL;
    char prefix[WK_ERROR_MSG_CAP];
    char old[WK_ERROR_MSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    size_t n = strlen(prefix);
    if (n > sizeof err->msg - 3) n = sizeof err->msg - 3;
    memcpy(err->msg, prefix, n);
    memcpy(err->msg + n, ": ", 2);
    size_t rest = sizeof err->msg - n - 3;
    size_t m = strnlen(old, rest);
    memcpy(err->msg + n + 2, old, m);
    err->msg[n + 2 + m] = '\0';
    return err->code;
}

void wk_error_clear(wk_error *err)
{
    if (err) {
        err->code = 0;
        err->msg[0] = '\0';
    }
}

const char *wk_strerror(int code)
{
    switch (code) {
    case WK_OK: return "ok";
    case WK_EINVAL: return "invalid input";
    case WK_EIO: return "I/O error";
    case WK_ENOMEM: return "out of memory";
    case WK_EFORMAT: return "format error";
    case WK_EUNSUPPORTED: return "unsupported";
    case WK_ECANCELLED: return "cancelled";
    case WK_ERANGE: return "out of range";
    case WK_ENOTFOUND: return "not found";
    case WK_EBUSY: return "busy";
    default: return "unknown error";
    }
}
