/* Internals shared by the grammar engine's files (grammar_*.c). Not for use
 * outside src/engine/grammar*. */
#ifndef WICK_ENGINE_GRAMMAR_IMPL_H
#define WICK_ENGINE_GRAMMAR_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/grammar.h"

#define GRAM_INF UINT32_MAX /* unbounded repetition */
#define GRAM_NONE UINT32_MAX

/* ---- compiled grammar ---------------------------------------------------- */

enum gram_elem_kind {
    GE_BYTES = 0, /* one byte out of a set (arg: set index) */
    GE_SPECIAL,   /* one special token (arg: special index) */
    GE_RULE,      /* a rule (arg: rule index) */
    GE_REPEAT,    /* a rule min..max times (max GRAM_INF: unbounded) */
};

typedef struct gram_elem {
    uint32_t kind;
    uint32_t arg;
    uint32_t min, max;
} gram_elem;

/* An alternative: elems[first .. first + n). gate GRAM_NONE = always on,
 * else 2k (on iff special k is a token of the vocabulary) or 2k + 1 (on iff
 * it is not): how a token literal falls back to its text. */
typedef struct gram_alt {
    uint32_t first, n;
    uint32_t rule;
    uint32_t gate;
} gram_alt;

typedef struct gram_rule {
    uint32_t first_alt, n_alts;
    uint32_t name; /* offset into names */
} gram_rule;

struct gram_grammar {
    gram_rule *rules;
    gram_alt *alts;
    gram_elem *elems;
    uint8_t (*sets)[32]; /* 256-bit byte sets */
    size_t n_rules, n_alts, n_elems, n_sets;
    char **specials;     /* token-literal texts, NUL-terminated */
    size_t n_specials;
    char *names;         /* rule names, NUL-separated */
    uint32_t root;
    /* Bytes partitioned into classes no set tells apart (DFA columns). */
    uint8_t byte_class[256];
    uint8_t class_rep[256]; /* a byte of each class */
    uint32_t n_classes;
};

static inline bool gram_set_has(const uint8_t *set, unsigned b) { return set[b >> 3] >> (b & 7) & 1; }
static inline void gram_set_add(uint8_t *set, unsigned b) { set[b >> 3] |= (uint8_t)(1u << (b & 7)); }
static inline const char *gram_rule_name(const gram_grammar *g, uint32_t r) { return g->names + g->rules[r].name; }

/* Checks of a parsed grammar (grammar_check.c): left recursion, rules that
 * can never complete. Fills byte classes. WK_EINVAL naming the rule. */
int gram_check(gram_grammar *g, wk_error *err);

/* ---- code point classes as UTF-8 byte sequences (grammar_utf8.c) ---------- */

typedef struct gram_cp_range {
    uint32_t lo, hi;
} gram_cp_range;

/* One UTF-8 sequence shape: n byte ranges. */
typedef struct gram_utf8_seq {
    uint8_t n;
    uint8_t lo[4], hi[4];
} gram_utf8_seq;

/* Turns sorted, disjoint code point ranges (surrogates and values above
 * 0x10FFFF removed by the caller) into byte-range sequences covering
 * exactly their UTF-8 encodings, in byte order. *out is malloc'd. */
int gram_utf8_sequences(const gram_cp_range *r, size_t n, gram_utf8_seq **out, size_t *n_out);
/* Decodes one UTF-8 character of s[0..n): returns its length (0 if invalid). */
size_t gram_utf8_decode(const char *s, size_t n, uint32_t *cp);

/* ---- vocabulary ------------------------------------------------------------ */

enum gram_tok_kind {
    GT_NEVER = 0, /* unused or empty: never allowed */
    GT_TEXT,      /* walked as bytes */
    GT_SPECIAL,   /* only through a token literal */
    GT_EOG,       /* end of generation */
};

struct gram_vocab {
    int32_t n_tokens;
    uint8_t *kind;    /* enum gram_tok_kind per token */
    char *bytes;      /* text bytes (GT_TEXT) or the token text (GT_SPECIAL, GT_EOG) */
    uint64_t *off;
    uint32_t *len;
    int32_t *eog;     /* end-of-generation ids */
    size_t n_eog;
    int32_t *special_sorted; /* GT_SPECIAL and GT_EOG ids sorted by text, for lookups */
    size_t n_special;
    /* Prefix tree of the GT_TEXT byte strings, nodes in preorder (the root
     * is implicit). Node i: its byte, depth (1 = first byte), the index past
     * its subtree, and tokens tok_ids[tok_begin[i] .. tok_begin[i+1]) ending
     * there. */
    uint32_t n_nodes;
    uint8_t *node_byte;
    uint16_t *node_depth;
    uint32_t *node_skip;
    uint32_t *tok_begin; /* n_nodes + 1 */
    int32_t *tok_ids;
    uint32_t max_depth;
};

