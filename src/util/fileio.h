/* Reading files whole or in large chunks. */
#ifndef WICK_UTIL_FILEIO_H
#define WICK_UTIL_FILEIO_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* Reads the first `bytes` bytes of fd (from offset 0) in 8 MiB chunks with
 * sequential read-ahead advice, handing each to fn; after each, progress
 * (may be NULL) gets the bytes done and the total. WK_EIO naming `what` on a
 * read error or a file shorter than `bytes`; WK_ENOMEM. */
typedef void (*wk_chunk_fn)(void *user, const void *data, size_t n);
typedef void (*wk_bytes_progress_fn)(void *user, uint64_t done, uint64_t total);
int wk_read_chunks(int fd, uint64_t bytes, const char *what, wk_chunk_fn fn, void *user, wk_bytes_progress_fn progress,
                   void *progress_user, wk_error *err);

/* The whole of path (at most max_bytes) as a malloc'd NUL-terminated buffer
 * (*len excludes the NUL). NULL with err: WK_EIO naming path, WK_EFORMAT when
 * larger than max_bytes, WK_ENOMEM. */
char *wk_read_file(const char *path, size_t max_bytes, size_t *len, wk_error *err);

#endif
