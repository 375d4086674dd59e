#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_parse.h"
#include "engine/grammar.h"
#include "engine/grammar_impl.h"
#include "engine/grammar_tools.h"
#include "engine/json_schema.h"
#include "test_grammar_util.h"
#include "testutil.h"

/* ------------------------------------------------------------ helpers */

static json_t *J(const char *text)
{
    json_error_t je;
    json_t *v = json_loads(text, JSON_DECODE_ANY, &je);
    if (!v) fail_msg("bad test JSON (%s): %s", je.text, text);
    return v;
}

static gram_grammar *schema_grammar(const char *schema_text)
{
    json_t *s = J(schema_text);
    gram_grammar *g;
    wk_error err = {0};
    if (gram_from_json_schema(&g, s, GRAM_REASONING_NONE, &err)) fail_msg("schema %s: %s", schema_text, err.msg);
    json_decref(s);
    return g;
}

/* 1 sentence, 0 proper prefix, -1 neither (no vocabulary: bytes). */
static int classify(const gram_grammar *g, const char *s)
{
    gram_state *st;
    wk_error err = {0};
    assert_int_equal(gram_state_new(&st, g, NULL, &err), 0);
    int r = gram_accept_bytes(st, s, strlen(s), &err) ? -1 : gram_can_end(st) ? 1 : 0;
    gram_state_free(st);
    return r;
}

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

static void expect_schema(const char *schema, const char *const *yes, const char *const *no)
{
    gram_grammar *g = schema_grammar(schema);
    for (size_t i = 0; yes && yes[i]; i++)
        if (classify(g, yes[i]) != 1) fail_msg("schema %s should accept %s", schema, yes[i]);
    for (size_t i = 0; no && no[i]; i++)
        if (classify(g, no[i]) == 1) fail_msg("schema %s should not accept %s", schema, no[i]);
    gram_grammar_free(g);
}

static void expect_schema_error(const char *schema, int code, const char *needle)
{
    json_t *s = J(schema);
    gram_grammar *g;
    wk_error err = {0};
    int rc = gram_from_json_schema(&g, s, GRAM_REASONING_NONE, &err);
    json_decref(s);
    if (rc != code) fail_msg("schema %s: expected error %d, got %d (%s)", schema, code, rc, err.msg);
    if (needle && !strstr(err.msg, needle)) fail_msg("schema %s: error '%s' does not mention '%s'", schema, err.msg, needle);
    assert_null(g);
}

/* ---- a validator for the supported subset (JSON Schema semantics: type
 * keywords apply to values of that type only) ---- */

static size_t utf8_chars(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

static const json_t *resolve(const json_t *root, const char *ref)
{
    if (!strcmp(ref, "#")) return root;
    const json_t *cur = root;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", ref + 2);
    for (char *seg = strtok(buf, "/"); seg && cur; seg = strtok(NULL, "/")) cur = json_object_get(cur, seg);
    return cur;
}

static bool is_type(const char *t, const json_t *v)
{
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "integer")) return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "null")) return json_is_null(v);
    return false;
}

static bool num_equal(const json_t *a, const json_t *b)
{
    if (json_is_number(a) && json_is_number(b)) return json_number_value(a) == json_number_value(b);
    return json_equal((json_t *)a, (json_t *)b);
}

static bool validate(const json_t *root, const json_t *s, const json_t *v);

static bool validate_object(const json_t *root, const json_t *s, const json_t *v)
{
    const json_t *props = json_object_get(s, "properties"), *addl = json_object_get(s, "additionalProperties");
    size_t i;
    const json_t *r;
    json_array_foreach(json_object_get(s, "required"), i, r) if (!json_object_get(v, json_string_value(r))) return false;
    const char *k;
    const json_t *x;
    json_object_foreach((json_t *)v, k, x) {
        const json_t *ps = json_object_get(props, k);
        if (ps) {
            if (!validate(root, ps, x)) return false;
        } else if (json_is_false(addl)) {
            return false;
        } else if (json_is_object(addl) && !validate(root, addl, x)) {
            return false;
        }
    }
    return true;
}

static bool validate_array(const json_t *root, const json_t *s, const json_t *v)
{
    size_t n = json_array_size(v);
    const json_t *mn = json_object_get(s, "minItems"), *mx = json_object_get(s, "maxItems");
    if (mn && n < (size_t)json_integer_value(mn)) return false;
    if (mx && n > (size_t)json_integer_value(mx)) return false;
    const json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    const json_t *rest = items;
    if (json_is_array(items)) {
        prefix = items;
        rest = json_object_get(s, "additionalItems");
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_array_get(v, i);
        const json_t *is = i < json_array_size(prefix) ? json_array_get(prefix, i) : rest;
        if (is && !validate(root, is, x)) return false;
    }
    return true;
}

static bool validate(const json_t *root, const json_t *s, const json_t *v)
{
    if (json_is_true(s)) return true;
    if (json_is_false(s)) return false;
    const json_t *x;
    if ((x = json_object_get(s, "$ref"))) return validate(root, resolve(root, json_string_value(x)), v);
    size_t i;
    const json_t *sub;
    if ((x = json_object_get(s, "allOf"))) json_array_foreach(x, i, sub) if (!validate(root, sub, v)) return false;
    if ((x = json_object_get(s, "anyOf"))) {
        bool any = false;
        json_array_foreach(x, i, sub) any = any || validate(root, sub, v);
        if (!any) return false;
    }
    if ((x = json_object_get(s, "oneOf"))) {
        int count = 0;
        json_array_foreach(x, i, sub) count += validate(root, sub, v);
        if (count != 1) return false;
    }
    if ((x = json_object_get(s, "enum"))) {
        bool any = false;
        json_array_foreach(x, i, sub) any = any || num_equal(sub, v);
        if (!any) return false;
    }
    if ((x = json_object_get(s, "const")) && !num_equal(x, v)) return false;
    if ((x = json_object_get(s, "type"))) {
        bool ok = json_is_string(x) && is_type(json_string_value(x), v);
        json_array_foreach(x, i, sub) ok = ok || is_type(json_string_value(sub), v);
        if (!ok) return false;
    }
    if (json_is_object(v) && !validate_object(root, s, v)) return false;
    if (json_is_array(v) && !validate_array(root, s, v)) return false;
    if (json_is_string(v)) {
        size_t n = utf8_chars(json_string_value(v), json_string_length(v));
        if ((x = json_object_get(s, "minLength")) && n < (size_t)json_integer_value(x)) return false;
        if ((x = json_object_get(s, "maxLength")) && n > (size_t)json_integer_value(x)) return false;
    }
    if (json_is_number(v)) {
        double d = json_number_value(v);
        if ((x = json_object_get(s, "minimum")) && d < json_number_value(x)) return false;
        if ((x = json_object_get(s, "maximum")) && d > json_number_value(x)) return false;
        if ((x = json_object_get(s, "exclusiveMinimum")) && d <= json_number_value(x)) return false;
        if ((x = json_object_get(s, "exclusiveMaximum")) && d >= json_number_value(x)) return false;
    }
    return true;
}

