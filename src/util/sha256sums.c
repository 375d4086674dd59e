#include "util/sha256sums.h"

#include "util/fileio.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SUMS_MAX_BYTES ((size_t)16 << 20) /* a manifest of 100k files; anything bigger is not one */

static int parse_line(const char *p, size_t n, const char *what, int line, wk_sums_entry *e, wk_error *err)
{
    int escaped = n > 0 && p[0] == '\\';
    if (escaped) p++, n--;
    if (n < 66) return wk_fail(err, WK_EFORMAT, "%s:%d: not a SHA-256 line (\"HEX  NAME\")", what, line);
    for (int i = 0; i < 64; i++) {
        if (!isxdigit((unsigned char)p[i]))
            return wk_fail(err, WK_EFORMAT, "%s:%d: '%.64s' is not a 64-digit hex digest", what, line, p);
        e->hex[i] = (char)tolower((unsigned char)p[i]);
    }
    e->hex[64] = '\0';
    if (p[64] != ' ' || (p[65] != ' ' && p[65] != '*'))
        return wk_fail(err, WK_EFORMAT, "%s:%d: expected two spaces (or \" *\") after the digest", what, line);
    const char *name = p + 66;
    size_t nl = n - 66;
    if (nl && name[nl - 1] == '\r') nl--; /* a manifest written on Windows */
    if (!nl) return wk_fail(err, WK_EFORMAT, "%s:%d: no file name", what, line);
    e->name = malloc(nl + 1);
    if (!e->name) return wk_fail(err, WK_ENOMEM, "out of memory");
    size_t o = 0;
    for (size_t i = 0; i < nl; i++) {
        if (escaped && name[i] == '\\' && i + 1 < nl) {
            i++;
            e->name[o++] = name[i] == 'n' ? '\n' : name[i];
        } else {
            e->name[o++] = name[i];
        }
    }
    e->name[o] = '\0';
    e->line = line;
    return WK_OK;
}

int wk_sums_parse(const char *text, size_t len, const char *what, wk_sums *out, wk_error *err)
{
    memset(out, 0, sizeof *out);
    size_t cap = 0;
    int line = 0;
    for (size_t pos = 0; pos < len;) {
        const char *nlp = memchr(text + pos, '\n', len - pos);
        size_t n = nlp ? (size_t)(nlp - (text + pos)) : len - pos;
        line++;
        if (n && !(n == 1 && text[pos] == '\r')) {
            if (out->n == cap) {
                cap = cap ? cap * 2 : 16;
                wk_sums_entry *ne = realloc(out->e, cap * sizeof *ne);
                if (!ne) {
                    wk_sums_free(out);
                    return wk_fail(err, WK_ENOMEM, "out of memory");
                }
                out->e = ne;
            }
            int rc = parse_line(text + pos, n, what, line, &out->e[out->n], err);
            if (rc) {
                wk_sums_free(out);
                return rc;
            }
            out->n++;
        }
        pos += n + (nlp ? 1 : 0);
    }
    return WK_OK;
}

int wk_sums_load(const char *path, wk_sums *out, wk_error *err)
{
    memset(out, 0, sizeof *out);
    size_t n = 0;
    char *buf = wk_read_file(path, SUMS_MAX_BYTES, &n, err);
    if (!buf) return err ? err->code : WK_EIO;
    int rc = wk_sums_parse(buf, n, path, out, err);
    free(buf);
    return rc;
}

void wk_sums_free(wk_sums *s)
{
    for (size_t i = 0; i < s->n; i++) free(s->e[i].name);
    free(s->e);
    memset(s, 0, sizeof *s);
}

const wk_sums_entry *wk_sums_find(const wk_sums *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->e[i].name, name)) return &s->e[i];
    return NULL;
}

void wk_sums_write_line(FILE *out, const char hex[65], const char *name)
{
    int escape = strchr(name, '\\') || strchr(name, '\n');
    fprintf(out, "%s%s  ", escape ? "\\" : "", hex);
    for (const char *p = name; *p; p++) {
        if (escape && *p == '\\') fputs("\\\\", out);
        else if (*p == '\n') fputs("\\n", out);
        else fputc(*p, out);
    }
    fputc('\n', out);
}
