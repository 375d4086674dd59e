/* Hugging Face checkpoint (config.json + *.safetensors) -> GGUF tensors and
 * architecture metadata, for Qwen3.5 dense models (`qwen35`; spec
 * architectures.md 8, including the MTP "nextn" block 8.8).
 *
 * What the conversion does to the tensors, as llama.cpp's converter does:
 * names mapped to GGUF's (blk.N.attn_qkv.weight, ...); zero-centred RMSNorm
 * weights become 1 + w (all norms but the DeltaNet output norm);
 * A_log becomes ssm_a = -exp(A_log); the depthwise conv kernel is squeezed to
 * {K, channels}; when H_v != H_k, value heads are reordered from HF's grouped
 * order to GGUF's tiled order (value head j pairs with key head j mod H_k);
 * MTP tensors (mtp.*) become block n_layer with nextn_predict_layers = 1.
 * Tensor types follow wick synth's plan for the same dimensions (a pure type,
 * or llama.cpp's Q4_K_M / Q5_K_M rules); 1-D tensors and ssm_conv1d stay F32.
 *
 * The tokenizer is not handled here (tokenizer/ sits above model/): the
 * caller adds its metadata to the same writer (tok_import_hf_kvs).
 *
 * Usage: hf_convert_open -> hf_convert_write_meta + hf_convert_add_tensors
 * (and the caller's tokenizer keys) -> gguf_writer_begin_data ->
 * hf_convert_write_data -> gguf_writer_finish. Errors name the file, the
 * config key or the tensor (with its shape and the expected one). */
#ifndef WICK_MODEL_HF_CONVERT_H
#define WICK_MODEL_HF_CONVERT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "util/err.h"

typedef struct hf_convert hf_convert;

typedef struct hf_convert_info {
    uint32_t n_layer;      /* main layers */
    bool has_mtp;          /* the nextn block is converted */
    size_t n_tensors;      /* tensors written */
    uint64_t n_params;     /* elements written */
    uint64_t data_bytes;   /* tensor bytes written */
    size_t n_skipped;      /* checkpoint tensors not used (vision tower) */
    char type_name[16];    /* "Q8_0", "Q4_K_M", ... */
} hf_convert_info;

/* Reads dir/config.json and the safetensors files (dir/model.safetensors, or
 * the shards listed in dir/model.safetensors.index.json), checks every
 * tensor's presence, dtype (F32, F16, BF16) and shape against the config, and
 * plans the output types for `quant` (a type name such as "f16", "q8_0", or a
 * mix "q4_k_m", "q5_k_m"). WK_EUNSUPPORTED for other architectures (the
 * message names the config's model_type / architectures). */
int hf_convert_open(hf_convert **out, const char *dir, const char *quant, wk_error *err);
void hf_convert_free(hf_convert *c);

/* general.* (name: general.name; NULL = the folder's name) and qwen35.* keys. */
int hf_convert_write_meta(hf_convert *c, gguf_writer *w, const char *name);
/* Tensor infos, in file order. */
int hf_convert_add_tensors(hf_convert *c, gguf_writer *w);
/* Tensor data, after gguf_writer_begin_data; streams row by row. */
int hf_convert_write_data(hf_convert *c, gguf_writer *w, wk_error *err);

void hf_convert_get_info(const hf_convert *c, hf_convert_info *info);

#endif
