/* String map and GBNF text building for the grammar compilers. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar_impl.h"
#include "engine/grammar_text.h"

/* ---- map ---- */

static uint64_t hash_bytes(const void *p, size_t n)
{
    const uint8_t *s = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

void gram_smap_free(gram_smap *m)
{
    for (size_t i = 0; i < m->cap; i++) free(m->slots[i].key);
    free(m->slots);
    memset(m, 0, sizeof *m);
}

static gram_smap_slot *smap_find(gram_smap *m, const void *key, size_t len)
{
    size_t i = hash_bytes(key, len) & (m->cap - 1);
    for (;;) {
        gram_smap_slot *s = &m->slots[i];
        if (!s->key || (s->len == len && !memcmp(s->key, key, len))) return s;
        i = (i + 1) & (m->cap - 1);
    }
}

int gram_smap_get(gram_smap *m, const void *key, size_t len, uint32_t *value)
{
    if (!m->cap) return 0;
    gram_smap_slot *s = smap_find(m, key, len);
    if (!s->key) return 0;
    *value = s->value;
    return 1;
}

int gram_smap_put(gram_smap *m, const void *key, size_t len, uint32_t value)
{
    if ((m->count + 1) * 2 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        gram_smap_slot *old = m->slots;
        size_t old_cap = m->cap;
        m->slots = calloc(cap, sizeof *m->slots);
        if (!m->slots) {
            m->slots = old;
            return WK_ENOMEM;
        }
        m->cap = cap;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i].key) *smap_find(m, old[i].key, old[i].len) = old[i];
        free(old);
    }
    gram_smap_slot *s = smap_find(m, key, len);
    if (s->key) {
        s->value = value;
        return 0;
    }
    s->key = malloc(len + 1);
    if (!s->key) return WK_ENOMEM;
    memcpy(s->key, key, len);
    s->key[len] = 0;
    s->len = len;
    s->value = value;
    m->count++;
    return 0;
}

/* ---- text ---- */

void gram_buf_put(gram_buf *b, const char *s, size_t n)
{
    if (b->failed) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->failed = true;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    if (n) memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

void gram_buf_puts(gram_buf *b, const char *z) { gram_buf_put(b, z, strlen(z)); }

void gram_buf_printf(gram_buf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = true;
        return;
    }
    if ((size_t)n < sizeof small) {
        gram_buf_put(b, small, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->failed = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    gram_buf_put(b, big, (size_t)n);
    free(big);
}

void gram_buf_literal(gram_buf *b, const char *s, size_t n)
{
    gram_buf_put(b, "\"", 1);
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        uint32_t cp;
        size_t k;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            gram_buf_put(b, e, 2);
            i++;
        } else if (c >= 0x20 && c < 0x7F) {
            gram_buf_put(b, s + i, 1);
            i++;
        } else if (c >= 0x80 && (k = gram_utf8_decode(s + i, n - i, &cp))) {
            gram_buf_put(b, s + i, k);
            i += k;
        } else {
            gram_buf_printf(b, "\\x%02X", c);
            i++;
        }
    }
    gram_buf_put(b, "\"", 1);
}

void gram_buf_free(gram_buf *b)
{
    free(b->s);
    memset(b, 0, sizeof *b);
}

/* ---- rules ---- */

static const char *new_name(gram_text *t, const char *hint)
{
    char name[64];
    size_t k = 0;
    for (const char *h = hint; *h && k < 40; h++) {
        char c = *h;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) name[k++] = c;
        else if (k && name[k - 1] != '-') name[k++] = '-';
    }
    if (!k) name[k++] = 'r';
    snprintf(name + k, sizeof name - k, "-%u", ++t->counter);
    if (t->n_names == t->cap_names) {
        size_t cap = t->cap_names ? t->cap_names * 2 : 64;
        char **v = realloc(t->names, cap * sizeof *v);
        if (!v) {
            t->failed = true;
            return NULL;
        }
        t->names = v;
        t->cap_names = cap;
    }
    char *copy = strdup(name);
    if (!copy) {
        t->failed = true;
        return NULL;
    }
    t->names[t->n_names++] = copy;
    return copy;
}

const char *gram_text_rule(gram_text *t, const char *hint, const char *body)
{
    if (t->failed) return NULL;
    uint32_t idx;
    size_t len = strlen(body);
    if (gram_smap_get(&t->bodies, body, len, &idx)) return t->names[idx];
    const char *name = new_name(t, hint);
    if (!name) return NULL;
    if (gram_smap_put(&t->bodies, body, len, (uint32_t)(t->n_names - 1))) {
        t->failed = true;
        return NULL;
    }
    gram_text_define(t, name, body);
    return name;
}

const char *gram_text_reserve(gram_text *t, const char *hint) { return t->failed ? NULL : new_name(t, hint); }

void gram_text_define(gram_text *t, const char *name, const char *body)
{
    gram_buf_puts(&t->out, name);
    gram_buf_puts(&t->out, " ::= ");
    gram_buf_puts(&t->out, body);
    gram_buf_puts(&t->out, "\n");
    if (t->out.failed) t->failed = true;
}

void gram_text_free(gram_text *t)
{
    gram_buf_free(&t->out);
    gram_smap_free(&t->bodies);
    for (size_t i = 0; i < t->n_names; i++) free(t->names[i]);
    free(t->names);
    memset(t, 0, sizeof *t);
}

int gram_error_one_line(wk_error *err)
{
    if (!err) return WK_EINVAL;
    char out[WK_ERROR_MSG_CAP];
    size_t o = 0;
    for (const unsigned char *m = (const unsigned char *)err->msg; *m && o + 5 < sizeof out; m++) {
        if (*m < 0x20 || *m == 0x7F) o += (size_t)snprintf(out + o, sizeof out - o, "\\x%02X", *m);
        else out[o++] = (char)*m;
    }
    out[o] = 0;
    memcpy(err->msg, out, o + 1);
    return err->code;
}
