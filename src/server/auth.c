#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "server/server.h"
#include "util/sha256.h"

/* Comparing SHA-256 digests makes the time independent of both the length
 * and the content of the presented key. */
bool srv_auth_ok(const char *value, const char *expected)
{
    if (!value || !expected || !*expected) return false;
    while (*value == ' ') value++;
    if (strncasecmp(value, "Bearer ", 7) == 0) {
        value += 7;
        while (*value == ' ') value++;
    }
    size_t n = strlen(value);
    while (n > 0 && (value[n - 1] == ' ' || value[n - 1] == '\t')) n--;
    char a[65], b[65];
    wk_sha256_hex(value, n, a);
    wk_sha256_hex(expected, strlen(expected), b);
    volatile unsigned char diff = 0;
    for (int i = 0; i < 64; i++) diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

bool srv_host_is_loopback(const char *host)
{
    if (!host) return false;
    if (strcasecmp(host, "localhost") == 0 || strcmp(host, "::1") == 0 || strcmp(host, "[::1]") == 0) return true;
    struct in_addr a;
    if (inet_pton(AF_INET, host, &a) == 1) return (ntohl(a.s_addr) >> 24) == 127;
    return false;
}
