/* libcurl client for `wick eval`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/eval_http.h"
#include "util/timeutil.h"

#ifdef WICK_HAVE_CURL
#include <curl/curl.h>

static size_t on_body(char *p, size_t size, size_t nmemb, void *user)
{
    cli_http_resp *r = user;
    size_t n = size * nmemb;
    char *b = realloc(r->body, r->len + n + 1);
    if (!b) return 0;
    memcpy(b + r->len, p, n);
    r->len += n;
    b[r->len] = '\0';
    r->body = b;
    return n;
}

static int perform(const char *base, const char *path, const char *api_key, const char *body, long abort_ms,
                   cli_http_resp *out, char *errbuf, size_t errcap)
{
    memset(out, 0, sizeof *out);
    static bool inited;
    if (!inited) {
        curl_global_init(CURL_GLOBAL_DEFAULT);
        inited = true;
    }
    char url[4096];
    size_t bl = strlen(base);
    while (bl && base[bl - 1] == '/') bl--;
    snprintf(url, sizeof url, "%.*s%s", (int)bl, base, path);
    CURL *h = curl_easy_init();
    if (!h) {
        snprintf(errbuf, errcap, "cannot initialise libcurl");
        return -1;
    }
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    char auth[600];
    if (api_key && *api_key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", api_key);
        hdr = curl_slist_append(hdr, auth);
    }
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, abort_ms > 0 ? abort_ms : 600000L); /* 10 min: a hung server */
    double t0 = wk_now_ms();
    CURLcode cc = curl_easy_perform(h);
    out->wall_ms = wk_now_ms() - t0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &out->status);
    curl_slist_free_all(hdr);
    curl_easy_cleanup(h);
    if (cc == CURLE_OPERATION_TIMEDOUT && abort_ms > 0) {
        out->aborted = true;
        return 0;
    }
    if (cc != CURLE_OK) {
        snprintf(errbuf, errcap, "%s: %s", url, curl_easy_strerror(cc));
        return -1;
    }
    if (!out->body) out->body = calloc(1, 1);
    return 0;
}

int cli_http_post(const char *base, const char *path, const char *api_key, const char *body, long abort_after_ms,
                  cli_http_resp *out, char *errbuf, size_t errcap)
{
    return perform(base, path, api_key, body, abort_after_ms, out, errbuf, errcap);
}

int cli_http_get(const char *base, const char *path, const char *api_key, cli_http_resp *out, char *errbuf,
                 size_t errcap)
{
    return perform(base, path, api_key, NULL, 0, out, errbuf, errcap);
}

#else

int cli_http_post(const char *base, const char *path, const char *api_key, const char *body, long abort_after_ms,
                  cli_http_resp *out, char *errbuf, size_t errcap)
{
    (void)base, (void)path, (void)api_key, (void)body, (void)abort_after_ms;
    memset(out, 0, sizeof *out);
    snprintf(errbuf, errcap, "this wick was built without libcurl (install libcurl4-openssl-dev and rebuild)");
    return -1;
}

int cli_http_get(const char *base, const char *path, const char *api_key, cli_http_resp *out, char *errbuf,
                 size_t errcap)
{
    return cli_http_post(base, path, api_key, NULL, 0, out, errbuf, errcap);
}

#endif

void cli_http_resp_free(cli_http_resp *r)
{
    free(r->body);
    memset(r, 0, sizeof *r);
}
