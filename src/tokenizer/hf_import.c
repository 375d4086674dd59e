/* Hugging Face tokenizer.json (+ tokenizer_config.json) → vocab-only GGUF
 * with llama.cpp-style tokenizer metadata (spec §1, §1.1). Byte-level BPE
 * only; the normalizer (e.g. Qwen's NFC) is not representable in GGUF and is
 * ignored, as llama.cpp does. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

/* Vocab ids beyond this are rejected (hostile or broken files). */
#define MAX_IMPORT_TOKENS (4u * 1024 * 1024)

/* Split regexes of known pre-tokenizers, as they appear in tokenizer.json. */
static const struct {
    const char *pre;
    const char *regex;
} k_known_regex[] = {
    {"qwen2", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    {"qwen35", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    {"llama-bpe", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    {"gpt-2", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"},
};

typedef struct import_state {
    char **tokens;   /* owned strings, n entries */
    int32_t *types;
    uint32_t n;
    char **merges;
    size_t n_merges;
    tok_map text_to_id;
} import_state;

static void state_free(import_state *s)
{
    if (s->tokens)
        for (uint32_t i = 0; i < s->n; i++) free(s->tokens[i]);
    free(s->tokens);
    free(s->types);
    if (s->merges)
        for (size_t i = 0; i < s->n_merges; i++) free(s->merges[i]);
    free(s->merges);
    tok_map_free(&s->text_to_id);
}

/* Finds the pre-tokenizer name from the "pre_tokenizer" object. */
static int detect_pre(json_t *pre_tok, char *out, size_t cap, wk_error *err)
{
    if (!json_is_object(pre_tok))
        return wk_fail(err, WK_EUNSUPPORTED, "tokenizer.json: pre_tokenizer missing (pass a pre name explicitly)");
    const char *type = json_string_value(json_object_get(pre_tok, "type"));
    if (type && strcmp(type, "ByteLevel") == 0) {
        json_t *ur = json_object_get(pre_tok, "use_regex");
        if (!ur || json_is_true(ur)) {
            snprintf(out, cap, "gpt-2");
            return 0;
        }
        return wk_fail(err, WK_EUNSUPPORTED, "tokenizer.json: ByteLevel pre_tokenizer without regex is not supported");
    }
    json_t *list = json_object_get(pre_tok, "pretokenizers");
    if (!type || strcmp(type, "Sequence") != 0 || !json_is_array(list))
        return wk_fail(err, WK_EUNSUPPORTED, "tokenizer.json: pre_tokenizer type '%s' is not supported",
                       type ? type : "(none)");
    size_t i;
    json_t *item;
    json_array_foreach(list, i, item) {
        const char *t = json_string_value(json_object_get(item, "type"));
        if (!t || strcmp(t, "Split") != 0) continue;
        const char *re = json_string_value(json_object_get(json_object_get(item, "pattern"), "Regex"));
        if (!re) continue;
        for (size_t k = 0; k < sizeof k_known_regex / sizeof k_known_regex[0]; k++)
            if (strcmp(re, k_known_regex[k].regex) == 0) {
                snprintf(out, cap, "%s", k_known_regex[k].pre);
                return 0;
            }
        return wk_fail(err, WK_EUNSUPPORTED,
                       "tokenizer.json: pre_tokenizer Split regex is not a known one (%.120s); pass a pre name explicitly",
                       re);
    }
    return wk_fail(err, WK_EUNSUPPORTED, "tokenizer.json: no Split regex in pre_tokenizer.pretokenizers");
}

static int set_token(import_state *s, size_t id, const char *text, int32_t type, wk_error *err)
{
    if (id >= s->n) return wk_fail(err, WK_EFORMAT, "tokenizer.json: token id %zu out of range", id);
    char *copy = strdup(text);
    if (!copy) return wk_fail(err, WK_ENOMEM, "out of memory");
    free(s->tokens[id]);
    s->tokens[id] = copy;
    s->types[id] = type;
    return 0;
}

static bool looks_special(const char *t)
{
    size_t n = strlen(t);
    return n >= 4 && strncmp(t, "<|", 2) == 0 && strcmp(t + n - 2, "|>") == 0;
}

/* A special token named in tokenizer_config.json: a string, an AddedToken
 * object {"content": ...} or null. Returns TOK_NULL if absent/unknown. */
static int32_t config_token_id(const import_state *s, json_t *cfg, const char *key)
{
    json_t *t = json_object_get(cfg, key);
    const char *text = json_is_string(t) ? json_string_value(t)
                                         : json_string_value(json_object_get(t, "content"));
    if (!text) return TOK_NULL;
    return tok_map_get(&s->text_to_id, text, strlen(text), NULL, 0);
}

static int load_vocab(import_state *s, json_t *root, wk_error *err)
{
    json_t *model = json_object_get(root, "model");
    const char *mtype = json_string_value(json_object_get(model, "type"));
    if (!mtype || strcmp(mtype, "BPE") != 0)
        return wk_fail(err, WK_EUNSUPPORTED, "tokenizer.json: model.type '%s' is not supported (only BPE)",
                       mtype ? mtype : "(none)");
    json_t *vocab = json_object_get(model, "vocab");
    json_t *merges = json_object_get(model, "merges");
    json_t *added = json_object_get(root, "added_tokens");
    if (!json_is_object(vocab)) return wk_fail(err, WK_EFORMAT, "tokenizer.json: model.vocab is not an object");
    if (!json_is_array(merges)) return wk_fail(err, WK_EFORMAT, "tokenizer.json: model.merges is not an array");

    /* size = highest id + 1 */
    json_int_t max_id = -1;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0)
            return wk_fail(err, WK_EFORMAT, "tokenizer.json: model.vocab[\"%.60s\"] is not a non-negative integer", key);
        if (json_integer_value(val) > max_id) max_id = json_integer_value(val);
    }
    size_t i;
    json_array_foreach(added, i, val) {
        json_t *id = json_object_get(val, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || !json_is_string(json_object_get(val, "content")))
            return wk_fail(err, WK_EFORMAT, "tokenizer.json: added_tokens[%zu] needs an id and a content", i);
        if (json_integer_value(id) > max_id) max_id = json_integer_value(id);
    }
    if (max_id < 0 || max_id >= (json_int_t)MAX_IMPORT_TOKENS)
        return wk_fail(err, WK_EFORMAT, "tokenizer.json: vocabulary size %lld out of range", (long long)max_id + 1);
    s->n = (uint32_t)max_id + 1;
    s->tokens = calloc(s->n, sizeof *s->tokens);
    s->types = calloc(s->n, sizeof *s->types);
    if (!s->tokens || !s->types) return wk_fail(err, WK_ENOMEM, "out of memory");

    int rc;
    json_object_foreach(vocab, key, val)
        if ((rc = set_token(s, (size_t)json_integer_value(val), key, TOK_TYPE_NORMAL, err))) return rc;
    json_array_foreach(added, i, val) {
        const char *content = json_string_value(json_object_get(val, "content"));
        bool special = json_is_true(json_object_get(val, "special"));
        int32_t type = (special || looks_special(content)) ? TOK_TYPE_CONTROL : TOK_TYPE_USER_DEFINED;
        if ((rc = set_token(s, (size_t)json_integer_value(json_object_get(val, "id")), content, type, err)))
            return rc;
    }
    for (uint32_t k = 0; k < s->n; k++) {
        if (s->tokens[k]) continue;
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%u]", k);
        if ((rc = set_token(s, k, pad, TOK_TYPE_UNUSED, err))) return rc;
    }
    if (tok_map_init(&s->text_to_id, s->n)) return wk_fail(err, WK_ENOMEM, "out of memory");
    for (uint32_t k = 0; k < s->n; k++)
        if (tok_map_put(&s->text_to_id, s->tokens[k], strlen(s->tokens[k]), NULL, 0, (int32_t)k))
            return wk_fail(err, WK_ENOMEM, "out of memory");

    /* merges: "a b" strings (older files) or ["a", "b"] pairs (newer) */
    s->n_merges = json_array_size(merges);
    s->merges = calloc(s->n_merges ? s->n_merges : 1, sizeof *s->merges);
    if (!s->merges) return wk_fail(err, WK_ENOMEM, "out of memory");
    json_array_foreach(merges, i, val) {
        if (json_is_string(val)) {
            s->merges[i] = strdup(json_string_value(val));
        } else if (json_is_array(val) && json_array_size(val) == 2 &&
                   json_is_string(json_array_get(val, 0)) && json_is_string(json_array_get(val, 1))) {
            const char *a = json_string_value(json_array_get(val, 0));
            const char *b = json_string_value(json_array_get(val, 1));
            size_t la = strlen(a), lb = strlen(b);
            s->merges[i] = malloc(la + lb + 2);
            if (s->merges[i]) {
                memcpy(s->merges[i], a, la);
                s->merges[i][la] = ' ';
                memcpy(s->merges[i] + la + 1, b, lb + 1);
            }
        } else {
            return wk_fail(err, WK_EFORMAT, "tokenizer.json: model.merges[%zu] is neither \"a b\" nor [a, b]", i);
        }
        if (!s->merges[i]) return wk_fail(err, WK_ENOMEM, "out of memory");
    }
    return 0;
}

/* Sets the tokenizer keys (and general.architecture / general.name when
 * asked) on w; setter failures are kept by the writer for begin_data. */
static void set_kvs(gguf_writer *w, const import_state *s, const char *pre, json_t *cfg, const tok_import_opts *opts)
{
    if (opts && opts->architecture) gguf_writer_set_str(w, "general.architecture", opts->architecture);
    if (opts && opts->name) gguf_writer_set_str(w, "general.name", opts->name);
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)s->tokens, s->n);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_T_INT32, s->types, s->n);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)s->merges, s->n_merges);
    if (!cfg) return;
    static const struct { const char *cfg_key, *gguf_key; } ids[] = {
        {"bos_token", "tokenizer.ggml.bos_token_id"},
        {"eos_token", "tokenizer.ggml.eos_token_id"},
        {"unk_token", "tokenizer.ggml.unknown_token_id"},
        {"pad_token", "tokenizer.ggml.padding_token_id"},
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        int32_t id = config_token_id(s, cfg, ids[i].cfg_key);
        if (id >= 0) gguf_writer_set_u32(w, ids[i].gguf_key, (uint32_t)id);
    }
    json_t *b = json_object_get(cfg, "add_bos_token");
    if (json_is_boolean(b)) gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", json_is_true(b));
    b = json_object_get(cfg, "add_eos_token");
    if (json_is_boolean(b)) gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", json_is_true(b));
    json_t *tpl = json_object_get(cfg, "chat_template");
    if (json_is_string(tpl)) {
        gguf_writer_set_str(w, "tokenizer.chat_template", json_string_value(tpl));
    } else if (json_is_array(tpl)) { /* [{name, template}, ...] */
        size_t i;
        json_t *item;
        json_array_foreach(tpl, i, item) {
            const char *name = json_string_value(json_object_get(item, "name"));
            const char *text = json_string_value(json_object_get(item, "template"));
            if (!name || !text) continue;
            char key[256];
            if (strcmp(name, "default") == 0) snprintf(key, sizeof key, "tokenizer.chat_template");
            else snprintf(key, sizeof key, "tokenizer.chat_template.%s", name);
            gguf_writer_set_str(w, key, text);
        }
    }
}

