/* The matcher: parse stacks as interned frames, configurations (sets of
 * stacks waiting on a terminal) as interned DFA states, transitions
 * computed on first use and remembered.
 *
 * Advancing a stack past an element may finish alternatives (pop to the
 * parent frame) or enter rules (push a frame per alternative); the closure
 * runs that to stacks that wait on a byte set or a special token. A rule
 * at the end of an alternative replaces its caller's frame instead of
 * stacking on it (a tail call), so right recursion and long `x*` chains run
 * in constant depth. A frame is expanded at most once per closure, which
 * ends loops through empty matches. */
#include <stdlib.h>
#include <string.h>

#include "engine/grammar_impl.h"

/* Closure work (frames expanded) of one transition before giving up. */
#define MAX_CLOSURE_WORK (1u << 20)

static uint64_t mix64(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

static uint64_t frame_hash(uint32_t parent, uint32_t alt, uint32_t pos, uint32_t count)
{
    return mix64(((uint64_t)parent << 32 | alt) ^ mix64((uint64_t)pos << 32 | count));
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *v = realloc(*p, c * elem);
    if (!v) return WK_ENOMEM;
    *p = v;
    *cap = c;
    return 0;
}

static void set_error(gram_runtime *rt, int code)
{
    if (!rt->err_code) rt->err_code = code;
}

/* ---- frames ---- */

static int frame_tab_rehash(gram_runtime *rt, size_t cap)
{
    uint32_t *tab = calloc(cap, sizeof *tab);
    if (!tab) return WK_ENOMEM;
    for (size_t id = 1; id < rt->n_frames; id++) {
        const gram_frame *f = &rt->frames[id];
        size_t i = frame_hash(f->parent, f->alt, f->pos, f->count) & (cap - 1);
        while (tab[i]) i = (i + 1) & (cap - 1);
        tab[i] = (uint32_t)id;
    }
    free(rt->frame_tab);
    rt->frame_tab = tab;
    rt->frame_tab_cap = cap;
    return 0;
}

/* The frame (parent, alt, pos, count), made if new; GRAM_NONE when it
 * would be deeper than GRAM_MAX_DEPTH (the path is dropped) or on error. */
static uint32_t intern_frame(gram_runtime *rt, uint32_t parent, uint32_t alt, uint32_t pos, uint32_t count)
{
    uint32_t depth = rt->frames[parent].depth + 1;
    bool relative = rt->frames[parent].relative;
    if (relative && depth > rt->rel_max_depth) rt->rel_max_depth = depth;
    if (depth > GRAM_MAX_DEPTH) return GRAM_NONE;
    size_t mask = rt->frame_tab_cap - 1;
    size_t i = frame_hash(parent, alt, pos, count) & mask;
    for (uint32_t id; (id = rt->frame_tab[i]); i = (i + 1) & mask) {
        const gram_frame *f = &rt->frames[id];
        if (f->parent == parent && f->alt == alt && f->pos == pos && f->count == count) return id;
    }
    if (rt->n_frames >= UINT32_MAX - 1) {
        set_error(rt, WK_ERANGE);
        return GRAM_NONE;
    }
    size_t old_cap = rt->cap_frames;
    if (grow((void **)&rt->frames, &rt->cap_frames, rt->n_frames + 1, sizeof *rt->frames)) {
        set_error(rt, WK_ENOMEM);
        return GRAM_NONE;
    }
    if (rt->cap_frames != old_cap) {
        uint32_t *m = realloc(rt->mark, rt->cap_frames * sizeof *m);
        if (!m) {
            set_error(rt, WK_ENOMEM);
            return GRAM_NONE;
        }
        memset(m + old_cap, 0, (rt->cap_frames - old_cap) * sizeof *m);
        rt->mark = m;
    }
    uint32_t id = (uint32_t)rt->n_frames++;
    rt->frames[id] = (gram_frame){parent, alt, pos, count, depth, relative};
    rt->mark[id] = 0;
    rt->frame_tab[i] = id;
    if (rt->n_frames * 2 > rt->frame_tab_cap && frame_tab_rehash(rt, rt->frame_tab_cap * 2)) {
        set_error(rt, WK_ENOMEM);
        return GRAM_NONE;
    }
    return id;
}

/* ---- closure ---- */

static void closure_begin(gram_runtime *rt)
{
    if (++rt->stamp == 0) { /* wrapped: old stamps could collide */
        memset(rt->mark, 0, rt->n_frames * sizeof *rt->mark);
        rt->stamp = 1;
    }
    rt->n_work = rt->n_ready = 0;
    rt->accept = rt->escape = false;
    rt->steps = 0;
}

static void push_work(gram_runtime *rt, uint32_t id)
{
    if (id == GRAM_NONE || rt->mark[id] == rt->stamp) return;
    rt->mark[id] = rt->stamp;
    if (grow((void **)&rt->work, &rt->cap_work, rt->n_work + 1, sizeof *rt->work)) {
        set_error(rt, WK_ENOMEM);
        return;
    }
    rt->work[rt->n_work++] = id;
}

static inline const gram_elem *frame_elem(const gram_runtime *rt, const gram_frame *f)
{
    return &rt->g->elems[rt->g->alts[f->alt].first + f->pos];
}

/* Continue alternative alt of a frame under parent at element pos:
 * finished alternatives return to their parent (repeatedly). */
static void advance(gram_runtime *rt, uint32_t parent, uint32_t alt, uint32_t pos)
{
    for (;;) {
        if (pos < rt->g->alts[alt].n) {
            push_work(rt, intern_frame(rt, parent, alt, pos, 0));
            return;
        }
        if (parent == 0) {
            rt->accept = true;
            return;
        }
        gram_frame f = rt->frames[parent];
        if (f.alt == GRAM_NONE) { /* a placeholder: what lies below is not known here */
            rt->escape = true;
            return;
        }
        const gram_elem *e = frame_elem(rt, &f);
        if (e->kind == GE_RULE) {
            parent = f.parent;
            alt = f.alt;
            pos = f.pos + 1;
            continue;
        }
        /* one more repetition; above min the exact count of an unbounded
         * repetition no longer matters, so it saturates (same frame) */
        uint32_t c = f.count + 1;
        if (e->max == GRAM_INF && c > e->min) c = e->min;
        push_work(rt, intern_frame(rt, f.parent, f.alt, f.pos, c));
        return;
    }
}

static void enter_rule(gram_runtime *rt, uint32_t base, uint32_t rule)
{
    const gram_rule *r = &rt->g->rules[rule];
    for (uint32_t a = r->first_alt; a < r->first_alt + r->n_alts; a++)
        if (rt->alt_on[a]) advance(rt, base, a, 0);
}

static void expand(gram_runtime *rt, uint32_t id)
{
    gram_frame f = rt->frames[id];
    const gram_elem *e = frame_elem(rt, &f);
    switch (e->kind) {
    case GE_BYTES:
    case GE_SPECIAL:
        if (grow((void **)&rt->ready, &rt->cap_ready, rt->n_ready + 1, sizeof *rt->ready)) {
            set_error(rt, WK_ENOMEM);
            return;
        }
        rt->ready[rt->n_ready++] = id;
        return;
    case GE_RULE: {
        bool tail = f.pos + 1 == rt->g->alts[f.alt].n;
        enter_rule(rt, tail ? f.parent : id, e->arg);
        return;
    }
    default:
        if (f.count < e->max) enter_rule(rt, id, e->arg);
        if (f.count >= e->min) advance(rt, f.parent, f.alt, f.pos + 1);
        return;
    }
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t dstate_hash(const uint32_t *frames, size_t n, bool accept, bool escape)
{
    uint64_t h = (accept ? 0x9e3779b97f4a7c15ull : 0x632be59bd9b4e019ull) ^ (escape ? 0x2545f4914f6cdd1dull : 0);
    for (size_t i = 0; i < n; i++) h = mix64(h ^ frames[i]) + i;
    return h | 1; /* never 0 */
}

static int ds_tab_rehash(gram_runtime *rt, size_t cap)
{
    uint32_t *tab = calloc(cap, sizeof *tab);
    if (!tab) return WK_ENOMEM;
    for (size_t id = 1; id < rt->n_ds; id++) {
        size_t i = rt->ds[id].hash & (cap - 1);
        while (tab[i]) i = (i + 1) & (cap - 1);
        tab[i] = (uint32_t)id;
    }
    free(rt->ds_tab);
    rt->ds_tab = tab;
    rt->ds_tab_cap = cap;
    return 0;
}

/* The DFA state for a sorted frame set, made if new. Returns its id or a
 * negative error. */
static int64_t intern_dstate(gram_runtime *rt, const uint32_t *frames, size_t n, bool accept, bool escape)
{
    if (n == 0 && !accept && !escape) return GRAM_DEAD;
    uint64_t h = dstate_hash(frames, n, accept, escape);
    size_t mask = rt->ds_tab_cap - 1;
    size_t i = h & mask;
    for (uint32_t id; (id = rt->ds_tab[i]); i = (i + 1) & mask) {
        const gram_dstate *d = &rt->ds[id];
        if (d->hash == h && d->n_frames == n && d->accept == accept && d->escape == escape &&
            !memcmp(rt->ds_frames + d->frames_off, frames, n * sizeof *frames))
            return id;
    }
    if (rt->n_ds >= INT32_MAX) return WK_ERANGE;
    size_t old_cap = rt->cap_ds;
    if (grow((void **)&rt->ds, &rt->cap_ds, rt->n_ds + 1, sizeof *rt->ds)) return WK_ENOMEM;
    if (rt->cap_ds != old_cap) {
        int32_t *nx = realloc(rt->next, rt->cap_ds * rt->width * sizeof *nx);
        if (!nx) return WK_ENOMEM;
        rt->next = nx;
    }
    if (grow((void **)&rt->ds_frames, &rt->cap_ds_frames, rt->n_ds_frames + n, sizeof *rt->ds_frames))
        return WK_ENOMEM;
    uint32_t id = (uint32_t)rt->n_ds++;
    memcpy(rt->ds_frames + rt->n_ds_frames, frames, n * sizeof *frames);
    rt->ds[id] = (gram_dstate){
        .frames_off = rt->n_ds_frames, .n_frames = (uint32_t)n, .accept = accept, .escape = escape, .hash = h};
    rt->n_ds_frames += n;
    for (size_t c = 0; c < rt->width; c++) rt->next[(size_t)id * rt->width + c] = GRAM_UNKNOWN;
    rt->ds_tab[i] = id;
    if (rt->n_ds * 2 > rt->ds_tab_cap && ds_tab_rehash(rt, rt->ds_tab_cap * 2)) return WK_ENOMEM;
    return id;
}

/* Runs the work list, then interns the resulting configuration. */
static int64_t closure_finish(gram_runtime *rt, wk_error *err)
{
    while (rt->n_work && !rt->err_code) {
        uint32_t id = rt->work[--rt->n_work];
        if (++rt->steps > MAX_CLOSURE_WORK) {
            set_error(rt, WK_ERANGE);
            return wk_fail(err, WK_ERANGE, "grammar: more than %u parse steps for one byte (grammar too ambiguous)",
                           MAX_CLOSURE_WORK);
        }
        expand(rt, id);
        if (rt->n_ready > GRAM_MAX_PARSES) {
            set_error(rt, WK_ERANGE);
            return wk_fail(err, WK_ERANGE, "grammar: more than %u parses at one position (grammar too ambiguous)",
                           GRAM_MAX_PARSES);
        }
    }
    if (rt->err_code == WK_ENOMEM) return wk_fail(err, WK_ENOMEM, "grammar: out of memory");
    if (rt->err_code) return wk_fail(err, rt->err_code, "grammar: state space exhausted");
    if (rt->n_ready > 1) qsort(rt->ready, rt->n_ready, sizeof *rt->ready, cmp_u32);
    int64_t id = intern_dstate(rt, rt->ready, rt->n_ready, rt->accept, rt->escape);
    if (id < 0) return wk_fail(err, (int)id, "grammar: out of memory for DFA states");
    return id;
}

int64_t gram_dfa_step_slow(gram_runtime *rt, uint32_t d, uint32_t c, wk_error *err)
{
    rt->err_code = 0;
    if (gram_runtime_bytes(rt) > GRAM_CACHE_HARD_BYTES)
        return wk_fail(err, WK_ERANGE, "grammar: state cache above %u MiB within one step", GRAM_CACHE_HARD_BYTES >> 20);
    closure_begin(rt);
    const gram_grammar *g = rt->g;
    const gram_dstate *ds = &rt->ds[d];
    size_t off = ds->frames_off, n = ds->n_frames;
    for (size_t k = 0; k < n; k++) {
        uint32_t id = rt->ds_frames[off + k];
        gram_frame f = rt->frames[id];
        const gram_elem *e = frame_elem(rt, &f);
        bool match = c < g->n_classes ? e->kind == GE_BYTES && gram_set_has(g->sets[e->arg], g->class_rep[c])
                                      : e->kind == GE_SPECIAL && e->arg == c - g->n_classes;
        if (match) advance(rt, f.parent, f.alt, f.pos + 1);
    }
    int64_t t = closure_finish(rt, err);
    if (t >= 0) rt->next[(size_t)d * rt->width + c] = (int32_t)t;
    return t;
}

/* ---- relative configurations ---- */

/* The placeholder frame: no alternative, never expanded, depth 0. */
static uint32_t placeholder(gram_runtime *rt)
{
    if (!rt->placeholder) {
        uint32_t id = intern_frame(rt, 0, GRAM_NONE, 0, 0);
        if (id == GRAM_NONE) return id;
        rt->frames[id].depth = 0;
        rt->frames[id].relative = 1;
        rt->placeholder = id;
    }
    return rt->placeholder;
}

/* Frame f re-rooted: its chain up to (not including) `base` copied onto
 * `ph`. Chains are short (the part above the shared frame). */
static uint32_t reroot(gram_runtime *rt, uint32_t f, uint32_t base, uint32_t ph)
{
    if (f == base) return ph;
    gram_frame fr = rt->frames[f];
    uint32_t p = reroot(rt, fr.parent, base, ph);
    return p == GRAM_NONE ? GRAM_NONE : intern_frame(rt, p, fr.alt, fr.pos, fr.count);
}

int64_t gram_dfa_relative(gram_runtime *rt, uint32_t d, uint32_t *base_depth, wk_error *err)
{
    if (rt->ds[d].rel_known) {
        *base_depth = rt->ds[d].rel_base_depth;
        return rt->ds[d].rel;
    }
    gram_dstate ds = rt->ds[d];
    uint32_t rel = GRAM_NONE, base = 0;
    if (ds.n_frames && !ds.accept && !ds.escape) {
        /* deepest frame shared by all stacks: lift the first stack's
         * ancestors and check each stack against them */
        base = rt->frames[rt->ds_frames[ds.frames_off]].parent;
        for (uint32_t k = 1; k < ds.n_frames && base; k++) {
            uint32_t f = rt->frames[rt->ds_frames[ds.frames_off + k]].parent;
            while (base && f) {
                uint32_t bd = rt->frames[base].depth, fd = rt->frames[f].depth;
                if (f == base) break;
                if (fd >= bd) f = rt->frames[f].parent;
                else base = rt->frames[base].parent;
            }
            if (f != base) base = 0;
        }
        if (base) {
            rt->err_code = 0;
            uint32_t ph = placeholder(rt);
            uint32_t *frames = malloc(ds.n_frames * sizeof *frames);
            if (!frames) return wk_fail(err, WK_ENOMEM, "grammar: out of memory");
            size_t n = 0;
            for (uint32_t k = 0; k < ds.n_frames && ph != GRAM_NONE; k++) {
                uint32_t r = reroot(rt, rt->ds_frames[ds.frames_off + k], base, ph);
                if (r == GRAM_NONE) break;
                frames[n++] = r;
            }
            int64_t id = -1;
            if (n == ds.n_frames && !rt->err_code) {
                qsort(frames, n, sizeof *frames, cmp_u32);
                id = intern_dstate(rt, frames, n, false, false);
            }
            free(frames);
            if (rt->err_code == WK_ENOMEM || id == WK_ENOMEM) return wk_fail(err, WK_ENOMEM, "grammar: out of memory");
            if (id > 0) rel = (uint32_t)id;
        }
    }
    rt->ds[d].rel_known = true;
    rt->ds[d].rel = rel;
    rt->ds[d].rel_base_depth = *base_depth = rel == GRAM_NONE ? 0 : rt->frames[base].depth;
    return rel;
}

/* ---- runtime ---- */

static int runtime_tables_init(gram_runtime *rt)
{
    rt->n_frames = 1; /* frame 0: the bottom */
    if (grow((void **)&rt->frames, &rt->cap_frames, 1024, sizeof *rt->frames)) return WK_ENOMEM;
    free(rt->mark);
    rt->mark = calloc(rt->cap_frames, sizeof *rt->mark);
    if (!rt->mark) return WK_ENOMEM;
    rt->frames[0] = (gram_frame){0, 0, 0, 0, 0, 0};
    rt->stamp = 0;
    if (frame_tab_rehash(rt, 2048)) return WK_ENOMEM;
    rt->n_ds = 1; /* 0: dead */
    rt->n_ds_frames = 0;
    if (grow((void **)&rt->ds, &rt->cap_ds, 256, sizeof *rt->ds)) return WK_ENOMEM;
    if (grow((void **)&rt->ds_frames, &rt->cap_ds_frames, 1024, sizeof *rt->ds_frames)) return WK_ENOMEM;
    if (grow((void **)&rt->work, &rt->cap_work, 256, sizeof *rt->work)) return WK_ENOMEM;
    if (grow((void **)&rt->ready, &rt->cap_ready, 256, sizeof *rt->ready)) return WK_ENOMEM;
    free(rt->next);
    rt->next = malloc(rt->cap_ds * rt->width * sizeof *rt->next);
    if (!rt->next) return WK_ENOMEM;
    rt->ds[0] = (gram_dstate){0};
    for (size_t c = 0; c < rt->width; c++) rt->next[c] = GRAM_DEAD;
    return ds_tab_rehash(rt, 512);
}

static int64_t start_state(gram_runtime *rt, wk_error *err)
{
    rt->err_code = 0;
    closure_begin(rt);
    enter_rule(rt, 0, rt->g->root);
    return closure_finish(rt, err);
}

int gram_runtime_new(gram_runtime **out, const gram_grammar *g, const gram_vocab *gv, wk_error *err)
{
    *out = NULL;
    gram_runtime *rt = calloc(1, sizeof *rt);
    if (!rt) return wk_fail(err, WK_ENOMEM, "grammar: out of memory");
    rt->g = g;
    rt->gv = gv;
    rt->refs = 1;
    rt->width = g->n_classes + (uint32_t)g->n_specials;
    rt->alt_on = malloc(g->n_alts ? g->n_alts : 1);
    rt->special_token = malloc((g->n_specials ? g->n_specials : 1) * sizeof *rt->special_token);
    if (!rt->alt_on || !rt->special_token) goto oom;
    for (size_t k = 0; k < g->n_specials; k++)
        rt->special_token[k] = gv ? gram_vocab_find_special(gv, g->specials[k], strlen(g->specials[k])) : -1;
    for (size_t a = 0; a < g->n_alts; a++) {
        uint32_t gate = g->alts[a].gate;
        rt->alt_on[a] = gate == GRAM_NONE || ((gate & 1) == 0) == (rt->special_token[gate >> 1] >= 0);
    }
    if (runtime_tables_init(rt)) goto oom;
    int64_t s = start_state(rt, err);
    if (s < 0) {
        gram_runtime_release(rt);
        return (int)s;
    }
    rt->start = (uint32_t)s;
    *out = rt;
    return 0;
oom:
    gram_runtime_release(rt);
    return wk_fail(err, WK_ENOMEM, "grammar: out of memory");
}

void gram_runtime_release(gram_runtime *rt)
{
    if (!rt || --rt->refs > 0) return;
    free(rt->alt_on);
    free(rt->special_token);
    free(rt->frames);
    free(rt->frame_tab);
    free(rt->mark);
    free(rt->ds);
    free(rt->ds_frames);
    free(rt->next);
    free(rt->ds_tab);
    free(rt->work);
    free(rt->ready);
    for (size_t i = 0; i < rt->n_mask_slots; i++) {
        free(rt->masks[i].mask);
        free(rt->masks[i].cand);
    }
    free(rt->masks);
    free(rt->ds_slot);
    free(rt->walk);
    free(rt->walk_escaped);
    free(rt);
}

/* DFA state after bytes from d, or GRAM_DEAD, or a negative error. */
int64_t gram_dfa_walk_bytes(gram_runtime *rt, uint32_t d, const char *bytes, size_t len, wk_error *err)
{
    int64_t cur = d;
    for (size_t i = 0; i < len && cur > 0; i++)
        cur = gram_dfa_step(rt, (uint32_t)cur, rt->g->byte_class[(uint8_t)bytes[i]], err);
    return cur;
}

/* Between steps: a cache grown past its budget is rebuilt around the live
 * states. */
int gram_runtime_keep_bounded(gram_runtime *rt, wk_error *err)
{
    if (gram_runtime_bytes(rt) <= GRAM_CACHE_SOFT_BYTES) return 0;
    return gram_runtime_compact(rt, err);
}

size_t gram_runtime_bytes(const gram_runtime *rt)
{
    size_t mask_bytes = rt->gv ? rt->n_mask_slots * gram_mask_words(rt->gv) * sizeof(uint32_t) : 0;
    return rt->cap_frames * (sizeof *rt->frames + sizeof *rt->mark) + rt->frame_tab_cap * sizeof *rt->frame_tab +
           rt->cap_ds * (sizeof *rt->ds + rt->width * sizeof *rt->next) + rt->cap_ds_frames * sizeof *rt->ds_frames +
           rt->ds_tab_cap * sizeof *rt->ds_tab + mask_bytes;
}

/* Keeps the frames the live states' stacks use and their DFA states;
 * everything else (transitions, masks) is recomputed on demand. Frame ids
 * only grow along a stack (a parent is always older), so renumbering in id
 * order keeps parents first and sorted frame lists sorted. */
int gram_runtime_compact(gram_runtime *rt, wk_error *err)
{
    size_t n_live = 1;
    for (gram_state *s = rt->live; s; s = s->next) n_live++;
    uint32_t *old_ds = malloc(n_live * sizeof *old_ds);
    uint32_t *remap = calloc(rt->n_frames, sizeof *remap);
    uint32_t *saved = NULL;
    gram_frame *kept = NULL;
    int rc = WK_ENOMEM;
    if (!old_ds || !remap) goto done;
    size_t k = 0;
    old_ds[k++] = rt->start;
    for (gram_state *s = rt->live; s; s = s->next) old_ds[k++] = s->dstate;
    /* frames to keep (remap[id] = 1 for now) */
    size_t n_saved = 0;
    for (size_t i = 0; i < n_live; i++) {
        const gram_dstate *d = &rt->ds[old_ds[i]];
        n_saved += d->n_frames;
        for (uint32_t j = 0; j < d->n_frames; j++)
            for (uint32_t id = rt->ds_frames[d->frames_off + j]; id && !remap[id]; id = rt->frames[id].parent)
                remap[id] = 1;
    }
    /* the live states' frame lists and accept flags, before the tables go */
    saved = malloc((n_saved + 2 * n_live + 1) * sizeof *saved);
    if (!saved) goto done;
    size_t w = 0;
    for (size_t i = 0; i < n_live; i++) {
        const gram_dstate *d = &rt->ds[old_ds[i]];
        saved[w++] = d->n_frames;
        saved[w++] = d->accept;
        memcpy(saved + w, rt->ds_frames + d->frames_off, d->n_frames * sizeof *saved);
        w += d->n_frames;
    }
    size_t n_kept = 1;
    for (size_t id = 1; id < rt->n_frames; id++)
        if (remap[id]) remap[id] = (uint32_t)n_kept++;
    kept = malloc(n_kept * sizeof *kept);
    if (!kept) goto done;
    kept[0] = rt->frames[0];
    for (size_t id = 1; id < rt->n_frames; id++) {
        if (!remap[id]) continue;
        gram_frame f = rt->frames[id];
        f.parent = remap[f.parent];
        kept[remap[id]] = f;
    }
    /* rebuild */
    rt->cap_frames = 0;
    free(rt->frames);
    rt->frames = NULL;
    rt->cap_ds = 0;
    free(rt->ds);
    rt->ds = NULL;
    if (runtime_tables_init(rt)) goto done;
    if (grow((void **)&rt->frames, &rt->cap_frames, n_kept, sizeof *rt->frames)) goto done;
    uint32_t *m = realloc(rt->mark, rt->cap_frames * sizeof *m);
    if (!m) goto done;
    memset(m, 0, rt->cap_frames * sizeof *m);
    rt->mark = m;
    memcpy(rt->frames, kept, n_kept * sizeof *kept);
    rt->n_frames = n_kept;
    size_t cap = rt->frame_tab_cap;
    while (cap < n_kept * 2) cap *= 2;
    if (frame_tab_rehash(rt, cap)) goto done;
    uint32_t *new_ds = old_ds; /* overwritten in place, same order */
    size_t r = 0;
    for (size_t i = 0; i < n_live; i++) {
        uint32_t nf = saved[r++];
        bool acc = saved[r++];
        for (uint32_t j = 0; j < nf; j++) saved[r + j] = remap[saved[r + j]];
        int64_t id = intern_dstate(rt, saved + r, nf, acc, false);
        if (id < 0) goto done;
        new_ds[i] = (uint32_t)id;
        r += nf;
    }
    rt->start = new_ds[0];
    rt->placeholder = 0; /* not kept: live states never use it */
    k = 1;
    for (gram_state *s = rt->live; s; s = s->next) s->dstate = new_ds[k++];
    gram_masks_clear(rt);
    rc = 0;
done:
    free(old_ds);
    free(remap);
    free(saved);
    free(kept);
    if (rc) return wk_fail(err, rc, "grammar: out of memory while compacting the state cache");
    return 0;
}
