/* The validated conversation (chat/chat_conv): one set of rules for every
 * API, errors that name the field, and rendering without a second check. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "chat/chat_conv.h"
#include "testutil.h"

static json_t *js(const char *text)
{
    json_error_t je;
    json_t *v = json_loads(text, 0, &je);
    if (!v) fail_msg("bad test JSON: %s", je.text);
    return v;
}

/* chat_conv_from_openai on a request; returns the wk error code. */
static int from(const char *request, chat_conv *c, wk_error *err)
{
    json_t *r = js(request);
    memset(err, 0, sizeof *err);
    int rc = chat_conv_from_openai(c, r, err);
    json_decref(r);
    return rc;
}

static void expect_error(const char *request, int code, const char *field)
{
    chat_conv c;
    wk_error err;
    int rc = from(request, &c, &err);
    if (rc != code) fail_msg("expected %d, got %d (%s) for %s", code, rc, err.msg, request);
    size_t n = strlen(field);
    if (strncmp(err.msg, field, n) || err.msg[n] != ':') fail_msg("error '%s' does not start with '%s:'", err.msg, field);
}

static void test_openai_messages_become_the_validated_conversation(void **state)
{
    (void)state;
    chat_conv c;
    wk_error err;
    assert_int_equal(from("{\"messages\":["
                          "{\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":\"Be \"},{\"type\":\"text\",\"text\":\"brief.\"}]},"
                          "{\"role\":\"user\",\"content\":\"Hi\"},"
                          "{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"think\",\"tool_calls\":["
                          "{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": 1}\"}},"
                          "{\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":{\"b\":[true]}}},"
                          "{\"type\":\"function\",\"function\":{\"name\":\"h\",\"arguments\":\"  \"}}]},"
                          "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":[{\"type\":\"text\",\"text\":\"ok\"}]}],"
                          "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}],"
                          "\"add_generation_prompt\":false,\"chat_template_kwargs\":{\"enable_thinking\":false}}",
                          &c, &err),
                     0);
    assert_int_equal((int)c.n, 4);
    assert_int_equal(c.msgs[0].role, CHAT_ROLE_SYSTEM);
    assert_string_equal(c.msgs[0].content, "Be brief.");
    assert_int_equal(c.msgs[2].role, CHAT_ROLE_ASSISTANT);
    assert_string_equal(c.msgs[2].content, "");
    assert_string_equal(c.msgs[2].reasoning, "think");
    assert_int_equal((int)c.msgs[2].n_calls, 3);
    /* text arguments are kept as sent (a template prints them verbatim) and parsed */
    assert_string_equal(c.msgs[2].calls[0].args_text, "{\"a\": 1}");
    assert_int_equal(json_integer_value(json_object_get(c.msgs[2].calls[0].args, "a")), 1);
    assert_string_equal(c.msgs[2].calls[0].id, "c1");
    assert_null(c.msgs[2].calls[1].args_text);
    assert_true(json_is_true(json_array_get(json_object_get(c.msgs[2].calls[1].args, "b"), 0)));
    assert_int_equal((int)json_object_size(c.msgs[2].calls[2].args), 0); /* blank text = {} */
    assert_null(c.msgs[2].calls[2].id);
    assert_int_equal(c.msgs[3].role, CHAT_ROLE_TOOL);
    assert_string_equal(c.msgs[3].tool_call_id, "c1");
    assert_string_equal(c.msgs[3].content, "ok");
    assert_int_equal((int)json_array_size(c.tools), 1);
    assert_false(c.add_generation_prompt);
    assert_int_equal(c.enable_thinking, 0);
    chat_conv_free(&c);

    /* tool_choice none: the tools are not offered to the model */
    assert_int_equal(from("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"none\","
                          "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}",
                          &c, &err),
                     0);
    assert_null(c.tools);
    chat_conv_free(&c);
}

static void test_errors_name_the_field(void **state)
{
    (void)state;
    expect_error("{}", WK_EINVAL, "messages");
    expect_error("{\"messages\":[]}", WK_EINVAL, "messages");
    expect_error("{\"messages\":\"hi\"}", WK_EINVAL, "messages");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":5}]}", WK_EINVAL,
                 "messages[1].content");
    expect_error("{\"messages\":[{\"role\":\"wizard\",\"content\":\"a\"}]}", WK_EINVAL, "messages[0].role");
    expect_error("{\"messages\":[{\"role\":\"user\"}]}", WK_EINVAL, "messages[0].content");
    expect_error("{\"messages\":[{\"role\":\"assistant\",\"content\":null}]}", WK_EINVAL, "messages[0].content");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]}",
                 WK_EUNSUPPORTED, "messages[0].content[0]");
    expect_error("{\"messages\":[{\"role\":\"assistant\",\"content\":\"a\",\"reasoning_content\":3}]}", WK_EINVAL,
                 "messages[0].reasoning_content");
    expect_error("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"[1]\"}}]}]}",
                 WK_EINVAL, "messages[0].tool_calls[0].function.arguments");
    expect_error("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1,\\\"a\\\":2}\"}}]}]}",
                 WK_EINVAL, "messages[0].tool_calls[0].function.arguments");
    expect_error("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"\"}}]}]}", WK_EINVAL,
                 "messages[0].tool_calls[0].function.name");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"tool_calls\":[]}]}", WK_EINVAL,
                 "messages[0].tool_calls");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tools\":[{\"type\":\"web\"}]}", WK_EINVAL, "tools[0]");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tools\":["
                 "{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}",
                 WK_EINVAL, "tools[1].function");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tools\":["
                 "{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":[]}}]}",
                 WK_EINVAL, "tools[0].function.parameters");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"chat_template_kwargs\":{\"enable_thinking\":1}}",
                 WK_EINVAL, "chat_template_kwargs.enable_thinking");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"add_generation_prompt\":\"yes\"}", WK_EINVAL,
                 "add_generation_prompt");
}

