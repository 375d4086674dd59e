/* How much memory this machine has, and the check made before a large
 * allocation whose size comes from a model file or a user's option. */
#ifndef WICK_UTIL_SYSMEM_H
#define WICK_UTIL_SYSMEM_H

#include <stdint.h>

#include "util/err.h"

/* Physical RAM in bytes (sysconf), 0 if the system does not say. */
uint64_t wk_ram_bytes(void);

/* 0 if `bytes` fit in physical RAM (or the RAM size is unknown); else
 * WK_ENOMEM with "WHAT needs N bytes (X GiB), more than the Y GiB of RAM of
 * this machine". A planned size that overflowed (UINT64_MAX, util/checked.h)
 * is refused the same way. Nothing is allocated. */
int wk_ram_check(uint64_t bytes, const char *what, wk_error *err);

#endif
