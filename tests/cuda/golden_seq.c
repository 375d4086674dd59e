#include "golden_seq.h"

#include <stdlib.h>
#include <string.h>

#include "model/model_impl.h"

int seq_new(seq *s, const model *m, be_backend *be, int32_t n_ctx)
{
    const model_hparams *hp = &m->hp;
    memset(s, 0, sizeof *s);
    s->layers = calloc(hp->n_layer, sizeof *s->layers);
    if (!s->layers) return -1;
    const size_t d = hp->d_k > hp->d_v ? hp->d_k : hp->d_v;
    const size_t head_stride = (size_t)n_ctx * d, per_cache = head_stride * hp->n_head_kv;
    if (hp->n_attn_layers && !(s->kv = be_alloc(be, 2 * per_cache * hp->n_attn_layers * 2))) return -1;
    const size_t conv = model_conv_elems(m), ssm = model_ssm_elems(m);
    if (hp->n_rec_layers && !(s->rec = be_alloc(be, (conv + ssm) * hp->n_rec_layers * 4))) return -1;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const model_layer *ly = &m->layers[il];
        model_layer_state *ls = &s->layers[il];
        if (ly->attn_slot >= 0) {
            ls->k = (uint16_t *)s->kv + (size_t)2 * ly->attn_slot * per_cache;
            ls->v = ls->k + per_cache;
            ls->kv_head_stride = head_stride;
        }
        if (ly->rec_slot >= 0) {
            ls->conv = (float *)s->rec + (size_t)ly->rec_slot * (conv + ssm);
            ls->ssm = ls->conv + conv;
        }
    }
    s->st.layers = s->layers;
    s->st.n_ctx = n_ctx;
    return 0;
}

void seq_free(seq *s, be_backend *be)
{
    if (s->kv) be_release(be, s->kv);
    if (s->rec) be_release(be, s->rec);
    free(s->layers);
}
