#include "util/portinfo.h"

#include "util/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int wk_port_probe(const char *host, int port, wk_error *err)
{
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    int g = getaddrinfo(host, ps, &hints, &ai);
    if (g) return wk_fail(err, WK_EINVAL, "host '%s' does not resolve: %s", host, gai_strerror(g));
    int rc = WK_OK;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0) {
            int e = errno;
            if (e == EADDRINUSE) rc = wk_fail(err, WK_EBUSY, "%s:%d is in use", host, port);
            else if (e == EADDRNOTAVAIL) rc = wk_fail(err, WK_EINVAL, "%s is not an address of this machine", host);
            else if (e == EACCES) rc = wk_fail(err, WK_EINVAL, "port %d needs privileges to listen on", port);
            else rc = wk_fail(err, WK_EINVAL, "cannot listen on %s:%d: %s", host, port, strerror(e));
        }
        close(fd);
        if (rc) break;
    }
    freeaddrinfo(ai);
    return rc;
}

uint64_t wk_proc_net_listen_inode(const char *text, int port)
{
    for (const char *p = text; p && *p;) {
        const char *nl = strchr(p, '\n');
        char local[64], st[8];
        unsigned long long inode = 0;
        /* sl: local rem st tx:rx tr:when retrnsmt uid timeout inode */
        if (sscanf(p, " %*[0-9]: %63s %*s %7s %*s %*s %*s %*s %*s %llu", local, st, &inode) == 3) {
            const char *colon = strrchr(local, ':');
            if (colon && !strcmp(st, "0A") && strtol(colon + 1, NULL, 16) == port && inode) return inode;
        }
        p = nl ? nl + 1 : NULL;
    }
    return 0;
}

#define PROC_TEXT_MAX ((size_t)64 << 20) /* /proc/net/tcp of a busy server: far below this */

static char *read_text(const char *path)
{
    size_t len;
    return wk_read_file(path, PROC_TEXT_MAX, &len, NULL);
}

/* The pid whose fd table holds socket:[inode], or 0. */
static int owner_of(uint64_t inode)
{
    DIR *proc = opendir("/proc");
    if (!proc) return 0;
    char want[48];
    snprintf(want, sizeof want, "socket:[%llu]", (unsigned long long)inode);
    int found = 0;
    struct dirent *d;
    while (!found && (d = readdir(proc))) {
        char *end;
        long pid = strtol(d->d_name, &end, 10);
        if (*end || pid <= 0) continue;
        char dir[64];
        snprintf(dir, sizeof dir, "/proc/%ld/fd", pid);
        DIR *fds = opendir(dir); /* other users' processes: EACCES, skipped */
        if (!fds) continue;
        struct dirent *f;
        while ((f = readdir(fds))) {
            char link[320], target[64];
            snprintf(link, sizeof link, "%s/%s", dir, f->d_name);
            ssize_t n = readlink(link, target, sizeof target - 1);
            if (n <= 0) continue;
            target[n] = '\0';
            if (!strcmp(target, want)) {
                found = (int)pid;
                break;
            }
        }
        closedir(fds);
    }
    closedir(proc);
    return found;
}

int wk_port_listener(int port, int *pid, char *comm, size_t cap)
{
    *pid = 0;
    if (cap) comm[0] = '\0';
    uint64_t inode = 0;
    int readable = 0;
    const char *tables[] = {"/proc/net/tcp", "/proc/net/tcp6"};
    for (int i = 0; i < 2 && !inode; i++) {
        char *t = read_text(tables[i]);
        if (!t) continue;
        readable = 1;
        inode = wk_proc_net_listen_inode(t, port);
        free(t);
    }
    if (!readable) return -1;
    if (!inode) return 0;
    *pid = owner_of(inode);
    if (*pid && cap) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/comm", *pid);
        char *c = read_text(path);
        if (c) {
            c[strcspn(c, "\n")] = '\0';
            snprintf(comm, cap, "%s", c);
            free(c);
        }
    }
    return 1;
}
