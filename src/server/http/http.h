/* The HTTP layer on libmicrohttpd: daemons (TCP and optional unix socket) with every resource
 * bounded (connections in total and per client address, absolute header / body / response
 * deadlines, a memory budget for request bodies, fixed worker pools), an admission step that
 * sees the headers before any body byte, response helpers that match Starlette's output
 * (compact JSON, raw UTF-8, plain-text 500), one log line per request, and an orderly stop.
 * It knows nothing of routes: the application admits requests through an http_admit and
 * answers them through an http_handler. */
#ifndef AIRLOCKD_HTTP_H
#define AIRLOCKD_HTTP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* The largest body any route may take. */
#define HTTP_MAX_BODY (64u * 1024u * 1024u)

typedef struct http_request http_request;
typedef struct http_server http_server;

/* Where a request's handler runs. */
typedef enum {
    HTTP_RUN_QUICK = 0, /* the worker pool for short requests (the default) */
    HTTP_RUN_LONG,      /* the pool for requests that run commands or long I/O */
    HTTP_RUN_INLINE,    /* on the connection's event thread: only for answers that never block */
} http_run;

/* A request body handed to the application as it arrives instead of held in memory (an
 * airlock extension's raw uploads): write gets each chunk on the event thread (it must not
 * block for long: a file write is fine) and keeps its own failures for the handler to answer;
 * done runs exactly once when the request ends, answered or not (a client that hung up, a
 * body cut short or refused), after the handler when it ran. With a sink, body_cap may exceed
 * HTTP_MAX_BODY and the body memory budget is not touched. */
typedef struct {
    void (*write)(void *ctx, const char *data, size_t n);
    void (*done)(void *ctx);
    void *ctx;
} http_body_sink;

/* What the application decides once the request line and headers are in. */
typedef struct {
    size_t body_cap;         /* most body bytes (≤ HTTP_MAX_BODY): a larger Content-Length is
                              * answered 413 before any body byte is read, a chunked body
                              * growing past it 413 at that point */
    http_run run;
    unsigned long owner;     /* whose share of the body memory budget: 0 = unauthenticated,
                              * else an id of the application's (a tenant, the admin) */
    http_body_sink sink;     /* write NULL (the default): the body is buffered in memory */
} http_admission;

/* Called on an event thread (it must not block for long) before any body byte is read. It
 * either answers at once with one http_send_* (the body is then never read, the handler not
 * called) or fills adm (zeroed on entry: quick pool, no body, owner 0). */
typedef void (*http_admit)(void *cls, http_request *r, http_admission *adm);

/* Called once the whole body is in, on the pool the admission chose; must answer with one
 * http_send_* (else the client gets a 500). */
typedef void (*http_handler)(void *cls, http_request *req);

/* Called once per request that got past its request line, as it is freed, with its status
 * (0: no answer was sent) and seconds since its start; on any thread, so it must be quick
 * (the application counts it). */
typedef void (*http_finished)(void *cls, http_request *r, unsigned status, double seconds);

/* Every limit of the layer; http_limits_default gives the documented defaults. */
typedef struct {
    unsigned max_connections;     /* per listening socket (TCP, unix) */
    unsigned max_per_client;      /* per client IP address: over it, 503 + Retry-After; at
                                   * twice it the connection is closed unanswered */
    unsigned header_timeout_s;    /* connect (or the previous response) → headers complete */
    unsigned transfer_timeout_s;  /* a body or a response: this, plus its size at min_rate */
    size_t min_rate;              /* bytes per second a body or a response must at least move */
    size_t body_memory;           /* request bodies held in memory at once, server-wide */
    unsigned quick_threads, long_threads; /* the two worker pools */
    unsigned queue;               /* requests waiting per pool; past it 503 + Retry-After */
} http_limits;

/* Documented in docs/server.md, "Limits". */
#define HTTP_DEFAULT_MAX_CONNECTIONS 4096u
#define HTTP_DEFAULT_MAX_PER_CLIENT 256u /* 4 SDK processes on one host (each opens at most 64) */
#define HTTP_DEFAULT_HEADER_TIMEOUT 10u
#define HTTP_DEFAULT_TRANSFER_TIMEOUT 10u
#define HTTP_DEFAULT_MIN_RATE (256u * 1024u)
#define HTTP_DEFAULT_BODY_MEMORY (256u * 1024u * 1024u)
#define HTTP_DEFAULT_QUICK_THREADS 8u
#define HTTP_DEFAULT_LONG_THREADS 32u
#define HTTP_DEFAULT_QUEUE 256u
/* A request with an unauthenticated owner may send at most this much (the reference answers
 * an unparseable small body 422 before it checks the key; larger ones get 401 unread). */
#define HTTP_UNAUTH_BODY_MAX (16u * 1024u)

void http_limits_default(http_limits *l);

typedef struct {
    const char *host;      /* TCP listen address */
    unsigned port;         /* 0 = ephemeral */
    const char *unix_path; /* also listen on this unix socket when non-NULL */
    http_admit admit;
    http_handler handler;
    http_finished finished; /* NULL: none */
    void *cls;             /* passed to admit, handler and finished */
    http_limits limits;
} http_options;

