#include "server/monitor.h"

#include <string.h>

/* Generated into the build tree by cmake/embed_assets.cmake. */
struct wk_asset {
    const char *name;
    const unsigned char *data;
    size_t size;
};
extern const struct wk_asset wk_assets[];

static const char *mime_of(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (!dot) return "application/octet-stream";
    if (strcmp(dot, ".html") == 0) return "text/html; charset=utf-8";
    if (strcmp(dot, ".css") == 0) return "text/css; charset=utf-8";
    if (strcmp(dot, ".js") == 0) return "text/javascript; charset=utf-8";
    if (strcmp(dot, ".svg") == 0) return "image/svg+xml";
    if (strcmp(dot, ".png") == 0) return "image/png";
    if (strcmp(dot, ".json") == 0) return "application/json";
    return "application/octet-stream";
}

int srv_monitor_asset(const char *name, const unsigned char **data, size_t *size, const char **mime)
{
    if (!name || !*name || strstr(name, "..") || strchr(name, '/')) return -1;
    for (const struct wk_asset *a = wk_assets; a->name; a++) {
        if (strcmp(a->name, name) == 0) {
            *data = a->data;
            *size = a->size;
            *mime = mime_of(name);
            return 0;
        }
    }
    return -1;
}
