/* Speculative decoding: the acceptance rule keeps the target's distribution (a
 * chi-square test on fixed p and q tables, with a wrong rule shown to fail it), prompt
 * lookup, state rollback, and, on every architecture of the golden models, output token
 * for token equal to plain decoding with each draft source (n-gram, a draft model, an
 * MTP block on a synthetic file), also through the prefix cache: follow-up requests,
 * interval checkpoints inside speculative steps and a cancellation mid-speculation
 * leave the cache as plain decoding does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/spec.h"
#include "model/synth.h"
#include "pipeline/pipeline.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "testutil.h"

/* ---- the acceptance rule ----------------------------------------------------------- */

static double uniform(uint64_t *st) { return (double)(test_rand_u32(st) >> 8) * 0x1.0p-24; }

static int32_t draw(const float *q, int32_t n, double u)
{
    double acc = 0;
    for (int32_t i = 0; i < n; i++) {
        acc += q[i];
        if (u < acc) return i;
    }
    return n - 1;
}

/* Pearson's chi-square of counts against n_draws * p. */
static double chi_square(const long *counts, const float *p, int32_t n, long n_draws)
{
    double x2 = 0;
    for (int32_t i = 0; i < n; i++) {
        double e = (double)n_draws * p[i];
        if (e > 0) x2 += (counts[i] - e) * (counts[i] - e) / e;
        else if (counts[i]) return INFINITY; /* a token p never gives */
    }
    return x2;
}

#define V_TOY 6
#define DRAWS 200000
/* The chi-square distribution with 5 degrees of freedom exceeds 20.5 with probability 0.001. */
#define CHI2_5_CRIT 20.5

static const float k_p[V_TOY] = {0.35f, 0.25f, 0.20f, 0.10f, 0.07f, 0.03f};
/* q gives no mass where p has some (token 4) and more than p elsewhere (1, 3, 5) */
static const float k_q[V_TOY] = {0.10f, 0.40f, 0.05f, 0.30f, 0.00f, 0.15f};

/* A rule that looks plausible and is wrong: accept with p(d), else draw from p. */
static int32_t wrong_rule(const float *p, int32_t d, double u1, double u2)
{
    return u1 < p[d] ? d : draw(p, V_TOY, u2);
}

static void test_accept_rule_keeps_the_target_distribution(void **state)
{
    (void)state;
    uint64_t st = 20260;
    long ok[V_TOY] = {0}, wrong[V_TOY] = {0}, point[V_TOY] = {0};
    for (long i = 0; i < DRAWS; i++) {
        int32_t d = draw(k_q, V_TOY, uniform(&st));
        double u1 = uniform(&st), u2 = uniform(&st);
        ok[eng_spec_accept(k_p, k_q, V_TOY, d, u1, u2)]++;
        wrong[wrong_rule(k_p, d, u1, u2)]++;
        /* prompt lookup: q is a point mass on a fixed guess */
        point[eng_spec_accept(k_p, NULL, V_TOY, 1, u1, u2)]++;
    }
    double x_ok = chi_square(ok, k_p, V_TOY, DRAWS), x_wrong = chi_square(wrong, k_p, V_TOY, DRAWS);
    double x_point = chi_square(point, k_p, V_TOY, DRAWS);
    if (x_ok > CHI2_5_CRIT) fail_msg("speculative rule: chi-square %.1f > %.1f", x_ok, CHI2_5_CRIT);
    if (x_point > CHI2_5_CRIT) fail_msg("point-mass drafts: chi-square %.1f > %.1f", x_point, CHI2_5_CRIT);
    /* the test has the power to see a wrong rule */
    if (x_wrong <= CHI2_5_CRIT) fail_msg("a wrong rule passed: chi-square %.1f", x_wrong);
}

static void test_accept_rule_takes_a_draft_the_target_agrees_with(void **state)
{
    (void)state;
    /* q == p: every draft is accepted, whatever the draw */
    for (int32_t d = 0; d < V_TOY; d++) assert_int_equal(eng_spec_accept(k_p, k_p, V_TOY, d, 0.999, 0.5), d);
    /* p(d) = 0: never accepted, and the replacement is never d */
    for (int i = 0; i < 50; i++) {
        int32_t t = eng_spec_accept(k_q, NULL, V_TOY, 4, i / 50.0, i / 50.0);
        assert_true(t != 4);
    }
}

/* The sampler's reported distribution is the one it samples from (the rule needs p). */
static void test_sampler_dist_is_what_it_samples(void **state)
{
    (void)state;
    eng_sampler_params sp;
    eng_sampler_params_default(&sp);
    sp.temperature = 0.9f;
    sp.top_k = 5;
    sp.top_p = 0.9f;
    sp.min_p = 0.05f;
    sp.seed = 5;
    const int32_t V = 12;
    float logits[12];
    uint64_t st = 3;
    for (int32_t i = 0; i < V; i++) logits[i] = 2.0f * test_rand_normal(&st);
    eng_sampler *a, *b;
    wk_error err = {0};
    assert_int_equal(eng_sampler_new(&a, &sp, V, &err), 0);
    assert_int_equal(eng_sampler_new(&b, &sp, V, &err), 0);
    int32_t ids[12];
    float probs[12], p[12] = {0};
    int32_t n = eng_sampler_dist(a, logits, ids, probs);
    assert_true(n >= 2 && n <= 5);
    double sum = 0;
    for (int32_t i = 0; i < n; i++) {
        p[ids[i]] = probs[i];
        sum += probs[i];
    }
    assert_true(fabs(sum - 1.0) < 1e-5);
    long counts[12] = {0};
    for (long i = 0; i < DRAWS; i++) counts[eng_sampler_sample(b, logits, NULL)]++;
    /* degrees of freedom n - 1 <= 4: 18.5 is the 0.001 tail of chi-square(4) */
    assert_true(chi_square(counts, p, V, DRAWS) < 18.5);
    eng_sampler_free(a);
    eng_sampler_free(b);
}

