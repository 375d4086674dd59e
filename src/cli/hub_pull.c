/* Hugging Face hub downloads (hub_pull.h), with libcurl. */
#include "cli/hub_pull.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/fileio.h"
#include "util/progress.h"
#include "util/sha256.h"
#include "util/sha256sums.h"
#include "util/units.h"

#ifdef WICK_HAVE_CURL
#include <curl/curl.h>
#include <openssl/evp.h>

#define LISTING_MAX_BYTES ((size_t)64 << 20) /* a repo listing of ~100k files; more is not a listing */
#define ERROR_BODY_MAX 512                    /* what we keep of an error response for the message */
#define COPY_CHUNK ((size_t)8 << 20) /* --model-dir copies across file systems in 8 MiB pieces */

typedef struct hub_file {
    char *name;          /* rfilename, validated relative path */
    uint64_t size;
    char sha256[65];     /* LFS files: the content's SHA-256 from the hub, else "" */
    char blob_sha1[41];  /* non-LFS files: git blob id, else "" */
    bool selected;
} hub_file;

/* ---- small helpers ---------------------------------------------------------------- */

static int mkdir_parents(const char *path)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0755) && errno != EEXIST) return -1;
        *p = '/';
    }
    return 0;
}

/* Percent-encodes s into out, keeping unreserved characters (and '/' when keep_slash). */
static void url_encode(char *out, size_t cap, const char *s, bool keep_slash)
{
    static const char hexd[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && o + 4 < cap; p++) {
        if (isalnum(*p) || strchr("-._~", *p) || (keep_slash && *p == '/')) {
            out[o++] = (char)*p;
        } else {
            out[o++] = '%';
            out[o++] = hexd[*p >> 4];
            out[o++] = hexd[*p & 15];
        }
    }
    out[o] = '\0';
}

/* A hub path we are willing to write under DIR: relative, no "..", no empty or hidden-temp names. */
static bool safe_name(const char *n)
{
    if (!*n || n[0] == '/' || strlen(n) > 1024) return false;
    for (const char *seg = n; seg;) {
        const char *end = strchr(seg, '/');
        size_t len = end ? (size_t)(end - seg) : strlen(seg);
        if (len == 0 || (len == 1 && seg[0] == '.') || (len == 2 && !strncmp(seg, "..", 2))) return false;
        seg = end ? end + 1 : NULL;
    }
    for (const char *p = n; *p; p++)
        if ((unsigned char)*p < 0x20) return false;
    return !strstr(n, ".wick-partial");
}

static void partial_path(char *out, size_t cap, const char *dir, const char *name)
{
    const char *slash = strrchr(name, '/');
    if (slash) snprintf(out, cap, "%s/%.*s/.%s.wick-partial", dir, (int)(slash - name), name, slash + 1);
    else snprintf(out, cap, "%s/.%s.wick-partial", dir, name);
}

/* ---- HTTP ------------------------------------------------------------------------- */

typedef struct membuf {
    char *p;
    size_t n, cap, max;
    bool overflow;
} membuf;

static size_t mem_write(char *data, size_t sz, size_t nm, void *user)
{
    membuf *b = user;
    size_t n = sz * nm;
    if (b->n + n + 1 > b->max) {
        b->overflow = true;
        n = b->max > b->n + 1 ? b->max - b->n - 1 : 0;
    }
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 4096;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) return 0;
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
    b->p[b->n] = '\0';
    return sz * nm;
}

static struct curl_slist *headers(const char *token)
{
    struct curl_slist *h = curl_slist_append(NULL, "User-Agent: wick-pull/0.1");
    if (token && *token) {
        char auth[1100];
        snprintf(auth, sizeof auth, "Authorization: Bearer %.1000s", token);
        h = curl_slist_append(h, auth);
    }
    return h;
}

static void common_opts(CURL *c, struct curl_slist *h)
{
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    /* a transfer that moves under 1 byte/s for 60 s is dead: fail it (and resume) rather than hang */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
}

/* The hub's error text of a JSON error body ({"error": "..."}) or the body itself, trimmed. */
static void error_text(const char *body, char *out, size_t cap)
{
    out[0] = '\0';
    if (!body || !*body) return;
    json_t *j = json_loads(body, 0, NULL);
    const char *e = j ? json_string_value(json_object_get(j, "error")) : NULL;
    snprintf(out, cap, "%s", e ? e : body);
    json_decref(j);
    out[strcspn(out, "\r\n")] = '\0';
}

