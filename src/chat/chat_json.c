/* JSON in and out the way the reference templates see it: a loader that keeps
 * key order and accepts integers beyond 64 bits, and printers that match
 * Python's json.dumps / str / repr (what HF transformers' jinja2 uses). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_internal.h"

/* ---------------------------------------------------------------- chat_str */

int cs_append(chat_str *s, const char *data, size_t len)
{
    if (s->len + len + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 64;
        while (cap < s->len + len + 1) cap *= 2;
        char *d = realloc(s->data, cap);
        if (!d) return WK_ENOMEM;
        s->data = d;
        s->cap = cap;
    }
    if (len) memcpy(s->data + s->len, data, len);
    s->len += len;
    s->data[s->len] = 0;
    return 0;
}

int cs_puts(chat_str *s, const char *z) { return cs_append(s, z, strlen(z)); }
int cs_putc(chat_str *s, char c) { return cs_append(s, &c, 1); }

void cs_free(chat_str *s)
{
    free(s->data);
    s->data = NULL;
    s->len = s->cap = 0;
}

/* ------------------------------------------------------------------ loader */

/* Nesting cap: deeper input is hostile, not a conversation. */
#define JSON_MAX_DEPTH 256

typedef struct jparser {
    const char *s;
    size_t n, i;
    wk_error *err;
    int failed;
} jparser;

static void jfail(jparser *p, const char *what)
{
    if (!p->failed) wk_fail(p->err, WK_EFORMAT, "JSON: %s at byte %zu", what, p->i);
    p->failed = 1;
}

static void jskip_ws(jparser *p)
{
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->i++;
    }
}

