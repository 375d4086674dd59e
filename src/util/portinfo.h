/* Whether a TCP port is free to listen on, and who holds it when it is not
 * (as far as /proc tells: sockets of other users' processes are visible in
 * /proc/net/tcp, their owners often are not). Looks only; never touches the
 * holder. */
#ifndef WICK_UTIL_PORTINFO_H
#define WICK_UTIL_PORTINFO_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* 0 when host:port can be bound now (tried with SO_REUSEADDR, so a socket
 * in TIME_WAIT does not count as taken), WK_EBUSY when something listens
 * there, WK_EINVAL when host does not resolve or is not an address of this
 * machine; err says which. */
int wk_port_probe(const char *host, int port, wk_error *err);

/* The process listening on TCP port (IPv4 or IPv6, any address): 1 and its
 * pid and command name (pid 0 and comm "" when the socket is visible but its
 * owner is not), 0 when /proc shows no listener, -1 without /proc. */
int wk_port_listener(int port, int *pid, char *comm, size_t cap);

/* The socket inode of a LISTEN entry for port in /proc/net/tcp(6) text, or 0. */
uint64_t wk_proc_net_listen_inode(const char *text, int port);

#endif
