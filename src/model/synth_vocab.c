/* Vocabulary and chat template for synthetic model files.
 *
 * The vocabulary is a real byte-level BPE: byte tokens, then merges learnt
 * (greedy most-frequent-pair, as in GPT-2 BPE training) on a small built-in
 * text, so ordinary English and code tokenize into multi-byte tokens and the
 * tokenizer exercises its merge loop. Special tokens are Qwen's, with Qwen's
 * token types (<|...|> CONTROL, the others USER_DEFINED as in Qwen3's
 * tokenizer_config.json, where <think> etc. are "special": false). */
#include "model/synth_vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Qwen3 chat template: the exact `chat_template` string of Qwen3's
 * tokenizer_config.json (Apache-2.0; copy in shared/golden/templates/qwen3.jinja),
 * so the chat module recognises it and renders Qwen3 prompts byte for byte. */
const char synth_qwen3_chat_template[] =
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0].role == 'system' %}\n"
    "        {{- messages[0].content + '\\n\\n' }}\n"
    "    {%- endif %}\n"
    "    {{- \"# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- \"\\n\" }}\n"
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n"
    "{%- else %}\n"
    "    {%- if messages[0].role == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\n"
    "{%- for message in messages[::-1] %}\n"
    "    {%- set index = (messages|length - 1) - loop.index0 %}\n"
    "    {%- if ns.multi_step_tool and message.role == \"user\" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}\n"
    "        {%- set ns.multi_step_tool = false %}\n"
    "        {%- set ns.last_query_index = index %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n"
    "        {%- set content = message.content %}\n"
    "        {%- set reasoning_content = '' %}\n"
    "        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}\n"
    "            {%- set reasoning_content = message.reasoning_content %}\n"
    "        {%- else %}\n"
    "            {%- if '</think>' in message.content %}\n"
    "                {%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}\n"
    "                {%- set reasoning_content = message.content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}\n"
    "            {%- endif %}\n"
    "        {%- endif %}\n"
    "        {%- if loop.index0 > ns.last_query_index %}\n"
    "            {%- if loop.last or (not loop.last and reasoning_content) %}\n"
    "                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}\n"
    "            {%- else %}\n"
    "                {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
    "            {%- endif %}\n"
    "        {%- else %}\n"
    "            {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
    "        {%- endif %}\n"
    "        {%- if message.tool_calls %}\n"
    "            {%- for tool_call in message.tool_calls %}\n"
    "                {%- if (loop.first and content) or (not loop.first) %}\n"
    "                    {{- '\\n' }}\n"
    "                {%- endif %}\n"
    "                {%- if tool_call.function %}\n"
    "                    {%- set tool_call = tool_call.function %}\n"
    "                {%- endif %}\n"
    "                {{- '<tool_call>\\n{\"name\": \"' }}\n"
    "                {{- tool_call.name }}\n"
    "                {{- '\", \"arguments\": ' }}\n"
    "                {%- if tool_call.arguments is string %}\n"
    "                    {{- tool_call.arguments }}\n"
    "                {%- else %}\n"
    "                    {{- tool_call.arguments | tojson }}\n"
    "                {%- endif %}\n"
    "                {{- '}\\n</tool_call>' }}\n"
    "            {%- endfor %}\n"
    "        {%- endif %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if loop.first or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "    {%- if enable_thinking is defined and enable_thinking is false %}\n"
    "        {{- '<think>\\n\\n</think>\\n\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}";

/* Training text for the merges: plain prose and a little code, written for
 * this purpose. Its only job is to give frequent English/code pieces their
 * own tokens. */