static int hex4(const char *s, unsigned *out)
{
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[k];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

static int put_utf8(chat_str *o, unsigned cp)
{
    char b[4];
    size_t n;
    if (cp < 0x80) { b[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { b[0] = (char)(0xC0 | (cp >> 6)); b[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) {
        b[0] = (char)(0xE0 | (cp >> 12)); b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (char)(0x80 | (cp & 0x3F)); n = 3;
    } else {
        b[0] = (char)(0xF0 | (cp >> 18)); b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); b[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
    }
    return cs_append(o, b, n);
}

/* Parses a string token at p->i (which is at '"') into o. */
static int jstring(jparser *p, chat_str *o)
{
    p->i++; /* opening quote */
    while (p->i < p->n) {
        unsigned char c = (unsigned char)p->s[p->i];
        if (c == '"') { p->i++; return 0; }
        if (c < 0x20) { jfail(p, "control character in string"); return -1; }
        if (c != '\\') {
            size_t j = p->i;
            while (j < p->n && p->s[j] != '"' && p->s[j] != '\\' && (unsigned char)p->s[j] >= 0x20) j++;
            if (cs_append(o, p->s + p->i, j - p->i)) { jfail(p, "out of memory"); return -1; }
            p->i = j;
            continue;
        }
        if (p->i + 1 >= p->n) break;
        char e = p->s[p->i + 1];
        p->i += 2;
        char lit = 0;
        switch (e) {
        case '"': lit = '"'; break;
        case '\\': lit = '\\'; break;
        case '/': lit = '/'; break;
        case 'b': lit = '\b'; break;
        case 'f': lit = '\f'; break;
        case 'n': lit = '\n'; break;
        case 'r': lit = '\r'; break;
        case 't': lit = '\t'; break;
        case 'u': {
            unsigned cp;
            if (p->i + 4 > p->n || hex4(p->s + p->i, &cp)) { jfail(p, "bad \\u escape"); return -1; }
            p->i += 4;
            if (cp >= 0xD800 && cp < 0xDC00) {
                unsigned lo;
                if (p->i + 6 <= p->n && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u' &&
                    !hex4(p->s + p->i + 2, &lo) && lo >= 0xDC00 && lo < 0xE000) {
                    p->i += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                } else {
                    jfail(p, "unpaired UTF-16 surrogate");
                    return -1;
                }
            } else if (cp >= 0xDC00 && cp < 0xE000) {
                jfail(p, "unpaired UTF-16 surrogate");
                return -1;
            }
            if (put_utf8(o, cp)) { jfail(p, "out of memory"); return -1; }
            continue;
        }
        default: jfail(p, "bad escape"); return -1;
        }
        if (cs_putc(o, lit)) { jfail(p, "out of memory"); return -1; }
    }
    jfail(p, "unterminated string");
    return -1;
}

static json_t *jvalue(jparser *p, int depth);

static json_t *jnumber(jparser *p)
{
    size_t b = p->i, i = p->i;
    bool is_int = true;
    if (i < p->n && p->s[i] == '-') i++;
    if (i < p->n && p->s[i] == '0') i++;
    else if (i < p->n && p->s[i] >= '1' && p->s[i] <= '9') while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9') i++;
    else { jfail(p, "bad number"); return NULL; }
    if (i < p->n && p->s[i] == '.') {
        is_int = false;
        i++;
        size_t d = i;
        while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9') i++;
        if (i == d) { jfail(p, "bad number"); return NULL; }
    }
    if (i < p->n && (p->s[i] == 'e' || p->s[i] == 'E')) {
        is_int = false;
        i++;
        if (i < p->n && (p->s[i] == '+' || p->s[i] == '-')) i++;
        size_t d = i;
        while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9') i++;
        if (i == d) { jfail(p, "bad number"); return NULL; }
    }
    char buf[512];
    if (i - b >= sizeof buf) { jfail(p, "number too long"); return NULL; }
    memcpy(buf, p->s + b, i - b);
    buf[i - b] = 0;
    p->i = i;
    if (is_int) {
        errno = 0;
        long long v = strtoll(buf, NULL, 10);
        if (errno != ERANGE) return json_integer((json_int_t)v);
        /* beyond 64 bits: kept as an integral real, printed back in full */
    }
    double d = strtod(buf, NULL);
    if (!isfinite(d)) { jfail(p, "number out of range"); return NULL; }
    return json_real(d);
}

static json_t *jvalue(jparser *p, int depth)
{
    if (depth > JSON_MAX_DEPTH) { jfail(p, "nesting too deep"); return NULL; }
    jskip_ws(p);
    if (p->i >= p->n) { jfail(p, "unexpected end"); return NULL; }
    char c = p->s[p->i];
    if (c == '{') {
        json_t *o = json_object();
        if (!o) { jfail(p, "out of memory"); return NULL; }
        p->i++;
        jskip_ws(p);
        if (p->i < p->n && p->s[p->i] == '}') { p->i++; return o; }
        for (;;) {
            jskip_ws(p);
            if (p->i >= p->n || p->s[p->i] != '"') { jfail(p, "expected object key"); break; }
            chat_str key = {0};
            if (jstring(p, &key)) { cs_free(&key); break; }
            jskip_ws(p);
            if (p->i >= p->n || p->s[p->i] != ':') { cs_free(&key); jfail(p, "expected ':'"); break; }
            p->i++;
            json_t *v = jvalue(p, depth + 1);
            if (!v) { cs_free(&key); break; }
            int rc = json_object_setn_new(o, key.data ? key.data : "", key.len, v);
            cs_free(&key);
            if (rc) { jfail(p, "bad object key"); break; }
            jskip_ws(p);
            if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
            if (p->i < p->n && p->s[p->i] == '}') { p->i++; return o; }
            jfail(p, "expected ',' or '}'");
            break;
        }
        json_decref(o);
        return NULL;
    }
    if (c == '[') {
        json_t *a = json_array();
        if (!a) { jfail(p, "out of memory"); return NULL; }
        p->i++;
        jskip_ws(p);
        if (p->i < p->n && p->s[p->i] == ']') { p->i++; return a; }
        for (;;) {
            json_t *v = jvalue(p, depth + 1);
            if (!v) break;
            if (json_array_append_new(a, v)) { jfail(p, "out of memory"); break; }
            jskip_ws(p);
            if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
            if (p->i < p->n && p->s[p->i] == ']') { p->i++; return a; }
            jfail(p, "expected ',' or ']'");
            break;
        }
        json_decref(a);
        return NULL;
    }
    if (c == '"') {
        chat_str s = {0};
        if (jstring(p, &s)) { cs_free(&s); return NULL; }
        json_t *v = json_stringn(s.data ? s.data : "", s.len);
        cs_free(&s);
        if (!v) jfail(p, "string is not valid UTF-8");
        return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return jnumber(p);
    static const struct { const char *word; int kind; } words[] = {{"true", 1}, {"false", 2}, {"null", 3}};
    for (size_t k = 0; k < 3; k++) {
        size_t wl = strlen(words[k].word);
        if (p->n - p->i >= wl && !memcmp(p->s + p->i, words[k].word, wl)) {
            p->i += wl;
            return words[k].kind == 1 ? json_true() : words[k].kind == 2 ? json_false() : json_null();
        }
    }
    jfail(p, "unexpected character");
    return NULL;
}

json_t *chat_json_loads(const char *text, size_t len, wk_error *err)
{
    jparser p = {.s = text, .n = len, .i = 0, .err = err, .failed = 0};
    if (!text) { wk_fail(err, WK_EINVAL, "JSON: no text"); return NULL; }
    json_t *v = jvalue(&p, 0);
    if (!v) return NULL;
    jskip_ws(&p);
    if (p.i != p.n) {
        jfail(&p, "trailing characters");
        json_decref(v);
        return NULL;
    }
    return v;
}

int chat_json_member_span(const char *text, size_t len, const char *key, size_t *b, size_t *e)
{
    wk_error scratch;
    jparser p = {.s = text, .n = len, .i = 0, .err = &scratch, .failed = 0};
    jskip_ws(&p);
    if (p.i >= p.n || p.s[p.i] != '{') return -1;
    p.i++;
    for (;;) {
        jskip_ws(&p);
        if (p.i >= p.n || p.s[p.i] != '"') return -1;
        chat_str k = {0};
        if (jstring(&p, &k)) { cs_free(&k); return -1; }
        bool match = k.len == strlen(key) && !memcmp(k.data, key, k.len);
        cs_free(&k);
        jskip_ws(&p);
        if (p.i >= p.n || p.s[p.i] != ':') return -1;
        p.i++;
        jskip_ws(&p);
        size_t vb = p.i;
        json_t *v = jvalue(&p, 1);
        if (!v) return -1;
        json_decref(v);
        if (match) {
            *b = vb;
            *e = p.i;
            return 0;
        }
        jskip_ws(&p);
        if (p.i < p.n && p.s[p.i] == ',') { p.i++; continue; }
        return -1;
    }
}

/* ---------------------------------------------------------------- printers */

/* Integers too large for json_integer arrive as integral reals (see
 * chat_json_loads); write those in full as Python writes its ints. A real
 * literal in the same range (2^63 <= |x| < 1e21, the range where
 * JavaScript also prints integers in full) is indistinguishable and is
 * written the same way; beyond 1e21 Python's float repr is used. */
static bool is_big_integral(double d)
{
    return isfinite(d) && fabs(d) >= 9223372036854775808.0 && fabs(d) < 1e21 && d == floor(d);
}

int chat_pyfloat(chat_str *out, double d)
{
    char buf[64];
    if (isnan(d)) return cs_puts(out, "NaN");
    if (isinf(d)) return cs_puts(out, d < 0 ? "-Infinity" : "Infinity");
    if (d == 0) return cs_puts(out, signbit(d) ? "-0.0" : "0.0");
    /* shortest %.*e that reads back exactly = Python's repr digits */
    int prec;
    for (prec = 0; prec < 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec, d);
        if (strtod(buf, NULL) == d) break;
    }
    snprintf(buf, sizeof buf, "%.*e", prec, d);
    /* split into sign, digits, exponent */
    char digits[32];
    size_t nd = 0;
    const char *q = buf;
    bool neg = false;
    if (*q == '-') { neg = true; q++; }
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9') digits[nd++] = *q;
    int exp10 = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    chat_str t = {0};
    int rc = 0;
    if (neg) rc |= cs_putc(&t, '-');
    if (exp10 < -4 || exp10 >= 16) {
        rc |= cs_putc(&t, digits[0]);
        if (nd > 1) { rc |= cs_putc(&t, '.'); rc |= cs_append(&t, digits + 1, nd - 1); }
        char e[16];
        snprintf(e, sizeof e, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
        rc |= cs_puts(&t, e);
    } else if (exp10 < 0) {
        rc |= cs_puts(&t, "0.");
        for (int k = 0; k < -exp10 - 1; k++) rc |= cs_putc(&t, '0');
        rc |= cs_append(&t, digits, nd);
    } else {
        size_t int_digits = (size_t)exp10 + 1;
        for (size_t k = 0; k < int_digits; k++) rc |= cs_putc(&t, k < nd ? digits[k] : '0');
        rc |= cs_putc(&t, '.');
        if (nd > int_digits) rc |= cs_append(&t, digits + int_digits, nd - int_digits);
        else rc |= cs_putc(&t, '0');
    }
    if (!rc) rc = cs_append(out, t.data, t.len);
    cs_free(&t);
    return rc ? WK_ENOMEM : 0;
}

static int put_number(chat_str *out, const json_t *v)
{
    char buf[64];
    if (json_is_integer(v)) {
        snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
        return cs_puts(out, buf);
    }
    double d = json_real_value(v);
    if (is_big_integral(d)) {
        snprintf(buf, sizeof buf, "%.0f", d);
        return cs_puts(out, buf);
    }
    return chat_pyfloat(out, d);
}

static int json_escape_string(chat_str *out, const char *s, size_t n)
{
    int rc = cs_putc(out, '"');
    size_t run = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char ubuf[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(ubuf, sizeof ubuf, "\\u%04x", c);
                esc = ubuf;
            }
        }
        if (esc) {
            rc |= cs_append(out, s + run, i - run);
            rc |= cs_puts(out, esc);
            run = i + 1;
        }
    }
    rc |= cs_append(out, s + run, n - run);
    rc |= cs_putc(out, '"');
    return rc ? WK_ENOMEM : 0;
}

int chat_tojson(chat_str *out, const json_t *v)
{
    int rc = 0;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *val;
        bool first = true;
        rc |= cs_putc(out, '{');
        json_object_foreach((json_t *)v, key, val) {
            if (!first) rc |= cs_puts(out, ", ");
            first = false;
            rc |= json_escape_string(out, key, strlen(key));
            rc |= cs_puts(out, ": ");
            rc |= chat_tojson(out, val);
        }
        rc |= cs_putc(out, '}');
        break;
    }
    case JSON_ARRAY: {
        rc |= cs_putc(out, '[');
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) rc |= cs_puts(out, ", ");
            rc |= chat_tojson(out, json_array_get(v, i));
        }
        rc |= cs_putc(out, ']');
        break;
    }
    case JSON_STRING: rc |= json_escape_string(out, json_string_value(v), json_string_length(v)); break;
    case JSON_INTEGER:
    case JSON_REAL: rc |= put_number(out, v); break;
    case JSON_TRUE: rc |= cs_puts(out, "true"); break;
    case JSON_FALSE: rc |= cs_puts(out, "false"); break;
    case JSON_NULL: rc |= cs_puts(out, "null"); break;
    }
    return rc ? WK_ENOMEM : 0;
}

