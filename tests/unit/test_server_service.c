/* The engine service on a golden tiny model: events and counters of a
 * request, cancellation within a step, the bounded queue, and the prefix
 * reuse decision (pure attention vs hybrid). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "engine/context.h"
#include "engine/sequence.h"
#include "engine/service.h"
#include "engine/service_internal.h"
#include "model/model.h"
#include "testutil.h"
#include "util/timeutil.h"

static eng_service *start(const char *golden, const char *model_file, int max_queue)
{
    eng_service_config cfg = {0};
    char path[1024];
    snprintf(path, sizeof path, "%s/models/%s", golden, model_file);
    cfg.model_path = path;
    cfg.n_threads = 1;
    cfg.n_ctx = 512;
    cfg.max_queue = max_queue;
    eng_service *svc = NULL;
    wk_error err = {0};
    int rc = eng_service_start(&cfg, &svc, &err);
    if (rc) fail_msg("start: %s", err.msg);
    return svc;
}

static eng_job *submit_completion(eng_service *svc, const char *prompt, int max_tokens, int *rc_out)
{
    eng_request req = {0};
    req.kind = ENG_REQ_COMPLETION;
    req.prompt = strdup(prompt);
    req.max_tokens = max_tokens;
    req.ignore_eos = true;
    req.sampling.temperature = 0;
    req.sampling.top_p = 1;
    req.sampling.repeat_penalty = 1;
    snprintf(req.id, sizeof req.id, "cmpl-test");
    eng_job *job = NULL;
    wk_error err = {0};
    *rc_out = eng_service_submit(svc, &req, &job, &err);
    return job;
}

/* Reads events until the final one; returns its type and fills *last. */
static int drain(eng_job *job, eng_event *last, int *n_deltas, char *text, size_t cap)
{
    *n_deltas = 0;
    size_t len = 0;
    if (text) text[0] = '\0';
    for (;;) {
        eng_event ev = {0};
        int got = eng_job_next_event(job, 30000, &ev);
        if (got <= 0) fail_msg("no final event");
        if (ev.type == ENG_EV_DELTA) {
            (*n_deltas)++;
            size_t n = strlen(ev.text);
            if (text && len + n < cap) {
                memcpy(text + len, ev.text, n + 1);
                len += n;
            }
        }
        if (ev.type == ENG_EV_DONE || ev.type == ENG_EV_ERROR) {
            *last = ev;
            last->text = NULL;
            eng_event_clear(&ev);
            return last->type;
        }
        eng_event_clear(&ev);
    }
}

static void test_completion_events_and_counters(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    eng_service *svc = start(golden, "tiny-qwen3-F32.gguf", 4);
    int rc;
    eng_job *job = submit_completion(svc, "Hello world", 5, &rc);
    assert_int_equal(rc, 0);
    eng_event first = {0};
    assert_int_equal(eng_job_next_event(job, 30000, &first), 1);
    assert_int_equal(first.type, ENG_EV_ACCEPTED);
    assert_int_equal(first.counters.prompt_tokens, 13); /* BOS, the SPM space prefix, 11 bytes */
    eng_event_clear(&first);
    eng_event last;
    int deltas;
    assert_int_equal(drain(job, &last, &deltas, NULL, 0), ENG_EV_DONE);
    assert_string_equal(last.finish_reason, "length");
    assert_int_equal(last.counters.completion_tokens, 5);
    assert_int_equal(last.counters.prompt_tokens, 13);
    assert_int_equal(last.counters.cached_tokens + last.counters.recomputed_tokens, 13);
    assert_true(last.counters.prefill_ms > 0);
    assert_true(last.counters.ttft_ms >= last.counters.prefill_ms);
    assert_int_equal(eng_job_next_event(job, 10, &first), -1); /* closed after the final event */
    eng_job_release(job);

    /* The same prompt again reuses all but the last token. */
    job = submit_completion(svc, "Hello world", 2, &rc);
    assert_int_equal(drain(job, &last, &deltas, NULL, 0), ENG_EV_DONE);
    assert_int_equal(last.counters.cached_tokens, 12);
    assert_int_equal(last.counters.recomputed_tokens, 1);
    eng_job_release(job);
    uint64_t hits, misses;
    eng_service_cache_stats(svc, &hits, &misses);
    assert_int_equal((int)hits, 1);
    assert_int_equal((int)misses, 1);
    json_t *st = eng_service_state(svc);
    assert_int_equal(json_array_size(json_object_get(st, "recent")), 2);
    json_decref(st);
    eng_service_stop(svc);
}

static void test_cancel_stops_generation_within_a_step(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    eng_service *svc = start(golden, "tiny-qwen3-F32.gguf", 4);
    int rc;
    eng_job *job = submit_completion(svc, "Go", 400, &rc);
    assert_int_equal(rc, 0);
    for (;;) { /* wait until it generates */
        eng_event ev = {0};
        assert_int_equal(eng_job_next_event(job, 30000, &ev), 1);
        int t = ev.type;
        eng_event_clear(&ev);
        if (t == ENG_EV_DELTA) break;
    }
    double t0 = wk_now_ms();
    eng_job_cancel(job);
    eng_event last;
    int deltas;
    assert_int_equal(drain(job, &last, &deltas, NULL, 0), ENG_EV_ERROR);
    assert_int_equal(last.http_status, 499);
    assert_true(wk_now_ms() - t0 < 5000);
    assert_true(last.counters.completion_tokens < 400);
    eng_job_release(job);
    /* The service is still healthy. */
    job = submit_completion(svc, "Next", 2, &rc);
    assert_int_equal(drain(job, &last, &deltas, NULL, 0), ENG_EV_DONE);
    eng_job_release(job);
    eng_service_stop(svc);
}

