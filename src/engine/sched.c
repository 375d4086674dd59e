/* The step scheduler (sched.h): joined sequences' forwards wait here until every
 * joined sequence has one, then the last to arrive runs them as one eng_step. */
#include "engine/sched.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine_impl.h"
#include "util/log.h"
#include "util/timeutil.h"

/* A forward waiting for its step. */
typedef struct pending {
    const eng_step_item *item;
    int rc;
    wk_error *err;
    bool served;
    bool armed; /* its thread has looked since the last step (and at its cancel flag) */
} pending;

struct eng_sched {
    eng_ctx *c;
    pthread_mutex_t lock;
    pthread_cond_t stepped; /* a step ran: the waiters look whether theirs was in it */
    int members;
    atomic_int entering;    /* threads waiting for the lock: steps wait for them (a new request joins) */
    uint64_t next_ticket;   /* join order: the oldest prompt chunk goes first */
    pending *wait[ENG_MAX_SEQ];
    int n_wait;
    uint64_t steps, forwards;
};

int eng_sched_new(eng_sched **out, eng_ctx *c, wk_error *err)
{
    *out = NULL;
    eng_sched *s = calloc(1, sizeof *s);
    if (!s) return wk_fail(err, WK_ENOMEM, "scheduler: out of memory");
    s->c = c;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->stepped, NULL);
    c->sched = s;
    *out = s;
    return 0;
}

void eng_sched_free(eng_sched *s)
{
    if (!s) return;
    s->c->sched = NULL;
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->stepped);
    free(s);
}

/* A thread that wants the lock is counted while it waits for it: the joined threads
 * hold back their next step (letting go of the lock while they wait) until it is in,
 * or a thread that steps all the time would never let a new request join. */
void eng_sched_lock(eng_sched *s)
{
    atomic_fetch_add(&s->entering, 1);
    pthread_mutex_lock(&s->lock);
    atomic_fetch_sub(&s->entering, 1);
}

void eng_sched_unlock(eng_sched *s)
{
    pthread_cond_broadcast(&s->stepped); /* waiters look again: the step may be due now */
    pthread_mutex_unlock(&s->lock);
}

/* Every joined sequence waits for a step, each has looked since the last one (a
 * prompt left out of a step gets the lock between steps, to see its cancel flag), and
 * nobody waits to come in. */
static bool step_due(const eng_sched *s)
{
    if (s->n_wait == 0 || s->n_wait != s->members || atomic_load(&s->entering) != 0) return false;
    for (int i = 0; i < s->n_wait; i++)
        if (!s->wait[i]->armed) return false;
    return true;
}

int eng_sched_members(const eng_sched *s) { return s->members; }

void eng_sched_stats(const eng_sched *s, uint64_t *steps, uint64_t *forwards)
{
    *steps = s->steps;
    *forwards = s->forwards;
}

/* The waiting prompt chunk that joined first among those not yet taken, or -1. */
static int oldest_prompt(const eng_sched *s, const bool *taken)
{
    int best = -1;
    for (int i = 0; i < s->n_wait; i++) {
        const eng_step_item *it = s->wait[i]->item;
        if (taken[i] || !it->prefill) continue;
        if (best < 0 || it->seq->sched_ticket < s->wait[best]->item->seq->sched_ticket) best = i;
    }
    return best;
}

/* One step over the waiting forwards: every decode, then prompt chunks oldest first
 * while they fit n_ubatch tokens together (the first always: one chunk is at most that). */
static void run_step(eng_sched *s)
{
    eng_step_item items[ENG_MAX_SEQ] = {{0}};
    bool taken[ENG_MAX_SEQ] = {0};
    int who[ENG_MAX_SEQ], n = 0, n_prompt = 0;
    for (int i = 0; i < s->n_wait; i++)
        if (!s->wait[i]->item->prefill) {
            /* in the order the sequences joined, not the order their threads came: the
             * same sequences make the same step, which a backend may have recorded */
            int j = n++;
            for (; j > 0 && items[j - 1].seq->sched_ticket > s->wait[i]->item->seq->sched_ticket; j--) {
                items[j] = items[j - 1];
                who[j] = who[j - 1];
            }
            taken[i] = true;
            who[j] = i;
            items[j] = *s->wait[i]->item;
        }
    const int32_t budget = eng_ctx_options(s->c)->n_ubatch;
    for (int32_t rows = 0;;) {
        int i = oldest_prompt(s, taken);
        if (i < 0 || (n_prompt > 0 && rows + s->wait[i]->item->n > budget)) break;
        rows += s->wait[i]->item->n;
        taken[i] = true;
        who[n] = i;
        items[n++] = *s->wait[i]->item;
        n_prompt++;
    }
    wk_error err = {0};
    const double t0 = wk_now_ms();
    int rc = eng_step(s->c, items, n, &err);
    s->steps++;
    s->forwards += (uint64_t)n;
    int32_t rows = 0;
    for (int j = 0; j < n; j++) rows += items[j].n;
    WK_DEBUG("step: %d sequences (%d prompt chunks), %d rows, %.1f ms", n, n_prompt, rows, wk_now_ms() - t0);
    for (int j = 0; j < n; j++) {
        pending *p = s->wait[who[j]];
        p->rc = rc;
        if (rc) *p->err = err;
        p->served = true;
    }
    int k = 0;
    for (int i = 0; i < s->n_wait; i++)
        if (!s->wait[i]->served) {
            s->wait[i]->armed = false;
            s->wait[k++] = s->wait[i];
        }
    s->n_wait = k;
    pthread_cond_broadcast(&s->stepped);
}

void eng_sched_join(eng_sched *s, eng_seq *seq)
{
    seq->sched_joined = true;
    seq->sched_ticket = s->next_ticket++;
    s->members++;
}

void eng_sched_leave(eng_sched *s, eng_seq *seq)
{
    if (!seq->sched_joined) return;
    seq->sched_joined = false;
    s->members--;
    if (step_due(s)) run_step(s);
}

/* How often a prompt chunk waiting behind another prompt looks at its cancel flag. */
#define CANCEL_POLL_MS 20

static void drop_waiter(eng_sched *s, const pending *p)
{
    for (int i = 0; i < s->n_wait; i++)
        if (s->wait[i] == p) {
            memmove(&s->wait[i], &s->wait[i + 1], sizeof s->wait[0] * (size_t)(s->n_wait - i - 1));
            s->n_wait--;
            return;
        }
}

int eng_sched_forward(eng_sched *s, const eng_step_item *item, const atomic_bool *cancel, wk_error *err)
{
    pending p = {item, 0, err, false, true};
    s->wait[s->n_wait++] = &p;
    for (;;) {
        if (p.served) return p.rc;
        if (cancel && atomic_load(cancel)) {
            drop_waiter(s, &p);
            return wk_fail(err, WK_ECANCELLED, "cancelled while waiting for a step");
        }
        p.armed = true;
        if (step_due(s)) {
            run_step(s);
            continue;
        }
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += CANCEL_POLL_MS * 1000000L;
        if (t.tv_nsec >= 1000000000L) {
            t.tv_sec++;
            t.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->stepped, &s->lock, &t);
    }
}
