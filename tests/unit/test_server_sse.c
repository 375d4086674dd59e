/* SSE framing, stream chunk shapes, response bodies and /metrics text
 * (server/sse, server/openai_response, server/metrics). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "pipeline/service.h"
#include "server/metrics.h"
#include "server/openai_response.h"
#include "server/sse.h"
#include "testutil.h"

static void test_data_event_is_one_line_and_blank_line_terminated(void **state)
{
    (void)state;
    srv_buf b = {0};
    json_t *o = json_pack("{s:s}", "content", "line1\nline2\r\n\"quoted\"");
    assert_int_equal(srv_sse_data(&b, o), 0);
    json_decref(o);
    assert_true(b.len > 8);
    assert_memory_equal(b.data, "data: ", 6);
    assert_memory_equal(b.data + b.len - 2, "\n\n", 2);
    /* Exactly one newline pair, at the end: the JSON itself has no raw newline. */
    assert_null(memchr(b.data, '\n', b.len - 2));
    json_t *back = json_loadb(b.data + 6, b.len - 8, 0, NULL);
    assert_non_null(back);
    assert_string_equal(json_string_value(json_object_get(back, "content")), "line1\nline2\r\n\"quoted\"");
    json_decref(back);
    srv_buf_free(&b);
}

static void test_done_and_keepalive_frames(void **state)
{
    (void)state;
    srv_buf b = {0};
    assert_int_equal(srv_sse_comment(&b, "keep-alive"), 0);
    assert_int_equal(srv_sse_done(&b), 0);
    assert_string_equal(b.data, ": keep-alive\n\ndata: [DONE]\n\n");
    assert_int_equal(srv_sse_comment(&b, "bad\ncomment"), -1);
    srv_buf_free(&b);
}

static void test_buffer_take_drains_in_pieces(void **state)
{
    (void)state;
    srv_buf b = {0};
    srv_buf_appendf(&b, "%s-%d", "abcdef", 42);
    char out[4];
    assert_int_equal(srv_buf_take(&b, out, 4), 4);
    assert_memory_equal(out, "abcd", 4);
    assert_int_equal(srv_buf_pending(&b), 5);
    assert_int_equal(srv_buf_take(&b, out, 4), 4);
    assert_int_equal(srv_buf_take(&b, out, 4), 1);
    assert_int_equal(out[0], '2');
    assert_int_equal(srv_buf_pending(&b), 0);
    assert_int_equal(b.len, 0); /* reset once drained */
    srv_buf_free(&b);
}

static void test_invalid_utf8_becomes_replacement_characters(void **state)
{
    (void)state;
    json_t *s = srv_json_text("ok\xff\xc3", (size_t)-1);
    assert_non_null(s);
    assert_string_equal(json_string_value(s), "ok\xEF\xBF\xBD\xEF\xBF\xBD");
    json_decref(s);
    assert_true(srv_utf8_valid("h\xc3\xa9llo \xf0\x9f\x98\x80", 11));
    assert_false(srv_utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
    assert_false(srv_utf8_valid("\xe2\x82", 2));         /* truncated */
}

static eng_event delta(int kind, const char *text)
{
    eng_event ev = {0};
    ev.type = ENG_EV_DELTA;
    ev.delta_kind = kind;
    ev.text = strdup(text);
    return ev;
}

static void test_chat_chunks_follow_the_openai_delta_sequence(void **state)
{
    (void)state;
    srv_resp_meta m;
    srv_resp_meta_init(&m, "chatcmpl-", true, "tiny");
    assert_memory_equal(m.id, "chatcmpl-", 9);
    json_t *c = srv_chunk_role(&m);
    json_t *ch0 = json_array_get(json_object_get(c, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c, "object")), "chat.completion.chunk");
    assert_string_equal(json_string_value(json_object_get(json_object_get(ch0, "delta"), "role")), "assistant");
    assert_true(json_is_null(json_object_get(ch0, "finish_reason")));
    json_decref(c);

    eng_event ev = delta(ENG_DELTA_REASONING, "hmm");
    c = srv_chunk_delta(&m, &ev);
    json_t *d = json_object_get(json_array_get(json_object_get(c, "choices"), 0), "delta");
    assert_string_equal(json_string_value(json_object_get(d, "reasoning_content")), "hmm");
    assert_null(json_object_get(d, "content"));
    json_decref(c);
    eng_event_clear(&ev);

    ev = delta(ENG_DELTA_TOOL_CALL, "");
    ev.tool_index = 0;
    strcpy(ev.tool_id, "call_abc");
    strcpy(ev.tool_name, "get_weather");
    c = srv_chunk_delta(&m, &ev);
    d = json_object_get(json_array_get(json_object_get(c, "choices"), 0), "delta");
    json_t *tc = json_array_get(json_object_get(d, "tool_calls"), 0);
    assert_int_equal(json_integer_value(json_object_get(tc, "index")), 0);
    assert_string_equal(json_string_value(json_object_get(tc, "id")), "call_abc");
    assert_string_equal(json_string_value(json_object_get(json_object_get(tc, "function"), "name")), "get_weather");
    json_decref(c);
    eng_event_clear(&ev);

    ev = delta(ENG_DELTA_CONTENT, "");
    assert_null(srv_chunk_delta(&m, &ev)); /* empty pieces send nothing */
    eng_event_clear(&ev);

    eng_counters cnt = {.prompt_tokens = 10, .cached_tokens = 4, .recomputed_tokens = 6, .completion_tokens = 3};
    c = srv_chunk_finish(&m, "length", &cnt);
    ch0 = json_array_get(json_object_get(c, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(ch0, "finish_reason")), "length");
    assert_int_equal(json_object_size(json_object_get(ch0, "delta")), 0);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(c, "timings"), "cache_n")), 4);
    json_decref(c);

    c = srv_chunk_usage(&m, &cnt);
    assert_int_equal(json_array_size(json_object_get(c, "choices")), 0);
    json_t *u = json_object_get(c, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")), 13);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens")), 4);
    json_decref(c);
}

