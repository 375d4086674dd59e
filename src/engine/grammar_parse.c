/* GBNF text → compiled grammar (rules of alternatives of byte-level
 * elements). Character classes over code points become rules of UTF-8
 * byte-range sequences with common leading ranges factored out, so that a
 * class is matched deterministically byte by byte. Groups and repeated
 * terms become anonymous rules; a token literal becomes a rule with two
 * gated alternatives (the special token, or its text when the vocabulary
 * has no such token). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar_impl.h"
#include "engine/grammar_text.h"

/* Sizes beyond these are hostile or mistaken, not grammars. */
#define MAX_TEXT_BYTES (64u << 20)
#define MAX_RULES (1u << 22)
#define MAX_ELEMS (1u << 25)
#define MAX_REPEAT 1000000u
#define MAX_NESTING 256 /* parentheses */

/* ---- rules under construction ---- */

typedef struct b_alt {
    gram_elem *e;
    size_t n, cap;
    uint32_t gate;
} b_alt;

typedef struct b_rule {
    char *name;
    b_alt *alts;
    size_t n, cap;
    int defined;
    size_t first_use; /* text offset of the first reference (messages) */
} b_rule;

typedef struct parser {
    const char *s;
    size_t n, i;
    wk_error *err;
    int failed;
    b_rule *rules;
    size_t n_rules, cap_rules;
    size_t n_elems;
    gram_smap names, class_rules, set_index, special_index;
    uint8_t (*sets)[32];
    size_t n_sets, cap_sets;
    char **specials;
    size_t n_specials, cap_specials;
    uint32_t anon;
    int depth;
} parser;

static int fail_at(parser *p, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_at(parser *p, size_t at, const char *fmt, ...)
{
    if (p->failed) return p->err ? p->err->code : WK_EINVAL;
    p->failed = 1;
    char msg[WK_ERROR_MSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* line and column of the offset */
    size_t line = 1, col = 1;
    for (size_t k = 0; k < at && k < p->n; k++) {
        if (p->s[k] == '\n') { line++; col = 1; }
        else col++;
    }
    return wk_fail(p->err, WK_EINVAL, "grammar line %zu col %zu: %s", line, col, msg);
}

static int oom(parser *p)
{
    if (!p->failed) wk_fail(p->err, WK_ENOMEM, "grammar: out of memory");
    p->failed = 1;
    return WK_ENOMEM;
}

static uint32_t new_rule(parser *p, const char *name, size_t len)
{
    if (p->n_rules >= MAX_RULES) {
        fail_at(p, p->i, "more than %u rules", MAX_RULES);
        return GRAM_NONE;
    }
    if (p->n_rules == p->cap_rules) {
        size_t cap = p->cap_rules ? p->cap_rules * 2 : 64;
        b_rule *r = realloc(p->rules, cap * sizeof *r);
        if (!r) { oom(p); return GRAM_NONE; }
        p->rules = r;
        p->cap_rules = cap;
    }
    b_rule *r = &p->rules[p->n_rules];
    memset(r, 0, sizeof *r);
    r->name = malloc(len + 1);
    if (!r->name) { oom(p); return GRAM_NONE; }
    memcpy(r->name, name, len);
    r->name[len] = 0;
    r->first_use = p->i;
    return (uint32_t)p->n_rules++;
}

/* An anonymous rule named after the rule it is part of. */
static uint32_t new_anon_rule(parser *p, uint32_t owner)
{
    char name[96];
    int k = snprintf(name, sizeof name, "%.64s-%u", owner == GRAM_NONE ? "anon" : p->rules[owner].name, ++p->anon);
    uint32_t r = new_rule(p, name, (size_t)k);
    if (r != GRAM_NONE) p->rules[r].defined = 1;
    return r;
}

static uint32_t rule_by_name(parser *p, const char *name, size_t len)
{
    uint32_t r;
    if (gram_smap_get(&p->names, name, len, &r)) return r;
    r = new_rule(p, name, len);
    if (r == GRAM_NONE) return r;
    if (gram_smap_put(&p->names, name, len, r)) { oom(p); return GRAM_NONE; }
    return r;
}

static uint32_t add_alt(parser *p, uint32_t rule, uint32_t gate)
{
    b_rule *r = &p->rules[rule];
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 4;
        b_alt *a = realloc(r->alts, cap * sizeof *a);
        if (!a) { oom(p); return GRAM_NONE; }
        r->alts = a;
        r->cap = cap;
    }
    memset(&r->alts[r->n], 0, sizeof r->alts[r->n]);
    r->alts[r->n].gate = gate;
    return (uint32_t)r->n++;
}

static int add_elem(parser *p, uint32_t rule, uint32_t alt, gram_elem e)
{
    if (p->n_elems >= MAX_ELEMS) return fail_at(p, p->i, "more than %u grammar elements", MAX_ELEMS);
    b_alt *a = &p->rules[rule].alts[alt];
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 8;
        gram_elem *v = realloc(a->e, cap * sizeof *v);
        if (!v) return oom(p);
        a->e = v;
        a->cap = cap;
    }
    a->e[a->n++] = e;
    p->n_elems++;
    return 0;
}

