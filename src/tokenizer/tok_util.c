/* Tokenizer helpers: string hash map, growable arrays, UTF-8 and the GPT-2
 * byte ↔ code point table. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

/* FNV-1a: simple, good enough for token texts, and streamable over the two
 * halves of a merge pair without building the joined string. */
uint64_t tok_hash_bytes(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t key_hash(const char *a, size_t a_len, const char *b, size_t b_len)
{
    uint64_t h = tok_hash_bytes(TOK_HASH_SEED, a, a_len);
    if (b) {
        h ^= 0xff; /* separator byte that never occurs in UTF-8 */
        h *= 0x100000001b3ull;
        h = tok_hash_bytes(h, b, b_len);
    }
    h ^= h >> 29; /* FNV's low bits are weak for short keys; mix before masking */
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h ? h : 1;
}

int tok_map_init(tok_map *m, size_t expected)
{
    size_t cap = 16;
    while (cap < expected * 2) cap <<= 1; /* load factor <= 0.5 */
    m->slots = calloc(cap, sizeof *m->slots);
    m->cap = cap;
    m->count = 0;
    return m->slots ? 0 : WK_ENOMEM;
}

void tok_map_free(tok_map *m)
{
    free(m->slots);
    m->slots = NULL;
    m->cap = m->count = 0;
}

static bool slot_matches(const tok_map_slot *s, uint64_t h, const char *a, size_t a_len,
                         const char *b, size_t b_len)
{
    if (s->hash != h || s->a_len != a_len || (s->b != NULL) != (b != NULL)) return false;
    if (memcmp(s->a, a, a_len) != 0) return false;
    return !b || (s->b_len == b_len && memcmp(s->b, b, b_len) == 0);
}

static int map_grow(tok_map *m)
{
    tok_map bigger;
    bigger.cap = m->cap * 2;
    bigger.count = m->count;
    bigger.slots = calloc(bigger.cap, sizeof *bigger.slots);
    if (!bigger.slots) return WK_ENOMEM;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].hash) continue;
        size_t j = m->slots[i].hash & (bigger.cap - 1);
        while (bigger.slots[j].hash) j = (j + 1) & (bigger.cap - 1);
        bigger.slots[j] = m->slots[i];
    }
    free(m->slots);
    *m = bigger;
    return 0;
}

int tok_map_put(tok_map *m, const char *a, size_t a_len, const char *b, size_t b_len, int32_t value)
{
    if ((m->count + 1) * 2 > m->cap && map_grow(m) != 0) return WK_ENOMEM;
    uint64_t h = key_hash(a, a_len, b, b_len);
    size_t j = h & (m->cap - 1);
    while (m->slots[j].hash) {
        if (slot_matches(&m->slots[j], h, a, a_len, b, b_len)) {
            m->slots[j].value = value;
            return 0;
        }
        j = (j + 1) & (m->cap - 1);
    }
    m->slots[j] = (tok_map_slot){.hash = h, .a = a, .b = b, .a_len = (uint32_t)a_len,
                                 .b_len = (uint32_t)b_len, .value = value};
    m->count++;
    return 0;
}

int32_t tok_map_get(const tok_map *m, const char *a, size_t a_len, const char *b, size_t b_len)
{
    if (!m->cap) return -1;
    uint64_t h = key_hash(a, a_len, b, b_len);
    size_t j = h & (m->cap - 1);
    while (m->slots[j].hash) {
        if (slot_matches(&m->slots[j], h, a, a_len, b, b_len)) return m->slots[j].value;
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

int tok_spans_push(tok_spans *s, size_t off, size_t len)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        uint32_t *o = realloc(s->off, cap * sizeof *o);
        if (!o) return WK_ENOMEM;
        s->off = o;
        uint32_t *l = realloc(s->len, cap * sizeof *l);
        if (!l) return WK_ENOMEM;
        s->len = l;
        s->cap = cap;
    }
    s->off[s->n] = (uint32_t)off;
    s->len[s->n] = (uint32_t)len;
    s->n++;
    return 0;
}

void tok_spans_free(tok_spans *s)
{
    free(s->off);
    free(s->len);
    memset(s, 0, sizeof *s);
}

int tok_ids_push(tok_ids *a, int32_t id)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        int32_t *p = realloc(a->v, cap * sizeof *p);
        if (!p) return WK_ENOMEM;
        a->v = p;
        a->cap = cap;
    }
    a->v[a->n++] = id;
    return 0;
}

/* GPT-2 table (spec §4 step 2): printable Latin-1 bytes map to themselves, the
 * other 68 bytes, in increasing order, to U+0100 onwards. */
static bool byte_is_printable(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t tok_byte_to_cp(uint8_t b)
{
    if (byte_is_printable(b)) return b;
    unsigned rank = 0; /* how many non-printable bytes come before b */
    for (unsigned x = 0; x < b; x++)
        if (!byte_is_printable(x)) rank++;
    return 0x100 + rank;
}

int tok_cp_to_byte(uint32_t cp)
{
    if (cp < 0x100) return byte_is_printable(cp) ? (int)cp : -1;
    if (cp >= 0x100 + 68) return -1;
    unsigned rank = cp - 0x100;
    for (unsigned x = 0; x < 256; x++) {
        if (byte_is_printable(x)) continue;
        if (rank == 0) return (int)x;
        rank--;
    }
    return -1;
}

size_t tok_utf8_encode(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t tok_utf8_len_lead(uint8_t c)
{
    static const uint8_t by_high_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return by_high_nibble[c >> 4];
}

size_t tok_utf8_decode(const char *str, size_t n, uint32_t *cp)
{
    const uint8_t *s = (const uint8_t *)str;
    if (n == 0) return 0;
    uint8_t c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    uint32_t v;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        v = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;      /* no overlongs */
        if (c == 0xED) hi = 0x9F;      /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        v = c & 0x07;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;      /* <= U+10FFFF */
    } else {
        return 0;
    }
    if (n < len) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    v = (v << 6) | (s[1] & 0x3F);
    for (size_t i = 2; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    *cp = v;
    return len;
}

/* Length of the maximal prefix of s that could start a valid sequence
 * (WHATWG "maximal subpart"): at least 1. */
size_t tok_utf8_invalid_len(const char *str, size_t n)
{
    const uint8_t *s = (const uint8_t *)str;
    uint8_t c = s[0];
    size_t want;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) want = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        want = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        want = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return 1;
    size_t i = 1;
    if (i < n && s[i] >= lo && s[i] <= hi) {
        i++;
        while (i < want && i < n && (s[i] & 0xC0) == 0x80) i++;
    }
    return i;
}

char *tok_utf8_sanitize(const char *text, size_t len, size_t *clean_len, bool *oom)
{
    *oom = false;
    size_t i = 0;
    uint32_t cp;
    while (i < len) {
        if ((uint8_t)text[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = tok_utf8_decode(text + i, len - i, &cp);
        if (!k) break;
        i += k;
    }
    if (i == len) return NULL;
    /* worst case: every byte becomes 3 bytes of U+FFFD */
    char *out = malloc(len * 3 + 1);
    if (!out) {
        *oom = true;
        return NULL;
    }
    memcpy(out, text, i);
    size_t o = i;
    while (i < len) {
        size_t k = tok_utf8_decode(text + i, len - i, &cp);
        if (k) {
            memcpy(out + o, text + i, k);
            o += k;
            i += k;
        } else {
            i += tok_utf8_invalid_len(text + i, len - i);
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
        }
    }
    out[o] = '\0';
    *clean_len = o;
    return out;
}
