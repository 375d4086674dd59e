/* `wick tokenizer`: encode / decode with a GGUF's vocabulary, show its
 * tokenizer facts, import a Hugging Face tokenizer.json into a vocab-only GGUF. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage:\n"
            "  wick tokenizer encode -m FILE.gguf [--special] [--add-special] [--pieces] [--split SEP]\n"
            "                       (TEXT | -f FILE)\n"
            "      prints the token ids of TEXT (or of FILE's bytes; '-' = stdin) on one line.\n"
            "      --split SEP    the input is cases each ended by SEP (C escapes allowed, e.g.\n"
            "                     '\\n__ggml_vocab_test__\\n'): one line of ids per case\n"
            "      (default: like llama.cpp, only user-defined tokens such as <think> are matched)\n"
            "      --special      also recognise control-token text such as <|im_start|>\n"
            "      --plain        match no token text at all (how wick tokenizes chat content)\n"
            "      --add-special  add BOS/EOS as the vocabulary asks (tokenizer.ggml.add_bos_token ...)\n"
            "      --pieces       one line per token: id, then the token text (C-escaped)\n"
            "  wick tokenizer decode -m FILE.gguf [--special] [ID ...]\n"
            "      prints the text of the ids (read from stdin when none are given).\n"
            "      --special      render control tokens as their text\n"
            "  wick tokenizer info -m FILE.gguf\n"
            "  wick tokenizer import tokenizer.json [tokenizer_config.json] -o OUT.gguf\n"
            "                        [--pre NAME] [--arch NAME] [--name NAME]\n"
            "      writes a vocab-only GGUF (model gpt2, pre detected from the regex unless --pre).\n");
}

static int load_vocab(const char *path, tok_vocab **v)
{
    wk_error err = {0};
    gguf_file *f;
    if (gguf_open(&f, path, &err)) {
        fprintf(stderr, "wick tokenizer: %s\n", err.msg);
        return 1;
    }
    int rc = tok_load_from_gguf(v, f, &err);
    gguf_close(f);
    if (rc) {
        fprintf(stderr, "wick tokenizer: %s: %s\n", path, err.msg);
        return 1;
    }
    return 0;
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "wick tokenizer: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        char *p = realloc(buf, cap * 2);
        if (!p) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = p;
        cap *= 2;
    }
    if (f != stdin) fclose(f);
    if (!buf) {
        fprintf(stderr, "wick tokenizer: out of memory reading %s\n", path);
        return NULL;
    }
    *len = n;
    return buf;
}

static void print_escaped(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\\') fputs("\\\\", stdout);
        else if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
}

/* Unescapes \n, \t, \r, \\ in place (for --split). */
static void unescape(char *s)
{
    char *o = s;
    for (; *s; s++) {
        if (*s == '\\' && s[1]) {
            s++;
            *o++ = *s == 'n' ? '\n' : *s == 't' ? '\t' : *s == 'r' ? '\r' : *s;
        } else {
            *o++ = *s;
        }
    }
    *o = '\0';
}

static void print_ids(const tok_vocab *v, const int32_t *ids, size_t n, bool pieces)
{
    if (pieces) {
        for (size_t i = 0; i < n; i++) {
            size_t tl;
            const char *t = tok_token_text(v, ids[i], &tl);
            printf("%d\t", ids[i]);
            print_escaped(t, tl);
            putchar('\n');
        }
        return;
    }
    for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    putchar('\n');
}

static int tokenizer_encode(int argc, char **argv)
{
    const char *model = NULL, *file = NULL, *text = NULL;
    char *split = NULL;
    int special = TOK_SPECIAL_USER_DEFINED;
    bool add_special = false, pieces = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-m") == 0 && i + 1 < argc) model = argv[++i];
        else if (strcmp(argv[i], "-f") == 0 && i + 1 < argc) file = argv[++i];
        else if (strcmp(argv[i], "--special") == 0) special = TOK_SPECIAL_ALL;
        else if (strcmp(argv[i], "--plain") == 0) special = TOK_SPECIAL_NONE;
        else if (strcmp(argv[i], "--add-special") == 0) add_special = true;
        else if (strcmp(argv[i], "--pieces") == 0) pieces = true;
        else if (strcmp(argv[i], "--split") == 0 && i + 1 < argc) split = argv[++i];
        else if (strcmp(argv[i], "--") == 0 && i + 1 < argc && !text) text = argv[++i];
        else if (argv[i][0] != '-' && !text) text = argv[i];
        else {
            fprintf(stderr, "wick tokenizer encode: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!model || (!file && !text) || (file && text)) {
        usage(stderr);
        return 2;
    }
    size_t len;
    char *owned = NULL;
    if (file) {
        owned = read_all(file, &len);
        if (!owned) return 1;
        text = owned;
    } else {
        len = strlen(text);
    }
    tok_vocab *v;
    if (load_vocab(model, &v)) {
        free(owned);
        return 1;
    }
    wk_error err = {0};
    int32_t *ids = NULL;
    size_t n;
    int rc = 0;
    if (split) {
        unescape(split);
        size_t sl = strlen(split);
        const char *p = text, *end = text + len;
        while (!rc && sl && p < end) {
            const char *q = memmem(p, (size_t)(end - p), split, sl);
            size_t case_len = q ? (size_t)(q - p) : (size_t)(end - p);
            rc = tok_encode(v, p, case_len, add_special, special, &ids, &n, &err);
            if (!rc) print_ids(v, ids, n, pieces);
            free(ids);
            ids = NULL;
            p = q ? q + sl : end;
        }
    } else {
        rc = tok_encode(v, text, len, add_special, special, &ids, &n, &err);
        if (!rc) print_ids(v, ids, n, pieces);
    }
    if (rc) fprintf(stderr, "wick tokenizer encode: %s\n", err.msg);
    free(ids);
    tok_free(v);
    free(owned);
    return rc ? 1 : 0;
}

static int parse_id(const char *s, int32_t *out)
{
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || end == s || *end || x < 0 || x > INT32_MAX) return -1;
    *out = (int32_t)x;
    return 0;
}

