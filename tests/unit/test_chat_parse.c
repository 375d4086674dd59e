#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_parse.h"
#include "testutil.h"

typedef struct parsed {
    char content[4096];
    char reasoning[4096];
    int n_calls;
    char names[4][64];
    char args[4][512];
    char ids[4][32];
} parsed;

static void collect(parsed *r, const chat_delta *d)
{
    if (d->content.len) strncat(r->content, d->content.data, sizeof r->content - strlen(r->content) - 1);
    if (d->reasoning.len) strncat(r->reasoning, d->reasoning.data, sizeof r->reasoning - strlen(r->reasoning) - 1);
    for (size_t i = 0; i < d->n_calls && r->n_calls < 4; i++, r->n_calls++) {
        strncpy(r->names[r->n_calls], d->calls[i].name, 63);
        strncpy(r->args[r->n_calls], d->calls[i].arguments, 511);
        strcpy(r->ids[r->n_calls], d->calls[i].id);
    }
}

/* Feeds text in pieces of `step` bytes (0 = all at once) and checks that no
 * delta ever shows a partial marker. */
static void run(const chat_parse_options *opt, const char *text, size_t step, parsed *r)
{
    memset(r, 0, sizeof *r);
    chat_parser *p;
    wk_error err = {0};
    assert_int_equal(chat_parser_new(&p, opt, &err), 0);
    chat_delta d = {0};
    size_t n = strlen(text);
    if (step == 0) step = n ? n : 1;
    for (size_t i = 0; i < n; i += step) {
        size_t len = n - i < step ? n - i : step;
        assert_int_equal(chat_parser_feed(p, text + i, len, &d, &err), 0);
        collect(r, &d);
    }
    assert_int_equal(chat_parser_finish(p, &d, &err), 0);
    collect(r, &d);
    chat_delta_free(&d);
    chat_parser_free(p);
}

/* Same result for every way of splitting the text into two pieces and for
 * byte-by-byte feeding. */
static void run_all_splits(const chat_parse_options *opt, const char *text, parsed *whole)
{
    run(opt, text, 0, whole);
    parsed bytes;
    run(opt, text, 1, &bytes);
    assert_string_equal(bytes.content, whole->content);
    assert_string_equal(bytes.reasoning, whole->reasoning);
    assert_int_equal(bytes.n_calls, whole->n_calls);
    for (int i = 0; i < whole->n_calls; i++) {
        assert_string_equal(bytes.names[i], whole->names[i]);
        assert_string_equal(bytes.args[i], whole->args[i]);
        assert_string_equal(bytes.ids[i], whole->ids[i]);
    }
    size_t n = strlen(text);
    for (size_t cut = 1; cut < n; cut++) {
        parsed two;
        memset(&two, 0, sizeof two);
        chat_parser *p;
        wk_error err = {0};
        chat_delta d = {0};
        assert_int_equal(chat_parser_new(&p, opt, &err), 0);
        assert_int_equal(chat_parser_feed(p, text, cut, &d, &err), 0);
        collect(&two, &d);
        assert_int_equal(chat_parser_feed(p, text + cut, n - cut, &d, &err), 0);
        collect(&two, &d);
        assert_int_equal(chat_parser_finish(p, &d, &err), 0);
        collect(&two, &d);
        chat_delta_free(&d);
        chat_parser_free(p);
        assert_string_equal(two.content, whole->content);
        assert_string_equal(two.reasoning, whole->reasoning);
        assert_int_equal(two.n_calls, whole->n_calls);
    }
}

static chat_parse_options hermes_opts(bool reasoning_open)
{
    chat_parse_options o = {0};
    o.parse_reasoning = true;
    o.reasoning_open = reasoning_open;
    o.tool_format = CHAT_TOOLS_HERMES;
    o.id_seed = 42;
    return o;
}

static void test_think_block_is_split_from_content(void **state)
{
    (void)state;
    chat_parse_options o = hermes_opts(false);
    parsed r;
    run_all_splits(&o, "<think>\nLet me see.\n</think>\n\nThe answer is 4.", &r);
    assert_string_equal(r.reasoning, "Let me see.");
    assert_string_equal(r.content, "The answer is 4.");
    assert_int_equal(r.n_calls, 0);
}