/* ---- prompt lookup --------------------------------------------------------------------- */

static int32_t lookup(const int32_t *ctx, int32_t n, int32_t k, int32_t *out, int32_t *len)
{
    eng_ngram *g;
    wk_error err = {0};
    assert_int_equal(eng_ngram_new(&g, &err), 0);
    assert_int_equal(eng_ngram_add(g, ctx, n, &err), 0);
    int32_t m = eng_ngram_propose(g, ctx, n, k, out, len);
    eng_ngram_free(g);
    return m;
}

static void test_ngram_longest_latest_match_wins(void **state)
{
    (void)state;
    int32_t out[8], len;
    /* "1 2 3" seen before, followed by 4 5 9; the suffix "3" alone was followed by 7 later */
    const int32_t a[] = {1, 2, 3, 4, 5, 9, 8, 3, 7, 0, 1, 2, 3};
    assert_int_equal(lookup(a, 13, 3, out, &len), 3);
    assert_int_equal(len, 3);
    assert_int_equal(out[0], 4);
    assert_int_equal(out[1], 5);
    assert_int_equal(out[2], 9);
    /* the same n-gram twice: the latest occurrence's continuation */
    const int32_t b[] = {7, 1, 8, 2, 7, 1, 9, 2, 7, 1};
    assert_int_equal(lookup(b, 10, 1, out, &len), 1);
    assert_int_equal(out[0], 9);
    /* nothing seen: no proposal */
    const int32_t c[] = {1, 2, 3, 4};
    assert_int_equal(lookup(c, 4, 4, out, &len), 0);
}

static void test_ngram_repeats_a_loop_past_the_end(void **state)
{
    (void)state;
    int32_t out[8], len;
    const int32_t a[] = {9, 5, 6, 5, 6, 5};
    assert_int_equal(lookup(a, 6, 5, out, &len), 5);
    const int32_t want[] = {6, 5, 6, 5, 6};
    assert_memory_equal(out, want, sizeof want);
}

static void test_ngram_grows_with_the_context(void **state)
{
    (void)state;
    int32_t ctx[4000];
    uint64_t st = 8;
    for (int i = 0; i < 4000; i++) ctx[i] = (int32_t)(test_rand_u32(&st) % 50);
    eng_ngram *inc, *once;
    wk_error err = {0};
    assert_int_equal(eng_ngram_new(&inc, &err), 0);
    assert_int_equal(eng_ngram_new(&once, &err), 0);
    assert_int_equal(eng_ngram_add(once, ctx, 4000, &err), 0);
    int32_t o1[8], o2[8], l1, l2;
    for (int32_t n = 2; n <= 4000; n += 37) {
        assert_int_equal(eng_ngram_add(inc, ctx, n, &err), 0);
        int32_t m1 = eng_ngram_propose(inc, ctx, n, 8, o1, &l1);
        /* the one-shot index knows later positions too; compare against a fresh one of n */
        int32_t m2 = lookup(ctx, n, 8, o2, &l2);
        assert_int_equal(m1, m2);
        assert_int_equal(l1, l2);
        assert_memory_equal(o1, o2, sizeof(int32_t) * (size_t)m1);
    }
    eng_ngram_free(inc);
    eng_ngram_free(once);
}

/* ---- rollback --------------------------------------------------------------------------- */

static model *load(const char *path)
{
    model *m = NULL;
    wk_error err = {0};
    if (model_load(&m, path, &err)) fail_msg("%s", err.msg);
    return m;
}

/* A golden model with a context and two sequences side by side. */
typedef struct twin {
    model *m;
    eng_ctx *c;
    eng_seq *a, *b;
} twin;

static void twin_open(twin *t, const char *golden, const char *file, int threads, int32_t n_ctx)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/models/%s", golden, file);
    t->m = load(path);
    eng_options o;
    eng_options_default(&o);
    o.n_threads = threads;
    o.n_ctx = n_ctx;
    wk_error err = {0};
    assert_int_equal(eng_ctx_new(&t->c, t->m, &o, &err), 0);
    assert_int_equal(eng_seq_new(&t->a, t->c, n_ctx, &err), 0);
    assert_int_equal(eng_seq_new(&t->b, t->c, n_ctx, &err), 0);
}

static void twin_close(twin *t)
{
    eng_seq_free(t->a);
    eng_seq_free(t->b);
    eng_ctx_free(t->c);
    model_free(t->m);
}

/* A batch of 5 after a mark, cut back to 2 of them (fed again where the state cannot be
 * cut): the next logits are bit for bit those of a sequence that only ever saw the 2. */
