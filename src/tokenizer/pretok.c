/* Pre-tokenizers: the regex list of each tokenizer.ggml.pre value (spec §4.2)
 * compiled with PCRE2 (UTF, JIT), applied in sequence (spec §4 step 1).
 *
 * The HF patterns are rewritten in two ways so that PCRE2 gives llama.cpp's
 * pieces: `\s` becomes the Unicode White_Space set (llama.cpp's whitespace
 * table; PCRE2's own `\s` misses U+0085), and the case-insensitive
 * contractions `(?i:'s|…)` become explicit ASCII alternatives `'[sS]|…`, as
 * llama.cpp rewrites them (PCRE2's Unicode caseless matching would also
 * accept e.g. U+017F for s). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

#define MAX_EXPRS 8

struct tok_pretok {
    pcre2_code *re[MAX_EXPRS];
    size_t n;
};

/* Unicode White_Space */
#define WS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define S_ "[" WS "]"        /* \s */
#define NOT_S "[^" WS "]"    /* \S */

#define CONTRACTIONS_CS "'s|'t|'re|'ve|'m|'ll|'d"
#define CONTRACTIONS_CI "'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]"

/* GPT-2 (G in spec §4.2) */
#define GPT2_RE                                                                                    \
    CONTRACTIONS_CS "| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|" S_ "+(?!" NOT_S ")"

#define LLAMA3_RE                                                                                  \
    CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|" S_ \
    "*[\\r\\n]+|" S_ "+(?!" NOT_S ")|" S_ "+"

#define QWEN2_RE                                                                                   \
    CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|" S_     \
    "*[\\r\\n]+|" S_ "+(?!" NOT_S ")|" S_ "+"

#define QWEN35_RE                                                                                  \
    CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^" WS                          \
    "\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|" S_ "*[\\r\\n]+|" S_ "+(?!" NOT_S ")|" S_ "+"

#define CJK_RUN "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"

/* deepseek-llm letters (spec §4.2, D), as code point ranges so that no
 * Unicode normalization of the source text can change an end point. */
static const uint32_t k_deepseek_letters[][2] = {
    {0x41, 0x5A}, {0x61, 0x7A}, {0xB5, 0xB5}, {0xC0, 0xD6}, {0xD8, 0xF6}, {0xF8, 0x1BA},
    {0x1BC, 0x1BF}, {0x1C4, 0x293}, {0x295, 0x2AF}, {0x370, 0x373}, {0x376, 0x377},
    {0x37B, 0x37D}, {0x37F, 0x37F}, {0x386, 0x386}, {0x388, 0x38A}, {0x38C, 0x38C},
    {0x38E, 0x3A1}, {0x3A3, 0x3F5}, {0x3F7, 0x481}, {0x48A, 0x52F}, {0x531, 0x556},
    {0x10A0, 0x10C5}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD}, {0x1C90, 0x1CBA}, {0x1CBD, 0x1CBF},
    {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77}, {0x1D79, 0x1D9A}, {0x1E00, 0x1F15}, {0x1F18, 0x1F1D},
    {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE},
    {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC},
    {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2102, 0x2102}, {0x2107, 0x2107}, {0x210A, 0x2113},
    {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124}, {0x2126, 0x2126}, {0x2128, 0x2128},
    {0x212A, 0x212D}, {0x212F, 0x2134}, {0x2139, 0x2139}, {0x213C, 0x213F}, {0x2145, 0x2149},
    {0x214E, 0x214E}, {0x2183, 0x2184}, {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4}, {0x2CEB, 0x2CEE},
    {0x2CF2, 0x2CF3}, {0xA640, 0xA66D}, {0xA680, 0xA69B}, {0xA722, 0xA76F}, {0xA771, 0xA787},
    {0xA78B, 0xA78E}, {0xAB70, 0xABBF}, {0xFB00, 0xFB06}, {0xFB13, 0xFB17}, {0xFF21, 0xFF3A},
    {0xFF41, 0xFF5A}, {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};

enum { LIST_DEFAULT, LIST_GPT2, LIST_LLAMA3, LIST_QWEN2, LIST_QWEN35, LIST_STARCODER, LIST_FALCON,
       LIST_DEEPSEEK_CODER, LIST_DEEPSEEK_LLM };

typedef struct pre_alias {
    const char *name;
    int list;
    bool ignore_merges, add_bos;
} pre_alias;

