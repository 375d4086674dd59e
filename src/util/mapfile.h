/* Read-only memory mapping of a whole file. */
#ifndef WICK_UTIL_MAPFILE_H
#define WICK_UTIL_MAPFILE_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

typedef struct wk_mapfile {
    const uint8_t *data; /* NULL for an empty file */
    size_t size;
    int fd;
} wk_mapfile;

/* Maps path read-only. On failure returns WK_EIO/WK_EINVAL with a message naming path. */
int wk_mapfile_open(wk_mapfile *mf, const char *path, wk_error *err);
void wk_mapfile_close(wk_mapfile *mf);

/* Drops this process's page mappings of [p, p + n) inside a read-only file
 * mapping (rounded out to whole pages): the data stays in the page cache and
 * faults back in on the next read, but no longer counts in the resident set.
 * For weights a backend copied elsewhere (repacked, uploaded). Only for
 * MAP_SHARED file mappings: on anonymous memory it would zero the pages. */
void wk_mapfile_drop(const void *p, size_t n);

#endif