static uint32_t set_id(parser *p, const uint8_t set[32])
{
    uint32_t id;
    if (gram_smap_get(&p->set_index, set, 32, &id)) return id;
    if (p->n_sets == p->cap_sets) {
        size_t cap = p->cap_sets ? p->cap_sets * 2 : 32;
        uint8_t(*v)[32] = realloc(p->sets, cap * sizeof *v);
        if (!v) { oom(p); return GRAM_NONE; }
        p->sets = v;
        p->cap_sets = cap;
    }
    memcpy(p->sets[p->n_sets], set, 32);
    id = (uint32_t)p->n_sets++;
    if (gram_smap_put(&p->set_index, set, 32, id)) { oom(p); return GRAM_NONE; }
    return id;
}

static int add_byte_range(parser *p, uint32_t rule, uint32_t alt, unsigned lo, unsigned hi)
{
    uint8_t set[32] = {0};
    for (unsigned b = lo; b <= hi; b++) gram_set_add(set, b);
    uint32_t id = set_id(p, set);
    if (id == GRAM_NONE) return WK_ENOMEM;
    return add_elem(p, rule, alt, (gram_elem){.kind = GE_BYTES, .arg = id});
}

/* ---- lexical helpers ---- */

static int is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

static void skip_space(parser *p)
{
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') p->i++;
        else if (c == '#') while (p->i < p->n && p->s[p->i] != '\n') p->i++;
        else break;
    }
}

static size_t name_len_at(const parser *p, size_t at)
{
    size_t k = at;
    while (k < p->n && is_name_char(p->s[k])) k++;
    return k - at;
}

/* Whether a rule definition `name ::=` starts at p->i. */
static int at_rule_start(parser *p)
{
    size_t len = name_len_at(p, p->i);
    if (!len) return 0;
    size_t save = p->i;
    p->i += len;
    skip_space(p);
    int yes = p->n - p->i >= 3 && !memcmp(p->s + p->i, "::=", 3);
    p->i = save;
    return yes;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class at p->i (escape or UTF-8). Returns
 * 0 and the code point, or fails. */
static int read_char(parser *p, uint32_t *cp)
{
    size_t at = p->i;
    if (p->s[p->i] != '\\') {
        size_t k = gram_utf8_decode(p->s + p->i, p->n - p->i, cp);
        if (!k) return fail_at(p, at, "invalid UTF-8 in the grammar text");
        p->i += k;
        return 0;
    }
    if (p->i + 1 >= p->n) return fail_at(p, at, "escape at end of text");
    char e = p->s[p->i + 1];
    p->i += 2;
    int digits = 0;
    switch (e) {
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 't': *cp = '\t'; return 0;
    case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'': *cp = (uint32_t)e; return 0;
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    default:
        if ((unsigned char)e >= 0x20 && (unsigned char)e < 0x7F) return fail_at(p, at, "unknown escape \\%c", e);
        return fail_at(p, at, "unknown escape: backslash before byte 0x%02X", (unsigned char)e);
    }
    uint32_t v = 0;
    for (int k = 0; k < digits; k++) {
        int h = p->i < p->n ? hex_value(p->s[p->i]) : -1;
        if (h < 0) return fail_at(p, at, "escape \\%c needs %d hex digits", e, digits);
        v = v << 4 | (uint32_t)h;
        p->i++;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF && e != 'x'))
        return fail_at(p, at, "escape \\%c%0*X is not a Unicode scalar value", e, digits, v);
    *cp = v;
    return 0;
}

