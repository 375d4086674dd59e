/* JSON schema → GBNF: one rule per sub-schema (identical bodies shared),
 * $ref targets once per mode (so recursion is a recursive rule). See
 * json_schema.h for what is supported and the output policies. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/json_schema_impl.h"

/* In raw mode, a schema that admits no string value: not an error by
 * itself (an anyOf branch may just not apply). */
static const char NO_STRING[] = "";

/* ---------------------------------------------------------------- context */

void js_init(js_ctx *c, const json_t *root, wk_error *err)
{
    memset(c, 0, sizeof *c);
    c->root = root;
    c->err = err;
}

void js_free(js_ctx *c)
{
    gram_text_free(&c->t);
    gram_smap_free(&c->memo);
    free(c->memo_names);
}

bool js_failed(const js_ctx *c) { return c->rc != 0 || c->t.failed; }

const char *js_fail(js_ctx *c, int code, const char *fmt, ...)
{
    if (c->rc) return NULL;
    c->rc = code;
    char msg[WK_ERROR_MSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    wk_fail(c->err, code, "json schema at %s: %s", c->path_len ? c->path : "#", msg);
    return NULL;
}

static const char *check_size(js_ctx *c, const char *name)
{
    if (c->t.failed) return js_fail(c, WK_ENOMEM, "out of memory");
    if (c->t.out.len > GRAM_JSON_MAX_GBNF_BYTES)
        return js_fail(c, WK_ERANGE, "the grammar would be larger than %u MiB", GRAM_JSON_MAX_GBNF_BYTES >> 20);
    return name;
}

const char *js_rule(js_ctx *c, const char *hint, const gram_buf *body)
{
    if (js_failed(c)) return NULL;
    if (body->failed || !body->s) return js_fail(c, WK_ENOMEM, "out of memory");
    return check_size(c, gram_text_rule(&c->t, hint, body->s));
}

static const char *rule_z(js_ctx *c, const char *hint, const char *body)
{
    gram_buf b = {0};
    gram_buf_puts(&b, body);
    const char *r = js_rule(c, hint, &b);
    gram_buf_free(&b);
    return r;
}

const char *js_memo_get(js_ctx *c, const char *key)
{
    uint32_t idx;
    return gram_smap_get(&c->memo, key, strlen(key), &idx) ? c->memo_names[idx] : NULL;
}

void js_memo_put(js_ctx *c, const char *key, const char *name)
{
    if (c->n_memo == c->cap_memo) {
        size_t cap = c->cap_memo ? c->cap_memo * 2 : 32;
        const char **v = realloc(c->memo_names, cap * sizeof *v);
        if (!v) {
            c->t.failed = true;
            return;
        }
        c->memo_names = v;
        c->cap_memo = cap;
    }
    c->memo_names[c->n_memo] = name;
    if (gram_smap_put(&c->memo, key, strlen(key), (uint32_t)c->n_memo++)) c->t.failed = true;
}

/* JSON pointer of the schema being compiled, for messages. */
static size_t path_push(js_ctx *c, const char *seg)
{
    size_t old = c->path_len;
    size_t room = sizeof c->path - 1;
    if (c->path_len == 0 && room) c->path[c->path_len++] = '#';
    if (c->path_len < room) c->path[c->path_len++] = '/';
    for (const char *s = seg; *s && c->path_len < room; s++) {
        if (*s == '~' || *s == '/') {
            if (c->path_len + 2 > room) break;
            c->path[c->path_len++] = '~';
            c->path[c->path_len++] = *s == '~' ? '0' : '1';
        } else {
            c->path[c->path_len++] = *s;
        }
    }
    c->path[c->path_len] = 0;
    return old;
}

static size_t path_push_index(js_ctx *c, const char *key, size_t i)
{
    char seg[32];
    snprintf(seg, sizeof seg, "%zu", i);
    size_t old = path_push(c, key);
    path_push(c, seg);
    return old;
}

static void path_pop(js_ctx *c, size_t old)
{
    c->path_len = old;
    c->path[old] = 0;
}

bool js_has_word(const js_ctx *c, const char *text, size_t len)
{
    for (size_t w = 0; w < c->n_words; w++)
        if (memmem(text, len, c->words[w], strlen(c->words[w]))) return true;
    return false;
}

/* ---------------------------------------------------------- shared rules */

const char *js_common(js_ctx *c, enum js_common_rule which)
{
    if (js_failed(c)) return NULL;
    if (c->common[which]) return c->common[which];
    const char *r = NULL;
    gram_buf b = {0};
    switch (which) {
    case JS_WS:
        gram_buf_printf(&b, "[ \\t\\n\\r]{0,%d}", GRAM_JSON_MAX_WS);
        r = js_rule(c, "ws", &b);
        break;
    case JS_ESC:
        js_put_escape_body(&b);
        r = js_rule(c, "escape", &b);
        break;
    case JS_STRING: r = js_string(c, 0, UINT32_MAX, JS_JSON); break;
    case JS_RAW_TEXT: r = js_string(c, 0, UINT32_MAX, JS_RAW); break;
    case JS_INTEGER: r = rule_z(c, "integer", "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} )"); break;
    case JS_NUMBER:
        r = rule_z(c, "number",
                   "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?");
        break;
    case JS_VALUE: {
        const char *ws = js_common(c, JS_WS), *str = js_common(c, JS_STRING), *num = js_common(c, JS_NUMBER);
        if (!ws || !str || !num) break;
        const char *value = gram_text_reserve(&c->t, "value");
        const char *object = gram_text_reserve(&c->t, "object");
        const char *array = gram_text_reserve(&c->t, "array");
        if (!value || !object || !array) break;
        gram_buf_printf(&b, "%s | %s | %s | %s | \"true\" | \"false\" | \"null\"", object, array, str, num);
        gram_text_define(&c->t, value, b.s ? b.s : "");
        b.len = 0;
        gram_buf_printf(&b, "\"{\" %s ( %s %s \":\" %s %s %s ( \",\" %s %s %s \":\" %s %s %s )* )? \"}\"", ws, str, ws,
                        ws, value, ws, ws, str, ws, ws, value, ws);
        gram_text_define(&c->t, object, b.s ? b.s : "");
        b.len = 0;
        gram_buf_printf(&b, "\"[\" %s ( %s %s ( \",\" %s %s %s )* )? \"]\"", ws, value, ws, ws, value, ws);
        gram_text_define(&c->t, array, b.s ? b.s : "");
        if (b.failed) c->t.failed = true;
        r = check_size(c, value);
        break;
    }
    default: break;
    }
    gram_buf_free(&b);
    if (!r) return js_failed(c) ? NULL : js_fail(c, WK_ENOMEM, "out of memory");
    c->common[which] = r;
    return r;
}

/* ------------------------------------------------------------- keywords */

static bool is_annotation(const char *k)
{
    static const char *const names[] = {"$schema", "$id", "id", "$comment", "$anchor", "title", "description",
                                        "default", "examples", "example", "format", "deprecated", "readOnly",
                                        "writeOnly", "contentEncoding", "contentMediaType", "contentSchema",
                                        "nullable", "discriminator", "$defs", "definitions", "strict", "$vocabulary"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(k, names[i])) return true;
    return k[0] == 'x' && k[1] == '-';
}

static bool is_unsupported(const char *k, const json_t *v)
{
    static const char *const names[] = {
        "pattern", "multipleOf", "not", "if", "then", "else", "contains", "minContains", "maxContains",
        "patternProperties", "propertyNames", "minProperties", "maxProperties", "dependentRequired",
        "dependentSchemas", "dependencies", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef",
        "$recursiveRef"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(k, names[i])) return true;
    return !strcmp(k, "uniqueItems") && json_is_true(v);
}

/* The first keyword of s that is neither an annotation nor in allowed. */
static const char *other_keyword(const json_t *s, const char *const *allowed, size_t n_allowed)
{
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (is_annotation(k)) continue;
        bool ok = false;
        for (size_t i = 0; i < n_allowed && !ok; i++) ok = !strcmp(k, allowed[i]);
        if (!ok) return k;
    }
    return NULL;
}

