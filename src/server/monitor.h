/* The monitor page's static files, embedded at build time from web/monitor/
 * (cmake/embed_assets.cmake → wk_assets[]). The page polls
 * /monitor/api/state, which the HTTP layer serves from pl_service_state(). */
#ifndef WICK_SERVER_MONITOR_H
#define WICK_SERVER_MONITOR_H

#include <stddef.h>

/* Looks up an embedded file by name ("index.html", "monitor.js", ...).
 * Returns 0 and borrowed data/size/MIME type, or -1 if absent. */
int srv_monitor_asset(const char *name, const unsigned char **data, size_t *size, const char **mime);

#endif
