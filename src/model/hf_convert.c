/* Hugging Face Qwen3.5 checkpoint -> GGUF tensors and metadata (see hf_convert.h). */
#include "model/hf_convert.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/safetensors.h"
#include "model/synth.h"
#include "quant/quant.h"
#include "quant/qtypes.h"

#define MAX_SHARDS 256

/* What happens to a tensor's values on the way. */
enum hf_op { OP_COPY = 0, OP_ADD_ONE, OP_NEG_EXP };

typedef struct out_tensor {
    char name[64];         /* GGUF name */
    const st_tensor *src;
    uint32_t n_dims;
    int64_t ne0, ne1;      /* GGUF shape: ne0 = row length */
    enum hf_op op;
    int64_t vrow0, vrow_block; /* rows [vrow0, vrow0 + H_v * block) hold value heads in HF order (block 0: none) */
    int64_t vcol_block;        /* each row's elements are value heads of this size (0: none) */
    uint32_t type;
} out_tensor;

typedef struct hparams {
    int64_t n_embd, n_ff, n_layer, n_head, n_head_kv, head_dim, n_vocab, n_ctx;
    int64_t conv_k, d_k, d_v, n_hk, n_hv, interval, n_rot, mtp_layers;
    int32_t sections[3];
    double eps, rope_theta;
    bool tied;
} hparams;

struct hf_convert {
    char dir[1024];
    char folder_name[1024]; /* as long as dir: the last component of it */
    st_file *shards[MAX_SHARDS];
    size_t n_shards;
    hparams hp;
    qt_mix_spec quant;
    out_tensor *out;
    size_t n_out, cap_out;
    size_t n_skipped;
    bool *used;              /* per source tensor, in shard order */
    char prefix[64];         /* "model." or "model.language_model." */
};

/* ---- config.json ------------------------------------------------------------------- */

static int cfg_int(json_t *c, const char *key, bool required, int64_t def, int64_t *out, wk_error *err)
{
    json_t *v = json_object_get(c, key);
    if (!v) {
        if (required) return wk_fail(err, WK_EFORMAT, "config.json: key %s missing", key);
        *out = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1 << 24))
        return wk_fail(err, WK_EFORMAT, "config.json: %s is not an integer in 0..16777216", key);
    *out = json_integer_value(v);
    return 0;
}

static int cfg_num(json_t *c, const char *key, double def, double *out, wk_error *err)
{
    json_t *v = json_object_get(c, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_is_number(v)) return wk_fail(err, WK_EFORMAT, "config.json: %s is not a number", key);
    *out = json_number_value(v);
    return 0;
}

static bool is_qwen35(json_t *root, json_t *text)
{
    const char *mt = json_string_value(json_object_get(text, "model_type"));
    const char *rt = json_string_value(json_object_get(root, "model_type"));
    if ((mt && (!strcmp(mt, "qwen3_5_text") || !strcmp(mt, "qwen3_5"))) || (rt && !strcmp(rt, "qwen3_5"))) return true;
    json_t *arch = json_object_get(root, "architectures");
    size_t i;
    json_t *a;
    json_array_foreach(arch, i, a) {
        const char *s = json_string_value(a);
        if (s && (!strcmp(s, "Qwen3_5ForCausalLM") || !strcmp(s, "Qwen3_5ForConditionalGeneration"))) return true;
    }
    return false;
}

