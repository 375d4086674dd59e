/* Undoing a speculative batch: attention KV is cut at any position; the recurrent
 * (conv + SSM) state goes back to a copy saved before the batch, and the accepted
 * tokens are fed again by the caller. Per-position states would avoid that replay but
 * cost a state copy per draft position in every step (see bench/spec.sh for the
 * numbers that decided it). */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "engine/engine_impl.h"
#include "engine/spec.h"

/* Tokens hashed before a mark's position: enough to tell a mark of another context
 * from this one without hashing a long prefix on every step. */
#define MARK_TAIL 64

static uint64_t tail_hash(const eng_seq *s, int32_t pos)
{
    int32_t from = pos > MARK_TAIL ? pos - MARK_TAIL : 0;
    return XXH3_64bits(s->tokens + from, sizeof(int32_t) * (size_t)(pos - from));
}

size_t eng_seq_mark_bytes(const eng_seq *s) { return s->rec_floats * sizeof(float); }

int eng_seq_mark_save(eng_seq *s, eng_seq_mark *mk, wk_error *err)
{
    for (int32_t p = 0; p < s->ctx->n_parts; p++) {
        const size_t bytes = s->parts[p].rec_floats * sizeof(float);
        be_backend *be = s->ctx->parts[p].be;
        if (mk->state[p] && (mk->be[p] != be || mk->state_bytes[p] != bytes)) {
            be_release(mk->be[p], mk->state[p]);
            mk->state[p] = NULL;
        }
        if (bytes && !mk->state[p]) {
            mk->state[p] = be_alloc(be, bytes);
            if (!mk->state[p])
                return wk_fail(err, WK_ENOMEM, "speculation: out of memory for a state copy (%zu bytes)", bytes);
            mk->be[p] = be;
            mk->state_bytes[p] = bytes;
        }
        if (bytes && be_copy(be, mk->state[p], s->parts[p].rec_mem, bytes))
            return wk_fail(err, WK_ENOMEM, "speculation: out of memory copying the recurrent state");
    }
    mk->seq = s;
    mk->pos = s->st.n_past;
    mk->tail_hash = tail_hash(s, mk->pos);
    return 0;
}

int eng_seq_rewind(eng_seq *s, const eng_seq_mark *mk, int32_t to, int32_t *reached, wk_error *err)
{
    *reached = s->st.n_past;
    if (mk->seq != s || mk->pos > s->st.n_past || tail_hash(s, mk->pos) != mk->tail_hash)
        return wk_fail(err, WK_EINVAL, "speculation: the state mark (position %d) does not belong to this sequence",
                       mk->pos);
    if (to < mk->pos || to > s->st.n_past)
        return wk_fail(err, WK_EINVAL, "speculation: rewind to %d outside [%d, %d]", to, mk->pos, s->st.n_past);
    if (to == s->st.n_past) return 0;
    if (s->rec_floats) {
        for (int32_t p = 0; p < s->ctx->n_parts; p++)
            if (mk->state_bytes[p] &&
                be_copy(s->ctx->parts[p].be, s->parts[p].rec_mem, mk->state[p], mk->state_bytes[p]))
                return wk_fail(err, WK_ENOMEM, "speculation: out of memory restoring the recurrent state");
        to = mk->pos;
    }
    s->st.n_past = to;
    *reached = to;
    return 0;
}

void eng_seq_mark_free(eng_seq_mark *mk)
{
    for (int32_t p = 0; p < ENG_MAX_SPLIT; p++)
        if (mk->state[p]) be_release(mk->be[p], mk->state[p]);
    memset(mk, 0, sizeof *mk);
}
