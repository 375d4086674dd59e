/* Layers over the devices of a layer split (placement.h). */
#include "engine/placement.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/checked.h"
#include "util/units.h"

/* Load of a device measured against its cap: what the split minimises the largest of. */
static long double fill(uint64_t bytes, uint64_t cap) { return (long double)bytes / (long double)(cap ? cap : 1); }

int eng_place_layers(const uint64_t *layer_bytes, uint32_t n_layer, const uint64_t *fixed_bytes,
                     const uint64_t *cap_bytes, int32_t n_dev, uint32_t *first, wk_error *err)
{
    if (n_dev < 1 || n_dev > ENG_MAX_SPLIT)
        return wk_fail(err, WK_EINVAL, "placement: %d devices (1..%d)", n_dev, ENG_MAX_SPLIT);
    if ((uint32_t)n_dev > n_layer)
        return wk_fail(err, WK_EINVAL, "placement: %d devices for a model of %u layers (each device needs a layer)",
                       n_dev, n_layer);
    uint64_t *prefix = malloc(sizeof(uint64_t) * ((size_t)n_layer + 1));
    /* best[d][b]: the least largest fill of devices 0..d holding layers [0, b); cut[d][b]: where d's run starts */
    long double *best = malloc(sizeof(long double) * (size_t)n_dev * ((size_t)n_layer + 1));
    uint32_t *cut = malloc(sizeof(uint32_t) * (size_t)n_dev * ((size_t)n_layer + 1));
    if (!prefix || !best || !cut) {
        free(prefix), free(best), free(cut);
        return wk_fail(err, WK_ENOMEM, "placement: out of memory for %u layers", n_layer);
    }
    prefix[0] = 0;
    for (uint32_t i = 0; i < n_layer; i++) prefix[i + 1] = wk_sat_add(prefix[i], layer_bytes[i]);
    const size_t row = (size_t)n_layer + 1;
    for (int32_t d = 0; d < n_dev; d++) {
        const uint64_t fixed = fixed_bytes ? fixed_bytes[d] : 0, cap = cap_bytes ? cap_bytes[d] : 0;
        /* device d ends at b: at least one layer per device before and including it, and
         * enough left for the devices after it */
        for (uint32_t b = (uint32_t)d + 1; b <= n_layer - (uint32_t)(n_dev - 1 - d); b++) {
            long double got = -1;
            uint32_t at = 0;
            for (uint32_t a = (uint32_t)d; a < b; a++) {
                if (d == 0 && a > 0) break;
                long double here = fill(wk_sat_add(prefix[b] - prefix[a], fixed), cap);
                long double before = d ? best[(size_t)(d - 1) * row + a] : 0;
                long double worst = here > before ? here : before;
                if (got < 0 || worst <= got) { /* <=: the later start, more layers on earlier devices */
                    got = worst;
                    at = a;
                }
            }
            best[(size_t)d * row + b] = got;
            cut[(size_t)d * row + b] = at;
        }
    }
    first[n_dev] = n_layer;
    for (int32_t d = n_dev - 1; d >= 0; d--) first[d] = cut[(size_t)d * row + first[d + 1]];
    free(prefix), free(best), free(cut);
    return WK_OK;
}

/* Layer of a block tensor ("blk.12.attn_q.weight" → 12), -1 for the others. */
static int64_t block_of(const char *name)
{
    if (strncmp(name, "blk.", 4)) return -1;
    char *end = NULL;
    unsigned long n = strtoul(name + 4, &end, 10);
    return end != name + 4 && *end == '.' ? (int64_t)n : -1;
}

