/* Tool-call grammars in the two formats of wick's templates (the layout
 * the templates render in history, which is what chat_parse.c reads back). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "engine/grammar_tools.h"
#include "engine/json_schema_impl.h"

typedef struct tool {
    const char *name;
    const json_t *params; /* NULL: no parameters */
} tool;

static const char *const HERMES_WORDS[] = {"</tool_call>"};
static const char *const XML_WORDS[] = {"</parameter>", "</tool_call>"};

/* A tools array entry: OpenAI {"type":"function","function":{...}} or
 * Anthropic {"name", "input_schema"}. */
static int read_tool(const json_t *entry, size_t i, tool *out, wk_error *err)
{
    if (!json_is_object(entry)) return wk_fail(err, WK_EINVAL, "tools[%zu]: must be an object", i);
    const json_t *fn = json_object_get(entry, "function");
    if (fn && !json_is_object(fn)) return wk_fail(err, WK_EINVAL, "tools[%zu].function: must be an object", i);
    if (!fn) fn = entry;
    const json_t *name = json_object_get(fn, "name");
    if (!json_is_string(name) || json_string_length(name) == 0)
        return wk_fail(err, WK_EINVAL, "tools[%zu]: name must be a non-empty string", i);
    const json_t *params = json_object_get(fn, "parameters");
    if (!params) params = json_object_get(fn, "input_schema");
    if (params && !json_is_object(params) && !json_is_true(params))
        return wk_fail(err, WK_EINVAL, "tools[%zu] (%s): parameters must be a JSON schema object", i, json_string_value(name));
    out->name = json_string_value(name);
    out->params = json_is_object(params) ? params : NULL;
    return 0;
}

/* Arguments schema as an object schema (the parser only takes objects),
 * appended to keep: memo keys name the document by its address, so every
 * tool's copy lives until the grammar is written. */
static json_t *as_object_schema(js_ctx *c, const json_t *params, const char *name, json_t *keep)
{
    json_t *copy;
    if (!params) {
        copy = json_pack("{s:s, s:b}", "type", "object", "additionalProperties", 0);
    } else {
        const json_t *type = json_object_get(params, "type");
        if (type) {
            bool object = json_is_string(type) && !strcmp(json_string_value(type), "object");
            size_t i;
            const json_t *t;
            json_array_foreach(type, i, t) object = object || (json_is_string(t) && !strcmp(json_string_value(t), "object"));
            if (!object) {
                js_fail(c, WK_EINVAL, "tool %s: parameters must describe an object", name);
                return NULL;
            }
        }
        copy = json_copy((json_t *)params);
        bool combinator = json_object_get(params, "$ref") || json_object_get(params, "anyOf") ||
                          json_object_get(params, "oneOf") || json_object_get(params, "allOf");
        if (copy && !combinator && json_object_set_new(copy, "type", json_string("object"))) {
            json_decref(copy);
            copy = NULL;
        }
    }
    if (!copy || json_array_append_new(keep, copy)) {
        js_fail(c, WK_ENOMEM, "out of memory");
        return NULL;
    }
    return copy;
}

/* Hermes: "NAME", "arguments": ARGS  (the part after {"name": ). */
static const char *hermes_tool(js_ctx *c, const tool *t, json_t *keep)
{
    json_t *schema = as_object_schema(c, t->params, t->name, keep);
    if (!schema) return NULL;
    c->root = schema;
    const char *args = js_schema(c, schema, JS_JSON);
    c->root = NULL;
    if (!args) return NULL;
    json_t *name = json_string(t->name);
    char *name_json = name ? json_dumps(name, JSON_ENCODE_ANY) : NULL;
    json_decref(name);
    if (!name_json) return js_fail(c, WK_ENOMEM, "out of memory");
    const char *r = NULL;
    if (js_has_word(c, name_json, strlen(name_json))) {
        js_fail(c, WK_EINVAL, "tool name %s contains the tool-call end marker", name_json);
    } else {
        gram_buf b = {0};
        gram_buf_literal(&b, name_json, strlen(name_json));
        gram_buf_puts(&b, " \", \\\"arguments\\\": \" ");
        gram_buf_puts(&b, args);
        r = js_rule(c, "call", &b);
        gram_buf_free(&b);
    }
    free(name_json);
    return r;
}

