/* The Anthropic Messages and OpenAI Responses APIs without a model: request
 * bodies shaped like the Claude Code and Codex CLIs' become the validated
 * conversation and the request's constraints; engine events become each
 * API's answer and event stream. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "chat/chat_conv.h"
#include "server/anthropic.h"
#include "server/api.h"
#include "server/responses.h"
#include "testutil.h"

static json_t *js(const char *text)
{
    json_error_t je;
    json_t *v = json_loads(text, 0, &je);
    if (!v) fail_msg("bad test JSON: %s (%s)", je.text, text);
    return v;
}

/* Parses body with api; returns the HTTP status (200 = accepted). */
static int parse(const srv_api *api, const char *body, eng_request *req, srv_exchange *x, srv_error *err)
{
    srv_limits lim;
    srv_limits_default(&lim);
    json_t *root = js(body);
    srv_exchange_init(x);
    memset(err, 0, sizeof *err);
    int rc = api->parse(root, &lim, NULL, req, x, err);
    json_decref(root);
    return rc ? err->status : 200;
}

static int status_of(const srv_api *api, const char *body, srv_error *err)
{
    eng_request req;
    srv_exchange x;
    int st = parse(api, body, &req, &x, err);
    if (st == 200) eng_request_clear(&req);
    srv_exchange_free(&x);
    return st;
}

/* ---- Anthropic -------------------------------------------------------------- */

/* The shape Claude Code sends: system blocks with cache_control, a system
 * message inside messages, text / tool_use / tool_result / thinking blocks,
 * tools with $schema and additionalProperties, unknown top-level fields. */
static const char CLAUDE_LIKE[] =
    "{\"model\":\"claude-opus-5-5\",\"max_tokens\":32000,\"stream\":true,"
    "\"system\":[{\"type\":\"text\",\"text\":\"x-anthropic-billing-header: cc_version=2.1\"},"
    "{\"type\":\"text\",\"text\":\"You are a coding agent.\",\"cache_control\":{\"type\":\"ephemeral\"}}],"
    "\"messages\":["
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"<reminder>ctx</reminder>\"},{\"type\":\"text\",\"text\":\"fix it\",\"cache_control\":{\"type\":\"ephemeral\"}}]},"
    "{\"role\":\"system\",\"content\":[{\"type\":\"text\",\"text\":\"Mid-conversation rules.\"}]},"
    "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"Read the file.\",\"signature\":\"sig\"},"
    "{\"type\":\"text\",\"text\":\"Reading.\"},{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"Read\",\"input\":{\"path\":\"a.c\"}}]},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":[{\"type\":\"text\",\"text\":\"int x;\"}]},"
    "{\"type\":\"text\",\"text\":\"go on\"}]}],"
    "\"tools\":[{\"name\":\"Read\",\"description\":\"Read a file\",\"input_schema\":{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\","
    "\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"}},\"required\":[\"path\"],\"additionalProperties\":false}},"
    "{\"type\":\"web_search_20250305\",\"name\":\"web_search\"}],"
    "\"thinking\":{\"type\":\"adaptive\"},\"output_config\":{\"effort\":\"medium\"},"
    "\"context_management\":{\"edits\":[]},\"metadata\":{\"user_id\":\"u\"},\"stop_sequences\":[\"END\"],\"temperature\":0.5}";