/* ---- terms ---- */

static int parse_alternatives(parser *p, uint32_t rule);

/* "literal": one byte element per byte (\xHH is a raw byte). */
static int parse_literal(parser *p, uint32_t rule, uint32_t alt)
{
    size_t at = p->i++;
    while (p->i < p->n && p->s[p->i] != '"') {
        int raw_byte = p->s[p->i] == '\\' && p->i + 1 < p->n && p->s[p->i + 1] == 'x';
        uint32_t cp;
        if (read_char(p, &cp)) return WK_EINVAL;
        uint8_t b[4];
        int nb;
        if (raw_byte || cp < 0x80) { b[0] = (uint8_t)cp; nb = 1; }
        else if (cp < 0x800) { b[0] = (uint8_t)(0xC0 | cp >> 6); b[1] = (uint8_t)(0x80 | (cp & 0x3F)); nb = 2; }
        else if (cp < 0x10000) {
            b[0] = (uint8_t)(0xE0 | cp >> 12); b[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
            b[2] = (uint8_t)(0x80 | (cp & 0x3F)); nb = 3;
        } else {
            b[0] = (uint8_t)(0xF0 | cp >> 18); b[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
            b[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F)); b[3] = (uint8_t)(0x80 | (cp & 0x3F)); nb = 4;
        }
        for (int k = 0; k < nb; k++)
            if (add_byte_range(p, rule, alt, b[k], b[k])) return WK_EINVAL;
    }
    if (p->i >= p->n) return fail_at(p, at, "unterminated literal");
    p->i++;
    return 0;
}

static int cmp_range(const void *a, const void *b)
{
    const gram_cp_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Rule for UTF-8 sequences seq[0..n) (all of one length from position k
 * on, sharing bytes before k): alternatives grouped by their byte range at
 * k, each group's tails in a sub-rule. */
static uint32_t utf8_rule(parser *p, uint32_t owner, const gram_utf8_seq *seq, size_t n, int k)
{
    uint32_t r = new_anon_rule(p, owner);
    if (r == GRAM_NONE) return r;
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && seq[j].n == seq[i].n && seq[j].lo[k] == seq[i].lo[k] && seq[j].hi[k] == seq[i].hi[k]) j++;
        uint32_t a = add_alt(p, r, GRAM_NONE);
        if (a == GRAM_NONE || add_byte_range(p, r, a, seq[i].lo[k], seq[i].hi[k])) return GRAM_NONE;
        if (j - i == 1) {
            for (int m = k + 1; m < seq[i].n; m++)
                if (add_byte_range(p, r, a, seq[i].lo[m], seq[i].hi[m])) return GRAM_NONE;
        } else if (k + 1 < seq[i].n) {
            uint32_t sub = utf8_rule(p, owner, seq + i, j - i, k + 1);
            if (sub == GRAM_NONE || add_elem(p, r, a, (gram_elem){.kind = GE_RULE, .arg = sub})) return GRAM_NONE;
        }
        i = j;
    }
    return r;
}

/* Element for a code point set: one byte set when it is all ASCII, else a
 * (shared) rule of UTF-8 sequences. */
