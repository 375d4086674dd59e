#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampler.h"
#include "testutil.h"

/* The sampler's first candidate pool is 256: a nucleus larger than that
 * makes it grow the pool. */
#define ADAPTIVE_TEST_MIN_KEEP 256

static eng_sampler *make(const eng_sampler_params *p, int32_t n_vocab)
{
    eng_sampler *s = NULL;
    wk_error err = {0};
    assert_int_equal(eng_sampler_new(&s, p, n_vocab, &err), 0);
    return s;
}

static eng_sampler_params plain(float temperature)
{
    eng_sampler_params p;
    eng_sampler_params_default(&p);
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = 1234;
    return p;
}

static void random_logits(float *l, int32_t n, uint64_t seed, float scale)
{
    uint64_t st = seed;
    for (int32_t i = 0; i < n; i++) l[i] = scale * test_rand_normal(&st);
}

static void test_greedy_is_argmax_with_ties_to_lowest_id(void **state)
{
    (void)state;
    float l[6] = {0.5f, 2.0f, -1.0f, 2.0f, NAN, 1.9f};
    eng_sampler_params p = plain(0.0f);
    eng_sampler *s = make(&p, 6);
    float prob = 0;
    assert_int_equal(eng_sampler_sample(s, l, &prob), 1);
    double z = exp(0.5 - 2) + 1 + exp(-3.0) + 1 + exp(-0.1);
    assert_float_equal(prob, 1.0 / z, 1e-6);
    assert_int_equal(eng_argmax(l, 6), 1);
    /* logits are not modified */
    assert_float_equal(l[3], 2.0f, 0);
    eng_sampler_free(s);

    uint64_t st = 9;
    float *big = malloc(200000 * sizeof *big);
    random_logits(big, 200000, 77, 3.0f);
    int32_t want = 0;
    for (int32_t i = 1; i < 200000; i++)
        if (big[i] > big[want]) want = i;
    s = make(&p, 200000);
    assert_int_equal(eng_sampler_sample(s, big, NULL), want);
    eng_sampler_free(s);
    free(big);
    (void)st;
}

/* Only a greedy sampler that leaves the logits as they are may hand its pick to the backend. */
static void test_plain_greedy_means_no_bias_and_no_penalties(void **state)
{
    (void)state;
    wk_error err = {0};
    eng_sampler_params p = plain(0.0f);
    p.penalty_last_n = 0;
    eng_sampler *s = make(&p, 16);
    assert_true(eng_sampler_is_plain_greedy(s));
    assert_int_equal(eng_sampler_set_bias(s, 3, 1.0f, &err), 0);
    assert_false(eng_sampler_is_plain_greedy(s));
    eng_sampler_free(s);
    p = plain(0.7f);
    p.penalty_last_n = 0;
    s = make(&p, 16);
    assert_false(eng_sampler_is_plain_greedy(s)); /* temperature */
    eng_sampler_free(s);
    p.top_k = 1;
    s = make(&p, 16);
    assert_true(eng_sampler_is_plain_greedy(s)); /* top_k 1 is greedy at any temperature */
    eng_sampler_free(s);
    p = plain(0.0f);
    p.repeat_penalty = 1.3f;
    p.penalty_last_n = 64;
    s = make(&p, 16);
    assert_false(eng_sampler_is_plain_greedy(s)); /* penalties rewrite the logits */
    eng_sampler_free(s);
}

static void test_top_k_one_is_greedy(void **state)
{
    (void)state;
    int32_t n = 5000;
    float *l = malloc((size_t)n * sizeof *l);
    eng_sampler_params p = plain(1.5f);
    p.top_k = 1;
    eng_sampler *s = make(&p, n);
    for (int rep = 0; rep < 20; rep++) {
        random_logits(l, n, 100 + (uint64_t)rep, 1.0f);
        assert_int_equal(eng_sampler_sample(s, l, NULL), eng_argmax(l, n));
    }
    eng_sampler_free(s);
    free(l);
}

static void draw_sequence(const eng_sampler_params *p, const float *l, int32_t n, int32_t *out, int count)
{
    eng_sampler *s = make(p, n);
    for (int i = 0; i < count; i++) {
        out[i] = eng_sampler_sample(s, l, NULL);
        eng_sampler_accept(s, out[i]);
    }
    eng_sampler_free(s);
}

static void test_same_seed_gives_same_sequence(void **state)
{
    (void)state;
    int32_t n = 32000;
    float *l = malloc((size_t)n * sizeof *l);
    random_logits(l, n, 5, 2.0f);
    eng_sampler_params p;
    eng_sampler_params_default(&p);
    p.seed = 99;
    p.repeat_penalty = 1.1f;
    int32_t a[64], b[64], c[64];
    draw_sequence(&p, l, n, a, 64);
    draw_sequence(&p, l, n, b, 64);
    assert_memory_equal(a, b, sizeof a);
    p.seed = 100;
    draw_sequence(&p, l, n, c, 64);
    assert_true(memcmp(a, c, sizeof a) != 0);

    /* reset re-seeds and clears the window */
    p.seed = 99;
    eng_sampler *s = make(&p, n);
    for (int i = 0; i < 64; i++) eng_sampler_accept(s, eng_sampler_sample(s, l, NULL));
    eng_sampler_reset(s);
    for (int i = 0; i < 64; i++) {
        int32_t t = eng_sampler_sample(s, l, NULL);
        assert_int_equal(t, a[i]);
        eng_sampler_accept(s, t);
    }
    eng_sampler_free(s);
    free(l);
}

