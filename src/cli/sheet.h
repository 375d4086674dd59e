/* The evaluation sheet (`wick sheet`): one row per pack × runtime × machine
 * × context, as JSON objects (the JSON-lines output is the data model; the
 * Markdown and HTML views and --compare read the same objects):
 *   {"pack": {"name", "file", "sha256", "arch", "n_params", "weight_bytes", "bpw",
 *             "classes": {"attention": {"bytes", "bpw"}, ...}, "types": {"Q4_K": bytes, ...},
 *             "aux_bytes", "aux": [{"file", "kind", "bytes"}], "n_ctx_train"},
 *    "runtime": {"name": "wick", "version", "build", "kernels", "device", "kv_type", "threads"},
 *    "machine": {"cpu", "cores", "logical_cpus", "ram_bytes", "gpu", "gpu_bytes"},
 *    "context": D,                     tokens already in the context
 *    "load_ms",                        model load + context creation (weights prepared)
 *    "prefill": {"tokens", "tok_s", "tok_s_cold"},   cold: the first prefill after loading
 *    "decode": {"tokens", "tok_s"},
 *    "quality": {"perplexity": {"ppl", "tokens", "window", "text"} or {"error"},
 *                "needle": {"found", "of", "doc_tokens"}, "vt": {"score", "doc_tokens"},
 *                "note": why a sample is missing}} */
#ifndef WICK_CLI_SHEET_H
#define WICK_CLI_SHEET_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "util/err.h"

#define SHEET_MAX_CTX 16
#define SHEET_MAX_AUX 8

typedef struct sheet_pack_spec {
    const char *path;
    const char *aux[SHEET_MAX_AUX];
    int n_aux;
} sheet_pack_spec;

typedef struct sheet_options {
    int32_t contexts[SHEET_MAX_CTX];
    int n_contexts;
    int32_t prefill_tokens, decode_tokens, reps;
    int threads;
    int32_t device, gpu, kv_type;
    bool quality;             /* perplexity + needle + vt */
    const char *ppl_text;     /* held-out text file, NULL: wick's generated filler */
    int32_t ppl_tokens;       /* tokens of it scored (windows of 512) */
    int32_t task_tokens;      /* needle / vt document length */
    bool quiet;
} sheet_options;

void sheet_options_default(sheet_options *o);

/* Measures one pack: appends one row per context to rows. Errors name the
 * pack; a quality sample that cannot run (no chat template for needle/vt)
 * is recorded with its reason, not an error. */
int sheet_measure(const sheet_pack_spec *pack, const sheet_options *o, json_t *rows, wk_error *err);

/* Reads JSON lines (or one JSON array) of rows; appends to rows. */
int sheet_read_rows(const char *path, json_t *rows, wk_error *err);

/* Views. */
void sheet_write_jsonl(FILE *out, const json_t *rows);
void sheet_write_md(FILE *out, const json_t *rows);
/* Side by side: the rows of pack A and pack B (the first and second packs
 * met in rows) matched by context, with B − A and B / A. */
void sheet_write_compare_md(FILE *out, const json_t *rows);
/* The whole page: tables and inline SVG charts (speed vs context per pack,
 * quality vs bits per weight), self-contained. */
int sheet_write_html(const char *path, const json_t *rows, bool compare, wk_error *err);

#endif