static int read_config(hf_convert *c, wk_error *err)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/config.json", c->dir);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return wk_fail(err, WK_EFORMAT, "%s: %s (line %d)", path, je.text, je.line);
    int rc = 0;
    json_t *text = json_object_get(root, "text_config");
    if (!json_is_object(text)) text = root;
    if (!is_qwen35(root, text)) {
        const char *mt = json_string_value(json_object_get(root, "model_type"));
        json_t *arch = json_array_get(json_object_get(root, "architectures"), 0);
        rc = wk_fail(err, WK_EUNSUPPORTED,
                     "%s: model_type '%s' (%s) is not supported; wick convert handles Qwen3.5 dense models "
                     "(model_type qwen3_5 / qwen3_5_text)",
                     path, mt ? mt : "?", json_is_string(arch) ? json_string_value(arch) : "no architectures");
        goto done;
    }
    if (json_object_get(text, "num_experts")) {
        rc = wk_fail(err, WK_EUNSUPPORTED, "%s: a mixture-of-experts Qwen3.5 (num_experts): not supported by convert",
                     path);
        goto done;
    }
    hparams *h = &c->hp;
    if ((rc = cfg_int(text, "hidden_size", true, 0, &h->n_embd, err)) ||
        (rc = cfg_int(text, "intermediate_size", true, 0, &h->n_ff, err)) ||
        (rc = cfg_int(text, "num_hidden_layers", true, 0, &h->n_layer, err)) ||
        (rc = cfg_int(text, "num_attention_heads", true, 0, &h->n_head, err)) ||
        (rc = cfg_int(text, "num_key_value_heads", false, h->n_head, &h->n_head_kv, err)) ||
        (rc = cfg_int(text, "head_dim", false, h->n_head ? h->n_embd / h->n_head : 0, &h->head_dim, err)) ||
        (rc = cfg_int(text, "vocab_size", true, 0, &h->n_vocab, err)) ||
        (rc = cfg_int(text, "max_position_embeddings", false, 262144, &h->n_ctx, err)) ||
        (rc = cfg_int(text, "linear_conv_kernel_dim", false, 4, &h->conv_k, err)) ||
        (rc = cfg_int(text, "linear_key_head_dim", false, 128, &h->d_k, err)) ||
        (rc = cfg_int(text, "linear_value_head_dim", false, 128, &h->d_v, err)) ||
        (rc = cfg_int(text, "linear_num_key_heads", false, 16, &h->n_hk, err)) ||
        (rc = cfg_int(text, "linear_num_value_heads", false, 32, &h->n_hv, err)) ||
        (rc = cfg_int(text, "mtp_num_hidden_layers", false, 0, &h->mtp_layers, err)) ||
        (rc = cfg_num(text, "rms_norm_eps", 1e-6, &h->eps, err)))
        goto done;
    json_t *tie = json_object_get(text, "tie_word_embeddings");
    if (!tie) tie = json_object_get(root, "tie_word_embeddings");
    h->tied = json_is_true(tie);
    json_t *rp = json_object_get(text, "rope_parameters");
    if (!json_is_object(rp)) rp = json_object_get(text, "rope_scaling");
    double prf = 0.25;
    if ((rc = cfg_num(text, "rope_theta", 1e7, &h->rope_theta, err)) ||
        (rc = cfg_num(text, "partial_rotary_factor", 0.25, &prf, err)))
        goto done;
    if (json_is_object(rp)) {
        const char *type = json_string_value(json_object_get(rp, "rope_type"));
        if (type && strcmp(type, "default") && strcmp(type, "mrope")) {
            rc = wk_fail(err, WK_EUNSUPPORTED, "%s: rope_type '%s' is not supported (default only)", path, type);
            goto done;
        }
        if ((rc = cfg_num(rp, "rope_theta", h->rope_theta, &h->rope_theta, err)) ||
            (rc = cfg_num(rp, "partial_rotary_factor", prf, &prf, err)))
            goto done;
    }
    h->n_rot = (int64_t)llround((double)h->head_dim * prf);
    if (h->n_layer < 1 || h->n_embd < 1 || h->n_head < 1 || h->n_head_kv < 1 || h->n_head % h->n_head_kv ||
        h->head_dim < 1 || h->n_rot < 4 || h->n_rot % 2 || h->n_rot > h->head_dim || h->n_hk < 1 || h->n_hv < 1 ||
        h->n_hv % h->n_hk || h->d_k != h->d_v || h->conv_k < 1 || h->n_vocab < 1 || h->mtp_layers > 1) {
        rc = wk_fail(err, WK_EFORMAT,
                     "%s: inconsistent sizes (layers %" PRId64 ", heads %" PRId64 "/%" PRId64 ", head_dim %" PRId64
                     ", rotary %" PRId64 ", linear heads %" PRId64 "/%" PRId64 ", linear dims %" PRId64 "/%" PRId64
                     ", mtp layers %" PRId64 ")",
                     path, h->n_layer, h->n_head, h->n_head_kv, h->head_dim, h->n_rot, h->n_hk, h->n_hv, h->d_k,
                     h->d_v, h->mtp_layers);
        goto done;
    }
    /* M-RoPE sections: the config's, else Qwen3.5's 11:11:10 proportion; text uses t = h = w */
    int32_t half = (int32_t)(h->n_rot / 2);
    json_t *ms = json_is_object(rp) ? json_object_get(rp, "mrope_section") : NULL;
    if (json_is_array(ms) && json_array_size(ms) == 3) {
        int32_t sum = 0;
        for (int i = 0; i < 3; i++) {
            h->sections[i] = (int32_t)json_integer_value(json_array_get(ms, (size_t)i));
            sum += h->sections[i];
        }
        if (sum != half) {
            rc = wk_fail(err, WK_EFORMAT, "%s: mrope_section sums to %d, rotary pairs are %d", path, sum, half);
            goto done;
        }
    } else {
        h->sections[1] = half * 11 / 32;
        h->sections[2] = half * 10 / 32;
        h->sections[0] = half - h->sections[1] - h->sections[2];
    }
    /* layer schedule: an interval rule (what GGUF's full_attention_interval can say) */
    h->interval = 4;
    json_t *lt = json_object_get(text, "layer_types");
    int64_t fai;
    if ((rc = cfg_int(text, "full_attention_interval", false, 0, &fai, err))) goto done;
    if (fai) h->interval = fai;
    if (json_is_array(lt)) {
        if ((int64_t)json_array_size(lt) != h->n_layer) {
            rc = wk_fail(err, WK_EFORMAT, "%s: layer_types has %zu entries for %" PRId64 " layers", path,
                         json_array_size(lt), h->n_layer);
            goto done;
        }
        int64_t first_full = -1;
        for (int64_t i = 0; i < h->n_layer && first_full < 0; i++) {
            const char *t = json_string_value(json_array_get(lt, (size_t)i));
            if (t && !strcmp(t, "full_attention")) first_full = i;
        }
        h->interval = first_full >= 0 ? first_full + 1 : h->n_layer + 1;
        for (int64_t i = 0; i < h->n_layer; i++) {
            const char *t = json_string_value(json_array_get(lt, (size_t)i));
            bool full = t && !strcmp(t, "full_attention"), lin = t && !strcmp(t, "linear_attention");
            if ((!full && !lin) || full != ((i + 1) % h->interval == 0)) {
                rc = wk_fail(err, WK_EUNSUPPORTED,
                             "%s: layer_types[%" PRId64 "] = '%s' does not follow a full-attention interval", path,
                             i, t ? t : "?");
                goto done;
            }
        }
    }