static void check_rewind(const char *file, bool recurrent)
{
    GOLDEN_OR_SKIP(golden);
    twin t;
    twin_open(&t, golden, file, 1, 128);
    eng_ctx *c = t.c;
    eng_seq *a = t.a, *b = t.b;
    wk_error err = {0};
    assert_int_equal(eng_seq_mark_bytes(a) > 0, recurrent);
    int32_t prompt[20], batch[5] = {11, 22, 33, 44, 55};
    for (int i = 0; i < 20; i++) prompt[i] = 3 + (i * 37) % 250;
    assert_int_equal(eng_prefill(c, a, prompt, 20, NULL, &err), 0);
    assert_int_equal(eng_prefill(c, b, prompt, 20, NULL, &err), 0);
    eng_seq_mark mk = {0};
    assert_int_equal(eng_seq_mark_save(a, &mk, &err), 0);
    assert_int_equal(eng_decode_rows(c, a, batch, 5, 0, false, &err), 0);
    int32_t reached = -1;
    assert_int_equal(eng_seq_rewind(a, &mk, 22, &reached, &err), 0);
    assert_int_equal(reached, recurrent ? 20 : 22);
    if (reached < 22) assert_int_equal(eng_prefill(c, a, batch, 22 - reached, NULL, &err), 0);
    assert_int_equal(eng_prefill(c, b, batch, 2, NULL, &err), 0);
    int32_t next = 77;
    size_t V = (size_t)eng_n_vocab(c);
    float *la = malloc(sizeof(float) * V);
    assert_int_equal(eng_decode(c, a, next, &err), 0);
    memcpy(la, eng_logits(c), sizeof(float) * V);
    assert_int_equal(eng_decode(c, b, next, &err), 0);
    assert_memory_equal(la, eng_logits(c), sizeof(float) * V);
    assert_memory_equal(eng_seq_tokens(a), eng_seq_tokens(b), sizeof(int32_t) * 23);
    /* a mark the sequence has moved away from is refused */
    assert_int_equal(kv_truncate(a, 0, &err), 0);
    assert_int_equal(eng_seq_rewind(a, &mk, 20, &reached, &err), WK_EINVAL);
    eng_seq_mark_free(&mk);
    free(la);
    twin_close(&t);
}

static void make_prompt(int32_t *t, int n, uint32_t seed, int period);

/* What makes greedy speculation exact: every row of a verification batch (up to the
 * backend's exact_rows tokens) is bit for bit the decode step of its token, also over a
 * cache long enough for a decode step to split its keys across threads. */
static void check_rows_are_decode_steps(const char *file, int32_t n_prompt)
{
    GOLDEN_OR_SKIP(golden);
    twin t;
    twin_open(&t, golden, file, 2, 1024);
    eng_ctx *c = t.c;
    eng_seq *a = t.a, *b = t.b;
    wk_error err = {0};
    const int32_t K = eng_exact_batch(c);
    assert_int_equal(K, 7);
    int32_t prompt[1000], toks[8];
    make_prompt(prompt, n_prompt, 61, 0);
    assert_int_equal(eng_prefill(c, a, prompt, n_prompt, NULL, &err), 0);
    assert_int_equal(eng_prefill(c, b, prompt, n_prompt, NULL, &err), 0);
    const size_t V = (size_t)eng_n_vocab(c);
    float *steps = malloc(sizeof(float) * V * (size_t)K);
    for (int32_t i = 0; i < K; i++) {
        toks[i] = 3 + (i * 53) % 250;
        assert_int_equal(eng_decode(c, a, toks[i], &err), 0);
        memcpy(steps + (size_t)i * V, eng_logits(c), sizeof(float) * V);
    }
    assert_int_equal(eng_decode_rows(c, b, toks, K, 0, false, &err), 0);
    int32_t rows = 0;
    const float *all = eng_logits_all(c, &rows);
    assert_int_equal(rows, K);
    for (int32_t i = 0; i < K; i++)
        if (memcmp(all + (size_t)i * V, steps + (size_t)i * V, sizeof(float) * V))
            fail_msg("%s at %d: row %d of a batch of %d differs from its decode step", file, n_prompt, i, K);
    free(steps);
    twin_close(&t);
}

static void test_verification_rows_are_decode_steps(void **state)
{
    (void)state;
    /* 252: the batch crosses the 256-key padding; 600: every row past the split threshold */
    const char *files[] = {"tiny-qwen3-F32.gguf", "tiny-qwen35-F32.gguf", "tiny-qwen3moe-Q8_0.gguf",
                           "tiny-llama-Q4_K_M.gguf"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        check_rows_are_decode_steps(files[i], 252);
        check_rows_are_decode_steps(files[i], 508);
        check_rows_are_decode_steps(files[i], 600);
    }
}

static void test_rewind_recurrent_state(void **state)
{
    (void)state;
    check_rewind("tiny-qwen35-F32.gguf", true);
}

static void test_rewind_attention_kv(void **state)
{
    (void)state;
    check_rewind("tiny-qwen3-F32.gguf", false);
}

/* ---- the pipeline: speculative output equals plain decoding ---------------------------- */

static char g_mtp_path[2][256]; /* synthetic qwen35 / qwen35moe files with an MTP block */

static int g_threads = 1; /* engines of the pipeline checks */

static pl_engine *open_engine(const char *path, int spec, const char *draft, int gen_interval)
{
    pl_config cfg;
    pl_config_default(&cfg);
    cfg.model_path = path;
    cfg.need_template = false;
    cfg.eng.n_threads = g_threads;
    cfg.eng.n_ctx = 1024;
    cfg.cache.max_slots = 2;
    cfg.cache.gen_interval = gen_interval;
    cfg.spec = spec;
    cfg.draft_path = draft;
    pl_engine *pe = NULL;
    wk_error err = {0};
    if (pl_engine_open(&pe, &cfg, &err)) fail_msg("%s: %s", path, err.msg);
    return pe;
}

