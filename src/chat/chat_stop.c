/* Stop strings across piece boundaries: text is passed on as soon as no
 * stop string can start in it; a suffix that may still grow into one is
 * held back. */
#include <stdlib.h>
#include <string.h>

#include "chat/chat_internal.h"

struct chat_stop {
    char **stops;
    size_t *lens;
    int *index; /* position in the caller's list (empty strings are skipped) */
    size_t n;
    chat_str pending; /* held-back text */
    chat_str out;     /* what the last call emitted */
    bool stopped;
};

void chat_stop_free(chat_stop *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) free(s->stops[i]);
    free(s->stops);
    free(s->lens);
    free(s->index);
    cs_free(&s->pending);
    cs_free(&s->out);
    free(s);
}

int chat_stop_new(chat_stop **out, const char *const *stops, size_t n, wk_error *err)
{
    *out = NULL;
    if (n > 0 && !stops) return wk_fail(err, WK_EINVAL, "stop strings: list is NULL");
    chat_stop *s = calloc(1, sizeof *s);
    if (!s) return wk_fail(err, WK_ENOMEM, "stop strings: out of memory");
    s->stops = calloc(n ? n : 1, sizeof *s->stops);
    s->lens = calloc(n ? n : 1, sizeof *s->lens);
    s->index = calloc(n ? n : 1, sizeof *s->index);
    if (!s->stops || !s->lens || !s->index) goto oom;
    for (size_t i = 0; i < n; i++) {
        if (!stops[i]) {
            chat_stop_free(s);
            return wk_fail(err, WK_EINVAL, "stop strings: entry %zu is NULL", i);
        }
        if (!*stops[i]) continue;
        s->stops[s->n] = strdup(stops[i]);
        if (!s->stops[s->n]) goto oom;
        s->lens[s->n] = strlen(stops[i]);
        s->index[s->n] = (int)i;
        s->n++;
    }
    if (cs_append(&s->pending, "", 0) || cs_append(&s->out, "", 0)) goto oom;
    *out = s;
    return 0;
oom:
    chat_stop_free(s);
    return wk_fail(err, WK_ENOMEM, "stop strings: out of memory");
}

/* Moves pending[0..n) to out and drops it from pending. */
static void pass_on(chat_stop *s, size_t n)
{
    if (cs_append(&s->out, s->pending.data, n)) {
        /* out of memory: keep the text pending rather than lose it */
        return;
    }
    memmove(s->pending.data, s->pending.data + n, s->pending.len - n);
    s->pending.len -= n;
    s->pending.data[s->pending.len] = 0;
}

int chat_stop_feed(chat_stop *s, const char *piece, size_t len, const char **emit, size_t *emit_len, int *which)
{
    s->out.len = 0;
    s->out.data[0] = 0;
    *emit = s->out.data;
    *emit_len = 0;
    if (s->stopped) return 1;
    if (cs_append(&s->pending, piece, len)) {
        /* cannot hold more: pass the piece through unchecked */
        cs_append(&s->out, piece, len);
        *emit = s->out.data;
        *emit_len = s->out.len;
        return 0;
    }
    const char *p = s->pending.data;
    size_t n = s->pending.len;
    /* the stop that starts earliest wins */
    size_t best_pos = 0;
    int best = -1;
    for (size_t i = 0; i < s->n; i++) {
        const char *hit = memmem(p, n, s->stops[i], s->lens[i]);
        if (hit && (best < 0 || (size_t)(hit - p) < best_pos)) {
            best_pos = (size_t)(hit - p);
            best = (int)i;
        }
    }
    if (best >= 0) {
        pass_on(s, best_pos);
        s->pending.len = 0;
        s->pending.data[0] = 0;
        s->stopped = true;
        if (which) *which = s->index[best];
        *emit = s->out.data;
        *emit_len = s->out.len;
        return 1;
    }
    /* hold the longest suffix that is a proper prefix of some stop */
    size_t hold = 0;
    for (size_t i = 0; i < s->n; i++) {
        for (size_t k = s->lens[i] - 1 < n ? s->lens[i] - 1 : n; k > hold; k--) {
            if (!memcmp(p + n - k, s->stops[i], k)) {
                hold = k;
                break;
            }
        }
    }
    pass_on(s, n - hold);
    *emit = s->out.data;
    *emit_len = s->out.len;
    return 0;
}

void chat_stop_flush(chat_stop *s, const char **emit, size_t *emit_len)
{
    s->out.len = 0;
    s->out.data[0] = 0;
    if (!s->stopped) pass_on(s, s->pending.len);
    *emit = s->out.data;
    *emit_len = s->out.len;
}
