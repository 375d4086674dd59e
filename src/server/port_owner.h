/* Who holds a TCP port: for the "port in use" error, read from Linux's
 * /proc (the listening socket's inode in /proc/net/tcp{,6}, then the process
 * whose /proc/PID/fd links to it). Only processes this user may inspect are
 * found; nothing is ever signalled. */
#ifndef WICK_SERVER_PORT_OWNER_H
#define WICK_SERVER_PORT_OWNER_H

#include <stddef.h>

/* Writes "process 1234 (wick serve --port 8008)" into out and returns 0, or
 * returns -1 (out = "") when /proc does not tell. */
int srv_port_owner(int port, char *out, size_t cap);

#endif
