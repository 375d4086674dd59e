/* Helpers shared by test_grammar.c and test_json_schema.c (static, header
 * only: each unit test is one executable). Include after cmocka.h. */
#ifndef WICK_TEST_GRAMMAR_UTIL_H
#define WICK_TEST_GRAMMAR_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/grammar.h"
#include "gguf/gguf.h"
#include "model/synth.h"
#include "testutil.h"
#include "tokenizer/tokenizer.h"

__attribute__((unused)) static tok_vocab *gt_vocab_from_gguf(const char *path)
{
    gguf_file *f;
    wk_error err = {0};
    if (gguf_open(&f, path, &err)) fail_msg("open %s: %s", path, err.msg);
    tok_vocab *v;
    if (tok_load_from_gguf(&v, f, &err)) fail_msg("vocab %s: %s", path, err.msg);
    gguf_close(f);
    return v;
}

/* Golden tokenizer/ggml-vocab-NAME.gguf.gz, decompressed with gzip. */
__attribute__((unused)) static tok_vocab *gt_golden_vocab_gz(const char *golden, const char *name)
{
    char tmp[] = "/tmp/wick-test-gram-vocab-XXXXXX";
    int fd = mkstemp(tmp);
    assert_true(fd >= 0);
    close(fd);
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "gzip -dc '%s/tokenizer/ggml-vocab-%s.gguf.gz' > '%s'", golden, name, tmp);
    if (system(cmd) != 0) fail_msg("gzip -dc failed for %s", name);
    tok_vocab *v = gt_vocab_from_gguf(tmp);
    unlink(tmp);
    return v;
}

/* The byte-level BPE vocabulary of a synthetic model (Qwen special tokens:
 * <|im_end|> end of generation, <tool_call> / <think> user-defined) of
 * n_vocab tokens; 151936 gives the Qwen3 ids. */
__attribute__((unused)) static tok_vocab *gt_synth_vocab(uint32_t n_vocab)
{
    synth_options o;
    wk_error err = {0};
    assert_int_equal(synth_options_init(&o, "tiny", &err), 0);
    o.dims.n_vocab = n_vocab;
    o.dims.n_layer = 1;
    o.n_threads = 1;
    char tmp[] = "/tmp/wick-test-gram-synth-XXXXXX";
    int fd = mkstemp(tmp);
    assert_true(fd >= 0);
    close(fd);
    if (synth_write(&o, tmp, NULL, NULL, &err)) fail_msg("synth_write: %s", err.msg);
    tok_vocab *v = gt_vocab_from_gguf(tmp);
    unlink(tmp);
    return v;
}

static bool gt_bit(const uint32_t *mask, int32_t id) { return mask[id >> 5] >> (id & 31) & 1; }

/* The mask by definition: token t is allowed iff a clone accepts it. */
static void gt_mask_reference(gram_state *s, int32_t n_tokens, uint32_t *mask)
{
    memset(mask, 0, ((size_t)n_tokens + 31) / 32 * sizeof *mask);
    for (int32_t t = 0; t < n_tokens; t++) {
        gram_state *c;
        wk_error err = {0};
        assert_int_equal(gram_state_clone(&c, s, &err), 0);
        if (gram_accept(c, t, &err) == 0) mask[t >> 5] |= 1u << (t & 31);
        gram_state_free(c);
    }
}

/* A random allowed token (uniform over the mask), or -1 if none. */
static int32_t gt_pick(const uint32_t *mask, int32_t n_tokens, uint64_t *rng)
{
    int32_t count = 0;
    for (int32_t t = 0; t < n_tokens; t++) count += gt_bit(mask, t);
    if (!count) return -1;
    int32_t k = (int32_t)(test_rand_u32(rng) % (uint32_t)count);
    for (int32_t t = 0; t < n_tokens; t++)
        if (gt_bit(mask, t) && k-- == 0) return t;
    return -1;
}

/* Walks `steps` random allowed tokens from a fresh state, checking at each
 * step that the mask equals the reference. Returns the number of steps
 * taken (fewer when the grammar is done). */
__attribute__((unused)) static int gt_random_walk_checks_masks(const gram_grammar *g, const gram_vocab *gv, const tok_vocab *v, int steps,
                                       uint64_t seed)
{
    int32_t n = tok_n_vocab(v);
    size_t words = ((size_t)n + 31) / 32;
    uint32_t *mask = malloc(words * 4), *ref = malloc(words * 4);
    gram_state *s;
    wk_error err = {0};
    if (gram_state_new(&s, g, gv, &err)) fail_msg("state: %s", err.msg);
    uint64_t rng = seed;
    int k = 0;
    for (; k < steps; k++) {
        if (gram_mask(s, mask, &err)) fail_msg("mask: %s", err.msg);
        gt_mask_reference(s, n, ref);
        for (size_t w = 0; w < words; w++) {
            if (mask[w] != ref[w]) {
                int32_t t = (int32_t)(w * 32 + (size_t)__builtin_ctz(mask[w] ^ ref[w]));
                size_t len;
                const char *txt = tok_token_text(v, t, &len);
                fail_msg("step %d: mask bit of token %d (%.*s) is %d, reference %d", k, t, (int)len, txt,
                         gt_bit(mask, t), gt_bit(ref, t));
            }
        }
        int32_t t = gt_pick(mask, n, &rng);
        if (t < 0 || gram_is_done(s)) break;
        if (gram_accept(s, t, &err)) fail_msg("accept %d: %s", t, err.msg);
        if (gram_is_done(s)) break;
    }
    gram_state_free(s);
    free(mask);
    free(ref);
    return k;
}

#endif