done:
    json_decref(root);
    return rc;
}

/* ---- safetensors files -------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* dir/model.safetensors, or every file the index's weight_map names (each
 * opened once, in name order; each tensor must be in the file it names). */
static int open_shards(hf_convert *c, wk_error *err)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", c->dir);
    FILE *probe = fopen(path, "rb");
    if (!probe) {
        snprintf(path, sizeof path, "%s/model.safetensors", c->dir);
        probe = fopen(path, "rb");
        if (!probe)
            return wk_fail(err, WK_ENOTFOUND, "%s: no model.safetensors or model.safetensors.index.json", c->dir);
        fclose(probe);
        c->n_shards = 1;
        return st_open(&c->shards[0], path, err);
    }
    fclose(probe);
    json_error_t je;
    json_t *idx = json_load_file(path, 0, &je);
    if (!idx) return wk_fail(err, WK_EFORMAT, "%s: %s (line %d)", path, je.text, je.line);
    json_t *map = json_object_get(idx, "weight_map");
    const char **names = NULL;
    int rc = 0;
    if (!json_is_object(map) || json_object_size(map) == 0) {
        rc = wk_fail(err, WK_EFORMAT, "%s: weight_map missing or empty", path);
        goto done;
    }
    names = malloc(json_object_size(map) * sizeof *names);
    if (!names) {
        rc = wk_fail(err, WK_ENOMEM, "out of memory");
        goto done;
    }
    size_t n = 0;
    const char *key;
    json_t *v;
    json_object_foreach(map, key, v) {
        const char *fn = json_string_value(v);
        if (!fn || !*fn || strchr(fn, '/')) {
            rc = wk_fail(err, WK_EFORMAT, "%s: weight_map[%s] is not a file name", path, key);
            goto done;
        }
        names[n++] = fn;
    }
    qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n; i++) {
        if (i && !strcmp(names[i], names[i - 1])) continue;
        if (c->n_shards == MAX_SHARDS) {
            rc = wk_fail(err, WK_EFORMAT, "%s: more than %d files", path, MAX_SHARDS);
            goto done;
        }
        char sp[1200];
        snprintf(sp, sizeof sp, "%s/%s", c->dir, names[i]);
        if ((rc = st_open(&c->shards[c->n_shards], sp, err))) goto done;
        c->n_shards++;
    }
    json_object_foreach(map, key, v) {
        bool found = false;
        for (size_t i = 0; i < c->n_shards && !found; i++) found = st_find(c->shards[i], key) != NULL;
        if (!found) {
            rc = wk_fail(err, WK_EFORMAT, "%s: tensor %s is not in %s as the index says", path, key,
                         json_string_value(v));
            goto done;
        }
    }