/* ------------------------------------------------- constrained sampling */

typedef struct sampler {
    const tok_vocab *v;
    gram_vocab *gv;
    int32_t n;
    int32_t byte_token[256]; /* a text token of exactly that one byte */
    int32_t *specials;       /* special (non end-of-generation) tokens */
    size_t n_specials;
    float *logits;
} sampler;

static void sampler_init(sampler *sp, const tok_vocab *v)
{
    memset(sp, 0, sizeof *sp);
    sp->v = v;
    sp->n = tok_n_vocab(v);
    wk_error err = {0};
    assert_int_equal(gram_vocab_new(&sp->gv, v, &err), 0);
    for (int b = 0; b < 256; b++) sp->byte_token[b] = -1;
    sp->specials = calloc((size_t)sp->n, sizeof *sp->specials);
    for (int32_t t = 0; t < sp->n; t++) {
        if (sp->gv->kind[t] == GT_TEXT && sp->gv->len[t] == 1) {
            unsigned char b = (unsigned char)sp->gv->bytes[sp->gv->off[t]];
            if (sp->byte_token[b] < 0) sp->byte_token[b] = t;
        }
        if (sp->gv->kind[t] == GT_SPECIAL) sp->specials[sp->n_specials++] = t;
    }
    sp->logits = malloc((size_t)sp->n * sizeof *sp->logits);
}

static void sampler_free(sampler *sp)
{
    gram_vocab_free(sp->gv);
    free(sp->specials);
    free(sp->logits);
}

/* Shortest way to where the grammar can end (bytes and special tokens),
 * breadth first over configurations; appends its tokens to ids. */
typedef struct bfs_node {
    gram_state *s;
    int parent;
    int32_t token;
} bfs_node;

static int complete_shortest(sampler *sp, gram_state *from, int32_t *ids, int n_ids, int cap)
{
    enum { MAX_NODES = 6000 };
    bfs_node *q = calloc(MAX_NODES, sizeof *q);
    enum { SEEN_CAP = 1 << 15 }; /* DFA ids seen, open addressing (more than MAX_NODES) */
    uint32_t *seen = calloc(SEEN_CAP, sizeof *seen);
    wk_error err = {0};
    int qn = 0, found = -1;
    assert_int_equal(gram_state_clone(&q[qn].s, from, &err), 0);
    q[qn++].parent = -1;
    for (int qi = 0; qi < qn && found < 0; qi++) {
        if (gram_can_end(q[qi].s)) {
            found = qi;
            break;
        }
        for (int e = 0; e < 256 + (int)sp->n_specials && qn < MAX_NODES; e++) {
            int32_t tok = e < 256 ? sp->byte_token[e] : sp->specials[e - 256];
            if (tok < 0) continue;
            gram_state *c;
            assert_int_equal(gram_state_clone(&c, q[qi].s, &err), 0);
            bool fresh = false;
            if (gram_accept(c, tok, NULL) == 0) {
                uint32_t h = c->dstate * 2654435761u & (SEEN_CAP - 1);
                while (seen[h] && seen[h] != c->dstate + 1) h = (h + 1) & (SEEN_CAP - 1);
                fresh = !seen[h];
                seen[h] = c->dstate + 1;
            }
            if (fresh) {
                q[qn++] = (bfs_node){c, qi, tok};
            } else {
                gram_state_free(c);
            }
        }
    }
    if (found < 0) fail_msg("no completion found within %d configurations", MAX_NODES);
    int path[512], np = 0;
    for (int i = found; q[i].parent >= 0 && np < 512; i = q[i].parent) path[np++] = q[i].token;
    for (int k = np - 1; k >= 0; k--) {
        assert_true(n_ids < cap);
        if (gram_accept(from, path[k], &err)) fail_msg("completion token %d refused: %s", path[k], err.msg);
        ids[n_ids++] = path[k];
    }
    for (int i = 0; i < qn; i++) gram_state_free(q[i].s);
    free(q);
    free(seen);
    return n_ids;
}

/* Samples from random logits under the grammar for up to budget tokens,
 * then finishes along the shortest completion; returns the decoded text
 * (malloc'd). The masks are checked against acceptance on the way. */
static char *sample_text(sampler *sp, const gram_grammar *g, int budget, uint64_t seed)
{
    gram_state *s;
    wk_error err = {0};
    assert_int_equal(gram_state_new(&s, g, sp->gv, &err), 0);
    uint64_t rng = seed;
    int cap = budget + 600, n = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    for (int step = 0; step < budget && !gram_is_done(s); step++) {
        for (int32_t t = 0; t < sp->n; t++) sp->logits[t] = 3.0f * test_rand_normal(&rng);
        if (gram_mask_logits(s, sp->logits, &err)) fail_msg("mask: %s", err.msg);
        /* softmax sample */
        float mx = -INFINITY;
        for (int32_t t = 0; t < sp->n; t++) mx = sp->logits[t] > mx ? sp->logits[t] : mx;
        assert_true(isfinite(mx));
        double sum = 0;
        for (int32_t t = 0; t < sp->n; t++) sum += isfinite(sp->logits[t]) ? exp(sp->logits[t] - mx) : 0;
        double u = (test_rand_u32(&rng) / 4294967296.0) * sum, acc = 0;
        int32_t pick = -1;
        for (int32_t t = 0; t < sp->n && pick < 0; t++) {
            if (!isfinite(sp->logits[t])) continue;
            acc += exp(sp->logits[t] - mx);
            if (acc >= u) pick = t;
        }
        for (int32_t t = sp->n - 1; pick < 0 && t >= 0; t--)
            if (isfinite(sp->logits[t])) pick = t;
        if (gram_accept(s, pick, &err)) fail_msg("sampled token %d refused: %s", pick, err.msg);
        if (tok_is_eog(sp->v, pick)) break;
        ids[n++] = pick;
    }
    if (!gram_is_done(s) && !gram_can_end(s)) n = complete_shortest(sp, s, ids, n, cap);
    char *text;
    size_t len;
    assert_int_equal(tok_decode(sp->v, ids, (size_t)n, 0, &text, &len, &err), 0);
    assert_int_equal(strlen(text), len); /* no NUL inside */
    free(ids);
    gram_state_free(s);
    return text;
}