/* XML: NAME>\n then the parameters. */
static const char *xml_tool(js_ctx *c, const tool *t)
{
    size_t nl = strlen(t->name);
    if (strchr(t->name, '>') || strchr(t->name, '\n') || strchr(" \t\r", t->name[0]) || strchr(" \t\r", t->name[nl - 1]))
        return js_fail(c, WK_EINVAL, "tool name \"%s\" cannot be written in the XML tool-call format", t->name);
    const json_t *p = t->params;
    const json_t *props = json_object_get(p, "properties"), *req = json_object_get(p, "required");
    const json_t *type = json_object_get(p, "type");
    if (p) {
        static const char *const allowed[] = {"type", "properties", "required", "additionalProperties", "$defs",
                                              "definitions", "$schema", "title", "description", "$comment",
                                              "$id", "default", "examples", "strict"};
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)p, k, v) {
            bool ok = false;
            for (size_t i = 0; i < sizeof allowed / sizeof allowed[0] && !ok; i++) ok = !strcmp(k, allowed[i]);
            if (!ok)
                return js_fail(c, WK_EUNSUPPORTED, "tool %s: parameters keyword '%s' in the XML tool-call format",
                               t->name, k);
        }
        if (type && !(json_is_string(type) && !strcmp(json_string_value(type), "object")))
            return js_fail(c, WK_EINVAL, "tool %s: parameters must describe an object", t->name);
        if ((props && !json_is_object(props)) || (req && !json_is_array(req)))
            return js_fail(c, WK_EINVAL, "tool %s: properties must be an object, required an array", t->name);
    }
    c->root = p;
    /* parameters: declared ones, then required ones not declared (any JSON) */
    size_t n = json_object_size(props) + json_array_size(req);
    const char **keys = calloc(n ? n : 1, sizeof *keys);
    const json_t **schemas = calloc(n ? n : 1, sizeof *schemas);
    if (!keys || !schemas) {
        free(keys);
        free(schemas);
        return js_fail(c, WK_ENOMEM, "out of memory");
    }
    size_t m = 0;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)props, k, v) {
        keys[m] = k;
        schemas[m++] = v;
    }
    size_t i;
    json_array_foreach(req, i, v) {
        if (json_is_string(v) && !json_object_get(props, json_string_value(v))) {
            keys[m] = json_string_value(v);
            schemas[m++] = json_true();
        }
    }
    const char *next = NULL, *r = NULL;
    gram_buf b = {0};
    for (size_t j = m; j-- > 0;) {
        if (strchr(keys[j], '>')) {
            js_fail(c, WK_EINVAL, "tool %s: parameter name \"%s\" cannot be written in the XML tool-call format", t->name,
                    keys[j]);
            goto done;
        }
        bool raw = chat_type_allows_string(json_object_get(schemas[j], "type"));
        const char *val = js_schema(c, schemas[j], raw ? JS_RAW : JS_JSON);
        if (!val) goto done;
        if (!*val) {
            js_fail(c, WK_EINVAL, "tool %s: parameter %s is typed string but no string fits its schema", t->name, keys[j]);
            goto done;
        }
        b.len = 0;
        char *open = malloc(strlen(keys[j]) + 16);
        if (!open) {
            js_fail(c, WK_ENOMEM, "out of memory");
            goto done;
        }
        /* the value with its end marker is one rule, shared by parameters
         * of the same schema: masks inside it are then shared too */
        gram_buf_printf(&b, "%s \"\\n</parameter>\\n\"", val);
        const char *value = js_rule(c, "value", &b);
        b.len = 0;
        sprintf(open, "<parameter=%s>\n", keys[j]);
        gram_buf_literal(&b, open, strlen(open));
        free(open);
        if (value) gram_buf_printf(&b, " %s", value);
        const char *param = value ? js_rule(c, "param", &b) : NULL;
        if (!param) goto done;
        b.len = 0;
        bool required = js_listed(req, keys[j]);
        gram_buf_printf(&b, "%s%s%s%s", param, required ? "" : "?", next ? " " : "", next ? next : "");
        next = js_rule(c, "params", &b);
        if (!next) goto done;
    }
    b.len = 0;
    char *head = malloc(nl + 3);
    if (!head) {
        js_fail(c, WK_ENOMEM, "out of memory");
        goto done;
    }
    sprintf(head, "%s>\n", t->name);
    gram_buf_literal(&b, head, strlen(head));
    free(head);
    if (next) gram_buf_printf(&b, " %s", next);
    r = js_rule(c, "call", &b);
