/* The HTTP server on libmicrohttpd: daemons (an epoll thread pool that only does I/O), the
 * request lifecycle (admission from the headers, the body into a buffer reserved from the
 * budget, the handler on a worker pool while the connection is suspended, the response),
 * deadlines handed to the connection table, one log line per request, the orderly stop. */
#include "http/internal.h"
#include "http/linger.h"
#include "http/strict.h"
#include "log/log.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* Descriptors kept for everything but connections (sandboxes, stores, tree walks). */
#define FD_RESERVE 256
/* Headers, the request line and MHD's own buffers per connection: larger headers get 431. */
#define CONNECTION_MEMORY (32u * 1024u)
/* The listen queue (the kernel clamps it to net.core.somaxconn, 4096 by default): deep enough
 * that a flood of reconnecting clients at the cap rarely fills it, so a newcomer's SYN is
 * queued and accepted (eviction keeps accepting) instead of dropped and retried a second later. */
#define LISTEN_BACKLOG 4096u
/* A chunked body's first buffer; it doubles as the body grows (each step from the budget). */
#define CHUNKED_FIRST (64u * 1024u)
/* MHD logs every peer that hangs up: under a flood, say so once instead of a line each. */
#define LOG_BURST 20
#define LOG_WINDOW_S 60

void http_limits_default(http_limits *l)
{
    *l = (http_limits){
        .max_connections = HTTP_DEFAULT_MAX_CONNECTIONS,
        .max_per_client = HTTP_DEFAULT_MAX_PER_CLIENT,
        .header_timeout_s = HTTP_DEFAULT_HEADER_TIMEOUT,
        .transfer_timeout_s = HTTP_DEFAULT_TRANSFER_TIMEOUT,
        .min_rate = HTTP_DEFAULT_MIN_RATE,
        .body_memory = HTTP_DEFAULT_BODY_MEMORY,
        .quick_threads = HTTP_DEFAULT_QUICK_THREADS,
        .long_threads = HTTP_DEFAULT_LONG_THREADS,
        .queue = HTTP_DEFAULT_QUEUE,
    };
}

/* libmicrohttpd's own messages (a bind failure, a client's protocol error), as warnings, at
 * most LOG_BURST per LOG_WINDOW_S so a flood of bad clients cannot flood the log. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static time_t window;
    static unsigned shown, dropped;
    time_t now = time(NULL);
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    pthread_mutex_lock(&mu);
    if (now - window >= LOG_WINDOW_S) {
        if (dropped)
            log_warn("http: %u more messages in %d s not shown", dropped, LOG_WINDOW_S);
        window = now;
        shown = dropped = 0;
    }
    bool show = shown < LOG_BURST;
    if (show) {
        shown++;
        log_warn("http: %s", msg);
    } else {
        dropped++;
    }
    pthread_mutex_unlock(&mu);
}

/* A deadline: now, plus base_s, plus the time bytes take at rate bytes per second. */
static int64_t after_ms(unsigned base_s, size_t bytes, size_t rate)
{
    return conns_now_ms() + (int64_t)base_s * 1000 + (int64_t)((double)bytes * 1000.0 / (double)(rate ? rate : 1));
}

/* ---- connections ------------------------------------------------------------------ */

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_ctx,
                          enum MHD_ConnectionNotificationCode code)
{
    http_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *addr = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        *socket_ctx = fd ? conns_open(&s->conns, fd->connect_fd, addr ? addr->client_addr : NULL) : NULL;
        if (!*socket_ctx && fd && shutdown(fd->connect_fd, SHUT_RDWR) != 0 && errno != ENOTCONN)
            log_warn("http: shutdown: %s", strerror(errno)); /* no slot: it could not be bounded, drop it */
    } else if (*socket_ctx) {
        conns_close(&s->conns, *socket_ctx); /* MHD closes the fd only after this */
        *socket_ctx = NULL;
    }
}

