/* The HTTP layer on libmicrohttpd: daemons (TCP and optional unix socket), body
 * accumulation with a per-route size cap, response helpers that match Starlette's output
 * (compact JSON, raw UTF-8, plain-text 500), one log line per request. It knows nothing of
 * routes: the application answers through an http_handler and sizes bodies through an
 * http_body_limit. */
#ifndef AIRLOCKD_HTTP_H
#define AIRLOCKD_HTTP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* The largest body any request may have (and the cap when no http_body_limit is given). */
#define HTTP_MAX_BODY (64u * 1024u * 1024u)

typedef struct http_request http_request;
typedef struct http_server http_server;

/* Called once per request when the whole body is in; must answer with one http_send_*. */
typedef void (*http_handler)(void *cls, http_request *req);

/* The largest body (bytes, at most HTTP_MAX_BODY; 0: none) accepted for method and the
 * decoded path; asked once the headers are in. A larger Content-Length or body is answered
 * 413 without calling the handler. */
typedef size_t (*http_body_limit)(void *cls, const char *method, const char *path);

typedef struct {
    const char *host;          /* TCP listen address */
    unsigned port;             /* 0 = ephemeral */
    const char *unix_path;     /* also listen on this unix socket when non-NULL */
    http_handler handler;
    http_body_limit body_limit; /* NULL: HTTP_MAX_BODY for every request */
    void *cls;                 /* passed to handler and body_limit */
} http_options;

/* Starts listening; NULL with a message in err on failure. */
http_server *http_start(const http_options *o, char *err, size_t errlen);
unsigned http_port(const http_server *s);
void http_stop(http_server *s);

const char *http_method(const http_request *r);
const char *http_path(const http_request *r);          /* percent-decoded path */
const char *http_raw_query(const http_request *r);     /* after '?', or NULL */
const char *http_body(const http_request *r, size_t *len);
const char *http_header(const http_request *r, const char *name);

/* Last value of a query parameter (decoded, may contain NUL): malloc'd copy or NULL. */
char *http_query(const http_request *r, const char *name, size_t *len);

/* Serialises like Starlette's JSONResponse; takes ownership of body. */
void http_send_json(http_request *r, unsigned status, json_t *body);
void http_send_json_header(http_request *r, unsigned status, json_t *body,
                           const char *hname, const char *hvalue);
/* {"detail": "<text>"} */
void http_send_detail(http_request *r, unsigned status, const char *detail);
/* 500 "Internal Server Error", text/plain; charset=utf-8 */
void http_send_500(http_request *r);
/* 307 with a location header and an empty body */
void http_send_redirect(http_request *r, const char *location);
void http_send_405(http_request *r, const char *allow);

#endif
