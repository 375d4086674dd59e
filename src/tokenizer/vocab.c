/* Vocabulary from GGUF tokenizer metadata (spec §1, §6): token table, merge
 * ranks, special ids, EOG set, special-token partition list, decoded pieces. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

/* Token arrays longer than this are rejected: the largest real vocabularies
 * have ~260K entries. */
#define MAX_TOKENS (16u * 1024 * 1024)

static const char *const k_eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>",
    "<end_of_utterance>", NULL,
};
static const char *const k_eot_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>", "_<EOT>",
    "<｜end▁of▁sentence｜>", "<end_of_utterance>", NULL,
};
static const char *const k_eom_texts[] = {"<|eom_id|>", NULL};
static const char *const k_fim_pre_texts[] = {"<|fim_prefix|>", "<fim-prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", NULL};
static const char *const k_fim_suf_texts[] = {"<|fim_suffix|>", "<fim-suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", NULL};
static const char *const k_fim_mid_texts[] = {"<|fim_middle|>", "<fim-middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", NULL};
static const char *const k_fim_pad_texts[] = {"<|fim_pad|>", "<fim-pad>", "<PAD>", NULL};
static const char *const k_fim_rep_texts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", NULL};
static const char *const k_fim_sep_texts[] = {"<|file_sep|>", "<|file_separator|>", "<file_sep>", NULL};

static int get_arr(const gguf_file *f, const char *key, enum gguf_value_type want, bool required,
                   const gguf_kv **out, wk_error *err)
{
    const gguf_kv *kv = gguf_find_kv(f, key);
    *out = NULL;
    if (!kv) return required ? wk_fail(err, WK_EFORMAT, "missing key %s", key) : 0;
    if (kv->type != GGUF_T_ARRAY)
        return wk_fail(err, WK_EFORMAT, "key %s: expected an array", key);
    bool ok = kv->arr_type == want;
    if (want == GGUF_T_INT32) /* token_type: any integer element type is fine */
        ok = kv->arr_type <= GGUF_T_INT32 || kv->arr_type == GGUF_T_UINT64 || kv->arr_type == GGUF_T_INT64;
    if (want == GGUF_T_FLOAT32) ok = kv->arr_type == GGUF_T_FLOAT32 || kv->arr_type == GGUF_T_FLOAT64;
    if (!ok) return wk_fail(err, WK_EFORMAT, "key %s: unexpected array element type %d", key, (int)kv->arr_type);
    *out = kv;
    return 0;
}

/* Optional special id: TOK_NULL when absent, negative (some converters store
 * -1 for "none") or out of range (llama.cpp ignores those with a warning), so
 * that a bad id can never index past the token table. */
static int get_id(const gguf_file *f, const char *key, int32_t n_tokens, int32_t *out, wk_error *err)
{
    if (!gguf_find_kv(f, key)) return 0;
    int64_t v;
    int rc = gguf_get_i64(f, key, &v, err);
    if (rc) return rc;
    *out = (v >= 0 && v < n_tokens) ? (int32_t)v : TOK_NULL;
    return 0;
}

static int get_bool(const gguf_file *f, const char *key, bool *out, wk_error *err)
{
    if (!gguf_find_kv(f, key)) return 0;
    return gguf_get_bool(f, key, out, err);
}

static int32_t find_text(const tok_vocab *v, const char *s)
{
    return tok_map_get(&v->token_to_id, s, strlen(s), NULL, 0);
}

/* Auto-detects a special id by text when the GGUF does not give it, and forces
 * the token to CONTROL (llama.cpp does the same, warning about it). */