/* --------------------------------------------------------------- tests */

static void test_scalar_types(void **state)
{
    (void)state;
    expect_schema("{\"type\":\"string\"}", L("\"\"", "\"abc\"", "\"a\\\"b\\\\\\n\"", "\"é中\"", "\"\\u00e9\\ud83d\\ude00\""),
                  L("abc", "\"a", "\"\\x\"", "\"\\u0000\"", "\"\\ud83d\"", "\"\\ude00\"", "\"a\nb\"", "1"));
    expect_schema("{\"type\":\"integer\"}", L("0", "-7", "123", "9999999999999999"),
                  L("01", "1.5", "1e3", "-", "99999999999999999", "\"1\""));
    expect_schema("{\"type\":\"number\"}", L("0", "-0.5", "3.25", "1e5", "2.5E-3", "-1e+99"),
                  L(".5", "1.", "1e", "1e100", "NaN", "+1"));
    expect_schema("{\"type\":\"boolean\"}", L("true", "false"), L("True", "1", "null"));
    expect_schema("{\"type\":\"null\"}", L("null"), L("nil", "\"null\""));
    expect_schema("{\"type\":[\"string\",\"null\"]}", L("null", "\"x\""), L("1"));
    expect_schema("true", L("1", "\"s\"", "{\"a\":[1,{}]}", "[ ]", "null"), L("", "{", "[1,]"));
    expect_schema("{}", L("{}", "[true]"), L("tru"));
}

static void test_objects_properties_and_required(void **state)
{
    (void)state;
    const char *s = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"},"
                    "\"c\":{\"type\":\"boolean\"}},\"required\":[\"b\"]}";
    expect_schema(s, L("{\"b\":\"x\"}", "{\"a\":1,\"b\":\"x\"}", "{\"a\":1,\"b\":\"x\",\"c\":true}", "{\"b\":\"\",\"c\":false}",
                       "{ \"a\" : 1 ,\n  \"b\": \"x\"\n}"),
                  L("{}", "{\"a\":1}", "{\"b\":\"x\",\"a\":1}", "{\"b\":\"x\",}", "{\"b\":\"x\",\"d\":1}", "{\"b\":1}"));
    /* all optional: any in-order subset, the empty object included */
    expect_schema("{\"properties\":{\"x\":{},\"y\":{}}}", L("{}", "{\"x\":1}", "{\"y\":[]}", "{\"x\":1,\"y\":2}"),
                  L("{\"y\":1,\"x\":2}", "{,}"));
    /* required beyond properties: any value */
    expect_schema("{\"type\":\"object\",\"required\":[\"k\"]}", L("{\"k\":null}", "{\"k\":{\"z\":1}}"), L("{}"));
    /* whitespace is bounded */
    char big[128];
    snprintf(big, sizeof big, "{%*s}", GRAM_JSON_MAX_WS + 1, "");
    expect_schema("{\"type\":\"object\"}", L("{ }"), L(big));
    /* strict objects (additionalProperties false) and maps */
    expect_schema("{\"type\":\"object\",\"additionalProperties\":false}", L("{}", "{ }"), L("{\"a\":1}"));
    expect_schema("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", L("{}", "{\"a\":1,\"b\":2}"),
                  L("{\"a\":\"x\"}"));
}

static void test_arrays_items_tuples_and_counts(void **state)
{
    (void)state;
    expect_schema("{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}", L("[]", "[1]", "[1, 2,3]", "[ 1 ]"),
                  L("[1,]", "[\"a\"]", "[,1]"));
    expect_schema("{\"type\":\"array\",\"minItems\":2,\"maxItems\":3}", L("[1,2]", "[1,\"a\",null]"),
                  L("[]", "[1]", "[1,2,3,4]"));
    expect_schema("{\"type\":\"array\",\"maxItems\":0}", L("[]"), L("[1]"));
    expect_schema("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"items\":false}",
                  L("[]", "[\"a\"]", "[\"a\",1]"), L("[1]", "[\"a\",1,2]"));
    expect_schema("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"}],\"items\":{\"type\":\"null\"},"
                  "\"minItems\":2}",
                  L("[\"a\",null]", "[\"a\",null,null]"), L("[\"a\"]", "[\"a\",1]"));
    expect_schema("{\"type\":\"array\",\"items\":[{\"const\":1},{\"const\":2}],\"additionalItems\":false,"
                  "\"minItems\":1}",
                  L("[1]", "[1,2]"), L("[]", "[2]", "[1,2,3]"));
    expect_schema_error("{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", WK_EINVAL, "minItems");
}

static void test_string_lengths(void **state)
{
    (void)state;
    expect_schema("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}",
                  L("\"ab\"", "\"abc\"", "\"é中\"", "\"\\n\\t\"", "\"\\ud83d\\ude00x\""), L("\"a\"", "\"abcd\"", "\"\""));
    expect_schema("{\"maxLength\":0}", L("\"\""), L("\"a\""));
    expect_schema_error("{\"type\":\"string\",\"minLength\":5,\"maxLength\":2}", WK_EINVAL, "minLength");
    expect_schema_error("{\"type\":\"string\",\"minLength\":-1}", WK_EINVAL, "minLength");
}