static void test_anthropic_request_maps_every_block_onto_the_conversation(void **state)
{
    (void)state;
    eng_request req;
    srv_exchange x;
    srv_error err;
    assert_int_equal(parse(&srv_api_messages, CLAUDE_LIKE, &req, &x, &err), 200);
    const chat_conv *c = req.chat;
    assert_int_equal((int)c->n, 6);
    assert_int_equal(c->msgs[0].role, CHAT_ROLE_SYSTEM);
    assert_string_equal(c->msgs[0].content, "x-anthropic-billing-header: cc_version=2.1You are a coding agent.");
    assert_int_equal(c->msgs[1].role, CHAT_ROLE_USER);
    assert_string_equal(c->msgs[1].content, "<reminder>ctx</reminder>fix it");
    assert_int_equal(c->msgs[2].role, CHAT_ROLE_SYSTEM);
    assert_int_equal(c->msgs[3].role, CHAT_ROLE_ASSISTANT);
    assert_string_equal(c->msgs[3].reasoning, "Read the file.");
    assert_string_equal(c->msgs[3].content, "Reading.");
    assert_int_equal((int)c->msgs[3].n_calls, 1);
    assert_string_equal(c->msgs[3].calls[0].name, "Read");
    assert_string_equal(json_string_value(json_object_get(c->msgs[3].calls[0].args, "path")), "a.c");
    assert_int_equal(c->msgs[4].role, CHAT_ROLE_TOOL);
    assert_string_equal(c->msgs[4].tool_call_id, "toolu_1");
    assert_string_equal(c->msgs[4].content, "int x;");
    assert_int_equal(c->msgs[5].role, CHAT_ROLE_USER);
    assert_string_equal(c->msgs[5].content, "go on");
    /* the server tool is accepted and not offered */
    assert_int_equal((int)json_array_size(req.tools), 1);
    assert_non_null(json_object_get(json_object_get(json_object_get(json_array_get(req.tools, 0), "function"), "parameters"),
                                    "additionalProperties"));
    assert_int_equal(c->enable_thinking, -1);
    assert_int_equal(req.max_tokens, 32000);
    assert_int_equal(req.n_stop, 1);
    assert_true(x.ro.stream);
    assert_float_equal(req.sampling.temperature, 0.5f, 1e-6);
    /* it renders: a later system message is a system turn (Qwen3.5 too) */
    chat_template t;
    assert_int_equal(chat_template_by_name(&t, "qwen35", NULL), 0);
    chat_prompt p;
    wk_error werr = {0};
    assert_int_equal(chat_render_conv(&t, c, &p, &werr), 0);
    assert_non_null(strstr(p.text, "<|im_start|>system\nMid-conversation rules.<|im_end|>"));
    assert_non_null(strstr(p.text, "<tool_response>\nint x;\n</tool_response>"));
    chat_prompt_free(&p);
    eng_request_clear(&req);
    srv_exchange_free(&x);
}

static void test_anthropic_tool_choice_and_thinking(void **state)
{
    (void)state;
    const char *tools = "\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}},{\"name\":\"g\",\"input_schema\":{\"type\":\"object\"}}]";
    char body[1024];
    eng_request req;
    srv_exchange x;
    srv_error err;
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],%s,\"tool_choice\":{\"type\":\"any\"}}", tools);
    assert_int_equal(parse(&srv_api_messages, body, &req, &x, &err), 200);
    assert_int_equal(req.tool_choice, ENG_TOOLS_REQUIRED);
    eng_request_clear(&req);
    srv_exchange_free(&x);
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],%s,\"tool_choice\":{\"type\":\"tool\",\"name\":\"g\","
             "\"disable_parallel_tool_use\":true},\"thinking\":{\"type\":\"disabled\"}}", tools);
    assert_int_equal(parse(&srv_api_messages, body, &req, &x, &err), 200);
    assert_int_equal(req.tool_choice, ENG_TOOLS_FUNCTION);
    assert_string_equal(req.tool_choice_name, "g");
    assert_false(req.parallel_tool_calls);
    assert_int_equal(req.chat->enable_thinking, 0);
    eng_request_clear(&req);
    srv_exchange_free(&x);
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],%s,\"tool_choice\":{\"type\":\"none\"}}", tools);
    assert_int_equal(parse(&srv_api_messages, body, &req, &x, &err), 200);
    assert_null(req.tools); /* not shown to the model */
    eng_request_clear(&req);
    srv_exchange_free(&x);
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],%s,\"tool_choice\":{\"type\":\"tool\",\"name\":\"h\"}}", tools);
    assert_int_equal(status_of(&srv_api_messages, body, &err), 400);
    assert_string_equal(err.param, "tool_choice.name");
}