static int tokenizer_decode(int argc, char **argv)
{
    const char *model = NULL;
    bool special = false;
    int32_t *ids = malloc((size_t)(argc > 0 ? argc : 1) * sizeof *ids);
    size_t n = 0;
    if (!ids) return 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-m") == 0 && i + 1 < argc) model = argv[++i];
        else if (strcmp(argv[i], "--special") == 0) special = true;
        else if (parse_id(argv[i], &ids[n]) == 0) n++;
        else {
            fprintf(stderr, "wick tokenizer decode: '%s' is not a token id\n", argv[i]);
            free(ids);
            return 2;
        }
    }
    if (!model) {
        usage(stderr);
        free(ids);
        return 2;
    }
    if (n == 0) { /* ids from stdin, separated by whitespace or commas */
        size_t len;
        char *in = read_all("-", &len);
        if (!in) {
            free(ids);
            return 1;
        }
        free(ids);
        ids = malloc((len / 2 + 1) * sizeof *ids);
        if (!ids) {
            free(in);
            return 1;
        }
        char *save = NULL;
        in[len] = '\0';
        for (char *t = strtok_r(in, " \t\r\n,[]", &save); t; t = strtok_r(NULL, " \t\r\n,[]", &save)) {
            if (parse_id(t, &ids[n]) != 0) {
                fprintf(stderr, "wick tokenizer decode: '%s' is not a token id\n", t);
                free(in);
                free(ids);
                return 2;
            }
            n++;
        }
        free(in);
    }
    tok_vocab *v;
    if (load_vocab(model, &v)) {
        free(ids);
        return 1;
    }
    wk_error err = {0};
    char *text;
    size_t len;
    int rc = tok_decode(v, ids, n, special ? TOK_DECODE_SPECIAL : 0, &text, &len, &err);
    if (rc) fprintf(stderr, "wick tokenizer decode: %s\n", err.msg);
    else {
        fwrite(text, 1, len, stdout);
        free(text);
    }
    tok_free(v);
    free(ids);
    return rc ? 1 : 0;
}

static void print_id(const tok_vocab *v, const char *what, int32_t id)
{
    if (id == TOK_NULL) {
        printf("%-10s -\n", what);
        return;
    }
    size_t tl;
    const char *t = tok_token_text(v, id, &tl);
    printf("%-10s %d ", what, id);
    print_escaped(t, tl);
    putchar('\n');
}

static int tokenizer_info(int argc, char **argv)
{
    const char *model = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-m") == 0 && i + 1 < argc) model = argv[++i];
        else {
            usage(stderr);
            return 2;
        }
    }
    if (!model) {
        usage(stderr);
        return 2;
    }
    tok_vocab *v;
    if (load_vocab(model, &v)) return 1;
    printf("model      %s\npre        %s\nn_vocab    %d\nadd_bos    %s\nadd_eos    %s\n", tok_model_name(v),
           tok_pre_name(v), tok_n_vocab(v), tok_add_bos(v) ? "true" : "false", tok_add_eos(v) ? "true" : "false");
    print_id(v, "bos", tok_bos(v));
    print_id(v, "eos", tok_eos(v));
    print_id(v, "eot", tok_eot(v));
    print_id(v, "unk", tok_unk(v));
    print_id(v, "pad", tok_pad(v));
    const int32_t *eog;
    size_t ne = tok_eog_ids(v, &eog);
    for (size_t i = 0; i < ne; i++) print_id(v, "eog", eog[i]);
    tok_free(v);
    return 0;
}

static int tokenizer_import(int argc, char **argv)
{
    const char *inputs[2] = {NULL, NULL}, *out = NULL;
    size_t n_in = 0;
    tok_import_opts opts = {0};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) out = argv[++i];
        else if (strcmp(argv[i], "--pre") == 0 && i + 1 < argc) opts.pre = argv[++i];
        else if (strcmp(argv[i], "--arch") == 0 && i + 1 < argc) opts.architecture = argv[++i];
        else if (strcmp(argv[i], "--name") == 0 && i + 1 < argc) opts.name = argv[++i];
        else if (argv[i][0] != '-' && n_in < 2) inputs[n_in++] = argv[i];
        else {
            fprintf(stderr, "wick tokenizer import: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!inputs[0] || !out) {
        usage(stderr);
        return 2;
    }
    wk_error err = {0};
    if (tok_import_hf(inputs[0], inputs[1], out, &opts, &err)) {
        fprintf(stderr, "wick tokenizer import: %s\n", err.msg);
        return 1;
    }
    return 0;
}

int cmd_tokenizer(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "encode") == 0) return tokenizer_encode(argc - 1, argv + 1);
    if (strcmp(argv[1], "decode") == 0) return tokenizer_decode(argc - 1, argv + 1);
    if (strcmp(argv[1], "info") == 0) return tokenizer_info(argc - 1, argv + 1);
    if (strcmp(argv[1], "import") == 0) return tokenizer_import(argc - 1, argv + 1);
    fprintf(stderr, "wick tokenizer: unknown action '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
