/* Prefix cache with checkpoints (src/cache/) on the golden tiny models:
 * restore gives the logits and greedy tokens of an uncached run, restore is
 * refused for another policy / model / prefix, a cancelled prefill leaves no
 * checkpoint, the budget evicts, and the disk archive round-trips and
 * rejects damaged files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/archive.h"
#include "cache/cache.h"
#include "engine/context.h"
#include "engine/sequence.h"
#include "model/model.h"
#include "testutil.h"
#include "util/argmax.h"

#define N_CTX 256
#define GREEDY 8
#define TOL 1e-4f

typedef struct fixture {
    model *m;
    eng_ctx *ctx;
    int32_t n_vocab;
} fixture;

static int open_model(fixture *f, const char *name)
{
    const char *dir = golden_dir();
    if (!dir) return -1;
    char path[4096];
    snprintf(path, sizeof path, "%s/models/%s", dir, name);
    wk_error err = {0};
    if (model_load(&f->m, path, &err)) fail_msg("%s", err.msg);
    eng_options o;
    eng_options_default(&o);
    o.n_threads = 1;
    o.n_ctx = N_CTX;
    o.n_ubatch = 16; /* several chunks per prompt: cancellation lands mid-prefill */
    if (eng_ctx_new(&f->ctx, f->m, &o, &err)) fail_msg("%s", err.msg);
    f->n_vocab = eng_n_vocab(f->ctx);
    return 0;
}

/* KV memory a conversation of n tokens holds in an idle slot (CPU: the
 * pages its positions wrote). */
static size_t held_kv(const fixture *f, int n) { return (size_t)n * eng_kv_bytes_per_token(f->ctx); }

static void close_model(fixture *f)
{
    eng_ctx_free(f->ctx);
    model_free(f->m);
}

#define OPEN_OR_SKIP(f, name)                                                          \
    fixture f = {0};                                                                   \
    do {                                                                               \
        if (open_model(&f, name)) {                                                    \
            if (golden_required()) fail_msg("golden data missing (CI requires it)");   \
            WK_SKIP();                                                                    \
        }                                                                              \
    } while (0)

/* The golden LCG token stream (README "Logits"), offset by salt. */
static void make_tokens(int32_t *t, int n, uint32_t seed)
{
    uint32_t s = seed;
    for (int i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        t[i] = 3 + (int32_t)((s >> 8) % 257);
    }
}

static float margin(const float *x, int n)
{
    float a = -INFINITY, b = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (x[i] > a) {
            b = a;
            a = x[i];
        } else if (x[i] > b) {
            b = x[i];
        }
    }
    return a - b;
}

typedef struct run_out {
    float *logits;        /* after the prompt */
    int32_t greedy[GREEDY];
    float margins[GREEDY];
} run_out;

/* Logits after the prompt + greedy continuation, with a fresh sequence. */
static void run_uncached(fixture *f, const int32_t *ids, int n, run_out *out)
{
    eng_seq *s;
    wk_error err = {0};
    assert_int_equal(eng_seq_new(&s, f->ctx, N_CTX, &err), 0);
    assert_int_equal(eng_prefill(f->ctx, s, ids, n, NULL, &err), 0);
    out->logits = malloc(sizeof(float) * (size_t)f->n_vocab);
    memcpy(out->logits, eng_logits(f->ctx), sizeof(float) * (size_t)f->n_vocab);
    for (int i = 0; i < GREEDY; i++) {
        out->greedy[i] = wk_argmax_f32(eng_logits(f->ctx), f->n_vocab);
        out->margins[i] = margin(eng_logits(f->ctx), f->n_vocab);
        assert_int_equal(eng_decode(f->ctx, s, out->greedy[i], &err), 0);
    }
    eng_seq_free(s);
}

/* One request through the cache: begin, prefill, GREEDY decode steps, end. */
static void run_cached(fixture *f, ckpt_cache *c, const int32_t *ids, int n, const ckpt_mark *marks, int n_marks,
                       ckpt_plan *plan, run_out *out)
{
    wk_error err = {0};
    assert_int_equal(ckpt_cache_begin(c, ids, n, marks, n_marks, false, plan, &err), 0);
    assert_int_equal(ckpt_cache_prefill(c, plan, ids, n, NULL, &err), 0);
    if (out) {
        out->logits = malloc(sizeof(float) * (size_t)f->n_vocab);
        memcpy(out->logits, eng_logits(f->ctx), sizeof(float) * (size_t)f->n_vocab);
    }
    for (int i = 0; i < GREEDY; i++) {
        int32_t t = wk_argmax_f32(eng_logits(f->ctx), f->n_vocab);
        if (out) out->greedy[i] = t;
        assert_int_equal(eng_decode(f->ctx, plan->seq, t, &err), 0);
        ckpt_cache_decoded(c, plan);
    }
    ckpt_cache_end(c, plan, true);
}

static float max_abs_diff(const float *a, const float *b, int n)
{
    float m = 0;
    for (int i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (d > m) m = d;
    }
    return m;
}

static void assert_same_run(fixture *f, const run_out *cached, const run_out *ref)
{
    float d = max_abs_diff(cached->logits, ref->logits, f->n_vocab);
    if (d > TOL) fail_msg("cached logits differ from uncached by %g (> %g)", d, TOL);
    for (int i = 0; i < GREEDY; i++) {
        assert_int_equal(cached->greedy[i], ref->greedy[i]);
        if (ref->margins[i] < 1e-3f) break; /* a near-tie may flip under rounding: stop comparing */
    }
}

