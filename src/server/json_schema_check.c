#include "server/json_schema_check.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Deeper than this is not a schema a client means. */
#define SCHEMA_MAX_DEPTH 64

typedef struct schema_walk {
    const json_t *root;
    srv_error *err;
    const char *where;
} schema_walk;

static int bad(schema_walk *w, const char *path, const char *what)
{
    return srv_fail(w->err, 400, w->where, "invalid_schema", "%s%s: %s", w->where, path, what);
}

/* Resolves a local JSON pointer ("#/$defs/a~1b") against the root. */
static const json_t *resolve_ref(const json_t *root, const char *ref)
{
    if (ref[0] != '#') return NULL;
    const json_t *at = root;
    const char *p = ref + 1;
    while (*p) {
        if (*p != '/') return NULL;
        p++;
        char tok[256];
        size_t n = 0;
        while (*p && *p != '/') {
            char c = *p++;
            if (c == '~') {
                if (*p == '0') c = '~';
                else if (*p == '1') c = '/';
                else return NULL;
                p++;
            }
            if (n + 1 >= sizeof tok) return NULL;
            tok[n++] = c;
        }
        tok[n] = '\0';
        if (json_is_object(at)) at = json_object_get(at, tok);
        else if (json_is_array(at)) {
            char *end;
            long idx = strtol(tok, &end, 10);
            if (!n || *end || idx < 0) return NULL;
            at = json_array_get(at, (size_t)idx);
        } else return NULL;
        if (!at) return NULL;
    }
    return at;
}

static bool is_type_name(const json_t *t)
{
    static const char *const types[] = {"string", "number", "integer", "boolean", "object", "array", "null"};
    if (!json_is_string(t)) return false;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(json_string_value(t), types[i])) return true;
    return false;
}

static int walk(schema_walk *w, const json_t *s, const char *path, int depth);

static int walk_child(schema_walk *w, const json_t *s, const char *path, const char *key, int depth)
{
    char sub[512];
    snprintf(sub, sizeof sub, "%s.%s", path, key);
    return walk(w, s, sub, depth + 1);
}

static int walk_map(schema_walk *w, const json_t *map, const char *path, const char *key, int depth)
{
    char sub[512];
    snprintf(sub, sizeof sub, "%s.%s", path, key);
    if (!json_is_object(map)) return bad(w, sub, "must be an object of schemas");
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)map, k, v) {
        char one[768];
        snprintf(one, sizeof one, "%s.%s", sub, k);
        if (walk(w, v, one, depth + 1)) return -1;
    }
    return 0;
}

static int walk_list(schema_walk *w, const json_t *list, const char *path, const char *key, int depth)
{
    char sub[512];
    snprintf(sub, sizeof sub, "%s.%s", path, key);
    if (!json_is_array(list) || json_array_size(list) == 0) return bad(w, sub, "must be a non-empty array of schemas");
    size_t i;
    const json_t *v;
    json_array_foreach(list, i, v) {
        char one[600];
        snprintf(one, sizeof one, "%s[%zu]", sub, i);
        if (walk(w, v, one, depth + 1)) return -1;
    }
    return 0;
}

static int walk(schema_walk *w, const json_t *s, const char *path, int depth)
{
    if (depth > SCHEMA_MAX_DEPTH) return bad(w, path, "nested too deeply");
    if (json_is_boolean(s)) return 0;
    if (!json_is_object(s)) return bad(w, path, "a schema must be an object or a boolean");
    const json_t *type = json_object_get(s, "type");
    if (type) {
        bool ok = is_type_name(type);
        if (json_is_array(type)) {
            size_t i;
            const json_t *t;
            ok = json_array_size(type) > 0;
            json_array_foreach(type, i, t) ok = ok && is_type_name(t);
        }
        if (!ok)
            return bad(w, path, "'type' must be one of string, number, integer, boolean, object, array, null (or an array of them)");
    }
    const json_t *req = json_object_get(s, "required");
    if (req) {
        size_t i;
        const json_t *r;
        if (!json_is_array(req)) return bad(w, path, "'required' must be an array of strings");
        json_array_foreach(req, i, r) if (!json_is_string(r)) return bad(w, path, "'required' must be an array of strings");
    }
    const json_t *en = json_object_get(s, "enum");
    if (en && !json_is_array(en)) return bad(w, path, "'enum' must be an array");
    const json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        if (!json_is_string(ref)) return bad(w, path, "'$ref' must be a string");
        if (!resolve_ref(w->root, json_string_value(ref))) {
            char what[320];
            snprintf(what, sizeof what, "'$ref' \"%.200s\" does not resolve to a schema in this document",
                     json_string_value(ref));
            return bad(w, path, what);
        }
    }
    static const char *const maps[] = {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"};
    for (size_t i = 0; i < sizeof maps / sizeof maps[0]; i++) {
        const json_t *m = json_object_get(s, maps[i]);
        if (m && walk_map(w, m, path, maps[i], depth)) return -1;
    }
    static const char *const lists[] = {"anyOf", "oneOf", "allOf", "prefixItems"};
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
        const json_t *l = json_object_get(s, lists[i]);
        if (l && walk_list(w, l, path, lists[i], depth)) return -1;
    }
    static const char *const ones[] = {"items", "additionalProperties", "not", "if", "then", "else", "contains",
                                       "propertyNames", "unevaluatedProperties", "additionalItems"};
    for (size_t i = 0; i < sizeof ones / sizeof ones[0]; i++) {
        const json_t *o = json_object_get(s, ones[i]);
        if (!o) continue;
        /* draft-04 tuple form: items as an array of schemas */
        if (json_is_array(o) && !strcmp(ones[i], "items")) {
            if (walk_list(w, o, path, ones[i], depth)) return -1;
        } else if (walk_child(w, o, path, ones[i], depth)) {
            return -1;
        }
    }
    return 0;
}

int srv_check_json_schema(const json_t *schema, const char *where, srv_error *err)
{
    schema_walk w = {.root = schema, .err = err, .where = where};
    return walk(&w, schema, "", 0);
}