static void detect_special(tok_vocab *v, int32_t *id, const char *const *texts)
{
    if (*id != TOK_NULL) return;
    for (size_t i = 0; texts[i]; i++) {
        int32_t t = find_text(v, texts[i]);
        if (t >= 0) {
            *id = t;
            v->types[t] = TOK_TYPE_CONTROL;
            return;
        }
    }
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int cmp_special(const void *a, const void *b)
{
    const tok_special_ent *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int add_eog(tok_vocab *v, int32_t id, size_t cap)
{
    if (id == TOK_NULL) return 0;
    for (size_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id) return 0;
    if (v->n_eog >= cap) return 0;
    v->eog[v->n_eog++] = id;
    return 0;
}

/* Decoded bytes of every token, so that detokenization is a copy. */
static int build_pieces(tok_vocab *v, wk_error *err)
{
    size_t total = 0;
    for (int32_t i = 0; i < v->n_tokens; i++) total += v->text_len[i];
    v->piece_arena = malloc(total + 1);
    v->piece_off = malloc((size_t)v->n_tokens * sizeof *v->piece_off);
    v->piece_len = malloc((size_t)v->n_tokens * sizeof *v->piece_len);
    if (!v->piece_arena || !v->piece_off || !v->piece_len) return wk_fail(err, WK_ENOMEM, "out of memory");
    size_t o = 0;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        const char *t = v->text_arena + v->text_off[i];
        size_t n = v->text_len[i];
        v->piece_off[i] = o;
        enum tok_type ty = v->types[i];
        if (ty == TOK_TYPE_BYTE && v->model == TOK_MODEL_SPM) {
            unsigned b;
            if (n == 6 && sscanf(t, "<0x%2X>", &b) == 1) v->piece_arena[o++] = (char)b;
            else { memcpy(v->piece_arena + o, t, n); o += n; }
        } else if (ty == TOK_TYPE_NORMAL && v->model == TOK_MODEL_BPE) {
            /* reverse the byte table code point by code point (output never longer) */
            size_t k = 0;
            while (k < n) {
                uint32_t cp;
                size_t l = tok_utf8_decode(t + k, n - k, &cp);
                if (!l) { v->piece_arena[o++] = t[k++]; continue; }
                int b = tok_cp_to_byte(cp);
                if (b >= 0) v->piece_arena[o++] = (char)b;
                else { memcpy(v->piece_arena + o, t + k, l); o += l; }
                k += l;
            }
        } else if (ty == TOK_TYPE_NORMAL && v->model == TOK_MODEL_SPM) {
            /* "▁" (3 bytes) → " " (1 byte) */
            size_t k = 0;
            while (k < n) {
                if (k + 3 <= n && memcmp(t + k, "\xE2\x96\x81", 3) == 0) {
                    v->piece_arena[o++] = ' ';
                    k += 3;
                } else v->piece_arena[o++] = t[k++];
            }
        } else if (ty == TOK_TYPE_UNUSED || ty == TOK_TYPE_UNDEFINED) {
            /* nothing */
        } else { /* CONTROL, UNKNOWN, USER_DEFINED (and BPE BYTE): text as-is */
            memcpy(v->piece_arena + o, t, n);
            o += n;
        }
        v->piece_len[i] = (uint32_t)(o - v->piece_off[i]);
    }
    return 0;
}

int tok_load_from_gguf(tok_vocab **out, const gguf_file *f, wk_error *err)
{
    *out = NULL;
    int rc;
    gguf_str model;
    rc = gguf_get_str(f, "tokenizer.ggml.model", &model, err);
    if (rc) return rc;

    tok_vocab *v = calloc(1, sizeof *v);
    if (!v) return wk_fail(err, WK_ENOMEM, "out of memory");
    v->bos = v->eos = v->eot = v->eom = v->unk = v->pad = v->sep = TOK_NULL;
    v->fim_pre = v->fim_suf = v->fim_mid = v->fim_pad = v->fim_rep = v->fim_sep = TOK_NULL;
    for (int i = 0; i < 256; i++) v->byte_tokens[i] = TOK_NULL;

    if (model.len == 5 && memcmp(model.ptr, "llama", 5) == 0) v->model = TOK_MODEL_SPM;
    else if (model.len == 4 && memcmp(model.ptr, "gpt2", 4) == 0) v->model = TOK_MODEL_BPE;
    else {
        rc = wk_fail(err, WK_EUNSUPPORTED, "tokenizer.ggml.model '%.*s' is not supported (only llama, gpt2)",
                     (int)(model.len > 64 ? 64 : model.len), model.ptr);
        goto fail;
    }
    snprintf(v->model_name, sizeof v->model_name, "%s", v->model == TOK_MODEL_SPM ? "llama" : "gpt2");

    const gguf_kv *kv_tokens, *kv_types, *kv_scores, *kv_merges;
    if ((rc = get_arr(f, "tokenizer.ggml.tokens", GGUF_T_STRING, true, &kv_tokens, err))) goto fail;
    if ((rc = get_arr(f, "tokenizer.ggml.token_type", GGUF_T_INT32, false, &kv_types, err))) goto fail;
    if ((rc = get_arr(f, "tokenizer.ggml.scores", GGUF_T_FLOAT32, false, &kv_scores, err))) goto fail;
    if ((rc = get_arr(f, "tokenizer.ggml.merges", GGUF_T_STRING, v->model == TOK_MODEL_BPE, &kv_merges, err)))
        goto fail;
    uint64_t n = kv_tokens->arr_count;
    if (n == 0 || n > MAX_TOKENS) {
        rc = wk_fail(err, WK_EFORMAT, "tokenizer.ggml.tokens: %llu entries (expected 1..%u)",
                     (unsigned long long)n, MAX_TOKENS);
        goto fail;
    }
    if (kv_types && kv_types->arr_count != n) {
        rc = wk_fail(err, WK_EFORMAT, "tokenizer.ggml.token_type has %llu entries, tokens has %llu",
                     (unsigned long long)kv_types->arr_count, (unsigned long long)n);
        goto fail;
    }
    if (kv_scores && kv_scores->arr_count != n) {
        rc = wk_fail(err, WK_EFORMAT, "tokenizer.ggml.scores has %llu entries, tokens has %llu",
                     (unsigned long long)kv_scores->arr_count, (unsigned long long)n);
        goto fail;
    }
    v->n_tokens = (int32_t)n;

    /* token texts (empty texts become "[EMPTY_i]" as in llama.cpp, so that they
     * cannot match anything) */
    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s = gguf_arr_str(kv_tokens, i);
        total += (s.len ? s.len : 32) + 1;
    }
    v->text_arena = malloc(total);
    v->text_off = malloc(n * sizeof *v->text_off);
    v->text_len = malloc(n * sizeof *v->text_len);
    v->types = malloc(n);
    v->scores = kv_scores ? malloc(n * sizeof *v->scores) : NULL;
    if (!v->text_arena || !v->text_off || !v->text_len || !v->types || (kv_scores && !v->scores)) {
        rc = wk_fail(err, WK_ENOMEM, "out of memory loading %llu tokens", (unsigned long long)n);
        goto fail;
    }
    size_t o = 0;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s = gguf_arr_str(kv_tokens, i);
        v->text_off[i] = o;
        if (s.len) {
            memcpy(v->text_arena + o, s.ptr, s.len);
            o += s.len;
        } else {
            o += (size_t)snprintf(v->text_arena + o, 32, "[EMPTY_%llu]", (unsigned long long)i);
        }
        v->text_len[i] = (uint32_t)(o - v->text_off[i]);
        v->text_arena[o++] = '\0';
        int64_t t = kv_types ? gguf_arr_i64(kv_types, i) : TOK_TYPE_NORMAL;
        v->types[i] = (t >= TOK_TYPE_NORMAL && t <= TOK_TYPE_BYTE) ? (uint8_t)t : TOK_TYPE_NORMAL;
        if (v->scores) v->scores[i] = (float)gguf_arr_f64(kv_scores, i);
    }
    if (tok_map_init(&v->token_to_id, n)) {
        rc = wk_fail(err, WK_ENOMEM, "out of memory");
        goto fail;
    }
    for (uint64_t i = 0; i < n; i++) /* later ids win on duplicate texts, as in llama.cpp */
        if (tok_map_put(&v->token_to_id, v->text_arena + v->text_off[i], v->text_len[i], NULL, 0,
                        (int32_t)i)) {
            rc = wk_fail(err, WK_ENOMEM, "out of memory");
            goto fail;
        }

    /* merges: "left right", split at the first space at index >= 1 */
    if (kv_merges) {
        uint64_t nm = kv_merges->arr_count;
        size_t mt = 0;
        for (uint64_t i = 0; i < nm; i++) mt += gguf_arr_str(kv_merges, i).len + 1;
        v->merge_arena = malloc(mt + 1);
        if (!v->merge_arena || tok_map_init(&v->merge_rank, nm)) {
            rc = wk_fail(err, WK_ENOMEM, "out of memory loading %llu merges", (unsigned long long)nm);
            goto fail;
        }
        size_t mo = 0;
        for (uint64_t i = 0; i < nm; i++) {
            gguf_str s = gguf_arr_str(kv_merges, i);
            const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
            if (!sp) {
                rc = wk_fail(err, WK_EFORMAT, "tokenizer.ggml.merges[%llu] '%.*s' has no space",
                             (unsigned long long)i, (int)(s.len > 64 ? 64 : s.len), s.ptr);
                goto fail;
            }
            char *m = v->merge_arena + mo;
            memcpy(m, s.ptr, s.len);
            mo += s.len + 1;
            size_t ll = (size_t)(sp - s.ptr);
            if (tok_map_put(&v->merge_rank, m, ll, m + ll + 1, s.len - ll - 1, (int32_t)i)) {
                rc = wk_fail(err, WK_ENOMEM, "out of memory");
                goto fail;
            }
        }
        v->n_merges = nm;
    }

    /* pre-tokenizer (BPE only; SPM files carry "default" or nothing) */
    gguf_str pre = {0};
    bool have_pre = gguf_find_kv(f, "tokenizer.ggml.pre") != NULL;
    if (have_pre && (rc = gguf_get_str(f, "tokenizer.ggml.pre", &pre, err))) goto fail;
    snprintf(v->pre_name, sizeof v->pre_name, "%.*s", have_pre ? (int)(pre.len > 63 ? 63 : pre.len) : 7,
             have_pre ? pre.ptr : "default");
    bool add_bos_default = false;
    if (v->model == TOK_MODEL_BPE) {
        if ((rc = tok_pretok_new(&v->pretok, have_pre ? v->pre_name : NULL, &v->ignore_merges,
                                 &add_bos_default, err)))
            goto fail;
        v->add_bos = add_bos_default;
        v->add_eos = false;
        v->add_space_prefix = false;
    } else {
        v->add_bos = true;
        v->add_eos = false;
        v->add_space_prefix = true;
        v->bos = n > 1 ? 1 : TOK_NULL;
        v->eos = n > 2 ? 2 : TOK_NULL;
        v->unk = 0;
    }

    int32_t nt = v->n_tokens;
    if ((rc = get_id(f, "tokenizer.ggml.bos_token_id", nt, &v->bos, err)) ||
        (rc = get_id(f, "tokenizer.ggml.eos_token_id", nt, &v->eos, err)) ||
        (rc = get_id(f, "tokenizer.ggml.eot_token_id", nt, &v->eot, err)) ||
        (rc = get_id(f, "tokenizer.ggml.eom_token_id", nt, &v->eom, err)) ||
        (rc = get_id(f, "tokenizer.ggml.unknown_token_id", nt, &v->unk, err)) ||
        (rc = get_id(f, "tokenizer.ggml.seperator_token_id", nt, &v->sep, err)) ||
        (rc = get_id(f, "tokenizer.ggml.padding_token_id", nt, &v->pad, err)) ||
        (rc = get_id(f, "tokenizer.ggml.fim_pre_token_id", nt, &v->fim_pre, err)) ||
        (rc = get_id(f, "tokenizer.ggml.fim_suf_token_id", nt, &v->fim_suf, err)) ||
        (rc = get_id(f, "tokenizer.ggml.fim_mid_token_id", nt, &v->fim_mid, err)) ||
        (rc = get_id(f, "tokenizer.ggml.fim_pad_token_id", nt, &v->fim_pad, err)) ||
        (rc = get_id(f, "tokenizer.ggml.fim_rep_token_id", nt, &v->fim_rep, err)) ||
        (rc = get_id(f, "tokenizer.ggml.fim_sep_token_id", nt, &v->fim_sep, err)) ||
        (rc = get_id(f, "tokenizer.ggml.prefix_token_id", nt, &v->fim_pre, err)) ||
        (rc = get_id(f, "tokenizer.ggml.suffix_token_id", nt, &v->fim_suf, err)) ||
        (rc = get_id(f, "tokenizer.ggml.middle_token_id", nt, &v->fim_mid, err)) ||
        (rc = get_bool(f, "tokenizer.ggml.add_bos_token", &v->add_bos, err)) ||
        (rc = get_bool(f, "tokenizer.ggml.add_eos_token", &v->add_eos, err)) ||
        (rc = get_bool(f, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, err)))
        goto fail;

    detect_special(v, &v->eot, k_eot_texts);
    detect_special(v, &v->eom, k_eom_texts);
    detect_special(v, &v->fim_pre, k_fim_pre_texts);
    detect_special(v, &v->fim_suf, k_fim_suf_texts);
    detect_special(v, &v->fim_mid, k_fim_mid_texts);
    detect_special(v, &v->fim_pad, k_fim_pad_texts);
    detect_special(v, &v->fim_rep, k_fim_rep_texts);
    detect_special(v, &v->fim_sep, k_fim_sep_texts);

    /* EOG set (spec §1.2); tokens found by text are forced to CONTROL */
    size_t eog_cap = 32;
    v->eog = malloc(eog_cap * sizeof *v->eog);
    if (!v->eog) {
        rc = wk_fail(err, WK_ENOMEM, "out of memory");
        goto fail;
    }
    add_eog(v, v->eos, eog_cap);
    add_eog(v, v->eot, eog_cap);
    add_eog(v, v->eom, eog_cap);
    add_eog(v, v->fim_pad, eog_cap);
    add_eog(v, v->fim_rep, eog_cap);
    add_eog(v, v->fim_sep, eog_cap);
    for (size_t i = 0; k_eog_texts[i]; i++) {
        int32_t t = find_text(v, k_eog_texts[i]);
        if (t >= 0) {
            v->types[t] = TOK_TYPE_CONTROL;
            add_eog(v, t, eog_cap);
        }
    }
    qsort(v->eog, v->n_eog, sizeof *v->eog, cmp_i32);

    /* CONTROL tokens named "...unused..." are placeholders */
    for (int32_t i = 0; i < nt; i++)
        if (v->types[i] == TOK_TYPE_CONTROL && strstr(v->text_arena + v->text_off[i], "unused"))
            v->types[i] = TOK_TYPE_UNUSED;

    /* partition list (spec §3) */
    size_t ns = 0;
    for (int32_t i = 0; i < nt; i++) {
        uint8_t t = v->types[i];
        if (t == TOK_TYPE_CONTROL || t == TOK_TYPE_USER_DEFINED || t == TOK_TYPE_UNKNOWN) ns++;
    }
    v->specials = malloc((ns ? ns : 1) * sizeof *v->specials);
    if (!v->specials) {
        rc = wk_fail(err, WK_ENOMEM, "out of memory");
        goto fail;
    }
    for (int32_t i = 0; i < nt; i++) {
        uint8_t t = v->types[i];
        if (t == TOK_TYPE_CONTROL || t == TOK_TYPE_USER_DEFINED || t == TOK_TYPE_UNKNOWN)
            v->specials[v->n_specials++] = (tok_special_ent){.id = i, .len = v->text_len[i]};
    }
    qsort(v->specials, v->n_specials, sizeof *v->specials, cmp_special);

    /* SPM byte fallback ids */
    if (v->model == TOK_MODEL_SPM) {
        for (int b = 0; b < 256; b++) {
            char hex[8];
            snprintf(hex, sizeof hex, "<0x%02X>", b);
            int32_t t = find_text(v, hex);
            if (t < 0) {
                char one = (char)b;
                t = tok_map_get(&v->token_to_id, &one, 1, NULL, 0);
            }
            v->byte_tokens[b] = t;
        }
    }

    if ((rc = build_pieces(v, err))) goto fail;
    *out = v;
    return 0;
