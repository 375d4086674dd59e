#include "util/sha256.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

static void to_hex(const unsigned char *d, unsigned n, char *out)
{
    static const char hexd[] = "0123456789abcdef";
    for (unsigned i = 0; i < n; i++) {
        out[2 * i] = hexd[d[i] >> 4];
        out[2 * i + 1] = hexd[d[i] & 15];
    }
    out[2 * n] = '\0';
}

void wk_sha256_hex(const void *data, size_t len, char out_hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    EVP_Digest(data, len, md, &n, EVP_sha256(), NULL);
    to_hex(md, n, out_hex);
}

int wk_sha256_file(const char *path, char out_hex[65], wk_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) return wk_fail(err, WK_EIO, "%s: cannot open: %s", path, strerror(errno));
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx) {
        fclose(f);
        return wk_fail(err, WK_ENOMEM, "sha256: out of memory");
    }
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    unsigned char buf[1 << 14];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) EVP_DigestUpdate(ctx, buf, n);
    int bad = ferror(f);
    fclose(f);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    EVP_DigestFinal_ex(ctx, md, &mdlen);
    EVP_MD_CTX_free(ctx);
    if (bad) return wk_fail(err, WK_EIO, "%s: read error", path);
    to_hex(md, mdlen, out_hex);
    return WK_OK;
}