static int read_count(js_ctx *c, const json_t *s, const char *key, uint32_t dflt, uint32_t *out)
{
    const json_t *v = json_object_get(s, key);
    *out = dflt;
    if (!v) return 0;
    double d = json_number_value(v);
    if (!json_is_number(v) || d < 0 || d != floor(d)) {
        js_fail(c, WK_EINVAL, "%s must be a non-negative integer", key);
        return -1;
    }
    if (d > 1000000) {
        if (!strncmp(key, "max", 3)) { /* a tighter maximum keeps the output valid */
            *out = 1000000;
            return 0;
        }
        js_fail(c, WK_ERANGE, "%s %.0f is above the supported 1000000", key, d);
        return -1;
    }
    *out = (uint32_t)d;
    return 0;
}

static const char *any_value(js_ctx *c, enum js_mode mode)
{
    return js_common(c, mode == JS_RAW ? JS_RAW_TEXT : JS_VALUE);
}

/* ------------------------------------------------------------- literals */

typedef struct lit {
    const char *s;
    size_t len;
} lit;

static int cmp_lit(const void *x, const void *y)
{
    const lit *a = x, *b = y;
    size_t n = a->len < b->len ? a->len : b->len;
    int c = n ? memcmp(a->s, b->s, n) : 0;
    return c ? c : (a->len > b->len) - (a->len < b->len);
}