/* ---- the listing ------------------------------------------------------------------ */

static int fetch_listing(const hub_pull_options *o, hub_file **files, size_t *n_files, char commit[64],
                         wk_error *err)
{
    char rev[512], repo[512], url[2048];
    url_encode(rev, sizeof rev, o->revision, false);
    url_encode(repo, sizeof repo, o->repo, true);
    snprintf(url, sizeof url, "%s/api/models/%s/revision/%s?blobs=true", o->endpoint, repo, rev);
    CURL *c = curl_easy_init();
    if (!c) return wk_fail(err, WK_ENOMEM, "cannot initialise libcurl");
    struct curl_slist *h = headers(o->token);
    membuf b = {.max = LISTING_MAX_BYTES};
    common_opts(c, h);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, mem_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    CURLcode cc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    int rc = WK_OK;
    char why[ERROR_BODY_MAX];
    if (cc != CURLE_OK) {
        rc = wk_fail(err, WK_EIO, "%s: %s", url, curl_easy_strerror(cc));
    } else if (status == 404 || status == 401 || status == 403) {
        error_text(b.p, why, sizeof why);
        rc = wk_fail(err, status == 404 ? WK_ENOTFOUND : WK_EIO,
                     "%s@%s: %s at %s (HTTP %ld%s%s)%s", o->repo, o->revision,
                     status == 404 ? "no such repository or revision" : "access denied", o->endpoint, status,
                     why[0] ? ": " : "", why, o->token ? "" : "; a private or gated repository needs HF_TOKEN");
    } else if (status != 200) {
        error_text(b.p, why, sizeof why);
        rc = wk_fail(err, WK_EIO, "%s: HTTP %ld%s%s", url, status, why[0] ? ": " : "", why);
    } else if (b.overflow) {
        rc = wk_fail(err, WK_EFORMAT, "%s: listing larger than 64 MiB", url);
    }
    if (rc) {
        free(b.p);
        return rc;
    }
    json_error_t je;
    json_t *j = json_loads(b.p ? b.p : "", 0, &je);
    free(b.p);
    const char *sha = j ? json_string_value(json_object_get(j, "sha")) : NULL;
    json_t *sib = j ? json_object_get(j, "siblings") : NULL;
    if (!sha || strlen(sha) != 40 || !json_is_array(sib)) {
        json_decref(j);
        return wk_fail(err, WK_EFORMAT, "%s: not a hub listing (needs \"sha\" and \"siblings\")", url);
    }
    snprintf(commit, 64, "%s", sha);
    *n_files = json_array_size(sib);
    *files = calloc(*n_files ? *n_files : 1, sizeof **files);
    if (!*files) {
        json_decref(j);
        return wk_fail(err, WK_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < *n_files; i++) {
        json_t *s = json_array_get(sib, i), *lfs = json_object_get(s, "lfs");
        const char *name = json_string_value(json_object_get(s, "rfilename"));
        json_t *size = json_object_get(s, "size");
        const char *sha256 = lfs ? json_string_value(json_object_get(lfs, "sha256")) : NULL;
        const char *blob = json_string_value(json_object_get(s, "blobId"));
        if (lfs && !size) size = json_object_get(lfs, "size");
        if (!name || !safe_name(name) || !json_is_integer(size) || json_integer_value(size) < 0 ||
            (lfs && (!sha256 || strlen(sha256) != 64)) || (!lfs && blob && strlen(blob) != 40)) {
            for (size_t k = 0; k < i; k++) free((*files)[k].name);
            free(*files);
            *files = NULL;
            rc = wk_fail(err, WK_EFORMAT, "%s: sibling %zu (%s) lacks a safe name, a size or its hash", url, i,
                         name ? name : "?");
            json_decref(j);
            return rc;
        }
        hub_file *f = &(*files)[i];
        f->name = strdup(name);
        f->size = (uint64_t)json_integer_value(size);
        if (sha256)
            for (int k = 0; k < 65; k++) f->sha256[k] = (char)tolower((unsigned char)sha256[k]);
        else if (blob) snprintf(f->blob_sha1, sizeof f->blob_sha1, "%s", blob);
    }
    json_decref(j);
    return WK_OK;
}

/* ---- hashing ---------------------------------------------------------------------- */

/* Both digests the hub can pin: SHA-256 of the content, SHA-1 of "blob SIZE\0" + content. */
typedef struct file_hash {
    wk_sha256 *s256;
    EVP_MD_CTX *s1;
} file_hash;

/* Starts both digests; on failure (-1) hash_end still cleans up. */
static int hash_begin(file_hash *h, uint64_t size)
{
    h->s256 = wk_sha256_new();
    h->s1 = EVP_MD_CTX_new();
    if (!h->s256 || !h->s1 || !EVP_DigestInit_ex(h->s1, EVP_sha1(), NULL)) return -1;
    char hdr[32];
    int n = snprintf(hdr, sizeof hdr, "blob %llu", (unsigned long long)size);
    EVP_DigestUpdate(h->s1, hdr, (size_t)n + 1); /* the NUL is part of git's header */
    return 0;
}

static void hash_update(file_hash *h, const void *p, size_t n)
{
    wk_sha256_update(h->s256, p, n);
    EVP_DigestUpdate(h->s1, p, n);
}

/* Writes the digests (either may be NULL: discarded) and frees; safe on a half-made h. */
static void hash_end(file_hash *h, char s256[65], char s1[41])
{
    if (s256 && h->s256) wk_sha256_final(h->s256, s256);
    else wk_sha256_free(h->s256);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    if (h->s1) EVP_DigestFinal_ex(h->s1, md, &n);
    EVP_MD_CTX_free(h->s1);
    if (s1) {
        static const char hexd[] = "0123456789abcdef";
        for (unsigned i = 0; i < n && i < 20; i++) {
            s1[2 * i] = hexd[md[i] >> 4];
            s1[2 * i + 1] = hexd[md[i] & 15];
        }
        s1[40] = '\0';
    }
    h->s256 = NULL;
    h->s1 = NULL;
}

static void chunk_update(void *user, const void *data, size_t n) { hash_update(user, data, n); }

/* Feeds the first `bytes` of fd into h, with a progress bar labelled label. */
static int hash_fd(file_hash *h, int fd, uint64_t bytes, const char *label, bool quiet, const char *path,
                   wk_error *err)
{
    wk_progress p;
    wk_progress_begin(&p, quiet ? NULL : stderr, label, bytes, 0);
    int rc = wk_read_chunks(fd, bytes, path, chunk_update, h, wk_progress_callback, &p, err);
    if (p.drawn) wk_progress_end(&p, rc ? "failed" : "hashed");
    return rc;
}

/* Whether path holds exactly f's bytes (its size, then its hash). */
static bool matches(const hub_file *f, const char *path, bool quiet, char sha256_out[65])
{
    struct stat st;
    if (stat(path, &st) || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != f->size) return false;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    file_hash h;
    wk_error err = {0};
    char s256[65], s1[41], label[160];
    snprintf(label, sizeof label, "checking %s", f->name);
    bool ok = hash_begin(&h, f->size) == 0 && hash_fd(&h, fd, f->size, label, quiet, path, &err) == 0;
    close(fd);
    hash_end(&h, ok ? s256 : NULL, ok ? s1 : NULL);
    if (!ok) return false;
    if (sha256_out) snprintf(sha256_out, 65, "%s", s256);
    return f->sha256[0] ? !strcmp(s256, f->sha256) : f->blob_sha1[0] ? !strcmp(s1, f->blob_sha1) : true;
}

/* ---- one download ----------------------------------------------------------------- */

typedef struct transfer {
    CURL *c;
    int fd;
    uint64_t start;        /* bytes in the partial file when the request went out */
    uint64_t written;      /* bytes in the partial file now */
    uint64_t size;         /* the file's size (for the blob hash header) */
    bool decided;          /* the response's status was looked at */
    long status;
    file_hash *h;
    wk_progress *p;
    membuf err_body;
    bool write_failed;
} transfer;

static size_t on_body(char *data, size_t sz, size_t nm, void *user)
{
    transfer *t = user;
    size_t n = sz * nm;
    if (!t->decided) {
        t->decided = true;
        curl_easy_getinfo(t->c, CURLINFO_RESPONSE_CODE, &t->status);
        if (t->status == 200 && t->start > 0) { /* no range support: the whole file from its start */
            if (ftruncate(t->fd, 0)) {
                t->write_failed = true;
                return 0;
            }
            hash_end(t->h, NULL, NULL);
            if (hash_begin(t->h, t->size)) {
                t->write_failed = true;
                return 0;
            }
            t->written = t->start = 0;
            t->p->start = t->p->done = 0;
        }
    }
    if (t->status != 200 && t->status != 206) return mem_write(data, sz, nm, &t->err_body);
    for (size_t off = 0; off < n;) {
        ssize_t w = pwrite(t->fd, data + off, n - off, (off_t)t->written);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            t->write_failed = true;
            return 0;
        }
        off += (size_t)w;
        t->written += (uint64_t)w;
    }
    hash_update(t->h, data, n);
    wk_progress_update(t->p, t->written);
    return n;
}

