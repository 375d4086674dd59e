/* Shared helpers for cmocka unit tests. Include after cmocka.h. */
#ifndef WICK_TESTUTIL_H
#define WICK_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

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
            skip();                                                                    \
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
