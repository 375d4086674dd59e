#include "server/body_decode.h"

#include <stdbool.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>
#include <zstd.h>

enum coding { C_IDENTITY, C_GZIP, C_DEFLATE, C_ZSTD, C_UNKNOWN };

static enum coding coding_of(const char *s, size_t n)
{
    if (n == 8 && !strncasecmp(s, "identity", 8)) return C_IDENTITY;
    if ((n == 4 && !strncasecmp(s, "gzip", 4)) || (n == 6 && !strncasecmp(s, "x-gzip", 6))) return C_GZIP;
    if (n == 7 && !strncasecmp(s, "deflate", 7)) return C_DEFLATE;
    if (n == 4 && !strncasecmp(s, "zstd", 4)) return C_ZSTD;
    return C_UNKNOWN;
}

static int too_large(srv_error *err, size_t max)
{
    return srv_fail(err, 413, NULL, "body_too_large", "decompressed request body exceeds the limit of %zu bytes", max);
}

/* gzip (with its header) or deflate (zlib-wrapped, or raw as some clients send it). */
static int inflate_body(const char *in, size_t n, size_t max, bool gzip, srv_buf *out, srv_error *err)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        z_stream z;
        memset(&z, 0, sizeof z);
        /* 15+16: gzip only; 15: zlib; -15: raw deflate (second try for "deflate") */
        int bits = gzip ? 15 + 16 : attempt == 0 ? 15 : -15;
        if (inflateInit2(&z, bits) != Z_OK) return srv_fail(err, 500, NULL, "out_of_memory", "cannot start inflate");
        z.next_in = (Bytef *)in;
        z.avail_in = (uInt)n;
        out->len = 0;
        int rc = Z_OK;
        char chunk[16384];
        while (rc != Z_STREAM_END) {
            z.next_out = (Bytef *)chunk;
            z.avail_out = sizeof chunk;
            rc = inflate(&z, Z_NO_FLUSH);
            if (rc != Z_OK && rc != Z_STREAM_END) break;
            size_t got = sizeof chunk - z.avail_out;
            if (out->len + got > max) {
                inflateEnd(&z);
                return too_large(err, max);
            }
            if (srv_buf_append(out, chunk, got)) {
                inflateEnd(&z);
                return srv_fail(err, 500, NULL, "out_of_memory", "out of memory decompressing the request body");
            }
            if (rc == Z_OK && got == 0 && z.avail_in == 0) break; /* truncated */
        }
        inflateEnd(&z);
        if (rc == Z_STREAM_END) return 0;
        if (gzip || attempt == 1)
            return srv_fail(err, 400, NULL, "invalid_encoding", "request body is not valid %s data",
                            gzip ? "gzip" : "deflate");
    }
    return 0;
}

static int zstd_body(const char *in, size_t n, size_t max, srv_buf *out, srv_error *err)
{
    ZSTD_DStream *z = ZSTD_createDStream();
    if (!z) return srv_fail(err, 500, NULL, "out_of_memory", "cannot start zstd");
    ZSTD_initDStream(z);
    ZSTD_inBuffer ib = {in, n, 0};
    char chunk[16384];
    size_t rc = 1;
    out->len = 0;
    while (ib.pos < ib.size || rc != 0) {
        ZSTD_outBuffer ob = {chunk, sizeof chunk, 0};
        rc = ZSTD_decompressStream(z, &ob, &ib);
        if (ZSTD_isError(rc)) {
            ZSTD_freeDStream(z);
            return srv_fail(err, 400, NULL, "invalid_encoding", "request body is not valid zstd data (%s)",
                            ZSTD_getErrorName(rc));
        }
        if (out->len + ob.pos > max) {
            ZSTD_freeDStream(z);
            return too_large(err, max);
        }
        if (srv_buf_append(out, chunk, ob.pos)) {
            ZSTD_freeDStream(z);
            return srv_fail(err, 500, NULL, "out_of_memory", "out of memory decompressing the request body");
        }
        if (ib.pos == ib.size && ob.pos == 0 && rc != 0) break; /* input ended inside a frame */
    }
    ZSTD_freeDStream(z);
    if (rc != 0) return srv_fail(err, 400, NULL, "invalid_encoding", "request body is truncated zstd data");
    return 0;
}

int srv_body_decode(const char *encoding, const char *in, size_t n, size_t max_bytes, srv_buf *out, srv_error *err)
{
    srv_buf cur = {0};
    if (srv_buf_append(&cur, in, n)) return srv_fail(err, 500, NULL, "out_of_memory", "out of memory");
    /* codings are listed in the order applied: undo the last one first */
    const char *e = encoding ? encoding + strlen(encoding) : NULL;
    while (e && e > encoding) {
        const char *b = e;
        while (b > encoding && b[-1] != ',') b--;
        const char *ts = b, *te = e;
        while (ts < te && (*ts == ' ' || *ts == '\t')) ts++;
        while (te > ts && (te[-1] == ' ' || te[-1] == '\t')) te--;
        e = b > encoding ? b - 1 : encoding;
        if (ts == te) continue;
        enum coding c = coding_of(ts, (size_t)(te - ts));
        if (c == C_IDENTITY) continue;
        if (c == C_UNKNOWN) {
            srv_buf_free(&cur);
            return srv_fail(err, 415, NULL, "unsupported_encoding",
                            "Content-Encoding '%.*s' is not supported (gzip, deflate, zstd)", (int)(te - ts), ts);
        }
        srv_buf next = {0};
        int rc = c == C_ZSTD ? zstd_body(cur.data, cur.len, max_bytes, &next, err)
                             : inflate_body(cur.data, cur.len, max_bytes, c == C_GZIP, &next, err);
        srv_buf_free(&cur);
        if (rc) {
            srv_buf_free(&next);
            return rc;
        }
        cur = next;
    }
    *out = cur;
    return 0;
}
