/* Errors are values: functions return 0 or a negative WK_E* code and fill a
 * caller-provided wk_error with a message that names the offending thing. */
#ifndef WICK_UTIL_ERR_H
#define WICK_UTIL_ERR_H

#include <stddef.h>

enum {
    WK_OK = 0,
    WK_EINVAL = -1,       /* bad argument or bad input data */
    WK_EIO = -2,          /* read/write/open failed */
    WK_ENOMEM = -3,       /* allocation failed */
    WK_EFORMAT = -4,      /* file or payload does not follow its format */
    WK_EUNSUPPORTED = -5, /* valid but not handled by this build */
    WK_ECANCELLED = -6,   /* stopped on request */
    WK_ERANGE = -7,       /* value outside allowed limits */
    WK_ENOTFOUND = -8,    /* a named thing does not exist */
    WK_EBUSY = -9,        /* resource temporarily unavailable (queue full, ...) */
};

#define WK_ERROR_MSG_CAP 512

typedef struct wk_error {
    int code;
    char msg[WK_ERROR_MSG_CAP];
} wk_error;

/* Sets err (if non-NULL) to code + formatted message; returns code so callers
 * can write `return wk_fail(err, WK_EFORMAT, "...", ...)`. */
int wk_fail(wk_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefixes the existing message with more context ("loading X: <old msg>"). */
int wk_fail_prefix(wk_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void wk_error_clear(wk_error *err);

/* Short name of a code, e.g. "format error". */
const char *wk_strerror(int code);

#endif
