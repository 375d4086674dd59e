#include "util/units.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int wk_parse_size(const char *s, uint64_t *out, wk_error *err)
{
    if (!s || !*s) return wk_fail(err, WK_EINVAL, "empty size (expected e.g. 512M or 2G)");
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 0x1p10; end++; break;
    case 'm': case 'M': mul = 0x1p20; end++; break;
    case 'g': case 'G': mul = 0x1p30; end++; break;
    case 't': case 'T': mul = 0x1p40; end++; break;
    default: break;
    }
    if (end[0] == 'i' && end[1] == 'B' && mul > 1) end += 2;
    else if (end[0] == 'B') end++;
    /* 2^60: far above any machine, far below where the double → uint64 conversion overflows */
    if (errno || end == s || *end || !(v > 0) || !isfinite(v) || v * mul > 0x1p60 || v * mul < 1)
        return wk_fail(err, WK_EINVAL, "'%s' is not a size (expected e.g. 512M, 2G or 1.5GiB)", s);
    *out = (uint64_t)(v * mul);
    return WK_OK;
}

const char *wk_format_bytes(char *buf, size_t cap, uint64_t n)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double x = (double)n;
    int u = 0;
    while (x >= 1024.0 && u < 6) {
        x /= 1024.0;
        u++;
    }
    if (u == 0) snprintf(buf, cap, "%" PRIu64 " B", n);
    else snprintf(buf, cap, "%.2f %s", x, units[u]);
    return buf;
}
