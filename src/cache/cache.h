/* The prefix cache: a bounded set of slots, each a cached sequence (an
 * eng_seq with its KV) plus its checkpoints, a token-granular prefix index
 * over them, a RAM budget with eviction, and an optional disk archive.
 *
 * A request goes through it like this (engine thread only; several may be in
 * progress at once, each on its own slot: a slot in use is never cut, cleared or
 * evicted, only copied from):
 *   ckpt_cache_begin()    picks the slot with the longest usable prefix,
 *                         restores it from the nearest valid checkpoint at or
 *                         before the match (pure-attention: cuts the KV at
 *                         the match) and says how many tokens to prefill;
 *   ckpt_cache_prefill()  prefills the rest, stopping at chat boundaries to
 *                         take checkpoints (pending until the prefill ends);
 *   ckpt_cache_decoded()  after each decoded token (interval checkpoints);
 *   ckpt_cache_end()      confirms (ok) or falls back to the last confirmed
 *                         checkpoint (cancelled or failed prefill or decode),
 *                         takes the end-of-generation checkpoint, enforces
 *                         the budget and marks the slot for the archive;
 *   ckpt_cache_archive_step()  when the engine is idle (after the response
 *                         went out): writes the archive in bounded steps.
 * A prefill or decode that was cancelled or failed never leaves a
 * checkpoint behind.
 *
 * Slot choice weighs what a reuse gains against what it destroys: a short
 * match (a side request sharing only a chat header) never cuts a long
 * cached conversation; it runs in a free or least-recently-used slot seeded
 * with a copy of the shared prefix.
 *
 * Reuse requires, for every checkpoint: same model identity, same attention
 * policy fingerprint, complete, prefix hash equal to the new prompt's. */
#ifndef WICK_CACHE_CACHE_H
#define WICK_CACHE_CACHE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/checkpoint.h"
#include "engine/context.h"
#include "engine/sequence.h"
#include "util/err.h"

typedef struct ckpt_cache ckpt_cache;

/* RAM for idle conversations and checkpoints when none is given: 2 GiB, about
 * 100 checkpoints of qwen3.5-0.8b. */
#define CKPT_CACHE_MEM_DEFAULT ((size_t)2 << 30)
#define CKPT_CACHE_SLOTS_DEFAULT 4 /* a few concurrent conversations */

typedef struct ckpt_cache_config {
    size_t mem_bytes;      /* RAM for idle slots' KV + all checkpoint states (0: default 2 GiB) */
    int max_slots;         /* cached sequences (0: CKPT_CACHE_SLOTS_DEFAULT) */
    int max_ckpts_per_slot;/* 0: default 24 */
    int gen_interval;      /* checkpoint every N generated tokens (0: default 512; <0: off) */
    int min_step;          /* spacing for non-essential boundaries (0: default 1024 tokens) */
    const char *dir;       /* disk archive folder, NULL/"" = none */
    size_t disk_bytes;     /* disk archive cap (0: default 8 GiB) */
} ckpt_cache_config;

void ckpt_cache_config_default(ckpt_cache_config *cfg);

/* A chat boundary as a token position in the prompt (service maps the
 * template's byte offsets to token indices). kind is a ckpt_kind. */
typedef struct ckpt_mark {
    int32_t pos;
    int kind;
} ckpt_mark;

/* What ckpt_cache_begin decided, and what the request reports. */
typedef struct ckpt_plan {
    eng_seq *seq;          /* sequence to prefill and decode into (owned by the cache) */
    int slot;              /* slot index */
    int32_t n_prompt;
    int32_t match;         /* common prefix with the chosen cached sequence */
    int32_t start;         /* tokens kept (restored): prefill ids[start..n) */
    int32_t replayed;      /* tokens recomputed although cached: match - start (prompt-capped) */
    int ckpt_kind;         /* kind of the state restored (-1: none, cold) */
    int32_t ckpt_pos;      /* its position (== start), -1 when cold */
    bool from_disk;        /* restored from the archive */
    int32_t n_generated;   /* tokens decoded so far */
    /* internal */
    int n_pending;         /* checkpoints of this request not yet confirmed */
    ckpt_mark *marks;      /* where its prefill takes checkpoints (owned until ckpt_cache_end) */
    int n_marks;
    int32_t confirmed_pos; /* where to fall back for pure-attention models */
} ckpt_plan;

/* Creates the cache over a context (borrowed, must outlive the cache). With
 * cfg->dir set, scans the archive folder: valid files for this model are
 * indexed (their payload is loaded only when used), corrupt or truncated
 * ones are reported and deleted. WK_ENOMEM, WK_EIO (folder unusable). */
int ckpt_cache_new(ckpt_cache **out, eng_ctx *ctx, const ckpt_cache_config *cfg, wk_error *err);
void ckpt_cache_free(ckpt_cache *c);