/* Every integer in a window against the bounds, for many bound pairs. */
static void test_integer_bounds_are_exact(void **state)
{
    (void)state;
    const int bounds[][2] = {{0, 150}, {-17, 5}, {7, 7}, {-300, -101}, {99, 1000}, {1, 9}, {10, 99}, {-9, 0}, {123, 456}};
    for (size_t b = 0; b < sizeof bounds / sizeof bounds[0]; b++) {
        char schema[160];
        snprintf(schema, sizeof schema, "{\"type\":\"integer\",\"minimum\":%d,\"maximum\":%d}", bounds[b][0], bounds[b][1]);
        gram_grammar *g = schema_grammar(schema);
        for (int x = -1100; x <= 1100; x++) {
            char t[16];
            snprintf(t, sizeof t, "%d", x);
            bool want = x >= bounds[b][0] && x <= bounds[b][1];
            if ((classify(g, t) == 1) != want) fail_msg("%s: %d %s", schema, x, want ? "rejected" : "accepted");
        }
        gram_grammar_free(g);
    }
    /* exclusive forms, draft 4 and later */
    expect_schema("{\"type\":\"integer\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":3}", L("1", "2"), L("0", "3", "-1"));
    expect_schema("{\"type\":\"integer\",\"minimum\":0,\"exclusiveMinimum\":true}", L("1", "5000"), L("0"));
    expect_schema("{\"type\":\"integer\",\"minimum\":2.5}", L("3"), L("2"));
    expect_schema_error("{\"type\":\"integer\",\"minimum\":1e300}", WK_EINVAL, "no integer");
}

static void test_number_bounds(void **state)
{
    (void)state;
    const char *s = "{\"type\":\"number\",\"minimum\":-2,\"maximum\":3}";
    expect_schema(s, L("-2", "-2.0", "-1.75", "0", "0.5", "2.999", "3", "3.00"), L("-2.5", "3.1", "-3", "4", "1e1"));
    expect_schema("{\"type\":\"number\",\"exclusiveMinimum\":0}", L("0.001", "5", "12.5"), L("0", "0.0", "-1", "-0.5"));
    expect_schema("{\"type\":\"number\",\"minimum\":0}", L("0", "0.0", "7.5"), L("-0.1", "-3"));
    expect_schema("{\"type\":\"number\",\"exclusiveMaximum\":1,\"minimum\":0}", L("0", "0.99"), L("1", "1.0", "1.5"));
    expect_schema("{\"type\":\"number\",\"maximum\":-1}", L("-1", "-1.5", "-100"), L("-0.5", "0"));
    /* decimals across a grid against the bounds */
    gram_grammar *g = schema_grammar("{\"type\":\"number\",\"exclusiveMinimum\":-3,\"maximum\":11}");
    for (int k = -500; k <= 1500; k += 7) {
        char t[32];
        double x = k / 100.0;
        snprintf(t, sizeof t, "%.2f", x);
        bool want = x > -3 && x <= 11;
        if ((classify(g, t) == 1) != want) fail_msg("(-3, 11]: %s %s", t, want ? "rejected" : "accepted");
    }
    gram_grammar_free(g);
    expect_schema_error("{\"type\":\"number\",\"minimum\":0.5}", WK_EUNSUPPORTED, "minimum");
    expect_schema_error("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", WK_EINVAL, "no integer");
}

static void test_enum_and_const(void **state)
{
    (void)state;
    expect_schema("{\"enum\":[\"red\",\"green\",\"gr\",1,null,{\"a\":[1]}]}",
                  L("\"red\"", "\"green\"", "\"gr\"", "1", "null", "{\"a\":[1]}"), L("\"g\"", "\"blue\"", "2", "\"grn\""));
    expect_schema("{\"type\":\"string\",\"enum\":[\"a\",1]}", L("\"a\""), L("1"));
    expect_schema("{\"const\":\"x\\\"y\"}", L("\"x\\\"y\""), L("\"xy\""));
    expect_schema("{\"enum\":[0.1, 2.5, 1e-7]}", L("0.1", "2.5", "1e-7"), L("0.10000000000000001", "1e-07"));
    expect_schema_error("{\"type\":\"integer\",\"enum\":[\"a\"]}", WK_EINVAL, "no enum");
    expect_schema_error("{\"enum\":[\"a\"],\"minLength\":3}", WK_EUNSUPPORTED, "minLength");
    /* a large enum stays deterministic (a prefix tree): no ambiguity error */
    json_t *s = json_object(), *vals = json_array();
    for (int i = 0; i < 5000; i++) {
        char b[32];
        snprintf(b, sizeof b, "item-%d", i);
        json_array_append_new(vals, json_string(b));
    }
    json_object_set_new(s, "enum", vals);
    gram_grammar *g;
    wk_error err = {0};
    assert_int_equal(gram_from_json_schema(&g, s, GRAM_REASONING_NONE, &err), 0);
    assert_int_equal(classify(g, "\"item-4999\""), 1);
    assert_int_equal(classify(g, "\"item-5000\""), -1);
    assert_int_equal(classify(g, "\"item-49\""), 1);
    gram_grammar_free(g);
    json_decref(s);
}

static void test_combinators_and_refs(void **state)
{
    (void)state;
    expect_schema("{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":1}]}", L("5", "\"a\""), L("\"ab\"", "null"));
    expect_schema("{\"oneOf\":[{\"type\":\"null\"},{\"type\":\"boolean\"}],\"description\":\"d\"}", L("null", "true"), L("1"));
    expect_schema("{\"allOf\":[{\"type\":\"boolean\"}],\"title\":\"t\"}", L("false"), L("0"));
    const char *tree = "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"$ref\":\"#/$defs/node\","
                       "\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                       "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"],"
                       "\"additionalProperties\":false}}}";
    expect_schema(tree, L("{\"v\":1}", "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[]}]}"),
                  L("{\"kids\":[]}", "{\"v\":1,\"kids\":[{}]}"));
    expect_schema("{\"definitions\":{\"p\":{\"type\":\"integer\"}},\"type\":\"array\",\"items\":{\"$ref\":\"#/definitions/p\"}}",
                  L("[1,2]"), L("[\"x\"]"));
    /* recursion through the root */
    expect_schema("{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}", L("[]", "[[],[[]]]"), L("[1]"));
    expect_schema_error("{\"$ref\":\"#/$defs/missing\"}", WK_EINVAL, "points to nothing");
    expect_schema_error("{\"$ref\":\"https://example.com/s.json\"}", WK_EUNSUPPORTED, "local");
    expect_schema_error("{\"$ref\":\"#/$defs/a\",\"type\":\"string\",\"$defs\":{\"a\":{}}}", WK_EUNSUPPORTED, "'type' next to $ref");
    expect_schema_error("{\"allOf\":[{\"type\":\"string\"},{\"maxLength\":3}]}", WK_EUNSUPPORTED, "allOf");
    /* a $ref loop that reads nothing */
    expect_schema_error("{\"$ref\":\"#/$defs/a\",\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"},"
                        "{\"type\":\"null\"}]}}}",
                        WK_EINVAL, "left-recursive");
}