int eng_placement_compute(const model *m, const eng_mem_options *o, const uint64_t *cap_bytes, eng_placement *out,
                          wk_error *err)
{
    memset(out, 0, sizeof *out);
    const int32_t n_dev = o->split.n > 1 ? o->split.n : 1;
    eng_mem_plan plan;
    int rc = eng_mem_plan_compute(m, o, &plan, err); /* checks n_ctx and the KV type, and every product */
    if (rc) return rc;
    const model_hparams *hp = &m->hp;
    const uint32_t L = hp->n_layer;
    uint64_t *layer = calloc(L ? L : 1, sizeof(uint64_t)), *layer_w = calloc(L ? L : 1, sizeof(uint64_t));
    if (!layer || !layer_w) {
        free(layer), free(layer_w);
        return wk_fail(err, WK_ENOMEM, "placement: out of memory");
    }
    uint64_t embd = 0, rest = 0;
    for (size_t i = 0; i < gguf_tensor_count(m->file); i++) {
        const gguf_tensor *t = gguf_tensor_at(m->file, i);
        int64_t b = block_of(t->name_z);
        if (b >= 0 && b < (int64_t)L) layer_w[b] += t->n_bytes;
        else if (!strcmp(t->name_z, "token_embd.weight")) embd = t->n_bytes;
        else rest += t->n_bytes; /* output head and norm, MTP blocks, rope tables: the last device */
    }
    /* eng_mem_plan_compute checked these products for overflow: the per-layer shares are exact */
    const uint64_t kv_layer = hp->n_attn_layers ? plan.kv_bytes / hp->n_attn_layers : 0;
    const uint64_t state_layer = hp->n_rec_layers ? plan.state_bytes / hp->n_rec_layers : 0;
    for (uint32_t il = 0; il < L; il++)
        layer[il] = layer_w[il] + (m->layers[il].attn_slot >= 0 ? kv_layer : 0) +
                    (m->layers[il].rec_slot >= 0 ? state_layer : 0);
    uint64_t fixed[ENG_MAX_SPLIT] = {0};
    for (int32_t d = 0; d < n_dev; d++) fixed[d] = plan.scratch_bytes;
    fixed[0] += embd;
    /* the last device reads the embedding too when the head is tied to it or the MTP block embeds with it */
    const bool embd_at_head = hp->tied_output || (m->has_mtp && m->mtp.embd.data == m->tok_embd.data);
    fixed[n_dev - 1] += rest + (n_dev > 1 && embd_at_head ? embd : 0);
    uint32_t first[ENG_MAX_SPLIT + 1];
    rc = eng_place_layers(layer, L, fixed, cap_bytes, n_dev, first, err);
    if (!rc) {
        out->n_dev = n_dev;
        uint64_t kv_state_all = plan.kv_bytes + plan.state_bytes, ckpt_left = plan.ckpt_bytes;
        for (int32_t d = 0; d < n_dev; d++) {
            eng_place_dev *v = &out->dev[d];
            v->gpu = o->split.n > 1 ? o->split.gpus[d] : o->gpu;
            v->layer_first = first[d];
            v->layer_end = first[d + 1];
            for (uint32_t il = first[d]; il < first[d + 1]; il++) {
                v->weight_bytes += layer_w[il];
                v->n_attn += m->layers[il].attn_slot >= 0;
                v->n_rec += m->layers[il].rec_slot >= 0;
            }
            v->weight_bytes += fixed[d] - plan.scratch_bytes;
            v->kv_bytes = kv_layer * v->n_attn;
            v->state_bytes = state_layer * v->n_rec;
            /* the cache keeps idle sequences' state beside their layers; the last device takes the remainder */
            v->ckpt_bytes = d == n_dev - 1 ? ckpt_left
                            : kv_state_all ? (uint64_t)((long double)plan.ckpt_bytes * (long double)(v->kv_bytes + v->state_bytes) /
                                                        (long double)kv_state_all)
                                           : 0;
            if (v->ckpt_bytes > ckpt_left) v->ckpt_bytes = ckpt_left;
            ckpt_left -= v->ckpt_bytes;
            v->scratch_bytes = plan.scratch_bytes;
            v->total_bytes = wk_sat_add(wk_sat_add(v->weight_bytes, v->kv_bytes),
                                        wk_sat_add(wk_sat_add(v->state_bytes, v->ckpt_bytes), v->scratch_bytes));
            v->cap_bytes = cap_bytes ? cap_bytes[d] : 0;
        }
    }
    free(layer), free(layer_w);
    return rc;
}

void eng_place_dev_describe(const eng_place_dev *d, char *buf, size_t cap)
{
    char w[32], kv[32], st[32], ck[32], sc[32], tot[32];
    size_t n = (size_t)snprintf(buf, cap, "cuda:%d layers %u-%u (%u attention%s", d->gpu, d->layer_first,
                                d->layer_end - 1, d->n_attn, d->n_rec ? ", " : ")");
    if (d->n_rec && n < cap) n += (size_t)snprintf(buf + n, cap - n, "%u recurrent)", d->n_rec);
    if (n < cap) n += (size_t)snprintf(buf + n, cap - n, ": weights %s", wk_format_bytes(w, sizeof w, d->weight_bytes));
    if (d->kv_bytes && n < cap)
        n += (size_t)snprintf(buf + n, cap - n, " + KV %s", wk_format_bytes(kv, sizeof kv, d->kv_bytes));
    if (d->state_bytes && n < cap)
        n += (size_t)snprintf(buf + n, cap - n, " + state %s", wk_format_bytes(st, sizeof st, d->state_bytes));
    if (d->ckpt_bytes && n < cap)
        n += (size_t)snprintf(buf + n, cap - n, " + checkpoints %s", wk_format_bytes(ck, sizeof ck, d->ckpt_bytes));
    if (n < cap)
        snprintf(buf + n, cap - n, " + scratch %s = %s", wk_format_bytes(sc, sizeof sc, d->scratch_bytes),
                 wk_format_bytes(tot, sizeof tot, d->total_bytes));
}
