/* Internals shared by the tokenizer's files. Not for use outside src/tokenizer/. */
#ifndef WICK_TOKENIZER_TOK_INTERNAL_H
#define WICK_TOKENIZER_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

/* ---- string → value hash map (open addressing, keys borrowed) ---- */
typedef struct tok_map_slot {
    uint64_t hash;     /* 0 = empty */
    const char *a;     /* key part 1 */
    const char *b;     /* key part 2 (pairs) or NULL */
    uint32_t a_len, b_len;
    int32_t value;
} tok_map_slot;

typedef struct tok_map {
    tok_map_slot *slots;
    size_t cap; /* power of two */
    size_t count;
} tok_map;

uint64_t tok_hash_bytes(uint64_t h, const char *s, size_t n);
#define TOK_HASH_SEED 0xcbf29ce484222325ull
int tok_map_init(tok_map *m, size_t expected);
void tok_map_free(tok_map *m);
/* Inserts or overwrites. Returns 0 or WK_ENOMEM. */
int tok_map_put(tok_map *m, const char *a, size_t a_len, const char *b, size_t b_len, int32_t value);
/* Returns the value or -1 when absent (b NULL for single keys). */
int32_t tok_map_get(const tok_map *m, const char *a, size_t a_len, const char *b, size_t b_len);

/* ---- pre-tokenizer ---- */
typedef struct tok_pretok tok_pretok;
/* Compiles the expression list for a pre-tokenizer name (NULL = missing key →
 * llama.cpp's default list). Sets *ignore_merges / *add_bos_default per spec. */
int tok_pretok_new(tok_pretok **out, const char *pre, bool *ignore_merges, bool *add_bos_default,
                   wk_error *err);
void tok_pretok_free(tok_pretok *p);

/* A list of pieces as (offset, length) into one text. */
typedef struct tok_spans {
    uint32_t *off, *len;
    size_t n, cap;
} tok_spans;
int tok_spans_push(tok_spans *s, size_t off, size_t len);
void tok_spans_free(tok_spans *s);

/* Splits text[0..len) (valid UTF-8) into words; result replaces *out's content. */
int tok_pretok_split(const tok_pretok *p, const char *text, size_t len, tok_spans *out,
                     wk_error *err);

/* ---- vocab ---- */
typedef struct tok_special_ent {
    int32_t id;
    uint32_t len;
} tok_special_ent;

struct tok_vocab {
    enum tok_model model;
    char model_name[16];
    char pre_name[64];
    int32_t n_tokens;

    char *text_arena;        /* all token texts, NUL-terminated */
    uint64_t *text_off;      /* per token: offset into text_arena */
    uint32_t *text_len;
    float *scores;           /* NULL when absent */
    uint8_t *types;          /* enum tok_type per token (after adjustments) */
    tok_map token_to_id;

    /* decoded pieces (bytes) per token, for CONTROL/UNKNOWN the text */
    char *piece_arena;
    uint64_t *piece_off;
    uint32_t *piece_len;

    /* BPE merges: (left, right) → rank; strings borrowed from merge_arena */
    char *merge_arena;
    tok_map merge_rank;
    size_t n_merges;

    tok_pretok *pretok;
    bool ignore_merges;

    /* special-token partition list: CONTROL, USER_DEFINED, UNKNOWN sorted by
     * text length, longest first (ties: lower id first) */
    tok_special_ent *specials;
    size_t n_specials;

    int32_t bos, eos, eot, eom, unk, pad, sep;
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    bool add_bos, add_eos, add_space_prefix;

    int32_t *eog;
    size_t n_eog;

    int32_t byte_tokens[256]; /* SPM: id of <0xXX> (or the 1-byte text), -1 if none */
};

/* GPT-2 byte ↔ code point table. */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp); /* -1 when cp is not in the table */

/* UTF-8 helpers */
size_t tok_utf8_encode(uint32_t cp, char *out);
/* Length of the char starting at s[0] from its first byte only (1 for
 * continuation/invalid bytes), as llama.cpp splits symbols. */
size_t tok_utf8_len_lead(uint8_t c);
/* Decodes one code point at s (n bytes left); returns its length or 0 if the
 * sequence is invalid/incomplete. */
size_t tok_utf8_decode(const char *s, size_t n, uint32_t *cp);
/* Length of the maximal prefix of an invalid sequence at s (n >= 1 bytes
 * left) that could start a valid one (WHATWG "maximal subpart"), >= 1. */
size_t tok_utf8_invalid_len(const char *s, size_t n);
/* Returns a malloc'd copy of text with invalid sequences replaced by U+FFFD,
 * or NULL with *clean_len untouched if text is already valid (the common case). */
char *tok_utf8_sanitize(const char *text, size_t len, size_t *clean_len, bool *oom);

/* Algorithms: append ids for one raw-text fragment. */
typedef struct tok_ids {
    int32_t *v;
    size_t n, cap;
} tok_ids;
int tok_ids_push(tok_ids *a, int32_t id);

/* Merge-loop working memory, reused across the words of one encode call. */
typedef struct tok_symbol {
    uint32_t off, n;   /* span in the word buffer; n == 0 once merged away */
    int32_t prev, next;
} tok_symbol;

typedef struct tok_bigram {
    double prio;       /* BPE: rank (lower first); SPM: -score (lower first) */
    int32_t left, right;
    uint32_t size;     /* byte length of the pair when queued, detects stale entries */
} tok_bigram;

typedef struct tok_scratch {
    char *buf;
    size_t buf_cap;
    tok_symbol *sym;
    size_t sym_cap;
    tok_bigram *heap;
    size_t heap_n, heap_cap;
    tok_spans words;
} tok_scratch;
void tok_scratch_free(tok_scratch *s);
int tok_scratch_reserve(tok_scratch *s, size_t bytes, size_t symbols);
int tok_heap_push(tok_scratch *s, tok_bigram b);
/* Pops the entry with the lowest (prio, left); false when empty. */
bool tok_heap_pop(tok_scratch *s, tok_bigram *out);

int tok_bpe_fragment(const tok_vocab *v, const char *text, size_t len, tok_scratch *sc,
                     tok_ids *out, wk_error *err);
/* SPM: text is the raw fragment; space_prefix asks for the leading space. */
int tok_spm_fragment(const tok_vocab *v, const char *text, size_t len, bool space_prefix,
                     tok_scratch *sc, tok_ids *out, wk_error *err);

#endif