static void free_run(run_out *r) { free(r->logits); }

/* A conversation-like prompt of 96 tokens with boundaries at 12 (system
 * end), 40 (an earlier user turn), 70 (last user turn), 90 (generation). */
static const ckpt_mark k_marks[] = {
    {12, CKPT_SYSTEM_END}, {40, CKPT_USER_START}, {70, CKPT_LAST_USER_START}, {90, CKPT_GENERATION_START}};

static ckpt_cache *new_cache(fixture *f, size_t mem, const char *dir)
{
    ckpt_cache_config cfg;
    ckpt_cache_config_default(&cfg);
    cfg.mem_bytes = mem;
    cfg.min_step = 16;
    cfg.gen_interval = 4;
    cfg.dir = dir;
    ckpt_cache *c;
    wk_error err = {0};
    if (ckpt_cache_new(&c, f->ctx, &cfg, &err)) fail_msg("%s", err.msg);
    return c;
}

/* Turn 1: 96 tokens. Turn 2: the first 80 equal, then a new tail (an edit
 * after the last user turn started). Turn 3 extends turn 2's sequence. */
static void check_restore_matches_uncached(const char *model_name)
{
    OPEN_OR_SKIP(f, model_name);
    bool hybrid = f.m->hp.n_rec_layers > 0;
    ckpt_cache *c = new_cache(&f, 0, NULL);
    int32_t t1[96], t2[120], tail[40];
    make_tokens(t1, 96, 12345);
    make_tokens(tail, 40, 777);
    memcpy(t2, t1, sizeof(int32_t) * 80);
    memcpy(t2 + 80, tail, sizeof(int32_t) * 40);
    if (t2[80] == t1[80]) t2[80] = t1[80] == 3 ? 4 : 3; /* diverge exactly at 80 */

    ckpt_plan p;
    run_cached(&f, c, t1, 96, k_marks, 4, &p, NULL);
    assert_int_equal(p.start, 0);
    assert_int_equal(p.ckpt_kind, -1);

    run_out ref, got;
    run_uncached(&f, t2, 120, &ref);
    run_cached(&f, c, t2, 120, NULL, 0, &p, &got);
    assert_int_equal(p.match, 80);
    if (hybrid) {
        /* nearest checkpoint at or before the divergence: the last user turn */
        assert_int_equal(p.start, 70);
        assert_int_equal(p.ckpt_kind, CKPT_LAST_USER_START);
        assert_int_equal(p.replayed, 10);
    } else {
        assert_int_equal(p.start, 80);
        assert_int_equal(p.ckpt_kind, CKPT_KV_PREFIX);
    }
    assert_same_run(&f, &got, &ref);
    free_run(&ref);
    free_run(&got);

    /* Turn 3: turn 2 + its greedy answer (all but the last token were fed) + more. */
    int32_t t3[150];
    memcpy(t3, t2, sizeof(int32_t) * 120);
    const int32_t *fed = eng_seq_tokens(p.seq);
    int32_t fed_n = eng_seq_pos(p.seq);
    assert_int_equal(fed_n, 120 + GREEDY);
    memcpy(t3 + 120, fed + 120, sizeof(int32_t) * (size_t)(fed_n - 120));
    make_tokens(t3 + fed_n, 150 - fed_n, 4242);
    run_uncached(&f, t3, 150, &ref);
    run_cached(&f, c, t3, 150, NULL, 0, &p, &got);
    assert_int_equal(p.match, fed_n);
    assert_int_equal(p.start, fed_n); /* the live state is extended: nothing replayed */
    assert_int_equal(p.replayed, 0);
    assert_int_equal(p.ckpt_kind, hybrid ? CKPT_LIVE : CKPT_KV_PREFIX);
    assert_same_run(&f, &got, &ref);
    free_run(&ref);
    free_run(&got);

    /* Turn 4: the identical prompt again: the last token must be recomputed. */
    run_uncached(&f, t3, 150, &ref);
    run_cached(&f, c, t3, 150, NULL, 0, &p, &got);
    assert_true(p.start <= 149);
    assert_true(p.start > 0);
    assert_same_run(&f, &got, &ref);
    free_run(&ref);
    free_run(&got);
    ckpt_cache_free(c);
    close_model(&f);
}

static void test_restore_gives_uncached_logits_qwen3(void **state)
{
    (void)state;
    check_restore_matches_uncached("tiny-qwen3-F32.gguf");
}

static void test_restore_gives_uncached_logits_qwen35(void **state)
{
    (void)state;
    check_restore_matches_uncached("tiny-qwen35-F32.gguf");
}