/* The builder keeps its invariants whatever the caller does. */
static void test_builder_refuses_calls_and_reasoning_outside_assistant_turns(void **state)
{
    (void)state;
    chat_conv c;
    chat_conv_init(&c);
    wk_error err = {0};
    assert_int_equal(chat_conv_add(&c, CHAT_ROLE_USER, "q", 1, &err), 0);
    json_t *args = json_string("{}");
    assert_int_equal(chat_conv_add_call(&c, NULL, "f", args, "x.name", "x.input", &err), WK_EINVAL);
    assert_int_equal(chat_conv_add_reasoning(&c, "r", 1, "x", &err), WK_EINVAL);
    assert_int_equal(chat_conv_add(&c, CHAT_ROLE_ASSISTANT, "", 0, &err), 0);
    assert_int_equal(chat_conv_add_call(&c, "id", "f", args, "x.name", "x.input", &err), 0);
    assert_int_equal(chat_conv_add_reasoning(&c, "r1", 2, "x", &err), 0);
    assert_int_equal(chat_conv_add_reasoning(&c, "r2", 2, "x", &err), 0);
    assert_string_equal(c.msgs[1].reasoning, "r1r2");
    assert_int_equal(chat_conv_add_tool(&c, "f", NULL, NULL, "tools[0]", &err), 0);
    assert_int_equal(chat_conv_add_tool(&c, "f", NULL, NULL, "tools[1]", &err), WK_EINVAL);
    assert_int_equal(chat_conv_add_tool(&c, "", NULL, NULL, "tools[2]", &err), WK_EINVAL);
    assert_string_equal(json_string_value(json_object_get(json_object_get(json_array_get(c.tools, 0), "function"), "name")), "f");
    json_decref(args);
    assert_int_equal(chat_conv_finish(&c, "messages", &err), 0);
    chat_conv_free(&c);
    chat_conv_init(&c);
    assert_int_equal(chat_conv_finish(&c, "input", &err), WK_EINVAL);
    assert_non_null(strstr(err.msg, "input:"));
}

static void render(const char *tmpl, const char *request, chat_prompt *p)
{
    chat_template t;
    wk_error err = {0};
    assert_int_equal(chat_template_by_name(&t, tmpl, &err), 0);
    chat_conv c;
    if (from(request, &c, &err)) fail_msg("%s", err.msg);
    if (chat_render_conv(&t, &c, p, &err)) fail_msg("render: %s", err.msg);
    chat_conv_free(&c);
}

/* Qwen3 prints text arguments verbatim (the bytes the model wrote come back
 * the same, so the prefix cache holds); Qwen3.5 prints the parsed object. */
static void test_arguments_render_as_each_template_expects(void **state)
{
    (void)state;
    const char *req = "{\"messages\":[{\"role\":\"user\",\"content\":\"Q\"},"
                      "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\","
                      "\"function\":{\"name\":\"read\",\"arguments\":\"{\\\"path\\\":\\\"a.c\\\",  \\\"n\\\":2}\"}}]},"
                      "{\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":\"data\"}],"
                      "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"read\"}}]}";
    chat_prompt p;
    render("qwen3", req, &p);
    assert_non_null(strstr(p.text, "<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\":\"a.c\",  \"n\":2}}\n</tool_call>"));
    chat_prompt_free(&p);
    render("qwen35", req, &p);
    assert_non_null(strstr(p.text, "<function=read>\n<parameter=path>\na.c\n</parameter>\n<parameter=n>\n2\n</parameter>\n"));
    chat_prompt_free(&p);
}

/* reasoning_content of the current agentic turn is rendered in a think
 * block; enable_thinking false closes the generation's think block. */
static void test_reasoning_round_trip(void **state)
{
    (void)state;
    const char *req = "{\"messages\":[{\"role\":\"user\",\"content\":\"Q\"},"
                      "{\"role\":\"assistant\",\"content\":\"\",\"reasoning_content\":\"I should read it.\",\"tool_calls\":["
                      "{\"type\":\"function\",\"function\":{\"name\":\"read\",\"arguments\":\"{}\"}}]},"
                      "{\"role\":\"tool\",\"content\":\"data\"}],"
                      "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"read\"}}]}";
    chat_prompt p;
    render("qwen3", req, &p);
    assert_non_null(strstr(p.text, "<|im_start|>assistant\n<think>\nI should read it.\n</think>\n\n<tool_call>"));
    assert_true(p.thinking_enabled);
    chat_prompt_free(&p);
    render("qwen35", req, &p);
    assert_non_null(strstr(p.text, "<|im_start|>assistant\n<think>\nI should read it.\n</think>\n\n<tool_call>"));
    assert_true(p.reasoning_open);
    chat_prompt_free(&p);
    render("qwen35", "{\"messages\":[{\"role\":\"user\",\"content\":\"Q\"}],\"chat_template_kwargs\":{\"enable_thinking\":false}}", &p);
    const char *tail = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    assert_string_equal(p.text + p.len - strlen(tail), tail);
    assert_false(p.reasoning_open);
    chat_prompt_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_openai_messages_become_the_validated_conversation),
        cmocka_unit_test(test_errors_name_the_field),
        cmocka_unit_test(test_builder_refuses_calls_and_reasoning_outside_assistant_turns),
        cmocka_unit_test(test_arguments_render_as_each_template_expects),
        cmocka_unit_test(test_reasoning_round_trip),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