static const char k_corpus[] =
    "The quick brown fox jumps over the lazy dog. A local inference engine reads the model file, "
    "maps the weights into memory and runs the forward pass one layer after another. "
    "When the user sends a message, the server renders the conversation with the chat template, "
    "turns the text into tokens and looks for the longest prefix that is already in the cache. "
    "Only the rest of the prompt has to be processed, so a long conversation stays fast. "
    "The assistant then writes its answer token by token and streams every new piece of text "
    "back to the client as soon as it is ready.\n\n"
    "Speed on long inputs is what matters here: prefill is limited by compute and decode by memory "
    "bandwidth. We measure both, side by side, on the same file and with the same number of threads. "
    "This is a test of the system. It should work for all of the people who use it, and they will "
    "tell us what they think about it. There are many ways to make a program faster, but the best one "
    "is to do less work: skip what you do not need, keep what you will use again, and read each byte "
    "of memory only once.\n\n"
    "Question: What is the capital of France? Answer: Paris is the capital and the largest city of "
    "France. Question: How many days are there in a week? Answer: There are seven days in a week.\n"
    "I think that we should start with a simple example, and then we can look at the details. "
    "You can find more information in the documentation, which explains how the model was trained "
    "and how the results were evaluated. Thank you for your help! Please let me know if you have any "
    "questions or if there is anything else I can do for you.\n\n"
    "def main(args):\n"
    "    for i in range(len(args)):\n"
    "        if args[i] == \"--help\":\n"
    "            print(\"usage: main [options]\")\n"
    "            return 0\n"
    "    return 1\n\n"
    "int main(int argc, char **argv)\n{\n    if (argc < 2) {\n        fprintf(stderr, \"usage: %s file\\n\", argv[0]);\n"
    "        return 1;\n    }\n    const char *path = argv[1];\n    return run(path);\n}\n\n"
    "function update(state, action) {\n  const next = { ...state };\n  if (action.type === 'add') {\n"
    "    next.items = [...state.items, action.value];\n  }\n  return next;\n}\n\n"
    "{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Berlin\", \"unit\": \"celsius\"}}\n"
    "The numbers 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 and 10 are written with one token per digit. "
    "In the morning she walked to the station, bought a ticket and waited for the train. "
    "The weather was cold but the sky was clear, and the city was still quiet. "
    "He said that it would be better to wait until the end of the year before making a decision. "
    "Their work has shown that small models can be useful when they are trained on good data. "
    "Because of this, we believe that the new method will help many teams to build better tools.\n";

/* The 26 Qwen special tokens, in Qwen's id order starting at <|endoftext|>. */
static const char *const k_specials[] = {
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
};
#define N_SPECIALS (sizeof k_specials / sizeof k_specials[0])

/* Vocabulary sizes of the real models whose special-token ids we reproduce
 * (spec tokenizer-and-templates.md section 2). */
#define QWEN3_N_VOCAB 151936u
#define QWEN3_ENDOFTEXT 151643u
#define QWEN35_N_VOCAB 248320u
#define QWEN35_ENDOFTEXT 248044u

uint32_t synth_vocab_min_size(void) { return 256 + (uint32_t)N_SPECIALS + 1; }

/* GPT-2 byte-to-code-point table: printable Latin-1 bytes map to themselves,
 * the other 68 bytes to U+0100.. in increasing byte order. */
static uint32_t byte_to_codepoint(unsigned b)
{
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE)) return b;
    unsigned n = 0;
    for (unsigned x = 0; x < b; x++)
        if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE))) n++;
    return 0x100 + n;
}

static size_t utf8_put(char *out, uint32_t cp)
{
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2; /* all code points here are < 0x800 */
}

static int is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static int is_nl(char c) { return c == '\n' || c == '\r'; }

/* Length of the next pre-token at s (ASCII version of the qwen2 splitter,
 * spec tokenizer-and-templates.md section 4.2), so merges never cross the
 * word boundaries the real tokenizer uses. */
static size_t next_piece(const char *s)
{
    if (s[0] == '\'') {
        char c1 = (char)(s[1] | 0x20), c2 = (char)(s[2] | 0x20);
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    }
    if (!is_nl(s[0]) && !is_digit(s[0]) && (is_letter(s[0]) || is_letter(s[1]))) {
        size_t n = 1;
        while (is_letter(s[n])) n++;
        return n;
    }
    if (is_digit(s[0])) return 1;
    {
        size_t n = s[0] == ' ' ? 1 : 0, start = n;
        while (s[n] && !is_space(s[n]) && !is_letter(s[n]) && !is_digit(s[n])) n++;
        if (n > start) {
            while (is_nl(s[n])) n++;
            return n;
        }
    }
    if (is_space(s[0])) {
        size_t n = 0, last_nl = 0;
        while (is_space(s[n])) {
            if (is_nl(s[n])) last_nl = n + 1;
            n++;
        }
        if (last_nl) return last_nl;
        if (n >= 2 && s[n]) return n - 1;
        return n;
    }
    return 1;
}

