/* Long-context evaluation harness (src/eval/): needles placed where stated
 * (measured with a word-count "tokenizer"), scoring rules on hand-made
 * answers, variable-tracking chains, LongBench v2 loading / template /
 * answer extraction, and the paired-comparison math. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eval/eval_paired.h"
#include "eval/eval_text.h"
#include "util/argmax.h"
#include "testutil.h"

/* A stand-in tokenizer: one token per whitespace-separated word. Depths are
 * then easy to check by hand. */
static int count_words(void *user, const char *text, size_t len, int32_t *n, wk_error *err)
{
    (void)err;
    int *calls = user;
    if (calls) (*calls)++;
    int32_t c = 0;
    bool in = false;
    for (size_t i = 0; i < len; i++) {
        bool sp = text[i] == ' ' || text[i] == '\n' || text[i] == '\t';
        if (!sp && !in) c++;
        in = !sp;
    }
    *n = c;
    return 0;
}

static int32_t words_before(const char *text, size_t off)
{
    int32_t n = 0;
    count_words(NULL, text, off, &n, NULL);
    return n;
}

static void test_needles_sit_at_the_stated_token_depths(void **state)
{
    (void)state;
    const double depths[] = {0.015, 0.25, 0.5, 0.75, 0.985};
    ev_needle_spec spec = {2000, depths, 5, 15, 42, NULL, 0};
    ev_needle_doc d;
    wk_error err = {0};
    int calls = 0;
    assert_int_equal(ev_needle_build(&spec, count_words, &calls, &d, &err), 0);
    assert_int_equal(d.n_codes, 15);
    /* the document has about the asked length */
    assert_true(d.doc_tokens >= 2000 && d.doc_tokens < 2000 + 40);
    for (int i = 0; i < d.n_codes; i++) {
        const ev_needle_code *c = &d.codes[i];
        char sentence[64];
        snprintf(sentence, sizeof sentence, " One of the secret codes is %s.", c->code);
        /* the needle is in the text at the stated byte offset, once */
        assert_memory_equal(d.text + c->byte_offset, sentence, strlen(sentence));
        assert_ptr_equal(strstr(d.text, c->code), d.text + c->byte_offset + strlen(sentence) - strlen(c->code) - 1);
        /* the stated token offset is the real one, and near the requested depth
         * (a filler sentence is ~15 words; codes sharing a depth are adjacent) */
        assert_int_equal(c->token_offset, words_before(d.text, c->byte_offset));
        assert_true(fabs(c->depth_tokens - (double)c->token_offset / d.doc_tokens) < 1e-12);
        assert_true(fabs(c->depth_requested - depths[i % 5]) < 1e-12);
        assert_true(fabs(c->token_offset - c->depth_requested * d.doc_tokens) < 3 * 7 + 20);
        /* code format ABC-1234, all distinct */
        assert_int_equal(strlen(c->code), 8);
        assert_int_equal(c->code[3], '-');
        for (int k = 0; k < i; k++) assert_string_not_equal(d.codes[k].code, c->code);
    }
    char *prompt = ev_needle_prompt(&d);
    assert_non_null(strstr(prompt, d.text));
    assert_non_null(strstr(prompt, "contains 15 secret codes"));
    free(prompt);
    ev_needle_doc_free(&d);
}

static void test_needle_documents_follow_the_seed(void **state)
{
    (void)state;
    const double depths[] = {0.5};
    ev_needle_spec a = {300, depths, 1, 3, 7, NULL, 0}, b = a;
    ev_needle_doc da, db, dc;
    wk_error err = {0};
    assert_int_equal(ev_needle_build(&a, count_words, NULL, &da, &err), 0);
    assert_int_equal(ev_needle_build(&b, count_words, NULL, &db, &err), 0);
    assert_string_equal(da.text, db.text);
    b.seed = 8;
    assert_int_equal(ev_needle_build(&b, count_words, NULL, &dc, &err), 0);
    assert_string_not_equal(da.codes[0].code, dc.codes[0].code);
    ev_needle_doc_free(&da);
    ev_needle_doc_free(&db);
    ev_needle_doc_free(&dc);
}

