/* Chat templates: render an OpenAI-style conversation into prompt text made of
 * segments (template markers vs. message content) with boundary marks for the
 * prefix cache.
 *
 * Templates are implemented as written rules (no Jinja engine): Qwen3 ChatML
 * (thinking + Hermes JSON tool calls), Qwen3.5 ChatML (opened <think>, XML tool
 * calls), Llama 3 / 3.1, and plain ChatML. The template is chosen by
 * recognising the GGUF's `tokenizer.chat_template` text, or by name.
 *
 * Segments: `special` = text the template itself emits (`<|im_start|>`,
 * `<think>`, fixed tool instructions, role names ...), to be tokenized with
 * special-token parsing. `!special` = text that came from the request
 * (message content, reasoning, tool JSON, tool-call arguments), to be
 * tokenized as plain text so a pasted `<|im_start|>` never becomes a control
 * token. Concatenating all segments gives `text` exactly.
 * Segment edges are not token edges: to tokenize, look for special tokens
 * only inside special segments, cut the text there, and tokenize each run
 * of text between two special tokens as one piece (it may span several
 * segments), so BPE merges come out as for the whole string.
 *
 * Boundaries (spec tokenizer-and-templates.md §8, golden templates/README.md):
 * byte offsets into `text` where a prefix-cache checkpoint is stable across
 * successive requests of a conversation. Sorted by offset; two kinds may
 * share an offset (system_end == the next turn's start). The golden files
 * record the same kinds and offsets (chat_boundary_name gives their names).
 *
 * Ownership: inputs (json_t, chat_conv) are borrowed; the chat_prompt belongs
 * to the caller. Templates without tool support (llama3, chatml) ignore `tools`;
 * chat_prompt.tool_format == CHAT_TOOLS_NONE tells the caller so. */
#ifndef WICK_CHAT_CHAT_H
#define WICK_CHAT_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "util/err.h"

typedef enum chat_template_kind {
    CHAT_TMPL_QWEN3 = 0, /* Qwen3 ChatML, Hermes-style <tool_call>{json}</tool_call> */
    CHAT_TMPL_QWEN35,    /* Qwen3.5 ChatML, prompt opens <think>, XML <function=...> calls */
    CHAT_TMPL_LLAMA3,    /* Llama 3 / 3.1 headers, BOS before the first message */
    CHAT_TMPL_CHATML,    /* plain ChatML: <|im_start|>ROLE\nCONTENT<|im_end|>\n */
} chat_template_kind;

/* How the model writes tool calls (what chat_parse.h must look for). */
typedef enum chat_tool_format {
    CHAT_TOOLS_NONE = 0,  /* template has no tool support */
    CHAT_TOOLS_HERMES,    /* <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> */
    CHAT_TOOLS_QWEN_XML,  /* <tool_call>\n<function=NAME>\n<parameter=P>\nV\n</parameter>\n... */
} chat_tool_format;

typedef struct chat_template {
    chat_template_kind kind;
    chat_tool_format tool_format;
    bool supports_thinking;  /* template understands <think> / enable_thinking */
    char bos_token[32];      /* written before the first message (llama3), "" if none */
} chat_template;

/* Names accepted by chat_template_by_name / --chat-template. */
#define CHAT_TEMPLATE_NAMES "qwen3, qwen35, llama3, chatml"

/* Fills *out for a template name ("qwen3", "qwen35" (alias "qwen3.5"),
 * "llama3" (alias "llama3.1"), "chatml"). WK_ENOTFOUND with the list of
 * names if unknown. */
int chat_template_by_name(chat_template *out, const char *name, wk_error *err);

/* Recognises a Jinja chat template (the GGUF's tokenizer.chat_template) by
 * the markers it contains. If name_override is non-NULL and non-empty it
 * wins and jinja_src is not looked at. jinja_src NULL or unrecognised →
 * WK_EUNSUPPORTED with a hint to pass `--chat-template NAME`. */
int chat_template_select(chat_template *out, const char *jinja_src, const char *name_override,
                         wk_error *err);

struct gguf_file;
/* chat_template_select on the model's `tokenizer.chat_template` string
 * (absent → WK_EUNSUPPORTED with the --chat-template hint, unless
 * name_override is given). */
int chat_template_from_gguf(chat_template *out, const struct gguf_file *f, const char *name_override,
                            wk_error *err);

