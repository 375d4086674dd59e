/* Incremental split of model output into reasoning, content and tool calls.
 *
 * The parser keeps a buffer of undecided text for the mode it is in:
 *   START      output begins; a <think> here (after whitespace) opens reasoning
 *   REASONING  until </think> (or a <tool_call>, which also ends reasoning)
 *   CONTENT    until a tool-call marker
 *   TOOL       a tool call being collected until its end marker
 * Whatever cannot be the beginning of a marker is emitted at once; a suffix
 * that could still become one is held back. Whitespace right after <think>,
 * </think> and a tool call, and right before </think> or a tool call, is
 * dropped (the templates strip it when they re-render the turn). */
#include <stdlib.h>
#include <string.h>

#include "chat/chat_internal.h"

enum parse_mode { P_START, P_REASONING, P_CONTENT, P_TOOL };

/* Tool text longer than this without an end marker is not a tool call. */
#define TOOL_CALL_MAX_BYTES (4u << 20)

struct chat_parser {
    chat_parse_options opt;
    enum parse_mode mode;
    chat_str buf;      /* undecided text of the current mode */
    bool skip_ws;      /* drop leading whitespace of the current mode */
    bool tool_bare;    /* TOOL opened by "<function=" without "<tool_call>" */
    chat_str ws_before; /* whitespace dropped before a tool marker, restored if no call */
    size_t n_calls;    /* calls emitted so far (for ids) */
    chat_str hold_content, hold_reasoning; /* incomplete UTF-8 at the end of emitted text */
};

static const char M_THINK_OPEN[] = "<think>";
static const char M_THINK_CLOSE[] = "</think>";
static const char M_CALL_OPEN[] = "<tool_call>";
static const char M_CALL_CLOSE[] = "</tool_call>";
static const char M_FUNC_OPEN[] = "<function=";
static const char M_FUNC_CLOSE[] = "</function>";

/* ------------------------------------------------------------------ delta */

void chat_delta_clear(chat_delta *d)
{
    d->content.len = 0;
    if (d->content.data) d->content.data[0] = 0;
    d->reasoning.len = 0;
    if (d->reasoning.data) d->reasoning.data[0] = 0;
    for (size_t i = 0; i < d->n_calls; i++) {
        free(d->calls[i].name);
        free(d->calls[i].arguments);
    }
    d->n_calls = 0;
}

void chat_delta_free(chat_delta *d)
{
    chat_delta_clear(d);
    cs_free(&d->content);
    cs_free(&d->reasoning);
    free(d->calls);
    memset(d, 0, sizeof *d);
}

void chat_parse_options_from_prompt(chat_parse_options *opt, const chat_prompt *prompt)
{
    memset(opt, 0, sizeof *opt);
    opt->reasoning_open = prompt->reasoning_open;
    opt->parse_reasoning = prompt->thinking_enabled || prompt->reasoning_open;
    opt->tool_format = prompt->tool_format;
}

/* -------------------------------------------------------------- helpers */

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* Bytes at the end of s[0..n) that start a UTF-8 sequence not yet complete. */
static size_t utf8_incomplete_tail(const char *s, size_t n)
{
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char c = (unsigned char)s[n - k];
        if ((c & 0xC0) == 0x80) continue; /* continuation byte: look further back */
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > k ? k : 0;
    }
    return 0;
}

/* Appends text to a delta channel, keeping an incomplete trailing UTF-8
 * sequence in hold until its remaining bytes arrive (or flush). */
static int emit(chat_str *dst, chat_str *hold, const char *s, size_t n, bool flush)
{
    if (!n && !(flush && hold->len)) return 0;
    int rc = cs_append(hold, s, n);
    if (rc) return rc;
    size_t keep = flush ? 0 : utf8_incomplete_tail(hold->data, hold->len);
    rc = cs_append(dst, hold->data, hold->len - keep);
    memmove(hold->data, hold->data + hold->len - keep, keep);
    hold->len = keep;
    hold->data[keep] = 0;
    return rc;
}

static int emit_content(chat_parser *p, chat_delta *out, const char *s, size_t n)
{
    return emit(&out->content, &p->hold_content, s, n, false);
}

static int emit_reasoning(chat_parser *p, chat_delta *out, const char *s, size_t n)
{
    return emit(&out->reasoning, &p->hold_reasoning, s, n, false);
}

