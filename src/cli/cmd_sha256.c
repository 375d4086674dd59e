/* `wick sha256 FILE…`: SHA-256 sums in sha256sum's format on stdout (a
 * SHA256SUMS manifest for wick check --manifest), progress on stderr. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "util/progress.h"
#include "util/sha256.h"
#include "util/sha256sums.h"
#include "util/timeutil.h"
#include "util/units.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: wick sha256 [-q] FILE...\n\n"
            "Prints \"SHA256  FILE\" per file, as sha256sum does (redirect it to SHA256SUMS for\n"
            "wick check --manifest). Reads 8 MiB at a time with read-ahead and hashes with\n"
            "libcrypto (SHA instructions where the CPU has them): disk speed on most machines.\n"
            "A progress bar with speed goes to stderr (-q: none).\n\n"
            "Exit status: 0 all hashed, 1 a file could not be read (the others are still printed),\n"
            "2 bad usage.\n");
}

int cmd_sha256(int argc, char **argv)
{
    int quiet = 0, n_files = 0, failed = 0, dashdash = argc;
    for (int i = 1; i < argc && dashdash == argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) dashdash = i;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) quiet = 1;
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "wick sha256: unknown option '%s' (see wick sha256 --help)\n", a);
            return 2;
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i < dashdash && (!strcmp(a, "-q") || !strcmp(a, "--quiet"))) continue;
        if (i == dashdash) continue;
        n_files++;
        wk_progress p;
        wk_progress_begin(&p, quiet ? NULL : stderr, a, 0, 0);
        char hex[65];
        wk_error err = {0};
        if (wk_sha256_file_progress(a, hex, wk_progress_callback, &p, &err)) {
            if (p.drawn) fputc('\n', stderr);
            fprintf(stderr, "wick sha256: %s\n", err.msg);
            failed = 1;
            continue;
        }
        p.total = p.done;
        wk_progress_end(&p, "ok");
        wk_sums_write_line(stdout, hex, a);
        fflush(stdout);
    }
    if (!n_files) {
        fprintf(stderr, "wick sha256: no FILE given (see wick sha256 --help)\n");
        return 2;
    }
    return failed;
}