static void test_restore_rejects_other_policy_model_and_prefix(void **state)
{
    (void)state;
    OPEN_OR_SKIP(f, "tiny-qwen35-F32.gguf");
    int32_t t[64], u[64];
    make_tokens(t, 64, 99);
    memcpy(u, t, sizeof u);
    u[3] ^= 1;
    wk_error err = {0};
    eng_seq *s;
    assert_int_equal(eng_seq_new(&s, f.ctx, N_CTX, &err), 0);
    assert_int_equal(eng_prefill(f.ctx, s, t, 32, NULL, &err), 0);
    ckpt k = {0};
    assert_int_equal(ckpt_take(&k, s, CKPT_SYSTEM_END, &err), 0);
    assert_true(k.snap.state_bytes > 0);
    assert_int_equal(eng_prefill(f.ctx, s, t + 32, 32, NULL, &err), 0);
    uint64_t mid = f.m->model_id, fp = eng_seq_policy_fp(s);

    /* not confirmed yet */
    assert_int_equal(ckpt_validate(&k, t, 64, mid, fp, &err), WK_EINVAL);
    k.complete = true;
    assert_int_equal(ckpt_validate(&k, t, 64, mid, fp, &err), 0);
    assert_int_equal(ckpt_validate(&k, t, 64, mid ^ 1, fp, &err), WK_EINVAL);
    assert_int_equal(ckpt_validate(&k, t, 64, mid, fp ^ 1, &err), WK_EINVAL);
    assert_int_equal(ckpt_validate(&k, u, 64, mid, fp, &err), WK_EINVAL);
    assert_int_equal(ckpt_validate(&k, t, 16, mid, fp, &err), WK_EINVAL); /* past the prompt */
    /* restore refuses and leaves the sequence alone */
    assert_int_equal(ckpt_restore(&k, f.ctx, s, u, 64, &err), WK_EINVAL);
    assert_int_equal(eng_seq_pos(s), 64);
    ckpt bad = k;
    bad.snap.model_id ^= 1;
    assert_int_equal(ckpt_restore(&bad, f.ctx, s, t, 64, &err), WK_EINVAL);
    bad = k;
    bad.snap.policy_fp ^= 1;
    assert_int_equal(ckpt_restore(&bad, f.ctx, s, t, 64, &err), WK_EINVAL);
    assert_int_equal(eng_seq_pos(s), 64);
    assert_int_equal(ckpt_restore(&k, f.ctx, s, t, 64, &err), 0);
    assert_int_equal(eng_seq_pos(s), 32);
    ckpt_free(&k);
    eng_seq_free(s);

    /* Through the cache: another policy means no reuse at all. */
    ckpt_cache *c = new_cache(&f, 0, NULL);
    int32_t p1[96];
    make_tokens(p1, 96, 5);
    ckpt_plan p;
    run_cached(&f, c, p1, 96, k_marks, 4, &p, NULL);
    be_attn_policy approx = {0};
    approx.approx = true;
    approx.global = 4;
    approx.window = 32;
    eng_ctx_set_policy(f.ctx, &approx);
    assert_int_equal(ckpt_cache_begin(c, p1, 96, k_marks, 4, false, &p, &err), 0);
    assert_int_equal(p.start, 0);
    ckpt_cache_end(c, &p, false);
    eng_ctx_set_policy(f.ctx, NULL);
    /* A prompt that differs at token 5: nothing before it was checkpointed. */
    make_tokens(p1, 96, 5);
    run_cached(&f, c, p1, 96, k_marks, 4, &p, NULL);
    p1[5] ^= 1;
    assert_int_equal(ckpt_cache_begin(c, p1, 96, k_marks, 4, false, &p, &err), 0);
    assert_true(p.start <= 5);
    assert_int_equal(p.start, 0);
    ckpt_cache_end(c, &p, false);
    ckpt_cache_free(c);
    close_model(&f);
}

/* Placement: essential boundaries always; earlier turns only min_step (16
 * here) past the previous checkpoint; every tool result and assistant
 * header after the last user turn; the prompt end. */
static void test_checkpoints_sit_at_chat_boundaries(void **state)
{
    (void)state;
    OPEN_OR_SKIP(f, "tiny-qwen35-F32.gguf");
    ckpt_cache_config cfg;
    ckpt_cache_config_default(&cfg);
    cfg.min_step = 16;
    cfg.gen_interval = -1; /* none in generated text */
    ckpt_cache *c;
    wk_error err = {0};
    assert_int_equal(ckpt_cache_new(&c, f.ctx, &cfg, &err), 0);
    const ckpt_mark marks[] = {{12, CKPT_SYSTEM_END},     {20, CKPT_USER_START},   {40, CKPT_USER_START},
                               {50, CKPT_ASSISTANT_START}, {70, CKPT_LAST_USER_START}, {75, CKPT_TOOL_RESULT},
                               {80, CKPT_ASSISTANT_START}, {90, CKPT_GENERATION_START}};
    int32_t t[96];
    make_tokens(t, 96, 77);
    ckpt_plan p;
    run_cached(&f, c, t, 96, marks, 8, &p, NULL);
    json_t *j = ckpt_cache_json(c);
    json_t *cks = json_object_get(json_array_get(json_object_get(j, "slots"), 0), "checkpoints");
    const int32_t want_pos[] = {12, 40, 70, 75, 80, 90, 96, 96 + GREEDY};
    const char *want_kind[] = {"system_end", "user_start", "last_user_start", "tool_result",
                               "assistant_start", "generation_start", "prompt_end", "gen_end"};
    assert_int_equal(json_array_size(cks), 8);
    for (size_t i = 0; i < 8; i++) {
        json_t *k = json_array_get(cks, i);
        assert_int_equal(json_integer_value(json_object_get(k, "pos")), want_pos[i]);
        assert_string_equal(json_string_value(json_object_get(k, "kind")), want_kind[i]);
        assert_true(json_integer_value(json_object_get(k, "bytes")) > 0);
    }
    json_decref(j);
    ckpt_cache_free(c);
    close_model(&f);
}

