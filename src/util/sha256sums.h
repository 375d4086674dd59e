/* SHA256SUMS files, as `sha256sum` writes and `sha256sum -c` reads them:
 * one "HEX  NAME" line per file (" *NAME" marks binary mode, same digest);
 * a line starting with '\' has "\\" and "\n" escapes in its name. */
#ifndef WICK_UTIL_SHA256SUMS_H
#define WICK_UTIL_SHA256SUMS_H

#include <stddef.h>
#include <stdio.h>

#include "util/err.h"

typedef struct wk_sums_entry {
    char hex[65]; /* lower case */
    char *name;   /* unescaped, owned */
    int line;
} wk_sums_entry;

typedef struct wk_sums {
    wk_sums_entry *e;
    size_t n;
} wk_sums;

/* Parses text (len bytes; lines end in '\n', a final line may not). Empty
 * lines are skipped; anything else that is not a digest line is an error
 * naming `what`:LINE. Free with wk_sums_free. */
int wk_sums_parse(const char *text, size_t len, const char *what, wk_sums *out, wk_error *err);
/* Reads and parses a file. */
int wk_sums_load(const char *path, wk_sums *out, wk_error *err);
void wk_sums_free(wk_sums *s);

/* The entry for name (exact match), or NULL. */
const wk_sums_entry *wk_sums_find(const wk_sums *s, const char *name);

/* Writes one line as sha256sum does (escaped when name holds '\' or '\n'). */
void wk_sums_write_line(FILE *out, const char hex[65], const char *name);

#endif