typedef struct lit_node {
    size_t lo, hi, depth;
    const char *name;
} lit_node;

const char *js_literals(js_ctx *c, const char *hint, char **texts, const size_t *lens, size_t n)
{
    if (js_failed(c)) return NULL;
    if (n == 0) return js_fail(c, WK_EINVAL, "no value");
    lit *v = malloc(n * sizeof *v);
    lit_node *stack = malloc(n * sizeof *stack);
    if (!v || !stack) {
        free(v);
        free(stack);
        return js_fail(c, WK_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) v[i] = (lit){texts[i], lens[i]};
    qsort(v, n, sizeof *v, cmp_lit);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (!m || cmp_lit(&v[m - 1], &v[i])) v[m++] = v[i];
    /* prefix tree, one rule per branching node, iteratively */
    const char *root = gram_text_reserve(&c->t, hint);
    size_t sp = 0;
    if (root) stack[sp++] = (lit_node){0, m, 0, root};
    gram_buf body = {0};
    while (sp && !c->t.failed) {
        lit_node nd = stack[--sp];
        body.len = 0;
        if (body.s) body.s[0] = 0;
        bool first = true;
        size_t i = nd.lo;
        if (v[i].len == nd.depth) { /* a value ends here (sorted first) */
            gram_buf_puts(&body, "\"\"");
            first = false;
            i++;
        }
        while (i < nd.hi) {
            size_t j = i + 1;
            while (j < nd.hi && v[j].s[nd.depth] == v[i].s[nd.depth]) j++;
            if (!first) gram_buf_puts(&body, " | ");
            first = false;
            if (j - i == 1) {
                gram_buf_literal(&body, v[i].s + nd.depth, v[i].len - nd.depth);
            } else {
                /* shared prefix of the group: that of its first and last */
                size_t common = nd.depth + 1;
                while (common < v[i].len && common < v[j - 1].len && v[i].s[common] == v[j - 1].s[common]) common++;
                gram_buf_literal(&body, v[i].s + nd.depth, common - nd.depth);
                const char *sub = gram_text_reserve(&c->t, hint);
                if (!sub) break;
                gram_buf_printf(&body, " %s", sub);
                stack[sp++] = (lit_node){i, j, common, sub};
            }
            i = j;
        }
        if (body.failed) c->t.failed = true;
        else gram_text_define(&c->t, nd.name, body.s);
    }
    gram_buf_free(&body);
    free(v);
    free(stack);
    return check_size(c, root);
}

/* JSON text of a value, compact, reals in the shortest form that reads back. */
static char *dump_value(const json_t *v)
{
    for (int prec = 15; prec <= 17; prec++) {
        char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(prec));
        if (!s || prec == 17) return s;
        json_t *back = json_loads(s, JSON_DECODE_ANY, NULL);
        bool same = back && json_equal(back, v);
        json_decref(back);
        if (same) return s;
        free(s);
    }
    return NULL;
}

static bool type_matches(const char *t, const json_t *v)
{
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "integer"))
        return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "null")) return json_is_null(v);
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    return false;
}

static bool value_fits_type(const json_t *type, const json_t *v)
{
    if (!type) return true;
    if (json_is_string(type)) return type_matches(json_string_value(type), v);
    size_t i;
    const json_t *t;
    json_array_foreach(type, i, t) if (json_is_string(t) && type_matches(json_string_value(t), v)) return true;
    return false;
}

/* enum / const: the values (of the declared type) as literals. */
static const char *enum_rule(js_ctx *c, const json_t *s, const json_t *values, enum js_mode mode)
{
    static const char *const allowed[] = {"enum", "const", "type"};
    const char *extra = other_keyword(s, allowed, 3);
    if (extra) return js_fail(c, WK_EUNSUPPORTED, "keyword '%s' next to enum/const", extra);
    size_t n = json_array_size(values);
    if (n > GRAM_JSON_MAX_ENUM) return js_fail(c, WK_ERANGE, "enum of %zu values (at most %d)", n, GRAM_JSON_MAX_ENUM);
    char **texts = calloc(n ? n : 1, sizeof *texts);
    size_t *lens = calloc(n ? n : 1, sizeof *lens);
    const char *r = NULL;
    size_t m = 0, bytes = 0;
    if (!texts || !lens) {
        js_fail(c, WK_ENOMEM, "out of memory");
        goto done;
    }
    const json_t *type = json_object_get(s, "type");
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(values, i);
        if (!value_fits_type(type, v)) continue;
        char *t;
        size_t len;
        if (mode == JS_RAW) {
            if (!json_is_string(v)) continue;
            len = json_string_length(v);
            if (memchr(json_string_value(v), 0, len)) continue; /* raw text has no NUL */
            t = malloc(len + 1);
            if (t) memcpy(t, json_string_value(v), len + 1);
        } else {
            t = dump_value(v);
            len = t ? strlen(t) : 0;
        }
        if (!t) {
            js_fail(c, WK_ENOMEM, "out of memory");
            goto done;
        }
        if (js_has_word(c, t, len)) { /* would end a tool call early */
            free(t);
            continue;
        }
        bytes += len;
        if (bytes > GRAM_JSON_MAX_ENUM_BYTES) {
            free(t);
            js_fail(c, WK_ERANGE, "enum values longer than %u bytes in all", GRAM_JSON_MAX_ENUM_BYTES);
            goto done;
        }
        texts[m] = t;
        lens[m++] = len;
    }
    if (m == 0) r = mode == JS_RAW ? NO_STRING : js_fail(c, WK_EINVAL, "no enum/const value fits the type");
    else r = js_literals(c, "enum", texts, lens, m);
