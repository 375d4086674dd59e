/* Constrained decoding: a grammar engine that masks the vocabulary token by
 * token so that the generated text is always a prefix of a sentence of the
 * grammar, and ends only where the grammar can end.
 *
 * Three objects:
 *   gram_grammar  a compiled grammar (GBNF text, or made by json_schema.h /
 *                 grammar_tools.h). Immutable; share it freely (threads too).
 *   gram_vocab    the token byte strings of one model and a prefix tree of
 *                 them. Built once per model; immutable; shareable.
 *   gram_state    where one sequence is in the grammar. Mutable, one thread
 *                 at a time; its clones share caches with it, so a state and
 *                 all its clones must be used from the same thread.
 *
 * Per decode step:  gram_mask(s, mask) (or gram_mask_logits) before sampling,
 * then gram_accept(s, token) with the token actually used.
 *
 * The matcher is a pushdown automaton over bytes (UTF-8 classes become byte
 * sequences) whose configurations — sets of parse stacks — are interned as
 * states of a lazily built DFA. The mask walks the vocabulary's prefix tree
 * through that DFA: shared prefixes once, a subtree dropped at the first
 * byte the grammar rejects, and taken whole when the state returns to
 * itself on every byte in it. Masks are cached per DFA state (a repeated
 * configuration costs one copy), and computed relative to the deepest
 * frame all stacks share, so that the part that does not depend on what
 * lies below (a string's content, say) is shared by every context; only
 * the tokens that reach below (those with a closing quote) are decided in
 * context. Costs (Qwen3's 151669 tokens, bench/grammar_bench.c): the
 * vocabulary 0.2-0.4 s once per model; a grammar well under a millisecond
 * to a few; a step tens of microseconds on average, about 1 ms for a first
 * walk inside a new kind of string.
 *
 * Tokens:
 *   - normal and byte tokens are the bytes tok_token_piece(v, id, 0) gives;
 *     tokens with no bytes are never allowed;
 *   - special tokens (CONTROL, USER_DEFINED, UNKNOWN) are never read as
 *     text: one is allowed only where the grammar names it as a token
 *     literal (`<tool_call>` in GBNF). A token literal whose text is not a
 *     special token of the vocabulary matches its text as bytes instead;
 *   - end-of-generation tokens (tok_is_eog) are allowed exactly when the
 *     grammar can end here.
 *
 * Bounds: a parse stack deeper than GRAM_MAX_DEPTH frames is dropped (the
 * grammar's language is cut at that nesting: output stays valid, deeper
 * nesting is just not offered; should that leave no token at all, the mask
 * fails with WK_ERANGE); more than GRAM_MAX_PARSES simultaneous parses, or
 * a state cache beyond GRAM_CACHE_HARD_BYTES, fail with WK_ERANGE instead
 * of using unbounded time or memory. */
#ifndef WICK_ENGINE_GRAMMAR_H
#define WICK_ENGINE_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"
#include "util/err.h"

/* Parse-stack frames; a JSON nesting level takes at least two, so this
 * keeps generated JSON within the 256 levels chat_json_loads reads. */
#define GRAM_MAX_DEPTH 512
/* Simultaneous parses of one position (ambiguity) before giving up. */
#define GRAM_MAX_PARSES 4096
/* State caches above this are dropped and rebuilt between steps... */
#define GRAM_CACHE_SOFT_BYTES (64u << 20)
/* ...and a single step that needs more than this fails. */
#define GRAM_CACHE_HARD_BYTES (512u << 20)

typedef struct gram_grammar gram_grammar;
typedef struct gram_vocab gram_vocab;
typedef struct gram_state gram_state;

/* ---- grammars ---- */

