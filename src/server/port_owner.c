#include "server/port_owner.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Inode of a socket listening on port (TCP state 0A = LISTEN), 0 if none. */
static unsigned long listen_inode(const char *table, int port)
{
    FILE *f = fopen(table, "r");
    if (!f) return 0;
    char line[512];
    unsigned long found = 0;
    if (!fgets(line, sizeof line, f)) line[0] = '\0'; /* header */
    while (!found && fgets(line, sizeof line, f)) {
        char local[128], remote[128];
        unsigned state;
        unsigned long inode;
        /* sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode */
        if (sscanf(line, " %*s %127s %127s %x %*s %*s %*s %*s %*s %lu", local, remote, &state, &inode) != 4) continue;
        const char *colon = strrchr(local, ':');
        if (!colon || state != 0x0A) continue;
        if ((int)strtol(colon + 1, NULL, 16) == port) found = inode;
    }
    fclose(f);
    return found;
}

/* The command line of pid, NULs turned into spaces. */
static void cmdline(long pid, char *out, size_t cap)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
    FILE *f = fopen(path, "r");
    out[0] = '\0';
    if (!f) return;
    size_t n = fread(out, 1, cap - 1, f);
    fclose(f);
    while (n > 0 && out[n - 1] == '\0') n--;
    for (size_t i = 0; i < n; i++)
        if (out[i] == '\0') out[i] = ' ';
    out[n] = '\0';
}

static long pid_with_socket(unsigned long inode)
{
    char want[64];
    snprintf(want, sizeof want, "socket:[%lu]", inode);
    DIR *proc = opendir("/proc");
    if (!proc) return -1;
    long found = -1;
    struct dirent *d;
    while (found < 0 && (d = readdir(proc))) {
        char *end;
        long pid = strtol(d->d_name, &end, 10);
        if (*end || pid <= 0) continue;
        char dir[64];
        snprintf(dir, sizeof dir, "/proc/%ld/fd", pid);
        DIR *fds = opendir(dir);
        if (!fds) continue; /* another user's process */
        struct dirent *fd;
        while (found < 0 && (fd = readdir(fds))) {
            char link[320], target[128];
            snprintf(link, sizeof link, "%s/%s", dir, fd->d_name);
            ssize_t n = readlink(link, target, sizeof target - 1);
            if (n <= 0) continue;
            target[n] = '\0';
            if (!strcmp(target, want)) found = pid;
        }
        closedir(fds);
    }
    closedir(proc);
    return found;
}

int srv_port_owner(int port, char *out, size_t cap)
{
    out[0] = '\0';
    unsigned long inode = listen_inode("/proc/net/tcp", port);
    if (!inode) inode = listen_inode("/proc/net/tcp6", port);
    if (!inode) return -1;
    long pid = pid_with_socket(inode);
    if (pid < 0) return -1;
    char cmd[256];
    cmdline(pid, cmd, sizeof cmd);
    snprintf(out, cap, "process %ld%s%s%s", pid, cmd[0] ? " (" : "", cmd, cmd[0] ? ")" : "");
    return 0;
}
