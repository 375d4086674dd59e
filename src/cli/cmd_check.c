/* `wick check`: is a model (or a whole serve configuration) ready to serve?
 * The same checks `wick serve` runs before it starts (cli/readiness.h):
 * `wick check ARGS` is `wick serve --check ARGS`, so every serve option and
 * config key means the same here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/readiness.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: wick check (-m FILE | --config F) [--manifest SHA256SUMS] [--json] [serve options]\n\n"
            "Checks, without starting anything, what wick serve would check before it starts:\n"
            "files present, SHA-256 against the manifest (sha256sum format: see wick sha256),\n"
            "model loads, tokenizer and chat template usable, draft compatible (--draft),\n"
            "memory fit (weights + KV at the context + recurrent state + checkpoint budget +\n"
            "scratch, and the largest context that fits), port free (and who holds it when\n"
            "the OS tells; nothing is ever stopped), CPU features and the CUDA device.\n"
            "One line per finding: ok, warn or FAIL; ready: true only when nothing failed.\n\n"
            "Every wick serve option is accepted and means the same (--ctx, --kv-type, --port,\n"
            "--device, --mem, --cache-mem, --aux, --draft, ...; see wick serve --help).\n\n"
            "Exit status: 0 ready, 1 not ready, 2 bad usage.\n");
}

int cmd_check(int argc, char **argv)
{
    int have_model = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--check") || !strcmp(a, "--print-config")) {
            fprintf(stderr, "wick check: %s is a wick serve option; wick check already only checks\n", a);
            return 2;
        }
        have_model |= !strcmp(a, "-m") || !strncmp(a, "-m", 2) || !strncmp(a, "--model", 7) ||
                      !strncmp(a, "--config", 8);
    }
    if (!have_model) {
        fprintf(stderr, "wick check: which model? give -m FILE or --config FILE (see wick check --help)\n");
        return 2;
    }
    char **sv = calloc((size_t)argc + 2, sizeof *sv);
    if (!sv) return 1;
    sv[0] = "serve";
    sv[1] = "--check";
    for (int i = 1; i < argc; i++) sv[i + 1] = argv[i];
    int rc = cmd_serve(argc + 1, sv);
    free(sv);
    return rc;
}
