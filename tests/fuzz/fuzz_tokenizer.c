/* libFuzzer harness for the tokenizer: text -> ids -> text with real
 * vocabularies (a golden model's SentencePiece vocab and golden llama.cpp
 * vocab files, BPE and SPM), listed in WICK_FUZZ_VOCABS (colon-separated GGUF
 * paths; tests/fuzz/run.sh sets it).
 * Input: byte 0 picks the vocab (low bits) and the mode (special-token
 * matching, BOS/EOS), the rest is the text. Checked on every input:
 *   - encoding succeeds and every id is inside the vocabulary;
 *   - decoding succeeds and is valid UTF-8;
 *   - the streaming decoder fed one id at a time gives the same text;
 *   - byte-level BPE round-trips valid UTF-8 exactly (plain text mode, no
 *     BOS/EOS): every byte has a token, and nothing is normalized.
 * Never a crash, hang, leak or sanitizer report. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#define MAX_VOCABS 8

static tok_vocab *g_vocab[MAX_VOCABS];
static int g_n_vocab;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *list = getenv("WICK_FUZZ_VOCABS");
    if (!list || !*list) {
        fprintf(stderr, "fuzz_tokenizer: set WICK_FUZZ_VOCABS to GGUF files with a vocabulary (a:b:c)\n");
        exit(2);
    }
    char *copy = strdup(list), *save = NULL;
    for (char *p = strtok_r(copy, ":", &save); p && g_n_vocab < MAX_VOCABS; p = strtok_r(NULL, ":", &save)) {
        gguf_file *f = NULL;
        wk_error err = {0};
        if (gguf_open(&f, p, &err) || tok_load_from_gguf(&g_vocab[g_n_vocab], f, &err)) {
            fprintf(stderr, "fuzz_tokenizer: %s\n", err.msg);
            exit(2);
        }
        gguf_close(f);
        g_n_vocab++;
    }
    free(copy);
    return 0;
}

static bool valid_utf8(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || i + len > n) return false;
        uint32_t cp = len == 1 ? c : c & (0x7f >> len);
        for (size_t k = 1; k < len; k++) {
            if ((p[i + k] & 0xc0) != 0x80) return false;
            cp = cp << 6 | (p[i + k] & 0x3f);
        }
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
        i += len;
    }
    return true;
}

/* The streaming decoder's output for ids, concatenated (malloc'd). */
static char *stream_decode(const tok_vocab *v, const int32_t *ids, size_t n, unsigned flags, size_t *len)
{
    tok_decoder *d = tok_decoder_new(v, flags);
    if (!d) __builtin_trap();
    size_t cap = 64, used = 0;
    char *out = malloc(cap);
    for (size_t i = 0; i <= n; i++) {
        const char *t;
        size_t tl;
        if (i < n) {
            if (tok_decoder_feed(d, ids[i], &t, &tl)) __builtin_trap();
        } else {
            tok_decoder_flush(d, &t, &tl);
        }
        if (!valid_utf8(t, tl)) __builtin_trap();
        if (used + tl + 1 > cap) {
            while (used + tl + 1 > cap) cap *= 2;
            out = realloc(out, cap);
        }
        memcpy(out + used, t, tl);
        used += tl;
    }
    tok_decoder_free(d);
    *len = used;
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const tok_vocab *v = g_vocab[(data[0] & 7) % g_n_vocab];
    const int special = (data[0] >> 3) % 3; /* enum tok_special_mode */
    const bool add_special = data[0] & 0x20;
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;

    int32_t *ids = NULL;
    size_t n = 0;
    wk_error err = {0};
    if (tok_encode(v, text, len, add_special, special, &ids, &n, &err)) __builtin_trap();
    const int32_t n_vocab = tok_n_vocab(v);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab) __builtin_trap();

    const unsigned flags = data[0] & 0x40 ? TOK_DECODE_SPECIAL : 0;
    char *dec = NULL;
    size_t dec_len = 0;
    if (tok_decode(v, ids, n, flags, &dec, &dec_len, &err)) __builtin_trap();
    if (!valid_utf8(dec, dec_len) || dec[dec_len] != '\0') __builtin_trap();

    size_t str_len = 0;
    char *str = stream_decode(v, ids, n, flags, &str_len);
    if (str_len != dec_len || memcmp(str, dec, dec_len)) __builtin_trap();

    if (tok_model_kind(v) == TOK_MODEL_BPE && special == TOK_SPECIAL_NONE && !add_special && valid_utf8(text, len) &&
        (dec_len != len || memcmp(dec, text, len)))
        __builtin_trap();
    free(str);
    free(dec);
    free(ids);
    return 0;
}
