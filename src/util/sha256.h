/* SHA-256 through libcrypto (OpenSSL's EVP, which uses the CPU's SHA
 * instructions where there are any). */
#ifndef WICK_UTIL_SHA256_H
#define WICK_UTIL_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* SHA-256 of a file, streamed; hex (65 bytes incl. NUL) written to out_hex. */
int wk_sha256_file(const char *path, char out_hex[65], wk_error *err);
/* SHA-256 of a buffer. */
void wk_sha256_hex(const void *data, size_t len, char out_hex[65]);

/* Called after each read with the bytes hashed so far and the total. */
typedef void (*wk_sha256_progress_fn)(void *user, uint64_t done, uint64_t total);

/* wk_sha256_file at disk speed: 8 MiB reads with sequential read-ahead
 * advice, progress after every read (fn may be NULL). */
int wk_sha256_file_progress(const char *path, char out_hex[65], wk_sha256_progress_fn fn, void *user,
                            wk_error *err);

/* Incremental hashing (downloads hash what they write). new returns NULL
 * when out of memory; final writes the hex digest and frees; free alone
 * discards. */
typedef struct wk_sha256 wk_sha256;
wk_sha256 *wk_sha256_new(void);
void wk_sha256_update(wk_sha256 *h, const void *data, size_t n);
void wk_sha256_final(wk_sha256 *h, char out_hex[65]);
void wk_sha256_free(wk_sha256 *h);

/* Feeds the first `bytes` bytes of the open file fd (from offset 0) into h,
 * with progress as above (total = bytes). WK_EIO naming `what` on a read
 * error or a file shorter than `bytes`. */
int wk_sha256_update_fd(wk_sha256 *h, int fd, uint64_t bytes, const char *what, wk_sha256_progress_fn fn,
                        void *user, wk_error *err);

#endif
