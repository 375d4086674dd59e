/* String rules: JSON strings (escapes, lengths counted in characters) and
 * raw text, optionally never containing some words (a tool-call end marker
 * inside a value would end the call for the parser).
 *
 * Avoiding words is a small automaton over the last characters read (the
 * Aho-Corasick states of the words): one rule per state, each character
 * moving to the next state, the completion of a word having no move. A
 * JSON escape sequence breaks any word, so it leads back to the start
 * state. With length bounds the rules are also indexed by the count. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/json_schema_impl.h"

#define MAX_WORD_BYTES 32
#define MAX_AC_STATES (JS_MAX_WORDS * MAX_WORD_BYTES + 1)
/* (states × counts) rules for a bounded string that avoids words. */
#define MAX_BOUNDED_RULES 65536

typedef struct ac_machine {
    int n;
    int16_t next[MAX_AC_STATES][128];
    bool bad[MAX_AC_STATES];    /* a word ends here */
    bool relevant[128];         /* characters of the words */
} ac_machine;

static int ac_build(ac_machine *m, const char *const *words, size_t n_words)
{
    memset(m, 0, sizeof *m);
    int16_t child[MAX_AC_STATES][128];
    memset(child, -1, sizeof child);
    m->n = 1;
    for (size_t w = 0; w < n_words; w++) {
        size_t len = strlen(words[w]);
        if (len == 0 || len > MAX_WORD_BYTES) return WK_EINVAL;
        int q = 0;
        for (size_t i = 0; i < len; i++) {
            unsigned char ch = (unsigned char)words[w][i];
            if (ch >= 128) return WK_EINVAL;
            m->relevant[ch] = true;
            if (child[q][ch] < 0) child[q][ch] = (int16_t)m->n++;
            q = child[q][ch];
        }
        m->bad[q] = true;
    }
    /* breadth first: fail links folded into complete transitions */
    int queue[MAX_AC_STATES], fail[MAX_AC_STATES] = {0};
    int qh = 0, qt = 0;
    for (int ch = 0; ch < 128; ch++) {
        if (child[0][ch] >= 0) {
            m->next[0][ch] = child[0][ch];
            fail[child[0][ch]] = 0;
            queue[qt++] = child[0][ch];
        } else {
            m->next[0][ch] = 0;
        }
    }
    while (qh < qt) {
        int q = queue[qh++];
        m->bad[q] = m->bad[q] || m->bad[fail[q]];
        for (int ch = 0; ch < 128; ch++) {
            int c = child[q][ch];
            if (c >= 0) {
                fail[c] = m->next[fail[q]][ch];
                m->next[q][ch] = (int16_t)c;
                queue[qt++] = c;
            } else {
                m->next[q][ch] = m->next[fail[q]][ch];
            }
        }
    }
    return 0;
}

/* [^...] of the ASCII bytes in excl. */
static void put_negated_class(gram_buf *b, const bool *excl)
{
    gram_buf_puts(b, "[^");
    for (int ch = 0; ch < 128; ch++)
        if (excl[ch]) gram_buf_printf(b, "\\x%02X", ch);
    gram_buf_puts(b, "]");
}

/* Rules for text of min..max characters (max UINT32_MAX: unbounded) from
 * the characters not in base_excl (plus esc_rule after a backslash when
 * non-NULL), never containing any of the words. Returns the start rule. */
static const char *text_avoiding(js_ctx *c, const char *const *words, size_t n_words, const bool *base_excl,
                                 const char *esc_rule, uint32_t min, uint32_t max, const char *hint, bool *too_big)
{
    *too_big = false;
    ac_machine *m = malloc(sizeof *m);
    if (!m) return js_fail(c, WK_ENOMEM, "out of memory");
    if (ac_build(m, words, n_words)) {
        free(m);
        return js_fail(c, WK_EINVAL, "bad word list");
    }
    /* counts 0..K get their own rules; from K on (unbounded max) the count
     * no longer matters */
    bool bounded = max != UINT32_MAX;
    uint32_t K = bounded ? max : min;
    if ((uint64_t)m->n * (K + 1) > MAX_BOUNDED_RULES) {
        free(m);
        *too_big = true;
        return NULL;
    }
    size_t n_rules = (size_t)m->n * (K + 1);
    const char **name = calloc(n_rules, sizeof *name);
    if (!name) {
        free(m);
        return js_fail(c, WK_ENOMEM, "out of memory");
    }
    for (size_t r = 0; r < n_rules; r++) {
        if (m->bad[r % (size_t)m->n]) continue;
        name[r] = gram_text_reserve(&c->t, hint);
        if (!name[r]) break;
    }
    gram_buf body = {0};
    for (uint32_t k = 0; k <= K && !c->t.failed; k++) {
        /* the next count's rules: k + 1, or k itself at the unbounded tail */
        uint32_t nk = k < K ? k + 1 : k;
        bool can_grow = k < K || !bounded;
        for (int q = 0; q < m->n; q++) {
            if (m->bad[q]) continue;
            body.len = 0;
            if (body.s) body.s[0] = 0;
            bool first = true;
#define ALT()                                                                                                         \
    do {                                                                                                              \
        if (!first) gram_buf_puts(&body, " | ");                                                                      \
        first = false;                                                                                                \
    } while (0)
            if (k >= min) {
                ALT();
                gram_buf_puts(&body, "\"\"");
            }
            if (can_grow) {
                /* characters grouped by the state they lead to; all that
                 * lead back to the start share one negated class */
                const char *to0 = name[(size_t)nk * m->n];
                bool excl[128];
                for (int ch = 0; ch < 128; ch++)
                    excl[ch] = base_excl[ch] || (m->relevant[ch] && m->next[q][ch] != 0);
                ALT();
                put_negated_class(&body, excl);
                gram_buf_printf(&body, " %s", to0);
                if (esc_rule) {
                    ALT();
                    gram_buf_printf(&body, "\"\\\\\" %s %s", esc_rule, to0);
                }
                for (int t = 1; t < m->n; t++) {
                    if (m->bad[t]) continue;
                    bool any = false;
                    for (int ch = 0; ch < 128 && !any; ch++)
                        any = m->relevant[ch] && !base_excl[ch] && m->next[q][ch] == t;
                    if (!any) continue;
                    ALT();
                    gram_buf_puts(&body, "[");
                    for (int ch = 0; ch < 128; ch++)
                        if (m->relevant[ch] && !base_excl[ch] && m->next[q][ch] == t) gram_buf_printf(&body, "\\x%02X", ch);
                    gram_buf_printf(&body, "] %s", name[(size_t)nk * m->n + t]);
                }
            }
#undef ALT
            if (body.failed) c->t.failed = true;
            else gram_text_define(&c->t, name[(size_t)k * m->n + q], body.s);
        }
    }
    const char *start = name[0];
    free(name);
    gram_buf_free(&body);
    free(m);
    if (c->t.failed) return js_fail(c, WK_ENOMEM, "out of memory");
    return start;
}

