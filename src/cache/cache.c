/* The prefix cache: slots, reuse decision, checkpoint placement, fallback.
 * Budget/eviction live in cache_budget.c, the monitor view in cache_json.c,
 * the archive glue in cache_disk.c. */
#include <stdlib.h>
#include <string.h>

#include "cache/cache_impl.h"
#include "util/log.h"
#include "util/timeutil.h"

void ckpt_cache_config_default(ckpt_cache_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
}

static void fill_defaults(ckpt_cache_config *cfg)
{
    if (!cfg->mem_bytes) cfg->mem_bytes = CKPT_CACHE_MEM_DEFAULT;
    if (cfg->max_slots <= 0) cfg->max_slots = CKPT_CACHE_SLOTS_DEFAULT;
    if (cfg->max_ckpts_per_slot <= 0) cfg->max_ckpts_per_slot = 24;
    if (!cfg->gen_interval) cfg->gen_interval = 512;           /* resume inside a long answer */
    if (cfg->min_step <= 0) cfg->min_step = 1024;              /* older turns: one per ~1K tokens */
    if (!cfg->disk_bytes) cfg->disk_bytes = (size_t)8 << 30;
}

uint64_t cache_policy_now(const ckpt_cache *c) { return eng_ctx_fingerprint(c->ctx); }