done:
    for (size_t i = 0; i < m; i++) free(texts[i]);
    free(texts);
    free(lens);
    return r;
}

/* --------------------------------------------------------------- objects */

typedef struct prop {
    const char *key;
    const json_t *schema;
    bool required;
} prop;

bool js_listed(const json_t *arr, const char *key)
{
    size_t i;
    const json_t *k;
    json_array_foreach(arr, i, k) if (json_is_string(k) && !strcmp(json_string_value(k), key)) return true;
    return false;
}

static const char *object_rule(js_ctx *c, const json_t *s)
{
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    const json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return js_fail(c, WK_EINVAL, "properties must be an object");
    if (req && !json_is_array(req)) return js_fail(c, WK_EINVAL, "required must be an array");
    if (addl && !json_is_boolean(addl) && !json_is_object(addl))
        return js_fail(c, WK_EINVAL, "additionalProperties must be a boolean or a schema");
    size_t n = json_object_size(props) + json_array_size(req);
    if (n > GRAM_JSON_MAX_PROPERTIES)
        return js_fail(c, WK_ERANGE, "more than %d properties", GRAM_JSON_MAX_PROPERTIES);
    prop *p = calloc(n ? n : 1, sizeof *p);
    if (!p) return js_fail(c, WK_ENOMEM, "out of memory");
    size_t np = 0;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)props, k, v) p[np++] = (prop){k, v, js_listed(req, k)};
    size_t i;
    json_array_foreach(req, i, v) {
        if (!json_is_string(v)) {
            free(p);
            return js_fail(c, WK_EINVAL, "required must list strings");
        }
        if (!json_object_get(props, json_string_value(v))) {
            bool dup = false;
            for (size_t j = 0; j < np && !dup; j++) dup = !strcmp(p[j].key, json_string_value(v));
            if (!dup) p[np++] = (prop){json_string_value(v), json_true(), true};
        }
    }
    const char *ws = js_common(c, JS_WS);
    gram_buf b = {0};
    const char *r = NULL;
    if (!ws) goto done;
    if (np == 0) {
        if (json_is_false(addl)) {
            gram_buf_printf(&b, "\"{\" %s \"}\"", ws);
        } else {
            size_t old = path_push(c, "additionalProperties");
            const char *val = json_is_object(addl) ? js_schema(c, addl, JS_JSON) : js_common(c, JS_VALUE);
            path_pop(c, old);
            const char *key = js_common(c, JS_STRING);
            if (!val || !key) goto done;
            gram_buf_printf(&b, "\"{\" %s ( %s %s \":\" %s %s %s ( \",\" %s %s %s \":\" %s %s %s )* )? \"}\"", ws, key,
                            ws, ws, val, ws, ws, key, ws, ws, val, ws);
        }
        r = js_rule(c, "object", &b);
        goto done;
    }
    /* F_i: properties i.. with one first; T_i: the rest after a property */
    const char *f_next = NULL, *t_next = NULL;
    bool req_after = false;
    for (size_t j = np; j-- > 0;) {
        gram_buf lit = {0};
        json_t *key_json = json_string(p[j].key);
        char *key_text = key_json ? json_dumps(key_json, JSON_ENCODE_ANY) : NULL;
        json_decref(key_json);
        if (!key_text) {
            js_fail(c, WK_ENOMEM, "out of memory");
            goto done;
        }
        if (js_has_word(c, key_text, strlen(key_text))) {
            js_fail(c, WK_EUNSUPPORTED, "property name %s contains a tool-call marker", key_text);
            free(key_text);
            goto done;
        }
        gram_buf_literal(&lit, key_text, strlen(key_text));
        free(key_text);
        size_t old = path_push(c, "properties");
        path_push(c, p[j].key);
        const char *val = js_schema(c, p[j].schema, JS_JSON);
        path_pop(c, old);
        if (!val) {
            gram_buf_free(&lit);
            goto done;
        }
        b.len = 0;
        gram_buf_printf(&b, "%s %s \":\" %s %s %s", lit.s ? lit.s : "\"\"", ws, ws, val, ws);
        gram_buf_free(&lit);
        const char *kv = js_rule(c, "kv", &b);
        if (!kv) goto done;
        b.len = 0;
        gram_buf_printf(&b, "%s%s%s", kv, t_next ? " " : "", t_next ? t_next : "");
        if (!p[j].required && f_next) gram_buf_printf(&b, " | %s", f_next);
        const char *f = js_rule(c, "props", &b);
        req_after = req_after || p[j].required;
        b.len = 0;
        gram_buf_printf(&b, req_after ? "\",\" %s %s" : "( \",\" %s %s )?", ws, f);
        const char *t = js_rule(c, "more", &b);
        if (!f || !t) goto done;
        f_next = f;
        t_next = t;
    }
    b.len = 0;
    gram_buf_printf(&b, req_after ? "\"{\" %s %s \"}\"" : "\"{\" %s %s? \"}\"", ws, f_next);
    r = js_rule(c, "object", &b);
