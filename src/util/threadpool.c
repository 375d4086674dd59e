#include "util/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__APPLE__)
#include <sys/sysctl.h>
#endif

/* Waiting is staged: PAUSE_POLLS polls with the pause instruction (bridges the
 * microseconds between consecutive ops of one forward pass), then polls that
 * yield the core (when the machine is oversubscribed the thread we wait for
 * may need this core to run at all), then sleep on a condition variable after
 * SPIN_POLLS so an idle server burns nothing. */
#define PAUSE_POLLS 2000
#define SPIN_POLLS 20000

static inline void spin_wait(int polls)
{
    if (polls < PAUSE_POLLS) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ volatile("yield");
#endif
    } else {
        sched_yield();
    }
}

struct wk_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_cond_t done_cv;
    wk_pool_fn fn;
    void *ctx;
    atomic_uint generation; /* bumped per job */
    atomic_int remaining;   /* workers (excluding caller) still running the job */
    atomic_int sleepers;
    int stop;
};

typedef struct {
    wk_pool *pool;
    int index;
} worker_arg;

static void *worker_main(void *p)
{
    worker_arg *arg = p;
    wk_pool *pool = arg->pool;
    int index = arg->index;
    free(arg);
    unsigned seen = 0;
    for (;;) {
        unsigned gen;
        int spins = 0;
        while ((gen = atomic_load_explicit(&pool->generation, memory_order_acquire)) == seen) {
            if (++spins < SPIN_POLLS) {
                spin_wait(spins);
                continue;
            }
            pthread_mutex_lock(&pool->lock);
            atomic_fetch_add(&pool->sleepers, 1);
            while (atomic_load(&pool->generation) == seen && !pool->stop)
                pthread_cond_wait(&pool->wake, &pool->lock);
            atomic_fetch_sub(&pool->sleepers, 1);
            int stop = pool->stop;
            pthread_mutex_unlock(&pool->lock);
            if (stop) return NULL;
            spins = 0;
        }
        seen = gen;
        if (pool->stop) return NULL;
        pool->fn(pool->ctx, index, pool->n);
        if (atomic_fetch_sub_explicit(&pool->remaining, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&pool->lock);
            pthread_cond_signal(&pool->done_cv);
            pthread_mutex_unlock(&pool->lock);
        }
    }
}

#if defined(__linux__)
/* Distinct (physical id, core id) pairs of /proc/cpuinfo; 0 when the file
 * lists none (e.g. on Arm, whose cpuinfo has no such lines). */
static int cores_from_cpuinfo(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return 0;
    char line[256];
    int phys = -1, seen_pairs = 0;
    int pairs[1024][2];
    while (fgets(line, sizeof line, f)) {
        int v;
        if (sscanf(line, "physical id : %d", &v) == 1) phys = v;
        else if (sscanf(line, "core id : %d", &v) == 1) {
            int dup = 0;
            for (int i = 0; i < seen_pairs; i++)
                if (pairs[i][0] == phys && pairs[i][1] == v) dup = 1;
            if (!dup && seen_pairs < 1024) {
                pairs[seen_pairs][0] = phys;
                pairs[seen_pairs][1] = v;
                seen_pairs++;
            }
        }
    }
    fclose(f);
    return seen_pairs;
}
#elif defined(__APPLE__)
/* The performance cores (Apple silicon: perflevel0), else all physical ones. */
static int cores_from_sysctl(void)
{
    int v = 0;
    size_t len = sizeof v;
    if (sysctlbyname("hw.perflevel0.physicalcpu", &v, &len, NULL, 0) == 0 && v > 0) return v;
    len = sizeof v;
    if (sysctlbyname("hw.physicalcpu", &v, &len, NULL, 0) == 0 && v > 0) return v;
    return 0;
}
#endif

int wk_physical_cores(void)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (online < 1) online = 1;
    int cores = 0;
#if defined(__linux__)
    cores = cores_from_cpuinfo();
#elif defined(__APPLE__)
    cores = cores_from_sysctl();
#endif
    if (cores < 1 || cores > online) return (int)online;
    return cores;
}

wk_pool *wk_pool_new(int n_threads)
{
    if (n_threads <= 0) n_threads = wk_physical_cores();
    wk_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pool->n = n_threads;
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->done_cv, NULL);
    pool->threads = calloc((size_t)n_threads, sizeof *pool->threads);
    if (!pool->threads) {
        free(pool);
        return NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *arg = malloc(sizeof *arg);
        if (!arg) goto fail;
        arg->pool = pool;
        arg->index = i;
        if (pthread_create(&pool->threads[i], NULL, worker_main, arg) != 0) {
            free(arg);
            goto fail;
        }
        continue;
    fail:
        pool->n = i; /* only threads 1..i-1 exist */
        wk_pool_free(pool);
        return NULL;
    }
    return pool;
}

void wk_pool_free(wk_pool *pool)
{
    if (!pool) return;
    pthread_mutex_lock(&pool->lock);
    pool->stop = 1;
    atomic_fetch_add(&pool->generation, 1);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    for (int i = 1; i < pool->n; i++) pthread_join(pool->threads[i], NULL);
    pthread_mutex_destroy(&pool->lock);
    pthread_cond_destroy(&pool->wake);
    pthread_cond_destroy(&pool->done_cv);
    free(pool->threads);
    free(pool);
}

int wk_pool_size(const wk_pool *pool) { return pool ? pool->n : 1; }

void wk_pool_run(wk_pool *pool, wk_pool_fn fn, void *ctx)
{
    if (!pool || pool->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    atomic_store(&pool->remaining, pool->n - 1);
    atomic_fetch_add(&pool->generation, 1); /* seq_cst: pairs with the sleeper check */
    if (atomic_load(&pool->sleepers) > 0) {
        pthread_mutex_lock(&pool->lock);
        pthread_cond_broadcast(&pool->wake);
        pthread_mutex_unlock(&pool->lock);
    }
    fn(ctx, 0, pool->n);
    int spins = 0;
    while (atomic_load_explicit(&pool->remaining, memory_order_acquire) > 0) {
        if (++spins < SPIN_POLLS) {
            spin_wait(spins);
            continue;
        }
        pthread_mutex_lock(&pool->lock);
        while (atomic_load(&pool->remaining) > 0) pthread_cond_wait(&pool->done_cv, &pool->lock);
        pthread_mutex_unlock(&pool->lock);
    }
}
