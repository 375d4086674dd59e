/* Step 2, reuse: the request's attention policy is set (state computed
 * under another policy is never reused), then the prefix cache picks the
 * state to resume from and says how many prompt tokens are left to
 * prefill. */
#include <stdio.h>

#include "pipeline/pipeline_internal.h"

int pl_ckpt_kind_of_boundary(int chat_kind, unsigned flags)
{
    switch (chat_kind) {
    case CHAT_B_SYSTEM_END: return CKPT_SYSTEM_END;
    case CHAT_B_USER_START: return (flags & CHAT_BFLAG_LAST_USER) ? CKPT_LAST_USER_START : CKPT_USER_START;
    case CHAT_B_TOOL_RESPONSE_START: return CKPT_TOOL_RESULT;
    case CHAT_B_ASSISTANT_START: return CKPT_ASSISTANT_START;
    case CHAT_B_GENERATION_START: return CKPT_GENERATION_START;
    default: return CKPT_USER_START; /* a later system turn: like an earlier user turn */
    }
}

int pl_reuse(pl_request *r)
{
    pl_engine *pe = r->pe;
    const eng_request *req = r->req;
    eng_ctx_set_policy(pe->ctx, req->has_policy ? &req->policy : &pe->cfg.eng.policy);
    wk_error err = {0};
    if (ckpt_cache_begin(pe->cache, r->ids, r->n, r->marks, r->n_marks, req->fresh, &r->plan, &err))
        return pl_fail(r, 500, "server_error", NULL, "%s", err.msg);
    r->begun = true;
    ckpt_plan *p = &r->plan;
    r->c.cached_tokens = p->start;
    r->c.recomputed_tokens = r->n - p->start;
    r->c.replayed_tokens = p->replayed;
    r->c.ckpt_pos = p->ckpt_pos;
    if (p->ckpt_kind >= 0) snprintf(r->c.ckpt_kind, sizeof r->c.ckpt_kind, "%s", ckpt_kind_name(p->ckpt_kind));
    r->c.ckpt_from_disk = p->from_disk;
    return 0;
}
