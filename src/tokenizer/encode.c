/* tok_encode: special-token partitioning (spec §3), then BPE or SPM on every
 * raw fragment, BOS/EOS around the result (spec §6). */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

typedef struct frag {
    int32_t id; /* token id, or -1 for raw text */
    uint32_t off, len;
} frag;

typedef struct frag_list {
    frag *v;
    size_t n, cap;
} frag_list;

static int frag_push(frag_list *l, int32_t id, size_t off, size_t len)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        frag *p = realloc(l->v, cap * sizeof *p);
        if (!p) return WK_ENOMEM;
        l->v = p;
        l->cap = cap;
    }
    l->v[l->n++] = (frag){.id = id, .off = (uint32_t)off, .len = (uint32_t)len};
    return 0;
}

/* Splits the raw fragments of *cur at every occurrence of one special token's
 * text, left to right, non-overlapping. Longest tokens go first (caller). */
static int split_on_token(const char *text, const char *tt, size_t tl, int32_t id, frag_list *cur,
                          frag_list *next)
{
    next->n = 0;
    for (size_t i = 0; i < cur->n; i++) {
        frag f = cur->v[i];
        if (f.id >= 0 || f.len < tl) {
            if (frag_push(next, f.id, f.off, f.len)) return WK_ENOMEM;
            continue;
        }
        size_t pos = f.off, end = (size_t)f.off + f.len;
        for (;;) {
            const char *m = memmem(text + pos, end - pos, tt, tl);
            if (!m) break;
            size_t at = (size_t)(m - text);
            if (at > pos && frag_push(next, -1, pos, at - pos)) return WK_ENOMEM;
            if (frag_push(next, id, at, tl)) return WK_ENOMEM;
            pos = at + tl;
        }
        if (pos < end && frag_push(next, -1, pos, end - pos)) return WK_ENOMEM;
    }
    frag_list swap = *cur;
    *cur = *next;
    *next = swap;
    return 0;
}

static int partition(const tok_vocab *v, const char *text, size_t len, int special,
                     frag_list *out)
{
    frag_list tmp = {0};
    int rc = frag_push(out, -1, 0, len);
    for (size_t s = 0; !rc && s < v->n_specials; s++) {
        int32_t id = v->specials[s].id;
        uint8_t ty = v->types[id];
        if (special == TOK_SPECIAL_NONE) break;
        if (special == TOK_SPECIAL_USER_DEFINED && (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNKNOWN))
            continue;
        size_t tl = v->specials[s].len;
        const char *tt = v->text_arena + v->text_off[id];
        if (tl == 0 || tl > len) continue;
        /* cheap filter: most special texts never occur in a given input */
        if (!memmem(text, len, tt, tl)) continue;
        rc = split_on_token(text, tt, tl, id, out, &tmp);
    }
    free(tmp.v);
    return rc;
}

int tok_encode_append(const tok_vocab *v, const char *text, size_t len, bool add_special,
                      int special, int32_t **ids, size_t *n_ids, size_t *cap, wk_error *err)
{
    if (!v || (!text && len) || !ids || !n_ids || !cap)
        return wk_fail(err, WK_EINVAL, "tok_encode: NULL argument");
    if (len > UINT32_MAX / 4)
        return wk_fail(err, WK_ERANGE, "tok_encode: text of %zu bytes is too long", len);

    tok_ids out = {.v = *ids, .n = *n_ids, .cap = *cap};
    tok_scratch sc = {0};
    frag_list frags = {0};
    int rc = 0;

    bool oom;
    size_t clean_len = 0;
    char *clean = len ? tok_utf8_sanitize(text, len, &clean_len, &oom) : NULL;
    if (len && !clean && oom) {
        rc = wk_fail(err, WK_ENOMEM, "out of memory");
        goto done;
    }
    if (clean) {
        text = clean;
        len = clean_len;
    }

    if (add_special && v->add_bos && v->bos != TOK_NULL && tok_ids_push(&out, v->bos)) goto oom;
    if (len) {
        if (partition(v, text, len, special, &frags)) goto oom;
        /* SPM: a raw fragment at the start or after a special token gets "▁";
         * appending continues the caller's sequence, so look at its last id */
        bool prev_special = true;
        if (out.n > 0 && out.v[out.n - 1] >= 0 && out.v[out.n - 1] < v->n_tokens) {
            uint8_t t = v->types[out.v[out.n - 1]];
            prev_special = t == TOK_TYPE_CONTROL || t == TOK_TYPE_USER_DEFINED || t == TOK_TYPE_UNKNOWN;
        }
        for (size_t i = 0; i < frags.n; i++) {
            frag f = frags.v[i];
            if (f.id >= 0) {
                if (tok_ids_push(&out, f.id)) goto oom;
                prev_special = true;
                continue;
            }
            if (v->model == TOK_MODEL_BPE)
                rc = tok_bpe_fragment(v, text + f.off, f.len, &sc, &out, err);
            else
                rc = tok_spm_fragment(v, text + f.off, f.len, v->add_space_prefix && prev_special, &sc,
                                      &out, err);
            if (rc) goto done;
            prev_special = false;
        }
    }
    if (add_special && v->add_eos && v->eos != TOK_NULL && tok_ids_push(&out, v->eos)) goto oom;
    goto done;
oom:
    rc = wk_fail(err, WK_ENOMEM, "out of memory tokenizing %zu bytes", len);
done:
    *ids = out.v;
    *n_ids = out.n;
    *cap = out.cap;
    free(frags.v);
    tok_scratch_free(&sc);
    free(clean);
    return rc;
}

int tok_encode(const tok_vocab *v, const char *text, size_t len, bool add_special,
               int special, int32_t **ids, size_t *n_ids, wk_error *err)
{
    if (!ids || !n_ids) return wk_fail(err, WK_EINVAL, "tok_encode: NULL argument");
    int32_t *buf = NULL;
    size_t n = 0, cap = 0;
    int rc = tok_encode_append(v, text, len, add_special, special, &buf, &n, &cap, err);
    if (rc) {
        free(buf);
        *ids = NULL;
        *n_ids = 0;
        return rc;
    }
    if (n == 0) {
        free(buf);
        buf = NULL;
    }
    *ids = buf;
    *n_ids = n;
    return 0;
}
