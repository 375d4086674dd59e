/* Internals shared by the forward passes of model/ (not a public API). */
#ifndef WICK_MODEL_MODEL_IMPL_H
#define WICK_MODEL_MODEL_IMPL_H

#include "backend/backend.h"
#include "model/model.h"

/* ---- batches --------------------------------------------------------------------
 * A forward pass runs the rows of one or more sequences: row-wise steps (norms,
 * matmuls, FFNs) over all rows at once, attention / DeltaNet / conv per sequence on
 * its slice of rows. */

/* One sequence's rows in a batch: rows [row0, row0 + n_t) of the scratch hold its
 * tokens at positions pos0.. (RoPE); its layer il's state is layers[il], whose KV
 * gets them from row kv_pos0 on (pos0 except for the MTP block's own cache). */
typedef struct model_seg {
    model_layer_state *layers;
    int32_t row0, n_t, pos0, kv_pos0;
    const be_attn_policy *policy; /* NULL: dense */
} model_seg;

/* Rows [row0, row0 + n) that take one matmul call; as_one: with be_rows_as_one on. */
typedef struct model_grp {
    int32_t row0, n;
    bool as_one;
} model_grp;

/* The rows of a forward pass: n_t in all, the sequences in row order, and the matmul
 * groups (model_batch_groups). */
typedef struct model_batch {
    int32_t n_t;
    int32_t n_seg;
    const model_seg *seg;
    int32_t n_grp;
    model_grp *grp;
} model_batch;

/* Activation buffers for up to max_t tokens (backend memory). Row layouts are
 * [token][features]; the names say what the forward passes keep there. */
struct model_scratch {
    be_backend *be;
    int32_t max_t;
    float *x;        /* residual stream [T][n_embd] */
    float *cur;      /* normed input of the current sub-block [T][n_embd] */
    float *tmp;      /* sub-block output before the residual add [T][n_embd] */
    float *q;        /* queries (qwen35: query|gate interleaved per head) [T][q_width] */
    float *k, *v;    /* [T][n_head_kv·d_k], [T][n_head_kv·d_v] */
    float *att;      /* attention output [T][n_head·d_v] */
    float *ff_g, *ff_u;   /* FFN hidden [T][ff_width] */
    float *qkv, *conv;    /* DeltaNet projections and conv outputs [T][conv_dim] */
    float *z, *gdn_o;     /* DeltaNet gate and scan output [T][value_dim] */
    float *alpha, *beta;  /* [T][H_v] */
    float *router;        /* [T][n_expert] */
    int32_t *expert_ids;  /* [T][k] (written by be_moe_route) */
    float *expert_w;      /* [T][k] */
    float *moe_out;       /* [T][n_embd] */
    float *sh_gate;       /* [T] */
    float *rope_cs;       /* [T][n_rot] */
    int32_t *tokens, *pos; /* [T] backend memory, filled through be_from_host */
    int32_t *pos_host;    /* [T] host memory: positions are written here, then copied to pos */
    int32_t *tok_host;    /* [T] host memory: a batch's tokens gathered, then copied to tokens */
    model_seg *segs;      /* [T] host memory: a batch's sequences */
    model_grp *grps;      /* [T] host memory: its matmul groups */
    float *mtp_in;        /* [T][2·n_embd]: the MTP block's [enorm(e) ‖ hnorm(h)] (models with MTP) */
    float *logits;        /* [logit_rows][n_vocab] */
    int32_t logit_rows;
    int32_t argmax;       /* MODEL_LOGITS_ARGMAX: the pick, and its logit */
    float argmax_logit;
    struct model_scratch *next; /* layer split: the next part's buffers (borrowed), NULL: none */
    uint32_t next_layer;  /* the first layer next runs */
    float *handover;      /* host [max_t][n_embd]: the residual stream on its way to next */
};

static inline bool model_arch_is_hybrid(enum model_arch a)
{
    return a == MODEL_ARCH_QWEN35 || a == MODEL_ARCH_QWEN35MOE;
}
static inline bool model_arch_is_moe(enum model_arch a) { return a == MODEL_ARCH_QWEN3MOE || a == MODEL_ARCH_QWEN35MOE; }

/* Reads the hyper-parameters of architecture arch and validates each before
 * anything is sized from it (model_validate.c); the derived layer counts
 * and the tensor binding are model.c's. Errors name the key and its value. */
int model_hparams_read(const gguf_file *f, enum model_arch arch, model_hparams *hp, wk_error *err);

/* qwen35 hybrids: layer il is Gated DeltaNet unless (il + 1) is a multiple of
 * full_attention_interval, or as the attention.recurrent_layers array says
 * (validated by model_hparams_read). Always false for other architectures. */
bool model_layer_is_recurrent(const gguf_file *f, enum model_arch arch, const model_hparams *hp, uint32_t il);

