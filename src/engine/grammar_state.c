/* Per-sequence grammar states: creation, clones (sharing one runtime),
 * token acceptance and the queries. Masks are in grammar_mask.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar_impl.h"

static void link_state(gram_runtime *rt, gram_state *s)
{
    s->prev = NULL;
    s->next = rt->live;
    if (rt->live) rt->live->prev = s;
    rt->live = s;
}

int gram_state_new(gram_state **out, const gram_grammar *g, const gram_vocab *gv, wk_error *err)
{
    *out = NULL;
    gram_state *s = calloc(1, sizeof *s);
    if (!s) return wk_fail(err, WK_ENOMEM, "grammar: out of memory");
    int rc = gram_runtime_new(&s->rt, g, gv, err);
    if (rc) {
        free(s);
        return rc;
    }
    gram_runtime *rt = s->rt;
    if (gv && (rc = gram_masks_init(rt, err))) {
        gram_runtime_release(rt);
        free(s);
        return rc;
    }
    s->dstate = rt->start;
    link_state(rt, s);
    *out = s;
    return 0;
}

int gram_state_clone(gram_state **out, const gram_state *src, wk_error *err)
{
    *out = NULL;
    gram_state *s = malloc(sizeof *s);
    if (!s) return wk_fail(err, WK_ENOMEM, "grammar: out of memory");
    *s = *src;
    s->rt->refs++;
    link_state(s->rt, s);
    *out = s;
    return 0;
}

void gram_state_free(gram_state *s)
{
    if (!s) return;
    gram_runtime *rt = s->rt;
    if (s->prev) s->prev->next = s->next;
    else rt->live = s->next;
    if (s->next) s->next->prev = s->prev;
    gram_runtime_release(rt);
    free(s);
}

/* ---- acceptance ---- */

static int not_allowed(const gram_state *s, int32_t token, wk_error *err)
{
    if (!err) return WK_EINVAL; /* nobody reads the message: skip formatting it */
    const gram_vocab *gv = s->rt->gv;
    uint32_t len = gv->len[token];
    char shown[48];
    size_t k = 0;
    for (uint32_t i = 0; i < len && k + 5 < sizeof shown; i++) {
        unsigned char c = (unsigned char)gv->bytes[gv->off[token] + i];
        if (c >= 0x20 && c < 0x7F && c != '"' && c != '\\') shown[k++] = (char)c;
        else k += (size_t)snprintf(shown + k, sizeof shown - k, "\\x%02X", c);
    }
    shown[k] = 0;
    return wk_fail(err, WK_EINVAL, "grammar: token %d (\"%s%s\") is not allowed here", token, shown,
                   k + 5 >= sizeof shown ? "..." : "");
}

int gram_accept(gram_state *s, int32_t token, wk_error *err)
{
    gram_runtime *rt = s->rt;
    const gram_vocab *gv = rt->gv;
    if (!gv) return wk_fail(err, WK_EINVAL, "grammar: a state without a vocabulary takes bytes, not tokens");
    if (token < 0 || token >= gv->n_tokens)
        return wk_fail(err, WK_EINVAL, "grammar: token %d is out of range (vocabulary %d)", token, gv->n_tokens);
    if (s->done) return wk_fail(err, WK_EINVAL, "grammar: token %d after the end of generation", token);
    int rc = gram_runtime_keep_bounded(rt, err);
    if (rc) return rc;
    const gram_grammar *g = rt->g;
    for (size_t k = 0; k < g->n_specials; k++) {
        if (rt->special_token[k] != token) continue;
        int64_t t = gram_dfa_step(rt, s->dstate, g->n_classes + (uint32_t)k, err);
        if (t < 0) return (int)t;
        if (t != GRAM_DEAD) {
            s->dstate = (uint32_t)t;
            return 0;
        }
    }
    switch (gv->kind[token]) {
    case GT_EOG:
        if (!rt->ds[s->dstate].accept) return not_allowed(s, token, err);
        s->done = true;
        return 0;
    case GT_TEXT: {
        int64_t t = gram_dfa_walk_bytes(rt, s->dstate, gv->bytes + gv->off[token], gv->len[token], err);
        if (t < 0) return (int)t;
        if (t == GRAM_DEAD) return not_allowed(s, token, err);
        s->dstate = (uint32_t)t;
        return 0;
    }
    default:
        return not_allowed(s, token, err);
    }
}

int gram_accept_bytes(gram_state *s, const char *bytes, size_t len, wk_error *err)
{
    if (s->done) return wk_fail(err, WK_EINVAL, "grammar: text after the end of generation");
    int rc = gram_runtime_keep_bounded(s->rt, err);
    if (rc) return rc;
    int64_t t = gram_dfa_walk_bytes(s->rt, s->dstate, bytes, len, err);
    if (t < 0) return (int)t;
    if (t == GRAM_DEAD) return wk_fail(err, WK_EINVAL, "grammar: the text is not allowed here");
    s->dstate = (uint32_t)t;
    return 0;
}

size_t gram_state_cache_bytes(const gram_state *s) { return gram_runtime_bytes(s->rt); }

bool gram_can_end(const gram_state *s) { return !s->done && s->rt->ds[s->dstate].accept; }

bool gram_is_done(const gram_state *s)
{
    const gram_dstate *d = &s->rt->ds[s->dstate];
    return s->done || d->n_frames == 0;
}
