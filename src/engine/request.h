/* Plain data of one request: what a front end (server, CLI, evaluation)
 * asks the pipeline to do, the counters it reports, and the events that
 * carry the answer back. Kept free of the model and the engine thread so
 * the server's parsing code links without either. */
#ifndef WICK_ENGINE_REQUEST_H
#define WICK_ENGINE_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "util/err.h"

enum eng_request_kind { ENG_REQ_CHAT = 0, ENG_REQ_COMPLETION = 1 };

enum eng_tool_choice { ENG_TOOLS_AUTO = 0, ENG_TOOLS_NONE, ENG_TOOLS_REQUIRED, ENG_TOOLS_FUNCTION };

enum eng_response_format { ENG_FORMAT_TEXT = 0, ENG_FORMAT_JSON_OBJECT, ENG_FORMAT_JSON_SCHEMA };

struct chat_conv;

/* Sampling knobs as the API gives them; the engine maps them onto sampler.h. */
typedef struct eng_sampling {
    float temperature;       /* 0 = greedy */
    float top_p;             /* 1 = off */
    int top_k;               /* 0 = off */
    float min_p;             /* 0 = off */
    float presence_penalty;  /* 0 = off */
    float frequency_penalty; /* 0 = off */
    float repeat_penalty;    /* 1 = off */
    uint64_t seed;
    bool has_seed;           /* false: the engine picks a seed */
} eng_sampling;

#define ENG_MAX_STOP 16

/* Where speculative drafts come from (--spec, {"wick": {"spec": ...}}). */
enum eng_spec_mode {
    ENG_SPEC_DEFAULT = 0, /* the engine's (--spec of serve / run; off unless set) */
    ENG_SPEC_OFF,
    ENG_SPEC_NGRAM,       /* prompt lookup: n-grams of the prompt and the output so far */
    ENG_SPEC_DRAFT,       /* a draft model (--draft FILE) */
    ENG_SPEC_MTP,         /* the model's MTP block */
    ENG_SPEC_AUTO,        /* MTP if the model has it, else the draft model if loaded, else ngram */
};
#define ENG_SPEC_MODE_NAMES "off, ngram, draft, mtp, auto"

/* "default", "off", "ngram", "draft", "mtp", "auto". */
const char *eng_spec_mode_name(int mode);
/* One of ENG_SPEC_MODE_NAMES into *mode; WK_EINVAL naming the value otherwise. */
int eng_spec_mode_parse(const char *s, int *mode, wk_error *err);

typedef struct eng_request {
    int kind;                  /* enum eng_request_kind */
    /* chat: the validated conversation (chat/chat_conv.h, owned), built by
     * the server from any of its APIs; render it with chat_render_conv. */
    struct chat_conv *chat;
    const json_t *tools;       /* borrowed from chat->tools: the tools offered (NULL if none) */
    /* Constrained output, to be enforced token by token by the generate
     * loop (grammar engine): tool_choice REQUIRED = the answer is a call of
     * one of `tools`, FUNCTION = a call of tool_choice_name (always one of
     * `tools`); response_format JSON_OBJECT = a JSON object, JSON_SCHEMA = a
     * JSON value valid against json_schema. The server has checked them. */
    int tool_choice;           /* enum eng_tool_choice */
    char *tool_choice_name;    /* forced function name (ENG_TOOLS_FUNCTION), owned */
    bool parallel_tool_calls;  /* false: at most one call per answer */
    int response_format;       /* enum eng_response_format */
    json_t *json_schema;       /* JSON_SCHEMA: the schema object (owned reference) */
    char *json_schema_name;    /* its name as the client gave it (owned), or NULL */
    bool json_schema_strict;
    /* completion: the prompt as text (owned) or as token ids (owned array). */
    char *prompt;
    int32_t *prompt_ids;
    int n_prompt_ids;
    int max_tokens;            /* -1: until end of generation or context */
    char *stop[ENG_MAX_STOP];  /* owned strings */
    int n_stop;
    eng_sampling sampling;
    int32_t *bias_ids;         /* OpenAI logit_bias: token ids (owned) ... */
    float *bias_values;        /* ... and additive biases (owned); -100 bans */
    int n_bias;
    bool fresh;                /* {"wick": {"fresh": true}}: do not reuse cached state */
    bool has_policy;           /* {"wick": {"attn_policy": ..., "global": ...}} given */
    be_attn_policy policy;     /* this request's attention policy (has_policy) */
    bool ignore_eos;           /* keep generating past end-of-generation tokens (benchmarks) */
    bool no_bos;               /* completion text: do not put the vocabulary's BOS in front */
    bool emit_special;         /* output control tokens as text, end-of-generation included (wick run --special) */
    bool all_logits;           /* keep the logits of every prompt token (wick run --dump-logits) */
    int spec;                  /* enum eng_spec_mode ({"wick": {"spec": ...}}) */
    bool stream;               /* informational (monitor) */
    char id[48];               /* "chatcmpl-..." / "cmpl-...", set by the server */
} eng_request;

