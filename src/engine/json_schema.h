/* JSON schema → grammar: the language of the grammar is JSON text that is
 * valid against the schema (a subset of it: see the policies below), so
 * constrained decoding always yields output that parses and validates.
 *
 * Supported: type (one or a list) object/array/string/number/integer/
 * boolean/null; properties + required (declared order; every property not
 * required is optional), additionalProperties (false, true, or a schema for
 * objects without properties); items (a schema, or a list = tuple),
 * prefixItems, additionalItems, minItems/maxItems; minLength/maxLength;
 * minimum/maximum/exclusiveMinimum/exclusiveMaximum (integers: any; numbers:
 * integer-valued bounds); enum, const; anyOf, oneOf (as anyOf: the
 * branches are expected to be disjoint), allOf of one schema; $ref to
 * "#", "#/$defs/...", "#/definitions/..." or any local JSON pointer
 * (recursion allowed); true / {} (any value).
 * Ignored (annotations, or relaxing only): $schema, $id, $comment, title,
 * description, default, examples, format, deprecated, readOnly, writeOnly,
 * contentEncoding, contentMediaType, nullable, discriminator, x-*, and
 * keywords JSON Schema does not define. Other keywords that restrict values
 * (pattern, multipleOf, uniqueItems: true, not, if/then/else, contains,
 * patternProperties, propertyNames, minProperties, maxProperties,
 * dependentRequired, ...) fail with WK_EUNSUPPORTED naming the keyword and
 * where it is.
 *
 * Output policies:
 *   - objects list their properties in declared order, without extras
 *     (additionalProperties only widens objects that have no properties);
 *   - whitespace between tokens: up to GRAM_JSON_MAX_WS characters of
 *     space/tab/newline per gap (pretty-printed JSON fits, an endless run
 *     of spaces does not), none before or after the top-level value;
 *   - numbers: at most 16 integer digits, 16 fraction digits, 2 exponent
 *     digits (every value stays finite and int64-exact);
 *   - strings: UTF-8; \u escapes only for scalar values (surrogate pairs
 *     paired), never \u0000;
 *   - nesting is bounded by GRAM_MAX_DEPTH (grammar.h).
 * Hostile schemas fail cleanly: nesting deeper than GRAM_JSON_MAX_NESTING,
 * more than GRAM_JSON_MAX_PROPERTIES properties, enums beyond
 * GRAM_JSON_MAX_ENUM values / GRAM_JSON_MAX_ENUM_BYTES, grammars beyond
 * GRAM_JSON_MAX_GBNF_BYTES → WK_ERANGE; schema errors → WK_EINVAL. */
#ifndef WICK_ENGINE_JSON_SCHEMA_H
#define WICK_ENGINE_JSON_SCHEMA_H

#include <jansson.h>

#include "engine/grammar.h"
#include "util/err.h"

#define GRAM_JSON_MAX_WS 40
#define GRAM_JSON_MAX_NESTING 64
#define GRAM_JSON_MAX_PROPERTIES 1024
#define GRAM_JSON_MAX_ENUM 16384
#define GRAM_JSON_MAX_ENUM_BYTES (1u << 20)
#define GRAM_JSON_MAX_GBNF_BYTES (16u << 20)

/* Reasoning before the constrained part, for thinking models; the parser
 * of chat_parse.h splits it off (parse_reasoning / reasoning_open):
 *   NONE      the output is the constrained part;
 *   OPTIONAL  it may start with <think>TEXT</think> and whitespace
 *             (chat_prompt.thinking_enabled without reasoning_open);
 *   OPEN      the prompt opened <think>: TEXT</think>, whitespace, then the
 *             constrained part (chat_prompt.reasoning_open).
 * TEXT never contains "</think>" (nor "<tool_call>" in tool grammars, which
 * would end reasoning early). <think> and </think> are token literals. */
enum gram_reasoning {
    GRAM_REASONING_NONE = 0,
    GRAM_REASONING_OPTIONAL,
    GRAM_REASONING_OPEN,
};

/* GBNF text for values valid against schema (borrowed). *gbnf is malloc'd
 * (caller frees). Errors as above; the message names the schema location
 * (a JSON pointer) and the keyword. */
int gram_json_schema_gbnf(const json_t *schema, enum gram_reasoning reasoning, char **gbnf, wk_error *err);

/* The compiled grammar of gram_json_schema_gbnf (response_format
 * json_schema). Caller frees with gram_grammar_free. */
int gram_from_json_schema(gram_grammar **out, const json_t *schema, enum gram_reasoning reasoning, wk_error *err);

/* Any JSON object (response_format json_object). */
int gram_json_object(gram_grammar **out, enum gram_reasoning reasoning, wk_error *err);

#endif
