/* The step scheduler (engine/sched.h): threads that each prefill and decode their own
 * sequence under one lock get, bit for bit, the logits they get one after the other,
 * while their forwards run as shared steps; a prompt waiting behind another prompt
 * leaves when it is cancelled. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/context.h"
#include "engine/sched.h"
#include "engine/sequence.h"
#include "model/model.h"
#include "testutil.h"
#include "util/argmax.h"

#define N_THREADS 6
#define N_GEN 12
#define N_CTX 256

typedef struct worker {
    eng_ctx *c;
    eng_sched *s;
    eng_seq *seq;
    int32_t prompt[80];
    int32_t n_prompt;
    int32_t out[N_GEN];  /* greedy continuation */
    float last_max;      /* largest logit of the last step (a bit-exact fingerprint) */
    int rc;
} worker;

/* One request: lock, join, prefill, greedy decode, leave, unlock. */
static void *run(void *arg)
{
    worker *w = arg;
    wk_error err = {0};
    eng_sched_lock(w->s);
    eng_sched_join(w->s, w->seq);
    w->rc = eng_prefill(w->c, w->seq, w->prompt, w->n_prompt, NULL, &err);
    for (int i = 0; i < N_GEN && !w->rc; i++) {
        const float *l = eng_logits(w->c);
        w->out[i] = wk_argmax_f32(l, eng_n_vocab(w->c));
        w->last_max = l[w->out[i]];
        w->rc = eng_decode(w->c, w->seq, w->out[i], &err);
    }
    eng_sched_leave(w->s, w->seq);
    eng_sched_unlock(w->s);
    return NULL;
}

static void check_model(const char *golden, const char *file)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/models/%s", golden, file);
    wk_error err = {0};
    model *m;
    if (model_load(&m, path, &err)) fail_msg("%s: %s", path, err.msg);
    eng_options o;
    eng_options_default(&o);
    o.n_threads = 2;
    o.n_ctx = N_CTX;
    o.n_ubatch = 16; /* prompts of several chunks, interleaved with the others' decoding */
    o.n_seq = N_THREADS;
    eng_ctx *c;
    assert_int_equal(eng_ctx_new(&c, m, &o, &err), 0);
    eng_sched *s;
    assert_int_equal(eng_sched_new(&s, c, &err), 0);
    worker ref[N_THREADS], par[N_THREADS];
    pthread_t th[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        worker w = {.c = c, .s = s, .n_prompt = 3 + 13 * i};
        for (int t = 0; t < w.n_prompt; t++) w.prompt[t] = 3 + (i * 71 + t * 29) % 250;
        ref[i] = par[i] = w;
        assert_int_equal(eng_seq_new(&ref[i].seq, c, N_CTX, &err), 0);
        assert_int_equal(eng_seq_new(&par[i].seq, c, N_CTX, &err), 0);
    }
    for (int i = 0; i < N_THREADS; i++) run(&ref[i]); /* one after the other: steps of one */
    uint64_t steps0, fw0, steps, fw;
    eng_sched_stats(s, &steps0, &fw0);
    for (int i = 0; i < N_THREADS; i++) assert_int_equal(pthread_create(&th[i], NULL, run, &par[i]), 0);
    for (int i = 0; i < N_THREADS; i++) pthread_join(th[i], NULL);
    eng_sched_stats(s, &steps, &fw);
    for (int i = 0; i < N_THREADS; i++) {
        assert_int_equal(par[i].rc, 0);
        assert_memory_equal(par[i].out, ref[i].out, sizeof ref[i].out);
        if (memcmp(&par[i].last_max, &ref[i].last_max, sizeof(float)))
            fail_msg("%s: thread %d's last logits differ from its run alone", file, i);
        assert_int_equal(eng_seq_pos(par[i].seq), eng_seq_pos(ref[i].seq));
    }
    /* the forwards met: fewer steps than forwards (each thread's prefill chunks + decodes) */
    assert_true(fw - fw0 > steps - steps0);
    assert_int_equal(eng_sched_members(s), 0);
    for (int i = 0; i < N_THREADS; i++) {
        eng_seq_free(ref[i].seq);
        eng_seq_free(par[i].seq);
    }
    eng_sched_free(s);
    eng_ctx_free(c);
    model_free(m);
}

