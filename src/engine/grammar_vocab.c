/* Token byte strings of a vocabulary and their prefix tree, built once per
 * model. Byte-level BPE pieces are already bytes here: tok_token_piece
 * undoes the GPT-2 byte mapping (and SentencePiece's ▁ and <0xXX>). */
#include <stdlib.h>
#include <string.h>

#include "engine/grammar_impl.h"

/* Longer tokens are not real vocabulary entries (and would need a deeper
 * walk stack): never allowed. */
#define MAX_TOKEN_BYTES 4096

typedef struct tok_ref {
    const char *s;
    uint32_t len;
    int32_t id;
} tok_ref;

static int cmp_bytes(const char *a, size_t na, const char *b, size_t nb)
{
    size_t n = na < nb ? na : nb;
    int c = n ? memcmp(a, b, n) : 0;
    if (c) return c;
    return na < nb ? -1 : na > nb;
}

static int cmp_ref(const void *x, const void *y)
{
    const tok_ref *a = x, *b = y;
    int c = cmp_bytes(a->s, a->len, b->s, b->len);
    return c ? c : (a->id > b->id) - (a->id < b->id);
}

void gram_vocab_free(gram_vocab *gv)
{
    if (!gv) return;
    free(gv->kind);
    free(gv->bytes);
    free(gv->off);
    free(gv->len);
    free(gv->eog);
    free(gv->special_sorted);
    free(gv->node_byte);
    free(gv->node_depth);
    free(gv->node_skip);
    free(gv->tok_begin);
    free(gv->tok_ids);
    free(gv->node_bulk);
    free(gv->bulk);
    free(gv);
}

int32_t gram_vocab_n_tokens(const gram_vocab *gv) { return gv->n_tokens; }

size_t gram_mask_words(const gram_vocab *gv) { return ((size_t)gv->n_tokens + 31) / 32; }

