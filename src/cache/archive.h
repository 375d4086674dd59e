/* Disk archive of cached sequences: one append-only file per conversation
 * holding its token ids, the attention KV of every position and a few
 * checkpoints (recurrent state), so that a restarted server resumes it.
 *
 * Format (version 2; integers little-endian, bulk arrays in the host's
 * order, which the build requires to be little-endian):
 *   header  72 bytes: "WKCACHE\0", u32 version, u32 header_bytes,
 *           u64 model_id, u64 policy_fp, u64 conversation,
 *           u32 n_attn_layers, u32 n_head_kv, u32 d_k, u32 d_v (KV row
 *           widths in uint16 units of the KV type), u64 state_bytes (per
 *           checkpoint), u64 header_hash (XXH3-64 of the 64 bytes before it)
 *   records, each covering positions [start, start + n_tok) right after the
 *   previous one's:
 *     56 bytes: "WKRECORD", i32 start, i32 n_tok, i32 n_ckpt, u32 0,
 *               u64 body_bytes, u64 meta_hash, u64 payload_hash,
 *               u64 header_hash (of the 48 bytes before it)
 *     body:     meta = tokens n_tok × i32, table n_ckpt × {i32 pos,
 *               i32 kind, u64 prefix_hash}; payload = KV rows of its
 *               positions, per attention layer K heads then V heads, each
 *               head n_tok rows; then n_ckpt states of state_bytes.
 * A record's header is written after its body and fsync'd: a record is
 * whole or it is not there. A scan takes the records up to the first one
 * that is incomplete or fails a check and ignores the rest (a torn tail
 * from a crash mid-write: the file reads as its state before that write);
 * an append first cuts such a tail off. A file is only rewritten from
 * position 0 through a temporary name renamed into place, so a reader sees
 * the old file or the new one, never a mix.
 *
 * Checkpoint tables may name any position up to the end of their record
 * (prefix hashes are checked over the whole token list). */
#ifndef WICK_CACHE_ARCHIVE_H
#define WICK_CACHE_ARCHIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/checkpoint.h"
#include "engine/context.h"
#include "engine/sequence.h"
#include "util/err.h"

#define CKPT_ARCHIVE_VERSION 2u
#define CKPT_ARCHIVE_EXT ".wkc"

typedef struct ckpt_archive_ckpt {
    int32_t pos;
    int32_t kind;
    uint64_t prefix_hash;
    uint64_t state_offset;     /* where its state starts in the file */
} ckpt_archive_ckpt;

typedef struct ckpt_archive_record {
    uint64_t offset;           /* of its 56-byte header */
    uint64_t payload_offset;
    int32_t start, n_tok;
    uint64_t payload_hash;
} ckpt_archive_record;

/* What a scan reads: header, tokens and checkpoint tables (not the KV). */
typedef struct ckpt_archive_info {
    char path[4096];
    uint64_t conversation, model_id, policy_fp;
    int32_t n_tokens;
    int32_t *tokens;              /* owned */
    int32_t n_ckpt;
    ckpt_archive_ckpt *ckpts;     /* owned, in file order */
    int n_records;
    ckpt_archive_record *records; /* owned */
    uint64_t state_bytes;         /* per checkpoint */
    size_t file_bytes;            /* whole records only */
    size_t torn_bytes;            /* ignored bytes after them (a crash mid-write) */
    double mtime;                 /* seconds since the epoch */
} ckpt_archive_info;

/* Path of a conversation's file in dir. */
void ckpt_archive_path(char *out, size_t cap, const char *dir, uint64_t conversation);

/* Reads and checks the header, every record's tokens and table (sizes
 * against the file length with overflow-checked arithmetic, hashes). A
 * torn tail is not an error (info->torn_bytes says how much). WK_EFORMAT
 * for a file that is corrupt before its first whole record;
 * WK_EUNSUPPORTED for another format version (another wick build: leave
 * the file alone); WK_EIO if it cannot be read. info filled on success
 * (free with ckpt_archive_info_free). */
int ckpt_archive_scan(const char *path, ckpt_archive_info *info, wk_error *err);

/* Loads a scanned file into seq (cleared first): checks model id, policy
 * fingerprint and shape against ctx/seq, reads the payload of every record
 * and checks its hash, then sets the KV and tokens and fills
 * ckpts[0..info->n_ckpt) (complete; caller frees each). WK_EFORMAT if the
 * payload is damaged, WK_EBUSY if the file no longer holds exactly what
 * the scan saw (another server rewrote or extended it): scan again. WK_EINVAL if it is for
 * another model or policy, WK_ERANGE if it exceeds the sequence's
 * capacity. seq is cleared on any failure. */
int ckpt_archive_load(const ckpt_archive_info *info, eng_ctx *ctx, eng_seq *seq, ckpt *ckpts, wk_error *err);

void ckpt_archive_info_free(ckpt_archive_info *info);

/* ---- writing, a bounded amount of work at a time --------------------------------
 * The engine thread archives between requests, so a writer does its work
 * in steps of about max_bytes and can be abandoned when the slot it reads
 * is needed. While a writer lives, nothing may change seq's positions
 * below the end or the given checkpoints. */
typedef struct ckpt_archive_writer ckpt_archive_writer;

/* Starts archiving positions [from, eng_seq_pos(seq)) of seq and the given
 * complete checkpoints (positions <= eng_seq_pos). from > 0 appends to the
 * conversation's file, which must hold exactly `from` tokens in
 * file_bytes bytes of whole records (a scan's info); from == 0 writes a
 * new file under a temporary name and renames it over any old one when
 * done. WK_EINVAL for a checkpoint that does not fit, WK_EIO, WK_ENOMEM. */
int ckpt_archive_writer_start(ckpt_archive_writer **out, const char *dir, uint64_t conversation, eng_ctx *ctx,
                              eng_seq *seq, int32_t from, size_t file_bytes, const ckpt *const *ckpts, int n_ckpt,
                              wk_error *err);

/* Writes about max_bytes more. 1: more to do; 0: done, durable on disk
 * (free the writer); < 0: failed, the file is as it was (free it). */
int ckpt_archive_writer_step(ckpt_archive_writer *w, size_t max_bytes, wk_error *err);

/* Abandons unfinished work (the file goes back to what it was) and frees
 * the writer. Safe on NULL and after step returned 0 or < 0. */
void ckpt_archive_writer_free(ckpt_archive_writer *w);

/* Slot whose sequence the writer reads (the caller's tag, set after start). */
int ckpt_archive_writer_tag(const ckpt_archive_writer *w);
void ckpt_archive_writer_set_tag(ckpt_archive_writer *w, int tag);

/* start + steps until done: the whole archive write in one call. */
int ckpt_archive_write(const char *dir, uint64_t conversation, eng_ctx *ctx, eng_seq *seq, int32_t from,
                       size_t file_bytes, const ckpt *const *ckpts, int n_ckpt, wk_error *err);

#endif