static int add_class_elem(parser *p, uint32_t rule, uint32_t alt, gram_cp_range *rg, size_t n, size_t at)
{
    /* sort, merge, drop surrogates */
    if (n) qsort(rg, n, sizeof *rg, cmp_range);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && rg[i].lo <= rg[m - 1].hi + 1) {
            if (rg[i].hi > rg[m - 1].hi) rg[m - 1].hi = rg[i].hi;
        } else {
            rg[m++] = rg[i];
        }
    }
    gram_cp_range clean[2 * 64 + 2];
    gram_cp_range *c = m * 2 + 2 <= sizeof clean / sizeof clean[0] ? clean : malloc((m * 2 + 2) * sizeof *c);
    if (!c) return oom(p);
    size_t nc = 0;
    for (size_t i = 0; i < m; i++) {
        uint32_t lo = rg[i].lo, hi = rg[i].hi;
        if (lo < 0xD800 && hi >= 0xD800) {
            c[nc++] = (gram_cp_range){lo, 0xD7FF};
            if (hi > 0xDFFF) c[nc++] = (gram_cp_range){0xE000, hi};
        } else if (lo >= 0xD800 && lo <= 0xDFFF) {
            if (hi > 0xDFFF) c[nc++] = (gram_cp_range){0xE000, hi};
        } else {
            c[nc++] = rg[i];
        }
    }
    int rc = 0;
    if (nc == 0) {
        rc = fail_at(p, at, "character class matches nothing");
    } else if (c[nc - 1].hi < 0x80) {
        uint8_t set[32] = {0};
        for (size_t i = 0; i < nc; i++)
            for (uint32_t b = c[i].lo; b <= c[i].hi; b++) gram_set_add(set, b);
        uint32_t id = set_id(p, set);
        rc = id == GRAM_NONE ? WK_ENOMEM : add_elem(p, rule, alt, (gram_elem){.kind = GE_BYTES, .arg = id});
    } else {
        uint32_t r;
        if (!gram_smap_get(&p->class_rules, c, nc * sizeof *c, &r)) {
            gram_utf8_seq *seq;
            size_t ns;
            if (gram_utf8_sequences(c, nc, &seq, &ns)) {
                rc = oom(p);
                goto done;
            }
            r = utf8_rule(p, rule, seq, ns, 0);
            free(seq);
            if (r == GRAM_NONE || gram_smap_put(&p->class_rules, c, nc * sizeof *c, r)) {
                rc = p->failed ? WK_EINVAL : oom(p);
                goto done;
            }
        }
        rc = add_elem(p, rule, alt, (gram_elem){.kind = GE_RULE, .arg = r});
    }
done:
    if (c != clean) free(c);
    return rc;
}

static int parse_class(parser *p, uint32_t rule, uint32_t alt)
{
    size_t at = p->i++;
    int negate = p->i < p->n && p->s[p->i] == '^';
    if (negate) p->i++;
    gram_cp_range *rg = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    while (p->i < p->n && p->s[p->i] != ']') {
        uint32_t lo, hi;
        if ((rc = read_char(p, &lo))) goto done;
        hi = lo;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            if ((rc = read_char(p, &hi))) goto done;
            if (hi < lo) { rc = fail_at(p, at, "class range %04X-%04X is reversed", lo, hi); goto done; }
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            gram_cp_range *v = realloc(rg, cap * sizeof *v);
            if (!v) { rc = oom(p); goto done; }
            rg = v;
        }
        rg[n++] = (gram_cp_range){lo, hi};
    }
    if (p->i >= p->n) { rc = fail_at(p, at, "unterminated character class"); goto done; }
    p->i++;
    if (negate) {
        /* complement over the code points */
        if (n) qsort(rg, n, sizeof *rg, cmp_range);
        gram_cp_range *inv = malloc((n + 1) * sizeof *inv);
        if (!inv) { rc = oom(p); goto done; }
        size_t m = 0;
        uint32_t next = 0;
        for (size_t i = 0; i < n; i++) {
            if (rg[i].lo > next) inv[m++] = (gram_cp_range){next, rg[i].lo - 1};
            if (rg[i].hi + 1 > next) next = rg[i].hi + 1;
        }
        if (next <= 0x10FFFF) inv[m++] = (gram_cp_range){next, 0x10FFFF};
        free(rg);
        rg = inv;
        n = m;
    }
    rc = add_class_elem(p, rule, alt, rg, n, at);
done:
    free(rg);
    return rc;
}

static int parse_any(parser *p, uint32_t rule, uint32_t alt)
{
    size_t at = p->i++;
    gram_cp_range all = {0, 0x10FFFF};
    return add_class_elem(p, rule, alt, &all, 1, at);
}

