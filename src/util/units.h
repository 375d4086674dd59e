/* Byte sizes as people write and read them: "512M", "2G", "1.5GiB" → bytes,
 * and bytes → "2.00 GiB". Binary units (K = 1024) throughout, like the
 * --cache-mem style options. */
#ifndef WICK_UTIL_UNITS_H
#define WICK_UTIL_UNITS_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* Parses a positive size: a number (fractions allowed) with an optional
 * K/M/G/T suffix, itself optionally followed by "iB" or "B" ("2G", "2GiB",
 * "1048576"). WK_EINVAL naming the text for anything else, zero, or more
 * than 2^60 bytes. */
int wk_parse_size(const char *s, uint64_t *out, wk_error *err);

/* "123 B", "1.50 KiB", "2.00 GiB" into buf (32 bytes are always enough);
 * returns buf. */
const char *wk_format_bytes(char *buf, size_t cap, uint64_t n);

#endif