typedef struct seen {
    int32_t ids[128];
    int n;
    char text[4096];
    size_t text_len;
    int cancel_after;       /* > 0: raise cancel after this many tokens */
    atomic_bool cancel;
    float *logits;          /* after the prompt */
    int32_t n_vocab;
    eng_event final;
} seen;

static void on_token(void *user, int32_t id)
{
    seen *s = user;
    if (s->n < 128) s->ids[s->n++] = id;
    if (s->cancel_after > 0 && s->n == s->cancel_after) atomic_store(&s->cancel, true);
}

static void on_event(void *user, eng_event *ev)
{
    seen *s = user;
    if (ev->type == ENG_EV_DELTA && ev->text) {
        size_t l = strlen(ev->text);
        if (s->text_len + l < sizeof s->text) {
            memcpy(s->text + s->text_len, ev->text, l + 1);
            s->text_len += l;
        }
    }
    eng_event_clear(ev);
}

static void on_prefilled(void *user, eng_ctx *ctx)
{
    seen *s = user;
    s->n_vocab = eng_n_vocab(ctx);
    free(s->logits);
    s->logits = malloc(sizeof(float) * (size_t)s->n_vocab);
    memcpy(s->logits, eng_logits(ctx), sizeof(float) * (size_t)s->n_vocab);
}

typedef struct job {
    const int32_t *ids;
    int n;
    int max_tokens;
    const char *stop;   /* NULL: none */
    bool ignore_eos;
    int cancel_after;
    float temperature;
} job;

static int run(pl_engine *pe, const job *j, seen *out)
{
    eng_request req = {0};
    req.kind = ENG_REQ_COMPLETION;
    req.prompt_ids = malloc(sizeof(int32_t) * (size_t)j->n);
    assert_non_null(req.prompt_ids);
    memcpy(req.prompt_ids, j->ids, sizeof(int32_t) * (size_t)j->n);
    req.n_prompt_ids = j->n;
    req.max_tokens = j->max_tokens;
    req.ignore_eos = j->ignore_eos;
    req.sampling.temperature = j->temperature;
    req.sampling.top_p = 1;
    req.sampling.repeat_penalty = 1;
    req.sampling.has_seed = true;
    req.sampling.seed = 7;
    if (j->stop) {
        req.stop[0] = strdup(j->stop);
        req.n_stop = 1;
    }
    free(out->logits);
    memset(out, 0, sizeof *out);
    out->cancel_after = j->cancel_after;
    pl_sink sink = {.user = out, .token = on_token, .event = on_event, .prefilled = on_prefilled, .cancel = &out->cancel};
    int rc = pl_run(pe, &req, &sink, &out->final);
    eng_request_clear(&req);
    return rc;
}

static void seen_free(seen *s)
{
    free(s->logits);
    s->logits = NULL;
}

