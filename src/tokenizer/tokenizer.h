/* Tokenizers: vocabulary from GGUF metadata, byte-level BPE (`gpt2`) and
 * SentencePiece BPE (`llama`), special-token parsing, detokenization with a
 * streaming UTF-8-safe decoder, and import of a Hugging Face tokenizer.json.
 *
 * Spec: ../shared/spec/tokenizer-and-templates.md §1–6.
 *
 * Ownership and threads: tok_vocab is immutable after tok_load_from_gguf and
 * owns copies of everything it needs (the gguf_file may be closed right
 * after loading). Any number of threads may call tok_encode / tok_decode /
 * queries on one vocab at the same time. A tok_decoder belongs to one
 * sequence and one thread at a time. */
#ifndef WICK_TOKENIZER_TOKENIZER_H
#define WICK_TOKENIZER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "util/err.h"

/* Token types as stored in tokenizer.ggml.token_type. */
enum tok_type {
    TOK_TYPE_UNDEFINED = 0,
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
};

enum tok_model {
    TOK_MODEL_SPM = 1, /* tokenizer.ggml.model "llama" */
    TOK_MODEL_BPE = 2, /* tokenizer.ggml.model "gpt2" (byte-level) */
};

#define TOK_NULL (-1) /* "no such token" for the special-id queries */

typedef struct tok_vocab tok_vocab;

/* Builds a vocabulary from a GGUF's tokenizer.ggml.* keys (the file may be a
 * vocab-only GGUF). Supports models "llama" and "gpt2" with the pre-tokenizers
 * listed in pretok.c; anything else fails with WK_EUNSUPPORTED naming the
 * value. Missing or malformed keys fail with WK_EFORMAT naming the key.
 * On success *out owns its data (caller frees with tok_free). */
int tok_load_from_gguf(tok_vocab **out, const gguf_file *f, wk_error *err);
void tok_free(tok_vocab *v);

/* Which token texts are recognised inside the text being encoded. */
enum tok_special_mode {
    /* Plain text: no token text is matched, not even USER_DEFINED ones such
     * as Qwen3's <think> or <tool_call>. Use for user-supplied content, so a
     * pasted "<|im_start|>" or "<think>" can never forge a control token. */
    TOK_SPECIAL_NONE = 0,
    /* CONTROL, UNKNOWN and USER_DEFINED token text is matched (template markers). */
    TOK_SPECIAL_ALL = 1,
    /* llama.cpp's parse_special=false: only USER_DEFINED token text is matched
     * (spec §3; how llama.cpp's and HF's test vectors were made). */
    TOK_SPECIAL_USER_DEFINED = 2,
};

/* Encodes len bytes of text (UTF-8; invalid sequences are read as U+FFFD).
 * add_special: add BOS / EOS around the result as the vocab's add_bos/add_eos
 *   flags say (tokenizer.ggml.add_bos_token, defaults per spec §6).
 * special: an enum tok_special_mode (false = TOK_SPECIAL_NONE, true =
 *   TOK_SPECIAL_ALL).
 * On success *ids is a malloc'd array of *n_ids ids (NULL when 0; caller
 * frees). Errors: WK_ENOMEM, WK_EINVAL (NULL args). */
int tok_encode(const tok_vocab *v, const char *text, size_t len, bool add_special,
               int special, int32_t **ids, size_t *n_ids, wk_error *err);

/* Same, appending to a caller-owned growable array: (*ids, *n_ids, *cap) is
 * grown with realloc as needed. Lets chat code tokenize segment by segment
 * into one buffer. The append continues the sequence: for SentencePiece the
 * "▁" space prefix is added only when the array is empty or ends with a
 * special token, as whole-text encoding would. (BPE merges never cross a call
 * boundary, so cut segments at special tokens to get whole-text results.) */
int tok_encode_append(const tok_vocab *v, const char *text, size_t len, bool add_special,
                      int special, int32_t **ids, size_t *n_ids, size_t *cap,
                      wk_error *err);

/* ---- queries ---- */
int32_t tok_n_vocab(const tok_vocab *v);
enum tok_model tok_model_kind(const tok_vocab *v);
const char *tok_model_name(const tok_vocab *v); /* "llama" / "gpt2" */
const char *tok_pre_name(const tok_vocab *v);   /* tokenizer.ggml.pre or "default" */

/* Token text exactly as stored in the GGUF (byte-level form for BPE NORMAL
 * tokens, e.g. "Ġhello"; "▁" for SPM spaces). NUL-terminated, borrowed from
 * the vocab; *len (if non-NULL) gets its length. NULL for an out-of-range id. */
const char *tok_token_text(const tok_vocab *v, int32_t id, size_t *len);
/* Effective type after load-time adjustments (auto-detected EOT/FIM tokens
 * forced to CONTROL, CONTROL tokens containing "unused" made UNUSED).
 * TOK_TYPE_UNDEFINED for an out-of-range id. */
enum tok_type tok_token_type(const tok_vocab *v, int32_t id);
float tok_token_score(const tok_vocab *v, int32_t id);
/* Id of the token whose stored text is exactly text[0..len), or TOK_NULL. */
int32_t tok_find(const tok_vocab *v, const char *text, size_t len);