static void test_anthropic_bad_requests_name_the_field(void **state)
{
    (void)state;
    srv_error err;
    assert_int_equal(status_of(&srv_api_messages, "{\"max_tokens\":5}", &err), 400);
    assert_string_equal(err.param, "messages");
    assert_int_equal(status_of(&srv_api_messages, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]}", &err), 400);
    assert_string_equal(err.code, "unsupported");
    assert_int_equal(status_of(&srv_api_messages, "{\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"name\":\"f\",\"input\":[1]}]}]}", &err), 400);
    assert_string_equal(err.param, "messages[0].content[0].input");
    assert_int_equal(status_of(&srv_api_messages, "{\"messages\":[{\"role\":\"bot\",\"content\":\"x\"}]}", &err), 400);
    assert_int_equal(status_of(&srv_api_messages, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":1.5}", &err), 400);
    assert_string_equal(err.param, "temperature");
    assert_int_equal(status_of(&srv_api_messages, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"name\":\"f\"}]}", &err), 400);
    assert_string_equal(err.param, "tools[0]");
    /* Anthropic's error shape */
    json_t *e = srv_api_messages.error_json(&err, NULL);
    assert_string_equal(json_string_value(json_object_get(e, "type")), "error");
    assert_string_equal(json_string_value(json_object_get(json_object_get(e, "error"), "type")), "invalid_request_error");
    json_decref(e);
    srv_fail(&err, 503, NULL, NULL, "busy");
    e = srv_api_messages.error_json(&err, NULL);
    assert_string_equal(json_string_value(json_object_get(json_object_get(e, "error"), "type")), "overloaded_error");
    json_decref(e);
}

static eng_event delta_ev(int kind, const char *text, const char *id, const char *name)
{
    eng_event ev = {0};
    ev.type = ENG_EV_DELTA;
    ev.delta_kind = kind;
    ev.text = (char *)text;
    if (id) snprintf(ev.tool_id, sizeof ev.tool_id, "%s", id);
    if (name) snprintf(ev.tool_name, sizeof ev.tool_name, "%s", name);
    return ev;
}

static eng_event done_ev(const char *finish, int prompt, int cached, int completion)
{
    eng_event ev = {0};
    ev.type = ENG_EV_DONE;
    snprintf(ev.finish_reason, sizeof ev.finish_reason, "%s", finish);
    ev.counters.prompt_tokens = prompt;
    ev.counters.cached_tokens = cached;
    ev.counters.completion_tokens = completion;
    return ev;
}

/* Feeds the same events to a stream and to the whole answer. */
static json_t *feed(const srv_api *api, srv_exchange *x, const eng_event *evs, size_t n, const eng_event *done, srv_buf *sse)
{
    api->stream_start(x, sse);
    for (size_t i = 0; i < n; i++) {
        srv_accum_add(&x->acc, &evs[i]);
        api->stream_delta(x, &evs[i], sse);
    }
    api->stream_done(x, done, sse);
    return api->final_json(x, done);
}

/* The event names of an SSE text, in order, one per line of out. */
static void event_names(const char *sse, char *out, size_t cap)
{
    out[0] = '\0';
    for (const char *p = strstr(sse, "event: "); p; p = strstr(p + 1, "event: ")) {
        const char *e = strchr(p, '\n');
        size_t n = strlen(out);
        snprintf(out + n, cap - n, "%.*s\n", (int)(e - p - 7), p + 7);
    }
}

