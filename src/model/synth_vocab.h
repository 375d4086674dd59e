/* Internal to synth: the byte-level BPE vocabulary and chat template that
 * synthetic model files carry. */
#ifndef WICK_MODEL_SYNTH_VOCAB_H
#define WICK_MODEL_SYNTH_VOCAB_H

#include <stdint.h>

#include "util/err.h"

/* Token types as stored in tokenizer.ggml.token_type. */
enum { SYNTH_TOK_NORMAL = 1, SYNTH_TOK_CONTROL = 3, SYNTH_TOK_USER_DEFINED = 4, SYNTH_TOK_UNUSED = 5 };

typedef struct synth_vocab {
    char **tokens;         /* n_tokens strings (byte-level encoded for NORMAL tokens) */
    int32_t *types;        /* n_tokens token types */
    uint32_t n_tokens;
    char **merges;         /* "left right", rank = index */
    uint32_t n_merges;
    uint32_t endoftext_id; /* <|endoftext|>: bos and padding, as in Qwen3 files */
    uint32_t im_end_id;    /* <|im_end|>: eos */
    uint32_t im_start_id;
} synth_vocab;

/* Builds a vocabulary of exactly n_vocab tokens: 256 byte tokens, tokens
 * from BPE merges learnt on a built-in English/code text, the 26 Qwen
 * special tokens and [PAD{i}] tokens. With n_vocab 151936 (Qwen3) or 248320
 * (Qwen3.5) the special tokens get the real models' ids. WK_EINVAL if
 * n_vocab is too small (< 256 + 26 + 1). Free with synth_vocab_free. */
int synth_vocab_build(synth_vocab *v, uint32_t n_vocab, wk_error *err);
void synth_vocab_free(synth_vocab *v);

/* Smallest n_vocab synth_vocab_build accepts. */
uint32_t synth_vocab_min_size(void);

/* The Qwen3 chat template (Jinja), as shipped in Qwen3's tokenizer_config.json. */
extern const char synth_qwen3_chat_template[];

#endif
