/* Sequence state: allocation, truncation, snapshot and restore. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "engine/engine_impl.h"
#include "util/checked.h"
#include "util/sysmem.h"
#include "util/units.h"

/* Bytes part p of a context keeps for a sequence of per_cache units per K or V cache. */
static uint64_t part_need(const eng_ctx *c, int32_t p, size_t per_cache, size_t rec_per_layer, uint32_t *n_attn,
                          uint32_t *n_rec)
{
    *n_attn = *n_rec = 0;
    for (uint32_t il = c->parts[p].first; il < c->parts[p].end; il++) {
        *n_attn += c->m->layers[il].attn_slot >= 0;
        *n_rec += c->m->layers[il].rec_slot >= 0;
    }
    return wk_sat_add(wk_sat_mul3(per_cache, 2 * sizeof(uint16_t), *n_attn), wk_sat_mul3(rec_per_layer, sizeof(float), *n_rec));
}

/* --gpu-mem: the sequence's state must fit beside what each GPU already holds. */
static int check_gpu_mem(const eng_ctx *c, const uint64_t *need, int32_t n_ctx, wk_error *err)
{
    const uint64_t cap = c->opt.split.gpu_mem;
    if (!cap) return 0;
    for (int32_t p = 0; p < c->n_parts; p++) {
        uint64_t more = 0;
        for (int32_t q = 0; q < c->n_parts; q++)
            if (c->parts[q].gpu == c->parts[p].gpu) more = wk_sat_add(more, need[q]);
        const uint64_t held = eng_gpu_held(c, c->parts[p].gpu);
        if (wk_sat_add(held, more) <= cap) continue;
        char name[32], h[32], m[32], t[32], cb[32];
        return wk_fail(err, WK_ENOMEM,
                       "sequence of %d positions: %s holds %s (weights, scratch, other sequences) and its KV and "
                       "recurrent state need %s more = %s, over --gpu-mem %s",
                       n_ctx, eng_part_name(c, p, name, sizeof name), wk_format_bytes(h, sizeof h, held),
                       wk_format_bytes(m, sizeof m, more), wk_format_bytes(t, sizeof t, wk_sat_add(held, more)),
                       wk_format_bytes(cb, sizeof cb, cap));
    }
    return 0;
}

