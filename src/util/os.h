/* The few OS calls whose spelling differs between Linux and other POSIX
 * systems (macOS, the BSDs), behind one name each so that no other module
 * needs a platform #if. */
#ifndef WICK_UTIL_OS_H
#define WICK_UTIL_OS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

/* Fills buf with n bytes from the OS's random source (Linux: getrandom;
 * elsewhere: getentropy, 256 bytes per call). Returns 0, or -1 when the
 * source failed (buf is then unspecified). */
int wk_random_bytes(void *buf, size_t n);

/* Modification time of st in seconds since the epoch, with the nanoseconds
 * (Linux: st_mtim; macOS: st_mtimespec; elsewhere whole seconds). */
double wk_stat_mtime(const struct stat *st);

/* Peak resident set size of this process in bytes (getrusage's ru_maxrss is
 * in KiB on Linux and in bytes on macOS), 0 if unknown. */
uint64_t wk_peak_rss_bytes(void);

#endif