/* Capacity of the sequences it hands out (positions). */
int32_t ckpt_cache_n_ctx(const ckpt_cache *c);

/* Chooses and prepares a sequence for prompt ids[0..n). fresh: reuse
 * nothing (a free or least-recently-used slot is cleared). marks: the
 * prompt's chat boundaries (may be NULL), remembered for the prefill.
 * Never refuses for cache reasons: an unusable entry means a cold start.
 * Errors: WK_ENOMEM (no sequence could be allocated). */
int ckpt_cache_begin(ckpt_cache *c, const int32_t *ids, int32_t n, const ckpt_mark *marks, int n_marks,
                     bool fresh, ckpt_plan *plan, wk_error *err);

/* Prefills ids[plan->start..n) into plan->seq, taking pending checkpoints
 * at the remembered boundaries and at the end of the prompt. opts as for
 * eng_prefill (progress reports tokens done out of n - start). Returns what
 * eng_prefill returns (WK_ECANCELLED included); on any error call
 * ckpt_cache_end(ok = false). */
int ckpt_cache_prefill(ckpt_cache *c, ckpt_plan *plan, const int32_t *ids, int32_t n,
                       const eng_prefill_opts *opts, wk_error *err);

/* Call after each successful eng_decode on plan->seq. */
void ckpt_cache_decoded(ckpt_cache *c, ckpt_plan *plan);

/* Generated tokens that can still be fed before the next interval checkpoint is due
 * (INT32_MAX when none will be): speculative decoding feeds several tokens per step and
 * must land on that position exactly, as plain decoding does. */
int32_t ckpt_cache_decode_room(const ckpt_cache *c, const ckpt_plan *plan);

/* Finishes the request. ok: the prefill completed (generation may have
 * been stopped or cancelled at a token boundary: the state is consistent);
 * checkpoints are confirmed, an end-of-generation checkpoint is taken, the
 * index updated, the budget enforced and the slot archived. !ok: pending
 * checkpoints are dropped and the slot falls back to its last confirmed
 * checkpoint. */
void ckpt_cache_end(ckpt_cache *c, ckpt_plan *plan, bool ok);

/* Frees what a plan holds when ckpt_cache_begin succeeded but ckpt_cache_end will not
 * be called (ckpt_cache_end does it). */
void ckpt_cache_plan_free(ckpt_plan *plan);

/* Drops every slot and checkpoint in RAM (what the archive does not hold
 * yet is written to it first). Only while no request is in progress. */
void ckpt_cache_clear(ckpt_cache *c);

/* Sequences of n_ctx positions from now on (the slots are dropped as by
 * ckpt_cache_clear). For in-process users whose prompts grow. */
void ckpt_cache_set_n_ctx(ckpt_cache *c, int32_t n_ctx);

/* Whether archive work is pending (a write in progress or a slot whose
 * state the archive does not hold yet). */
bool ckpt_cache_archive_pending(const ckpt_cache *c);

/* Does about max_bytes of pending archive work; true while more remains.
 * Any other cache call may abandon an unfinished write of a slot it
 * changes (the file keeps its last whole state; the slot is written again
 * later). */
bool ckpt_cache_archive_step(ckpt_cache *c, size_t max_bytes);

/* Finishes all pending archive work (shutdown). ckpt_cache_free does it too. */
void ckpt_cache_archive_flush(ckpt_cache *c);

typedef struct ckpt_cache_stats {
    uint64_t hits, misses;           /* requests that reused something / nothing */
    uint64_t copies;                 /* hits served from a copy of another slot's prefix */
    uint64_t evictions;              /* checkpoints + slots evicted for the budget */
    uint64_t refused;                /* checkpoints that failed validation */
    uint64_t disk_loads, disk_writes, disk_corrupt;
    uint64_t replayed_tokens;        /* total tokens replayed after a restore */
    size_t ram_bytes, ram_budget;    /* idle KV + checkpoint states */
    size_t disk_bytes, disk_budget;
    int n_slots, n_ckpts, n_disk;
} ckpt_cache_stats;

void ckpt_cache_get_stats(const ckpt_cache *c, ckpt_cache_stats *st);

/* Monitor view: {"ram_bytes", "ram_budget", "disk_bytes", "disk_budget",
 * "hits", "misses", "evictions", "refused", "replayed_tokens", "disk_loads",
 * "disk_writes", "disk_corrupt", "slots": [{"slot", "conversation",
 * "tokens", "kv_bytes", "idle_s", "checkpoints": [{"pos", "kind", "bytes",
 * "where": "ram"}]}], "archive": [{"conversation", "tokens", "bytes",
 * "checkpoints": [...], "where": "disk"}]}. New reference. */
json_t *ckpt_cache_json(const ckpt_cache *c);

#endif