done:
    gram_buf_free(&b);
    free(p);
    return r;
}

/* ---------------------------------------------------------------- arrays */

static const char *array_rule(js_ctx *c, const json_t *s)
{
    uint32_t min, max;
    if (read_count(c, s, "minItems", 0, &min) || read_count(c, s, "maxItems", UINT32_MAX, &max)) return NULL;
    const json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    const json_t *rest = items;
    if (json_is_array(items)) { /* draft 4-7 tuple form */
        prefix = items;
        rest = json_object_get(s, "additionalItems");
    }
    if (prefix && !json_is_array(prefix)) return js_fail(c, WK_EINVAL, "prefixItems must be an array");
    if (rest && !json_is_object(rest) && !json_is_boolean(rest))
        return js_fail(c, WK_EINVAL, "items must be a schema");
    size_t k = json_array_size(prefix);
    if (k > GRAM_JSON_MAX_PROPERTIES) return js_fail(c, WK_ERANGE, "more than %d tuple items", GRAM_JSON_MAX_PROPERTIES);
    if (json_is_false(rest) && max > k) max = (uint32_t)k;
    if (min > max) return js_fail(c, WK_EINVAL, "minItems %u is above the most items allowed (%u)", min, max);
    const char *ws = js_common(c, JS_WS);
    if (!ws) return NULL;
    const char *item = NULL;
    if (!json_is_false(rest) && max > k) {
        size_t old = path_push(c, items == rest ? "items" : "additionalItems");
        item = rest && json_is_object(rest) ? js_schema(c, rest, JS_JSON) : js_common(c, JS_VALUE);
        path_pop(c, old);
        if (!item) return NULL;
    }
    gram_buf b = {0};
    char bounds[40];
    const char *r = NULL;
    if (k == 0) {
        if (max == 0) {
            gram_buf_printf(&b, "\"[\" %s \"]\"", ws);
        } else {
            uint32_t lo = min ? min - 1 : 0;
            if (max == UINT32_MAX) snprintf(bounds, sizeof bounds, "{%u,}", lo);
            else snprintf(bounds, sizeof bounds, "{%u,%u}", lo, max - 1);
            gram_buf_printf(&b, min ? "\"[\" %s %s %s ( \",\" %s %s %s )%s \"]\"" : "\"[\" %s ( %s %s ( \",\" %s %s %s )%s )? \"]\"",
                            ws, item, ws, ws, item, ws, bounds);
        }
        r = js_rule(c, "array", &b);
        gram_buf_free(&b);
        return r;
    }
    /* tuple: positions 0..K-1 from prefixItems, then the rest */
    size_t K = k < max ? k : max;
    const char *tail = NULL;
    if (K == k && item && max > k) {
        uint32_t lo = min > k ? min - (uint32_t)k : 0;
        if (max == UINT32_MAX) snprintf(bounds, sizeof bounds, "{%u,}", lo);
        else snprintf(bounds, sizeof bounds, "{%u,%u}", lo, max - (uint32_t)k);
        gram_buf_printf(&b, "( \",\" %s %s %s )%s", ws, item, ws, bounds);
        tail = js_rule(c, "items", &b);
        if (!tail) goto done;
    }
    const char *after = tail, *first = NULL;
    for (size_t j = K; j-- > 0;) {
        size_t old = path_push_index(c, json_is_array(items) ? "items" : "prefixItems", j);
        const char *e = js_schema(c, json_array_get(prefix, j), JS_JSON);
        path_pop(c, old);
        if (!e) goto done;
        if (j == 0) {
            first = e;
            break;
        }
        b.len = 0;
        gram_buf_printf(&b, j >= min ? "( \",\" %s %s %s%s%s )?" : "\",\" %s %s %s%s%s", ws, e, ws, after ? " " : "",
                        after ? after : "");
        after = js_rule(c, "items", &b);
        if (!after) goto done;
    }
    b.len = 0;
    gram_buf_printf(&b, min ? "\"[\" %s %s %s%s%s \"]\"" : "\"[\" %s ( %s %s%s%s )? \"]\"", ws, first, ws,
                    after ? " " : "", after ? after : "");
    r = js_rule(c, "array", &b);
done:
    gram_buf_free(&b);
    return r;
}

