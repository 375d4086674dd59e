/* Code point ranges as UTF-8 byte-range sequences, so that a character
 * class over code points becomes an automaton over bytes. The split follows
 * the usual construction (as in RE2's UTF-8 ranges): cut a range where the
 * encoded length changes, then where a trailing byte would not span its
 * full 80..BF continuation range, until every byte position of the range is
 * one contiguous byte range. */
#include <stdlib.h>

#include "engine/grammar_impl.h"

typedef struct seq_list {
    gram_utf8_seq *v;
    size_t n, cap;
    int failed;
} seq_list;

static int encode(uint32_t cp, uint8_t *b)
{
    if (cp < 0x80) { b[0] = (uint8_t)cp; return 1; }
    if (cp < 0x800) { b[0] = (uint8_t)(0xC0 | cp >> 6); b[1] = (uint8_t)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        b[0] = (uint8_t)(0xE0 | cp >> 12);
        b[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        b[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    b[0] = (uint8_t)(0xF0 | cp >> 18);
    b[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    b[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
    b[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

static void push(seq_list *l, uint32_t lo, uint32_t hi)
{
    if (l->failed) return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        gram_utf8_seq *v = realloc(l->v, cap * sizeof *v);
        if (!v) { l->failed = 1; return; }
        l->v = v;
        l->cap = cap;
    }
    gram_utf8_seq *s = &l->v[l->n++];
    s->n = (uint8_t)encode(lo, s->lo);
    encode(hi, s->hi);
}

/* Recursion depth is bounded: each level fixes one more boundary (at most
 * 3 length cuts and 2 cuts per trailing byte). */
static void split(seq_list *l, uint32_t lo, uint32_t hi)
{
    static const uint32_t len_max[] = {0x7F, 0x7FF, 0xFFFF};
    for (int k = 0; k < 3; k++) {
        if (lo <= len_max[k] && hi > len_max[k]) {
            split(l, lo, len_max[k]);
            split(l, len_max[k] + 1, hi);
            return;
        }
    }
    if (hi < 0x80) { push(l, lo, hi); return; }
    int n = hi < 0x800 ? 2 : hi < 0x10000 ? 3 : 4;
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1; /* the low i trailing bytes */
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) {
                split(l, lo, lo | m);
                split(l, (lo | m) + 1, hi);
                return;
            }
            if ((hi & m) != m) {
                split(l, lo, (hi & ~m) - 1);
                split(l, hi & ~m, hi);
                return;
            }
        }
    }
    push(l, lo, hi);
}

int gram_utf8_sequences(const gram_cp_range *r, size_t n, gram_utf8_seq **out, size_t *n_out)
{
    seq_list l = {0};
    for (size_t i = 0; i < n; i++) split(&l, r[i].lo, r[i].hi);
    if (l.failed) {
        free(l.v);
        return WK_ENOMEM;
    }
    *out = l.v;
    *n_out = l.n;
    return 0;
}

size_t gram_utf8_decode(const char *str, size_t n, uint32_t *cp)
{
    const uint8_t *s = (const uint8_t *)str;
    if (n == 0) return 0;
    if (s[0] < 0x80) { *cp = s[0]; return 1; }
    size_t len;
    uint32_t c, min;
    if (s[0] >= 0xC2 && s[0] <= 0xDF) { len = 2; c = s[0] & 0x1F; min = 0x80; }
    else if (s[0] >= 0xE0 && s[0] <= 0xEF) { len = 3; c = s[0] & 0x0F; min = 0x800; }
    else if (s[0] >= 0xF0 && s[0] <= 0xF4) { len = 4; c = s[0] & 0x07; min = 0x10000; }
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        c = c << 6 | (s[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    *cp = c;
    return len;
}
