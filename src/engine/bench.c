/* Benchmark harness: see bench.h. */
#include "engine/bench.h"

#include <stdlib.h>
#include <string.h>

#include "engine/sequence.h"
#include "engine/spec.h"
#include "quant/qtypes.h"
#include "util/threadpool.h"
#include "util/timeutil.h"

void eng_bench_tokens(int32_t *out, int32_t n, int32_t n_vocab, uint32_t seed)
{
    uint32_t s = seed;
    for (int32_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        out[i] = 3 + (int32_t)((s >> 8) % (uint32_t)(n_vocab - 3));
    }
}

static int name_has(const gguf_tensor *t, const char *s) { return strstr(t->name_z, s) != NULL; }

const char *eng_bench_kind_name(eng_bench_kind k)
{
    return k == ENG_BENCH_PP ? "pp" : k == ENG_BENCH_TG ? "tg" : k == ENG_BENCH_VK ? "vk" : "bs";
}

void eng_bench_model_costs(const model *m, eng_bench_costs *c)
{
    memset(c, 0, sizeof *c);
    const model_hparams *hp = &m->hp;
    double expert_frac = hp->n_expert ? (double)hp->n_expert_used / (double)hp->n_expert : 1.0;
    for (size_t i = 0; i < gguf_tensor_count(m->file); i++) {
        const gguf_tensor *t = gguf_tensor_at(m->file, i);
        c->n_params += t->n_elements;
        c->tensor_bytes += t->n_bytes;
        double bytes = (double)t->n_bytes, params = (double)t->n_elements;
        if (strcmp(t->name_z, "token_embd.weight") == 0) {
            /* one row looked up per token, unless it is also the LM head */
            c->weight_bytes_per_token += hp->tied_output ? bytes : bytes / (double)t->ne[1];
            continue;
        }
        if (strcmp(t->name_z, "output.weight") == 0) {
            c->weight_bytes_per_token += bytes;
            continue;
        }
        if (name_has(t, "_exps")) {
            bytes *= expert_frac;
            params *= expert_frac;
        }
        c->weight_bytes_per_token += bytes;
        if (t->n_dims >= 2) c->matmul_params_per_token += params;
    }
    c->bits_per_weight = c->n_params ? 8.0 * (double)c->tensor_bytes / (double)c->n_params : 0.0;
    c->lm_head_params = (double)hp->n_embd * (double)hp->n_vocab;
    c->kv_bytes_per_pos = (double)hp->n_attn_layers * hp->n_head_kv * (hp->d_k + hp->d_v) * 2.0;
    c->attn_flops_per_pair = 2.0 * hp->n_head * (double)(hp->d_k + hp->d_v) * hp->n_attn_layers;
    if (hp->n_rec_layers) {
        c->rec_state_bytes = (double)hp->n_rec_layers * (double)(model_conv_elems(m) + model_ssm_elems(m)) * 4.0;
        /* decay, S^T k, rank-1 update, S^T q: ~4 multiply-adds per state element */
        c->rec_flops_per_token = 8.0 * hp->n_rec_layers * hp->ssm_n_hv * (double)hp->ssm_d_k * hp->ssm_d_v;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ENG_BENCH_VK_STEPS verification steps of k drafts, each rolled back; *rollback_ms the
 * median time of the rollbacks. */
static int verify_steps(eng_ctx *ctx, eng_seq *seq, int32_t k, const int32_t *tokens, double *rollback_ms,
                        wk_error *err)
{
    eng_seq_mark mk = {0};
    double rb[ENG_BENCH_VK_STEPS];
    int rc = 0;
    for (int32_t i = 0; i < ENG_BENCH_VK_STEPS && rc == 0; i++) {
        int32_t reached;
        rc = eng_seq_mark_save(seq, &mk, err);
        if (!rc) rc = eng_decode_rows(ctx, seq, tokens, k + 1, 0, false, err);
        double t0 = wk_now_ms();
        if (!rc) rc = eng_seq_rewind(seq, &mk, mk.pos, &reached, err);
        rb[i] = wk_now_ms() - t0;
    }
    eng_seq_mark_free(&mk);
    qsort(rb, ENG_BENCH_VK_STEPS, sizeof *rb, cmp_double);
    *rollback_ms = rb[ENG_BENCH_VK_STEPS / 2];
    return rc;
}

/* ENG_BENCH_BS_STEPS steps of the n sequences, one token each, logits to the host. */
static int batch_steps(eng_ctx *ctx, eng_seq *const *seqs, int32_t n, const int32_t *tokens, int32_t n_tokens,
                       wk_error *err)
{
    eng_step_item items[ENG_BENCH_BS_MAX];
    int rc = 0;
    for (int32_t i = 0; i < ENG_BENCH_BS_STEPS && rc == 0; i++) {
        for (int32_t j = 0; j < n; j++)
            items[j] = (eng_step_item){.seq = seqs[j], .tokens = &tokens[(i * n + j) % n_tokens], .n = 1, .logits = true};
        rc = eng_step(ctx, items, n, err);
    }
    return rc;
}

/* One timed repetition: the sequences stand at the depth snapshot. */
static int run_once(eng_ctx *ctx, eng_seq *const *seqs, const eng_bench_test *t, const int32_t *tokens,
                    int32_t n_tokens, double *ms, double *rollback_ms, wk_error *err)
{
    eng_seq *seq = seqs[0];
    double t0 = wk_now_ms();
    int rc = 0;
    if (t->kind == ENG_BENCH_BS) {
        rc = batch_steps(ctx, seqs, t->n, tokens, n_tokens, err);
    } else if (t->kind == ENG_BENCH_VK) {
        rc = verify_steps(ctx, seq, t->n, tokens, rollback_ms, err);
    } else if (t->kind == ENG_BENCH_PP) {
        rc = eng_prefill(ctx, seq, tokens, t->n, NULL, err);
    } else {
        int32_t tok = tokens[0];
        for (int32_t i = 0; i < t->n && rc == 0; i++) {
            int32_t next;
            rc = eng_decode_greedy(ctx, seq, tok, &next, err);
            tok = next >= 0 ? next : tokens[0];
        }
    }
    *ms = wk_now_ms() - t0;
    return rc;
}

int eng_bench_run(eng_ctx *ctx, const eng_bench_test *tests, int32_t n_tests, int32_t reps,
                  eng_bench_result *results, eng_bench_progress_fn progress, void *user, wk_error *err)
{
    if (n_tests <= 0 || reps <= 0) return wk_fail(err, WK_EINVAL, "bench: need at least one test and one repetition");
    int32_t n_vocab = eng_n_vocab(ctx), max_n = 1, max_depth = 0, cap = 1, n_seqs = 1;
    for (int32_t i = 0; i < n_tests; i++) {
        if (tests[i].n <= 0 || tests[i].depth < 0)
            return wk_fail(err, WK_EINVAL, "bench: test %d has n %d, depth %d", i, tests[i].n, tests[i].depth);
        if (tests[i].n > max_n) max_n = tests[i].n;
        if (tests[i].depth > max_depth) max_depth = tests[i].depth;
        if (tests[i].kind == ENG_BENCH_VK && (tests[i].n > ENG_SPEC_MAX_DRAFT || tests[i].n + 1 > eng_ctx_options(ctx)->n_ubatch))
            return wk_fail(err, WK_EINVAL, "bench: vk%d: at most %d drafts and ubatch - 1", tests[i].n, ENG_SPEC_MAX_DRAFT);
        if (tests[i].kind == ENG_BENCH_BS) {
            const int32_t most = eng_ctx_options(ctx)->n_seq < ENG_BENCH_BS_MAX ? eng_ctx_options(ctx)->n_seq : ENG_BENCH_BS_MAX;
            if (tests[i].n > most)
                return wk_fail(err, WK_EINVAL, "bench: bs%d: the context takes at most %d sequences", tests[i].n, most);
            if (tests[i].n > n_seqs) n_seqs = tests[i].n;
        }
        const int32_t need = tests[i].depth + eng_bench_test_positions(&tests[i]);
        if (need > cap) cap = need;
    }
    eng_bench_costs costs;
    eng_bench_model_costs(eng_ctx_model(ctx), &costs);
    costs.kv_bytes_per_pos = (double)eng_kv_bytes_per_token(ctx); /* the context's KV type (F16, Q8_0, ...) */
    int32_t *depth_tokens = malloc((size_t)(max_depth > 0 ? max_depth : 1) * sizeof *depth_tokens);
    int32_t *new_tokens = malloc((size_t)max_n * sizeof *new_tokens);
    double *ms = malloc((size_t)reps * sizeof *ms);
    eng_seq *seqs[ENG_BENCH_BS_MAX] = {0}, *seq = NULL;
    eng_snapshot snap = {0};
    bool *done = calloc((size_t)n_tests, sizeof *done);
    int rc = 0;
    if (!depth_tokens || !new_tokens || !ms || !done) {
        rc = wk_fail(err, WK_ENOMEM, "bench: out of memory");
        goto out;
    }
    eng_bench_tokens(depth_tokens, max_depth, n_vocab, 12345);
    eng_bench_tokens(new_tokens, max_n, n_vocab, 777);
    for (int32_t j = 0; j < n_seqs && rc == 0; j++) rc = eng_seq_new(&seqs[j], ctx, cap, err);
    if (rc) goto out;
    seq = seqs[0];

    bool warmed = false;
    for (int32_t g = 0; g < n_tests; g++) {
        if (done[g]) continue;
        int32_t depth = tests[g].depth;
        /* Bring the sequence to this depth once, then snapshot. */
        eng_seq_clear(seq);
        if (depth > 0 && (rc = eng_prefill(ctx, seq, depth_tokens, depth, NULL, err))) {
            wk_fail_prefix(err, "bench: prefill to depth %d", depth);
            goto out;
        }
        if ((rc = seq_snapshot(seq, &snap, err))) goto out;
        for (int32_t j = 1; j < n_seqs; j++) /* the bs tests' other sequences: copies of the first */
            if ((rc = eng_seq_copy_prefix(seqs[j], seq, depth, err)) || (rc = seq_restore(seqs[j], &snap, err))) {
                wk_fail_prefix(err, "bench: sequence %d to depth %d", j, depth);
                goto out;
            }
        if (!warmed) {
            /* touch every weight (page faults, caches) before the first timing */
            if ((rc = eng_prefill(ctx, seq, new_tokens, max_n < 16 ? max_n : 16, NULL, err)) ||
                (rc = eng_decode(ctx, seq, new_tokens[0], err)) || (rc = seq_restore(seq, &snap, err))) {
                wk_fail_prefix(err, "bench: warm-up");
                goto out;
            }
            warmed = true;
        }
        for (int32_t i = g; i < n_tests; i++) {
            if (done[i] || tests[i].depth != depth) continue;
            const eng_bench_test *t = &tests[i];
            double rollback = 0;
            for (int32_t r = 0; r < reps; r++) {
                const int32_t n_back = t->kind == ENG_BENCH_BS ? t->n : 1;
                for (int32_t j = 0; j < n_back; j++)
                    if ((rc = seq_restore(seqs[j], &snap, err))) goto out;
                if ((rc = run_once(ctx, seqs, t, new_tokens, max_n, &ms[r], &rollback, err))) {
                    wk_fail_prefix(err, "bench: %s%d at depth %d", eng_bench_kind_name(t->kind), t->n, depth);
                    goto out;
                }
                if (progress) progress(user, t, r, ms[r]);
            }
            qsort(ms, (size_t)reps, sizeof *ms, cmp_double);
            double med = reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
            eng_bench_result *res = &results[i];
            memset(res, 0, sizeof *res);
            res->test = *t;
            res->reps = reps;
            res->ms_median = med;
            /* tokens a repetition handles: vk verifies k + 1 per step, bs decodes n per step */
            const int32_t steps = t->kind == ENG_BENCH_VK ? ENG_BENCH_VK_STEPS : t->kind == ENG_BENCH_BS ? ENG_BENCH_BS_STEPS : t->n;
            const double toks = t->kind == ENG_BENCH_VK ? (double)(t->n + 1) * steps : t->kind == ENG_BENCH_BS ? (double)t->n * steps : t->n;
            res->tok_per_s_median = toks / (med / 1e3);
            res->tok_per_s_min = toks / (ms[reps - 1] / 1e3);
            res->tok_per_s_max = toks / (ms[0] / 1e3);
            res->ms_per_step = med / steps;
            res->rollback_ms = t->kind == ENG_BENCH_VK ? rollback : 0;
            double n = t->n, d = depth;
            if (t->kind == ENG_BENCH_VK || t->kind == ENG_BENCH_BS) {
                /* no rate: the step's weights are read once for all its rows */
            } else if (t->kind == ENG_BENCH_TG) {
                double mean_pos = d + (n + 1.0) / 2.0; /* keys attended per step, averaged */
                double bytes = costs.weight_bytes_per_token + costs.kv_bytes_per_pos * mean_pos +
                               2.0 * costs.rec_state_bytes;
                res->gbytes_per_s = bytes * res->tok_per_s_median / 1e9;
            } else {
                double pairs = n * d + n * (n + 1.0) / 2.0; /* causal query-key pairs */
                double flops = 2.0 * costs.matmul_params_per_token * n + 2.0 * costs.lm_head_params +
                               costs.attn_flops_per_pair * pairs + costs.rec_flops_per_token * n;
                res->gflop_per_s = flops / (med / 1e3) / 1e9;
            }
            done[i] = true;
        }
    }
out:
    eng_snapshot_free(&snap);
    for (int32_t j = 0; j < n_seqs; j++)
        if (seqs[j]) eng_seq_free(seqs[j]);
    free(depth_tokens);
    free(new_tokens);
    free(ms);
    free(done);
    return rc;
}

/* Buffers of 1 GiB: beyond the last-level cache of any machine we run on
 * (some server VMs have 300 MiB of L3; a 256 MiB buffer measured the cache). */
#define MEMBW_BYTES ((size_t)1 << 30)

typedef struct membw_job {
    uint8_t *dst; /* NULL: read only */
    const uint8_t *src;
    size_t n;
    uint64_t sums[64]; /* per worker, keeps the reads alive */
} membw_job;

static void membw_body(void *ctx, int worker, int n_workers)
{
    membw_job *j = ctx;
    long b, e;
    wk_split((long)(j->n / 64), worker, n_workers, &b, &e); /* cache-line granules */
    if (j->dst) {
        memcpy(j->dst + (size_t)b * 64, j->src + (size_t)b * 64, (size_t)(e - b) * 64);
        return;
    }
    const uint64_t *p = (const uint64_t *)(j->src + (size_t)b * 64);
    uint64_t acc[8] = {0};
    for (long l = 0; l < e - b; l++, p += 8)
        for (int k = 0; k < 8; k++) acc[k] ^= p[k];
    uint64_t s = 0;
    for (int k = 0; k < 8; k++) s ^= acc[k];
    if (worker < 64) j->sums[worker] = s;
}

/* Best of 3 timed passes (after one that takes the page faults). */
static double membw_run(int n_threads, int copy)
{
    const size_t n = MEMBW_BYTES;
    uint8_t *a = malloc(n), *b = copy ? malloc(n) : NULL;
    wk_pool *pool = wk_pool_new(n_threads);
    double best = 0;
    if (a && (b || !copy) && pool) {
        memset(a, 1, n);
        if (b) memset(b, 2, n);
        membw_job j = {.dst = b, .src = a, .n = n};
        for (int r = 0; r < 4; r++) {
            double t0 = wk_now_ms();
            wk_pool_run(pool, membw_body, &j);
            double gbps = (copy ? 2.0 : 1.0) * (double)n / ((wk_now_ms() - t0) / 1e3) / 1e9;
            if (r > 0 && gbps > best) best = gbps;
        }
    }
    wk_pool_free(pool);
    free(a);
    free(b);
    return best;
}

double eng_bench_copy_gbytes_per_s(int n_threads) { return membw_run(n_threads, 1); }

double eng_bench_read_gbytes_per_s(int n_threads) { return membw_run(n_threads, 0); }