static void test_needle_uses_the_users_filler(void **state)
{
    (void)state;
    const char *filler = "Alpha beta gamma. Delta epsilon zeta! Eta theta iota? Kappa lambda mu\n";
    const double depths[] = {0.0, 1.0};
    ev_needle_spec spec = {200, depths, 2, 2, 1, filler, strlen(filler)};
    ev_needle_doc d;
    wk_error err = {0};
    assert_int_equal(ev_needle_build(&spec, count_words, NULL, &d, &err), 0);
    assert_non_null(strstr(d.text, "Delta epsilon zeta!"));
    assert_null(strstr(d.text, "harbour")); /* nothing generated */
    assert_int_equal(d.codes[0].token_offset, 0);
    assert_true(d.codes[1].token_offset > d.doc_tokens - 20);
    ev_needle_doc_free(&d);
}

static void test_needle_rejects_a_bad_spec(void **state)
{
    (void)state;
    const double bad[] = {1.5};
    ev_needle_spec spec = {500, bad, 1, 3, 1, NULL, 0};
    ev_needle_doc d;
    wk_error err = {0};
    assert_int_equal(ev_needle_build(&spec, count_words, NULL, &d, &err), WK_EINVAL);
    assert_non_null(strstr(err.msg, "depth"));
    const double ok[] = {0.5};
    ev_needle_spec none = {500, ok, 1, 0, 1, NULL, 0};
    assert_int_equal(ev_needle_build(&none, count_words, NULL, &d, &err), WK_EINVAL);
}

static void test_needle_scores_each_code_on_hand_made_answers(void **state)
{
    (void)state;
    ev_needle_code codes[3] = {{"KQV-4821", 0, 0, 0, 0}, {"ABC-1234", 0, 0, 0, 0}, {"ZZY-9000", 0, 0, 0, 0}};
    ev_needle_doc d = {NULL, 0, 100, codes, 3};
    bool found[3];
    assert_int_equal(ev_needle_score(&d, "The codes are:\nKQV-4821\nZZY-9000\n", found), 2);
    assert_true(found[0] && !found[1] && found[2]);
    assert_int_equal(ev_needle_score(&d, "kqv-4821 ABC-123 ZZY9000", found), 0); /* exact text only */
    assert_int_equal(ev_needle_score(&d, "ABC-1234, KQV-4821, ZZY-9000.", NULL), 3);
    assert_int_equal(ev_needle_score(&d, NULL, found), 0);
}

static void test_vt_chain_is_in_order_and_scored_like_ruler(void **state)
{
    (void)state;
    ev_vt_spec spec = {1500, 3, 4, 11, NULL, 0};
    ev_vt_doc d;
    wk_error err = {0};
    assert_int_equal(ev_vt_build(&spec, count_words, NULL, &d, &err), 0);
    assert_int_equal(d.n_expected, 5);
    char want[64];
    snprintf(want, sizeof want, "VAR %s = %s.", d.expected[0], d.value);
    const char *prev = strstr(d.text, want);
    assert_non_null(prev);
    for (int h = 1; h < 5; h++) {
        snprintf(want, sizeof want, "VAR %s = VAR %s.", d.expected[h], d.expected[h - 1]);
        const char *p = strstr(d.text, want);
        assert_non_null(p);
        assert_true(p > prev); /* each hop after the one it copies */
        assert_true(d.token_offsets[h] > d.token_offsets[h - 1]);
        assert_int_equal(d.token_offsets[h], words_before(d.text, (size_t)(p + 1 - d.text) - 1));
        prev = p;
    }
    /* three chains: three "VAR X = <number>." statements with distinct values */
    int values = 0;
    for (const char *p = strstr(d.text, "VAR "); p; p = strstr(p + 1, "VAR "))
        if (p[10] == '=' && p[12] >= '0' && p[12] <= '9') values++;
    assert_int_equal(values, 3);
    /* RULER string_match_all, case-insensitive */
    char ans[256];
    snprintf(ans, sizeof ans, "%s, %s, %s", d.expected[0], d.expected[1], d.expected[4]);
    assert_true(fabs(ev_vt_score(&d, ans) - 3.0 / 5.0) < 1e-12);
    for (char *p = ans; *p; p++)
        if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
    assert_true(fabs(ev_vt_score(&d, ans) - 3.0 / 5.0) < 1e-12);
    assert_true(ev_vt_score(&d, "none of them") == 0.0);
    char *prompt = ev_vt_prompt(&d);
    snprintf(want, sizeof want, "assigned the value %s in the text above", d.value);
    assert_non_null(strstr(prompt, want));
    free(prompt);
    ev_vt_doc_free(&d);
}

