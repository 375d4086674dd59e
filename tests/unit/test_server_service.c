/* The engine service with its prefix cache on golden tiny models: events
 * and counters of a request, cancellation within a step, the bounded
 * queue, reset/reload, a main conversation interleaved with side requests
 * (the main turns keep reusing their prefix), and several conversations
 * from concurrent clients evicting each other (answers stay those of a
 * cold run). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include <pthread.h>

#include "chat/chat_conv.h"
#include "pipeline/service.h"
#include "testutil.h"
#include "util/timeutil.h"

static pl_service *start_with(const char *golden, const char *model_file, int max_queue, int n_ctx, int slots,
                              const char *tmpl, size_t cache_mem)
{
    pl_service_config cfg = {0};
    char path[1024];
    snprintf(path, sizeof path, "%s/models/%s", golden, model_file);
    pl_config_default(&cfg.pipeline);
    cfg.pipeline.model_path = path;
    cfg.pipeline.need_template = false;
    cfg.pipeline.chat_template = tmpl;
    cfg.pipeline.eng.n_threads = 1;
    cfg.pipeline.eng.n_ctx = n_ctx;
    cfg.pipeline.cache.max_slots = slots;
    cfg.pipeline.cache.mem_bytes = cache_mem;
    cfg.max_queue = max_queue;
    pl_service *svc = NULL;
    wk_error err = {0};
    int rc = pl_service_start(&cfg, &svc, &err);
    if (rc) fail_msg("start: %s", err.msg);
    return svc;
}

static pl_service *start(const char *golden, const char *model_file, int max_queue)
{
    return start_with(golden, model_file, max_queue, 512, 4, NULL, 0);
}

static pl_job *submit_completion(pl_service *svc, const char *prompt, int max_tokens, int *rc_out)
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
    pl_job *job = NULL;
    wk_error err = {0};
    *rc_out = pl_service_submit(svc, &req, &job, &err);
    return job;
}

/* Reads events until the final one; returns its type and fills *last. */
static int drain(pl_job *job, eng_event *last, int *n_deltas, char *text, size_t cap)
{
    *n_deltas = 0;
    size_t len = 0;
    if (text) text[0] = '\0';
    for (;;) {
        eng_event ev = {0};
        int got = pl_job_next_event(job, 30000, &ev);
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
    pl_service *svc = start(golden, "tiny-qwen3-F32.gguf", 4);
    int rc;
    pl_job *job = submit_completion(svc, "Hello world", 5, &rc);
    assert_int_equal(rc, 0);
    eng_event first = {0};
    assert_int_equal(pl_job_next_event(job, 30000, &first), 1);
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
    assert_int_equal(pl_job_next_event(job, 10, &first), -1); /* closed after the final event */
    pl_job_release(job);

    /* The same prompt again reuses all but the last token. */
    job = submit_completion(svc, "Hello world", 2, &rc);
    assert_int_equal(drain(job, &last, &deltas, NULL, 0), ENG_EV_DONE);
    assert_int_equal(last.counters.cached_tokens, 12);
    assert_int_equal(last.counters.recomputed_tokens, 1);
    pl_job_release(job);
    uint64_t hits, misses;
    pl_service_cache_stats(svc, &hits, &misses); /* the cache's own counters */
    assert_int_equal((int)hits, 1);
    assert_int_equal((int)misses, 1);
    json_t *st = pl_service_state(svc);
    assert_int_equal(json_array_size(json_object_get(st, "recent")), 2);
    json_decref(st);
    pl_service_stop(svc);
}

static void test_cancel_stops_generation_within_a_step(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    pl_service *svc = start(golden, "tiny-qwen3-F32.gguf", 4);
    int rc;
    pl_job *job = submit_completion(svc, "Go", 400, &rc);
    assert_int_equal(rc, 0);
    for (;;) { /* wait until it generates */
        eng_event ev = {0};
        assert_int_equal(pl_job_next_event(job, 30000, &ev), 1);
        int t = ev.type;
        eng_event_clear(&ev);
        if (t == ENG_EV_DELTA) break;
    }
    double t0 = wk_now_ms();
    pl_job_cancel(job);
    eng_event last;
    int deltas;
    assert_int_equal(drain(job, &last, &deltas, NULL, 0), ENG_EV_ERROR);
    assert_int_equal(last.http_status, 499);
    assert_true(wk_now_ms() - t0 < 5000);
    /* the error carries what was done before it */
    assert_int_equal(last.counters.prompt_tokens, 4); /* BOS, the SPM space prefix, "Go" */
    assert_true(last.counters.completion_tokens >= 1);
    assert_true(last.counters.completion_tokens < 400);
    pl_job_release(job);
    /* The service is still healthy. */
    job = submit_completion(svc, "Next", 2, &rc);
    assert_int_equal(drain(job, &last, &deltas, NULL, 0), ENG_EV_DONE);
    pl_job_release(job);
    pl_service_stop(svc);
}

static void test_full_queue_reports_busy(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    pl_service *svc = start(golden, "tiny-qwen3-F32.gguf", 1);
    pl_job *jobs[4] = {0};
    int rcs[4], busy = 0;
    for (int i = 0; i < 4; i++) {
        jobs[i] = submit_completion(svc, "Busy busy", 300, &rcs[i]);
        if (rcs[i] == WK_EBUSY) busy++;
        else assert_int_equal(rcs[i], 0);
    }
    assert_true(busy >= 2); /* one running, at most one waiting */
    for (int i = 0; i < 4; i++) {
        if (!jobs[i]) continue;
        pl_job_cancel(jobs[i]);
        eng_event last;
        int deltas;
        assert_int_equal(drain(jobs[i], &last, &deltas, NULL, 0), ENG_EV_ERROR);
        pl_job_release(jobs[i]);
    }
    pl_service_stop(svc);
}

static void test_reset_and_reload_drop_the_cache_and_keep_serving(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    pl_service *svc = start(golden, "tiny-qwen3-F32.gguf", 4);
    int rc, deltas;
    eng_event last;
    pl_job *job = submit_completion(svc, "Cache me", 2, &rc);
    assert_int_equal(drain(job, &last, &deltas, NULL, 0), ENG_EV_DONE);
    pl_job_release(job);
    wk_error err = {0};
    assert_int_equal(pl_service_reset_cache(svc, &err), 0);
    job = submit_completion(svc, "Cache me", 2, &rc);
    assert_int_equal(drain(job, &last, &deltas, NULL, 0), ENG_EV_DONE);
    assert_int_equal(last.counters.cached_tokens, 0);
    pl_job_release(job);
    assert_int_equal(pl_service_reload(svc, &err), 0);
    assert_true(pl_service_ready(svc));
    job = submit_completion(svc, "Cache me", 2, &rc);
    assert_int_equal(rc, 0);
    assert_int_equal(drain(job, &last, &deltas, NULL, 0), ENG_EV_DONE);
    assert_int_equal(last.counters.cached_tokens, 0);
    pl_job_release(job);
    json_t *info = pl_service_model_info(svc);
    assert_string_equal(json_string_value(json_object_get(info, "arch")), "qwen3");
    json_decref(info);
    pl_service_stop(svc);
}

/* A chat request as the server makes it (a validated conversation). */
static pl_job *submit_chat(pl_service *svc, json_t *messages, int max_tokens, bool fresh)
{
    eng_request req = {0};
    req.kind = ENG_REQ_CHAT;
    json_t *body = json_pack("{s:O}", "messages", messages);
    req.chat = malloc(sizeof *req.chat);
    wk_error cerr = {0};
    if (!req.chat || chat_conv_from_openai(req.chat, body, &cerr)) fail_msg("conversation: %s", cerr.msg);
    json_decref(body);
    req.max_tokens = max_tokens;
    req.ignore_eos = true;
    req.fresh = fresh;
    req.sampling.temperature = 0;
    req.sampling.top_p = 1;
    req.sampling.repeat_penalty = 1;
    req.sampling.has_seed = true;
    snprintf(req.id, sizeof req.id, "chat-test");
    pl_job *job = NULL;
    wk_error err = {0};
    if (pl_service_submit(svc, &req, &job, &err)) fail_msg("submit: %s", err.msg);
    return job;
}

static json_t *msg(const char *role, const char *content) { return json_pack("{s:s, s:s}", "role", role, "content", content); }

/* A long system prompt: the pasted source of a coding session. */
static char *long_text(const char *seed_word, int words)
{
    size_t cap = (size_t)words * 16 + 64, len = 0;
    char *t = malloc(cap);
    assert_non_null(t);
    uint64_t s = 0x9e37u;
    for (const char *p = seed_word; *p; p++) s = s * 31 + (unsigned char)*p;
    static const char *vocab[] = {"int", "return", "value", "buffer", "count", "index", "while", "struct", "node",
                                  "list", "free", "alloc", "error", "size", "const", "char"};
    len += (size_t)snprintf(t + len, cap - len, "%s:", seed_word);
    for (int i = 0; i < words; i++) len += (size_t)snprintf(t + len, cap - len, " %s", vocab[test_rand_u32(&s) % 16]);
    return t;
}

/* The pattern a coding CLI makes: a long main conversation and, between
 * its turns, side requests that share only the chat header with it. Every
 * main turn after the first must reuse nearly all of its prompt (a hybrid
 * model resumes at the previous generation header: the tiny vocabularies
 * spell the header out in ~40 tokens, hence the long system prompt). */
static void interleave(const char *golden, const char *file, const char *tmpl)
{
    pl_service *svc = start_with(golden, file, 8, 4096, 4, tmpl, 0);
    char *sys = long_text("main", 440);
    json_t *history = json_array();
    json_array_append_new(history, msg("system", sys));
    free(sys);
    int rc, deltas;
    eng_event last;
    for (int turn = 0; turn < 4; turn++) {
        char q[32];
        snprintf(q, sizeof q, "Line %d?", 10 * turn + 3);
        json_array_append_new(history, msg("user", q));
        pl_job *job = submit_chat(svc, history, 3, false);
        if (drain(job, &last, &deltas, NULL, 0) != ENG_EV_DONE) fail_msg("main turn %d: %s", turn, last.message);
        pl_job_release(job);
        const eng_counters *c = &last.counters;
        assert_int_equal(c->cached_tokens + c->recomputed_tokens, c->prompt_tokens);
        if (turn > 0 && c->cached_tokens * 100 < c->prompt_tokens * 95)
            fail_msg("%s: main turn %d reused %d of %d prompt tokens (< 95 %%)", file, turn, c->cached_tokens,
                     c->prompt_tokens);
        json_array_append_new(history, msg("assistant", "A count."));
        /* side agents: another system prompt, a short question */
        for (int k = 0; k < 2; k++) {
            json_t *side = json_array();
            char *ss = long_text(k ? "summarize" : "title", 16);
            json_array_append_new(side, msg("system", ss));
            free(ss);
            json_array_append_new(side, msg("user", "Give this conversation a short title."));
            job = submit_chat(svc, side, 2, false);
            assert_int_equal(drain(job, &last, &deltas, NULL, 0), ENG_EV_DONE);
            pl_job_release(job);
            json_decref(side);
        }
    }
    json_decref(history);
    (void)rc;
    pl_service_stop(svc);
}

static void test_side_requests_never_cut_the_main_conversation_qwen3(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    interleave(golden, "tiny-qwen3-F32.gguf", "qwen3");
}

static void test_side_requests_never_cut_the_main_conversation_qwen35(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    interleave(golden, "tiny-qwen35-F32.gguf", "qwen35");
}

/* Several clients, each with its own conversation, more conversations
 * than cache slots: slots are taken from each other under them, and every
 * answer is still the one a cold run gives. */
typedef struct client {
    pl_service *svc;
    int id;
    char answers[4][512];
    int failures;
} client;

static void *client_main(void *arg)
{
    client *cl = arg;
    char name[32];
    snprintf(name, sizeof name, "client%d", cl->id);
    char *sys = long_text(name, 30 + 10 * cl->id);
    json_t *history = json_array();
    json_array_append_new(history, msg("system", sys));
    free(sys);
    for (int turn = 0; turn < 4; turn++) {
        char q[64];
        snprintf(q, sizeof q, "Client %d asks question %d.", cl->id, turn);
        json_array_append_new(history, msg("user", q));
        pl_job *job = submit_chat(cl->svc, history, 4, false);
        eng_event last;
        int deltas;
        if (drain(job, &last, &deltas, cl->answers[turn], sizeof cl->answers[turn]) != ENG_EV_DONE) cl->failures++;
        pl_job_release(job);
        json_array_append_new(history, msg("assistant", "Noted."));
    }
    json_decref(history);
    return NULL;
}

static void concurrent_clients(const char *golden, const char *file, const char *tmpl)
{
    pl_service *svc = start_with(golden, file, 16, 2048, 2, tmpl, 0);
    client cl[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        memset(&cl[i], 0, sizeof cl[i]);
        cl[i].svc = svc;
        cl[i].id = i;
        assert_int_equal(pthread_create(&th[i], NULL, client_main, &cl[i]), 0);
    }
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    /* the same conversations again, one at a time and cold */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(cl[i].failures, 0);
        char name[32];
        snprintf(name, sizeof name, "client%d", i);
        char *sys = long_text(name, 30 + 10 * i);
        json_t *history = json_array();
        json_array_append_new(history, msg("system", sys));
        free(sys);
        for (int turn = 0; turn < 4; turn++) {
            char q[64];
            snprintf(q, sizeof q, "Client %d asks question %d.", i, turn);
            json_array_append_new(history, msg("user", q));
            pl_job *job = submit_chat(svc, history, 4, true);
            eng_event last;
            int deltas;
            char cold[512];
            assert_int_equal(drain(job, &last, &deltas, cold, sizeof cold), ENG_EV_DONE);
            pl_job_release(job);
            assert_string_equal(cl[i].answers[turn], cold);
            json_array_append_new(history, msg("assistant", "Noted."));
        }
        json_decref(history);
    }
    pl_service_stop(svc);
}

static void test_concurrent_conversations_evict_each_other_safely_qwen3(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    concurrent_clients(golden, "tiny-qwen3-F32.gguf", "qwen3");
}

static void test_concurrent_conversations_evict_each_other_safely_qwen35(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    concurrent_clients(golden, "tiny-qwen35-F32.gguf", "qwen35");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_completion_events_and_counters),
        cmocka_unit_test(test_cancel_stops_generation_within_a_step),
        cmocka_unit_test(test_full_queue_reports_busy),
        cmocka_unit_test(test_reset_and_reload_drop_the_cache_and_keep_serving),
        cmocka_unit_test(test_side_requests_never_cut_the_main_conversation_qwen3),
        cmocka_unit_test(test_side_requests_never_cut_the_main_conversation_qwen35),
        cmocka_unit_test(test_concurrent_conversations_evict_each_other_safely_qwen3),
        cmocka_unit_test(test_concurrent_conversations_evict_each_other_safely_qwen35),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
