/* Placement of a model over the devices of a layer split (engine/context.h
 * eng_split_opts): which consecutive layers go to which device, and what each
 * device then holds:
 *   weights  the tensors of its layers (blk.N.*); the first device also the
 *            token embedding, the last the output norm and head (and the
 *            embedding again when the head is tied to it or the MTP block
 *            embeds with it), the MTP block and every other tensor outside
 *            the blocks
 *   kv       its attention layers' K and V at n_ctx, for every sequence
 *   state    its recurrent layers' conv + SSM state, for every sequence
 *   ckpt     its share of the prefix cache budget (idle sequences keep their
 *            state where their layers are: in proportion to kv + state)
 *   scratch  one set of activation buffers per device (model_scratch_bytes)
 * Layers are balanced so that the fullest device, measured against its cap,
 * is as empty as it can be. Each device gets at least one layer. */
#ifndef WICK_ENGINE_PLACEMENT_H
#define WICK_ENGINE_PLACEMENT_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/memory_plan.h"

/* Splits layers [0, n_layer) into n_dev runs of consecutive layers: device d
 * gets [first[d], first[d + 1]) (first[0] = 0, first[n_dev] = n_layer, every
 * run non-empty). Device d carries layer_bytes of its layers plus
 * fixed_bytes[d]; the split minimises the largest load / cap_bytes[d] over the
 * devices (cap_bytes NULL or an entry 0: that device counts bytes alone,
 * as if its cap were 1 byte, so use either caps for all or for none).
 * Ties go to the split whose earlier devices hold more layers. Pure.
 * WK_EINVAL when n_dev < 1, n_dev > ENG_MAX_SPLIT or n_dev > n_layer. */
int eng_place_layers(const uint64_t *layer_bytes, uint32_t n_layer, const uint64_t *fixed_bytes,
                     const uint64_t *cap_bytes, int32_t n_dev, uint32_t *first, wk_error *err);

typedef struct eng_place_dev {
    int32_t gpu;                    /* CUDA ordinal (split.gpus[d]) */
    uint32_t layer_first, layer_end; /* layers [first, end) */
    uint32_t n_attn, n_rec;         /* attention and recurrent layers among them */
    uint64_t weight_bytes, kv_bytes, state_bytes, ckpt_bytes, scratch_bytes;
    uint64_t total_bytes;
    uint64_t cap_bytes;             /* what it was balanced against (0: none given) */
} eng_place_dev;

typedef struct eng_placement {
    int32_t n_dev;
    eng_place_dev dev[ENG_MAX_SPLIT];
} eng_placement;

/* The placement of m over the split of o (o->split.n devices, at least 1) at
 * o->n_ctx for o->n_parallel sequences, balanced against cap_bytes[d] (NULL:
 * bytes alone). The sum over devices of each part equals eng_mem_plan_compute's
 * (weights: plus the embedding counted twice when the last device reads it too; scratch: once per device;
 * the token ids, aux tables and the logits row stay in host memory). WK_EINVAL as eng_place_layers and for a bad
 * n_ctx or KV type; WK_ERANGE when a sum overflows. */
int eng_placement_compute(const model *m, const eng_mem_options *o, const uint64_t *cap_bytes, eng_placement *out,
                          wk_error *err);

/* "cuda:0 layers 0-15 (8 attention, 8 recurrent): weights 7.10 GiB + KV 4.00 GiB + state 12.0 MiB
 * + scratch 300 MiB = 11.4 GiB" (zero parts left out). */
void eng_place_dev_describe(const eng_place_dev *d, char *buf, size_t cap);

#endif