static conn_slot *slot_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* ---- requests ----------------------------------------------------------------------- */

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    http_server *s = cls;
    conns_talking(&s->conns, slot_of(c)); /* evicted after silent connections */
    http_request *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->server = cls;
    r->raw_uri = strdup(uri ? uri : "");
    r->uri_at = uri; /* where MHD holds it: the version follows its end (see raw_nul_in_target) */
    r->uri_len = uri ? strlen(uri) : 0;
    atomic_init(&r->stopping, false);
    atomic_init(&r->stream, NULL);
    atomic_init(&r->holders, 1);
    clock_gettime(CLOCK_MONOTONIC, &r->t0);
    return r;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    http_server *s = cls;
    http_request *r = *con_cls;
    /* a kept-alive connection owes its next request's headers from now */
    conn_slot *slot = slot_of(c);
    if (slot)
        conns_set(&s->conns, slot, PHASE_HEADERS, after_ms(s->lim.header_timeout_s, 0, 1));
    if (!r)
        return;
    if (r->body_unread && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) {
        const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (fd)
            http_linger(fd->connect_fd); /* the answer is out; MHD closes next */
    }
    *con_cls = NULL;
    /* a streamed answer's worker may still run: the last of the two frees r */
    if (atomic_load(&r->stream) && atomic_fetch_sub(&r->holders, 1) != 1)
        return;
    http_request_free(s, r);
}

/* Queues the response the request holds (a 500 when it has none). Answered from the headers,
 * a body is never read: MHD closes after the answer, and a client still sending would get a
 * reset that can cost it the answer, so the close lingers (on_completed). */
static enum MHD_Result queue_kept(http_request *r)
{
    http_server *s = r->server;
    if (!r->response)
        http_send_500(r);
    r->body_unread = r->state == RQ_NEW && (r->declared > 0 || r->chunked);
    r->state = RQ_ANSWERED;
    if (!r->response)
        return MHD_NO; /* out of memory: drop the connection */
    enum MHD_Result ok = MHD_queue_response(r->conn, r->status, r->response);
    MHD_destroy_response(r->response);
    r->response = NULL;
    conns_set(&s->conns, r->slot, PHASE_RESPOND,
              after_ms(s->lim.transfer_timeout_s + r->respond_s, r->response_len, s->lim.min_rate));
    return ok;
}

/* MHD 0.9.75 accepts a response only before the first body byte or after the last one, so a
 * refusal in the middle of a body is written to the socket directly (nothing else was sent
 * on this request: no 100 Continue without an Expect) and the connection then closed. Plain
 * HTTP only. */
