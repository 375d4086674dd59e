/* Server-Sent Events framing for streamed responses, over a growable byte
 * buffer. One event is "data: <one-line JSON>\n\n"; the stream ends with
 * "data: [DONE]\n\n"; comment lines (": keep-alive\n\n") keep a silent
 * stream alive during long prefills. */
#ifndef WICK_SERVER_SSE_H
#define WICK_SERVER_SSE_H

#include <jansson.h>
#include <stddef.h>

typedef struct srv_buf {
    char *data;
    size_t len, cap;
    size_t pos; /* read position for consumers that drain it piecewise */
} srv_buf;

void srv_buf_free(srv_buf *b);
/* Appends bytes; returns 0 or -1 on allocation failure. */
int srv_buf_append(srv_buf *b, const void *p, size_t n);
int srv_buf_appendf(srv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Bytes not yet consumed. */
static inline size_t srv_buf_pending(const srv_buf *b) { return b->len - b->pos; }
/* Copies up to max pending bytes to dst and consumes them; resets the buffer
 * when everything was consumed. Returns the count copied. */
size_t srv_buf_take(srv_buf *b, char *dst, size_t max);

/* "data: <compact JSON>\n\n". */
int srv_sse_data(srv_buf *b, const json_t *obj);
/* "data: [DONE]\n\n". */
int srv_sse_done(srv_buf *b);
/* ": <text>\n\n"; text must not contain newlines. */
int srv_sse_comment(srv_buf *b, const char *text);

/* A JSON string from possibly invalid UTF-8: invalid bytes become U+FFFD.
 * n = (size_t)-1 means NUL-terminated. New reference (never NULL unless out
 * of memory). */
json_t *srv_json_text(const char *s, size_t n);

/* 1 when s[0..n) is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF). */
int srv_utf8_valid(const char *s, size_t n);

#endif
