#include "util/sysinfo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Value in kB of "Key:   1234 kB" at the start of a line of text; -1 if absent. */
static long long meminfo_field(const char *text, const char *key)
{
    size_t kl = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, key, kl) || p[kl] != ':') continue;
        char *end;
        long long v = strtoll(p + kl + 1, &end, 10);
        if (end == p + kl + 1 || v < 0) return -1;
        return v;
    }
    return -1;
}

int wk_meminfo_parse(const char *text, uint64_t *avail, uint64_t *total)
{
    long long a = meminfo_field(text, "MemAvailable"), t = meminfo_field(text, "MemTotal");
    if (a < 0 || t < 0) return WK_ENOTFOUND;
    *avail = (uint64_t)a * 1024;
    *total = (uint64_t)t * 1024;
    return WK_OK;
}

int wk_mem_info(uint64_t *avail, uint64_t *total, wk_error *err)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char text[8192];
        size_t n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[n] = '\0';
        if (wk_meminfo_parse(text, avail, total) == 0) return WK_OK;
    }
    long page = sysconf(_SC_PAGESIZE), av = -1, ph = -1;
#ifdef _SC_AVPHYS_PAGES
    av = sysconf(_SC_AVPHYS_PAGES);
#endif
#ifdef _SC_PHYS_PAGES
    ph = sysconf(_SC_PHYS_PAGES);
#endif
    if (page <= 0 || av < 0 || ph < 0)
        return wk_fail(err, WK_EIO, "free memory unknown: no /proc/meminfo and sysconf does not say");
    *avail = (uint64_t)av * (uint64_t)page;
    *total = (uint64_t)ph * (uint64_t)page;
    return WK_OK;
}

void wk_cpu_model_name(char *buf, size_t cap)
{
    snprintf(buf, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        /* x86: "model name"; arm64 kernels often only give "CPU part", so keep "unknown" there */
        if (strncmp(line, "model name", 10)) continue;
        const char *v = strchr(line, ':');
        if (!v) break;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        size_t n = strcspn(v, "\n");
        snprintf(buf, cap, "%.*s", (int)n, v);
        break;
    }
    fclose(f);
}

int wk_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