static void test_anthropic_stream_and_message_carry_blocks_and_usage(void **state)
{
    (void)state;
    srv_exchange x;
    srv_exchange_init(&x);
    srv_resp_meta_init(&x.meta, "msg_", true, "tiny");
    x.prompt_tokens = 100;
    eng_event evs[] = {
        delta_ev(ENG_DELTA_REASONING, "hmm", NULL, NULL), delta_ev(ENG_DELTA_CONTENT, "Let me read.", NULL, NULL),
        delta_ev(ENG_DELTA_TOOL_CALL, "", "call_abc", "Read"), delta_ev(ENG_DELTA_TOOL_ARGS, "{\"path\": \"a.c\"}", NULL, NULL)};
    eng_event done = done_ev("tool_calls", 100, 90, 12);
    srv_buf sse = {0};
    json_t *m = feed(&srv_api_messages, &x, evs, 4, &done, &sse);
    char names[1024];
    event_names(sse.data, names, sizeof names);
    assert_string_equal(names, "message_start\nping\ncontent_block_start\ncontent_block_delta\ncontent_block_stop\n"
                               "content_block_start\ncontent_block_delta\ncontent_block_stop\n"
                               "content_block_start\ncontent_block_delta\ncontent_block_stop\nmessage_delta\nmessage_stop\n");
    assert_non_null(strstr(sse.data, "\"partial_json\":\"{\\\"path\\\": \\\"a.c\\\"}\""));
    assert_non_null(strstr(sse.data, "\"stop_reason\":\"tool_use\""));
    assert_non_null(strstr(sse.data, "\"cache_read_input_tokens\":90"));
    json_t *content = json_object_get(m, "content");
    assert_int_equal((int)json_array_size(content), 3);
    assert_string_equal(json_string_value(json_object_get(json_array_get(content, 0), "type")), "thinking");
    json_t *tu = json_array_get(content, 2);
    assert_string_equal(json_string_value(json_object_get(tu, "id")), "toolu_abc");
    assert_string_equal(json_string_value(json_object_get(json_object_get(tu, "input"), "path")), "a.c");
    assert_string_equal(json_string_value(json_object_get(m, "stop_reason")), "tool_use");
    json_t *u = json_object_get(m, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "input_tokens")), 10);
    assert_int_equal(json_integer_value(json_object_get(u, "cache_read_input_tokens")), 90);
    assert_int_equal(json_integer_value(json_object_get(u, "output_tokens")), 12);
    json_decref(m);
    srv_buf_free(&sse);
    srv_exchange_free(&x);

    /* a stop sequence is named */
    srv_exchange_init(&x);
    srv_resp_meta_init(&x.meta, "msg_", true, "tiny");
    x.stops[0] = strdup("END");
    x.n_stops = 1;
    done = done_ev("stop", 5, 0, 3);
    done.stopped_by = 1;
    eng_event t = delta_ev(ENG_DELTA_CONTENT, "ok", NULL, NULL);
    m = feed(&srv_api_messages, &x, &t, 1, &done, &sse);
    assert_string_equal(json_string_value(json_object_get(m, "stop_reason")), "stop_sequence");
    assert_string_equal(json_string_value(json_object_get(m, "stop_sequence")), "END");
    json_decref(m);
    srv_buf_free(&sse);
    srv_exchange_free(&x);
}

/* ---- Responses --------------------------------------------------------------- */

/* The shape Codex sends: developer instructions as input items, every item
 * with an id, function / namespace / web_search tools, reasoning items and
 * a tool round trip in the history. */
static const char CODEX_LIKE[] =
    "{\"model\":\"gpt-5-codex\",\"instructions\":\"You are Codex.\",\"stream\":true,\"store\":false,"
    "\"input\":[{\"type\":\"message\",\"id\":\"m0\",\"role\":\"developer\",\"content\":[{\"type\":\"input_text\",\"text\":\"<permissions>\"}]},"
    "{\"type\":\"message\",\"id\":\"m1\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"list files\"}]},"
    "{\"type\":\"reasoning\",\"id\":\"r1\",\"summary\":[{\"type\":\"summary_text\",\"text\":\"Use ls.\"}],\"encrypted_content\":null},"
    "{\"type\":\"function_call\",\"id\":\"f1\",\"call_id\":\"call_1\",\"name\":\"shell\",\"arguments\":\"{\\\"command\\\":[\\\"ls\\\"]}\"},"
    "{\"type\":\"function_call\",\"id\":\"f2\",\"call_id\":\"call_2\",\"name\":\"get\",\"namespace\":\"mcp\",\"arguments\":\"{}\"},"
    "{\"type\":\"function_call_output\",\"call_id\":\"call_1\",\"output\":\"a.c\\nb.c\"},"
    "{\"type\":\"function_call_output\",\"call_id\":\"call_2\",\"output\":[{\"type\":\"input_text\",\"text\":\"ok\"}]},"
    "{\"type\":\"message\",\"id\":\"m2\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Two files.\"}]}],"
    "\"tools\":[{\"type\":\"function\",\"name\":\"shell\",\"description\":\"Run\",\"strict\":false,\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"command\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},\"required\":[\"command\"],\"additionalProperties\":false}},"
    "{\"type\":\"namespace\",\"name\":\"mcp\",\"description\":\"tools\",\"tools\":[{\"type\":\"function\",\"name\":\"get\",\"parameters\":{\"type\":\"object\"}}]},"
    "{\"type\":\"web_search\",\"external_web_access\":false}],"
    "\"tool_choice\":\"auto\",\"parallel_tool_calls\":true,\"reasoning\":{\"summary\":\"auto\"},"
    "\"include\":[\"reasoning.encrypted_content\"],\"prompt_cache_key\":\"k\",\"text\":{\"verbosity\":\"low\"}}";