static enum MHD_Result refuse_raw(http_request *r, unsigned status, const char *reason, const char *detail)
{
    char buf[512];
    int n = snprintf(buf, sizeof buf,
                     "HTTP/1.1 %u %s\r\nconnection: close\r\ncontent-type: application/json\r\n"
                     "%scontent-length: %zu\r\n\r\n{\"detail\":\"%s\"}",
                     status, reason, status == 503 ? "retry-after: 1\r\n" : "", strlen(detail) + 13, detail);
    int fd = http_client_fd(r);
    if (fd >= 0 && n > 0 && (size_t)n < sizeof buf &&
        send(fd, buf, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno != EAGAIN && errno != EPIPE &&
        errno != ECONNRESET)
        log_warn("http: send: %s", strerror(errno));
    /* MHD closes the connection when this returns MHD_NO: the client may still be sending */
    http_linger(fd);
    r->status = status;
    r->answered_raw = true;
    r->state = RQ_ANSWERED;
    return MHD_NO;
}

static worker_pool *pool_of(http_server *s, http_run run)
{
    return run == HTTP_RUN_LONG ? s->slow : s->quick;
}

/* Grows r's body buffer to exactly cap bytes, taking the difference from the budget first. */
static bool grow_body(http_server *s, http_request *r, size_t cap)
{
    size_t more = cap > r->budget_held ? cap - r->budget_held : 0;
    if (!budget_take(&s->budget, r->adm.owner, more))
        return false;
    r->budget_held += more;
    return buf_grow_to(&r->body, cap) == 0;
}

/* The request line and headers are in, no body byte has been read. */
static enum MHD_Result on_headers(http_server *s, http_request *r)
{
    const char *cl = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    const char *te = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    r->declared = cl ? strtoull(cl, NULL, 10) : 0; /* MHD has checked it is a number */
    r->chunked = te != NULL;                       /* MHD accepts only chunked */
    r->counted = true;
    atomic_fetch_add(&s->in_flight, 1);
    if (r->slot && r->slot->over_cap) {
        char msg[128];
        snprintf(msg, sizeof msg, "Too many connections from your address (limit %u); retry later.",
                 s->lim.max_per_client);
        http_send_retry(r, 503, msg, 1);
        return queue_kept(r);
    }
    if (atomic_load(&s->draining)) {
        http_send_retry(r, 503, "The server is shutting down; retry later.", 1);
        return queue_kept(r);
    }
    s->admit(s->cls, r, &r->adm);
    if (r->response) /* answered from the headers: the body is never read */
        return queue_kept(r);
    bool sunk = r->adm.sink.write != NULL; /* streamed to the application: no memory held */
    size_t cap = sunk || r->adm.body_cap < HTTP_MAX_BODY ? r->adm.body_cap : HTTP_MAX_BODY;
    r->adm.body_cap = cap;
    if (r->declared > cap) {
        http_send_detail(r, 413, "Request body too large");
        return queue_kept(r);
    }
    if (sunk) {
        r->body_deadline_ms = after_ms(s->lim.transfer_timeout_s, r->chunked ? cap : (size_t)r->declared,
                                       s->lim.min_rate);
        conns_set(&s->conns, r->slot, PHASE_BODY, r->body_deadline_ms);
        r->state = RQ_BODY;
        return MHD_YES;
    }
    /* the buffer's whole size is taken from the budget before it is allocated: a declared
     * body's at once (malloc maps it lazily, so memory is used only as bytes arrive), a
     * chunked one's as it grows */
    size_t want = r->chunked ? (cap < CHUNKED_FIRST ? cap : CHUNKED_FIRST) : (size_t)r->declared;
    buf_init(&r->body, cap);
    if ((want > 0 || r->chunked) && !grow_body(s, r, want + 1)) {
        http_send_retry(r, 503, "The server is busy with other uploads; retry later.", 1);
        return queue_kept(r);
    }
    r->body_deadline_ms = after_ms(s->lim.transfer_timeout_s, r->chunked ? cap : (size_t)r->declared, s->lim.min_rate);
    conns_set(&s->conns, r->slot, PHASE_BODY, r->body_deadline_ms);
    r->state = RQ_BODY;
    return MHD_YES;
}

static enum MHD_Result on_body(http_server *s, http_request *r, const char *data, size_t *size)
{
    size_t n = *size;
    *size = 0;
    if (conns_now_ms() > r->body_deadline_ms)
        return refuse_raw(r, 408, "Request Timeout", "Request body not received in time");
    if (r->adm.sink.write) {
        if (n > r->adm.body_cap - r->sunk)
            return refuse_raw(r, 413, "Payload Too Large", "Request body too large");
        r->sunk += n;
        r->adm.sink.write(r->adm.sink.ctx, data, n);
        return MHD_YES;
    }
    if (n > r->adm.body_cap - r->body.len)
        return refuse_raw(r, 413, "Payload Too Large", "Request body too large");
    size_t need = r->body.len + n + 1;
    if (need > r->body.cap) { /* chunked: double, within the cap */
        size_t cap1 = r->adm.body_cap + 1, twice = r->body.cap > cap1 / 2 ? cap1 : 2 * r->body.cap;
        if (!grow_body(s, r, need > twice ? need : twice))
            return refuse_raw(r, 503, "Service Unavailable", "The server is busy with other uploads; retry later.");
    }
    if (buf_append(&r->body, data, n) != 0)
        return refuse_raw(r, 503, "Service Unavailable", "The server is out of memory for request bodies; retry later.");
    return MHD_YES;
}

/* A worker runs the handler of a suspended request, then resumes it. A client that hung up
 * is not special here: a command it started was killed through http_client_fd, and its
 * answer fails to send (a client that only half-closed still gets it). */
static void run_job(void *job)
{
    http_request *r = job;
    http_server *s = r->server;
    if (atomic_load(&s->cancelling))
        atomic_store(&r->stopping, true);
    if (!atomic_load(&r->stopping))
        s->handler(s->cls, r);
    if (atomic_load(&r->stream)) {
        http_stream_finish(r); /* its connection was resumed when the stream began */
        return;
    }
    if (atomic_load(&r->stopping))
        refuse_raw(r, 503, "Service Unavailable", "The server is shutting down; the request was stopped. Retry later.");
    r->state = RQ_RESUMED;
    MHD_resume_connection(r->conn); /* safe from any thread (MHD_ALLOW_SUSPEND_RESUME) */
}

/* The whole body is in: run the handler where the admission said. */
static enum MHD_Result on_complete(http_server *s, http_request *r)
{
    conns_set(&s->conns, r->slot, PHASE_HANDLER, 0);
    if (r->adm.run == HTTP_RUN_INLINE) {
        s->handler(s->cls, r);
        return queue_kept(r);
    }
    worker_pool *p = pool_of(s, r->adm.run);
    if (!pool_reserve(p)) {
        http_send_retry(r, 503, "The server is busy; retry later.", 1);
        return queue_kept(r);
    }
    r->state = RQ_RUNNING;
    MHD_suspend_connection(r->conn);
    pool_submit(p, r);
    return MHD_YES;
}

/* MHD ends the request target at a raw NUL byte: the version it parsed then does not follow
 * the target's end in its buffer (the space before it became the target's terminator). */
static bool raw_nul_in_target(const http_request *r, const char *version)
{
    return r->uri_at && version && version != r->uri_at + r->uri_len + 1;
}

/* Framing a proxy may read differently is refused before the application sees it. */
static bool refused_as_framing(http_request *r, const char *version)
{
    const char *detail = NULL;
    unsigned status =
        http_strict_check(r->conn, version, r->raw_uri ? r->raw_uri : "", raw_nul_in_target(r, version), &detail);
    if (!status)
        return false;
    http_strict_refuse(r, status, detail);
    return true;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    http_server *s = cls;
    http_request *r = *con_cls;
    if (!r)
        return MHD_NO; /* out of memory in on_uri: drop the connection */
    switch (r->state) {
    case RQ_NEW:
        r->started = true;
        r->conn = c;
        r->url = url;
        r->method = method;
        snprintf(r->log_method, sizeof r->log_method, "%s", method ? method : "-");
        r->slot = slot_of(c);
        if (refused_as_framing(r, version))
            return queue_kept(r);
        return on_headers(s, r);
    case RQ_BODY:
        if (*upload_size)
            return on_body(s, r, upload, upload_size);
        return on_complete(s, r);
    case RQ_RESUMED:
        return r->answered_raw ? MHD_NO : queue_kept(r);
    case RQ_RUNNING:
        return MHD_YES; /* not called while suspended */
    case RQ_ANSWERED:
        break;
    }
    *upload_size = 0; /* answered before the body: drop what arrives */
    return MHD_YES;
}

/* ---- daemons ------------------------------------------------------------------------ */

static unsigned event_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 2 ? 2 : n > 8 ? 8 : (unsigned)n;
}

