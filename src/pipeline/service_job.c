/* Jobs: one request's reference-counted event channel between the engine
 * thread (writer) and an HTTP thread (reader). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pipeline/service_internal.h"

pl_job *svc_job_new(void)
{
    pl_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    atomic_init(&j->refs, 1);
    atomic_init(&j->cancel, false);
    pthread_mutex_init(&j->lock, NULL);
    pthread_cond_init(&j->cond, NULL);
    return j;
}

void svc_job_ref(pl_job *j) { atomic_fetch_add(&j->refs, 1); }

void pl_job_release(pl_job *j)
{
    if (!j || atomic_fetch_sub(&j->refs, 1) != 1) return;
    for (int i = 0; i < j->ev_len; i++) eng_event_clear(&j->events[(j->ev_head + i) % j->ev_cap]);
    free(j->events);
    eng_request_clear(&j->req);
    pthread_mutex_destroy(&j->lock);
    pthread_cond_destroy(&j->cond);
    free(j);
}

void svc_job_push(pl_job *j, eng_event *ev)
{
    pthread_mutex_lock(&j->lock);
    if (j->final_queued) {
        pthread_mutex_unlock(&j->lock);
        eng_event_clear(ev);
        return;
    }
    /* One slot always stays free for the final event, so it can never be
     * lost to a failed allocation (a delta may be). */
    bool is_final = ev->type == ENG_EV_DONE || ev->type == ENG_EV_ERROR;
    if (j->ev_len + (is_final ? 0 : 1) >= j->ev_cap) {
        int cap = j->ev_cap ? j->ev_cap * 2 : 16;
        eng_event *ne = malloc((size_t)cap * sizeof *ne);
        if (!ne && !(is_final && j->ev_len < j->ev_cap)) {
            pthread_mutex_unlock(&j->lock);
            eng_event_clear(ev);
            return;
        }
        if (ne) {
            for (int i = 0; i < j->ev_len; i++) ne[i] = j->events[(j->ev_head + i) % j->ev_cap];
            free(j->events);
            j->events = ne;
            j->ev_head = 0;
            j->ev_cap = cap;
        }
    }
    j->events[(j->ev_head + j->ev_len) % j->ev_cap] = *ev;
    j->ev_len++;
    if (is_final) j->final_queued = true;
    memset(ev, 0, sizeof *ev);
    pthread_cond_broadcast(&j->cond);
    pthread_mutex_unlock(&j->lock);
}

void svc_job_fail(pl_job *j, int http_status, const char *type, const char *fmt, ...)
{
    eng_event ev = {0};
    ev.type = ENG_EV_ERROR;
    ev.http_status = http_status;
    snprintf(ev.error_type, sizeof ev.error_type, "%s", type ? type : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ev.message, sizeof ev.message, fmt, ap);
    va_end(ap);
    svc_job_push(j, &ev);
}

int pl_job_next_event(pl_job *j, int timeout_ms, eng_event *ev)
{
    pthread_mutex_lock(&j->lock);
    if (j->ev_len == 0 && !j->final_delivered && timeout_ms > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        while (j->ev_len == 0 && !j->final_delivered)
            if (pthread_cond_timedwait(&j->cond, &j->lock, &ts) != 0) break;
    }
    int rc;
    if (j->ev_len > 0) {
        *ev = j->events[j->ev_head];
        j->ev_head = (j->ev_head + 1) % j->ev_cap;
        j->ev_len--;
        if (ev->type == ENG_EV_DONE || ev->type == ENG_EV_ERROR) j->final_delivered = true;
        rc = 1;
    } else {
        rc = j->final_delivered ? -1 : 0;
    }
    pthread_mutex_unlock(&j->lock);
    return rc;
}

void pl_job_cancel(pl_job *j)
{
    if (j) atomic_store(&j->cancel, true);
}
