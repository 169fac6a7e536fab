/* The records shared by the HTTP layer's files (private to http/): the server and one
 * request. */
#ifndef AIRLOCKD_HTTP_INTERNAL_H
#define AIRLOCKD_HTTP_INTERNAL_H

#include "http/budget.h"
#include "http/conns.h"
#include "http/http.h"
#include "http/pool.h"
#include "util/buf.h"

#include <microhttpd.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <time.h>

struct http_server {
    struct MHD_Daemon *tcp, *unix_d;
    http_admit admit;
    http_handler handler;
    http_finished finished;
    void *cls;
    http_limits lim;
    unsigned port;
    unsigned conn_limit;        /* per daemon, after fitting the descriptor limit */
    conn_table conns;
    body_budget budget;
    worker_pool *quick, *slow;  /* HTTP_RUN_QUICK, HTTP_RUN_LONG */
    atomic_uint in_flight;      /* requests past their headers and not yet completed */
    atomic_bool draining;       /* http_quiesce: new requests get 503 */
    atomic_bool cancelling;     /* http_cancel: handlers answer 503 */
};

typedef enum {
    RQ_NEW,      /* request line seen, headers not yet handled */
    RQ_BODY,     /* admitted: reading the body */
    RQ_RUNNING,  /* suspended while a worker runs the handler */
    RQ_RESUMED,  /* the worker is done: queue its response (or close) */
    RQ_ANSWERED, /* a response is queued */
} request_state;

struct http_request {
    http_server *server;
    struct MHD_Connection *conn;
    conn_slot *slot;
    char *raw_uri;
    const char *uri_at;            /* the target in MHD's buffer (only compared, never read) */
    size_t uri_len;
    const char *method;
    const char *url;
    char log_method[12];           /* copies for the log line, which a streamed answer writes */
                                   /* after MHD freed the connection's own strings */
    request_state state;
    bool started;                  /* headers seen: logged at the end */
    bool counted;                  /* in server->in_flight */
    http_admission adm;
    unsigned long long declared;   /* Content-Length */
    bool chunked;
    size_t budget_held;            /* bytes of the body budget this request holds */
    int64_t body_deadline_ms;
    buffer body;
    unsigned long long sunk;       /* body bytes handed to adm.sink so far */
    struct MHD_Response *response; /* what the handler answered, until queued */
    size_t response_len;
    unsigned status;
    bool answered_raw;             /* answered on the socket itself: close instead */
    bool body_unread;              /* answered from the headers with a body still to come */
    atomic_bool stopping;          /* http_cancel reached it while its handler ran */
    /* A streamed answer (http_stream_begin): the connection and the worker each hold the
     * request; the last of them to let go frees it. */
    _Atomic(http_stream *) stream;
    atomic_int holders;
    unsigned respond_s;            /* extra seconds the response may take (a stream's) */
    struct timespec t0;
    const char *note_header, *note_value, *note_key; /* http_note's (static strings) */
    alignas(max_align_t) unsigned char app[HTTP_APP_DATA];
};

/* Adds r's note (http_note) to resp. */
void http_note_apply(const http_request *r, struct MHD_Response *resp);

/* Frees r (logs it, gives back its budget); its connection is done with it. */
void http_request_free(http_server *s, http_request *r);
/* The handler of a streamed answer returned: ends the stream, lets go of r. */
void http_stream_finish(http_request *r);

/* Keeps the one response of r (later calls are ignored); data is copied. headers: NULL, or
 * name, value, ..., NULL. */
void http_queue(http_request *r, unsigned status, const char *data, size_t len,
                const char *ctype, const char *const *headers);

#endif
