#include "util/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* 8 MiB per read: large enough that syscalls and page-cache lookups vanish
 * next to the work done on the bytes (hashing), small enough to stay cheap. */
#define CHUNK_BYTES ((size_t)8 << 20)

int wk_read_chunks(int fd, uint64_t bytes, const char *what, wk_chunk_fn fn, void *user, wk_bytes_progress_fn progress,
                   void *progress_user, wk_error *err)
{
    unsigned char *buf = malloc(CHUNK_BYTES);
    if (!buf) return wk_fail(err, WK_ENOMEM, "%s: out of memory", what);
#ifdef POSIX_FADV_SEQUENTIAL
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL); /* deeper kernel read-ahead */
#endif
    uint64_t done = 0;
    int rc = WK_OK;
    while (done < bytes) {
        size_t want = bytes - done < CHUNK_BYTES ? (size_t)(bytes - done) : CHUNK_BYTES;
        ssize_t n = pread(fd, buf, want, (off_t)done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            rc = wk_fail(err, WK_EIO, "%s: read error: %s", what, strerror(errno));
            break;
        }
        if (n == 0) {
            rc = wk_fail(err, WK_EIO, "%s: file ended at %llu of %llu bytes", what, (unsigned long long)done,
                         (unsigned long long)bytes);
            break;
        }
        fn(user, buf, (size_t)n);
        done += (uint64_t)n;
        if (progress) progress(progress_user, done, bytes);
    }
    free(buf);
    return rc;
}

char *wk_read_file(const char *path, size_t max_bytes, size_t *len, wk_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        wk_fail(err, WK_EIO, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1 || n >= max_bytes) break;
        char *nb = realloc(buf, cap * 2);
        if (!nb) free(buf);
        buf = nb;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf) wk_fail(err, WK_ENOMEM, "%s: out of memory", path);
    else if (bad) wk_fail(err, WK_EIO, "%s: read error", path);
    else if (n > max_bytes) wk_fail(err, WK_EFORMAT, "%s: larger than %zu bytes", path, max_bytes);
    if (!buf || bad || n > max_bytes) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}
