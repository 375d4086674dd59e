/* Benchmark harness (what `wick bench` runs): prefill and decode throughput
 * at a given context depth, like llama-bench.
 *
 *   pp<N> at depth D: D tokens are prefilled once (untimed) and the sequence
 *     is snapshotted there; each repetition restores the snapshot (KV
 *     truncated back to D, recurrent state put back) and times one
 *     eng_prefill of N new tokens (logits of the last one).
 *   tg<N> at depth D: same start, then N eng_decode_greedy steps: each picks
 *     the next token by argmax over the logits, on the backend (a GPU brings
 *     one index to the host, not the logits; on the CPU the same argmax the
 *     llama.cpp peer run does).
 *   vk<K> at depth D: the verification step of speculative decoding with K
 *     drafts: ENG_BENCH_VK_STEPS times a batch of K + 1 tokens with every row's
 *     logits (eng_decode_rows), each followed by the rollback of the whole batch
 *     (recurrent state copied back, KV cut). Its ms per step against tg's ms per
 *     token is the cost of verifying K drafts relative to one decode step;
 *     (K + 1) / that is the speed-up ceiling at full acceptance.
 *   bs<N> at depth D: continuous batching's decode step: N sequences, each at
 *     depth D (copies of the first), advance one token each in one eng_step with
 *     the last row's logits brought to the host, as the server's decode steps do;
 *     ENG_BENCH_BS_STEPS steps per repetition. N x tg's ms per token over its ms
 *     per step is the aggregate speed-up over one stream.
 * Tokens are pseudo-random ids (the golden files' LCG), so no tokenizer work
 * is timed. A short warm-up touches every weight before the first timing.
 *
 * Derived rates, from the model's tensor list:
 *   decode GB/s = (weight bytes read per token + KV bytes (the context's KV type) at
 *     the mean position + recurrent state read and written) x tok/s;
 *   prefill GFLOP/s = (2 x weights multiplied per token x N + 2 x LM-head
 *     weights + attention 2 x n_head x (d_k + d_v) per query-key pair +
 *     DeltaNet ~8 x d_k x d_v per value head per token) / s.
 * MoE expert stacks count at n_used / n_expert of their size. */
#ifndef WICK_ENGINE_BENCH_H
#define WICK_ENGINE_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/context.h"
#include "model/model.h"
#include "util/err.h"

typedef enum eng_bench_kind { ENG_BENCH_PP = 0, ENG_BENCH_TG = 1, ENG_BENCH_VK = 2, ENG_BENCH_BS = 3 } eng_bench_kind;

/* Verification steps timed per vk repetition. */
#define ENG_BENCH_VK_STEPS 16
/* Batched decode steps timed per bs repetition. */
#define ENG_BENCH_BS_STEPS 32
/* The most sequences a bs test decodes together. */
#define ENG_BENCH_BS_MAX 64

typedef struct eng_bench_test {
    eng_bench_kind kind;
    int32_t n;     /* tokens prefilled (pp) or decoded (tg), drafts verified per step (vk),
                      sequences decoded together (bs) */
    int32_t depth; /* tokens already in the context */
} eng_bench_test;

typedef struct eng_bench_result {
    eng_bench_test test;
    int32_t reps;
    double tok_per_s_median, tok_per_s_min, tok_per_s_max; /* vk: tokens verified per second; bs: of all sequences */
    double ms_median;          /* wall time of one repetition */
    double ms_per_step;        /* vk: one verification step (batch + rollback); tg: one token; bs: one step */
    double rollback_ms;        /* vk: of which the rollback (state copy back, KV cut), median */
    double gbytes_per_s;       /* decode: achieved memory traffic (0 for pp) */
    double gflop_per_s;        /* prefill: achieved arithmetic (0 for tg) */
} eng_bench_result;

/* What the model costs per token, from its tensors and hyper-parameters. */
typedef struct eng_bench_costs {
    uint64_t n_params;             /* all tensor elements */
    uint64_t tensor_bytes;         /* all tensor bytes */
    double bits_per_weight;        /* 8 x tensor_bytes / n_params */
    double weight_bytes_per_token; /* decode: bytes of weights read for one token (LM head included) */
    double matmul_params_per_token;/* weights multiplied per token, LM head excluded (experts at n_used/n_expert) */
    double lm_head_params;         /* n_embd x n_vocab */
    double kv_bytes_per_pos;       /* F16 K+V bytes per cached position, all attention layers */
    double attn_flops_per_pair;    /* 2 x n_head x (d_k + d_v) x attention layers, per query-key pair */
    double rec_state_bytes;        /* recurrent state (conv + ssm) bytes, all layers */
    double rec_flops_per_token;    /* DeltaNet scan arithmetic per token, all layers */
} eng_bench_costs;

void eng_bench_model_costs(const model *m, eng_bench_costs *out);

/* Context positions a test needs past its depth (bs: per sequence). */
static inline int32_t eng_bench_test_positions(const eng_bench_test *t)
{
    return (t->kind == ENG_BENCH_BS ? ENG_BENCH_BS_STEPS : t->n) + 1;
}

/* "pp", "tg", "vk", "bs". */
const char *eng_bench_kind_name(eng_bench_kind k);

/* Called after each repetition (for progress output); may be NULL. */
typedef void (*eng_bench_progress_fn)(void *user, const eng_bench_test *t, int32_t rep, double ms);

/* Runs every test with `reps` repetitions on a context created for them
 * (sequence capacity = max depth + max n + 1). Tests with the same depth
 * share one depth prefill. results[i] matches tests[i]. Errors from the
 * engine are passed through with the test named. */
int eng_bench_run(eng_ctx *ctx, const eng_bench_test *tests, int32_t n_tests, int32_t reps,
                  eng_bench_result *results, eng_bench_progress_fn progress, void *user, wk_error *err);

/* Achieved memory bandwidth with n_threads threads over 1 GiB buffers (far
 * beyond the last-level cache), best of 3. Copy counts bytes read + written;
 * read (a streaming XOR) is the roof decode GB/s is measured against, since
 * decode only reads weights. Return 0 on allocation failure. */
double eng_bench_copy_gbytes_per_s(int n_threads);
double eng_bench_read_gbytes_per_s(int n_threads);

/* Pseudo-random token ids in [3, n_vocab): s = s*1664525 + 1013904223,
 * id = 3 + (s >> 8) % (n_vocab - 3) — the golden token sequences' LCG. */
void eng_bench_tokens(int32_t *out, int32_t n, int32_t n_vocab, uint32_t seed);

#endif
