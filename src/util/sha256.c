#include "util/sha256.h"

#include "util/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct wk_sha256 {
    EVP_MD_CTX *ctx;
};

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

wk_sha256 *wk_sha256_new(void)
{
    wk_sha256 *h = malloc(sizeof *h);
    if (!h) return NULL;
    h->ctx = EVP_MD_CTX_new();
    if (!h->ctx || !EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL)) {
        EVP_MD_CTX_free(h->ctx);
        free(h);
        return NULL;
    }
    return h;
}

void wk_sha256_update(wk_sha256 *h, const void *data, size_t n) { EVP_DigestUpdate(h->ctx, data, n); }

void wk_sha256_final(wk_sha256 *h, char out_hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    EVP_DigestFinal_ex(h->ctx, md, &n);
    to_hex(md, n, out_hex);
    wk_sha256_free(h);
}

void wk_sha256_free(wk_sha256 *h)
{
    if (!h) return;
    EVP_MD_CTX_free(h->ctx);
    free(h);
}

static void chunk_update(void *user, const void *data, size_t n) { wk_sha256_update(user, data, n); }

int wk_sha256_update_fd(wk_sha256 *h, int fd, uint64_t bytes, const char *what, wk_sha256_progress_fn fn,
                        void *user, wk_error *err)
{
    return wk_read_chunks(fd, bytes, what, chunk_update, h, fn, user, err);
}

int wk_sha256_file_progress(const char *path, char out_hex[65], wk_sha256_progress_fn fn, void *user,
                            wk_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return wk_fail(err, WK_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return wk_fail(err, WK_EIO, "%s: not a regular file", path);
    }
    wk_sha256 *h = wk_sha256_new();
    if (!h) {
        close(fd);
        return wk_fail(err, WK_ENOMEM, "sha256: out of memory");
    }
    int rc = wk_sha256_update_fd(h, fd, (uint64_t)st.st_size, path, fn, user, err);
    close(fd);
    if (rc) {
        wk_sha256_free(h);
        return rc;
    }
    wk_sha256_final(h, out_hex);
    return WK_OK;
}

int wk_sha256_file(const char *path, char out_hex[65], wk_error *err)
{
    return wk_sha256_file_progress(path, out_hex, NULL, NULL, err);
}
