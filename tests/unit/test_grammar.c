#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/grammar.h"
#include "test_grammar_util.h"
#include "testutil.h"

/* ---- language helpers (no vocabulary: bytes in, match or not) ---- */

static gram_grammar *compile(const char *text)
{
    gram_grammar *g;
    wk_error err = {0};
    if (gram_compile_gbnf(&g, text, strlen(text), &err)) fail_msg("compile: %s\n%s", err.msg, text);
    return g;
}

/* 1: s is a sentence; 0: s is a proper prefix of one; -1: neither. */
static int classify(const gram_grammar *g, const char *s, size_t len)
{
    gram_state *st;
    wk_error err = {0};
    assert_int_equal(gram_state_new(&st, g, NULL, &err), 0);
    int r;
    if (gram_accept_bytes(st, s, len, &err)) r = -1;
    else r = gram_can_end(st) ? 1 : 0;
    gram_state_free(st);
    return r;
}

static void expect_lang(const char *gbnf, const char *const *yes, const char *const *prefix, const char *const *no)
{
    gram_grammar *g = compile(gbnf);
    for (size_t i = 0; yes && yes[i]; i++)
        if (classify(g, yes[i], strlen(yes[i])) != 1) fail_msg("'%s' should match\n%s", yes[i], gbnf);
    for (size_t i = 0; prefix && prefix[i]; i++)
        if (classify(g, prefix[i], strlen(prefix[i])) != 0) fail_msg("'%s' should be a proper prefix\n%s", prefix[i], gbnf);
    for (size_t i = 0; no && no[i]; i++)
        if (classify(g, no[i], strlen(no[i])) != -1) fail_msg("'%s' should be rejected\n%s", no[i], gbnf);
    gram_grammar_free(g);
}

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

static void expect_compile_error(const char *gbnf, int code, const char *needle)
{
    gram_grammar *g;
    wk_error err = {0};
    int rc = gram_compile_gbnf(&g, gbnf, strlen(gbnf), &err);
    if (rc != code) fail_msg("expected error %d, got %d (%s) for\n%s", code, rc, err.msg, gbnf);
    if (needle && !strstr(err.msg, needle)) fail_msg("error '%s' does not mention '%s'", err.msg, needle);
    assert_null(g);
}

/* ---- constructs ---- */

static void test_literals_sequences_and_alternation(void **state)
{
    (void)state;
    expect_lang("root ::= \"ab\" \"c\"", L("abc"), L("", "a", "ab"), L("abd", "abcd", "b"));
    expect_lang("root ::= \"yes\" | \"no\" | \"\"", L("yes", "no", ""), L("y", "ye", "n"), L("yess", "x"));
    expect_lang("root ::= (\"a\" | \"b\") (\"c\" | \"d\")", L("ac", "ad", "bc", "bd"), L("a", "b"), L("ab", "cd", "acd"));
    /* escapes in literals, raw UTF-8 and \x bytes */
    expect_lang("root ::= \"\\n\\t\\\"\\\\\" \"é\" \"\\u00e9\" \"\\x41\"", L("\n\t\"\\ééA"), NULL, L("\n\t\"\\eeA"));
    /* comments and rules across lines */
    expect_lang("# a comment\nroot ::= a # trailing\n  \"!\"\na ::= \"x\"\n", L("x!"), L("x"), L("!"));
}

