/* Internals of the JSON-schema and tool-call compilers (json_schema*.c,
 * grammar_tools.c): they write GBNF through gram_text, then compile it. */
#ifndef WICK_ENGINE_JSON_SCHEMA_IMPL_H
#define WICK_ENGINE_JSON_SCHEMA_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "engine/grammar_text.h"
#include "engine/json_schema.h"

/* How a value is written:
 *   JS_JSON  JSON text;
 *   JS_RAW   the bare text of a string value (an XML tool-call parameter
 *            whose declared type allows strings: the parser keeps the text
 *            as it is); values that are not strings cannot be written. */
enum js_mode { JS_JSON = 0, JS_RAW = 1 };

#define JS_MAX_WORDS 4

typedef struct js_ctx {
    gram_text t;
    const json_t *root; /* for $ref */
    wk_error *err;
    int rc;             /* first error (0 = none) */
    int depth;
    char path[512];     /* JSON pointer of the schema being compiled */
    size_t path_len;
    gram_smap memo;     /* key ("ref:mode:pointer", "string:...") → index into memo_names */
    const char **memo_names;
    size_t n_memo, cap_memo;
    /* Texts that string contents must not contain (raw text or JSON text),
     * because a tool-call parser would end the call there. */
    const char *words[JS_MAX_WORDS];
    size_t n_words;
    const char *common[8]; /* lazily made shared rules, see js_common */
} js_ctx;

enum js_common_rule { JS_WS = 0, JS_VALUE, JS_STRING, JS_NUMBER, JS_INTEGER, JS_ESC, JS_RAW_TEXT, JS_N_COMMON };

void js_init(js_ctx *c, const json_t *root, wk_error *err);
void js_free(js_ctx *c);
/* Records the first error (message prefixed with the schema path); returns NULL. */
const char *js_fail(js_ctx *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
bool js_failed(const js_ctx *c);
/* A rule by body (shared when equal), NULL after a failure. */
const char *js_rule(js_ctx *c, const char *hint, const gram_buf *body);
/* Shared rules: ws, any JSON value, any string, number, integer, the part
 * after a backslash in a string, raw text of any length. */
const char *js_common(js_ctx *c, enum js_common_rule which);

/* Rules made once per key (a $ref target, a string shape). */
const char *js_memo_get(js_ctx *c, const char *key);
void js_memo_put(js_ctx *c, const char *key, const char *name);

/* Rule for a schema (json_schema.c). */
const char *js_schema(js_ctx *c, const json_t *schema, enum js_mode mode);
/* Rule matching exactly one of the byte strings (a prefix tree, so that
 * matching is deterministic), or a failure when n == 0. */
const char *js_literals(js_ctx *c, const char *hint, char **texts, const size_t *lens, size_t n);
/* Whether the array lists the string key (as "required" does). */
bool js_listed(const json_t *arr, const char *key);
/* Whether text contains one of the forbidden words. */
bool js_has_word(const js_ctx *c, const char *text, size_t len);

/* Strings (json_schema_string.c): a JSON string (with quotes) or raw text
 * of min..max characters (max UINT32_MAX: unbounded), avoiding the words. */
const char *js_string(js_ctx *c, uint32_t min, uint32_t max, enum js_mode mode);
/* What may follow a backslash in a JSON string: a simple escape, or \u
 * with a scalar value other than U+0000 (a high surrogate only as the
 * first half of a pair). */
void js_put_escape_body(gram_buf *b);
/* Raw text that avoids the given words (not the context's), any length. */
const char *js_text_without(js_ctx *c, const char *const *words, size_t n_words);

/* Numbers (json_schema_number.c): the schema's minimum/maximum/exclusive*
 * applied to an integer or a number. */
const char *js_number(js_ctx *c, const json_t *schema, bool integer);

/* Finishes: root ::= prefix root-rule with the reasoning prefix; *gbnf is
 * the text (malloc'd). reasoning_words: extra texts the reasoning may not
 * contain (besides </think>). */
int js_finish(js_ctx *c, const char *body_rule, enum gram_reasoning reasoning, const char *const *reasoning_words,
              size_t n_reasoning_words, char **gbnf);

/* Compiles generated GBNF (and frees it); a failure is reported as what's. */
int js_compile(gram_grammar **out, char *gbnf, const char *what, wk_error *err);

#endif
