/* Request bodies sent compressed (Content-Encoding: gzip, deflate, zstd —
 * Codex CLI compresses with zstd): decoded in memory with a cap on the
 * decoded size, so a small bomb cannot grow past the body limit. */
#ifndef WICK_SERVER_BODY_DECODE_H
#define WICK_SERVER_BODY_DECODE_H

#include <stddef.h>

#include "server/error.h"
#include "server/sse.h"

/* Decodes in[0..n) per the Content-Encoding header value (NULL, "" or
 * "identity": no decoding; a list "gzip, zstd" is undone right to left)
 * into *out. Errors: 415 for an unknown coding, 400 for corrupt data, 413
 * when the decoded body exceeds max_bytes, 500 out of memory. */
int srv_body_decode(const char *encoding, const char *in, size_t n, size_t max_bytes, srv_buf *out, srv_error *err);

#endif
