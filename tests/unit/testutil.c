#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"

#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int g_skipped;

void wk_test_note_skip(void) { g_skipped = 1; }

int wk_test_exit_code(int failures)
{
    if (failures) return failures;
    if (g_skipped) fprintf(stderr, "some tests were skipped: reporting the skip code %d\n", WK_TEST_SKIP_CODE);
    return g_skipped ? WK_TEST_SKIP_CODE : 0;
}

/* Whether name matches one of the comma-separated patterns; counts the
 * patterns that matched something into hits[] (at most 16 patterns). */
static int matches_any(const char *patterns, const char *name, int *hits)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", patterns);
    int k = 0, any = 0;
    for (char *save = NULL, *p = strtok_r(buf, ",", &save); p && k < 16; p = strtok_r(NULL, ",", &save), k++)
        if (fnmatch(p, name, 0) == 0) {
            hits[k]++;
            any = 1;
        }
    return any;
}

/* A pattern of list that matched no test: the list names a test that is gone. */
static int check_hits(const char *var, const char *list, const int *hits)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", list);
    int k = 0;
    for (char *save = NULL, *p = strtok_r(buf, ",", &save); p && k < 16; p = strtok_r(NULL, ",", &save), k++)
        if (!hits[k]) {
            fprintf(stderr, "%s: pattern %s matches no test\n", var, p);
            return 1;
        }
    return 0;
}

int wk_test_run(const char *name, const struct CMUnitTest *tests, size_t n, CMFixtureFunction setup,
                CMFixtureFunction teardown)
{
    const char *only = getenv("WICK_TEST_FILTER"), *skip = getenv("WICK_TEST_SKIP");
    if (only && !only[0]) only = NULL;
    if (skip && !skip[0]) skip = NULL;
    if (!only && !skip) return wk_test_exit_code(_cmocka_run_group_tests(name, tests, n, setup, teardown));
    struct CMUnitTest *kept = malloc(sizeof *kept * (n ? n : 1));
    int only_hits[16] = {0}, skip_hits[16] = {0};
    size_t left = 0;
    for (size_t i = 0; i < n; i++) {
        const int in = !only || matches_any(only, tests[i].name, only_hits);
        const int out = skip && matches_any(skip, tests[i].name, skip_hits);
        if (in && !out) kept[left++] = tests[i];
        else if (in) printf("[ LEFT OUT ] %s (WICK_TEST_SKIP)\n", tests[i].name);
    }
    int bad = (only && check_hits("WICK_TEST_FILTER", only, only_hits)) ||
              (skip && check_hits("WICK_TEST_SKIP", skip, skip_hits));
    if (!bad && left == 0) {
        fprintf(stderr, "WICK_TEST_FILTER / WICK_TEST_SKIP leave none of the %zu tests\n", n);
        bad = 1;
    }
    int rc = bad ? 1 : wk_test_exit_code(_cmocka_run_group_tests(name, kept, left, setup, teardown));
    free(kept);
    return rc;
}

const char *golden_dir(void)
{
    static char buf[4096];
    const char *env = getenv("WICK_GOLDEN");
    const char *dir = env && *env ? env : "../shared/golden";
    struct stat st;
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/MANIFEST.json", dir);
    if (stat(probe, &st) != 0) {
        fprintf(stderr, "golden data not found at %s (set WICK_GOLDEN)\n", dir);
        return NULL;
    }
    snprintf(buf, sizeof buf, "%s", dir);
    return buf;
}

int golden_required(void)
{
    const char *ci = getenv("CI");
    return ci && (strcmp(ci, "true") == 0 || strcmp(ci, "1") == 0);
}

void *read_whole_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n < 0) {
        fclose(f);
        return NULL;
    }
    char *buf = malloc((size_t)n + 1);
    if (!buf) {
        fclose(f);
        return NULL;
    }
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    if (got != (size_t)n) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    if (size) *size = (size_t)n;
    return buf;
}

const char *path_join(const char *dir, const char *rel)
{
    static _Thread_local char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", dir, rel);
    return buf;
}

uint32_t test_rand_u32(uint64_t *state)
{
    /* splitmix64 */
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (uint32_t)((z ^ (z >> 31)) >> 32);
}

float test_rand_normal(uint64_t *state)
{
    double u1 = ((double)test_rand_u32(state) + 0.5) / 4294967296.0;
    double u2 = ((double)test_rand_u32(state) + 0.5) / 4294967296.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