/* Canonical name of a kind ("qwen3", ...). */
const char *chat_template_name(chat_template_kind kind);

typedef enum chat_boundary_kind {
    CHAT_B_SYSTEM_END = 0,       /* just after the leading system/tools turn */
    CHAT_B_USER_START,           /* <|im_start|>user of a message with role user */
    CHAT_B_TOOL_RESPONSE_START,  /* turn start that opens a run of tool messages */
    CHAT_B_ASSISTANT_START,      /* header start of an assistant message in history */
    CHAT_B_GENERATION_START,     /* header start of the generation prompt */
    CHAT_B_SYSTEM_START,         /* a system message that is not first */
} chat_boundary_kind;

/* Golden-file spelling of a boundary kind ("system_end", "user_start", ...). */
const char *chat_boundary_name(chat_boundary_kind kind);

#define CHAT_BFLAG_LAST_USER 1u /* this user_start is the last real query (last query index) */

typedef struct chat_boundary {
    chat_boundary_kind kind;
    size_t byte_offset;  /* into chat_prompt.text */
    int msg_index;       /* message that starts there; -1 for system_end / generation_start */
    unsigned flags;      /* CHAT_BFLAG_* */
} chat_boundary;

typedef struct chat_segment {
    size_t offset; /* into chat_prompt.text */
    size_t len;
    bool special;  /* template text: tokenize with special-token parsing */
} chat_segment;

/* Rendered prompt. Owned by the caller after chat_render*; release with
 * chat_prompt_free. text is NUL-terminated (len excludes the NUL). */
typedef struct chat_prompt {
    char *text;
    size_t len;
    chat_segment *segs;
    size_t n_segs;
    chat_boundary *bounds;
    size_t n_bounds;
    bool starts_with_bos;   /* text begins with the template's BOS token: don't add another */
    bool reasoning_open;    /* prompt ends inside an opened <think>: output starts as reasoning */
    bool thinking_enabled;  /* model may emit <think>…</think> (false: enable_thinking=false) */
    chat_tool_format tool_format; /* format to parse tool calls in the output (NONE: no tools) */
} chat_prompt;

typedef struct chat_options {
    bool add_generation_prompt; /* default true */
    int enable_thinking;        /* -1 = template default (kwarg absent), 0 = false, 1 = true */
    /* true (default): the messages are an OpenAI-style request's and go
     * through the validated conversation (chat_conv.h: text parts joined,
     * developer = system, null assistant content with tool calls, arguments
     * as JSON text). false: render exactly as the Jinja template would,
     * including its failures (golden conformance). */
    bool normalize;
} chat_options;

void chat_options_default(chat_options *opt);

/* Renders messages (JSON array of message objects, spec openai-api.md §3.1)
 * with optional tools (JSON array or NULL/null) under tmpl. Values are
 * borrowed. On success fills *out (caller frees with chat_prompt_free). On
 * bad input (empty list, content of the wrong type, non-text parts, wrong
 * role order for the template ...) returns WK_EINVAL (WK_EUNSUPPORTED for
 * non-text parts) and err says which message and why; *out is left empty.
 * The server renders validated conversations instead: chat_render_conv in
 * chat_conv.h. */
int chat_render(const chat_template *tmpl, const json_t *messages, const json_t *tools,
                const chat_options *opt, chat_prompt *out, wk_error *err);

void chat_prompt_free(chat_prompt *p);

/* Parses JSON text (any value) with jansson, duplicate keys refused, but
 * keeps integers beyond 64 bits (as integral reals, which the renderer's
 * tojson writes back in full below 1e21) instead of failing, so tool-call
 * arguments re-serialize as Python's json.dumps would. Object key order is
 * preserved. Returns a new reference or NULL with err (WK_EFORMAT). */
json_t *chat_json_loads(const char *text, size_t len, wk_error *err);

/* "an object", "a string", "null" ... for error messages about a JSON value. */
const char *chat_json_type_name(const json_t *v);

/* Whether a JSON Schema "type" ("string", or an array naming "string")
 * allows a string: an XML tool-call parameter of such a type is raw text,
 * any other is JSON. The parser (chat_parse.c) and the tool-call grammar
 * (engine/grammar_tools.c) decide with this one rule. */
bool chat_type_allows_string(const json_t *type);

#endif
