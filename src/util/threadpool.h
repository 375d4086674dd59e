/* Persistent thread pool for data-parallel loops.
 *
 * The calling thread takes part as worker 0, so a pool of n threads starts
 * n-1 OS threads. Workers spin briefly after each job (decode steps are short
 * and back to back) and then sleep on a condition variable. */
#ifndef WICK_UTIL_THREADPOOL_H
#define WICK_UTIL_THREADPOOL_H

typedef struct wk_pool wk_pool;

/* Job body: called once per worker with its index in [0, n_workers). The body
 * splits the work itself (see wk_split). */
typedef void (*wk_pool_fn)(void *ctx, int worker, int n_workers);

/* n_threads <= 0 means "physical cores". Returns NULL on failure. */
wk_pool *wk_pool_new(int n_threads);
void wk_pool_free(wk_pool *pool);
int wk_pool_size(const wk_pool *pool);

/* Runs fn on every worker and returns when all are done. Not reentrant: a job
 * body must not call wk_pool_run on the same pool. pool may be NULL (runs fn
 * once on the caller as worker 0 of 1). */
void wk_pool_run(wk_pool *pool, wk_pool_fn fn, void *ctx);

/* Splits [0, n) into n_parts near-equal ranges; writes part's [begin, end). */
static inline void wk_split(long n, int part, int n_parts, long *begin, long *end)
{
    long base = n / n_parts, rem = n % n_parts;
    *begin = part * base + (part < rem ? part : rem);
    *end = *begin + base + (part < rem ? 1 : 0);
}

/* Number of physical cores (falls back to online CPUs). */
int wk_physical_cores(void);

#endif