/* Id of the special (or end-of-generation) token with exactly this text, or -1. */
int32_t gram_vocab_find_special(const gram_vocab *gv, const char *text, size_t len);

/* ---- matcher (grammar_match.c) --------------------------------------------- */

/* A parse-stack frame, interned: the same (parent, alt, pos, count) is the
 * same id, so a stack is identified by its top frame. Frame 0 is the bottom
 * (the whole grammar matched). pos indexes the alt's element to match next;
 * count is how many times a GE_REPEAT element there has matched so far. */
typedef struct gram_frame {
    uint32_t parent, alt, pos, count, depth;
} gram_frame;

/* A DFA state: a sorted set of frames whose element is a terminal, plus
 * whether the grammar may end here. DFA state 0 is the dead state. */
typedef struct gram_dstate {
    uint64_t frames_off;
    uint32_t n_frames;
    uint32_t accept;
    uint64_t hash;
} gram_dstate;

#define GRAM_DEAD 0
#define GRAM_UNKNOWN (-1)

typedef struct gram_mask_slot {
    uint32_t dstate; /* GRAM_NONE: empty */
    uint32_t *mask;
} gram_mask_slot;

typedef struct gram_runtime gram_runtime;

struct gram_state {
    gram_runtime *rt;
    uint32_t dstate;
    bool done;             /* an end-of-generation token was accepted */
    gram_state *prev, *next; /* the runtime's live states */
};

struct gram_runtime {
    const gram_grammar *g;
    const gram_vocab *gv;
    int refs;
    gram_state *live;
    uint8_t *alt_on;          /* per alt, after the special gates */
    int32_t *special_token;   /* per grammar special: token id, or -1 (matched as text) */
    uint32_t width;           /* DFA columns: byte classes, then specials */

    gram_frame *frames;
    size_t n_frames, cap_frames;
    uint32_t *frame_tab;      /* open addressing: frame ids (0 = empty slot) */
    size_t frame_tab_cap;
    uint32_t *mark;           /* per frame: stamp of the last closure that saw it */
    uint32_t stamp;

    gram_dstate *ds;
    size_t n_ds, cap_ds;
    uint32_t *ds_frames;      /* frame lists of all DFA states */
    size_t n_ds_frames, cap_ds_frames;
    int32_t *next;            /* n_ds * width transitions, GRAM_UNKNOWN until computed */
    uint32_t *ds_tab;         /* open addressing: DFA state ids (0 = empty slot) */
    size_t ds_tab_cap;

    /* closure scratch */
    uint32_t *work;
    size_t n_work, cap_work;
    uint32_t *ready;
    size_t n_ready, cap_ready;
    bool accept;
    size_t steps;             /* closure work of the current computation */
    int err_code;             /* first failure inside a computation */

    uint32_t start;           /* DFA state at the start of the grammar */

    /* masks of recent DFA states (grammar_state.c) */
    gram_mask_slot *masks;
    size_t n_mask_slots, mask_clock;
    uint32_t *ds_slot;        /* per DFA state: its mask slot, or GRAM_NONE */
    size_t n_ds_slot;

    uint32_t *walk;           /* DFA state per trie depth during a mask walk */
};

int gram_runtime_new(gram_runtime **out, const gram_grammar *g, const gram_vocab *gv, wk_error *err);
void gram_runtime_release(gram_runtime *rt);
/* Transition of DFA state d on column c, computing it on first use. Returns
 * the target (GRAM_DEAD included) or a negative WK_E* code. */
int64_t gram_dfa_step_slow(gram_runtime *rt, uint32_t d, uint32_t c, wk_error *err);
static inline int64_t gram_dfa_step(gram_runtime *rt, uint32_t d, uint32_t c, wk_error *err)
{
    int32_t t = rt->next[(size_t)d * rt->width + c];
    return t >= 0 ? t : gram_dfa_step_slow(rt, d, c, err);
}
/* Bytes the runtime's caches take now. */
size_t gram_runtime_bytes(const gram_runtime *rt);
/* Drops every cache, keeping the DFA states of live states (renumbered). */
int gram_runtime_compact(gram_runtime *rt, wk_error *err);
/* Forgets all cached masks (DFA ids are about to change). */
void gram_masks_clear(gram_runtime *rt);

#endif