static void test_repetition_operators(void **state)
{
    (void)state;
    expect_lang("root ::= \"a\"*", L("", "a", "aaaa"), NULL, L("b", "aab"));
    expect_lang("root ::= \"a\"+", L("a", "aaa"), L(""), L("b"));
    expect_lang("root ::= \"a\"? \"b\"", L("ab", "b"), L("", "a"), L("aab", "ba"));
    expect_lang("root ::= \"a\"{3}", L("aaa"), L("", "aa"), L("aaaa"));
    expect_lang("root ::= \"a\"{2,}", L("aa", "aaaaaa"), L("a"), L("b"));
    expect_lang("root ::= \"a\"{1,3} \"b\"", L("ab", "aab", "aaab"), L("a", "aaa"), L("b", "aaaab"));
    expect_lang("root ::= \"a\"{0,0} \"b\"", L("b"), NULL, L("ab"));
    expect_lang("root ::= (\"ab\" | \"c\"){2,3}", L("abab", "cc", "abcab", "ccc"), L("ab", "c", "a", "ca"), L("abcabc", "cb"));
    /* repetition of something that can be empty ends (no endless epsilon loop) */
    expect_lang("root ::= (\"a\"?)* \"b\"", L("b", "ab", "aaab"), L("a"), L("ba"));
    expect_lang("root ::= (\"x\"? \"y\"?){2,4}", L("", "x", "xyxy", "yyyy", "xyxyxyxy"), NULL, L("xyxyxyxyx"));
    /* nested counted repetitions */
    expect_lang("root ::= (\"a\"{2}){2}", L("aaaa"), L("aaa"), L("aaaaa"));
    expect_lang("root ::= \"a\"{2}?", L("", "aa"), L("a"), L("aaa"));
}

static void test_character_classes(void **state)
{
    (void)state;
    expect_lang("root ::= [a-c0-9_]+", L("a", "abc09_", "_"), L(""), L("d", "A", "-"));
    expect_lang("root ::= [^a-c]", L("d", "A", "é", "\xF0\x9F\x98\x80", "\n"), L(""), L("a", "b", "c", "dd"));
    expect_lang("root ::= [\\]\\[\\-\\^]+", L("]", "[", "-", "^", "][-^"), NULL, L("a", "\\"));
    expect_lang("root ::= [\\x00-\\x1f]", L("\x01", "\x1f"), NULL, L(" ", "a"));
    /* multi-byte ranges: Greek, CJK, astral */
    expect_lang("root ::= [α-ω]+", L("αβγ", "ω"), NULL, L("a", "Α", "ϊ"));
    expect_lang("root ::= [\\u4e00-\\u9fff]", L("中", "一", "\xE9\xBF\xBF"), L("\xE4", "\xE4\xB8"), L("\xE3\x80\x80", "a"));
    expect_lang("root ::= [\\U0001F600-\\U0001F64F]", L("\xF0\x9F\x98\x80", "\xF0\x9F\x99\x8F"), L("\xF0\x9F"),
                L("\xF0\x9F\x99\x90", "\xF0\x9F\x97\xBF"));
    /* a range across encoded lengths, with an odd start and end */
    expect_lang("root ::= [\\u007e-\\u0801]", L("~", "\x7f", "\xC2\x80", "\xDF\xBF", "\xE0\xA0\x80", "\xE0\xA0\x81"), NULL,
                L("}", "\xE0\xA0\x82"));
    /* any character: valid UTF-8 only, no surrogates, no overlongs */
    expect_lang("root ::= .", L("a", "\n", "é", "中", "\xF4\x8F\xBF\xBF"), L("\xE4\xB8"),
                L("\x80", "\xC0\x80", "\xC1\xBF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xF5", "\xFF", "ab"));
    expect_lang("root ::= [^\"\\\\]*", L("", "abc", "é中"), NULL, L("\"", "a\\", "\xFF"));
    expect_lang("root ::= [^]", L("a", "\"", "中"), L(""), L("\xFF", "ab"));
}

static void test_rule_references_and_recursion(void **state)
{
    (void)state;
    const char *parens = "root ::= p\np ::= \"(\" p* \")\"\n";
    expect_lang(parens, L("()", "(())", "(()())"), L("(", "(()"), L(")", "())", "()("));
    /* right recursion runs in constant stack depth: far beyond GRAM_MAX_DEPTH */
    gram_grammar *g = compile("root ::= \"a\" root | \"\"");
    size_t n = 50000;
    char *s = malloc(n);
    memset(s, 'a', n);
    assert_int_equal(classify(g, s, n), 1);
    gram_grammar_free(g);
    g = compile("root ::= item*\nitem ::= \"a\" | \"b\"");
    assert_int_equal(classify(g, s, n), 1);
    gram_grammar_free(g);
    free(s);
}