/* tokenizer.ggml.pre values → expression list (llama.cpp's grouping). */
static const pre_alias k_pre_aliases[] = {
    {"default", LIST_DEFAULT, false, false},
    {"llama3", LIST_LLAMA3, true, true},
    {"llama-v3", LIST_LLAMA3, true, true},
    {"llama-bpe", LIST_LLAMA3, true, true},
    {"falcon3", LIST_LLAMA3, true, true},
    {"falcon-h1", LIST_LLAMA3, true, true},
    {"pixtral", LIST_LLAMA3, true, true},
    {"midm-2.0", LIST_LLAMA3, true, true},
    {"lfm2", LIST_LLAMA3, true, true},
    {"smaug-bpe", LIST_LLAMA3, false, false},
    {"dbrx", LIST_LLAMA3, false, false},
    {"qwen2", LIST_QWEN2, false, false},
    {"deepseek-r1-qwen", LIST_QWEN2, false, false},
    {"stablelm2", LIST_QWEN2, false, false},
    {"megrez", LIST_QWEN2, false, false},
    {"qwen35", LIST_QWEN35, false, false},
    {"gpt-2", LIST_GPT2, false, false},
    {"phi-2", LIST_GPT2, false, false},
    {"jina-es", LIST_GPT2, false, false},
    {"jina-de", LIST_GPT2, false, false},
    {"gigachat", LIST_GPT2, false, false},
    {"jina-v1-en", LIST_GPT2, false, false},
    {"jina-v2-es", LIST_GPT2, false, false},
    {"jina-v2-de", LIST_GPT2, false, false},
    {"jina-v2-code", LIST_GPT2, false, false},
    {"roberta-bpe", LIST_GPT2, false, false},
    {"mpt", LIST_GPT2, false, false},
    {"olmo", LIST_GPT2, false, false},
    {"starcoder", LIST_STARCODER, false, false},
    {"refact", LIST_STARCODER, false, false},
    {"command-r", LIST_STARCODER, false, false},
    {"smollm", LIST_STARCODER, false, false},
    {"codeshell", LIST_STARCODER, false, false},
    {"exaone", LIST_STARCODER, false, false},
    {"minerva-7b", LIST_STARCODER, false, false},
    {"falcon", LIST_FALCON, false, false},
    {"deepseek-coder", LIST_DEEPSEEK_CODER, false, false},
    {"deepseek-llm", LIST_DEEPSEEK_LLM, false, false},
};

static int compile_one(tok_pretok *p, const char *pattern, wk_error *err)
{
    int code;
    PCRE2_SIZE at;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &code, &at, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        return wk_fail(err, WK_EINVAL, "pre-tokenizer regex %s: %s at offset %zu", pattern,
                       (const char *)msg, (size_t)at);
    }
    /* JIT is an optimisation: when unavailable pcre2_match interprets. */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    p->re[p->n++] = re;
    return 0;
}

static int build_deepseek_letters(char *buf, size_t cap)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, cap - o, S_ "?[");
    for (size_t i = 0; i < sizeof k_deepseek_letters / sizeof k_deepseek_letters[0]; i++) {
        if (o >= cap) return -1;
        o += (size_t)snprintf(buf + o, cap - o, "\\x{%X}-\\x{%X}", k_deepseek_letters[i][0],
                              k_deepseek_letters[i][1]);
    }
    if (o >= cap) return -1;
    o += (size_t)snprintf(buf + o, cap - o, "]+");
    return o < cap ? 0 : -1;
}

