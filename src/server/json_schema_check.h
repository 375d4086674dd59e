/* A first look at a JSON Schema a client gives for constrained output
 * (response_format json_schema, tool parameters under a forced call), so a
 * malformed one is a 400 at parse time rather than a failure on the engine
 * thread. It checks the schema's shape, not what the grammar engine can
 * compile. */
#ifndef WICK_SERVER_JSON_SCHEMA_CHECK_H
#define WICK_SERVER_JSON_SCHEMA_CHECK_H

#include <jansson.h>

#include "server/error.h"

/* The schema is an object or a boolean; keywords that hold subschemas hold
 * schemas (properties, items, anyOf, ...); "type" is a JSON Schema type name
 * or an array of them; "required" is an array of strings; "enum" an array;
 * "$ref" is a local reference ("#", "#/$defs/X", "#/definitions/X", any
 * "#/..." JSON pointer) that resolves inside the root. Nesting is capped.
 * where names the field in errors ("response_format.json_schema.schema").
 * 0, or -1 with a 400 naming the offending keyword's path. */
int srv_check_json_schema(const json_t *schema, const char *where, srv_error *err);

#endif