static void test_unsupported_keywords_are_named(void **state)
{
    (void)state;
    expect_schema_error("{\"type\":\"string\",\"pattern\":\"^a+$\"}", WK_EUNSUPPORTED, "'pattern'");
    expect_schema_error("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"number\",\"multipleOf\":2}}}", WK_EUNSUPPORTED,
                        "#/properties/n: keyword 'multipleOf'");
    expect_schema_error("{\"type\":\"array\",\"uniqueItems\":true}", WK_EUNSUPPORTED, "uniqueItems");
    expect_schema_error("{\"not\":{}}", WK_EUNSUPPORTED, "'not'");
    expect_schema_error("{\"type\":\"object\",\"patternProperties\":{}}", WK_EUNSUPPORTED, "patternProperties");
    expect_schema_error("{\"type\":\"object\",\"minProperties\":1}", WK_EUNSUPPORTED, "minProperties");
    expect_schema_error("{\"type\":\"wat\"}", WK_EINVAL, "unknown type");
    expect_schema_error("false", WK_EINVAL, "admits no value");
    expect_schema_error("[1]", WK_EINVAL, "object or a boolean");
    /* annotations and unknown keywords are fine */
    expect_schema("{\"type\":\"string\",\"format\":\"date-time\",\"title\":\"t\",\"description\":\"d\",\"default\":\"x\","
                  "\"examples\":[\"y\"],\"x-vendor\":1,\"uniqueItems\":false,\"someFutureKeyword\":3}",
                  L("\"anything\""), NULL);
}

static void test_hostile_schemas_fail_cleanly(void **state)
{
    (void)state;
    wk_error err = {0};
    gram_grammar *g;
    /* nesting far beyond the cap (built through the API: no parser limit) */
    json_t *root = json_object(), *cur = root;
    for (int i = 0; i < 5000; i++) {
        json_t *next = json_object();
        json_object_set_new(cur, "type", json_string("array"));
        json_object_set_new(cur, "items", next);
        cur = next;
    }
    assert_int_equal(gram_from_json_schema(&g, root, GRAM_REASONING_NONE, &err), WK_ERANGE);
    assert_non_null(strstr(err.msg, "nested deeper"));
    json_decref(root);
    /* a huge enum */
    json_t *s = json_object(), *vals = json_array();
    for (int i = 0; i < GRAM_JSON_MAX_ENUM + 1; i++) json_array_append_new(vals, json_integer(i));
    json_object_set_new(s, "enum", vals);
    assert_int_equal(gram_from_json_schema(&g, s, GRAM_REASONING_NONE, &err), WK_ERANGE);
    json_decref(s);
    /* too many properties */
    s = json_object();
    json_t *props = json_object();
    for (int i = 0; i < GRAM_JSON_MAX_PROPERTIES + 1; i++) {
        char k[16];
        snprintf(k, sizeof k, "p%d", i);
        json_object_set_new(props, k, json_object());
    }
    json_object_set_new(s, "properties", props);
    assert_int_equal(gram_from_json_schema(&g, s, GRAM_REASONING_NONE, &err), WK_ERANGE);
    json_decref(s);
    /* 2^24 paths through $refs: each definition is compiled once */
    s = json_object();
    json_t *defs = json_object();
    for (int i = 0; i < 24; i++) {
        char name[16], next[32];
        snprintf(name, sizeof name, "d%d", i);
        snprintf(next, sizeof next, "#/$defs/d%d", i + 1);
        json_t *d = i == 23 ? json_pack("{s:s}", "type", "integer")
                            : json_pack("{s:s, s:{s:{s:s}, s:{s:s}}}", "type", "object", "properties", "a", "$ref",
                                        next, "b", "$ref", next);
        json_object_set_new(defs, name, d);
    }
    json_object_set_new(s, "$defs", defs);
    json_object_set_new(s, "$ref", json_string("#/$defs/d0"));
    assert_int_equal(gram_from_json_schema(&g, s, GRAM_REASONING_NONE, &err), 0);
    gram_grammar_free(g);
    json_decref(s);
    /* a huge maxLength is fine in plain JSON (a counter, not rules) */
    expect_schema("{\"type\":\"string\",\"maxLength\":900000}", L("\"abc\""), NULL);
    expect_schema("{\"type\":\"array\",\"maxItems\":5000000000}", L("[1,2]"), NULL); /* held to 1000000 */
    expect_schema_error("{\"type\":\"string\",\"minLength\":2000000}", WK_ERANGE, "minLength");
}

static void test_json_object_mode(void **state)
{
    (void)state;
    gram_grammar *g;
    wk_error err = {0};
    assert_int_equal(gram_json_object(&g, GRAM_REASONING_NONE, &err), 0);
    const char *yes[] = {"{}", "{\"a\":1}", "{\"a\":{\"b\":[1,2,{\"c\":null}]},\"d\":\"x\"}", NULL};
    const char *no[] = {"[]", "1", "\"s\"", "{\"a\"}", "{1:2}", NULL};
    for (size_t i = 0; yes[i]; i++) assert_int_equal(classify(g, yes[i]), 1);
    for (size_t i = 0; no[i]; i++) assert_int_not_equal(classify(g, no[i]), 1);
    gram_grammar_free(g);
}

/* ---- constrained random sampling: always valid, whatever the logits ---- */

