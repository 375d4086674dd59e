/* Checkpoints: a snapshot of a sequence's recurrent state (engine
 * eng_snapshot: position, prefix hash, policy fingerprint, model id, state)
 * plus why it was taken (kind), whether the work that produced it finished
 * (complete) and when.
 *
 * A checkpoint is trusted only after ckpt_validate: same model, compatible
 * attention policy, complete, and the prefix hash equal to the hash of the
 * tokens it is about to be used for. For pure-attention models the state is
 * empty and a checkpoint only records a position (KV can be cut anywhere). */
#ifndef WICK_CACHE_CHECKPOINT_H
#define WICK_CACHE_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/sequence.h"
#include "util/err.h"

/* Why a checkpoint sits where it does. Order = eviction value, lowest first:
 * interval checkpoints in generated text are the first to go. */
typedef enum ckpt_kind {
    CKPT_GEN_INTERVAL = 0,   /* every N generated tokens */
    CKPT_USER_START,         /* start of an earlier user turn (min spacing applies) */
    CKPT_ASSISTANT_START,    /* header of an assistant message in history (agentic turn) */
    CKPT_TOOL_RESULT,        /* start of a tool-response turn */
    CKPT_PROMPT_END,         /* after the last prompt token */
    CKPT_GEN_END,            /* end of generation (prompt + answer) */
    CKPT_RESUME,             /* live state a request resumed from (fallback after a cancel) */
    CKPT_LAST_USER_START,    /* start of the last user turn */
    CKPT_GENERATION_START,   /* assistant header of the prompt */
    CKPT_SYSTEM_END,         /* after the system/tools block */
    CKPT_KIND_COUNT,
    CKPT_KV_PREFIX = 100,    /* not stored: pure-attention reuse by cutting the KV */
    CKPT_LIVE = 101,         /* not stored: the live state extended as it was */
} ckpt_kind;

/* "system_end", "gen_interval", ... ("kv_prefix", "live" for the two
 * pseudo-kinds, "none" for -1). */
const char *ckpt_kind_name(int kind);

typedef struct ckpt {
    eng_snapshot snap;  /* pos, prefix_hash, policy_fp, model_id, state (owned) */
    int kind;           /* ckpt_kind */
    bool complete;      /* the prefill/decode that produced it finished */
    double t_ms;        /* monotonic time taken */
} ckpt;

/* Hash of a token prefix, the same function eng_seq_prefix_hash uses. */
uint64_t ckpt_prefix_hash(const int32_t *tokens, int32_t n);

/* Snapshots the sequence at its current position into c (c zeroed or
 * reused), kind as given, complete = false (the caller confirms it).
 * WK_ENOMEM. */
int ckpt_take(ckpt *c, const eng_seq *s, int kind, wk_error *err);

/* Whether c may be used for a prompt whose first n tokens are tokens:
 * complete, c->pos <= n, hash of tokens[0..pos) == prefix hash, model id
 * and policy fingerprint equal to the given ones. WK_EINVAL naming the
 * first mismatch. */
int ckpt_validate(const ckpt *c, const int32_t *tokens, int32_t n, uint64_t model_id, uint64_t policy_fp,
                  wk_error *err);

/* Validates c against tokens (as ckpt_validate, with the sequence's model
 * ctx's model and the sequence's policy), then restores the sequence to it (engine seq_restore, which
 * re-checks against the live tokens). On refusal the sequence is untouched. */
int ckpt_restore(const ckpt *c, const eng_ctx *ctx, eng_seq *s, const int32_t *tokens, int32_t n, wk_error *err);

/* A deep copy of src into dst (dst's old contents are not freed). WK_ENOMEM. */
int ckpt_copy(ckpt *dst, const ckpt *src, wk_error *err);

/* Bytes of recurrent state held (0 for pure-attention models). */
size_t ckpt_bytes(const ckpt *c);

/* Frees the state and zeroes c. */
void ckpt_free(ckpt *c);

#endif