typedef struct word {
    uint32_t *sym;
    size_t n_sym;
    uint32_t count;
    char text[64];
} word;

typedef struct pair_count {
    uint64_t key; /* left << 32 | right */
    uint32_t count;
} pair_count;

static int cmp_pair(const void *a, const void *b)
{
    uint64_t x = ((const pair_count *)a)->key, y = ((const pair_count *)b)->key;
    return x < y ? -1 : x > y;
}

typedef struct builder {
    char **tok;   /* token texts, grows */
    uint32_t n_tok, cap_tok;
    char **merges;
    uint32_t n_merges, cap_merges;
} builder;

static int push_str(char ***arr, uint32_t *n, uint32_t *cap, char *s)
{
    if (!s) return -1;
    if (*n == *cap) {
        uint32_t nc = *cap ? *cap * 2 : 1024;
        char **na = realloc(*arr, nc * sizeof *na);
        if (!na) { free(s); return -1; }
        *arr = na;
        *cap = nc;
    }
    (*arr)[(*n)++] = s;
    return 0;
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static int64_t find_token(const builder *b, const char *text)
{
    for (uint32_t i = 0; i < b->n_tok; i++)
        if (strcmp(b->tok[i], text) == 0) return i;
    return -1;
}

/* Learns up to max_new_tokens merges on k_corpus; appends tokens and merges
 * to b (which already holds the 256 byte tokens). */
static int learn_merges(builder *b, uint32_t max_new_tokens)
{
    word *words = NULL;
    size_t n_words = 0, cap_words = 0, total_sym = 0;
    pair_count *pairs = NULL;
    int rc = -1;

    for (const char *s = k_corpus; *s;) {
        size_t len = next_piece(s);
        if (len >= sizeof words[0].text) len = sizeof words[0].text - 1;
        size_t w;
        for (w = 0; w < n_words; w++)
            if (strlen(words[w].text) == len && memcmp(words[w].text, s, len) == 0) break;
        if (w == n_words) {
            if (n_words == cap_words) {
                size_t nc = cap_words ? cap_words * 2 : 256;
                word *nw = realloc(words, nc * sizeof *nw);
                if (!nw) goto done;
                words = nw;
                cap_words = nc;
            }
            word *wd = &words[n_words++];
            memset(wd, 0, sizeof *wd);
            memcpy(wd->text, s, len);
            wd->sym = malloc(len * sizeof *wd->sym);
            if (!wd->sym) goto done;
            for (size_t i = 0; i < len; i++) wd->sym[i] = (unsigned char)s[i];
            wd->n_sym = len;
            total_sym += len;
        }
        words[w].count++;
        s += len;
    }
    pairs = malloc((total_sym + 1) * sizeof *pairs);
    if (!pairs) goto done;

    for (uint32_t added = 0; added < max_new_tokens;) {
        size_t np = 0;
        for (size_t w = 0; w < n_words; w++)
            for (size_t i = 0; i + 1 < words[w].n_sym; i++)
                pairs[np++] = (pair_count){((uint64_t)words[w].sym[i] << 32) | words[w].sym[i + 1], words[w].count};
        if (np == 0) break;
        qsort(pairs, np, sizeof *pairs, cmp_pair);
        uint64_t best_key = 0;
        uint32_t best = 0;
        for (size_t i = 0; i < np;) {
            size_t j = i;
            uint32_t c = 0;
            while (j < np && pairs[j].key == pairs[i].key) c += pairs[j++].count;
            if (c > best) { best = c; best_key = pairs[i].key; } /* ties: smallest key (first seen) */
            i = j;
        }
        uint32_t left = (uint32_t)(best_key >> 32), right = (uint32_t)best_key;
        size_t ll = strlen(b->tok[left]), rl = strlen(b->tok[right]);
        char *merged = malloc(ll + rl + 1), *rule = malloc(ll + rl + 2);
        if (!merged || !rule) { free(merged); free(rule); goto done; }
        memcpy(merged, b->tok[left], ll);
        memcpy(merged + ll, b->tok[right], rl + 1);
        memcpy(rule, b->tok[left], ll);
        rule[ll] = ' ';
        memcpy(rule + ll + 1, b->tok[right], rl + 1);
        if (push_str(&b->merges, &b->n_merges, &b->cap_merges, rule)) { free(merged); goto done; }
        int64_t id = find_token(b, merged);
        if (id < 0) {
            id = b->n_tok;
            if (push_str(&b->tok, &b->n_tok, &b->cap_tok, merged)) goto done;
            added++;
        } else {
            free(merged);
        }
        for (size_t w = 0; w < n_words; w++) {
            word *wd = &words[w];
            size_t o = 0;
            for (size_t i = 0; i < wd->n_sym; i++) {
                if (i + 1 < wd->n_sym && wd->sym[i] == left && wd->sym[i + 1] == right) {
                    wd->sym[o++] = (uint32_t)id;
                    i++;
                } else {
                    wd->sym[o++] = wd->sym[i];
                }
            }
            wd->n_sym = o;
        }
    }
    rc = 0;
done:
    for (size_t w = 0; w < n_words; w++) free(words[w].sym);
    free(words);
    free(pairs);
    return rc;
}

int synth_vocab_build(synth_vocab *v, uint32_t n_vocab, wk_error *err)
{
    memset(v, 0, sizeof *v);
    if (n_vocab < synth_vocab_min_size())
        return wk_fail(err, WK_EINVAL, "vocab size %u: need at least %u (256 bytes + %u special tokens + 1)",
                       n_vocab, synth_vocab_min_size(), (unsigned)N_SPECIALS);
    builder b = {0};
    for (unsigned i = 0; i < 256; i++) {
        char buf[4] = {0};
        utf8_put(buf, byte_to_codepoint(i));
        if (push_str(&b.tok, &b.n_tok, &b.cap_tok, dup_str(buf))) goto oom;
    }
    uint32_t special_base;
    if (n_vocab == QWEN3_N_VOCAB) special_base = QWEN3_ENDOFTEXT;
    else if (n_vocab == QWEN35_N_VOCAB) special_base = QWEN35_ENDOFTEXT;
    else special_base = 0; /* right after the merged tokens */
    uint32_t max_new = (special_base ? special_base : n_vocab - (uint32_t)N_SPECIALS) - 256;
    if (learn_merges(&b, max_new)) goto oom;
    if (!special_base) special_base = b.n_tok;

    v->tokens = calloc(n_vocab, sizeof *v->tokens);
    v->types = calloc(n_vocab, sizeof *v->types);
    if (!v->tokens || !v->types) goto oom;
    v->n_tokens = n_vocab;
    for (uint32_t i = 0; i < b.n_tok; i++) {
        v->tokens[i] = b.tok[i];
        v->types[i] = SYNTH_TOK_NORMAL;
        b.tok[i] = NULL;
    }
    for (uint32_t i = b.n_tok; i < n_vocab; i++) {
        char buf[32];
        int32_t type = SYNTH_TOK_UNUSED;
        if (i >= special_base && i < special_base + N_SPECIALS) {
            const char *s = k_specials[i - special_base];
            snprintf(buf, sizeof buf, "%s", s);
            type = (s[1] == '|') ? SYNTH_TOK_CONTROL : SYNTH_TOK_USER_DEFINED;
        } else {
            snprintf(buf, sizeof buf, "[PAD%u]", i);
        }
        v->tokens[i] = dup_str(buf);
        if (!v->tokens[i]) goto oom;
        v->types[i] = type;
    }
    v->merges = b.merges;
    v->n_merges = b.n_merges;
    b.merges = NULL;
    v->endoftext_id = special_base;
    v->im_start_id = special_base + 1;
    v->im_end_id = special_base + 2;
    free(b.tok);
    return 0;
oom:
    for (uint32_t i = 0; i < b.n_tok; i++) free(b.tok[i]);
    free(b.tok);
    for (uint32_t i = 0; i < b.n_merges; i++) free(b.merges[i]);
    free(b.merges);
    synth_vocab_free(v);
    return wk_fail(err, WK_ENOMEM, "building the synthetic vocabulary (%u tokens): out of memory", n_vocab);
}

void synth_vocab_free(synth_vocab *v)
{
    if (!v) return;
    if (v->tokens)
        for (uint32_t i = 0; i < v->n_tokens; i++) free(v->tokens[i]);
    free(v->tokens);
    free(v->types);
    for (uint32_t i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->merges);
    memset(v, 0, sizeof *v);
}
