/* Prompt lookup: an open-addressing table from (the hash of an n-gram, n <= ENG_NGRAM_MAX)
 * to the last position it ended at, grown as the context grows; a lookup tries the
 * context's longest suffix first and checks the tokens (hashes may collide). */
#include <stdlib.h>
#include <string.h>

#include "engine/spec.h"

typedef struct ngram_slot {
    uint64_t key; /* 0: empty */
    int32_t end;  /* position of the n-gram's last token */
} ngram_slot;

struct eng_ngram {
    ngram_slot *slots;
    size_t cap, used; /* cap a power of two */
    int32_t indexed;  /* n-grams ending before this position are in the table */
};

/* Folds one more token (going backwards) into an n-gram's hash: the chain of n folds
 * is the key of the n-gram of length n (splitmix64's finalizer). */
static uint64_t fold(uint64_t h, int32_t tok)
{
    uint64_t z = h ^ ((uint64_t)(uint32_t)tok + 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return z ? z : 1;
}

int eng_ngram_new(eng_ngram **out, wk_error *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out) return wk_fail(err, WK_ENOMEM, "prompt lookup: out of memory");
    return 0;
}

void eng_ngram_free(eng_ngram *g)
{
    if (!g) return;
    free(g->slots);
    free(g);
}

void eng_ngram_reset(eng_ngram *g)
{
    if (g->slots) memset(g->slots, 0, g->cap * sizeof *g->slots);
    g->used = 0;
    g->indexed = 0;
}

static ngram_slot *find(const eng_ngram *g, uint64_t key)
{
    size_t i = (size_t)key & (g->cap - 1);
    while (g->slots[i].key && g->slots[i].key != key) i = (i + 1) & (g->cap - 1);
    return &g->slots[i];
}

static int grow(eng_ngram *g, wk_error *err)
{
    size_t cap = g->cap ? g->cap * 2 : 4096;
    ngram_slot *old = g->slots;
    size_t old_cap = g->cap;
    g->slots = calloc(cap, sizeof *g->slots);
    if (!g->slots) {
        g->slots = old;
        return wk_fail(err, WK_ENOMEM, "prompt lookup: out of memory for %zu entries", cap);
    }
    g->cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].key) *find(g, old[i].key) = old[i];
    free(old);
    return 0;
}

int eng_ngram_add(eng_ngram *g, const int32_t *ctx, int32_t n, wk_error *err)
{
    for (int32_t end = g->indexed; end < n - 1; end++) {
        if ((g->used + ENG_NGRAM_MAX) * 2 > g->cap) {
            int rc = grow(g, err);
            if (rc) return rc;
        }
        uint64_t h = 0;
        for (int32_t len = 1; len <= ENG_NGRAM_MAX && len <= end + 1; len++) {
            h = fold(h, ctx[end - len + 1]);
            ngram_slot *sl = find(g, h);
            if (!sl->key) {
                sl->key = h;
                g->used++;
            }
            sl->end = end;
        }
        g->indexed = end + 1;
    }
    return 0;
}

int32_t eng_ngram_propose(eng_ngram *g, const int32_t *ctx, int32_t n, int32_t k, int32_t *out, int32_t *match_len)
{
    *match_len = 0;
    if (n < 2 || k <= 0 || !g->cap) return 0;
    uint64_t key[ENG_NGRAM_MAX];
    int32_t max_len = n - 1 < ENG_NGRAM_MAX ? n - 1 : ENG_NGRAM_MAX;
    uint64_t h = 0;
    for (int32_t len = 1; len <= max_len; len++) key[len - 1] = h = fold(h, ctx[n - len]);
    for (int32_t len = max_len; len >= 1; len--) {
        const ngram_slot *sl = find(g, key[len - 1]);
        if (!sl->key) continue;
        const int32_t e = sl->end;
        if (e >= n - 1 || e - len + 1 < 0 ||
            memcmp(ctx + e - len + 1, ctx + n - len, sizeof(int32_t) * (size_t)len) != 0)
            continue; /* a collision, or not indexed up to here */
        /* the continuation repeats with period n-1-e: past the end of ctx it copies itself
         * (a loop in the output keeps being proposed whole) */
        for (int32_t m = 0; m < k; m++) out[m] = e + 1 + m < n ? ctx[e + 1 + m] : out[e + 1 + m - n];
        *match_len = len;
        return k;
    }
    return 0;
}
