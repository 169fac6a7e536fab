/* One request of a drain to another node (drain/peer.h), with libcurl. */
#include "drain/peer.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DETAIL_MAX 4096 /* an answer's body kept for its detail */

typedef struct {
    const peer_request *q;
    char kept[DETAIL_MAX];
    size_t nkept;
    bool stopped;
} call;

static size_t on_body(char *data, size_t size, size_t n, void *ctx)
{
    call *c = ctx;
    size_t len = size * n;
    if (c->q->body) {
        if (!c->q->body(c->q->body_ctx, data, len)) {
            c->stopped = true;
            return 0;
        }
        return len;
    }
    size_t take = len < sizeof c->kept - 1 - c->nkept ? len : sizeof c->kept - 1 - c->nkept;
    memcpy(c->kept + c->nkept, data, take);
    c->nkept += take;
    return len;
}

static int on_progress(void *ctx, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt, (void)dn, (void)ut, (void)un;
    call *c = ctx;
    if (c->q->abort && atomic_load(c->q->abort)) {
        c->stopped = true;
        return 1;
    }
    return 0;
}

void peer_call(const peer_request *q, peer_answer *ans)
{
    memset(ans, 0, sizeof *ans);
    call *c = calloc(1, sizeof *c);
    CURL *h = curl_easy_init();
    char *auth = NULL;
    struct curl_slist *hdrs = NULL, *more = NULL;
    if (!c || !h || asprintf(&auth, "Authorization: Bearer %s", q->secret) < 0 ||
        !(hdrs = curl_slist_append(NULL, auth)) || (q->header && !(more = curl_slist_append(hdrs, q->header)))) {
        snprintf(ans->error, sizeof ans->error, "out of memory");
        goto done;
    }
    c->q = q;
    curl_easy_setopt(h, CURLOPT_URL, q->url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, q->method);
    if (strcmp(q->method, "POST") == 0)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_TIMEOUT, q->timeout_s);
    if (q->stall_s > 0) {
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, q->stall_s);
    }
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, c);
    CURLcode rc = curl_easy_perform(h);
    if (rc == CURLE_OK) {
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &ans->status);
    } else {
        ans->timed_out = rc == CURLE_OPERATION_TIMEDOUT;
        ans->aborted = c->stopped;
        snprintf(ans->error, sizeof ans->error, "%s", curl_easy_strerror(rc));
    }
    if (!q->body && c->nkept) {
        c->kept[c->nkept] = '\0';
        json_t *j = json_loads(c->kept, 0, NULL);
        const char *d = json_string_value(json_object_get(j, "detail"));
        snprintf(ans->detail, sizeof ans->detail, "%s", d ? d : "");
        json_decref(j);
    }
done:
    curl_slist_free_all(hdrs);
    if (auth) {
        memset(auth, 0, strlen(auth));
        free(auth);
    }
    if (h)
        curl_easy_cleanup(h);
    free(c);
}
