#include "server/sse.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void srv_buf_free(srv_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

static int buf_reserve(srv_buf *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) return -1;
    b->data = p;
    b->cap = cap;
    return 0;
}

int srv_buf_append(srv_buf *b, const void *p, size_t n)
{
    if (buf_reserve(b, n)) return -1;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int srv_buf_appendf(srv_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || buf_reserve(b, (size_t)n)) return -1;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

size_t srv_buf_take(srv_buf *b, char *dst, size_t max)
{
    size_t n = srv_buf_pending(b);
    if (n > max) n = max;
    memcpy(dst, b->data + b->pos, n);
    b->pos += n;
    if (b->pos == b->len) b->pos = b->len = 0;
    return n;
}

int srv_sse_data(srv_buf *b, const json_t *obj)
{
    /* Compact dumps escape control characters, so the JSON is one line. */
    char *s = json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(12));
    if (!s) return -1;
    int rc = srv_buf_append(b, "data: ", 6) || srv_buf_append(b, s, strlen(s)) ||
             srv_buf_append(b, "\n\n", 2);
    free(s);
    return rc ? -1 : 0;
}

int srv_sse_done(srv_buf *b) { return srv_buf_append(b, "data: [DONE]\n\n", 14); }

int srv_sse_comment(srv_buf *b, const char *text)
{
    if (strchr(text, '\n') || strchr(text, '\r')) return -1;
    return srv_buf_appendf(b, ": %s\n\n", text);
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if invalid. */
static size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; }
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

int srv_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq_len(p + i, n - i);
        if (!l) return 0;
        i += l;
    }
    return 1;
}

json_t *srv_json_text(const char *s, size_t n)
{
    if (!s) s = "";
    if (n == (size_t)-1) n = strlen(s);
    if (srv_utf8_valid(s, n)) return json_stringn(s, n);
    srv_buf b = {0};
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq_len(p + i, n - i);
        if (l) {
            srv_buf_append(&b, p + i, l);
            i += l;
        } else {
            srv_buf_append(&b, "\xEF\xBF\xBD", 3);
            i++;
        }
    }
    json_t *j = json_stringn(b.data ? b.data : "", b.len);
    srv_buf_free(&b);
    return j;
}