static void test_opened_think_prompt_starts_in_reasoning(void **state)
{
    (void)state;
    chat_parse_options o = hermes_opts(true);
    parsed r;
    run_all_splits(&o, "R1 and <b>more</b>\n</think>\n\nA1", &r);
    assert_string_equal(r.reasoning, "R1 and <b>more</b>");
    assert_string_equal(r.content, "A1");
    /* unclosed reasoning stays reasoning */
    run_all_splits(&o, "still thinking <", &r);
    assert_string_equal(r.reasoning, "still thinking <");
    assert_string_equal(r.content, "");
}

static void test_without_reasoning_parsing_think_is_content(void **state)
{
    (void)state;
    chat_parse_options o = {0};
    parsed r;
    run_all_splits(&o, "<think>x</think>y", &r);
    assert_string_equal(r.content, "<think>x</think>y");
    assert_string_equal(r.reasoning, "");
    /* and a tag that only looks like <think> at the start is content */
    o.parse_reasoning = true;
    run_all_splits(&o, "<thinking>x", &r);
    assert_string_equal(r.content, "<thinking>x");
    /* <think> later in the text is not reasoning */
    run_all_splits(&o, "a <think>b</think>", &r);
    assert_string_equal(r.content, "a <think>b</think>");
}

static void test_hermes_tool_calls_are_extracted(void **state)
{
    (void)state;
    chat_parse_options o = hermes_opts(false);
    parsed r;
    const char *text = "<think>\nneed a file\n</think>\n\nLet me read it.\n<tool_call>\n"
                       "{\"name\": \"read_file\", \"arguments\": {\"path\": \"a <b>.txt\", \"n\": [1, 2]}}\n"
                       "</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
    run_all_splits(&o, text, &r);
    assert_string_equal(r.reasoning, "need a file");
    assert_string_equal(r.content, "Let me read it.");
    assert_int_equal(r.n_calls, 2);
    assert_string_equal(r.names[0], "read_file");
    assert_string_equal(r.args[0], "{\"path\": \"a <b>.txt\", \"n\": [1, 2]}");
    assert_string_equal(r.names[1], "now");
    assert_string_equal(r.args[1], "{}");
    assert_memory_equal(r.ids[0], "call_", 5);
    assert_int_equal(strlen(r.ids[0]), 29);
    assert_string_not_equal(r.ids[0], r.ids[1]);
    /* same seed → same ids; other seed → other ids */
    parsed again;
    run(&o, text, 3, &again);
    assert_string_equal(again.ids[0], r.ids[0]);
    o.id_seed = 7;
    run(&o, text, 0, &again);
    assert_string_not_equal(again.ids[0], r.ids[0]);
}