int eng_seq_new(eng_seq **out, eng_ctx *c, int32_t n_ctx, wk_error *err)
{
    *out = NULL;
    const model *m = c->m;
    const model_hparams *hp = &m->hp;
    if (n_ctx <= 0) n_ctx = c->opt.n_ctx;
    /* K and V of a head are n_ctx rows of max(d_k, d_v): one stride serves both */
    const size_t d = hp->d_k > hp->d_v ? hp->d_k : hp->d_v;
    const int kv_type = c->opt.kv_type;
    if (!be_kv_type_supported(c->be, kv_type))
        return wk_fail(err, WK_EUNSUPPORTED, "sequence: the %s backend keeps no Q8_0 KV cache", c->be->ops->name);
    const size_t head_stride = (size_t)n_ctx * be_kv_row_units(kv_type, d);
    const size_t per_cache = head_stride * hp->n_head_kv;
    const size_t conv = model_conv_elems(m), ssm = model_ssm_elems(m);
    /* checked before allocating: n_ctx is the caller's, so the plan may exceed the machine */
    const uint64_t kv_bytes = wk_sat_mul3(wk_sat_mul(head_stride, hp->n_head_kv), 2 * sizeof(uint16_t), hp->n_attn_layers);
    const uint64_t rec_bytes = wk_sat_mul3(wk_sat_add(conv, ssm), hp->n_rec_layers, sizeof(float));
    if (be_is_cpu(c->be)) {
        char what[96];
        snprintf(what, sizeof what, "the sequence state for %d positions", n_ctx);
        int rc = wk_ram_check(wk_sat_add(kv_bytes, rec_bytes), what, err);
        if (rc) return rc;
    }
    uint64_t need[ENG_MAX_SPLIT];
    uint32_t n_attn[ENG_MAX_SPLIT], n_rec[ENG_MAX_SPLIT];
    for (int32_t p = 0; p < c->n_parts; p++) need[p] = part_need(c, p, per_cache, conv + ssm, &n_attn[p], &n_rec[p]);
    int rc = check_gpu_mem(c, need, n_ctx, err);
    if (rc) return rc;
    eng_seq *s = calloc(1, sizeof *s);
    if (!s) return wk_fail(err, WK_ENOMEM, "sequence: out of memory");
    s->ctx = c;
    s->layers = calloc(hp->n_layer ? hp->n_layer : 1, sizeof *s->layers);
    s->tokens = malloc(sizeof(int32_t) * (size_t)n_ctx);
    if (!s->layers || !s->tokens) goto oom;
    for (int32_t p = 0; p < c->n_parts; p++) {
        eng_seq_part *sp = &s->parts[p];
        be_backend *be = c->parts[p].be;
        if (n_attn[p]) {
            sp->kv_bytes = 2 * per_cache * n_attn[p] * sizeof(uint16_t);
            sp->kv_mem = be_alloc(be, sp->kv_bytes);
            if (!sp->kv_mem) goto oom;
            s->kv_bytes += sp->kv_bytes;
        }
        sp->rec_floats = (conv + ssm) * n_rec[p];
        if (sp->rec_floats) {
            sp->rec_mem = be_alloc(be, sp->rec_floats * sizeof(float));
            if (!sp->rec_mem) goto oom;
            s->rec_floats += sp->rec_floats;
        }
        c->parts[p].held_bytes += need[p];
        /* slots count layers in order: the part's first attention / recurrent layer is its slot 0 */
        int32_t attn0 = -1, rec0 = -1;
        for (uint32_t il = c->parts[p].first; il < c->parts[p].end; il++) {
            const model_layer *ly = &m->layers[il];
            model_layer_state *ls = &s->layers[il];
            if (ly->attn_slot >= 0) {
                if (attn0 < 0) attn0 = ly->attn_slot;
                ls->k = sp->kv_mem + (size_t)2 * (size_t)(ly->attn_slot - attn0) * per_cache;
                ls->v = ls->k + per_cache;
                ls->kv_head_stride = head_stride;
                ls->kv_type = kv_type;
            }
            if (ly->rec_slot >= 0) {
                if (rec0 < 0) rec0 = ly->rec_slot;
                ls->conv = sp->rec_mem + (size_t)(ly->rec_slot - rec0) * (conv + ssm);
                ls->ssm = ls->conv + conv;
            }
        }
    }
    s->st.layers = s->layers;
    s->st.n_ctx = n_ctx;
    s->st.n_past = 0;
    s->policy_fp = c->policy_fp;
    *out = s;
    return 0;
oom:
    eng_seq_free(s);
    return wk_fail(err, WK_ENOMEM, "sequence: out of memory for %d positions", n_ctx);
}

void eng_seq_free(eng_seq *s)
{
    if (!s) return;
    for (int32_t p = 0; p < s->ctx->n_parts; p++) {
        eng_seq_part *sp = &s->parts[p];
        be_backend *be = s->ctx->parts[p].be;
        if (sp->kv_mem) be_release(be, sp->kv_mem);
        if (sp->rec_mem) be_release(be, sp->rec_mem);
        const uint64_t had = sp->kv_bytes + sp->rec_floats * sizeof(float);
        eng_part *part = &s->ctx->parts[p];
        part->held_bytes = part->held_bytes > had ? part->held_bytes - had : 0;
    }
    free(s->layers);
    be_host_free(eng_out_backend(s->ctx), s->logits);
    free(s->tokens);
    free(s);
}

int32_t eng_seq_pos(const eng_seq *s) { return s->st.n_past; }

uint64_t eng_seq_kv_bytes_held(const eng_seq *s)
{
    if (!be_is_cpu(s->ctx->be)) return s->kv_bytes;
    int32_t n = s->high_water > s->st.n_past ? s->high_water : s->st.n_past;
    return (uint64_t)n * eng_kv_bytes_per_token(s->ctx);
}
int32_t eng_seq_capacity(const eng_seq *s) { return s->st.n_ctx; }
const int32_t *eng_seq_tokens(const eng_seq *s) { return s->tokens; }
uint64_t eng_seq_policy_fp(const eng_seq *s) { return s->policy_fp; }
model_state *eng_seq_state(eng_seq *s) { return &s->st; }

