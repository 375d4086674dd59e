/* libFuzzer harness for the grammar compilers and matcher: the first byte
 * picks what the rest is —
 *   0  a JSON schema (response_format json_schema), reasoning per byte 1
 *   1  a JSON schema as a tool's parameters, or a tools array: Hermes format
 *   2  the same in the Qwen XML format
 *   3  GBNF text
 * — and a compiled grammar is then driven for a few steps over a small
 * vocabulary (bytes, some multi-byte pieces, special tokens): masks, then a
 * token picked from the mask (it must be accepted) and one outside it (it
 * must be refused, leaving the state as it was). Anything may fail to
 * compile, with a one-line message; nothing may crash, hang, leak, or let
 * the mask and acceptance disagree. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/grammar.h"
#include "engine/grammar_tools.h"
#include "engine/json_schema.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

static gram_vocab *g_vocab;
static int32_t g_n;

/* SentencePiece-style vocabulary: <unk> <s> </s>, the 256 byte tokens,
 * pieces that JSON and tool calls use, and token literals. */
static void make_vocab(void)
{
    static const char *const pieces[] = {"▁", "{\"", "\":", "\",", "\"}", "true", "false", "null", "▁\"", "\n",
                                         "  ", "ab", "é", "中文", "0.5", "-1", "e+", "\\u00", "\\\"", "</",
                                         "parameter>", "function=", "tool_call>", "\n</", "]}", "[{", "\\n"};
    static const char *const specials[] = {"<tool_call>", "</tool_call>", "<think>", "</think>", "<|im_end|>"};
    enum { N_BYTES = 256 };
    size_t n_p = sizeof pieces / sizeof pieces[0], n_s = sizeof specials / sizeof specials[0];
    size_t n = 3 + N_BYTES + n_p + n_s;
    const char **tokens = calloc(n, sizeof *tokens);
    int32_t *types = calloc(n, sizeof *types);
    char (*bytes)[8] = calloc(N_BYTES, sizeof *bytes);
    size_t k = 0;
    tokens[k] = "<unk>", types[k++] = TOK_TYPE_UNKNOWN;
    tokens[k] = "<s>", types[k++] = TOK_TYPE_CONTROL;
    tokens[k] = "</s>", types[k++] = TOK_TYPE_CONTROL;
    for (int b = 0; b < N_BYTES; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        tokens[k] = bytes[b], types[k++] = TOK_TYPE_BYTE;
    }
    for (size_t i = 0; i < n_p; i++) tokens[k] = pieces[i], types[k++] = TOK_TYPE_NORMAL;
    for (size_t i = 0; i < n_s; i++) {
        tokens[k] = specials[i];
        types[k++] = i == n_s - 1 ? TOK_TYPE_CONTROL : TOK_TYPE_USER_DEFINED;
    }
    char path[] = "/tmp/fuzz-json-schema-vocab-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) __builtin_trap();
    close(fd);
    wk_error err = {0};
    gguf_writer *w;
    if (gguf_writer_new(&w, path, 0, &err)) __builtin_trap();
    gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, n);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_T_INT32, types, n);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_writer_set_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)(n - 1));
    if (gguf_writer_begin_data(w, &err) || gguf_writer_finish(w, &err)) __builtin_trap();
    gguf_file *f;
    tok_vocab *v;
    if (gguf_open(&f, path, &err) || tok_load_from_gguf(&v, f, &err)) __builtin_trap();
    gguf_close(f);
    unlink(path);
    if (gram_vocab_new(&g_vocab, v, &err)) __builtin_trap();
    g_n = tok_n_vocab(v);
    tok_free(v);
    free(tokens);
    free(types);
    free(bytes);
}

static void check_message(const wk_error *err)
{
    if (err->msg[0] == '\0' || strchr(err->msg, '\n')) __builtin_trap();
}

static bool allowed(const uint32_t *mask, int32_t t) { return mask[t >> 5] >> (t & 31) & 1; }

/* Up to 48 steps: the k-th allowed token (k from the input) is accepted,
 * the first refused one is refused; a clone on the way must agree. */
static void drive(const gram_grammar *g, const uint8_t *data, size_t size)
{
    gram_state *s;
    wk_error err = {0};
    if (gram_state_new(&s, g, g_vocab, &err)) {
        check_message(&err);
        return;
    }
    size_t words = gram_mask_words(g_vocab);
    uint32_t *mask = malloc(words * sizeof *mask), *again = malloc(words * sizeof *again);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 1099511628211ull;
    for (int step = 0; step < 48; step++) {
        if (gram_mask(s, mask, &err)) {
            check_message(&err);
            break;
        }
        int32_t n_ok = 0, refused = -1;
        for (int32_t t = 0; t < g_n; t++) {
            if (allowed(mask, t)) n_ok++;
            else if (refused < 0) refused = t;
        }
        if (n_ok == 0) {
            if (!gram_is_done(s)) __builtin_trap(); /* gram_mask fails rather than return nothing */
            break;
        }
        if (refused >= 0 && gram_accept(s, refused, &err) != WK_EINVAL) __builtin_trap();
        h = h * 6364136223846793005ull + 1442695040888963407ull;
        int32_t k = (int32_t)((h >> 33) % (uint64_t)n_ok), pick = -1;
        for (int32_t t = 0; t < g_n && pick < 0; t++)
            if (allowed(mask, t) && k-- == 0) pick = t;
        if (step % 7 == 3) { /* a clone sees the same mask */
            gram_state *c;
            if (gram_state_clone(&c, s, &err)) __builtin_trap();
            if (gram_mask(c, again, &err) == 0 && memcmp(mask, again, words * sizeof *mask)) __builtin_trap();
            gram_state_free(c);
        }
        int rc = gram_accept(s, pick, &err);
        if (rc == WK_EINVAL) __builtin_trap(); /* the mask allowed it */
        if (rc) {
            check_message(&err);
            break;
        }
        if (gram_is_done(s)) break;
    }
    free(mask);
    free(again);
    gram_state_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_vocab) make_vocab();
    if (size < 2) return 0;
    int mode = data[0] % 4;
    enum gram_reasoning reasoning = (enum gram_reasoning)(data[1] % 3);
    const char *text = (const char *)data + 2;
    size_t len = size - 2;
    gram_grammar *g = NULL;
    wk_error err = {0};
    int rc;
    if (mode == 3) {
        rc = gram_compile_gbnf(&g, text, len, &err);
    } else {
        json_t *v = json_loadb(text, len, JSON_DECODE_ANY, NULL);
        if (!v) return 0;
        if (mode == 0) {
            rc = gram_from_json_schema(&g, v, reasoning, &err);
        } else {
            json_t *tools = json_is_array(v) ? json_incref(v)
                                             : json_pack("[{s:s, s:{s:s, s:O}}]", "type", "function", "function",
                                                         "name", "f", "parameters", v);
            rc = tools ? gram_for_tools(&g, tools, mode == 1 ? CHAT_TOOLS_HERMES : CHAT_TOOLS_QWEN_XML,
                                        data[1] & 4 ? "f" : NULL, data[1] & 8, reasoning, &err)
                       : WK_ENOMEM;
            json_decref(tools);
        }
        json_decref(v);
    }
    if (rc) {
        if (g) __builtin_trap();
        check_message(&err);
        return 0;
    }
    drive(g, data, size);
    gram_grammar_free(g);
    return 0;
}