int32_t gram_vocab_find_special(const gram_vocab *gv, const char *text, size_t len)
{
    size_t lo = 0, hi = gv->n_special;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int32_t id = gv->special_sorted[mid];
        int c = cmp_bytes(gv->bytes + gv->off[id], gv->len[id], text, len);
        if (c == 0) {
            /* the lowest id among equal texts */
            while (mid > 0) {
                int32_t p = gv->special_sorted[mid - 1];
                if (cmp_bytes(gv->bytes + gv->off[p], gv->len[p], text, len)) break;
                mid--;
            }
            return gv->special_sorted[mid];
        }
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

/* The byte use of every subtree with at least GRAM_BULK_TOKENS tokens
 * (children come after their parent in preorder: one backward pass). */
static int bulk_subtrees(gram_vocab *gv, const uint32_t *parent)
{
    uint32_t nn = gv->n_nodes;
    gram_byte_use *use = calloc(nn ? nn : 1, sizeof *use);
    gv->node_bulk = malloc((nn ? nn : 1) * sizeof *gv->node_bulk);
    if (!use || !gv->node_bulk) {
        free(use);
        return WK_ENOMEM;
    }
    size_t n_bulk = 0;
    for (uint32_t i = nn; i-- > 0;) {
        uint8_t b = gv->node_byte[i];
        if (b < 128) use[i].ascii[b >> 6] |= 1ull << (b & 63);
        else use[i].high = true;
        if (parent[i] != GRAM_NONE) {
            gram_byte_use *p = &use[parent[i]];
            p->ascii[0] |= use[i].ascii[0];
            p->ascii[1] |= use[i].ascii[1];
            p->high |= use[i].high;
        }
        n_bulk += gv->tok_begin[gv->node_skip[i]] - gv->tok_begin[i] >= GRAM_BULK_TOKENS;
    }
    gv->bulk = malloc((n_bulk ? n_bulk : 1) * sizeof *gv->bulk);
    int8_t *dec = malloc((gv->max_depth + 1) * sizeof *dec);
    if (!gv->bulk || !dec) {
        free(use);
        free(dec);
        return WK_ENOMEM;
    }
    size_t k = 0;
    for (uint32_t i = 0; i < nn; i++) {
        if (gv->tok_begin[gv->node_skip[i]] - gv->tok_begin[i] < GRAM_BULK_TOKENS) {
            gv->node_bulk[i] = GRAM_NONE;
            continue;
        }
        /* valid UTF-8 from this node down? (the sum over bulk nodes of
         * their subtree sizes is at most nodes × depth) */
        bool utf8 = true;
        uint32_t d0 = gv->node_depth[i];
        dec[d0 - 1] = 0;
        for (uint32_t j = i; j < gv->node_skip[i] && utf8; j++) {
            int nx = gram_utf8_next(dec[gv->node_depth[j] - 1], gv->node_byte[j]);
            if (nx < 0) utf8 = false;
            else dec[gv->node_depth[j]] = (int8_t)nx;
        }
        use[i].utf8 = utf8;
        gv->bulk[k] = use[i];
        gv->node_bulk[i] = (uint32_t)k++;
    }
    free(use);
    free(dec);
    return 0;
}

/* Builds the prefix tree over refs[0..n) (sorted). */
static int build_trie(gram_vocab *gv, const tok_ref *refs, size_t n, size_t total_bytes)
{
    size_t cap = total_bytes ? total_bytes : 1;
    gv->node_byte = malloc(cap);
    gv->node_depth = malloc(cap * sizeof *gv->node_depth);
    gv->node_skip = malloc(cap * sizeof *gv->node_skip);
    gv->tok_begin = calloc(cap + 1, sizeof *gv->tok_begin);
    gv->tok_ids = malloc((n ? n : 1) * sizeof *gv->tok_ids);
    uint32_t *path = malloc((MAX_TOKEN_BYTES + 1) * sizeof *path);
    uint32_t *tok_node = malloc((n ? n : 1) * sizeof *tok_node);
    uint32_t *parent = malloc(cap * sizeof *parent);
    if (!gv->node_byte || !gv->node_depth || !gv->node_skip || !gv->tok_begin || !gv->tok_ids || !path || !tok_node ||
        !parent) {
        free(path);
        free(tok_node);
        free(parent);
        return WK_ENOMEM;
    }
    uint32_t nn = 0, open = 0; /* path[1..open]: the nodes of the previous token */
    const tok_ref *prev = NULL;
    for (size_t t = 0; t < n; t++) {
        const tok_ref *r = &refs[t];
        uint32_t l = 0;
        if (prev)
            while (l < r->len && l < prev->len && r->s[l] == prev->s[l]) l++;
        if (l > open) l = open;
        for (uint32_t d = l + 1; d <= open; d++) gv->node_skip[path[d]] = nn; /* subtrees that end here */
        open = l;
        for (uint32_t d = l + 1; d <= r->len; d++) {
            gv->node_byte[nn] = (uint8_t)r->s[d - 1];
            gv->node_depth[nn] = (uint16_t)d;
            parent[nn] = d > 1 ? path[d - 1] : GRAM_NONE;
            path[d] = nn++;
        }
        if (r->len > open) open = r->len;
        tok_node[t] = path[r->len];
        if (r->len > gv->max_depth) gv->max_depth = r->len;
        prev = r;
    }
    for (uint32_t d = 1; d <= open; d++) gv->node_skip[path[d]] = nn;
    gv->n_nodes = nn;

    /* tokens grouped by node: tok_node is non-decreasing in sorted order */
    for (size_t t = 0; t < n; t++) {
        gv->tok_ids[t] = refs[t].id;
        gv->tok_begin[tok_node[t] + 1]++;
    }
    for (uint32_t i = 0; i < nn; i++) gv->tok_begin[i + 1] += gv->tok_begin[i];
    int rc = bulk_subtrees(gv, parent);
    free(path);
    free(tok_node);
    free(parent);
    return rc;
}

int gram_vocab_new(gram_vocab **out, const tok_vocab *v, wk_error *err)
{
    *out = NULL;
    int32_t n = tok_n_vocab(v);
    gram_vocab *gv = calloc(1, sizeof *gv);
    tok_ref *refs = NULL;
    if (!gv) goto oom;
    gv->n_tokens = n;
    size_t nn = n > 0 ? (size_t)n : 1;
    gv->kind = calloc(nn, 1);
    gv->off = calloc(nn, sizeof *gv->off);
    gv->len = calloc(nn, sizeof *gv->len);
    refs = malloc(nn * sizeof *refs);
    if (!gv->kind || !gv->off || !gv->len || !refs) goto oom;
    /* kinds and sizes */
    size_t total = 0, n_eog = 0, n_special = 0;
    for (int32_t id = 0; id < n; id++) {
        size_t len = 0;
        enum tok_type t = tok_token_type(v, id);
        if (tok_is_eog(v, id)) {
            tok_token_text(v, id, &len);
            gv->kind[id] = GT_EOG;
            n_eog++;
            n_special++;
        } else if (t == TOK_TYPE_CONTROL || t == TOK_TYPE_USER_DEFINED || t == TOK_TYPE_UNKNOWN) {
            tok_token_text(v, id, &len);
            gv->kind[id] = GT_SPECIAL;
            n_special++;
        } else if (t != TOK_TYPE_UNUSED) {
            tok_token_piece(v, id, 0, &len);
            gv->kind[id] = len > 0 && len <= MAX_TOKEN_BYTES ? GT_TEXT : GT_NEVER;
        }
        if (gv->kind[id] == GT_NEVER) len = 0;
        gv->off[id] = total;
        gv->len[id] = (uint32_t)len;
        total += len;
    }
    gv->bytes = malloc(total ? total : 1);
    gv->eog = malloc((n_eog ? n_eog : 1) * sizeof *gv->eog);
    gv->special_sorted = malloc((n_special ? n_special : 1) * sizeof *gv->special_sorted);
    if (!gv->bytes || !gv->eog || !gv->special_sorted) goto oom;
    size_t n_text = 0, text_bytes = 0;
    for (int32_t id = 0; id < n; id++) {
        size_t len;
        const char *s;
        switch (gv->kind[id]) {
        case GT_TEXT:
            s = tok_token_piece(v, id, 0, &len);
            memcpy(gv->bytes + gv->off[id], s, len);
            refs[n_text++] = (tok_ref){gv->bytes + gv->off[id], (uint32_t)len, id};
            text_bytes += len;
            break;
        case GT_EOG:
            gv->eog[gv->n_eog++] = id;
            /* fall through */
        case GT_SPECIAL:
            s = tok_token_text(v, id, &len);
            memcpy(gv->bytes + gv->off[id], s, len);
            gv->special_sorted[gv->n_special++] = id;
            break;
        default: break;
        }
    }
    /* specials sorted by text (a tok_ref sort, then back to ids) */
    tok_ref *sp = malloc((gv->n_special ? gv->n_special : 1) * sizeof *sp);
    if (!sp) goto oom;
    for (size_t i = 0; i < gv->n_special; i++) {
        int32_t id = gv->special_sorted[i];
        sp[i] = (tok_ref){gv->bytes + gv->off[id], gv->len[id], id};
    }
    qsort(sp, gv->n_special, sizeof *sp, cmp_ref);
    for (size_t i = 0; i < gv->n_special; i++) gv->special_sorted[i] = sp[i].id;
    free(sp);

    qsort(refs, n_text, sizeof *refs, cmp_ref);
    if (build_trie(gv, refs, n_text, text_bytes)) goto oom;
    free(refs);
    *out = gv;
    return 0;
oom:
    free(refs);
    gram_vocab_free(gv);
    return wk_fail(err, WK_ENOMEM, "grammar vocabulary: out of memory");
}