/* Counts draws per token over many samples. */
static void histogram(const eng_sampler_params *p, const float *l, int32_t n, int draws, int *hist)
{
    eng_sampler *s = make(p, n);
    memset(hist, 0, (size_t)n * sizeof *hist);
    for (int i = 0; i < draws; i++) {
        int32_t t = eng_sampler_sample(s, l, NULL);
        assert_true(t >= 0 && t < n);
        hist[t]++;
    }
    eng_sampler_free(s);
}

static void test_top_p_keeps_the_smallest_prefix_with_the_mass(void **state)
{
    (void)state;
    /* probabilities 0.5, 0.3, 0.15, 0.05 at temperature 1 */
    float l[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    int hist[4];
    eng_sampler_params p = plain(1.0f);
    p.top_p = 0.75f;
    histogram(&p, l, 4, 4000, hist);
    assert_int_equal(hist[2] + hist[3], 0);
    /* renormalised over {0, 1}: 0.625 / 0.375 */
    assert_true(fabs(hist[0] / 4000.0 - 0.625) < 0.04);
    p.top_p = 0.85f;
    histogram(&p, l, 4, 4000, hist);
    assert_int_equal(hist[3], 0);
    assert_true(hist[2] > 0);
    /* top-p 0 still keeps the best token */
    p.top_p = 0.0f;
    histogram(&p, l, 4, 200, hist);
    assert_int_equal(hist[0], 200);
    /* top-k 2 with top-p off */
    p = plain(1.0f);
    p.top_k = 2;
    histogram(&p, l, 4, 2000, hist);
    assert_int_equal(hist[2] + hist[3], 0);
    assert_true(hist[1] > 0);
}

static void test_min_p_drops_tokens_below_the_relative_floor(void **state)
{
    (void)state;
    float l[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    int hist[4];
    eng_sampler_params p = plain(1.0f);
    p.min_p = 0.2f; /* floor 0.1: keeps 0.5, 0.3, 0.15 */
    histogram(&p, l, 4, 4000, hist);
    assert_int_equal(hist[3], 0);
    assert_true(hist[2] > 300);
    assert_true(fabs(hist[0] / 4000.0 - 0.5 / 0.95) < 0.04);
    p.min_p = 0.7f; /* floor 0.35: only the best */
    histogram(&p, l, 4, 500, hist);
    assert_int_equal(hist[0], 500);
    /* with top-k set too */
    p.top_k = 3;
    p.min_p = 0.5f; /* floor 0.25: 0 and 1 */
    histogram(&p, l, 4, 2000, hist);
    assert_int_equal(hist[2] + hist[3], 0);
    assert_true(hist[1] > 0);
}

static int cmp_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x > y ? -1 : x < y ? 1 : 0;
}

static void test_top_p_on_a_large_vocabulary_matches_a_full_sort(void **state)
{
    (void)state;
    int32_t n = 200000;
    float *l = malloc((size_t)n * sizeof *l);
    float *sorted = malloc((size_t)n * sizeof *sorted);
    random_logits(l, n, 31, 1.5f);
    float temp = 0.8f, top_p = 0.9f;
    /* reference nucleus by sorting everything */
    memcpy(sorted, l, (size_t)n * sizeof *l);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_desc);
    double z = 0;
    for (int32_t i = 0; i < n; i++) z += exp((sorted[i] - sorted[0]) / temp);
    double acc = 0;
    int32_t keep = 0;
    while (keep < n) {
        acc += exp((sorted[keep] - sorted[0]) / temp);
        keep++;
        if (acc >= top_p * z) break;
    }
    float cutoff = sorted[keep - 1];
    assert_true(keep > ADAPTIVE_TEST_MIN_KEEP);

    eng_sampler_params p = plain(temp);
    p.top_p = top_p;
    eng_sampler *s = make(&p, n);
    for (int i = 0; i < 300; i++) {
        float prob = 0;
        int32_t t = eng_sampler_sample(s, l, &prob);
        assert_true(t >= 0);
        assert_true(l[t] >= cutoff);
        double want = exp((l[t] - sorted[0]) / temp) / acc;
        assert_true(fabs(prob - want) <= 1e-4 * want + 1e-9);
    }
    eng_sampler_free(s);
    free(l);
    free(sorted);
}

