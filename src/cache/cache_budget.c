/* RAM budget: idle slots' KV + checkpoint states, and eviction. Eviction
 * keeps the newest checkpoint of every cached conversation as long as
 * anything else can go, and takes from the longest-idle conversation first;
 * whole slots go last, longest idle first (the archive keeps them when a
 * disk folder is set). */
#include "cache/cache_impl.h"
#include "util/log.h"

static size_t ckpt_state_total(const cache_slot *s)
{
    size_t b = 0;
    for (int i = 0; i < s->n_ck; i++) b += ckpt_bytes(&s->ck[i]);
    return b;
}

size_t cache_ram_bytes(const ckpt_cache *c)
{
    size_t b = 0;
    for (int i = 0; i < c->cfg.max_slots; i++) {
        if (!c->slots[i].seq) continue;
        b += eng_seq_kv_bytes_held(c->slots[i].seq) + ckpt_state_total(&c->slots[i]);
    }
    return b;
}

/* What counts against the budget: the working sequences of the requests in
 * progress are not cache, their checkpoints are. An idle slot counts the KV
 * memory it holds (on the CPU the pages its positions wrote, not the whole
 * context it could hold). */
static size_t budget_bytes(const ckpt_cache *c)
{
    size_t b = 0;
    for (int i = 0; i < c->cfg.max_slots; i++) {
        if (!c->slots[i].seq) continue;
        if (!c->slots[i].busy) b += eng_seq_kv_bytes_held(c->slots[i].seq);
        b += ckpt_state_total(&c->slots[i]);
    }
    return b;
}

/* Least valuable checkpoint of s other than its newest: lowest kind, then
 * oldest position. -1 if none. */
static int least_valuable(const cache_slot *s, bool need_bytes)
{
    int best = -1;
    for (int i = 0; i < s->n_ck - 1; i++) {
        if (need_bytes && !ckpt_bytes(&s->ck[i])) continue;
        if (best < 0 || s->ck[i].kind < s->ck[best].kind) best = i;
    }
    return best;
}

void cache_trim_slot(ckpt_cache *c, cache_slot *s)
{
    while (s->n_ck > c->cfg.max_ckpts_per_slot) {
        int i = least_valuable(s, false);
        if (i < 0) break;
        slot_remove_ckpt(s, i);
        c->st.evictions++;
    }
}

void cache_enforce_budget(ckpt_cache *c)
{
    const size_t budget = c->cfg.mem_bytes;
    while (budget_bytes(c) > budget) {
        /* 1. checkpoints, longest-idle conversation first (the busy ones last) */
        int vs = -1, vi = -1;
        for (int i = 0; i < c->cfg.max_slots; i++) {
            cache_slot *s = &c->slots[i];
            if (!s->seq) continue;
            int k = least_valuable(s, true);
            if (k < 0) continue;
            const cache_slot *v = vs >= 0 ? &c->slots[vs] : NULL;
            bool older = !v || (!s->busy && (v->busy || s->last_used_ms < v->last_used_ms));
            if (older) {
                vs = i;
                vi = k;
            }
        }
        if (vs >= 0) {
            WK_DEBUG("cache: evicting checkpoint at %d (%s) of slot %d", c->slots[vs].ck[vi].snap.pos,
                     ckpt_kind_name(c->slots[vs].ck[vi].kind), vs);
            if (c->slots[vs].dirty) cache_disk_flush_slot(c, vs); /* the archive gets it before RAM lets go */
            cache_disk_release_slot(c, vs);
            slot_remove_ckpt(&c->slots[vs], vi);
            c->st.evictions++;
            continue;
        }
        /* 2. whole idle slots, longest idle first */
        int victim = -1;
        for (int i = 0; i < c->cfg.max_slots; i++) {
            if (!c->slots[i].seq || c->slots[i].busy) continue;
            if (victim < 0 || c->slots[i].last_used_ms < c->slots[victim].last_used_ms) victim = i;
        }
        if (victim < 0) break; /* only the working sequences are left */
        WK_DEBUG("cache: evicting slot %d (%d tokens)", victim, eng_seq_pos(c->slots[victim].seq));
        slot_release(c, victim);
        c->st.evictions++;
    }
}