/* Splits the rows of b's sequences into matmul groups (b->grp, room for n_t groups)
 * so that every row comes out as in a forward of its sequence alone, on be: when its
 * exact_rows is 0 (it promises nothing) one group of all rows; else a sequence of
 * more than exact_rows rows is a group of its own (what it takes alone), and the rows
 * of the others (computed alone as in a batch of one) are packed into groups taken
 * with be_rows_as_one where the backend has it, else of at most exact_rows rows. */
void model_batch_groups(model_batch *b, const be_backend *be);

/* be_matmul / be_matmul_multi over the groups of b: the same y as one call over all
 * rows, each row computed as its group's call computes it. */
int model_mm(be_backend *be, const model_batch *b, const be_weight *w, const float *x, float *y, wk_error *err);
int model_mm_multi(be_backend *be, const model_batch *b, const be_weight *const *w, int n, const float *x,
                   float *const *y, wk_error *err);

/* Steps every forward pass shares (forward.c). */

/* Before layer il of a pass over n_t rows: when the next part of a layer split starts
 * there (model_scratch_link), hands the residual stream s->x over to it, makes its
 * positions and RoPE table, and points *be and *s at it. The pass reads the same numbers
 * as without the split. */
int model_part_enter(const model *m, be_backend **be, model_scratch **s, uint32_t il, int32_t n_t, wk_error *err);

/* The part of a layer split that holds the output head (s itself without a split). */
model_scratch *model_last_part(model_scratch *s);

/* Embeds s->tokens[0..b->n_t) into s->x and fills s->pos and s->rope_cs with every
 * row's position (its sequence's pos0 + its index there). */
int model_embed(const model *m, be_backend *be, model_scratch *s, const model_batch *b, wk_error *err);
/* model_embed from another embedding table (the MTP block's). */
int model_embed_with(const model *m, be_backend *be, model_scratch *s, const be_weight *embd, const model_batch *b,
                     wk_error *err);

/* s->q, s->k, s->v = W_q, W_k, W_v · s->cur (+ the biases a layer has), as one
 * be_matmul_multi per group. */
int model_qkv(be_backend *be, model_scratch *s, const model_layer *ly, const model_batch *b, wk_error *err);

/* Standard attention tail, per sequence of b: stores its rows of s->k / s->v
 * (after norm/RoPE) into its layer il cache at kv_pos0.., runs causal attention of
 * its queries (row t, head h at q + t*q_stride + h*q_head_stride) into s->att. */
int model_attend(const model *m, be_backend *be, model_scratch *s, const model_batch *b, uint32_t il,
                 const float *q, size_t q_stride, size_t q_head_stride, wk_error *err);

/* Dense SwiGLU FFN: out = down · (SiLU(gate·in) ⊙ up·in). */
int model_ffn_dense(be_backend *be, model_scratch *s, const model_batch *b, const be_weight *gate,
                    const be_weight *up, const be_weight *down, const float *in, float *out, wk_error *err);

/* Routed MoE FFN (+ sigmoid-gated shared expert when the layer has one), moe.c. */
int model_ffn_moe(const model *m, be_backend *be, model_scratch *s, const model_layer *ly, const model_batch *b,
                  const float *in, float *out, wk_error *err);

/* Final norm + LM head for the rows of s->x that out asks for (a batch of one
 * sequence of n_t rows), copied to the host (logits, and every row's normed hidden
 * state when out->hidden is set). */
int model_output(const model *m, be_backend *be, model_scratch *s, int32_t n_t, const model_rows *out,
                 wk_error *err);
/* model_output with another norm and head (the MTP block's). */
int model_output_with(be_backend *be, model_scratch *s, const model_hparams *hp, const be_weight *norm,
                      const be_weight *head, const be_weight *bias, int32_t n_t, const model_rows *out,
                      wk_error *err);

/* y = x · Wᵀ (+ bias if present) over the rows of b. */
int model_linear(be_backend *be, const model_batch *b, const be_weight *w, const be_weight *bias, const float *x,
                 float *y, wk_error *err);

static inline const float *wf32(const be_weight *w) { return (const float *)w->data; }

/* Per-family forward passes over the layers: embed → blocks, leaving the final
 * residual stream in s->x (the caller runs the output step). */
int llama_forward(const model *m, be_backend *be, model_scratch *s, const model_batch *b, wk_error *err);
int qwen3_forward(const model *m, be_backend *be, model_scratch *s, const model_batch *b, wk_error *err);
int qwen35_forward(const model *m, be_backend *be, model_scratch *s, const model_batch *b, wk_error *err);
/* The MTP block (model_mtp_forward after its checks; s->tokens already filled). */
int qwen35_mtp_forward(const model *m, be_backend *be, model_scratch *s, model_layer_state *kv, int32_t kv_pos0,
                       int32_t pos0, const float *hidden, int32_t n_t, const model_rows *out, wk_error *err);

#define TRY(x)               \
    do {                     \
        int rc_ = (x);       \
        if (rc_) return rc_; \
    } while (0)

#endif