static void buf_consume(chat_str *b, size_t n)
{
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = 0;
}

/* Earliest occurrence of any marker in s[0..n): position, and which. */
static bool find_marker(const char *s, size_t n, const char *const *markers, size_t n_markers, size_t *pos,
                        size_t *which)
{
    bool found = false;
    for (size_t m = 0; m < n_markers; m++) {
        const char *hit = memmem(s, n, markers[m], strlen(markers[m]));
        if (hit && (!found || (size_t)(hit - s) < *pos)) {
            *pos = (size_t)(hit - s);
            *which = m;
            found = true;
        }
    }
    return found;
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of a marker. */
static size_t marker_prefix_tail(const char *s, size_t n, const char *const *markers, size_t n_markers)
{
    size_t best = 0;
    for (size_t m = 0; m < n_markers; m++) {
        size_t ml = strlen(markers[m]);
        for (size_t k = ml - 1 < n ? ml - 1 : n; k > best; k--) {
            if (!memcmp(s + n - k, markers[m], k)) {
                best = k;
                break;
            }
        }
    }
    return best;
}

static void make_call_id(char id[32], uint64_t seed, size_t index)
{
    static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    uint64_t x = seed ^ (0x9E3779B97F4A7C15ull * (index + 1));
    memcpy(id, "call_", 5);
    for (int i = 0; i < 24; i++) {
        /* splitmix64 step: cheap, well-mixed, deterministic */
        x += 0x9E3779B97F4A7C15ull;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        id[5 + i] = alnum[z % (sizeof alnum - 1)];
    }
    id[29] = 0;
}

static int add_call(chat_parser *p, chat_delta *out, const char *name, size_t name_len, char *arguments)
{
    if (out->n_calls == out->cap_calls) {
        size_t cap = out->cap_calls ? out->cap_calls * 2 : 4;
        chat_tool_call *c = realloc(out->calls, cap * sizeof *c);
        if (!c) { free(arguments); return WK_ENOMEM; }
        out->calls = c;
        out->cap_calls = cap;
    }
    chat_tool_call *c = &out->calls[out->n_calls];
    c->name = strndup(name, name_len);
    if (!c->name) { free(arguments); return WK_ENOMEM; }
    c->arguments = arguments;
    make_call_id(c->id, p->opt.id_seed, p->n_calls);
    out->n_calls++;
    p->n_calls++;
    return 0;
}

/* ------------------------------------------------------- tool-call bodies */

/* Hermes body: {"name": "...", "arguments": {...}} (whitespace around).
 * Arguments are returned as the exact JSON text the model wrote, so the
 * turn re-renders to the same bytes. 1 = parsed, 0 = not a tool call. */
static int parse_hermes(chat_parser *p, chat_delta *out, const char *s, size_t n)
{
    wk_error scratch;
    size_t b = 0, e = n;
    while (b < e && is_ws(s[b])) b++;
    while (e > b && is_ws(s[e - 1])) e--;
    json_t *obj = chat_json_loads(s + b, e - b, &scratch);
    int result = 0;
    if (!json_is_object(obj)) goto done;
    const json_t *name = json_object_get(obj, "name");
    if (!json_is_string(name) || json_string_length(name) == 0) goto done;
    const char *key = json_object_get(obj, "arguments") ? "arguments" : "parameters";
    const json_t *args = json_object_get(obj, key);
    char *arguments = NULL;
    if (!args) {
        arguments = strdup("{}");
    } else if (json_is_object(args)) {
        size_t vb, ve;
        if (chat_json_member_span(s + b, e - b, key, &vb, &ve)) goto done;
        arguments = strndup(s + b + vb, ve - vb);
    } else if (json_is_string(args)) {
        /* arguments written as a JSON string holding the object */
        json_t *inner = chat_json_loads(json_string_value(args), json_string_length(args), &scratch);
        bool ok = json_is_object(inner);
        json_decref(inner);
        if (!ok) goto done;
        arguments = strndup(json_string_value(args), json_string_length(args));
    } else {
        goto done;
    }
    if (!arguments) { result = WK_ENOMEM; goto done; }
    result = add_call(p, out, json_string_value(name), json_string_length(name), arguments);
    if (result == 0) result = 1;
done:
    json_decref(obj);
    return result;
}

/* Declared JSON-schema type of a parameter of the named tool, or NULL. */
static const json_t *param_type(const json_t *tools, const char *fn, size_t fn_len, const char *param)
{
    size_t i;
    const json_t *tool;
    json_array_foreach(tools, i, tool) {
        const json_t *f = json_object_get(tool, "function");
        const json_t *name = json_object_get(f, "name");
        if (!json_is_string(name) || json_string_length(name) != fn_len || memcmp(json_string_value(name), fn, fn_len))
            continue;
        return json_object_get(json_object_get(json_object_get(json_object_get(f, "parameters"), "properties"), param),
                               "type");
    }
    return NULL;
}

static bool starts(const char *s, size_t n, const char *m) { return n >= strlen(m) && !memcmp(s, m, strlen(m)); }

/* XML body: <function=NAME>\n(<parameter=P>\nVALUE\n</parameter>\n)*</function>.
 * Values are kept as strings when the tool's schema says string, else
 * taken as JSON when they parse as JSON. 1 = parsed, 0 = not a tool call. */
static int parse_xml(chat_parser *p, chat_delta *out, const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && is_ws(s[i])) i++;
    if (!starts(s + i, n - i, M_FUNC_OPEN)) return 0;
    i += strlen(M_FUNC_OPEN);
    const char *gt = memchr(s + i, '>', n - i);
    if (!gt) return 0;
    size_t nb = i, ne = (size_t)(gt - s);
    while (nb < ne && is_ws(s[nb])) nb++;
    while (ne > nb && is_ws(s[ne - 1])) ne--;
    if (ne == nb || memchr(s + nb, '\n', ne - nb)) return 0;
    i = (size_t)(gt - s) + 1;

    json_t *args = json_object();
    if (!args) return WK_ENOMEM;
    int result = 0;
    for (;;) {
        while (i < n && is_ws(s[i])) i++;
        if (starts(s + i, n - i, M_FUNC_CLOSE)) {
            i += strlen(M_FUNC_CLOSE);
            break;
        }
        if (!starts(s + i, n - i, "<parameter=")) goto done;
        i += strlen("<parameter=");
        const char *pgt = memchr(s + i, '>', n - i);
        if (!pgt) goto done;
        char *pname = strndup(s + i, (size_t)(pgt - s) - i);
        if (!pname) { result = WK_ENOMEM; goto done; }
        i = (size_t)(pgt - s) + 1;
        const char *close = memmem(s + i, n - i, "</parameter>", 12);
        if (!close) { free(pname); goto done; }
        size_t vb = i, ve = (size_t)(close - s);
        if (vb < ve && s[vb] == '\n') vb++;
        if (ve > vb && s[ve - 1] == '\n') ve--;
        i = (size_t)(close - s) + 12;
        json_t *val = NULL;
        wk_error scratch;
        if (!chat_type_allows_string(param_type(p->opt.tools, s + nb, ne - nb, pname)))
            val = chat_json_loads(s + vb, ve - vb, &scratch);
        if (!val) val = json_stringn(s + vb, ve - vb);
        int rc = val ? json_object_set_new(args, pname, val) : -1;
        free(pname);
        if (rc) goto done; /* invalid UTF-8 value or name: not a call */
    }
    while (i < n && is_ws(s[i])) i++;
    if (i != n) goto done;
    chat_str text = {0};
    if (chat_tojson(&text, args)) { cs_free(&text); result = WK_ENOMEM; goto done; }
    result = add_call(p, out, s + nb, ne - nb, text.data);
    if (result == 0) result = 1;
done:
    json_decref(args);
    return result;
}