/* What the cache holds, without the fields that depend on time. */
static char *cache_state(pl_engine *pe)
{
    json_t *cj = ckpt_cache_json(pl_engine_cache(pe));
    json_t *slots = json_object_get(cj, "slots");
    size_t i;
    json_t *s;
    json_array_foreach(slots, i, s) {
        json_object_del(s, "idle_s");
        json_object_del(s, "conversation"); /* an id drawn from the clock */
    }
    char *txt = json_dumps(slots, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(cj);
    return txt;
}

static void expect_same(const char *what, const seen *plain, int rc_plain, const seen *spec, int rc_spec)
{
    if (rc_plain != rc_spec)
        fail_msg("%s: status %d (%s), plain decoding %d", what, rc_spec, spec->final.message, rc_plain);
    if (plain->n != spec->n) fail_msg("%s: %d tokens, plain decoding %d", what, spec->n, plain->n);
    for (int i = 0; i < plain->n; i++)
        if (plain->ids[i] != spec->ids[i])
            fail_msg("%s: token %d is %d, plain decoding %d", what, i, spec->ids[i], plain->ids[i]);
    if (strcmp(plain->text, spec->text)) fail_msg("%s: text differs from plain decoding", what);
    if (strcmp(plain->final.finish_reason, spec->final.finish_reason))
        fail_msg("%s: finish '%s', plain '%s'", what, spec->final.finish_reason, plain->final.finish_reason);
    assert_int_equal(plain->final.counters.completion_tokens, spec->final.counters.completion_tokens);
    assert_int_equal(plain->final.counters.cached_tokens, spec->final.counters.cached_tokens);
}

static void make_prompt(int32_t *t, int n, uint32_t seed, int period)
{
    uint32_t s = seed;
    for (int i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        /* a repeating stretch in the middle: the kind of context prompt lookup finds */
        t[i] = period && i >= n / 3 && i < 2 * n / 3 ? t[i - period] : 3 + (int32_t)((s >> 8) % 256);
    }
}

/* Plain decoding and speculative decoding through the same sequence of requests on two
 * engines; every output and the cache after every request must agree. */
static void check_same_as_plain_at(const char *path, int spec, const char *draft, float temperature, int n0)
{
    const int interval = 12; /* interval checkpoints fall inside speculative steps */
    pl_engine *pa = open_engine(path, ENG_SPEC_OFF, NULL, interval);
    pl_engine *pb = open_engine(path, spec, draft, interval);
    char what[600];
    int32_t ids[1000];
    make_prompt(ids, n0, 31, 7);
    seen a = {0}, b = {0};
    /* 1: a long greedy run */
    job j1 = {.ids = ids, .n = n0, .max_tokens = 48, .ignore_eos = true, .temperature = temperature};
    int ra = run(pa, &j1, &a), rb = run(pb, &j1, &b);
    snprintf(what, sizeof what, "%s, %s, first request", path, eng_spec_mode_name(spec));
    expect_same(what, &a, ra, &b, rb);
    if (temperature == 0 && spec != ENG_SPEC_MTP && !strstr(path, "mtp"))
        assert_true(b.final.counters.spec_steps > 0); /* it did speculate */
    char *ca = cache_state(pa), *cb = cache_state(pb);
    if (strcmp(ca, cb)) fail_msg("%s: cache %s, plain decoding %s", what, cb, ca);
    free(ca);
    free(cb);
    /* 2: a follow-up over the first's output, then a stop string from plain output */
    int n2 = n0;
    for (int i = 0; i < a.n; i++) ids[n2++] = a.ids[i];
    make_prompt(ids + n2, 10, 32, 0);
    n2 += 10;
    ra = run(pa, &(job){.ids = ids, .n = n2, .max_tokens = 30, .ignore_eos = true, .temperature = temperature}, &a);
    rb = run(pb, &(job){.ids = ids, .n = n2, .max_tokens = 30, .ignore_eos = true, .temperature = temperature}, &b);
    snprintf(what, sizeof what, "%s, %s, follow-up", path, eng_spec_mode_name(spec));
    expect_same(what, &a, ra, &b, rb);
    assert_memory_equal(a.logits, b.logits, sizeof(float) * (size_t)a.n_vocab);
    char stop[8] = {0};
    if (a.text_len > 12) memcpy(stop, a.text + a.text_len / 2, 3);
    if (stop[0]) {
        job j3 = {.ids = ids, .n = n2, .max_tokens = 30, .stop = stop, .ignore_eos = true, .temperature = temperature};
        ra = run(pa, &j3, &a);
        rb = run(pb, &j3, &b);
        snprintf(what, sizeof what, "%s, %s, stop string", path, eng_spec_mode_name(spec));
        expect_same(what, &a, ra, &b, rb);
    }
    ca = cache_state(pa);
    cb = cache_state(pb);
    if (strcmp(ca, cb)) fail_msg("%s: cache %s, plain decoding %s", what, cb, ca);
    free(ca);
    free(cb);
    /* 3: cancelled after 13 tokens, then a request that extends what it fed */
    make_prompt(ids, 50, 33, 5);
    job jc = {.ids = ids, .n = 50, .max_tokens = 40, .ignore_eos = true, .cancel_after = 13, .temperature = temperature};
    ra = run(pa, &jc, &a);
    rb = run(pb, &jc, &b);
    snprintf(what, sizeof what, "%s, %s, cancelled", path, eng_spec_mode_name(spec));
    expect_same(what, &a, ra, &b, rb);
    assert_int_equal(ra, 499);
    ca = cache_state(pa);
    cb = cache_state(pb);
    if (strcmp(ca, cb)) fail_msg("%s: cache %s, plain decoding %s", what, cb, ca);
    free(ca);
    free(cb);
    int n4 = 50;
    for (int i = 0; i < a.n; i++) ids[n4++] = a.ids[i];
    make_prompt(ids + n4, 6, 34, 0);
    n4 += 6;
    job j4 = {.ids = ids, .n = n4, .max_tokens = 20, .ignore_eos = true, .temperature = temperature};
    ra = run(pa, &j4, &a);
    rb = run(pb, &j4, &b);
    snprintf(what, sizeof what, "%s, %s, after the cancel", path, eng_spec_mode_name(spec));
    expect_same(what, &a, ra, &b, rb);
    assert_memory_equal(a.logits, b.logits, sizeof(float) * (size_t)a.n_vocab);
    assert_true(b.final.counters.cached_tokens > 50);
    seen_free(&a);
    seen_free(&b);
    pl_engine_close(pa);
    pl_engine_close(pb);
}

static void check_same_as_plain(const char *path, int spec, const char *draft, float temperature)
{
    check_same_as_plain_at(path, spec, draft, temperature, 60);
}

static const char *const k_golden[] = {
    "tiny-qwen3-F32.gguf",     "tiny-llama-F32.gguf",     "tiny-qwen35-F32.gguf", "tiny-qwen35moe-F32.gguf",
    "tiny-qwen3moe-F32.gguf",  "tiny-qwen35-Q4_K_M.gguf", "tiny-llama-Q8_0.gguf",
};

static void each_golden(int spec, const char *draft_file)
{
    GOLDEN_OR_SKIP(golden);
    for (size_t i = 0; i < sizeof k_golden / sizeof k_golden[0]; i++) {
        char path[4096], draft[4096];
        snprintf(path, sizeof path, "%s/models/%s", golden, k_golden[i]);
        /* the model as its own draft when none is named: every draft accepted */
        snprintf(draft, sizeof draft, "%s/models/%s", golden, draft_file ? draft_file : k_golden[i]);
        check_same_as_plain(path, spec, spec == ENG_SPEC_DRAFT ? draft : NULL, 0.0f);
    }
}

static void test_ngram_output_equals_plain_decoding(void **state)
{
    (void)state;
    each_golden(ENG_SPEC_NGRAM, NULL);
}

static void test_draft_model_self_output_equals_plain_decoding(void **state)
{
    (void)state;
    each_golden(ENG_SPEC_DRAFT, NULL);
}

/* Another architecture as the draft (the golden models share one vocabulary): drafts
 * rejected often; a recurrent draft model rolls itself back. */
static void test_draft_model_other_output_equals_plain_decoding(void **state)
{
    (void)state;
    each_golden(ENG_SPEC_DRAFT, "tiny-qwen35-F32.gguf");
    each_golden(ENG_SPEC_DRAFT, "tiny-qwen3-F32.gguf");
}

/* Two threads and a context past 512 positions: decode steps split their keys across
 * the threads, verification batches must too. */
static void test_long_context_on_two_threads_equals_plain_decoding(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    const char *files[] = {"tiny-qwen3-F32.gguf", "tiny-qwen35-F32.gguf"};
    g_threads = 2;
    for (size_t i = 0; i < 2; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/models/%s", golden, files[i]);
        check_same_as_plain_at(path, ENG_SPEC_NGRAM, NULL, 0.0f, 480);
        check_same_as_plain_at(path, ENG_SPEC_DRAFT, path, 0.0f, 480);
    }
    check_same_as_plain_at(g_mtp_path[0], ENG_SPEC_MTP, NULL, 0.0f, 480);
    g_threads = 1;
}

static void test_mtp_output_equals_plain_decoding(void **state)
{
    (void)state;
    for (int i = 0; i < 2; i++) {
        check_same_as_plain(g_mtp_path[i], ENG_SPEC_MTP, NULL, 0.0f);
        check_same_as_plain(g_mtp_path[i], ENG_SPEC_AUTO, NULL, 0.0f); /* auto picks the MTP block */
    }
}

/* At temperature > 0 the output is a sample, not plain decoding's: what must hold is
 * that every request completes with its length and the cache stays consistent (the
 * distribution itself is the rule's, tested above). */
static void test_sampling_speculation_completes(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    char path[4096];
    snprintf(path, sizeof path, "%s/models/tiny-qwen35-F32.gguf", golden);
    const int modes[] = {ENG_SPEC_NGRAM, ENG_SPEC_DRAFT};
    for (int mi = 0; mi < 2; mi++) {
        pl_engine *pe = open_engine(path, modes[mi], modes[mi] == ENG_SPEC_DRAFT ? path : NULL, 12);
        int32_t ids[200];
        make_prompt(ids, 60, 41, 7);
        seen s = {0};
        assert_int_equal(run(pe, &(job){.ids = ids, .n = 60, .max_tokens = 40, .ignore_eos = true, .temperature = 0.8f}, &s), 0);
        assert_int_equal(s.n, 40);
        assert_true(s.final.counters.draft_proposed > 0);
        /* the same model as its own draft at the same temperature: q == p, all accepted */
        if (modes[mi] == ENG_SPEC_DRAFT)
            assert_int_equal(s.final.counters.draft_accepted, s.final.counters.draft_proposed);
        int n = 60;
        for (int i = 0; i < s.n; i++) ids[n++] = s.ids[i];
        assert_int_equal(run(pe, &(job){.ids = ids, .n = n, .max_tokens = 8, .ignore_eos = true}, &s), 0);
        assert_true(s.final.counters.cached_tokens >= 60 + 39 - 12);
        seen_free(&s);
        pl_engine_close(pe);
    }
}

/* A source the engine does not have is a 400 naming it; a draft model with another
 * vocabulary does not load. */
static void test_missing_sources_are_refused(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    char path[4096];
    snprintf(path, sizeof path, "%s/models/tiny-qwen3-F32.gguf", golden);
    pl_engine *pe = open_engine(path, ENG_SPEC_OFF, NULL, 0);
    int32_t ids[8] = {5, 6, 7, 8, 9, 10, 11, 12};
    const int modes[] = {ENG_SPEC_DRAFT, ENG_SPEC_MTP};
    for (int i = 0; i < 2; i++) {
        eng_request req = {0};
        req.kind = ENG_REQ_COMPLETION;
        req.prompt_ids = malloc(sizeof ids);
        memcpy(req.prompt_ids, ids, sizeof ids);
        req.n_prompt_ids = 8;
        req.max_tokens = 4;
        req.spec = modes[i];
        eng_event final = {0};
        assert_int_equal(pl_run(pe, &req, NULL, &final), 400);
        assert_non_null(strstr(final.message, i == 0 ? "draft model" : "MTP"));
        eng_request_clear(&req);
    }
    pl_engine_close(pe);
    pl_config cfg;
    pl_config_default(&cfg);
    cfg.model_path = path;
    cfg.need_template = false;
    cfg.eng.n_threads = 1;
    cfg.eng.n_ctx = 256;
    cfg.draft_path = g_mtp_path[0]; /* a synthetic vocabulary of 512 tokens */
    wk_error err = {0};
    assert_int_not_equal(pl_engine_open(&pe, &cfg, &err), 0);
    assert_non_null(strstr(err.msg, "draft model"));
}

/* The MTP block is bound when the file has one and changes nothing else: the main
 * model's output is that of the same file written without it. */
static void test_mtp_block_is_bound_and_ignored_by_the_main_model(void **state)
{
    (void)state;
    model *with = load(g_mtp_path[0]);
    assert_true(with->has_mtp);
    assert_int_equal(with->hp.n_layer + 1, with->hp.n_layer_all);
    synth_options o;
    wk_error err = {0};
    assert_int_equal(synth_options_init(&o, "tiny-qwen35", &err), 0);
    o.n_threads = 1;
    char plain[300];
    snprintf(plain, sizeof plain, "%s.plain.gguf", g_mtp_path[0]);
    assert_int_equal(synth_write(&o, plain, NULL, NULL, &err), 0);
    model *without = load(plain);
    assert_false(without->has_mtp);
    eng_options eo;
    eng_options_default(&eo);
    eo.n_threads = 1;
    eo.n_ctx = 64;
    int32_t toks[12] = {40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51};
    float *l[2];
    model *ms[2] = {with, without};
    for (int i = 0; i < 2; i++) {
        eng_ctx *c;
        eng_seq *s;
        assert_int_equal(eng_ctx_new(&c, ms[i], &eo, &err), 0);
        assert_int_equal(eng_seq_new(&s, c, 64, &err), 0);
        assert_int_equal(eng_prefill(c, s, toks, 12, NULL, &err), 0);
        l[i] = malloc(sizeof(float) * ms[i]->hp.n_vocab);
        memcpy(l[i], eng_logits(c), sizeof(float) * ms[i]->hp.n_vocab);
        eng_seq_free(s);
        eng_ctx_free(c);
    }
    assert_memory_equal(l[0], l[1], sizeof(float) * with->hp.n_vocab);
    free(l[0]);
    free(l[1]);
    model_free(with);
    model_free(without);
    unlink(plain);
}

/* MTP drafts depend on the context only, not on how its hidden states arrived: a
 * prompt prefilled in one go, in two requests (the block keeps its KV across them), in
 * small chunks, or partly through verification batches gives the same proposals. */
typedef struct mtp_feed {
    eng_mtp *t;
    const int32_t *ids;
    int32_t n;
} mtp_feed;

static void feed_hidden(void *user, int32_t pos0, int32_t n, const float *rows)
{
    mtp_feed *f = user;
    wk_error err = {0};
    assert_int_equal(eng_mtp_hidden(f->t, f->ids, f->n, pos0, n, rows, &err), 0);
}

/* verify_rows: the tokens after split go in as speculative verification batches do
 * (eng_decode_rows with hidden rows, 3 at a time), not as a second prefill. */
static void mtp_drafts(model *m, const int32_t *ids, int32_t n, int32_t split, int32_t ubatch, bool verify_rows,
                       eng_draft *out)
{
    eng_options o;
    eng_options_default(&o);
    o.n_threads = 1;
    o.n_ctx = 256;
    o.n_ubatch = ubatch;
    eng_ctx *c;
    eng_seq *s;
    eng_mtp *t;
    wk_error err = {0};
    assert_int_equal(eng_ctx_new(&c, m, &o, &err), 0);
    assert_int_equal(eng_seq_new(&s, c, 256, &err), 0);
    assert_int_equal(eng_mtp_new(&t, c, 256, &err), 0);
    mtp_feed f = {t, ids, split};
    eng_prefill_opts po = {.hidden = feed_hidden, .hidden_user = &f};
    eng_mtp_begin(t, ids, split, 0);
    assert_int_equal(eng_prefill(c, s, ids, split, &po, &err), 0);
    for (int32_t p = split; verify_rows && p < n; p += 3) {
        int32_t len = n - p < 3 ? n - p : 3;
        assert_int_equal(eng_decode_rows(c, s, ids + p, len, len - 1, true, &err), 0);
        assert_int_equal(eng_mtp_hidden(t, ids, p + len, p, len, eng_hidden_all(c, NULL), &err), 0);
    }
    if (!verify_rows && split < n) { /* a second request over the longer prompt */
        f.n = n;
        eng_mtp_begin(t, ids, n, split);
        assert_int_equal(eng_prefill(c, s, ids + split, n - split, &po, &err), 0);
    }
    int32_t ctx[300];
    memcpy(ctx, ids, sizeof(int32_t) * (size_t)n);
    ctx[n] = eng_argmax(eng_logits(c), eng_n_vocab(c));
    memset(out, 0, sizeof *out);
    assert_int_equal(eng_mtp_propose(t, ctx, n + 1, 4, NULL, out, &err), 0);
    assert_int_equal(out->n, 4);
    eng_mtp_free(t);
    eng_seq_free(s);
    eng_ctx_free(c);
}

static void test_mtp_drafts_do_not_depend_on_how_the_prompt_came(void **state)
{
    (void)state;
    model *m = load(g_mtp_path[0]);
    int32_t ids[60];
    make_prompt(ids, 60, 51, 0);
    eng_draft whole, two, chunks, rows;
    mtp_drafts(m, ids, 60, 60, 64, false, &whole);
    mtp_drafts(m, ids, 60, 37, 64, false, &two);
    mtp_drafts(m, ids, 60, 60, 7, false, &chunks);
    mtp_drafts(m, ids, 60, 41, 64, true, &rows);
    assert_memory_equal(whole.tok, two.tok, sizeof(int32_t) * 4);
    assert_memory_equal(whole.tok, chunks.tok, sizeof(int32_t) * 4);
    assert_memory_equal(whole.tok, rows.tok, sizeof(int32_t) * 4);
    model_free(m);
}

/* {"wick": {"spec": ...}} is parsed into the request, anything else is a 400 naming it. */
static int parse_spec(const char *wick, eng_request *req, srv_error *err)
{
    char body[256];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"wick\":%s}", wick);
    srv_limits lim;
    srv_limits_default(&lim);
    lim.n_ctx = 4096;
    json_t *root = NULL;
    memset(err, 0, sizeof *err);
    memset(req, 0, sizeof *req);
    srv_resp_opts ro;
    if (srv_parse_body(body, strlen(body), &lim, &root, err)) return err->status;
    const srv_model_names models = {.id = "tiny"};
    int rc = srv_parse_chat(root, &lim, &models, req, &ro, err);
    json_decref(root);
    return rc ? err->status : 200;
}