static void test_responses_input_items_map_onto_the_conversation(void **state)
{
    (void)state;
    eng_request req;
    srv_exchange x;
    srv_error err;
    assert_int_equal(parse(&srv_api_responses, CODEX_LIKE, &req, &x, &err), 200);
    const chat_conv *c = req.chat;
    assert_int_equal((int)c->n, 7);
    assert_int_equal(c->msgs[0].role, CHAT_ROLE_SYSTEM);
    assert_string_equal(c->msgs[0].content, "You are Codex.");
    assert_int_equal(c->msgs[1].role, CHAT_ROLE_SYSTEM);
    assert_string_equal(c->msgs[1].content, "<permissions>");
    assert_int_equal(c->msgs[3].role, CHAT_ROLE_ASSISTANT);
    assert_string_equal(c->msgs[3].reasoning, "Use ls.");
    assert_int_equal((int)c->msgs[3].n_calls, 2);
    assert_string_equal(c->msgs[3].calls[0].id, "call_1");
    assert_string_equal(c->msgs[3].calls[1].name, "mcp" SRV_NAMESPACE_SEP "get");
    assert_int_equal(c->msgs[4].role, CHAT_ROLE_TOOL);
    assert_string_equal(c->msgs[4].content, "a.c\nb.c");
    assert_string_equal(c->msgs[5].content, "ok");
    assert_string_equal(c->msgs[6].content, "Two files.");
    /* function + flattened namespace tools offered, web_search not */
    assert_int_equal((int)json_array_size(req.tools), 2);
    assert_string_equal(json_string_value(json_object_get(x.namespaces, "mcp" SRV_NAMESPACE_SEP "get")), "mcp");
    assert_true(x.ro.stream);
    assert_int_equal(req.max_tokens, -1);
    eng_request_clear(&req);
    srv_exchange_free(&x);
}

static void test_responses_options_and_refusals(void **state)
{
    (void)state;
    eng_request req;
    srv_exchange x;
    srv_error err;
    assert_int_equal(parse(&srv_api_responses,
                           "{\"input\":\"hi\",\"max_output_tokens\":50,\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}],"
                           "\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"},\"parallel_tool_calls\":false,"
                           "\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"r\",\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}},\"strict\":true}},"
                           "\"reasoning\":{\"effort\":\"none\"}}",
                           &req, &x, &err),
                     200);
    assert_int_equal(req.max_tokens, 50);
    assert_int_equal(req.tool_choice, ENG_TOOLS_FUNCTION);
    assert_false(req.parallel_tool_calls);
    assert_int_equal(req.response_format, ENG_FORMAT_JSON_SCHEMA);
    assert_true(req.json_schema_strict);
    assert_string_equal(req.json_schema_name, "r");
    assert_int_equal(req.chat->enable_thinking, 0);
    eng_request_clear(&req);
    srv_exchange_free(&x);
    assert_int_equal(status_of(&srv_api_responses, "{\"input\":\"hi\",\"previous_response_id\":\"resp_1\"}", &err), 400);
    assert_string_equal(err.param, "previous_response_id");
    assert_int_equal(status_of(&srv_api_responses, "{\"input\":[{\"type\":\"item_reference\",\"id\":\"x\"}]}", &err), 400);
    assert_int_equal(status_of(&srv_api_responses, "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"x\"}]}]}", &err), 400);
    assert_string_equal(err.code, "unsupported");
    assert_int_equal(status_of(&srv_api_responses, "{\"input\":\"hi\",\"tool_choice\":\"required\"}", &err), 400);
    assert_int_equal(status_of(&srv_api_responses, "{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":\"nope\"}]}", &err), 400);
    assert_string_equal(err.param, "input[0].arguments");
    assert_int_equal(status_of(&srv_api_responses, "{\"input\":\"hi\",\"text\":{\"format\":{\"type\":\"json_schema\",\"schema\":{\"properties\":{\"a\":3}}}}}", &err), 400);
    assert_string_equal(err.param, "text.format.schema");
    assert_int_equal(status_of(&srv_api_responses, "{}", &err), 400);
}