static int cancel_after;
static bool cancel_countdown(void *user)
{
    (void)user;
    return cancel_after-- <= 0;
}

static int count_ckpts(ckpt_cache *c, int32_t *max_pos)
{
    json_t *j = ckpt_cache_json(c);
    int n = 0;
    *max_pos = -1;
    json_t *slots = json_object_get(j, "slots"), *s;
    size_t i;
    json_array_foreach(slots, i, s)
    {
        json_t *cks = json_object_get(s, "checkpoints"), *k;
        size_t q;
        json_array_foreach(cks, q, k)
        {
            n++;
            int32_t pos = (int32_t)json_integer_value(json_object_get(k, "pos"));
            if (pos > *max_pos) *max_pos = pos;
        }
    }
    json_decref(j);
    return n;
}

static void check_cancelled_prefill(const char *name)
{
    OPEN_OR_SKIP(f, name);
    ckpt_cache *c = new_cache(&f, 0, NULL);
    int32_t t1[96], t2[200];
    make_tokens(t1, 96, 31);
    ckpt_plan p;
    run_cached(&f, c, t1, 96, k_marks, 4, &p, NULL);
    int32_t before_max;
    int before = count_ckpts(c, &before_max);
    int32_t confirmed = eng_seq_pos(p.seq);

    /* Turn 2 extends turn 1 and carries boundaries; cancel after 3 chunks of 16. */
    memcpy(t2, eng_seq_tokens(p.seq), sizeof(int32_t) * (size_t)confirmed);
    make_tokens(t2 + confirmed, 200 - confirmed, 32);
    ckpt_mark m2[] = {{confirmed + 10, CKPT_TOOL_RESULT}, {confirmed + 20, CKPT_LAST_USER_START},
                      {190, CKPT_GENERATION_START}};
    wk_error err = {0};
    assert_int_equal(ckpt_cache_begin(c, t2, 200, m2, 3, false, &p, &err), 0);
    cancel_after = 3;
    eng_prefill_opts po = {0};
    po.cancel = cancel_countdown;
    assert_int_equal(ckpt_cache_prefill(c, &p, t2, 200, &po, &err), WK_ECANCELLED);
    ckpt_cache_end(c, &p, false);
    int32_t after_max;
    int after = count_ckpts(c, &after_max);
    /* no checkpoint from the cancelled prefill; back at the confirmed state */
    assert_true(after_max <= confirmed);
    assert_true(after <= before + 1); /* + the resume point the request started from */
    assert_int_equal(eng_seq_pos(p.seq), confirmed);

    /* The retry gives what an uncached run gives. */
    run_out ref, got;
    run_uncached(&f, t2, 200, &ref);
    run_cached(&f, c, t2, 200, m2, 3, &p, &got);
    assert_int_equal(p.start, confirmed);
    assert_same_run(&f, &got, &ref);
    free_run(&ref);
    free_run(&got);
    ckpt_cache_free(c);
    close_model(&f);
}

static void test_cancelled_prefill_leaves_no_checkpoint_qwen35(void **state)
{
    (void)state;
    check_cancelled_prefill("tiny-qwen35-F32.gguf");
}

static void test_cancelled_prefill_leaves_no_checkpoint_qwen3(void **state)
{
    (void)state;
    check_cancelled_prefill("tiny-qwen3-F32.gguf");
}

static void test_budget_evicts_idle_checkpoints_but_keeps_newest(void **state)
{
    (void)state;
    OPEN_OR_SKIP(f, "tiny-qwen35-F32.gguf");
    /* Room for the idle slot's KV plus three checkpoint states. */
    wk_error err = {0};
    eng_seq *probe;
    assert_int_equal(eng_seq_new(&probe, f.ctx, N_CTX, &err), 0);
    size_t ck = eng_snapshot_bytes(probe);
    eng_seq_free(probe);
    size_t kv = held_kv(&f, 96 + GREEDY);
    ckpt_cache *c = new_cache(&f, kv + 3 * ck, NULL);
    int32_t a[96], b[96];
    make_tokens(a, 96, 1);
    make_tokens(b, 96, 2);
    ckpt_plan p;
    run_cached(&f, c, a, 96, k_marks, 4, &p, NULL);
    run_cached(&f, c, b, 96, k_marks, 4, &p, NULL);
    ckpt_cache_stats st;
    ckpt_cache_get_stats(c, &st);
    assert_true(st.evictions > 0);
    assert_int_equal(st.n_slots, 2);
    assert_true(st.ram_bytes - kv <= kv + 3 * ck); /* within budget but for the working sequence */
    json_t *j = ckpt_cache_json(c), *s;
    size_t i;
    json_array_foreach(json_object_get(j, "slots"), i, s)
        assert_true(json_array_size(json_object_get(s, "checkpoints")) >= 1);
    json_decref(j);
    /* Conversation a (least recently used) still resumes where it ended. */
    json_t *j2 = ckpt_cache_json(c);
    json_t *s0 = json_array_get(json_object_get(j2, "slots"), 0);
    assert_int_equal(json_integer_value(json_object_get(s0, "tokens")), 96 + GREEDY);
    json_decref(j2);
    int32_t a2[120];
    memcpy(a2, a, sizeof a);
    /* the greedy answer fed after a: recompute it the same way */
    run_out ra;
    run_uncached(&f, a, 96, &ra);
    memcpy(a2 + 96, ra.greedy, sizeof(int32_t) * GREEDY);
    free_run(&ra);
    make_tokens(a2 + 96 + GREEDY, 120 - 96 - GREEDY, 3);
    run_cached(&f, c, a2, 120, NULL, 0, &p, NULL);
    assert_int_equal(p.slot, 0);
    assert_int_equal(p.start, 96 + GREEDY);
    ckpt_cache_free(c);
    close_model(&f);
}

