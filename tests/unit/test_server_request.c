/* Request parsing and validation for the OpenAI endpoints (server/openai_request). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include <zlib.h>
#include <zstd.h>

#include "engine/request.h"
#include "server/body_decode.h"
#include "server/error.h"
#include "server/json_schema_check.h"
#include "server/openai_request.h"
#include "server/server.h"
#include "testutil.h"

static const char *const ALIASES[] = {"tiny-alias"};
static srv_model_names g_models = {.id = "tiny", .aliases = ALIASES, .n_aliases = 1};

/* Parses body as a chat request; returns the HTTP status (200 = accepted). */
static int chat_status(const char *body, eng_request *req, srv_resp_opts *ro, srv_error *err)
{
    srv_limits lim;
    srv_limits_default(&lim);
    lim.n_ctx = 4096;
    json_t *root = NULL;
    memset(err, 0, sizeof *err);
    if (srv_parse_body(body, strlen(body), &lim, &root, err)) return err->status;
    int rc = srv_parse_chat(root, &lim, &g_models, req, ro, err);
    json_decref(root);
    return rc ? err->status : 200;
}

static int chat_status_simple(const char *body, srv_error *err)
{
    eng_request req;
    srv_resp_opts ro;
    int st = chat_status(body, &req, &ro, err);
    if (st == 200) eng_request_clear(&req);
    return st;
}

static void test_valid_chat_request_fills_sampling_stop_and_limits(void **state)
{
    (void)state;
    eng_request req;
    srv_resp_opts ro;
    srv_error err;
    int st = chat_status("{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                         "\"temperature\":0,\"top_p\":0.5,\"top_k\":7,\"min_p\":0.1,\"seed\":42,"
                         "\"max_tokens\":12,\"stop\":[\"END\",\"\"],\"stream\":true,"
                         "\"stream_options\":{\"include_usage\":true},\"wick\":{\"fresh\":true}}",
                         &req, &ro, &err);
    assert_int_equal(st, 200);
    assert_int_equal(req.kind, ENG_REQ_CHAT);
    assert_float_equal(req.sampling.temperature, 0.0f, 1e-6);
    assert_float_equal(req.sampling.top_p, 0.5f, 1e-6);
    assert_int_equal(req.sampling.top_k, 7);
    assert_true(req.sampling.has_seed);
    assert_int_equal((int)req.sampling.seed, 42);
    assert_int_equal(req.max_tokens, 12);
    assert_int_equal(req.n_stop, 1); /* the empty stop string is ignored */
    assert_string_equal(req.stop[0], "END");
    assert_true(ro.stream);
    assert_true(ro.include_usage);
    assert_true(req.fresh);
    assert_non_null(req.chat);
    assert_int_equal((int)req.chat->n, 1);
    assert_string_equal(req.chat->msgs[0].content, "hi");
    eng_request_clear(&req);
}

static void test_max_completion_tokens_wins_over_max_tokens(void **state)
{
    (void)state;
    eng_request req;
    srv_resp_opts ro;
    srv_error err;
    assert_int_equal(chat_status("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                 "\"max_tokens\":50,\"max_completion_tokens\":5}", &req, &ro, &err), 200);
    assert_int_equal(req.max_tokens, 5);
    assert_false(req.fresh);
    assert_false(req.sampling.has_seed);
    eng_request_clear(&req);
}

static void test_malformed_json_is_400_with_position(void **state)
{
    (void)state;
    srv_error err;
    assert_int_equal(chat_status_simple("{\"messages\": [", &err), 400);
    assert_string_equal(err.code, "invalid_json");
    assert_non_null(strstr(err.message, "line"));
    assert_int_equal(chat_status_simple("[1,2]", &err), 400);
    assert_int_equal(chat_status_simple("", &err), 400);
}

static void test_wrong_types_name_the_field(void **state)
{
    (void)state;
    srv_error err;
    assert_int_equal(chat_status_simple("{\"messages\":\"hi\"}", &err), 400);
    assert_string_equal(err.param, "messages");
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":\"hot\"}", &err), 400);
    assert_string_equal(err.param, "temperature");
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1.5}", &err), 400);
    assert_string_equal(err.param, "max_tokens");
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":7}", &err), 400);
    assert_string_equal(err.param, "stop");
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"user\",\"content\":5}]}", &err), 400);
    assert_string_equal(err.param, "messages[0].content");
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", &err), 400);
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":\"yes\"}", &err), 400);
    assert_string_equal(err.param, "stream");
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                        "\"chat_template_kwargs\":{\"enable_thinking\":\"no\"}}", &err), 400);
}

