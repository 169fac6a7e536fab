/* Archive download for /import: libcurl's easy interface in the request's thread. */
#include "import/fetch.h"

#include <curl/curl.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define MAX_REDIRECTS 10

typedef struct {
    CURL *h;
    int fd;
    long long limit;   /* the import limit: past it the download stops */
    long long room;    /* what fd may take (reserved): past it bytes are counted, not written */
    long long written, seen;
    bool too_big;      /* past the limit (announced or grown) */
    bool overflow;     /* past the room (announced or grown), or fd's disk filled meanwhile */
    bool io_error;
    int cancel_fd;  /* > 0: the client's socket; a hang-up on it stops the download */
    bool cancelled;
} sink;

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static bool curl_ready;

static void curl_start(void)
{
    curl_ready = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
}

/* libcurl calls this at least once a second: a client that hung up (or a server that is
 * stopping) ends the download. */
static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    sink *k = ud;
    struct pollfd p = {.fd = k->cancel_fd, .events = POLLRDHUP};
    if (k->cancel_fd > 0 && poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)))
        k->cancelled = true;
    return k->cancelled;
}

/* Only the body of a 200 answer is kept; redirect and error pages are dropped. Bytes past
 * the room are never written: the download goes on only to learn the archive's size (for the
 * contract's 413 texts), and stops at the import limit. */
static size_t on_data(char *p, size_t size, size_t n, void *ud)
{
    sink *k = ud;
    size_t len = size * n;
    long code = 0;
    curl_easy_getinfo(k->h, CURLINFO_RESPONSE_CODE, &code);
    if (code != 200)
        return len;
    curl_off_t announced = -1;
    if (curl_easy_getinfo(k->h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &announced) == CURLE_OK && announced >= 0 &&
        (announced > k->limit || announced > k->room)) {
        /* refused before a byte of it is written */
        k->too_big = announced > k->limit;
        k->overflow = !k->too_big;
        k->seen = (long long)announced;
        return 0;
    }
    k->seen += (long long)len;
    if (k->seen > k->limit) {
        k->too_big = true;
        return 0;
    }
    if (k->overflow || k->written + (long long)len > k->room) {
        k->overflow = true;
        return len;
    }
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(k->fd, p + done, len - done);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == ENOSPC || errno == EDQUOT) { /* a command filled the workspace meanwhile */
                k->overflow = true;
                return len;
            }
            k->io_error = true;
            return 0;
        }
        done += (size_t)w;
    }
    k->written += (long long)len;
    return len;
}

typedef struct {
    char *scheme, *host, *port;
} url_parts;

static void url_parts_free(url_parts *u)
{
    curl_free(u->scheme);
    curl_free(u->host);
    curl_free(u->port);
    memset(u, 0, sizeof *u);
}

static bool url_split(const char *url, url_parts *u)
{
    memset(u, 0, sizeof *u);
    CURLU *h = curl_url();
    if (!h)
        return false;
    bool ok = curl_url_set(h, CURLUPART_URL, url, 0) == CURLUE_OK;
    if (ok) {
        curl_url_get(h, CURLUPART_SCHEME, &u->scheme, 0);
        curl_url_get(h, CURLUPART_HOST, &u->host, 0);
        curl_url_get(h, CURLUPART_PORT, &u->port, CURLU_DEFAULT_PORT);
    }
    curl_url_cleanup(h);
    return ok;
}

static bool same(const char *a, const char *b)
{
    return a && b && strcasecmp(a, b) == 0;
}

/* The hosts GitHub's archive downloads redirect to, plus (for tests against a local
 * archive server) the configured base itself. */
static bool redirect_allowed(const url_parts *to, const url_parts *base, bool base_is_default)
{
    if (same(to->scheme, "https") &&
        (same(to->host, "github.com") || same(to->host, "codeload.github.com") || same(to->host, "api.github.com")))
        return true;
    return !base_is_default && same(to->scheme, base->scheme) && same(to->host, base->host) &&
           same(to->port, base->port);
}

static bool is_default_base(const char *base)
{
    size_t n = strlen(base);
    while (n && base[n - 1] == '/')
        n--;
    return n == strlen("https://github.com") && strncasecmp(base, "https://github.com", n) == 0;
}

