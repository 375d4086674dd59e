/* From generated text to API output, without a model: the pipeline's output
 * glue (pipeline/output.c) feeds the chat parser and turns its deltas into
 * events, and the server's accumulator turns those into the response
 * message (reasoning_content, content, tool_calls). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "pipeline/pipeline_internal.h"
#include "server/openai_response.h"
#include "testutil.h"

typedef struct collected {
    eng_event ev[256];
    int n;
} collected;

static void collect(void *user, eng_event *ev)
{
    collected *c = user;
    assert_true(c->n < 256);
    c->ev[c->n++] = *ev;
}

/* Feeds text in pieces of `step` bytes, finishes, and accumulates all events. */
static json_t *run(chat_tool_format fmt, bool chat, const char *text, size_t step, int *n_calls_events)
{
    static collected got;
    got.n = 0;
    pl_sink sink = {.user = &got, .event = collect};
    pl_output o = {.sink = &sink};
    if (chat) {
        chat_parse_options opt = {0};
        opt.parse_reasoning = true;
        opt.tool_format = fmt;
        opt.id_seed = 7;
        wk_error err = {0};
        assert_int_equal(chat_parser_new(&o.parser, &opt, &err), 0);
    }
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i += step) pl_output_text(&o, text + i, i + step <= n ? step : n - i);
    pl_output_finish(&o);
    srv_resp_meta m;
    srv_resp_meta_init(&m, chat ? "chatcmpl-" : "cmpl-", chat, "tiny");
    srv_accum acc = {0};
    *n_calls_events = 0;
    for (int i = 0; i < got.n; i++) {
        eng_event ev = got.ev[i];
        assert_int_equal(ev.type, ENG_EV_DELTA);
        if (ev.delta_kind == ENG_DELTA_TOOL_CALL) {
            (*n_calls_events)++;
            assert_int_equal(strncmp(ev.tool_id, "call_", 5), 0);
        }
        /* Every delta also makes a valid stream chunk. */
        json_t *chunk = srv_chunk_delta(&m, &ev);
        json_decref(chunk);
        srv_accum_add(&acc, &ev);
        eng_event_clear(&ev);
    }
    eng_counters c = {0};
    json_t *resp = srv_completion_json(&m, &acc, o.n_calls ? "tool_calls" : "stop", &c);
    srv_accum_free(&acc);
    if (o.parser) chat_parser_free(o.parser);
    chat_delta_free(&o.delta);
    return resp;
}

static json_t *message_of(json_t *resp) { return json_object_get(json_array_get(json_object_get(resp, "choices"), 0), "message"); }

static void test_reasoning_content_and_a_tool_call_come_apart(void **state)
{
    (void)state;
    const char *out = "<think>\nThe user wants weather.\n</think>\n\nLet me check."
                      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
    for (size_t step = 1; step <= 7; step += 3) { /* any split of the text */
        int calls = 0;
        json_t *resp = run(CHAT_TOOLS_HERMES, true, out, step, &calls);
        json_t *msg = message_of(resp);
        assert_int_equal(calls, 1);
        assert_non_null(strstr(json_string_value(json_object_get(msg, "reasoning_content")), "The user wants weather."));
        const char *content = json_string_value(json_object_get(msg, "content"));
        assert_non_null(content);
        assert_non_null(strstr(content, "Let me check."));
        assert_null(strstr(content, "tool_call"));
        json_t *call = json_array_get(json_object_get(msg, "tool_calls"), 0);
        json_t *fn = json_object_get(call, "function");
        assert_string_equal(json_string_value(json_object_get(fn, "name")), "get_weather");
        json_t *args = json_loads(json_string_value(json_object_get(fn, "arguments")), 0, NULL);
        assert_non_null(args);
        assert_string_equal(json_string_value(json_object_get(args, "city")), "Oslo");
        json_decref(args);
        assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(resp, "choices"), 0), "finish_reason")),
                            "tool_calls");
        json_decref(resp);
    }
}

static void test_unparseable_tool_call_is_plain_content(void **state)
{
    (void)state;
    int calls = 0;
    json_t *resp = run(CHAT_TOOLS_HERMES, true, "Here: <tool_call>\n{not json at all\n</tool_call> done", 2, &calls);
    json_t *msg = message_of(resp);
    assert_int_equal(calls, 0);
    assert_null(json_object_get(msg, "tool_calls"));
    assert_non_null(strstr(json_string_value(json_object_get(msg, "content")), "not json at all"));
    json_decref(resp);
}

static void test_completion_text_is_content_verbatim(void **state)
{
    (void)state;
    int calls = 0;
    json_t *resp = run(CHAT_TOOLS_NONE, false, "<think>kept</think> as is", 3, &calls);
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(resp, "choices"), 0), "text")),
                        "<think>kept</think> as is");
    json_decref(resp);
}

static void test_boundaries_map_to_segment_token_positions(void **state)
{
    (void)state;
    /* text: [special 0..10)[content 10..20)[special 20..30); bounds at 0, 20, 25, 30. */
    chat_segment segs[3] = {{0, 10, true}, {10, 10, false}, {20, 10, true}};
    chat_boundary bounds[4] = {{CHAT_B_USER_START, 0, 0, CHAT_BFLAG_LAST_USER},
                               {CHAT_B_GENERATION_START, 20, -1, 0},
                               {CHAT_B_ASSISTANT_START, 25, 1, 0},
                               {CHAT_B_SYSTEM_END, 30, -1, 0}};
    chat_prompt p = {0};
    p.len = 30;
    p.segs = segs;
    p.n_segs = 3;
    p.bounds = bounds;
    p.n_bounds = 4;
    size_t seg_tok[4] = {1, 4, 9, 12}; /* BOS, then 3 + 5 + 3 tokens */
    ckpt_mark *m = NULL;
    int n = 0;
    assert_int_equal(pl_map_boundaries(&p, seg_tok, &m, &n), 0);
    assert_int_equal(n, 4);
    assert_int_equal(m[0].pos, 1);
    assert_int_equal(m[0].kind, CKPT_LAST_USER_START);
    assert_int_equal(m[1].kind, CKPT_GENERATION_START);
    assert_int_equal(m[2].kind, CKPT_ASSISTANT_START);
    assert_int_equal(m[3].kind, CKPT_SYSTEM_END);
    assert_int_equal(m[1].pos, 9);
    assert_int_equal(m[2].pos, 9);  /* inside a segment: its start (never later than the boundary) */
    assert_int_equal(m[3].pos, 12); /* end of the text */
    free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reasoning_content_and_a_tool_call_come_apart),
        cmocka_unit_test(test_unparseable_tool_call_is_plain_content),
        cmocka_unit_test(test_completion_text_is_content_verbatim),
        cmocka_unit_test(test_boundaries_map_to_segment_token_positions),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
