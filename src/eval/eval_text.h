/* Long-context evaluation material: generated filler, needle documents
 * (random codes at token depths), RULER-style variable tracking, LongBench
 * v2 items, and the scoring rules. Pure text work; the only model contact is
 * a token-counting callback (a local tokenizer or a server's /v1/tokenize),
 * so depths are measured in tokens. Everything generated is a function of
 * the seed. */
#ifndef WICK_EVAL_EVAL_TEXT_H
#define WICK_EVAL_EVAL_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* Tokens of text[0..len) as plain text (no special-token parsing). */
typedef int (*ev_count_fn)(void *user, const char *text, size_t len, int32_t *n_tokens, wk_error *err);

/* Deterministic PRNG (splitmix64). */
uint64_t ev_rand(uint64_t *state);

/* ---- needle ---------------------------------------------------------------------- */

/* The depths used when none are given: 1.5 %, 25 %, 50 %, 75 %, 98.5 %. */
extern const double ev_needle_default_depths[5];

typedef struct ev_needle_spec {
    int32_t doc_tokens;      /* target document length in tokens (needles included) */
    const double *depths;    /* fractions in [0, 1]; code i goes to depths[i % n_depths] */
    int n_depths;
    int n_codes;             /* 1..256 */
    uint64_t seed;
    const char *filler;      /* the user's filler text (repeated when short), NULL: generated */
    size_t filler_len;
} ev_needle_spec;

typedef struct ev_needle_code {
    char code[16];           /* "KQV-4821" */
    double depth_requested;  /* fraction */
    size_t byte_offset;      /* start of the needle sentence in the document */
    int32_t token_offset;    /* tokens of the document before the needle sentence (measured) */
    double depth_tokens;     /* token_offset / doc_tokens */
} ev_needle_code;

typedef struct ev_needle_doc {
    char *text;              /* document with the needles, NUL-terminated, owned */
    size_t len;
    int32_t doc_tokens;      /* measured on the finished document */
    ev_needle_code *codes;   /* [n_codes], owned, in document order of placement request */
    int n_codes;
} ev_needle_doc;

/* Builds the document: filler sentences up to the target, needle sentences
 * ("One of the secret codes is KQV-4821.") inserted at the sentence
 * boundary nearest each requested token depth, then every needle's token
 * offset measured on the finished text with count. WK_EINVAL for a bad spec. */
int ev_needle_build(const ev_needle_spec *spec, ev_count_fn count, void *user, ev_needle_doc *out, wk_error *err);
void ev_needle_doc_free(ev_needle_doc *d);

/* The user message: document, then the question asking for every code.
 * malloc'd; NULL on allocation failure. */
char *ev_needle_prompt(const ev_needle_doc *d);

/* Scoring rule: code i counts as found when its exact text occurs in the
 * answer. Fills found[n_codes] (may be NULL) and returns the number found. */
int ev_needle_score(const ev_needle_doc *d, const char *answer, bool *found);

/* ---- variable tracking (RULER vt) ------------------------------------------------------- */

typedef struct ev_vt_spec {
    int32_t doc_tokens;      /* target length in tokens */
    int n_chains;            /* chains of assignments; chain 0 is asked about (1..8) */
    int n_hops;              /* assignments after the first value statement (1..16) */
    uint64_t seed;
    const char *filler;      /* as for needle */
    size_t filler_len;
} ev_vt_spec;

typedef struct ev_vt_doc {
    char *text;              /* owned */
    size_t len;
    int32_t doc_tokens;
    char value[8];           /* the value chain 0 starts from ("40817") */
    char (*expected)[8];     /* [n_expected] names holding that value: chain 0, in order */
    int n_expected;
    int32_t *token_offsets;  /* [n_expected] measured offsets of chain 0's statements */
} ev_vt_doc;

/* Builds the document: n_chains chains "VAR A = 40817." → "VAR B = VAR A." …
 * (names of 5 capital letters, distinct values), statements spread evenly
 * through the filler in chain order, chains interleaved at random. */
int ev_vt_build(const ev_vt_spec *spec, ev_count_fn count, void *user, ev_vt_doc *out, wk_error *err);
void ev_vt_doc_free(ev_vt_doc *d);
/* RULER's vt wording: memorize the chains, then "Find all variables that are
 * assigned the value V in the text above." malloc'd. */
char *ev_vt_prompt(const ev_vt_doc *d);
/* RULER's string_match_all: fraction of expected names occurring in the
 * answer, case-insensitively. */
double ev_vt_score(const ev_vt_doc *d, const char *answer);

/* ---- LongBench v2 ------------------------------------------------------------------- */

typedef struct ev_lb_item {
    char *id, *domain, *difficulty, *length; /* owned; "" when absent */
    char *question, *choice[4], *context;
    char answer;                             /* 'A'..'D' */
} ev_lb_item;

/* Loads a LongBench v2 JSON file (an array of objects with _id, question,
 * choice_A..choice_D, answer, context; domain, difficulty, length optional).
 * Every item is checked; the error names the index and field. */
int ev_lb_load(const char *path, ev_lb_item **items, size_t *n, wk_error *err);
void ev_lb_free(ev_lb_item *items, size_t n);

/* The published zero-shot template (LongBench v2 prompts/0shot.txt) with the
 * given (possibly truncated) context; brief appends an instruction to give
 * only that sentence. malloc'd. */
char *ev_lb_prompt(const ev_lb_item *it, const char *context, bool brief);

/* LongBench v2's extract_answer: '*' removed, then "The correct answer is
 * (X)" or "The correct answer is X" with X in A..D. Returns the letter or 0
 * (unanswered). */
char ev_lb_extract(const char *response);

#endif
