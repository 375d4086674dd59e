/* Internal to the grammar engine: a string → index map, and a builder of
 * GBNF text (what the JSON-schema and tool-call compilers write, then
 * compile with gram_compile_gbnf). */
#ifndef WICK_ENGINE_GRAMMAR_TEXT_H
#define WICK_ENGINE_GRAMMAR_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* ---- byte-string keys → uint32 (open addressing, keys copied) ---- */

typedef struct gram_smap_slot {
    char *key;
    size_t len;
    uint32_t value;
} gram_smap_slot;

typedef struct gram_smap {
    gram_smap_slot *slots;
    size_t cap, count;
} gram_smap;

/* 1 and *value when present, else 0. */
int gram_smap_get(gram_smap *m, const void *key, size_t len, uint32_t *value);
/* Inserts or overwrites; 0 or WK_ENOMEM. */
int gram_smap_put(gram_smap *m, const void *key, size_t len, uint32_t value);
void gram_smap_free(gram_smap *m);

/* ---- growable text ---- */

typedef struct gram_buf {
    char *s; /* NUL-terminated when non-NULL */
    size_t len, cap;
    bool failed; /* an allocation failed: the content is incomplete */
} gram_buf;

void gram_buf_put(gram_buf *b, const char *s, size_t n);
void gram_buf_puts(gram_buf *b, const char *z);
void gram_buf_printf(gram_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A GBNF literal "..." for bytes s[0..n): printable ASCII and valid UTF-8
 * as they are, quotes and backslashes escaped, other bytes as \xHH. */
void gram_buf_literal(gram_buf *b, const char *s, size_t n);
void gram_buf_free(gram_buf *b);

/* ---- GBNF rules ---- */

typedef struct gram_text {
    gram_buf out;     /* the rules written so far */
    gram_smap bodies; /* rule body → index into names (identical bodies share a rule) */
    char **names;
    size_t n_names, cap_names;
    uint32_t counter;
    bool failed;      /* out of memory */
} gram_text;

/* The name of a rule with this body: an existing one with the same body,
 * else a new one named after hint ("hint-N"). The name lives as long as t.
 * NULL when out of memory. */
const char *gram_text_rule(gram_text *t, const char *hint, const char *body);
/* A fresh rule name to define later (for rules that refer to themselves). */
const char *gram_text_reserve(gram_text *t, const char *hint);
/* Writes `name ::= body`. */
void gram_text_define(gram_text *t, const char *name, const char *body);
void gram_text_free(gram_text *t);

/* Rewrites err's message on one line: control bytes (a newline in a
 * property name, say) become \xHH. Returns err->code. */
int gram_error_one_line(wk_error *err);

#endif