static void test_penalties_change_only_window_tokens(void **state)
{
    (void)state;
    float l[4] = {3.0f, 2.5f, 1.0f, -1.0f};
    eng_sampler_params p = plain(0.0f);
    p.repeat_penalty = 2.0f;
    p.penalty_last_n = 2;
    eng_sampler *s = make(&p, 4);
    float prob;
    eng_sampler_accept(s, 0);
    assert_int_equal(eng_sampler_sample(s, l, &prob), 1); /* 3 → 1.5 */
    double z = exp(1.5 - 2.5) + 1 + exp(1.0 - 2.5) + exp(-1.0 - 2.5);
    assert_float_equal(prob, 1.0 / z, 1e-6);
    eng_sampler_accept(s, 3);
    eng_sampler_accept(s, 2); /* window {3, 2}: token 0 is free again; -1 → -2, 1 → 0.5 */
    assert_int_equal(eng_sampler_sample(s, l, &prob), 0);
    z = 1 + exp(2.5 - 3) + exp(0.5 - 3) + exp(-2.0 - 3);
    assert_float_equal(prob, 1.0 / z, 1e-6);
    eng_sampler_free(s);

    /* frequency counts every occurrence, presence once */
    p = plain(0.0f);
    p.frequency_penalty = 1.0f;
    p.presence_penalty = 0.5f;
    p.penalty_last_n = -1;
    s = make(&p, 4);
    eng_sampler_accept(s, 0);
    eng_sampler_accept(s, 0); /* 3 - 2*1 - 0.5 = 0.5 */
    assert_int_equal(eng_sampler_sample(s, l, &prob), 1);
    z = exp(0.5 - 2.5) + 1 + exp(1.0 - 2.5) + exp(-1.0 - 2.5);
    assert_float_equal(prob, 1.0 / z, 1e-6);
    eng_sampler_free(s);

    /* penalty_last_n 0 turns penalties off */
    p.penalty_last_n = 0;
    s = make(&p, 4);
    eng_sampler_accept(s, 0);
    assert_int_equal(eng_sampler_sample(s, l, NULL), 0);
    eng_sampler_free(s);
}

static void test_logit_bias_can_ban_tokens(void **state)
{
    (void)state;
    float l[3] = {5.0f, 4.0f, 3.0f};
    eng_sampler_params p = plain(0.0f);
    eng_sampler *s = make(&p, 3);
    wk_error err = {0};
    assert_int_equal(eng_sampler_set_bias(s, 0, -INFINITY, &err), 0);
    assert_int_equal(eng_sampler_sample(s, l, NULL), 1);
    assert_int_equal(eng_sampler_set_bias(s, 2, 10.0f, &err), 0);
    assert_int_equal(eng_sampler_sample(s, l, NULL), 2);
    assert_int_equal(eng_sampler_set_bias(s, 3, 1.0f, &err), WK_EINVAL);
    assert_int_equal(eng_sampler_set_bias(s, 1, -INFINITY, &err), 0);
    assert_int_equal(eng_sampler_set_bias(s, 2, -INFINITY, &err), 0);
    assert_int_equal(eng_sampler_sample(s, l, NULL), -1);
    eng_sampler_free(s);
    /* a banned token is never drawn when sampling either */
    p = plain(1.0f);
    s = make(&p, 3);
    assert_int_equal(eng_sampler_set_bias(s, 0, -INFINITY, &err), 0);
    for (int i = 0; i < 200; i++) assert_int_not_equal(eng_sampler_sample(s, l, NULL), 0);
    eng_sampler_free(s);
}

static void test_bad_parameters_are_rejected(void **state)
{
    (void)state;
    eng_sampler *s;
    wk_error err = {0};
    eng_sampler_params p = plain(1.0f);
    assert_int_equal(eng_sampler_new(&s, &p, 0, &err), WK_EINVAL);
    p.top_p = 1.5f;
    assert_int_equal(eng_sampler_new(&s, &p, 10, &err), WK_EINVAL);
    assert_non_null(strstr(err.msg, "top_p"));
    p = plain(NAN);
    assert_int_equal(eng_sampler_new(&s, &p, 10, &err), WK_EINVAL);
    p = plain(1.0f);
    p.repeat_penalty = 0.0f;
    assert_int_equal(eng_sampler_new(&s, &p, 10, &err), WK_EINVAL);
    p = plain(1.0f);
    p.min_p = -0.1f;
    assert_int_equal(eng_sampler_new(&s, &p, 10, &err), WK_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_is_argmax_with_ties_to_lowest_id),
        cmocka_unit_test(test_plain_greedy_means_no_bias_and_no_penalties),
        cmocka_unit_test(test_top_k_one_is_greedy),
        cmocka_unit_test(test_same_seed_gives_same_sequence),
        cmocka_unit_test(test_top_p_keeps_the_smallest_prefix_with_the_mass),
        cmocka_unit_test(test_min_p_drops_tokens_below_the_relative_floor),
        cmocka_unit_test(test_top_p_on_a_large_vocabulary_matches_a_full_sort),
        cmocka_unit_test(test_penalties_change_only_window_tokens),
        cmocka_unit_test(test_logit_bias_can_ban_tokens),
        cmocka_unit_test(test_bad_parameters_are_rejected),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