/* A complete tool-call text (markers included): structured call, or the
 * same text back as content when it does not parse. */
static int finish_tool(chat_parser *p, chat_delta *out, const char *raw, size_t n)
{
    int r;
    if (p->tool_bare) {
        r = parse_xml(p, out, raw, n);
    } else {
        const char *body = raw + strlen(M_CALL_OPEN);
        size_t body_len = n - strlen(M_CALL_OPEN) - strlen(M_CALL_CLOSE);
        r = p->opt.tool_format == CHAT_TOOLS_QWEN_XML ? parse_xml(p, out, body, body_len)
                                                      : parse_hermes(p, out, body, body_len);
        /* a model may use the other family's syntax; accept both */
        if (r == 0)
            r = p->opt.tool_format == CHAT_TOOLS_QWEN_XML ? parse_hermes(p, out, body, body_len)
                                                          : parse_xml(p, out, body, body_len);
    }
    if (r < 0) return r;
    if (r == 0) {
        int rc = emit_content(p, out, p->ws_before.data, p->ws_before.len);
        return rc ? rc : emit_content(p, out, raw, n);
    }
    return 0;
}

/* ---------------------------------------------------------------- driver */

/* Emits buf[0..upto) to the channel of mode, consuming it. trim_ws drops
 * trailing whitespace of that part (before a marker). */
