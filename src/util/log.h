/* Log sink: one global level + writer (allowed global, see STYLE.md). */
#ifndef WICK_UTIL_LOG_H
#define WICK_UTIL_LOG_H

enum wk_log_level { WK_LOG_DEBUG = 0, WK_LOG_INFO = 1, WK_LOG_WARN = 2, WK_LOG_ERROR = 3, WK_LOG_OFF = 4 };

void wk_log_set_level(enum wk_log_level level);
enum wk_log_level wk_log_get_level(void);
void wk_log(enum wk_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define WK_DEBUG(...) wk_log(WK_LOG_DEBUG, __VA_ARGS__)
#define WK_INFO(...) wk_log(WK_LOG_INFO, __VA_ARGS__)
#define WK_WARN(...) wk_log(WK_LOG_WARN, __VA_ARGS__)
#define WK_ERROR(...) wk_log(WK_LOG_ERROR, __VA_ARGS__)

#endif
