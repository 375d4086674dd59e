/* One request through the five steps (pipeline.h); step 5, finish, is
 * here: the final event goes to the caller first, then the cache confirms
 * the state (or falls back to its last confirmed checkpoint when anything
 * failed or was cancelled mid-prefill). */
#include <stdlib.h>
#include <string.h>

#include "pipeline/pipeline_internal.h"
#include "util/timeutil.h"

int pl_run(pl_engine *pe, const eng_request *req, const pl_sink *sink, eng_event *final)
{
    static const pl_sink none = {0};
    pl_request r = {0};
    r.pe = pe;
    r.req = req;
    r.sink = sink ? sink : &none;
    r.t0_ms = wk_now_ms();
    r.c.ckpt_pos = -1;
    pl_engine_lock(pe);
    int status = pl_admit(&r);
    if (!status) status = pl_reuse(&r);
    bool prefilled = false;
    /* prefill and generate: its forwards meet the other requests' in shared steps */
    if (!status) eng_sched_join(pe->sched, r.plan.seq);
    if (!status) {
        status = pl_prefill(&r);
        prefilled = status == 0;
    }
    if (!status) status = pl_generate(&r);
    if (r.begun) eng_sched_leave(pe->sched, r.plan.seq);

    /* finish */
    r.final.counters = r.c;
    if (r.sink->finish) r.sink->finish(r.sink->user, &r.final);
    if (r.begun) {
        /* A completed prefill followed by a clean end (stop, length, or a
         * cancel between decode steps) leaves a consistent state at a token
         * boundary; a failed step does not: back to the last confirmed one. */
        bool ok = prefilled && (status == 0 || status == 499);
        ckpt_cache_end(pe->cache, &r.plan, ok);
    }
    if (final) {
        *final = r.final;
        final->text = NULL;
    }
    eng_event_clear(&r.final);
    pl_engine_unlock(pe);
    free(r.ids);
    free(r.marks);
    return status;
}
