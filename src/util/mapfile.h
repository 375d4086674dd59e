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

#endif