fail:
    tok_free(v);
    return rc;
}

void tok_free(tok_vocab *v)
{
    if (!v) return;
    free(v->text_arena);
    free(v->text_off);
    free(v->text_len);
    free(v->scores);
    free(v->types);
    tok_map_free(&v->token_to_id);
    free(v->piece_arena);
    free(v->piece_off);
    free(v->piece_len);
    free(v->merge_arena);
    tok_map_free(&v->merge_rank);
    tok_pretok_free(v->pretok);
    free(v->specials);
    free(v->eog);
    free(v);
}

/* ---- queries ---- */
int32_t tok_n_vocab(const tok_vocab *v) { return v->n_tokens; }
enum tok_model tok_model_kind(const tok_vocab *v) { return v->model; }
const char *tok_model_name(const tok_vocab *v) { return v->model_name; }
const char *tok_pre_name(const tok_vocab *v) { return v->pre_name; }

const char *tok_token_text(const tok_vocab *v, int32_t id, size_t *len)
{
    if (id < 0 || id >= v->n_tokens) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = v->text_len[id];
    return v->text_arena + v->text_off[id];
}

enum tok_type tok_token_type(const tok_vocab *v, int32_t id)
{
    return (id < 0 || id >= v->n_tokens) ? TOK_TYPE_UNDEFINED : (enum tok_type)v->types[id];
}