static void test_request_chooses_its_draft_source(void **state)
{
    (void)state;
    eng_request req;
    srv_error err;
    assert_int_equal(parse_spec("{\"spec\":\"ngram\"}", &req, &err), 200);
    assert_int_equal(req.spec, ENG_SPEC_NGRAM);
    eng_request_clear(&req);
    assert_int_equal(parse_spec("{\"spec\":\"off\"}", &req, &err), 200);
    assert_int_equal(req.spec, ENG_SPEC_OFF);
    eng_request_clear(&req);
    assert_int_equal(parse_spec("{}", &req, &err), 200);
    assert_int_equal(req.spec, ENG_SPEC_DEFAULT);
    eng_request_clear(&req);
    assert_int_equal(parse_spec("{\"spec\":\"eagle\"}", &req, &err), 400);
    assert_string_equal(err.param, "wick.spec");
    assert_int_equal(parse_spec("{\"spec\":3}", &req, &err), 400);
    assert_string_equal(err.param, "wick.spec");
}

/* The counters of a speculative request reach the timings JSON and /metrics by source. */
static void test_draft_counters_reach_timings_and_metrics(void **state)
{
    (void)state;
    eng_counters c = {0};
    snprintf(c.spec, sizeof c.spec, "ngram");
    c.draft_proposed = 40;
    c.draft_accepted = 30;
    c.spec_steps = 10;
    json_t *t = eng_counters_timings_json(&c);
    assert_string_equal(json_string_value(json_object_get(t, "draft_source")), "ngram");
    assert_int_equal(json_integer_value(json_object_get(t, "draft_n")), 40);
    assert_int_equal(json_integer_value(json_object_get(t, "draft_n_accepted")), 30);
    assert_true(fabs(json_real_value(json_object_get(t, "draft_acceptance")) - 0.75) < 1e-9);
    assert_true(fabs(json_real_value(json_object_get(t, "draft_accepted_per_step")) - 3.0) < 1e-9);
    json_decref(t);
    eng_counters off = {0};
    t = eng_counters_timings_json(&off);
    assert_null(json_object_get(t, "draft_source"));
    json_decref(t);
    srv_metrics m;
    srv_metrics_init(&m);
    srv_metrics_observe(&m, &c);
    srv_metrics_observe(&m, &c);
    srv_gauges g = {0};
    srv_buf o = {0};
    assert_int_equal(srv_metrics_render(&m, &g, &o), 0);
    assert_non_null(strstr(o.data, "wick_draft_tokens_total{source=\"ngram\"} 80\n"));
    assert_non_null(strstr(o.data, "wick_draft_accepted_total{source=\"ngram\"} 60\n"));
    assert_non_null(strstr(o.data, "wick_draft_accepted_total{source=\"mtp\"} 0\n"));
    srv_buf_free(&o);
    srv_metrics_destroy(&m);
}

