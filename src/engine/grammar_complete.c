/* The shortest way from a grammar state to where the grammar can end (the
 * fewest bytes, found over single-byte and special tokens, then spelled with
 * the vocabulary's longest tokens): what a
 * generate loop forces when its token budget is about to run out, so a
 * constrained answer is always complete (a JSON object closed, a tool call
 * ended) instead of cut off mid-value. */
#include <stdlib.h>
#include <string.h>

#include "engine/grammar.h"
#include "engine/grammar_impl.h"

/* Configurations a search may visit: far more than closing any real
 * document takes, small enough to stay at milliseconds. */
#define COMPLETE_MAX_NODES 4096

typedef struct node {
    gram_state *s;
    int parent;
    int32_t token;
} node;

/* The edges: one token per byte value (the vocabulary's single-byte text
 * token, if it has one) and every special token. */
static int edges(const gram_vocab *gv, int32_t *out, int cap)
{
    int n = 0;
    int32_t byte_tok[256];
    for (int b = 0; b < 256; b++) byte_tok[b] = -1;
    for (int32_t t = 0; t < gv->n_tokens; t++) {
        if (gv->kind[t] == GT_TEXT && gv->len[t] == 1) {
            unsigned char b = (unsigned char)gv->bytes[gv->off[t]];
            if (byte_tok[b] < 0) byte_tok[b] = t;
        } else if (gv->kind[t] == GT_SPECIAL && n < cap) {
            out[n++] = t;
        }
    }
    for (int b = 0; b < 256 && n < cap; b++)
        if (byte_tok[b] >= 0) out[n++] = byte_tok[b];
    return n;
}

static uint32_t hash_slot(uint32_t d, uint32_t mask) { return (d * 2654435761u) & mask; }

/* The longest text token whose bytes begin bytes[0..n): a walk down the
 * vocabulary's prefix tree. -1 if none. */
static int32_t longest_token(const gram_vocab *gv, const uint8_t *bytes, size_t n, size_t *len)
{
    int32_t best = -1;
    uint32_t lo = 0, hi = gv->n_nodes; /* children of the current node: [lo, hi) */
    for (size_t d = 0; d < n && lo < hi; d++) {
        uint32_t j = lo;
        while (j < hi && gv->node_byte[j] != bytes[d]) j = gv->node_skip[j];
        if (j >= hi) break;
        if (gv->tok_begin[j + 1] > gv->tok_begin[j]) {
            best = gv->tok_ids[gv->tok_begin[j]];
            *len = d + 1;
        }
        lo = j + 1;
        hi = gv->node_skip[j];
    }
    return best;
}

/* Re-spells a path of single-byte and special tokens with as few tokens as
 * the vocabulary allows (longest token first, each checked against the
 * grammar from s). Returns the new length (<= n). */
static int cover(const gram_state *s, const gram_vocab *gv, int32_t *path, int n)
{
    uint8_t run[COMPLETE_MAX_NODES];
    gram_state *at;
    if (gram_state_clone(&at, s, NULL)) return n;
    int out = 0;
    for (int i = 0; i < n;) {
        if (gv->kind[path[i]] != GT_TEXT) { /* a special token stays as it is */
            gram_accept(at, path[i], NULL);
            path[out++] = path[i++];
            continue;
        }
        size_t m = 0; /* the run of bytes up to the next special */
        for (int k = i; k < n && gv->kind[path[k]] == GT_TEXT && m < sizeof run; k++)
            run[m++] = (uint8_t)gv->bytes[gv->off[path[k]]];
        size_t len = 1;
        int32_t t = longest_token(gv, run, m, &len);
        gram_state *try;
        if (t >= 0 && len > 1 && gram_state_clone(&try, at, NULL) == 0) {
            if (gram_accept(try, t, NULL) == 0) {
                gram_state_free(at);
                at = try;
                path[out++] = t;
                i += (int)len;
                continue;
            }
            gram_state_free(try);
        }
        gram_accept(at, path[i], NULL);
        path[out++] = path[i++];
    }
    gram_state_free(at);
    return out;
}

int gram_shortest_completion(const gram_state *s, int32_t *out, int cap, wk_error *err)
{
    if (gram_can_end(s) || gram_is_done(s)) return 0;
    const gram_vocab *gv = s->rt->gv;
    if (!gv) return wk_fail(err, WK_EINVAL, "grammar: no vocabulary to complete with");
    const int edge_cap = gv->n_tokens + 256;
    int32_t *edge = malloc(sizeof *edge * (size_t)edge_cap);
    node *q = calloc(COMPLETE_MAX_NODES, sizeof *q);
    enum { SEEN_CAP = 1 << 14 }; /* DFA states seen (more slots than nodes), open addressing */
    uint32_t *seen = calloc(SEEN_CAP, sizeof *seen);
    int rc = 0, qn = 0, found = -1;
    if (!edge || !q || !seen) {
        rc = wk_fail(err, WK_ENOMEM, "grammar: out of memory");
        goto done;
    }
    int n_edges = edges(gv, edge, edge_cap);
    if ((rc = gram_state_clone(&q[0].s, s, err))) goto done;
    q[0].parent = -1;
    qn = 1;
    for (int qi = 0; qi < qn && found < 0; qi++) {
        for (int e = 0; e < n_edges && qn < COMPLETE_MAX_NODES; e++) {
            gram_state *c;
            if ((rc = gram_state_clone(&c, q[qi].s, err))) goto done;
            if (gram_accept(c, edge[e], NULL) != 0) {
                gram_state_free(c);
                continue;
            }
            uint32_t h = hash_slot(c->dstate, SEEN_CAP - 1);
            while (seen[h] && seen[h] != c->dstate + 1) h = (h + 1) & (SEEN_CAP - 1);
            if (seen[h]) { /* reached before, by a path as short */
                gram_state_free(c);
                continue;
            }
            seen[h] = c->dstate + 1;
            q[qn] = (node){c, qi, edge[e]};
            if (gram_can_end(c)) {
                found = qn++;
                break;
            }
            qn++;
        }
    }
    if (found < 0) {
        rc = wk_fail(err, WK_ERANGE, "grammar: no completion within %d configurations", COMPLETE_MAX_NODES);
        goto done;
    }
    int len = 0;
    for (int i = found; q[i].parent >= 0; i = q[i].parent) len++;
    int32_t *path = malloc(sizeof *path * (size_t)(len ? len : 1));
    if (!path) {
        rc = wk_fail(err, WK_ENOMEM, "grammar: out of memory");
        goto done;
    }
    int k = len;
    for (int i = found; q[i].parent >= 0; i = q[i].parent) path[--k] = q[i].token;
    len = cover(s, gv, path, len);
    if (len > cap) rc = wk_fail(err, WK_ERANGE, "grammar: the shortest completion takes %d tokens (room for %d)", len, cap);
    else {
        memcpy(out, path, sizeof *path * (size_t)len);
        rc = len;
    }
    free(path);
done:
    for (int i = 0; i < qn; i++) gram_state_free(q[i].s);
    free(q);
    free(seen);
    free(edge);
    return rc;
}
