/* Disk archive of cached sequences: one file per conversation holding the
 * token ids, the attention KV up to the last token and a few checkpoints
 * (recurrent state), so that a restarted server can resume a conversation.
 *
 * Format (version 1, all integers little-endian; bulk arrays in the host's
 * order, which the build requires to be little-endian):
 *   header   96 bytes: "WKCACHE\0", u32 version, u32 header_bytes,
 *            u64 model_id, u64 policy_fp, u64 conversation,
 *            i32 n_tokens, i32 n_ckpt, u32 n_attn_layers, u32 n_head_kv,
 *            u32 d_k, u32 d_v, u64 state_bytes (per checkpoint),
 *            u64 tokens_hash, u64 payload_hash, u64 header_hash
 *   tokens   n_tokens × i32
 *   table    n_ckpt × {i32 pos, i32 kind, u64 prefix_hash}
 *   payload  KV: per attention layer, K heads [n_tokens][d_k] then V heads
 *            [n_tokens][d_v] (F16 bits); then n_ckpt states of state_bytes
 * Hashes are XXH3-64: header_hash over the 88 bytes before it, tokens_hash
 * over tokens + table, payload_hash over the payload. Files are written to
 * a temporary name, fsync'd and renamed into place, so a reader sees a whole
 * file or none; anything that fails a check is reported as WK_EFORMAT. */
#ifndef WICK_CACHE_ARCHIVE_H
#define WICK_CACHE_ARCHIVE_H

#include <stddef.h>
#include <stdint.h>

#include "cache/checkpoint.h"
#include "engine/context.h"
#include "engine/sequence.h"
#include "util/err.h"

#define CKPT_ARCHIVE_VERSION 1u
#define CKPT_ARCHIVE_EXT ".wkc"

typedef struct ckpt_archive_ckpt {
    int32_t pos;
    int32_t kind;
    uint64_t prefix_hash;
} ckpt_archive_ckpt;

/* What a scan reads: header, tokens and checkpoint table (not the payload). */
typedef struct ckpt_archive_info {
    char path[4096];
    uint64_t conversation, model_id, policy_fp;
    int32_t n_tokens;
    int32_t *tokens;           /* owned */
    int32_t n_ckpt;
    ckpt_archive_ckpt *ckpts;  /* owned */
    uint64_t state_bytes;      /* per checkpoint */
    uint64_t payload_hash;
    size_t file_bytes;
    double mtime;              /* seconds since the epoch */
} ckpt_archive_info;

/* Path of a conversation's file in dir. */
void ckpt_archive_path(char *out, size_t cap, const char *dir, uint64_t conversation);

/* Writes the sequence's tokens and KV (all eng_seq_pos positions) and the
 * given complete checkpoints (positions <= eng_seq_pos) to
 * dir/<conversation>.wkc atomically. *file_bytes gets the size. WK_EIO,
 * WK_ENOMEM, WK_EINVAL (a checkpoint past the sequence). */
int ckpt_archive_write(const char *dir, uint64_t conversation, eng_ctx *ctx, eng_seq *seq, const ckpt *const *ckpts,
                       int n_ckpt, size_t *file_bytes, wk_error *err);

/* Reads and checks the header, tokens and table of path (sizes against the
 * file length, hashes, version). WK_EFORMAT for anything corrupt or
 * truncated, WK_EIO if it cannot be read. info is filled on success (free
 * with ckpt_archive_info_free). */
int ckpt_archive_scan(const char *path, ckpt_archive_info *info, wk_error *err);

/* Loads a scanned file into seq (cleared first): checks model id, policy
 * fingerprint and shape against ctx/seq, reads the payload and checks its
 * hash before writing anything into seq, then sets the KV and tokens and
 * fills ckpts[0..info->n_ckpt) (complete; caller frees each). WK_EFORMAT if
 * the file is corrupt, WK_EBUSY if it was replaced (a newer version written
 * by another server) since the scan: scan it again. WK_EINVAL if it is for
 * another model or policy, WK_ERANGE if it exceeds the sequence's capacity. */
int ckpt_archive_load(const ckpt_archive_info *info, eng_ctx *ctx, eng_seq *seq, ckpt *ckpts, wk_error *err);

void ckpt_archive_info_free(ckpt_archive_info *info);

#endif
