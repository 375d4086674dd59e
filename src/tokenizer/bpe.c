/* Byte-level BPE (tokenizer.ggml.model = gpt2), spec §4: pre-tokenize, map
 * bytes to the GPT-2 code points, merge the adjacent pair of lowest rank until
 * none is left, look the symbols up. Also the merge-loop scratch and heap that
 * SentencePiece shares. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

void tok_scratch_free(tok_scratch *s)
{
    free(s->buf);
    free(s->sym);
    free(s->heap);
    tok_spans_free(&s->words);
    memset(s, 0, sizeof *s);
}

int tok_scratch_reserve(tok_scratch *s, size_t bytes, size_t symbols)
{
    if (bytes > s->buf_cap) {
        size_t cap = bytes < 256 ? 256 : bytes * 2;
        char *p = realloc(s->buf, cap);
        if (!p) return WK_ENOMEM;
        s->buf = p;
        s->buf_cap = cap;
    }
    if (symbols > s->sym_cap) {
        size_t cap = symbols < 64 ? 64 : symbols * 2;
        tok_symbol *p = realloc(s->sym, cap * sizeof *p);
        if (!p) return WK_ENOMEM;
        s->sym = p;
        s->sym_cap = cap;
    }
    return 0;
}

static bool bigram_before(const tok_bigram *a, const tok_bigram *b)
{
    return a->prio < b->prio || (a->prio == b->prio && a->left < b->left);
}

int tok_heap_push(tok_scratch *s, tok_bigram b)
{
    if (s->heap_n == s->heap_cap) {
        size_t cap = s->heap_cap ? s->heap_cap * 2 : 64;
        tok_bigram *p = realloc(s->heap, cap * sizeof *p);
        if (!p) return WK_ENOMEM;
        s->heap = p;
        s->heap_cap = cap;
    }
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!bigram_before(&b, &s->heap[parent])) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = b;
    return 0;
}

bool tok_heap_pop(tok_scratch *s, tok_bigram *out)
{
    if (s->heap_n == 0) return false;
    *out = s->heap[0];
    tok_bigram last = s->heap[--s->heap_n];
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bigram_before(&s->heap[c + 1], &s->heap[c])) c++;
        if (!bigram_before(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return true;
}

/* Queues (left, right) if "left right" is a merge. */
static int queue_pair(const tok_vocab *v, tok_scratch *sc, int32_t left, int32_t right)
{
    if (left < 0 || right < 0) return 0;
    const tok_symbol *l = &sc->sym[left], *r = &sc->sym[right];
    int32_t rank = tok_map_get(&v->merge_rank, sc->buf + l->off, l->n, sc->buf + r->off, r->n);
    if (rank < 0) return 0;
    return tok_heap_push(sc, (tok_bigram){.prio = rank, .left = left, .right = right, .size = l->n + r->n});
}

static int emit_symbol(const tok_vocab *v, const char *s, size_t n, tok_ids *out)
{
    int32_t id = tok_map_get(&v->token_to_id, s, n, NULL, 0);
    if (id >= 0) return tok_ids_push(out, id);
    /* not in the vocabulary (incomplete vocab): each byte as a 1-char token */
    for (size_t i = 0; i < n; i++) {
        id = tok_map_get(&v->token_to_id, s + i, 1, NULL, 0);
        if (id >= 0 && tok_ids_push(out, id)) return WK_ENOMEM;
    }
    return 0;
}

/* One pre-tokenized word (raw UTF-8 bytes). */
static int bpe_word(const tok_vocab *v, const char *word, size_t len, tok_scratch *sc, tok_ids *out)
{
    /* byte-level encode: each byte becomes a code point of 1 or 2 UTF-8 bytes */
    if (tok_scratch_reserve(sc, len * 2, len)) return WK_ENOMEM;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += tok_utf8_encode(tok_byte_to_cp((uint8_t)word[i]), sc->buf + n);

    if (v->ignore_merges) {
        int32_t id = tok_map_get(&v->token_to_id, sc->buf, n, NULL, 0);
        if (id >= 0) return tok_ids_push(out, id);
    }

    int32_t n_sym = 0;
    for (size_t o = 0; o < n;) {
        size_t l = tok_utf8_len_lead((uint8_t)sc->buf[o]);
        if (l > n - o) l = n - o;
        sc->sym[n_sym] = (tok_symbol){.off = (uint32_t)o, .n = (uint32_t)l, .prev = n_sym - 1, .next = n_sym + 1};
        n_sym++;
        o += l;
    }
    if (n_sym == 0) return 0;
    sc->sym[n_sym - 1].next = -1;

    sc->heap_n = 0;
    for (int32_t i = 1; i < n_sym; i++)
        if (queue_pair(v, sc, i - 1, i)) return WK_ENOMEM;

    tok_bigram b;
    while (tok_heap_pop(sc, &b)) {
        tok_symbol *l = &sc->sym[b.left], *r = &sc->sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sc->sym[r->next].prev = b.left;
        if (queue_pair(v, sc, l->prev, b.left) || queue_pair(v, sc, b.left, l->next)) return WK_ENOMEM;
    }
    for (int32_t i = 0; i >= 0; i = sc->sym[i].next)
        if (emit_symbol(v, sc->buf + sc->sym[i].off, sc->sym[i].n, out)) return WK_ENOMEM;
    return 0;
}

int tok_bpe_fragment(const tok_vocab *v, const char *text, size_t len, tok_scratch *sc,
                     tok_ids *out, wk_error *err)
{
    int rc = tok_pretok_split(v->pretok, text, len, &sc->words, err);
    if (rc) return rc;
    for (size_t w = 0; w < sc->words.n; w++) {
        if (bpe_word(v, text + sc->words.off[w], sc->words.len[w], sc, out))
            return wk_fail(err, WK_ENOMEM, "out of memory tokenizing");
    }
    return 0;
}
