/* Private helpers shared by the files of src/chat/ (not for other modules). */
#ifndef WICK_CHAT_CHAT_INTERNAL_H
#define WICK_CHAT_CHAT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "chat/chat.h"
#include "chat/chat_conv.h"
#include "chat/chat_parse.h"
#include "util/err.h"

/* ---- chat_str: growable NUL-terminated byte string ---- */
int cs_append(chat_str *s, const char *data, size_t len); /* 0 or WK_ENOMEM */
int cs_puts(chat_str *s, const char *z);
int cs_putc(chat_str *s, char c);
void cs_free(chat_str *s);

/* ---- Python-compatible value printing (HF transformers' jinja2 env) ---- */
/* json.dumps(v, ensure_ascii=False) with default separators. */
int chat_tojson(chat_str *out, const json_t *v);
/* str(v): strings as is, null → None, true → True, numbers as Python prints
 * them, arrays/objects as their Python repr. */
int chat_pystr(chat_str *out, const json_t *v);
/* repr of a Python float equal to d (shortest round-trip digits). */
int chat_pyfloat(chat_str *out, double d);

/* Finds the value of top-level member key in the JSON object text (the
 * first one if repeated) and returns its byte span [*b, *e). 0 if found, -1 if absent or the text before it
 * is not valid JSON. */
int chat_json_member_span(const char *text, size_t len, const char *key, size_t *b, size_t *e);

/* Python str.strip()/lstrip()/rstrip() over UTF-8: *b and *e are narrowed
 * to drop leading/trailing characters for which str.isspace() is true. */
void chat_strip_space(const char *s, size_t *b, size_t *e, bool left, bool right);
/* Same for one ASCII character only (e.g. '\n'). */
void chat_strip_char(const char *s, size_t *b, size_t *e, char c, bool left, bool right);

/* ---- prompt builder ---- */
typedef struct chat_builder {
    chat_prompt *p;
    size_t cap_text, cap_segs, cap_bounds;
    int failed; /* sticky WK_ENOMEM */
} chat_builder;

void cb_init(chat_builder *b, chat_prompt *p);
void cb_special(chat_builder *b, const char *z);
void cb_content(chat_builder *b, const char *data, size_t len);
void cb_mark(chat_builder *b, chat_boundary_kind kind, int msg_index, unsigned flags);
/* Finalizes (NUL-terminates) the prompt; returns 0 or WK_ENOMEM (prompt freed). */
int cb_finish(chat_builder *b, wk_error *err);

/* ---- messages as the renderers see them ----
 * A view is made either from a validated chat_conv (every content a string,
 * tool calls in `calls`) or, in exact mode, from JSON messages taken as the
 * Jinja template would see them (any value, tool calls as JSON): exact mode
 * reproduces the reference template's output and its failures (golden
 * conformance); the value checks in the renderers only ever fire there. */
typedef enum view_role { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL, ROLE_OTHER } view_role;

typedef enum chat_value_state {
    VAL_STRING = 0, /* text/len valid */
    VAL_NULL,       /* JSON null */
    VAL_MISSING,    /* key absent */
    VAL_OTHER,      /* array, object, number, bool: see json */
} chat_value_state;

typedef struct chat_msg {
    const char *role; /* as given (exact mode) or the canonical name */
    size_t role_len;
    view_role role_kind;
    chat_value_state content_state;
    const char *content; /* VAL_STRING only; may point into joined */
    size_t content_len;
    const json_t *content_json; /* exact mode */
    chat_value_state reasoning_state;
    const char *reasoning;
    size_t reasoning_len;
    const json_t *tool_calls; /* exact mode: non-empty array as given, else NULL */
    const chat_call *calls;   /* validated: the message's tool calls */
    size_t n_calls;
    chat_str joined;          /* owned storage for joined text parts */
} chat_msg;

typedef struct chat_view {
    chat_msg *msgs;
    size_t n;
    const json_t *tools; /* non-empty array, else NULL */
    bool add_generation_prompt;
    int enable_thinking; /* -1 default, 0, 1 */
    bool exact;          /* made from JSON as the Jinja template sees it */
} chat_view;

/* Number of tool calls of m, from either source. */
static inline size_t chat_msg_n_calls(const chat_msg *m) { return m->calls ? m->n_calls : json_array_size(m->tool_calls); }

/* chat_conv_from_openai's message and tool rules on bare arrays (tools may
 * be NULL); *c initialised here, freed on failure. */
int chat_conv_from_openai_messages(chat_conv *c, const json_t *messages, const json_t *tools, wk_error *err);

/* Renderers: fill the builder; return 0 or WK_EINVAL/WK_EUNSUPPORTED with err. */
int chat_render_qwen3(const chat_template *t, const chat_view *c, chat_builder *b, wk_error *err);
int chat_render_qwen35(const chat_template *t, const chat_view *c, chat_builder *b, wk_error *err);
int chat_render_llama3(const chat_template *t, const chat_view *c, chat_builder *b, wk_error *err);
int chat_render_chatml(const chat_template *t, const chat_view *c, chat_builder *b, wk_error *err);

#endif
