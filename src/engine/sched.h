/* The step scheduler: several threads, each driving one request's sequence, share
 * one context; their forward passes meet here and run as one batched step
 * (continuous batching, eng_step).
 *
 * One lock (eng_sched_lock) guards the context, its sequences and everything the
 * threads share above it (the prefix cache): a thread holds it while it works and
 * lets go only while it waits for a step. A sequence that joined (eng_sched_join)
 * has its eng_prefill / eng_decode chunks go through the scheduler: a step runs
 * once every joined sequence waits for one (or left), and holds the decode tokens
 * of all of them plus prompt chunks of at most n_ubatch tokens together, taken in
 * the order their sequences joined (FIFO admission: the oldest prompt's chunk
 * always, younger short ones beside it while they fit; a long cold prompt delays
 * the others' streams by one chunk per step, never by its whole prefill). Forwards of sequences that did
 * not join, and calls that want more than the last row's logits (every row, hidden
 * states), run at once on their own, under the lock.
 *
 * The scheduler batches only for contexts made with eng_options.n_seq > 1; with
 * one sequence it is only the lock. */
#ifndef WICK_ENGINE_SCHED_H
#define WICK_ENGINE_SCHED_H

#include "engine/context.h"
#include "engine/sequence.h"
#include "util/err.h"

typedef struct eng_sched eng_sched;

/* Attaches a scheduler to c (one per context; c must outlive it). WK_ENOMEM. */
int eng_sched_new(eng_sched **out, eng_ctx *c, wk_error *err);
void eng_sched_free(eng_sched *s);

void eng_sched_lock(eng_sched *s);
void eng_sched_unlock(eng_sched *s);

/* With the lock held: seq's forward passes meet the other joined sequences' from
 * now on (join), or no longer (leave; a step the others were waiting for may run
 * here). A sequence joins once. */
void eng_sched_join(eng_sched *s, eng_seq *seq);
void eng_sched_leave(eng_sched *s, eng_seq *seq);

/* Joined sequences (the requests in their prefill or decode phase). */
int eng_sched_members(const eng_sched *s);

/* Steps run so far and the forwards they held (forwards / steps: the batch size). */
void eng_sched_stats(const eng_sched *s, uint64_t *steps, uint64_t *forwards);

#endif