/* ------------------------------------------------------------------ refs */

/* The schema at a local reference "#", "#/a/b" (JSON pointer), or NULL. */
static const json_t *resolve_ref(const json_t *root, const char *ref)
{
    if (ref[0] != '#') return NULL;
    const json_t *cur = root;
    const char *p = ref + 1;
    while (*p == '/' && cur) {
        p++;
        char seg[256];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof seg) {
            if (p[0] == '~' && p[1] == '1') { seg[n++] = '/'; p += 2; }
            else if (p[0] == '~' && p[1] == '0') { seg[n++] = '~'; p += 2; }
            else seg[n++] = *p++;
        }
        seg[n] = 0;
        if (json_is_object(cur)) {
            cur = json_object_get(cur, seg);
        } else if (json_is_array(cur)) {
            char *end;
            unsigned long i = strtoul(seg, &end, 10);
            cur = *seg && !*end ? json_array_get(cur, i) : NULL;
        } else {
            cur = NULL;
        }
    }
    return *p ? NULL : cur;
}

static const char *ref_rule(js_ctx *c, const json_t *s, enum js_mode mode)
{
    static const char *const allowed[] = {"$ref"};
    const char *extra = other_keyword(s, allowed, 1);
    if (extra) return js_fail(c, WK_EUNSUPPORTED, "keyword '%s' next to $ref", extra);
    const json_t *refv = json_object_get(s, "$ref");
    if (!json_is_string(refv)) return js_fail(c, WK_EINVAL, "$ref must be a string");
    const char *ref = json_string_value(refv);
    if (ref[0] != '#') return js_fail(c, WK_EUNSUPPORTED, "$ref \"%s\": only local references (#...) are supported", ref);
    /* keyed by the document too: tools each bring their own $defs */
    size_t key_len = strlen(ref) + 48;
    char *key = malloc(key_len);
    if (!key) return js_fail(c, WK_ENOMEM, "out of memory");
    snprintf(key, key_len, "ref:%p:%d:%s", (const void *)c->root, (int)mode, ref);
    const char *hit = js_memo_get(c, key);
    if (hit) {
        free(key);
        return hit;
    }
    const json_t *target = resolve_ref(c->root, ref);
    if (!target) {
        free(key);
        return js_fail(c, WK_EINVAL, "$ref \"%s\" points to nothing", ref);
    }
    const char *slash = strrchr(ref, '/');
    const char *name = gram_text_reserve(&c->t, slash ? slash + 1 : "root");
    if (name) js_memo_put(c, key, name);
    free(key);
    if (!name) return js_fail(c, WK_ENOMEM, "out of memory");
    /* compiled with the definition's own path */
    char saved[sizeof c->path];
    size_t saved_len = c->path_len;
    memcpy(saved, c->path, sizeof saved);
    snprintf(c->path, sizeof c->path, "%s", ref);
    c->path_len = strlen(c->path);
    const char *body = js_schema(c, target, mode);
    memcpy(c->path, saved, sizeof saved);
    c->path_len = saved_len;
    if (!body) return NULL;
    gram_buf b = {0};
    if (body == NO_STRING) gram_buf_printf(&b, "[\\x00] %s", name); /* never completes: an error if reachable */
    else gram_buf_puts(&b, body);
    if (!b.failed) gram_text_define(&c->t, name, b.s);
    else c->t.failed = true;
    gram_buf_free(&b);
    return body == NO_STRING ? NO_STRING : check_size(c, name);
}

/* ------------------------------------------------------------- combinators */

/* Appends rule r as an alternative (raw-mode schemas without a string
 * value drop out). */
static void add_alternative(gram_buf *b, const char *r, bool *first)
{
    if (r == NO_STRING) return;
    gram_buf_printf(b, "%s%s", *first ? "" : " | ", r);
    *first = false;
}

static const char *any_of_rule(js_ctx *c, const json_t *s, const char *kw, enum js_mode mode)
{
    const char *allowed[] = {kw};
    const char *extra = other_keyword(s, allowed, 1);
    if (extra) return js_fail(c, WK_EUNSUPPORTED, "keyword '%s' next to %s", extra, kw);
    const json_t *list = json_object_get(s, kw);
    if (!json_is_array(list) || json_array_size(list) == 0)
        return js_fail(c, WK_EINVAL, "%s must be a non-empty array", kw);
    gram_buf b = {0};
    size_t i;
    const json_t *sub;
    bool first = true;
    json_array_foreach(list, i, sub) {
        size_t old = path_push_index(c, kw, i);
        const char *r = js_schema(c, sub, mode);
        path_pop(c, old);
        if (!r) {
            gram_buf_free(&b);
            return NULL;
        }
        add_alternative(&b, r, &first);
    }
    const char *r = first ? NO_STRING : js_rule(c, kw, &b);
    gram_buf_free(&b);
    return r;
}