int ckpt_cache_new(ckpt_cache **out, eng_ctx *ctx, const ckpt_cache_config *cfg, wk_error *err)
{
    *out = NULL;
    ckpt_cache *c = calloc(1, sizeof *c);
    if (!c) return wk_fail(err, WK_ENOMEM, "cache: out of memory");
    c->ctx = ctx;
    c->m = eng_ctx_model(ctx);
    if (cfg) c->cfg = *cfg;
    fill_defaults(&c->cfg);
    c->cfg.dir = NULL;
    if (cfg && cfg->dir && *cfg->dir) snprintf(c->dir, sizeof c->dir, "%s", cfg->dir);
    c->recurrent = c->m->hp.n_rec_layers > 0;
    c->n_ctx = eng_ctx_options(ctx)->n_ctx;
    c->next_conv = ((uint64_t)(wk_now_ms() * 1000.0) << 16) ^ (uint64_t)(uintptr_t)c;
    c->slots = calloc((size_t)c->cfg.max_slots, sizeof *c->slots);
    int rc = c->slots ? pidx_new(&c->ix, err) : wk_fail(err, WK_ENOMEM, "cache: out of memory");
    if (!rc && c->dir[0]) rc = cache_disk_scan(c, err);
    if (rc) {
        ckpt_cache_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void slot_drop_ckpts_after(cache_slot *s, int32_t pos)
{
    int k = 0;
    for (int i = 0; i < s->n_ck; i++) {
        if (s->ck[i].snap.pos > pos) ckpt_free(&s->ck[i]);
        else s->ck[k++] = s->ck[i];
    }
    s->n_ck = k;
}

void slot_remove_ckpt(cache_slot *s, int i)
{
    ckpt_free(&s->ck[i]);
    memmove(&s->ck[i], &s->ck[i + 1], sizeof *s->ck * (size_t)(s->n_ck - i - 1));
    s->n_ck--;
}

void slot_release(ckpt_cache *c, int i)
{
    cache_slot *s = &c->slots[i];
    if (s->dirty) cache_disk_flush_slot(c, i); /* its state reaches the archive first: nothing is lost */
    cache_disk_release_slot(c, i);
    for (int k = 0; k < s->n_ck; k++) ckpt_free(&s->ck[k]);
    free(s->ck);
    if (s->seq) eng_seq_free(s->seq);
    pidx_remove(c->ix, i);
    memset(s, 0, sizeof *s);
}

void ckpt_cache_free(ckpt_cache *c)
{
    if (!c) return;
    if (c->slots) ckpt_cache_archive_flush(c);
    for (int i = 0; i < c->cfg.max_slots && c->slots; i++) slot_release(c, i);
    free(c->slots);
    cache_disk_free(c);
    pidx_free(c->ix);
    free(c);
}

void ckpt_cache_clear(ckpt_cache *c)
{
    for (int i = 0; i < c->cfg.max_slots; i++) slot_release(c, i);
}

int32_t ckpt_cache_n_ctx(const ckpt_cache *c) { return c->n_ctx; }

void ckpt_cache_set_n_ctx(ckpt_cache *c, int32_t n_ctx)
{
    if (n_ctx == c->n_ctx) return;
    ckpt_cache_clear(c);
    c->n_ctx = n_ctx;
}

/* Inserts a checkpoint keeping the list sorted by position; one per position
 * (a later one at the same position replaces it). Takes ownership of *k. */
int slot_add_ckpt(cache_slot *s, ckpt *k)
{
    for (int i = 0; i < s->n_ck; i++)
        if (s->ck[i].snap.pos == k->snap.pos) {
            ckpt_free(&s->ck[i]);
            s->ck[i] = *k;
            return 0;
        }
    if (s->n_ck == s->cap_ck) {
        int cap = s->cap_ck ? 2 * s->cap_ck : 8;
        ckpt *p = realloc(s->ck, sizeof *p * (size_t)cap);
        if (!p) return WK_ENOMEM;
        s->ck = p;
        s->cap_ck = cap;
    }
    int at = s->n_ck;
    while (at > 0 && s->ck[at - 1].snap.pos > k->snap.pos) at--;
    memmove(&s->ck[at + 1], &s->ck[at], sizeof *s->ck * (size_t)(s->n_ck - at));
    s->ck[at] = *k;
    s->n_ck++;
    return 0;
}

/* A bookkeeping checkpoint for pure-attention models: no state, the KV
 * itself can be cut at any position. */
static void fill_position_ckpt(const ckpt_cache *c, ckpt *k, const int32_t *ids, int32_t pos, int kind, uint64_t fp)
{
    memset(k, 0, sizeof *k);
    k->snap.pos = pos;
    k->snap.prefix_hash = ckpt_prefix_hash(ids, pos);
    k->snap.policy_fp = fp;
    k->snap.model_id = c->m->model_id;
    k->kind = kind;
    k->t_ms = wk_now_ms();
}

/* ---- the reuse decision ---------------------------------------------------------- */

/* What slot s can give prompt ids[0..n) that shares `match` tokens with it. */
static choice slot_usable(ckpt_cache *c, int si, const int32_t *ids, int32_t n, int32_t match)
{
    choice ch = {si, -1, match, 0, -1, -1};
    cache_slot *s = &c->slots[si];
    uint64_t fp = cache_policy_now(c);
    if (!s->seq || eng_seq_policy_fp(s->seq) != fp) return ch;
    int32_t limit = match < n - 1 ? match : n - 1; /* the last prompt token is always computed */
    if (limit <= 0) return ch;
    /* The index said so; the sequence's own tokens must agree, token by token. */
    if (eng_seq_pos(s->seq) < match || memcmp(eng_seq_tokens(s->seq), ids, sizeof(int32_t) * (size_t)match)) {
        WK_WARN("cache: slot %d does not hold the %d tokens its index entry claims; not reused", si, match);
        c->st.refused++;
        return ch;
    }
    if (!c->recurrent) {
        ch.start = limit;
        ch.kind = CKPT_KV_PREFIX;
        return ch;
    }
    if (s->live_ok && eng_seq_pos(s->seq) == match && match <= limit) {
        ch.start = match;
        ch.kind = CKPT_LIVE;
        return ch;
    }
    for (int i = s->n_ck - 1; i >= 0; i--) {
        ckpt *k = &s->ck[i];
        if (k->snap.pos > limit || k->snap.pos <= 0) continue;
        if (!k->complete) continue; /* pending in a prefill in progress on this slot */
        wk_error verr = {0};
        if (ckpt_validate(k, ids, n, c->m->model_id, fp, &verr)) {
            /* the prefix matched token by token, so this is a stale or foreign checkpoint */
            WK_WARN("cache: slot %d: %s; dropped", si, verr.msg);
            c->st.refused++;
            slot_remove_ckpt(s, i);
            continue;
        }
        ch.start = k->snap.pos;
        ch.kind = k->kind;
        ch.ck_index = i;
        return ch;
    }
    return ch;
}

static bool better(const choice *a, const choice *b)
{
    if (a->start != b->start) return a->start > b->start;
    if ((a->slot >= 0) != (b->slot >= 0)) return a->slot >= 0; /* RAM over disk */
    return a->match > b->match;
}

/* Free slot if any, else the least recently used one; never `keep` nor a busy
 * one (-1 when none is left). */
static int pick_victim(ckpt_cache *c, int keep)
{
    int best = -1;
    for (int i = 0; i < c->cfg.max_slots; i++) {
        if (i == keep || c->slots[i].busy) continue;
        if (!c->slots[i].seq) return i;
        if (best < 0 || c->slots[i].last_used_ms < c->slots[best].last_used_ms) best = i;
    }
    return best;
}

/* A cut of a cached conversation that would drop more than it reuses
 * (and at least this many tokens) goes to another slot instead. */
#define CUT_MIN_LOSS 256

/* Whether reusing best in place would cut a long conversation for a short
 * match: what is lost (the slot's tokens past the reuse point) outweighs
 * what is gained (the reused prefix). A side request that shares only a
 * chat header with the main conversation must not destroy it. */
static bool cut_costs_more_than_it_gives(const ckpt_cache *c, const choice *best)
{
    const cache_slot *s = &c->slots[best->slot];
    int32_t lost = eng_seq_pos(s->seq) - best->start;
    return lost >= CUT_MIN_LOSS && lost > best->start;
}

/* Empties slot si for a new conversation: archives what it holds first
 * (nothing is lost), drops its checkpoints and index entry. */
static void slot_reset(ckpt_cache *c, int si)
{
    cache_slot *s = &c->slots[si];
    if (s->dirty) cache_disk_flush_slot(c, si);
    cache_disk_release_slot(c, si);
    for (int i = 0; i < s->n_ck; i++) ckpt_free(&s->ck[i]);
    s->n_ck = 0;
    if (s->seq) eng_seq_clear(s->seq);
    s->conv = c->next_conv++;
    s->live_ok = false;
}

/* Makes slot dst hold the first best->start tokens of slot best->slot (its
 * KV, and for recurrent models the checkpoint there) without touching the
 * source. 0 on success, else dst is left cold. */
static int copy_prefix(ckpt_cache *c, int dst, const choice *best)
{
    cache_slot *from = &c->slots[best->slot], *to = &c->slots[dst];
    wk_error err = {0};
    int rc = eng_seq_copy_prefix(to->seq, from->seq, best->start, &err);
    if (!rc && c->recurrent) {
        ckpt k;
        rc = ckpt_copy(&k, &from->ck[best->ck_index], &err);
        if (!rc && (rc = seq_restore(to->seq, &k.snap, &err)) == 0 && slot_add_ckpt(to, &k)) ckpt_free(&k);
        else if (rc) ckpt_free(&k);
    }
    if (rc) {
        WK_WARN("cache: copying %d tokens from slot %d: %s; prefilling from scratch", best->start, best->slot, err.msg);
        eng_seq_clear(to->seq);
    }
    return rc;
}

/* Marks worth a checkpoint in (start, n) into the plan: essential boundaries always,
 * the others when min_step tokens past the previous checkpoint. */
static int plan_marks(const ckpt_cache *c, ckpt_plan *plan, const ckpt_mark *marks, int n_marks, int32_t start,
                      int32_t n)
{
    free(plan->marks);
    plan->marks = calloc((size_t)n_marks + 1, sizeof *plan->marks);
    plan->n_marks = 0;
    if (!plan->marks) return WK_ENOMEM;
    int32_t last_user = -1;
    for (int i = 0; i < n_marks; i++)
        if (marks[i].kind == CKPT_LAST_USER_START) last_user = marks[i].pos;
    int32_t prev = start;
    for (int i = 0; i < n_marks; i++) {
        const ckpt_mark *mk = &marks[i];
        if (mk->pos <= start || mk->pos >= n) continue;
        bool essential = mk->kind == CKPT_SYSTEM_END || mk->kind == CKPT_LAST_USER_START ||
                         mk->kind == CKPT_GENERATION_START ||
                         /* inside the current agentic turn: every tool result and assistant header */
                         (last_user >= 0 && mk->pos > last_user &&
                          (mk->kind == CKPT_TOOL_RESULT || mk->kind == CKPT_ASSISTANT_START));
        if (!essential && mk->pos - prev < c->cfg.min_step) continue;
        if (plan->n_marks && plan->marks[plan->n_marks - 1].pos == mk->pos) {
            if (mk->kind > plan->marks[plan->n_marks - 1].kind) plan->marks[plan->n_marks - 1].kind = mk->kind;
            continue;
        }
        plan->marks[plan->n_marks++] = *mk;
        prev = mk->pos;
    }
    plan->marks[plan->n_marks++] = (ckpt_mark){n, CKPT_PROMPT_END};
    return 0;
}

/* The slot's sequence, allocated if needed; when no memory is left for
 * another sequence, the least recently used allocated slot instead. -1 if
 * not even that exists. */
static int slot_with_sequence(ckpt_cache *c, int si, int keep, wk_error *err)
{
    if (c->slots[si].seq) return si;
    wk_error aerr = {0};
    int rc = eng_seq_new(&c->slots[si].seq, c->ctx, c->n_ctx, &aerr);
    if (rc == 0) {
        c->slots[si].conv = c->next_conv++;
        return si;
    }
    int lru = -1;
    for (int i = 0; i < c->cfg.max_slots; i++)
        if (i != keep && c->slots[i].seq && !c->slots[i].busy && (lru < 0 || c->slots[i].last_used_ms < c->slots[lru].last_used_ms)) lru = i;
    if (lru < 0) {
        wk_fail(err, rc, "%s", aerr.msg);
        return -1;
    }
    WK_WARN("cache: %s; reusing slot %d", aerr.msg, lru);
    return lru;
}

int ckpt_cache_begin(ckpt_cache *c, const int32_t *ids, int32_t n, const ckpt_mark *marks, int n_marks, bool fresh,
                     ckpt_plan *plan, wk_error *err)
{
    memset(plan, 0, sizeof *plan);
    plan->n_prompt = n;
    plan->ckpt_kind = -1;
    plan->ckpt_pos = -1;
    choice best = {-1, -1, 0, 0, -1, -1};
    if (!fresh && n > 0) {
        pidx_hit hits[64];
        int nh = pidx_match(c->ix, ids, n, hits, 64);
        if (nh > 64) nh = 64;
        for (int h = 0; h < nh && hits[h].match > 0; h++) {
            choice ch;
            if (hits[h].key < CACHE_DISK_KEY) ch = slot_usable(c, (int)hits[h].key, ids, n, hits[h].match);
            else ch = cache_disk_usable(c, hits[h].key, ids, n, hits[h].match);
            if (better(&ch, &best)) best = ch;
        }
    }
    /* Where the request runs: the matching slot itself, or (cold, from the
     * archive, or when cutting the match would cost more than it gives) a
     * free or least-recently-used one, seeded with a copy of the shared prefix. */
    /* a slot another request works on is only ever copied from */
    bool in_place = best.start > 0 && best.slot >= 0 && !c->slots[best.slot].busy &&
                    !cut_costs_more_than_it_gives(c, &best);
    bool copy = best.start > 0 && best.slot >= 0 && !in_place;
    int si = in_place ? best.slot : pick_victim(c, copy ? best.slot : -1);
    if (si < 0) { /* one slot only: the cut is the lesser evil */
        if (best.slot < 0 || c->slots[best.slot].busy)
            return wk_fail(err, WK_EBUSY, "cache: every slot is in use by a request in progress");
        si = best.slot;
        in_place = true;
        copy = false;
    }
    si = slot_with_sequence(c, si, copy ? best.slot : -1, err);
    if (si < 0) return err->code;
    if (si == best.slot && copy) { /* no memory for a second sequence: cut in place after all */
        in_place = true;
        copy = false;
    }
    cache_slot *s = &c->slots[si];
    cache_disk_release_slot(c, si);
    wk_error rerr = {0};
    if (!in_place) {
        slot_reset(c, si);
        if (copy) {
            if (copy_prefix(c, si, &best)) best.start = 0;
            else {
                c->st.copies++;
                if (!c->recurrent) best.kind = CKPT_KV_PREFIX;
            }
        } else if (best.start > 0 && best.disk >= 0) {
            if (cache_disk_load(c, best.disk, si, &best, ids, n)) best.start = 0;
            else plan->from_disk = true;
        } else {
            best.start = 0;
        }
        if (best.start > 0 && plan->from_disk && !c->recurrent) {
            if (kv_truncate(s->seq, best.start, &rerr)) best.start = 0;
        } else if (best.start > 0 && plan->from_disk) {
            if (ckpt_restore(&s->ck[best.ck_index], c->ctx, s->seq, ids, n, &rerr)) {
                c->st.refused++;
                best.start = 0;
            }
        }
    } else if (best.kind == CKPT_KV_PREFIX) {
        if (kv_truncate(s->seq, best.start, &rerr)) best.start = 0;
    } else if (best.kind != CKPT_LIVE) {
        if (ckpt_restore(&s->ck[best.ck_index], c->ctx, s->seq, ids, n, &rerr)) {
            c->st.refused++;
            best.start = 0;
        }
    }
    if (rerr.code) WK_WARN("cache: restore refused (%s); prefilling from scratch", rerr.msg);
    if (best.start == 0) {
        eng_seq_clear(s->seq);
        for (int i = 0; i < s->n_ck; i++) ckpt_free(&s->ck[i]);
        s->n_ck = 0;
        if (in_place || plan->from_disk) s->conv = c->next_conv++;
        plan->from_disk = false;
    }
    slot_drop_ckpts_after(s, best.start);
    /* A cancelled prefill falls back to a confirmed state: make sure one
     * exists where this request resumes. */
    if (c->recurrent && best.start > 0 && (!s->n_ck || s->ck[s->n_ck - 1].snap.pos != best.start)) {
        ckpt k = {0};
        if (ckpt_take(&k, s->seq, CKPT_RESUME, &rerr) == 0) {
            k.complete = true;
            if (slot_add_ckpt(s, &k)) ckpt_free(&k);
        }
    }
    s->live_ok = false;
    s->last_used_ms = wk_now_ms();
    pidx_put(c->ix, si, eng_seq_tokens(s->seq), eng_seq_pos(s->seq), &rerr);
    s->busy = true;
    plan->seq = s->seq;
    plan->slot = si;
    plan->match = best.match < n ? best.match : n;
    plan->start = best.start;
    /* tokens between the restored state and the match (cold: nothing was restored) */
    plan->replayed = best.start > 0 && plan->match > best.start ? plan->match - best.start : 0;
    if (best.start > 0) {
        plan->ckpt_kind = best.kind;
        plan->ckpt_pos = best.start;
        c->st.hits++;
    } else {
        c->st.misses++;
    }
    c->st.replayed_tokens += (uint64_t)plan->replayed;
    plan->confirmed_pos = best.start;
    int rc = plan_marks(c, plan, marks, marks ? n_marks : 0, best.start, n);
    if (rc) return wk_fail(err, rc, "cache: out of memory");
    return 0;
}

/* ---- prefill with checkpoints ------------------------------------------------------ */

typedef struct progress_wrap {
    const eng_prefill_opts *orig;
    int32_t base, total;
} progress_wrap;

static void wrapped_progress(void *user, int32_t done, int32_t total)
{
    (void)total;
    progress_wrap *w = user;
    w->orig->progress(w->orig->user, w->base + done, w->total);
}

static bool wrapped_cancel(void *user)
{
    progress_wrap *w = user;
    return w->orig->cancel(w->orig->user);
}

int ckpt_cache_prefill(ckpt_cache *c, ckpt_plan *plan, const int32_t *ids, int32_t n, const eng_prefill_opts *opts,
                       wk_error *err)
{
    cache_slot *s = &c->slots[plan->slot];
    progress_wrap w = {opts, 0, n - plan->start};
    eng_prefill_opts po = {0};
    if (opts) {
        po = *opts;
        po.user = &w;
        po.progress = opts->progress ? wrapped_progress : NULL;
        po.cancel = opts->cancel ? wrapped_cancel : NULL;
    }
    /* One request fed in pieces: the attention policy's dense tail is the end of the whole prompt. */
    po.span_start = plan->start;
    po.span_end = n;
    int32_t cur = plan->start;
    uint64_t fp = eng_seq_policy_fp(s->seq);
    for (int i = 0; i < plan->n_marks; i++) {
        int32_t p = plan->marks[i].pos;
        /* pure-attention models need no stops: one prefill, bookkeeping after */
        if (!c->recurrent && p < n) continue;
        if (p <= cur) continue;
        w.base = cur - plan->start;
        int rc = eng_prefill(c->ctx, s->seq, ids + cur, p - cur, &po, err);
        if (rc) return rc;
        cur = p;
        if (c->recurrent) {
            ckpt k = {0};
            if (ckpt_take(&k, s->seq, plan->marks[i].kind, err) == 0) {
                if (slot_add_ckpt(s, &k) == 0) plan->n_pending++;
                else ckpt_free(&k);
            }
        }
    }
    if (cur < n) { /* no marks at all (cannot happen: prompt end is one) */
        w.base = cur - plan->start;
        int rc = eng_prefill(c->ctx, s->seq, ids + cur, n - cur, &po, err);
        if (rc) return rc;
    }
    if (!c->recurrent)
        for (int i = 0; i < plan->n_marks; i++) {
            ckpt k;
            fill_position_ckpt(c, &k, ids, plan->marks[i].pos, plan->marks[i].kind, fp);
            if (slot_add_ckpt(s, &k) == 0) plan->n_pending++;
        }
    /* The whole prompt went through: its checkpoints are now confirmed. */
    for (int i = 0; i < s->n_ck; i++) s->ck[i].complete = true;
    plan->n_pending = 0;
    plan->confirmed_pos = n;
    return 0;
}

void ckpt_cache_decoded(ckpt_cache *c, ckpt_plan *plan)
{
    plan->n_generated++;
    if (!c->recurrent || c->cfg.gen_interval <= 0 || plan->n_generated % c->cfg.gen_interval) return;
    cache_slot *s = &c->slots[plan->slot];
    ckpt k = {0};
    wk_error err = {0};
    if (ckpt_take(&k, s->seq, CKPT_GEN_INTERVAL, &err) == 0) {
        k.complete = true; /* each decode step finished: the state is consistent */
        if (slot_add_ckpt(s, &k)) ckpt_free(&k);
    }
}

int32_t ckpt_cache_decode_room(const ckpt_cache *c, const ckpt_plan *plan)
{
    if (!c->recurrent || c->cfg.gen_interval <= 0) return INT32_MAX;
    return c->cfg.gen_interval - plan->n_generated % c->cfg.gen_interval;
}

/* Back to the newest confirmed state after a cancelled or failed prefill. */
static void fall_back(ckpt_cache *c, cache_slot *s, ckpt_plan *plan)
{
    int k = 0;
    for (int i = 0; i < s->n_ck; i++) {
        if (!s->ck[i].complete) ckpt_free(&s->ck[i]);
        else s->ck[k++] = s->ck[i];
    }
    s->n_ck = k;
    wk_error err = {0};
    int32_t pos = eng_seq_pos(s->seq);
    if (!c->recurrent) {
        int32_t to = plan->confirmed_pos < pos ? plan->confirmed_pos : pos;
        if (kv_truncate(s->seq, to, &err)) eng_seq_clear(s->seq);
    } else {
        bool restored = false;
        for (int i = s->n_ck - 1; i >= 0 && !restored; i--) {
            if (s->ck[i].snap.pos > pos) continue;
            restored = seq_restore(s->seq, &s->ck[i].snap, &err) == 0;
        }
        if (!restored) eng_seq_clear(s->seq);
    }
    slot_drop_ckpts_after(s, eng_seq_pos(s->seq));
}

void ckpt_cache_end(ckpt_cache *c, ckpt_plan *plan, bool ok)
{
    if (plan->slot < 0 || plan->slot >= c->cfg.max_slots || !plan->seq) return;
    cache_slot *s = &c->slots[plan->slot];
    int32_t pos = eng_seq_pos(s->seq);
    if (!ok) {
        fall_back(c, s, plan);
    } else if (plan->n_generated > 0 && pos > 0 && (!s->n_ck || s->ck[s->n_ck - 1].snap.pos < pos)) {
        ckpt k = {0};
        wk_error err = {0};
        int rc = 0;
        if (c->recurrent) rc = ckpt_take(&k, s->seq, CKPT_GEN_END, &err);
        else fill_position_ckpt(c, &k, eng_seq_tokens(s->seq), pos, CKPT_GEN_END, eng_seq_policy_fp(s->seq));
        if (rc == 0) {
            k.complete = true;
            if (slot_add_ckpt(s, &k)) ckpt_free(&k);
        }
    }
    s->live_ok = true;
    s->last_used_ms = wk_now_ms();
    wk_error err = {0};
    if (pidx_put(c->ix, plan->slot, eng_seq_tokens(s->seq), eng_seq_pos(s->seq), &err))
        WK_WARN("cache: %s", err.msg);
    cache_trim_slot(c, s);
    cache_enforce_budget(c);
    if (ok) cache_disk_mark_dirty(c, plan->slot);
    s->busy = false;
    ckpt_cache_plan_free(plan);
}

void ckpt_cache_plan_free(ckpt_plan *plan)
{
    free(plan->marks);
    plan->marks = NULL;
    plan->n_marks = 0;
}