static int emit_part(chat_parser *p, chat_delta *out, size_t upto, bool trim_ws)
{
    size_t e = upto;
    if (trim_ws) while (e > 0 && is_ws(p->buf.data[e - 1])) e--;
    p->ws_before.len = 0;
    if (cs_append(&p->ws_before, p->buf.data + e, upto - e)) return WK_ENOMEM;
    int rc = p->mode == P_REASONING ? emit_reasoning(p, out, p->buf.data, e) : emit_content(p, out, p->buf.data, e);
    buf_consume(&p->buf, upto);
    return rc;
}

static int process(chat_parser *p, chat_delta *out, bool final)
{
    const char *think_markers[] = {M_THINK_CLOSE, M_CALL_OPEN};
    const char *content_markers[] = {M_CALL_OPEN, M_FUNC_OPEN};
    bool tools = p->opt.tool_format != CHAT_TOOLS_NONE;
    size_t n_content_markers = !tools ? 0 : p->opt.tool_format == CHAT_TOOLS_QWEN_XML ? 2 : 1;
    int rc = 0;

    for (;;) {
        if (p->skip_ws && p->mode != P_START && p->mode != P_TOOL) {
            size_t k = 0;
            while (k < p->buf.len && is_ws(p->buf.data[k])) k++;
            buf_consume(&p->buf, k);
            if (p->buf.len == 0) return 0;
            p->skip_ws = false;
        }
        char *s = p->buf.data;
        size_t n = p->buf.len;
        if (n == 0) return 0;
        switch (p->mode) {
        case P_START: {
            size_t k = 0;
            while (k < n && is_ws(s[k])) k++;
            size_t ol = strlen(M_THINK_OPEN);
            if (n - k >= ol && !memcmp(s + k, M_THINK_OPEN, ol)) {
                buf_consume(&p->buf, k + ol);
                p->mode = P_REASONING;
                p->skip_ws = true;
                continue;
            }
            if (!final && n - k < ol && !memcmp(s + k, M_THINK_OPEN, n - k)) return 0; /* may be <think> */
            p->mode = P_CONTENT;
            continue;
        }
        case P_REASONING:
        case P_CONTENT: {
            const char *const *markers = p->mode == P_REASONING ? think_markers : content_markers;
            size_t n_markers = p->mode == P_REASONING ? (tools ? 2 : 1) : n_content_markers;
            size_t pos = 0, which = 0;
            if (n_markers && find_marker(s, n, markers, n_markers, &pos, &which)) {
                if ((rc = emit_part(p, out, pos, true))) return rc;
                if (p->mode == P_REASONING && which == 0) { /* </think> */
                    buf_consume(&p->buf, strlen(M_THINK_CLOSE));
                    p->mode = P_CONTENT;
                    p->skip_ws = true;
                } else if (p->mode == P_REASONING) { /* <tool_call> ends reasoning */
                    p->mode = P_CONTENT;
                } else {
                    p->mode = P_TOOL;
                    p->tool_bare = markers[which] == M_FUNC_OPEN;
                }
                continue;
            }
            if (final) return emit_part(p, out, n, false);
            size_t hold = marker_prefix_tail(s, n, markers, n_markers);
            /* whitespace just before a possible marker may have to be dropped */
            if (n_markers) while (hold < n && is_ws(s[n - hold - 1])) hold++;
            return emit_part(p, out, n - hold, false);
        }
        case P_TOOL: {
            const char *end = p->tool_bare ? M_FUNC_CLOSE : M_CALL_CLOSE;
            size_t start = strlen(p->tool_bare ? M_FUNC_OPEN : M_CALL_OPEN);
            const char *hit = memmem(s + start, n - start, end, strlen(end));
            if (hit) {
                size_t len = (size_t)(hit - s) + strlen(end);
                size_t calls_before = out->n_calls;
                if ((rc = finish_tool(p, out, s, len))) return rc;
                buf_consume(&p->buf, len);
                p->mode = P_CONTENT;
                p->skip_ws = out->n_calls > calls_before; /* keep the text as it was if no call */
                continue;
            }
            if (final || n > TOOL_CALL_MAX_BYTES) {
                /* never closed: it was text after all */
                rc = emit_content(p, out, p->ws_before.data, p->ws_before.len);
                if (!rc) rc = emit_content(p, out, s, n);
                buf_consume(&p->buf, n);
                p->mode = P_CONTENT;
                if (rc || final) return rc;
                continue;
            }
            return 0;
        }
        }
    }
}