/* ----------------------------------------------------------------- types */

static const char *type_rule(js_ctx *c, const json_t *s, const char *type, enum js_mode mode)
{
    if (!strcmp(type, "string")) {
        uint32_t min, max;
        if (read_count(c, s, "minLength", 0, &min) || read_count(c, s, "maxLength", UINT32_MAX, &max)) return NULL;
        if (min > max) return js_fail(c, WK_EINVAL, "minLength %u is above maxLength %u", min, max);
        return js_string(c, min, max, mode);
    }
    if (mode == JS_RAW) {
        if (strcmp(type, "object") && strcmp(type, "array") && strcmp(type, "number") && strcmp(type, "integer") &&
            strcmp(type, "boolean") && strcmp(type, "null"))
            return js_fail(c, WK_EINVAL, "unknown type \"%s\"", type);
        return NO_STRING;
    }
    if (!strcmp(type, "object")) return object_rule(c, s);
    if (!strcmp(type, "array")) return array_rule(c, s);
    if (!strcmp(type, "number")) return js_number(c, s, false);
    if (!strcmp(type, "integer")) return js_number(c, s, true);
    if (!strcmp(type, "boolean")) return rule_z(c, "boolean", "\"true\" | \"false\"");
    if (!strcmp(type, "null")) return rule_z(c, "null", "\"null\"");
    return js_fail(c, WK_EINVAL, "unknown type \"%s\"", type);
}

/* The type a schema without "type" describes, from its keywords. */
static const char *inferred_type(const json_t *s)
{
    static const struct {
        const char *kw, *type;
    } hints[] = {{"properties", "object"}, {"required", "object"}, {"additionalProperties", "object"},
                 {"items", "array"},       {"prefixItems", "array"}, {"minItems", "array"},
                 {"maxItems", "array"},    {"additionalItems", "array"}, {"minLength", "string"},
                 {"maxLength", "string"},  {"minimum", "number"},  {"maximum", "number"},
                 {"exclusiveMinimum", "number"}, {"exclusiveMaximum", "number"}};
    for (size_t i = 0; i < sizeof hints / sizeof hints[0]; i++)
        if (json_object_get(s, hints[i].kw)) return hints[i].type;
    return NULL;
}

static const char *schema_body(js_ctx *c, const json_t *s, enum js_mode mode)
{
    if (json_object_get(s, "$ref")) return ref_rule(c, s, mode);
    const json_t *all = json_object_get(s, "allOf");
    if (all) {
        static const char *const allowed[] = {"allOf"};
        const char *extra = other_keyword(s, allowed, 1);
        if (!json_is_array(all) || json_array_size(all) != 1 || extra)
            return js_fail(c, WK_EUNSUPPORTED, "allOf is supported with exactly one schema and no other keyword");
        size_t old = path_push_index(c, "allOf", 0);
        const char *r = js_schema(c, json_array_get(all, 0), mode);
        path_pop(c, old);
        return r;
    }
    if (json_object_get(s, "anyOf")) return any_of_rule(c, s, "anyOf", mode);
    if (json_object_get(s, "oneOf")) return any_of_rule(c, s, "oneOf", mode);
    const json_t *en = json_object_get(s, "enum");
    if (en) {
        if (!json_is_array(en) || json_array_size(en) == 0) return js_fail(c, WK_EINVAL, "enum must be a non-empty array");
        return enum_rule(c, s, en, mode);
    }
    const json_t *cst = json_object_get(s, "const");
    if (cst) {
        json_t *one = json_array();
        if (!one || json_array_append(one, (json_t *)cst)) {
            json_decref(one);
            return js_fail(c, WK_ENOMEM, "out of memory");
        }
        const char *r = enum_rule(c, s, one, mode);
        json_decref(one);
        return r;
    }
    const json_t *type = json_object_get(s, "type");
    if (!type) {
        const char *t = inferred_type(s);
        return t ? type_rule(c, s, t, mode) : any_value(c, mode);
    }
    if (json_is_string(type)) return type_rule(c, s, json_string_value(type), mode);
    if (!json_is_array(type) || json_array_size(type) == 0)
        return js_fail(c, WK_EINVAL, "type must be a string or a non-empty array of strings");
    gram_buf b = {0};
    size_t i;
    const json_t *t;
    bool first = true;
    json_array_foreach(type, i, t) {
        if (!json_is_string(t)) {
            gram_buf_free(&b);
            return js_fail(c, WK_EINVAL, "type must be a string or a non-empty array of strings");
        }
        const char *r = type_rule(c, s, json_string_value(t), mode);
        if (!r) {
            gram_buf_free(&b);
            return NULL;
        }
        add_alternative(&b, r, &first);
    }
    const char *r = first ? NO_STRING : js_rule(c, "types", &b);
    gram_buf_free(&b);
    return r;
}

