/* A progress bar for long byte streams (hashing, downloads, quantizing):
 * label, bar, percent, bytes done of total, speed and ETA. On a terminal the
 * line is redrawn in place at most 10 times a second; otherwise (logs, CI)
 * one line is written every 5 seconds and at the end. Output goes where the
 * caller says (stderr: stdout stays for results). */
#ifndef WICK_UTIL_PROGRESS_H
#define WICK_UTIL_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct wk_progress {
    FILE *out;          /* NULL: silent */
    char label[96];
    uint64_t total;     /* 0: unknown */
    uint64_t start;     /* bytes already done at begin (a resumed download): not in the speed */
    uint64_t done;
    double t0_ms, last_ms;
    bool tty;
    bool drawn;         /* a tty line is on screen */
} wk_progress;

void wk_progress_begin(wk_progress *p, FILE *out, const char *label, uint64_t total, uint64_t start);
/* done: bytes done so far (absolute, start included). */
void wk_progress_update(wk_progress *p, uint64_t done);
/* Final line with a status word ("ok", "failed", "reused") and the average speed. */
void wk_progress_end(wk_progress *p, const char *status);

/* A callback for byte counters (wk_sha256_progress_fn and the like): user is
 * a begun wk_progress; sets its total (known once the work starts) and updates. */
void wk_progress_callback(void *user, uint64_t done, uint64_t total);

/* The line itself, for tests and custom sinks: "label [####----]  45%
 * 1.20 GiB / 2.65 GiB  312.0 MiB/s  ETA 0:04" (bar_width 0: no bar; total
 * 0: no percent, bar or ETA; eta_s < 0: no ETA). */
void wk_progress_format(char *buf, size_t cap, const char *label, uint64_t done, uint64_t total,
                        double bytes_per_s, double eta_s, int bar_width);

#endif