static void test_full_queue_reports_busy(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    eng_service *svc = start(golden, "tiny-qwen3-F32.gguf", 1);
    eng_job *jobs[4] = {0};
    int rcs[4], busy = 0;
    for (int i = 0; i < 4; i++) {
        jobs[i] = submit_completion(svc, "Busy busy", 300, &rcs[i]);
        if (rcs[i] == WK_EBUSY) busy++;
        else assert_int_equal(rcs[i], 0);
    }
    assert_true(busy >= 2); /* one running, at most one waiting */
    for (int i = 0; i < 4; i++) {
        if (!jobs[i]) continue;
        eng_job_cancel(jobs[i]);
        eng_event last;
        int deltas;
        assert_int_equal(drain(jobs[i], &last, &deltas, NULL, 0), ENG_EV_ERROR);
        eng_job_release(jobs[i]);
    }
    eng_service_stop(svc);
}

static void test_reset_and_reload_drop_the_cache_and_keep_serving(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    eng_service *svc = start(golden, "tiny-qwen3-F32.gguf", 4);
    int rc, deltas;
    eng_event last;
    eng_job *job = submit_completion(svc, "Cache me", 2, &rc);
    assert_int_equal(drain(job, &last, &deltas, NULL, 0), ENG_EV_DONE);
    eng_job_release(job);
    wk_error err = {0};
    assert_int_equal(eng_service_reset_cache(svc, &err), 0);
    job = submit_completion(svc, "Cache me", 2, &rc);
    assert_int_equal(drain(job, &last, &deltas, NULL, 0), ENG_EV_DONE);
    assert_int_equal(last.counters.cached_tokens, 0);
    eng_job_release(job);
    assert_int_equal(eng_service_reload(svc, &err), 0);
    assert_true(eng_service_ready(svc));
    job = submit_completion(svc, "Cache me", 2, &rc);
    assert_int_equal(rc, 0);
    assert_int_equal(drain(job, &last, &deltas, NULL, 0), ENG_EV_DONE);
    assert_int_equal(last.counters.cached_tokens, 0);
    eng_job_release(job);
    json_t *info = eng_service_model_info(svc);
    assert_string_equal(json_string_value(json_object_get(info, "arch")), "qwen3");
    json_decref(info);
    eng_service_stop(svc);
}

/* Prefills ids into a fresh sequence of the model and asks the decision. */
static void check_reuse(const char *golden, const char *file, int expect_partial)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/models/%s", golden, file);
    model *m = NULL;
    wk_error err = {0};
    if (model_load(&m, path, &err)) fail_msg("%s", err.msg);
    eng_options o;
    eng_options_default(&o);
    o.n_threads = 1;
    o.n_ctx = 64;
    eng_ctx *ctx = NULL;
    eng_seq *seq = NULL;
    assert_int_equal(eng_ctx_new(&ctx, m, &o, &err), 0);
    assert_int_equal(eng_seq_new(&seq, ctx, 64, &err), 0);
    int32_t old[10] = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
    assert_int_equal(eng_prefill(ctx, seq, old, 10, NULL, &err), 0);
    bool rec = m->hp.n_rec_layers > 0;
    int32_t diverge[12] = {5, 6, 7, 8, 99, 10, 11, 12, 13, 14, 15, 16};
    int32_t extend[12] = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    /* Extending the whole sequence keeps all of it. */
    assert_int_equal(svc_reuse_decision(seq, rec, extend, 12, false), 10);
    /* Identical prompt: the last token is recomputed (its logits start decoding);
     * a hybrid model cannot roll back one token, so it keeps nothing. */
    assert_int_equal(svc_reuse_decision(seq, rec, old, 10, false), expect_partial ? 9 : 0);
    /* Diverging at position 4. */
    assert_int_equal(svc_reuse_decision(seq, rec, diverge, 12, false), expect_partial ? 4 : 0);
    /* fresh: nothing. */
    assert_int_equal(svc_reuse_decision(seq, rec, extend, 12, true), 0);
    eng_seq_free(seq);
    eng_ctx_free(ctx);
    model_free(m);
}

static void test_reuse_decision_attention_vs_hybrid(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    check_reuse(golden, "tiny-qwen3-F32.gguf", 1);
    check_reuse(golden, "tiny-qwen35-F32.gguf", 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_completion_events_and_counters),
        cmocka_unit_test(test_cancel_stops_generation_within_a_step),
        cmocka_unit_test(test_full_queue_reports_busy),
        cmocka_unit_test(test_reset_and_reload_drop_the_cache_and_keep_serving),
        cmocka_unit_test(test_reuse_decision_attention_vs_hybrid),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
