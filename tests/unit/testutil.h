/* Shared helpers for cmocka unit tests. Include after cmocka.h. */
#ifndef WICK_TESTUTIL_H
#define WICK_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

/* ctest's skip code (tests.cmake sets SKIP_RETURN_CODE to it): a test binary
 * in which any test was skipped exits with it, so ctest shows "Skipped", never
 * "Passed", for work that did not run. */
#define WK_TEST_SKIP_CODE 77
void wk_test_note_skip(void);
int wk_test_exit_code(int failures);

/* cmocka's skip(), remembered for the exit code. */
#define WK_SKIP()                                                                      \
    do {                                                                               \
        wk_test_note_skip();                                                           \
        skip();                                                                        \
    } while (0)

/* cmocka_run_group_tests with the exit code above. WICK_TEST_FILTER runs only
 * the tests whose names match one of its comma-separated shell patterns, and
 * WICK_TEST_SKIP leaves out those matching one of its patterns (for slow
 * emulated runs: scripts/test-aarch64.sh). A filter that leaves no test, or
 * a pattern that matches no test, fails the run. */
#define WK_RUN_GROUP_TESTS(tests, setup, teardown)                                     \
    wk_test_run(#tests, tests, sizeof(tests) / sizeof((tests)[0]), setup, teardown)
int wk_test_run(const char *name, const struct CMUnitTest *tests, size_t n, CMFixtureFunction setup,
                CMFixtureFunction teardown);

/* Golden data folder (WICK_GOLDEN or ../shared/golden), or NULL if it is
 * missing. When CI=true a missing folder fails the calling test; elsewhere
 * the test is skipped with a message. Use: GOLDEN_OR_SKIP(dir); */
const char *golden_dir(void);
int golden_required(void);
#define GOLDEN_OR_SKIP(var)                                                            \
    const char *var = golden_dir();                                                    \
    do {                                                                               \
        if (!var) {                                                                    \
            if (golden_required()) fail_msg("golden data missing (CI requires it)");   \
            WK_SKIP();                                                                 \
        }                                                                              \
    } while (0)

/* Reads a whole file into a malloc'd buffer (NUL-terminated, size excludes
 * the NUL); NULL on error. Caller frees. */
void *read_whole_file(const char *path, size_t *size);

/* Joins dir + "/" + rel into a static thread-local buffer. */
const char *path_join(const char *dir, const char *rel);

/* Deterministic PRNG for random test inputs. */
uint32_t test_rand_u32(uint64_t *state);
float test_rand_normal(uint64_t *state);

#endif
