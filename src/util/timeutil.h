#ifndef WICK_UTIL_TIMEUTIL_H
#define WICK_UTIL_TIMEUTIL_H

#include <time.h>

/* Monotonic clock in milliseconds (fractional). */
static inline double wk_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

#endif
