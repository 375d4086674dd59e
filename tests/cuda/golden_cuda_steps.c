/* Recorded decode steps on a golden model: steps of several rows of one sequence (drafts
 * being verified, two draft counts) and of one row of each of three sequences at other
 * positions (a continuous-batching step), wrapped as the engine wraps them
 * (be_cuda_step_begin / be_cuda_step_end, engine/context.c and step.c),
 * give the logits the same steps give with graphs off, bit for bit, and are replayed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "golden_cuda_steps.h"
#include "golden_seq.h"
#include "model/model_impl.h"

enum { N_SEQ = 3, BATCH_STEPS = 6, VERIFY_STEPS = 8, VERIFY_ROWS = 4 };

/* Logit rows the run produces: a row per sequence and batch step, then the verify rows. */
#define RUN_ROWS (N_SEQ * BATCH_STEPS + VERIFY_STEPS * VERIFY_ROWS)

typedef struct steps_run {
    long captured, replayed, redone;
    long batch_replayed; /* after the batched steps */
    float *logits; /* RUN_ROWS x n_vocab */
} steps_run;

static int32_t token_at(const int32_t *prompt, int n_prompt, int i) { return prompt[i % n_prompt]; }

/* One batched step of the sequences, as eng_step runs it. */
static int batch_step(const model *m, be_backend *be, model_scratch *s, seq *q, const int32_t *tok, float *logits,
                      wk_error *err)
{
    const size_t V = m->hp.n_vocab;
    model_batch_seq bs[N_SEQ];
    be_step_seq rec[N_SEQ];
    int32_t pos[N_SEQ];
    for (int i = 0; i < N_SEQ; i++) {
        pos[i] = q[i].st.n_past;
        bs[i] = (model_batch_seq){&q[i].st, &tok[i], 1, MODEL_LOGITS_LAST, logits + i * V, NULL};
        rec[i] = (be_step_seq){&q[i], pos[i], 1};
    }
    be_cuda_step_begin(be, rec, N_SEQ);
    int rc = model_forward_batch(m, be, s, bs, N_SEQ, err);
    if (be_cuda_step_end(be, rc) > 0) {
        for (int i = 0; i < N_SEQ; i++) q[i].st.n_past = pos[i];
        rc = model_forward_batch(m, be, s, bs, N_SEQ, err);
    }
    return rc ? rc : be_cuda_status(be, err);
}

/* A verification-like step of n rows of one sequence, all rows' logits, as forward_alone runs it. */
static int rows_step(const model *m, be_backend *be, model_scratch *s, seq *q, const int32_t *tok, int32_t n,
                     float *logits, wk_error *err)
{
    const int32_t pos = q->st.n_past;
    const model_rows out = {.mode = MODEL_LOGITS_ALL, .logits = logits};
    be_cuda_step_begin(be, &(be_step_seq){q, pos, n}, 1);
    int rc = model_forward_rows(m, be, s, &q->st, tok, n, &out, NULL, err);
    if (be_cuda_step_end(be, rc) > 0) {
        q->st.n_past = pos;
        rc = model_forward_rows(m, be, s, &q->st, tok, n, &out, NULL, err);
    }
    return rc ? rc : be_cuda_status(be, err);
}