/* <text>: a rule with the special token, or (gated) its text. */
static int parse_token_literal(parser *p, uint32_t rule, uint32_t alt)
{
    size_t at = p->i;
    size_t k = p->i + 1;
    while (k < p->n && p->s[k] != '>' && p->s[k] != ' ' && p->s[k] != '\n' && p->s[k] != '\t' && p->s[k] != '\r')
        k++;
    if (k >= p->n || p->s[k] != '>' || k == p->i + 1) return fail_at(p, at, "token literal must be <text> without spaces");
    const char *text = p->s + p->i;
    size_t len = k + 1 - p->i;
    p->i = k + 1;
    uint32_t r;
    if (!gram_smap_get(&p->special_index, text, len, &r)) {
        if (p->n_specials == p->cap_specials) {
            size_t cap = p->cap_specials ? p->cap_specials * 2 : 8;
            char **v = realloc(p->specials, cap * sizeof *v);
            if (!v) return oom(p);
            p->specials = v;
            p->cap_specials = cap;
        }
        char *copy = strndup(text, len);
        if (!copy) return oom(p);
        uint32_t k_special = (uint32_t)p->n_specials;
        p->specials[p->n_specials++] = copy;
        r = new_anon_rule(p, rule);
        if (r == GRAM_NONE) return WK_EINVAL;
        uint32_t a = add_alt(p, r, 2 * k_special);
        if (a == GRAM_NONE || add_elem(p, r, a, (gram_elem){.kind = GE_SPECIAL, .arg = k_special})) return WK_EINVAL;
        a = add_alt(p, r, 2 * k_special + 1);
        if (a == GRAM_NONE) return WK_EINVAL;
        for (size_t b = 0; b < len; b++)
            if (add_byte_range(p, r, a, (uint8_t)text[b], (uint8_t)text[b])) return WK_EINVAL;
        if (gram_smap_put(&p->special_index, text, len, r)) return oom(p);
    }
    return add_elem(p, rule, alt, (gram_elem){.kind = GE_RULE, .arg = r});
}

static int parse_uint(parser *p, uint32_t *v)
{
    size_t at = p->i;
    uint64_t x = 0;
    if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return fail_at(p, at, "expected a number");
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        x = x * 10 + (uint64_t)(p->s[p->i++] - '0');
        if (x > MAX_REPEAT) return fail_at(p, at, "repetition count above %u", MAX_REPEAT);
    }
    *v = (uint32_t)x;
    return 0;
}

/* Applies a repetition to the elements alt.e[*start..] (the last term);
 * *start becomes the index of the repeated term (for a further postfix). */
static int apply_repeat(parser *p, uint32_t rule, uint32_t alt, size_t *start, uint32_t min, uint32_t max)
{
    size_t count = p->rules[rule].alts[alt].n - *start;
    if (count == 0 || (min == 1 && max == 1)) return 0;
    if (max == 0) { /* repeated zero times: nothing */
        p->n_elems -= count;
        p->rules[rule].alts[alt].n = *start;
        return 0;
    }
    gram_elem first = p->rules[rule].alts[alt].e[*start];
    uint32_t target;
    if (count == 1 && first.kind == GE_RULE) {
        target = first.arg;
    } else {
        target = new_anon_rule(p, rule);
        uint32_t ta = target == GRAM_NONE ? GRAM_NONE : add_alt(p, target, GRAM_NONE);
        if (ta == GRAM_NONE) return WK_EINVAL;
        for (size_t k = *start; k < *start + count; k++)
            if (add_elem(p, target, ta, p->rules[rule].alts[alt].e[k])) return WK_EINVAL;
    }
    p->n_elems -= count;
    p->rules[rule].alts[alt].n = *start;
    return add_elem(p, rule, alt, (gram_elem){.kind = GE_REPEAT, .arg = target, .min = min, .max = max});
}

