/* matmul_bench: GFLOP/s and weight GB/s of cpu_matmul per weight type, for a
 * decode shape (N = 1) and a prefill shape (N = 512).
 *
 *   matmul_bench [-t threads] [-m M] [-k K] [-n N_prefill] [-r seconds]
 *                [-T q8_0,q4_k,...] [--plain] [--as-one]
 *
 * Weights are random, quantized with qt_quantize_row; by default each weight
 * is prepared with cpu_weight_prepare (what the model loader does); --plain
 * measures the unprepared view; --as-one passes CPU_MM_ROWS_AS_ONE (N rows through the
 * decode kernels, as batched decode and verification do). Each measurement repeats the call for about
 * -r seconds (default 1.0) after one warm-up call and reports the fastest
 * and the median call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/matmul.h"
#include "quant/quant.h"
#include "util/cpu.h"
#include "util/threadpool.h"

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }

static uint32_t lcg(uint32_t *s) { return *s = *s * 1664525u + 1013904223u; }

static float rnd(uint32_t *s) { return ((float)(lcg(s) >> 8) / 16777216.0f - 0.5f) * 3.4f; }

/* Fastest wall time of one call over about `seconds` of repeats (the
 * minimum is what the code can do; on a shared machine most calls are
 * slowed by other processes). *median gets the median. */
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static unsigned g_flags; /* --as-one: CPU_MM_ROWS_AS_ONE (the decode kernels for every N) */

static double time_calls(wk_pool *pool, const cpu_weight *w, const float *x, int64_t n, float *y,
                         cpu_scratch *scratch, double seconds, double *median)
{
    wk_error err = {0};
    if (cpu_matmul_ex(pool, w, x, w->cols, n, y, w->rows, scratch, g_flags, &err)) {
        fprintf(stderr, "matmul failed: %s\n", err.msg);
        exit(1);
    }
    enum { MAX_REPS = 100000 };
    static double times[MAX_REPS];
    int reps = 0;
    double t0 = now_s(), t = t0;
    while ((t - t0 < seconds || reps < 5) && reps < MAX_REPS) {
        double a = now_s();
        cpu_matmul_ex(pool, w, x, w->cols, n, y, w->rows, scratch, g_flags, &err);
        t = now_s();
        times[reps++] = t - a;
    }
    qsort(times, (size_t)reps, sizeof times[0], cmp_double);
    *median = times[reps / 2];
    return times[0];
}

int main(int argc, char **argv)
{
    int threads = 2, plain = 0;
    int64_t m = 3072, k = 1024, n_prefill = 512;
    double seconds = 1.0;
    const char *types = "q8_0,q4_0,iq4_nl,q4_k,q5_k,q6_k";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-m") && i + 1 < argc) m = atoll(argv[++i]);
        else if (!strcmp(argv[i], "-k") && i + 1 < argc) k = atoll(argv[++i]);
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) n_prefill = atoll(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "-T") && i + 1 < argc) types = argv[++i];
        else if (!strcmp(argv[i], "--plain")) plain = 1;
        else if (!strcmp(argv[i], "--as-one")) g_flags = CPU_MM_ROWS_AS_ONE;
        else {
            fprintf(stderr, "usage: %s [-t threads] [-m M] [-k K] [-n N] [-r seconds] [-T types] [--plain] [--as-one]\n",
                    argv[0]);
            return 2;
        }
    }
    wk_pool *pool = wk_pool_new(threads);
    printf("matmul_bench: M=%lld K=%lld threads=%d isa=%s %s\n", (long long)m, (long long)k, threads,
           wk_cpu_level_name(), plain ? "plain" : "prepared");
    printf("# best / median wall ms per call; GB/s (weight bytes) and GFLOP/s from the best\n");
    printf("%-7s | %5s %8s %8s %7s | %5s %8s %8s %8s\n", "type", "N", "best", "median", "GB/s", "N", "best",
           "median", "GFLOP/s");

    uint32_t seed = 1;
    float *src = malloc((size_t)(m * k) * sizeof(float));
    for (int64_t i = 0; i < m * k; i++) src[i] = rnd(&seed);
    float *x = malloc((size_t)(n_prefill * k) * sizeof(float));
    for (int64_t i = 0; i < n_prefill * k; i++) x[i] = rnd(&seed);
    float *y = malloc((size_t)(n_prefill * m) * sizeof(float));
    cpu_scratch scratch = {0};

    char list[256];
    snprintf(list, sizeof list, "%s", types);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int type = qt_type_from_name(tok);
        const qt_traits *tr = type >= 0 ? qt_traits_of((uint32_t)type) : NULL;
        if (!tr || !tr->weight_ok || k % tr->block_elems) {
            fprintf(stderr, "skipping %s\n", tok);
            continue;
        }
        size_t row_bytes = qt_row_bytes(tr, k);
        uint8_t *wbuf = malloc(row_bytes * (size_t)m);
        for (int64_t r = 0; r < m; r++) qt_quantize_row((enum qt_type)type, src + r * k, wbuf + r * row_bytes, k);
        cpu_weight w = cpu_weight_view((enum qt_type)type, wbuf, m, k, row_bytes);
        wk_error err = {0};
        if (!plain && cpu_weight_prepare(&w, &err)) {
            fprintf(stderr, "prepare %s: %s\n", tr->name, err.msg);
            return 1;
        }
        double md, mp;
        double td = time_calls(pool, &w, x, 1, y, &scratch, seconds, &md);
        double tp = time_calls(pool, &w, x, n_prefill, y, &scratch, seconds, &mp);
        double flop_p = 2.0 * (double)m * (double)k * (double)n_prefill;
        printf("%-7s | %5d %8.3f %8.3f %7.2f | %5lld %8.3f %8.3f %8.1f\n", tr->name, 1, td * 1e3, md * 1e3,
               (double)(row_bytes * (size_t)m) / td * 1e-9, (long long)n_prefill, tp * 1e3, mp * 1e3,
               flop_p / tp * 1e-9);
        fflush(stdout);
        cpu_weight_release(&w);
        free(wbuf);
    }
    cpu_scratch_free(&scratch);
    free(src);
    free(x);
    free(y);
    wk_pool_free(pool);
    return 0;
}