static void test_nesting_beyond_the_depth_cap_is_not_offered(void **state)
{
    (void)state;
    gram_grammar *g = compile("root ::= p\np ::= \"(\" p? \")\"\n");
    size_t n = 2 * GRAM_MAX_DEPTH;
    char *s = malloc(2 * n);
    /* shallow nesting fine */
    memset(s, '(', 100);
    memset(s + 100, ')', 100);
    assert_int_equal(classify(g, s, 200), 1);
    /* deeper than the cap: the bytes are refused, cleanly */
    memset(s, '(', n);
    memset(s + n, ')', n);
    assert_int_equal(classify(g, s, 2 * n), -1);
    free(s);
    gram_grammar_free(g);
}

static void test_token_literals_match_their_text_without_a_vocabulary(void **state)
{
    (void)state;
    expect_lang("root ::= <tool_call> \"x\" </tool_call>", L("<tool_call>x</tool_call>"), L("<tool_", "<tool_call>x"),
                L("<tool_callx", "x"));
}

static void test_compile_errors_name_the_problem(void **state)
{
    (void)state;
    expect_compile_error("root ::= a", WK_EINVAL, "'a' is not defined");
    expect_compile_error("x ::= \"a\"", WK_EINVAL, "no rule 'root'");
    expect_compile_error("root ::= \"a\"\nroot ::= \"b\"", WK_EINVAL, "defined twice");
    expect_compile_error("root ::= \"a", WK_EINVAL, "unterminated literal");
    expect_compile_error("root ::= [a-", WK_EINVAL, "unterminated character class");
    expect_compile_error("root ::= [z-a]", WK_EINVAL, "reversed");
    expect_compile_error("root ::= (\"a\"", WK_EINVAL, "unclosed");
    expect_compile_error("root ::= \"a\")", WK_EINVAL, "unmatched");
    expect_compile_error("root ::= \"a\"{3,2}", WK_EINVAL, "max below min");
    expect_compile_error("root ::= \"a\"{2000000}", WK_EINVAL, "above");
    expect_compile_error("root ::= \"\\q\"", WK_EINVAL, "unknown escape");
    expect_compile_error("root ::= \"\\uD800\"", WK_EINVAL, "not a Unicode scalar");
    expect_compile_error("root ::= < x>", WK_EINVAL, "token literal");
    expect_compile_error("root ::= root \"a\" | \"b\"", WK_EINVAL, "left-recursive");
    expect_compile_error("root ::= a\na ::= b \"x\" | \"z\"\nb ::= \"y\"? a", WK_EINVAL, "left-recursive");
    expect_compile_error("root ::= \"a\" | x\nx ::= \"b\" x", WK_EINVAL, "'x' can never complete");
    expect_compile_error("root ::= \"a\" x*\nx ::= \"b\" x", WK_EINVAL, "'x' can never complete");
    expect_compile_error("root ::= [^\\x00-\\U0010FFFF]", WK_EINVAL, "matches nothing");
    expect_compile_error("root ::= []", WK_EINVAL, "matches nothing");
    expect_compile_error("root ::= ?", WK_EINVAL, "unexpected character");
    expect_compile_error("root = \"a\"", WK_EINVAL, "expected '::='");
}

static void test_ambiguity_is_bounded_with_a_clean_error(void **state)
{
    (void)state;
    /* k bytes split between two counted runs in k + 1 ways */
    gram_grammar *g = compile("root ::= \"a\"{0,6000} \"a\"{0,6000}");
    gram_state *st;
    wk_error err = {0};
    assert_int_equal(gram_state_new(&st, g, NULL, &err), 0);
    size_t n = GRAM_MAX_PARSES + 10;
    char *s = malloc(n);
    memset(s, 'a', n);
    int rc = gram_accept_bytes(st, s, n, &err);
    assert_int_equal(rc, WK_ERANGE);
    assert_non_null(strstr(err.msg, "ambiguous"));
    free(s);
    gram_state_free(st);
    gram_grammar_free(g);
    /* duplicate parses of one stack collapse into one (no growth) */
    g = compile("root ::= (\"a\" | \"a\" | [a])*");
    assert_int_equal(gram_state_new(&st, g, NULL, &err), 0);
    for (int i = 0; i < 20000; i++) assert_int_equal(gram_accept_bytes(st, "a", 1, &err), 0);
    assert_true(gram_can_end(st));
    gram_state_free(st);
    gram_grammar_free(g);
}