/* A daemon serving the listening socket fd (bound by us, so a bind failure is said with the
 * address and the reason instead of libmicrohttpd's "Failed to bind to port 0"). */
static struct MHD_Daemon *start_daemon(http_server *s, int fd, unsigned threads)
{
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    /* the address option differs in type, so the common options follow it */
#define COMMON_OPTIONS                                                                           \
    MHD_OPTION_THREAD_POOL_SIZE, threads,                                                        \
    MHD_OPTION_CONNECTION_LIMIT, s->conn_limit,                                                  \
    MHD_OPTION_PER_IP_CONNECTION_LIMIT, 2 * s->lim.max_per_client,                               \
    MHD_OPTION_CONNECTION_TIMEOUT, idle_s,                                                       \
    MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONNECTION_MEMORY,                               \
    MHD_OPTION_LISTEN_BACKLOG_SIZE, LISTEN_BACKLOG,                                              \
    MHD_OPTION_NOTIFY_CONNECTION, on_connection, (void *)s,                                      \
    MHD_OPTION_URI_LOG_CALLBACK, on_uri, (void *)s,                                              \
    MHD_OPTION_NOTIFY_COMPLETED, on_completed, (void *)s,                                        \
    MHD_OPTION_END
    /* MHD's idle timer restarts with every byte: only a backstop behind the sweeper */
    unsigned idle_s = 3 * (s->lim.header_timeout_s > s->lim.transfer_timeout_s ? s->lim.header_timeout_s
                                                                               : s->lim.transfer_timeout_s);
    return MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, (void *)s,
                            MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd, COMMON_OPTIONS);
