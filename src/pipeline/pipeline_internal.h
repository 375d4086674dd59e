/* Internals shared by the pipeline's steps (admit.c, reuse.c, prefill.c,
 * generate.c, output.c, run.c) and the engine (engine.c). */
#ifndef WICK_PIPELINE_PIPELINE_INTERNAL_H
#define WICK_PIPELINE_PIPELINE_INTERNAL_H

#include "chat/chat_parse.h"
#include "engine/grammar.h"
#include "engine/sched.h"
#include "engine/spec.h"
#include "pipeline/pipeline.h"

struct pl_engine {
    pl_config cfg;               /* strings point into the buffers below */
    char path[4096];
    char tmpl_name[64];
    char cache_dir[4096];
    model *m;
    tok_vocab *vocab;            /* NULL: the file has no usable tokenizer */
    chat_template tmpl;
    bool has_tmpl;
    eng_ctx *ctx;
    eng_sched *sched;            /* the context's lock, and its step scheduler under --parallel */
    ckpt_cache *cache;
    gram_vocab *gvocab;          /* token byte strings for constrained output, made on first use */
    /* speculative decoding (speculate.c) */
    char draft_path[4096];
    model *draft_m;              /* the draft model, NULL if none */
    eng_drafter *drafter;        /* its context and sequence */
    eng_mtp *mtp;                /* the MTP block's state, made on first use */
    eng_ngram *ngram;            /* the prompt-lookup index, reset per request */
};

/* One request in flight: what the steps hand each other. */
typedef struct pl_request {
    pl_engine *pe;
    const eng_request *req;
    const pl_sink *sink;
    double t0_ms;                /* start of processing (TTFT counts from here) */
    eng_counters c;              /* one source of truth for every counter */
    /* admit */
    int32_t *ids;
    int32_t n;
    ckpt_mark *marks;
    int n_marks;
    bool chat;
    chat_parse_options popt;
    int spec;                    /* enum eng_spec_mode resolved (OFF, NGRAM, DRAFT or MTP) */
    /* reuse */
    ckpt_plan plan;
    bool begun;                  /* the cache handed out plan.seq */
    /* outcome */
    eng_event final;             /* DONE or ERROR */
} pl_request;

/* A seed from the OS's random source (the clock if that fails). */
uint64_t pl_random_seed(void);

/* Sets r->final to an ERROR and returns status. */
int pl_fail(pl_request *r, int status, const char *type, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* The steps, in order; each returns 0 or the HTTP status of a failure
 * (r->final filled). */
int pl_admit(pl_request *r);
int pl_reuse(pl_request *r);
int pl_prefill(pl_request *r);
int pl_generate(pl_request *r);

/* The grammar a request's output must follow (constrain.c); on = false
 * when the request asks for none. */
typedef struct pl_constraint {
    bool on;
    gram_grammar *g;
    gram_state *s;
    float *masked;               /* [n_vocab]: the logits with forbidden tokens at -inf */
    bool closing;                /* the budget forced a close: end as soon as the grammar may */
} pl_constraint;

/* Builds it from the request (tool_choice required / a named function,
 * response_format json_object / json_schema); 0 or an HTTP status with
 * r->final filled (a schema the grammar engine cannot take is a 400). */
int pl_constraint_begin(pl_request *r, pl_constraint *c);
/* logits with the forbidden tokens at -inf (c's buffer), NULL on error. */
const float *pl_constraint_mask(pl_constraint *c, const float *logits, int32_t n_vocab, wk_error *err);
int pl_constraint_accept(pl_constraint *c, int32_t token, wk_error *err);
/* Nothing can follow (the grammar is complete, or ended). */
bool pl_constraint_done(const pl_constraint *c);
/* With `left` tokens of budget (this one included), the token to force so
 * the answer still ends complete (the next token of the shortest closing
 * path, or eog on the last one), or -1 to sample as usual. */
int32_t pl_constraint_force(pl_constraint *c, int32_t left, int32_t eog);
void pl_constraint_free(pl_constraint *c);
/* ---- speculative decoding (speculate.c) ---------------------------------------------- */

/* The draft model named in pe->cfg, loaded and checked against the model's vocabulary
 * (pl_engine_open). */
int pl_spec_open(pl_engine *pe, wk_error *err);
void pl_spec_close(pl_engine *pe);

/* admit: the request's source (its own, else the engine's default; auto resolved) into
 * r->spec. 400 when it names a source the engine does not have. */
int pl_spec_admit(pl_request *r);

/* prefill: with MTP drafting, the block catches up on the prompt's hidden states as
 * the chunks go (a hook in po). */
void pl_spec_prefill_opts(pl_request *r, eng_prefill_opts *po);

/* One request's speculation in the decode loop (generate.c). The loop picks every token
 * from pl_spec_logits, through pl_spec_choose, and hands it to pl_spec_feed: a token
 * that equals the next draft moves to the next verified row at no cost; any other
 * token settles the batch (the rest thrown away, the sequence cut back) and starts the
 * next one: [pending tokens, new drafts] in one forward pass. */
typedef struct pl_spec pl_spec;

/* smp: the request's sampler (borrowed, for the acceptance rule's draws). NULL *out
 * when the request does not speculate. Returns 0 or an HTTP status (r->final set). */
int pl_spec_new(pl_spec **out, pl_request *r, eng_sampler *smp, const eng_sampler_params *sp);
void pl_spec_free(pl_spec *sp);

/* The logits the next token is chosen from (the context's after the prefill, then a
 * verified row). */
const float *pl_spec_logits(const pl_spec *sp);

/* The next token from row (pl_spec_logits, or a masked copy of it) with the request's
 * sampler: plain sampling, or the speculative rule when the row has a draft at
 * temperature > 0. -1 as eng_sampler_sample. */
int32_t pl_spec_choose(pl_spec *sp, const float *row);

/* The token chosen and emitted (remaining: how many more the loop may emit after it).
 * Errors from the forward passes (a decode failure: 500). */
int pl_spec_feed(pl_spec *sp, int32_t tok, int32_t remaining, wk_error *err);

/* End of generation (stop, length, or a cancel between tokens): the sequence is made to
 * hold exactly the prompt and the tokens fed, as plain decoding leaves it, and every
 * such token is reported to the cache; the counters go into the request's. */
int pl_spec_finish(pl_spec *sp, wk_error *err);

/* Cache kind of a chat boundary (chat_boundary_kind + CHAT_BFLAG_*). */
int pl_ckpt_kind_of_boundary(int chat_kind, unsigned flags);

/* Token positions of the prompt's chat boundaries: seg_tok[i] = tokens
 * before segment i (a BOS put in front counts). Boundaries inside a segment
 * map to that segment's start (earlier is always safe). *out malloc'd. */
int pl_map_boundaries(const chat_prompt *p, const size_t *seg_tok, ckpt_mark **out, int *n_out);

/* Generated text → DELTA events through the sink: content for
 * completions; for chat, the incremental parser splits reasoning, content
 * and tool calls. */
typedef struct pl_output {
    const pl_sink *sink;
    chat_parser *parser;         /* NULL: completion (everything is content) */
    chat_delta delta;
    int n_calls;                 /* tool calls emitted so far */
    bool any_reasoning_this_token;
    bool any_content_this_token;
} pl_output;

void pl_output_text(pl_output *o, const char *t, size_t n);
void pl_output_finish(pl_output *o);

/* Pushes an event to the sink (or frees its text when there is no event callback). */
void pl_emit(const pl_sink *sink, eng_event *ev);

#endif