const char *js_schema(js_ctx *c, const json_t *s, enum js_mode mode)
{
    if (js_failed(c)) return NULL;
    if (json_is_true(s)) return any_value(c, mode);
    if (json_is_false(s)) return js_fail(c, WK_EINVAL, "schema false admits no value");
    if (!json_is_object(s)) return js_fail(c, WK_EINVAL, "a schema must be an object or a boolean");
    if (c->depth >= GRAM_JSON_MAX_NESTING)
        return js_fail(c, WK_ERANGE, "schema nested deeper than %d levels", GRAM_JSON_MAX_NESTING);
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v)
        if (is_unsupported(k, v)) return js_fail(c, WK_EUNSUPPORTED, "keyword '%s' is not supported", k);
    c->depth++;
    const char *r = schema_body(c, s, mode);
    c->depth--;
    return r;
}

/* ---------------------------------------------------------------- finish */

int js_finish(js_ctx *c, const char *body_rule, enum gram_reasoning reasoning, const char *const *reasoning_words,
              size_t n_reasoning_words, char **gbnf)
{
    *gbnf = NULL;
    if (!body_rule || body_rule == NO_STRING) {
        if (!js_failed(c)) js_fail(c, WK_EINVAL, "no value can be written");
        return c->rc ? c->rc : WK_ENOMEM;
    }
    gram_buf b = {0};
    if (reasoning == GRAM_REASONING_NONE) {
        gram_buf_puts(&b, body_rule);
    } else {
        const char *words[JS_MAX_WORDS] = {"</think>"};
        size_t n = 1;
        for (size_t i = 0; i < n_reasoning_words && n < JS_MAX_WORDS; i++) words[n++] = reasoning_words[i];
        const char *text = js_text_without(c, words, n);
        const char *ws = js_common(c, JS_WS);
        if (!text || !ws) {
            gram_buf_free(&b);
            return c->rc ? c->rc : WK_ENOMEM;
        }
        if (reasoning == GRAM_REASONING_OPTIONAL) gram_buf_printf(&b, "( <think> %s </think> %s )? %s", text, ws, body_rule);
        else gram_buf_printf(&b, "%s </think> %s %s", text, ws, body_rule);
    }
    if (b.failed) c->t.failed = true;
    else gram_text_define(&c->t, "root", b.s);
    gram_buf_free(&b);
    if (js_failed(c)) {
        if (!c->rc) js_fail(c, WK_ENOMEM, "out of memory");
        return c->rc;
    }
    *gbnf = strdup(c->t.out.s);
    if (!*gbnf) return wk_fail(c->err, WK_ENOMEM, "json schema: out of memory");
    return 0;
}

/* ------------------------------------------------------------------- API */

int gram_json_schema_gbnf(const json_t *schema, enum gram_reasoning reasoning, char **gbnf, wk_error *err)
{
    *gbnf = NULL;
    if (!schema) return wk_fail(err, WK_EINVAL, "json schema: none given");
    js_ctx c;
    js_init(&c, schema, err);
    const char *r = js_schema(&c, schema, JS_JSON);
    int rc = js_finish(&c, r, reasoning, NULL, 0, gbnf);
    js_free(&c);
    if (rc) gram_error_one_line(err);
    return rc;
}

int js_compile(gram_grammar **out, char *gbnf, const char *what, wk_error *err)
{
    int rc = gram_compile_gbnf(out, gbnf, strlen(gbnf), err);
    free(gbnf);
    if (rc) {
        wk_fail_prefix(err, "%s: ", what);
        gram_error_one_line(err);
    }
    return rc;
}

int gram_from_json_schema(gram_grammar **out, const json_t *schema, enum gram_reasoning reasoning, wk_error *err)
{
    *out = NULL;
    char *gbnf;
    int rc = gram_json_schema_gbnf(schema, reasoning, &gbnf, err);
    return rc ? rc : js_compile(out, gbnf, "json schema", err);
}

int gram_json_object(gram_grammar **out, enum gram_reasoning reasoning, wk_error *err)
{
    json_t *schema = json_pack("{s:s}", "type", "object");
    if (!schema) return wk_fail(err, WK_ENOMEM, "json schema: out of memory");
    int rc = gram_from_json_schema(out, schema, reasoning, err);
    json_decref(schema);
    return rc;
}