static int parse_postfix(parser *p, uint32_t rule, uint32_t alt, size_t start)
{
    while (p->i < p->n) {
        char c = p->s[p->i];
        uint32_t min, max;
        size_t at = p->i;
        if (c == '*') { min = 0; max = GRAM_INF; p->i++; }
        else if (c == '+') { min = 1; max = GRAM_INF; p->i++; }
        else if (c == '?') { min = 0; max = 1; p->i++; }
        else if (c == '{') {
            p->i++;
            skip_space(p);
            if (parse_uint(p, &min)) return WK_EINVAL;
            skip_space(p);
            max = min;
            if (p->i < p->n && p->s[p->i] == ',') {
                p->i++;
                skip_space(p);
                max = GRAM_INF;
                if (p->i < p->n && p->s[p->i] != '}' && parse_uint(p, &max)) return WK_EINVAL;
                skip_space(p);
            }
            if (p->i >= p->n || p->s[p->i] != '}') return fail_at(p, at, "expected '}' closing the repetition");
            p->i++;
            if (max < min) return fail_at(p, at, "repetition {%u,%u}: max below min", min, max);
        } else {
            return 0;
        }
        if (apply_repeat(p, rule, alt, &start, min, max)) return WK_EINVAL;
    }
    return 0;
}

static int parse_sequence(parser *p, uint32_t rule, uint32_t alt)
{
    for (;;) {
        skip_space(p);
        if (p->i >= p->n) return 0;
        char c = p->s[p->i];
        if (c == '|' || c == ')') return 0;
        size_t start = p->rules[rule].alts[alt].n;
        int rc;
        if (c == '"') {
            rc = parse_literal(p, rule, alt);
        } else if (c == '[') {
            rc = parse_class(p, rule, alt);
        } else if (c == '.') {
            rc = parse_any(p, rule, alt);
        } else if (c == '<') {
            rc = parse_token_literal(p, rule, alt);
        } else if (c == '(') {
            size_t at = p->i++;
            if (++p->depth > MAX_NESTING) return fail_at(p, at, "groups nested deeper than %d", MAX_NESTING);
            uint32_t sub = new_anon_rule(p, rule);
            if (sub == GRAM_NONE || parse_alternatives(p, sub)) return WK_EINVAL;
            skip_space(p);
            if (p->i >= p->n || p->s[p->i] != ')') return fail_at(p, at, "unclosed '('");
            p->i++;
            p->depth--;
            rc = add_elem(p, rule, alt, (gram_elem){.kind = GE_RULE, .arg = sub});
        } else if (is_name_char(c)) {
            if (at_rule_start(p)) return 0;
            size_t len = name_len_at(p, p->i);
            uint32_t ref = rule_by_name(p, p->s + p->i, len);
            if (ref == GRAM_NONE) return WK_EINVAL;
            p->i += len;
            rc = add_elem(p, rule, alt, (gram_elem){.kind = GE_RULE, .arg = ref});
        } else {
            if ((unsigned char)c >= 0x20 && (unsigned char)c < 0x7F) return fail_at(p, p->i, "unexpected character '%c'", c);
            return fail_at(p, p->i, "unexpected byte 0x%02X", (unsigned char)c);
        }
        if (rc || parse_postfix(p, rule, alt, start)) return WK_EINVAL;
    }
}

static int parse_alternatives(parser *p, uint32_t rule)
{
    for (;;) {
        uint32_t alt = add_alt(p, rule, GRAM_NONE);
        if (alt == GRAM_NONE || parse_sequence(p, rule, alt)) return WK_EINVAL;
        skip_space(p);
        if (p->i < p->n && p->s[p->i] == '|') {
            p->i++;
            continue;
        }
        return 0;
    }
}

static int parse_rules(parser *p)
{
    for (;;) {
        skip_space(p);
        if (p->i >= p->n) return 0;
        size_t at = p->i;
        size_t len = name_len_at(p, p->i);
        if (!len) return fail_at(p, at, "expected a rule name");
        uint32_t r = rule_by_name(p, p->s + p->i, len);
        if (r == GRAM_NONE) return WK_EINVAL;
        if (p->rules[r].defined) return fail_at(p, at, "rule '%s' is defined twice", p->rules[r].name);
        p->rules[r].defined = 1;
        p->i += len;
        skip_space(p);
        if (p->n - p->i < 3 || memcmp(p->s + p->i, "::=", 3)) return fail_at(p, p->i, "expected '::=' after '%s'", p->rules[r].name);
        p->i += 3;
        if (parse_alternatives(p, r)) return WK_EINVAL;
        skip_space(p);
        if (p->i < p->n && p->s[p->i] == ')') return fail_at(p, p->i, "unmatched ')'");
    }
}

/* ---- into the compact form ---- */