/* Starts listening; NULL with a message in err on failure. */
http_server *http_start(const http_options *o, char *err, size_t errlen);
unsigned http_port(const http_server *s);
/* The connection limit in force (lowered to fit the descriptor limit when needed). */
unsigned http_max_connections(const http_server *s);

/* Stops accepting: the listening sockets close at once; requests on open connections get
 * 503. Requests already admitted carry on. */
void http_quiesce(http_server *s);
/* Requests admitted and not yet answered and sent. */
unsigned http_in_flight(http_server *s);
/* Ends what is still in flight: running handlers see their client gone (a command they run
 * is killed through http_client_fd) and answer 503; bodies still arriving are cut. */
void http_cancel(http_server *s);
/* Closes everything and frees s. Only once nothing is in flight (a handler still running
 * holds a connection MHD must not free): returns false and leaves s when something is. */
bool http_stop(http_server *s);

const char *http_method(const http_request *r);
const char *http_path(const http_request *r);          /* percent-decoded path */
const char *http_raw_query(const http_request *r);     /* after '?', or NULL */
const char *http_body(const http_request *r, size_t *len);
const char *http_header(const http_request *r, const char *name);
/* The body the client announced: its Content-Length (0 when none), *chunked when it is
 * sent chunked instead. */
unsigned long long http_declared_length(const http_request *r, bool *chunked);

/* Last value of a query parameter (decoded, may contain NUL): malloc'd copy or NULL. */
char *http_query(const http_request *r, const char *name, size_t *len);

/* The client's socket, for a handler to watch while it works (POLLRDHUP/POLLHUP/POLLERR:
 * the client hung up, or the server is stopping); -1 when there is none. */
int http_client_fd(const http_request *r);

/* Room for the application's own record about a request (zeroed at its start), filled at
 * admission and read by the handler. */
#define HTTP_APP_DATA 128
void *http_app_data(http_request *r);
/* The server-wide memory budget of request bodies: bytes held now and the total. */
void http_body_budget(const http_request *r, size_t *used, size_t *total);

/* Marks r's answer, whatever it is: the header (name, value) on it and, when it is a JSON
 * object of a 2xx status, json_key: true in it (static strings; set before answering). */
void http_note(http_request *r, const char *header, const char *value, const char *json_key);

/* Serialises like Starlette's JSONResponse; takes ownership of body. */
void http_send_json(http_request *r, unsigned status, json_t *body);
void http_send_json_header(http_request *r, unsigned status, json_t *body,
                           const char *hname, const char *hvalue);
/* {"detail": "<text>"} */
void http_send_detail(http_request *r, unsigned status, const char *detail);
/* {"detail": "<text>"} with a Retry-After of retry_s seconds */
void http_send_retry(http_request *r, unsigned status, const char *detail, unsigned retry_s);
/* Streams size bytes of the open file fd (from its offset 0) as the body, never holding them
 * in memory (sendfile where the kernel can); takes fd, closed once sent or on failure. */
void http_send_file(http_request *r, unsigned status, int fd, unsigned long long size, const char *ctype);
/* len bytes of data (copied) as the body, of type ctype, with headers (name, value pairs,
 * NULL-terminated; NULL: none): the status page's files */
void http_send_bytes(http_request *r, unsigned status, const void *data, size_t len, const char *ctype,
                     const char *const *headers);
/* 500 "Internal Server Error", text/plain; charset=utf-8 */
void http_send_500(http_request *r);
/* 307 with a location header and an empty body */
void http_send_redirect(http_request *r, const char *location);
void http_send_405(http_request *r, const char *allow);

/* ---- streamed answers (ours: the streaming form of exec) ----------------------------
 * A handler running on a worker pool may answer with a chunked 200 whose body it writes
 * while it keeps running. Between the handler and the socket sits a queue of about cap
 * bytes: a client that reads slowly makes http_stream_full true (the handler then stops
 * producing) instead of making the server buffer without bound. The stream ends when the
 * handler returns. */
typedef struct http_stream http_stream;

/* Starts the answer (status 200, content type ctype, chunked); max_s: the longest the whole
 * answer may take to send (the connection is cut after that). NULL when it cannot start
 * (out of memory, or r is not on a worker pool): answer with an http_send_* instead. After
 * it, no http_send_* has any effect. */
http_stream *http_stream_begin(http_request *r, const char *ctype, size_t cap, unsigned max_s);
/* Queues bytes (even past cap: the caller checks http_stream_full); false once the client
 * is gone (the bytes are dropped). */
bool http_stream_write(http_stream *st, const char *data, size_t len);
/* Whether the queue holds cap bytes or more. */
bool http_stream_full(http_stream *st);
/* Turns readable when the client took bytes from a full queue (poll it, then ask
 * http_stream_full again). */
int http_stream_room_fd(const http_stream *st);
/* The client's connection, for as long as the stream lives (POLLRDHUP/POLLHUP/POLLERR: the
 * client hung up, or the server is stopping); -1 when there is none. */
int http_stream_cancel_fd(const http_stream *st);

#endif