static void test_text_that_is_not_a_tool_call_stays_content(void **state)
{
    (void)state;
    chat_parse_options o = hermes_opts(false);
    parsed r;
    run_all_splits(&o, "A <tool_call>\nnot json at all\n</tool_call> B", &r);
    assert_string_equal(r.content, "A <tool_call>\nnot json at all\n</tool_call> B");
    assert_int_equal(r.n_calls, 0);
    run_all_splits(&o, "x <tool_call>{\"name\": \"f\", \"arguments\": 5}</tool_call>", &r);
    assert_int_equal(r.n_calls, 0);
    assert_string_equal(r.content, "x <tool_call>{\"name\": \"f\", \"arguments\": 5}</tool_call>");
    /* never closed: returned as content at the end */
    run_all_splits(&o, "Calling <tool_call>\n{\"name\": \"f\", \"argu", &r);
    assert_string_equal(r.content, "Calling <tool_call>\n{\"name\": \"f\", \"argu");
    assert_int_equal(r.n_calls, 0);
    /* a lone '<' or a partial marker at the end is content too */
    run_all_splits(&o, "a < b <tool_", &r);
    assert_string_equal(r.content, "a < b <tool_");
    /* arguments given as a JSON string holding an object */
    run_all_splits(&o, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>", &r);
    assert_int_equal(r.n_calls, 1);
    assert_string_equal(r.args[0], "{\"a\": 1}");
}

static void test_partial_markers_are_held_back_while_streaming(void **state)
{
    (void)state;
    chat_parse_options o = hermes_opts(false);
    chat_parser *p;
    wk_error err = {0};
    chat_delta d = {0};
    assert_int_equal(chat_parser_new(&p, &o, &err), 0);
    assert_int_equal(chat_parser_feed(p, "<thi", 4, &d, &err), 0);
    assert_int_equal(d.content.len + d.reasoning.len, 0);
    assert_int_equal(chat_parser_feed(p, "nk>abc</thi", 11, &d, &err), 0);
    assert_string_equal(d.reasoning.data, "abc");
    assert_int_equal(d.content.len, 0);
    assert_int_equal(chat_parser_feed(p, "nk>Hello <tool_c", 16, &d, &err), 0);
    assert_string_equal(d.content.data, "Hello");
    assert_int_equal(chat_parser_feed(p, "all>{\"name\":\"x\",\"arguments\":{}}</tool_call>", 43, &d, &err), 0);
    assert_int_equal(d.n_calls, 1);
    assert_int_equal(d.content.len, 0);
    assert_string_equal(d.calls[0].name, "x");
    assert_string_equal(d.calls[0].arguments, "{}");
    /* a UTF-8 character split across pieces is emitted whole */
    assert_int_equal(chat_parser_feed(p, "\xC3", 1, &d, &err), 0);
    assert_int_equal(d.content.len, 0);
    assert_int_equal(chat_parser_feed(p, "\xA9!", 2, &d, &err), 0);
    assert_string_equal(d.content.data, "\xC3\xA9!");
    assert_int_equal(chat_parser_finish(p, &d, &err), 0);
    chat_delta_free(&d);
    chat_parser_free(p);
}

static void test_xml_tool_calls_use_the_schema_for_types(void **state)
{
    (void)state;
    wk_error err = {0};
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"set\",\"parameters\":{\"type\":\"object\","
                               "\"properties\":{\"id\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"}}}}}]",
                               0, NULL);
    assert_non_null(tools);
    chat_parse_options o = {0};
    o.parse_reasoning = true;
    o.reasoning_open = true;
    o.tool_format = CHAT_TOOLS_QWEN_XML;
    o.tools = tools;
    parsed r;
    const char *text = "plan\n</think>\n\nSetting it.\n\n<tool_call>\n<function=set>\n<parameter=id>\n123\n</parameter>\n"
                       "<parameter=n>\n123\n</parameter>\n<parameter=extra>\n{\"k\": [true]}\n</parameter>\n"
                       "<parameter=text>\nline 1\nline 2\n</parameter>\n</function>\n</tool_call>";
    run_all_splits(&o, text, &r);
    assert_string_equal(r.reasoning, "plan");
    assert_string_equal(r.content, "Setting it.");
    assert_int_equal(r.n_calls, 1);
    assert_string_equal(r.names[0], "set");
    assert_string_equal(r.args[0], "{\"id\": \"123\", \"n\": 123, \"extra\": {\"k\": [true]}, \"text\": \"line 1\\nline 2\"}");
    /* <tool_call> ends reasoning even without </think> */
    run_all_splits(&o, "hmm <tool_call>\n<function=set>\n</function>\n</tool_call>", &r);
    assert_string_equal(r.reasoning, "hmm");
    assert_int_equal(r.n_calls, 1);
    assert_string_equal(r.args[0], "{}");
    /* a bare <function=...> block (no <tool_call>) is accepted */
    o.reasoning_open = false;
    run_all_splits(&o, "<function=set>\n<parameter=n>\n5\n</parameter>\n</function>", &r);
    assert_int_equal(r.n_calls, 1);
    assert_string_equal(r.args[0], "{\"n\": 5}");
    /* malformed XML is content */
    run_all_splits(&o, "<tool_call>\n<function=set>\n<parameter=n>5</function>\n</tool_call>", &r);
    assert_int_equal(r.n_calls, 0);
    assert_string_equal(r.content, "<tool_call>\n<function=set>\n<parameter=n>5</function>\n</tool_call>");
    (void)err;
    json_decref(tools);
}