int tok_import_hf_kvs(gguf_writer *w, const char *tokenizer_json_path, const char *config_path,
                      const tok_import_opts *opts, wk_error *err)
{
    json_error_t jerr;
    json_t *root = json_load_file(tokenizer_json_path, 0, &jerr);
    if (!root)
        return wk_fail(err, WK_EFORMAT, "%s: line %d: %s", tokenizer_json_path, jerr.line, jerr.text);
    json_t *cfg = NULL;
    int rc = 0;
    import_state s = {0};
    if (config_path) {
        cfg = json_load_file(config_path, 0, &jerr);
        if (!cfg) {
            rc = wk_fail(err, WK_EFORMAT, "%s: line %d: %s", config_path, jerr.line, jerr.text);
            goto done;
        }
        if (!json_is_object(cfg)) {
            rc = wk_fail(err, WK_EFORMAT, "%s: not a JSON object", config_path);
            goto done;
        }
    }
    char pre[64];
    if (opts && opts->pre) {
        tok_pretok *probe;
        bool im, ab;
        if ((rc = tok_pretok_new(&probe, opts->pre, &im, &ab, err))) goto done;
        tok_pretok_free(probe);
        snprintf(pre, sizeof pre, "%s", opts->pre);
    }
    else if ((rc = detect_pre(json_object_get(root, "pre_tokenizer"), pre, sizeof pre, err))) goto done;
    if ((rc = load_vocab(&s, root, err))) goto done;
    set_kvs(w, &s, pre, cfg, opts);
done:
    state_free(&s);
    json_decref(cfg);
    json_decref(root);
    return rc;
}

int tok_import_hf(const char *tokenizer_json_path, const char *config_path, const char *out_path,
                  const tok_import_opts *opts, wk_error *err)
{
    gguf_writer *w;
    int rc = gguf_writer_new(&w, out_path, 32, err);
    if (rc) return rc;
    if (!opts || !opts->name) gguf_writer_set_str(w, "general.name", "tokenizer");
    if ((rc = tok_import_hf_kvs(w, tokenizer_json_path, config_path, opts, err)) ||
        (rc = gguf_writer_begin_data(w, err))) {
        gguf_writer_abort(w);
        return rc;
    }
    return gguf_writer_finish(w, err);
}
