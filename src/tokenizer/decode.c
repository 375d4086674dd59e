/* Detokenization: per-token pieces (precomputed at load), whole-sequence
 * decode and the streaming decoder that never splits a UTF-8 character. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

const char *tok_token_piece(const tok_vocab *v, int32_t id, unsigned flags, size_t *len)
{
    *len = 0;
    if (id < 0 || id >= v->n_tokens) return "";
    uint8_t t = v->types[id];
    if ((t == TOK_TYPE_CONTROL || t == TOK_TYPE_UNKNOWN) && !(flags & TOK_DECODE_SPECIAL)) return "";
    *len = v->piece_len[id];
    return v->piece_arena + v->piece_off[id];
}

struct tok_decoder {
    const tok_vocab *v;
    unsigned flags;
    bool seen_text;  /* a non-empty piece has been fed (for TOK_DECODE_STRIP_SPACE) */
    char pending[4]; /* incomplete UTF-8 sequence held back */
    size_t n_pending;
    char *in, *out; /* staging (pending + piece) and output buffers */
    size_t in_cap, out_cap;
};

tok_decoder *tok_decoder_new(const tok_vocab *v, unsigned flags)
{
    tok_decoder *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->v = v;
    d->flags = flags;
    return d;
}

void tok_decoder_free(tok_decoder *d)
{
    if (!d) return;
    free(d->in);
    free(d->out);
    free(d);
}

size_t tok_decoder_pending(const tok_decoder *d) { return d->n_pending; }

/* True when s[0..n) is a proper prefix of some valid UTF-8 sequence. */
static bool is_incomplete_prefix(const char *s, size_t n)
{
    if (n == 0 || n >= 4) return false;
    size_t sub = tok_utf8_invalid_len(s, n);
    size_t want = tok_utf8_len_lead((uint8_t)s[0]);
    return sub == n && n < want && (uint8_t)s[0] >= 0xC2 && (uint8_t)s[0] <= 0xF4;
}

/* Validates pending + piece into d->out: complete characters are copied,
 * invalid bytes become U+FFFD, a trailing incomplete sequence is held back
 * (or becomes U+FFFD when final). */
static int emit(tok_decoder *d, const char *piece, size_t n, bool final, size_t *out_len)
{
    size_t total = d->n_pending + n;
    if (total > d->in_cap) {
        size_t cap = total * 2 + 16;
        char *p = realloc(d->in, cap);
        if (!p) return WK_ENOMEM;
        d->in = p;
        d->in_cap = cap;
    }
    if (total * 3 + 1 > d->out_cap) { /* every byte may become a 3-byte U+FFFD */
        size_t cap = total * 6 + 16;
        char *p = realloc(d->out, cap);
        if (!p) return WK_ENOMEM;
        d->out = p;
        d->out_cap = cap;
    }
    const char *in = d->in;
    memcpy(d->in, d->pending, d->n_pending);
    memcpy(d->in + d->n_pending, piece, n);
    d->n_pending = 0;
    size_t i = 0, o = 0;
    while (i < total) {
        uint32_t cp;
        if ((uint8_t)in[i] < 0x80) {
            d->out[o++] = in[i++];
            continue;
        }
        size_t k = tok_utf8_decode(in + i, total - i, &cp);
        if (k) {
            memcpy(d->out + o, in + i, k);
            o += k;
            i += k;
        } else if (!final && is_incomplete_prefix(in + i, total - i)) {
            memcpy(d->pending, in + i, total - i);
            d->n_pending = total - i;
            break;
        } else {
            i += tok_utf8_invalid_len(in + i, total - i);
            memcpy(d->out + o, "\xEF\xBF\xBD", 3);
            o += 3;
        }
    }
    *out_len = o;
    return 0;
}

int tok_decoder_feed(tok_decoder *d, int32_t id, const char **text, size_t *len)
{
    *text = "";
    *len = 0;
    if (id < 0 || id >= d->v->n_tokens) return WK_EINVAL;
    size_t n;
    const char *piece = tok_token_piece(d->v, id, d->flags, &n);
    if (n && !d->seen_text) {
        d->seen_text = true;
        if ((d->flags & TOK_DECODE_STRIP_SPACE) && d->v->add_space_prefix && piece[0] == ' ') {
            piece++;
            n--;
        }
    }
    if (n == 0) return 0;
    size_t o;
    if (emit(d, piece, n, false, &o)) return WK_ENOMEM;
    *text = d->out;
    *len = o;
    return 0;
}

void tok_decoder_flush(tok_decoder *d, const char **text, size_t *len)
{
    *text = "";
    *len = 0;
    if (d->n_pending) {
        size_t o;
        if (emit(d, "", 0, true, &o) == 0) {
            *text = d->out;
            *len = o;
        }
    }
    d->n_pending = 0;
    d->seen_text = false;
}

int tok_decode(const tok_vocab *v, const int32_t *ids, size_t n_ids, unsigned flags, char **text,
               size_t *len, wk_error *err)
{
    *text = NULL;
    if (len) *len = 0;
    tok_decoder *d = tok_decoder_new(v, flags);
    size_t cap = 256, n = 0;
    char *buf = malloc(cap);
    if (!d || !buf) goto oom;
    for (size_t i = 0; i <= n_ids; i++) {
        const char *t;
        size_t tl;
        if (i < n_ids) {
            int rc = tok_decoder_feed(d, ids[i], &t, &tl);
            if (rc == WK_EINVAL) {
                tok_decoder_free(d);
                free(buf);
                return wk_fail(err, WK_EINVAL, "token id %d at position %zu is out of range (vocab %d)",
                               ids[i], i, v->n_tokens);
            }
            if (rc) goto oom;
        } else {
            tok_decoder_flush(d, &t, &tl);
        }
        if (n + tl + 1 > cap) {
            while (n + tl + 1 > cap) cap *= 2;
            char *p = realloc(buf, cap);
            if (!p) goto oom;
            buf = p;
        }
        memcpy(buf + n, t, tl);
        n += tl;
    }
    buf[n] = '\0';
    tok_decoder_free(d);
    *text = buf;
    if (len) *len = n;
    return 0;
oom:
    tok_decoder_free(d);
    free(buf);
    return wk_fail(err, WK_ENOMEM, "out of memory decoding %zu tokens", n_ids);
}