static int finish(parser *p, gram_grammar **out)
{
    uint32_t root;
    if (!gram_smap_get(&p->names, "root", 4, &root) || !p->rules[root].defined)
        return wk_fail(p->err, WK_EINVAL, "grammar has no rule 'root'");
    for (size_t r = 0; r < p->n_rules; r++)
        if (!p->rules[r].defined) return fail_at(p, p->rules[r].first_use, "rule '%s' is not defined", p->rules[r].name);

    gram_grammar *g = calloc(1, sizeof *g);
    if (!g) return oom(p);
    size_t n_alts = 0, names_len = 0;
    for (size_t r = 0; r < p->n_rules; r++) {
        n_alts += p->rules[r].n;
        names_len += strlen(p->rules[r].name) + 1;
    }
    g->rules = calloc(p->n_rules, sizeof *g->rules);
    g->alts = calloc(n_alts ? n_alts : 1, sizeof *g->alts);
    g->elems = calloc(p->n_elems ? p->n_elems : 1, sizeof *g->elems);
    g->names = malloc(names_len);
    if (!g->rules || !g->alts || !g->elems || !g->names) {
        gram_grammar_free(g);
        return oom(p);
    }
    size_t ai = 0, ei = 0, ni = 0;
    for (size_t r = 0; r < p->n_rules; r++) {
        b_rule *br = &p->rules[r];
        g->rules[r].first_alt = (uint32_t)ai;
        g->rules[r].n_alts = (uint32_t)br->n;
        g->rules[r].name = (uint32_t)ni;
        size_t nl = strlen(br->name) + 1;
        memcpy(g->names + ni, br->name, nl);
        ni += nl;
        for (size_t a = 0; a < br->n; a++) {
            g->alts[ai] = (gram_alt){.first = (uint32_t)ei, .n = (uint32_t)br->alts[a].n, .rule = (uint32_t)r,
                                     .gate = br->alts[a].gate};
            if (br->alts[a].n) memcpy(g->elems + ei, br->alts[a].e, br->alts[a].n * sizeof *g->elems);
            ei += br->alts[a].n;
            ai++;
        }
    }
    g->n_rules = p->n_rules;
    g->n_alts = n_alts;
    g->n_elems = ei;
    g->root = root;
    g->sets = p->sets;
    g->n_sets = p->n_sets;
    p->sets = NULL;
    g->specials = p->specials;
    g->n_specials = p->n_specials;
    p->specials = NULL;
    p->n_specials = 0;
    int rc = gram_check(g, p->err);
    if (rc) {
        gram_grammar_free(g);
        p->failed = 1;
        return rc;
    }
    *out = g;
    return 0;
}

int gram_compile_gbnf(gram_grammar **out, const char *text, size_t len, wk_error *err)
{
    *out = NULL;
    if (!text) return wk_fail(err, WK_EINVAL, "grammar: no text");
    if (len > MAX_TEXT_BYTES) return wk_fail(err, WK_ERANGE, "grammar text of %zu bytes is above the %u MiB limit", len, MAX_TEXT_BYTES >> 20);
    parser p = {.s = text, .n = len, .err = err};
    int rc = parse_rules(&p);
    if (!rc && !p.failed) rc = finish(&p, out);
    if (!rc && p.failed) rc = err ? err->code : WK_EINVAL;
    for (size_t r = 0; r < p.n_rules; r++) {
        for (size_t a = 0; a < p.rules[r].n; a++) free(p.rules[r].alts[a].e);
        free(p.rules[r].alts);
        free(p.rules[r].name);
    }
    free(p.rules);
    gram_smap_free(&p.names);
    gram_smap_free(&p.class_rules);
    gram_smap_free(&p.set_index);
    gram_smap_free(&p.special_index);
    free(p.sets);
    for (size_t k = 0; k < p.n_specials; k++) free(p.specials[k]);
    free(p.specials);
    return rc;
}

void gram_grammar_free(gram_grammar *g)
{
    if (!g) return;
    free(g->rules);
    free(g->alts);
    free(g->elems);
    free(g->sets);
    for (size_t k = 0; k < g->n_specials; k++) free(g->specials[k]);
    free(g->specials);
    free(g->names);
    free(g);
}
