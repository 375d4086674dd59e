/* Prefix index: token-granular longest-common-prefix lookup over a set of
 * cached token sequences (entries), as a compressed radix tree. Edges hold
 * runs of token ids; a prefix shared by several entries is stored once.
 *
 * Matching is per token, never per block: an entry that shares 1,237 tokens
 * with the query reports exactly 1,237. pidx_match returns every entry with
 * its common-prefix length, so the caller can choose by what it can actually
 * reuse (for hybrid models: the nearest checkpoint at or before the match).
 *
 * Entries are named by a caller-chosen 64-bit key (slot number, archive id).
 * Not thread-safe; the engine thread owns it. Model-free. */
#ifndef WICK_CACHE_PREFIX_INDEX_H
#define WICK_CACHE_PREFIX_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

typedef struct pidx pidx;

typedef struct pidx_hit {
    int64_t key;
    int32_t match;  /* tokens shared with the query from position 0 */
    int32_t len;    /* tokens the entry holds */
} pidx_hit;

/* New empty index (WK_ENOMEM). Free with pidx_free. */
int pidx_new(pidx **out, wk_error *err);
void pidx_free(pidx *ix);

/* Adds (or replaces) entry key with tokens[0..n) (copied; n may be 0).
 * WK_ENOMEM leaves the index without the key. */
int pidx_put(pidx *ix, int64_t key, const int32_t *tokens, int32_t n, wk_error *err);

/* Removes entry key; no-op if absent. */
void pidx_remove(pidx *ix, int64_t key);

/* Entries and their common-prefix length with query[0..n), longest match
 * first (ties: shorter entry first, then smaller key). Writes at most cap
 * hits and returns how many entries there are in total (may exceed cap). */
int pidx_match(const pidx *ix, const int32_t *query, int32_t n, pidx_hit *hits, int cap);

/* Number of entries; tokens stored in edges (memory use is ~4 bytes each). */
int pidx_count(const pidx *ix);
size_t pidx_stored_tokens(const pidx *ix);

#endif