int chat_parser_new(chat_parser **out, const chat_parse_options *opt, wk_error *err)
{
    chat_parser *p = calloc(1, sizeof *p);
    if (!p) return wk_fail(err, WK_ENOMEM, "chat parser: out of memory");
    p->opt = *opt;
    if (opt->reasoning_open) {
        p->mode = P_REASONING;
        p->skip_ws = true;
    } else {
        p->mode = opt->parse_reasoning ? P_START : P_CONTENT;
    }
    *out = p;
    return 0;
}

void chat_parser_free(chat_parser *p)
{
    if (!p) return;
    cs_free(&p->buf);
    cs_free(&p->ws_before);
    cs_free(&p->hold_content);
    cs_free(&p->hold_reasoning);
    free(p);
}

int chat_parser_feed(chat_parser *p, const char *text, size_t len, chat_delta *out, wk_error *err)
{
    chat_delta_clear(out);
    if (cs_append(&p->buf, text, len)) return wk_fail(err, WK_ENOMEM, "chat parser: out of memory");
    int rc = process(p, out, false);
    if (rc) return wk_fail(err, rc, "chat parser: out of memory");
    return 0;
}

int chat_parser_finish(chat_parser *p, chat_delta *out, wk_error *err)
{
    chat_delta_clear(out);
    if (cs_append(&p->buf, "", 0)) return wk_fail(err, WK_ENOMEM, "chat parser: out of memory");
    int rc = process(p, out, true);
    if (!rc) rc = emit(&out->reasoning, &p->hold_reasoning, "", 0, true);
    if (!rc) rc = emit(&out->content, &p->hold_content, "", 0, true);
    if (rc) return wk_fail(err, rc, "chat parser: out of memory");
    return 0;
}

int chat_parse_all(const chat_parse_options *opt, const char *text, size_t len, chat_delta *out, wk_error *err)
{
    chat_parser *p;
    int rc = chat_parser_new(&p, opt, err);
    if (rc) return rc;
    chat_delta part = {0};
    chat_delta_clear(out);
    rc = chat_parser_feed(p, text, len, &part, err);
    for (int step = 0; step < 2 && !rc; step++) {
        if (step == 1) rc = chat_parser_finish(p, &part, err);
        if (rc) break;
        if (cs_append(&out->content, part.content.data, part.content.len) ||
            cs_append(&out->reasoning, part.reasoning.data, part.reasoning.len)) {
            rc = wk_fail(err, WK_ENOMEM, "chat parser: out of memory");
            break;
        }
        for (size_t i = 0; i < part.n_calls; i++) {
            /* move the call over */
            if (out->n_calls == out->cap_calls) {
                size_t cap = out->cap_calls ? out->cap_calls * 2 : 4;
                chat_tool_call *c = realloc(out->calls, cap * sizeof *c);
                if (!c) { rc = wk_fail(err, WK_ENOMEM, "chat parser: out of memory"); break; }
                out->calls = c;
                out->cap_calls = cap;
            }
            out->calls[out->n_calls++] = part.calls[i];
        }
        if (!rc) part.n_calls = 0;
    }
    chat_delta_free(&part);
    chat_parser_free(p);
    return rc;
}

json_t *chat_tool_calls_json(const chat_tool_call *calls, size_t n, size_t first_index, bool with_index)
{
    json_t *arr = json_array();
    if (!arr) return NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *call = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", calls[i].id, "type", "function", "function",
                                 "name", calls[i].name, "arguments", calls[i].arguments);
        if (!call) goto fail;
        if (with_index && json_object_set_new(call, "index", json_integer((json_int_t)(first_index + i)))) {
            json_decref(call);
            goto fail;
        }
        if (json_array_append_new(arr, call)) goto fail;
    }
    return arr;
fail:
    json_decref(arr);
    return NULL;
}
