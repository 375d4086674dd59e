/* Readiness: everything `wick check` reports and `wick serve` verifies
 * before it starts. One finding per line, each ok / warn / FAIL; ready only
 * when nothing failed:
 *   files      model (and draft, aux tables, manifest entries) present
 *   model      the GGUF opens and binds (architecture, tensors)
 *   sha256     every manifest entry matches, and every file of the pack is listed
 *   tokenizer  the vocabulary loads
 *   template   a chat template is recognised (an unknown --chat-template
 *              fails) and its markers are tokens of the vocabulary (warn:
 *              no template, or markers tokenized as plain text)
 *   draft      same vocabulary as the model (token texts, BOS/EOS)
 *   memory     the memory plan at the context and the largest context that fits
 *   context    --ctx above the trained context (warn)
 *   port       free, or who holds it (never touched)
 *   cpu        kernel level and features
 *   placement  with --device cuda: per GPU the layers it runs (a split: --device
 *              cuda:N,M,...), its weights + KV + state + checkpoints + scratch,
 *              and whether that fits its --gpu-mem and its free memory
 *   cuda       the GPU(s) and their memory when --device cuda
 * Hashing shows a progress bar on stderr. */
#ifndef WICK_CLI_READINESS_H
#define WICK_CLI_READINESS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/memory_plan.h"
#include "engine/placement.h"

#define CLI_READY_MAX_AUX 16

typedef struct cli_ready_input {
    const char *model_path;
    const char *draft_path;       /* NULL: none */
    const char *aux_paths[CLI_READY_MAX_AUX];
    int n_aux;
    const char *manifest_path;    /* NULL: no SHA-256 check */
    const char *config_path;      /* must be listed in the manifest too, when both are given */
    const char *chat_template;    /* override name or NULL */
    const char *host;
    int port;                     /* checked when > 0 */
    int32_t n_ctx;                /* 0: the trained context reduced to fit */
    int32_t kv_type, device, gpu;
    eng_split_opts split;         /* the GPUs of a layer split and --gpu-mem */
    int32_t n_parallel;           /* sequences in progress at once (--parallel; <= 0: 1) */
    int32_t n_ubatch;             /* prompt chunk (--ubatch; <= 0: 512) */
    uint64_t mem_budget;          /* 0: free memory minus the margin */
    uint64_t cache_bytes;         /* prefix cache budget counted in the plan */
    bool quiet;                   /* no progress bars */
} cli_ready_input;

enum cli_level { CLI_OK = 0, CLI_WARN = 1, CLI_FAIL = 2 };

typedef struct cli_finding {
    char name[16];
    int level; /* enum cli_level */
    char msg[768];
} cli_finding;

#define CLI_READY_MAX_FINDINGS 32

typedef struct cli_ready_report {
    bool ready;
    cli_finding f[CLI_READY_MAX_FINDINGS];
    int n;
    bool have_plan;
    eng_mem_plan plan;        /* at the context that would be served */
    int32_t largest_ctx;      /* the largest context that fits the budget (0: none) */
    int32_t n_ctx_train;
    uint64_t budget, free_bytes;
    bool budget_given;
    int32_t kv_type;
    bool have_placement;
    eng_placement placement;  /* at the plan's context (CUDA) */
    bool placement_fits[ENG_MAX_SPLIT];
    uint64_t placement_free[ENG_MAX_SPLIT]; /* the GPU's free memory (0: not read) */
} cli_ready_report;

/* ---- the options `wick serve` (and so `wick check`) takes for them -------------- */

typedef struct cli_ready_opts {
    bool check_only;    /* --check: run the checks, print them, exit 0 (ready) or 1 */
    bool json;          /* --json: the report as JSON */
    bool print_config;  /* --print-config */
    uint64_t mem_bytes; /* --mem SIZE (0: free memory minus the margin) */
    const char *manifest, *draft;
    const char *aux[CLI_READY_MAX_AUX];
    int n_aux;
} cli_ready_opts;

enum {
    CLI_OPT_CONFIG = 0x4200,
    CLI_OPT_PRINT_CONFIG,
    CLI_OPT_CHECK,
    CLI_OPT_JSON,
    CLI_OPT_MEM,
    CLI_OPT_MANIFEST,
    CLI_OPT_DRAFT,
    CLI_OPT_AUX,
};

#define CLI_READY_LONG_OPTIONS                                                                              \
    {"config", required_argument, 0, CLI_OPT_CONFIG}, {"print-config", no_argument, 0, CLI_OPT_PRINT_CONFIG}, \
        {"check", no_argument, 0, CLI_OPT_CHECK}, {"json", no_argument, 0, CLI_OPT_JSON},                   \
        {"mem", required_argument, 0, CLI_OPT_MEM}, {"manifest", required_argument, 0, CLI_OPT_MANIFEST},   \
        {"draft", required_argument, 0, CLI_OPT_DRAFT}, {"aux", required_argument, 0, CLI_OPT_AUX}

#define CLI_READY_HELP                                                                                     \
    "  --config FILE        options from a JSON file: keys are the long option names (\"ctx\": 32768,\n" \
    "                       \"kv-type\": \"q8_0\", \"attn-policy\": \"approx\", \"cache-slots\": 2);\n" \
    "                       the command line overrides it\n"                                              \
    "  --print-config       print the effective options (config + command line) as JSON and exit\n"       \
    "  --mem SIZE           memory budget for the default context (default: free RAM, or free VRAM\n"     \
    "                       with --device cuda, minus max(10%%, 512M))\n"                                 \
    "  --manifest FILE      SHA256SUMS pinning the model and the pack's files: refuse on a mismatch\n"    \
    "  --draft FILE         draft model of the pack: checked to share the model's vocabulary\n"          \
    "                       (wick serve decodes with it under --spec draft or auto)\n"                   \
    "  --aux TABLE          auxiliary GGUF of the pack (n-gram/embedding table): mapped in place,\n"     \
    "                       counted in the memory plan (repeatable; nothing reads it yet)\n"             \
    "  --check              run the readiness checks only: exit 0 when ready, 1 when not\n"              \
    "  --json               with --check: the report as JSON\n"

/* Handles one CLI_READY_LONG_OPTIONS code: 1 handled, 0 not one of them, -1 a
 * bad value (printed with cmd). */
int cli_ready_option(int opt, const char *arg, cli_ready_opts *o, const char *cmd);

/* What `wick serve` does before it starts: runs the checks for these
 * settings and prints them (everything with --check or when something is
 * not ok, else one line). Returns true when serve must stop, with *exit_code
 * (--check: 0 ready / 1 not; otherwise 1 when not ready, with the first
 * failure named). */
bool cli_ready_serve(const cli_ready_opts *o, const char *config_path, const char *model_path, const char *host,
                     int port, const eng_options *eng, uint64_t cache_bytes, const char *chat_template,
                     int *exit_code);

/* Runs every check. Never fails as a function: what goes wrong is a finding. */
void cli_ready_run(const cli_ready_input *in, cli_ready_report *r);

/* "ready: true" then one line per finding. */
void cli_ready_print(FILE *out, const cli_ready_report *r);

/* {"ready", "findings": [{"name", "status", "message"}], "memory": {…}}. New reference. */
json_t *cli_ready_json(const cli_ready_report *r);

/* The first failed finding, or NULL when ready. */
const cli_finding *cli_ready_first_failure(const cli_ready_report *r);

#endif
