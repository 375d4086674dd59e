/* `wick pull REPO[@REVISION] [FILE…] --dir D`: download a model pack from a
 * Hugging Face hub, verified and resumable (cli/hub_pull.h). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/hub_pull.h"
#include "util/units.h"

#define DEFAULT_ENDPOINT "https://huggingface.co"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: wick pull REPO[@REVISION] [FILE...] --dir D [options]\n\n"
            "Downloads files of a Hugging Face repository (all of them, or the FILEs given: names\n"
            "or patterns such as '*Q4_K_M.gguf'), at REVISION (branch, tag or commit; default\n"
            "main), pinned to the commit it names when the listing is read. Each file is written\n"
            "as D/.NAME.wick-partial, resumed from there with HTTP Range requests after a cut\n"
            "connection (in this run or the next), and renamed to NAME only after its size and\n"
            "hash match the hub's metadata (SHA-256 for LFS files, git blob SHA-1 for the others).\n"
            "D/SHA256SUMS gets a line per file: wick check -m D/NAME --manifest D/SHA256SUMS.\n"
            "Files already in D with the right hash are kept; progress with speed and ETA on\n"
            "stderr.\n\n"
            "options:\n"
            "  --dir D          destination folder (made if missing)\n"
            "  --model-dir M    files already on disk: M/NAME (or M/BASENAME) is hashed and, when it\n"
            "                   matches, linked or copied instead of downloaded\n"
            "  --retries N      attempts after a cut connection or a server error (default 3)\n"
            "  -q, --quiet      no progress output\n"
            "  -h, --help       this text\n\n"
            "environment: HF_ENDPOINT (default " DEFAULT_ENDPOINT "), HF_TOKEN (private or gated repos)\n\n"
            "Exit status: 0 all files verified, 1 a download or check failed (nothing unverified\n"
            "carries a final name), 2 bad usage.\n");
}

int cmd_pull(int argc, char **argv)
{
    enum { O_DIR = 1000, O_MODEL_DIR, O_RETRIES };
    static const struct option opts[] = {{"dir", required_argument, 0, O_DIR},
                                         {"model-dir", required_argument, 0, O_MODEL_DIR},
                                         {"retries", required_argument, 0, O_RETRIES},
                                         {"quiet", no_argument, 0, 'q'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    hub_pull_options o = {.retries = 3};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "qh", opts, NULL)) != -1) {
        switch (c) {
        case O_DIR: o.dir = optarg; break;
        case O_MODEL_DIR: o.reuse_dir = optarg; break;
        case O_RETRIES: {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || end == optarg || v < 0 || v > 100) {
                fprintf(stderr, "wick pull: --retries must be an integer in [0, 100], got '%s'\n", optarg);
                return 2;
            }
            o.retries = (int)v;
            break;
        }
        case 'q': o.quiet = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "wick pull: which repository? (wick pull OWNER/NAME[@REVISION] --dir D)\n");
        return 2;
    }
    if (!o.dir) {
        fprintf(stderr, "wick pull: --dir D is required (where the files go)\n");
        return 2;
    }
    char repo[512];
    snprintf(repo, sizeof repo, "%s", argv[optind]);
    char *at = strchr(repo, '@');
    o.revision = "main";
    if (at) {
        *at = '\0';
        o.revision = at + 1;
    }
    const char *slash = strchr(repo, '/');
    if (!slash || slash == repo || !slash[1] || strchr(slash + 1, '/') || !*o.revision) {
        fprintf(stderr, "wick pull: '%s' is not OWNER/NAME[@REVISION]\n", argv[optind]);
        return 2;
    }
    o.repo = repo;
    o.patterns = (const char *const *)argv + optind + 1;
    o.n_patterns = argc - optind - 1;
    const char *ep = getenv("HF_ENDPOINT");
    char endpoint[1024];
    snprintf(endpoint, sizeof endpoint, "%s", ep && *ep ? ep : DEFAULT_ENDPOINT);
    size_t el = strlen(endpoint);
    while (el > 0 && endpoint[el - 1] == '/') endpoint[--el] = '\0';
    o.endpoint = endpoint;
    const char *tok = getenv("HF_TOKEN");
    o.token = tok && *tok ? tok : NULL;

    hub_pull_result r;
    wk_error err = {0};
    int rc = hub_pull(&o, &r, &err);
    if (rc) {
        fprintf(stderr, "wick pull: %s\n", err.msg);
        return 1;
    }
    char b[32];
    printf("%s@%s = commit %s: %d file%s in %s (%d downloaded, %s; %d already there; %d reused), SHA256SUMS written\n",
           o.repo, o.revision, r.commit, r.n_files, r.n_files == 1 ? "" : "s", o.dir, r.n_downloaded,
           wk_format_bytes(b, sizeof b, r.bytes_downloaded), r.n_present, r.n_reused);
    return 0;
}
