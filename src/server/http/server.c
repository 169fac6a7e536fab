/* The HTTP server on libmicrohttpd: daemons, the request lifecycle, body accumulation up to
 * the route's cap, one log line per request. */
#include "http/internal.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

struct http_server {
    struct MHD_Daemon *tcp, *unix_d;
    http_handler handler;
    http_body_limit body_limit;
    void *cls;
    unsigned port;
};

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    fputs("airlockd: http: ", stderr);
    vfprintf(stderr, fmt, ap);
}

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    (void)cls;
    (void)c;
    http_request *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->raw_uri = strdup(uri ? uri : "");
    clock_gettime(CLOCK_MONOTONIC, &r->t0);
    return r;
}

static void log_request(const http_request *r)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - r->t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - r->t0.tv_nsec) / 1e6;
    /* the path only (never headers or the query): no key or file content ends up in logs */
    char path[256];
    size_t i = 0;
    for (const char *p = r->url ? r->url : "?"; *p && i < sizeof path - 1; p++)
        path[i++] = isprint((unsigned char)*p) ? *p : '?';
    path[i] = '\0';
    fprintf(stderr, "airlockd: %s %s %u %.1fms\n", r->method ? r->method : "-", path, r->status, ms);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    http_request *r = *con_cls;
    if (!r)
        return;
    if (r->started)
        log_request(r);
    free(r->raw_uri);
    buf_free(&r->body);
    free(r);
    *con_cls = NULL;
}





static void send_too_large(http_request *r)
{
    http_send_detail(r, 413, "Request body too large");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    (void)version;
    http_server *s = cls;
    http_request *r = *con_cls;
    if (!r)
        return MHD_NO; /* out of memory in on_uri: drop the connection */
    if (!r->started) {
        r->started = true;
        r->conn = c;
        r->url = url;
        r->method = method;
        size_t limit = s->body_limit ? s->body_limit(s->cls, method, url) : HTTP_MAX_BODY;
        r->max_body = limit < HTTP_MAX_BODY ? limit : HTTP_MAX_BODY;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > r->max_body) {
            r->too_large = true;
            send_too_large(r); /* answer now; MHD closes the connection afterwards */
        }
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (r->too_large || r->responded)
            return MHD_YES;
        if (n > r->max_body - r->body.len || buf_append(&r->body, upload, n) != 0) {
            r->too_large = true; /* over the cap, or no memory for it */
            buf_free(&r->body);
        }
        return MHD_YES;
    }
    if (r->responded)
        return MHD_YES;
    if (r->too_large) {
        send_too_large(r);
        return MHD_YES;
    }
    s->handler(s->cls, r);
    if (!r->responded)
        http_send_500(r);
    return r->responded ? MHD_YES : MHD_NO;
}

/* Closes a connection idle this long (a half-sent request, an unused keep-alive) so slow
 * clients can't hold connection threads. MHD counts from the last socket activity and does
 * not check while a handler runs, so a long exec or import is not cut off. */
#define HTTP_IDLE_TIMEOUT_S 30

static struct MHD_Daemon *start_daemon(http_server *s, unsigned flags, const struct sockaddr *sa, int fd)
{
    flags |= MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
    /* the address option differs in type, so the common options follow it */
#define COMMON_OPTIONS                                                                  \
    MHD_OPTION_URI_LOG_CALLBACK, on_uri, (void *)s,                                     \
    MHD_OPTION_NOTIFY_COMPLETED, on_completed, (void *)s,                               \
    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)HTTP_IDLE_TIMEOUT_S,                   \
    MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(256 * 1024),                           \
    MHD_OPTION_END
    if (sa)
        return MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
                                MHD_OPTION_EXTERNAL_LOGGER, mhd_log, (void *)s,
                                MHD_OPTION_SOCK_ADDR, sa, COMMON_OPTIONS);
    return MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, (void *)s,
                            MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd, COMMON_OPTIONS);
#undef COMMON_OPTIONS
}

http_server *http_start(const http_options *o, char *err, size_t errlen)
{
    const char *host = o->host, *unix_path = o->unix_path;
    unsigned port = o->port;
    http_server *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->handler = o->handler;
    s->body_limit = o->body_limit;
    s->cls = o->cls;
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%u", port);
    int gai = getaddrinfo(host, portstr, &hints, &ai);
    if (gai != 0) {
        snprintf(err, errlen, "--listen: cannot resolve '%s': %s", host, gai_strerror(gai));
        free(s);
        return NULL;
    }
    s->tcp = start_daemon(s, ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0, ai->ai_addr, -1);
    freeaddrinfo(ai);
    if (!s->tcp) {
        snprintf(err, errlen, "cannot listen on %s:%u (address in use or not available)", host, port);
        free(s);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->tcp, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : port;
    if (unix_path) {
        struct sockaddr_un sun = {0};
        sun.sun_family = AF_UNIX;
        if (strlen(unix_path) >= sizeof sun.sun_path) {
            snprintf(err, errlen, "--unix: path too long");
            http_stop(s);
            return NULL;
        }
        strcpy(sun.sun_path, unix_path);
        unlink(unix_path);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || bind(fd, (struct sockaddr *)&sun, sizeof sun) != 0 || listen(fd, 64) != 0) {
            snprintf(err, errlen, "--unix: cannot listen on %s: %s", unix_path, strerror(errno));
            if (fd >= 0)
                close(fd);
            http_stop(s);
            return NULL;
        }
        s->unix_d = start_daemon(s, 0, NULL, fd);
        if (!s->unix_d) {
            close(fd);
            snprintf(err, errlen, "--unix: cannot start the daemon on %s", unix_path);
            http_stop(s);
            return NULL;
        }
    }
    return s;
}

unsigned http_port(const http_server *s)
{
    return s->port;
}

void http_stop(http_server *s)
{
    if (!s)
        return;
    if (s->unix_d)
        MHD_stop_daemon(s->unix_d);
    if (s->tcp)
        MHD_stop_daemon(s->tcp);
    free(s);
}
