/* Log sink: one global level + format + writer (allowed globals, see
 * STYLE.md). Text lines read "wick: LEVEL: message"; in JSON format every
 * line is one JSON object {"time", "level", "msg"} (plus the fields of a
 * structured event, see wk_log_event), for log collectors. */
#ifndef WICK_UTIL_LOG_H
#define WICK_UTIL_LOG_H

enum wk_log_level { WK_LOG_DEBUG = 0, WK_LOG_INFO = 1, WK_LOG_WARN = 2, WK_LOG_ERROR = 3, WK_LOG_OFF = 4 };
enum wk_log_format { WK_LOG_TEXT = 0, WK_LOG_JSON = 1 };

void wk_log_set_level(enum wk_log_level level);
enum wk_log_level wk_log_get_level(void);
void wk_log_set_format(enum wk_log_format format);
enum wk_log_format wk_log_get_format(void);
/* "text" / "json" → *out; -1 for another name. */
int wk_log_format_parse(const char *name, enum wk_log_format *out);

void wk_log(enum wk_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A structured event: in text format the message (fmt ...) is printed as by
 * wk_log; in JSON format the line is the object {"time", "level", "msg",
 * FIELDS}, where fields_json is the inside of a JSON object without its
 * braces ("\"status\": 200, \"route\": \"chat\"", may be NULL or ""). */
void wk_log_event(enum wk_log_level level, const char *fields_json, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define WK_DEBUG(...) wk_log(WK_LOG_DEBUG, __VA_ARGS__)
#define WK_INFO(...) wk_log(WK_LOG_INFO, __VA_ARGS__)
#define WK_WARN(...) wk_log(WK_LOG_WARN, __VA_ARGS__)
#define WK_ERROR(...) wk_log(WK_LOG_ERROR, __VA_ARGS__)

#endif