#undef COMMON_OPTIONS
}

/* The connection limit per daemon: the setting, within the descriptors left after the
 * reserve (the caller has raised the soft limit to the hard one). */
static unsigned fit_connections(unsigned wanted, unsigned daemons)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return wanted;
    rlim_t room = rl.rlim_cur > 2 * FD_RESERVE ? (rl.rlim_cur - FD_RESERVE) / daemons : FD_RESERVE / daemons;
    return room < wanted ? (unsigned)room : wanted;
}

/* The open connections of a listening socket from which each newcomer evicts the oldest one
 * still owing its headers: a 16th below the daemon's cap (at least 2, at most 256 below),
 * so MHD stays under its own cap and keeps accepting while evicted sockets close. */
static unsigned evict_at(unsigned conn_limit)
{
    unsigned room = conn_limit / 16;
    room = room < 2 ? 2 : room > 256 ? 256 : room;
    return conn_limit > room ? conn_limit - room : 1;
}

/* A TCP socket bound to ai and listening; -1 with err saying the address and why. */
static int listen_tcp(const struct addrinfo *ai, const char *host, unsigned port, char *err, size_t errlen)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd >= 0) {
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one); /* a restart reuses the port at once */
        if (ai->ai_family == AF_INET6)
            (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one); /* exactly the address asked */
    }
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, (int)LISTEN_BACKLOG) != 0) {
        int e = errno;
        snprintf(err, errlen, "--listen: cannot listen on %s%s%s:%u: %s", strchr(host, ':') ? "[" : "", host,
                 strchr(host, ':') ? "]" : "", port, strerror(e));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* The port a listening socket is bound to (the one chosen for port 0). */
static unsigned bound_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return 0;
    return ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                    : ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

static int listen_unix(const char *path, char *err, size_t errlen)
{
    struct sockaddr_un sun = {0};
    sun.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof sun.sun_path) {
        snprintf(err, errlen, "--unix: path too long");
        return -1;
    }
    strcpy(sun.sun_path, path);
    unlink(path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sun, sizeof sun) != 0 || listen(fd, (int)LISTEN_BACKLOG) != 0) {
        snprintf(err, errlen, "--unix: cannot listen on %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* Frees what http_start made; the daemons are stopped first (nothing may be in flight). */
static void destroy(http_server *s)
{
    if (s->unix_d)
        MHD_stop_daemon(s->unix_d);
    if (s->tcp)
        MHD_stop_daemon(s->tcp);
    pool_free(s->quick);
    pool_free(s->slow);
    conns_free(&s->conns);
    budget_free(&s->budget);
    free(s);
}

http_server *http_start(const http_options *o, char *err, size_t errlen)
{
    http_server *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->admit = o->admit;
    s->handler = o->handler;
    s->finished = o->finished;
    s->cls = o->cls;
    s->lim = o->limits;
    atomic_init(&s->in_flight, 0);
    atomic_init(&s->draining, false);
    atomic_init(&s->cancelling, false);
    unsigned daemons = o->unix_path ? 2 : 1;
    s->conn_limit = fit_connections(s->lim.max_connections, daemons);
    if (s->conn_limit < s->lim.max_connections)
        log_warn("at most %u connections per listening socket (the descriptor limit allows no more)",
                 s->conn_limit);
    size_t slots = (size_t)s->conn_limit * daemons + 16;
    /* one owner per request in flight at most, one request per connection */
    size_t share = s->lim.body_memory / 4 > HTTP_MAX_BODY + 1 ? s->lim.body_memory / 4 : HTTP_MAX_BODY + 1;
    if (!conns_init(&s->conns, slots, s->lim.max_per_client, evict_at(s->conn_limit), s->lim.header_timeout_s) ||
        !budget_init(&s->budget, s->lim.body_memory, share, slots) ||
        !(s->quick = pool_new(s->lim.quick_threads, s->lim.queue, run_job)) ||
        !(s->slow = pool_new(s->lim.long_threads, s->lim.queue, run_job)) || !conns_start(&s->conns)) {
        snprintf(err, errlen, "cannot start the HTTP layer: out of memory or threads");
        destroy(s);
        return NULL;
    }
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%u", o->port);
    int gai = getaddrinfo(o->host, portstr, &hints, &ai);
    if (gai != 0) {
        snprintf(err, errlen, "--listen: cannot resolve '%s': %s", o->host, gai_strerror(gai));
        destroy(s);
        return NULL;
    }
    int tcp_fd = listen_tcp(ai, o->host, o->port, err, errlen);
    freeaddrinfo(ai);
    if (tcp_fd < 0) {
        destroy(s);
        return NULL;
    }
    s->port = bound_port(tcp_fd);
    s->tcp = start_daemon(s, tcp_fd, event_threads());
    if (!s->tcp) {
        close(tcp_fd);
        snprintf(err, errlen, "--listen: cannot start the daemon on %s:%u", o->host, s->port);
        destroy(s);
        return NULL;
    }
    if (o->unix_path) {
        int fd = listen_unix(o->unix_path, err, errlen);
        if (fd < 0) {
            destroy(s);
            return NULL;
        }
        s->unix_d = start_daemon(s, fd, 1);
        if (!s->unix_d) {
            close(fd);
            snprintf(err, errlen, "--unix: cannot start the daemon on %s", o->unix_path);
            destroy(s);
            return NULL;
        }
    }
    return s;
}

unsigned http_port(const http_server *s)
{
    return s->port;
}

unsigned http_max_connections(const http_server *s)
{
    return s->conn_limit;
}

void http_quiesce(http_server *s)
{
    atomic_store(&s->draining, true);
    struct MHD_Daemon *d[2] = {s->tcp, s->unix_d};
    for (int i = 0; i < 2; i++) {
        MHD_socket fd = d[i] ? MHD_quiesce_daemon(d[i]) : MHD_INVALID_SOCKET;
        if (fd != MHD_INVALID_SOCKET && close(fd) != 0)
            log_warn("http: closing a listening socket: %s", strerror(errno));
    }
}

unsigned http_in_flight(http_server *s)
{
    return atomic_load(&s->in_flight);
}

/* Ends a running handler's wait: its command's watch on the client's socket fires (shutting
 * the reading side reports POLLRDHUP), and the worker then answers 503. */
static void stop_running(void *job, void *ctx)
{
    (void)ctx;
    http_request *r = job;
    atomic_store(&r->stopping, true);
    /* a streamed answer's connection may be gone already: its own duplicate stays valid */
    http_stream *st = atomic_load(&r->stream);
    int fd = st ? http_stream_cancel_fd(st) : http_client_fd(r);
    if (fd >= 0 && shutdown(fd, SHUT_RD) != 0 && errno != ENOTCONN)
        log_warn("http: shutdown: %s", strerror(errno));
}

void http_cancel(http_server *s)
{
    atomic_store(&s->cancelling, true);
    pool_each_running(s->quick, stop_running, NULL);
    pool_each_running(s->slow, stop_running, NULL);
    conns_cut_all(&s->conns);
}

bool http_stop(http_server *s)
{
    if (!s)
        return true;
    if (atomic_load(&s->in_flight) > 0)
        return false;
    destroy(s);
    return true;
}
