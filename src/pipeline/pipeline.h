/* The request pipeline: one request end to end, the same code for
 * `wick serve`, `wick run` and the in-process evaluations.
 *
 *   admit    render the chat (or take the completion prompt), tokenize,
 *            check the fit (empty, context, vocabulary), report ACCEPTED;
 *   reuse    ask the prefix cache for the best state (longest matching
 *            prefix, else the best confirmed checkpoint);
 *   prefill  the rest of the prompt (cancellable per chunk, checkpoints at
 *            chat boundaries);
 *   generate the one decode loop: sampler, stop strings, incremental
 *            detokenizer, reasoning / tool-call parser, max_tokens;
 *   finish   final counters, the response handed to the caller, THEN the
 *            cache confirms (or, after a failure, falls back to its last
 *            confirmed checkpoint). Disk archiving happens later, when the
 *            engine is idle (ckpt_cache_archive_step).
 *
 * A pl_engine is one loaded model with its context and prefix cache. With
 * cfg.eng.n_seq > 1 up to that many threads may run pl_run on it at once: their
 * forward passes are batched into shared steps (engine/sched.h) while each
 * request keeps its own sampler, grammar, stop strings and parser; speculative
 * decoding is off then. Otherwise one thread at a time drives it. */
#ifndef WICK_PIPELINE_PIPELINE_H
#define WICK_PIPELINE_PIPELINE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cache/cache.h"
#include "chat/chat.h"
#include "engine/context.h"
#include "engine/request.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/err.h"

typedef struct pl_config {
    const char *model_path;
    const char *chat_template; /* template name override, or NULL/"" (from the GGUF) */
    bool need_template;        /* no usable template is an error (else a warning: chat requests get a 400) */
    bool need_tokenizer;       /* no tokenizer in the file is an error (else only token-id prompts work) */
    eng_options eng;           /* device, threads, ubatch, policy, KV type; eng.n_ctx <= 0: the trained
                                  context, reduced to what fits mem_budget_bytes (logged with the arithmetic) */
    uint64_t mem_budget_bytes; /* memory for that default (0: free RAM / VRAM minus a margin) */
    ckpt_cache_config cache;   /* slots, RAM budget, archive folder (NULL dir: none) */
    const char *draft_path;    /* draft model for speculative decoding (--draft), or NULL */
    int spec;                  /* enum eng_spec_mode of requests that do not choose (default: off;
                                  always off when eng.n_seq > 1) */
} pl_config;

/* Defaults: template from the file and required, tokenizer required,
 * eng_options_default, n_ctx 0, one cache slot without archive. */
void pl_config_default(pl_config *cfg);

typedef struct pl_engine pl_engine;

/* Loads the model, its tokenizer and chat template, makes the context and
 * the prefix cache, and the draft model when one is named (its vocabulary must be the
 * model's: WK_EINVAL naming the difference). Errors: as model_load /
 * tok_load_from_gguf / eng_ctx_new / ckpt_cache_new, with the file named. */
int pl_engine_open(pl_engine **out, const pl_config *cfg, wk_error *err);
void pl_engine_close(pl_engine *pe); /* finishes pending archive work first */

const model *pl_engine_model(const pl_engine *pe);
const tok_vocab *pl_engine_vocab(const pl_engine *pe); /* NULL: the file has no tokenizer */
const chat_template *pl_engine_template(const pl_engine *pe); /* NULL: none usable */
eng_ctx *pl_engine_ctx(pl_engine *pe);
ckpt_cache *pl_engine_cache(pl_engine *pe);
/* The engine's lock: pl_run takes it itself; other users of the context or the cache
 * take it while requests may be in progress on other threads. */
void pl_engine_lock(pl_engine *pe);
void pl_engine_unlock(pl_engine *pe);
int32_t pl_engine_n_ctx(const pl_engine *pe);
bool pl_engine_has_draft(const pl_engine *pe);  /* a draft model is loaded */
bool pl_engine_has_mtp(const pl_engine *pe);    /* the model has an MTP block */
/* Memory speculation holds besides the model's own state: the copy of one sequence's
 * recurrent state taken before each batch, the MTP block's KV, the draft model's
 * sequence (its weights not counted). */
size_t pl_engine_spec_bytes(const pl_engine *pe);

/* Grows the context capacity to at least n_ctx positions (drops the cached
 * sequences when it does). */
void pl_engine_reserve(pl_engine *pe, int32_t n_ctx);

/* Renders a validated conversation with the engine's template and
 * tokenizes it exactly as the pipeline's admit step does (what a request's
 * prompt costs: /v1/messages/count_tokens, the evaluations). *ids
 * malloc'd. Reads only immutable state: safe from any thread while the
 * engine is loaded. WK_EUNSUPPORTED without a chat template, WK_EINVAL
 * with the reason for a conversation the template refuses. */
struct chat_conv;
int pl_chat_tokens(const pl_engine *pe, const struct chat_conv *conv, int32_t **ids, int32_t *n, wk_error *err);

/* Where a request's output goes. Every callback is optional and runs on
 * the calling thread. */
typedef struct pl_sink {
    void *user;
    /* ACCEPTED (counters.prompt_tokens set) and DELTA events; the callee
     * takes ev->text (free it, or pass the event on). */
    void (*event)(void *user, eng_event *ev);
    /* prefill progress: done of total recomputed tokens */
    void (*progress)(void *user, int32_t done, int32_t total);
    /* entering prefill / decode, and the counters so far after each token */
    void (*live)(void *user, int phase, const eng_counters *c);
    /* right after the prefill (the context's logits, eng_logits_all with req->all_logits) */
    void (*prefilled)(void *user, eng_ctx *ctx);
    /* every generated token id, end-of-generation tokens included */
    void (*token)(void *user, int32_t id);
    /* before each token is chosen: the next-token logits; return a token id
     * to use instead of the sampler's choice (teacher forcing), or -1 */
    int32_t (*step_logits)(void *user, int32_t step, const float *logits, int32_t n_vocab, int32_t chosen);
    /* the final outcome, before the cache confirms anything: a server sends
     * the response here */
    void (*finish)(void *user, const eng_event *final);
    const atomic_bool *cancel; /* checked between prefill chunks and decode steps */
} pl_sink;

enum pl_phase { PL_PHASE_PREFILL = 1, PL_PHASE_DECODE = 2 };

/* Runs one request through the five steps. *final (optional) receives the
 * final event (DONE with counters and finish_reason, or ERROR with
 * http_status, error_type, message and the counters so far; its text is
 * NULL). Returns 0 when the request completed, else the HTTP status of the
 * failure (400 bad input, 499 cancelled, 500 engine error). */
int pl_run(pl_engine *pe, const eng_request *req, const pl_sink *sink, eng_event *final);

#endif
