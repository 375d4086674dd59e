/* Step 3, prefill: the prompt tokens the cache could not give, through the
 * cache (checkpoints at chat boundaries), cancellable between chunks, with
 * progress for the monitor. */
#include "pipeline/pipeline_internal.h"
#include "util/timeutil.h"

static void on_progress(void *user, int32_t done, int32_t total)
{
    const pl_request *r = user;
    if (r->sink->progress) r->sink->progress(r->sink->user, done, total);
}

int pl_prefill(pl_request *r)
{
    const pl_sink *sink = r->sink;
    if (sink->live) sink->live(sink->user, PL_PHASE_PREFILL, &r->c);
    eng_prefill_opts po = {0};
    po.cancel_flag = sink->cancel;
    po.progress = on_progress;
    po.user = r;
    po.all_logits = r->req->all_logits;
    pl_spec_prefill_opts(r, &po);
    wk_error err = {0};
    double t = wk_now_ms();
    int rc = ckpt_cache_prefill(r->pe->cache, &r->plan, r->ids, r->n, &po, &err);
    r->c.prefill_ms = wk_now_ms() - t;
    if (rc == WK_ECANCELLED) {
        r->c.recomputed_tokens = eng_seq_pos(r->plan.seq) - r->plan.start;
        return pl_fail(r, 499, "cancelled", NULL, "request cancelled during prefill");
    }
    if (rc == WK_ERANGE)
        return pl_fail(r, 400, "invalid_request_error", "context_length_exceeded", "%s", err.msg);
    if (rc) return pl_fail(r, 500, "server_error", NULL, "prefill failed: %s", err.msg);
    if (r->c.prefill_ms > 0) r->c.prefill_tok_per_s = r->c.recomputed_tokens / (r->c.prefill_ms / 1000.0);
    if (sink->prefilled) sink->prefilled(sink->user, r->pe->ctx);
    return 0;
}