uint64_t eng_seq_prefix_hash(const eng_seq *s, int32_t n)
{
    if (n < 0) n = 0;
    if (n > s->st.n_past) n = s->st.n_past;
    return XXH3_64bits(s->tokens, sizeof(int32_t) * (size_t)n);
}

/* Zeroes the recurrent state (a fresh sequence starts from zeros), part by part: where the
 * state lives (a GPU's memset), not through a host buffer of zeros, whose fresh pages cost
 * more to fault in than the copy (~80 ms for the 0.8B's 19 MiB, far more for the 27B's 150). */
static void zero_recurrent(eng_seq *s)
{
    for (int32_t p = 0; p < s->ctx->n_parts; p++) {
        const eng_seq_part *sp = &s->parts[p];
        if (sp->rec_floats) be_zero(s->ctx->parts[p].be, sp->rec_mem, sp->rec_floats * sizeof(float));
    }
}

void eng_seq_clear(eng_seq *s)
{
    seq_note_high_water(s);
    s->st.n_past = 0;
    zero_recurrent(s);
    s->policy_fp = s->ctx->policy_fp;
}

int eng_seq_copy_prefix(eng_seq *dst, const eng_seq *src, int32_t n, wk_error *err)
{
    if (n < 0 || n > src->st.n_past || n > dst->st.n_ctx || dst->ctx != src->ctx)
        return wk_fail(err, WK_ERANGE, "copy prefix: %d tokens from a sequence of %d into one of capacity %d", n,
                       src->st.n_past, dst->st.n_ctx);
    eng_seq_clear(dst);
    const model *m = src->ctx->m;
    size_t dmax = m->hp.d_k > m->hp.d_v ? m->hp.d_k : m->hp.d_v;
    size_t row_units = be_kv_row_units(src->ctx->opt.kv_type, dmax);
    /* one head's rows at a time: a few MB even for long prefixes of wide heads */
    uint16_t *buf = n ? malloc(sizeof(uint16_t) * row_units * (size_t)n) : NULL;
    if (n && !buf) return wk_fail(err, WK_ENOMEM, "copy prefix: out of memory for %d positions", n);
    for (uint32_t il = 0; il < m->hp.n_layer && n; il++) {
        const model_layer_state *ls = &src->layers[il], *ld = &dst->layers[il];
        if (!ls->k) continue;
        be_backend *be = eng_ctx_layer_backend(src->ctx, il);
        for (int kv = 0; kv < 2; kv++) {
            size_t bytes = sizeof(uint16_t) * (size_t)n * be_kv_row_units(ls->kv_type, kv ? m->hp.d_v : m->hp.d_k);
            for (uint32_t g = 0; g < m->hp.n_head_kv; g++) {
                be_to_host(be, buf, (kv ? ls->v : ls->k) + (size_t)g * ls->kv_head_stride, bytes);
                be_from_host(be, (kv ? ld->v : ld->k) + (size_t)g * ld->kv_head_stride, buf, bytes);
            }
        }
    }
    free(buf);
    if (n) memcpy(dst->tokens, src->tokens, sizeof(int32_t) * (size_t)n);
    dst->st.n_past = n;
    dst->policy_fp = src->policy_fp;
    return 0;
}

int kv_truncate(eng_seq *s, int32_t n_pos, wk_error *err)
{
    if (n_pos < 0 || n_pos > s->st.n_past)
        return wk_fail(err, WK_ERANGE, "kv_truncate: position %d outside 0..%d", n_pos, s->st.n_past);
    if (n_pos == s->st.n_past) return 0;
    if (n_pos == 0) {
        eng_seq_clear(s);
        return 0;
    }
    if (s->rec_floats)
        return wk_fail(err, WK_EUNSUPPORTED,
                       "kv_truncate: recurrent state cannot be rewound from %d to %d; restore a snapshot",
                       s->st.n_past, n_pos);
    seq_note_high_water(s);
    s->st.n_past = n_pos;
    return 0;
}

