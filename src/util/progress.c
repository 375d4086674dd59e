#include "util/progress.h"

#include <string.h>
#include <unistd.h>

#include "util/timeutil.h"
#include "util/units.h"

#define TTY_REDRAW_MS 100.0  /* 10 redraws a second look live and cost nothing */
#define LOG_LINE_MS 5000.0   /* logs get a line every 5 s: readable, not flooded */
#define BAR_WIDTH 24

static void format_eta(char *buf, size_t cap, double s)
{
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, cap, "%ld:%02ld", t / 60, t % 60);
}

void wk_progress_format(char *buf, size_t cap, const char *label, uint64_t done, uint64_t total,
                        double bytes_per_s, double eta_s, int bar_width)
{
    char d[32], t[32], sp[32], eta[32] = "";
    size_t n = (size_t)snprintf(buf, cap, "%s", label);
    if (total && bar_width > 0 && n < cap) {
        int fill = done >= total ? bar_width : (int)((double)done / (double)total * bar_width);
        n += (size_t)snprintf(buf + n, cap - n, " [");
        for (int i = 0; i < bar_width && n + 1 < cap; i++) buf[n++] = i < fill ? '#' : '-';
        if (n < cap) n += (size_t)snprintf(buf + n, cap - n, "]");
    }
    if (n >= cap) return;
    if (total) {
        double pct = done >= total ? 100.0 : 100.0 * (double)done / (double)total;
        n += (size_t)snprintf(buf + n, cap - n, " %3.0f%% %s / %s", pct, wk_format_bytes(d, sizeof d, done),
                              wk_format_bytes(t, sizeof t, total));
    } else {
        n += (size_t)snprintf(buf + n, cap - n, " %s", wk_format_bytes(d, sizeof d, done));
    }
    if (n >= cap) return;
    if (bytes_per_s > 0) {
        wk_format_bytes(sp, sizeof sp, (uint64_t)bytes_per_s);
        n += (size_t)snprintf(buf + n, cap - n, "  %s/s", sp);
    }
    if (n < cap && total && eta_s >= 0 && done < total) {
        format_eta(eta, sizeof eta, eta_s);
        snprintf(buf + n, cap - n, "  ETA %s", eta);
    }
}

void wk_progress_begin(wk_progress *p, FILE *out, const char *label, uint64_t total, uint64_t start)
{
    memset(p, 0, sizeof *p);
    p->out = out;
    snprintf(p->label, sizeof p->label, "%s", label);
    p->total = total;
    p->start = p->done = start;
    p->t0_ms = p->last_ms = wk_now_ms();
    p->tty = out && isatty(fileno(out));
}

static double speed(const wk_progress *p, double now)
{
    double s = (now - p->t0_ms) / 1e3;
    return s > 0 && p->done > p->start ? (double)(p->done - p->start) / s : 0.0;
}

static void draw(wk_progress *p, double now, const char *status)
{
    char line[256];
    double bps = speed(p, now);
    double eta = bps > 0 && p->total > p->done ? (double)(p->total - p->done) / bps : -1;
    wk_progress_format(line, sizeof line, p->label, p->done, p->total, bps, status ? -1 : eta, p->tty ? BAR_WIDTH : 0);
    if (p->tty) fprintf(p->out, "\r%s%s\033[K%s", line, status ? "  " : "", status ? status : "");
    else fprintf(p->out, "%s%s%s\n", line, status ? "  " : "", status ? status : "");
    if (status && p->tty) fputc('\n', p->out);
    fflush(p->out);
    p->drawn = p->tty && !status;
}

void wk_progress_update(wk_progress *p, uint64_t done)
{
    p->done = done;
    if (!p->out) return;
    double now = wk_now_ms();
    if (now - p->last_ms < (p->tty ? TTY_REDRAW_MS : LOG_LINE_MS)) return;
    p->last_ms = now;
    draw(p, now, NULL);
}

void wk_progress_end(wk_progress *p, const char *status)
{
    if (!p->out) return;
    draw(p, wk_now_ms(), status ? status : "done");
}

void wk_progress_callback(void *user, uint64_t done, uint64_t total)
{
    wk_progress *p = user;
    p->total = total;
    wk_progress_update(p, done);
}