static void test_out_of_range_values_are_refused(void **state)
{
    (void)state;
    srv_error err;
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":3}", &err), 400);
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_p\":-0.1}", &err), 400);
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}", &err), 400);
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":2}", &err), 400);
    /* ignore_eos without a token limit would run to the end of the context. */
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"ignore_eos\":true}", &err), 400);
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"wick\":{\"stale\":1}}", &err), 400);
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"abc\":1}}", &err), 400);
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"5\":101}}", &err), 400);
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"5\":-100}}", &err), 200);
    assert_int_equal(chat_status_simple("{\"messages\":[]}", &err), 400);
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                        "\"stream_options\":{\"include_usage\":true}}", &err), 400);
}

/* Serving one model, any name is answered by it; --strict-model-id refuses
 * names that are neither the id nor an alias. */
static void test_other_model_names_are_answered_unless_strict(void **state)
{
    (void)state;
    srv_error err;
    const char *other = "{\"model\":\"gpt-9\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
    assert_int_equal(chat_status_simple(other, &err), 200);
    g_models.strict = true;
    assert_int_equal(chat_status_simple(other, &err), 404);
    assert_string_equal(err.code, "model_not_found");
    assert_non_null(strstr(err.message, "tiny"));
    assert_int_equal(chat_status_simple("{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &err), 200);
    assert_int_equal(chat_status_simple("{\"model\":\"tiny-alias\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &err), 200);
    assert_int_equal(chat_status_simple("{\"model\":7,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &err), 400);
    g_models.strict = false;
}

static void test_invalid_utf8_and_deep_json_are_400(void **state)
{
    (void)state;
    srv_error err;
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", &err), 400);
    assert_string_equal(err.code, "invalid_utf8");
    /* Overlong encoding of '/' and a UTF-16 surrogate in UTF-8 form. */
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"user\",\"content\":\"\xc0\xaf\"}]}", &err), 400);
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"user\",\"content\":\"\xed\xa0\x80\"}]}", &err), 400);
    /* A lone surrogate written as an escape is refused by the JSON parser. */
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"user\",\"content\":\"\\ud800\"}]}", &err), 400);
    char deep[400];
    size_t n = 0;
    n += (size_t)snprintf(deep + n, sizeof deep - n, "{\"x\":");
    for (int i = 0; i < 100; i++) deep[n++] = '[';
    for (int i = 0; i < 100; i++) deep[n++] = ']';
    deep[n++] = '}';
    deep[n] = '\0';
    assert_int_equal(chat_status_simple(deep, &err), 400);
    assert_string_equal(err.code, "json_too_deep");
    /* Brackets inside strings do not count as depth. */
    assert_int_equal(srv_json_depth("{\"a\":\"[[[[[[\"}", 13, 64), 1);
}

static void test_body_over_the_limit_is_413(void **state)
{
    (void)state;
    srv_limits lim;
    srv_limits_default(&lim);
    lim.max_body_bytes = 16;
    json_t *root = NULL;
    srv_error err;
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"xxxxxxxx\"}]}";
    assert_int_equal(srv_parse_body(body, strlen(body), &lim, &root, &err), -1);
    assert_int_equal(err.status, 413);
    assert_null(root);
}

static void test_too_many_messages_are_refused(void **state)
{
    (void)state;
    srv_limits lim;
    srv_limits_default(&lim);
    lim.max_messages = 2;
    json_t *root = json_loads("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\"},"
                              "{\"role\":\"user\",\"content\":\"c\"}]}", 0, NULL);
    eng_request req;
    srv_resp_opts ro;
    srv_error err;
    assert_int_equal(srv_parse_chat(root, &lim, NULL, &req, &ro, &err), -1);
    assert_int_equal(err.status, 400);
    assert_string_equal(err.code, "too_many_messages");
    json_decref(root);
}

static void test_tools_and_tool_history_are_validated(void **state)
{
    (void)state;
    srv_error err;
    eng_request req;
    srv_resp_opts ro;
    const char *ok =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
        "\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Oslo\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"sunny\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"}}}],"
        "\"tool_choice\":\"auto\"}";
    assert_int_equal(chat_status(ok, &req, &ro, &err), 200);
    assert_non_null(req.tools);
    assert_int_equal(req.tool_choice, ENG_TOOLS_AUTO);
    eng_request_clear(&req);
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"web\"}]}", &err), 400);
    assert_string_equal(err.param, "tools[0]");
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}", &err), 400);
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{}}]}]}", &err), 400);
    /* Assistant without content and without tool calls is refused. */
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"assistant\"}]}", &err), 400);
}