/* Makes the partial file complete (resuming what it holds), checks and renames it.
 * Returns 0, or an error; *retryable says whether another attempt may help. */
static int download_once(const hub_pull_options *o, const hub_file *f, const char *commit, const char *part,
                         const char *final_path, hub_pull_result *res, bool *retryable, char sha256_out[65],
                         wk_error *err)
{
    *retryable = false;
    int fd = open(part, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return wk_fail(err, WK_EIO, "%s: cannot create: %s", part, strerror(errno));
    struct stat st;
    fstat(fd, &st);
    uint64_t have = (uint64_t)st.st_size;
    if (have > f->size) { /* longer than the file can be: not a prefix of it */
        if (ftruncate(fd, 0)) {
            close(fd);
            return wk_fail(err, WK_EIO, "%s: %s", part, strerror(errno));
        }
        have = 0;
    }
    file_hash h;
    int rc = WK_OK;
    if (hash_begin(&h, f->size)) {
        hash_end(&h, NULL, NULL);
        close(fd);
        return wk_fail(err, WK_ENOMEM, "out of memory");
    }
    char label[160];
    snprintf(label, sizeof label, "resuming %s", f->name);
    if (have && (rc = hash_fd(&h, fd, have, label, o->quiet, part, err))) {
        hash_end(&h, NULL, NULL);
        close(fd);
        return rc;
    }
    char repo[512], name[2048], url[4096];
    url_encode(repo, sizeof repo, o->repo, true);
    url_encode(name, sizeof name, f->name, true);
    snprintf(url, sizeof url, "%s/%s/resolve/%s/%s", o->endpoint, repo, commit, name);
    wk_progress p;
    wk_progress_begin(&p, o->quiet ? NULL : stderr, f->name, f->size, have);
    transfer t = {.fd = fd, .start = have, .written = have, .size = f->size, .h = &h, .p = &p,
                  .err_body = {.max = ERROR_BODY_MAX}};
    if (have < f->size) {
        t.c = curl_easy_init();
        struct curl_slist *hd = headers(o->token);
        common_opts(t.c, hd);
        curl_easy_setopt(t.c, CURLOPT_URL, url);
        curl_easy_setopt(t.c, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(t.c, CURLOPT_WRITEDATA, &t);
        char range[48];
        if (have) {
            snprintf(range, sizeof range, "%llu-", (unsigned long long)have);
            curl_easy_setopt(t.c, CURLOPT_RANGE, range);
        }
        CURLcode cc = curl_easy_perform(t.c);
        if (!t.decided) curl_easy_getinfo(t.c, CURLINFO_RESPONSE_CODE, &t.status);
        curl_slist_free_all(hd);
        curl_easy_cleanup(t.c);
        res->bytes_downloaded += t.written - t.start;
        char why[ERROR_BODY_MAX];
        if (t.status == 416) { /* nothing left to send: what we have is all there is */
            cc = CURLE_OK;
        } else if (t.status != 200 && t.status != 206 && t.status != 0) {
            error_text(t.err_body.p, why, sizeof why);
            *retryable = t.status >= 500;
            rc = wk_fail(err, t.status == 404 ? WK_ENOTFOUND : WK_EIO, "%s: HTTP %ld from %s%s%s", f->name, t.status,
                         url, why[0] ? ": " : "", why);
        } else if (t.write_failed) {
            rc = wk_fail(err, WK_EIO, "%s: writing %s failed: %s", f->name, part, strerror(errno));
        } else if (cc != CURLE_OK) {
            *retryable = true;
            char b1[32], b2[32];
            rc = wk_fail(err, WK_EIO, "%s: connection lost at %s of %s: %s (the partial download is kept in %s)",
                         f->name, wk_format_bytes(b1, sizeof b1, t.written), wk_format_bytes(b2, sizeof b2, f->size),
                         curl_easy_strerror(cc), part);
        }
        free(t.err_body.p);
    }
    close(fd);
    if (rc) {
        if (p.drawn) fputc('\n', stderr);
        hash_end(&h, NULL, NULL);
        return rc;
    }
    char s256[65], s1[41];
    hash_end(&h, s256, s1);
    char b1[32], b2[32];
    if (t.written != f->size) {
        *retryable = t.written < f->size;
        if (p.drawn) fputc('\n', stderr);
        if (t.written > f->size) unlink(part);
        return wk_fail(err, WK_EIO, "%s: got %s, the hub lists %s", f->name, wk_format_bytes(b1, sizeof b1, t.written),
                       wk_format_bytes(b2, sizeof b2, f->size));
    }
    bool ok = f->sha256[0] ? !strcmp(s256, f->sha256) : f->blob_sha1[0] ? !strcmp(s1, f->blob_sha1) : true;
    if (!ok) {
        wk_progress_end(&p, "MISMATCH");
        unlink(part);
        return wk_fail(err, WK_EFORMAT, "%s: %s mismatch: got %s, the hub says %s (the download was removed)", f->name,
                       f->sha256[0] ? "SHA-256" : "git blob SHA-1", f->sha256[0] ? s256 : s1,
                       f->sha256[0] ? f->sha256 : f->blob_sha1);
    }
    if (rename(part, final_path)) return wk_fail(err, WK_EIO, "%s -> %s: %s", part, final_path, strerror(errno));
    wk_progress_end(&p, f->sha256[0] ? "sha256 ok" : "ok");
    snprintf(sha256_out, 65, "%s", s256);
    return WK_OK;
}

/* Copies (or hard-links) src into the partial name, then it is checked like a download. */
static int reuse_from(const char *src, const char *part, wk_error *err)
{
    unlink(part);
    if (link(src, part) == 0) return WK_OK;
    int in = open(src, O_RDONLY | O_CLOEXEC), out = open(part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int rc = in < 0 || out < 0 ? wk_fail(err, WK_EIO, "copying %s: %s", src, strerror(errno)) : WK_OK;
    char *buf = rc ? NULL : malloc(COPY_CHUNK);
    ssize_t n = 0;
    while (buf && (n = read(in, buf, COPY_CHUNK)) > 0)
        if (write(out, buf, (size_t)n) != n) break;
    if (!rc && (!buf || n != 0)) rc = wk_fail(err, WK_EIO, "copying %s to %s: %s", src, part, strerror(errno));
    free(buf);
    if (in >= 0) close(in);
    if (out >= 0 && close(out) && !rc) rc = wk_fail(err, WK_EIO, "%s: %s", part, strerror(errno));
    if (rc) unlink(part);
    return rc;
}

/* ---- SHA256SUMS ------------------------------------------------------------------- */

/* Rewrites DIR/SHA256SUMS with the new entries, keeping other files' lines. */
static int write_sums(const char *dir, const hub_file *files, size_t n, char (*hexes)[65], wk_error *err)
{
    char path[PATH_MAX], tmp[PATH_MAX + 8];
    snprintf(path, sizeof path, "%s/SHA256SUMS", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    wk_sums old = {0};
    wk_error ignore;
    struct stat st;
    if (stat(path, &st) == 0 && wk_sums_load(path, &old, &ignore)) old.n = 0;
    FILE *f = fopen(tmp, "w");
    if (!f) {
        wk_sums_free(&old);
        return wk_fail(err, WK_EIO, "%s: %s", tmp, strerror(errno));
    }
    for (size_t i = 0; i < old.n; i++) {
        bool replaced = false;
        for (size_t k = 0; k < n; k++) replaced |= files[k].selected && !strcmp(files[k].name, old.e[i].name);
        if (!replaced) wk_sums_write_line(f, old.e[i].hex, old.e[i].name);
    }
    for (size_t k = 0; k < n; k++)
        if (files[k].selected) wk_sums_write_line(f, hexes[k], files[k].name);
    wk_sums_free(&old);
    if (fclose(f) || rename(tmp, path)) {
        unlink(tmp);
        return wk_fail(err, WK_EIO, "%s: %s", path, strerror(errno));
    }
    return WK_OK;
}

/* ---- the pull --------------------------------------------------------------------- */

static int select_files(const hub_pull_options *o, hub_file *files, size_t n, int *n_selected, wk_error *err)
{
    *n_selected = 0;
    for (int p = 0; p < o->n_patterns; p++) {
        int hits = 0;
        for (size_t i = 0; i < n; i++)
            if (!strcmp(o->patterns[p], files[i].name) || fnmatch(o->patterns[p], files[i].name, FNM_PATHNAME) == 0) {
                files[i].selected = true;
                hits++;
            }
        if (!hits) {
            char list[512] = "";
            for (size_t i = 0; i < n && strlen(list) < 400; i++) {
                if (i) strncat(list, ", ", sizeof list - strlen(list) - 1);
                strncat(list, files[i].name, sizeof list - strlen(list) - 1);
            }
            return wk_fail(err, WK_ENOTFOUND, "%s: not in %s@%s (files: %s)", o->patterns[p], o->repo, o->revision,
                           n ? list : "none");
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (!o->n_patterns) files[i].selected = true;
        *n_selected += files[i].selected;
    }
    return WK_OK;
}

int hub_pull(const hub_pull_options *o, hub_pull_result *res, wk_error *err)
{
    memset(res, 0, sizeof *res);
    if (mkdir_parents(o->dir) || (mkdir(o->dir, 0755) && errno != EEXIST))
        return wk_fail(err, WK_EIO, "%s: cannot create: %s", o->dir, strerror(errno));
    curl_global_init(CURL_GLOBAL_DEFAULT);
    hub_file *files = NULL;
    size_t n = 0;
    char (*hexes)[65] = NULL;
    int rc = fetch_listing(o, &files, &n, res->commit, err);
    if (rc) goto done;
    if ((rc = select_files(o, files, n, &res->n_files, err))) goto done;
    hexes = calloc(n ? n : 1, sizeof *hexes);
    if (!hexes) {
        rc = wk_fail(err, WK_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        const hub_file *f = &files[i];
        if (!f->selected) continue;
        char final_path[PATH_MAX * 2], part[PATH_MAX * 2];
        snprintf(final_path, sizeof final_path, "%s/%s", o->dir, f->name);
        partial_path(part, sizeof part, o->dir, f->name);
        if (mkdir_parents(final_path)) {
            rc = wk_fail(err, WK_EIO, "%s: cannot create its folder: %s", final_path, strerror(errno));
            break;
        }
        if (matches(f, final_path, o->quiet, hexes[i])) {
            res->n_present++;
            if (!o->quiet) fprintf(stderr, "%s: already here, hash ok\n", f->name);
            continue;
        }
        if (o->reuse_dir) {
            char cand[PATH_MAX * 2];
            const char *base = strrchr(f->name, '/') ? strrchr(f->name, '/') + 1 : f->name;
            const char *tries[2] = {f->name, base};
            bool reused = false;
            for (int k = 0; k < 2 && !reused; k++) {
                snprintf(cand, sizeof cand, "%s/%s", o->reuse_dir, tries[k]);
                if (matches(f, cand, o->quiet, hexes[i]) && reuse_from(cand, part, err) == 0 &&
                    matches(f, part, true, hexes[i]) && rename(part, final_path) == 0) {
                    reused = true;
                    res->n_reused++;
                    if (!o->quiet) fprintf(stderr, "%s: reused %s (hash ok)\n", f->name, cand);
                }
            }
            if (reused) continue;
            unlink(part);
        }
        for (int attempt = 0;; attempt++) {
            bool retry = false;
            rc = download_once(o, f, res->commit, part, final_path, res, &retry, hexes[i], err);
            if (rc == 0 || !retry || attempt >= o->retries) break;
            if (!o->quiet) fprintf(stderr, "wick pull: %s; retrying (%d of %d)\n", err->msg, attempt + 1, o->retries);
            sleep((unsigned)(attempt + 1));
        }
        if (rc == 0) res->n_downloaded++;
    }
    if (rc == 0) rc = write_sums(o->dir, files, n, hexes, err);
done:
    for (size_t i = 0; i < n; i++) free(files[i].name);
    free(files);
    free(hexes);
    curl_global_cleanup();
    return rc;
}

#else

int hub_pull(const hub_pull_options *o, hub_pull_result *res, wk_error *err)
{
    (void)o;
    memset(res, 0, sizeof *res);
    return wk_fail(err, WK_EUNSUPPORTED, "this build has no libcurl (install libcurl4-openssl-dev and rebuild)");
}

#endif