done:
    free(names);
    json_decref(idx);
    return rc;
}

/* ---- tensor plan ---------------------------------------------------------------------- */

static const st_tensor *find_src(const hf_convert *c, const char *name)
{
    for (size_t i = 0; i < c->n_shards; i++) {
        const st_tensor *t = st_find(c->shards[i], name);
        if (t) return t;
    }
    return NULL;
}

static void shape_str(const st_tensor *t, char *buf, size_t cap)
{
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < t->n_dims && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%" PRId64, d ? ", " : "", t->shape[d]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

typedef struct spec {
    const char *gguf;   /* GGUF name (printf pattern with the block index) */
    const char *hf;     /* HF suffix after the layer prefix */
    int n_dims;         /* GGUF dims: 1 or 2 */
    enum hf_op op;
    int conv;           /* source is [C, 1, K] (or [C, K]) */
} spec;

/* Adds one output tensor from HF tensor `hf` with GGUF shape {ne0, ne1}. */
static int add_out(hf_convert *c, const char *gguf, const char *hf, int n_dims, int64_t ne0, int64_t ne1, enum hf_op op,
                   int conv, wk_error *err)
{
    const st_tensor *t = find_src(c, hf);
    if (!t) return wk_fail(err, WK_EFORMAT, "%s: tensor %s missing (needed for %s)", c->dir, hf, gguf);
    if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16)
        return wk_fail(err, WK_EUNSUPPORTED, "%s: tensor %s: dtype %s (wick converts F32, F16 and BF16)", c->dir, hf,
                       st_dtype_name(t->dtype));
    bool ok;
    if (n_dims == 1) ok = t->n_dims == 1 && t->shape[0] == ne0;
    else if (conv)
        ok = (t->n_dims == 3 && t->shape[0] == ne1 && t->shape[1] == 1 && t->shape[2] == ne0) ||
             (t->n_dims == 2 && t->shape[0] == ne1 && t->shape[1] == ne0);
    else ok = t->n_dims == 2 && t->shape[0] == ne1 && t->shape[1] == ne0;
    if (!ok) {
        char got[96];
        shape_str(t, got, sizeof got);
        if (n_dims == 1)
            return wk_fail(err, WK_EFORMAT, "%s: tensor %s: shape %s, expected [%" PRId64 "] (from config.json)", c->dir,
                           hf, got, ne0);
        return wk_fail(err, WK_EFORMAT, "%s: tensor %s: shape %s, expected [%" PRId64 ", %s%" PRId64 "] (from config.json)",
                       c->dir, hf, got, ne1, conv ? "1, " : "", ne0);
    }
    if (c->n_out == c->cap_out) {
        size_t cap = c->cap_out ? 2 * c->cap_out : 64;
        out_tensor *o = realloc(c->out, cap * sizeof *o);
        if (!o) return wk_fail(err, WK_ENOMEM, "out of memory");
        c->out = o;
        c->cap_out = cap;
    }
    out_tensor *o = &c->out[c->n_out++];
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s", gguf);
    o->src = t;
    o->n_dims = (uint32_t)n_dims;
    o->ne0 = ne0;
    o->ne1 = n_dims == 1 ? 1 : ne1;
    o->op = op;
    return 0;
}

static out_tensor *last_out(hf_convert *c) { return &c->out[c->n_out - 1]; }