static void test_parse_all_matches_streaming(void **state)
{
    (void)state;
    chat_parse_options o = hermes_opts(false);
    const char *text = "<think>r</think>c<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1}}</tool_call>";
    chat_delta d = {0};
    wk_error err = {0};
    assert_int_equal(chat_parse_all(&o, text, strlen(text), &d, &err), 0);
    assert_string_equal(d.reasoning.data, "r");
    assert_string_equal(d.content.data, "c");
    assert_int_equal(d.n_calls, 1);
    assert_string_equal(d.calls[0].arguments, "{\"x\": 1}");
    chat_delta_free(&d);
}

/* Random texts built from marker fragments: any chunking gives the same
 * result as feeding the whole text, and with nothing to parse the content
 * is the text itself. */
static void test_random_chunkings_agree_with_whole_text(void **state)
{
    (void)state;
    static const char *frags[] = {"<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_c", "</th", "<", ">",
                                  " ", "\n", "abc", "\xC3\xA9", "{\"name\": \"f\", \"arguments\": {\"a\": 1}}",
                                  "<function=f>", "</function>", "<parameter=a>\n1\n</parameter>", "\xE2\x82"};
    uint64_t rng = 2024;
    chat_parse_options variants[3];
    memset(variants, 0, sizeof variants);
    variants[0] = hermes_opts(false);
    variants[1].parse_reasoning = true;
    variants[1].reasoning_open = true;
    variants[1].tool_format = CHAT_TOOLS_QWEN_XML;
    /* variants[2]: nothing to parse */
    char text[1024];
    for (int rep = 0; rep < 300; rep++) {
        text[0] = 0;
        int n_frags = 1 + (int)(test_rand_u32(&rng) % 14);
        for (int f = 0; f < n_frags; f++) strcat(text, frags[test_rand_u32(&rng) % (sizeof frags / sizeof frags[0])]);
        for (int v = 0; v < 3; v++) {
            parsed whole, chunked;
            run(&variants[v], text, 0, &whole);
            if (v == 2) {
                assert_string_equal(whole.content, text);
                assert_int_equal(whole.n_calls, 0);
            }
            for (size_t step = 1; step <= 7; step += 3) {
                run(&variants[v], text, step, &chunked);
                assert_string_equal(chunked.content, whole.content);
                assert_string_equal(chunked.reasoning, whole.reasoning);
                assert_int_equal(chunked.n_calls, whole.n_calls);
                for (int c = 0; c < whole.n_calls; c++) assert_string_equal(chunked.args[c], whole.args[c]);
            }
        }
    }
}

static void test_tool_calls_convert_to_openai_json(void **state)
{
    (void)state;
    chat_parse_options o = hermes_opts(false);
    chat_delta d = {0};
    wk_error err = {0};
    const char *text = "<tool_call>{\"name\": \"a\", \"arguments\": {\"x\": \"\xC3\xA9\"}}</tool_call>"
                       "<tool_call>{\"name\": \"b\"}</tool_call>";
    assert_int_equal(chat_parse_all(&o, text, strlen(text), &d, &err), 0);
    assert_int_equal(d.n_calls, 2);
    json_t *j = chat_tool_calls_json(d.calls, d.n_calls, 3, true);
    assert_non_null(j);
    char *dump = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
    char want[512];
    snprintf(want, sizeof want,
             "[{\"id\":\"%s\",\"type\":\"function\",\"function\":{\"name\":\"a\",\"arguments\":\"{\\\"x\\\": \\\"\\u00E9\\\"}\"},\"index\":3},"
             "{\"id\":\"%s\",\"type\":\"function\",\"function\":{\"name\":\"b\",\"arguments\":\"{}\"},\"index\":4}]",
             d.calls[0].id, d.calls[1].id);
    assert_string_equal(dump, want);
    free(dump);
    json_decref(j);
    j = chat_tool_calls_json(d.calls, 1, 0, false);
    assert_null(json_object_get(json_array_get(j, 0), "index"));
    json_decref(j);
    chat_delta_free(&d);
}

/* ------------------------------------------------------------ stop strings */