static void test_responses_stream_events_and_final_object_agree(void **state)
{
    (void)state;
    srv_exchange x;
    srv_exchange_init(&x);
    srv_resp_meta_init(&x.meta, "resp_", true, "tiny");
    x.namespaces = json_pack("{s:s}", "mcp" SRV_NAMESPACE_SEP "get", "mcp");
    eng_event evs[] = {delta_ev(ENG_DELTA_REASONING, "think", NULL, NULL), delta_ev(ENG_DELTA_CONTENT, "Calling.", NULL, NULL),
                       delta_ev(ENG_DELTA_TOOL_CALL, "", "call_z", "mcp" SRV_NAMESPACE_SEP "get"),
                       delta_ev(ENG_DELTA_TOOL_ARGS, "{\"q\": 1}", NULL, NULL)};
    eng_event done = done_ev("tool_calls", 40, 30, 9);
    srv_buf sse = {0};
    json_t *r = feed(&srv_api_responses, &x, evs, 4, &done, &sse);
    char names[2048];
    event_names(sse.data, names, sizeof names);
    assert_string_equal(names,
                        "response.created\nresponse.in_progress\n"
                        "response.output_item.added\nresponse.content_part.added\nresponse.reasoning_text.delta\n"
                        "response.reasoning_text.done\nresponse.content_part.done\nresponse.output_item.done\n"
                        "response.output_item.added\nresponse.content_part.added\nresponse.output_text.delta\n"
                        "response.output_text.done\nresponse.content_part.done\nresponse.output_item.done\n"
                        "response.output_item.added\nresponse.function_call_arguments.delta\n"
                        "response.function_call_arguments.done\nresponse.output_item.done\nresponse.completed\n");
    json_t *out = json_object_get(r, "output");
    assert_int_equal((int)json_array_size(out), 3);
    json_t *fc = json_array_get(out, 2);
    assert_string_equal(json_string_value(json_object_get(fc, "type")), "function_call");
    assert_string_equal(json_string_value(json_object_get(fc, "name")), "get");
    assert_string_equal(json_string_value(json_object_get(fc, "namespace")), "mcp");
    assert_string_equal(json_string_value(json_object_get(fc, "call_id")), "call_z");
    assert_string_equal(json_string_value(json_object_get(fc, "arguments")), "{\"q\": 1}");
    /* ids in the stream are the ids of the final items */
    char want[128];
    snprintf(want, sizeof want, "\"item_id\":\"%s\"", json_string_value(json_object_get(fc, "id")));
    assert_non_null(strstr(sse.data, want));
    assert_string_equal(json_string_value(json_object_get(r, "status")), "completed");
    json_t *u = json_object_get(r, "usage");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(u, "input_tokens_details"), "cached_tokens")), 30);
    assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")), 49);
    /* sequence numbers count every event from 0 */
    assert_non_null(strstr(sse.data, "\"sequence_number\":18"));
    json_decref(r);
    srv_buf_free(&sse);
    srv_exchange_free(&x);

    /* max_output_tokens reached: incomplete; an empty answer is still one message */
    srv_exchange_init(&x);
    srv_resp_meta_init(&x.meta, "resp_", true, "tiny");
    done = done_ev("length", 5, 0, 2);
    r = feed(&srv_api_responses, &x, NULL, 0, &done, &sse);
    assert_string_equal(json_string_value(json_object_get(r, "status")), "incomplete");
    assert_non_null(strstr(sse.data, "event: response.incomplete"));
    assert_int_equal((int)json_array_size(json_object_get(r, "output")), 1);
    json_decref(r);
    srv_buf_free(&sse);
    srv_exchange_free(&x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_anthropic_request_maps_every_block_onto_the_conversation),
        cmocka_unit_test(test_anthropic_tool_choice_and_thinking),
        cmocka_unit_test(test_anthropic_bad_requests_name_the_field),
        cmocka_unit_test(test_anthropic_stream_and_message_carry_blocks_and_usage),
        cmocka_unit_test(test_responses_input_items_map_onto_the_conversation),
        cmocka_unit_test(test_responses_options_and_refusals),
        cmocka_unit_test(test_responses_stream_events_and_final_object_agree),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