/* Layer `il` (HF prefix pre, e.g. "model.layers.3.") into GGUF block `blk`. */
static int plan_layer(hf_convert *c, const char *pre, int blk, bool full, wk_error *err)
{
    const hparams *h = &c->hp;
    const int64_t E = h->n_embd, key_dim = h->n_hk * h->d_k, value_dim = h->n_hv * h->d_v;
    const int64_t conv_dim = 2 * key_dim + value_dim;
    const bool reorder = h->n_hv != h->n_hk;
    char g[96], f[192];
#define ADD(gsuf, hsuf, nd, ne0, ne1, op, conv)                                        \
    do {                                                                               \
        snprintf(g, sizeof g, "blk.%d.%s", blk, gsuf);                                 \
        snprintf(f, sizeof f, "%s%s", pre, hsuf);                                      \
        int rc_ = add_out(c, g, f, nd, ne0, ne1, op, conv, err);                       \
        if (rc_) return rc_;                                                           \
    } while (0)
    ADD("attn_norm.weight", "input_layernorm.weight", 1, E, 1, OP_ADD_ONE, 0);
    if (full) {
        const int64_t Hd = h->n_head * h->head_dim, KVd = h->n_head_kv * h->head_dim;
        ADD("attn_q.weight", "self_attn.q_proj.weight", 2, E, 2 * Hd, OP_COPY, 0);
        ADD("attn_k.weight", "self_attn.k_proj.weight", 2, E, KVd, OP_COPY, 0);
        ADD("attn_v.weight", "self_attn.v_proj.weight", 2, E, KVd, OP_COPY, 0);
        ADD("attn_q_norm.weight", "self_attn.q_norm.weight", 1, h->head_dim, 1, OP_ADD_ONE, 0);
        ADD("attn_k_norm.weight", "self_attn.k_norm.weight", 1, h->head_dim, 1, OP_ADD_ONE, 0);
        ADD("attn_output.weight", "self_attn.o_proj.weight", 2, Hd, E, OP_COPY, 0);
    } else {
        ADD("attn_qkv.weight", "linear_attn.in_proj_qkv.weight", 2, E, conv_dim, OP_COPY, 0);
        if (reorder) last_out(c)->vrow0 = 2 * key_dim, last_out(c)->vrow_block = h->d_v;
        ADD("attn_gate.weight", "linear_attn.in_proj_z.weight", 2, E, value_dim, OP_COPY, 0);
        if (reorder) last_out(c)->vrow_block = h->d_v;
        ADD("ssm_beta.weight", "linear_attn.in_proj_b.weight", 2, E, h->n_hv, OP_COPY, 0);
        if (reorder) last_out(c)->vrow_block = 1;
        ADD("ssm_alpha.weight", "linear_attn.in_proj_a.weight", 2, E, h->n_hv, OP_COPY, 0);
        if (reorder) last_out(c)->vrow_block = 1;
        ADD("ssm_dt.bias", "linear_attn.dt_bias", 1, h->n_hv, 1, OP_COPY, 0);
        if (reorder) last_out(c)->vcol_block = 1;
        ADD("ssm_a", "linear_attn.A_log", 1, h->n_hv, 1, OP_NEG_EXP, 0);
        if (reorder) last_out(c)->vcol_block = 1;
        ADD("ssm_conv1d.weight", "linear_attn.conv1d.weight", 2, h->conv_k, conv_dim, OP_COPY, 1);
        if (reorder) last_out(c)->vrow0 = 2 * key_dim, last_out(c)->vrow_block = h->d_v;
        ADD("ssm_norm.weight", "linear_attn.norm.weight", 1, h->d_v, 1, OP_COPY, 0);
        ADD("ssm_out.weight", "linear_attn.out_proj.weight", 2, value_dim, E, OP_COPY, 0);
        if (reorder) last_out(c)->vcol_block = h->d_v;
    }
    ADD("post_attention_norm.weight", "post_attention_layernorm.weight", 1, E, 1, OP_ADD_ONE, 0);
    ADD("ffn_gate.weight", "mlp.gate_proj.weight", 2, E, h->n_ff, OP_COPY, 0);
    ADD("ffn_up.weight", "mlp.up_proj.weight", 2, E, h->n_ff, OP_COPY, 0);
    ADD("ffn_down.weight", "mlp.down_proj.weight", 2, h->n_ff, E, OP_COPY, 0);
#undef ADD
    return 0;
}