static void stop_run(const char *const *stops, size_t n_stops, const char *text, size_t step, char *out,
                     int *stopped, int *which)
{
    chat_stop *s;
    wk_error err = {0};
    assert_int_equal(chat_stop_new(&s, stops, n_stops, &err), 0);
    out[0] = 0;
    *stopped = 0;
    *which = -1;
    size_t n = strlen(text);
    for (size_t i = 0; i < n && !*stopped; i += step) {
        const char *e;
        size_t el;
        size_t len = n - i < step ? n - i : step;
        int rc = chat_stop_feed(s, text + i, len, &e, &el, which);
        strncat(out, e, el);
        if (rc == 1) *stopped = 1;
    }
    if (!*stopped) {
        const char *e;
        size_t el;
        chat_stop_flush(s, &e, &el);
        strncat(out, e, el);
    }
    chat_stop_free(s);
}

static void test_stop_strings_are_found_across_pieces(void **state)
{
    (void)state;
    const char *stops[] = {"", "</answer>", "STOP", "\n\n"};
    const char *text = "Hello wor<ld> ST and STOP here";
    char out[256];
    int stopped, which;
    for (size_t step = 1; step <= strlen(text); step++) {
        stop_run(stops, 4, text, step, out, &stopped, &which);
        assert_true(stopped);
        assert_int_equal(which, 2);
        assert_string_equal(out, "Hello wor<ld> ST and ");
    }
    /* the earliest stop wins */
    stop_run(stops, 4, "a\n\nb</answer>", 1, out, &stopped, &which);
    assert_true(stopped);
    assert_int_equal(which, 3);
    assert_string_equal(out, "a");
    /* no stop: everything comes out, held-back text at flush */
    for (size_t step = 1; step <= 6; step++) {
        stop_run(stops, 4, "abc </ans", step, out, &stopped, &which);
        assert_false(stopped);
        assert_string_equal(out, "abc </ans");
    }
}

static void test_stop_holds_back_only_possible_prefixes(void **state)
{
    (void)state;
    const char *stops[] = {"STOP"};
    chat_stop *s;
    wk_error err = {0};
    assert_int_equal(chat_stop_new(&s, stops, 1, &err), 0);
    const char *e;
    size_t el;
    int which = -1;
    assert_int_equal(chat_stop_feed(s, "abcS", 4, &e, &el, &which), 0);
    assert_int_equal(el, 3);
    assert_memory_equal(e, "abc", 3);
    assert_int_equal(chat_stop_feed(s, "T", 1, &e, &el, &which), 0);
    assert_int_equal(el, 0);
    assert_int_equal(chat_stop_feed(s, "x", 1, &e, &el, &which), 0);
    assert_int_equal(el, 3);
    assert_memory_equal(e, "STx", 3);
    assert_int_equal(chat_stop_feed(s, "SSTO", 4, &e, &el, &which), 0);
    assert_int_equal(el, 1);
    assert_int_equal(chat_stop_feed(s, "P tail", 6, &e, &el, &which), 1);
    assert_int_equal(el, 0);
    assert_int_equal(which, 0);
    /* after a stop, nothing more comes out */
    assert_int_equal(chat_stop_feed(s, "more", 4, &e, &el, &which), 1);
    assert_int_equal(el, 0);
    chat_stop_free(s);
    assert_int_equal(chat_stop_new(&s, NULL, 1, &err), WK_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_think_block_is_split_from_content),
        cmocka_unit_test(test_opened_think_prompt_starts_in_reasoning),
        cmocka_unit_test(test_without_reasoning_parsing_think_is_content),
        cmocka_unit_test(test_hermes_tool_calls_are_extracted),
        cmocka_unit_test(test_text_that_is_not_a_tool_call_stays_content),
        cmocka_unit_test(test_partial_markers_are_held_back_while_streaming),
        cmocka_unit_test(test_xml_tool_calls_use_the_schema_for_types),
        cmocka_unit_test(test_parse_all_matches_streaming),
        cmocka_unit_test(test_random_chunkings_agree_with_whole_text),
        cmocka_unit_test(test_tool_calls_convert_to_openai_json),
        cmocka_unit_test(test_stop_strings_are_found_across_pieces),
        cmocka_unit_test(test_stop_holds_back_only_possible_prefixes),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
