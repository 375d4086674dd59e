/* The step scheduler (sched.h): joined sequences' forwards wait here until every
 * joined sequence has one, then the last to arrive runs them as one eng_step. */
#include "engine/sched.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_impl.h"

/* A forward waiting for its step. */
typedef struct pending {
    const eng_step_item *item;
    int rc;
    wk_error *err;
    bool served;
} pending;

struct eng_sched {
    eng_ctx *c;
    pthread_mutex_t lock;
    pthread_cond_t stepped; /* a step ran: the waiters look whether theirs was in it */
    int members;
    uint64_t next_ticket;   /* join order: the oldest prompt chunk goes first */
    pending *wait[ENG_MAX_SEQ];
    int n_wait;
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

void eng_sched_lock(eng_sched *s) { pthread_mutex_lock(&s->lock); }
void eng_sched_unlock(eng_sched *s) { pthread_mutex_unlock(&s->lock); }
int eng_sched_members(const eng_sched *s) { return s->members; }

/* One step over the waiting forwards: every decode, the oldest prompt chunk. */
static void run_step(eng_sched *s)
{
    eng_step_item items[ENG_MAX_SEQ] = {{0}};
    int who[ENG_MAX_SEQ], n = 0, prompt = -1;
    for (int i = 0; i < s->n_wait; i++) {
        const eng_step_item *it = s->wait[i]->item;
        if (!it->prefill) {
            who[n] = i;
            items[n++] = *it;
        } else if (prompt < 0 || it->seq->sched_ticket < s->wait[prompt]->item->seq->sched_ticket) {
            prompt = i;
        }
    }
    if (prompt >= 0) {
        who[n] = prompt;
        items[n++] = *s->wait[prompt]->item;
    }
    wk_error err = {0};
    int rc = eng_step(s->c, items, n, &err);
    for (int j = 0; j < n; j++) {
        pending *p = s->wait[who[j]];
        p->rc = rc;
        if (rc) *p->err = err;
        p->served = true;
    }
    int k = 0;
    for (int i = 0; i < s->n_wait; i++)
        if (!s->wait[i]->served) s->wait[k++] = s->wait[i];
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
    if (s->n_wait > 0 && s->n_wait == s->members) run_step(s);
}

int eng_sched_forward(eng_sched *s, const eng_step_item *item, wk_error *err)
{
    pending p = {item, 0, err, false};
    s->wait[s->n_wait++] = &p;
    if (s->n_wait == s->members) run_step(s);
    while (!p.served) pthread_cond_wait(&s->stepped, &s->lock);
    return p.rc;
}