static int plan_tensors(hf_convert *c, wk_error *err)
{
    const hparams *h = &c->hp;
    const int64_t E = h->n_embd;
    snprintf(c->prefix, sizeof c->prefix, "%s",
             find_src(c, "model.language_model.embed_tokens.weight") ? "model.language_model." : "model.");
    char f[192], pre[128];
    int rc;
    snprintf(f, sizeof f, "%sembed_tokens.weight", c->prefix);
    if ((rc = add_out(c, "token_embd.weight", f, 2, E, h->n_vocab, OP_COPY, 0, err))) return rc;
    for (int il = 0; il < h->n_layer; il++) {
        snprintf(pre, sizeof pre, "%slayers.%d.", c->prefix, il);
        if ((rc = plan_layer(c, pre, il, (il + 1) % h->interval == 0, err))) return rc;
    }
    snprintf(f, sizeof f, "%snorm.weight", c->prefix);
    if ((rc = add_out(c, "output_norm.weight", f, 1, E, 1, OP_ADD_ONE, 0, err))) return rc;
    if (!h->tied || find_src(c, "lm_head.weight"))
        if ((rc = add_out(c, "output.weight", "lm_head.weight", 2, E, h->n_vocab, OP_COPY, 0, err))) return rc;
    /* the MTP block, when the checkpoint has it (save_pretrained drops mtp.*) */
    if (h->mtp_layers == 1 && find_src(c, "mtp.fc.weight")) {
        const int N = (int)h->n_layer;
        char g[96];
        snprintf(g, sizeof g, "blk.%d.nextn.eh_proj.weight", N);
        if ((rc = add_out(c, g, "mtp.fc.weight", 2, 2 * E, E, OP_COPY, 0, err))) return rc;
        snprintf(g, sizeof g, "blk.%d.nextn.enorm.weight", N);
        if ((rc = add_out(c, g, "mtp.pre_fc_norm_embedding.weight", 1, E, 1, OP_ADD_ONE, 0, err))) return rc;
        snprintf(g, sizeof g, "blk.%d.nextn.hnorm.weight", N);
        if ((rc = add_out(c, g, "mtp.pre_fc_norm_hidden.weight", 1, E, 1, OP_ADD_ONE, 0, err))) return rc;
        if ((rc = plan_layer(c, "mtp.layers.0.", N, true, err))) return rc;
        snprintf(g, sizeof g, "blk.%d.nextn.shared_head_norm.weight", N);
        if ((rc = add_out(c, g, "mtp.norm.weight", 1, E, 1, OP_ADD_ONE, 0, err))) return rc;
    }
    /* every checkpoint tensor must be used, except a vision tower's */
    for (size_t s = 0; s < c->n_shards; s++)
        for (size_t i = 0; i < st_tensor_count(c->shards[s]); i++) {
            const st_tensor *t = st_tensor_at(c->shards[s], i);
            bool used = false;
            for (size_t k = 0; k < c->n_out && !used; k++) used = c->out[k].src == t;
            if (used) continue;
            if (!strncmp(t->name, "model.visual.", 13) || !strncmp(t->name, "visual.", 7)) {
                c->n_skipped++;
                continue;
            }
            if (!strncmp(t->name, "mtp.", 4) && h->mtp_layers == 1 && !find_src(c, "mtp.fc.weight"))
                return wk_fail(err, WK_EFORMAT, "%s: tensor %s without mtp.fc.weight: incomplete MTP block", c->dir,
                               t->name);
            return wk_fail(err, WK_EFORMAT, "%s: tensor %s is not part of a Qwen3.5 model with this config.json",
                           c->dir, t->name);
        }
    return 0;
}

/* ---- types ------------------------------------------------------------------------------ */

static int assign_types(hf_convert *c, wk_error *err)
{
    const hparams *h = &c->hp;
    synth_options o;
    memset(&o, 0, sizeof o);
    o.dims = (synth_dims){
        .arch = SYNTH_ARCH_QWEN35, .n_layer = (uint32_t)h->n_layer, .n_embd = (uint32_t)h->n_embd,
        .n_ff = (uint32_t)h->n_ff, .n_head = (uint32_t)h->n_head, .n_head_kv = (uint32_t)h->n_head_kv,
        .head_dim = (uint32_t)h->head_dim, .n_rot = (uint32_t)h->n_rot, .n_vocab = (uint32_t)h->n_vocab,
        .n_ctx_train = (uint32_t)h->n_ctx, .rope_base = (float)h->rope_theta, .rms_eps = (float)h->eps,
        .tied_embeddings = h->tied && !find_src(c, "lm_head.weight"), .full_attn_interval = (uint32_t)h->interval,
        .ssm_conv_kernel = (uint32_t)h->conv_k, .ssm_head_dim = (uint32_t)h->d_k, .ssm_n_k_heads = (uint32_t)h->n_hk,
        .ssm_n_v_heads = (uint32_t)h->n_hv,
    };
    o.quant = c->quant;
    synth_plan *p;
    int rc = synth_plan_new(&o, &p, err);
    if (rc) return wk_fail_prefix(err, "%s: planning tensor types", c->dir);
    /* the MTP block takes the types of the last full-attention layer */
    const int64_t last_full = (h->n_layer / h->interval) * h->interval - 1;
    for (size_t k = 0; k < c->n_out; k++) {
        out_tensor *t = &c->out[k];
        char look[96];
        snprintf(look, sizeof look, "%s", t->name);
        int blk;
        const char *dot;
        if (sscanf(t->name, "blk.%d.", &blk) == 1 && blk >= h->n_layer && (dot = strchr(t->name + 4, '.'))) {
            if (strstr(t->name, ".nextn.")) snprintf(look, sizeof look, "blk.%" PRId64 ".attn_output.weight", last_full);
            else snprintf(look, sizeof look, "blk.%" PRId64 "%s", last_full, dot);
        }
        t->type = QT_F32;
        for (size_t i = 0; i < p->n_tensors; i++)
            if (!strcmp(p->tensors[i].name, look)) t->type = p->tensors[i].type;
        if (t->n_dims == 1 || strstr(t->name, "nextn.enorm") || strstr(t->name, "nextn.hnorm")) t->type = QT_F32;
        t->type = qt_mix_fallback(t->type, t->ne0);
    }
    synth_plan_free(p);
    return 0;
}