static void test_clones_are_independent(void **state)
{
    (void)state;
    gram_grammar *g = compile("root ::= \"ab\" | \"ac\"");
    gram_state *a, *b;
    wk_error err = {0};
    assert_int_equal(gram_state_new(&a, g, NULL, &err), 0);
    assert_int_equal(gram_accept_bytes(a, "a", 1, &err), 0);
    assert_int_equal(gram_state_clone(&b, a, &err), 0);
    assert_int_equal(gram_accept_bytes(a, "b", 1, &err), 0);
    assert_int_equal(gram_accept_bytes(b, "b", 1, &err), 0);
    assert_int_equal(gram_accept_bytes(b, "c", 1, &err), WK_EINVAL); /* after "ab" nothing */
    gram_state_free(a);
    assert_true(gram_can_end(b));
    assert_true(gram_is_done(b));
    gram_state_free(b);
    gram_grammar_free(g);
}

/* ---- masks against the definition, on real vocabularies ---- */

/* A JSON-like grammar exercising strings, numbers, nesting, classes and
 * bounded repetition. */
static const char *k_json_gbnf =
    "root ::= value\n"
    "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws ( string ws \":\" ws value ws ( \",\" ws string ws \":\" ws value ws )* )? \"}\"\n"
    "array ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" [\"\\\\/bfnrt] )* \"\\\"\"\n"
    "number ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,8} ) ( \".\" [0-9]{1,6} )?\n"
    "ws ::= [ \\t\\n]{0,8}\n";

static void check_masks_on(const tok_vocab *v, const char *gbnf, int steps, int walks)
{
    gram_vocab *gv;
    wk_error err = {0};
    assert_int_equal(gram_vocab_new(&gv, v, &err), 0);
    assert_int_equal(gram_vocab_n_tokens(gv), tok_n_vocab(v));
    gram_grammar *g = compile(gbnf);
    int total = 0;
    for (int w = 0; w < walks; w++) total += gt_random_walk_checks_masks(g, gv, v, steps, 1000 + (uint64_t)w);
    assert_true(total > 0);
    gram_grammar_free(g);
    gram_vocab_free(gv);
}

static void test_masks_equal_the_reference_on_the_golden_model_vocab(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    tok_vocab *v = gt_vocab_from_gguf(path_join(golden, "models/tiny-qwen3-Q8_0.gguf"));
    check_masks_on(v, k_json_gbnf, 200, 6);
    check_masks_on(v, "root ::= [^a-z]{0,5} \"é\" | .+ \"\\n\"", 60, 4);
    tok_free(v);
}

static void test_masks_equal_the_reference_on_gpt2_bpe(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    tok_vocab *v = gt_golden_vocab_gz(golden, "gpt-2");
    check_masks_on(v, k_json_gbnf, 25, 3);
    check_masks_on(v, "root ::= \"The \" [a-z ]{1,20} \".\"", 12, 2);
    tok_free(v);
}

/* Special tokens only through token literals; end of generation exactly
 * where the grammar can end. */
static void test_special_tokens_and_end_of_generation(void **state)
{
    (void)state;
    tok_vocab *v = gt_synth_vocab(4096);
    int32_t call = tok_find(v, "<tool_call>", 11), end_call = tok_find(v, "</tool_call>", 12);
    int32_t im_end = tok_find(v, "<|im_end|>", 10), think = tok_find(v, "<think>", 7);
    assert_true(call >= 0 && end_call >= 0 && im_end >= 0 && think >= 0);
    assert_true(tok_is_eog(v, im_end));
    gram_vocab *gv;
    wk_error err = {0};
    assert_int_equal(gram_vocab_new(&gv, v, &err), 0);
    gram_grammar *g = compile("root ::= <tool_call> \"\\n\" [a-z]+ \"\\n\" </tool_call>");
    gram_state *s;
    assert_int_equal(gram_state_new(&s, g, gv, &err), 0);
    size_t words = gram_mask_words(gv);
    uint32_t *m = calloc(words, 4);
    assert_int_equal(gram_mask(s, m, &err), 0);
    /* only the special token: its spelling in text tokens ("<", "tool" ...) is not offered */
    int count = 0;
    for (int32_t t = 0; t < tok_n_vocab(v); t++) count += gt_bit(m, t);
    assert_int_equal(count, 1);
    assert_true(gt_bit(m, call));
    int32_t lt = tok_find(v, "<", 1);
    assert_true(lt >= 0);
    assert_int_equal(gram_accept(s, lt, &err), WK_EINVAL);
    assert_int_equal(gram_accept(s, think, &err), WK_EINVAL);
    assert_int_equal(gram_accept(s, call, &err), 0);
    assert_int_equal(gram_accept_bytes(s, "\nabc\n", 5, &err), 0);
    assert_false(gram_can_end(s));
    assert_int_equal(gram_mask(s, m, &err), 0);
    assert_false(gt_bit(m, im_end));
    assert_true(gt_bit(m, end_call));
    assert_int_equal(gram_accept(s, im_end, &err), WK_EINVAL);
    assert_int_equal(gram_accept(s, end_call, &err), 0);
    assert_true(gram_can_end(s));
    assert_int_equal(gram_mask(s, m, &err), 0);
    count = 0;
    for (int32_t t = 0; t < tok_n_vocab(v); t++) count += gt_bit(m, t);
    size_t n_eog = tok_eog_ids(v, &(const int32_t *){0});
    assert_int_equal(count, (int)n_eog);
    assert_true(gt_bit(m, im_end));
    assert_int_equal(gram_accept(s, im_end, &err), 0);
    assert_true(gram_is_done(s));
    assert_int_equal(gram_mask(s, m, &err), 0);
    for (size_t w = 0; w < words; w++) assert_int_equal(m[w], 0);
    assert_int_equal(gram_accept(s, im_end, &err), WK_EINVAL);
    free(m);
    gram_state_free(s);
    gram_grammar_free(g);
    /* masks against the reference with specials in play */
    check_masks_on(v, "root ::= ( <think> [a-z ]* </think> )? \"{\" [0-9]* \"}\" <tool_call>?", 40, 3);
    gram_vocab_free(gv);
    tok_free(v);
}

/* One grammar on the golden GPT-2 vocabulary, for the tests below. */
typedef struct gpt2_case {
    tok_vocab *v;
    gram_vocab *gv;
    gram_grammar *g;
    gram_state *s;
} gpt2_case;

static void gpt2_case_open(gpt2_case *k, const char *golden, const char *gbnf)
{
    wk_error err = {0};
    k->v = gt_golden_vocab_gz(golden, "gpt-2");
    assert_int_equal(gram_vocab_new(&k->gv, k->v, &err), 0);
    k->g = compile(gbnf);
    assert_int_equal(gram_state_new(&k->s, k->g, k->gv, &err), 0);
}

static void gpt2_case_close(gpt2_case *k)
{
    gram_state_free(k->s);
    gram_grammar_free(k->g);
    gram_vocab_free(k->gv);
    tok_free(k->v);
}

/* A token literal the vocabulary does not have is matched as text. */
static void test_token_literal_falls_back_to_text(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    gpt2_case k;
    gpt2_case_open(&k, golden, "root ::= <tool_call> \"x\"");
    wk_error err = {0};
    int32_t lt = tok_find(k.v, "<", 1);
    assert_true(lt >= 0);
    assert_int_equal(gram_accept(k.s, lt, &err), 0);
    assert_int_equal(gram_accept_bytes(k.s, "tool_call>x", 11, &err), 0);
    assert_true(gram_can_end(k.s));
    gpt2_case_close(&k);
}

/* A rejected token leaves the state where it was. */
static void test_rejected_token_leaves_state_unchanged(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    gpt2_case k;
    gpt2_case_open(&k, golden, "root ::= \"ab\" \"cd\"");
    wk_error err = {0};
    int32_t x = tok_find(k.v, "x", 1), a = tok_find(k.v, "a", 1), ab = tok_find(k.v, "ab", 2);
    assert_true(x >= 0 && a >= 0 && ab >= 0);
    assert_int_equal(gram_accept(k.s, x, &err), WK_EINVAL);
    assert_non_null(strstr(err.msg, "not allowed"));
    assert_int_equal(gram_accept(k.s, ab, &err), 0);
    assert_int_equal(gram_accept(k.s, a, &err), WK_EINVAL);
    assert_int_equal(gram_accept_bytes(k.s, "cd", 2, &err), 0);
    assert_true(gram_can_end(k.s));
    assert_int_equal(gram_accept(k.s, -1, &err), WK_EINVAL);
    assert_int_equal(gram_accept(k.s, tok_n_vocab(k.v), &err), WK_EINVAL);
    gpt2_case_close(&k);
}

/* A state cache pushed past its budget is compacted around the live
 * states, which keep working. */
static void test_cache_compaction_keeps_live_states(void **state)
{
    (void)state;
    /* every distinct count of a long bounded run is a new DFA state */
    gram_grammar *g = compile("root ::= [a-z]{0,900000} \"!\"");
    gram_state *s, *c;
    wk_error err = {0};
    assert_int_equal(gram_state_new(&s, g, NULL, &err), 0);
    char buf[4096];
    memset(buf, 'q', sizeof buf);
    size_t fed = 0;
    assert_int_equal(gram_accept_bytes(s, buf, 10, &err), 0);
    fed += 10;
    assert_int_equal(gram_state_clone(&c, s, &err), 0);
    size_t peak = 0;
    while (fed < 600000) {
        assert_int_equal(gram_accept_bytes(s, buf, sizeof buf, &err), 0);
        fed += sizeof buf;
        size_t b = gram_state_cache_bytes(s);
        if (b > peak) peak = b;
    }
    size_t now = gram_state_cache_bytes(s);
    fprintf(stderr, "  cache peak %zu MiB, now %zu MiB\n", peak >> 20, now >> 20);
    assert_true(peak > GRAM_CACHE_SOFT_BYTES); /* the budget was reached... */
    assert_true(peak < GRAM_CACHE_HARD_BYTES);
    assert_true(now < peak);                   /* ...and the cache shrank: only compaction does that */
    /* the clone (left at 10 bytes) and s both survive compactions */
    assert_int_equal(gram_accept_bytes(c, "!", 1, &err), 0);
    assert_true(gram_can_end(c));
    assert_int_equal(gram_accept_bytes(s, "!", 1, &err), 0);
    assert_true(gram_can_end(s));
    gram_state_free(s);
    gram_state_free(c);
    gram_grammar_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_literals_sequences_and_alternation),
        cmocka_unit_test(test_repetition_operators),
        cmocka_unit_test(test_character_classes),
        cmocka_unit_test(test_rule_references_and_recursion),
        cmocka_unit_test(test_nesting_beyond_the_depth_cap_is_not_offered),
        cmocka_unit_test(test_token_literals_match_their_text_without_a_vocabulary),
        cmocka_unit_test(test_compile_errors_name_the_problem),
        cmocka_unit_test(test_ambiguity_is_bounded_with_a_clean_error),
        cmocka_unit_test(test_clones_are_independent),
        cmocka_unit_test(test_masks_equal_the_reference_on_the_golden_model_vocab),
        cmocka_unit_test(test_masks_equal_the_reference_on_gpt2_bpe),
        cmocka_unit_test(test_special_tokens_and_end_of_generation),
        cmocka_unit_test(test_token_literal_falls_back_to_text),
        cmocka_unit_test(test_rejected_token_leaves_state_unchanged),
        cmocka_unit_test(test_cache_compaction_keeps_live_states),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