static const char *const k_schemas[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},\"age\":{\"type\":\"integer\","
    "\"minimum\":0,\"maximum\":130},\"email\":{\"type\":\"string\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":"
    "[\"a\",\"b\",\"c\"]},\"maxItems\":4}},\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
    "{\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\","
    "\"minLength\":1,\"maxLength\":8},\"lat\":{\"type\":\"number\",\"minimum\":-90,\"maximum\":90},\"lon\":{\"type\":"
    "\"number\"}},\"required\":[\"city\",\"lat\"]},\"unit\":{\"enum\":[\"celsius\",\"fahrenheit\"]},\"days\":{\"type\":"
    "\"array\",\"prefixItems\":[{\"type\":\"boolean\"},{\"type\":\"null\"}],\"minItems\":1}},\"required\":[\"location\","
    "\"unit\"]}",
    "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\","
    "\"maxLength\":3}]},\"k\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"},\"maxItems\":2}},\"required\":[\"v\"]}},"
    "\"$ref\":\"#/$defs/n\"}",
    "{\"type\":\"array\",\"items\":{\"type\":[\"string\",\"number\",\"boolean\",\"null\"]},\"minItems\":2,\"maxItems\":5}",
    "true",
};

static void check_samples(const tok_vocab *v, int walks, int budget)
{
    sampler sp;
    sampler_init(&sp, v);
    for (size_t k = 0; k < sizeof k_schemas / sizeof k_schemas[0]; k++) {
        json_t *schema = J(k_schemas[k]);
        gram_grammar *g;
        wk_error err = {0};
        assert_int_equal(gram_from_json_schema(&g, schema, GRAM_REASONING_NONE, &err), 0);
        for (int w = 0; w < walks; w++) {
            char *text = sample_text(&sp, g, budget, 77 + (uint64_t)w * 131 + k);
            json_error_t je;
            json_t *val = json_loads(text, JSON_DECODE_ANY, &je);
            if (!val) fail_msg("schema %zu walk %d: output does not parse (%s): %s", k, w, je.text, text);
            if (!validate(schema, schema, val)) fail_msg("schema %zu walk %d: output is not valid: %s", k, w, text);
            json_decref(val);
            free(text);
        }
        gram_grammar_free(g);
        json_decref(schema);
    }
    sampler_free(&sp);
}

static void test_sampling_yields_valid_json_on_the_golden_model_vocab(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    tok_vocab *v = gt_vocab_from_gguf(path_join(golden, "models/tiny-qwen3-Q8_0.gguf"));
    check_samples(v, 6, 150);
    tok_free(v);
}

static void test_sampling_yields_valid_json_on_a_bpe_vocab(void **state)
{
    (void)state;
    tok_vocab *v = gt_synth_vocab(4096);
    check_samples(v, 6, 80);
    tok_free(v);
}

/* Masks of a schema grammar against acceptance, token by token. */
static void test_schema_masks_equal_the_reference(void **state)
{
    (void)state;
    tok_vocab *v = gt_synth_vocab(4096);
    gram_vocab *gv;
    wk_error err = {0};
    assert_int_equal(gram_vocab_new(&gv, v, &err), 0);
    for (size_t k = 0; k < 3; k++) {
        json_t *schema = J(k_schemas[k]);
        gram_grammar *g;
        assert_int_equal(gram_from_json_schema(&g, schema, GRAM_REASONING_NONE, &err), 0);
        assert_true(gt_random_walk_checks_masks(g, gv, v, 30, 5 + k) > 0);
        gram_grammar_free(g);
        json_decref(schema);
    }
    gram_vocab_free(gv);
    tok_free(v);
}

/* ---- tool calls ---- */

static const char *k_tools =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"d\",\"parameters\":{"
    "\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
    "\"string\",\"maxLength\":10},\"unit\":{\"type\":\"string\",\"enum\":[\"c\",\"f\"]},\"days\":{\"type\":\"integer\","
    "\"minimum\":1,\"maximum\":14}},\"required\":[\"city\"],\"additionalProperties\":false}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"write_file\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"path\":{\"type\":\"string\"},\"content\":{\"type\":\"string\"},\"lines\":{\"type\":\"array\",\"items\":{\"type\":"
    "\"string\"},\"maxItems\":2},\"force\":{\"type\":\"boolean\"}},\"required\":[\"path\",\"content\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"list\"}}]";

static const json_t *tool_params(const json_t *tools, const char *name)
{
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const json_t *fn = json_object_get(t, "function");
        if (!strcmp(json_string_value(json_object_get(fn, "name")), name)) {
            const json_t *p = json_object_get(fn, "parameters");
            return p ? p : json_true();
        }
    }
    return NULL;
}

/* On the real Qwen3 vocabulary: documents the way a model writes them,
 * through strings in several contexts (the masks shared across contexts),
 * tool calls with the special tokens, and random continuations. */
static void test_masks_equal_the_reference_on_the_qwen3_vocab(void **state)
{
    (void)state;
    tok_vocab *v = gt_qwen3_vocab();
    if (!v) {
        if (golden_required()) fail_msg("Qwen3 tokenizer.json missing (CI requires it)");
        WK_SKIP();
    }
    gram_vocab *gv;
    wk_error err = {0};
    assert_int_equal(gram_vocab_new(&gv, v, &err), 0);
    json_t *schema = J(k_schemas[0]);
    gram_grammar *g;
    assert_int_equal(gram_from_json_schema(&g, schema, GRAM_REASONING_NONE, &err), 0);
    gt_document_checks_masks(g, gv, v, "{\"name\": \"Zoë \\\"Z\\\"\", \"age\": 42, \"email\": \"z@x.org\", "
                                       "\"tags\": [\"a\",\"c\"]}");
    gram_grammar_free(g);
    json_decref(schema);
    assert_int_equal(gram_json_object(&g, GRAM_REASONING_NONE, &err), 0);
    gt_document_checks_masks(g, gv, v, "{\"k\": {\"deep\": [\"x y\", {\"z\": \"中文 ok\"}]}}");
    gram_grammar_free(g);
    json_t *tools = J(k_tools);
    assert_int_equal(gram_for_tools(&g, tools, CHAT_TOOLS_HERMES, NULL, true, GRAM_REASONING_NONE, &err), 0);
    gt_document_checks_masks(g, gv, v, "<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"a.py\", "
                                       "\"content\": \"print(1)\\n<\\/tool_call>\"}}\n</tool_call>");
    gram_grammar_free(g);
    assert_int_equal(gram_for_tools(&g, tools, CHAT_TOOLS_QWEN_XML, NULL, true, GRAM_REASONING_NONE, &err), 0);
    gt_document_checks_masks(g, gv, v, "<tool_call>\n<function=write_file>\n<parameter=path>\na.py\n</parameter>\n"
                                       "<parameter=content>\nif a < b:\n    x = \"</p>\"\n</parameter>\n</function>\n</tool_call>");
    gram_grammar_free(g);
    json_decref(tools);
    gram_vocab_free(gv);
    tok_free(v);
}