/* Pure attention: checkpoints hold no state, so the budget evicts whole
 * idle conversations, the longest idle first. */
static void test_budget_evicts_longest_idle_conversation(void **state)
{
    (void)state;
    OPEN_OR_SKIP(f, "tiny-qwen3-F32.gguf");
    size_t kv = held_kv(&f, 96 + GREEDY);
    ckpt_cache *c = new_cache(&f, kv, NULL); /* one idle sequence besides the working one */
    int32_t a[96], b[96], d[96], a2[120], b2[120];
    make_tokens(a, 96, 41);
    make_tokens(b, 96, 42);
    make_tokens(d, 96, 43);
    ckpt_plan p;
    run_cached(&f, c, a, 96, k_marks, 4, &p, NULL);
    memcpy(a2, eng_seq_tokens(p.seq), sizeof(int32_t) * (96 + GREEDY));
    run_cached(&f, c, b, 96, k_marks, 4, &p, NULL);
    memcpy(b2, eng_seq_tokens(p.seq), sizeof(int32_t) * (96 + GREEDY));
    run_cached(&f, c, d, 96, k_marks, 4, &p, NULL); /* a is now the longest idle: evicted */
    ckpt_cache_stats st;
    ckpt_cache_get_stats(c, &st);
    assert_int_equal(st.n_slots, 2);
    assert_true(st.evictions >= 1);
    make_tokens(a2 + 96 + GREEDY, 120 - 96 - GREEDY, 44);
    make_tokens(b2 + 96 + GREEDY, 120 - 96 - GREEDY, 45);
    run_cached(&f, c, b2, 120, NULL, 0, &p, NULL);
    assert_int_equal(p.start, 96 + GREEDY); /* b survived */
    run_cached(&f, c, a2, 120, NULL, 0, &p, NULL);
    assert_int_equal(p.start, 0); /* a was evicted */
    ckpt_cache_free(c);
    close_model(&f);
}

static bool cancel_at_chunk(void *user)
{
    int *left = user;
    return (*left)-- <= 0;
}

/* Random conversations through a small cache: appends, edits at random
 * positions, fresh requests, cancelled prefills, evictions. Every answered
 * prompt must give the logits of an uncached run (no stale reuse, ever). */
