/* Prefix index (src/cache/prefix_index.c): token-granular matching,
 * replacement, removal, and a randomized comparison with brute force. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cache/prefix_index.h"
#include "testutil.h"

static int32_t match_of(const pidx_hit *h, int n, int64_t key)
{
    for (int i = 0; i < n; i++)
        if (h[i].key == key) return h[i].match;
    return -1;
}

static void test_match_is_token_granular(void **state)
{
    (void)state;
    pidx *ix;
    assert_int_equal(pidx_new(&ix, NULL), 0);
    int32_t a[100], b[80], q[74];
    for (int i = 0; i < 100; i++) a[i] = i + 1;
    for (int i = 0; i < 80; i++) b[i] = i < 50 ? i + 1 : 999;
    for (int i = 0; i < 73; i++) q[i] = i + 1;
    q[73] = 5;
    assert_int_equal(pidx_put(ix, 1, a, 100, NULL), 0);
    assert_int_equal(pidx_put(ix, 2, b, 80, NULL), 0);
    pidx_hit h[4];
    int n = pidx_match(ix, q, 74, h, 4);
    assert_int_equal(n, 2);
    assert_int_equal(h[0].key, 1); /* longest first */
    assert_int_equal(h[0].match, 73);
    assert_int_equal(h[0].len, 100);
    assert_int_equal(h[1].key, 2);
    assert_int_equal(h[1].match, 50);
    /* the shared 50 tokens are stored once */
    assert_int_equal(pidx_stored_tokens(ix), 100 + 30);
    pidx_free(ix);
}

static void test_query_ending_inside_an_edge_matches_its_length(void **state)
{
    (void)state;
    pidx *ix;
    assert_int_equal(pidx_new(&ix, NULL), 0);
    int32_t a[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    assert_int_equal(pidx_put(ix, 7, a, 10, NULL), 0);
    pidx_hit h[2];
    assert_int_equal(pidx_match(ix, a, 4, h, 2), 1);
    assert_int_equal(h[0].match, 4);
    int32_t other[3] = {42, 1, 2};
    assert_int_equal(pidx_match(ix, other, 3, h, 2), 1);
    assert_int_equal(h[0].match, 0);
    assert_int_equal(pidx_match(ix, a, 0, h, 2), 1);
    assert_int_equal(h[0].match, 0);
    pidx_free(ix);
}

static void test_put_replaces_and_remove_prunes(void **state)
{
    (void)state;
    pidx *ix;
    assert_int_equal(pidx_new(&ix, NULL), 0);
    int32_t a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 2, 3, 9, 9, 9};
    assert_int_equal(pidx_put(ix, 1, a, 6, NULL), 0);
    assert_int_equal(pidx_put(ix, 2, a, 4, NULL), 0); /* ends inside entry 1's path */
    assert_int_equal(pidx_put(ix, 1, b, 6, NULL), 0); /* replace */
    assert_int_equal(pidx_count(ix), 2);
    pidx_hit h[4];
    int n = pidx_match(ix, a, 6, h, 4);
    assert_int_equal(n, 2);
    assert_int_equal(match_of(h, n, 1), 3);
    assert_int_equal(match_of(h, n, 2), 4);
    pidx_remove(ix, 2);
    pidx_remove(ix, 2); /* absent: no-op */
    assert_int_equal(pidx_count(ix), 1);
    n = pidx_match(ix, a, 6, h, 4);
    assert_int_equal(n, 1);
    assert_int_equal(h[0].match, 3);
    assert_int_equal(pidx_stored_tokens(ix), 6); /* compressed back into one edge */
    pidx_remove(ix, 1);
    assert_int_equal(pidx_count(ix), 0);
    assert_int_equal(pidx_stored_tokens(ix), 0);
    assert_int_equal(pidx_match(ix, a, 6, h, 4), 0);
    pidx_free(ix);
}

/* Random sequences over a 3-token alphabet share long prefixes often. */
static void test_random_operations_agree_with_brute_force(void **state)
{
    (void)state;
    enum { KEYS = 12, MAXLEN = 40 };
    int32_t seqs[KEYS][MAXLEN];
    int lens[KEYS];
    bool live[KEYS] = {0};
    uint64_t rng = 0x5eed;
    pidx *ix;
    assert_int_equal(pidx_new(&ix, NULL), 0);
    for (int step = 0; step < 3000; step++) {
        int k = (int)(test_rand_u32(&rng) % KEYS);
        uint32_t op = test_rand_u32(&rng) % 4;
        if (op == 0) {
            pidx_remove(ix, k);
            live[k] = false;
        } else if (op == 1) {
            /* derive from another entry: shared prefix, new tail */
            int from = (int)(test_rand_u32(&rng) % KEYS);
            int keep = live[from] ? (int)(test_rand_u32(&rng) % (lens[from] + 1)) : 0;
            int len = keep + (int)(test_rand_u32(&rng) % (MAXLEN - keep + 1));
            int32_t tmp[MAXLEN];
            memcpy(tmp, seqs[from], sizeof(int32_t) * (size_t)keep);
            for (int i = keep; i < len; i++) tmp[i] = (int32_t)(test_rand_u32(&rng) % 3);
            memcpy(seqs[k], tmp, sizeof tmp);
            lens[k] = len;
            assert_int_equal(pidx_put(ix, k, seqs[k], len, NULL), 0);
            live[k] = true;
        } else {
            int32_t q[MAXLEN];
            int qn = (int)(test_rand_u32(&rng) % (MAXLEN + 1));
            for (int i = 0; i < qn; i++) q[i] = (int32_t)(test_rand_u32(&rng) % 3);
            pidx_hit h[KEYS];
            int n = pidx_match(ix, q, qn, h, KEYS);
            int expect_n = 0;
            for (int e = 0; e < KEYS; e++) {
                if (!live[e]) continue;
                expect_n++;
                int m = 0;
                while (m < qn && m < lens[e] && q[m] == seqs[e][m]) m++;
                assert_int_equal(match_of(h, n, e), m);
            }
            assert_int_equal(n, expect_n);
            for (int i = 1; i < n; i++) assert_true(h[i - 1].match >= h[i].match);
        }
    }
    pidx_free(ix);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_match_is_token_granular),
        cmocka_unit_test(test_query_ending_inside_an_edge_matches_its_length),
        cmocka_unit_test(test_put_replaces_and_remove_prunes),
        cmocka_unit_test(test_random_operations_agree_with_brute_force),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
