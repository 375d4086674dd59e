/* Token masks: a walk of the vocabulary's prefix tree through the DFA,
 * shared across contexts through relative states, cached per DFA state. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar_impl.h"

/* Memory for cached masks; a 248K-token mask is 31 KB, so about 500 of
 * them: enough for every configuration a structured output revisits. */
#define MASK_CACHE_BYTES (16u << 20)
#define MASK_SLOTS_MIN 8
#define MASK_SLOTS_MAX 4096

int gram_masks_init(gram_runtime *rt, wk_error *err)
{
    const gram_vocab *gv = rt->gv;
    size_t words = gram_mask_words(gv) * sizeof(uint32_t);
    size_t slots = words ? MASK_CACHE_BYTES / words : MASK_SLOTS_MAX;
    if (slots < MASK_SLOTS_MIN) slots = MASK_SLOTS_MIN;
    if (slots > MASK_SLOTS_MAX) slots = MASK_SLOTS_MAX;
    rt->masks = calloc(slots, sizeof *rt->masks);
    rt->walk = malloc((gv->max_depth + 1) * sizeof *rt->walk);
    rt->walk_escaped = calloc(gv->max_depth + 1, 1);
    if (!rt->masks || !rt->walk || !rt->walk_escaped) return wk_fail(err, WK_ENOMEM, "grammar: out of memory");
    rt->n_mask_slots = slots;
    for (size_t i = 0; i < slots; i++) rt->masks[i].dstate = GRAM_NONE;
    return 0;
}

void gram_masks_clear(gram_runtime *rt)
{
    for (size_t i = 0; i < rt->n_mask_slots; i++) rt->masks[i].dstate = GRAM_NONE;
    if (rt->ds_slot) memset(rt->ds_slot, 0xFF, rt->n_ds_slot * sizeof *rt->ds_slot);
}

/* ---- masks ---- */

static inline void mask_set(uint32_t *mask, int32_t id) { mask[(uint32_t)id >> 5] |= 1u << ((uint32_t)id & 31); }

/* Whether every UTF-8 character read from d leads back to d, with the
 * states on partial sequences alive: a search over (DFA state, decoder
 * state) pairs. */
static int utf8_loops(gram_runtime *rt, uint32_t d, bool *out, wk_error *err)
{
    enum { MAX_PAIRS = 64 };
    uint32_t st[MAX_PAIRS];
    int dec[MAX_PAIRS];
    size_t n = 0;
    st[n] = d;
    dec[n++] = 0;
    *out = false;
    for (size_t q = 0; q < n; q++) {
        bool seen_class[256] = {false};
        for (unsigned b = 0x80; b < 0x100; b++) {
            int nd = gram_utf8_next(dec[q], b);
            uint32_t c = rt->g->byte_class[b];
            if (nd < 0 || seen_class[c]) continue;
            /* every byte of a class moves alike; the decoder state too? */
            bool same = true;
            for (unsigned b2 = 0x80; b2 < 0x100 && same; b2++)
                if (rt->g->byte_class[b2] == c && gram_utf8_next(dec[q], b2) >= 0) same = gram_utf8_next(dec[q], b2) == nd;
            if (same) seen_class[c] = true;
            int64_t t = gram_dfa_step(rt, st[q], c, err);
            if (t < 0) return (int)t;
            if (t == GRAM_DEAD || (nd == 0 && t != d)) return 0;
            if (nd == 0) continue;
            size_t k = 0;
            while (k < n && !(st[k] == (uint32_t)t && dec[k] == nd)) k++;
            if (k == n) {
                if (n == MAX_PAIRS) return 0; /* not the plain shape: no shortcut */
                st[n] = (uint32_t)t;
                dec[n++] = nd;
            }
        }
    }
    *out = true;
    return 0;
}

/* The bytes on which DFA state d goes to itself (computed once per state). */
static int state_loops(gram_runtime *rt, uint32_t d, gram_byte_use *out, wk_error *err)
{
    if (!rt->ds[d].loops_known) {
        const gram_grammar *g = rt->g;
        bool loops_class[256];
        for (uint32_t c = 0; c < g->n_classes; c++) {
            int64_t t = gram_dfa_step(rt, d, c, err);
            if (t < 0) return (int)t;
            loops_class[c] = t == d;
        }
        gram_byte_use u = {{0, 0}, false, false};
        for (unsigned b = 0; b < 128; b++) u.ascii[b >> 6] |= (uint64_t)loops_class[g->byte_class[b]] << (b & 63);
        int rc = utf8_loops(rt, d, &u.high, err);
        if (rc) return rc;
        rt->ds[d].loops = u;
        rt->ds[d].loops_known = true;
    }
    *out = rt->ds[d].loops;
    return 0;
}