static void test_longbench_letters_are_extracted_as_published(void **state)
{
    (void)state;
    assert_int_equal(ev_lb_extract("The correct answer is (B)"), 'B');
    assert_int_equal(ev_lb_extract("**The correct answer is (C)**."), 'C');
    assert_int_equal(ev_lb_extract("I think... The correct answer is D because"), 'D');
    /* "(X)" wins over a bare letter anywhere */
    assert_int_equal(ev_lb_extract("The correct answer is A? No: The correct answer is (C)"), 'C');
    assert_int_equal(ev_lb_extract("The correct answer is (E)"), 0);
    assert_int_equal(ev_lb_extract("the correct answer is (A)"), 0); /* case matters, as in pred.py */
    assert_int_equal(ev_lb_extract("B"), 0);
    assert_int_equal(ev_lb_extract(NULL), 0);
}

static void test_longbench_file_loads_and_renders_the_template(void **state)
{
    (void)state;
    char path[] = "/tmp/wick_lb_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *json = "[{\"_id\": \"x1\", \"domain\": \"Single-Document QA\", \"difficulty\": \"easy\", \"length\": "
                       "\"short\", \"question\": \"Who?\", \"choice_A\": \"a\", \"choice_B\": \"b\", \"choice_C\": \"c\", "
                       "\"choice_D\": \"d\", \"answer\": \"C\", \"context\": \"Some text.\"}]";
    assert_int_equal(write(fd, json, strlen(json)), (ssize_t)strlen(json));
    close(fd);
    ev_lb_item *items = NULL;
    size_t n = 0;
    wk_error err = {0};
    assert_int_equal(ev_lb_load(path, &items, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_int_equal(items[0].answer, 'C');
    char *p = ev_lb_prompt(&items[0], NULL, false);
    assert_string_equal(p, "Please read the following text and answer the question below.\n\n<text>\nSome text.\n</text>\n\n"
                           "What is the correct answer to this question: Who?\nChoices:\n(A) a\n(B) b\n(C) c\n(D) d\n\n"
                           "Format your response as follows: \"The correct answer is (insert answer here)\".");
    free(p);
    p = ev_lb_prompt(&items[0], "cut", true);
    assert_non_null(strstr(p, "<text>\ncut\n</text>"));
    assert_non_null(strstr(p, "without any explanation"));
    free(p);
    ev_lb_free(items, n);
    /* a bad answer letter is named */
    FILE *f = fopen(path, "w");
    fputs("[{\"_id\": \"x\", \"question\": \"q\", \"choice_A\": \"a\", \"choice_B\": \"b\", \"choice_C\": \"c\", "
          "\"choice_D\": \"d\", \"answer\": \"E\", \"context\": \"t\"}]",
          f);
    fclose(f);
    assert_int_equal(ev_lb_load(path, &items, &n, &err), WK_EFORMAT);
    assert_non_null(strstr(err.msg, "item 0"));
    unlink(path);
}

static void test_kl_is_zero_for_equal_and_positive_for_different_distributions(void **state)
{
    (void)state;
    float p[4] = {1.0f, 2.0f, 3.0f, 4.0f}, q[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    assert_true(ev_kl_logits(p, q, 4) == 0.0);
    float shifted[4] = {11.0f, 12.0f, 13.0f, 14.0f}; /* same softmax */
    assert_true(ev_kl_logits(p, shifted, 4) < 1e-12);
    float r[4] = {4.0f, 3.0f, 2.0f, 1.0f};
    /* by hand: P = softmax(1,2,3,4), Q = reversed */
    double z = exp(1) + exp(2) + exp(3) + exp(4), want = 0.0;
    for (int i = 0; i < 4; i++) want += exp(p[i]) / z * ((p[i] - log(z)) - (r[i] - log(z)));
    assert_true(fabs(ev_kl_logits(p, r, 4) - want) < 1e-9);
    assert_int_equal(wk_argmax_f32(p, 4), 3);
    assert_int_equal(wk_argmax_f32(r, 4), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_needles_sit_at_the_stated_token_depths),
        cmocka_unit_test(test_needle_documents_follow_the_seed),
        cmocka_unit_test(test_needle_uses_the_users_filler),
        cmocka_unit_test(test_needle_rejects_a_bad_spec),
        cmocka_unit_test(test_needle_scores_each_code_on_hand_made_answers),
        cmocka_unit_test(test_vt_chain_is_in_order_and_scored_like_ruler),
        cmocka_unit_test(test_longbench_letters_are_extracted_as_published),
        cmocka_unit_test(test_longbench_file_loads_and_renders_the_template),
        cmocka_unit_test(test_kl_is_zero_for_equal_and_positive_for_different_distributions),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
