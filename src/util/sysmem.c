/* Physical memory size and the refusal of plans larger than it. */
#include "util/sysmem.h"

#include <inttypes.h>
#include <unistd.h>

#include "util/checked.h"

uint64_t wk_ram_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return 0;
    return wk_sat_mul((uint64_t)pages, (uint64_t)page);
}

int wk_ram_check(uint64_t bytes, const char *what, wk_error *err)
{
    uint64_t ram = wk_ram_bytes();
    if (ram == 0 || bytes <= ram) return 0;
    const double gib = 1024.0 * 1024.0 * 1024.0;
    if (bytes == UINT64_MAX)
        return wk_fail(err, WK_ENOMEM, "%s needs more than 2^64 bytes, more than the %.1f GiB of RAM of this machine",
                       what, (double)ram / gib);
    return wk_fail(err, WK_ENOMEM, "%s needs %" PRIu64 " bytes (%.1f GiB), more than the %.1f GiB of RAM of this machine",
                   what, bytes, (double)bytes / gib, (double)ram / gib);
}
