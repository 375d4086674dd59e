/* JSON in and out the way the reference templates see it: jansson's loader
 * (key order kept) made to accept integers beyond 64 bits, and printers that
 * match Python's json.dumps / str / repr (what HF transformers' jinja2 uses). */
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

/* Integer literals written back in full need more than jansson's 64 bits:
 * such a literal is re-read as a real (a ".0" appended), which the printers
 * below write back as the integer it was. More than this many in one text
 * is not a conversation. */
#define BIG_INT_RETRIES 64

/* jansson reports a too-big integer with the position just past it. Returns
 * the offset where ".0" goes, or -1 if the overflowing number is not a plain
 * integer literal (a real out of range stays an error). */
static long big_int_end(const char *s, size_t n, const json_error_t *je)
{
    if (json_error_code(je) != json_error_numeric_overflow || je->position <= 0 || (size_t)je->position > n)
        return -1;
    size_t end = (size_t)je->position, b = end;
    while (b > 0 && s[b - 1] >= '0' && s[b - 1] <= '9') b--;
    if (b == end) return -1;
    if (b > 0 && s[b - 1] == '-') b--;
    if (b > 0 && strchr(".eE+", s[b - 1])) return -1;
    if (end < n && strchr(".eE", s[end])) return -1;
    return (long)end;
}

json_t *chat_json_loads(const char *text, size_t len, wk_error *err)
{
    if (!text) {
        wk_fail(err, WK_EINVAL, "JSON: no text");
        return NULL;
    }
    /* Duplicate keys are refused as in the request parser: which one counts would be a guess. */
    const size_t flags = JSON_REJECT_DUPLICATES | JSON_DECODE_ANY;
    json_error_t je;
    json_t *v = json_loadb(text, len, flags, &je);
    char *copy = NULL;
    size_t n = len;
    for (int retry = 0; !v && retry < BIG_INT_RETRIES; retry++) {
        long at = big_int_end(copy ? copy : text, n, &je);
        if (at < 0) break;
        char *grown = malloc(n + 2);
        if (!grown) break;
        const char *src = copy ? copy : text;
        memcpy(grown, src, (size_t)at);
        memcpy(grown + at, ".0", 2);
        memcpy(grown + at + 2, src + at, n - (size_t)at);
        free(copy);
        copy = grown;
        n += 2;
        v = json_loadb(copy, n, flags, &je);
    }
    free(copy);
    if (!v) {
        bool deep = json_error_code(&je) == json_error_stack_overflow;
        wk_fail(err, WK_EFORMAT, "JSON: %s at byte %d", deep ? "nesting too deep" : je.text, je.position);
    }
    return v;
}

/* One JSON value (or object key) starting at text[*i]: parsed by jansson,
 * *i moved past it. NULL if there is none. */
static json_t *next_value(const char *text, size_t len, size_t *i)
{
    json_error_t je;
    json_t *v = json_loadb(text + *i, len - *i, JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (v) *i += (size_t)je.position;
    return v;
}

static void skip_ws(const char *s, size_t n, size_t *i)
{
    while (*i < n && (s[*i] == ' ' || s[*i] == '\t' || s[*i] == '\n' || s[*i] == '\r')) (*i)++;
}

int chat_json_member_span(const char *text, size_t len, const char *key, size_t *b, size_t *e)
{
    size_t i = 0;
    skip_ws(text, len, &i);
    if (i >= len || text[i] != '{') return -1;
    i++;
    for (;;) {
        skip_ws(text, len, &i);
        if (i >= len || text[i] != '"') return -1;
        json_t *k = next_value(text, len, &i);
        bool match = json_is_string(k) && !strcmp(json_string_value(k), key);
        json_decref(k);
        if (!k) return -1;
        skip_ws(text, len, &i);
        if (i >= len || text[i] != ':') return -1;
        i++;
        skip_ws(text, len, &i);
        size_t vb = i;
        json_t *v = next_value(text, len, &i);
        if (!v) return -1;
        json_decref(v);
        if (match) {
            *b = vb;
            *e = i;
            return 0;
        }
        skip_ws(text, len, &i);
        if (i < len && text[i] == ',') {
            i++;
            continue;
        }
        return -1;
    }
}

const char *chat_json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
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

bool chat_type_allows_string(const json_t *type)
{
    if (json_is_string(type)) return !strcmp(json_string_value(type), "string");
    size_t i;
    const json_t *t;
    json_array_foreach(type, i, t) if (json_is_string(t) && !strcmp(json_string_value(t), "string")) return true;
    return false;
}