int32_t tok_bos(const tok_vocab *v); /* TOK_NULL when the vocab has none */
int32_t tok_eos(const tok_vocab *v);
int32_t tok_eot(const tok_vocab *v); /* given, or auto-detected by text */
int32_t tok_eom(const tok_vocab *v);
int32_t tok_unk(const tok_vocab *v);
int32_t tok_pad(const tok_vocab *v);
bool tok_add_bos(const tok_vocab *v);
bool tok_add_eos(const tok_vocab *v);
/* End of generation: eos, eot, eom, FIM pad/rep/sep and tokens whose text is
 * one of <|im_end|>, <|endoftext|>, <|eot_id|>, … (spec §1.2). */
bool tok_is_eog(const tok_vocab *v, int32_t id);
/* The EOG ids, ascending, borrowed from the vocab. */
size_t tok_eog_ids(const tok_vocab *v, const int32_t **ids);
/* CONTROL or UNKNOWN (texts that are not shown unless asked for). */
bool tok_is_control(const tok_vocab *v, int32_t id);

/* ---- detokenization ---- */
enum {
    TOK_DECODE_SPECIAL = 1u << 0,     /* render CONTROL/UNKNOWN tokens as their text */
    TOK_DECODE_STRIP_SPACE = 1u << 1, /* SPM with add_space_prefix: drop the one leading
                                         space of the first piece (whole-text decode) */
};

/* Raw bytes of one token (may be a partial UTF-8 sequence). Returns a pointer
 * borrowed from the vocab (not NUL-terminated) and its length in *len; empty
 * (len 0) for CONTROL/UNKNOWN without TOK_DECODE_SPECIAL, UNUSED and
 * out-of-range ids. */
const char *tok_token_piece(const tok_vocab *v, int32_t id, unsigned flags, size_t *len);

/* Decodes a whole id sequence into valid UTF-8 (bytes that do not form valid
 * UTF-8 become U+FFFD). *text is malloc'd and NUL-terminated, *len excludes
 * the NUL. Out-of-range ids fail with WK_EINVAL. */
int tok_decode(const tok_vocab *v, const int32_t *ids, size_t n_ids, unsigned flags, char **text,
               size_t *len, wk_error *err);

/* Streaming decoder: feed ids one at a time, get text that only ever contains
 * complete UTF-8 characters; bytes of a character split across tokens are held
 * back until it completes. Invalid bytes become U+FFFD as soon as they are
 * known to be invalid. */
typedef struct tok_decoder tok_decoder;

/* flags as for tok_decode (TOK_DECODE_STRIP_SPACE applies to the first
 * non-empty piece fed). Returns NULL on allocation failure. The vocab must
 * outlive the decoder. */
tok_decoder *tok_decoder_new(const tok_vocab *v, unsigned flags);
/* Feeds one id. *text / *len receive the newly completed text (possibly
 * empty), borrowed from the decoder and valid until the next call on it.
 * WK_EINVAL for an out-of-range id (state unchanged), WK_ENOMEM. */
int tok_decoder_feed(tok_decoder *d, int32_t id, const char **text, size_t *len);
/* Ends the stream: returns held-back bytes (an incomplete sequence becomes
 * U+FFFD) and resets the decoder for reuse. */
void tok_decoder_flush(tok_decoder *d, const char **text, size_t *len);
/* Number of bytes currently held back (0..3). */
size_t tok_decoder_pending(const tok_decoder *d);
void tok_decoder_free(tok_decoder *d);

/* ---- Hugging Face import ---- */
typedef struct tok_import_opts {
    const char *pre;          /* force tokenizer.ggml.pre; NULL = detect from the regex */
    const char *architecture; /* general.architecture to write; NULL = none */
    const char *name;         /* general.name; NULL = "tokenizer" */
} tok_import_opts;

/* Turns a Hugging Face tokenizer.json (BPE model with a ByteLevel
 * pre-tokenizer) plus an optional tokenizer_config.json (config_path NULL =
 * none) into a vocab-only GGUF at out_path with llama.cpp-style tokenizer
 * metadata: model gpt2, pre detected from the Split regex (qwen2, qwen35,
 * llama-bpe, gpt-2), tokens / token_type / merges, bos/eos/pad/unk ids,
 * add_bos/add_eos and the chat template. Added tokens become CONTROL when
 * marked special or shaped like <|…|>, else USER_DEFINED; id gaps are filled
 * with [PAD{i}] UNUSED. Errors name the JSON path that is wrong. */
int tok_import_hf(const char *tokenizer_json_path, const char *config_path, const char *out_path,
                  const tok_import_opts *opts, wk_error *err);

/* The same tokenizer metadata added to an open writer (before
 * gguf_writer_begin_data), e.g. by `wick convert` next to the weights.
 * general.architecture / general.name are set only when opts gives them. */
int tok_import_hf_kvs(gguf_writer *w, const char *tokenizer_json_path, const char *config_path,
                      const tok_import_opts *opts, wk_error *err);

#endif