/* Python repr() of a str: single quotes unless the text has ' and no ". */
static int py_repr_string(chat_str *out, const char *s, size_t n)
{
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    int rc = cs_putc(out, q);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char buf[8];
        if (c == (unsigned char)q || c == '\\') { rc |= cs_putc(out, '\\'); rc |= cs_putc(out, (char)c); }
        else if (c == '\n') rc |= cs_puts(out, "\\n");
        else if (c == '\r') rc |= cs_puts(out, "\\r");
        else if (c == '\t') rc |= cs_puts(out, "\\t");
        else if (c < 0x20 || c == 0x7F) { snprintf(buf, sizeof buf, "\\x%02x", c); rc |= cs_puts(out, buf); }
        else if (c == 0xC2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 && (unsigned char)s[i + 1] < 0xA0) {
            /* C1 controls U+0080..U+009F are not printable either */
            snprintf(buf, sizeof buf, "\\x%02x", (unsigned char)s[i + 1]);
            rc |= cs_puts(out, buf);
            i++;
        } else rc |= cs_putc(out, (char)c);
    }
    rc |= cs_putc(out, q);
    return rc ? WK_ENOMEM : 0;
}

static int py_repr(chat_str *out, const json_t *v)
{
    int rc = 0;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *val;
        bool first = true;
        rc |= cs_putc(out, '{');
        json_object_foreach((json_t *)v, key, val) {
            if (!first) rc |= cs_puts(out, ", ");
            first = false;
            rc |= py_repr_string(out, key, strlen(key));
            rc |= cs_puts(out, ": ");
            rc |= py_repr(out, val);
        }
        rc |= cs_putc(out, '}');
        break;
    }
    case JSON_ARRAY:
        rc |= cs_putc(out, '[');
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) rc |= cs_puts(out, ", ");
            rc |= py_repr(out, json_array_get(v, i));
        }
        rc |= cs_putc(out, ']');
        break;
    case JSON_STRING: rc |= py_repr_string(out, json_string_value(v), json_string_length(v)); break;
    default: rc |= chat_pystr(out, v); break;
    }
    return rc ? WK_ENOMEM : 0;
}

