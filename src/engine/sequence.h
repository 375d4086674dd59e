/* Sequence state: per attention layer an F16 KV range (truncatable at any
 * position), per recurrent layer the conv + SSM state in F32 (not
 * truncatable), the position, and the token ids fed so far.
 *
 * Snapshots copy the recurrent state and record (position, hash of the token
 * prefix, policy fingerprint, model id); restore checks all four against the
 * live sequence, then puts the recurrent state back and truncates the KV to
 * the snapshot position. The KV of positions < snapshot position must still
 * be in the sequence (restore never recreates KV). For pure-attention models
 * the recurrent part is empty and a snapshot is a few bytes. */
#ifndef WICK_ENGINE_SEQUENCE_H
#define WICK_ENGINE_SEQUENCE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/context.h"
#include "model/model.h"
#include "util/err.h"

/* Creates an empty sequence with capacity n_ctx positions (<= 0: the context's
 * n_ctx) on the context's backend. Free with eng_seq_free before the context. */
int eng_seq_new(eng_seq **out, eng_ctx *c, int32_t n_ctx, wk_error *err);
void eng_seq_free(eng_seq *s);

int32_t eng_seq_pos(const eng_seq *s);       /* tokens in the state */
int32_t eng_seq_capacity(const eng_seq *s);
const int32_t *eng_seq_tokens(const eng_seq *s); /* [eng_seq_pos] ids fed so far */
uint64_t eng_seq_policy_fp(const eng_seq *s);    /* policy its KV was built with */
uint64_t eng_seq_prefix_hash(const eng_seq *s, int32_t n); /* hash of the first n ids */
/* Memory its KV cache takes: on the CPU backend the pages written so far
 * (the most positions it ever held × KV bytes per token: the allocation is
 * a lazily backed mapping), elsewhere the whole allocation. */
uint64_t eng_seq_kv_bytes_held(const eng_seq *s);
/* Next-token logits (n_vocab floats) of the sequence's latest eng_step that asked for
 * them; NULL before one did. Valid until the sequence's next step. */
const float *eng_seq_logits(const eng_seq *s);
/* The state as the forward pass sees it (for cache/ code that copies KV). */
model_state *eng_seq_state(eng_seq *s);

/* Empties the sequence (position 0, recurrent state zeroed). */
void eng_seq_clear(eng_seq *s);

/* Makes dst hold the first n tokens of src: their ids and KV (copied
 * through a host buffer), position n, src's policy fingerprint. The
 * recurrent state of dst is zeroed: for models with recurrent layers restore
 * a snapshot taken at n next (seq_restore). Both sequences belong to the
 * same context. WK_ERANGE if n exceeds src's position or dst's capacity,
 * WK_ENOMEM. dst is cleared on failure. */
int eng_seq_copy_prefix(eng_seq *dst, const eng_seq *src, int32_t n, wk_error *err);

/* Drops positions >= n_pos from the KV. Fine for any n_pos <= pos when the
 * model has no recurrent layers; with recurrent layers only n_pos == pos
 * (no-op) or 0 (clear) are possible — anything else returns WK_EUNSUPPORTED
 * (restore a snapshot instead). WK_ERANGE if n_pos > pos or < 0. */
int kv_truncate(eng_seq *s, int32_t n_pos, wk_error *err);

typedef struct eng_snapshot {
    int32_t pos;           /* tokens covered */
    uint64_t prefix_hash;  /* eng_seq_prefix_hash(seq, pos) at snapshot time */
    uint64_t policy_fp;
    uint64_t model_id;
    size_t state_bytes;    /* bytes in state (0 for pure-attention models) */
    float *state;          /* conv then ssm of each recurrent layer, host memory, owned */
} eng_snapshot;

/* Bytes one snapshot of this sequence's recurrent state takes. */
size_t eng_snapshot_bytes(const eng_seq *s);

/* Copies the recurrent state and records the identity fields into snap.
 * snap->state is reused if already the right size, else (re)allocated.
 * Zero-initialize a fresh snapshot. WK_ENOMEM on allocation failure. */
int seq_snapshot(const eng_seq *s, eng_snapshot *snap, wk_error *err);

/* Puts the sequence back to the snapshot: checks model id, policy
 * fingerprint, that snap->pos <= pos and that the live prefix of snap->pos
 * tokens hashes to snap->prefix_hash (WK_EINVAL naming the mismatch,
 * sequence untouched), then copies the recurrent state and truncates the KV
 * to snap->pos. */
int seq_restore(eng_seq *s, const eng_snapshot *snap, wk_error *err);

/* Frees snap->state and zeroes the struct. */
void eng_snapshot_free(eng_snapshot *snap);

/* For the disk archive (cache/): the caller has written the KV of positions
 * < n through eng_seq_state(); this records the n token ids, the position
 * and the policy fingerprint the KV was computed with. The recurrent state
 * is zeroed: restore a snapshot next (seq_restore). WK_ERANGE if n exceeds
 * the capacity. */
int eng_seq_adopt(eng_seq *s, const int32_t *tokens, int32_t n, uint64_t policy_fp, wk_error *err);

#endif