static void test_content_parts_accept_text_and_refuse_images(void **state)
{
    (void)state;
    srv_error err;
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"}]}]}", &err), 200);
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
                                        "\"image_url\":{\"url\":\"x\"}}]}]}", &err), 400);
    assert_string_equal(err.code, "unsupported");
}

static void test_completion_prompt_forms(void **state)
{
    (void)state;
    srv_limits lim;
    srv_limits_default(&lim);
    lim.n_ctx = 8;
    eng_request req;
    srv_resp_opts ro;
    srv_error err;
    json_t *r = json_loads("{\"prompt\":\"hello\",\"max_tokens\":3}", 0, NULL);
    assert_int_equal(srv_parse_completion(r, &lim, NULL, &req, &ro, &err), 0);
    assert_string_equal(req.prompt, "hello");
    assert_int_equal(req.max_tokens, 3);
    eng_request_clear(&req);
    json_decref(r);
    r = json_loads("{\"prompt\":[5,6,7]}", 0, NULL);
    assert_int_equal(srv_parse_completion(r, &lim, NULL, &req, &ro, &err), 0);
    assert_int_equal(req.n_prompt_ids, 3);
    assert_int_equal(req.prompt_ids[2], 7);
    eng_request_clear(&req);
    json_decref(r);
    r = json_loads("{\"prompt\":[1,2,3,4,5,6,7,8,9]}", 0, NULL);
    assert_int_equal(srv_parse_completion(r, &lim, NULL, &req, &ro, &err), -1);
    assert_int_equal(err.status, 400);
    json_decref(r);
    r = json_loads("{\"prompt\":{\"a\":1}}", 0, NULL);
    assert_int_equal(srv_parse_completion(r, &lim, NULL, &req, &ro, &err), -1);
    assert_string_equal(err.param, "prompt");
    json_decref(r);
}

static void test_error_body_has_openai_shape(void **state)
{
    (void)state;
    srv_error err;
    srv_fail(&err, 429, NULL, "queue_full", "too many requests: %d queued", 3);
    json_t *j = srv_error_json(&err, NULL);
    json_t *e = json_object_get(j, "error");
    assert_non_null(e);
    assert_string_equal(json_string_value(json_object_get(e, "message")), "too many requests: 3 queued");
    assert_string_equal(json_string_value(json_object_get(e, "type")), "rate_limit_error");
    assert_string_equal(json_string_value(json_object_get(e, "code")), "queue_full");
    assert_true(json_is_null(json_object_get(e, "param")));
    json_decref(j);
    assert_string_equal(srv_error_type(401), "authentication_error");
    assert_string_equal(srv_error_type(404), "not_found_error");
    assert_string_equal(srv_error_type(500), "server_error");
}

static void test_auth_accepts_only_the_exact_key(void **state)
{
    (void)state;
    assert_true(srv_auth_ok("Bearer sekrit", "sekrit"));
    assert_true(srv_auth_ok("bearer sekrit ", "sekrit"));
    assert_true(srv_auth_ok("sekrit", "sekrit")); /* X-Api-Key style */
    assert_false(srv_auth_ok("Bearer sekri", "sekrit"));
    assert_false(srv_auth_ok("Bearer sekrit2", "sekrit"));
    assert_false(srv_auth_ok("Bearer ", "sekrit"));
    assert_false(srv_auth_ok(NULL, "sekrit"));
    assert_false(srv_auth_ok("Bearer x", ""));
}

static void test_loopback_hosts_are_recognised(void **state)
{
    (void)state;
    assert_true(srv_host_is_loopback("127.0.0.1"));
    assert_true(srv_host_is_loopback("127.1.2.3"));
    assert_true(srv_host_is_loopback("localhost"));
    assert_true(srv_host_is_loopback("::1"));
    assert_false(srv_host_is_loopback("0.0.0.0"));
    assert_false(srv_host_is_loopback("192.168.1.5"));
    assert_false(srv_host_is_loopback("::"));
    assert_false(srv_host_is_loopback("example.com"));
}

/* gzip / deflate / zstd bodies decode; a bomb stops at the cap (413), bad
 * data is 400, an unknown coding 415; codings listed are undone in reverse. */