static void test_accumulated_answer_has_content_reasoning_and_tool_calls(void **state)
{
    (void)state;
    srv_resp_meta m;
    srv_resp_meta_init(&m, "chatcmpl-", true, "tiny");
    srv_accum a = {0};
    eng_event evs[5];
    evs[0] = delta(ENG_DELTA_REASONING, "think ");
    evs[1] = delta(ENG_DELTA_REASONING, "more");
    evs[2] = delta(ENG_DELTA_TOOL_CALL, "");
    strcpy(evs[2].tool_id, "call_1");
    strcpy(evs[2].tool_name, "f");
    evs[3] = delta(ENG_DELTA_TOOL_ARGS, "{\"a\":");
    evs[4] = delta(ENG_DELTA_TOOL_ARGS, "1}");
    for (int i = 0; i < 5; i++) {
        srv_accum_add(&a, &evs[i]);
        eng_event_clear(&evs[i]);
    }
    eng_counters cnt = {.prompt_tokens = 5, .completion_tokens = 7};
    json_t *r = srv_completion_json(&m, &a, "tool_calls", &cnt);
    json_t *msg = json_object_get(json_array_get(json_object_get(r, "choices"), 0), "message");
    assert_true(json_is_null(json_object_get(msg, "content")));
    assert_string_equal(json_string_value(json_object_get(msg, "reasoning_content")), "think more");
    json_t *call = json_array_get(json_object_get(msg, "tool_calls"), 0);
    assert_string_equal(json_string_value(json_object_get(json_object_get(call, "function"), "arguments")), "{\"a\":1}");
    assert_string_equal(json_string_value(json_object_get(r, "object")), "chat.completion");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(r, "usage"), "completion_tokens")), 7);
    json_decref(r);
    srv_accum_free(&a);
}

static void test_text_completion_shape(void **state)
{
    (void)state;
    srv_resp_meta m;
    srv_resp_meta_init(&m, "cmpl-", false, "tiny");
    assert_memory_equal(m.id, "cmpl-", 5);
    srv_accum a = {0};
    eng_event ev = delta(ENG_DELTA_CONTENT, "abc");
    srv_accum_add(&a, &ev);
    json_t *c = srv_chunk_delta(&m, &ev);
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(c, "choices"), 0), "text")), "abc");
    json_decref(c);
    eng_event_clear(&ev);
    eng_counters cnt = {0};
    json_t *r = srv_completion_json(&m, &a, "stop", &cnt);
    assert_string_equal(json_string_value(json_object_get(r, "object")), "text_completion");
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(r, "choices"), 0), "text")), "abc");
    json_decref(r);
    srv_accum_free(&a);
}

/* Every non-comment line is `name{labels} value` with a numeric value. */
static void check_prometheus_text(const char *text)
{
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        assert_non_null(nl);
        if (*p != '#') {
            const char *sp = memchr(p, ' ', (size_t)(nl - p));
            assert_non_null(sp);
            char *end;
            strtod(sp + 1, &end);
            assert_ptr_equal(end, nl);
        }
        p = nl + 1;
    }
}

static void test_metrics_render_counts_and_histograms(void **state)
{
    (void)state;
    srv_metrics m;
    srv_metrics_init(&m);
    srv_metrics_count_request(&m, "chat", 200);
    srv_metrics_count_request(&m, "chat", 200);
    srv_metrics_count_request(&m, "chat", 400);
    eng_counters c = {.prompt_tokens = 100, .cached_tokens = 60, .recomputed_tokens = 40, .completion_tokens = 9,
                      .prefill_ms = 30, .decode_ms = 2000, .ttft_ms = 35};
    srv_metrics_observe(&m, &c);
    srv_gauges g = {.queue_depth = 3, .busy = 1, .cache_hits = 1, .cache_misses = 2};
    srv_buf b = {0};
    srv_metrics_render(&m, &g, &b);
    assert_non_null(strstr(b.data, "wick_http_requests_total{route=\"chat\",status=\"200\"} 2\n"));
    assert_non_null(strstr(b.data, "wick_http_requests_total{route=\"chat\",status=\"400\"} 1\n"));
    assert_non_null(strstr(b.data, "wick_cached_tokens_total 60\n"));
    assert_non_null(strstr(b.data, "wick_recomputed_tokens_total 40\n"));
    assert_non_null(strstr(b.data, "wick_prefill_seconds_bucket{le=\"0.05\"} 1\n"));
    assert_non_null(strstr(b.data, "wick_prefill_seconds_bucket{le=\"0.025\"} 0\n"));
    assert_non_null(strstr(b.data, "wick_decode_seconds_bucket{le=\"+Inf\"} 1\n"));
    assert_non_null(strstr(b.data, "wick_queue_depth 3\n"));
    check_prometheus_text(b.data);
    srv_buf_free(&b);
    srv_metrics_destroy(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_data_event_is_one_line_and_blank_line_terminated),
        cmocka_unit_test(test_done_and_keepalive_frames),
        cmocka_unit_test(test_buffer_take_drains_in_pieces),
        cmocka_unit_test(test_invalid_utf8_becomes_replacement_characters),
        cmocka_unit_test(test_chat_chunks_follow_the_openai_delta_sequence),
        cmocka_unit_test(test_accumulated_answer_has_content_reasoning_and_tool_calls),
        cmocka_unit_test(test_text_completion_shape),
        cmocka_unit_test(test_metrics_render_counts_and_histograms),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