import_result import_fetch(const config *cfg, const import_spec *spec, int cancel_fd, int fd, long long room,
                           long long *bytes, char **msg)
{
    *bytes = 0;
    *msg = NULL;
    pthread_once(&curl_once, curl_start);
    if (!curl_ready)
        return IMPORT_FAILED;
    const char *base = cfg->import_base_url;
    size_t bl = strlen(base);
    while (bl && base[bl - 1] == '/')
        bl--;
    bool base_is_default = is_default_base(base);
    char *url = NULL;
    if (asprintf(&url, "%.*s/%s/%s/archive/%s.tar.gz", (int)bl, base, spec->owner, spec->name, spec->ref) < 0)
        return IMPORT_FAILED;
    url_parts base_parts;
    url_split(url, &base_parts);
    CURL *h = curl_easy_init();
    if (!h) {
        free(url);
        url_parts_free(&base_parts);
        return IMPORT_FAILED;
    }
    char errbuf[CURL_ERROR_SIZE];
    sink k = {.h = h, .fd = fd, .limit = (long long)cfg->import_max_mb * 1048576, .room = room,
              .cancel_fd = cancel_fd};
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 20L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 110L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 30L);
    curl_easy_setopt(h, CURLOPT_NOPROXY, "localhost,127.0.0.1,::1");
    curl_easy_setopt(h, CURLOPT_USERAGENT, "airlockd");
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &k);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &k);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);

    import_result status = IMPORT_FAILED;
    for (int hop = 0;; hop++) {
        errbuf[0] = '\0';
        k.written = k.seen = 0;
        curl_easy_setopt(h, CURLOPT_URL, url);
        CURLcode rc = curl_easy_perform(h);
        long code = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
        if (k.io_error || k.cancelled) {
            status = IMPORT_FAILED;
            break;
        }
        if (k.too_big || (k.overflow && (rc == CURLE_OK || rc == CURLE_WRITE_ERROR))) {
            status = IMPORT_TOO_LARGE;
            *bytes = k.seen;
            break;
        }
        if (rc != CURLE_OK) {
            status = IMPORT_UPSTREAM;
            if (asprintf(msg, "Couldn't download %s/%s: %s", spec->owner, spec->name,
                         errbuf[0] ? errbuf : curl_easy_strerror(rc)) < 0)
                *msg = NULL, status = IMPORT_FAILED;
            break;
        }
        char *next = NULL;
        if (code >= 300 && code < 400 && curl_easy_getinfo(h, CURLINFO_REDIRECT_URL, &next) == CURLE_OK && next) {
            url_parts to;
            bool parsed = url_split(next, &to);
            bool ok = parsed && redirect_allowed(&to, &base_parts, base_is_default);
            if (!ok) {
                status = IMPORT_UPSTREAM;
                if (asprintf(msg, "GitHub redirected the download to an unexpected host (%s).",
                             to.host ? to.host : next) < 0)
                    *msg = NULL, status = IMPORT_FAILED;
                url_parts_free(&to);
                break;
            }
            url_parts_free(&to);
            if (hop >= MAX_REDIRECTS) {
                status = IMPORT_UPSTREAM;
                if (asprintf(msg, "Couldn't download %s/%s: too many redirects", spec->owner, spec->name) < 0)
                    *msg = NULL, status = IMPORT_FAILED;
                break;
            }
            char *copy = strdup(next); /* next belongs to the handle and changes with the URL */
            if (!copy) {
                status = IMPORT_FAILED;
                break;
            }
            free(url);
            url = copy;
            continue;
        }
        if (code == 200) {
            status = IMPORT_OK;
            *bytes = k.written;
        } else if (code == 404) {
            status = IMPORT_NOT_FOUND;
            if (asprintf(msg, "%s/%s@%s wasn't found. For a private repository, connect GitHub in the console "
                              "(Workspaces \xe2\x86\x92 Private repositories) and give Airlock access to it.",
                         spec->owner, spec->name, spec->ref) < 0)
                *msg = NULL, status = IMPORT_FAILED;
        } else {
            status = IMPORT_UPSTREAM;
            if (asprintf(msg, "GitHub answered %ld for %s/%s.", code, spec->owner, spec->name) < 0)
                *msg = NULL, status = IMPORT_FAILED;
        }
        break;
    }
    curl_easy_cleanup(h);
    url_parts_free(&base_parts);
    free(url);
    return status;
}