done:
    gram_buf_free(&b);
    free(keys);
    free(schemas);
    c->root = NULL;
    return r;
}

int gram_tools_gbnf(const json_t *tools, chat_tool_format format, const char *name, bool parallel,
                    enum gram_reasoning reasoning, char **gbnf, wk_error *err)
{
    *gbnf = NULL;
    if (format != CHAT_TOOLS_HERMES && format != CHAT_TOOLS_QWEN_XML)
        return wk_fail(err, WK_EUNSUPPORTED, "tool calls: the chat template has no tool-call format");
    if (!json_is_array(tools) || json_array_size(tools) == 0)
        return wk_fail(err, WK_EINVAL, "tool calls: no tools to call");
    js_ctx c;
    js_init(&c, NULL, err);
    bool xml = format == CHAT_TOOLS_QWEN_XML;
    c.n_words = xml ? 2 : 1;
    for (size_t w = 0; w < c.n_words; w++) c.words[w] = xml ? XML_WORDS[w] : HERMES_WORDS[w];
    gram_buf alts = {0};
    json_t *keep = json_array();
    size_t n_used = 0;
    int rc = keep ? 0 : wk_fail(err, WK_ENOMEM, "tool calls: out of memory");
    for (size_t i = 0; i < json_array_size(tools) && !rc; i++) {
        tool t = {0};
        if ((rc = read_tool(json_array_get(tools, i), i, &t, err))) break;
        if (name && strcmp(name, t.name)) continue;
        char seg[64];
        snprintf(seg, sizeof seg, "tools/%zu/parameters", i);
        size_t old = c.path_len;
        snprintf(c.path, sizeof c.path, "#/%s", seg);
        c.path_len = strlen(c.path);
        const char *r = xml ? xml_tool(&c, &t) : hermes_tool(&c, &t, keep);
        c.path_len = old;
        c.path[old] = 0;
        if (!r) {
            rc = c.rc ? c.rc : WK_ENOMEM;
            break;
        }
        gram_buf_printf(&alts, "%s%s", n_used ? " | " : "", r);
        n_used++;
        if (name) break; /* the first tool of that name */
    }
    if (!rc && n_used == 0) rc = wk_fail(err, WK_EINVAL, "tool_choice names function '%s', which is not among the tools", name);
    if (!rc) {
        gram_buf b = {0};
        if (xml) gram_buf_printf(&b, "<tool_call> \"\\n<function=\" ( %s ) \"</function>\\n\" </tool_call>", alts.s);
        else gram_buf_printf(&b, "<tool_call> \"\\n{\\\"name\\\": \" ( %s ) \"}\\n\" </tool_call>", alts.s);
        const char *call = js_rule(&c, "tool-call", &b);
        b.len = 0;
        const char *ws = js_common(&c, JS_WS);
        if (call && ws) {
            if (name || !parallel) gram_buf_puts(&b, call);
            else gram_buf_printf(&b, "%s ( %s %s )*", call, ws, call);
        }
        const char *body = call && ws ? js_rule(&c, "calls", &b) : NULL;
        gram_buf_free(&b);
        static const char *const reasoning_words[] = {"<tool_call>"};
        rc = js_finish(&c, body, reasoning, reasoning_words, 1, gbnf);
    }
    gram_buf_free(&alts);
    js_free(&c);
    json_decref(keep);
    if (rc) gram_error_one_line(err);
    return rc;
}

int gram_for_tools(gram_grammar **out, const json_t *tools, chat_tool_format format, const char *name, bool parallel,
                   enum gram_reasoning reasoning, wk_error *err)
{
    *out = NULL;
    char *gbnf;
    int rc = gram_tools_gbnf(tools, format, name, parallel, reasoning, &gbnf, err);
    return rc ? rc : js_compile(out, gbnf, "tool calls", err);
}