static int add_candidates(gram_mask_slot *slot, const int32_t *ids, size_t n)
{
    if (slot->n_cand + n > slot->cap_cand) {
        size_t cap = slot->cap_cand ? slot->cap_cand : 256;
        while (cap < slot->n_cand + n) cap *= 2;
        int32_t *v = realloc(slot->cand, cap * sizeof *v);
        if (!v) return WK_ENOMEM;
        slot->cand = v;
        slot->cap_cand = cap;
    }
    memcpy(slot->cand + slot->n_cand, ids, n * sizeof *ids);
    slot->n_cand += n;
    return 0;
}

/* Walks the prefix tree from DFA state d, setting the bits of tokens whose
 * bytes all pass. A subtree is skipped at its first rejected byte, and
 * taken whole when its state loops on every byte it uses (the bulk of the
 * vocabulary inside a string).
 * For a relative state (rel != NULL): the bits are the tokens accepted
 * without leaving it; tokens past a point where it could return into its
 * placeholder go to rel's candidates (the caller decides them in context). */
static int walk_tokens(gram_runtime *rt, uint32_t d, uint32_t *mask, gram_mask_slot *rel, wk_error *err)
{
    const gram_vocab *gv = rt->gv;
    const uint8_t *cls = rt->g->byte_class;
    const uint8_t *node_byte = gv->node_byte;
    const uint16_t *node_depth = gv->node_depth;
    const uint32_t *skip = gv->node_skip, *tok_begin = gv->tok_begin, *node_bulk = gv->node_bulk;
    const int32_t *tok_ids = gv->tok_ids;
    uint32_t *st = rt->walk;
    uint8_t *escaped = rt->walk_escaped;
    size_t width = rt->width;
    st[0] = d;
    escaped[0] = 0;
    for (uint32_t i = 0, n = gv->n_nodes; i < n;) {
        uint32_t depth = node_depth[i];
        if (node_bulk[i] != GRAM_NONE) {
            gram_byte_use loops;
            int rc = state_loops(rt, st[depth - 1], &loops, err);
            if (rc) return rc;
            const gram_byte_use *use = &gv->bulk[node_bulk[i]];
            if (!(use->ascii[0] & ~loops.ascii[0]) && !(use->ascii[1] & ~loops.ascii[1]) &&
                (!use->high || (use->utf8 && loops.high))) {
                for (uint32_t k = tok_begin[i], e = tok_begin[skip[i]]; k < e; k++) mask_set(mask, tok_ids[k]);
                i = skip[i];
                continue;
            }
        }
        uint32_t c = cls[node_byte[i]];
        int32_t t = rt->next[(size_t)st[depth - 1] * width + c];
        if (t < 0) {
            int64_t r = gram_dfa_step_slow(rt, st[depth - 1], c, err);
            if (r < 0) return (int)r;
            t = (int32_t)r;
        }
        if (t == GRAM_DEAD) {
            if (rel && escaped[depth - 1] &&
                add_candidates(rel, tok_ids + tok_begin[i], tok_begin[skip[i]] - tok_begin[i]))
                return wk_fail(err, WK_ENOMEM, "grammar: out of memory");
            i = skip[i];
            continue;
        }
        st[depth] = (uint32_t)t;
        uint32_t k = tok_begin[i], e = tok_begin[i + 1];
        if (!rel) {
            for (; k < e; k++) mask_set(mask, tok_ids[k]);
        } else {
            const gram_dstate *ds = &rt->ds[t];
            escaped[depth] = escaped[depth - 1] || ds->escape;
            if (ds->n_frames) {
                for (; k < e; k++) mask_set(mask, tok_ids[k]);
            } else if (k < e && add_candidates(rel, tok_ids + k, e - k)) { /* only the return is left */
                return wk_fail(err, WK_ENOMEM, "grammar: out of memory");
            }
        }
        i++;
    }
    return 0;
}

/* The cache slot holding d's mask, or NULL. */
static gram_mask_slot *cached_mask(gram_runtime *rt, uint32_t d)
{
    if (d >= rt->n_ds_slot || rt->ds_slot[d] == GRAM_NONE) return NULL;
    return &rt->masks[rt->ds_slot[d]];
}

/* A slot for d's mask (round robin), or NULL when out of memory (the mask
 * is then just not cached). */
static gram_mask_slot *claim_slot(gram_runtime *rt, uint32_t d)
{
    if (d >= rt->n_ds_slot) {
        size_t n = rt->n_ds_slot ? rt->n_ds_slot : 256;
        while (n <= d) n *= 2;
        uint32_t *v = realloc(rt->ds_slot, n * sizeof *v);
        if (!v) return NULL;
        memset(v + rt->n_ds_slot, 0xFF, (n - rt->n_ds_slot) * sizeof *v);
        rt->ds_slot = v;
        rt->n_ds_slot = n;
    }
    size_t i = rt->mask_clock;
    rt->mask_clock = (i + 1) % rt->n_mask_slots;
    gram_mask_slot *slot = &rt->masks[i];
    if (!slot->mask) {
        slot->mask = malloc(gram_mask_words(rt->gv) * sizeof *slot->mask);
        if (!slot->mask) return NULL;
    }
    if (slot->dstate != GRAM_NONE) rt->ds_slot[slot->dstate] = GRAM_NONE;
    slot->dstate = d;
    rt->ds_slot[d] = (uint32_t)i;
    return slot;
}