int tok_pretok_new(tok_pretok **out, const char *pre, bool *ignore_merges, bool *add_bos_default,
                   wk_error *err)
{
    *out = NULL;
    const pre_alias *alias = NULL;
    const char *name = pre ? pre : "default";
    for (size_t i = 0; i < sizeof k_pre_aliases / sizeof k_pre_aliases[0]; i++)
        if (strcmp(k_pre_aliases[i].name, name) == 0) alias = &k_pre_aliases[i];
    if (!alias)
        return wk_fail(err, WK_EUNSUPPORTED, "tokenizer.ggml.pre '%s' is not a supported pre-tokenizer",
                       name);
    *ignore_merges = alias->ignore_merges;
    *add_bos_default = alias->add_bos;

    tok_pretok *p = calloc(1, sizeof *p);
    if (!p) return wk_fail(err, WK_ENOMEM, "out of memory");
    const char *exprs[MAX_EXPRS];
    size_t n = 0;
    char letters[4096];
    switch (alias->list) {
    case LIST_DEFAULT:
        exprs[n++] = "[\\p{P}\\$\\+<=>\\^~\\|]+";
        exprs[n++] = GPT2_RE;
        exprs[n++] = "\\p{N}+";
        exprs[n++] = "[0-9][0-9][0-9]";
        break;
    case LIST_GPT2: exprs[n++] = GPT2_RE; break;
    case LIST_LLAMA3: exprs[n++] = LLAMA3_RE; break;
    case LIST_QWEN2: exprs[n++] = QWEN2_RE; break;
    case LIST_QWEN35: exprs[n++] = QWEN35_RE; break;
    case LIST_STARCODER:
        exprs[n++] = "\\p{N}";
        exprs[n++] = GPT2_RE;
        break;
    case LIST_FALCON:
        exprs[n++] = "[\\p{P}\\$\\+<=>\\^~\\|`]+";
        exprs[n++] = GPT2_RE;
        exprs[n++] = "[0-9][0-9][0-9]";
        break;
    case LIST_DEEPSEEK_CODER:
        exprs[n++] = "[\\r\\n]";
        exprs[n++] = S_ "?\\p{L}+";
        exprs[n++] = S_ "?\\p{P}+";
        exprs[n++] = CJK_RUN;
        exprs[n++] = "\\p{N}";
        break;
    case LIST_DEEPSEEK_LLM:
        if (build_deepseek_letters(letters, sizeof letters) != 0) {
            free(p);
            return wk_fail(err, WK_EINVAL, "deepseek-llm letter class too long");
        }
        exprs[n++] = "[\\r\\n]";
        exprs[n++] = letters;
        exprs[n++] = S_ "?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+";
        exprs[n++] = S_ "+$";
        exprs[n++] = CJK_RUN;
        exprs[n++] = "\\p{N}+";
        break;
    }
    for (size_t i = 0; i < n; i++) {
        int rc = compile_one(p, exprs[i], err);
        if (rc) {
            tok_pretok_free(p);
            return rc;
        }
    }
    *out = p;
    return 0;
}

void tok_pretok_free(tok_pretok *p)
{
    if (!p) return;
    for (size_t i = 0; i < p->n; i++) pcre2_code_free(p->re[i]);
    free(p);
}

/* Splits one piece with one expression: matches and the stretches between
 * them all become pieces (nothing is dropped). The piece is its own subject,
 * so its ends are start/end of text for look-arounds and `$`. */
static int split_piece(const pcre2_code *re, const char *text, size_t off, size_t len,
                       pcre2_match_data *md, pcre2_match_context *mc, tok_spans *out, wk_error *err)
{
    const char *s = text + off;
    size_t pos = 0, last = 0;
    while (pos < len) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, len, pos, PCRE2_NO_UTF_CHECK, md, mc);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return wk_fail(err, WK_EINVAL, "pre-tokenizer match failed: %s", (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) { /* empty match: step over one character, emit nothing */
            pos = ms + tok_utf8_len_lead((uint8_t)s[ms]);
            continue;
        }
        if (ms > last && tok_spans_push(out, off + last, ms - last)) goto oom;
        if (tok_spans_push(out, off + ms, me - ms)) goto oom;
        last = pos = me;
    }
    if (last < len && tok_spans_push(out, off + last, len - last)) goto oom;
    return 0;
oom:
    return wk_fail(err, WK_ENOMEM, "out of memory splitting text");
}

int tok_pretok_split(const tok_pretok *p, const char *text, size_t len, tok_spans *out,
                     wk_error *err)
{
    out->n = 0;
    if (len == 0) return 0;
    if (len > UINT32_MAX) return wk_fail(err, WK_ERANGE, "text of %zu bytes is too long", len);
    if (tok_spans_push(out, 0, len)) return wk_fail(err, WK_ENOMEM, "out of memory");
    if (p->n == 0) return 0;

    int rc = 0;
    tok_spans tmp = {0};
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    /* Long whitespace or letter runs can need more than the default 32 KiB JIT stack. */
    pcre2_jit_stack *js = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    if (!md || !mc) {
        rc = wk_fail(err, WK_ENOMEM, "out of memory");
        goto done;
    }
    if (js) pcre2_jit_stack_assign(mc, NULL, js);
    for (size_t e = 0; e < p->n; e++) {
        tmp.n = 0;
        for (size_t i = 0; i < out->n; i++) {
            rc = split_piece(p->re[e], text, out->off[i], out->len[i], md, mc, &tmp, err);
            if (rc) goto done;
        }
        tok_spans swap = *out;
        *out = tmp;
        tmp = swap;
    }
done:
    tok_spans_free(&tmp);
    pcre2_jit_stack_free(js);
    pcre2_match_context_free(mc);
    pcre2_match_data_free(md);
    return rc;
}
