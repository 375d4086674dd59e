/* Memory plan: what serving a model takes, counted from its tensor list and
 * shapes before anything is allocated, and the largest context that fits a
 * budget.
 *
 *   weights  tensor bytes of the file (mmap'd on the CPU, uploaded on CUDA)
 *   aux      auxiliary GGUFs read in place (counted apart, included in total)
 *   kv       per sequence: n_ctx × K and V rows of every attention layer
 *            (eng_kv_bytes_per_token: F16, or Q8_0 blocks of 34 bytes per 32)
 *   ids      per sequence: the token ids of the context (4 bytes a position)
 *   state    per sequence: conv + SSM state of every recurrent layer (F32)
 *   ckpt     the prefix cache budget (idle conversations' KV + checkpoints)
 *   scratch  activation buffers of one step: an n_ubatch chunk plus a token of each
 *            other sequence (model_scratch_bytes) + the host logits row
 * All sums are overflow-checked: a file whose shapes overflow 64 bits is an
 * error, never a wrapped number. */
#ifndef WICK_ENGINE_MEMORY_PLAN_H
#define WICK_ENGINE_MEMORY_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/context.h"
#include "model/model.h"
#include "util/err.h"

typedef struct eng_mem_options {
    int32_t device;       /* enum eng_device (budgets come from its memory) */
    int32_t gpu;          /* CUDA ordinal */
    int32_t kv_type;      /* enum be_kv_type */
    int32_t n_ctx;        /* positions per sequence */
    int32_t n_ubatch;     /* prefill chunk (<= 0: 512, eng_options_default's) */
    int32_t n_parallel;   /* sequences (<= 0: 1) */
    uint64_t ckpt_bytes;  /* prefix cache budget (0: no cache) */
    uint64_t aux_bytes;   /* auxiliary tables mapped beside the model */
    eng_split_opts split; /* CUDA: the GPUs of a layer split (engine/placement.h) and --gpu-mem */
} eng_mem_options;

/* Fills o with the CPU, F16 KV, n_ctx 4096, n_ubatch 512, one sequence, no cache. */
void eng_mem_options_default(eng_mem_options *o);
/* The defaults with a context's device, GPUs, KV type, context and chunk (e's). */
void eng_mem_options_of(eng_mem_options *o, const eng_options *e);

typedef struct eng_mem_plan {
    int32_t n_ctx;
    int32_t n_seq;                /* sequences counted (kv, ids, state) */
    uint64_t weight_bytes;
    uint64_t aux_bytes;
    uint64_t kv_bytes_per_token;  /* one sequence */
    uint64_t kv_bytes;            /* all sequences at n_ctx */
    uint64_t ids_bytes;
    uint64_t state_bytes;         /* all sequences */
    uint64_t ckpt_bytes;
    uint64_t scratch_bytes;
    uint64_t total_bytes;
} eng_mem_plan;

/* KV bytes one position of one sequence takes with kv_type (what
 * eng_seq_new allocates per position, and what eng_kv_bytes_per_token says);
 * UINT64_MAX when the product overflows. */
uint64_t eng_mem_kv_bytes_per_token(const model *m, int32_t kv_type);

/* Recurrent state bytes of one sequence (0 for models without recurrent
 * layers; UINT64_MAX on overflow). */
uint64_t eng_mem_state_bytes(const model *m);

/* The plan at o->n_ctx. WK_EINVAL for n_ctx < 1 or an unknown KV type,
 * WK_ERANGE when a sum overflows. */
int eng_mem_plan_compute(const model *m, const eng_mem_options *o, eng_mem_plan *out, wk_error *err);

/* The largest context <= max_ctx whose plan fits budget_bytes, rounded down
 * to whole blocks (256 positions; 1024 from 8192 on) unless max_ctx itself
 * fits; *out is the plan there. WK_ERANGE with the arithmetic in the message
 * when not even 256 positions fit (or max_ctx < 256 does not). */
int eng_mem_fit_context(const model *m, const eng_mem_options *o, uint64_t budget_bytes, int32_t max_ctx,
                        eng_mem_plan *out, wk_error *err);

/* Free memory where the model would run: the CPU's available RAM
 * (util/sysinfo) or the free memory of CUDA GPU `gpu`, and its total. */
int eng_mem_free(int32_t device, int32_t gpu, uint64_t *free_bytes, uint64_t *total_bytes, wk_error *err);

/* Per entry of o's GPU list (CUDA; one entry without a split): what it may hold, the
 * smaller of --gpu-mem (o->split.gpu_mem, 0: none) and its GPU's free memory less the
 * margin (eng_mem_default_budget), shared by the entries that list the same GPU (cuda:0,0:
 * half each); 0 when neither is known. free_bytes[d]: the free memory read (0: not
 * readable). Returns the number of entries. */
int32_t eng_mem_gpu_budgets(const eng_mem_options *o, uint64_t *budget, uint64_t *free_bytes);

/* Whether the plan's budget comes from the GPUs' entries (a split, or --gpu-mem on CUDA). */
bool eng_mem_gpu_budgeted(const eng_mem_options *o);

/* The default budget out of free bytes: free minus a margin of 10 % or
 * 512 MiB, whichever is larger (the OS, page cache for the rest, HTTP
 * buffers, a CUDA context); 0 when free is below the margin. */
uint64_t eng_mem_default_budget(uint64_t free_bytes);

/* One line for people: "context 32768 tokens: weights 1.50 GiB + KV 2.00 GiB
 * at q8_0 + state 12.0 MiB + checkpoints 2.00 GiB + scratch 300 MiB = 5.8 GiB"
 * (aux and zero parts left out). */
void eng_mem_plan_describe(const eng_mem_plan *p, int32_t kv_type, char *buf, size_t cap);

/* The serving default: max_ctx (the trained context; <= 0: 4096) reduced to
 * what fits budget_bytes (0: eng_mem_default_budget of eng_mem_free; with
 * eng_mem_gpu_budgeted the sum of eng_mem_gpu_budgets: each GPU's own fit is
 * the placement's, engine/placement.h). *why
 * (may be NULL, why_cap bytes) receives the choice with its arithmetic:
 * "context 32768 tokens: trained 262144, fits 22.1 GiB free (budget 19.9
 * GiB): weights … = …". Errors as eng_mem_fit_context and eng_mem_free. */
int eng_mem_default_context(const model *m, const eng_mem_options *o, uint64_t budget_bytes, int32_t max_ctx,
                            eng_mem_plan *out, char *why, size_t why_cap, wk_error *err);

#endif
