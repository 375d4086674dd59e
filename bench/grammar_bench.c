/* grammar_bench: time per decode step of constrained decoding (the token
 * mask, then accepting the token) on a model's vocabulary.
 *
 *   grammar_bench -m MODEL.gguf [-r reps]
 *
 * Cases: response_format json_object, a json_schema with nested objects,
 * and tool calls (tool_choice "required") of a typical coding-agent tool
 * set in the Hermes and Qwen XML formats. Each case feeds the tokens of a
 * realistic output (the text tokenized as the model would emit it) through
 * a fresh state per repetition, as every request starts cold; and also
 * follows random allowed tokens (the state space a random model wanders
 * into). Prints µs per step: mean, median, p99, max, and the vocabulary's
 * one-off build time. Times are CPU time of the calling thread (the mask
 * runs on one thread between decode steps; on a shared machine, wall time
 * would mostly measure other processes). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/grammar.h"
#include "engine/grammar_tools.h"
#include "engine/json_schema.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

/* CPU time of this thread, µs. */
static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void die(const char *what, const wk_error *err)
{
    fprintf(stderr, "grammar_bench: %s: %s\n", what, err ? err->msg : "failed");
    exit(1);
}

static const char *k_tools =
    "[{\"type\":\"function\",\"function\":{\"name\":\"read_file\",\"description\":\"Reads a file\",\"parameters\":{"
    "\"type\":\"object\",\"properties\":{\"absolute_path\":{\"type\":\"string\",\"description\":\"path\"},\"offset\":"
    "{\"type\":\"number\"},\"limit\":{\"type\":\"number\"}},\"required\":[\"absolute_path\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"write_file\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"file_path\":{\"type\":\"string\"},\"content\":{\"type\":\"string\"}},\"required\":[\"file_path\",\"content\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"run_shell_command\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"command\":{\"type\":\"string\"},\"description\":{\"type\":\"string\"},\"directory\":{\"type\":"
    "\"string\"},\"is_background\":{\"type\":\"boolean\"}},\"required\":[\"command\",\"is_background\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"glob\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"pattern\":{\"type\":\"string\"},\"path\":{\"type\":\"string\"},\"case_sensitive\":{\"type\":\"boolean\"}},"
    "\"required\":[\"pattern\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"todo_write\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"todos\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\"},"
    "\"content\":{\"type\":\"string\"},\"status\":{\"type\":\"string\",\"enum\":[\"pending\",\"in_progress\","
    "\"completed\"]}},\"required\":[\"id\",\"content\",\"status\"]}}},\"required\":[\"todos\"]}}}]";

static const char *k_schema =
    "{\"type\":\"object\",\"properties\":{\"title\":{\"type\":\"string\"},\"year\":{\"type\":\"integer\",\"minimum\":"
    "1900,\"maximum\":2100},\"authors\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"name\":"
    "{\"type\":\"string\"},\"affiliation\":{\"type\":\"object\",\"properties\":{\"institution\":{\"type\":\"string\"},"
    "\"country\":{\"type\":\"string\"}},\"required\":[\"institution\"]}},\"required\":[\"name\"]}},\"keywords\":{"
    "\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":8},\"rating\":{\"type\":\"number\"},\"open\":"
    "{\"type\":\"boolean\"}},\"required\":[\"title\",\"year\",\"authors\"],\"additionalProperties\":false}";

static const char *k_doc_schema =
    "{\n  \"title\": \"Fast constrained decoding for structured generation with large vocabularies\",\n"
    "  \"year\": 2024,\n  \"authors\": [\n    {\"name\": \"Ada Lovelace\", \"affiliation\": {\"institution\": "
    "\"Analytical Engine Society\", \"country\": \"UK\"}},\n    {\"name\": \"Alan Turing\", \"affiliation\": "
    "{\"institution\": \"University of Manchester\"}}\n  ],\n  \"keywords\": [\"grammars\", \"decoding\", "
    "\"automata\", \"tokenizers\"],\n  \"rating\": 4.75,\n  \"open\": true\n}";