int chat_pystr(chat_str *out, const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_STRING: return cs_append(out, json_string_value(v), json_string_length(v));
    case JSON_INTEGER:
    case JSON_REAL: return put_number(out, v);
    case JSON_TRUE: return cs_puts(out, "True");
    case JSON_FALSE: return cs_puts(out, "False");
    case JSON_NULL: return cs_puts(out, "None");
    default: return py_repr(out, v);
    }
}

/* ------------------------------------------------------------ whitespace */

/* Decodes the UTF-8 character starting at s[i] (i < e); returns its length
 * (1 for invalid bytes) and the code point in *cp. */
static size_t utf8_at(const char *s, size_t i, size_t e, unsigned *cp)
{
    unsigned char c = (unsigned char)s[i];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + n > e) n = 1;
    if (n == 1) { *cp = c < 0x80 ? c : 0xFFFD; return 1; }
    unsigned v = c & (0x7F >> n);
    for (size_t k = 1; k < n; k++) {
        unsigned char cc = (unsigned char)s[i + k];
        if ((cc & 0xC0) != 0x80) { *cp = 0xFFFD; return 1; }
        v = (v << 6) | (cc & 0x3F);
    }
    *cp = v;
    return n;
}

/* Python's str.isspace(): characters of Unicode category Zs or bidi class
 * WS/B/S. */
static bool py_isspace(unsigned cp)
{
    if ((cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20)) return true;
    switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
        return true;
    }
    return cp >= 0x2000 && cp <= 0x200A;
}

void chat_strip_space(const char *s, size_t *b, size_t *e, bool left, bool right)
{
    if (left) {
        while (*b < *e) {
            unsigned cp;
            size_t n = utf8_at(s, *b, *e, &cp);
            if (!py_isspace(cp)) break;
            *b += n;
        }
    }
    if (right) {
        while (*e > *b) {
            /* step back to the start of the last character */
            size_t k = *e - 1;
            while (k > *b && ((unsigned char)s[k] & 0xC0) == 0x80 && *e - k < 4) k--;
            unsigned cp;
            size_t n = utf8_at(s, k, *e, &cp);
            if (k + n != *e) break; /* invalid UTF-8 is never whitespace */
            if (!py_isspace(cp)) break;
            *e = k;
        }
    }
}

void chat_strip_char(const char *s, size_t *b, size_t *e, char c, bool left, bool right)
{
    if (left) while (*b < *e && s[*b] == c) (*b)++;
    if (right) while (*e > *b && s[*e - 1] == c) (*e)--;
}