static void check_tool_samples(const tok_vocab *v, chat_tool_format fmt, const char *name, bool parallel,
                               enum gram_reasoning reasoning, int walks)
{
    json_t *tools = J(k_tools);
    sampler sp;
    sampler_init(&sp, v);
    gram_grammar *g;
    wk_error err = {0};
    if (gram_for_tools(&g, tools, fmt, name, parallel, reasoning, &err)) fail_msg("tools: %s", err.msg);
    int multi = 0;
    for (int w = 0; w < walks; w++) {
        char *text = sample_text(&sp, g, 90, 1234 + (uint64_t)w * 7 + (uint64_t)fmt);
        chat_parse_options opt = {.tool_format = fmt, .tools = tools,
                                  .parse_reasoning = reasoning != GRAM_REASONING_NONE,
                                  .reasoning_open = reasoning == GRAM_REASONING_OPEN};
        chat_delta d = {0};
        assert_int_equal(chat_parse_all(&opt, text, strlen(text), &d, &err), 0);
        if (d.n_calls == 0 || (d.content.len && strspn(d.content.data, " \t\r\n") != d.content.len))
            fail_msg("format %d walk %d: %zu calls, content '%s' from: %s", fmt, w, d.n_calls,
                     d.content.data ? d.content.data : "", text);
        if ((name || !parallel) && d.n_calls != 1) fail_msg("expected one call, got %zu: %s", d.n_calls, text);
        multi += d.n_calls > 1;
        for (size_t c = 0; c < d.n_calls; c++) {
            if (name) assert_string_equal(d.calls[c].name, name);
            const json_t *params = tool_params(tools, d.calls[c].name);
            if (!params) fail_msg("call of an unknown tool '%s': %s", d.calls[c].name, text);
            json_error_t je;
            json_t *args = json_loads(d.calls[c].arguments, 0, &je);
            if (!json_is_object(args)) fail_msg("arguments do not parse (%s): %s", je.text, d.calls[c].arguments);
            if (!validate(params, params, args))
                fail_msg("arguments of %s are not valid: %s\n(from %s)", d.calls[c].name, d.calls[c].arguments, text);
            json_decref(args);
        }
        chat_delta_free(&d);
        free(text);
    }
    if (!name && parallel && walks >= 8) assert_true(multi > 0); /* parallel calls do occur */
    gram_grammar_free(g);
    sampler_free(&sp);
    json_decref(tools);
}

static void test_tool_calls_always_parse_hermes(void **state)
{
    (void)state;
    tok_vocab *v = gt_synth_vocab(4096);
    check_tool_samples(v, CHAT_TOOLS_HERMES, NULL, true, GRAM_REASONING_NONE, 10);
    check_tool_samples(v, CHAT_TOOLS_HERMES, NULL, false, GRAM_REASONING_NONE, 4);
    check_tool_samples(v, CHAT_TOOLS_HERMES, "write_file", false, GRAM_REASONING_OPTIONAL, 4);
    tok_free(v);
}

static void test_tool_calls_always_parse_qwen_xml(void **state)
{
    (void)state;
    tok_vocab *v = gt_synth_vocab(4096);
    check_tool_samples(v, CHAT_TOOLS_QWEN_XML, NULL, true, GRAM_REASONING_NONE, 8);
    check_tool_samples(v, CHAT_TOOLS_QWEN_XML, "get_weather", false, GRAM_REASONING_OPEN, 4);
    check_tool_samples(v, CHAT_TOOLS_QWEN_XML, "list", false, GRAM_REASONING_NONE, 2);
    tok_free(v);
}

