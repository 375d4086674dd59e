#ifndef WICK_UTIL_SHA256_H
#define WICK_UTIL_SHA256_H

#include <stddef.h>

#include "util/err.h"

/* SHA-256 of a file, streamed; hex (65 bytes incl. NUL) written to out_hex. */
int wk_sha256_file(const char *path, char out_hex[65], wk_error *err);
/* SHA-256 of a buffer. */
void wk_sha256_hex(const void *data, size_t len, char out_hex[65]);

#endif