static int write_mtp_models(void **state)
{
    (void)state;
    const char *presets[2] = {"tiny-qwen35", "tiny-qwen35moe"};
    for (int i = 0; i < 2; i++) {
        synth_options o;
        wk_error err = {0};
        if (synth_options_init(&o, presets[i], &err)) return -1;
        o.dims.n_mtp = 1;
        o.n_threads = 1;
        snprintf(g_mtp_path[i], sizeof g_mtp_path[i], "/tmp/wick-test-spec-%d-%s-mtp.gguf", (int)getpid(), presets[i]);
        if (synth_write(&o, g_mtp_path[i], NULL, NULL, &err)) {
            fprintf(stderr, "synth_write: %s\n", err.msg);
            return -1;
        }
    }
    return 0;
}

static int remove_mtp_models(void **state)
{
    (void)state;
    for (int i = 0; i < 2; i++) unlink(g_mtp_path[i]);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accept_rule_keeps_the_target_distribution),
        cmocka_unit_test(test_accept_rule_takes_a_draft_the_target_agrees_with),
        cmocka_unit_test(test_sampler_dist_is_what_it_samples),
        cmocka_unit_test(test_ngram_longest_latest_match_wins),
        cmocka_unit_test(test_ngram_repeats_a_loop_past_the_end),
        cmocka_unit_test(test_ngram_grows_with_the_context),
        cmocka_unit_test(test_verification_rows_are_decode_steps),
        cmocka_unit_test(test_rewind_recurrent_state),
        cmocka_unit_test(test_rewind_attention_kv),
        cmocka_unit_test(test_mtp_block_is_bound_and_ignored_by_the_main_model),
        cmocka_unit_test(test_mtp_drafts_do_not_depend_on_how_the_prompt_came),
        cmocka_unit_test(test_ngram_output_equals_plain_decoding),
        cmocka_unit_test(test_draft_model_self_output_equals_plain_decoding),
        cmocka_unit_test(test_draft_model_other_output_equals_plain_decoding),
        cmocka_unit_test(test_mtp_output_equals_plain_decoding),
        cmocka_unit_test(test_long_context_on_two_threads_equals_plain_decoding),
        cmocka_unit_test(test_sampling_speculation_completes),
        cmocka_unit_test(test_missing_sources_are_refused),
        cmocka_unit_test(test_request_chooses_its_draft_source),
        cmocka_unit_test(test_draft_counters_reach_timings_and_metrics),
    };
    return WK_RUN_GROUP_TESTS(tests, write_mtp_models, remove_mtp_models);
}
