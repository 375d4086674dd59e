/* A model file driven directly for the evaluations (no server), through
 * the request pipeline every other front end uses (a pl_engine with one
 * cache slot; every sample is a cold prefill). Prompts are one user message
 * rendered with the model's chat template (thinking off where the template
 * has it), answers are greedy. */
#ifndef WICK_EVAL_EVAL_LOCAL_H
#define WICK_EVAL_EVAL_LOCAL_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "engine/context.h"
#include "util/err.h"

typedef struct ev_local ev_local;

/* Loads path; o gives threads, n_ubatch and the starting policy (n_ctx is
 * the initial sequence capacity; it grows on demand). tmpl_name overrides
 * the GGUF's chat template (NULL: from the file). */
int ev_local_open(ev_local **out, const char *path, const eng_options *o, const char *tmpl_name, wk_error *err);
void ev_local_close(ev_local *l);

/* "qwen3 (enable_thinking=false)" and the like, for reports. */
const char *ev_local_template_desc(const ev_local *l);
int32_t ev_local_n_ctx_train(const ev_local *l);
eng_ctx *ev_local_ctx(ev_local *l);

/* ev_count_fn over the model's vocabulary (plain text). user = the ev_local. */
int ev_local_count(void *user, const char *text, size_t len, int32_t *n_tokens, wk_error *err);

/* Renders one user message and tokenizes it like the server does (template
 * text with special tokens, the message as plain text). *ids malloc'd. */
int ev_local_chat_ids(ev_local *l, const char *user_text, int32_t **ids, int32_t *n, wk_error *err);

/* Plain-text tokenize / detokenize (for truncation). malloc'd results. */
int ev_local_tokenize(ev_local *l, const char *text, int32_t **ids, int32_t *n, wk_error *err);
int ev_local_detokenize(ev_local *l, const int32_t *ids, int32_t n, char **text, wk_error *err);

/* Greedy answer to prompt ids under policy (NULL = dense): a cold prefill,
 * then decode until end of generation or max_tokens. Fills (all optional)
 * the answer ids (malloc'd), the text (malloc'd) and the prefill time.
 * step_logits, when non-NULL, is called with the next-token logits before
 * every answer token is chosen (step 0 = after the prompt); it may return a
 * token id to feed instead of the greedy choice (teacher forcing) or -1. */
typedef int32_t (*ev_step_fn)(void *user, int32_t step, const float *logits, int32_t n_vocab, int32_t greedy);
int ev_local_generate(ev_local *l, const int32_t *ids, int32_t n, int32_t max_tokens, const be_attn_policy *policy,
                      ev_step_fn step_logits, void *step_user, int32_t **out_ids, int32_t *n_out, char **text,
                      double *prefill_ms, wk_error *err);

/* Whether id ends generation. */
bool ev_local_is_eog(const ev_local *l, int32_t id);

#endif