/* The literal shapes the templates render, and what the format excludes. */
static void test_tool_call_texts(void **state)
{
    (void)state;
    json_t *tools = J(k_tools);
    gram_grammar *g;
    wk_error err = {0};
    assert_int_equal(gram_for_tools(&g, tools, CHAT_TOOLS_HERMES, NULL, true, GRAM_REASONING_NONE, &err), 0);
    assert_int_equal(classify(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"), 1);
    assert_int_equal(classify(g, "<tool_call>\n{\"name\": \"list\", \"arguments\": {}}\n</tool_call>\n"
                                 "<tool_call>\n{\"name\": \"list\", \"arguments\": { }}\n</tool_call>"), 1);
    assert_int_equal(classify(g, "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>"), -1);
    assert_int_equal(classify(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"), -1);
    /* the end marker cannot appear raw inside a string, escaped it can */
    assert_int_equal(classify(g, "<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"</tool_call>"), -1);
    assert_int_equal(classify(g, "<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"<\\/tool_call>\", "
                                 "\"content\": \"</div></tool_cal\"}}\n</tool_call>"), 1);
    gram_grammar_free(g);
    assert_int_equal(gram_for_tools(&g, tools, CHAT_TOOLS_QWEN_XML, "write_file", false, GRAM_REASONING_NONE, &err), 0);
    assert_int_equal(classify(g, "<tool_call>\n<function=write_file>\n<parameter=path>\na.txt\n</parameter>\n"
                                 "<parameter=content>\nline 1\n</param\n</parameter>\n<parameter=force>\ntrue\n</parameter>\n"
                                 "</function>\n</tool_call>"), 1);
    assert_int_equal(classify(g, "<tool_call>\n<function=write_file>\n<parameter=path>\na</parameter>"), -1);
    assert_int_equal(classify(g, "<tool_call>\n<function=write_file>\n<parameter=content>\n"), -1); /* path first */
    gram_grammar_free(g);
    /* long bounded strings: no raw '<' (JSON can escape it) */
    json_t *bounded = J("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                        "\"properties\":{\"s\":{\"type\":\"string\",\"maxLength\":10000},\"n\":{\"type\":\"array\","
                        "\"items\":{\"type\":\"string\",\"maxLength\":9000}}},\"required\":[\"s\"]}}}]");
    assert_int_equal(gram_for_tools(&g, bounded, CHAT_TOOLS_HERMES, "f", false, GRAM_REASONING_NONE, &err), 0);
    assert_int_equal(classify(g, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": \"a\\u003cb\"}}\n</tool_call>"), 1);
    assert_int_equal(classify(g, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": \"a<"), -1);
    gram_grammar_free(g);
    assert_int_equal(gram_for_tools(&g, bounded, CHAT_TOOLS_QWEN_XML, "f", false, GRAM_REASONING_NONE, &err), 0);
    assert_int_equal(classify(g, "<tool_call>\n<function=f>\n<parameter=s>\nab\n</parameter>\n<parameter=n>\n"
                                 "[\"x\\u003c\"]\n</parameter>\n</function>\n</tool_call>"), 1);
    assert_int_equal(classify(g, "<tool_call>\n<function=f>\n<parameter=s>\na<b"), -1);
    gram_grammar_free(g);
    json_decref(bounded);
    /* errors */
    assert_int_equal(gram_for_tools(&g, tools, CHAT_TOOLS_HERMES, "missing", false, GRAM_REASONING_NONE, &err), WK_EINVAL);
    assert_non_null(strstr(err.msg, "missing"));
    assert_int_equal(gram_for_tools(&g, tools, CHAT_TOOLS_NONE, NULL, true, GRAM_REASONING_NONE, &err), WK_EUNSUPPORTED);
    json_t *bad = J("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                    "\"properties\":{\"x\":{\"type\":\"string\",\"pattern\":\"a\"}}}}}]");
    assert_int_equal(gram_for_tools(&g, bad, CHAT_TOOLS_HERMES, NULL, true, GRAM_REASONING_NONE, &err), WK_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "pattern"));
    json_decref(bad);
    bad = J("[{\"type\":\"function\",\"function\":{\"name\":\"a>b\"}}]");
    assert_int_equal(gram_for_tools(&g, bad, CHAT_TOOLS_QWEN_XML, NULL, true, GRAM_REASONING_NONE, &err), WK_EINVAL);
    json_decref(bad);
    json_decref(tools);
}

/* Reasoning first, then the constrained part, split by the parser. */
static void test_reasoning_prefix(void **state)
{
    (void)state;
    json_t *schema = J("{\"type\":\"boolean\"}");
    gram_grammar *g;
    wk_error err = {0};
    assert_int_equal(gram_from_json_schema(&g, schema, GRAM_REASONING_OPTIONAL, &err), 0);
    assert_int_equal(classify(g, "true"), 1);
    assert_int_equal(classify(g, "<think>hmm, </thin>k</think>\n\nfalse"), 1);
    assert_int_equal(classify(g, "<think>a</think>b</think>true"), -1);
    gram_grammar_free(g);
    assert_int_equal(gram_from_json_schema(&g, schema, GRAM_REASONING_OPEN, &err), 0);
    assert_int_equal(classify(g, "let me see</think>true"), 1);
    assert_int_equal(classify(g, "true"), 0);
    gram_grammar_free(g);
    json_decref(schema);
    /* in tool grammars reasoning cannot contain <tool_call> (it would end there) */
    json_t *tools = J(k_tools);
    assert_int_equal(gram_for_tools(&g, tools, CHAT_TOOLS_HERMES, "list", false, GRAM_REASONING_OPEN, &err), 0);
    assert_int_equal(classify(g, "x <tool_call> y"), -1);
    assert_int_equal(classify(g, "x</think>\n<tool_call>\n{\"name\": \"list\", \"arguments\": {}}\n</tool_call>"), 1);
    gram_grammar_free(g);
    json_decref(tools);
    /* sampled outputs split into reasoning and valid JSON */
    tok_vocab *v = gt_synth_vocab(4096);
    sampler sp;
    sampler_init(&sp, v);
    schema = J(k_schemas[0]);
    assert_int_equal(gram_from_json_schema(&g, schema, GRAM_REASONING_OPTIONAL, &err), 0);
    for (int w = 0; w < 6; w++) {
        char *text = sample_text(&sp, g, 60, 99 + (uint64_t)w);
        chat_parse_options opt = {.parse_reasoning = true};
        chat_delta d = {0};
        assert_int_equal(chat_parse_all(&opt, text, strlen(text), &d, &err), 0);
        json_t *val = json_loads(d.content.data ? d.content.data : "", 0, NULL);
        if (!val || !validate(schema, schema, val)) fail_msg("content not valid: %s", text);
        json_decref(val);
        chat_delta_free(&d);
        free(text);
    }
    gram_grammar_free(g);
    json_decref(schema);
    sampler_free(&sp);
    tok_free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalar_types),
        cmocka_unit_test(test_objects_properties_and_required),
        cmocka_unit_test(test_arrays_items_tuples_and_counts),
        cmocka_unit_test(test_string_lengths),
        cmocka_unit_test(test_integer_bounds_are_exact),
        cmocka_unit_test(test_number_bounds),
        cmocka_unit_test(test_enum_and_const),
        cmocka_unit_test(test_combinators_and_refs),
        cmocka_unit_test(test_unsupported_keywords_are_named),
        cmocka_unit_test(test_hostile_schemas_fail_cleanly),
        cmocka_unit_test(test_json_object_mode),
        cmocka_unit_test(test_sampling_yields_valid_json_on_the_golden_model_vocab),
        cmocka_unit_test(test_sampling_yields_valid_json_on_a_bpe_vocab),
        cmocka_unit_test(test_schema_masks_equal_the_reference),
        cmocka_unit_test(test_masks_equal_the_reference_on_the_qwen3_vocab),
        cmocka_unit_test(test_tool_calls_always_parse_hermes),
        cmocka_unit_test(test_tool_calls_always_parse_qwen_xml),
        cmocka_unit_test(test_tool_call_texts),
        cmocka_unit_test(test_reasoning_prefix),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