/* The tokens d accepts: those its relative state accepts alone (cached
 * across contexts), plus the relative state's candidates decided here;
 * then token literals and end of generation. */
static int compute_mask(gram_runtime *rt, uint32_t d, uint32_t *mask, wk_error *err)
{
    const gram_vocab *gv = rt->gv;
    size_t words = gram_mask_words(gv);
    uint32_t base_depth;
    int64_t rel = gram_dfa_relative(rt, d, &base_depth, err);
    if (rel < 0) return (int)rel;
    gram_mask_slot *slot = NULL;
    if (rel != GRAM_NONE) {
        slot = cached_mask(rt, (uint32_t)rel);
        if (!slot) {
            slot = claim_slot(rt, (uint32_t)rel);
            if (!slot) return wk_fail(err, WK_ENOMEM, "grammar: out of memory");
            slot->n_cand = 0;
            memset(slot->mask, 0, words * sizeof *slot->mask);
            int rc = walk_tokens(rt, (uint32_t)rel, slot->mask, slot, err);
            if (rc) {
                rt->ds_slot[slot->dstate] = GRAM_NONE;
                slot->dstate = GRAM_NONE;
                return rc;
            }
        }
        /* near the depth cap the relative walk may keep paths d cuts */
        if (base_depth + rt->rel_max_depth > GRAM_MAX_DEPTH) slot = NULL;
    }
    if (!slot) {
        memset(mask, 0, words * sizeof *mask);
        int rc = walk_tokens(rt, d, mask, NULL, err);
        if (rc) return rc;
    } else {
        memcpy(mask, slot->mask, words * sizeof *mask);
        for (size_t k = 0; k < slot->n_cand; k++) {
            int32_t tok = slot->cand[k];
            int64_t t = gram_dfa_walk_bytes(rt, d, gv->bytes + gv->off[tok], gv->len[tok], err);
            if (t < 0) return (int)t;
            if (t != GRAM_DEAD) mask_set(mask, tok);
        }
    }
    const gram_grammar *g = rt->g;
    for (size_t k = 0; k < g->n_specials; k++) {
        int32_t tok = rt->special_token[k];
        if (tok < 0) continue;
        int64_t t = gram_dfa_step(rt, d, g->n_classes + (uint32_t)k, err);
        if (t < 0) return (int)t;
        if (t != GRAM_DEAD) mask_set(mask, tok);
    }
    if (rt->ds[d].accept)
        for (size_t k = 0; k < gv->n_eog; k++) mask_set(mask, gv->eog[k]);
    return 0;
}

int gram_mask(gram_state *s, uint32_t *mask, wk_error *err)
{
    gram_runtime *rt = s->rt;
    if (!rt->gv) return wk_fail(err, WK_EINVAL, "grammar: a state without a vocabulary has no token mask");
    size_t words = gram_mask_words(rt->gv);
    if (s->done) {
        memset(mask, 0, words * sizeof *mask);
        return 0;
    }
    int rc = gram_runtime_keep_bounded(rt, err);
    if (rc) return rc;
    gram_mask_slot *slot = cached_mask(rt, s->dstate);
    if (slot) {
        memcpy(mask, slot->mask, words * sizeof *mask);
        return 0;
    }
    if ((rc = compute_mask(rt, s->dstate, mask, err))) return rc;
    bool any = false;
    for (size_t w = 0; w < words && !any; w++) any = mask[w] != 0;
    if (!any && !gram_is_done(s)) /* every way on was cut at the depth cap (or needs a token the vocabulary lacks) */
        return wk_fail(err, WK_ERANGE, "grammar: no token can continue here (nesting deeper than %d frames?)",
                       GRAM_MAX_DEPTH);
    slot = claim_slot(rt, s->dstate);
    if (slot) memcpy(slot->mask, mask, words * sizeof *mask);
    return 0;
}

int gram_mask_logits(gram_state *s, float *logits, wk_error *err)
{
    gram_runtime *rt = s->rt;
    if (!rt->gv) return wk_fail(err, WK_EINVAL, "grammar: a state without a vocabulary has no token mask");
    size_t words = gram_mask_words(rt->gv);
    uint32_t *mask = malloc(words * sizeof *mask);
    if (!mask) return wk_fail(err, WK_ENOMEM, "grammar: out of memory");
    int rc = gram_mask(s, mask, err);
    if (!rc) {
        int32_t n = rt->gv->n_tokens;
        for (size_t w = 0; w < words; w++) {
            if (mask[w] == UINT32_MAX) continue;
            for (int32_t id = (int32_t)(w * 32), e = id + 32 < n ? id + 32 : n; id < e; id++)
                if (!(mask[w] >> (id & 31) & 1)) logits[id] = -INFINITY;
        }
    }
    free(mask);
    return rc;
}

