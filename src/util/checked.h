/* Overflow-checked size arithmetic for sizes computed from file contents.
 * Saturating: a sum or product that does not fit in 64 bits is UINT64_MAX,
 * which no memory check accepts, so a chain of operations needs one test at
 * its end (compare with a limit, or wk_ram_check). */
#ifndef WICK_UTIL_CHECKED_H
#define WICK_UTIL_CHECKED_H

#include <stdint.h>

static inline uint64_t wk_sat_add(uint64_t a, uint64_t b)
{
    uint64_t r;
    return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

static inline uint64_t wk_sat_mul(uint64_t a, uint64_t b)
{
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

static inline uint64_t wk_sat_mul3(uint64_t a, uint64_t b, uint64_t c) { return wk_sat_mul(wk_sat_mul(a, b), c); }

#endif
