/* Checkpoints: take, validate, restore. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "cache/checkpoint.h"
#include "util/timeutil.h"

static const char *const k_names[CKPT_KIND_COUNT] = {
    [CKPT_GEN_INTERVAL] = "gen_interval",
    [CKPT_USER_START] = "user_start",
    [CKPT_ASSISTANT_START] = "assistant_start",
    [CKPT_TOOL_RESULT] = "tool_result",
    [CKPT_PROMPT_END] = "prompt_end",
    [CKPT_GEN_END] = "gen_end",
    [CKPT_RESUME] = "resume",
    [CKPT_LAST_USER_START] = "last_user_start",
    [CKPT_GENERATION_START] = "generation_start",
    [CKPT_SYSTEM_END] = "system_end",
};

const char *ckpt_kind_name(int kind)
{
    if (kind >= 0 && kind < CKPT_KIND_COUNT) return k_names[kind];
    if (kind == CKPT_KV_PREFIX) return "kv_prefix";
    if (kind == CKPT_LIVE) return "live";
    return "none";
}

uint64_t ckpt_prefix_hash(const int32_t *tokens, int32_t n)
{
    if (n < 0) n = 0;
    return XXH3_64bits(tokens, sizeof(int32_t) * (size_t)n);
}

int ckpt_take(ckpt *c, const eng_seq *s, int kind, wk_error *err)
{
    int rc = seq_snapshot(s, &c->snap, err);
    if (rc) return rc;
    c->kind = kind;
    c->complete = false;
    c->t_ms = wk_now_ms();
    return 0;
}

int ckpt_validate(const ckpt *c, const int32_t *tokens, int32_t n, uint64_t model_id, uint64_t policy_fp,
                  wk_error *err)
{
    const eng_snapshot *s = &c->snap;
    if (!c->complete)
        return wk_fail(err, WK_EINVAL, "checkpoint at %d (%s) is not complete", s->pos, ckpt_kind_name(c->kind));
    if (s->model_id != model_id)
        return wk_fail(err, WK_EINVAL, "checkpoint at %d belongs to another model (id %016llx, loaded %016llx)", s->pos,
                       (unsigned long long)s->model_id, (unsigned long long)model_id);
    if (s->policy_fp != policy_fp)
        return wk_fail(err, WK_EINVAL, "checkpoint at %d was taken under another attention policy", s->pos);
    if (s->pos < 0 || s->pos > n)
        return wk_fail(err, WK_EINVAL, "checkpoint at %d is past the %d tokens of the prompt", s->pos, n);
    if (ckpt_prefix_hash(tokens, s->pos) != s->prefix_hash)
        return wk_fail(err, WK_EINVAL, "checkpoint at %d: the prompt's first %d tokens differ from the checkpoint's",
                       s->pos, s->pos);
    return 0;
}

int ckpt_restore(const ckpt *c, const eng_ctx *ctx, eng_seq *s, const int32_t *tokens, int32_t n, wk_error *err)
{
    int rc = ckpt_validate(c, tokens, n, eng_ctx_model(ctx)->model_id, eng_seq_policy_fp(s), err);
    if (rc) return rc;
    return seq_restore(s, &c->snap, err);
}

int ckpt_copy(ckpt *dst, const ckpt *src, wk_error *err)
{
    *dst = *src;
    dst->snap.state = NULL;
    if (src->snap.state_bytes) {
        dst->snap.state = malloc(src->snap.state_bytes);
        if (!dst->snap.state) {
            memset(dst, 0, sizeof *dst);
            return wk_fail(err, WK_ENOMEM, "checkpoint copy: out of memory (%zu bytes)", src->snap.state_bytes);
        }
        memcpy(dst->snap.state, src->snap.state, src->snap.state_bytes);
    }
    return 0;
}

size_t ckpt_bytes(const ckpt *c) { return c->snap.state_bytes; }

void ckpt_free(ckpt *c)
{
    if (!c) return;
    eng_snapshot_free(&c->snap);
    memset(c, 0, sizeof *c);
}
