/* SentencePiece BPE (tokenizer.ggml.model = llama), spec §5: spaces become
 * "▁", symbols are UTF-8 characters, the adjacent pair whose concatenation is
 * the vocabulary token of highest score merges first; leftovers fall back to
 * <0xXX> byte tokens. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

static int queue_pair(const tok_vocab *v, tok_scratch *sc, int32_t left, int32_t right)
{
    if (left < 0 || right < 0) return 0;
    const tok_symbol *l = &sc->sym[left], *r = &sc->sym[right];
    /* symbols are contiguous in the buffer, so the pair is one span */
    int32_t id = tok_map_get(&v->token_to_id, sc->buf + l->off, l->n + r->n, NULL, 0);
    if (id < 0) return 0;
    double score = v->scores ? v->scores[id] : 0.0;
    return tok_heap_push(sc, (tok_bigram){.prio = -score, .left = left, .right = right, .size = l->n + r->n});
}

static int emit_symbol(const tok_vocab *v, const char *s, size_t n, tok_ids *out)
{
    int32_t id = tok_map_get(&v->token_to_id, s, n, NULL, 0);
    if (id >= 0) return tok_ids_push(out, id);
    for (size_t i = 0; i < n; i++) {
        int32_t b = v->byte_tokens[(uint8_t)s[i]];
        if (b < 0) b = v->unk;
        if (b >= 0 && tok_ids_push(out, b)) return WK_ENOMEM;
    }
    return 0;
}

int tok_spm_fragment(const tok_vocab *v, const char *text, size_t len, bool space_prefix,
                     tok_scratch *sc, tok_ids *out, wk_error *err)
{
    /* escape: ' ' → "▁" (3 bytes) */
    size_t worst = (len + 1) * 3;
    if (tok_scratch_reserve(sc, worst, len + 1)) return wk_fail(err, WK_ENOMEM, "out of memory");
    size_t n = 0;
    if (space_prefix) {
        memcpy(sc->buf, "\xE2\x96\x81", 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(sc->buf + n, "\xE2\x96\x81", 3);
            n += 3;
        } else sc->buf[n++] = text[i];
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
        if (queue_pair(v, sc, i - 1, i)) goto oom;

    tok_bigram b;
    while (tok_heap_pop(sc, &b)) {
        tok_symbol *l = &sc->sym[b.left], *r = &sc->sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sc->sym[r->next].prev = b.left;
        if (queue_pair(v, sc, l->prev, b.left) || queue_pair(v, sc, b.left, l->next)) goto oom;
    }
    for (int32_t i = 0; i >= 0; i = sc->sym[i].next)
        if (emit_symbol(v, sc->buf + sc->sym[i].off, sc->sym[i].n, out)) goto oom;
    return 0;
oom:
    return wk_fail(err, WK_ENOMEM, "out of memory tokenizing");
}