static void check_random_traffic(const char *name)
{
    OPEN_OR_SKIP(f, name);
    eng_seq *probe;
    wk_error err = {0};
    assert_int_equal(eng_seq_new(&probe, f.ctx, N_CTX, &err), 0);
    size_t ck = eng_snapshot_bytes(probe);
    eng_seq_free(probe);
    size_t kv = held_kv(&f, 120);
    ckpt_cache_config cfg;
    ckpt_cache_config_default(&cfg);
    cfg.mem_bytes = kv + 16 * ck + 1; /* one idle conversation and some checkpoints */
    cfg.max_slots = 3;
    cfg.min_step = 24;
    cfg.gen_interval = 3;
    ckpt_cache *c;
    assert_int_equal(ckpt_cache_new(&c, f.ctx, &cfg, &err), 0);
    enum { KEEP = 6, MAXN = 200 };
    int32_t prompts[KEEP][MAXN];
    int lens[KEEP] = {0};
    uint64_t rng = 0xcafe;
    int reused = 0;
    for (int step = 0; step < 60; step++) {
        int32_t ids[MAXN];
        int n;
        int from = (int)(test_rand_u32(&rng) % KEEP);
        uint32_t op = test_rand_u32(&rng) % 4;
        if (!lens[from] || op == 0) { /* a new conversation */
            n = 24 + (int)(test_rand_u32(&rng) % 60);
            for (int i = 0; i < n; i++) ids[i] = 3 + (int32_t)(test_rand_u32(&rng) % 257);
        } else {
            int keep = op == 1 ? lens[from] : (int)(test_rand_u32(&rng) % (uint32_t)lens[from]); /* extend / edit */
            memcpy(ids, prompts[from], sizeof(int32_t) * (size_t)keep);
            n = keep + 1 + (int)(test_rand_u32(&rng) % 30);
            if (n > MAXN - GREEDY) n = MAXN - GREEDY;
            for (int i = keep; i < n; i++) ids[i] = 3 + (int32_t)(test_rand_u32(&rng) % 257);
        }
        ckpt_mark marks[12];
        int nm = 0;
        for (int32_t p = 4 + (int32_t)(test_rand_u32(&rng) % 8); p < n && nm < 12; p += 4 + (int32_t)(test_rand_u32(&rng) % 16))
            marks[nm++] = (ckpt_mark){p, (int)(test_rand_u32(&rng) % CKPT_KIND_COUNT)};
        bool fresh = test_rand_u32(&rng) % 8 == 0;
        ckpt_plan p;
        assert_int_equal(ckpt_cache_begin(c, ids, n, marks, nm, fresh, &p, &err), 0);
        assert_true(p.start <= n - 1);
        assert_true(p.start <= p.match);
        if (fresh) assert_int_equal(p.start, 0);
        assert_memory_equal(eng_seq_tokens(p.seq), ids, sizeof(int32_t) * (size_t)p.start);
        if (test_rand_u32(&rng) % 6 == 0 && n - p.start > 16) { /* cancelled after one chunk */
            int left = 1;
            eng_prefill_opts po = {0};
            po.cancel = cancel_at_chunk;
            po.user = &left;
            int rc = ckpt_cache_prefill(c, &p, ids, n, &po, &err);
            assert_int_equal(rc, WK_ECANCELLED);
            ckpt_cache_end(c, &p, false);
            continue;
        }
        assert_int_equal(ckpt_cache_prefill(c, &p, ids, n, NULL, &err), 0);
        float *cached = malloc(sizeof(float) * (size_t)f.n_vocab);
        memcpy(cached, eng_logits(f.ctx), sizeof(float) * (size_t)f.n_vocab);
        run_out ref;
        run_uncached(&f, ids, n, &ref);
        float diff = max_abs_diff(cached, ref.logits, f.n_vocab);
        free(cached);
        if (diff > TOL)
            fail_msg("step %d: logits %g away from an uncached run (start %d of %d, resumed from %s)", step, diff,
                     p.start, n, ckpt_kind_name(p.ckpt_kind));
        for (int i = 0; i < 3; i++) { /* a short answer: generated state and interval checkpoints */
            assert_int_equal(eng_decode(f.ctx, p.seq, ref.greedy[i], &err), 0);
            ckpt_cache_decoded(c, &p);
        }
        free_run(&ref);
        ckpt_cache_end(c, &p, true);
        if (p.start > 0) reused++;
        int slot = step % KEEP;
        memcpy(prompts[slot], eng_seq_tokens(p.seq), sizeof(int32_t) * (size_t)eng_seq_pos(p.seq));
        lens[slot] = eng_seq_pos(p.seq) < MAXN - 40 ? eng_seq_pos(p.seq) : 0;
    }
    assert_true(reused > 5); /* the traffic did exercise reuse */
    ckpt_cache_stats st;
    ckpt_cache_get_stats(c, &st);
    assert_true(st.evictions > 0);
    ckpt_cache_free(c);
    close_model(&f);
}

static void test_random_traffic_never_reuses_stale_state_qwen35(void **state)
{
    (void)state;
    check_random_traffic("tiny-qwen35-F32.gguf");
}

static void test_random_traffic_never_reuses_stale_state_qwen3(void **state)
{
    (void)state;
    check_random_traffic("tiny-qwen3-F32.gguf");
}

/* ---- archive ------------------------------------------------------------------- */

static char *make_tmpdir(void)
{
    char *d = strdup("/tmp/wick-test-cache-XXXXXX");
    assert_non_null(mkdtemp(d));
    return d;
}

static void rm_dir(const char *d)
{
    DIR *dd = opendir(d);
    struct dirent *e;
    while (dd && (e = readdir(dd))) {
        if (e->d_name[0] == '.') continue;
        unlink(path_join(d, e->d_name));
    }
    if (dd) closedir(dd);
    rmdir(d);
}

static int only_file(const char *d, char *out, size_t cap)
{
    DIR *dd = opendir(d);
    struct dirent *e;
    int n = 0;
    while (dd && (e = readdir(dd))) {
        if (e->d_name[0] == '.') continue;
        snprintf(out, cap, "%s/%s", d, e->d_name);
        n++;
    }
    if (dd) closedir(dd);
    return n;
}

/* Turn 1 through a cache with a folder; a second cache (a restarted
 * server) resumes turn 2 from the file. */
static void check_archive_round_trip(const char *name)
{
    OPEN_OR_SKIP(f, name);
    char *dir = make_tmpdir();
    ckpt_cache *c = new_cache(&f, 0, dir);
    int32_t t1[96], t2[120];
    make_tokens(t1, 96, 8);
    ckpt_plan p;
    run_cached(&f, c, t1, 96, k_marks, 4, &p, NULL);
    int32_t fed = eng_seq_pos(p.seq);
    memcpy(t2, eng_seq_tokens(p.seq), sizeof(int32_t) * (size_t)fed);
    make_tokens(t2 + fed, 120 - fed, 9);
    ckpt_cache_stats st;
    ckpt_cache_get_stats(c, &st);
    assert_int_equal(st.disk_writes, 0); /* the request ended; its archive waits for idle time */
    assert_true(ckpt_cache_archive_pending(c));
    ckpt_cache_archive_flush(c);
    ckpt_cache_get_stats(c, &st);
    assert_int_equal(st.disk_writes, 1);
    assert_false(ckpt_cache_archive_pending(c));
    ckpt_cache_free(c);

    c = new_cache(&f, 0, dir);
    ckpt_cache_get_stats(c, &st);
    assert_int_equal(st.n_disk, 1);
    run_out ref, got;
    run_uncached(&f, t2, 120, &ref);
    run_cached(&f, c, t2, 120, NULL, 0, &p, &got);
    assert_true(p.from_disk);
    assert_int_equal(p.start, fed); /* end-of-generation checkpoint / KV prefix */
    assert_same_run(&f, &got, &ref);
    free_run(&ref);
    free_run(&got);
    ckpt_cache_free(c);
    rm_dir(dir);
    free(dir);
    close_model(&f);
}

