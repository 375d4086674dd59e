/* Tool-call grammars: the language is exactly "calls of the offered tools
 * (or of the named one) whose arguments are valid against the tool's
 * parameters schema", written in the template's tool-call format, so that
 * chat_parse.h always extracts them as tool calls:
 *   CHAT_TOOLS_HERMES    <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>
 *   CHAT_TOOLS_QWEN_XML  <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>\n</tool_call>
 * <tool_call> and </tool_call> are token literals (the special tokens of
 * Qwen vocabularies). In the XML format a parameter whose declared "type"
 * allows strings is written as raw text (the parser keeps it as a
 * string), any other as JSON. No value contains the text that would end
 * the call for the parser ("</tool_call>"; in XML also "</parameter>"):
 * JSON strings can still hold such text with an escape (<\/tool_call>),
 * raw text cannot. A string with a length bound too long to track that
 * exactly (thousands of characters) has no raw '<' at all instead (JSON
 * can still write \u003c; raw text then has no '<'). Parameters appear in
 * declared order, required ones always; schemas follow json_schema.h.
 * Several calls are separated by whitespace. */
#ifndef WICK_ENGINE_GRAMMAR_TOOLS_H
#define WICK_ENGINE_GRAMMAR_TOOLS_H

#include <stdbool.h>

#include <jansson.h>

#include "chat/chat.h"
#include "engine/json_schema.h"

/* GBNF for calls of tools (borrowed: an OpenAI tools array
 * [{"type": "function", "function": {"name", "parameters"}}], or
 * Anthropic-style [{"name", "input_schema"}]):
 *   name NULL   one or more calls of any of the tools (tool_choice
 *               "required" / Anthropic "any"); exactly one unless parallel;
 *   name given  exactly one call of that function (a named tool_choice).
 * *gbnf is malloc'd. WK_EINVAL: no tools, an unknown name, a malformed
 * tool, a name the format cannot carry; schema errors as json_schema.h. */
int gram_tools_gbnf(const json_t *tools, chat_tool_format format, const char *name, bool parallel,
                    enum gram_reasoning reasoning, char **gbnf, wk_error *err);

/* The compiled grammar of gram_tools_gbnf. Caller frees. */
int gram_for_tools(gram_grammar **out, const json_t *tools, chat_tool_format format, const char *name, bool parallel,
                   enum gram_reasoning reasoning, wk_error *err);

#endif