int hf_convert_open(hf_convert **out, const char *dir, const char *quant, wk_error *err)
{
    *out = NULL;
    hf_convert *c = calloc(1, sizeof *c);
    if (!c) return wk_fail(err, WK_ENOMEM, "out of memory");
    snprintf(c->dir, sizeof c->dir, "%s", dir);
    size_t n = strlen(c->dir);
    while (n > 1 && c->dir[n - 1] == '/') c->dir[--n] = '\0';
    const char *base = strrchr(c->dir, '/');
    snprintf(c->folder_name, sizeof c->folder_name, "%s", base ? base + 1 : c->dir);
    int rc;
    if ((rc = qt_mix_parse(quant, &c->quant, err)) || (rc = read_config(c, err)) ||
        (rc = open_shards(c, err)) || (rc = plan_tensors(c, err)) || (rc = assign_types(c, err))) {
        hf_convert_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void hf_convert_free(hf_convert *c)
{
    if (!c) return;
    for (size_t i = 0; i < c->n_shards; i++) st_close(c->shards[i]);
    free(c->out);
    free(c);
}

/* ---- writing ------------------------------------------------------------------------------ */

int hf_convert_write_meta(hf_convert *c, gguf_writer *w, const char *name)
{
    const hparams *h = &c->hp;
    bool mtp = false;
    for (size_t k = 0; k < c->n_out; k++) mtp = mtp || strstr(c->out[k].name, ".nextn.") != NULL;
    char qname[16];
    qt_mix_name(&c->quant, qname, sizeof qname);
    int rc = 0;
    rc |= gguf_writer_set_str(w, "general.architecture", "qwen35");
    rc |= gguf_writer_set_str(w, "general.type", "model");
    rc |= gguf_writer_set_str(w, "general.name", name ? name : c->folder_name);
    rc |= gguf_writer_set_u32(w, "general.file_type", qt_mix_file_type(&c->quant));
    rc |= gguf_writer_set_u32(w, "general.quantization_version", 2);
    rc |= gguf_writer_set_u32(w, "qwen35.context_length", (uint32_t)h->n_ctx);
    rc |= gguf_writer_set_u32(w, "qwen35.embedding_length", (uint32_t)h->n_embd);
    rc |= gguf_writer_set_u32(w, "qwen35.block_count", (uint32_t)(h->n_layer + (mtp ? 1 : 0)));
    if (mtp) rc |= gguf_writer_set_u32(w, "qwen35.nextn_predict_layers", 1);
    rc |= gguf_writer_set_u32(w, "qwen35.feed_forward_length", (uint32_t)h->n_ff);
    rc |= gguf_writer_set_u32(w, "qwen35.attention.head_count", (uint32_t)h->n_head);
    rc |= gguf_writer_set_u32(w, "qwen35.attention.head_count_kv", (uint32_t)h->n_head_kv);
    rc |= gguf_writer_set_u32(w, "qwen35.attention.key_length", (uint32_t)h->head_dim);
    rc |= gguf_writer_set_u32(w, "qwen35.attention.value_length", (uint32_t)h->head_dim);
    rc |= gguf_writer_set_f32(w, "qwen35.attention.layer_norm_rms_epsilon", (float)h->eps);
    rc |= gguf_writer_set_f32(w, "qwen35.rope.freq_base", (float)h->rope_theta);
    rc |= gguf_writer_set_u32(w, "qwen35.rope.dimension_count", (uint32_t)h->n_rot);
    int32_t sections[4] = {h->sections[0], h->sections[1], h->sections[2], 0};
    rc |= gguf_writer_set_arr(w, "qwen35.rope.dimension_sections", GGUF_T_INT32, sections, 4);
    rc |= gguf_writer_set_u32(w, "qwen35.full_attention_interval", (uint32_t)h->interval);
    rc |= gguf_writer_set_u32(w, "qwen35.ssm.conv_kernel", (uint32_t)h->conv_k);
    rc |= gguf_writer_set_u32(w, "qwen35.ssm.state_size", (uint32_t)h->d_k);
    rc |= gguf_writer_set_u32(w, "qwen35.ssm.group_count", (uint32_t)h->n_hk);
    rc |= gguf_writer_set_u32(w, "qwen35.ssm.time_step_rank", (uint32_t)h->n_hv);
    rc |= gguf_writer_set_u32(w, "qwen35.ssm.inner_size", (uint32_t)(h->n_hv * h->d_v));
    rc |= gguf_writer_set_u32(w, "qwen35.vocab_size", (uint32_t)h->n_vocab);
    return rc;
}

int hf_convert_add_tensors(hf_convert *c, gguf_writer *w)
{
    int rc = 0;
    for (size_t k = 0; k < c->n_out; k++) {
        const out_tensor *t = &c->out[k];
        int64_t ne[2] = {t->ne0, t->ne1};
        rc |= gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, ne);
    }
    return rc;
}

/* HF value head of GGUF value head g: GGUF tiles value heads over the key
 * heads (g pairs with key head g mod H_k), HF groups them by key head. */
static int64_t hf_head(const hparams *h, int64_t g)
{
    return (g % h->n_hk) * (h->n_hv / h->n_hk) + g / h->n_hk;
}

static int64_t src_row(const hparams *h, const out_tensor *t, int64_t r)
{
    if (!t->vrow_block || r < t->vrow0 || r >= t->vrow0 + h->n_hv * t->vrow_block) return r;
    int64_t off = r - t->vrow0;
    return t->vrow0 + hf_head(h, off / t->vrow_block) * t->vrow_block + off % t->vrow_block;
}

int hf_convert_write_data(hf_convert *c, gguf_writer *w, wk_error *err)
{
    const hparams *h = &c->hp;
    int rc = 0;
    for (size_t k = 0; k < c->n_out && !rc; k++) {
        const out_tensor *t = &c->out[k];
        const qt_traits *tr = qt_traits_of(t->type);
        size_t row_bytes = qt_row_bytes(tr, t->ne0);
        float *in = malloc((size_t)t->ne0 * sizeof *in), *row = malloc((size_t)t->ne0 * sizeof *row);
        uint8_t *q = malloc(row_bytes);
        if (!in || !row || !q) rc = wk_fail(err, WK_ENOMEM, "out of memory");
        for (int64_t r = 0; r < t->ne1 && !rc; r++) {
            if ((rc = st_read_f32(t->src, (uint64_t)(src_row(h, t, r) * t->ne0), (uint64_t)t->ne0, in, err))) break;
            for (int64_t i = 0; i < t->ne0; i++) {
                int64_t si = t->vcol_block ? hf_head(h, i / t->vcol_block) * t->vcol_block + i % t->vcol_block : i;
                float v = in[si];
                row[i] = t->op == OP_ADD_ONE ? 1.0f + v : t->op == OP_NEG_EXP ? -expf(v) : v;
            }
            if (qt_quantize_row((enum qt_type)t->type, row, q, t->ne0))
                rc = wk_fail(err, WK_EINVAL, "tensor %s: cannot quantize rows of %" PRId64 " to %s", t->name, t->ne0,
                             qt_type_name(t->type));
            else
                rc = gguf_writer_write_data(w, q, row_bytes, err);
        }
        free(in);
        free(row);
        free(q);
    }
    return rc;
}

void hf_convert_get_info(const hf_convert *c, hf_convert_info *info)
{
    memset(info, 0, sizeof *info);
    info->n_layer = (uint32_t)c->hp.n_layer;
    info->n_tensors = c->n_out;
    info->n_skipped = c->n_skipped;
    for (size_t k = 0; k < c->n_out; k++) {
        const out_tensor *t = &c->out[k];
        info->has_mtp = info->has_mtp || strstr(t->name, ".nextn.") != NULL;
        info->n_params += (uint64_t)(t->ne0 * t->ne1);
        info->data_bytes += qt_row_bytes(qt_traits_of(t->type), t->ne0) * (uint64_t)t->ne1;
    }
    qt_mix_name(&c->quant, info->type_name, sizeof info->type_name);
}