float tok_token_score(const tok_vocab *v, int32_t id)
{
    return (id < 0 || id >= v->n_tokens || !v->scores) ? 0.0f : v->scores[id];
}

int32_t tok_find(const tok_vocab *v, const char *text, size_t len)
{
    return tok_map_get(&v->token_to_id, text, len, NULL, 0);
}

int32_t tok_bos(const tok_vocab *v) { return v->bos; }
int32_t tok_eos(const tok_vocab *v) { return v->eos; }
int32_t tok_eot(const tok_vocab *v) { return v->eot; }
int32_t tok_eom(const tok_vocab *v) { return v->eom; }
int32_t tok_unk(const tok_vocab *v) { return v->unk; }
int32_t tok_pad(const tok_vocab *v) { return v->pad; }
bool tok_add_bos(const tok_vocab *v) { return v->add_bos; }
bool tok_add_eos(const tok_vocab *v) { return v->add_eos; }

bool tok_is_eog(const tok_vocab *v, int32_t id)
{
    for (size_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id) return true;
    return false;
}

size_t tok_eog_ids(const tok_vocab *v, const int32_t **ids)
{
    *ids = v->eog;
    return v->n_eog;
}

bool tok_is_control(const tok_vocab *v, int32_t id)
{
    enum tok_type t = tok_token_type(v, id);
    return t == TOK_TYPE_CONTROL || t == TOK_TYPE_UNKNOWN;
}