static void json_string_excl(bool *excl)
{
    for (int ch = 0; ch < 128; ch++) excl[ch] = ch < 0x20 || ch == '"' || ch == '\\';
}

/* min..max characters as a counted repetition: a JSON string (quotes
 * included) or raw text, of characters outside excl (ASCII) besides those
 * a JSON string or raw text never has. */
static const char *counted_string(js_ctx *c, uint32_t min, uint32_t max, enum js_mode mode, const bool *excl)
{
    char bounds[32];
    if (max == UINT32_MAX) snprintf(bounds, sizeof bounds, "{%u,}", min);
    else snprintf(bounds, sizeof bounds, "{%u,%u}", min, max);
    bool all[128];
    if (mode == JS_JSON) json_string_excl(all);
    else memset(all, 0, sizeof all), all[0] = true;
    for (int ch = 0; ch < 128; ch++) all[ch] = all[ch] || excl[ch];
    gram_buf b = {0}, ch = {0};
    const char *r = NULL;
    if (mode == JS_JSON) {
        const char *esc = js_common(c, JS_ESC);
        if (!esc) return NULL;
        put_negated_class(&ch, all);
        gram_buf_printf(&ch, " | \"\\\\\" %s", esc);
        const char *jchar = js_rule(c, "char", &ch);
        if (jchar) gram_buf_printf(&b, "\"\\\"\" %s%s \"\\\"\"", jchar, bounds);
    } else {
        put_negated_class(&b, all);
        gram_buf_puts(&b, bounds);
    }
    if (b.s) r = js_rule(c, "string", &b);
    gram_buf_free(&b);
    gram_buf_free(&ch);
    return r;
}

const char *js_string(js_ctx *c, uint32_t min, uint32_t max, enum js_mode mode)
{
    if (js_failed(c)) return NULL;
    char key[64];
    snprintf(key, sizeof key, "string:%d:%u:%u", (int)mode, min, max);
    const char *hit = js_memo_get(c, key);
    if (hit) return hit;
    bool none[128] = {false};
    const char *r = NULL;
    if (c->n_words == 0) {
        r = counted_string(c, min, max, mode, none);
    } else {
        bool excl[128];
        if (mode == JS_JSON) json_string_excl(excl);
        else memset(excl, 0, sizeof excl), excl[0] = true;
        const char *esc = mode == JS_JSON ? js_common(c, JS_ESC) : NULL;
        bool too_big = false;
        const char *inner = mode == JS_JSON && !esc ? NULL
                          : text_avoiding(c, c->words, c->n_words, excl, esc, min, max, mode == JS_JSON ? "str" : "text",
                                          &too_big);
        if (inner) {
            gram_buf b = {0};
            if (mode == JS_JSON) gram_buf_printf(&b, "\"\\\"\" %s \"\\\"\"", inner);
            else gram_buf_puts(&b, inner);
            r = js_rule(c, "string", &b);
            gram_buf_free(&b);
        } else if (too_big) {
            /* long bounds: no word can start (its first character is
             * never written raw; in JSON an escape still writes it) */
            bool first[128] = {false};
            for (size_t w = 0; w < c->n_words; w++) first[(unsigned char)c->words[w][0] & 127] = true;
            r = counted_string(c, min, max, mode, first);
        }
    }
    if (r) js_memo_put(c, key, r);
    return r;
}

const char *js_text_without(js_ctx *c, const char *const *words, size_t n_words)
{
    bool excl[128] = {0};
    excl[0] = true;
    bool too_big;
    return text_avoiding(c, words, n_words, excl, NULL, 0, UINT32_MAX, "think", &too_big);
}

void js_put_escape_body(gram_buf *b)
{
    gram_buf_puts(b, "[\"\\\\/bfnrt] | \"u\" ( "
                     "\"0\" ( \"0\" ( \"0\" [1-9a-fA-F] | [1-9a-fA-F] [0-9a-fA-F] ) | [1-9a-fA-F] [0-9a-fA-F]{2} ) "
                     "| [1-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} "
                     "| [dD] [0-7] [0-9a-fA-F]{2} "
                     "| [dD] [89abAB] [0-9a-fA-F]{2} \"\\\\u\" [dD] [c-fC-F] [0-9a-fA-F]{2} )");
}
