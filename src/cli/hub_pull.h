/* Downloads from a Hugging Face hub (huggingface.co, a mirror, or any
 * server with the same layout; HF_ENDPOINT names it):
 *   GET {endpoint}/api/models/{repo}/revision/{revision}?blobs=true
 *       → {"sha": commit, "siblings": [{"rfilename", "size", "blobId",
 *          "lfs": {"sha256", "size"}}]}: the file list, pinned to the commit
 *   GET {endpoint}/{repo}/resolve/{commit}/{file}
 *       → the bytes, usually through a redirect to a CDN for LFS files
 * Every file goes to DIR/.NAME.wick-partial first, resumes from there with
 * an HTTP Range request (after a cut connection, in this run or the next),
 * and is renamed to its name only after its size and hash matched the
 * hub's metadata: SHA-256 for LFS files, the git blob SHA-1 for the others.
 * A file already in DIR (or in the reuse folder) is hashed and kept when it
 * matches. DIR/SHA256SUMS gets a line per file (for wick check --manifest). */
#ifndef WICK_CLI_HUB_PULL_H
#define WICK_CLI_HUB_PULL_H

#include <stdbool.h>
#include <stdint.h>

#include "util/err.h"

typedef struct hub_pull_options {
    const char *endpoint;           /* e.g. "https://huggingface.co" (no trailing slash needed) */
    const char *token;              /* bearer token (HF_TOKEN) or NULL */
    const char *repo;               /* "owner/name" */
    const char *revision;           /* branch, tag or commit ("main") */
    const char *const *patterns;    /* files to fetch: names or fnmatch patterns; none: all */
    int n_patterns;
    const char *dir;                /* destination folder (made if missing) */
    const char *reuse_dir;          /* --model-dir: files already on disk, or NULL */
    int retries;                    /* extra attempts per file after a cut connection or a 5xx */
    bool quiet;                     /* no progress bars */
} hub_pull_options;

typedef struct hub_pull_result {
    char commit[64];
    int n_files;        /* files selected */
    int n_downloaded;   /* fetched (fully or resumed) */
    int n_present;      /* already in DIR with the right hash */
    int n_reused;       /* taken from reuse_dir after hashing */
    uint64_t bytes_downloaded;
} hub_pull_result;

/* Pulls the selected files. Errors name the repository, revision or file:
 * WK_ENOTFOUND (repository, revision or file not on the hub; a pattern that
 * matches nothing), WK_EFORMAT (a hash or size mismatch: the partial file is
 * removed), WK_EIO (network after the retries: the partial file stays for
 * the next run; local files). */
int hub_pull(const hub_pull_options *o, hub_pull_result *res, wk_error *err);

#endif
