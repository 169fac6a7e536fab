/* The end of a request (http/internal.h): its one log line (debug; warn for a 5xx), the in-flight count, the body
 * budget it held, its response and its memory. Whoever holds it last (the connection's
 * completion, or a streamed answer's worker) frees it. */
#include "http/internal.h"

#include "log/log.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SESSION_PATH "/v1/sessions/"

/* The session a path names (/v1/sessions/{id}[/...]) into id, else "". */
static void session_of(const char *path, char *id, size_t cap)
{
    size_t n = 0;
    if (strncmp(path, SESSION_PATH, sizeof SESSION_PATH - 1) == 0)
        for (const char *p = path + sizeof SESSION_PATH - 1; *p && *p != '/' && n < cap - 1; p++)
            id[n++] = *p;
    id[n] = '\0';
}

/* One line per request at debug: routine traffic (health checks, polling) stays out of the
 * info log; a 5xx is the server's own failure and is said at warn. */
static void log_request(const http_request *r)
{
    log_level lvl = r->status >= 500 ? LV_WARN : LV_DEBUG;
    if (!log_enabled(lvl))
        return;
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - r->t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - r->t0.tv_nsec) / 1e6;
    /* the path only (never headers or the query): no key or file content ends up in logs */
    char path[256];
    size_t i = 0;
    for (const char *p = r->raw_uri ? r->raw_uri : "?"; *p && *p != '?' && i < sizeof path - 1; p++)
        path[i++] = isprint((unsigned char)*p) ? *p : '?';
    path[i] = '\0';
    char sid[64];
    session_of(path, sid, sizeof sid);
    log_session(lvl, sid[0] ? sid : NULL, NULL, "%s %s %u %.1fms", r->log_method[0] ? r->log_method : "-", path,
                r->status, ms);
}

void http_request_free(http_server *s, http_request *r)
{
    if (r->started) {
        log_request(r);
        if (s->finished) { /* the application counts it (its metrics) */
            struct timespec t1;
            clock_gettime(CLOCK_MONOTONIC, &t1);
            s->finished(s->cls, r, r->status,
                        (double)(t1.tv_sec - r->t0.tv_sec) + (double)(t1.tv_nsec - r->t0.tv_nsec) / 1e9);
        }
    }
    if (r->counted)
        atomic_fetch_sub(&s->in_flight, 1);
    budget_give(&s->budget, r->adm.owner, r->budget_held);
    if (r->adm.sink.done)
        r->adm.sink.done(r->adm.sink.ctx);
    if (r->response)
        MHD_destroy_response(r->response);
    free(r->raw_uri);
    buf_free(&r->body);
    free(r);
}