static int run_steps(const model *m, const int32_t *prompt, int n_prompt, int graphs, steps_run *r, wk_error *err)
{
    const size_t V = m->hp.n_vocab;
    be_backend *be = NULL;
    model_scratch *s = NULL;
    seq q[N_SEQ];
    memset(q, 0, sizeof q);
    int rc = be_cuda_new(&be, 0, err);
    if (rc) return rc;
    be_cuda_set_graphs(be, graphs);
    rc = model_scratch_new(&s, m, be, 64, err);
    for (int i = 0; i < N_SEQ && !rc; i++)
        if (seq_new(&q[i], m, be, 128)) rc = wk_fail(err, WK_ENOMEM, "sequence state");
    float *last = malloc(sizeof(float) * V);
    r->logits = malloc(sizeof(float) * V * RUN_ROWS);
    if (!rc && (!last || !r->logits)) rc = wk_fail(err, WK_ENOMEM, "logits");
    /* the sequences at different depths: prefixes of the prompt of 20, 27 and 34 tokens */
    for (int i = 0; i < N_SEQ && !rc; i++) {
        int32_t t[64];
        const int n0 = 20 + 7 * i;
        for (int j = 0; j < n0; j++) t[j] = token_at(prompt, n_prompt, j + i);
        rc = model_forward(m, be, s, &q[i].st, t, n0, MODEL_LOGITS_LAST, last, NULL, err);
    }
    float *out = r->logits;
    /* the batch's logits into pinned buffers (be_host_alloc: copied into directly), the
     * verification rows' into pageable memory (through the staging buffer) */
    float *pinned = be_host_alloc(be, sizeof(float) * V * N_SEQ);
    if (!rc && !pinned) rc = wk_fail(err, WK_ENOMEM, "pinned logits");
    for (int k = 0; k < BATCH_STEPS && !rc; k++, out += N_SEQ * V) {
        int32_t tok[N_SEQ];
        for (int i = 0; i < N_SEQ; i++) tok[i] = token_at(prompt, n_prompt, 3 * k + i + 5);
        rc = batch_step(m, be, s, q, tok, pinned, err);
        if (!rc) memcpy(out, pinned, sizeof(float) * V * N_SEQ);
    }
    be_host_free(be, pinned);
    long unused;
    be_cuda_graph_stats(be, &unused, &r->batch_replayed, &unused);
    for (int k = 0; k < VERIFY_STEPS && !rc; k++) {
        const int32_t n = VERIFY_ROWS - k % 2; /* two draft counts: two graphs */
        int32_t tok[VERIFY_ROWS];
        for (int j = 0; j < n; j++) tok[j] = token_at(prompt, n_prompt, 4 * k + j + 11);
        rc = rows_step(m, be, s, &q[0], tok, n, out, err);
        out += (size_t)n * V;
    }
    if (!rc) memset(out, 0, (size_t)(r->logits + V * RUN_ROWS - out) * sizeof(float));
    be_cuda_graph_stats(be, &r->captured, &r->replayed, &r->redone);
    free(last);
    for (int i = 0; i < N_SEQ; i++) seq_free(&q[i], be);
    model_scratch_free(s);
    be_free(be);
    return rc;
}

int golden_steps_check(const model *m, const int32_t *prompt, int n_prompt, const char *name)
{
    wk_error err = {0};
    steps_run off = {0}, on = {0};
    int rc = run_steps(m, prompt, n_prompt, 0, &off, &err);
    if (!rc) rc = run_steps(m, prompt, n_prompt, 1, &on, &err);
    const size_t bytes = sizeof(float) * m->hp.n_vocab * RUN_ROWS;
    /* per shape: run, captured, then replayed: the batch 4 times; the draft counts 2 times
     * each, or once for one of them when the other's first run grew a buffer (which drops
     * every graph) */
    const long want_batch = BATCH_STEPS - 2, want_rows = VERIFY_STEPS - 5;
    const long rows_replayed = on.replayed - on.batch_replayed;
    const int same = !rc && memcmp(off.logits, on.logits, bytes) == 0;
    const int ok = same && on.batch_replayed >= want_batch && rows_replayed >= want_rows && on.redone == 0 &&
                   off.replayed == 0;
    printf("%-4s %-29s recorded steps: 3 sequences x 1 row %ld replayed (want >= %ld), 1 x 3-4 rows %ld "
           "replayed (want >= %ld); %ld captured, %ld redone; logits %s graphs off%s%s\n",
           ok ? "ok" : "FAIL", name, on.batch_replayed, want_batch, rows_replayed, want_rows, on.captured, on.redone,
           rc ? "not compared with" : same ? "bit-identical to" : "DIFFER from", rc ? ": " : "", rc ? err.msg : "");
    free(off.logits);
    free(on.logits);
    return ok ? 0 : 1;
}