static void test_compressed_bodies_decode_within_the_cap(void **state)
{
    (void)state;
    char plain[4096];
    for (size_t i = 0; i < sizeof plain; i++) plain[i] = (char)('a' + i % 7);
    unsigned char gz[8192], zs[8192];
    z_stream z = {0};
    assert_int_equal(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
    z.next_in = (Bytef *)plain;
    z.avail_in = sizeof plain;
    z.next_out = gz;
    z.avail_out = sizeof gz;
    assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
    size_t gz_n = z.total_out;
    deflateEnd(&z);
    size_t zs_n = ZSTD_compress(zs, sizeof zs, plain, sizeof plain, 3);
    assert_false(ZSTD_isError(zs_n));
    srv_buf out = {0};
    srv_error err;
    assert_int_equal(srv_body_decode("gzip", (char *)gz, gz_n, 1 << 20, &out, &err), 0);
    assert_int_equal((int)out.len, (int)sizeof plain);
    assert_memory_equal(out.data, plain, sizeof plain);
    srv_buf_free(&out);
    assert_int_equal(srv_body_decode("zstd", (char *)zs, zs_n, 1 << 20, &out, &err), 0);
    assert_memory_equal(out.data, plain, sizeof plain);
    srv_buf_free(&out);
    assert_int_equal(srv_body_decode("identity", plain, 10, 1 << 20, &out, &err), 0);
    assert_int_equal((int)out.len, 10);
    srv_buf_free(&out);
    /* a small input that decodes past the limit */
    assert_int_equal(srv_body_decode("zstd", (char *)zs, zs_n, 1000, &out, &err), -1);
    assert_int_equal(err.status, 413);
    assert_int_equal(srv_body_decode("gzip", (char *)gz, gz_n, 1000, &out, &err), -1);
    assert_int_equal(err.status, 413);
    assert_int_equal(srv_body_decode("gzip", (char *)gz, gz_n / 2, 1 << 20, &out, &err), -1);
    assert_int_equal(err.status, 400);
    assert_int_equal(srv_body_decode("zstd", (char *)zs, zs_n - 3, 1 << 20, &out, &err), -1);
    assert_int_equal(err.status, 400);
    assert_int_equal(srv_body_decode("br", plain, 10, 1 << 20, &out, &err), -1);
    assert_int_equal(err.status, 415);
    assert_non_null(strstr(err.message, "'br'"));
    /* "gzip, zstd": zstd was applied last, so it is undone first */
    unsigned char both[8192];
    size_t both_n = ZSTD_compress(both, sizeof both, gz, gz_n, 3);
    assert_int_equal(srv_body_decode("gzip, zstd", (char *)both, both_n, 1 << 20, &out, &err), 0);
    assert_memory_equal(out.data, plain, sizeof plain);
    srv_buf_free(&out);
}

static int schema_status(const char *schema_text, srv_error *err)
{
    json_t *s = json_loads(schema_text, 0, NULL);
    assert_non_null(s);
    int rc = srv_check_json_schema(s, "response_format.json_schema.schema", err);
    json_decref(s);
    return rc;
}

static void test_json_schema_check_refuses_malformed_schemas(void **state)
{
    (void)state;
    srv_error err;
    assert_int_equal(schema_status("{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"type\":\"object\","
                                   "\"properties\":{\"a\":{\"type\":[\"string\",\"null\"]},\"b\":{\"$ref\":\"#/$defs/b\"},"
                                   "\"c\":{\"anyOf\":[{\"type\":\"integer\"},true]}},\"required\":[\"a\"],"
                                   "\"additionalProperties\":false,\"$defs\":{\"b\":{\"enum\":[1,\"x\"]}}}", &err), 0);
    assert_int_equal(schema_status("{\"type\":\"objekt\"}", &err), -1);
    assert_int_equal(err.status, 400);
    assert_string_equal(err.code, "invalid_schema");
    assert_int_equal(schema_status("{\"properties\":{\"a\":3}}", &err), -1);
    assert_non_null(strstr(err.message, "response_format.json_schema.schema.properties.a:"));
    assert_int_equal(schema_status("{\"required\":\"a\"}", &err), -1);
    assert_int_equal(schema_status("{\"$ref\":\"#/$defs/missing\"}", &err), -1);
    assert_non_null(strstr(err.message, "does not resolve"));
    assert_int_equal(schema_status("{\"$ref\":\"https://example.com/s.json\"}", &err), -1);
    assert_int_equal(schema_status("{\"anyOf\":[]}", &err), -1);
    assert_int_equal(schema_status("{\"items\":{\"type\":\"string\"},\"enum\":5}", &err), -1);
    /* nesting is capped */
    char deep[2048] = "";
    for (int i = 0; i < 70; i++) strcat(deep, "{\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 70; i++) strcat(deep, "}");
    assert_int_equal(schema_status(deep, &err), -1);
    assert_non_null(strstr(err.message, "deeply"));
}

/* Client text quoted in an error cannot break it into lines. */
static void test_error_messages_stay_one_line(void **state)
{
    (void)state;
    srv_error err;
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"us\\ner\\u0001\",\"content\":\"x\"}]}", &err), 400);
    assert_null(strchr(err.message, '\n'));
    assert_non_null(strstr(err.message, "'us\\ner\\x01'"));
}

