#include "util/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

static enum wk_log_level g_level = WK_LOG_INFO;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

void wk_log_set_level(enum wk_log_level level) { g_level = level; }
enum wk_log_level wk_log_get_level(void) { return g_level; }

void wk_log(enum wk_log_level level, const char *fmt, ...)
{
    if (level < g_level) return;
    static const char *tags[] = {"debug", "info", "warn", "error"};
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&g_lock);
    fprintf(stderr, "wick: %s: ", tags[level < 4 ? level : 3]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    pthread_mutex_unlock(&g_lock);
    va_end(ap);
}