/* Releases everything a request owns and zeroes it. Safe on a zeroed struct. */
void eng_request_clear(eng_request *req);

/* The sampling defaults every front end starts from: llama-server's
 * (temperature 0.8, top_p 0.95, top_k 40, min_p 0.05, penalties off; no
 * seed). eng_sampler_params_default takes its numbers from here. */
void eng_sampling_default(eng_sampling *s);

/* Per-request counters: one source of truth for the API (usage + timings),
 * the monitor and /metrics. Speeds come from work actually done: prefill
 * speed counts recomputed tokens only, never cached ones. */
typedef struct eng_counters {
    int prompt_tokens;       /* the whole prompt, cached part included */
    int cached_tokens;       /* reused from the previous sequence */
    int recomputed_tokens;   /* everything prefilled for this request, replay included */
    int replayed_tokens;     /* part of recomputed that was cached text re-run after a
                                checkpoint restore */
    int ckpt_pos;            /* position of the state resumed from, -1: cold start */
    char ckpt_kind[24];      /* its kind ("system_end", "kv_prefix", "live", ...), "" when cold */
    bool ckpt_from_disk;     /* loaded from the cache archive */
    double prefill_ms;
    double prefill_tok_per_s;
    double ttft_ms;          /* from start of processing to the first generated token */
    double queue_ms;         /* time spent waiting in the queue */
    int completion_tokens;   /* == decode_n */
    int reasoning_tokens;
    double decode_ms;
    double decode_tok_per_s; /* tokens after the first / time after the first */
    /* speculative decoding (zero when off) */
    char spec[8];            /* draft source: "ngram", "draft", "mtp"; "" when off */
    int draft_proposed;      /* draft tokens verified */
    int draft_accepted;      /* of them, accepted */
    int spec_steps;          /* verification batches with at least one draft */
} eng_counters;

enum eng_event_type {
    ENG_EV_ACCEPTED = 1, /* prompt rendered + tokenized and fits; counters.prompt_tokens set */
    ENG_EV_DELTA,        /* text piece (see eng_delta_kind) */
    ENG_EV_DONE,         /* final: counters + finish_reason; no more events */
    ENG_EV_ERROR,        /* final: http_status + message; no more events */
};

enum eng_delta_kind {
    ENG_DELTA_CONTENT = 0,
    ENG_DELTA_REASONING,
    ENG_DELTA_TOOL_CALL, /* a new call: tool_index, tool_id, tool_name (text is empty) */
    ENG_DELTA_TOOL_ARGS, /* argument text of call tool_index */
};

typedef struct eng_event {
    int type;                 /* enum eng_event_type */
    int delta_kind;           /* enum eng_delta_kind (ENG_EV_DELTA) */
    char *text;               /* owned by the event; NUL-terminated UTF-8 */
    int tool_index;
    char tool_id[40];
    char tool_name[128];
    eng_counters counters;    /* ACCEPTED (prompt part), DONE, and ERROR (what was done before it) */
    char finish_reason[16];   /* DONE: "stop" | "length" | "tool_calls" */
    int stopped_by;           /* DONE: 1 + index in eng_request.stop of the stop string that ended it, 0: none */
    int http_status;          /* ERROR: 400, 500, 503, 499 (cancelled) */
    char error_type[40];      /* ERROR: OpenAI error type */
    char error_code[40];      /* ERROR: OpenAI error code ("context_length_exceeded"), "" if none */
    char message[WK_ERROR_MSG_CAP];
} eng_event;

/* Frees ev->text and zeroes the event. */
void eng_event_clear(eng_event *ev);

/* Fills the usage + timings pair the API returns from counters. New refs. */
json_t *eng_counters_usage_json(const eng_counters *c);
json_t *eng_counters_timings_json(const eng_counters *c);

#endif