static const char *k_doc_object =
    "{\"id\": 1842, \"status\": \"ok\", \"items\": [{\"sku\": \"A-1\", \"qty\": 3, \"price\": 9.99}, {\"sku\": \"B-7\", "
    "\"qty\": 1, \"price\": 120.5}], \"note\": \"Deliver after 5 pm, ring the bell twice.\", \"paid\": false}";

static const char *k_doc_hermes =
    "<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"file_path\": \"/home/user/project/src/main.py\", "
    "\"content\": \"import sys\\n\\n\\ndef main(argv):\\n    for arg in argv[1:]:\\n        print(arg.upper())\\n"
    "    return 0\\n\\n\\nif __name__ == \\\"__main__\\\":\\n    sys.exit(main(sys.argv))\\n\"}}\n</tool_call>";

static const char *k_doc_xml =
    "<tool_call>\n<function=write_file>\n<parameter=file_path>\n/home/user/project/src/main.py\n</parameter>\n"
    "<parameter=content>\nimport sys\n\n\ndef main(argv):\n    for arg in argv[1:]:\n        print(arg.upper())\n"
    "    return 0\n\n\nif __name__ == \"__main__\":\n    sys.exit(main(sys.argv))\n\n</parameter>\n</function>\n"
    "</tool_call>";

typedef struct stats {
    double *t;
    size_t n, cap;
} stats;

static void stats_add(stats *s, double us)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 1024;
        s->t = realloc(s->t, s->cap * sizeof *s->t);
        if (!s->t) die("out of memory", NULL);
    }
    s->t[s->n++] = us;
}

static void stats_print(const char *name, stats *s)
{
    if (!s->n) return;
    double sum = 0;
    for (size_t i = 0; i < s->n; i++) sum += s->t[i];
    qsort(s->t, s->n, sizeof *s->t, cmp_double);
    printf("%-22s %6zu %10.1f %10.1f %10.1f %10.1f\n", name, s->n, sum / s->n, s->t[s->n / 2],
           s->t[(size_t)(s->n * 0.99)], s->t[s->n - 1]);
    s->n = 0;
}

/* One step: mask, then accept. Returns µs (mask and accept). */
static double step(gram_state *st, uint32_t *mask, int32_t tok)
{
    wk_error err = {0};
    double t0 = now_us();
    if (gram_mask(st, mask, &err)) die("mask", &err);
    if (!(mask[tok >> 5] >> (tok & 31) & 1)) {
        fprintf(stderr, "grammar_bench: token %d of the document is not allowed\n", tok);
        exit(1);
    }
    if (gram_accept(st, tok, &err)) die("accept", &err);
    return now_us() - t0;
}

static void run_document(const char *name, const gram_grammar *g, const gram_vocab *gv, const tok_vocab *v,
                         const char *doc, int reps, stats *s)
{
    int32_t *ids;
    size_t n;
    wk_error err = {0};
    if (tok_encode(v, doc, strlen(doc), false, TOK_SPECIAL_ALL, &ids, &n, &err)) die("tokenize", &err);
    uint32_t *mask = malloc(gram_mask_words(gv) * sizeof *mask);
    for (int r = 0; r < reps; r++) {
        gram_state *st;
        if (gram_state_new(&st, g, gv, &err)) die("state", &err);
        for (size_t i = 0; i < n; i++) stats_add(s, step(st, mask, ids[i]));
        if (!gram_can_end(st)) {
            fprintf(stderr, "grammar_bench: %s: the document does not complete the grammar\n", name);
            exit(1);
        }
        gram_state_free(st);
    }
    char label[64];
    snprintf(label, sizeof label, "%s (%zu tok)", name, n);
    stats_print(label, s);
    free(mask);
    free(ids);
}