/* The recurrent state to and from host memory laid out as the parts' blocks end to end:
 * the same bytes as an unsplit context's, so a snapshot fits either. */
static void state_to_host(const eng_seq *s, float *dst)
{
    for (int32_t p = 0; p < s->ctx->n_parts; p++) {
        const eng_seq_part *sp = &s->parts[p];
        if (sp->rec_floats) be_to_host(s->ctx->parts[p].be, dst, sp->rec_mem, sp->rec_floats * sizeof(float));
        dst += sp->rec_floats;
    }
}

static void state_from_host(eng_seq *s, const float *src)
{
    for (int32_t p = 0; p < s->ctx->n_parts; p++) {
        const eng_seq_part *sp = &s->parts[p];
        if (sp->rec_floats) be_from_host(s->ctx->parts[p].be, sp->rec_mem, src, sp->rec_floats * sizeof(float));
        src += sp->rec_floats;
    }
}

size_t eng_snapshot_bytes(const eng_seq *s) { return s->rec_floats * sizeof(float); }

int seq_snapshot(const eng_seq *s, eng_snapshot *snap, wk_error *err)
{
    size_t bytes = eng_snapshot_bytes(s);
    if (bytes != snap->state_bytes || (bytes && !snap->state)) {
        free(snap->state);
        snap->state = NULL;
        snap->state_bytes = 0;
        if (bytes) {
            snap->state = malloc(bytes);
            if (!snap->state) return wk_fail(err, WK_ENOMEM, "snapshot: out of memory (%zu bytes)", bytes);
        }
        snap->state_bytes = bytes;
    }
    if (bytes) state_to_host(s, snap->state);
    snap->pos = s->st.n_past;
    snap->prefix_hash = eng_seq_prefix_hash(s, s->st.n_past);
    snap->policy_fp = s->policy_fp;
    snap->model_id = s->ctx->m->model_id;
    return 0;
}

int seq_restore(eng_seq *s, const eng_snapshot *snap, wk_error *err)
{
    if (snap->model_id != s->ctx->m->model_id)
        return wk_fail(err, WK_EINVAL, "restore: snapshot belongs to another model");
    if (snap->policy_fp != s->policy_fp)
        return wk_fail(err, WK_EINVAL, "restore: snapshot was taken under another attention policy");
    if (snap->pos < 0 || snap->pos > s->st.n_past)
        return wk_fail(err, WK_EINVAL, "restore: snapshot at position %d but the sequence holds %d tokens",
                       snap->pos, s->st.n_past);
    if (eng_seq_prefix_hash(s, snap->pos) != snap->prefix_hash)
        return wk_fail(err, WK_EINVAL, "restore: the sequence's first %d tokens differ from the snapshot's",
                       snap->pos);
    if (snap->state_bytes != eng_snapshot_bytes(s))
        return wk_fail(err, WK_EINVAL, "restore: snapshot holds %zu bytes of state, the sequence needs %zu",
                       snap->state_bytes, eng_snapshot_bytes(s));
    if (snap->state_bytes) state_from_host(s, snap->state);
    seq_note_high_water(s);
    s->st.n_past = snap->pos;
    return 0;
}

void eng_snapshot_free(eng_snapshot *snap)
{
    if (!snap) return;
    free(snap->state);
    memset(snap, 0, sizeof *snap);
}

int eng_seq_adopt(eng_seq *s, const int32_t *tokens, int32_t n, uint64_t policy_fp, wk_error *err)
{
    if (n < 0 || n > s->st.n_ctx)
        return wk_fail(err, WK_ERANGE, "adopt: %d tokens for a sequence of capacity %d", n, s->st.n_ctx);
    zero_recurrent(s);
    if (n) memcpy(s->tokens, tokens, sizeof(int32_t) * (size_t)n);
    s->st.n_past = n;
    s->policy_fp = policy_fp;
    return 0;
}