/* Two requests in progress at once sharing a cached prefix: the second never takes the
 * first one's slot; it starts from a copy of the shared prefix (KV, and the checkpoint
 * for a recurrent model) and both get the logits of an uncached run, while the first
 * one keeps decoding on its own slot. */
static void check_concurrent_plans(const char *name)
{
    OPEN_OR_SKIP(f, name);
    ckpt_cache_config cfg;
    ckpt_cache_config_default(&cfg);
    ckpt_cache *c;
    wk_error err = {0};
    assert_int_equal(ckpt_cache_new(&c, f.ctx, &cfg, &err), 0);
    int32_t a[96], b[96];
    make_tokens(a, 96, 11);
    memcpy(b, a, sizeof b);
    for (int i = 64; i < 96; i++) b[i] = 3 + (b[i] + 7) % 257; /* shares 64 tokens */
    const ckpt_mark marks[] = {{64, CKPT_SYSTEM_END}};
    ckpt_plan p0;
    run_cached(&f, c, a, 96, marks, 1, &p0, NULL); /* cached: a, checkpoint at 64 */
    ckpt_plan pa, pb;
    assert_int_equal(ckpt_cache_begin(c, a, 96, marks, 1, false, &pa, &err), 0);
    assert_true(pa.start > 0);
    assert_int_equal(ckpt_cache_prefill(c, &pa, a, 96, NULL, &err), 0);
    assert_int_equal(ckpt_cache_begin(c, b, 96, marks, 1, false, &pb, &err), 0);
    assert_true(pb.slot != pa.slot);
    assert_int_equal(pb.start, 64);
    assert_int_equal(ckpt_cache_prefill(c, &pb, b, 96, NULL, &err), 0);
    float *got = malloc(sizeof(float) * (size_t)f.n_vocab);
    memcpy(got, eng_logits(f.ctx), sizeof(float) * (size_t)f.n_vocab);
    run_out ub;
    run_uncached(&f, b, 96, &ub);
    for (int i = 0; i < f.n_vocab; i++) assert_float_equal(got[i], ub.logits[i], TOL);
    free(got);
    /* the first request's sequence was not disturbed: its decode matches an uncached run */
    run_out ua;
    run_uncached(&f, a, 96, &ua);
    assert_int_equal(eng_decode(f.ctx, pa.seq, ua.greedy[0], &err), 0);
    assert_int_equal(eng_decode(f.ctx, pb.seq, ub.greedy[0], &err), 0);
    ckpt_cache_end(c, &pb, true);
    assert_int_equal(eng_decode(f.ctx, pa.seq, ua.greedy[1], &err), 0);
    assert_int_equal(wk_argmax_f32(eng_logits(f.ctx), f.n_vocab), ua.greedy[2]);
    ckpt_cache_end(c, &pa, true);
    free(ua.logits);
    free(ub.logits);
    ckpt_cache_free(c);
    close_model(&f);
}

static void test_concurrent_plans_use_their_own_slots_qwen35(void **state)
{
    (void)state;
    check_concurrent_plans("tiny-qwen35-F32.gguf");
}

static void test_concurrent_plans_use_their_own_slots_qwen3(void **state)
{
    (void)state;
    check_concurrent_plans("tiny-qwen3-F32.gguf");
}

static void test_archive_round_trips_qwen35(void **state)
{
    (void)state;
    check_archive_round_trip("tiny-qwen35-F32.gguf");
}

static void test_archive_round_trips_qwen3(void **state)
{
    (void)state;
    check_archive_round_trip("tiny-qwen3-F32.gguf");
}