/* A forced tool must be offered; a forced call's schema is checked; the
 * constraint and its schema reach eng_request. */
static void test_constraints_are_validated_and_carried(void **state)
{
    (void)state;
    eng_request req;
    srv_resp_opts ro;
    srv_error err;
    const char *tools = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}]";
    char body[1024];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,\"tool_choice\":\"required\"}", tools);
    assert_int_equal(chat_status(body, &req, &ro, &err), 200);
    assert_int_equal(req.tool_choice, ENG_TOOLS_REQUIRED);
    eng_request_clear(&req);
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,"
             "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}},\"parallel_tool_calls\":false}", tools);
    assert_int_equal(chat_status(body, &req, &ro, &err), 200);
    assert_int_equal(req.tool_choice, ENG_TOOLS_FUNCTION);
    assert_string_equal(req.tool_choice_name, "f");
    assert_false(req.parallel_tool_calls);
    eng_request_clear(&req);
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,"
             "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}", tools);
    assert_int_equal(chat_status_simple(body, &err), 400);
    assert_string_equal(err.param, "tool_choice.function.name");
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\","
                                        "\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"bogus\"}}}],\"tool_choice\":\"required\"}", &err), 400);
    assert_string_equal(err.code, "invalid_schema");
    assert_int_equal(chat_status("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\"}}",
                                 &req, &ro, &err), 200);
    assert_int_equal(req.response_format, ENG_FORMAT_JSON_OBJECT);
    eng_request_clear(&req);
    assert_int_equal(chat_status("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\","
                                 "\"json_schema\":{\"name\":\"r\",\"strict\":true,\"schema\":{\"type\":\"object\"}}}}", &req, &ro, &err), 200);
    assert_int_equal(req.response_format, ENG_FORMAT_JSON_SCHEMA);
    assert_true(json_is_object(req.json_schema));
    assert_true(req.json_schema_strict);
    assert_string_equal(req.json_schema_name, "r");
    eng_request_clear(&req);
    assert_int_equal(chat_status_simple("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"yaml\"}}", &err), 400);
    /* max_tokens beyond the context is not refused: the engine clamps it */
    assert_int_equal(chat_status("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":100000}", &req, &ro, &err), 200);
    assert_int_equal(req.max_tokens, 100000);
    eng_request_clear(&req);
}

static void test_context_overflow_error_uses_openai_words(void **state)
{
    (void)state;
    srv_error err;
    srv_fail_context(&err, 4096, 5000);
    json_t *j = srv_error_json(&err, NULL);
    json_t *e = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(e, "code")), "context_length_exceeded");
    assert_string_equal(json_string_value(json_object_get(e, "type")), "invalid_request_error");
    assert_string_equal(json_string_value(json_object_get(e, "message")),
                        "This model's maximum context length is 4096 tokens. However, your messages resulted in 5000 tokens. "
                        "Please reduce the length of the messages.");
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_chat_request_fills_sampling_stop_and_limits),
        cmocka_unit_test(test_max_completion_tokens_wins_over_max_tokens),
        cmocka_unit_test(test_malformed_json_is_400_with_position),
        cmocka_unit_test(test_wrong_types_name_the_field),
        cmocka_unit_test(test_out_of_range_values_are_refused),
        cmocka_unit_test(test_other_model_names_are_answered_unless_strict),
        cmocka_unit_test(test_invalid_utf8_and_deep_json_are_400),
        cmocka_unit_test(test_body_over_the_limit_is_413),
        cmocka_unit_test(test_too_many_messages_are_refused),
        cmocka_unit_test(test_tools_and_tool_history_are_validated),
        cmocka_unit_test(test_content_parts_accept_text_and_refuse_images),
        cmocka_unit_test(test_completion_prompt_forms),
        cmocka_unit_test(test_error_body_has_openai_shape),
        cmocka_unit_test(test_auth_accepts_only_the_exact_key),
        cmocka_unit_test(test_loopback_hosts_are_recognised),
        cmocka_unit_test(test_compressed_bodies_decode_within_the_cap),
        cmocka_unit_test(test_json_schema_check_refuses_malformed_schemas),
        cmocka_unit_test(test_error_messages_stay_one_line),
        cmocka_unit_test(test_constraints_are_validated_and_carried),
        cmocka_unit_test(test_context_overflow_error_uses_openai_words),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