/* Random allowed tokens (no end of generation), steps per repetition. */
static void run_random(const char *name, const gram_grammar *g, const gram_vocab *gv, int steps, int reps, stats *s)
{
    wk_error err = {0};
    size_t words = gram_mask_words(gv);
    uint32_t *mask = malloc(words * sizeof *mask);
    int32_t *allowed = malloc((size_t)gram_vocab_n_tokens(gv) * sizeof *allowed);
    uint64_t rng = 42;
    for (int r = 0; r < reps; r++) {
        gram_state *st;
        if (gram_state_new(&st, g, gv, &err)) die("state", &err);
        for (int k = 0; k < steps && !gram_is_done(st); k++) {
            double t0 = now_us();
            if (gram_mask(st, mask, &err)) die("mask", &err);
            double t1 = now_us();
            size_t na = 0;
            for (size_t w = 0; w < words; w++)
                for (uint32_t m = mask[w]; m; m &= m - 1) allowed[na++] = (int32_t)(w * 32 + (size_t)__builtin_ctz(m));
            if (!na) break;
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            int32_t tok = allowed[(rng >> 33) % na];
            double t2 = now_us();
            if (gram_accept(st, tok, &err)) die("accept", &err);
            stats_add(s, (t1 - t0) + (now_us() - t2));
        }
        gram_state_free(st);
    }
    stats_print(name, s);
    free(mask);
    free(allowed);
}

int main(int argc, char **argv)
{
    const char *model = NULL;
    int reps = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: grammar_bench -m MODEL.gguf [-r reps]\n");
            return 2;
        }
    }
    if (!model || reps < 1) {
        fprintf(stderr, "usage: grammar_bench -m MODEL.gguf [-r reps]\n");
        return 2;
    }
    wk_error err = {0};
    gguf_file *f;
    if (gguf_open(&f, model, &err)) die(model, &err);
    tok_vocab *v;
    if (tok_load_from_gguf(&v, f, &err)) die("vocabulary", &err);
    gguf_close(f);
    double t0 = now_us();
    gram_vocab *gv;
    if (gram_vocab_new(&gv, v, &err)) die("grammar vocabulary", &err);
    printf("vocabulary: %d tokens, prefix tree built in %.1f ms (once per model)\n", tok_n_vocab(v),
           (now_us() - t0) / 1e3);

    json_error_t je;
    json_t *tools = json_loads(k_tools, 0, &je), *schema = json_loads(k_schema, 0, &je);
    if (!tools || !schema) die("bench JSON", NULL);
    struct {
        const char *name;
        gram_grammar *g;
        const char *doc;
    } cases[4] = {{"json_object", NULL, k_doc_object},
                  {"json_schema nested", NULL, k_doc_schema},
                  {"tools hermes", NULL, k_doc_hermes},
                  {"tools qwen-xml", NULL, k_doc_xml}};
    double tc = now_us();
    if (gram_json_object(&cases[0].g, GRAM_REASONING_NONE, &err)) die("json_object", &err);
    printf("compile json_object: %.2f ms\n", (now_us() - tc) / 1e3);
    tc = now_us();
    if (gram_from_json_schema(&cases[1].g, schema, GRAM_REASONING_NONE, &err)) die("schema", &err);
    printf("compile json_schema: %.2f ms\n", (now_us() - tc) / 1e3);
    tc = now_us();
    if (gram_for_tools(&cases[2].g, tools, CHAT_TOOLS_HERMES, NULL, true, GRAM_REASONING_NONE, &err)) die("hermes", &err);
    printf("compile tools hermes (5 tools): %.2f ms\n", (now_us() - tc) / 1e3);
    tc = now_us();
    if (gram_for_tools(&cases[3].g, tools, CHAT_TOOLS_QWEN_XML, NULL, true, GRAM_REASONING_NONE, &err)) die("xml", &err);
    printf("compile tools qwen-xml (5 tools): %.2f ms\n", (now_us() - tc) / 1e3);

    printf("\nµs per step (mask + accept), fresh state per repetition, %d repetitions\n", reps);
    printf("%-22s %6s %10s %10s %10s %10s\n", "case", "steps", "mean", "median", "p99", "max");
    stats s = {0};
    for (int k = 0; k < 4; k++) run_document(cases[k].name, cases[k].g, gv, v, cases[k].doc, reps, &s);
    for (int k = 0; k < 4; k++) {
        char label[64];
        snprintf(label, sizeof label, "%s random", cases[k].name);
        run_random(label, cases[k].g, gv, 200, reps, &s);
    }
    free(s.t);
    for (int k = 0; k < 4; k++) gram_grammar_free(cases[k].g);
    json_decref(tools);
    json_decref(schema);
    gram_vocab_free(gv);
    tok_free(v);
    return 0;
}