/* damage: 0 flip a payload byte, 1 flip a header byte, 2 truncate */
static void check_archive_rejects(int damage)
{
    OPEN_OR_SKIP(f, "tiny-qwen35-F32.gguf");
    char *dir = make_tmpdir();
    ckpt_cache *c = new_cache(&f, 0, dir);
    int32_t t1[96], t2[120];
    make_tokens(t1, 96, 8);
    ckpt_plan p;
    run_cached(&f, c, t1, 96, k_marks, 4, &p, NULL);
    int32_t fed = eng_seq_pos(p.seq);
    memcpy(t2, eng_seq_tokens(p.seq), sizeof(int32_t) * (size_t)fed);
    make_tokens(t2 + fed, 120 - fed, 9);
    ckpt_cache_free(c);

    char file[4096];
    assert_int_equal(only_file(dir, file, sizeof file), 1);
    size_t size = 0;
    uint8_t *bytes = read_whole_file(file, &size);
    assert_non_null(bytes);
    if (damage == 0) bytes[size - 7] ^= 0x40;
    if (damage == 1) bytes[41] ^= 0x01; /* n_tokens */
    if (damage == 2) size -= 100;
    FILE *fp = fopen(file, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(bytes, 1, size, fp), size);
    fclose(fp);
    free(bytes);

    ckpt_archive_info info;
    wk_error err = {0};
    int rc = ckpt_archive_scan(file, &info, &err);
    if (damage == 0) {
        assert_int_equal(rc, 0); /* header and tokens are fine; the payload is checked on load */
        ckpt_archive_info_free(&info);
    } else {
        assert_int_equal(rc, WK_EFORMAT);
    }

    c = new_cache(&f, 0, dir);
    ckpt_cache_stats st;
    ckpt_cache_get_stats(c, &st);
    run_out got, ref;
    run_uncached(&f, t2, 120, &ref);
    run_cached(&f, c, t2, 120, NULL, 0, &p, &got);
    assert_false(p.from_disk);
    assert_int_equal(p.start, 0); /* never loaded: a cold start */
    assert_same_run(&f, &got, &ref);
    ckpt_cache_archive_flush(c);
    ckpt_cache_get_stats(c, &st);
    assert_int_equal(st.disk_corrupt, 1);
    /* the damaged file is gone; the folder now holds the new request's file */
    assert_int_equal(only_file(dir, file, sizeof file), 1);
    assert_int_equal(ckpt_archive_scan(file, &info, &err), 0);
    ckpt_archive_info_free(&info);
    free_run(&ref);
    free_run(&got);
    ckpt_cache_free(c);
    rm_dir(dir);
    free(dir);
    close_model(&f);
}

/* Another server process extended the file after this cache scanned it:
 * the load notices, reads the newer file and resumes from it. */
static void test_archive_replaced_since_scan_is_read_again(void **state)
{
    (void)state;
    OPEN_OR_SKIP(f, "tiny-qwen35-F32.gguf");
    char *dir = make_tmpdir();
    ckpt_cache *a = new_cache(&f, 0, dir);
    int32_t t1[96], t2[120], t3[150];
    make_tokens(t1, 96, 21);
    ckpt_plan p;
    run_cached(&f, a, t1, 96, k_marks, 4, &p, NULL);
    ckpt_cache_archive_flush(a);
    int32_t fed1 = eng_seq_pos(p.seq);
    memcpy(t2, eng_seq_tokens(p.seq), sizeof(int32_t) * (size_t)fed1);
    make_tokens(t2 + fed1, 120 - fed1, 22);

    ckpt_cache *b = new_cache(&f, 0, dir); /* scans the first version */
    ckpt_cache_stats st;
    ckpt_cache_get_stats(b, &st);
    assert_int_equal(st.n_disk, 1);

    run_cached(&f, a, t2, 120, NULL, 0, &p, NULL); /* appends to the same conversation's file */
    ckpt_cache_archive_flush(a);
    int32_t fed2 = eng_seq_pos(p.seq);
    memcpy(t3, eng_seq_tokens(p.seq), sizeof(int32_t) * (size_t)fed2);
    make_tokens(t3 + fed2, 150 - fed2, 23);
    ckpt_cache_free(a);

    run_out ref, got;
    run_uncached(&f, t3, 150, &ref);
    run_cached(&f, b, t3, 150, NULL, 0, &p, &got);
    assert_true(p.from_disk);
    assert_int_equal(p.start, fed2); /* the newer file's end of generation */
    assert_same_run(&f, &got, &ref);
    ckpt_cache_get_stats(b, &st);
    assert_int_equal(st.disk_corrupt, 0);
    free_run(&ref);
    free_run(&got);
    ckpt_cache_free(b);
    rm_dir(dir);
    free(dir);
    close_model(&f);
}

static void test_archive_rejects_corrupted_payload(void **state)
{
    (void)state;
    check_archive_rejects(0);
}

static void test_archive_rejects_corrupted_header(void **state)
{
    (void)state;
    check_archive_rejects(1);
}

static void test_archive_rejects_truncated_file(void **state)
{
    (void)state;
    check_archive_rejects(2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_restore_gives_uncached_logits_qwen3),
        cmocka_unit_test(test_restore_gives_uncached_logits_qwen35),
        cmocka_unit_test(test_restore_rejects_other_policy_model_and_prefix),
        cmocka_unit_test(test_checkpoints_sit_at_chat_boundaries),
        cmocka_unit_test(test_cancelled_prefill_leaves_no_checkpoint_qwen35),
        cmocka_unit_test(test_cancelled_prefill_leaves_no_checkpoint_qwen3),
        cmocka_unit_test(test_budget_evicts_idle_checkpoints_but_keeps_newest),
        cmocka_unit_test(test_budget_evicts_longest_idle_conversation),
        cmocka_unit_test(test_random_traffic_never_reuses_stale_state_qwen35),
        cmocka_unit_test(test_random_traffic_never_reuses_stale_state_qwen3),
        cmocka_unit_test(test_concurrent_plans_use_their_own_slots_qwen35),
        cmocka_unit_test(test_concurrent_plans_use_their_own_slots_qwen3),
        cmocka_unit_test(test_archive_round_trips_qwen35),
        cmocka_unit_test(test_archive_round_trips_qwen3),
        cmocka_unit_test(test_archive_replaced_since_scan_is_read_again),
        cmocka_unit_test(test_archive_rejects_corrupted_payload),
        cmocka_unit_test(test_archive_rejects_corrupted_header),
        cmocka_unit_test(test_archive_rejects_truncated_file),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
