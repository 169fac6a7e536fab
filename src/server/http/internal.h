/* The request record shared by the HTTP layer's files (private to http/). */
#ifndef AIRLOCKD_HTTP_INTERNAL_H
#define AIRLOCKD_HTTP_INTERNAL_H

#include "http/http.h"
#include "util/buf.h"

#include <microhttpd.h>
#include <time.h>

struct http_request {
    struct MHD_Connection *conn;
    char *raw_uri;
    const char *method;
    const char *url;
    size_t max_body;    /* the body cap of the request's route (0: no body at all) */
    buffer body;
    bool started, too_large, responded;
    unsigned status;
    struct timespec t0;
};

/* Queues the one response of r (later calls are ignored). data is copied. */
void http_queue(http_request *r, unsigned status, const char *data, size_t len,
                const char *ctype, const char *hname, const char *hvalue);

#endif
