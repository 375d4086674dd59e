/* What the machine has: free and total RAM, the CPU's model name. Linux
 * first (/proc), with POSIX fallbacks where /proc is absent. */
#ifndef WICK_UTIL_SYSINFO_H
#define WICK_UTIL_SYSINFO_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* RAM a new process can use without swapping (*avail: MemAvailable of
 * /proc/meminfo, which counts reclaimable page cache) and installed RAM
 * (*total: MemTotal). Without /proc: sysconf's available and physical pages.
 * WK_EIO when neither source answers. */
int wk_mem_info(uint64_t *avail, uint64_t *total, wk_error *err);

/* Parses /proc/meminfo text: MemAvailable and MemTotal in bytes. Returns 0
 * when both are present, WK_ENOTFOUND otherwise (outputs untouched). */
int wk_meminfo_parse(const char *text, uint64_t *avail, uint64_t *total);

/* The CPU's model name ("Intel(R) Xeon(R) Platinum 8480+"), from
 * /proc/cpuinfo; "unknown" where it does not say. */
void wk_cpu_model_name(char *buf, size_t cap);

/* Online logical CPUs (at least 1). */
int wk_cpu_count(void);

#endif
