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

/* Bytes used somewhere in a subtree: ASCII one bit each, the rest as one
 * flag. In a subtree, utf8 says that every token's bytes from the
 * subtree's root on are valid UTF-8 (a last character may be cut). For a
 * DFA state: the ASCII bytes that lead back to it, and (high) whether
 * every UTF-8 character does, with its partial sequences alive. */
typedef struct gram_byte_use {
    uint64_t ascii[2];
    bool high;
    bool utf8;
} gram_byte_use;

/* UTF-8 decoding as a small automaton: 0 at a character boundary, 1..3
 * continuation bytes to come, 4..7 the restricted second byte after E0,
 * ED, F0, F4. Returns the next state, or -1 for an invalid byte. */
static inline int gram_utf8_next(int st, unsigned b)
{
    switch (st) {
    case 0:
        if (b < 0x80) return 0;
        if (b >= 0xC2 && b <= 0xDF) return 1;
        if (b == 0xE0) return 4;
        if (b == 0xED) return 5;
        if (b >= 0xE1 && b <= 0xEF) return 2;
        if (b == 0xF0) return 6;
        if (b >= 0xF1 && b <= 0xF3) return 3;
        if (b == 0xF4) return 7;
        return -1;
    case 1: case 2: case 3: return b >= 0x80 && b <= 0xBF ? st - 1 : -1;
    case 4: return b >= 0xA0 && b <= 0xBF ? 1 : -1;
    case 5: return b >= 0x80 && b <= 0x9F ? 1 : -1;
    case 6: return b >= 0x90 && b <= 0xBF ? 2 : -1;
    default: return b >= 0x80 && b <= 0x8F ? 2 : -1;
    }
}

#define GRAM_BULK_TOKENS 16

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
    /* Subtrees with at least GRAM_BULK_TOKENS tokens: the bytes they use,
     * so that a state that loops on all of them takes the subtree whole. */
    uint32_t *node_bulk; /* per node: index into bulk, or GRAM_NONE */
    gram_byte_use *bulk;
};

/* Id of the special (or end-of-generation) token with exactly this text, or -1. */
int32_t gram_vocab_find_special(const gram_vocab *gv, const char *text, size_t len);

/* ---- matcher (grammar_match.c) --------------------------------------------- */

/* A parse-stack frame, interned: the same (parent, alt, pos, count) is the
 * same id, so a stack is identified by its top frame. Frame 0 is the bottom
 * (the whole grammar matched). pos indexes the alt's element to match next;
 * count is how many times a GE_REPEAT element there has matched so far. */
typedef struct gram_frame {
    uint32_t parent, alt, pos, count;
    uint32_t depth : 31;
    uint32_t relative : 1; /* rooted at the placeholder (gram_dfa_relative) */
} gram_frame;

/* A DFA state: a sorted set of frames whose element is a terminal, plus
 * whether the grammar may end here. DFA state 0 is the dead state. */
typedef struct gram_dstate {
    uint64_t frames_off;
    uint32_t n_frames;
    bool accept;
    bool escape;      /* a relative state (below) can return into its placeholder here */
    uint64_t hash;
    /* bytes on which the state goes to itself (valid when loops_known) */
    gram_byte_use loops;
    bool loops_known;
    /* The same configuration relative to the deepest frame all its stacks
     * share, that frame replaced by a placeholder of the same depth (see
     * gram_dfa_relative); valid when rel_known, GRAM_NONE if there is none. */
    bool rel_known;
    uint32_t rel;
    uint32_t rel_base_depth;
} gram_dstate;

#define GRAM_DEAD 0
#define GRAM_UNKNOWN (-1)

/* A cached mask. For a relative state: the tokens it accepts by itself,
 * and the candidates whose acceptance depends on the frames below it. */
typedef struct gram_mask_slot {
    uint32_t dstate; /* GRAM_NONE: empty */
    uint32_t *mask;
    int32_t *cand;
    size_t n_cand, cap_cand;
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
    bool accept, escape;
    size_t steps;             /* closure work of the current computation */
    int err_code;             /* first failure inside a computation */

    uint32_t start;           /* DFA state at the start of the grammar */
    uint32_t placeholder;     /* frame standing for "the rest of the stack" (0: not made yet) */
    uint32_t rel_max_depth;   /* deepest frame a relative closure has tried */

    /* masks of recent DFA states (grammar_state.c) */
    gram_mask_slot *masks;
    size_t n_mask_slots, mask_clock;
    uint32_t *ds_slot;        /* per DFA state: its mask slot, or GRAM_NONE */
    size_t n_ds_slot;

    uint32_t *walk;           /* DFA state per trie depth during a mask walk */
    uint8_t *walk_escaped;    /* per depth: a relative walk passed an escape on the way */
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
/* The relative configuration of DFA state d: its stacks cut at the deepest
 * frame they all share, which becomes a placeholder. Tokens that never
 * return into that frame are accepted alike by every state with the same
 * relative configuration, so masks are shared across contexts (a string
 * inside any property, at any depth, say). Returns the relative state's
 * id, GRAM_NONE when the stacks share no frame, or a negative error. The
 * shared frame's depth is *base_depth: relative frames count depth from
 * the placeholder, so the relative result holds for d while base_depth +
 * rel_max_depth <= GRAM_MAX_DEPTH (no path that one keeps is cut here). */
int64_t gram_dfa_relative(gram_runtime *rt, uint32_t d, uint32_t *base_depth, wk_error *err);
/* DFA state after bytes from d, or GRAM_DEAD, or a negative error. */
int64_t gram_dfa_walk_bytes(gram_runtime *rt, uint32_t d, const char *bytes, size_t len, wk_error *err);
/* Between steps: compacts a cache grown past GRAM_CACHE_SOFT_BYTES. */
int gram_runtime_keep_bounded(gram_runtime *rt, wk_error *err);
/* Bytes the runtime's caches take now. */
size_t gram_runtime_bytes(const gram_runtime *rt);
/* Drops every cache, keeping the DFA states of live states (renumbered). */
int gram_runtime_compact(gram_runtime *rt, wk_error *err);
/* The mask cache and walk scratch of a runtime with a vocabulary
 * (grammar_mask.c); freed by gram_runtime_release. */
int gram_masks_init(gram_runtime *rt, wk_error *err);
/* Forgets all cached masks (DFA ids are about to change). */
void gram_masks_clear(gram_runtime *rt);

#endif
