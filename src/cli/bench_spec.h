/* `wick bench --spec`: decode through the request pipeline with and without
 * speculative decoding, on the same prompt, interleaved repetitions. */
#ifndef WICK_CLI_BENCH_SPEC_H
#define WICK_CLI_BENCH_SPEC_H

#include <stdint.h>

#include "engine/context.h"

typedef struct bench_spec_opts {
    const char *model_path;
    const char *draft_path;   /* --draft, or NULL */
    const char *prompt_file;  /* text prompt, or NULL: `depth` pseudo-random tokens */
    int spec;                 /* enum eng_spec_mode */
    int32_t n_predict, depth;
    int reps, threads;
    int32_t device, gpu, kv_type;
    eng_split_opts split;
    int json, quiet;
} bench_spec_opts;

/* Prints one row (or JSON object) per mode; returns the process exit status. */
int bench_spec_run(const bench_spec_opts *o);

#endif