/* Compiles GBNF text (llama.cpp's dialect):
 *   name ::= alternatives       rules; `root` is the start rule
 *   a b    a | b    ( ... )     sequence, alternation, grouping
 *   "lit"                       literal (escapes \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH)
 *   [a-z0-9_] [^"\\] .          character classes over code points, negation, any char
 *   x* x+ x? x{m} x{m,} x{m,n}  repetition (m, n <= 1000000)
 *   <tool_call>                 token literal: the special token with that text
 *   # comment
 * Errors (WK_EINVAL, message names the rule and the offset): syntax,
 * undefined or twice-defined rules, a missing root, left recursion, a rule
 * that can never complete. *out is owned by the caller (gram_grammar_free). */
int gram_compile_gbnf(gram_grammar **out, const char *text, size_t len, wk_error *err);
void gram_grammar_free(gram_grammar *g);

/* ---- vocabulary ---- */

/* Token byte strings and their prefix tree, from a loaded tokenizer (which
 * may be freed afterwards: everything is copied). WK_ENOMEM only. */
int gram_vocab_new(gram_vocab **out, const tok_vocab *v, wk_error *err);
void gram_vocab_free(gram_vocab *gv);
int32_t gram_vocab_n_tokens(const gram_vocab *gv);
/* Length in uint32 words of a token mask: (n_tokens + 31) / 32. */
size_t gram_mask_words(const gram_vocab *gv);

/* ---- matching ---- */

/* A state at the start of the grammar for this vocabulary. g and gv are
 * borrowed and must outlive the state and its clones. gv may be NULL: the
 * state then matches text only (gram_accept_bytes; token literals match
 * their text). WK_ENOMEM, WK_ERANGE. */
int gram_state_new(gram_state **out, const gram_grammar *g, const gram_vocab *gv, wk_error *err);
/* An independent copy of s at the same position (e.g. before speculative
 * tokens, to roll back to). Shares caches with s (same thread). */
int gram_state_clone(gram_state **out, const gram_state *s, wk_error *err);
void gram_state_free(gram_state *s);

/* Token mask for the next step: bit (id % 32) of mask[id / 32] is set iff
 * token id is allowed. mask has gram_mask_words(gv) words. After an
 * end-of-generation token was accepted nothing is allowed; otherwise the
 * mask is empty only where gram_is_done and the vocabulary has no
 * end-of-generation token. WK_ERANGE when a bound above is hit, WK_ENOMEM;
 * after an error other than WK_EINVAL the state is to be freed. */
int gram_mask(gram_state *s, uint32_t *mask, wk_error *err);
/* Same, applied to logits[n_tokens]: disallowed tokens become -INFINITY. */
int gram_mask_logits(gram_state *s, float *logits, wk_error *err);

/* Advances over one token. WK_EINVAL (state unchanged) if the token is not
 * allowed here (exactly when its mask bit is clear); WK_ERANGE, WK_ENOMEM.
 * err may be NULL (a refusal then costs no message). */
int gram_accept(gram_state *s, int32_t token, wk_error *err);
/* Advances over raw bytes (no special tokens), as if they were one token.
 * WK_EINVAL (state unchanged) if the grammar rejects them. */
int gram_accept_bytes(gram_state *s, const char *bytes, size_t len, wk_error *err);

/* A short token sequence from s to where the grammar can end (the fewest
 * bytes, in the vocabulary's longest tokens), into out[0..cap): its length (0 if s
 * can end already), or WK_ERANGE when none is found within a bounded search
 * or it does not fit cap, WK_ENOMEM. s is unchanged. For a loop whose token
 * budget runs out: forcing these tokens keeps the answer complete. */
int gram_shortest_completion(const gram_state *s, int32_t *out, int cap, wk_error *err);

/* Bytes of the caches s shares with its clones (for budgets and logs). */
size_t gram_state_cache_bytes(const gram_state *s);

/* The grammar can end here: end-of-generation tokens are allowed. */
bool gram_can_end(const gram_state *s);
/* Nothing can follow: an end-of-generation token was accepted, or the
 * grammar is complete and admits no further byte or token literal. */
bool gram_is_done(const gram_state *s);

#endif
