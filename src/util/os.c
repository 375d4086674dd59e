/* OS calls that differ between Linux and other POSIX systems (util/os.h). */
#include "util/os.h"

#include <sys/resource.h>
#include <unistd.h>

#if defined(__linux__)
#include <sys/random.h>
#elif defined(__APPLE__)
#include <sys/random.h> /* getentropy */
#endif

int wk_random_bytes(void *buf, size_t n)
{
    unsigned char *p = buf;
#if defined(__linux__)
    while (n > 0) {
        ssize_t got = getrandom(p, n, 0);
        if (got <= 0) return -1;
        p += got;
        n -= (size_t)got;
    }
#else
    while (n > 0) {
        size_t part = n < 256 ? n : 256; /* getentropy's limit per call */
        if (getentropy(p, part) != 0) return -1;
        p += part;
        n -= part;
    }
#endif
    return 0;
}

double wk_stat_mtime(const struct stat *st)
{
#if defined(__linux__)
    return (double)st->st_mtim.tv_sec + (double)st->st_mtim.tv_nsec * 1e-9;
#elif defined(__APPLE__)
    return (double)st->st_mtimespec.tv_sec + (double)st->st_mtimespec.tv_nsec * 1e-9;
#else
    return (double)st->st_mtime;
#endif
}

uint64_t wk_peak_rss_bytes(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0 || ru.ru_maxrss < 0) return 0;
#if defined(__APPLE__)
    return (uint64_t)ru.ru_maxrss;
#else
    return (uint64_t)ru.ru_maxrss * 1024;
#endif
}