static void test_threads_share_steps_and_numbers(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    check_model(golden, "tiny-qwen35-F32.gguf");
    check_model(golden, "tiny-qwen3moe-Q8_0.gguf");
}

typedef struct cancel_arg {
    eng_ctx *c;
    eng_sched *s;
    eng_seq *seq;
    const int32_t *ids;
    int32_t n;
    atomic_bool *flag;
    int rc;
} cancel_arg;

static void *prefill_cancellable(void *arg)
{
    cancel_arg *a = arg;
    wk_error err = {0};
    eng_prefill_opts po = {.cancel_flag = a->flag};
    eng_sched_lock(a->s);
    eng_sched_join(a->s, a->seq);
    a->rc = eng_prefill(a->c, a->seq, a->ids, a->n, &po, &err);
    eng_sched_leave(a->s, a->seq);
    eng_sched_unlock(a->s);
    return NULL;
}

/* B's prompt waits behind A's (one prompt chunk per step, the older first): cancelled
 * meanwhile, it returns WK_ECANCELLED at its position while A goes on. */
static void test_waiting_prompt_leaves_on_cancel(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    char path[4096];
    snprintf(path, sizeof path, "%s/models/tiny-qwen3-F32.gguf", golden);
    wk_error err = {0};
    model *m;
    if (model_load(&m, path, &err)) fail_msg("%s: %s", path, err.msg);
    eng_options o;
    eng_options_default(&o);
    o.n_threads = 1;
    o.n_ctx = 2048;
    o.n_ubatch = 1; /* 2000 steps for A's prompt */
    o.n_seq = 2;
    eng_ctx *c;
    assert_int_equal(eng_ctx_new(&c, m, &o, &err), 0);
    eng_sched *s;
    assert_int_equal(eng_sched_new(&s, c, &err), 0);
    static int32_t ids[2000];
    for (int i = 0; i < 2000; i++) ids[i] = 3 + (i * 17) % 250;
    atomic_bool no = false, yes = false;
    cancel_arg a = {c, s, NULL, ids, 2000, &no, -1}, b = {c, s, NULL, ids, 64, &yes, -1};
    assert_int_equal(eng_seq_new(&a.seq, c, 2048, &err), 0);
    assert_int_equal(eng_seq_new(&b.seq, c, 2048, &err), 0);
    pthread_t ta, tb;
    /* A joins first (its chunks go first), then B */
    eng_sched_lock(s);
    assert_int_equal(pthread_create(&ta, NULL, prefill_cancellable, &a), 0);
    eng_sched_unlock(s);
    while (eng_seq_pos(a.seq) == 0) {
        struct timespec t = {0, 1000000};
        nanosleep(&t, NULL);
    }
    assert_int_equal(pthread_create(&tb, NULL, prefill_cancellable, &b), 0);
    for (int joined = 0; !joined;) { /* B is in: cancel it while A's prompt goes on */
        eng_sched_lock(s);
        joined = eng_sched_members(s) == 2;
        eng_sched_unlock(s);
    }
    atomic_store(&yes, true);
    pthread_join(tb, NULL);
    assert_int_equal(b.rc, WK_ECANCELLED);
    assert_true(eng_seq_pos(a.seq) < 2000); /* B did not wait for A's whole prompt */
    pthread_join(ta, NULL);
    assert_int_equal(a.rc, 0);
    assert_int_equal(eng_seq_pos(a.seq), 2000);
    assert_int_equal(eng_seq_pos(b.seq), 0);
    eng_seq_free(a.seq);
    eng_seq_free(b.seq);
    eng_sched_free(s);
    eng_ctx_free(c);
    model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_share_steps_and_numbers),
        cmocka_unit_test(test_waiting_prompt_leaves_on_cancel),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
