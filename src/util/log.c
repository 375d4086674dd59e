#include "util/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static enum wk_log_level g_level = WK_LOG_INFO;
static enum wk_log_format g_format = WK_LOG_TEXT;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *const g_tags[] = {"debug", "info", "warn", "error"};

void wk_log_set_level(enum wk_log_level level) { g_level = level; }
enum wk_log_level wk_log_get_level(void) { return g_level; }
void wk_log_set_format(enum wk_log_format format) { g_format = format; }
enum wk_log_format wk_log_get_format(void) { return g_format; }

int wk_log_format_parse(const char *name, enum wk_log_format *out)
{
    if (name && !strcmp(name, "text")) *out = WK_LOG_TEXT;
    else if (name && !strcmp(name, "json")) *out = WK_LOG_JSON;
    else return -1;
    return 0;
}

/* s as the body of a JSON string (quotes not included). */
static void put_json_string(FILE *f, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", f);
        else if (*p == '\r') fputs("\\r", f);
        else if (*p == '\t') fputs("\\t", f);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
}

/* Formats the whole line first and writes it with one call: stderr is
 * unbuffered, so piece-by-piece output would reach a reader (a log
 * collector, a test) as fragments of a line, and could interleave with
 * stderr writes made outside the lock. */
static void emit(enum wk_log_level level, const char *fields, const char *fmt, va_list ap)
{
    const char *tag = g_tags[level < 4 ? level : 3];
    char *line = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&line, &len);
    if (!m) return;
    if (g_format == WK_LOG_JSON) {
        char msg[4096];
        vsnprintf(msg, sizeof msg, fmt, ap);
        struct timeval tv;
        gettimeofday(&tv, NULL);
        struct tm tm;
        gmtime_r(&tv.tv_sec, &tm);
        char ts[32];
        strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
        fprintf(m, "{\"time\": \"%s.%03ldZ\", \"level\": \"%s\", \"msg\": \"", ts, (long)(tv.tv_usec / 1000), tag);
        put_json_string(m, msg);
        fputc('"', m);
        if (fields && *fields) fprintf(m, ", %s", fields);
        fputs("}\n", m);
    } else {
        fprintf(m, "wick: %s: ", tag);
        vfprintf(m, fmt, ap);
        fputc('\n', m);
    }
    if (fclose(m) == 0) {
        pthread_mutex_lock(&g_lock);
        fwrite(line, 1, len, stderr);
        pthread_mutex_unlock(&g_lock);
    }
    free(line);
}

void wk_log(enum wk_log_level level, const char *fmt, ...)
{
    if (level < g_level) return;
    va_list ap;
    va_start(ap, fmt);
    emit(level, NULL, fmt, ap);
    va_end(ap);
}

void wk_log_event(enum wk_log_level level, const char *fields_json, const char *fmt, ...)
{
    if (level < g_level) return;
    va_list ap;
    va_start(ap, fmt);
    emit(level, fields_json, fmt, ap);
    va_end(ap);
}
